"""Asynchronous checkpoints as an event model (book §10.4.3, figures 10-32 to 10-34,
footnote 19): specs/cases/checkpoint-async.plan, plus the two engine features it uses
(finish-time quantities of single activities, activities spliced after another plugin's).

Hand computations from the book's inputs: 112 GB snapshots requested at 20 s and 40 s, 0.5 s
copies, uploads of 112/7 = 16 s or 112/20 = 5.6 s, commits right after the upload.
"""
from __future__ import annotations

from dsl.syntax.format import query_text
import pytest
import sympy as sp

import dsl
from conftest import CASES, qval, run_cli
from dsl.results.solver import solve_query
from dsl.engine.timeline import Timeline

FILE = CASES / "checkpoint-async.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(FILE)


@pytest.mark.parametrize("plan,c1,c2,recovered,rework", [
    ("good", 36.5, 56.5, 20, 30),       # 7 GB/s: the second snapshot is still uploading at 50 s
    ("better", 26.1, 46.1, 40, 10),     # 20 GB/s: recover the state at 40 s
])
def test_commits_and_rework(ws, plan, c1, c2, recovered, rework):
    assert abs(qval(ws, f"{plan}.commit_time_1", "s") - c1) <= 0.05
    assert abs(qval(ws, f"{plan}.commit_time_2", "s") - c2) <= 0.05
    assert qval(ws, f"{plan}.recovery_point", "s") == pytest.approx(recovered, abs=1e-12)
    assert qval(ws, f"{plan}.rework", "s") == pytest.approx(rework, abs=1e-12)
    assert qval(ws, f"{plan}.training_pause", "s") == pytest.approx(1.0, abs=1e-12)   # 2 × 0.5 s


def test_commit_times_are_exact_and_symbolic(ws):
    # 20 + 0.5 + 112/7 = 36.5 exactly; the faster tier 40 + 0.5 + 5.6 = 46.1 exactly
    assert ws.base_value(ws.lookup("good.commit_time_1")) == sp.Rational(73, 2)
    assert ws.base_value(ws.lookup("better.commit_time_2")) == sp.Rational(461, 10)
    e = ws.full_expr(ws.lookup("good.commit_time_2"), frozenset({"good.async_checkpoint.upload_bw"}))
    assert any(s.name == "good.async_checkpoint.upload_bw" for s in e.free_symbols)


def test_critical_path_through_uploads(ws):
    sc = ws.timelines[("good", "checkpoint")].schedule
    assert sc.path[-2:] == ["copy_2", "upload_2"] or sc.path[-1] == "commit_2"


def test_write_demand_and_queue(ws):
    # 112 GB every 10 s -> 11.2 GB/s > 7 GB/s: unstable; every 20 s -> 5.6 GB/s: stable
    assert abs(qval(ws, "every10.write_demand", "GB/s") - 11.2) <= 0.05
    assert abs(qval(ws, "every20.write_demand", "GB/s") - 5.6) <= 0.05
    assert not ws.requirement("every10", "write_queue_stable")["ok"]
    assert ws.requirement("every20", "write_queue_stable")["ok"]
    # every 10 s: uploads queue back to back, commit_k = 10.5 + 16k; the 6th snapshot waits
    # 10.5 + 96 − (60 + 0.5 + 16) = 30 s for the five before it; every 20 s nobody waits
    assert qval(ws, "every10.commit_time_2", "s") == pytest.approx(42.5, abs=1e-9)
    assert qval(ws, "every10.queue_delay", "s") == pytest.approx(30, abs=1e-9)
    assert qval(ws, "every20.queue_delay", "s") == pytest.approx(0, abs=1e-9)


def test_queue_stability_bound_is_a_solve(ws):
    q = next(q for q in ws.queries if "write_demand" in query_text(q))
    s = solve_query(ws, q)
    assert abs(s.value - 16) <= 0.5                    # book: one snapshot takes 16 s at 7 GB/s
    assert s.value == pytest.approx(112e9 / 7e9, rel=1e-12)


def test_slowest_upload_recovering_the_second_snapshot(ws):
    # commit_2 = 40 + 0.5 + 112 GB / bw = 50 s  ->  bw = 112/9.5 GB/s
    q = next(q for q in ws.queries if "commit_time_2" in query_text(q))
    assert solve_query(ws, q).value == pytest.approx(112e9 / 9.5, rel=1e-9)


def test_api_return_vs_metadata_commit(ws):
    # fn. 19: the save call returned after ≈7 ms, the metadata commit after ≈48 ms
    assert abs(qval(ws, "cpu_dcp.save_return", "ms") - 7) <= 0.5
    assert abs(qval(ws, "cpu_dcp.commit_latency", "ms") - 48) <= 0.5


def test_timeline_and_figure_cli(tmp_path):
    code, out, err = run_cli("timeline", FILE)
    assert code == 0, err
    assert "good · timeline 'checkpoint'" in out and "storage" in out
    code, out, err = run_cli("figure", FILE, "-o", tmp_path, "--name", "checkpoint-async")
    assert code == 0, err
    svg = (tmp_path / "good-checkpoint-async.svg").read_text()
    assert "failure at 50 s" in svg and "redo 30 s" in svg


# ---------------------------------------------------------------- engine features
def test_finish_exprs_are_exact_max_plus():
    a, b = sp.symbols("a b", positive=True)
    tl = Timeline("p", "t")
    tl.add("copy1", sp.Rational(1, 2), "gpu", release=20)
    tl.add("up1", a, "storage", after=["copy1"])
    tl.add("copy2", sp.Rational(1, 2), "gpu", release=40)
    tl.add("up2", b, "storage", after=["copy2"])
    fin = tl.finish_exprs()
    # up2 starts at max(40.5, 20.5 + a): the queue forms only when a > 20
    assert fin["up2"].xreplace({a: 16, b: 16}) == sp.Rational(113, 2)
    assert fin["up2"].xreplace({a: 30, b: 16}) == sp.Rational(133, 2)
    sc = tl.compute(lambda e: float(sp.sympify(e).xreplace({a: 30, b: 16})))
    assert tl.chain(sc, "up2") == ["copy1", "up1", "up2"]
    assert sp.simplify(tl.path_expr(sc, end="up2") - (20 + sp.Rational(1, 2) + a + b)) == 0


def test_splice_after_delays_the_dependents():
    tl = Timeline("p", "t")
    tl.add("compute", 10, "gpu")
    tl.add("tail", 1, "link", after=["compute"])          # added before the splice
    tl.add("delay", 3, "gpu", splice_after="compute")
    tl.add("later", 2, "link", after=[("compute", 0.5)])  # added after it, with a lag
    sc = tl.compute(lambda e: float(e))
    st = dict(zip(sc.ids, sc.start))
    assert st["delay"] == 10 and st["tail"] == 13 and st["later"] == 14   # 13 + 0.5 lag, after tail on link
    assert tl.full_expr() == 16


def test_splice_on_the_same_resource_takes_the_place_after_its_activity():
    """An extension of an activity on its own resource runs right after it, before the work
    that followed that activity on the resource — not after everything added to the
    resource since (which made a cycle: later work waits for the extension through the
    splice, the extension for the later work through the resource order)."""
    tl = Timeline("p", "t")
    tl.add("compute", 10, "gpu")
    tl.add("tp", 2, "gpu", after=["compute"])             # added before the splice, same resource
    tl.add("delay", 3, "gpu", splice_after="compute")
    sc = tl.compute(lambda e: float(e))
    st = dict(zip(sc.ids, sc.start))
    assert st["delay"] == 10 and st["tp"] == 13           # compute 0–10, delay 10–13, tp 13–15
    assert list(sc.path) == ["compute", "delay", "tp"]
    assert tl.full_expr() == 15

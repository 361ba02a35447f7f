"""Gradient reduction on a link shared with expert exchange, as an event model (book ch. 10
§10.3.3 figs. 10-25/10-26, §10.3.4, footnote 14).

Book: 3 ms reduction, 5 ms independent compute, link busy 4 ms first -> 2 ms exposed (0 when
the link is free).  72 MiB FP32 gradient, ring AllReduce among 4 peers sends 2·(3/4)·72 =
108 MiB; at 25 GB/s with 0.02 ms per launch ≈4.55 ms, misses a 2 ms gap; three 24 MiB buckets
≈1.53 ms each (≈4.59 ms in all), each fits one of three gaps; at 400 Gbit/s ≈2.28 ms.
"""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval, run_cli
from dsl.syntax.diagnostics import PlanError

CASE = CASES / "moe-shared-link.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_busy_link_exposes_two_ms(ws):
    assert qval(ws, "link_free.exposed_time", "ms") == pytest.approx(0, abs=1e-12)
    assert qval(ws, "link_busy.exposed_time", "ms") == pytest.approx(2, abs=1e-12)
    path = ws.critical_path("link_busy", "overlap")["path"]
    assert path == ["exchange0", "bucket0"]


def test_bucket_times(ws):
    sent = 2 * 3 / 4 * 72 * 2**20
    assert sent == 108 * 2**20
    assert qval(ws, "one_bucket.bucket_time", "ms") == pytest.approx(4.55, abs=0.005)
    assert qval(ws, "three_buckets.bucket_time", "ms") == pytest.approx(1.53, abs=0.005)
    assert qval(ws, "three_buckets.reduction_link_time", "ms") == pytest.approx(4.59, abs=0.005)
    assert qval(ws, "one_bucket_400g.bucket_time", "ms") == pytest.approx(2.28, abs=0.005)


def test_buckets_fit_the_gaps(ws):
    # the whole buffer fits no 2 ms gap and follows compute; three buckets each fit a gap
    assert qval(ws, "one_bucket.exposed_time", "ms") == pytest.approx(qval(ws, "one_bucket.bucket_time", "ms"))
    assert qval(ws, "three_buckets.exposed_time", "ms") == pytest.approx(0, abs=1e-12)
    assert qval(ws, "one_bucket_400g.exposed_time", "ms") > 2
    sched = ws.timelines[("three_buckets", "overlap")].schedule
    idx = sched.index()
    gap_ends = [2e-3, 7e-3, 12e-3]
    for j in range(3):
        assert sched.finish[idx[f"bucket{j}"]] <= gap_ends[j] + 1e-12


def test_bucket_count_search(ws):
    assert qval(ws, "one_bucket.best_buckets") == 3
    assert qval(ws, "one_bucket.best_exposed_time", "ms") == pytest.approx(0, abs=1e-12)
    # at 400 Gbit/s two 54 MiB buckets (≈1.15 ms each) already fit
    assert qval(ws, "one_bucket_400g.best_buckets") == 2


def test_cli_table_and_timeline():
    code, out, err = run_cli("eval", CASE, "--plan", "one_bucket")
    assert code == 0, err
    assert "least exposed time with 3 buckets" in out
    code, out, err = run_cli("timeline", CASE)
    assert code == 0 and "exchange2 → bucket0" in out


def _plan(tmp_path, body):
    (tmp_path / "t.plan").write_text(f'import "@catalog/hardware.plan"\nplan p {{\n  use shared_link {{ {body} }}\n}}\n')
    return tmp_path / "t.plan"


def test_lists_of_different_length(tmp_path):
    p = _plan(tmp_path, "gaps = [1 ms, 1 ms]; busy = [1 ms]; reduction = 1 ms")
    with pytest.raises(PlanError) as ei:
        dsl.load(p)
    assert "1 busy periods for 2 gaps" in ei.value.diagnostics[0].summary


def test_needs_a_reduction_or_gradient_and_link(tmp_path):
    code, _, err = run_cli("eval", _plan(tmp_path, "gaps = [1 ms]; busy = [1 ms]"))
    assert code != 0 and "needs `reduction = …`" in err


def test_direct_reduction_cannot_be_bucketed(tmp_path):
    p = _plan(tmp_path, "gaps = [1 ms]; busy = [1 ms]; reduction = 1 ms; buckets = 2")
    with pytest.raises(PlanError) as ei:
        dsl.load(p)
    assert "cannot be split" in ei.value.diagnostics[0].summary

"""Synchronous vs asynchronous RL loops (book ch. 10 §10.5.3, Figs. 10-42/10-43, exercise
10-7): ``specs/cases/rl-loop.plan``.  Book: periods 60 s and max(40, 16) + 4 = 44 s;
q* = 44/60 = 11/15 ≈ 73.3 %; q = 0.8 → ≈ +9 %, q = 0.7 → ≈ −5 %."""
from __future__ import annotations

import pytest

import dsl
import dsl.syntax.parser
from conftest import CASES, qval
from dsl.results.solver import solve_query

CASE = CASES / "rl-loop.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_periods_come_from_the_schedule(ws):
    assert qval(ws, "keep80.sync_period", "s") == 60
    assert qval(ws, "keep80.async_period", "s") == 44
    # the async timeline over 3 batches: a 40 s warm-up generation, then 3 periods of 44 s
    tl = ws.timelines[("keep80", "rl_async")]
    assert tl.schedule.makespan == pytest.approx(40 + 3 * 44)
    sc = tl.schedule
    i = sc.index()
    # generation of batch 1 overlaps training on batch 0 (both start when batch 0 is generated)
    assert sc.start[i["gen1"]] == sc.start[i["train0"]] == 40
    # the sync waits for both sides and blocks both
    assert sc.start[i["sync0"]] == 80 and sc.start[i["train1"]] == sc.start[i["gen2"]] == 84
    assert ws.timelines[("keep80", "rl_sync")].schedule.makespan == 3 * 60


def test_period_when_training_is_longer(write_plan):
    # max(gen, train) + sync also when training dominates: max(10, 16) + 4 = 20 s
    ws = dsl.load(write_plan("plan p { use rl_loop { gen_time = 10 s; train_time = 16 s; sync_time = 4 s } }"))
    assert qval(ws, "p.async_period", "s") == 20 and qval(ws, "p.sync_period", "s") == 30


@pytest.mark.parametrize("plan,gain", [("keep80", 0.09), ("keep70", -0.05)])
def test_async_gain(ws, plan, gain):
    assert qval(ws, f"{plan}.async_gain") == pytest.approx(gain, abs=0.005)
    # rates as the fraction of a batch per second: 1/60 synchronous, q/44 asynchronous
    q = {"keep80": 0.8, "keep70": 0.7}[plan]
    assert qval(ws, f"{plan}.sync_rate", "s^-1") == pytest.approx(1 / 60, rel=1e-12)
    assert qval(ws, f"{plan}.async_rate", "s^-1") == pytest.approx(q / 44, rel=1e-12)


def test_break_even_keep_fraction_is_a_solve(ws):
    s = solve_query(ws, ws.queries[0])
    assert s.method == "symbolic"
    assert s.value == pytest.approx(11 / 15, abs=1e-12)          # 44/60
    assert s.holds.endswith(">= boundary")
    assert "async_period" in s.symbolic


def test_sync_time_break_even(ws):
    # hand: 0.8 · (56 + s) >= 40 + s  <=>  s <= 24 s
    s = solve_query(ws, ws.queries[1])
    assert s.value == pytest.approx(24, rel=1e-9)


def test_batch_gives_trajectory_rates(write_plan):
    ws = dsl.load(write_plan("plan p { use rl_loop { gen_time = 40 s; train_time = 16 s; sync_time = 4 s; "
                             "keep = 80 %; batch = 64 sample } }"))
    assert qval(ws, "p.sync_rate", "sample/s") == pytest.approx(64 / 60, rel=1e-12)
    assert qval(ws, "p.async_rate", "sample/s") == pytest.approx(0.8 * 64 / 44, rel=1e-12)


def test_cli_timeline_and_figure(run_cli, tmp_path):
    code, out, _ = run_cli("timeline", CASE, "--plan", "keep80", "--in", "s")
    assert code == 0 and "rl_async" in out and "makespan 172 s" in out
    code, out, err = run_cli("figure", CASE, "--plan", "keep80", "--name", "rl-loops", "-o", tmp_path)
    assert code == 0, err
    svg = (tmp_path / "keep80-rl-loops.svg").read_text()
    assert "period 44 s" in svg and "period 60 s" in svg


def test_many_batches_use_the_critical_path(write_plan):
    # beyond 3 batches the period is the nominal critical path's length (the exact max-plus
    # tree doubles with every batch); the steady state is the same: 60 s and 44 s
    ws = dsl.load(write_plan("plan p { use rl_loop { gen_time = 40 s; train_time = 16 s; sync_time = 4 s; "
                             "keep = 80 %; iterations = 10 } }"))
    assert ws.timelines[("p", "rl_async")].symbolic == "path"
    assert qval(ws, "p.async_period", "s") == 44 and qval(ws, "p.sync_period", "s") == 60
    assert ws.timelines[("p", "rl_async")].schedule.makespan == pytest.approx(40 + 10 * 44)
    s = solve_query(ws, dsl.syntax.parser.parse_query("p.rl_loop.keep for p.async_rate >= p.sync_rate"))
    assert s.value == pytest.approx(11 / 15, abs=1e-12)

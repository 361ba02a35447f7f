"""Workload classes over windows and the fluid queue of decode work (book ch. 3 §3.1.3,
example 3-1, fig. 3-7, exercise 3-2)."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query

CASE = CASES / "serving-bursty-mix.plan"
BURST = CASES / "serving-burst-and-wait.plan"
KV = 2 * 36 * 8 * 128 * 2
W = 2 * (8_190_735_360 - 151936 * 4096)


def card_rate(context=2742):
    """Hand computation of the bound: 64 sequences per step, weights + KV read + one token written."""
    return 64 * 1792e9 / (W + 64 * (context + 1) * KV)


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


@pytest.mark.parametrize("plan,w,inp,dec", [
    ("uniform", 1, 18_432, 4_604), ("uniform", 2, 18_432, 4_604),
    ("bursty", 1, 29_900.8, 1_736.8), ("bursty", 2, 6_963.2, 7_471.2),
])
def test_window_demands(ws, plan, w, inp, dec):
    # book table of example 3-1 (first output token counted in the prefill)
    assert qval(ws, f"{plan}.window{w}_input_rate", "token/s") == pytest.approx(inp, abs=0.05)
    assert qval(ws, f"{plan}.window{w}_decode_rate", "token/s") == pytest.approx(dec, abs=0.05)


def test_same_totals(ws):
    for p in ("uniform", "bursty"):
        assert qval(ws, f"{p}.requests", "request") == 480          # 4 requests/s over two minutes
        assert qval(ws, f"{p}.input_rate", "token/s") == pytest.approx(18_432)
        assert qval(ws, f"{p}.decode_rate", "token/s") == pytest.approx(4_604)


def test_uniform_keeps_up(ws):
    assert qval(ws, "uniform.peak_backlog", "token") == 0
    assert ws.requirement("uniform", "keeps_up")["ok"] is True
    assert qval(ws, "bursty.window1_backlog", "token") == 0   # minute one has spare capacity


def test_backlog_with_book_capacity(ws):
    # fig. 3-7 with the book's 5,591.33 steps/s: (7,471.2 − 5,591.33)·60 ≈ 112,792, drained ≈ 20.17 s
    assert qval(ws, "printed_rate.peak_backlog", "token") == pytest.approx(112_792, abs=0.5)
    assert qval(ws, "printed_rate.drain_time", "s") == pytest.approx(20.17, abs=0.005)
    assert ws.requirement("printed_rate", "keeps_up")["ok"] is False


def test_backlog_with_computed_bound(ws):
    mu = 2 * card_rate()
    assert qval(ws, "bursty.window2_backlog", "token") == pytest.approx((7471.2 - mu) * 60, rel=1e-12)
    assert qval(ws, "bursty.drain_time", "s") == pytest.approx(20.17, abs=0.005)
    assert qval(ws, "bursty.busy_until", "s") == pytest.approx(120 + (7471.2 - mu) * 60 / mu, rel=1e-12)


def test_closed_forms_agree_with_recursion(ws):
    # (λ_w − μ)τ and (λ_w − μ)τ/μ from an empty queue equal the recursion's minute two
    for p in ("bursty", "printed_rate"):
        assert qval(ws, f"{p}.burst_backlog") == pytest.approx(qval(ws, f"{p}.peak_backlog"), rel=1e-12)
        assert qval(ws, f"{p}.burst_drain_time") == pytest.approx(qval(ws, f"{p}.drain_time"), rel=1e-12)


def test_smallest_cards_is_a_solve(ws):
    sol = solve_query(ws, ws.queries[0])
    assert sol.value == pytest.approx(7471.2 / card_rate(), rel=1e-9)     # 2.67 cards
    assert "bursty.cards >= 3" in sol.note


def test_solve_cli(run_cli):
    code, out, err = run_cli("solve", CASE)
    assert code == 0, err
    assert "as a whole number: bursty.cards >= 3" in out


def test_exercise_3_2_burst():
    ws = dsl.load(BURST)
    mu2 = 2 * card_rate()
    q = (7471.2 - mu2) * 30
    assert qval(ws, "burst_two_cards.peak_backlog", "token") == pytest.approx(q, rel=1e-12)
    assert qval(ws, "burst_two_cards.drain_time", "s") == pytest.approx(q / mu2, rel=1e-12)
    # with ≈2,796 steps/s per card as the exercise says: 56,376 steps, 10.08 s
    assert qval(ws, "burst_two_cards.peak_backlog", "token") == pytest.approx((7471.2 - 5592) * 30, rel=1e-3)
    # three cards (≈8,387 steps/s) keep up with 7,471.2
    assert qval(ws, "burst_three_cards.peak_backlog", "token") == 0
    assert qval(ws, "burst_three_cards.drain_time", "s") == 0


def test_doubling_the_burst_doubles_backlog_and_drain(write_plan):
    p = write_plan(f'import "{BURST}"\n'
                   "plan long extends burst_two_cards { use fluid_queue { window = 60 s } }\n")
    ws = dsl.load(p)
    assert qval(ws, "long.peak_backlog") == pytest.approx(2 * qval(ws, "burst_two_cards.peak_backlog"))
    assert qval(ws, "long.drain_time") == pytest.approx(2 * qval(ws, "burst_two_cards.drain_time"))


def test_backlog_figure(run_cli, tmp_path):
    code, out, err = run_cli("figure", CASE, "-o", tmp_path, "--name", "backlog", "--plan", "bursty")
    assert code == 0, err
    svg = (tmp_path / "bursty-backlog.svg").read_text()
    assert "112,788 steps" in svg and "drained 20.17 s" in svg


def test_windows_table(run_cli):
    code, out, err = run_cli("eval", CASE, "--plan", "bursty")
    assert code == 0, err
    assert "Arrivals and decode backlog per window (bursty)" in out
    assert "29,901" in out and "7,471" in out

"""Stragglers (book §10.4.5, footnote 7, exercise 10-9): specs/cases/checkpoint-stragglers.plan.

E[max of N standard normals] is checked against the book's table and against an
independent computation here (scipy quadrature of the order-statistic density, and the
closed forms for N = 2 and 3).  Tolerances: half a unit of the book's last digit.
"""
from __future__ import annotations

from dsl.syntax.format import query_text
import math

import pytest
import sympy as sp

import dsl
from conftest import CASES, qval, run_cli
from dsl.results.solver import solve_query
from plugins.reliability.stragglers import expected_max_normal

FILE = CASES / "checkpoint-stragglers.plan"


def emax_scipy(n: int) -> float:
    """Independent: E[max] = ∫ (1 − Φ(x)^n) dx over x > 0 − ∫ Φ(x)^n dx over x < 0."""
    from scipy import integrate
    from scipy.stats import norm
    pos = integrate.quad(lambda x: 1 - norm.cdf(x) ** n, 0, math.inf, limit=200)[0]
    neg = integrate.quad(lambda x: norm.cdf(x) ** n, -math.inf, 0, limit=200)[0]
    return pos - neg


@pytest.fixture(scope="module")
def ws():
    return dsl.load(FILE)


@pytest.mark.parametrize("n,book", [(8, 1.42), (48, 2.23), (1024, 3.25)])
def test_expected_max_book(n, book):
    v = float(expected_max_normal(n).evalf())
    assert abs(v - book) <= 0.005
    assert abs(v - emax_scipy(n)) <= 1e-7


def test_expected_max_closed_forms():
    assert expected_max_normal(1) == 0
    assert expected_max_normal(2) == 1 / sp.sqrt(sp.pi)
    assert abs(float(expected_max_normal(3).evalf()) - 3 / (2 * math.sqrt(math.pi))) <= 1e-12
    n = sp.Symbol("n", positive=True)
    assert expected_max_normal(n).evalf().has(expected_max_normal)      # stays symbolic


@pytest.mark.parametrize("dps", [20, 30])
def test_memoised_nodes_give_the_plain_quadrature(dps):
    """_emax memoises φ and Φ per quadrature node and precision; its result is the plain
    mpmath.quad of x·n·npdf(x)·ncdf(x)^(n−1) bit for bit, at the plugin's 20 digits and above,
    for integer and real n, also after another precision filled the memo."""
    import mpmath

    from plugins.reliability.stragglers import _emax

    def plain(n):
        return mpmath.quad(lambda x: x * n * mpmath.npdf(x) * mpmath.ncdf(x) ** (n - 1),
                           [-mpmath.inf, -2, 0, 2, 4, 6, mpmath.inf])

    with mpmath.workdps(dps + 5):
        _emax(mpmath.mpf(8))            # nodes of another precision in the memo
    with mpmath.workdps(dps):
        for n in (3, 8, 47.5, 1024):
            assert _emax(mpmath.mpf(n)) == plain(mpmath.mpf(n))


# §10.4.5 table: expected step (s) at σ = 2 % and 5 % of μ = 52.2 s, 0.58 s of waits
TABLE = [("n8_2", 54.3), ("n48_2", 55.1), ("n1024_2", 56.2), ("n8_5", 56.5), ("n48_5", 58.6), ("n1024_5", 61.3)]


@pytest.mark.parametrize("plan,book", TABLE, ids=[t[0] for t in TABLE])
def test_expected_step_table(ws, plan, book):
    assert abs(qval(ws, f"{plan}.expected_step", "s") - book) <= 0.05


def test_sigma_values(ws):
    assert abs(qval(ws, "n48_2.straggler_sigma", "s") - 1.04) <= 0.005
    assert abs(qval(ws, "n48_5.straggler_sigma", "s") - 2.61) <= 0.005


@pytest.mark.parametrize("plan,z,extra", [("n8_2", 1.65, 1.72), ("n48_2", 0.78, 0.81), ("n1024_2", 0, 0)])
def test_wait_policy(ws, plan, z, extra):
    """A device at μ+3σ: the step waits σ·max(0, 3 − e_{N−1}) longer (book: 1.65σ = 1.72 s at
    N = 8, 0.78σ = 0.81 s at 48, nothing at 1,024)."""
    got = qval(ws, f"{plan}.wait_extra", "s")
    sigma = qval(ws, f"{plan}.straggler_sigma", "s")
    assert abs(got / sigma - z) <= 0.005
    assert abs(got - extra) <= 0.005


@pytest.mark.parametrize("plan,book", [("n48_2", 56.2), ("n8_2", 61.6)])
def test_redistribute_policy(ws, plan, book):
    assert abs(qval(ws, f"{plan}.redistribute_step", "s") - book) <= 0.05
    assert qval(ws, f"{plan}.redistribute_step", "s") > qval(ws, f"{plan}.expected_step", "s")


def test_evict_policy(ws):
    # τ/2 + r = 300 + 120 = 420 s ≈ 8 steps of 52.8 s
    assert qval(ws, "gpus48_evict.evict_cost", "s") == pytest.approx(420, abs=1e-9)
    assert abs(qval(ws, "gpus48_evict.evict_steps") - 8) <= 0.5


def test_evict_break_even_is_a_solve(ws):
    """Slow steps after which evicting (420 s) beats waiting σ·(3 − e_47) per step; σ = 2 %
    of the plan's compute time, e_47 by the independent quadrature."""
    q = next(q for q in ws.queries if "slow_steps" in query_text(q))
    s = solve_query(ws, q)
    sigma = 0.02 * qval(ws, "gpus48_evict.compute_time", "s")
    assert s.value == pytest.approx(420 / (sigma * (3 - emax_scipy(47))), rel=1e-6)
    assert 500 < s.value < 540


def test_exercise_10_9_what_if(ws):
    """σ = 5 % on the 48-GPU design case: step ≈58.6 s (book), the job still meets 30 days.
    Hand: 5 day + 31,790 steps × (52.8 s + e_48 · 5 % · 52.22 s) × (1 + 1.08 %)."""
    assert abs(qval(ws, "gpus48_jitter5.step_time", "s") - 58.6) <= 0.05
    assert ws.requirement("gpus48_jitter5", "meets_deadline")["ok"]
    mu = qval(ws, "gpus48_jitter5.compute_time", "s")
    base = qval(ws, "gpus48.step_time", "s")
    hand = 5 + 31_790 * (base + emax_scipy(48) * 0.05 * mu) * (1 + qval(ws, "gpus48.overhead")) / 86400
    assert qval(ws, "gpus48_jitter5.finish_time", "day") == pytest.approx(hand, rel=1e-9)
    # +5.8 s per step absorbs ≈40 % of the ≈14.4 s margin to the 67.2 s step budget
    extra = qval(ws, "gpus48_jitter5.straggler_delay", "s")
    assert abs(extra - 5.8) <= 0.05
    path = ws.critical_path("gpus48_jitter5", "step")
    assert "straggler_delay" in path["path"]


def test_exercise_10_9_through_cli():
    code, out, err = run_cli("eval", FILE)
    assert code == 0, err
    assert "ok   gpus48_jitter5.meets_deadline" in out


def test_needs_a_mean(write_plan):
    p = write_plan("plan p {\n  gpus = 8\n  use stragglers { jitter = 2 % }\n}\n")
    code, out, err = run_cli("eval", p)
    assert code == 1
    assert "error[missing-quantity]" in err and "mean compute time" in err and "Traceback" not in err

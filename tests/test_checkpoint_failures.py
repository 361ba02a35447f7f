"""Failure model and checkpoint period (book §10.4.4-10.4.5, footnote 20, exercises 10-5,
10-6): specs/cases/checkpoint-failures.plan.

Expected numbers are the book's (tolerance: half a unit of its last printed digit) or hand
computations written out here from the book's inputs: 114,670,295,040 B written at 7 GB/s,
a 1,024-GPU job interrupted every 7.9 h, restart 120 s.
"""
from __future__ import annotations

from dsl.syntax.format import query_text
import math

import pytest
import sympy as sp

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query

FILE = CASES / "checkpoint-failures.plan"
SIZE = 114_670_295_040          # B, §10.4.2 / fn. 20
C = SIZE / 7e9                  # s
LAM_1024 = 1 / (7.9 * 3600)     # 1/s
DAY = 86400.0


@pytest.fixture(scope="module")
def ws():
    return dsl.load(FILE)


def _query(ws, text):
    qs = [q for q in ws.queries if query_text(q) == text]
    assert qs, f"no query '{text}' in {FILE.name}"
    return solve_query(ws, qs[0])


def test_save_time_and_size(ws):
    assert ws.base_value(ws.lookup("g1024.checkpoint_size")) == SIZE
    assert abs(qval(ws, "g1024.save_time", "s") - 16.381) <= 0.0005        # fn. 20: ≈16.381 s


def test_device_mtbf_and_job_mtbf(ws):
    # 7.9 h for 1,024 GPUs -> ≈337 days per device (§10.4.4)
    assert abs(qval(ws, "g1024.checkpoint.device_mtbf", "day") - 337) <= 0.5
    assert abs(qval(ws, "g1024.job_mtbf", "h") - 7.9) <= 0.05
    # the same per-device rate on 8 GPUs: 1,024 × 7.9 h / 8 = 1,011.2 h = 42.13 days (the Meta
    # statistics observed 47.7 days for 8-GPU jobs: failures are not exactly proportional)
    assert abs(qval(ws, "g8.job_mtbf", "day") - 1024 * 7.9 / 8 / 24) <= 1e-9


# §10.4.4 table: interval, save, rework, restart, total (%)
TABLE = [(300, 5.5, 0.5, 0.4, 6.4), (900, 1.8, 1.6, 0.4, 3.8), (1800, 0.9, 3.2, 0.4, 4.5)]


@pytest.mark.parametrize("tau,save,rework,restart,total", TABLE, ids=[f"tau={t[0]}" for t in TABLE])
def test_interval_table_1024(ws, tau, save, rework, restart, total):
    p = f"g1024_{tau}"
    assert abs(qval(ws, f"{p}.save_overhead", "%") - save) <= 0.05
    assert abs(qval(ws, f"{p}.rework_overhead", "%") - rework) <= 0.05
    assert abs(qval(ws, f"{p}.restart_overhead", "%") - restart) <= 0.05
    assert abs(qval(ws, f"{p}.overhead", "%") - total) <= 0.05


def test_optimal_interval_is_a_solve(ws):
    s = _query(ws, "g1024.checkpoint.interval for g1024.overhead_slope == 0 s^-1")
    assert s.method == "symbolic"
    assert abs(s.value - 965) <= 0.5                      # §10.4.4: ≈965 s
    assert abs(s.value - 965.29) <= 0.005                 # fn. 20: ≈965.29 s
    assert abs(qval(ws, "g1024.optimal_interval", "s") - s.value) <= 1e-6


def test_poisson_retry_optimum(ws):
    """fn. 20: ≈954.40 s.  Cross-checked against a direct numeric minimisation of the expected
    wall time per useful second, (1/λ + r)(e^{λ(τ+c)} − 1)/τ, written here independently."""
    got = qval(ws, "g1024.retry_optimal_interval", "s")
    assert abs(got - 954.40) <= 0.005
    from scipy.optimize import minimize_scalar
    f = lambda t: (1 / LAM_1024 + 120) * math.expm1(LAM_1024 * (t + C)) / t  # noqa: E731
    m = minimize_scalar(f, bounds=(100, 5000), method="bounded", options={"xatol": 1e-8})
    assert abs(got - m.x) <= 1e-3
    # the retry model's overhead at τ = 1800 s is slightly above the first-order one
    assert qval(ws, "g1024.retry_overhead", "%") > qval(ws, "g1024.overhead", "%")


def test_sqrt2_rules_are_symbolic(ws):
    """Doubling devices or save speed shrinks τ* by √2 — exactly, from τ* = sqrt(2c/λ)."""
    base = ws.base_value(ws.lookup("g1024.optimal_interval"))
    for p in ("g2048", "g1024_fast"):
        ratio = sp.nsimplify(sp.simplify(base / ws.base_value(ws.lookup(f"{p}.optimal_interval"))))
        assert ratio == sp.sqrt(2), (p, ratio)


def test_design_case_32_48_gpus():
    """§10.4.4: at 1,800 s, 32 GPUs -> ≈1.02 %, 48 GPUs -> ≈1.08 % (the design case file)."""
    case = dsl.load(CASES / "cpt-qwen3-8b-4090.plan")
    assert abs(qval(case, "gpus32.overhead", "%") - 1.02) <= 0.005
    assert abs(qval(case, "gpus48.overhead", "%") - 1.08) <= 0.005


def test_average_checkpoint_stream(ws):
    # §10.4.1: ≈64 MB/s at a 1,800 s interval for ≈115 GB
    assert abs(qval(ws, "gpus48.checkpoint_stream", "MB/s") - 64) <= 0.5
    assert qval(ws, "gpus48.checkpoint_stream", "GB/s") < qval(ws, "gpus48.checkpoint.write_bw", "GB/s")


def test_write_queue_bound_is_a_solve(ws):
    """Exercise 10-5: shortest interval without a write queue at 7 GB/s = size / bandwidth."""
    s = _query(ws, "gpus48.checkpoint.interval for gpus48.checkpoint_stream == gpus48.checkpoint.write_bw")
    assert abs(s.value - C) <= 1e-9 * C
    assert abs(s.value - 16.4) <= 0.05


# ---------------------------------------------------------------- loss spikes (§10.4.5)
def test_spikes_optimal_interval(ws):
    a = _query(ws, "g48_600.checkpoint.interval for g48_600.overhead_slope == 0 s^-1")
    b = _query(ws, "g48_600_spikes.checkpoint.interval for g48_600_spikes.overhead_slope == 0 s^-1")
    assert abs(a.value - 4458) <= 0.5
    assert abs(b.value - 3150) <= 0.5


@pytest.mark.parametrize("plan,book", [("g48_600", 2.80), ("g48_600_spikes", 2.87), ("gpus48", 1.08),
                                       ("g48_spikes", 1.25)])
def test_spikes_overhead(ws, plan, book):
    assert abs(qval(ws, f"{plan}.overhead", "%") - book) <= 0.005


def test_spikes_finish_time(ws):
    """+≈0.03 days to the finish time at τ = 1800 s (§10.4.5)."""
    d = qval(ws, "g48_spikes.finish_time", "day") - qval(ws, "gpus48.finish_time", "day")
    assert abs(d - 0.03) <= 0.005


def test_spike_regime_in_symbolic_form(ws):
    """τ* = sqrt(2c/(λ_hw + λ_spike)): with λ_spike ≫ λ_hw the hardware rate drops out."""
    names = ("g48_600_spikes.save_time", "g48_600_spikes.failure_rate", "g48_600_spikes.spike_rate")
    e = ws.full_expr(ws.lookup("g48_600_spikes.optimal_interval"), frozenset(names))
    sym = {s.name: s for s in e.free_symbols}
    assert set(names) == set(sym), e
    c, hw, spike = (sp.Symbol(n.split(".")[1], positive=True) for n in names)
    e = e.xreplace({sym[names[0]]: c, sym[names[1]]: hw, sym[names[2]]: spike})
    assert sp.simplify(e - sp.sqrt(2 * c / (hw + spike))) == 0
    assert sp.limit(e / sp.sqrt(2 * c / spike), spike, sp.oo) == 1      # spikes dominate
    assert sp.limit(e / sp.sqrt(2 * c / hw), spike, 0) == 1             # hardware dominates


def test_outage_once_a_day(ws):
    """Exercise 10-6: a job-wide outage every day on top of the 1,024-GPU failures."""
    lam = LAM_1024 + 1 / DAY
    assert abs(qval(ws, "g1024_outage.interruption_rate", "s^-1") - lam) <= 1e-15
    assert abs(qval(ws, "g1024_outage.optimal_interval", "s") - math.sqrt(2 * C / lam)) <= 1e-6

"""Failures as events (`use checkpoint { failures = "sampled" }`, plugins/reliability/failure_events.py).

Numbers asserted here are hand computations from the Poisson retry process (the module
docstring) and from the Llama 3 report's figures the worked case cites (Llama Team 2024, 'The
Llama 3 Herd of Models', §3.3.4: 419 unexpected interruptions in a 54-day snapshot on 16,384
GPUs); Monte Carlo tolerances are a few standard errors at the sample counts used.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import REPO_ROOT, run_main

import dsl.api
from dsl.results.odds import sample_plan
from plugins.reliability.failure_events import attempt_moments, expected_overhead, sample_overhead

CASE = REPO_ROOT / "specs" / "cases" / "failures-405b.plan"
LAM = 419 / (16384 * 54 * 86400) * 16384          # the report's job interruption rate, 1/s
TAU, C, R = 1800.0, 5681.9e9 / 2e12, 600.0         # the case's interval, save (5.68 TB at 2 TB/s), restart


def rng(seed=0):
    return np.random.Generator(np.random.PCG64(seed))


def test_a_failed_attempt_is_a_cut_exponential():
    """E[X] and Var[X] of Exp(λ) cut at T, against numerical integration by hand (trapezoid)."""
    lam, T = 1 / 1000.0, 1500.0
    x = np.linspace(0, T, 200001)
    pdf = lam * np.exp(-lam * x) / (1 - math.exp(-lam * T))
    m1 = np.trapezoid(x * pdf, x)
    m2 = np.trapezoid(x * x * pdf, x)
    mu, var = attempt_moments(lam, T)
    assert float(mu) == pytest.approx(m1, rel=1e-9) and float(var) == pytest.approx(m2 - m1**2, rel=1e-8)


@pytest.mark.parametrize("W,tau,c,r,lam", [
    (30 * 86400, 1800, 16.4, 120, 48 / (1024 * 7.9 * 3600)),      # the design case's run, exact draws
    (54 * 86400, TAU, C, R, LAM),                                    # Llama 3 scale: the normal approximation
])
def test_the_sampled_mean_is_the_retry_model(W, tau, c, r, lam):
    """The mean realised overhead equals K[(1/λ + r)(e^{λ(τ+c)} − 1) − τ]/W, within 4 standard errors."""
    x = sample_overhead(rng(1), 40000, W, tau, c, r, lam)
    K = math.ceil(W / tau)
    hand = K * ((1 / lam + r) * math.expm1(lam * (tau + c)) - tau) / W
    assert expected_overhead(W, tau, c, r, lam) == pytest.approx(hand, rel=1e-12)
    assert abs(x.mean() - hand) < 4 * x.std() / math.sqrt(len(x))


def test_the_spread_is_the_negative_binomial_count_times_the_cost_of_a_failure():
    """Var[lost] = Var[M]·(E[X] + r)² + E[M]·Var[X], M ~ NB(K, q): Var[M] = K(1 − q)/q²
    (the law of total variance); the sampled standard deviation within 2 %."""
    W = 54 * 86400
    K = math.ceil(W / TAU)
    q = math.exp(-LAM * (TAU + C))
    mu, var = (float(v) for v in attempt_moments(LAM, TAU + C))
    EM, VM = K * (1 - q) / q, K * (1 - q) / q**2
    sd_hand = math.sqrt(VM * (mu + R) ** 2 + EM * var) / W
    x = sample_overhead(rng(2), 40000, W, TAU, C, R, LAM)
    assert x.std() == pytest.approx(sd_hand, rel=0.02)


def test_worked_case_expected_values():
    """failures-405b.plan: the rate is the report's (job MTBF 54 × 24 h / 419 = 3.0931 h); the
    first-order overhead c/τ + λ(τ/2 + r) = 13.63 % and the retry model's 14.58 % (its comments)."""
    ev = dsl.api.load(CASE)
    assert ev.value("llama3_405b.job_mtbf", "h") == pytest.approx(54 * 24 / 419, rel=1e-9)
    C = ev.value("llama3_405b.checkpoint_size", "B") / 2e12        # 14 B/param at 2 TB/s
    assert C == pytest.approx(2.84, abs=0.005)
    first = C / TAU + LAM * (TAU / 2 + R)
    assert ev.value("llama3_405b_expected.overhead", "%") == pytest.approx(100 * first, rel=1e-9)
    assert round(100 * first, 2) == 13.63
    W = ev.value("llama3_405b.train_time", "s")
    K = math.ceil(W / TAU)
    retry = K * ((1 / LAM + R) * math.expm1(LAM * (TAU + C)) - TAU) / W
    assert ev.value("llama3_405b.overhead", "%") == pytest.approx(100 * retry, rel=1e-9)
    assert round(100 * retry, 2) == 14.58


def test_worked_case_finish_time_spread():
    """The sampled finish time's p5/p95 lie ±1.645 standard deviations of the lost time around
    its expected value (the count is near-normal at ≈ 580 failures), within 0.02 day."""
    ev = dsl.api.load(CASE)
    o = sample_plan(ev, "llama3_405b", 100000, seed=1)
    W = ev.value("llama3_405b.train_time", "s")
    K = math.ceil(W / TAU)
    q = math.exp(-LAM * (TAU + C))
    mu, var = (float(v) for v in attempt_moments(LAM, TAU + C))
    sd = math.sqrt(K * (1 - q) / q**2 * (mu + R) ** 2 + K * (1 - q) / q * var) / 86400
    mean = ev.value("llama3_405b.finish_time", "day")
    p5, p95 = (o.quantile("llama3_405b.finish_time", q_) / 86400 for q_ in (0.05, 0.95))
    assert p5 == pytest.approx(mean - 1.645 * sd, abs=0.02) and p95 == pytest.approx(mean + 1.645 * sd, abs=0.02)


def test_sampled_output_is_deterministic():
    outs = [run_main("eval", str(CASE), "--samples", "20000", "--seed", "7", "--format", "json")[1] for _ in range(2)]
    assert outs[0] == outs[1]
    odds = json.loads(outs[0])["plans"]["llama3_405b"]["odds"]
    assert "llama3_405b.overhead" in odds["uncertain"]


def test_sampled_failures_need_a_training_step(tmp_path):
    f = tmp_path / "x.plan"
    f.write_text('import "@catalog/hardware.plan"\n'
                 "plan p {\n  gpus = 1024\n"
                 "  use checkpoint { interval = 1800 s; write_bw = 7 GB/s; size = 100 GB; device_mtbf = 1024 * 7.9 h\n"
                 '                   failures = "sampled" }\n}\n', encoding="utf-8")
    rc, out, err = run_main("eval", str(f))
    assert rc != 0 and "Traceback" not in err
    assert "x.plan:5:31" in err and "needs the run's length" in err and "hint:" in err

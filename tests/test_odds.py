"""Answers with odds (dsl.results.odds, `plan eval --samples`, `plan get --quantile/--probability`,
`plan solve --probability`): figures checked against hand computations from the CDF, with
tolerances of a few Monte Carlo standard errors at the stated sample count."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dsl.results.evaluation import evaluate_file
from dsl.results.odds import sample_plan, sobol
from dsl.syntax.diagnostics import PlanError

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "specs" / "cases" / "deadline-odds.plan"
N = 200_000


def phi(z: float) -> float:
    """Standard normal CDF, by hand: (1 + erf(z/√2)) / 2."""
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def tol(p: float, n: int = N) -> float:
    return 5 * math.sqrt(p * (1 - p) / n) + 1e-12


PLAN = """
plan p {
  rate = normal(100 GB/s, 10 GB/s)
  size = 3240 GB
  t = size / rate
  x = lognormal(10 h, 0.5)
  u = uniform(1 s, 3 s)
  tri = triangular(0 s, 1 s, 4 s)
  require fast: t <= 36 s
  require long: x >= 10 h
  require low: u <= 1.5 s
  require early: tri <= 1 s
}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    f = tmp_path_factory.mktemp("odds") / "p.plan"
    f.write_text(PLAN, encoding="utf-8")
    return f


def test_nominal_is_the_stated_central_value(small):
    ev = evaluate_file(small)
    # normal: the mean; lognormal: the median; uniform: the midpoint; triangular: the mode
    assert [ev.value(f"p.{k}") for k in ("rate", "x", "u", "tri")] == [100.0, 10.0, 2.0, 1.0]
    assert ev.requirement("p", "fast")["ok"] is True      # 3240 GB / 100 GB/s = 32.4 s <= 36 s


def test_probabilities_match_the_cdfs(small):
    ev = evaluate_file(small)
    o = sample_plan(ev, "p", N, seed=7, outputs=["p.t", "p.x"])
    # t <= 36 s  <=>  rate >= 3240/36 = 90 GB/s: P = 1 - Φ((90 - 100)/10) = Φ(1)
    want = {"fast": phi(1.0), "long": 0.5, "low": (1.5 - 1) / (3 - 1), "early": (1 - 0) ** 2 / ((4 - 0) * (1 - 0))}
    for name, p in want.items():
        assert abs(o.probability(name) - p) <= tol(p), (name, o.probability(name), p)
    # p95 of t = 3240 GB / (p5 of rate) = 3240 / (100 - 1.644854·10) s
    assert o.quantile("p.t", 0.95) == pytest.approx(3240 / (100 - 1.6448536 * 10), rel=3e-3)
    # p95 of a lognormal = median · exp(1.644854 σ)
    assert o.quantile("p.x", 0.95) / 3600 == pytest.approx(10 * math.exp(0.5 * 1.6448536), rel=5e-3)


def test_same_seed_same_numbers_other_seed_other(small):
    ev = evaluate_file(small)
    a = sample_plan(ev, "p", 1000, seed=3, outputs=["p.t"])
    b = sample_plan(ev, "p", 1000, seed=3, outputs=["p.t"])
    c = sample_plan(ev, "p", 1000, seed=4, outputs=["p.t"])
    assert (a.values["p.t"] == b.values["p.t"]).all() and not (a.values["p.t"] == c.values["p.t"]).all()


def test_samples_limit_counts_work(small):
    from dsl.syntax import limits as L
    ev = evaluate_file(small)
    with pytest.raises(PlanError) as e:
        sample_plan(ev, "p", L.current().samples + 1)
    assert e.value.diagnostics[0].code == "limit"


def test_design_case_odds_against_the_break_even():
    """P(gpus48 meets the deadline) = P(mfu >= break-even mfu) = 1 - Φ((m* - 40 %)/5 %), with m*
    the symbolic break-even of the nominal design case (31.34 %); the MTBF's spread moves the
    finish time by well under 0.1 % (its Sobol index is ≈ 0)."""
    from dsl.syntax.parser import parse_query
    from dsl.results.solver import solve_query
    ev = evaluate_file(CASE)
    m = float(solve_query(ev, parse_query("gpus48.mfu for gpus48.finish_time == cpt.deadline")).value)
    m32 = float(solve_query(ev, parse_query("gpus32.mfu for gpus32.finish_time == cpt.deadline")).value)
    for plan, mstar in (("gpus48", m), ("gpus32", m32)):
        o = sample_plan(ev, plan, N, seed=1, outputs=[])
        p = 1 - phi((mstar - 0.40) / 0.05)
        assert abs(o.probability("meets_deadline") - p) <= tol(p) + 2e-3, (plan, o.probability("meets_deadline"), p)
    s = sobol(ev, "gpus48", "gpus48.finish_time", n=1024, seed=0)
    assert s["gpus48.mfu"]["first"] > 0.95 and s["gpus48.checkpoint.device_mtbf"]["total"] < 0.01


def test_structural_input_cannot_be_uncertain(tmp_path):
    f = tmp_path / "case.plan"
    text = CASE.read_text().replace('import "../catalog/', f'import "{ROOT}/specs/catalog/')
    f.write_text(text.replace("gpus = 48; gpus_per_host = 8", "gpus = 48; gpus_per_host = uniform(6, 10)"))
    ev = evaluate_file(f)
    with pytest.raises(PlanError) as e:
        sample_plan(ev, "gpus48", 100)
    d = e.value.diagnostics[0]
    assert d.code == "distribution" and "shapes the plan" in d.summary and d.span.line == text.splitlines().index(
        next(l for l in text.splitlines() if "gpus_per_host = 8" in l)) + 1


def test_empirical_sample(tmp_path):
    (tmp_path / "runs.csv").write_text("run,mfu\na,30\nb,40\nc,50\nd,45\n", encoding="utf-8")
    f = tmp_path / "p.plan"
    f.write_text('plan p {\n  m = empirical("runs.csv", "mfu", 1 %)\n  require ok: m >= 42 %\n}\n')
    ev = evaluate_file(f)
    assert ev.value("p.m") == 40.0        # the lower middle of 30, 40, 45, 50
    o = sample_plan(ev, "p", N, seed=2, outputs=[])
    assert abs(o.probability("ok") - 0.5) <= tol(0.5)    # 45 and 50 of four equally likely values


def test_cli_eval_get_solve():
    from conftest import run_cli
    a = run_cli("eval", CASE, "--samples", "20000", "--seed", "5", "--format", "json")
    b = run_cli("eval", CASE, "--samples", "20000", "--seed", "5", "--format", "json")
    assert a[0] == 0 and a[1] == b[1]            # byte-identical
    j = json.loads(a[1])["plans"]
    assert set(j["gpus48"]["odds"]["quantiles"]["finish_time"]) == {"unit", "p5", "p50", "p95"}
    assert j["gpus48"]["odds"]["requirements"]["meets_deadline"]["probability"] > 0.9 > \
        j["gpus32"]["odds"]["requirements"]["meets_deadline"]["probability"]
    plain = run_cli("eval", CASE)[1]
    assert "odds of" not in plain
    code, out, _ = run_cli("get", CASE, "gpus48.meets_deadline", "--probability", "--samples", "20000")
    assert code == 0 and 0.9 < float(out) < 1
    code, out, _ = run_cli("get", CASE, "gpus48.finish_time", "--quantile", "0.5", "--samples", "20000")
    assert code == 0 and float(out) == pytest.approx(24.64, rel=0.01)
    code, out, err = run_cli("solve", CASE, "--probability", "gpus48.gpus for meets_deadline >= 90 %",
                             "--samples", "20000", "--format", "json")
    r = json.loads(out)
    assert code == 0 and r["answer"] == 48, (out, err)
    below = [t for t in r["tried"] if t["value"] < 48 and "probability" in t]
    assert below and all(t["probability"] < 0.9 for t in below)


def test_a_structural_input_with_a_choice_is_sampled_by_re_evaluating_the_plan(tmp_path):
    """`gpus = choice(32, 48)` on the design case (a count the layout divides: structural): each
    sample's plan is rebuilt at its GPU count.  By hand, with the break-even MFUs `plan solve`
    gives on the design case (31.34 % at 48 GPUs, 46.99 % at 32) and MFU ~ normal(40 %, 5 %):
    P(meets) = f·Φ(1.732) + (1 − f)·Φ(−1.398) = f·0.9584 + (1 − f)·0.0810, f the share of samples
    that drew 48; 4 standard errors at 20,000 samples."""
    import zlib

    import numpy as np

    import dsl.api
    f = tmp_path / "mix.plan"
    f.write_text(f'import "{ROOT / "specs" / "cases" / "deadline-odds.plan"}"\nplan mix extends gpus48 {{ gpus = choice(32, 48) }}\n',
                 encoding="utf-8")
    ev = dsl.api.load(f)
    assert ev.value("mix.gpus", "") == 32                      # the nominal: the lower middle value
    o = sample_plan(ev, "mix", 20000, seed=1)
    ss = np.random.SeedSequence([1, zlib.crc32(b"mix.gpus")])
    share = float((np.random.Generator(np.random.PCG64(ss)).integers(0, 2, 20000) == 1).mean())
    phi = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))     # noqa: E731
    hand = share * phi((40 - 31.34) / 5) + (1 - share) * phi((40 - 46.99) / 5)
    p = o.probability("meets_deadline")
    assert abs(p - hand) <= 4 * math.sqrt(p * (1 - p) / 20000)
    assert "mix.gpus" in o.uncertain


def test_get_quantile_honours_rate_like_plain_get(tmp_path):
    """`plan get --quantile` shows the quantile as plain `plan get` shows a value: in `--in`,
    across currencies with `--rate`.  By hand: hours ~ uniform(90 h, 110 h) at 2 USD/h, so cost ~
    uniform(180, 220) USD; its 0.9 quantile is 180 + 0.9·40 = 216 USD, at 0.5 EUR/USD 108 EUR
    (the Monte Carlo standard error at 20,000 samples: 40·√(0.9·0.1/20000)·0.5 ≈ 0.04 EUR);
    the nominal (the midpoint) is 200 USD = 100 EUR."""
    from conftest import run_cli
    f = tmp_path / "cost.plan"
    f.write_text("plan p {\n  hours = uniform(90 h, 110 h)\n  price = 2 USD/h\n  cost = hours * price\n}\n",
                 encoding="utf-8")
    code, out, err = run_cli("get", f, "p.cost", "--in", "EUR", "--rate", "0.5 EUR/USD")
    assert code == 0 and float(out) == pytest.approx(100), err
    q = ("p.cost", "--quantile", "0.9", "--samples", "20000", "--seed", "3")
    code, usd, err = run_cli("get", f, *q)
    assert code == 0 and float(usd) == pytest.approx(216, abs=0.4), err
    code, eur, err = run_cli("get", f, *q, "--in", "EUR", "--rate", "0.5 EUR/USD")
    assert code == 0 and float(eur) == pytest.approx(108, abs=0.2), err
    assert float(eur) == pytest.approx(0.5 * float(usd), rel=1e-12)      # the same samples, times the rate
    code, inverse, err = run_cli("get", f, *q, "--in", "EUR", "--rate", "2 USD/EUR")    # divided by it
    assert code == 0 and float(inverse) == pytest.approx(float(eur), rel=1e-12), err
    code, _, err = run_cli("get", f, *q, "--in", "EUR")      # no rate: a usage error, with the hint
    assert code == 2 and "--rate" in err


def test_sobol_of_a_quantity_with_one_uncertain_input_is_a_diagnostic(tmp_path):
    """Sobol indices share a spread among two or more inputs: with one there is nothing to share
    (scipy's sobol_indices fails on it), so `--sobol` says so instead of an internal error."""
    from conftest import run_cli
    f = tmp_path / "one.plan"
    f.write_text("plan p {\n  hours = uniform(90 h, 110 h)\n  price = 2 USD/h\n  cost = hours * price\n}\n",
                 encoding="utf-8")
    with pytest.raises(PlanError) as e:
        sobol(evaluate_file(f), "p", "p.cost", n=256)
    assert "p.hours" in e.value.diagnostics[0].summary
    code, _, err = run_cli("eval", f, "--samples", "1000", "--sobol", "cost")
    assert code == 1 and "error[usage]" in err and "internal error" not in err

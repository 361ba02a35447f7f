"""Scaling and deadline analysis of the design case (book ch. 10 §10.1.1, §10.1.3, §10.4.1,
§10.6.2–10.6.4; exercises 10-2, 10-5, 10-9, 10-10).  Numbers are the book's, asserted to its
last printed digit, or computed independently here."""
from __future__ import annotations

from dsl.syntax.format import query_text
import json

import pytest

import dsl
from conftest import CASES, qval, run_cli
from dsl.syntax.diagnostics import PlanError
from dsl.results.solver import solve_query
from plugins.workloads.scaling import amdahl_rows

CASE = CASES / "scaling-deadline.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def query(ws, text):
    q = next(q for q in ws.queries if query_text(q) == text)
    return solve_query(ws, q)


# ---------------------------------------------------------------- critical batch (§10.1.1)
def test_min_steps_and_tokens(ws):
    assert qval(ws, "gpus48_analysis.min_steps") == pytest.approx(19434, abs=0.5)
    assert qval(ws, "gpus48_analysis.min_tokens", "token") == pytest.approx(38.9e9, abs=0.05e9)
    assert qval(ws, "gpus48_analysis.weak_scaling_limit") == pytest.approx(1.64, abs=0.005)
    assert qval(ws, "gpus48_noise20m.weak_scaling_limit") == pytest.approx(7.36, abs=0.005)


def test_law_holds_at_the_reference_run(ws):
    """(S/S_min − 1)(E/E_min − 1) = 1 with E = S·b: the reference run is on the curve."""
    S = qval(ws, "gpus48_analysis.steps")
    b = qval(ws, "gpus48_analysis.tokens_per_step", "token")
    smin = qval(ws, "gpus48_analysis.min_steps")
    emin = qval(ws, "gpus48_analysis.min_tokens", "token")
    assert (S / smin - 1) * (S * b / emin - 1) == pytest.approx(1, rel=1e-12)


@pytest.mark.parametrize("gpus,weak,strong", [
    (96, 15.7, 9.8), (192, 13.8, 5.0), (384, 12.8, 2.6), (1536, 12.1, 0.8)])
def test_weak_vs_strong_scaling(ws, gpus, weak, strong):
    assert qval(ws, f"gpus48_analysis.weak_time_{gpus}", "day") == pytest.approx(weak, abs=0.05)
    assert qval(ws, f"gpus48_analysis.strong_time_{gpus}", "day") == pytest.approx(strong, abs=0.05)
    assert qval(ws, "gpus48_analysis.train_time", "day") == pytest.approx(19.4, abs=0.05)


def test_noise_scale_for_a_given_limit_is_solved(ws):
    r = query(ws, "gpus48_analysis.batch_noise.noise_scale for gpus48_analysis.weak_scaling_limit == 2")
    assert float(r.value) == pytest.approx(384 * 8192)        # B_noise = b gives S/S_min = 2


# ---------------------------------------------------------------- GPU lower bounds (§10.1.3)
def test_h100_token_rates(ws):
    assert qval(ws, "h100_bound.token_rate_per_gpu", "token/s") == pytest.approx(7500, abs=50)
    five = 5 * qval(ws, "h100_bound.token_rate_per_gpu", "token/s")
    assert five == pytest.approx(37600, abs=50)
    need = qval(ws, "h100_bound.required_token_rate", "token/s")
    assert need == pytest.approx(38600, abs=50) and five < need


def test_h100_count_is_a_solve(ws):
    r = query(ws, "h100_bound.gpus for h100_bound.compute_days <= 30 day")
    assert 5 < float(r.value) < 6
    code, out, _ = run_cli("solve", CASE, "--query", "h100_bound.gpus for h100_bound.compute_days <= 30 day")
    assert code == 0 and ">= 6" in out


def test_two_h100_hold_the_state_but_take_77_days(ws):
    assert qval(ws, "gpus48_analysis.state_memory", "GB") == pytest.approx(131.1, abs=0.05)
    assert qval(ws, "h100_two.compute_days", "day") == pytest.approx(77, abs=0.5)
    code, out, _ = run_cli("eval", CASE, "--plan", "gpus48_analysis", "--format", "json")
    rows = json.loads(out)["plans"]["gpus48_analysis"]["tables"]["gpu-bounds"]["rows"]
    h100_40 = next(r for r in rows if r[0] == "h100_sxm" and r[1] == "40 %")
    assert h100_40[3] == "6" and h100_40[4] == "2"


def test_rtx4090_needs_31(ws):
    r = query(ws, "gpus48_analysis.gpus for gpus48_analysis.compute_days <= 30 day")
    assert 30 < float(r.value) < 31
    assert qval(ws, "gpus48_analysis.gpus_for_compute") == 31


# ---------------------------------------------------------------- input pipeline (§10.4.1, ex. 10-5)
def test_required_input_rates(ws):
    assert qval(ws, "gpus48_analysis.required_token_rate_budget", "token/s") == pytest.approx(46300, abs=50)
    assert qval(ws, "gpus48_analysis.required_seq_rate", "seq/s") == pytest.approx(5.7, abs=0.05)
    assert qval(ws, "gpus48_analysis.input_bandwidth", "MB/s") == pytest.approx(0.37, abs=0.005)
    assert qval(ws, "gpus48_analysis.loader_rate", "seq/s") == 8
    assert qval(ws, "gpus48_analysis.consumption_rate", "seq/s") == pytest.approx(7.3, abs=0.05)


def test_outage_prefetch_fluid_model(ws):
    c = 384 / 52.3                       # book: ~52.3 s per step with input ready
    assert qval(ws, "gpus48_analysis.outage_prefetch", "seq") == pytest.approx((c - 6) * 60, abs=1)
    assert qval(ws, "gpus48_analysis.refill_time", "s") == pytest.approx((c - 6) * 60 / (8 - c), rel=0.02)


def test_resume_after_the_last_consumed_batch(ws):
    assert qval(ws, "gpus48_analysis.resume_batch") == 101
    assert qval(ws, "gpus48_analysis.in_flight_batches") == 8


def test_resume_invariant_is_checked(write_plan):
    f = write_plan(CASE.read_text().split("# A noise scale")[0].replace(
        "dispatched_through = 108", "dispatched_through = 90").replace('import "cpt-variants.plan"',
                                                                    f'import "{CASES / "cpt-variants.plan"}"'))
    code, _, err = run_cli("eval", f)
    assert code == 1 and "dispatched_through = 90 is before trained_through = 100" in err
    assert "t.plan:" in err and "Traceback" not in err


def test_worker_rate_break_even_is_solved(ws):
    r = query(ws, "gpus48_analysis.input_pipeline.worker_rate for gpus48_analysis.loader_headroom == 0 seq/s")
    assert float(r.value) == pytest.approx(qval(ws, "gpus48_analysis.consumption_rate", "seq/s") / 4)


# ---------------------------------------------------------------- budgets (§10.6.2)
def test_communication_budget(ws):
    assert qval(ws, "gpus48_analysis.step_budget", "s") == pytest.approx(67.2, abs=0.05)
    assert qval(ws, "gpus48_analysis.comm_budget", "s") == pytest.approx(14.5, abs=0.05)
    # even the whole 12.0 s exposed fits; a shared 200 Gbit/s NIC per host (15.4 s) does not
    assert qval(ws, "gpus48_analysis.comm_budget_margin", "s") > 0
    assert qval(ws, "gpus48_onenic.transfer_time", "s") == pytest.approx(15.4, abs=0.05)
    assert qval(ws, "gpus48_onenic.transfer_time", "s") > qval(ws, "gpus48_analysis.comm_budget", "s")


# ---------------------------------------------------------------- what a change buys (§10.6.3)
def test_pcie_halved_and_efficiency_30(ws):
    assert qval(ws, "gpus48_pcie_half.comm_wait", "s") == pytest.approx(0.15, abs=0.005)
    assert qval(ws, "gpus48_pcie_half.step_time", "s") == pytest.approx(52.9, abs=0.05)
    assert qval(ws, "gpus48_mfu30.compute_time", "s") == pytest.approx(69.6, abs=0.05)
    assert qval(ws, "gpus48_mfu30.step_time", "s") == pytest.approx(70.2, abs=0.05)
    assert qval(ws, "gpus48_mfu30.step_time", "s") > qval(ws, "gpus48_mfu30.step_budget", "s")


def test_amdahl_on_the_critical_path(ws):
    rows = amdahl_rows(ws, "gpus48_what_if")
    link = next(r for r in rows if r[0] == "link" and r[2] == 0.5)
    res, f, r, T, t2 = link
    assert f * 100 == pytest.approx(0.14, abs=0.005)
    # the formula agrees with re-evaluating the plan with the link halved
    assert t2 == pytest.approx(qval(ws, "gpus48_pcie_half.step_time", "s"), rel=1e-9)


def test_amdahl_formula_examples():
    """Book: 100 ms with 5 ms vs 50 ms of link wait, link halved -> 105 vs 150 ms."""
    for f, want in ((0.05, 105), (0.5, 150)):
        assert 100 * (1 - f + f / 0.5) == pytest.approx(want)


def test_restore_ranking(ws):
    code, out, _ = run_cli("eval", CASE, "--plan", "ranking", "--format", "json")
    rows = json.loads(out)["plans"]["ranking"]["tables"]["compare"]["rows"]
    assert rows[0][0] == "degraded" and rows[0][2] == "reference"
    vals = {p: qval(ws, f"{p}.step_time", "s") for p in
            ("degraded", "restore_pcie", "restore_prefetch", "restore_mfu", "restore_input")}
    best = min((v, p) for p, v in vals.items() if p != "degraded")[1]
    assert rows[1][0] == best
    # restoring the input wait removes exactly 4.5 s of wait from the critical path
    assert vals["degraded"] - vals["restore_input"] == pytest.approx(4.5)


# ---------------------------------------------------------------- model-size frontier (§10.6.4)
@pytest.mark.parametrize("plan,days", [
    ("frontier_a100", 679), ("frontier_h100", 214), ("frontier_b200", 94), ("frontier_b200_mfu50", 75)])
def test_frontier_days(ws, plan, days):
    assert qval(ws, f"{plan}.compute_days", "day") == pytest.approx(days, abs=0.5)


def test_b200_count_for_90_days_is_solved(ws):
    r = query(ws, "frontier_b200.gpus for frontier_b200.compute_days <= 90 day")
    assert float(r.value) == pytest.approx(17147, abs=1)


def test_d_equals_20n_is_quadratic(ws):
    import sympy as sp
    e = ws.full_expr(ws.lookup("frontier_d20n.flops_total"), free=frozenset({"frontier_d20n.work_6nd.params"}))
    n = next(s for s in e.free_symbols if s.name == "frontier_d20n.work_6nd.params")
    rest = {s: v for s, v in ws.nominal_map().items() if s in e.free_symbols and s.name != n.name}
    assert sp.simplify(e.xreplace(rest) - 120 * n ** 2) == 0


def test_unknown_plan_in_compare_is_an_error(write_plan):
    f = write_plan('plan a { use compare { plans = [a, nope] } }\n')
    with pytest.raises(PlanError) as exc:
        dsl.load(f)
    assert exc.value.diagnostics[0].code == "unknown-name"


def test_figures_render(tmp_path):
    for plan, name in (("gpus48_analysis", "gpu-bounds"), ("frontier_b200", "size-frontier")):
        code, out, err = run_cli("figure", CASE, "--plan", plan, "--name", name, "-o", tmp_path)
        assert code == 0, err
        assert (tmp_path / f"{plan}-{name}.svg").read_text().count("<svg") == 1

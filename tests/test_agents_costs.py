"""Cost per success, batches without success, hand-off and decision requests (book ch. 3
§3.1.2, §3.2.2, §3.2.4, exercise 3-3, fig. 3-9, fig. 3-15) from specs/cases/agent-costs.plan."""
from __future__ import annotations

from dsl.syntax.format import query_text
import pytest

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query

CASE = CASES / "agent-costs.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def _solve(ws, text):
    q = next(q for q in ws.queries if query_text(q) == text)
    return solve_query(ws, q)


def test_cost_per_success_fig_3_9(ws):
    assert qval(ws, "longer_reasoning.cost_per_success") == 2
    assert qval(ws, "longer_reasoning.new_cost_per_success") == 2.5
    assert ws.requirement("longer_reasoning", "new_method_pays")["ok"] is False


def test_price_example_ratio(ws):
    # price x0.1, tokens x20, success 50 -> 80 %: 2 * 0.5/0.8 = 1.25
    assert qval(ws, "cheaper_tokens.cost_ratio") == pytest.approx(1.25, abs=0.005)


def test_break_even_success_rate(ws):
    # exercise 3-3: c2 = 1.5 -> p2 = 1.5 / (1/0.5) = 75 %
    s = _solve(ws, "cheaper_reasoning.success_cost.new_success_rate for "
                   "cheaper_reasoning.new_cost_per_success == cheaper_reasoning.cost_per_success")
    assert s.value == pytest.approx(0.75, abs=1e-9)


def test_handoff_threshold(ws):
    # e = 0.000081 / 0.013880 ≈ 0.58 %
    s = _solve(ws, "handoff_1pct.handoff.handoff_rate for handoff_1pct.handoff_cost == "
                   "handoff_1pct.handoff.decision_cost")
    assert s.value * 100 == pytest.approx(0.58, abs=0.005)


def test_handoff_costs_and_success_ratios(ws):
    # average cost per request: 0.000081 + e*0.013880; p2/p1 must exceed 1 + e*0.013880/0.000081
    assert qval(ws, "handoff_1pct.cost_per_request") == pytest.approx(0.000081 + 0.01 * 0.013880, rel=1e-12)
    assert qval(ws, "handoff_5pct.cost_per_request") == pytest.approx(0.000081 + 0.05 * 0.013880, rel=1e-12)
    for p, e in (("handoff_1pct", 0.01), ("handoff_5pct", 0.05)):
        s = _solve(ws, f"{p}.handoff.success_ratio for {p}.cost_per_success_ratio == 1")
        assert s.value == pytest.approx(1 + e * 0.013880 / 0.000081, rel=1e-9)


def test_zero_successes_report_total_and_failures(ws):
    assert qval(ws, "failed_batch.batch_total_cost") == 1
    assert qval(ws, "failed_batch.batch_failures") == 4
    assert "failed_batch.batch_cost_per_success" not in ws.nodes
    assert any(d.code == "no-success" for d in ws.diagnostics)
    assert qval(ws, "passed_batch.batch_cost_per_success") == 2


def test_zero_successes_cli_exit_zero(run_cli):
    code, out, err = run_cli("eval", CASE, "--plan", "failed_batch")
    assert code == 0
    assert "warning[no-success]" in err and "batch_failures" in out


def test_decision_request(ws):
    # 1,929 tokens on Qwen3-8B ≈ 28 TFLOPs ≈ 70 ms on an H100 at 40 %; 64 tokens at 9 ms -> ≈0.65 s (≈9x)
    assert qval(ws, "decision.prefill_flops", "TFLOP") == pytest.approx(28, abs=0.5)
    assert qval(ws, "decision.prefill_time", "ms") == pytest.approx(70, abs=1)
    assert qval(ws, "decision.llm_latency", "s") == pytest.approx(0.65, abs=0.005)
    assert qval(ws, "decision.latency_ratio") == pytest.approx(9, abs=0.5)
    # $2 per GPU-hour -> ≈$0.02 per million input tokens
    assert qval(ws, "decision.prefill_cost_per_mtok") == pytest.approx(0.02, abs=0.005)

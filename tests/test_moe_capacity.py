"""Expert capacity, drops, zero padding and device imbalance (book ch. 10 §10.3.4, fig. 10-27,
footnote 5); the smallest capacity factor with no drops from the solver.

Book numbers: two experts, 128 dispatches split 96/32, c = 1.0/1.25/1.5/2.0 -> capacity
64/80/96/128, drops 32/16/0/0, padded rows 32/48/64/128; balanced 64/64 saves one third.
Qwen3-235B-A22B (E = 128, k = 8, 8,192 tokens, half the experts at 1.5x the mean): capacity
512/640/768/1,024, dropped 25/12.5/0/0 %, padding 25/30/33/50 % of executed rows.
"""
from __future__ import annotations


import pytest

import dsl
from conftest import CASES, qval, run_cli
from dsl.syntax.diagnostics import PlanError
from dsl.syntax.parser import parse_query
from dsl.results.solver import solve_query

CASE = CASES / "moe-capacity.plan"


def _load_error(path):
    """The first diagnostic of loading ``path``, which must fail with a PlanError."""
    with pytest.raises(PlanError) as ei:
        dsl.load(path)
    return ei.value.diagnostics[0]


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


TWO = [("two_experts", 64, 32, 32), ("two_experts_c125", 80, 16, 48), ("two_experts_c15", 96, 0, 64),
       ("two_experts_c2", 128, 0, 128)]


@pytest.mark.parametrize("plan, cap, drops, pad", TWO)
def test_two_experts(ws, plan, cap, drops, pad):
    assert qval(ws, f"{plan}.expert_capacity", "token") == cap
    assert qval(ws, f"{plan}.dropped_dispatches", "token") == drops
    assert qval(ws, f"{plan}.padded_rows", "token") == pad


QWEN = [("qwen235", 512, 25, 25), ("qwen235_c125", 640, 12.5, 30), ("qwen235_c15", 768, 0, 33),
        ("qwen235_c2", 1024, 0, 50), ("qwen235_hist", 512, 25, 25)]


@pytest.mark.parametrize("plan, cap, drop_pct, pad_pct", QWEN)
def test_qwen235(ws, plan, cap, drop_pct, pad_pct):
    assert qval(ws, f"{plan}.dispatches", "token") == 65_536
    assert qval(ws, f"{plan}.expert_capacity", "token") == cap
    assert qval(ws, f"{plan}.drop_fraction", "%") == pytest.approx(drop_pct, abs=0.05)
    assert qval(ws, f"{plan}.padding_fraction", "%") == pytest.approx(pad_pct, abs=0.5)


def test_imbalance_on_the_critical_path(ws):
    # the expert phase lasts as long as the device with 96 rows; balanced 64/64 saves one third
    assert qval(ws, "two_experts.max_device_rows", "token") == 96
    assert qval(ws, "two_experts_balanced.max_device_rows", "token") == 64
    assert qval(ws, "two_experts.imbalance_saving") == pytest.approx(1 / 3, abs=1e-12)
    t, tb = qval(ws, "two_experts.expert_time", "ms"), qval(ws, "two_experts_balanced.expert_time", "ms")
    assert 1 - tb / t == pytest.approx(1 / 3, abs=1e-12)
    # an event model: the device with 96 rows is the critical path of the expert phase
    assert ws.critical_path("two_experts", "experts")["path"] == ["experts_dev0"]


@pytest.mark.parametrize("plan", ["qwen235", "two_experts"])
def test_smallest_capacity_factor_without_drops_is_solved(ws, plan):
    q = parse_query(f"{plan}.moe_routing.capacity_factor for {plan}.expert_capacity >= "
                    f"{plan}.max_expert_load")
    sol = solve_query(ws, q)
    assert sol.value == pytest.approx(1.5, abs=1e-6)


def test_table_and_solve_via_cli():
    code, out, _ = run_cli("solve", CASE)
    assert code == 0 and "capacity_factor = 1.5" in out


def test_capacity_curve_figure(tmp_path):
    code, out, err = run_cli("figure", CASE, "-o", tmp_path, "--name", "capacity-curve")
    assert code == 0, err
    assert (tmp_path / "qwen235-capacity-curve.svg").exists()


def _plan(tmp_path, body, extra=""):
    (tmp_path / "t.plan").write_text(f'import "@catalog/models.plan"\n{extra}plan p {{\n{body}\n}}\n')
    return tmp_path / "t.plan"


def test_unknown_routing_lists_the_choices(tmp_path):
    p = _plan(tmp_path, 'use moe_routing { tokens = 8 token; experts = 2; top_k = 1; routing = "zipf" }')
    code, _, err = run_cli("eval", p)
    assert code != 0 and "uniform" in err and "hot_cold" in err and "histogram" in err and "t.plan:3" in err


def test_histogram_bad_row_names_the_row(tmp_path):
    (tmp_path / "h.csv").write_text("expert,dispatches\n0,10\n1,ten\n")
    p = _plan(tmp_path, 'use moe_routing { tokens = 8 token; experts = 2; top_k = 1; routing = "histogram";'
                        ' histogram = "h.csv" }')
    d = _load_error(p)
    assert d.code == "bad-file" and "row 3" in d.summary


def test_histogram_bad_row_points_at_its_line_in_the_file(tmp_path):
    # the error is located in the data file (h.csv:5, counting the comment and the blank line), the plan's
    # `histogram` shown beside it -- as a trace's rows are
    (tmp_path / "h.csv").write_text("expert,dispatches\n# measured\n0,10\n\n1,-3\n")
    p = _plan(tmp_path, 'use moe_routing { tokens = 8 token; experts = 2; top_k = 1; routing = "histogram";'
                        ' histogram = "h.csv" }')
    d = _load_error(p)
    assert d.code == "bad-file" and "row 5" in d.summary and "'1,-3'" in d.summary
    assert d.span.file.endswith("h.csv") and d.span.line == 5
    assert d.related and d.related[0][1].file.endswith("t.plan")


def test_capacity_of_zero_rows_is_an_error_not_a_division_by_zero(tmp_path):
    # ⌊c·tokens·k/E⌋ = ⌊1.25 · 1 · 2 / 8⌋ = ⌊0.3125⌋ = 0: no row is executed, so the padding share has no meaning
    p = _plan(tmp_path, "use moe_routing { tokens = 1 token; experts = 8; top_k = 2; capacity_factor = 1.25 }")
    code, _, err = run_cli("eval", p)
    assert code == 1 and "Traceback" not in err and "division" not in err
    assert "error[out-of-range]: the expert capacity" in err and "is 0 rows" in err and "c·tokens·k ≥ 8" in err


def test_histogram_expert_count_mismatch(tmp_path):
    (tmp_path / "h.csv").write_text("expert,dispatches\n0,10\n1,5\n2,1\n")
    p = _plan(tmp_path, 'use moe_routing { tokens = 8 token; experts = 2; top_k = 1; routing = "histogram";'
                        ' histogram = "h.csv" }')
    with pytest.raises(PlanError) as ei:
        dsl.load(p)
    assert "3 experts" in ei.value.diagnostics[0].summary


def test_experts_from_a_dense_model_is_an_error(tmp_path):
    p = _plan(tmp_path, "model = qwen3_8b\nuse moe_routing { tokens = 8 token }")
    d = _load_error(p)
    assert d.code == "missing-parameter" and "not a mixture-of-experts" in d.summary


def test_top_k_above_the_experts_is_an_error(tmp_path):
    p = _plan(tmp_path, "use moe_routing { tokens = 4096 token; experts = 8; top_k = 16 }")
    code, out, err = run_cli("eval", p)
    assert code == 1 and "Traceback" not in err and "t.plan:3:" in err
    assert "16 experts per token out of 8" in err and "lower top_k" in err and "dispatches" not in out


def test_devices_must_divide_experts(tmp_path):
    p = _plan(tmp_path, "use moe_routing { tokens = 8 token; experts = 4; top_k = 1; devices = 3 }")
    with pytest.raises(PlanError) as ei:
        dsl.load(p)
    assert "do not split evenly" in ei.value.diagnostics[0].summary


def test_json_has_the_capacity_table():
    code, out, _ = run_cli("eval", CASE, "--format", "json", "--plan", "qwen235")
    assert code == 0
    assert "capacity-factor" in out and "12.5 %" in out


# ---------------------------------------------------------------- the capacity reaches the step
STEP = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e11 token; seq_len = 4096 token; global_batch = 64 seq }
plan q { model = qwen3_30b_a3b; workload = w; device = h100_sxm
  gpus = 8; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 1; pp = 1; ep = 8; zero = 1; link = nvlink4 }
  use moe_routing { tokens = 8192 token; devices = 8; routing = "hot_cold" }
}
plan q_c3 extends q { use moe_routing { capacity_factor = 3 } }
plan padded extends q { use moe_routing { dispatch = "padded" } }
plan padded_c3 extends q { use moe_routing { dispatch = "padded"; capacity_factor = 3 } }
plan dropping extends q { use moe_routing { dispatch = "dropping" } }
"""


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    p = tmp_path_factory.mktemp("moe_step") / "step.plan"
    p.write_text(STEP, encoding="utf-8")
    return dsl.load(p)


def test_padded_dispatch_executes_the_capacity(step):
    # Qwen3-30B-A3B: E = 128, k = 8 (its config); 8,192 tokens -> 65,536 dispatches, mean 512 per
    # expert; capacity ⌊c · 8192 · 8 / 128⌋ = 512·c; 8 devices of 16 experts: padded, every device
    # executes 16 × 512·c rows = 8,192·c (c = 1: 8,192; c = 3: 24,576)
    assert qval(step, "padded.max_device_rows") == 8192
    assert qval(step, "padded_c3.max_device_rows") == 24576
    # dropless: the hot half of the experts (1.5 × 512 = 768 rows) on the first four devices:
    # 16 × 768 = 12,288 rows, whatever the capacity factor
    assert qval(step, "q.max_device_rows") == qval(step, "q_c3.max_device_rows") == 12288
    # dropping: each hot expert capped at 512, the cold at their 256: the busiest device 16 × 512
    assert qval(step, "dropping.max_device_rows") == 8192


def test_the_capacity_factor_reaches_the_step_time(step):
    # padded at c = 1: every device runs the mean (8,192 = 65,536 / 8): no imbalance term; at c = 3
    # three times the mean: the step pays the padded rows (imbalance = (3 − 1) × the expert phase)
    assert qval(step, "padded.imbalance_time", "s") == pytest.approx(0, abs=1e-12)
    assert qval(step, "padded_c3.step_time", "s") > qval(step, "padded.step_time", "s")
    assert qval(step, "padded_c3.imbalance_time", "s") == pytest.approx(
        2 * qval(step, "q.imbalance_time", "s") / 0.5, rel=1e-9)      # dropless: (12,288/8,192 − 1) = 0.5 × the phase
    assert qval(step, "q_c3.step_time", "s") == qval(step, "q.step_time", "s")


def test_a_capacity_factor_under_dropless_dispatch_is_flagged(step):
    unused = [w for w in step.warnings if w.code == "unused" and "dropless" in w.summary]
    assert {w.span.line for w in unused} == {10}          # q_c3 states one; q takes the default
    assert 'dispatch = "padded"' in unused[0].hint

"""Behaviour a new user relies on: warnings for typos, requirements from `plan get`,
infeasible solve answers, per-query errors, ZeRO stages on the timeline, config rejections."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dsl.syntax.diagnostics import PlanError
from dsl.results.evaluation import evaluate_file as Workspace
from dsl.syntax.parser import parse_query
from dsl.results.solver import solve_query

ROOT = Path(__file__).resolve().parent.parent
CASE = str(ROOT / "specs" / "cases" / "cpt-qwen3-8b-4090.plan")
HEAD = 'import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'


def _write(tmp_path, text: str, name: str = "u.plan") -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_model_field_typo_is_a_warning_with_did_you_mean(tmp_path):
    ws = Workspace(_write(tmp_path, HEAD + 'model m from "@catalog/hf/Qwen3-8B.json" { layer = 2 }\n'))
    w = [d for d in ws.warnings if d.code == "unknown-field"]
    assert len(w) == 1 and "'layer'" in w[0].summary and "did you mean 'layers'" in w[0].hint
    # the typo did not change the model
    assert ws.base_value("m.params") == 8_190_735_360


def test_model_defaults_are_fields(tmp_path):
    ws = Workspace(_write(tmp_path, "model m { layers = 2; hidden = 512; ffn = 1536; heads = 8; vocab = 32000 }\n"))
    assert ws.base_value("m.head_dim") == 64 and ws.base_value("m.kv_heads") == 8
    # 2·(2·512·512 + 2·512·512 + 3·512·1536 + 2·512) + 2·32000·512 + 512, computed by hand
    per_layer = 2 * 512 * 8 * 64 + 2 * 512 * 8 * 64 + 3 * 512 * 1536 + 2 * 512
    assert ws.base_value("m.params") == 2 * per_layer + 2 * 32000 * 512 + 512


def test_requirement_via_get(run_cli):
    assert run_cli("get", CASE, "gpus32.meets_deadline")[1].strip() == "false"
    assert run_cli("get", CASE, "gpus48.meets_deadline")[1].strip() == "true"
    assert run_cli("get", CASE, "gpus48.fits_memory")[1].strip() == "true"


def test_solve_answer_outside_range_is_flagged(fresh_case_ws):
    # 48 GPUs finishing in 22 days needs the step to drop by ~15 %: an MFU above 40 % but
    # below 100 %; 20.5 days needs more compute than the card can give (MFU > 100 %).
    ok = solve_query(fresh_case_ws, parse_query("gpus48.mfu for gpus48.finish_time == 22 day"))
    assert ok.feasible and 0.4 < ok.value < 1
    bad = solve_query(fresh_case_ws, parse_query("gpus48.memory.transient for gpus48.memory_per_gpu == 1 GiB"))
    assert bad.value is not None and bad.value < 0
    assert not bad.feasible and "outside the allowed range" in bad.note


def test_one_failing_query_does_not_hide_the_others(run_cli, tmp_path):
    text = Path(CASE).read_text(encoding="utf-8").replace('import "../catalog/', 'import "@catalog/')
    text += "\nsolve gpus48.checkpoint.restart for gpus48.step_time == 60 s\n"
    code, out, err = run_cli("solve", _write(tmp_path, text))
    assert code == 1
    assert "gpus32.mfu = 46.99 %" in out
    assert "does not depend on" in err and "1 of 4 queries failed" in err


def test_missing_unit_on_seq_len_gives_one_error_at_the_users_field(tmp_path):
    src = HEAD + ("workload w { tokens = 1e9 token; seq_len = 4096; global_batch = 8 seq }\n"
                  "plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %\n"
                  "  use compute {} }\n")
    with pytest.raises(PlanError) as ei:
        Workspace(_write(tmp_path, src))
    errs = [d for d in ei.value.diagnostics if d.severity == "error"]
    assert len(errs) == 1
    assert errs[0].code == "unit-mismatch" and errs[0].span.line == 3 and "w.seq_len" in errs[0].summary


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    d = tmp_path_factory.mktemp("stages")
    text = Path(CASE).read_text(encoding="utf-8").replace('import "../catalog/', 'import "@catalog/')
    text += "".join(f"plan s{k} extends gpus48 {{ use layout {{ zero = {k} }} }}\n" for k in range(3))
    text += "plan s2np extends gpus48 { use layout { zero = 2; prefetch = false } }\n"
    p = d / "stages.plan"
    p.write_text(text, encoding="utf-8")
    return Workspace(str(p))


def test_zero_stage_volumes_and_exposure(stages):
    N, d, m, bw = 8_190_735_360, 48, 8, 32e9
    frac = (d - 1) / d
    G = W = 2 * N
    # per-step link volume (independent of the code): stage 0 all-reduce, 1 RS + AG, 2 RS per micro-batch + AG
    assert float(stages.base_value("s0.transfer_volume")) == pytest.approx(2 * frac * G, rel=1e-12)
    assert float(stages.base_value("s1.transfer_volume")) == pytest.approx(frac * (G + W), rel=1e-12)
    assert float(stages.base_value("s2.transfer_volume")) == pytest.approx(m * frac * G + frac * W, rel=1e-12)
    # with prefetch everything but the embedding's collectives hides under 52.2 s of compute
    emb = 151_936 * 4096 * 2 * frac / bw
    compute = float(stages.base_value("gpus48.compute_time"))
    for k, exposed in ((0, 2 * emb), (1, 2 * emb), (2, 2 * emb)):
        assert float(stages.base_value(f"s{k}.step_time")) == pytest.approx(0.5 + compute + exposed, rel=1e-9)
    # without prefetch the whole 144.4 GB / 32 GB/s follows compute
    t2 = (m * frac * G + frac * W) / bw
    assert t2 == pytest.approx(4.511, abs=5e-4)
    assert float(stages.base_value("s2np.step_time")) == pytest.approx(0.5 + compute + t2, rel=1e-9)
    path = stages.critical_path("s0", "step")["path"]
    assert "allreduce_last" in path and "allgather_first" not in path


def test_unsupported_moe_layout_is_rejected_with_the_reason(tmp_path):
    # MoE configs are read since issue 7; a layout the formulas do not describe is refused
    import json
    cfg = json.loads((ROOT / "specs" / "catalog" / "hf" / "Qwen3-30B-A3B.json").read_text())
    cfg["mlp_only_layers"] = [0, 1]
    (tmp_path / "moe.json").write_text(json.dumps(cfg))
    with pytest.raises(PlanError) as ei:
        Workspace(_write(tmp_path, 'model m from "moe.json"\n'))
    d = ei.value.diagnostics[0]
    assert d.code == "bad-config" and "mlp_only_layers" in d.summary


@pytest.mark.parametrize("unit, hint", [("Gbps", "Gbit/s"), ("T", "1e12"), ("KB", "KiB")])
def test_unit_hints(tmp_path, unit, hint):
    with pytest.raises(PlanError) as ei:
        Workspace(_write(tmp_path, f"link l {{ bandwidth = 200 {unit} }}\n"))
    d = ei.value.diagnostics[0]
    assert d.code == "unknown-unit" and hint in d.hint


def test_eval_json_requirements_are_in_their_unit(run_cli):
    code, out, err = run_cli("eval", CASE, "--format", "json")
    req = {r["name"]: r for r in json.loads(out)["plans"]["gpus48"]["requirements"]}["meets_deadline"]
    assert req["unit"] == "day"
    assert abs(req["lhs"] - 24.6) <= 0.05 and req["rhs"] == 30
    assert req["lhs_si"] == pytest.approx(req["lhs"] * 86400, rel=1e-12)


def test_provides_lists_exactly_what_each_block_defines(case_ws):
    """UseSpec.provides (used for hints and docs) matches the quantities the case defines."""
    from dsl.plugin.manager import get_plugins

    defined: dict[str, set] = {}
    for n in case_ws.nodes.values():
        if n.owner == "gpus48" and n.kind == "quantity":
            defined.setdefault(n.plugin, set()).add(n.name)
    from plugins.training.layout import STEP_PROVIDES
    for spec in get_plugins().blocks.values():
        if spec.plugin in defined:
            if spec.name == "layout_search":
                continue          # a list of knob values for `plan search`: it prices nothing
            if spec.name in ("layout", "compute"):
                # the training step: every quantity it defines is listed; the rest of its list
                # are quantities of other layouts (tp_comm at tp > 1, pipeline_time at pp > 1 …)
                assert defined[spec.plugin] <= set(spec.provides), spec.name
                # `use compute` defines the measured MFU/HFU only when a measured throughput is given
                measured = {"measured_throughput", "mfu_measured", "hfu_measured"} if spec.name == "compute" else set()
                assert set(spec.provides) - defined[spec.plugin] <= set(STEP_PROVIDES) | measured, spec.name
                continue
            if spec.name == "energy":
                # carbon and the costs only with a carbon intensity, an electricity or a GPU-hour price
                assert defined[spec.plugin] <= set(spec.provides), spec.name
                assert set(spec.provides) - defined[spec.plugin] <= {"carbon", "energy_cost", "gpu_cost"}, spec.name
                continue
            # fallbacks, replaced by the training step: the persistent state, each state's per-GPU
            # share and the memory total with its margin
            extra = ({"persistent_memory", "weights_per_gpu", "grads_per_gpu", "master_per_gpu",
                      "optimizer_per_gpu", "memory_per_gpu", "memory_margin"} if spec.name == "memory" else set())
            assert defined[spec.plugin] | extra == set(spec.provides), spec.name


def test_missing_block_hint(tmp_path):
    src = HEAD + ("workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq; deadline = 9 day }\n"
                  "plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %\n"
                  "  use compute {} }\n")
    ws = Workspace(_write(tmp_path, src))
    with pytest.raises(PlanError) as ei:
        solve_query(ws, parse_query("p.mfu for p.step_budget == 3 s"))
    assert "priced by `use finish`" in ei.value.diagnostics[0].hint


def test_huge_literals_are_rejected_quickly(tmp_path):
    with pytest.raises(PlanError) as ei:
        Workspace(_write(tmp_path, "link l { bandwidth = 1e400 GB/s }\nlink k { bandwidth = 1e99999999 GB/s }\n"))
    ds = ei.value.diagnostics
    assert [d.code for d in ds] == ["out-of-range", "out-of-range"]
    assert [d.span.line for d in ds] == [1, 2]  # reported in file order


def _case_variant(tmp_path, extra: str) -> str:
    text = Path(CASE).read_text(encoding="utf-8").replace('import "../catalog/', 'import "@catalog/')
    return _write(tmp_path, text + "\n" + extra + "\n", "variant.plan")


def test_negative_declaration_fields_are_out_of_range(tmp_path):
    src = _case_variant(tmp_path, "device dd extends rtx4090 { peak_flops = -1 TFLOP/s }\n"
                                  "plan z extends gpus48 { device = dd }")
    with pytest.raises(PlanError) as ei:
        Workspace(src)
    d = ei.value.diagnostics[0]
    assert d.code == "out-of-range" and "dd.peak_flops" in d.summary and "positive" in d.summary


def test_nic_crossing_is_part_of_the_symbolic_model(tmp_path):
    """With one NIC per host (25 GB/s) the ring is NIC-bound across hosts but PCIe-bound
    (32 GB/s) on one host; solving for the GPU count must use the right one."""
    ws = Workspace(_case_variant(tmp_path, "plan nb extends gpus48 { use layout { nics_per_host = 1 } }"))
    s = solve_query(ws, parse_query("nb.gpus for nb.transfer_time == 100 s"))
    # V(g) = (384/g)·(g−1)/g·3·2N bytes at 32 GB/s on one host: (g−1)/g² = 100·32e9 / (384·6N)
    k = 100 * 32e9 / (384 * 6 * 8_190_735_360)
    import math
    roots = sorted(((1 - math.sqrt(1 - 4 * k)) / (2 * k), (1 + math.sqrt(1 - 4 * k)) / (2 * k)))
    # the roots of k·g² − g + 1 = 0, both on one host (≤ 8 GPUs)
    assert sorted(s.roots) == pytest.approx(roots, rel=1e-9)
    assert float(ws.base_value("nb.link_bandwidth")) == 25e9


def test_structural_parameter_cannot_be_solved(fresh_case_ws):
    with pytest.raises(PlanError) as ei:
        solve_query(fresh_case_ws, parse_query("gpus48.layout.zero for gpus48.memory_per_gpu == 20 GiB"))
    assert ei.value.diagnostics[0].code == "solve" and "structural" in ei.value.diagnostics[0].summary


def test_plan_set_step_time_has_no_critical_path(run_cli, tmp_path):
    path = _case_variant(tmp_path, "plan fixed extends gpus48 { step_time = 60 s }")
    code, out, err = run_cli("eval", path, "--plan", "fixed", "--format", "json")
    plan = json.loads(out)["plans"]["fixed"]
    assert plan["critical_path"] is None and plan["quantities"]["step_time"]["value"] == 60


def test_convex_overhead_gives_an_interval(fresh_case_ws):
    s = solve_query(fresh_case_ws, parse_query("gpus48.checkpoint.interval for gpus48.overhead <= 2 %"))
    (lo, hi), = s.intervals
    # c/τ + λτ/2 + λr = 0.02  ⇔  (λ/2)τ² − (0.02 − λr)τ + c = 0, computed here
    c = 14 * 8_190_735_360 / 7e9
    lam = 48 / (1024 * 7.9 * 3600)
    a, b = lam / 2, -(0.02 - lam * 120)
    import math
    disc = math.sqrt(b * b - 4 * a * c)
    assert lo == pytest.approx((-b - disc) / (2 * a), rel=1e-9)
    assert hi == pytest.approx((-b + disc) / (2 * a), rel=1e-9)


def test_device_and_workload_typos_warn(tmp_path):
    ws = Workspace(_write(tmp_path, HEAD + "device mine extends h100_sxm { memroy = 94 GB }\n"
                                          "workload w { tokens = 1e9 token; reserverd = 5 day }\n"))
    hints = {d.summary.split("'")[3]: d.hint for d in ws.warnings if d.code == "unknown-field"}
    assert "did you mean 'memory'" in hints["memroy"] and "did you mean 'reserved'" in hints["reserverd"]


def test_nested_use_block_is_a_syntax_error(tmp_path):
    with pytest.raises(PlanError) as ei:
        Workspace(_write(tmp_path, HEAD + "plan p { model = qwen3_8b; device = h100_sxm\n"
                                          "  use memory { transient = 1 GiB; use compute {} } }\n"))
    d = ei.value.diagnostics[0]
    assert d.code == "syntax" and "cannot be nested" in d.summary


def test_gpu_count_must_be_whole(tmp_path):
    with pytest.raises(PlanError) as ei:
        Workspace(_case_variant(tmp_path, "plan half extends gpus48 { gpus = 64.5 }"))
    assert ei.value.diagnostics[0].code == "out-of-range" and "whole number" in ei.value.diagnostics[0].summary


def test_solve_gpu_count_suggests_whole_value_and_failing_requirements(fresh_case_ws):
    s = solve_query(fresh_case_ws, parse_query("gpus32.gpus for gpus32.finish_time <= cpt.deadline"))
    assert 37 < s.value < 38
    # 384 sequences over 38 … 47 GPUs is not a whole number of micro-batches (384 = 2^7 * 3: its
    # first divisor from 38 on is 48), so the whole-number answer is 48, not 38
    assert s.whole == 48 and s.answer == 48
    assert "gpus32.micro_batches_whole" in s.note and "38 … 47" in s.note


def test_inequality_that_never_holds_in_range(fresh_case_ws):
    # ZeRO-3 state + 10 GiB transient never drops below 10 GiB, whatever the GPU count
    s = solve_query(fresh_case_ws, parse_query("gpus48.gpus for gpus48.memory_per_gpu <= 9 GiB"))
    assert s.value is None and s.intervals == []
    assert "holds for no value in the allowed range" in s.note


def test_missing_blocks_warn(tmp_path):
    src = HEAD + ("workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq; deadline = 9 day }\n"
                  "plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %\n"
                  "  use compute {} }\n")
    codes = [d.summary for d in Workspace(_write(tmp_path, src)).warnings if d.code == "incomplete"]
    # several GPUs and no link: the gradient synchronisation would cost nothing
    assert any("names no link" in c and "gradient synchronisation costs nothing" in c for c in codes)


def test_check_reports_literal_out_of_range_with_percent_hint(run_cli, tmp_path):
    src = HEAD + ("workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq }\n"
                  "plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 1; mfu = 40\n"
                  "  use compute {} }\n")
    code, out, err = run_cli("check", _write(tmp_path, src))
    assert code == 1 and "error[out-of-range]" in err and "write 40 % for a percentage" in err


@pytest.mark.parametrize("written, hint", [
    ("140 %", "140 % is 1.4, above 100 %"),        # already a percentage: "1.4 %" would be 0.014
    ("2 * 70 %", "at most 1 (100 %)"),
    ("400", "at most 1 (100 %)"),                  # beyond 100: no percentage reading
])
def test_percent_hint_only_for_a_bare_number(run_cli, tmp_path, written, hint):
    src = HEAD + ("workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq }\n"
                  f"plan p {{ model = qwen3_8b; workload = w; device = h100_sxm; gpus = 1; mfu = {written}\n"
                  "  use compute {} }\n")
    code, out, err = run_cli("check", _write(tmp_path, src))
    assert code == 1 and "error[out-of-range]" in err and hint in err and "for a percentage" not in err


def test_missing_quantity_of_a_used_block_hint(tmp_path):
    """tp_comm is a quantity of `use layout` only when tp > 1: the hint must not send the user to
    `use compute` (a block that also lists it) when the plan already uses `use layout`."""
    src = HEAD + ("workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq; deadline = 9 day }\n"
                  "plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %\n"
                  "  use memory {}\n  use layout { zero = 1; link = nvlink4; nic = nic_400g } }\n")
    ws = Workspace(_write(tmp_path, src))
    with pytest.raises(PlanError) as ei:
        solve_query(ws, parse_query("p.mfu for p.tp_comm == 3 s"))
    hint = ei.value.diagnostics[0].hint
    assert "use compute" not in hint
    assert "`use layout` defines 'tp_comm' only when tp > 1, which plan 'p' does not meet" in hint


def test_a_conditional_quantity_names_the_field_that_enables_it(tmp_path):
    """steps, train_time and finish_time exist only when the workload has tokens to train on: the
    hint names the field (it said "only for some of its settings")."""
    src = HEAD + ("workload w { seq_len = 4096 token; global_batch = 8 seq }\n"
                  "plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 1; mfu = 40 %\n"
                  "  use memory {}\n  use layout {} }\n")
    ws = Workspace(_write(tmp_path, src))
    for name in ("steps", "train_time", "finish_time"):
        with pytest.raises(PlanError) as ei:
            ws.lookup(f"p.{name}")
        assert f"`use layout` defines '{name}' only when the plan's workload has `tokens`" \
            in ei.value.diagnostics[0].hint
        assert "deadline" not in ei.value.diagnostics[0].hint


def test_finish_time_needs_tokens_not_a_deadline(tmp_path, run_cli):
    """A workload with tokens and no deadline has a train time and a finish time (reserved time
    included); only the deadline's own outputs (meets_deadline, the finish time as a headline
    answer) need the deadline."""
    src = HEAD + ("workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq; reserved = 1 day }\n"
                  "plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 1; mfu = 40 %\n"
                  "  use memory {}\n  use layout {} }\n")
    path = _write(tmp_path, src)
    ws = Workspace(path)
    steps, step = ws.base_value("p.steps"), ws.base_value("p.step_time")
    assert ws.base_value("p.train_time") == pytest.approx(steps * step, rel=1e-12)
    assert ws.base_value("p.finish_time") == pytest.approx(86400 + steps * step, rel=1e-12)
    assert not any(r.name == "meets_deadline" for r in ws.requirements)
    assert "finish_time" not in [n.name for n in ws.headline("p")]    # no deadline: not the plan's answer
    code, out, err = run_cli("get", path, "p.finish_time", "--in", "day")
    assert code == 0 and "Traceback" not in err
    assert float(out) == pytest.approx((86400 + steps * step) / 86400, rel=1e-9)
    # with a deadline, the same finish time is checked against it
    ws = Workspace(_write(tmp_path, src.replace("reserved = 1 day", "reserved = 1 day; deadline = 30 day"),
                          "d.plan"))
    assert any(r.name == "meets_deadline" for r in ws.requirements)
    assert "finish_time" in [n.name for n in ws.headline("p")]


def _train_time_reader():
    """A third-party block that reads the standard train_time (whoever prices it)."""
    import types

    from dsl.plugin import UseSpec, hookimpl
    mod = types.ModuleType("plan_test_train_time_reader")

    @hookimpl
    def plan_blocks_register():
        return [UseSpec("gpu_time", "GPU time of the run")]

    @hookimpl
    def plan_quantities_price(ctx):
        if ctx.block("gpu_time") is not None:
            ctx.define("gpu_days", ctx.param("gpus") * ctx.q("train_time", "day"), "day", headline=True)

    mod.plan_blocks_register, mod.plan_quantities_price = plan_blocks_register, plan_quantities_price
    return mod


TRAIN_TIME_READER = _train_time_reader()


@pytest.mark.parametrize("workload,ok", [("tokens = 1e9 token; ", True), ("", False)])
def test_a_block_reading_train_time_is_told_what_the_plan_lacks(tmp_path, workload, ok):
    """train_time needs the workload's tokens (not a deadline); without them the hint names the
    field, not another block (`use compute`) that also lists train_time."""
    from dsl.plugin.manager import get_plugins
    src = HEAD + (f"workload w {{ {workload}seq_len = 4096 token; global_batch = 8 seq }}\n"
                  "plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 2; mfu = 40 %\n"
                  "  use memory {}\n  use layout {}\n  use gpu_time {} }\n")
    path = _write(tmp_path, src)
    if ok:
        ws = Workspace(path, plugins=get_plugins(extra=(TRAIN_TIME_READER,)))
        assert ws.base_value("p.gpu_days") == pytest.approx(2 * ws.base_value("p.train_time"), rel=1e-12)
        return
    with pytest.raises(PlanError) as ei:
        Workspace(path, plugins=get_plugins(extra=(TRAIN_TIME_READER,)))
    d = next(d for d in ei.value.diagnostics if d.severity == "error")
    assert d.code == "missing-quantity" and (d.span.line, d.span.column) == (4, 6)
    assert d.summary == ("`use gpu_time` in plan 'p' needs 'train_time', which `use layout` does not define for "
                         "this plan")
    assert d.hint.startswith("`use layout` defines 'train_time' only when the plan's workload has `tokens`")
    assert "use compute" not in d.hint

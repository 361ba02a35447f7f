"""The continued pre-training design case of book chapter 10 (Qwen3-8B on 32 vs 48 RTX 4090).

Every expected number below is the one printed in the book (chapters 3 and 10), not a value
obtained by running the code.  The tolerance is half a unit of the book's last printed digit
(78.3 -> ±0.05; 1.02 % -> ±0.005 %; ≈571 GB -> ±0.5 GB); exact integers are compared exactly.

Spec files: ``cpt-qwen3-8b-4090.plan`` (the case), ``cpt-variants.plan`` (no prefetch, one NIC
per host, 1,024 GPUs), ``zero-stages-qwen3-8b.plan`` (ZeRO 0-3 at d = 8, FP32 grads) and
``flops-qwen3-8b.plan`` (LM head on 4,096 label tokens).
"""
from __future__ import annotations

from dsl.syntax.format import query_text
import json
import re

import pytest

import dsl
from conftest import CASE, CASES, qval
from dsl.syntax.parser import parse_query
from dsl.results.solver import solve_query

VARIANTS = CASES / "cpt-variants.plan"
ZERO = CASES / "zero-stages-qwen3-8b.plan"
FLOPS = CASES / "flops-qwen3-8b.plan"

QWEN3_8B_PARAMS = 8_190_735_360


@pytest.fixture(scope="module")
def variants_ws():
    return dsl.load(VARIANTS)


@pytest.fixture(scope="module")
def zero_ws():
    return dsl.load(ZERO)


@pytest.fixture(scope="module")
def flops_ws():
    return dsl.load(FLOPS)


def _ws(request, which: str):
    return request.getfixturevalue({"case": "case_ws", "variants": "variants_ws", "zero": "zero_ws",
                                    "flops": "flops_ws"}[which])


# (workspace, quantity, unit, book value, tolerance)
BOOK = [
    # ch. 3 §3.4.3: FLOPs of one 8,192-token sequence
    ("case", "gpus48.flops_forward", "TFLOP", 143.789, 0.0005),
    ("case", "gpus48.flops_backward", "TFLOP", 287.579, 0.0005),
    ("case", "gpus48.flops_per_seq", "TFLOP", 431.368, 0.0005),
    ("case", "gpus48.flops_attention", "TFLOP", 59.381, 0.0005),
    ("case", "gpus48.flops_6nd", "TFLOP", 402.591, 0.0005),
    ("flops", "half_labels.flops_per_seq", "TFLOP", 416.074, 0.0005),
    # §10.1.2: training state, 16 B/param
    ("case", "gpus48.state_memory", "GB", 131.1, 0.05),
    ("case", "gpus48.state_memory", "GiB", 122.1, 0.05),
    ("zero", "fp32_grads.state_memory", "GB", 147.433, 0.0005),
    # §10.2.1: ZeRO stages at d = 8
    ("zero", "stage0.persistent_memory", "GiB", 122.1, 0.05),
    ("zero", "stage1.persistent_memory", "GiB", 42.0, 0.05),
    ("zero", "stage2.persistent_memory", "GiB", 28.6, 0.05),
    ("zero", "stage3.persistent_memory", "GiB", 15.3, 0.05),
    # §10.2.4: memory per GPU and margin
    ("case", "gpus32.memory_per_gpu", "GiB", 13.8, 0.05),
    ("case", "gpus48.memory_per_gpu", "GiB", 12.5, 0.05),
    ("case", "gpus32.memory_margin", "GiB", 8.2, 0.05),
    ("case", "gpus48.memory_margin", "GiB", 9.5, 0.05),
    # §10.3.3: communication
    ("case", "gpus32.transfer_volume", "GB", 571, 0.5),
    ("case", "gpus48.transfer_volume", "GB", 385, 0.5),
    ("case", "gpus32.transfer_time", "s", 17.9, 0.05),
    ("case", "gpus48.transfer_time", "s", 12.0, 0.05),
    ("case", "gpus32.comm_wait", "s", 0.08, 0.005),
    ("case", "gpus48.comm_wait", "s", 0.08, 0.005),
    ("case", "gpus48.compute_per_microbatch", "s", 6.53, 0.005),
    ("case", "gpus48.transfer_per_microbatch", "s", 1.50, 0.005),
    # §10.1.3, §10.6.1: step and finish time
    ("case", "gpus32.compute_time", "s", 78.3, 0.05),
    ("case", "gpus48.compute_time", "s", 52.2, 0.05),
    ("case", "gpus32.step_time", "s", 78.9, 0.05),
    ("case", "gpus48.step_time", "s", 52.8, 0.05),
    ("case", "gpus32.overhead", "%", 1.02, 0.005),
    ("case", "gpus48.overhead", "%", 1.08, 0.005),
    ("case", "gpus32.train_time", "day", 29.0, 0.05),
    ("case", "gpus48.train_time", "day", 19.4, 0.05),
    ("case", "gpus32.finish_time", "day", 34.3, 0.05),
    ("case", "gpus48.finish_time", "day", 24.6, 0.05),
    ("case", "gpus48.step_budget", "s", 67.2, 0.05),
    # §10.4.4: checkpoints
    ("case", "gpus48.save_time", "s", 16.4, 0.05),
    ("variants", "gpus1024.optimal_interval", "s", 965, 0.5),
    # §10.3.3, §10.6.2: no prefetch, one shared NIC per host
    ("variants", "gpus48_noprefetch.step_time", "s", 64.8, 0.05),
    ("variants", "gpus48_onenic.transfer_time", "s", 15.4, 0.05),
    ("variants", "gpus48_onenic.transfer_per_microbatch", "s", 1.92, 0.005),
    ("variants", "gpus48_onenic_noprefetch.step_time", "s", 68.1, 0.05),
]


@pytest.mark.parametrize("which,name,unit,book,tol", BOOK,
                         ids=[f"{n}[{u or '1'}]={b}" for _, n, u, b, _ in BOOK])
def test_book_number(request, which, name, unit, book, tol):
    ws = _ws(request, which)
    got = qval(ws, name, unit)
    assert abs(got - book) <= tol, f"{name} = {got} {unit}, book {book} ± {tol}"


# ---------------------------------------------------------------- exact numbers

@pytest.mark.parametrize("name", ["qwen3_8b.params", "qwen3_8b_hf.params"])
def test_qwen3_8b_params_exact(case_ws, name):
    v = case_ws.base_value(case_ws.lookup(name))
    assert v == QWEN3_8B_PARAMS and int(v) == QWEN3_8B_PARAMS


def test_bytes_per_param_bf16_adam(case_ws):
    assert case_ws.base_value(case_ws.lookup("gpus48.bytes_per_param")) == 16


def test_bytes_per_param_fp32_grads(zero_ws):
    assert zero_ws.base_value(zero_ws.lookup("fp32_grads.bytes_per_param")) == 18


def test_steps_exact(case_ws):
    assert case_ws.base_value(case_ws.lookup("gpus32.steps")) == 31_790
    assert case_ws.base_value(case_ws.lookup("gpus48.steps")) == 31_790


def test_checkpoint_size_exact(case_ws):
    size = case_ws.base_value(case_ws.lookup("gpus48.checkpoint_size"))
    assert size == 114_670_295_040          # bytes
    assert size == 14 * QWEN3_8B_PARAMS      # 14 B/param: weights + master + moments


def test_mfu_for_deadline_32_gpus(case_ws):
    """`solve gpus32.mfu for gpus32.finish_time == cpt.deadline` -> book ≈47 %."""
    q = case_ws.queries[0]
    assert query_text(q) == "gpus32.mfu for gpus32.finish_time == cpt.deadline"
    s = solve_query(case_ws, q)
    assert s.unit == "%"
    assert abs(s.value * 100 - 47) <= 0.5


def test_step_budget_query_matches_quantity(case_ws):
    """The second query of the file (book: 67.2 s) agrees with the step_budget quantity."""
    s = solve_query(case_ws, parse_query("gpus48.step_time for gpus48.finish_time == cpt.deadline"))
    assert abs(s.value - 67.2) <= 0.05
    assert s.value == pytest.approx(qval(case_ws, "gpus48.step_budget", "s"), rel=1e-12)


def test_gpus32_misses_gpus48_meets_deadline(case_ws):
    r32 = {r["name"]: r["ok"] for r in case_ws.requirement_results("gpus32")}
    r48 = {r["name"]: r["ok"] for r in case_ws.requirement_results("gpus48")}
    both = {"fits_memory": True, "micro_batches_at_least_one": True, "micro_batches_whole": True}
    assert r32 == {"meets_deadline": False, **both}
    assert r48 == {"meets_deadline": True, **both}


def test_noprefetch_transfer_follows_compute(variants_ws):
    cp = variants_ws.critical_path("gpus48_noprefetch", "step")
    assert "transfer" in cp["path"]
    cp = variants_ws.critical_path("gpus48", "step")
    assert "transfer" not in cp["path"]


# ---------------------------------------------------------------- CLI on the case

@pytest.fixture(scope="module")
def eval_text():
    from conftest import run_cli
    return run_cli("eval", CASE)


def test_cli_eval_exit_0(eval_text):
    code, out, err = eval_text
    assert code == 0, err


@pytest.mark.parametrize("word", ["gpus48", "gpus32", "memory_per_gpu", "memory_margin", "steps",
                                  "compute_time", "comm_wait", "step_time", "transfer_volume",
                                  "transfer_time", "checkpoint_size", "overhead", "train_time",
                                  "finish_time", "step_budget", "requirements", "critical path"])
def test_cli_eval_text_mentions(eval_text, word):
    assert word in eval_text[1]


def test_cli_eval_text_flags_missed_deadline(eval_text):
    out = eval_text[1]
    assert re.search(r"FAIL gpus32\.meets_deadline", out)
    assert re.search(r"ok\s+gpus48\.meets_deadline", out)


def test_cli_eval_json_valid_and_deterministic(run_cli):
    c1, o1, e1 = run_cli("eval", CASE, "--format", "json")
    c2, o2, e2 = run_cli("eval", CASE, "--format", "json")
    assert c1 == c2 == 0, e1 + e2
    assert o1 == o2
    d = json.loads(o1)
    assert set(d["plans"]) == {"gpus32", "gpus48"}
    fin = d["plans"]["gpus48"]["quantities"]["finish_time"]
    assert fin["unit"] == "day" and abs(fin["value"] - 24.6) <= 0.05
    assert fin["si"] == pytest.approx(fin["value"] * 86400, rel=1e-12)


def test_cli_eval_strict_exits_1(run_cli):
    code, out, err = run_cli("eval", CASE, "--strict")
    assert code == 1
    assert "gpus32.meets_deadline" in out


def test_cli_eval_strict_only_gpus48_exits_0(run_cli):
    code, _, err = run_cli("eval", CASE, "--strict", "--plan", "gpus48")
    assert code == 0, err


def test_cli_get_finish_time_in_days(run_cli):
    code, out, err = run_cli("get", CASE, "gpus48.finish_time", "--in", "day")
    assert code == 0, err
    assert re.fullmatch(r"-?\d+(\.\d+)?([eE][+-]?\d+)?\n", out), repr(out)
    assert abs(float(out) - 24.6) <= 0.05


def test_cli_get_memory_gb_vs_gib(run_cli):
    c1, gib, e1 = run_cli("get", CASE, "gpus48.memory_per_gpu", "--in", "GiB")
    c2, gb, e2 = run_cli("get", CASE, "gpus48.memory_per_gpu", "--in", "GB")
    assert c1 == c2 == 0, e1 + e2
    gib, gb = float(gib), float(gb)
    assert abs(gib - 12.5) <= 0.05
    assert gb != pytest.approx(gib)
    assert gb == pytest.approx(gib * 2**30 / 1e9, rel=1e-12)


def test_cli_get_wrong_dimension_is_a_usage_error(run_cli):
    code, out, err = run_cli("get", CASE, "gpus48.finish_time", "--in", "GB")
    assert code == 2 and out == ""
    assert "unit" in err and "Traceback" not in err


@pytest.mark.parametrize("path", [VARIANTS, ZERO, FLOPS], ids=lambda p: p.name)
def test_cli_eval_new_specs(run_cli, path):
    code, out, err = run_cli("eval", path)
    assert code == 0, err
    assert "warning" not in err

"""RL cycle FLOPs for Qwen3-8B (book ch. 3 §3.5.3, example 3-4, exercise 3-7) and published
GPU-hour budgets against it: ``specs/cases/rl-cycle-qwen3-8b.plan``.

Book values (TFLOPs): prefill 465.143, decode 129.056, reference 634.944, teacher 0, update
952.416, total 2,181.559; keep ratio 1/4: 3,410.701 (+56.3 %), per kept sample 136.347 →
213.169; the extra 1,229.142 is all generation and reference.  Exercise 3-7 and the budget
comparison are worked by hand from those numbers in the tests."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query

CASE = CASES / "rl-cycle-qwen3-8b.plan"
T = 0.0005          # half a unit of the book's last printed digit (TFLOP)


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


@pytest.mark.parametrize("name,book", [
    ("keep_half.rollout_prefill_flops", 465.143),
    ("keep_half.rollout_decode_flops", 129.056),
    ("keep_half.reference_flops", 634.944),
    ("keep_half.teacher_flops", 0),
    ("keep_half.update_flops", 952.416),
    ("keep_half.cycle_flops", 2181.559),
    ("keep_quarter.cycle_flops", 3410.701),
    ("keep_quarter.update_flops", 952.416),
])
def test_example_3_4(ws, name, book):
    assert qval(ws, name, "TFLOP") == pytest.approx(book, abs=T)


def test_generated_vs_kept(ws):
    assert qval(ws, "keep_half.generated", "sample") == 32          # 8 prompts × 4 responses
    assert qval(ws, "keep_quarter.generated", "sample") == 64
    assert qval(ws, "keep_half.flops_per_kept", "TFLOP/sample") == pytest.approx(136.347, abs=T)
    assert qval(ws, "keep_quarter.flops_per_kept", "TFLOP/sample") == pytest.approx(213.169, abs=T)
    growth = qval(ws, "keep_quarter.cycle_flops") / qval(ws, "keep_half.cycle_flops") - 1
    assert growth == pytest.approx(0.563, abs=0.0005)
    extra = qval(ws, "keep_quarter.cycle_flops", "TFLOP") - qval(ws, "keep_half.cycle_flops", "TFLOP")
    assert extra == pytest.approx(1229.142, abs=2 * T)
    # the update's inputs: 16 × 1,279 = 20,464 tokens, 16 × 256 = 4,096 supervised outputs
    assert qval(ws, "keep_half.update_input_tokens", "token") == 20464
    assert qval(ws, "keep_half.update_label_tokens", "token") == 4096


def test_prefill_plus_decode_is_one_teacher_forced_forward(ws):
    # the KV cache saves recomputation, not work: prefill + decode = forward over 1,279 tokens
    # with the LM head on the 256 generated positions.  By hand (Qwen3-8B, per token & layer:
    # projections 2·4096·(2·32·128 + 2·8·128), FFN 2·4096·12288·3; attention 4·32·128 per pair;
    # LM head 2·4096·151936):
    L, lin = 36, 2 * 4096 * (2 * 32 * 128 + 2 * 8 * 128) + 2 * 4096 * 12288 * 3
    s = 1279
    fwd = L * lin * s + L * 4 * 32 * 128 * s * (s + 1) // 2 + 2 * 4096 * 151936 * 256
    per = qval(ws, "keep_half.flops_prefill_each", "FLOP/sample") + qval(ws, "keep_half.flops_decode_each",
                                                                          "FLOP/sample")
    assert per == pytest.approx(fwd, rel=1e-12)


def test_linear_form_recovered_by_the_solver(ws):
    slope, intercept = (solve_query(ws, q) for q in ws.queries[:2])
    assert slope.method == intercept.method == "symbolic"
    # book: 1,229.142 TFLOPs for 32 more responses; F_u = 952.416
    assert slope.value * 32 / 1e12 == pytest.approx(1229.142, abs=2 * T)
    assert intercept.value / 1e12 == pytest.approx(952.416, abs=T)
    # and they are the model's own coefficients f_g + f_r and F_u
    assert slope.value == pytest.approx(qval(ws, "keep_half.flops_per_generated"), rel=1e-12)
    assert intercept.value == pytest.approx(qval(ws, "keep_half.update_flops"), rel=1e-12)


def test_exercise_3_7(ws):
    # 48 generated: 2,181.559 + 16 × 1,229.142 / 32 = 2,796.130 TFLOPs
    assert qval(ws, "keep_third.generated", "sample") == pytest.approx(48, rel=1e-12)
    assert qval(ws, "keep_third.cycle_flops", "TFLOP") == pytest.approx(2181.559 + 1229.142 / 2, abs=0.0015)
    # a teacher of the same architecture, one forward per response: 48 × 634.944 / 32 = 952.416
    assert qval(ws, "keep_third_teacher.teacher_flops", "TFLOP") == pytest.approx(48 * 634.944 / 32, abs=T)
    # BF16 weights to 4 instances: 4 × 16.381 ≈ 65.526 GB
    assert qval(ws, "keep_half.weight_bytes", "GB") == pytest.approx(16.381, abs=T)
    assert qval(ws, "keep_half.delivered_bytes", "GB") == pytest.approx(65.526, abs=T)


def test_published_budget(ws):
    # H100 SXM at 40 % MFU: 395.76 TFLOP per GPU-second (book §3.6.3)
    per_gpu_s = 989.4 * 0.40
    assert qval(ws, "budget.cycle_gpu_time", "s") == pytest.approx(2181.559 / per_gpu_s, rel=1e-6)
    cycles = 17920 * 3600 / (2181.559 / per_gpu_s)
    assert qval(ws, "budget.budget_cycles") == pytest.approx(cycles, rel=1e-6)
    assert qval(ws, "budget.budget_kept", "sample") == pytest.approx(16 * cycles, rel=1e-6)
    assert qval(ws, "budget.budget_ratio") == pytest.approx(17920 / 1800, rel=1e-12)


def test_no_reference_model(write_plan):
    p = write_plan('import "@catalog/models.plan"\n'
                   "plan p { model = qwen3_8b\n use rl_cycle { kept = 16 sample; keep_ratio = 1/2; "
                   "prompt_len = 1024 token; gen_len = 256 token; reference = false } }")
    ws = dsl.load(p)
    assert qval(ws, "p.reference_flops") == 0
    assert qval(ws, "p.cycle_flops", "TFLOP") == pytest.approx(2181.559 - 634.944, abs=2 * T)

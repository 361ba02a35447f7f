"""Precision formats and optimizer state (book ch. 10 §10.1.2, ch. 3 example 3-3).

Expected numbers are the book's; tolerances are half a unit of its last printed digit.
Spec: ``specs/cases/memory-formats.plan``.
"""
from __future__ import annotations

import json

import pytest

import dsl
from conftest import CASES, qval, run_cli

FORMATS = CASES / "memory-formats.plan"
N = 8_190_735_360            # Qwen3-8B parameters (book §10.1.2)


@pytest.fixture(scope="module")
def ws():
    return dsl.load(FORMATS)


@pytest.mark.parametrize("name,unit,book,tol", [
    ("bf16_adam.bytes_per_param", "B/param", 16, 0),
    ("bf16_adam.state_memory", "GB", 131.1, 0.05),
    ("bf16_adam.state_memory", "GiB", 122.1, 0.05),
    ("bf16_adam.weights_memory", "GB", 16.4, 0.05),        # table: BF16 weights 16,4 GB
    ("bf16_adam.grads_memory", "GB", 16.4, 0.05),
    ("bf16_adam.master_memory", "GB", 32.8, 0.05),
    ("bf16_adam.optimizer_memory", "GB", 2 * 32.8, 0.1),   # two moments, 32,8 GB each
    ("bf16_adam.matmul_weights_memory", "GB", 16.4, 0.05),
    # FP8 E4M3 operand copy, one FP32 scale per 128x128 block: 1 + 4/16384 ≈ 1.0002 B/param
    ("fp8_operand.operand_bytes_per_param", "B/param", 1.0002, 0.00005),
    ("fp8_operand.matmul_weights_memory", "GB", 8.2, 0.05),
    ("fp8_operand.bytes_per_param", "B/param", 16, 0),     # persistent state unchanged
    # example 3-3: FP32 grads, 18 B/param, 147.433 GB ≈ 137.308 GiB
    ("fp32_grads_h100.bytes_per_param", "B/param", 18, 0),
    ("fp32_grads_h100.state_memory", "GB", 147.433, 0.0005),
    ("fp32_grads_h100.state_memory", "GiB", 137.308, 0.0005),
])
def test_book_values(ws, name, unit, book, tol):
    assert qval(ws, name, unit) == pytest.approx(book, abs=tol)


def test_fp8_scale_is_exact(ws):
    # 1 + 4/16384 exactly: one 4-byte scale per 128 x 128 elements
    import sympy as sp
    assert ws.base_value(ws.lookup("fp8_operand.operand_bytes_per_param")) == 1 + sp.Rational(4, 16384)


def test_fp8_stored_weights_exercise_10_3(ws):
    # replacing the stored BF16 copy by block-scaled FP8 saves 2 - 1.000244 B/param
    assert qval(ws, "fp8_weights.bytes_per_param", "B/param") == pytest.approx(14 + 1 + 4 / 16384, abs=1e-9)


def test_optimizer_families(ws):
    # moments: Adam/AdamW 2, SGD with momentum 1, SGD 0 (FP32 each, 4 B/param)
    assert qval(ws, "bf16_adamw.bytes_per_param", "B/param") == 16
    assert qval(ws, "bf16_sgd_momentum.bytes_per_param", "B/param") == 2 + 2 + 4 + 4
    assert qval(ws, "bf16_sgd.bytes_per_param", "B/param") == 2 + 2 + 4
    assert qval(ws, "fp16_adam.bytes_per_param", "B/param") == 16


def test_example_3_3_exceeds_every_single_gpu(ws):
    # book: the 18 B/param state alone exceeds H100 SXM (80 GB), RTX PRO 6000 (96 GB), H200 (141 GB)
    for plan in ("fp32_grads_h100", "fp32_grads_rtx_pro_6000", "fp32_grads_h200"):
        assert ws.requirement(plan, "fits_memory")["ok"] is False
    # "nine times the BF16 weights of inference"
    assert qval(ws, "fp32_grads_h100.state_memory") / qval(ws, "fp32_grads_h100.weights_memory") == 9


def test_format_table_in_eval():
    code, out, err = run_cli("eval", FORMATS, "--plan", "fp8_operand", "--format", "json")
    assert code == 0, err
    t = json.loads(out)["plans"]["fp8_operand"]["tables"]["memory-formats"]
    rows = {r[0].rstrip(" *"): r for r in t["rows"]}
    # book table: FP16 2 / 16,4 GB; BF16 2 / 16,4 GB; FP8 E4M3 copy ≈1,0002 / ≈8,2 GB
    assert rows["FP16"][1] == "2" and rows["FP16"][2] == pytest.approx(16.4, abs=0.05)
    assert rows["BF16"][1] == "2" and rows["BF16"][2] == pytest.approx(16.4, abs=0.05)
    fp8 = rows["FP8 E4M3 operand copy"]
    assert fp8[1] == "1.0002" and fp8[2] == pytest.approx(8.2, abs=0.05)
    assert fp8[0].endswith("*")                          # the plan's choice is marked
    assert "block scaling" in fp8[3] and "loss scaling" in rows["FP16"][3]
    assert any("16 B/param" in n for n in t["notes"])

"""Activation memory per layer for a 175B-class model (GPT-3: s = 2048, h = 12288, a = 96,
L = 96), micro-batch 1, TP t = 8 — Korthikanti et al. 2022 formulas, computed by hand here
(specs/cases/layout-activations-gpt3.plan)."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval

S, H, A, L, T, B = 2048, 12288, 96, 96, 8, 1
SBH = S * B * H                       # 25,165,824


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASES / "layout-activations-gpt3.plan")


def test_hand_values():
    # the hand computations used below, written out once
    assert SBH == 25_165_824
    assert 5 * A * S / H == 80                           # the attention-score term at t = 1
    assert SBH * (34 + 80) == 2_868_903_936              # no parallelism
    assert SBH * (10 + 24 / T + 80 / T) == 578_813_952   # TP
    assert SBH * (34 / T + 80 / T) == 358_612_992        # TP + SP


@pytest.mark.parametrize("plan,expected", [
    ("none", SBH * (34 + 5 * A * S / H)),                       # 2.87 GB
    ("tp8", SBH * (10 + 24 / T + 5 * A * S / (H * T))),          # 579 MB
    ("tp8_sp", SBH * (34 / T + 5 * A * S / (H * T))),            # 359 MB
    ("tp8_selective", SBH * 34 / T),                             # 107 MB
    ("tp8_full", 2 * SBH),                                       # 50.3 MB
    ("tp8_sp_full", 2 * SBH / T),                                # 6.3 MB
])
def test_activation_per_layer(ws, plan, expected):
    assert qval(ws, f"{plan}.activation_per_layer", "B") == pytest.approx(expected, abs=0.5)


def test_first_stage_holds_p_microbatches(ws):
    # TP 8 × PP 8, SP + selective: 12 layers per stage, p = 8 micro-batches in flight (1F1B)
    per_layer = SBH * 34 / T
    stage0 = per_layer * (L // 8) * 8
    logits_last = per_layer * (L // 8) + 4 * S * B * 50257 / T      # last stage: 1 in flight + logits
    assert stage0 > logits_last
    assert qval(ws, "tp8_pp8.activation_memory", "B") == pytest.approx(stage0, abs=1)
    # interleaving with v = 2 multiplies it by 1 + (p−1)/(p·v) (Korthikanti et al. §4.2.3)
    assert qval(ws, "tp8_pp8_v2.activation_memory", "B") == pytest.approx(stage0 * (1 + 7 / 16), abs=1)


def test_single_stage_adds_logits(ws):
    # p = 1: all 96 layers of one micro-batch plus the LM-head logits 4·s·b·V/t
    assert qval(ws, "tp8_sp.activation_memory", "B") == pytest.approx(
        SBH * (34 / T + 80 / T) * L + 4 * S * B * 50257 / T, abs=1)


def test_full_recompute_adds_a_forward(ws):
    # ≈ 8ND instead of 6ND: the layers' forward again — a third of the compute term less the
    # LM head's share (2·h·V FLOPs per token of the forward; Megatron recomputes layers only)
    fwd_per_token = qval(ws, "tp8_full.flops_per_token", "FLOP/token") / 3
    head_share = 2 * 12288 * 50257 / fwd_per_token
    assert qval(ws, "tp8_full.recompute_time", "s") == pytest.approx(
        qval(ws, "tp8_full.compute_time", "s") / 3 * (1 - head_share), rel=1e-12)
    assert qval(ws, "tp8.recompute_time", "s") == 0


def test_tp_all_reduces_on_nvlink(ws):
    # 4 ring all-reduces of b·s·h·2 bytes per layer and micro-batch, 2·(t−1)/t of the buffer each,
    # on NVLink 3 (300 GB/s per direction); m = 1536 / 192 = 8 micro-batches, no latency stated
    per_call = 2 * (T - 1) / T * (SBH * 2) / 300e9
    assert qval(ws, "tp8.tp_comm", "s") == pytest.approx(4 * L * 8 * per_call, rel=1e-12)
    # full recomputation repeats the forward's two all-reduces
    assert qval(ws, "tp8_full.tp_comm", "s") == pytest.approx(6 * L * 8 * per_call, rel=1e-12)


def test_memory_rejects_the_unparallelised_layout(ws):
    r = ws.requirement("none", "fits_memory")
    assert r is not None and not r["ok"]
    assert ws.requirement("tp8_pp8", "fits_memory")["ok"]

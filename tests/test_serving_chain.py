"""Call chains of one request (book ch. 3 §3.1.1, fig. 3-1, exercise 3-1): counts, FLOPs and
bytes from the model, asserted against hand computations written here."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval

CASE = CASES / "serving-call-chains.plan"

# Qwen3-8B (HF config): L=36, h=4096, f=12288, n_q=32, n_kv=8, d_h=128, V=151,936, untied
L, H, F, NQ, NKV, DH, V = 36, 4096, 12288, 32, 8, 128, 151936
KV = 2 * L * NKV * DH * 2                      # K and V, BF16: 147,456 B = 144 KiB
W = 2 * (8_190_735_360 - V * H)                # weights except the embedding table, BF16
MM = L * (2 * H * NQ * DH + 2 * H * NKV * DH + 3 * H * F) + V * H   # matmul weights per token
ATT = 4 * L * NQ * DH                          # QKᵀ + AV FLOPs per (query, key) pair


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_fig_3_1_chain(ws):
    # restore 6,144, process 2,048, return 4: one prefill, three decodes
    assert qval(ws, "one_call.prefills") == 1
    assert qval(ws, "one_call.decode_steps") == 3
    assert qval(ws, "one_call.final_context", "token") == 6144 + 2048 + 4
    assert qval(ws, "one_call.weight_passes") == 4


def test_fig_3_1_flops_and_bytes(ws):
    S, P, G = 6144, 2048, 4
    prefill = 2 * MM * P + ATT * sum(S + i + 1 for i in range(P))          # query i sees S+i+1 keys
    decode = sum(2 * MM + ATT * (S + P + j + 1) for j in range(G - 1))     # decode j sees S+P+j cached + itself
    assert qval(ws, "one_call.prefill_flops") == pytest.approx(prefill, rel=1e-12)
    assert qval(ws, "one_call.decode_flops") == pytest.approx(decode, rel=1e-12)
    pbytes = W + KV * (S + P)
    dbytes = sum(W + KV * (S + P + j) + KV for j in range(G - 1))
    assert qval(ws, "one_call.prefill_bytes") == pytest.approx(pbytes, rel=1e-12)
    assert qval(ws, "one_call.decode_bytes") == pytest.approx(dbytes, rel=1e-12)


def test_model_sizes(ws):
    assert qval(ws, "one_call.kv_bytes_per_token", "KiB/token") == 144          # book §3.1.3
    assert qval(ws, "one_call.decode_weight_bytes", "GB") == pytest.approx(15.14, abs=0.005)


def test_exercise_3_1_counts(ws):
    # one request of 1,024 output tokens vs eight of 128, each with 1,024 input tokens
    assert qval(ws, "one_long.prefills") == 1 and qval(ws, "eight_short.prefills") == 8
    assert qval(ws, "one_long.decode_steps") == 1023
    assert qval(ws, "eight_short.decode_steps") == 8 * 127
    assert qval(ws, "one_long.final_context", "token") == 2048
    assert qval(ws, "eight_short.final_context", "token") == 1152
    # each call alone reads the weights once: the same 1,024 passes
    assert qval(ws, "one_long.weight_passes") == 1024 == qval(ws, "eight_short.weight_passes")
    # the eight in lockstep share each read: 1 prefill + 127 decode steps
    assert qval(ws, "eight_short.weight_passes_batched") == 128
    assert qval(ws, "one_long.weight_passes_batched") == 1024


def test_exercise_3_1_same_output_different_work(ws):
    # the same 1,024 output tokens, but eight prefills of 1,024 tokens cost eight times the matmuls
    one = qval(ws, "one_long.prefill_flops")
    eight = qval(ws, "eight_short.prefill_flops")
    assert eight == pytest.approx(8 * one, rel=1e-12)


def test_chain_cli(run_cli):
    code, out, err = run_cli("get", CASE, "eight_short.weight_passes_batched")
    assert code == 0 and out.strip() == "128", err

"""Speculative decoding in `use serving_step` (plugins/serving/serving_spec.py): hand
computations on the toy decoder of tests/test_serving_step.py, the expected-tokens formulas, the
crossover solve and the located errors."""
from __future__ import annotations

import pytest
import sympy as sp

from conftest import run_main

import dsl
from dsl.syntax.diagnostics import PlanError
from plugins.serving import serving_spec as sd

# The toy of tests/test_serving_step.py (2 layers, h = 4, FFN 8, 2 query / 1 KV head of 2, V = 16,
# 288 matrix weights, 16 B of KV per token, 224 B of elementwise traffic per token) on a device of
# 1,000 FLOP/s and 100 B/s at full efficiency, with no kernel overhead; its one-layer copy `head`
# (144 weights, 8 B of KV and 112 B of elementwise traffic per token) drafts.
TOY = """
device d { peak_flops = 1000 FLOP/s; mem_bw = 100 B/s; matmul_efficiency = 100 %
           matmul_half_flops = 0 FLOP; mem_efficiency = 100 % }
model toy { layers = 2; hidden = 4; ffn = 8; heads = 2; kv_heads = 1; head_dim = 2; vocab = 16 }
model head extends toy { layers = 1 }
plan p { model = toy; device = d
  use serving_step { batch = 2 seq; context = 5 token; attention_efficiency = 100 %; kernel_overhead = 0 s
                     speculative = "mtp"; draft_model = head; spec_tokens = 2; acceptance = 50 % } }
plan self_draft extends p { use serving_step { speculative = "draft"; draft_model = toy; spec_tokens = 1 } }
"""


def _get(ws, name):
    return float(ws.base_value(name))


@pytest.fixture(scope="module")
def ws():
    return dsl.load("toy.plan", text=TOY)


def test_expected_tokens_closed_form():
    # Leviathan et al. 2023, eq. 1: (1 − α^(k+1)) / (1 − α); α = 0.8, k = 4: (1 − 0.32768)/0.2 = 3.3616
    assert sd.expected_tokens(0.8, 4) == pytest.approx(3.3616, rel=1e-12)
    assert sd.expected_tokens(1, 3) == 4                    # every draft accepted: k + 1
    assert sd.expected_tokens(0, 5) == 1                    # none accepted: the target's own token
    a = sp.Symbol("a", positive=True)
    assert sp.simplify(sd.expected_tokens(a, 3) - (1 - a ** 4) / (1 - a)) == 0
    # a profile: 1 + 0.8 + 0.8·0.5 + 0.8·0.5·0.25 = 2.3
    assert sd.expected_tokens_profile([0.8, 0.5, 0.25]) == pytest.approx(2.3, rel=1e-12)
    assert sd.expected_tokens_profile([0.7] * 4) == pytest.approx(sd.expected_tokens(0.7, 4), rel=1e-12)


def test_mtp_head_by_hand(ws):
    # draft: 2 decode steps of the one-layer head, 2 sequences, 10 cached tokens in all:
    #   dense 144 weights: FLOPs 2·2·144 = 576 → 0.576 s; 288 B → 2.88 s → 2.88 s
    #   LM head: 2·128 = 256 FLOP → 0.256 s; 128 B → 1.28 s
    #   attention: 12 pairs · 16 FLOP = 192 → 0.192 s; 12 · 8 B = 96 B → 0.96 s
    #   elementwise: 2 · 112 B = 224 B → 2.24 s            one step 7.36 s, two 14.72 s
    assert _get(ws, "p.draft_step_time") == pytest.approx(14.72, rel=1e-9)
    # verification of 3 tokens for each of 2 sequences after 5 cached tokens (6 tokens):
    #   dense: 2·6·288 = 3,456 FLOP → 3.456 s; weights 5.76 s → 5.76 s
    #   LM head at all 6 positions: 768 FLOP → 0.768 s; 1.28 s → 1.28 s
    #   attention: 2·(8·9/2 − 5·6/2) = 42 pairs · 32 = 1,344 FLOP → 1.344 s; KV prefixes 2·5
    #     read, chunks 6 read and written: (10 + 12)·16 B = 352 B → 3.52 s
    #   elementwise: 6 · 224 B = 1,344 B → 13.44 s         in all 24.0 s
    assert _get(ws, "p.verify_step_time") == pytest.approx(24.0, rel=1e-9)
    assert _get(ws, "p.spec_step_time") == pytest.approx(38.72, rel=1e-9)
    # E = 1 + 0.5 + 0.25 = 1.75; tpot 38.72 / 1.75 = 22.1257 s against one plain decode step of
    # 13.44 s (tests/test_serving_step.py): on this toy, speculation does not pay
    assert _get(ws, "p.accepted_tokens_per_step") == pytest.approx(1.75, rel=1e-12)
    assert _get(ws, "p.tpot") == pytest.approx(38.72 / 1.75, rel=1e-9)
    assert _get(ws, "p.plain_tpot") == pytest.approx(13.44, rel=1e-9)
    assert _get(ws, "p.decode_tokens_per_s") == pytest.approx(2 * 1.75 / 38.72, rel=1e-9)
    assert _get(ws, "p.plain_decode_tokens_per_s") == pytest.approx(2 / 13.44, rel=1e-9)
    assert _get(ws, "p.spec_speedup") == pytest.approx(13.44 / (38.72 / 1.75), rel=1e-9)
    assert _get(ws, "p.draft_kv_per_token") == 8          # one layer: K and V of 1 head of 2, 2 B


def test_draft_as_large_as_target_by_hand(ws):
    # k = 1, the target drafting for itself: one plain step 13.44 s; verification of 2 tokens per
    # sequence: dense 5.76, LM head 1.28 (512 FLOP → 0.512 s), attention 2·(7·8/2 − 15) = 26 pairs
    # (0.832 s) against (10 + 8)·16 B = 288 B (2.88 s), elementwise 4 · 224 B → 8.96 s: 18.88 s
    assert _get(ws, "self_draft.verify_step_time") == pytest.approx(18.88, rel=1e-9)
    assert _get(ws, "self_draft.tpot") == pytest.approx((13.44 + 18.88) / 1.5, rel=1e-9)


CASE = """
import "@catalog/hardware.plan"
import "@catalog/models.plan"
model head extends qwen3_8b { layers = 1 }
plan p { model = qwen3_8b; device = h100_sxm
  use serving_step { batch = 8 seq; context = 256 token; speculative = "mtp"; draft_model = head; spec_tokens = 3; acceptance = 70 % } }
"""


def test_crossover_solve_is_where_the_tpots_meet(tmp_path):
    # at 256 tokens of context the weight read dominates a small batch and the FLOPs a large one;
    # at long contexts the KV read, which the verification reads once for k + 1 tokens, keeps
    # speculation paying at every batch (the two sides never meet)
    # the named solve answers the batch where speculation stops paying; evaluated again at that
    # batch, the two TPOTs agree, below it speculation pays and above it it does not
    f = tmp_path / "c.plan"
    f.write_text(CASE + "solve cross: p.serving_step.batch for p.tpot == p.plain_tpot\n")
    rc, out, err = run_main("get", f, "cross")
    assert rc == 0, err
    b = float(out)
    assert 8 < b < 1000

    def speedup(batch):
        ws = dsl.load("c.plan", text=CASE.replace("batch = 8 seq", f"batch = {batch!r} seq"))
        return _get(ws, "p.spec_speedup")
    assert speedup(b) == pytest.approx(1, abs=1e-6)
    assert speedup(0.9 * b) > 1 > speedup(1.1 * b)


def _error(text):
    with pytest.raises(PlanError) as e:
        dsl.load("e.plan", text=text)
    return str(e.value)


@pytest.mark.parametrize("block, code, words", [
    ('speculative = "draft"', "missing-parameter", "needs the model that drafts"),
    ('speculative = "mtp"; draft_model = llama31_70b', "", "share its vocabulary"),
    ('speculative = "mtp"; draft_model = head; spec_tokens = 2; acceptance_profile = [0.8, 0.6, 0.5]', "",
     "3 acceptance probabilities for spec_tokens = 2"),
    ('speculative = "mtp"; draft_model = head; acceptance = 50 %; acceptance_profile = [0.8, 0.6, 0.5]', "",
     "both `acceptance` and `acceptance_profile`"),
    ('speculative = "eagle"', "", "eagle"),
    ('speculative = "mtp"; draft_model = head; acceptance = 120 %', "", "acceptance"),
])
def test_located_errors(block, code, words):
    text = CASE.replace('speculative = "mtp"; draft_model = head; spec_tokens = 3; acceptance = 70 %', block)
    msg = _error(text)
    assert words in msg and "c.plan" not in msg and ":6:" in msg
    if code:
        assert f"error[{code}]" in msg


def test_case_serving_speculative_by_hand():
    # specs/cases/serving-speculative.plan: the numbers of its comments, computed here again
    from conftest import CASES
    ws = dsl.load(CASES / "serving-speculative.plan")          # times read in s, compared in ms
    bw = 3350e9 * 0.90                                    # H100 SXM mem_bw × mem_efficiency, B/s
    dense = 12288 * 3 * 4096 + 2 * 128 * 32 * 4096 + 2 * 128 * 4096 * 8    # 192,937,984 per layer
    weights = 36 * dense * 2 / bw * 1e3                   # 4.6075 ms
    lm_head = 2 * 4096 * 151936 / bw * 1e3                # 0.4128 ms
    kv = 2048 * 2 * 36 * 257 / bw * 1e3                   # 0.0126 ms
    elem = 2 * 36 * (36864 + 32768) / bw * 1e3            # 0.0017 ms
    kernels = (12 * 36 + 4) * 2e-3                        # 0.872 ms
    plain = weights + lm_head + kv + elem + kernels
    assert plain == pytest.approx(5.907, abs=1e-3)
    assert 1e3 * _get(ws, "spec.plain_tpot") == pytest.approx(plain, rel=1e-6)
    assert _get(ws, "spec.accepted_tokens_per_step") == pytest.approx(2.533, rel=1e-12)
    head = dense * 2 / bw * 1e3 + lm_head + 2048 * 2 * 257 / bw * 1e3 + 2 * (36864 + 32768) / bw * 1e3 + 16 * 2e-3
    assert 1e3 * _get(ws, "spec.draft_step_time") == pytest.approx(3 * head, rel=1e-6)
    # the verification: weights, LM head and kernels by hand; the rest (KV, elementwise and
    # attention of 4 positions) from the model, under 0.05 ms
    rest = 1e3 * _get(ws, "spec.verify_step_time") - (weights + lm_head + kernels)
    assert 0 < rest < 0.05
    assert 1e3 * _get(ws, "spec.tpot") == pytest.approx((3 * head + 1e3 * _get(ws, "spec.verify_step_time")) / 2.533, rel=1e-9)
    assert 1e3 * _get(ws, "spec.tpot") == pytest.approx(3.01, abs=0.01)
    assert _get(ws, "spec.spec_speedup") == pytest.approx(1.96, abs=0.01)


def test_a_draft_of_another_vocabulary_is_a_located_error(tmp_path):
    # the target verifies the draft's token ids: they must come from the same tokenizer
    text = TOY + "model other extends toy { layers = 1; vocab = 32 }\n" \
        'plan q extends p { use serving_step { speculative = "draft"; draft_model = other } }\n'
    f = tmp_path / "v.plan"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(PlanError) as e:
        dsl.load(f)
    assert "vocab = 32" in str(e.value) and "v.plan:" in str(e.value)

"""KV cache of sliding-window models: every block sizes a sequence's KV through
plugins.model.llmstate, a local layer holding at most its window of the context.

Expected bytes are hand computations from the configs (BF16, 2 bytes per element):
Gemma 3 12B (specs/catalog/hf/gemma3-12b-key-fields.json): 48 layers, sliding_window_pattern 6 →
8 global and 40 local layers, window 1,024, 8 KV heads of 256 → 2·8·256 = 4,096 elements per
layer per token.  Mistral 7B (OpenHermes-2.5-Mistral-7B.json): 32 layers, all sliding with
window 4,096, 8 KV heads of 128 → 2,048 elements per layer per token.
"""
from __future__ import annotations

import shutil

import pytest

import dsl
from conftest import REPO_ROOT, qval

HF = REPO_ROOT / "specs" / "catalog" / "hf"
GEMMA, MISTRAL = "gemma3-12b-key-fields.json", "OpenHermes-2.5-Mistral-7B.json"


def gemma_seq(c):
    """Bytes of one Gemma 3 12B sequence of c tokens."""
    return 2 * 4096 * (8 * c + 40 * min(c, 1024))


def mistral_seq(c):
    return 2 * 2048 * 32 * min(c, 4096)


def _load(tmp_path, body):
    for f in (GEMMA, MISTRAL):
        shutil.copy(HF / f, tmp_path / f)
    p = tmp_path / "m.plan"
    p.write_text('import "@catalog/hardware.plan"\n'
                 f'model gemma from "{GEMMA}"\nmodel mistral from "{MISTRAL}"\n' + body)
    return dsl.load(p)


def test_hand_sequences():
    assert gemma_seq(8192) == 872_415_232         # 8 layers × 8,192 tokens + 40 × 1,024, × 8 KiB
    assert mistral_seq(8192) == 536_870_912       # 4,096 tokens × 128 KiB


@pytest.mark.parametrize("model,seq,per_token", [("gemma", gemma_seq, 48 * 4096 * 2),
                                                 ("mistral", mistral_seq, 32 * 2048 * 2)])
def test_decode_bound_caps_local_layers(tmp_path, model, seq, per_token):
    ev = _load(tmp_path, f"plan p {{ model = {model}; device = rtx_pro_6000_bw\n"
                         "  use decode_bound { batch = 4 seq; context = 8191 token; kv_pool = 64 GiB } }\n")
    # a written token still goes into every layer
    assert qval(ev, "p.kv_bytes_per_token") == per_token
    w = qval(ev, "p.decode_weight_bytes")
    # each sequence reads its 8,191-token context and writes one: 8,192 tokens, local layers capped
    assert qval(ev, "p.decode_step_bytes") == pytest.approx(w + 4 * seq(8192), rel=1e-12)
    assert qval(ev, "p.kv_pool_sequences") == pytest.approx(64 * 2 ** 30 / seq(8192), rel=1e-12)


def test_below_the_window_nothing_is_capped(tmp_path):
    ev = _load(tmp_path, "plan p { model = gemma; device = rtx_pro_6000_bw\n"
                         "  use decode_bound { batch = 1 seq; context = 511 token; kv_pool = 1 GiB } }\n")
    assert qval(ev, "p.kv_pool_sequences") == pytest.approx(2 ** 30 / (48 * 4096 * 2 * 512), rel=1e-12)


def test_call_chain_sums_capped_contexts(tmp_path):
    # Gemma: prefill of 1,000 tokens, then 99 decodes reading contexts 1,001 … 1,099 (crossing the window)
    ev = _load(tmp_path, "plan p { model = gemma\n  use call_chain { input = 1000 token; output = 100 token } }\n")
    w = qval(ev, "p.decode_weight_bytes")
    assert qval(ev, "p.prefill_bytes") == pytest.approx(w + gemma_seq(1000), rel=1e-12)
    hand = sum(gemma_seq(c) for c in range(1001, 1100))
    assert qval(ev, "p.decode_bytes") == pytest.approx(99 * w + hand, rel=1e-12)


def test_shared_prefix_caps_each_segment(tmp_path):
    ev = _load(tmp_path, "plan p { model = gemma\n"
                         "  use shared_prefix { prefix = 2000 token; branches = [3000 token, 500 token] } }\n")
    assert qval(ev, "p.shared_state") == gemma_seq(2000) + gemma_seq(3000) + gemma_seq(500)
    assert qval(ev, "p.unshared_state") == gemma_seq(5000) + gemma_seq(2500)


def test_engine_sizes_kv_from_the_same_formula(tmp_path):
    ev = _load(tmp_path, 'import "@catalog/engines.plan"\n'
                         "plan p { model = mistral; device = rtx_pro_6000_bw\n"
                         "  use engine { engine = vllm; tp = 2; max_model_len = 8192 token } }\n")
    # tp 2 ≤ 8 KV heads: each GPU holds half of every layer's heads
    assert qval(ev, "p.kv_bytes_per_token") == 32 * 2048 * 2 / 2

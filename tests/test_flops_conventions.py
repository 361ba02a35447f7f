"""FLOP counting conventions of ``use compute { flops = … }`` (plugins/model/flops.py).

Every expected figure is a hand computation written out below from the convention's cited
formula (not the code's output), or a published figure:

* exact — book ch. 3 §3.4.1: per token 3 × (2 × block matrices + 2·h·V + 4·L·n_q·d_h·(s+1)/2);
* 6nd — Kaplan et al. 2020 §2.1: 6·N;
* palm — Chowdhery et al. 2022 appendix B: 6·N + 12·L·H·Q·T, and its published 46.2 % MFU of
  PaLM 540B (238.3 k tokens/s on 6,144 TPU v4 chips of 275 TFLOP/s, T = 2,048);
* hardware — exact + the recomputed forward (full: the blocks, selective: attention core);
* megatron — NVIDIA/Megatron-LM megatron/training/training.py ``num_floating_point_operations``
  (commit d98e8a64): 6 × (FFN + q/k/v/o projections + h·V) + 6·n_q·d_h·s per layer; for GPT-3
  175B it is the closed form 72·l·h²·(1 + s/(12h) + V/(12·l·h)) per token;
* torchtitan — pytorch/torchtitan torchtitan/models/utils.py (commit b5bcd76c): 6·(N − V·h) +
  6·L·n_q·(2·d_h)·s;
* verl — volcengine/verl verl/utils/flops_counter.py (commit b178a3cd): 6·(L·(3·h·f +
  h·(2·n_q·d_h + 2·n_kv·d_h)) + 2·V·h) + 6·s·d_h·n_q·L (Σ s² over the batch, per token).

Parameter counts N: Qwen3-8B 8,190,735,360 (the count its HF config implies) and Llama-3.1-8B
8,030,261,248 (meta-llama/Llama-3.1-8B), both re-derived by hand in ``_dense_params``.
Tolerance: relative 1e-12 (exact arithmetic in float), or the last printed digit of a
published figure.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from dsl.testing import evaluate_snippet
from tests.conftest import qval

ROOT = Path(__file__).resolve().parent.parent
CATALOG = f'import "{ROOT}/specs/catalog/hardware.plan"\nimport "{ROOT}/specs/catalog/models.plan"\n'
CONVENTIONS = ("exact", "6nd", "palm", "hardware", "megatron", "torchtitan", "verl")

# (name, layers, hidden, ffn, heads, kv_heads, head_dim, vocab)
DENSE = {
    "qwen3_8b": (36, 4096, 12288, 32, 8, 128, 151936),
    "llama31_8b": (32, 4096, 14336, 32, 8, 128, 128256),
}
PUBLISHED_PARAMS = {"qwen3_8b": 8_190_735_360, "llama31_8b": 8_030_261_248}
LLAMA = ("model llama31_8b { layers = 32; hidden = 4096; ffn = 14336; heads = 32; kv_heads = 8;\n"
         "  head_dim = 128; vocab = 128256 }\n")


def _dense_params(name):
    L, h, f, nq, nkv, dh, V = DENSE[name]
    qk_norm = 2 * dh if name == "qwen3_8b" else 0
    layer = 2 * h * nq * dh + 2 * h * nkv * dh + 3 * h * f + 2 * h + qk_norm
    return L * layer + 2 * V * h + h


def _dense_expected(name, conv, s, recompute="none"):
    L, h, f, nq, nkv, dh, V = DENSE[name]
    N = PUBLISHED_PARAMS[name]
    blocks = L * (2 * h * nq * dh + 2 * h * nkv * dh + 3 * h * f)     # matrices a token multiplies
    attn_fwd = 4 * L * nq * dh * (s + 1) / 2                          # QKᵀ + AV over (s+1)/2 keys
    exact = 3 * (2 * blocks + 2 * h * V + attn_fwd)
    if conv == "exact":
        return exact
    if conv == "hardware":
        return exact + {"none": 0, "selective": attn_fwd, "full": 2 * blocks + attn_fwd}[recompute]
    if conv == "6nd":
        return 6 * N
    if conv == "palm":
        return 6 * N + 12 * L * nq * dh * s
    if conv == "torchtitan":
        return 6 * (N - V * h) + 6 * L * nq * (2 * dh) * s
    if conv == "verl":
        mlp_N = h * f * 3
        attn_linear_N = h * (nq * dh + nkv * dh + nkv * dh + nq * dh)
        dense_N = (mlp_N + attn_linear_N) * L + V * h * 2
        return 6 * dense_N + 6 * s * dh * nq * L                     # Σ s² / Σ s = s
    if conv == "megatron":
        per_layer = 3 * h * f + h * (nq * dh + 2 * nkv * dh) + nq * dh * h
        core = 3 * 2 * (nq * dh) / 2 * 2                              # × s² per sequence and layer
        return 6 * (L * per_layer + h * V) + L * core * s
    raise AssertionError(conv)


def _plans(model, s, extra=""):
    text = CATALOG + LLAMA + f"workload w {{ tokens = 1e9 token; seq_len = {s} token; global_batch = 8 seq }}\n"
    for conv in CONVENTIONS:
        text += (f"plan p_{conv.replace('6nd', 'k6nd')} {{ model = {model}; workload = w; device = h100_sxm; "
                 f"gpus = 1; mfu = 40 %; use compute {{ flops = \"{conv}\" }}{extra} }}\n")
    return evaluate_snippet(text)


def _pname(conv):
    return "p_" + conv.replace("6nd", "k6nd")


def test_hand_parameter_counts_match_published():
    for name, n in PUBLISHED_PARAMS.items():
        assert _dense_params(name) == n


@pytest.mark.parametrize("model", sorted(DENSE))
@pytest.mark.parametrize("s", [4096, 8192])
def test_each_convention_on_dense_models(model, s):
    ev = _plans(model, s)
    for conv in CONVENTIONS:
        got = qval(ev, f"{_pname(conv)}.flops_per_token", "FLOP/token")
        assert got == pytest.approx(_dense_expected(model, conv, s), rel=1e-12), conv
        # the step and the run are counted under the same convention
        assert qval(ev, f"{_pname(conv)}.flops_per_step", "FLOP") == pytest.approx(got * s * 8, rel=1e-12)
        # the exact count is always given beside the convention's
        assert qval(ev, f"{_pname(conv)}.model_flops_per_token", "FLOP/token") == pytest.approx(
            _dense_expected(model, "exact", s), rel=1e-12)


@pytest.mark.parametrize("model", sorted(DENSE))
@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_hardware_flops_count_recomputation(model, mode):
    text = CATALOG + LLAMA + "workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq }\n"
    text += (f"plan p {{ model = {model}; workload = w; device = h100_sxm; gpus = 1; mfu = 40 %\n"
             f"  use layout {{ recompute = \"{mode}\" }}\n  use compute {{ flops = \"hardware\" }} }}\n")
    ev = evaluate_snippet(text)
    want = _dense_expected(model, "hardware", 4096, mode)
    assert qval(ev, "p.flops_per_token", "FLOP/token") == pytest.approx(want, rel=1e-12)
    assert qval(ev, "p.hardware_flops_per_token", "FLOP/token") == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("conv", CONVENTIONS)
def test_measured_mfu_under_each_convention(conv):
    """MFU from a measured throughput: F_token(convention) · tokens/s / (gpus · peak);
    HFU from the hardware count.  Llama-3.1-8B at 4,096 tokens, 8 H100 (989.4 TFLOP/s),
    100,000 tokens/s; the same from a measured step time of 8·4,096 / 100,000 s."""
    text = CATALOG + LLAMA + "workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq }\n"
    text += (f"plan a {{ model = llama31_8b; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %\n"
             f"  use compute {{ flops = \"{conv}\"; measured_tokens_per_s = 100000 token/s }} }}\n"
             f"plan b {{ model = llama31_8b; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %\n"
             f"  use compute {{ flops = \"{conv}\"; measured_step_time = 0.32768 s }} }}\n")
    ev = evaluate_snippet(text)
    peak = 8 * 989.4e12
    for p in ("a", "b"):
        assert qval(ev, f"{p}.mfu_measured") == pytest.approx(
            _dense_expected("llama31_8b", conv, 4096) * 1e5 / peak, rel=1e-12)
        assert qval(ev, f"{p}.hfu_measured") == pytest.approx(
            _dense_expected("llama31_8b", "hardware", 4096) * 1e5 / peak, rel=1e-12)


def test_palm_540b_published_mfu():
    """PaLM appendix B: 540B on 6,144 TPU v4 (275 TFLOP/s peak), T = 2,048, 238.3 k tokens/s
    → 46.2 % MFU.  Architecture (PaLM table 1 and §2): 118 layers, d_model 18,432, 48 heads
    of 256, multi-query (one K/V head), SwiGLU FFN 4·d_model, vocabulary 256 k, shared
    input/output embedding, no biases."""
    text = """
    model palm540b { layers = 118; hidden = 18432; ffn = 73728; heads = 48; kv_heads = 1; head_dim = 256
      vocab = 256000; tied_embeddings = true }
    device tpu_v4 { peak_flops = 275 TFLOP/s; memory = 32 GB; mem_bw = 1200 GB/s }
    workload w { tokens = 780e9 token; seq_len = 2048 token; global_batch = 2048 seq }
    plan p { model = palm540b; workload = w; device = tpu_v4; gpus = 6144; mfu = 46 %
      use compute { flops = "palm"; measured_tokens_per_s = 238300 token/s } }
    """
    ev = evaluate_snippet(text)
    assert int(qval(ev, "palm540b.params")) // 10 ** 7 == 54035   # PaLM table 1: 540.35 B (cut to the digit)
    assert qval(ev, "p.mfu_measured", "%") == pytest.approx(46.2, abs=0.05)


def test_megatron_gpt3_closed_form():
    """GPT-3 175B (96 layers, h = 12,288, 96 heads, GELU MLP 4h, vocabulary padded to 51,200,
    s = 2,048): Megatron-LM's count per token is 72·l·h²·(1 + s/(12h) + V/(12·l·h)) —
    Narayanan et al. 2021's 96·l·h²·(1 + s/(6h) + V/(16·l·h)) without the recomputed forward
    (96 → 72) and with the causal halving of the s² term that the current code applies."""
    text = """
    model gpt3 { layers = 96; hidden = 12288; ffn = 49152; heads = 96; vocab = 51200; ffn_matrices = 2 }
    workload w { tokens = 300e9 token; seq_len = 2048 token; global_batch = 1536 seq }
    device a100 { peak_flops = 312 TFLOP/s; memory = 80 GB; mem_bw = 2039 GB/s }
    plan p { model = gpt3; workload = w; device = a100; gpus = 1024; mfu = 40 %; use compute { flops = "megatron" } }
    """
    ev = evaluate_snippet(text)
    l, h, s, V = 96, 12288, 2048, 51200
    want = 72 * l * h * h * (1 + s / (12 * h) + V / (12 * l * h))
    assert qval(ev, "p.flops_per_token", "FLOP/token") == pytest.approx(want, rel=1e-12)


def _deepseek_v3():
    """DeepSeek-V3 (config.json): L = 61 (3 dense-FFN), h = 7,168, FFN 18,432, 256 routed experts
    of 2,048, top-8, 1 shared, 128 heads, MLA r_q = 1,536, r_kv = 512, d_nope 128, d_rope 64,
    d_v 128, vocabulary 129,280, one MTP module."""
    L, Ld, h, f, E, k, ks, fe, nq, rq, rkv, nope, rope, dv, V, mtp = (
        61, 3, 7168, 18432, 256, 8, 1, 2048, 128, 1536, 512, 128, 64, 128, 129280, 1)
    return dict(L=L, Ld=Ld, Lm=L - Ld, h=h, f=f, E=E, k=k, ks=ks, fe=fe, nq=nq, rq=rq, rkv=rkv, nope=nope,
                rope=rope, dv=dv, V=V, mtp=mtp, dqk=nope + rope)


def _deepseek_expected(conv, s):
    d = _deepseek_v3()
    L, Ld, Lm, h, f, E, k, ks, fe, nq, rq, rkv, dr, dv, V, mtp, dqk = (
        d[x] for x in ("L", "Ld", "Lm", "h", "f", "E", "k", "ks", "fe", "nq", "rq", "rkv", "rope", "dv", "V",
                       "mtp", "dqk"))
    # MLA matrices: q_a, q_b, kv_a (latent + rope key), kv_b (k_nope and v per head), o
    attn_mm = h * rq + rq * nq * dqk + h * (rkv + dr) + rkv * nq * (dqk - dr + dv) + nq * dv * h
    norms = rq + rkv + 2 * h                                   # MLA's two norms, the two block norms
    expert = 3 * h * fe
    # the router's per-expert score bias (e_score_correction_bias, E per MoE layer) is a
    # parameter but no matrix: in N-based conventions, not in the matrix count
    active = (Ld * (attn_mm + norms + 3 * h * f) + Lm * (attn_mm + norms + h * E + E + (k + ks) * expert)
              + 2 * V * h + h)
    blocks = Ld * (attn_mm + 3 * h * f) + Lm * (attn_mm + h * E + (k + ks) * expert)
    if conv == "exact":
        return 3 * (2 * blocks + 2 * h * V + L * 2 * nq * (dqk + dv) * (s + 1) / 2)
    if conv == "6nd":
        return 6 * active
    if conv == "palm":
        return 6 * active + 6 * L * nq * (dqk + dv) * s
    if conv == "torchtitan":                                    # head_dims = nope + rope + v
        return 6 * (active - V * h) + 6 * L * nq * (dqk + dv) * s
    if conv == "verl":
        moe_N = ((h * E + h * fe * (k + ks) * 3 + attn_mm) * Lm + (h * f * 3 + attn_mm) * Ld + 2 * V * h)
        return 6 * moe_N + 3 * s * L * (dqk + dv) * nq
    if conv == "megatron":
        q_term = rq * (h + nq * dqk + 1)
        self_attn = q_term + rkv * (h + nq * (dqk - dr + dv) + 1) + h * dr + nq * dv * h
        mlp = h * (f * 3 * Ld + fe * k * 3 * (Lm + mtp) + fe * ks * 3 * (Lm + mtp))
        core = 3 * 2 * (nq * dqk / 2 + nq * dv / 2)
        return (6 * (mlp + (L + mtp) * self_attn + mtp * (3 * h + 2 * h * h) + h * V * (mtp + 1))
                + (L + mtp) * core * s)
    raise AssertionError(conv)


def test_deepseek_active_params_by_hand():
    """The hand count of the parameters a DeepSeek-V3 token uses (the MTP module excluded, as
    in the report's 37 B) is the model's ``active_params``."""
    d = _deepseek_v3()
    h, nq, rq, rkv, dr, dv, dqk = (d[x] for x in ("h", "nq", "rq", "rkv", "rope", "dv", "dqk"))
    attn = h * rq + rq + rq * nq * dqk + h * (rkv + dr) + rkv + rkv * nq * (dqk - dr + dv) + nq * dv * h
    dense = attn + 3 * h * d["f"] + 2 * h
    moe_active = attn + 2 * h + h * d["E"] + d["E"] + (d["k"] + d["ks"]) * 3 * h * d["fe"]   # + score bias
    active = d["Ld"] * dense + d["Lm"] * moe_active + 2 * d["V"] * h + h
    assert active == 37_552_282_624 + 58 * 256
    ev = _plans("deepseek_v3", 4096)
    assert qval(ev, "deepseek_v3.active_params") == active


@pytest.mark.parametrize("conv", [c for c in CONVENTIONS if c != "hardware"])
def test_each_convention_on_deepseek_v3(conv):
    """MoE (router, top-8 of 256 routed, 1 shared, 3 dense-first layers) with MLA (QKᵀ over
    d_qk = 192, AV over d_v = 128 per head) and an MTP module (Megatron counts it)."""
    s = 4096
    ev = _plans("deepseek_v3", s)
    assert qval(ev, f"{_pname(conv)}.flops_per_token", "FLOP/token") == pytest.approx(
        _deepseek_expected(conv, s), rel=1e-12)


def test_qwen3_30b_a3b_moe_conventions():
    """Qwen3-30B-A3B (48 layers, h = 2,048, 128 experts of 768, top-8, no shared, 32 heads of
    128, 4 KV heads, vocabulary 151,936, untied): verl's MoE estimator counts the router and k
    experts; Megatron's no router."""
    s = 4096
    ev = _plans("qwen3_30b_a3b", s)
    L, h, E, k, fe, nq, nkv, dh, V = 48, 2048, 128, 8, 768, 32, 4, 128, 151936
    attn_linear_N = h * (nq * dh + 2 * nkv * dh + nq * dh)
    verl = 6 * ((h * k * fe * 3 + h * E + attn_linear_N) * L + V * h * 2) + 6 * s * dh * nq * L
    megatron = 6 * (h * fe * k * 3 * L + L * attn_linear_N + h * V) + L * 6 * nq * dh * s
    exact = 3 * (2 * ((h * k * fe * 3 + h * E + attn_linear_N) * L + V * h) + 4 * L * nq * dh * (s + 1) / 2)
    for conv, want in (("verl", verl), ("megatron", megatron), ("exact", exact)):
        assert qval(ev, f"{_pname(conv)}.flops_per_token", "FLOP/token") == pytest.approx(want, rel=1e-12), conv


def test_explain_names_the_convention():
    """`plan explain` on a counted quantity says which convention it uses and cites it."""
    from dsl.present import explain
    ev = _plans("qwen3_8b", 4096, "")
    for conv in CONVENTIONS:
        t = explain.tree(ev.ws if hasattr(ev, "ws") else ev, f"{_pname(conv)}.flops_per_token")
        assert f'convention "{conv}"' in t["doc"], t["doc"]
        assert t["references"]
    t = explain.tree(ev.ws if hasattr(ev, "ws") else ev, "p_megatron.flops_per_token")
    assert any("Megatron-LM" in r and "d98e8a64" in r for r in t["references"])


def test_two_measured_throughputs_conflict():
    from dsl.syntax.diagnostics import PlanError
    text = CATALOG + "workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq }\n"
    text += ("plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 1; mfu = 40 %\n"
             "  use compute { measured_tokens_per_s = 1000 token/s; measured_step_time = 1 s } }\n")
    with pytest.raises(PlanError) as ei:
        evaluate_snippet(text)
    d = ei.value.diagnostics[0]
    assert d.code == "conflict" and "measured" in d.summary and d.hint


def test_unknown_convention_is_a_located_error():
    from dsl.syntax.diagnostics import PlanError
    text = CATALOG + "workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq }\n"
    text += ("plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 1; mfu = 40 %\n"
             "  use compute { flops = \"mfu\" } }\n")
    with pytest.raises(PlanError) as ei:
        evaluate_snippet(text)
    d = ei.value.diagnostics[0]
    assert "flops" in d.summary and d.span is not None

"""MoE and MLA models from Hugging Face configs (issue 7 item 1; book ch. 3 §3.6.2).

Expected counts are computed by hand in this file from the published architectures (the
formulas of the Qwen3-MoE and DeepSeek-V3 modelling code), and compared with the published
sizes: Qwen3 report 30.5 B / 3.3 B and 235 B / 22 B, DeepSeek-V3 report 671 B / 37 B (MTP
module excluded).  Totals match within 1 %; every published figure is our count cut to its
last printed digit (3.353 B -> "3.3 B", 37.55 B -> "37 B": both active counts are 1.6 % above
the printed number, within it only when the digit is read as truncated).
"""
from __future__ import annotations

import math
import shutil

import pytest

import dsl
from conftest import REPO_ROOT
from dsl.syntax.diagnostics import PlanError

CATALOG = REPO_ROOT / "specs" / "catalog" / "models.plan"


def _load_error(path):
    """The first diagnostic of loading ``path``, which must fail with a PlanError."""
    with pytest.raises(PlanError) as ei:
        dsl.load(path)
    return ei.value.diagnostics[0]


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CATALOG)


def qwen_moe(L, h, nq, nkv, dh, E, k, fe, V):
    attn = 2 * h * nq * dh + 2 * h * nkv * dh + 2 * dh          # q, o, k, v, q/k norms
    common = attn + 2 * h + h * E                               # two RMSNorms, router
    total = L * (common + E * 3 * h * fe) + 2 * V * h + h
    active = L * (common + k * 3 * h * fe) + 2 * V * h + h
    return total, active


def deepseek_v3():
    h, nq, rq, rkv, dn, dr, dv, V = 7168, 128, 1536, 512, 128, 64, 128, 129280
    attn = (h * rq + rq + rq * nq * (dn + dr)                   # q_a, q_a_norm, q_b
            + h * (rkv + dr) + rkv + rkv * nq * (dn + dv)       # kv_a (with rope), kv_a_norm, kv_b
            + nq * dv * h)                                      # o
    dense = attn + 2 * h + 3 * h * 18432
    expert = 3 * h * 2048
    router = 256 * h + 256                                      # gate weight, e_score_correction_bias
    moe = attn + 2 * h + router + (256 + 1) * expert
    moe_active = attn + 2 * h + router + (8 + 1) * expert
    total = 3 * dense + 58 * moe + 2 * V * h + h
    active = 3 * dense + 58 * moe_active + 2 * V * h + h
    return total, active, moe


CASES = [
    ("qwen3_30b_a3b", qwen_moe(48, 2048, 32, 4, 128, 128, 8, 768, 151936), 30.5e9, 3.3e9, 1),
    ("qwen3_235b_a22b", qwen_moe(94, 4096, 64, 4, 128, 128, 8, 1536, 151936), 235e9, 22e9, 0),
    ("deepseek_v3", deepseek_v3()[:2], 671e9, 37e9, 0),
]


@pytest.mark.parametrize("name, hand, pub_total, pub_active, digits", CASES, ids=[c[0] for c in CASES])
def test_total_and_active_params(ws, name, hand, pub_total, pub_active, digits):
    total, active = (int(ws.base_value(f"{name}.{f}")) for f in ("params", "active_params"))
    assert (total, active) == hand
    assert total == pytest.approx(pub_total, rel=0.01)
    # the published figures are the counts cut to their printed digit (in billions)
    cut = lambda x: math.floor(x / 1e9 * 10 ** digits) / 10 ** digits  # noqa: E731
    assert cut(total) == pytest.approx(pub_total / 1e9) and cut(active) == pytest.approx(pub_active / 1e9)


def test_qwen3_235b_active_within_one_percent(ws):
    assert int(ws.base_value("qwen3_235b_a22b.active_params")) == pytest.approx(22e9, rel=0.01)


def test_deepseek_mtp_is_excluded_and_counted_apart(ws):
    _, _, moe = deepseek_v3()
    h = 7168
    mtp = moe + 2 * h + 2 * h * h + h        # MoE block, enorm + hnorm, eh_proj, final norm
    assert int(ws.base_value("deepseek_v3.mtp_params")) == mtp
    # the report's 671 B is the main model alone
    assert int(ws.base_value("deepseek_v3.params")) + mtp > 680e9


def test_dense_models_unchanged(ws):
    assert int(ws.base_value("qwen3_8b.params")) == 8_190_735_360
    assert ws.base_value("qwen3_8b.active_params") == ws.base_value("qwen3_8b.params")
    assert int(ws.base_value("qwen3_8b.kv_cache_width")) == 2 * 8 * 128


def test_expert_flops_formula(ws):
    # 18·n_L·h·f·(k_routed + k_shared) per token (ch. 3 §3.6.2)
    assert int(ws.base_value("deepseek_v3.expert_flops_per_token")) == 18 * 58 * 7168 * 2048 * (8 + 1)
    assert int(ws.base_value("qwen3_30b_a3b.expert_flops_per_token")) == 18 * 48 * 2048 * 768 * 8


def test_forward_flops_per_token_counts_active_matrices(ws):
    L, h, V = 48, 2048, 151936
    attn = 2 * h * 32 * 128 + 2 * h * 4 * 128
    per_layer = attn + h * 128 + 8 * 3 * h * 768
    assert int(ws.base_value("qwen3_30b_a3b.flops_per_token_forward")) == 2 * (L * per_layer + V * h)


def test_mla_kv_cache_width(ws):
    assert int(ws.base_value("deepseek_v3.kv_cache_width")) == 512 + 64


def test_expert_ffn_is_required_with_experts(tmp_path):
    p = tmp_path / "m.plan"
    p.write_text("model m { layers = 2; hidden = 64; ffn = 128; heads = 4; vocab = 100; experts = 8;"
                 " experts_per_token = 2 }\n")
    d = _load_error(p)
    assert d.code == "missing-parameter" and "expert_ffn" in d.summary


def test_more_experts_per_token_than_experts_is_an_error_at_the_model(tmp_path):
    """Top-k routing picks k distinct experts, so k <= E; k = 16 of E = 8 used to be priced
    (active parameters above the total)."""
    p = tmp_path / "m.plan"
    p.write_text("model m { layers = 2; hidden = 64; ffn = 128; heads = 4; vocab = 100; experts = 8;\n"
                 "  experts_per_token = 16; expert_ffn = 32 }\n")
    d = _load_error(p)
    assert d.code == "out-of-range" and "16 experts per token out of 8" in d.summary
    assert (d.span.line, d.span.column) == (2, 23)                # the value 16
    assert d.related[0][1].line == 1 and "experts_per_token" in d.hint
    p.write_text(p.read_text().replace("= 16", "= 8"))            # k = E is a valid (dense-like) routing
    dsl.load(p)


def test_interleaved_moe_config_is_rejected(tmp_path):
    import json
    cfg = json.loads((REPO_ROOT / "specs/catalog/hf/Qwen3-30B-A3B.json").read_text())
    cfg["decoder_sparse_step"] = 2
    (tmp_path / "moe.json").write_text(json.dumps(cfg))
    (tmp_path / "m.plan").write_text('model m from "moe.json"\n')
    with pytest.raises(PlanError) as ei:
        dsl.load(tmp_path / "m.plan")
    d = ei.value.diagnostics[0]
    assert d.code == "bad-config" and "decoder_sparse_step" in d.summary


def test_moe_model_by_fields_matches_config(tmp_path):
    shutil.copy(REPO_ROOT / "specs/catalog/hf/Qwen3-30B-A3B.json", tmp_path / "c.json")
    (tmp_path / "m.plan").write_text(
        'model a from "c.json"\n'
        "model b { layers = 48; hidden = 2048; ffn = 6144; heads = 32; kv_heads = 4; head_dim = 128;\n"
        "  vocab = 151936; qk_norm = true; experts = 128; experts_per_token = 8; expert_ffn = 768 }\n")
    w = dsl.load(tmp_path / "m.plan")
    assert w.base_value("a.params") == w.base_value("b.params") and w.base_value("a.active_params") == w.base_value("b.active_params")


def test_compute_prices_moe_models(tmp_path):
    """MoE models are priced, never refused: per token 3 × (active matrix FLOPs + causal
    attention).  Qwen3-30B-A3B (config.json): 48 layers, 32 query heads of 128; attention
    forward per token 2·2·32·128·(s+1)/2 per layer at s = 4,096 (hand computation)."""
    (tmp_path / "t.plan").write_text(
        'import "@catalog/models.plan"\nimport "@catalog/hardware.plan"\n'
        "workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 8 seq }\n"
        "plan p { model = qwen3_30b_a3b; workload = w; device = rtx4090; gpus = 1; mfu = 40 %\n"
        "  use compute {} }\n")
    ev = dsl.load(tmp_path / "t.plan")
    fwd = float(ev.base_value("qwen3_30b_a3b.flops_per_token_forward"))
    attn = 2 * 2 * 32 * 128 * 4097 / 2 * 48
    assert float(ev.base_value("p.flops_per_token")) == pytest.approx(3 * (fwd + attn), rel=1e-12)
    # the step is priced: compute = FLOPs of the step / (peak · mfu) on one GPU
    assert float(ev.base_value("p.compute_time")) == pytest.approx(3 * (fwd + attn) * 4096 * 8 / (165.2e12 * 0.4),
                                                                rel=1e-12)



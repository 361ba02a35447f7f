"""The roofline step model (`use layout { efficiency = "roofline" }`): the GEMM efficiency
curve, the per-layer operation table, the sympy plan and the numpy search agreeing, the
simple mfu mode untouched, and a search that never picks a layout that does not fit.

Hand numbers: the GEMM curve η(F) = η_max·F/(F + F_half) and the roofline
max(F/(peak·η), bytes/(mem_bw·η_mem)) worked out below; GPT-3 175B (Brown et al. 2020, Table
2.1: L = 96, h = 12,288, 96 heads of 128, GELU FFN 4h, vocabulary 50,257, s = 2,048) at
tp = 8: the matrix shapes of Megatron-LM's column/row-parallel split (Shoeybi et al. 2019,
§3), and the training FLOPs of Narayanan et al. 2021 (appendix: 72·B·s·L·h²·(1 + s/(6h) +
V/(12·L·h)) without recomputation) with the attention term halved for the causal pairs
s(s+1)/2 — per sequence 3·[L·(24·h²·s + 2·h·s·(s+1)) + 2·h·V·s].
"""
from __future__ import annotations

import numpy as np
import pytest

import dsl
from dsl.syntax.diagnostics import PlanError
from plugins.training import layout_model as lm
from plugins.training import layout_search as search

from conftest import CASES, qval

NP = lm.ops("numpy")
A100 = {"peak": 312e12, "mem_bw": 2039e9, "eta_mm": 0.9, "F_half": 1e9, "eta_mem": 0.8}


def test_eta_curve_by_hand():
    # η(F_half) = η_max / 2; η(3·F_half) = 3/4·η_max; η → η_max for large F
    assert lm.eta_matmul(1e9, A100) == pytest.approx(0.45, rel=1e-12)
    assert lm.eta_matmul(3e9, A100) == pytest.approx(0.675, rel=1e-12)
    assert lm.eta_matmul(1e15, A100) == pytest.approx(0.9 * 1e15 / (1e15 + 1e9), rel=1e-12)


def test_roofline_of_one_gemm_by_hand():
    # compute-bound: 4096³, F = 2·4096³ = 137,438,953,472 FLOP; η = 0.9·F/(F + 1e9) =
    # 0.89350… ; time = F/(312e12·η) = F/(312e12·0.9) × (F + 1e9)/F = 4.89455e-4 s × 1.007276
    # = 4.93016e-4 s (its bytes, 3·2·4096² = 100.7 MB, take 61.7 µs: compute-bound)
    F = 137_438_953_472
    eta = 0.9 * F / (F + 1e9)
    assert lm.gemm_time(4096, 4096, 4096, A100, NP) == pytest.approx(F / (312e12 * eta), rel=1e-12)
    assert F / (312e12 * eta) == pytest.approx(4.93016e-4, rel=1e-5)
    # memory-bound: a GEMV [1, 8192]·[8192, 8192]: F = 2·8192² = 134,217,728; η = 0.9·F/(F + 1e9)
    # = 0.10650; compute 4.04 µs; bytes 2·(8192 + 8192² + 8192) = 134,250,496 at 2039e9·0.8:
    # 82.30 µs — the memory term wins
    t = lm.gemm_time(1, 8192, 8192, A100, NP)
    assert t == pytest.approx(134_250_496 / (2039e9 * 0.8), rel=1e-12)
    assert t == pytest.approx(82.30e-6, rel=1e-3)


GPT3 = {"L": 96, "h": 12288, "a": 96, "kv": 96, "dh": 128, "dv": 128, "V": 50257, "s": 2048, "act_bytes": 2,
        "flash": 1, "dropout": 0, "logits": 1, "mats": 2, "qkv_w": 3 * 12288, "o_w": 12288, "f_dense": 49152,
        "fe": 0, "ks": 0}
TP8 = {"t": 8, "c": 1, "b": 1, "sp": 1, "e": 1}


def test_gpt3_layer_table_at_tp8_by_hand():
    gemms, streams = lm.layer_ops(GPT3, TP8, NP)
    shapes = {g[0]: g[1:5] for g in gemms}
    # QKV column-parallel: N = 3h/t = 4608; attention output row-parallel: K = h/t = 1536;
    # MLP up N = 4h/t = 6144 (one matrix: GELU), down K = 6144; per head (96/8 = 12 heads)
    # QKᵀ over (s+1)/2 = 1024.5 keys per query on average (causal), AV the same
    assert shapes == {"qkv": (2048, 4608, 12288, 1), "attention_out": (2048, 12288, 1536, 1),
                      "mlp_up": (2048, 6144, 12288, 1), "mlp_down": (2048, 12288, 6144, 1),
                      "attention_qk": (2048, 1024.5, 128, 12), "attention_av": (2048, 128, 1024.5, 12)}
    head, _ = lm.layer_ops(GPT3, TP8, NP, head=True)
    assert head[0][:5] == ("lm_head", 2048, 50257 / 8, 12288, 1)
    # SP: the two norms read and write T/t·h elements of 2 bytes: 2·2·2·256·12288
    assert dict((n, b) for n, b, _ in streams)["norms"] == 2 * 2 * 2 * 256 * 12288


def test_gpt3_table_flops_sum_to_the_training_count():
    h, L, V, s = 12288, 96, 50257, 2048
    per_seq = 3 * (L * (24 * h * h * s + 2 * h * s * (s + 1)) + 2 * h * V * s)
    fwd = sum(lm.op_flops(GPT3, TP8, NP).values())
    assert 3 * fwd * 8 == pytest.approx(per_seq, rel=1e-12)       # one sequence, 8 TP ranks
    # by hand: 96·(3,623,878,656·2048 + 2·12288·2048·2049) + 2·12288·50257·2048 = 7.24913e14
    # forward, ×3 = 2.17474e15 — 6·N·s for N = 174.6 B (2.14553e15) plus 3·96·1.03131e11 of
    # causal attention (2.970e13)
    assert per_seq == pytest.approx(2.17474e15, rel=1e-5)


ROOF = """
import "%s"
plan roof extends tp8_sp { use layout { efficiency = "roofline" } }
plan roof_pp extends tp8_pp8 { use layout { efficiency = "roofline" } }
plan roof_full extends tp8_full { use layout { efficiency = "roofline"; attention = "flash" } }
plan roof_cp extends tp8_cp2 { use layout { efficiency = "roofline"; zero = 3 } }
""" % (CASES / "layout-activations-gpt3.plan")


@pytest.fixture(scope="module")
def roof(tmp_path_factory):
    f = tmp_path_factory.mktemp("roof") / "roof.plan"
    f.write_text(ROOF, encoding="utf-8")
    return dsl.load(f)


@pytest.mark.parametrize("plan", ["roof", "roof_pp", "roof_full", "roof_cp"])
def test_numpy_search_agrees_with_the_sympy_plan(roof, plan):
    res = search.run(roof, plan)
    assert len(res) == 1 and res.meta["efficiency"] == "roofline"
    assert res.columns["step"][0] == pytest.approx(qval(roof, f"{plan}.step_time", "s"), rel=1e-9)
    assert res.columns["memory"][0] == pytest.approx(qval(roof, f"{plan}.runtime_memory", "B"), rel=1e-9)
    assert res.columns["compute"][0] == pytest.approx(qval(roof, f"{plan}.compute_time", "s"), rel=1e-9)


def test_roofline_plan_reports_its_mode_and_achieved_mfu(roof):
    gpus, peak = 1536, 312e12
    flops = qval(roof, "roof.flops_per_step")
    step = qval(roof, "roof.step_time", "s")
    assert qval(roof, "roof.mfu_achieved") == pytest.approx(flops / (step * gpus * peak), rel=1e-9)
    assert qval(roof, "roof.compute_mfu") > qval(roof, "roof.mfu_achieved")
    doc = roof.nodes[roof.lookup("roof.compute_time")].doc
    assert "roofline" in doc


def test_recomputation_repeats_the_forward_ops():
    """Full recomputation adds the layers' forward (not the LM head); selective the attention
    core's forward; the compute term itself does not change."""
    K = dict(GPT3, **A100, B=1536.0, N=174.6e9, N_exp=0.0, bytes_W=2.0, bytes_G=2.0, bytes_M=4.0, bytes_O=8.0)
    X = dict(TP8, p=1, d=192.0)
    out = {}
    for r in (0, 1, 2):
        out[r] = lm.roofline(K, dict(X, r=r), NP, m=8.0, P_opt=1e8)
    assert out[0]["compute"] == out[2]["compute"] == out[1]["compute"]
    fwd_layer, _ = lm.price_ops(lm.layer_ops(K, X, NP), K, NP)
    attn, _ = lm.price_ops(lm.layer_ops(K, X, NP), K, NP, parts=("attention",))
    assert out[2]["recompute"] == pytest.approx(8 * 96 * fwd_layer, rel=1e-12)
    assert out[1]["recompute"] == pytest.approx(8 * 96 * attn, rel=1e-12)
    assert out[0]["recompute"] == 0


def test_mfu_mode_is_the_default_when_the_plan_states_mfu(write_plan):
    ws = dsl.load(write_plan("""
import "@catalog/hardware.plan"
model m { layers = 2; hidden = 1024; ffn = 4096; heads = 8; vocab = 1000 }
workload w { tokens = 1e9 token; seq_len = 1024 token; global_batch = 8 seq }
plan a { model = m; workload = w; device = a100_sxm_80gb; gpus = 1; mfu = 40 %; use layout {} }
plan b extends a { use layout { efficiency = "roofline" } }
"""))
    F = qval(ws, "a.flops_per_step")
    assert qval(ws, "a.compute_time", "s") == pytest.approx(F / (312e12 * 0.40), rel=1e-12)
    assert qval(ws, "a.compute_mfu") == pytest.approx(0.40, rel=1e-12)
    assert qval(ws, "b.compute_time", "s") != pytest.approx(qval(ws, "a.compute_time", "s"), rel=1e-3)


def test_roofline_without_mfu_and_mfu_mode_without_it(write_plan):
    base = """
import "@catalog/hardware.plan"
model m { layers = 2; hidden = 1024; ffn = 4096; heads = 8; vocab = 1000 }
workload w { tokens = 1e9 token; seq_len = 1024 token; global_batch = 8 seq }
plan a { model = m; workload = w; device = a100_sxm_80gb; gpus = 1; use layout { %s } }
"""
    ws = dsl.load(write_plan(base % ""))
    assert qval(ws, "a.compute_time", "s") > 0 and ws.base_value(ws.lookup("a.mfu_achieved")) is not None
    with pytest.raises(PlanError) as e:
        dsl.load(write_plan(base % 'efficiency = "mfu"'))
    assert "missing-parameter" in str(e.value) and "mfu" in str(e.value)


# ---------------------------------------------------------------- the search never picks what does not fit
MTNLG = CASES / "layout-mt-nlg-530b.plan"


@pytest.fixture(scope="module")
def mtnlg():
    return dsl.load(MTNLG)


def test_mt_nlg_roofline_search_best_fits_the_device(mtnlg):
    res = search.run(mtnlg, "published_roofline")
    c = res.columns
    # A100 "80 GB" (catalog): 80 GiB of HBM, the bound a usable may claim (plugins.training.memory.device_capacity)
    device = 80 * 2 ** 30
    limit = min(76 * 2 ** 30, device)
    assert res.best is not None and c["memory"][res.best] <= limit
    assert (c["memory"][c["valid"]] <= limit).all()
    # the mfu-mode pick (tp 8 · pp 7, no recomputation, SP, ZeRO-1, micro-batch 1) keeps the s×s
    # scores under the attention MT-NLG ran and no longer fits
    sel = ((c["t"] == 8) & (c["p"] == 7) & (c["r"] == 0) & (c["sp"] == 1) & (c["z"] == 1) & (c["b"] == 1)
           & (c["v"] == 1))
    assert sel.sum() == 1 and c["reason"][sel][0] == "runtime memory per GPU exceeds the usable memory"
    assert c["memory"][sel][0] > limit


def test_usable_memory_above_the_device_never_admits_a_layout(write_plan):
    """A plan that states more usable memory than its device has: the search caps it at the
    device's memory — its nominal "24 GB" read as GiB, the bound `use memory` warns at
    (plugins.training.memory.device_capacity) — and a NaN memory is never a fit."""
    text = """
import "@catalog/hardware.plan"
model m { layers = 8; hidden = 4096; ffn = 16384; heads = 32; vocab = 32000 }
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq }
plan p {
  model = m; workload = w; device = rtx4090; gpus = 8; mfu = 40 %%
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = %s }
  use layout { link = pcie4_x16 }
  use layout_search { tp = [1, 2, 4, 8]; zero = [0, 1, 2, 3]; recompute = ["none"]; sequence_parallel = ["off"] }
}
"""
    wide = search.run(dsl.load(write_plan(text % "1000 GB")), "p")
    device = 24 * 2 ** 30
    c = wide.columns
    assert (c["memory"][c["valid"]] <= device).all()
    assert ((c["memory"] > device) & (c["reason"] == "")).sum() == 0
    over = c["memory"] > device
    assert over.any() and (c["reason"][over] != "").all()
    K, meta = search.constants(dsl.load(write_plan(text % "1000 GB")), "p")
    X = search.grid(search.knob_lists(dsl.load(write_plan(text % "1000 GB")), "p"), 8)
    cols = search.evaluate_chunk(K, X, dict(meta, capacity=float("nan")))
    assert (cols["fail"] >= 0).all()                        # nothing fits a NaN limit


def test_mt_nlg_roofline_best_evaluates_to_its_search_row(tmp_path, mtnlg):
    res = search.run(mtnlg, "published_roofline")
    out = tmp_path / "best.plan"
    out.write_text(search.emit_plan([res], MTNLG, out), encoding="utf-8")
    ev = dsl.load(out)
    row = res.row(res.best)
    assert qval(ev, "published_roofline_best.step_time", "s") == pytest.approx(row["step_s"], rel=1e-9)
    assert qval(ev, "published_roofline_best.runtime_memory", "GiB") == pytest.approx(row["memory_gib"], rel=1e-9)
    assert ev.requirement("published_roofline_best", "fits_memory")["ok"]


MOE = """
import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq }
plan p {
  model = %s; workload = w; device = h100_sxm; gpus = 16; gpus_per_host = 8
  use memory { usable = 80 GB }
  use layout { ep = 8; zero = 1; link = nvlink4; nic = nic_400g; nics_per_host = 8; routing_imbalance = 1.5 }
}
"""


@pytest.mark.parametrize("model", ["qwen3_30b_a3b", "deepseek_v3"])
def test_moe_roofline_searches_to_its_plan_value(write_plan, model):
    """MoE (routed experts with their token counts, the imbalance on their time) and MLA
    (DeepSeek-V3's projections folded into one GEMM of the same FLOPs), sympy vs numpy."""
    ws = dsl.load(write_plan(MOE % model))
    res = search.run(ws, "p")
    assert res.meta["efficiency"] == "roofline"
    assert res.columns["step"][0] == pytest.approx(qval(ws, "p.step_time", "s"), rel=1e-9)
    assert res.columns["imbalance"][0] == pytest.approx(qval(ws, "p.imbalance_time", "s"), rel=1e-9)
    assert res.columns["imbalance"][0] > 0


def test_mfu_written_beside_roofline_is_warned_unless_inherited():
    import dsl
    base = """
import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 256 seq }
plan a { model = qwen3_8b; device = h100_sxm; gpus = 8; mfu = 40 %; workload = w
  use layout { link = nvlink4; efficiency = "roofline" }
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" } }
"""
    ws = dsl.load("w.plan", text=base)
    assert any(d.code == "unused" and "does not read that mfu" in d.summary for d in ws.warnings)
    inherited = base.replace('mfu = 40 %; ', '').replace('efficiency = "roofline"', 'efficiency = "mfu"') \
        .replace("plan a {", "plan m { mfu = 40 % }\nplan a extends m {") + \
        'plan r extends a { use layout { efficiency = "roofline" } }\n'
    ws = dsl.load("w.plan", text=inherited)
    assert not any("does not read that mfu" in d.summary for d in ws.warnings)

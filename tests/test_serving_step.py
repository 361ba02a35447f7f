"""The step time of an engine iteration (plugins/serving/serving_step.py) and `use serving_step`.

Hand computations use a toy decoder whose sizes keep the arithmetic short; the comparison
points come from NVIDIA AIConfigurator 0.12 (specs/data/serving/aiconfigurator-0.12-qwen3-8b-h100.csv,
its README states the command and database).
"""
from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import dsl
from dsl.syntax.diagnostics import PlanError
from plugins.serving import serving_step as st
from plugins.training.layout_model import ops

ROOT = Path(__file__).resolve().parents[1]
AIC_CSV = ROOT / "specs" / "data" / "serving" / "aiconfigurator-0.12-qwen3-8b-h100.csv"

# A toy decoder: 2 layers, h = 4, SwiGLU FFN 8, 2 query heads and 1 KV head of width 2, V = 16.
# Matrices per layer: q,o 2·4·2·2 = 32, k,v 2·4·1·2 = 16, FFN 3·4·8 = 96 → 144; both layers 288.
# A device of 1,000 FLOP/s and 100 B/s at full efficiency, F_half = 0, no kernel overhead.
TOY = """
device d { peak_flops = 1000 FLOP/s; mem_bw = 100 B/s; matmul_efficiency = 100 %
           matmul_half_flops = 0 FLOP; mem_efficiency = 100 % }
model toy { layers = 2; hidden = 4; ffn = 8; heads = 2; kv_heads = 1; head_dim = 2; vocab = 16 }
plan p { model = toy; device = d
  use serving_step { batch = 2 seq; context = 5 token; prefill = 16 token
                     attention_efficiency = 100 %; kernel_overhead = 0 s } }
"""


@pytest.fixture(scope="module")
def toy():
    ws = dsl.load("toy.plan", text=TOY)
    return ws, st.step_constants(ws, "p")


def test_toy_constants_by_hand(toy):
    _, c = toy
    assert c["dense_params"] == 288 and c["dense_bytes"] == 576          # bf16: 2 B per weight
    assert c["head_flops"] == 2 * 4 * 16 and c["head_bytes"] == 2 * 16 * 4
    # QKᵀ and AV: 2·n_q·(d + d) per pair and layer = 2·2·4 = 16, two layers
    assert c["attn_per_pair"] == 32
    # K and V of 1 head of 2 per layer, 2 layers, 2 B: 16 B per token
    assert c["kv_bytes_per_token"] == 16
    # elementwise: per layer 2·4·h + 3·f = 32 + 24 = 56 elements of 2 B, two layers
    assert c["elementwise_bytes"] == 224
    # kernels: 10 per layer (no q/k norm) and 4 per step
    assert c["kernels"] == 24


def test_decode_step_by_hand(toy):
    _, c = toy
    # 2 sequences decoding, 10 cached tokens in all:
    #   dense: FLOPs 2·2·288 = 1,152 → 1.152 s; weights 576 B / 100 B/s = 5.76 s → 5.76 s
    #   LM head: 2 positions · 128 = 256 FLOP → 0.256 s; 128 B → 1.28 s → 1.28 s
    #   attention: (10 + 2) pairs · 32 = 384 FLOP → 0.384 s; 12 tokens · 16 B = 192 B → 1.92 s
    #   elementwise: 2 tokens · 224 B = 448 B → 4.48 s
    assert st.step_time(c, 0, 2, 10) == pytest.approx(5.76 + 1.28 + 1.92 + 4.48, rel=1e-12)
    kind, comp, mem = st.bound(c, 0, 2, 10)
    # FLOP side 1.152 + 0.256 + 0.384 s, memory side 5.76 + 1.28 + 1.92 + 4.48 s
    assert kind == "memory"
    assert comp == pytest.approx(1.792, rel=1e-12) and mem == pytest.approx(13.44, rel=1e-12)


def test_prefill_by_hand(toy):
    _, c = toy
    # one prefill of 16 tokens:
    #   dense: 2·16·288 = 9,216 FLOP → 9.216 s (weights 5.76 s) → compute-bound
    #   LM head (one position): 0.128 s of FLOPs, 1.28 s of weights → 1.28 s
    #   attention: 16·17/2 = 136 pairs · 32 = 4,352 FLOP → 4.352 s; KV read and written
    #   2·16·16 B = 512 B → 5.12 s; elementwise 16·224 = 3,584 B → 35.84 s
    assert st.step_time(c, 16, 0, 0) == pytest.approx(9.216 + 1.28 + 5.12 + 35.84, rel=1e-12)
    # after a cached prefix of 4 tokens: pairs (20·21 − 4·5)/2 = 200 → 6.4 s of FLOPs,
    # KV (4 + 32)·16 B = 576 B → 5.76 s; the prefill attention becomes compute-bound
    assert st.step_time(c, 16, 0, 0, prefill_prefix=4) == pytest.approx(9.216 + 1.28 + 6.4 + 35.84, rel=1e-12)
    # two sequences of 8 in one step: 2·36 = 72 pairs → 2.304 s, KV 5.12 s; two logits rows
    # (256 FLOP, 1.28 s of weights)
    assert st.step_time(c, 16, 0, 0, prefill_seqs=2) == pytest.approx(9.216 + 1.28 + 5.12 + 35.84, rel=1e-12)


def test_chunked_prefill_mixes_prefill_and_decode(toy):
    _, c = toy
    # a chunk of 8 tokens with 2 decodes (10 cached): T = 10 tokens through the matrices
    #   dense 2·10·288 = 5,760 FLOP → 5.76 s = the weight read 5.76 s
    #   LM head 3 positions: 384 FLOP → 0.384 s vs 1.28 s;  prefill attention 36 pairs → 1.152 s
    #   vs KV 16·16 B → 2.56 s;  decode attention 1.92 s;  elementwise 10·224 B → 22.4 s
    assert st.step_time(c, 8, 2, 10) == pytest.approx(5.76 + 1.28 + 2.56 + 1.92 + 22.4, rel=1e-12)
    # one mixed step is cheaper than the prefill step plus the decode step (one weight read)
    assert st.step_time(c, 8, 2, 10) < st.step_time(c, 8, 0, 0) + st.step_time(c, 0, 2, 10)


def test_crossover_batch_by_hand(toy):
    _, c = toy
    # dense FLOP time 2·b·288/1000 equals the weight read 576/100 at b = 10
    assert st.crossover_batch(c) == pytest.approx(10, rel=1e-12)
    dense = lambda b: st.step_parts(c, 0, b, 0, ops("numpy"))["dense"]    # noqa: E731
    t9, c9, m9 = dense(9)
    t11, c11, m11 = dense(11)
    assert c9 < m9 and c11 > m11 and t11 == c11 and t9 == m9


def test_small_gemms_lose_efficiency(toy):
    _, c = toy
    c2 = dict(c, F_half=100, eta_mm=0.5)
    # 8 GEMMs (4 per layer) of 9,216/8 = 1,152 FLOP each at η = 0.5·1,152/1,252:
    # 9,216/(1,000·η) = (9,216 + 8·100)/(1,000·0.5) = 20.032 s
    dense = st.step_parts(c2, 16, 0, 0, ops("numpy"))["dense"]
    assert dense[1] == pytest.approx(20.032, rel=1e-12)
    assert dense[1] == pytest.approx(9216 / (1000 * st.matmul_efficiency(c2, 9216 / 8)), rel=1e-12)


def test_an_empty_step_takes_no_time(toy):
    _, c = toy
    assert st.step_time(c, 0, 0, 0) == 0
    t = st.step_time(c, np.array([0.0, 16.0]), np.array([0.0, 0.0]), np.array([0.0, 0.0]))
    assert t[0] == 0 and t[1] == pytest.approx(51.456, rel=1e-12)


def test_kernel_and_host_overhead(toy):
    _, c = toy
    c2 = dict(c, kernel_overhead=0.01, host_overhead=0.5)
    assert st.step_time(c2, 0, 2, 10) - st.step_time(c, 0, 2, 10) == pytest.approx(24 * 0.01 + 0.5, rel=1e-12)


def test_expected_distinct_experts_by_hand():
    # one token hits its k experts; two tokens: E·(1 − (1 − k/E)²) = 128·(1 − (15/16)²) = 15.5
    assert st.distinct_experts(128, 8, 1) == pytest.approx(8, rel=1e-12)
    assert st.distinct_experts(128, 8, 2) == pytest.approx(15.5, rel=1e-12)
    # many tokens hit every expert
    assert st.distinct_experts(128, 8, 10_000) == pytest.approx(128, rel=1e-12)
    # top-2 of 8 at 3 tokens: 8·(1 − 0.75³) = 8·0.578125 = 4.625
    assert st.distinct_experts(8, 2, 3) == pytest.approx(4.625, rel=1e-12)


def test_skewed_routing_by_hand():
    """Zipf popularity p_i ∝ i^(−s).  E = 4, k = 1, s = 1: p = (12, 6, 4, 3)/25, so two tokens hit
    Σ 1 − (1 − p_i)² = 4 − (13² + 19² + 21² + 22²)/25² = 4 − 1,455/625 = 1.672 experts (uniform:
    4·(1 − (3/4)²) = 1.75).  E = 4, k = 2, s = 2: p ∝ (1, 1/4, 1/9, 1/16); 2·p_1 = 1.40 > 1, so
    expert 1 is in every token's pair (q_1 = 1) and the other slot goes in proportion to
    (1/4, 1/9, 1/16) = (36, 16, 9)/144: q = (1, 36/61, 16/61, 9/61), Σ q = 2."""
    assert st.distinct_experts(4, 1, 2, 1.0) == pytest.approx(1.672, rel=1e-12)
    assert st.distinct_experts(4, 1, 2, 0) == pytest.approx(1.75, rel=1e-12)
    assert st.expert_inclusion(4, 2, 2.0) == pytest.approx((1, 36 / 61, 16 / 61, 9 / 61), rel=1e-12)
    # one token hits exactly its k experts, whatever the skew; many tokens hit them all
    assert st.distinct_experts(128, 8, 1, 0.9) == pytest.approx(8, rel=1e-12)
    assert st.distinct_experts(128, 8, 10**6, 0.9) == pytest.approx(128, rel=1e-9)
    # numpy arrays and sympy expressions give the same count as numbers
    n = np.array([1.0, 16.0, 64.0])
    assert st.distinct_experts(128, 8, n, 0.9) == pytest.approx([st.distinct_experts(128, 8, float(x), 0.9)
                                                                  for x in n], rel=1e-12)
    T = sp.Symbol("T", positive=True)
    assert float(st.distinct_experts(128, 8, T, 0.9).subs(T, 16)) == pytest.approx(
        st.distinct_experts(128, 8, 16.0, 0.9), rel=1e-12)


def test_skew_for_a_stated_top_share():
    """Uniform routing puts 20 % of the tokens on 20 % of the experts (26 of 128: 26/128 = 0.203);
    the exponent found for a share gives that share back, and a larger share needs a larger
    exponent.  An unreachable share is an error."""
    assert st.expert_top_share(128, 8, 0.0) == pytest.approx(26 / 128, rel=1e-12)
    s65, s40 = st.skew_for_top_share(128, 8, 0.65), st.skew_for_top_share(128, 8, 0.40)
    assert st.expert_top_share(128, 8, s65) == pytest.approx(0.65, abs=1e-9)
    assert 0 < s40 < s65
    with pytest.raises(ValueError):
        st.skew_for_top_share(128, 8, 0.1)


def test_skew_knob_shrinks_only_the_expert_read():
    """``use serving_step { expert_skew = … }``: the decode step of 16 sequences reads
    (hit uniform − hit skewed) fewer experts' weights; the FLOPs are the same."""
    ws = dsl.load("skew.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan u { model = qwen3_30b_a3b; device = h100_sxm; use serving_step { batch = 16 seq } }
plan z { model = qwen3_30b_a3b; device = h100_sxm; use serving_step { batch = 16 seq; expert_skew = 0.9 } }
""")
    c = st.step_constants(ws, "u")
    fewer = st.distinct_experts(128, 8, 16) - st.distinct_experts(128, 8, 16, 0.9)
    assert fewer > 20
    saved = fewer * c["expert_bytes"] / (c["mem_bw"] * c.get("eta_wr", c["eta_mem"]))
    assert ws.get("u.decode_step_time", "s") - ws.get("z.decode_step_time", "s") == pytest.approx(saved, rel=1e-9)


def test_moe_reads_only_the_hit_experts():
    ws = dsl.load("moe.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan p { model = qwen3_30b_a3b; device = h100_sxm }
""")
    c = st.step_constants(ws, "p")
    # Qwen3-30B-A3B: 128 experts, top-8, 48 MoE layers of 3·2,048·768 = 4,718,592 weights each
    assert (c["E"], c["k"], c["moe_layers"]) == (128, 8, 48)
    assert c["expert_params"] == 48 * 3 * 2048 * 768
    o = ops("numpy")
    one = st.step_parts(c, 0, 1, 0, o)["experts"][2]
    many = st.step_parts(c, 0, 4096, 0, o)["experts"][2]
    bw = c["mem_bw"] * c["eta_mem"]
    assert one == pytest.approx(8 * c["expert_bytes"] / bw, rel=1e-12)
    assert many == pytest.approx(st.distinct_experts(128, 8, 4096) * c["expert_bytes"] / bw, rel=1e-12)


def test_numpy_equals_sympy(toy):
    _, c = toy
    P, D, C = sp.symbols("P D C", nonnegative=True)
    expr = st.step_time(c, P, D, C, ops("sympy"))
    f = sp.lambdify((P, D, C), expr, "numpy")
    pts = np.array([[0, 1, 7], [16, 0, 0], [8, 2, 10], [3, 40, 900], [64, 5, 30]], dtype=float)
    num = st.step_time(c, pts[:, 0], pts[:, 1], pts[:, 2], ops("numpy"))
    for (p, d, cc), v in zip(pts, num):
        assert float(expr.subs({P: p, D: d, C: cc})) == pytest.approx(v, rel=1e-12)
        assert f(p, d, cc) == pytest.approx(v, rel=1e-12)


def test_block_matches_the_function(toy):
    ws, c = toy
    assert ws.get("p.ttft_floor", "s") == pytest.approx(st.step_time(c, 16, 0, 0), rel=1e-12)
    assert ws.get("p.decode_step_time", "s") == pytest.approx(st.step_time(c, 0, 2, 10), rel=1e-12)
    assert ws.get("p.tpot", "s") == ws.get("p.decode_step_time", "s")
    assert ws.get("p.decode_tokens_per_s", "token/s") == pytest.approx(2 / 13.44, rel=1e-12)
    assert ws.get("p.prefill_tokens_per_s", "token/s") == pytest.approx(16 / 51.456, rel=1e-12)
    assert ws.get("p.step_crossover_batch", "seq") == pytest.approx(10, rel=1e-12)


def test_explanation_names_the_bound():
    ws = dsl.load("q.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan p { model = qwen3_8b; device = h100_sxm
  use serving_step { batch = 32 seq; context = 2048 token; prefill = 2048 token } }
""")
    assert "compute-bound" in ws.nodes["p.ttft_floor"].doc
    assert "memory-bound" in ws.nodes["p.decode_step_time"].doc


def test_tp_needs_a_link():
    with pytest.raises(PlanError) as e:
        dsl.load("t.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan p { model = qwen3_8b; device = h100_sxm; use serving_step { tp = 2 } }
""")
    assert any(d.code == "missing-parameter" and "link" in d.summary for d in e.value.diagnostics)


@pytest.mark.parametrize("tp,needle", [(3, "tp = 3 does not divide the 32 query heads of model 'qwen3_8b'"),
                                       (64, "tp = 64 does not divide the 32 query heads"),
                                       (1024, "tp = 1024 does not divide the 32 query heads")])
def test_tp_must_split_whole_heads_without_an_engine(tp, needle):
    # the rule of `use engine` (one function for both blocks): qwen3_8b has 32 query and 8 KV heads
    with pytest.raises(PlanError) as e:
        dsl.load("t.plan", text=f"""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan p {{ model = qwen3_8b; device = h100_sxm; use serving_step {{ tp = {tp}; link = nvlink4 }} }}
""")
    d = e.value.diagnostics[0]
    assert d.code == "out-of-range" and needle in d.summary and "use a tp dividing 32" in d.hint
    line = f"plan p {{ model = qwen3_8b; device = h100_sxm; use serving_step {{ tp = {tp}; link = nvlink4 }} }}"
    assert (d.span.line, d.span.column) == (4, line.index("tp = ") + 6)      # at the value of tp (1-based)


def test_tp_group_beyond_one_host_warns():
    # 16 GPUs of tp on hosts of gpus_per_host = 8 (the default, training's tp_within_host): the all-reduces are
    # priced on NVLink, which a group spanning two hosts does not have -- a warning naming both numbers
    text = """
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan p { model = qwen3_8b; device = h100_sxm; GPH use serving_step { tp = 16; link = nvlink4 } }
"""
    ws = dsl.load("t.plan", text=text.replace("GPH", ""))
    w = [d for d in ws.diagnostics if d.code == "tp-across-hosts"]
    assert len(w) == 1 and w[0].severity == "warning"
    assert "tp = 16 exceeds the 8 GPUs of one host (gpus_per_host)" in w[0].summary and "nvlink4" in w[0].summary
    assert "gpus_per_host = 16" in w[0].hint
    ws = dsl.load("t.plan", text=text.replace("GPH", "gpus_per_host = 16;"))    # one 16-GPU NVLink domain
    assert not [d for d in ws.diagnostics if d.code == "tp-across-hosts"]


def test_routing_power_underflows_at_a_billion_tokens():
    # qwen3_30b_a3b routes each token to 8 of 128 experts: a step of 10^9 decodes misses an expert with
    # probability (1 - 8/128)^(10^9) = 10^(-2.8e7), a legitimate 0 (every expert is read), not an overflow; the
    # exact evaluation equals the float constants' step, where that power underflows to 0.0
    ws = dsl.load("t.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan p { model = qwen3_30b_a3b; device = h100_sxm; use serving_step { batch = 1e9 seq; context = 2048 token } }
""")
    c = st.step_constants(ws, "p")
    assert (1 - c["k"] / c["E"]) ** 1e9 == 0.0
    want = st.step_time(c, 0, 1e9, 1e9 * 2048, ops("numpy"))
    assert float(ws.base_value("p.decode_step_time")) == pytest.approx(float(want), rel=1e-12)


def test_expert_knobs_on_a_dense_model_warn():
    # qwen3_8b has no routed experts: expert_skew and expert_efficiency change nothing, and say so at their text
    ws = dsl.load("t.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan a { model = qwen3_8b; device = h100_sxm; use serving_step { expert_skew = 5; expert_efficiency = 1 % } }
plan b { model = qwen3_8b; device = h100_sxm; use serving_step { } }
""")
    w = [d for d in ws.diagnostics if d.code == "unused"]
    assert [d.summary for d in w] == [f"'{k}' has no effect: model 'qwen3_8b' is dense (no routed experts)"
                                      for k in ("expert_skew", "expert_efficiency")]
    assert ws.base_value("a.tpot") == ws.base_value("b.tpot")


def test_tp_splits_the_weights_and_adds_all_reduces():
    ws = dsl.load("t.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan one { model = qwen3_8b; device = h100_sxm; use serving_step { } }
plan two { model = qwen3_8b; device = h100_sxm; use serving_step { tp = 2; link = nvlink4 } }
""")
    c1, c2 = st.step_constants(ws, "one"), st.step_constants(ws, "two")
    assert c2["dense_bytes"] == pytest.approx(c1["dense_bytes"] / 2, rel=1e-12)
    # 8 KV heads over 2 GPUs: half the KV per GPU
    assert c2["kv_bytes_per_token"] == pytest.approx(c1["kv_bytes_per_token"] / 2, rel=1e-12)
    parts = st.step_parts(c2, 0, 8, 8 * 2048, ops("numpy"))
    # 72 all-reduces (2 per layer) of 8 tokens · 4,096 · 2 B = 65,536 B each
    one = st.all_reduce_time(2, 65536, c2, ops("numpy"))
    assert parts["tp_allreduce"][0] == pytest.approx(72 * one, rel=1e-12)
    # the ring fallback by hand: a 4 µs launch, 2 steps of α = 1 µs and 2·(1/2)·65,536 B at
    # 0.8 · 450 GB/s (the generic link values)
    link = {"bandwidth": 450e9, "latency": 1e-6, "launch": 4e-6, "efficiency": 0.8}
    assert st.ring_all_reduce(2, 65536, link) == pytest.approx(4e-6 + 2e-6 + 65536 / (0.8 * 450e9), rel=1e-12)
    # 8 GPUs: 14 steps, 2·7/8 of the buffer
    assert st.ring_all_reduce(8, 65536, link) == pytest.approx(4e-6 + 14e-6 + 1.75 * 65536 / 360e9, rel=1e-12)
    assert ws.get("two.decode_step_time", "s") < ws.get("one.decode_step_time", "s")


# ---------------------------------------------------------------- AIConfigurator 0.12
def _aic_rows():
    with AIC_CSV.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _bench():
    spec = importlib.util.spec_from_file_location("aic_compare", ROOT / "benchmarks" / "aiconfigurator_compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def h100():
    ws = dsl.load("h.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan p { model = qwen3_8b; device = h100_sxm }
""")
    link = {"bandwidth": float(ws.base_value("nvlink4.bandwidth"))}
    return {1: st.step_constants(ws, "p", tp=1), 2: st.step_constants(ws, "p", tp=2, link=link)}


POINTS = [("static", 1, 1), ("static", 1, 8), ("static", 1, 64), ("static", 2, 8), ("static", 2, 64),
          ("agg", 1, 1), ("agg", 1, 32), ("agg", 2, 8)]


@pytest.mark.parametrize("mode,tp,batch", POINTS)
def test_within_15_percent_of_aiconfigurator(h100, mode, tp, batch):
    """Source: NVIDIA AIConfigurator 0.12.0, vLLM 0.24.0 database measured on H100 SXM, Qwen3-8B BF16,
    2,048 tokens in / 256 out (`aiconfigurator cli estimate --estimate-mode static|agg`; see
    specs/data/serving/README.md).  Ours from the catalog's H100 SXM and the generic efficiencies."""
    row = next(r for r in _aic_rows() if (r["mode"], int(r["tp"]), int(r["batch"])) == (mode, tp, batch)
               and r["system"] == "h100_sxm" and r["model"] == "Qwen/Qwen3-8B")
    c = h100[tp]
    if mode == "static":
        ttft, tpot = st.static_batch(c, batch, int(row["isl"]), int(row["osl"]))
    else:
        ttft, tpot, _ = _bench().ours("agg", c, batch, int(row["isl"]), int(row["osl"]), 36)
    assert ttft * 1e3 == pytest.approx(float(row["aic_ttft_ms"]), rel=0.15)
    assert tpot * 1e3 == pytest.approx(float(row["aic_tpot_ms"]), rel=0.15)


def test_the_stored_aiconfigurator_rows_are_complete():
    rows = _aic_rows()
    assert {r["mode"] for r in rows} == {"static", "agg"}
    assert {int(r["tp"]) for r in rows} == {1, 2}
    assert all(r["backend"] == "vllm" and r["isl"] == "2048" and r["osl"] == "256" for r in rows)
    assert all(math.isfinite(float(r["aic_ttft_ms"])) for r in rows)


def test_decode_bound_and_serving_step_in_one_plan_is_a_located_error():
    with pytest.raises(PlanError) as e:
        dsl.load("t.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan p { model = qwen3_8b; device = h100_sxm
  use serving_step { }
  use decode_bound { batch = 8 seq; context = 100 token } }
""")
    d = next(d for d in e.value.diagnostics if d.code == "duplicate")
    assert "decode_step_time" in d.summary and d.span is not None


def test_tp_and_formats_come_from_use_engine():
    """With `use engine` (plugins/serving/serving_engine.py, when installed) the step reads its tp and formats."""
    from dsl.plugin.manager import get_plugins
    if "engine" not in get_plugins().blocks:
        pytest.skip("use engine is not installed in this tree")
    ws = dsl.load("e.plan", text="""
import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"
plan p { model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; tp = 2; max_model_len = 8192 token; weights = "fp8" }
  use serving_step { link = nvlink4 } }
""")
    c = st.step_constants(ws, "p")
    assert c["tp"] == 2
    # fp8 weights split over 2 GPUs: 1 B per weight, half of the dense matrices per GPU
    assert c["dense_bytes"] == pytest.approx(c["dense_params"], rel=1e-12)
    assert ws.get("p.decode_step_time", "s") == pytest.approx(st.step_time(c, 0, 32, 32 * 2048), rel=1e-9)


def test_decode_reads_only_the_window_on_sliding_window_layers(tmp_path):
    """Gemma-3-12B: 48 layers, 8 KV heads of 256, a 5:1 local:global pattern (40 layers with a
    1,024-token window, 8 full).  Per token and layer K and V in BF16: 2·8·256·2 = 8,192 B, so
    393,216 B for all 48 layers, 40/48 of it on window layers.  One sequence decoding at 8,192
    tokens reads 8·8,192 + 40·1,024 token-layers of KV: (8/48)·8,192 + (40/48)·1,024 =
    2,218.67 full-width tokens, plus the token it writes."""
    shutil = __import__("shutil")
    shutil.copy(Path(__file__).parents[1] / "specs" / "catalog" / "hf" / "gemma3-12b-key-fields.json",
                tmp_path / "g.json")
    (tmp_path / "g.plan").write_text('import "@catalog/hardware.plan"\nmodel g from "g.json"\n'
                                     "plan p { model = g; device = h100_sxm }\n", encoding="utf-8")
    ws = dsl.load(tmp_path / "g.plan")
    c = st.step_constants(ws, "p")
    assert c["kv_bytes_per_token"] == 393_216
    assert c["kv_local_share"] == pytest.approx(40 / 48, rel=1e-12) and c["kv_window"] == 1024
    o = ops("numpy")
    bw = c["mem_bw"] * c["eta_mem"]
    read = st.step_parts(c, 0, 1, 8192, o)["decode_attention"][2]
    assert read == pytest.approx((8 / 48 * 8192 + 40 / 48 * 1024 + 1) * 393_216 / bw, rel=1e-12)
    # below the window nothing is capped; 4 sequences of 8,192 tokens read 4 × the one above
    short = st.step_parts(c, 0, 1, 512, o)["decode_attention"][2]
    assert short == pytest.approx((512 + 1) * 393_216 / bw, rel=1e-12)
    four = st.step_parts(c, 0, 4, 4 * 8192, o)["decode_attention"][2]
    assert four == pytest.approx(4 * (8 / 48 * 8192 + 40 / 48 * 1024 + 1) * 393_216 / bw, rel=1e-12)


def test_prefill_scores_at_most_the_window_on_sliding_window_layers(tmp_path):
    """Gemma-3-12B (8 full layers, 40 with a 1,024-token window): a 4,096-token prompt scores
    4,096·4,097/2 = 8,390,656 pairs on a full layer and Σ_{t ≤ 4,096} min(t, 1,024) =
    1,024·1,025/2 + 3,072·1,024 = 3,670,528 on a window layer."""
    import shutil
    shutil.copy(Path(__file__).parents[1] / "specs" / "catalog" / "hf" / "gemma3-12b-key-fields.json",
                tmp_path / "g.json")
    (tmp_path / "g.plan").write_text('import "@catalog/hardware.plan"\nmodel g from "g.json"\n'
                                     "plan p { model = g; device = h100_sxm }\n", encoding="utf-8")
    c = st.step_constants(dsl.load(tmp_path / "g.plan"), "p")
    flop = st.step_parts(c, 4096, 0, 0, ops("numpy"))["prefill_attention"][1]
    pairs = 8 / 48 * 8_390_656 + 40 / 48 * 3_670_528
    assert flop == pytest.approx(pairs * c["attn_per_pair"] / (c["peak"] * c["eta_attn"]), rel=1e-12)


@pytest.fixture(scope="module")
def aic_grid():
    """The benchmark's own constants (catalog devices; NVLink 3 at 300 GB/s per direction on the
    A100) and the AIConfigurator rows stored in specs/data/serving/."""
    b = _bench()
    ws, names = b.load_constants([(m, s) for m in b.MODELS for s in b.SYSTEMS])
    return b, ws, names, b.stored_rows()


def test_aiconfigurator_routing_workload_ends_and_skew():
    """The benchmark's reproduction of AIConfigurator's power-law routing draw (collector/helper.py
    ``_generate_power_law_distribution``, α = 1.2), checked where it is exact by hand: one token
    hits exactly k experts (each count is capped at T = 1 token and the counts sum to T·k).  At
    4,096 tokens the loads come from [1, 3,276.8], whose mean is (0.2/0.8)·(3,276.8^0.8 − 1) /
    (1 − 3,276.8^−0.2) = 202 (standard deviation of a 128-draw mean ≈ 45), so even a load of 1
    gets 1 · 32,768 / (128 · 202) = 1.27 tokens, and rounding leaves no expert empty unless the
    draw's mean passes 512, seven standard deviations out: all 128 experts are hit.  Between, the
    draw jumps where T·k passes E (16 → 17 tokens: loads from [0.01, 2], then from [1, 0.8·T]),
    which one Zipf popularity cannot follow; the skew found for a count reproduces it."""
    b = _bench()
    assert b.aic_experts_hit(1, 128, 8) == 8.0
    assert b.aic_experts_hit(4096, 128, 8) == 128.0
    h16, h17 = b.aic_experts_hit(16, 128, 8), b.aic_experts_hit(17, 128, 8)
    assert 8 < h16 < st.distinct_experts(128, 8, 16) < h17 < 128
    for T in (8, 16, 32):
        hit = b.aic_experts_hit(T, 128, 8)
        s = b.skew_for_experts_hit(128, 8, T, hit)
        if hit >= st.distinct_experts(128, 8, T):
            assert s == 0.0
        else:
            assert float(st.distinct_experts(128, 8, T, s)) == pytest.approx(hit, rel=1e-6)


# (mode, model, system, tp, batch): A100 and the mixture of experts
A100_MOE_POINTS = [
    ("static", "qwen3_8b", "a100_sxm", 1, 1), ("static", "qwen3_8b", "a100_sxm", 1, 16),
    ("agg", "qwen3_8b", "a100_sxm", 1, 64), ("static", "qwen3_8b", "a100_sxm", 2, 8),
    ("agg", "qwen3_8b", "a100_sxm", 2, 1),
    ("static", "qwen3_30b_a3b", "h100_sxm", 1, 1), ("static", "qwen3_30b_a3b", "h100_sxm", 1, 64),
    ("agg", "qwen3_30b_a3b", "h100_sxm", 2, 32),
    ("agg", "qwen3_30b_a3b", "h200_sxm", 1, 4), ("static", "qwen3_30b_a3b", "h200_sxm", 2, 16),
    # decode at 16 sequences: 1.19-1.46 of AIConfigurator's TPOT under uniform routing
    ("static", "qwen3_30b_a3b", "h100_sxm", 1, 16), ("agg", "qwen3_30b_a3b", "a100_sxm", 1, 16),
    ("disagg", "qwen3_30b_a3b", "a100_sxm", 1, 16),
    # 32 sequences: AIConfigurator's routing generator samples expert loads from [1, 0.8·T] once
    # T·k > E (256 > 128) and from [0.01, 2] below, so at 32 tokens its loads are near uniform
    # (about 107 of 128 experts hit): 0.82 of its TPOT under one fixed Zipf popularity
    ("static", "qwen3_30b_a3b", "h200_sxm", 1, 32), ("static", "qwen3_30b_a3b", "h100_sxm", 1, 32),
    # the A100's MoE decode at 8-32 sequences: 1.13-1.18 of AIConfigurator's TPOT with the
    # experts read at the A100's weight_read_efficiency (a whole dense decode step of gpt-fast)
    ("disagg", "qwen3_30b_a3b", "a100_sxm", 1, 32), ("disagg", "qwen3_30b_a3b", "a100_sxm", 1, 8),
    ("static", "qwen3_30b_a3b", "a100_sxm", 1, 2), ("agg", "qwen3_30b_a3b", "a100_sxm", 1, 64),
    ("agg", "qwen3_30b_a3b", "a100_sxm", 2, 32),
    ("disagg", "qwen3_8b", "h100_sxm", 1, 8), ("disagg", "qwen3_8b", "a100_sxm", 1, 64),
    ("disagg", "qwen3_30b_a3b", "a100_sxm", 2, 32),
    # dense decode on the A100 at 32-64 sequences: outside 15 % (TPOT 0.82-0.84) until the A100's
    # decode-attention fields (Vidur's profiled calls); 0.88-0.91 with them
    ("static", "qwen3_8b", "a100_sxm", 1, 32), ("agg", "qwen3_8b", "a100_sxm", 2, 64),
    ("disagg", "qwen3_8b", "a100_sxm", 2, 64),
]


@pytest.mark.parametrize("mode,model,system,tp,batch", A100_MOE_POINTS)
def test_a100_and_moe_within_15_percent_of_aiconfigurator(aic_grid, mode, model, system, tp, batch):
    """Source: NVIDIA AIConfigurator 0.12.0 with its vLLM databases (H100/H200 SXM measured with
    vLLM 0.24.0, A100 SXM with vLLM 0.14.0), BF16, 2,048 tokens in / 256 out, Qwen3-30B-A3B with
    moe_tp = tp and its default power-law routing (specs/data/serving/aiconfigurator-0.12-h200-a100-moe.csv,
    and aiconfigurator-0.12-disagg.csv for one prefill and one decode worker; its README states the
    commands).  Ours from the catalog devices — the A100's measured weight reads (gpt-fast), expert
    reads (vLLM's fused-MoE kernel, PR #40542), maximum achievable matmul throughput (ml-engineering
    MAMF table) and decode-attention calls (Vidur's profiled FlashAttention-2 decode) — and the
    generic efficiencies, each step priced under the routing AIConfigurator measured with (its
    collector's power-law draw: the benchmark's ``routed``); 15 % is the agreement the step model
    states against this peer."""
    b, ws, names, rows = aic_grid
    row = rows[(mode, model, system, tp, batch)]
    dev, link = b.SYSTEMS[system]
    c = b.routed(ws, model, st.step_constants(ws, names[(model, dev)], tp=tp,
                                              link=b.link_fields(ws, link) if tp > 1 else None))
    ttft, tpot, _ = b.ours(mode, c, batch, int(row["isl"]), int(row["osl"]), int(ws.base_value(f"{model}.layers")))
    assert ttft * 1e3 == pytest.approx(float(row["aic_ttft_ms"]), rel=0.15)
    assert tpot * 1e3 == pytest.approx(float(row["aic_tpot_ms"]), rel=0.15)


def test_the_a100_serving_gemms_are_capped_at_the_measured_matmul_ceiling(aic_grid):
    """A100 SXM: Calculon's matrix efficiency (94 %, the training roofline's η_max) is above the
    measured maximum achievable BF16 matmul throughput, 267.9 of 312 TFLOP/s = 85.9 %
    (ml-engineering MAMF table); the serving step takes the smaller.  H100 SXM has no ceiling
    field: its η_max stays its measured torch.matmul fit, 81.2 %."""
    b, ws, names, _ = aic_grid
    a100 = st.step_constants(ws, names[("qwen3_8b", "a100_sxm_80gb")])
    h100 = st.step_constants(ws, names[("qwen3_8b", "h100_sxm")])
    assert a100["eta_mm"] == pytest.approx(0.859, rel=1e-12)
    assert h100["eta_mm"] == pytest.approx(0.812, rel=1e-12)


TRT_CSV = ROOT / "specs" / "data" / "serving" / "tensorrt-llm-first-token.csv"
TRT_ROWS = {r["row"]: r for r in csv.DictReader(TRT_CSV.open(encoding="utf-8"))}
# At 128 tokens the prefill sits near the A100's ridge (≈ 190 tokens: 312 TFLOP/s × 0.859 over
# 2,039 GB/s × 0.685 at one FLOP per weight byte per token), where the roofline's max(FLOP
# time, weight read) is at its most optimistic — a GEMM of 128 rows reaches neither bound — and
# the published figure is a whole gptSessionBenchmark run (output length 1), not a step alone:
# ours is 0.66 of it at both sizes of model.
TRT_MISSES = {"llama2_7b_tp1_isl128", "llama2_70b_tp4_isl128"}


@pytest.fixture(scope="module")
def trt_plans():
    return dsl.load(ROOT / "specs" / "data" / "serving" / "tensorrt-llm-first-token.plan")


@pytest.mark.parametrize("row", [
    pytest.param(r, marks=pytest.mark.xfail(strict=True, reason="a prefill of 128 tokens near the A100's "
                                            "ridge: ours is 0.66 of the published latency"))
    if r in TRT_MISSES else r for r in TRT_ROWS])
def test_first_token_latency_against_tensorrt_llm(trt_plans, row):
    """Source: NVIDIA TensorRT-LLM docs/source/performance.md (commit 138f96d45f90b9667426f7c47297d8c06bafac73),
    "Low Latency" table for A100 GPUs (FP16; TensorRT-LLM v0.5 data, gptSessionBenchmark, batch 1,
    one output token): Llama-2-7B TP 1 at 128 / 2,048 input tokens 16 / 133 ms, Llama-2-70B TP 4
    at 128 / 2,048 tokens 47 / 377 ms (specs/data/serving/README.md).  Ours is `ttft_floor` of the
    matching plan of tensorrt-llm-first-token.plan (one prefill at batch 1 on the catalog A100 SXM
    80 GB; NVLink 3 at 300 GB/s per direction for TP 4).  Tolerance: the 15 % the step model
    states against AIConfigurator; the 2,048-token prefills (compute-bound) agree, the 128-token
    ones are a known miss (TRT_MISSES)."""
    r = TRT_ROWS[row]
    got = trt_plans.get(f"{row}.ttft_floor", "ms")
    assert got == pytest.approx(float(r["first_token_latency_ms"]), rel=0.15)


def _serving_data_constants(plan_file, plan):
    """Step constants of a plan in one of the stored measurement files of specs/data/serving/."""
    return st.step_constants(dsl.load(ROOT / "specs" / "data" / "serving" / plan_file), plan)


def _rows_with_misses(rows, misses):
    """Test parameters for measured rows: those in ``misses`` are strict expected failures with
    their reason."""
    return [pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=misses[k])) if k in misses else k
            for k in rows]


MOE_CSV = ROOT / "specs" / "data" / "serving" / "vllm-fused-moe-a100.csv"
MOE_ROWS = {int(r["batch"]): float(r["kernel_time_us"]) for r in csv.DictReader(MOE_CSV.open(encoding="utf-8"))}


@pytest.fixture(scope="module")
def moe_a100():
    return _serving_data_constants("vllm-fused-moe-a100.plan", "qwen3_30b_a3b_a100_pcie_40gb")


@pytest.mark.parametrize("batch", [
    pytest.param(b, marks=pytest.mark.xfail(strict=True, reason="1-4 tokens hit 8-29 experts: too few blocks to "
                                            "stream the weights at the bandwidth; ours is 0.62-0.79 of the kernel"))
    if b < 8 else b for b in MOE_ROWS])
def test_routed_experts_against_vllm_fused_moe_kernel(moe_a100, batch):
    """Source: vLLM PR #19049 (gty111, 2025-06-03, "Create E=128,N=768,device_name=NVIDIA_A100-PCIE-40GB.json"),
    the kernel times "Before this PR" (default config) that vLLM's benchmarks/kernels/benchmark_moe.py
    prints for Qwen3-30B-A3B's fused MoE layer (E = 128, top-8, h = 2,048, f_e = 768, BF16) on one
    A100 PCIe 40 GB: 109.21, 159.81, 268.89, 403.13, 611.19, 730.19, 808.53, 885.97, 917.45 µs at
    1-64 tokens.  benchmark_moe draws its gating logits from torch.randn, so every k-subset of experts
    is equally likely: the uniform routing whose expected distinct experts are E·(1 − (1 − k/E)^T).
    Ours: the step's routed-experts term for one MoE layer (FLOP time + weight read of the experts
    hit, at the generic 90 % of 1,555 GB/s).  Tolerance: the 15 % the step model states; at 1-4
    tokens the kernel is a known miss."""
    got = st.step_parts(moe_a100, 0, batch, 0, ops("numpy"))["experts"][0] / moe_a100["moe_layers"]
    assert got * 1e6 == pytest.approx(MOE_ROWS[batch], rel=0.15)


MOE_SXM_CSV = ROOT / "specs" / "data" / "serving" / "vllm-fused-moe-a100-sxm.csv"
MOE_SXM_ROWS = {int(r["batch"]): float(r["default_config_us"])
                for r in csv.DictReader(MOE_SXM_CSV.open(encoding="utf-8"))}
# rows where the step's routed-experts term is outside 15 % of the kernel, with ours / measured
MOE_SXM_MISSES = {
    1: "1 token hits 6 experts: too few blocks to stream the weights at the bandwidth (ours 0.40)",
    1024: "the kernel's 1,022.5 us lies between the max (700 us) and the sum (1,389 us) of our FLOP time "
          "(689 us) and weight read (700 us); ours is the sum (1.36)",
    4096: "the kernel reaches 46.7 % of 312 TFLOP/s on its FLOPs alone; its 2,919 us lies between the max "
          "(2,733 us) and the sum (3,433 us) of our FLOP time at the 50 % expert efficiency and read (1.18)",
}


@pytest.fixture(scope="module")
def moe_a100_sxm():
    return _serving_data_constants("vllm-fused-moe-a100-sxm.plan", "moe_e64_n1408_a100_sxm")


@pytest.mark.parametrize("batch", _rows_with_misses(MOE_SXM_ROWS, MOE_SXM_MISSES))
def test_routed_experts_against_vllm_fused_moe_kernel_a100_sxm(moe_a100_sxm, batch):
    """Source: vLLM PR #40542 (varjoranta, 2026-04-21, "[Kernel][MoE] Add A100 tuned config for
    E=64,N=1408"), its benchmark table "bf16, hidden=2048, top_k=6, 1×A100 80GB SXM4": the
    default-config kernel times 183.5, 266.2, 542.6, 698.1, 769.5, 1022.5, 2919.0 µs at 1, 4, 16,
    64, 256, 1024, 4096 tokens (its tuned config is 0–10 % faster; both are stored).  Ours: the
    step's routed-experts term for one MoE layer of that shape on the catalog's ``a100_sxm_80gb``.
    From 64 tokens on, every routing hits (nearly) all 64 experts, so the comparison does not
    depend on the routing the benchmark drew.  The catalog's ``expert_read_efficiency`` of the A100
    SXM (77.6 %) is read off the 64-token row (the whole kernel time taken as the read), so that
    row is not an independent check; the others are.  Tolerance: the 15 % the step model states;
    the rows outside it are strict expected failures (MOE_SXM_MISSES): the kernel at 1 token, and
    at 1,024–4,096 tokens, where it overlaps part of its read with its FLOPs and ours adds them."""
    got = st.step_parts(moe_a100_sxm, 0, batch, 0, ops("numpy"))["experts"][0] / moe_a100_sxm["moe_layers"]
    assert got * 1e6 == pytest.approx(MOE_SXM_ROWS[batch], rel=0.15)


FA2_CSV = ROOT / "specs" / "data" / "serving" / "flash-attn2-paged-decode-a30.csv"
FA2_ROWS = {(int(r["num_seqs"]), int(r["seq_len"])): float(r["gpu_time_us"])
            for r in csv.DictReader(FA2_CSV.open(encoding="utf-8"))}
# calls where the step's decode-attention term is outside 15 % of the kernel, with ours / measured
FA2_MISSES = {
    (64, 32): "8.5 MiB a call: the kernel's fixed time (about 37 us on this card) dominates (ours 0.22)",
    (64, 64): "16.5 MiB a call: fixed time of the kernel (ours 0.40)",
    (64, 128): "32.5 MiB a call: fixed time of the kernel (ours 0.57)",
    (64, 256): "64.5 MiB a call: fixed time of the kernel (ours 0.72)",
    (64, 512): "128.5 MiB a call: fixed time of the kernel (ours 0.84)",
    (16, 1024): "64 MiB a call over 16 sequences: fixed time and fewer blocks (ours 0.59)",
}


@pytest.fixture(scope="module")
def fa2_a30():
    return _serving_data_constants("flash-attn2-paged-decode-a30.plan", "qwen3_8b_a30")


@pytest.mark.parametrize("call", _rows_with_misses(FA2_ROWS, FA2_MISSES), ids=lambda k: f"{k[0]}x{k[1]}")
def test_decode_attention_against_flash_attn2_paged_decode(fa2_a30, call):
    """Source: JakeFlasher/benchmark_flash_attention, benchmark-64-GQA4-256-32-8-128.md and
    results/benchmark-gqa-4.md (commits cadfe100, 13da53c9): nvbench GPU times of FlashAttention-2's
    paged decode (``mha_fwd_kvcache`` with a page table, one query token per sequence, FP16, page
    256) on an NVIDIA A30 (933 GB/s) for 32 query and 8 KV heads of 128 — Qwen3-8B's attention —
    64 sequences at 32-16,384 tokens of context (47.083 ... 4,925.570 µs) and 16 sequences at 1,024
    (134.874 µs).  Ours: the step's decode-attention term of one layer (the KV of the context read
    at the generic 90 % of 933 GB/s).  Tolerance: the 15 % the step model states; calls of 128.5 MiB
    and less are strict expected failures (FA2_MISSES): the kernel's fixed time, which the step does
    not price, dominates them."""
    d, n = call
    got = st.step_parts(fa2_a30, 0, d, d * n, ops("numpy"))["decode_attention"][0] / fa2_a30["L"]
    assert got * 1e6 == pytest.approx(FA2_ROWS[call], rel=0.15)


def test_flash_attn2_paged_decode_a30_hand_figures():
    """The figures the documentation draws from the A30 table, by hand: a call at 64 sequences of
    n tokens reads 64·n·8·128·2·2 B of KV and 64·32·128·2 B of queries (2,048 tokens: 537,395,200 B,
    the table's 512.500 MiB); between 2,048 and 4,096 tokens the time grows by 609.882 µs for
    536,870,912 B more, 880.3 GB/s = 94.4 % of 933 GB/s, and the rest of the 647.459 µs is a fixed
    37.0 µs per call.  The table's own GlobalMem BW and BWUtil at 2,048 tokens, 830.816 GB/s and
    89.04 %, follow from the same bytes."""
    def read(n):
        return 64 * n * 8 * 128 * 2 * 2 + 64 * 32 * 128 * 2
    assert read(2048) == 537_395_200 == 512.5 * 2**20
    rate = (read(4096) - read(2048)) / ((FA2_ROWS[(64, 4096)] - FA2_ROWS[(64, 2048)]) * 1e-6)
    assert rate / 933e9 == pytest.approx(0.9435, abs=0.0005)
    assert FA2_ROWS[(64, 2048)] - read(2048) / rate * 1e6 == pytest.approx(36.98, abs=0.01)
    # nvbench's GlobalMem BW and BWUtil count the reads and the 512 KiB of outputs written
    moved = (read(2048) + 64 * 32 * 128 * 2) / (FA2_ROWS[(64, 2048)] * 1e-6)
    assert moved / 1e9 == pytest.approx(830.816, abs=0.001)
    assert moved / 933e9 == pytest.approx(0.8904, abs=0.0001)


VIDUR_CSV = ROOT / "specs" / "data" / "serving" / "vidur-attention-decode-a100.csv"
VIDUR_ALL = [(int(r["batch_size"]), int(r["kv_cache_size"]), int(r["attn_decode_median_us"]))
             for r in csv.DictReader(VIDUR_CSV.open(encoding="utf-8"))]
# the compared calls: powers of two from 1 to 128 sequences at 512, 2,048 and 4,032 tokens (context
# 1,024 is measured twice in the table, these once)
VIDUR_ROWS = {(b, n): t for b, n, t in VIDUR_ALL if b & (b - 1) == 0 and n in (512, 2048, 4032)}
_SPLIT = "few sequences: the kernel splits each one's context over the SMs, so its time stays at 17-31 us while "
_SLOW = "the kernel streams these calls below the fit's 1,651 GB/s (64 sequences: 1,383 GB/s from 2,048 to 4,032 " \
        "tokens); ours "
VIDUR_MISSES = {
    (1, 512): _SPLIT + "the bytes grow (ours 1.20)",
    (1, 2048): _SPLIT + "the bytes grow (ours 1.31)",
    (1, 4032): _SPLIT + "the bytes grow (ours 1.37)",
    (2, 2048): _SPLIT + "the bytes grow (ours 1.30)",
    (2, 4032): _SPLIT + "the bytes grow (ours 1.49)",
    (4, 4032): _SPLIT + "the bytes grow (ours 1.28)",
    (16, 512): _SLOW + "0.83",
    (16, 2048): _SLOW + "0.84",
    (64, 512): _SLOW + "0.84",
    (64, 2048): _SLOW + "0.83",
    (64, 4032): _SLOW + "0.83",
}


@pytest.fixture(scope="module")
def vidur_a100():
    return _serving_data_constants("vidur-attention-decode-a100.plan", "llama70b_tp2_a100")


@pytest.mark.parametrize("call", _rows_with_misses(VIDUR_ROWS, VIDUR_MISSES), ids=lambda k: f"{k[0]}x{k[1]}")
def test_decode_attention_against_vidur_a100(vidur_a100, call):
    """Source: microsoft/vidur data/profiling/a100/attention.csv (commit e2d00e9, 2024-05-08): the
    median kernel time (Kineto, 5 calls) of one decode-attention call — FlashAttention-2's
    ``flash_attn_with_kvcache`` with a block table of 16-token blocks, FP16, through sarathi-serve —
    on an A100 80GB for Llama-2-70B's attention at TP 2 (32 query and 4 KV heads of 128 a GPU), b
    sequences of n cached tokens each: e.g. 17, 219 and 667 µs at 1 × 2,048, 64 × 2,048 and 128 ×
    4,032.  Ours: the step's decode-attention term of one layer on the catalog's ``a100_sxm_80gb``
    (19.7 µs + the KV read at 81 % of 2,039 GB/s, the fit of the same table below).  Tolerance: the
    15 % the step model states; the calls outside it are strict expected failures (VIDUR_MISSES)."""
    d, n = call
    got = st.step_parts(vidur_a100, 0, d, d * n, ops("numpy"))["decode_attention"][0] / vidur_a100["L"]
    assert got * 1e6 == pytest.approx(VIDUR_ROWS[call], rel=0.15)


def test_vidur_a100_decode_attention_fit():
    """The A100 SXM 80 GB's ``kv_read_efficiency`` and ``decode_attention_call_time`` come from the
    stored Vidur table: t = t0 + bytes / B over every call of 8-128 sequences at 512-4,032 tokens
    (7,865 calls), least squares of the relative error; a call of b sequences at n tokens reads
    b·(n + 1) tokens of 2·4·128·2 = 2,048 B (the cached keys and values and the new token's).  The
    fit gives t0 = 19.68 µs and B = 1,651 GB/s, 81.0 % of 2,039 GB/s (the catalog's 19.7 µs and
    81 %), and t0 + bytes / B is within 15 % of 89 % of those calls (0.66-1.60 of them at the
    extremes)."""
    sel = [(b, n, t) for b, n, t in VIDUR_ALL if b >= 8 and n >= 512]
    assert len(sel) == 7865
    t = np.array([r[2] for r in sel]) * 1e-6
    x = np.array([b * (n + 1) * 2 * 4 * 128 * 2 for b, n, _ in sel], dtype=float)
    a = np.vstack([np.ones_like(x), x]).T / t[:, None]
    (t0, slope), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    assert t0 * 1e6 == pytest.approx(19.68, abs=0.005)
    assert 1 / slope / 1e9 == pytest.approx(1651.1, abs=0.05)
    assert 1 / slope / 2039e9 == pytest.approx(0.810, abs=0.0005)
    ratio = (19.7e-6 + x / (0.81 * 2039e9)) / t
    assert round(float(np.mean(np.abs(ratio - 1) <= 0.15)), 2) == 0.89
    assert (round(float(ratio.min()), 2), round(float(ratio.max()), 2)) == (0.66, 1.60)
    # the slope the misses quote: 64 sequences from 2,048 to 4,032 tokens
    rows = {(b, n): t for b, n, t in VIDUR_ALL}
    extra = 64 * (4032 - 2048) * 2048
    assert extra / ((rows[(64, 4032)] - rows[(64, 2048)]) * 1e-6) / 1e9 == pytest.approx(1383, abs=0.5)


VIDUR8B_CSV = ROOT / "specs" / "data" / "serving" / "vidur-attention-decode-a100-llama3-8b.csv"
VIDUR8B_ROWS = [(int(r["batch_size"]), int(r["kv_cache_size"]), int(r["attn_decode_median_us"]))
                for r in csv.DictReader(VIDUR8B_CSV.open(encoding="utf-8"))]
VIDUR8B_MISSES = {
    (2, 2112): "2 sequences: the kernel's time stays near its 1-sequence 24 us (ours 1.21)",
    (14, 2112): "a step in the kernel's time from 13 to 14 sequences (86 -> 111 us; ours 0.84)",
}


@pytest.fixture(scope="module")
def vidur_a100_8b():
    return _serving_data_constants("vidur-attention-decode-a100-llama3-8b.plan", "qwen3_8b_attention_a100")


@pytest.mark.parametrize("row", [
    pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=VIDUR8B_MISSES[r[:2]]))
    if r[:2] in VIDUR8B_MISSES else r for r in VIDUR8B_ROWS], ids=lambda r: f"{r[0]}x{r[1]}-{r[2]}us")
def test_decode_attention_against_vidur_a100_llama3_8b(vidur_a100_8b, row):
    """Source: Vidur's profile data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/attention.csv as
    stored in sw5sh/cs378-assignment3 (commit 7ac2fe9): median kernel times of FlashInfer decode-attention
    calls on an A100 80GB for Llama-3-8B's attention at TP 1 — 32 query and 8 KV heads of 128, Qwen3-8B's —
    1-41 sequences at 2,112 cached tokens (24-265 µs) and 116-280 sequences at 2,048 (581-1,323 µs).
    Ours: the step's decode-attention term of one Qwen3-8B layer on the catalog's ``a100_sxm_80gb``, whose
    19.7 µs and 81 % come from the other Vidur table (Llama-2-70B at TP 2 through FlashAttention-2): an
    independent check at the compared attention shape.  Tolerance: the 15 % the step model states; two
    rows are strict expected failures (VIDUR8B_MISSES)."""
    d, n, t = row
    got = st.step_parts(vidur_a100_8b, 0, d, d * n, ops("numpy"))["decode_attention"][0] / vidur_a100_8b["L"]
    assert got * 1e6 == pytest.approx(t, rel=0.15)


def test_fused_moe_a100_sxm_hand_figures():
    """The two figures the documentation draws from vLLM PR #40542's A100 SXM4 80 GB table, by hand:
    at 4,096 tokens the layer's FLOPs are 4,096 · 6 · 3 · 2 · 2,048 · 1,408 = 425.2 GFLOP, 46.7 % of
    312 TFLOP/s in the default config's 2,919.0 µs; at 64 tokens uniform routing hits
    64·(1 − (58/64)^64) = 63.88 experts, 1.105 GB of BF16 weights, read in at most 698.1 µs: at
    least 77.6 % of 2,039 GB/s."""
    flop = 4096 * 6 * 3 * 2 * 2048 * 1408
    assert flop == 425_201_762_304
    assert flop / (MOE_SXM_ROWS[4096] * 1e-6) / 312e12 == pytest.approx(0.467, abs=0.0005)
    read = st.distinct_experts(64, 6, 64) * 3 * 2048 * 1408 * 2
    assert read == pytest.approx(1.105e9, rel=5e-4)
    assert read / (MOE_SXM_ROWS[64] * 1e-6) / 2039e9 == pytest.approx(0.776, abs=0.0005)


# ---------------------------------------------------------------- the simulator's evaluator
@pytest.fixture(scope="module")
def four_kinds(tmp_path_factory):
    """Step constants of a dense model on one GPU and on tp 4, a mixture of experts with FP8
    weights, and a model with sliding-window layers (Gemma 3 12B)."""
    import shutil
    d = tmp_path_factory.mktemp("kinds")
    shutil.copy(ROOT / "specs" / "catalog" / "hf" / "gemma3-12b-key-fields.json", d / "g.json")
    (d / "k.plan").write_text("""import "@catalog/hardware.plan"
import "@catalog/models.plan"
model g from "g.json"
plan dense { model = qwen3_8b; device = h100_sxm; use serving_step { } }
plan tp4 { model = qwen3_8b; device = h100_sxm; use serving_step { tp = 4; link = nvlink4 } }
plan moe { model = qwen3_30b_a3b; device = a100_sxm_80gb; use serving_step { weights = "fp8" } }
plan window { model = g; device = h100_sxm; use serving_step { } }
""", encoding="utf-8")
    ws = dsl.load(d / "k.plan")
    return {p: st.step_constants(ws, p) for p in ("dense", "tp4", "moe", "window")}


@pytest.mark.parametrize("kind", ["dense", "tp4", "moe", "window"])
def test_scalar_step_is_step_time_bit_for_bit(four_kinds, kind):
    """ScalarStep remembers the terms that do not depend on the context; its value must be
    step_time's on Python numbers exactly (the simulation's schedule depends on every bit),
    on first calls, remembered calls and after its memos start over."""
    import random
    c = four_kinds[kind]
    rng = random.Random(kind)
    o = ops("python")
    one, small = st.ScalarStep(c), st.ScalarStep(c)
    small.MEMO_CAP = 5                      # the memos start over often
    pool = [(rng.choice([0, 0, 1, rng.randint(2, 12_000)]), rng.randint(0, 300), rng.choice([0, rng.randint(1, 9_000)]),
             rng.choice([None, 0, 1, rng.randint(2, 6)])) for _ in range(300)] + [(0, 0, 0, None), (0, 0, 0, 1)]
    seen = 0
    for _ in range(3000):
        P, D, K, ps = rng.choice(pool)
        C = D * rng.randint(0, 20_000) + rng.randint(0, 15)
        want = st.step_time(c, P, D, C, o, prefill_prefix=K, prefill_seqs=ps)
        assert isinstance(want, float) or want == 0.0
        assert one(P, D, C, K, ps) == want and small(P, D, C, K, ps) == want, (P, D, C, K, ps)
        seen += P + D == 0
    assert seen and one(0, 0, 0) == 0.0       # an empty step takes no time
    assert len(one._memo) <= len(pool) and len(small._memo) <= small.MEMO_CAP

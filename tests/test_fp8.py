"""FP8 and FP4 matrix products in the training step (`use layout { matmul_precision; fp8_recipe }`).

Every expected number is worked out by hand in the comments (or read from a cited source), never
copied from the code's output:

* Peaks: NVIDIA H100 SXM datasheet, FP8 tensor 3,958 TFLOP/s with sparsity = 1,978.9 dense,
  BF16 989.4 dense (the catalog's h100_sxm); the A100 has no FP8 tensor cores.
* A compute-bound GEMM's roofline time is (F + F_half) / (peak·η_max): the same F, F_half and
  η_max at the FP8 peak takes peak_bf16 / peak_fp8 = 989.4 / 1978.9 of the BF16 time.
* A cast reads the 16-bit tensor (2 B per element; twice with current scaling) and writes the
  FP8 copy (1 B per element) at mem_bw·mem_efficiency (H100 SXM: 3,350 GB/s × 90 %).
* DGX Cloud Llama 3.1 70B on 64 H100 (NVIDIA dgxc-benchmarking, NeMo 24.09): 71,235 tokens/s in
  BF16 and 95,239 tokens/s in FP8 at 128 × 8,192 tokens per step, a measured step-time ratio
  of 95,239 / 71,235 = 1.337.
"""
from __future__ import annotations

import sys

import pytest

import dsl
from dsl.syntax.diagnostics import PlanError
from plugins.training import layout_model as lm

from conftest import REPO_ROOT

NP = lm.ops("numpy")

# a Llama-3.1-70B-like layer (h = 8,192, 64 query and 8 KV heads of 128, SwiGLU FFN 28,672) on
# one GPU, one sequence of 8,192 tokens; H100 SXM peaks and its catalog curve
LAYER = {"L": 1, "h": 8192, "a": 64, "kv": 8, "dh": 128, "dv": 128, "V": 128256, "s": 8192, "act_bytes": 2,
         "flash": 1, "dropout": 0, "logits": 1, "mats": 3, "qkv_w": (64 + 2 * 8) * 128, "o_w": 64 * 128,
         "f_dense": 28672, "fe": 0, "ks": 0}
X1 = {"t": 1, "c": 1, "b": 1, "sp": 0, "e": 1}
H100 = {"peak": 989.4e12, "eta_mm": 0.812, "F_half": 3.2e9, "mem_bw": 3350e9, "eta_mem": 0.9}
H100_FP8 = dict(H100, peak_lp=1978.9e12, eta_lp=0.812, **lm.cast_constants("fp8", "delayed"))


def _gemm_times(K, parts):
    """Forward + backward time of the layer table's GEMMs of ``parts`` (no streams, no casts)."""
    gemms, _ = lm.layer_ops(dict(LAYER, **K), X1, NP)
    f, b = lm.price_ops(([g for g in gemms if g[5] in parts], []), dict(LAYER, **K), NP)
    return f + b


def test_fp8_halves_the_linear_gemms_on_a_compute_bound_layer():
    # The linear GEMMs of the layer are compute-bound at either rate: e.g. the QKV product
    # [8192, 8192]·[8192, 10240]: F = 2·8192·10240·8192 = 1.374e12 FLOP takes
    # F/(1978.9e12·0.812) = 855 µs in FP8, while its bytes 1·(8192² + 8192·10240) + 2·8192·10240
    # = 318.8 MB take 105.7 µs at 3350e9·0.9.  So each one's time is (F + F_half)/(peak·η) and
    # the ratio FP8/BF16 is 989.4 / 1978.9 = 0.499975 for the whole linear part.
    bf16 = _gemm_times(H100, ("layer",))
    fp8 = _gemm_times(H100_FP8, ("layer",))
    assert fp8 / bf16 == pytest.approx(989.4 / 1978.9, rel=1e-9)
    assert 989.4 / 1978.9 == pytest.approx(0.499975, rel=1e-6)


def test_attention_and_lm_head_stay_bf16():
    # QKᵀ and AV (part "attention") and the LM head are not among the low-precision GEMMs: their
    # time is the same whether the step runs FP8 or not
    assert _gemm_times(H100_FP8, ("attention",)) == _gemm_times(H100, ("attention",))
    head_bf16 = lm.price_ops(lm.layer_ops(dict(LAYER, **H100), X1, NP, head=True), dict(LAYER, **H100), NP)
    head_fp8 = lm.price_ops(lm.layer_ops(dict(LAYER, **H100_FP8), X1, NP, head=True), dict(LAYER, **H100_FP8), NP)
    assert head_fp8 == head_bf16
    assert not {"attention_qk", "attention_av", "lm_head", "router"} & lm.LOWP_GEMMS


# a small dense decoder on one H100: h = 1,024, 8 heads of 128 (no GQA), SwiGLU FFN 4,096 (three
# matrices), 2 layers; 4 sequences of 1,024 tokens per step, micro-batch 1 -> m = 4 micro-batches
TINY = '''import "@catalog/hardware.plan"
model tiny { layers = 2; hidden = 1024; ffn = 4096; heads = 8; kv_heads = 8; vocab = 32000; ffn_matrices = 3 }
workload w { tokens = 1e9 token; seq_len = 1024 token; global_batch = 4 seq }
plan p {
  model = tiny; workload = w; device = DEVICE; gpus = 1; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { efficiency = "roofline"LAYOUT }
}
'''


def _tiny(tmp_path, layout="", device="h100_sxm", name="p.plan"):
    f = tmp_path / name
    f.write_text(TINY.replace("DEVICE", device).replace("LAYOUT", layout))
    return dsl.load(f)["p"]


def _hand_cast_bytes(reads):
    # per layer and micro-batch, T = 1,024 tokens, h = 1,024, QKV width (8 + 2·8)·128 = 3,072,
    # output width 1,024, f = 4,096; each element cast moves reads·2 B read + 1 B written:
    #   forward, input and weight of each GEMM:
    #     qkv  T·h + h·3072        = 1,048,576 + 3,145,728 = 4,194,304
    #     out  T·1024 + 1024·h     = 1,048,576 + 1,048,576 = 2,097,152
    #     up ×2 (gate, up) 2·(T·h + h·f) = 2·(1,048,576 + 4,194,304) = 10,485,760
    #     down T·f + f·h           = 4,194,304 + 4,194,304 = 8,388,608      -> 25,165,824 elements
    #   backward, the output gradient of each GEMM:
    #     T·3072 + T·h + 2·T·f + T·h = 3,145,728 + 1,048,576 + 8,388,608 + 1,048,576 = 13,631,488
    elements = 25_165_824 + 13_631_488
    per_element = reads * 2 + 1
    return elements * per_element * 2 * 4          # 2 layers, 4 micro-batches


@pytest.mark.parametrize("recipe,reads", [("delayed", 1), ("current", 2)])
def test_cast_time_is_the_hand_counted_bytes_at_the_streaming_bandwidth(tmp_path, recipe, reads):
    p = _tiny(tmp_path, f'; matmul_precision = "fp8"; fp8_recipe = "{recipe}"')
    nbytes = _hand_cast_bytes(reads)
    # delayed: 38,797,312 elements × 3 B × 8 = 931,135,488 B; at 3,350 GB/s × 0.9 = 3.015e12 B/s
    assert float(p.value("cast_time", "s")) == pytest.approx(nbytes / (3350e9 * 0.9), rel=1e-9)
    if recipe == "delayed":
        assert nbytes == 931_135_488
    # the casts are part of the compute term
    assert float(p.value("compute_time", "s")) > float(p.value("cast_time", "s"))


def test_memory_grows_by_the_fp8_weight_copy_and_the_amax_history(tmp_path):
    bf16 = _tiny(tmp_path, "", name="a.plan")
    fp8 = _tiny(tmp_path, '; matmul_precision = "fp8"', name="b.plan")
    # the linear layers' parameters (all but embedding and LM head): per layer attention
    # 4·h·h = 4,194,304 (q, k, v, o with 8 heads of 128 = h), MLP 3·h·f = 12,582,912, two RMSNorm
    # weights 2·h = 2,048 -> 16,779,264; two layers 33,558,528 plus the final norm 1,024 =
    # 33,559,552 parameters at 1 B each (delayed scaling: per-tensor scales, no block scales)
    copy = 33_559_552
    # delayed scaling's amax history: 1,024 FP32 entries for each of the 3 tensors (input, weight,
    # output gradient) of the 5 FP8 GEMMs per layer (qkv, out, gate, up, down), 2 layers:
    # 3·4·1024·10 = 122,880 B
    history = 3 * 4 * 1024 * 10
    assert float(fp8.value("matmul_copy_per_gpu", "B")) == pytest.approx(copy, rel=1e-12)
    assert float(fp8.value("scaling_state_per_gpu", "B")) == pytest.approx(history, rel=1e-12)
    grow = float(fp8.value("memory_per_gpu", "B")) - float(bf16.value("memory_per_gpu", "B"))
    assert grow == pytest.approx(copy + history, rel=1e-9)
    # `use memory` reports the copy the matmuls read: 1 B/param
    assert float(fp8.value("operand_bytes_per_param", "B/param")) == 1


def test_mxfp8_copy_carries_one_scale_byte_per_32_weights(tmp_path):
    # MXFP8 (OCP MX v1.0): one 8-bit scale per 32 elements -> 1 + 1/32 B per weight, no amax history
    p = _tiny(tmp_path, '; matmul_precision = "fp8"; fp8_recipe = "mxfp8"', device="b200")
    assert float(p.value("matmul_copy_per_gpu", "B")) == pytest.approx(33_559_552 * (1 + 1 / 32), rel=1e-12)
    assert float(p.value("scaling_state_per_gpu", "B")) == 0


def test_a_device_without_fp8_is_a_located_error(tmp_path):
    f = tmp_path / "a100.plan"
    f.write_text(TINY.replace("DEVICE", "a100_sxm_80gb").replace("LAYOUT", '; matmul_precision = "fp8"'))
    with pytest.raises(PlanError) as ei:
        dsl.load(f)
    text = str(ei.value)
    assert "error[missing-parameter]" in text and "fp8_flops" in text and "a100_sxm_80gb" in text
    assert "Traceback" not in text
    d = next(x for x in ei.value.diagnostics if x.severity == "error")
    line = next(i for i, x in enumerate(f.read_text().splitlines(), 1) if "matmul_precision" in x)
    assert d.span is not None and d.span.line == line
    assert d.hint and "fp8_flops" in d.hint


def test_fp4_needs_fp4_flops(tmp_path):
    f = tmp_path / "h100fp4.plan"
    f.write_text(TINY.replace("DEVICE", "h100_sxm").replace("LAYOUT", '; matmul_precision = "fp4"'))
    with pytest.raises(PlanError, match="fp4_flops"):
        dsl.load(f)
    # on a B200 (9 PFLOP/s dense FP4, DGX B200 datasheet) the linear products run at the FP4 peak
    p = _tiny(tmp_path, '; matmul_precision = "fp4"', device="b200", name="b200fp4.plan")
    assert float(p.value("cast_time", "s")) > 0


def test_dgx_cloud_70b_fp8_over_bf16_moves_toward_the_measured_ratio():
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import validation_table as vt

    rows = {r["id"]: r for r in vt.read_rows()}
    bf16, fp8 = rows["dgxc_70b_bf16_64"], rows["dgxc_70b_fp8_64"]
    assert "matmul_precision = \"fp8\"" in vt.plan_text(fp8) and "matmul_precision" not in vt.plan_text(bf16)
    measured = float(fp8["measured"]) / float(bf16["measured"])
    assert measured == pytest.approx(1.337, abs=5e-4)          # 95,239 / 71,235
    # both rows price the same layout; the tokens/s ratio is the BF16/FP8 step-time ratio
    predicted = vt.predict(fp8)["value"] / vt.predict(bf16)["value"]
    assert predicted > 1.15
    assert abs(predicted - measured) < abs(1 - measured)


def test_the_fp8_curve_has_its_own_sustained_share(tmp_path):
    # `fp8_sustained_efficiency` scales the FP8 curve only: a BF16 step is the same on a device
    # that halves it, an FP8 step is slower there; and stating it equal to the 16-bit share is the
    # same as the 16-bit share alone (its default)
    devs = ('device half extends h100_sxm { fp8_sustained_efficiency = 34.55 % }\n'
            'device same extends h100_sxm { sustained_efficiency = 60 %; fp8_sustained_efficiency = 60 % }\n'
            'device lower extends h100_sxm { sustained_efficiency = 60 %; fp8_sustained_efficiency = 30 % }\n')
    text = TINY.replace('import "@catalog/hardware.plan"\n', 'import "@catalog/hardware.plan"\n' + devs)

    def step(device, layout):
        f = tmp_path / f"{device}{len(layout)}.plan"
        f.write_text(text.replace("DEVICE", device).replace("LAYOUT", layout))
        return float(dsl.load(f)["p"].value("compute_time", "s"))
    fp8 = '; matmul_precision = "fp8"'
    assert step("half", "") == step("h100_sxm", "")
    assert step("half", fp8) > step("h100_sxm", fp8)
    assert step("lower", "") == step("same", "")
    assert step("lower", fp8) > step("same", fp8)


def test_fused_attention_runs_at_its_kernels_efficiency():
    # the fused QKᵀ/AV of a long sequence are compute-bound: at the kernel's efficiency η_attn in
    # place of the GEMM curve's η_max their time is (F + F_half)/(peak·η_attn), i.e. scaled by
    # η_max/η_attn exactly (H100: FlashAttention-2 causal 335 of 989.4 TFLOP/s, 33.9 %, against the
    # GEMM curve's 81.2 %); the linear layers are untouched
    slow = dict(H100, eta_attn=0.339)
    assert _gemm_times(slow, ("attention",)) == pytest.approx(_gemm_times(H100, ("attention",)) * 0.812 / 0.339,
                                                              rel=1e-12)
    assert _gemm_times(slow, ("layer",)) == _gemm_times(H100, ("layer",))


def test_the_framework_picks_the_attention_kernel(tmp_path):
    # torchtitan's SDPA runs FlashAttention-2 (33.9 % on the H100), NeMo's Transformer Engine cuDNN
    # (54.5 %), "none" the GEMM curve (81.2 %): the attention is slowest under torchtitan; a stated
    # kernel wins over the framework's
    def step(layout):
        f = tmp_path / f"k{abs(hash(layout))}.plan"
        f.write_text(TINY.replace("DEVICE", "h100_sxm").replace("LAYOUT", layout))
        return float(dsl.load(f)["p"].value("compute_time", "s"))
    none, nemo, titan = (step(f'; framework = "{fw}"') for fw in ("none", "nemo", "torchtitan"))
    assert none < nemo < titan
    assert step('; framework = "torchtitan"; attention_kernel = "gemm"') == none
    assert step('; attention_kernel = "flash2"') == titan

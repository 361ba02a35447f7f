"""The time of one inference-engine iteration (a scheduler step) from the device model: the
step cost model that ``use serving_step``, ``use batching`` and ``use serving_search`` price
with (the block, and the constants read from a plan, are :mod:`plugins.serving.serving_step`).

    step_time(c, prefill_tokens, decode_seqs, context_tokens, o) -> seconds

``c`` is the dict of :func:`constants` (for a plan, of
:func:`plugins.serving.serving_step.step_constants`; plain floats in base units, or sympy
expressions of the plan's inputs), ``prefill_tokens`` the tokens prefilled in the step (with
chunked prefill: the chunk), ``decode_seqs`` the sequences decoding one token each, and
``context_tokens`` the cached tokens those sequences read, summed over them.  Arguments may be
numbers, numpy arrays (one scheduler iteration per element) or sympy expressions; ``o`` is
:func:`plugins.hardware.ops.ops` (``"numpy"`` or ``"sympy"``).

The step is a sum of operations, each priced as a roofline — max(FLOPs / (peak·η), bytes /
(mem_bw·η_mem)) — so the move from a bandwidth-bound decode to a compute-bound prefill as the
batch grows comes out of the arithmetic, with no switch:

1. **dense matrices** (attention projections, dense FFN or router + shared experts): 2·T·N_dense
   FLOPs for the T = prefill_tokens + decode_seqs tokens of the step, against one read of their
   weights.  η(F) = η_max·F/(F + F_half) at the mean GEMM size F (4 GEMMs per layer: QKV, O,
   gate/up, down).
2. **routed experts** (MoE): 2·T·k·N_expert FLOPs against the experts the step's tokens hit —
   E·(1 − (1 − k/E)^T) distinct experts per MoE layer, the expected number when each of the T
   tokens picks k of the E experts uniformly (an inclusion–exclusion count; balanced routers
   aim at the uniform load).  A skewed router (``expert_skew`` s > 0: expert i's popularity
   ∝ i^(−s), Zipf) hits Σ_i 1 − (1 − q_i)^T, q_i the inclusion probabilities of
   :func:`expert_inclusion` — fewer distinct experts, so a smaller weight read, at the same
   FLOPs.  Measured routers are skewed: NVIDIA AIConfigurator prices Qwen3 MoE layers on fused-MoE
   kernels timed under power-law routing of exponent 1.2, estimated for Qwen3-235B on
   CNN/DailyMail and OpenOrca by latency matching, and states that "the top 20 % of experts
   handle ~65 % of the workload" there (ai-dynamo/aiconfigurator, collector docs "Power-Law
   Distribution in MoE Workload Simulation"; aiconfigurator_core/sdk/models/moe.py,
   ``_power_law_alpha = 1.2``); :func:`skew_for_top_share` turns such a share into s (0.91 for
   E = 128, top-8).  η = η_expert·F/(F + F_half) at the size of one grouped GEMM (two
   per MoE layer: gate/up and down, as vLLM's fused MoE kernel runs every expert of a layer in
   one launch); η_expert is the ``expert_efficiency`` knob.  The fused kernel's time is the
   *sum* of its FLOP time and its weight read, not their max (the measured vLLM fused-MoE kernel
   takes 0.95–1.10 of the sum over 32–16,384 tokens on H100 SXM; specs/data/serving/README.md).
3. **LM head**: 2·h·V per position that emits logits (each decoding sequence, and the last
   position of the prefill) against one read of V·h.
4. **attention** of the prefill chunk (causal pairs inside the chunk plus the pairs with a
   cached prefix, ``prefill_prefix``) at peak·η_attn, against reading the KV of prefix and
   chunk; **decode attention** against reading ``context_tokens`` of KV (its FLOPs count
   too, 4·n_q·d_h per pair and layer) at the device's ``kv_read_efficiency``, plus the device's
   ``decode_attention_call_time`` once per layer when the step decodes.
5. **elementwise kernels** (residual add + RMSNorm twice per layer, the gated activation):
   memory-bound, 2·4·h + mats·f elements read or written per token and layer.
6. **tensor-parallel all-reduces**: 2 per layer of T·h 16-bit activations on the link (ring
   α–β, see :func:`all_reduce_time`).
7. **fixed time**: kernels per step × ``kernel_overhead`` plus a host-side ``host_overhead``.

Weights, KV and heads are split over ``tp`` GPUs (KV heads replicated when tp > n_kv; an MLA
latent cache is replicated).  Sliding-window layers are priced as full-attention layers (an
upper bound on their KV reads).  Per-token FLOP formulas come from :mod:`plugins.model.flops` and the KV
bytes from :mod:`plugins.model.llmstate`; this module adds no FLOP formula of its own.

Efficiencies are fields of the device (``matmul_efficiency`` η_max, ``matmul_half_flops``
F_half, ``mem_efficiency`` η_mem); a device without them uses :data:`GENERIC`.  The attention
and expert efficiencies, the kernel overhead and the host overhead are knobs of
``use serving_step`` (defaults in :data:`GENERIC`).

Sources of the generic values:

* ``mem_efficiency`` 0.9: memory-bound kernels stream at about 0.9 of the nominal HBM bandwidth
  on Hopper — FlashMLA's decode kernel reaches "up to 3000 GB/s in memory-bound
  configuration" on an H800 SXM5 (3.35 TB/s nominal HBM3; deepseek-ai/FlashMLA README).
* ``weight_read_efficiency`` (a device field; default the device's ``mem_efficiency``): the
  fraction of mem_bw a GEMM reaches when its weight read bounds it (decode, few tokens) — it
  prices the weight reads of the dense matrices, the experts and the LM head.  The A100 SXM 80 GB
  states 0.685: gpt-fast's batch-1 Llama-2-7B BF16 decode reads 1,397 GB/s of its 2,039 GB/s
  (pytorch-labs/gpt-fast README).
* ``expert_read_efficiency`` (a device field; default the device's ``weight_read_efficiency``):
  the fraction of mem_bw at which the fused MoE kernel reads the weights of the experts a step
  hits.  The A100 SXM 80 GB states 0.776: vLLM's fused-MoE kernel (default config) takes 698.1 µs
  at 64 tokens for a layer of 64 experts of hidden 2,048, FFN 1,408, top-6 — all 64 experts hit,
  1.105 GB of BF16 weights — so it streams them at no less than 77.6 % of 2,039 GB/s (the whole
  kernel time taken as the read: the FLOP share of that time is not measured); a whole dense
  decode step of gpt-fast reaches 68.5 % (vllm-project/vllm pull request 40542;
  specs/data/serving/README.md).  On the same kernel and Qwen3-30B-A3B's shape, an A100 PCIe
  40 GB streams at no less than 83 % (vllm-project/vllm pull request 19049, 64 tokens).
* ``kv_read_efficiency`` and ``decode_attention_call_time`` (device fields; defaults the
  device's ``mem_efficiency`` and 0 s): a decode-attention call of one layer takes
  t0 + KV bytes / (mem_bw·η_kv).  The A100 SXM 80 GB states 19.7 µs and 0.81: the relative
  least-squares fit of Vidur's profiled FlashAttention-2 paged-decode calls on an A100 80GB
  (microsoft/vidur data/profiling/a100/attention.csv, 7,865 calls of 8–128 sequences at
  512–4,032 tokens, 89 % of them within 15 % of the fit; specs/data/serving/README.md).
* ``max_matmul_efficiency`` (a device field; default the device's ``matmul_efficiency``): the
  measured maximum achievable matmul throughput (MAMF) over ``peak_flops``; the step's η_max is
  the smaller of the two.  The A100 SXM 80 GB states 0.859: 267.9 of 312 TFLOP/s BF16
  (stas00/ml-engineering, "Maximum Achievable Matmul FLOPS comparison table"), below the 0.94 of
  Calculon that its ``matmul_efficiency`` carries for the training roofline.
* ``matmul_efficiency`` 0.8 and ``matmul_half_flops`` 1 GFLOP: a generic curve for BF16
  GEMMs — large ones at 0.8 of the dense tensor peak, a 2,048-token projection of Qwen3-8B
  (2·2,048·4,096·4,096 ≈ 69 GFLOP) at 0.8·69/70 ≈ 0.79, a decode GEMM of a few tokens far below
  (where the weight read bounds it anyway).  A device's own fields replace both.
* ``attention_efficiency`` 0.37: FlashAttention-2's forward at 2k tokens, head dim 128, on an
  H100 SXM5, about 360 TFLOP/s of 989 (Shah et al. 2024, "FlashAttention-3", arXiv:2407.08608,
  fig. "Attention forward speed, head dim 128 (H100 80GB SXM5)"); FlashAttention-3 reaches
  about 0.6, so the default is the conservative engine-agnostic kernel.
* ``expert_efficiency`` 0.5: a gathered/scattered grouped GEMM with the gated activation fused
  in (the fused MoE kernels of vLLM and SGLang) sustains "roughly half of the H100's dense bf16
  peak" at best — 523 TFLOP/s for Qwen3-30B-A3B's expert shape (E = 128, h = 2,048, f_e = 768,
  top-8) after tuning (linkedin/Liger-Kernel pull request 1294); untuned Triton and CUTLASS
  grouped GEMMs reach 0.16–0.22 of peak on the same shape (tgale96/grouped_gemm pull request 37,
  ByteDance-Seed/VeOmni pull request 460).
* ``kernel_overhead`` 2 µs: the fixed cost of one kernel of a step beyond its bandwidth or
  FLOP time — launch from a captured CUDA graph (about 0.9 µs per kernel: 80 small kernels in
  70 µs, CUDA.jl documentation "Graphs") plus the DRAM latency and tail of the first and last
  wave (about 1 µs).
* kernels per layer 10 (+2 with q/k norms, +4 on an MoE layer, 4 more per step): the forward
  of vLLM's decoder layers (vllm-project/vllm vllm/model_executor/models/qwen3.py at
  002456df36fc7a63ca4463f335a49d05634ab2ab: input_layernorm, qkv_proj, q_norm, k_norm,
  rotary_emb, attn — cache write and attention kernel —, o_proj, post_attention_layernorm,
  gate_up_proj, act_fn, down_proj); see :func:`kernels_per_step`.
* ``host_overhead`` 0 s: vLLM V1 and SGLang overlap the scheduler with the GPU (asynchronous
  scheduling); set it for an engine whose step waits for the host.
* TP all-reduces when the link states no ``latency``, ``launch`` or ``efficiency``: 4 µs per
  call and 1 µs per ring step (2 H100 SXM GPUs all-reduce a small message in about 6 µs with
  CUDA graphs: NVIDIA/nccl issue 1259), and 0.8 of the link bandwidth (ring all-reduce bus
  bandwidth 365–370 GB/s of NVLink 4's 450 GB/s on 8 H100 SXM: NVIDIA/nccl issue 1455).
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp

from plugins.model import flops
from plugins.training.layout_model import GENERIC_DEVICE, ops
from plugins.training.memory import nsimplify_float

ACT_BYTES = 2            # 16-bit activations in elementwise kernels and TP all-reduces
FORMAT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": sp.Rational(1, 2)}

GENERIC = {
    **GENERIC_DEVICE,            # the device curve a device without its own fields gets (one home)
    "attention_efficiency": 0.37,
    "expert_efficiency": 0.5,
    "expert_skew": 0.0,
    "kernel_overhead": 2e-6,
    "kernels_per_layer": None,       # None: counted from the architecture (kernels_per_step)
    "kernels_per_step": 4,
    "host_overhead": 0.0,
    "link_latency": 1e-6,
    "link_launch": 4e-6,
    "link_efficiency": 0.8,
}

REFERENCES = (
    "Williams, Waterman, Patterson 2009, 'Roofline: an insightful visual performance model' (time = "
    "max(FLOPs / peak, bytes / bandwidth) per kernel)",
    "Shah et al. 2024, 'FlashAttention-3', arXiv:2407.08608 (FlashAttention-2 and -3 forward TFLOP/s on "
    "H100 SXM5)",
    "Kwon et al. 2023, 'Efficient Memory Management for Large Language Model Serving with PagedAttention' "
    "(decode reads the weights once per step and each sequence's KV)",
    "Agrawal et al. 2024, 'Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve' "
    "(chunked prefill: a prefill chunk and the decodes share one step)",
    "deepseek-ai/FlashMLA README (memory-bound decode kernel up to 3000 GB/s on H800 SXM5: about 0.9 of HBM)",
    "pytorch-labs/gpt-fast README (Llama-2-7B BF16 decode on A100 80GB: 104.9 tokens/s, 1,397.31 GB/s)",
    "linkedin/Liger-Kernel pull request 1294 (fused MoE grouped GEMM at roughly half of the H100 BF16 peak)",
    "CUDA.jl documentation, 'Graphs' (80 small kernels in 70 µs from a CUDA graph)",
    "github.com/NVIDIA/nccl/issues/1259 (about 6 µs for a small all-reduce on 2 H100 SXM) "
    "and github.com/NVIDIA/nccl/issues/1455 (ring all-reduce "
    "bus bandwidth 365–370 GB/s on 8 H100 SXM)",
    "vllm-project/vllm vllm/model_executor/models/qwen3.py at 002456df36fc7a63ca4463f335a49d05634ab2ab "
    "(the kernels of one decoder layer)",
    "NVIDIA AIConfigurator 0.12 (ai-dynamo/aiconfigurator), per-operation step times measured on H100 "
    "SXM with vLLM 0.24.0 — the validation in benchmarks/aiconfigurator_compare.py",
    "stas00/ml-engineering, compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS comparison "
    "table' (A100 SXM: 267.9 of 312 TFLOP/s BF16)",
    "NVIDIA/TensorRT-LLM docs/source/performance.md, 'Low Latency' (first-token latency on A100, FP16, "
    "batch 1) — validation in tests/test_serving_step.py",
    "vllm-project/vllm pull request 19049 (fused MoE kernel times for Qwen3-30B-A3B on A100 PCIe 40GB, "
    "benchmarks/kernels/benchmark_moe.py) — validation of the routed-experts term",
    "vllm-project/vllm pull request 40542 (fused MoE kernel times for E=64, N=1408, top-6 on A100 SXM4 "
    "80GB, 1-4,096 tokens) — validation of the routed-experts term at prefill sizes (a known miss)",
    "JakeFlasher/benchmark_flash_attention (nvbench times of FlashAttention-2's paged decode on an A30, "
    "32 query and 8 KV heads of 128) — validation of the decode-attention term",
    "Agrawal et al. 2024, 'Vidur: A Large-Scale Simulation Framework for LLM Inference', MLSys 2024, "
    "arXiv:2405.05465; microsoft/vidur data/profiling/a100/attention.csv at e2d00e9 (profiled decode-attention "
    "calls on an A100 80GB) — the A100's kv_read_efficiency and decode_attention_call_time; its Meta-Llama-3-8B "
    "A100 profile (FlashInfer) as stored in sw5sh/cs378-assignment3 at 7ac2fe9 — their validation",
)


# ---------------------------------------------------------------- constants
def constants(a, m, dev, *, kv_bytes, tp=1, link=None, weights="bf16", knobs=None, kv_window=None):
    """The step constants from an architecture and a device (numbers or sympy expressions).

    :param a: :func:`plugins.model.decoder.architecture`; :param m: :func:`plugins.model.decoder.moe_architecture`.
    :param dev: dict with ``peak_flops`` (FLOP/s), ``mem_bw`` (B/s) and optionally
        ``matmul_efficiency``, ``matmul_half_flops``, ``mem_efficiency`` and the other fields of
        :data:`DEVICE_FIELDS` (``decode_attention_call_time`` in s).
    :param tp: tensor-parallel degree (a whole number); :param link: dict with ``bandwidth``
        (B/s per direction) and optionally ``latency`` (s), ``efficiency``, ``launch`` for tp > 1.
    :param kv_bytes: KV-cache bytes per token of the whole model (all layers, before the TP
        split): :func:`plugins.model.llmstate.kv_bytes_per_token`.
    :param weights: format of the weights read.
    :param kv_window: ``(local share, window)`` for a model with sliding-window layers
        (:func:`kv_window_of`): the share of the per-token KV width on those layers and their
        window in tokens; ``None``: every layer attends to the whole context.
    :param knobs: overrides of :data:`GENERIC` (attention_efficiency, kernel_overhead, …).
    :return: dict in base units (per GPU after the TP split): ``peak``, ``mem_bw``, ``eta_mm``,
        ``F_half``, ``eta_mem``, ``eta_wr`` (weight reads), ``eta_er`` (expert reads), ``eta_kv`` (decode KV reads),
        ``attn_call_time`` (s per layer's decode-attention call), ``eta_attn``;
        ``dense_params``/``dense_bytes`` (matrices outside the routed experts), ``E``, ``k``, ``moe_layers``, ``expert_params``/``expert_bytes``
        (one expert in every MoE layer), ``head_flops``/``head_bytes`` (LM head),
        ``attn_per_pair`` (FLOP per query–key pair, all layers), ``kv_bytes_per_token``,
        ``elementwise_bytes`` (per token), ``allreduces``, ``allreduce_bytes_per_token``,
        ``link_*``, ``kernels``, ``kernel_overhead``, ``host_overhead``, ``weights_per_gpu``;
        and the summaries ``active_params`` (a token's matrices with the LM head),
        ``peak_eff`` (peak·η_max), ``mem_bw_eff`` (mem_bw·η_mem), ``step_overhead`` (s).
    """
    k_ = dict(GENERIC)
    k_.update({key: v for key, v in (knobs or {}).items() if v is not None})
    if any(isinstance(v, sp.Basic) for v in a.values()):
        # symbolic constants: exact rationals for the generic values (readable explanations)
        # the generic knobs' values as exact rationals, once per value and process (every
        # evaluation of a plan with a step model asks for the same ten; a solve re-evaluates)
        k_ = {key: (nsimplify_float(v) if isinstance(v, float) else v) for key, v in k_.items()}
    wb = FORMAT_BYTES[weights]
    if not any(isinstance(v, sp.Basic) for v in a.values()) and isinstance(wb, sp.Basic):
        wb = float(wb)
    moe = m is not None and m.get("moe", False)
    dense_m = m if moe else None
    block = flops.block_matrix_params(a, dense_m)          # a token's matrices, all blocks
    if moe:
        # the routed experts' share of the blocks, from the shared formula: one expert per
        # MoE layer minus none, times k for a token
        one = flops.block_matrix_params(a, dict(m, k=1, ks=0))
        none = flops.block_matrix_params(a, dict(m, k=0, ks=0))
        expert_all = one - none                               # Lm · (one expert's matrices)
        Lm = a["L"] - m["Ld"]
        routed = m["k"] * expert_all
        dense = block - routed                               # attention, dense FFN, router, shared
        E, k = m["E"], m["k"]
    else:
        expert_all, Lm, dense, E, k = 0, 0, block, 1, 0
    d_qk, d_v = flops.head_widths(a, m)
    per_pair = a["L"] * flops.attention_core(a["nq"], d_qk, d_v, 1)
    mla = m is not None and m.get("mla", False)
    kv_split = 1 if (mla or (isinstance(tp, int) and tp == 1)) else min_(tp, a["nkv"])
    f_active = a["f"] if not moe else (m["k"] + m["ks"]) * m["fe"]
    if moe and not _is_zero(m["Ld"]):
        f_active = (m["Ld"] * a["f"] + Lm * (m["k"] + m["ks"]) * m["fe"]) / a["L"]
    eta_mem = dev.get("mem_efficiency", k_["mem_efficiency"])
    eta_wr = dev.get("weight_read_efficiency", eta_mem)
    c = {
        "tp": tp,
        "L": a["L"],
        "h": a["h"],
        "peak": dev["peak_flops"],
        # η_max, capped by the device's measured maximum achievable matmul throughput (MAMF)
        "eta_mm": min_(dev.get("matmul_efficiency", k_["matmul_efficiency"]),
                       dev.get("max_matmul_efficiency", dev.get("matmul_efficiency", k_["matmul_efficiency"]))),
        "F_half": dev.get("matmul_half_flops", k_["matmul_half_flops"]),
        "eta_mem": eta_mem,
        # a GEMM whose weight read bounds it (few tokens): its own fraction of mem_bw
        "eta_wr": eta_wr,
        # the fused MoE kernel's read of the experts it hits: its own fraction of mem_bw
        "eta_er": dev.get("expert_read_efficiency", eta_wr),
        "eta_attn": k_["attention_efficiency"],
        # decode attention: its KV read's own fraction of mem_bw and a fixed time per call
        "eta_kv": dev.get("kv_read_efficiency", eta_mem),
        "attn_call_time": dev.get("decode_attention_call_time", 0),
        "eta_expert": k_["expert_efficiency"],
        "mem_bw": dev["mem_bw"],
        # matrices a token multiplies outside the routed experts, per GPU (params)
        "dense_params": dense / tp,
        "dense_bytes": wb * dense / tp,
        "gemms": 4 * a["L"],
        # routed experts (0 for a dense model)
        "E": E, "k": k, "moe_layers": Lm,
        # Zipf exponent of the experts' popularity (0: uniform routing); a plain float in both
        # modes: it picks the inclusion probabilities of distinct_experts, not a term
        "expert_skew": float(k_["expert_skew"]) if moe else 0.0,
        "expert_counts": tuple(k_.get("expert_counts") or (E, k)),
        "expert_params": expert_all / tp,                    # one expert in every MoE layer, per GPU
        "expert_bytes": wb * expert_all / tp,
        # LM head (vocabulary-parallel under TP)
        "head_flops": flops.lm_head_forward_per_token(a) / tp,
        "head_bytes": wb * a["V"] * a["h"] / tp,
        # attention: FLOPs per (query, key) pair over all layers, KV bytes per token, per GPU
        "attn_per_pair": per_pair / tp,
        "kv_bytes_per_token": kv_bytes / kv_split,
        # sliding-window layers: their share of the KV width and their window (tokens)
        "kv_local_share": 0 if kv_window is None else kv_window[0],
        "kv_window": None if kv_window is None else kv_window[1],
        # elementwise traffic per token, all layers: two add+norms (x and residual read and
        # written: 4·h each) and the gated activation (mats·f: inputs read, output written)
        "elementwise_bytes": ACT_BYTES * a["L"] * (2 * 4 * a["h"] + a["mats"] * f_active / tp),
        # TP all-reduces: 2 per layer of h activations per token
        "allreduces": 2 * a["L"],
        "allreduce_bytes_per_token": ACT_BYTES * a["h"],
        "link_bw": (link or {}).get("bandwidth", 0) or 0,
        "link_latency": (link or {}).get("latency", k_["link_latency"]),
        "link_efficiency": (link or {}).get("efficiency", k_["link_efficiency"]),
        "link_launch": (link or {}).get("launch", k_["link_launch"]),
        "kernels": kernels_per_step(a, m, k_),
        "kernel_overhead": k_["kernel_overhead"],
        "host_overhead": k_["host_overhead"],
        "weights_per_gpu": wb * (block + (expert_all * (E - k) if moe else 0)) / tp + wb * a["V"] * a["h"] / tp,
    }
    # summary keys (the contract's names) for callers that price a step their own way
    c["active_params"] = (block + a["V"] * a["h"]) / tp
    c["peak_eff"] = c["peak"] * c["eta_mm"]
    c["mem_bw_eff"] = c["mem_bw"] * c["eta_mem"]
    c["step_overhead"] = c["kernels"] * c["kernel_overhead"] + c["host_overhead"]
    return c


def kernels_per_step(a, m, knobs=None):
    """Kernels one step launches: per layer two fused add+RMSNorm, QKV, rotary, the KV-cache
    write, attention, O, gate/up, activation, down (10); + 2 with q/k norms; an MoE layer
    replaces the 3 FFN kernels by router GEMM, top-k softmax, token alignment, two grouped
    GEMMs, activation and the weighted sum (+4); per step the embedding, final norm, LM head
    and sampling (4).  ``knobs["kernels_per_layer"]`` overrides the per-layer count."""
    k_ = dict(GENERIC)
    k_.update({key: v for key, v in (knobs or {}).items() if v is not None})
    if k_["kernels_per_layer"] is not None:
        return a["L"] * k_["kernels_per_layer"] + k_["kernels_per_step"]
    per = 10 + (2 if a.get("qk_norm") else 0)
    moe_layers = (a["L"] - m["Ld"]) if (m is not None and m.get("moe")) else 0
    return a["L"] * per + 4 * moe_layers + k_["kernels_per_step"]


def _is_zero(x):
    try:
        return float(x) == 0
    except TypeError:
        return False


def min_(x, y):
    if isinstance(x, sp.Basic) or isinstance(y, sp.Basic):
        return sp.Min(x, y)
    return min(x, y)


def kv_window_of(model, conv=float):
    """``(local share, window)`` of a model with sliding-window layers — the share of the
    per-token KV width (:func:`plugins.model.llmstate.kv_bytes_per_token`) that sits on those layers,
    W_l / (W_g + W_l), and the window w in tokens (``kv_cache_width_global/_local``,
    ``attention_window``) — or ``None`` when every layer attends to the whole context."""
    from plugins.model.llmstate import kv_widths

    g, l, w = kv_widths(model)
    if w is None or l == 0:
        return None
    return conv(l / (g + l)), conv(w)


#: the optional device fields the step reads (name, unit); a device without one uses the
#: default of :func:`constants` (GENERIC, or another field: see the module docstring)
DEVICE_FIELDS = (("matmul_efficiency", ""), ("matmul_half_flops", "FLOP"), ("mem_efficiency", ""),
                 ("weight_read_efficiency", ""), ("expert_read_efficiency", ""), ("max_matmul_efficiency", ""),
                 ("kv_read_efficiency", ""), ("decode_attention_call_time", "s"))


# ---------------------------------------------------------------- the step
def matmul_efficiency(c, F):
    """η(F) = η_max · F / (F + F_half): the fraction of peak a GEMM of F FLOPs reaches."""
    return c["eta_mm"] * F / (F + c["F_half"])


def gemm_time(c, F, n, eta_max):
    """FLOP time of n equal GEMMs of F FLOPs in all at η(F/n) = η_max·(F/n)/(F/n + F_half):
    F/(peak·η) = (F + n·F_half)/(peak·η_max) — each GEMM costs F_half more at full efficiency
    (finite for F = 0)."""
    return (F + n * c["F_half"]) / (c["peak"] * eta_max)


def roofline(c, F, B, o, eta=None):
    """max(F / (peak·η), B / (mem_bw·η_mem)) in s; η = η(F) unless given."""
    e = matmul_efficiency(c, F) if eta is None else eta
    return o.max(F / (c["peak"] * e), B / (c["mem_bw"] * c["eta_mem"]))


def distinct_experts(E, k, n, skew=0):
    """Expected distinct experts hit when n tokens each pick k of the E routed experts.

    ``skew`` = 0 (uniform routing): E·(1 − (1 − k/E)^n) — each expert is missed by one token
    with probability 1 − k/E, by n independent tokens with its n-th power.  ``skew`` = s > 0:
    Σ_i 1 − (1 − q_i)^n over the experts' inclusion probabilities q_i of
    :func:`expert_inclusion` (Zipf popularity of exponent s).  ``n`` may be a number, a numpy
    array (one value per element) or a sympy expression (for s > 0 one :class:`experts_hit`
    node); E and k must be numbers when s > 0.  Returns experts (a float, an array or an expression)."""
    if not skew:
        return E * (1 - (1 - k / E) ** n)
    if isinstance(n, sp.Basic):
        return experts_hit(n, sp.Integer(int(E)), sp.Integer(int(k)), sp.Float(float(skew)))
    return _hit_sum(n, E, k, skew)


def _hit_sum(n, E, k, skew):
    """Σ_i 1 − (1 − q_i)^n for a number or numpy array n (the terms added in expert order, the
    same operations for both, so an array element equals the number bit for bit)."""
    if isinstance(n, sp.Basic):
        n = float(n)
    if isinstance(n, (int, float)):
        x = n                                   # a scheduler step: no numpy (small plans never load it)
    else:
        import numpy as np
        x = np.asarray(n, dtype=float)
    total = 0.0
    for q in expert_inclusion(int(E), int(k), float(skew)):
        total = total + (1 - (1 - q) ** x)
    return total


def _hit_rate(n, E, k, skew):
    """d/dn Σ_i 1 − (1 − q_i)^n = −Σ_i ln(1 − q_i)·(1 − q_i)^n (an expert every token picks,
    q = 1, adds nothing past n = 1)."""
    import numpy as np
    q = np.asarray(expert_inclusion(int(E), int(k), float(skew)))
    q = q[q < 1]
    x = np.asarray(n, dtype=float)
    qq = q.reshape((-1,) + (1,) * x.ndim)
    out = (-np.log1p(-qq) * (1 - qq) ** x).sum(axis=0)
    return float(out) if x.ndim == 0 else out


class experts_hit(sp.Function):
    """``experts_hit(n, E, k, s)``: the expected distinct experts n tokens hit under a router
    of Zipf skew s (:func:`distinct_experts`), as one sympy function of n — its value and
    its derivative in n are computed from :func:`expert_inclusion` (``evalf`` and
    ``lambdify`` call :attr:`_imp_`), so a plan's expression holds one node instead of an
    E-term sum.  E, k and s are numbers."""

    nargs = 4
    _imp_ = staticmethod(_hit_sum)

    def fdiff(self, argindex=1):
        if argindex != 1:
            raise sp.ArgumentIndexError(self, argindex)
        return experts_hit_rate(*self.args)

    def _eval_is_real(self):
        return True

    def _eval_is_nonnegative(self):
        return True


class experts_hit_rate(sp.Function):
    """``experts_hit_rate(n, E, k, s)``: d experts_hit / dn (:func:`_hit_rate`)."""

    nargs = 4
    _imp_ = staticmethod(_hit_rate)

    def _eval_is_real(self):
        return True

    def _eval_is_nonnegative(self):
        return True


@lru_cache(maxsize=64)
def expert_inclusion(E: int, k: int, skew: float) -> tuple:
    """Probabilities q_1 ≥ … ≥ q_E that one token's k routed experts include expert i, when
    expert i's popularity is Zipf's p_i = i^(−s) / Σ_j j^(−s) (s = ``skew``; s = 0 is uniform).

    A token picks k *distinct* experts, so q_i = min(1, c·p_i) with c chosen so that Σ q_i = k
    (inclusion probabilities proportional to size, capped at 1: an expert so popular that every
    token picks it is picked once; Hájek 1964, "Asymptotic theory of rejective sampling").
    The fraction of routed token slots expert i receives is q_i / k.  Returns a tuple of E floats.
    Raises ValueError unless 1 ≤ k ≤ E and s ≥ 0."""
    if not (1 <= k <= E) or skew < 0:
        raise ValueError(f"expert_inclusion needs 1 <= k <= E and skew >= 0 (E={E}, k={k}, skew={skew})")
    p = [i ** -skew for i in range(1, E + 1)]
    q = [0.0] * E
    capped = 0                          # the most popular experts, q = 1 (a prefix: p decreases)
    c = k / sum(p)
    while capped < k and c * p[capped] > 1:
        capped += 1
        c = (k - capped) / sum(p[capped:]) if capped < E else 0.0
    for i in range(E):
        q[i] = 1.0 if i < capped else c * p[i]
    return tuple(q)


def expert_top_share(E: int, k: int, skew: float, fraction: float = 0.2) -> float:
    """Share of the routed token slots that the most popular ⌈fraction·E⌉ experts receive under
    :func:`expert_inclusion` (0.2 of E experts take 0.2 of the slots under uniform routing)."""
    import math
    q = expert_inclusion(E, k, skew)
    return sum(q[:math.ceil(fraction * E - 1e-9)]) / k


def skew_for_top_share(E: int, k: int, share: float, fraction: float = 0.2) -> float:
    """The Zipf exponent s at which the most popular ⌈fraction·E⌉ experts receive ``share`` of
    the routed token slots (:func:`expert_top_share`), by bisection to 1e-12 on s ∈ [0, 20].
    A way to state a measured load imbalance ("the top 20 % of experts take 65 % of the
    tokens") as the ``expert_skew`` knob.  Raises ValueError when ``share`` is below the
    uniform share or not reachable."""
    lo, hi = 0.0, 20.0
    if not expert_top_share(E, k, lo, fraction) <= share <= expert_top_share(E, k, hi, fraction):
        raise ValueError(f"a top-{fraction:.0%} share of {share} is not reachable with {E} experts, top-{k}")
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        if expert_top_share(E, k, mid, fraction) < share:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def all_reduce_time(k, size, c, o):
    """All-reduce of ``size`` bytes among k GPUs on the step's link.  Uses
    :func:`plugins.hardware.collectives.collective_time` when that module exists; otherwise a ring:
    2(k−1) steps of α and 2(k−1)/k·size at bandwidth·efficiency, plus a launch."""
    link = {"bandwidth": c["link_bw"], "latency": c["link_latency"], "efficiency": c["link_efficiency"],
            "launch": c["link_launch"], "nvls": False}
    try:
        from plugins.hardware.collectives import collective_time
    except ImportError:
        collective_time = None
    if collective_time is not None:
        return collective_time("all_reduce", k, size, link, o)
    return ring_all_reduce(k, size, link)


def ring_all_reduce(k, size, link):
    """Ring all-reduce: 2(k−1)·α + 2(k−1)/k·size/(bandwidth·efficiency) + launch (k ≥ 2)."""
    bw = link["bandwidth"] * link.get("efficiency", 1)
    return link.get("launch", 0) + 2 * (k - 1) * link.get("latency", 0) + 2 * (k - 1) / k * size / bw


def _weight_bw(c):
    """Bandwidth at which a GEMM reads its weights: mem_bw · η_wr (``weight_read_efficiency``,
    else ``mem_efficiency``)."""
    return c["mem_bw"] * c["eta_wr"]


def _expert_bw(c):
    """Bandwidth at which the fused MoE kernel reads the experts a step hits: mem_bw · η_er
    (``expert_read_efficiency``, else ``weight_read_efficiency``)."""
    return c["mem_bw"] * c["eta_er"]


def _dense(c, T, o):
    """Term 1, the dense matrices of a step of T tokens: (time, FLOP time, weight-read time)."""
    F = 2 * T * c["dense_params"]
    tc, tm = gemm_time(c, F, c["gemms"], c["eta_mm"]), c["dense_bytes"] / _weight_bw(c)
    return (o.max(tc, tm), tc, tm)


def _experts(c, T, o):
    """Term 2, the routed experts of a step of T tokens (MoE): their FLOP time plus their weight read."""
    F = 2 * T * c["k"] * c["expert_params"]
    skew = c.get("expert_skew", 0)
    hit = distinct_experts(*c["expert_counts"], T, skew) if skew else distinct_experts(c["E"], c["k"], T)
    # two grouped GEMMs per MoE layer (gate/up, down), at the expert efficiency; the
    # fused kernel's weight read and its MMAs do not overlap: their sum
    tc = gemm_time(c, F, 2 * c["moe_layers"], c["eta_expert"])
    tm = hit * c["expert_bytes"] / _expert_bw(c)
    return (tc + tm, tc, tm)


def _logits(P, D, prefill_seqs, o):
    """Positions that emit logits: each decode and the last position of each prefill."""
    return D + (o.min(P, 1) if prefill_seqs is None else prefill_seqs)


def _lm_head(c, logits, o):
    """Term 3, the LM head over ``logits`` positions (:func:`_logits`)."""
    F = c["head_flops"] * logits
    tc, tm = gemm_time(c, F, 1, c["eta_mm"]), c["head_bytes"] / _weight_bw(c)
    return (o.max(tc, tm), tc, tm)


def lm_head_term(c, logits, o):
    """The LM head term of a step whose ``logits`` positions emit logits: (time, FLOP time,
    weight-read time) in s (a speculative verification step emits them at every position)."""
    return _lm_head(c, logits, o)


def _prefill_attention(c, P, K, prefill_seqs, o):
    """Term 4a, attention of a prefill chunk of P tokens: the chunk of each of the ns sequences
    (P/ns tokens, causal inside, full to its prefix of K tokens)."""
    peak, bw = c["peak"], c["mem_bw"] * c["eta_mem"]
    ns = 1 if prefill_seqs is None else o.max(prefill_seqs, 1)     # 0 sequences: no pairs either
    pairs = ns * (flops.attention_pairs(K + P / ns) - flops.attention_pairs(K))
    Kr = K                                           # prefix tokens read per sequence
    if c.get("kv_window") is not None:
        # sliding-window layers: query t scores min(t, w) keys, so a chunk from K + 1 to K + n
        # scores S(K + n) − S(K) with S(x) = Σ_{t ≤ x} min(t, w) = μ(μ+1)/2 + (x − μ)·w,
        # μ = min(x, w); and reads at most w of its prefix (layer shares by KV width, equal to
        # the shares of layers when every layer has the same KV heads, as in Gemma 2/3)
        sh, w = c["kv_local_share"], c["kv_window"]

        def S(x):
            mu = o.min(x, w)
            return mu * (mu + 1) / 2 + (x - mu) * w
        pairs = (1 - sh) * pairs + sh * ns * (S(K + P / ns) - S(K))
        Kr = (1 - sh) * K + sh * o.min(K, w)
    tc = pairs * c["attn_per_pair"] / (peak * c["eta_attn"])
    # prefixes (when there is a chunk) and chunks read, chunks written
    tm = (o.min(P, 1) * ns * Kr + 2 * P) * c["kv_bytes_per_token"] / bw
    return (o.max(tc, tm), tc, tm)


def _decode_attention(c, C, D, o):
    """Term 4b, attention of D decoding sequences reading C cached tokens in all."""
    return decode_attention_of(c, o)(C, D)


def decode_attention_of(c, o):
    """Term 4b as a function ``(C, D) -> (time, FLOP time, memory time)`` of the constants c
    (read once): D decoding sequences reading C cached tokens in all, and writing one each."""
    per_pair, kv_bytes = c["attn_per_pair"], c["kv_bytes_per_token"]
    # the KV read at the KV-read bandwidth (device field kv_read_efficiency, else mem_efficiency)
    flop_rate, bw_kv = c["peak"] * c["eta_attn"], c["mem_bw"] * c.get("eta_kv", c["eta_mem"])
    window, share = c.get("kv_window"), c["kv_local_share"]
    call = c.get("attn_call_time", 0)
    has_call = not _is_zero(call)
    L = c["L"] if has_call else None

    def term(C, D):
        Ce = C
        if window is not None:
            # a sliding-window layer reads at most its window of each sequence: Σ_i min(C_i, w)
            # is taken as min(C, D·w) — exact when every context is longer than w or none is,
            # an upper bound otherwise (only the sum C of the D contexts is known)
            Ce = C - share * o.max(C - D * window, 0)
        tc = (Ce + D) * per_pair / flop_rate
        tm = (Ce + D) * kv_bytes / bw_kv           # the context read, one token written
        if has_call:
            # a fixed time per layer's call when the step decodes at all (min(D, 1): D is a
            # whole number of sequences)
            tm = tm + o.min(D, 1) * L * call
        return (o.max(tc, tm), tc, tm)
    return term


def _elementwise(c, T):
    """Term 5, the elementwise kernels of T tokens (memory-bound)."""
    tm = T * c["elementwise_bytes"] / (c["mem_bw"] * c["eta_mem"])
    return (tm, None, tm)


def _has_allreduce(c) -> bool:
    return not (isinstance(c["tp"], (int, float)) and c["tp"] == 1)


def _tp_allreduce(c, T, o):
    """Term 6, the TP all-reduces of T tokens."""
    return (c["allreduces"] * all_reduce_time(c["tp"], T * c["allreduce_bytes_per_token"], c, o), None, None)


def _fixed(c):
    """Term 7, the fixed time per step."""
    return (c["kernels"] * c["kernel_overhead"] + c["host_overhead"], None, None)


def step_parts(c, prefill_tokens, decode_seqs, context_tokens, o, prefill_prefix=0, prefill_seqs=None):
    """The terms of :func:`step_time` (s), each a roofline or a fixed time: a dict
    ``{name: (time, compute_time, memory_time)}`` (compute/memory None for fixed terms), in the
    order :func:`step_time` adds them."""
    P, D, C = prefill_tokens, decode_seqs, context_tokens
    T = P + D
    out = {"dense": _dense(c, T, o)}                                       # 1. dense matrices
    if not _is_zero(c["moe_layers"]):
        out["experts"] = _experts(c, T, o)                                 # 2. routed experts
    out["lm_head"] = _lm_head(c, _logits(P, D, prefill_seqs, o), o)       # 3. LM head
    out["prefill_attention"] = _prefill_attention(c, P, prefill_prefix, prefill_seqs, o)   # 4. attention
    out["decode_attention"] = _decode_attention(c, C, D, o)
    out["elementwise"] = _elementwise(c, T)                                # 5. elementwise kernels
    if _has_allreduce(c):
        out["tp_allreduce"] = _tp_allreduce(c, T, o)                       # 6. TP all-reduces
    out["fixed"] = _fixed(c)                                               # 7. fixed time per step
    return out


def step_time(c, prefill_tokens, decode_seqs, context_tokens, o=None, prefill_prefix=0, prefill_seqs=None):
    """Seconds of one engine iteration: ``prefill_tokens`` prefilled — ``prefill_seqs``
    sequences of equal chunks (default one), each after ``prefill_prefix`` cached tokens —
    and ``decode_seqs`` sequences decoding one token while reading ``context_tokens`` cached
    tokens in all.  Vectorised over numpy arrays; sympy expressions give an expression.  A step
    with no tokens (numbers or array elements) takes no time.  See the module docstring for the
    terms."""
    if o is None:
        o = ops("numpy")
    parts = step_parts(c, prefill_tokens, decode_seqs, context_tokens, o, prefill_prefix, prefill_seqs)
    total = 0
    for t, _, _ in parts.values():
        total = total + t
    T = prefill_tokens + decode_seqs
    if isinstance(T, sp.Basic):
        return total
    import numpy as np
    if isinstance(T, np.ndarray) or isinstance(total, np.ndarray):
        return np.where(np.asarray(T) > 0, total, 0.0)       # an empty step takes no time
    return total if T > 0 else 0.0


class ScalarStep:
    """:func:`step_time` of one iteration on Python numbers, for one dict ``c`` of float
    constants: what a simulator calls once per scheduler iteration (tens of thousands of
    calls for one trace).

    ``step(prefill_tokens, decode_seqs, context_tokens, prefill_prefix=0, prefill_seqs=None)``
    → seconds, equal to ``step_time(c, …, ops("python"), …)`` bit for bit: every term is
    computed by the function :func:`step_parts` uses and the terms are added in its order.
    The terms before the decode attention do not depend on the context, so their running sum
    is remembered by (prefill tokens, decodes, prefix, prefill sequences), with the elementwise
    and all-reduce terms of the step's tokens; only the decode attention, a function of the
    context read, is computed on every call.  The memo starts over past :attr:`MEMO_CAP` entries.
    :meth:`of` shares one evaluator (and its memo) among equal constants."""

    MEMO_CAP = 1 << 16
    SHARED_CAP = 32                     # evaluators :meth:`of` keeps
    _shared: dict = {}

    @classmethod
    def of(cls, c) -> "ScalarStep":
        """The evaluator of constants c, one per set of equal values (the plans of a file, the
        candidates of a search and the evaluations of a solve share what they price): the
        values are a pure function of the constants, so the memo is too."""
        try:                            # by type and exact value (float.hex: −0.0 is not 0.0)
            key = tuple(sorted((k, type(v), v.hex() if isinstance(v, float) else v) for k, v in c.items()))
            hash(key)
        except TypeError:               # an unhashable value: an evaluator of its own
            return cls(c)
        one = cls._shared.get(key)
        if one is None:
            if len(cls._shared) >= cls.SHARED_CAP:
                cls._shared.clear()
            one = cls._shared[key] = cls(dict(c))
        return one

    def __init__(self, c):
        self.c, self.o = c, ops("python")
        self.moe, self.ar = not _is_zero(c["moe_layers"]), _has_allreduce(c)
        self.fixed = _fixed(c)[0]
        self.decode_attention = decode_attention_of(c, self.o)
        self._memo: dict = {}
        self._tokens: dict = {}
        self._logits: dict = {}
        self._chunks: dict = {}

    def _before(self, P, D, K, ps):
        """(sum of the terms before the decode attention, elementwise term, all-reduce term or
        None, whether the step has tokens), remembered; each term remembered by its own
        arguments too (the step's tokens, the logit positions, the prefill chunk)."""
        c, o = self.c, self.o
        T = P + D
        t = self._tokens.get(T)
        if t is None:
            t = self._tokens[T] = (_dense(c, T, o)[0], _experts(c, T, o)[0] if self.moe else None,
                                   _elementwise(c, T)[0], _tp_allreduce(c, T, o)[0] if self.ar else None, T > 0)
        n = _logits(P, D, ps, o)
        lm = self._logits.get(n)
        if lm is None:
            lm = self._logits[n] = _lm_head(c, n, o)[0]
        pa = self._chunks.get((P, K, ps))
        if pa is None:
            pa = self._chunks[P, K, ps] = _prefill_attention(c, P, K, ps, o)[0]
        total = 0 + t[0]
        if t[1] is not None:
            total = total + t[1]
        total = total + lm
        total = total + pa
        if len(self._memo) >= self.MEMO_CAP:    # each term memo gains at most one entry per step memo's
            for memo in (self._memo, self._tokens, self._logits, self._chunks):
                memo.clear()
        m = self._memo[P, D, K, ps] = (total, t[2], t[3], t[4])
        return m

    def __call__(self, P, D, C, K=0, ps=None):
        m = self._memo.get((P, D, K, ps))
        if m is None:
            m = self._before(P, D, K, ps)
        total = m[0] + self.decode_attention(C, D)[0]
        total = total + m[1]
        if m[2] is not None:
            total = total + m[2]
        total = total + self.fixed
        return total if m[3] else 0.0


#: the simulator's hook (plugins/serving/serving_sim_core.py :func:`simulate`): the same cost, one iteration
#: on Python numbers at a time
step_time.for_numbers = ScalarStep.of


def static_batch(c, batch, isl, osl, o=None):
    """(TTFT, TPOT) in s of a static batch: ``batch`` prompts of ``isl`` tokens prefilled in one
    step, then osl − 1 decode steps of the batch as each context grows from isl + 1 to
    isl + osl − 1 (TPOT their mean).  Numbers only (the decode steps are summed in numpy)."""
    import numpy as np

    o = o or ops("numpy")
    ttft = step_time(c, batch * isl, 0, 0, o, prefill_seqs=batch)
    j = np.arange(1, max(int(osl), 2))
    tpot = np.mean(step_time(c, 0 * j, batch + 0 * j, batch * (isl + j), o))
    return float(ttft), float(tpot)


def bound(c, prefill_tokens, decode_seqs, context_tokens, prefill_prefix=0, prefill_seqs=None):
    """("compute" | "memory", FLOP time, memory time): the FLOP and memory times of the step's
    roofline operations, each summed over the operations (numbers only), and the larger side."""
    o = ops("numpy")
    comp = mem = 0.0
    parts = step_parts(c, prefill_tokens, decode_seqs, context_tokens, o, prefill_prefix, prefill_seqs)
    for _, tc, tm in parts.values():
        comp += float(tc) if tc is not None else 0.0
        mem += float(tm) if tm is not None else 0.0
    return ("compute" if comp > mem else "memory"), comp, mem


def crossover_batch(c):
    """Decode batch at which the dense matrices' FLOP time equals their weight read, with large-
    GEMM efficiency η_max: b* = bytes·peak·η_max / (2·N·mem_bw·η_mem) — bf16: peak·η/(bw·η_mem)."""
    return c["dense_bytes"] * c["peak"] * c["eta_mm"] / (2 * c["dense_params"] * c["mem_bw"] * c["eta_mem"])

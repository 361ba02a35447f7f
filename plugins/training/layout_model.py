"""Closed forms of a parallel layout (TP × PP × DP/ZeRO × EP × CP), shared by ``use layout``
(sympy, one layout) and the layout search (numpy, a whole candidate grid at once).

Every function takes an ``ops`` namespace (:data:`NUMPY` or :data:`SYMPY`) for ``max``,
``min`` and ``where``, so one text serves both: in the sympy path the structural knobs
(tp, pp, …) are Python ints and ``where`` picks a branch; in the numpy path they are arrays.
In the sympy path :func:`evaluate` records the operations (:class:`_Lazy`) and builds only the
values a caller reads, each exactly as the eager text would.

Sources: book ch. 10 §10.2.4 (combined parallelism, per-GPU memory and per-link traffic),
§10.3 (overlap, pipeline bubbles); Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (activation bytes, §4); Narayanan et al. 2021
(Megatron-LM, 1F1B and interleaved schedules); the ZeRO volumes of ``plugins/training/zero.py``.
"""
from __future__ import annotations

import sys

from plugins.hardware import collectives as coll
from plugins.model import flops
from plugins.hardware.ops import Lazy as _Lazy, SympyOps as _SympyOps
from plugins.hardware.ops import UNBUILT as _UNBUILT, ops  # noqa: F401  (lm.ops, lm._UNBUILT: read by callers)

# Terms of the step time, in the order the explanation lists them.
TERMS = ("compute", "imbalance", "recompute", "bubble", "tp", "cp", "ep", "pp", "dp", "optimizer", "offload", "input")
TERM_NAMES = {
    "compute": "compute (forward + backward at the stated MFU)",
    "optimizer": "optimizer step (memory-bound)",
    "imbalance": "MoE routing imbalance (the most loaded expert-parallel rank's extra expert work)",
    "recompute": "recomputation (extra forward)",
    "bubble": "pipeline bubble (p−1)/(v·m)",
    "tp": "exposed TP all-reduces",
    "cp": "exposed CP K/V exchange",
    "ep": "exposed EP all-to-all",
    "pp": "pipeline boundary sends on the critical path",
    "dp": "exposed DP/ZeRO collectives",
    "offload": "optimizer offload (gradients down, CPU Adam, weights up)",
    "input": "input wait",
}
# the compute term as the roofline mode prices it
ROOFLINE_COMPUTE = "compute (forward + backward, roofline)"


def term_name(k: str, mode: str = "mfu") -> str:
    """The explanation's name of step-time term ``k`` under efficiency ``mode``."""
    return ROOFLINE_COMPUTE if k == "compute" and mode == "roofline" else TERM_NAMES[k]
RECOMPUTE = ("none", "selective", "full", "op")
#: cuBLAS's recommended workspace on Hopper and later (4 MiB before): cuBLAS documentation,
#: cublasSetWorkspace(); PyTorch allocates it through its caching allocator (ATen CublasHandlePool)
CUBLAS_WORKSPACE = 32 * 2**20
ACT_BYTES = 2            # 16-bit boundary messages and TP/CP collectives (Korthikanti et al. 2022)
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
ATTENTION = ("flash", "eager")



from plugins.training.layout_overlap import (ATTENTION_KERNELS, FRAMEWORKS, attention_field,  # noqa: E402,F401
                                             collective_overlaps, exposed_shares)
from plugins.training.layout_memory import (LOSS_BYTES, LOSSES, activation_per_layer,  # noqa: E402,F401
                                              gathered_bytes, logits_bytes, loss_bytes)


def inflight(p, v, o, m=None):
    """Micro-batches whose activations the first pipeline stage holds at its peak (in units of
    one micro-batch through the whole stage): p under 1F1B (Narayanan et al. 2021); interleaving
    with v chunks multiplies the stage's activation memory by 1 + (p−1)/(p·v) (Korthikanti et al.
    2022 §4.2.3) — p·v + p − 1 chunk forwards in flight, Megatron's interleaved warm-up
    2(p − 1) + (v − 1)·p plus the first steady-state forward.  With ``m`` micro-batches per step
    a stage never holds more than the step has: at most m under 1F1B, m·v chunk forwards
    interleaved (Megatron-LM ``forward_backward_pipelining_with_interleaving`` caps the warm-up
    at the step's m·v forwards; torch.distributed.pipelining's schedules likewise)."""
    if m is None:
        return o.where(v > 1, p * (1 + (p - 1) / (p * v)), p)
    return o.where(v > 1, o.min(p * v + p - 1, m * v) / v, o.min(p, m))


def pp_crossings(p, v, m, o):
    """Boundary messages on the critical path of a pipeline step (each costs one send).

    1F1B (v = 1, Megatron's PipeDream-Flush order, p stages, m micro-batches, even split):
    2(p−1) + 2·(m−2 − ⌊(m−2)/p⌋) — the fill and drain cross p−1 boundaries each way, and in
    the steady state stage 0 waits for every group of p micro-batches' round trip, 2(p−1)
    messages per p micro-batches (the micro-batch that enters a new group rides the
    previous one's).  This is the longest path of the event engine of ``use pipeline``
    exactly, for any send time (checked against the engine for p ≤ 11, m ≤ 39).
    Interleaved (v > 1): 2(p·v − 1), the fill and drain through every chunk boundary — the
    engine's path while a message is shorter than one chunk's forward (longer messages
    start to stall the steady state and the engine is longer).
    """
    steady = (m - 2) - _floor((m - 2) / p)
    one_f_one_b = 2 * (p - 1) + 2 * steady
    return o.where(v > 1, 2 * (p * v - 1), one_f_one_b)


def ring_time(k, volume, bw, latency, calls):
    """Ring collective among k GPUs over a buffer of ``volume`` bytes: each GPU sends
    (k−1)/k of it per pass, one latency per ring step.  ``calls`` = 1 for a
    reduce-scatter or all-gather, 2 for an all-reduce (= reduce-scatter + all-gather).
    Bus bandwidth ``bw`` (bytes/s per direction of the link the ring crosses)."""
    return calls * ((k - 1) / k * volume / bw + (k - 1) * latency)


def group_bandwidth(k, stride, K, o):
    """Per-GPU bandwidth of a group of k GPUs whose members are ``stride`` ranks apart.

    Ranks fill a host (``gph`` GPUs) first.  A group whose members all sit on one host uses
    the GPU's own link; a group that spans hosts crosses the host cut, whose
    ``nics × nic`` bandwidth the groups of that kind on the host share:
    min(link, nics·nic / groups per host) — for one group per host (TP = 1 under DP) this
    is the book's min(GPU link, nics_per_host × NIC bandwidth) (§10.6.2)."""
    gph = K["gph"]
    per_host = o.max(1, o.min(k, gph / stride))        # members of one group on a host
    spans = _spans(k, per_host)
    sharing = gph / per_host                              # groups of this kind on a host
    cross = o.min(K["link"], K["nics"] * K["nic"] / sharing)
    return o.where(spans, cross, K["link"]), spans


_REAL = None        # the assumptions of a node's symbol (real, nothing else)


def _spans(k, per_host):
    """``k > per_host`` for ``per_host`` = max(1, min(k, q)), q > 0 (:func:`group_bandwidth`).

    The comparison is k > max(1, q).  When k is a sympy positive multiple of one real symbol
    with no other assumption (the data-parallel degree gpus/(tp·pp·cp), or ``dp``) it is true
    for large k and false for k ≤ 1, so sympy cannot decide it: its evaluated relation is the
    unevaluated one, built here directly, without sympy's attempt to decide it (assumption
    queries on the Max/Min, milliseconds per plan).  Any other k: ``k > per_host`` as written."""
    if type(k) is _Lazy or type(per_host) is _Lazy:
        return _Lazy(_spans, (k, per_host))
    sp = sys.modules.get("sympy")
    if sp is not None and isinstance(k, sp.Basic):
        global _REAL
        if _REAL is None:
            _REAL = sp.Symbol("k", real=True).assumptions0
        x = k
        if k.is_Mul and len(k.args) == 2 and k.args[0].is_Rational and k.args[0].is_positive:
            x = k.args[1]
        if x.is_Symbol and x.assumptions0 == _REAL:
            return sp.StrictGreaterThan(k, per_host, evaluate=False)
    return k > per_host


# link-dict key of plugins.hardware.collectives -> suffix of its K key (K["link_alpha"], K["nic_eff"] …)
LINK_KEYS = (("latency", "_alpha"), ("launch", "_launch"), ("efficiency", "_eff"), ("nvls_efficiency", "_nvls_eff"),
             ("nvls_latency", "_nvls_lat"))


def link_dicts(K: dict):
    """Roofline mode: the GPU's ``link`` and one GPU's share of its host's NICs
    (nics·nic / gpus_per_host) as link dicts of :mod:`plugins.hardware.collectives`, from the ``K`` keys
    ``link_alpha``/``nic_alpha`` (α, s), ``*_launch`` (s), ``*_eff``, ``*_nvls`` (bool),
    ``*_nvls_eff``, ``*_nvls_lat`` (s); absent keys take the collectives' defaults."""
    def one(prefix, bw):
        d = {"bandwidth": bw, "nvls": bool(K.get(prefix + "_nvls", False))}
        for key, suffix in LINK_KEYS:
            if K.get(prefix + suffix) is not None:
                d[key] = K[prefix + suffix]
        return d
    return one("link", K["link"]), one("nic", K["nics"] * K["nic"] / K["gph"])


def dispatch_time(e, stride, size, K, o):
    """Roofline mode: the MoE dispatch (or combine) all-to-all of ``size`` bytes a rank sends to
    its experts in an expert-parallel group of ``e`` GPUs ``stride`` ranks apart.  Without
    node-limited routing it is the pairwise all-to-all (:func:`comm_time`).  With
    ``K["ep_nodes"]`` = M (DeepSeek-V3's node-limited routing: a token's experts lie on at most M
    hosts; DeepEP sends one copy per destination host over the NIC and forwards it to the
    experts inside the host over NVLink) a token crosses the NICs min(M, hosts) · (hosts − 1)/hosts
    times on average instead of top-k · (e − e_host)/e times: the remote bytes are
    size / top-k · min(M, hosts) · (hosts − 1) / hosts (DeepSeek-V3 Technical Report §3.2.2;
    deepseek-ai/DeepEP README)."""
    M = K.get("ep_nodes")
    if M is None:
        return comm_time("all_to_all", e, stride, size, K, o)
    intra, inter = link_dicts(K)
    per_host = o.max(1, o.min(e, K["gph"] / stride))
    hosts = e / per_host
    remote = size / K["topk"] * o.min(M, hosts) * (hosts - 1) / hosts
    local = coll.collective_time("all_to_all", e, size, intra, o)
    across = coll.spanning_time("all_to_all", per_host, hosts, size, intra, inter, o, remote_size=remote)
    return o.where(e > per_host, across, local)


def comm_time(op, k, stride, size, K, o):
    """Roofline mode: time (s) of one ``op`` (:data:`plugins.hardware.collectives.OPS`) of ``size``
    bytes (nccl-tests convention) in a group of k GPUs ``stride`` ranks apart, placed as
    :func:`group_bandwidth` places it: on one host the GPU's link (the fastest of ring, tree,
    NVLS), across hosts :func:`plugins.hardware.collectives.spanning_time` (the fastest of the flat
    ring over the host cut, NCCL's tree and the hierarchical form) with the members of one
    host as ``k_intra``."""
    intra, inter = link_dicts(K)
    per_host = o.max(1, o.min(k, K["gph"] / stride))
    local = coll.collective_time(op, k, size, intra, o)
    across = coll.spanning_time(op, per_host, k / per_host, size, intra, inter, o)
    return o.where(k > per_host, across, local)


def attention_per_token(K: dict):
    """Attention-core forward FLOPs per token, all layers (:mod:`plugins.model.flops`):
    2·n_q·(d_h + d_v)·(query–key pairs per token summed over the layers), d_v = ``K["dv"]``
    (MLA's value width; d_h when absent).  The pairs are ``K["attn_pairs"]`` when given
    (sliding-window layers, bidirectional encoders: :func:`plugins.model.decoder.attention_pairs` / s),
    else causal L·(s+1)/2."""
    s, dv = K["s"], K.get("dv")
    pairs = K.get("attn_pairs")
    if pairs is None:
        pairs = K["L"] * flops.attention_pairs(s) / s
    return flops.attention_core(K["a"], K["dh"], K["dh"] if dv is None else dv, pairs)


# ---------------------------------------------------------------- roofline step model
EFFICIENCY = ("mfu", "roofline", "stated")   # "stated": plugins/training/layout_stated.py
# Generic device curves for a device that states none (a recent datacenter GPU under cuBLAS):
# large GEMMs at 80 % of peak, half of that at 1 GFLOP, streaming kernels at 90 % of mem_bw.
# Not measured on any one device: the catalog's devices carry their own, with their sources.
# Streaming at 0.9 of nominal HBM bandwidth: FlashMLA's decode kernel reaches "up to 3000 GB/s in
# memory-bound configuration" on an H800 SXM5 of 3.35 TB/s (deepseek-ai/FlashMLA README); the
# inference step model (plugins/serving/serving_step_core.py) reads the same generic values.
GENERIC_DEVICE = {"matmul_efficiency": 0.8, "matmul_half_flops": 1e9, "mem_efficiency": 0.9}
# device field: the fraction of the matrix-product curve (η_max·F/(F + F_half)) a device sustains
# over whole training steps — clock and power limits under long GEMM streams, kernels the step does
# not list — fitted on the validation corpus's fit set (benchmarks/fit_defaults.py); it multiplies
# K["eta_mm"] of the training step only (the serving step reads the GEMM curve as measured)
SUSTAINED_FIELD = "sustained_efficiency"
#: the device field of the fused attention backward kernel's FLOP rate over its forward's
ATTENTION_BACKWARD_FIELD = "attention_backward_rate"
#: device fields of the roofline curve -> (key of ``K``, unit): what a device declaration may state
DEVICE_CURVE = {"matmul_efficiency": ("eta_mm", ""), "matmul_half_flops": ("F_half", "FLOP"),
                "mem_efficiency": ("eta_mem", "")}
OPT_BYTES = "bytes_G + 2·bytes_M + 2·bytes_O + bytes_W"   # the optimizer step's traffic per parameter


# ---------------------------------------------------------------- low-precision matrix products
#: formats the linear layers' matrix products may run in (``use layout { matmul_precision }``)
MATMUL_PRECISIONS = ("bf16", "fp8", "fp4")
#: FP8 scaling recipes (``use layout { fp8_recipe }``); FP4 runs NVFP4's own two-level scaling
FP8_RECIPES = ("delayed", "current", "blockwise", "mxfp8")
#: the GEMMs of :func:`layer_ops` that run in the low-precision format: the linear layers (QKV, output
#: projection, MLP, routed and shared experts).  The attention core (QKᵀ, AV), the MoE router and the
#: LM head stay 16-bit, as Transformer Engine's ``fp8_autocast`` (``te.Linear`` modules only) and
#: torchao/torchtitan's Float8 linear conversion (the output projection excluded) do.
LOWP_GEMMS = frozenset({"qkv", "attention_out", "mlp_up", "mlp_down", "expert_up", "expert_down",
                        "shared_up", "shared_down"})
#: scaling recipe -> (bytes per element of the cast copy, passes reading the 16-bit tensor, scale bytes
#: per activation/gradient element, scale bytes per weight element).  Delayed scaling computes the
#: amax inside the cast kernel (one read) from the previous steps' history (Micikevicius et al. 2022,
#: "FP8 Formats for Deep Learning"; Transformer Engine ``DelayedScaling``); current (per-tensor)
#: scaling reads the tensor once for its amax and once to cast (``Float8CurrentScaling``; torchao's
#: tensorwise Float8); blockwise: one FP32 scale per 1×128 tile of activations and gradients and
#: per 128×128 block of weights (DeepSeek-AI 2024, DeepSeek-V3 §3.3); MXFP8: one 8-bit (E8M0) scale
#: per 32 elements (OCP Microscaling Formats MX v1.0); NVFP4: 4-bit elements, one FP8 (E4M3) scale per
#: 16 elements and a per-tensor FP32 scale from a first amax pass.
CAST = {"delayed": (1, 1, 0, 0), "current": (1, 2, 0, 0),
        "blockwise": (1, 1, (4, 128), (4, 128 * 128)), "mxfp8": (1, 1, (1, 32), (1, 32)),
        "nvfp4": ((1, 2), 2, (1, 16), (1, 16))}
#: matmul_precision -> (device field of its dense peak, of its large-GEMM efficiency, the format's name)
LOWP_FIELDS = {"fp8": ("fp8_flops", "fp8_matmul_efficiency", "FP8"),
               "fp4": ("fp4_flops", "fp4_matmul_efficiency", "FP4")}
#: matmul_precision -> the device field of the share of its curve whole training steps sustain
#: (default: the 16-bit ``sustained_efficiency``), fitted per format on the fit set's runs in it
LOWP_SUSTAINED = {"fp8": "fp8_sustained_efficiency", "fp4": "fp4_sustained_efficiency"}
#: `use memory` weight formats that are an FP8 copy (``operand``) or FP8 stored weights (``weights``)
FP8_OPERANDS = ("fp8_e4m3", "fp8_e5m2", "fp8")
#: Transformer Engine ``DelayedScaling``'s default ``amax_history_len``: FP32 amaxes kept per FP8
#: tensor (input, weight, output gradient of each FP8 GEMM)
AMAX_HISTORY = 1024


def recipe_of(fmt: str, recipe: str) -> str:
    """The scaling recipe a ``matmul_precision`` runs: the FP8 recipe, NVFP4 for FP4."""
    return "nvfp4" if fmt == "fp4" else recipe


def cast_constants(fmt: str, recipe: str, num=float) -> dict:
    """The ``K`` keys of a low-precision step (``num`` makes each number: ``float`` for numpy,
    ``sympy.Rational`` for the plan): ``lp`` (the format, a Python string), ``lp_bytes`` (bytes per
    element of the cast copy), ``lp_reads`` (passes over the 16-bit tensor), ``lp_act_scale`` /
    ``lp_w_scale`` (scale bytes per activation / weight element), ``lp_hist`` (FP32 amax history
    entries per FP8 tensor: delayed scaling only).  ``fmt`` = "bf16": no keys (16-bit products)."""
    if fmt == "bf16":
        return {}
    r = recipe_of(fmt, recipe)

    def n(x):
        return num(x[0]) / num(x[1]) if isinstance(x, tuple) else num(x)
    b, reads, act, w = CAST[r]
    return {"lp": fmt, "lp_bytes": n(b), "lp_reads": n(reads), "lp_act_scale": n(act), "lp_w_scale": n(w),
            "lp_hist": n(AMAX_HISTORY if r == "delayed" else 0)}


def copy_bytes_per_param(K):
    """Bytes per parameter of the low-precision weight copy: the element and its scales."""
    return K["lp_bytes"] + K["lp_w_scale"]


def cast_bytes(M, N, Kd, n, K):
    """Bytes the casts of ``n`` low-precision GEMMs [M, Kd]·[Kd, N] move: forward, the input
    (M·Kd) and the weight (Kd·N; none when the stored weights are the low-precision copy,
    ``K["lp_wcast"]`` = 0); backward, the output gradient (M·N).  Each cast reads the 16-bit
    tensor ``lp_reads`` times (``act_bytes`` each) and writes the copy (``lp_bytes``) and its scales.

    :returns: ``(forward, backward)`` bytes."""
    e = K["act_bytes"]
    act = K["lp_reads"] * e + K["lp_bytes"] + K["lp_act_scale"]
    w = (K["lp_reads"] * e + K["lp_bytes"] + K["lp_w_scale"]) * K.get("lp_wcast", 1)
    return n * (act * M * Kd + w * Kd * N), n * act * M * N


def eta_matmul(F, K):
    """Fraction of ``peak`` a GEMM of F = 2·M·N·K FLOPs reaches: η(F) = η_max·F / (F + F_half)
    (``K["eta_mm"]`` = η_max, ``K["F_half"]`` the size at which η is half of η_max)."""
    return K["eta_mm"] * F / (F + K["F_half"])


def gemm_time(M, N, Kd, K, o, e=2, nbytes=None, lowp=False):
    """Roofline time of one [M, Kd]·[Kd, N] product: max(F / (peak·η(F)), bytes / (mem_bw·η_mem)),
    F = 2·M·N·Kd, bytes = e·(M·Kd + Kd·N + M·N) (inputs read, output written once) unless
    ``nbytes`` is given (a fused kernel that keeps its intermediate on chip).

    ``lowp``: the product runs in the step's low-precision format ``K["lp"]`` — at its peak
    ``K["peak_lp"]`` and large-GEMM efficiency ``K["eta_lp"]`` (the same F_half), its two inputs
    read at ``K["lp_bytes"]`` per element, the 16-bit output written at e."""
    F = 2 * M * N * Kd
    if lowp:
        b = K["lp_bytes"] * (M * Kd + Kd * N) + e * M * N if nbytes is None else nbytes
        return o.max((F + K["F_half"]) / (K["peak_lp"] * K["eta_lp"]), b / (K["mem_bw"] * K["eta_mem"]))
    b = e * (M * Kd + Kd * N + M * N) if nbytes is None else nbytes
    # F / (peak·η(F)) written as (F + F_half) / (peak·η_max): the same for F > 0, finite at F = 0
    # (numpy would give 0/0, sympy cancels F — both paths must agree)
    return o.max((F + K["F_half"]) / (K["peak"] * K["eta_mm"]), b / (K["mem_bw"] * K["eta_mem"]))


def stream_time(nbytes, K):
    """Memory-bound work: ``nbytes`` read and written at mem_bw·η_mem."""
    return nbytes / (K["mem_bw"] * K["eta_mem"])


def layer_ops(K, X, o, moe_layer=False, head=False):
    """The forward operations of one transformer layer (or, with ``head``, of the LM head)
    for one micro-batch on one GPU under the layout — the one table both the plan (sympy)
    and the search (numpy) price.

    Tokens on the GPU: T = b·s/cp (CP splits the sequence); SP splits the tokens of the
    norms, residual adds and dropouts by tp as well (without SP every TP rank repeats them).
    TP splits N of the column-parallel matrices (QKV, MLP up/gate, LM head) and K of the
    row-parallel ones (attention output, MLP down).

    :returns: ``(gemms, streams)``.  ``gemms``: tuples ``(name, M, N, K, count, part,
        nbytes)`` — ``part`` ∈ {"layer", "attention", "expert", "head", "embedding"} (the attention core
        is what selective recomputation repeats; routed experts carry the routing
        imbalance), ``nbytes`` None for a plain GEMM, else the fused kernel's traffic.
        ``streams``: tuples ``(name, bytes, part)`` of memory-bound work.  Backward of every
        GEMM is two GEMMs of the same FLOPs (dgrad [M, N]·[N, K], wgrad [K, M]·[M, N]);
        backward of a stream moves twice its forward bytes (read the saved input and the
        incoming gradient, write the outgoing one).

    ``K`` keys: h a kv dh dv s L act_bytes (e) flash dropout mats V qkv_w o_w f_dense fe E
    topk ks attn_pairs (optional); ``X``: t c b sp e et.
    """
    t, c, b = X["t"], X["c"], X["b"]
    e = K["act_bytes"]
    s = K["s"]
    T = b * s / c
    Tn = o.where(X["sp"] == 1, T / t, T)               # tokens of the norms and adds (SP splits them)
    h = K["h"]
    if head:
        g = [("lm_head", T, K["V"] / t, h, 1, "head", None)]
        # logits cast to FP32 and the cross-entropy's softmax over them (vocabulary-parallel)
        st = [("loss (fp32 cast, softmax, cross-entropy)", T * K["V"] / t * (e + 4 + 4) * K["logits"], "head"),
              ("embedding lookup", 2 * e * Tn * h, "embedding")]
        return g, st
    a, dh, dv = K["a"], K["dh"], K.get("dv")
    dv = dh if dv is None else dv
    heads = b * a / t                                   # (sequence, head) pairs on this GPU
    s_q = s / c
    pairs = K.get("attn_pairs")
    kv_len = (pairs / K["L"]) if pairs is not None else (s + 1) / 2     # keys per query, averaged
    g = [("qkv", T, K["qkv_w"] / t, h, 1, "layer", None),
         ("attention_out", T, h, K["o_w"] / t, 1, "layer", None)]
    if K["flash"] == 1:
        # fused attention: per head QKᵀ and AV over the (causal) pairs; Q, K, V read and O written once
        g += [("attention_qk", s_q, kv_len, dh, heads, "attention", e * (s_q * dh + s * dh)),
              ("attention_av", s_q, dv, kv_len, heads, "attention", e * (s * dv + s_q * dv))]
        st = []
    else:
        # eager attention computes the whole s_q×s score matrix (the causal mask is applied to it)
        g += [("attention_qk", s_q, s, dh, heads, "attention", None),
              ("attention_av", s_q, dv, s, heads, "attention", None)]
        st = [("softmax", 2 * e * heads * s_q * s, "attention")]
        if K["dropout"]:
            st.append(("attention dropout", (2 * e + 1) * heads * s_q * s, "attention"))
    mats = K["mats"]
    if moe_layer:
        fe, E, k, ks = K["fe"], K["E"], K["topk"], K["ks"]
        et = X.get("et", t)
        M_e = k * T * X["e"] * et / (E * t)               # tokens of one routed expert on this GPU
        n_exp = E / X["e"]
        g += [("router", T, E, h, 1, "layer", None),
              ("expert_up", M_e, fe / et, h, (mats - 1) * n_exp, "expert", None),
              ("expert_down", M_e, h, fe / et, n_exp, "expert", None)]
        st.append(("expert activation", mats * e * k * T * fe / t, "expert"))
        if not _is_zero(ks):
            g += [("shared_up", T, ks * fe / t, h, mats - 1, "layer", None),
                  ("shared_down", T, h, ks * fe / t, 1, "layer", None)]
            st.append(("shared activation", mats * e * T * ks * fe / t, "layer"))
    else:
        f = K["f_dense"]
        g += [("mlp_up", T, f / t, h, mats - 1, "layer", None),
              ("mlp_down", T, h, f / t, 1, "layer", None)]
        st.append(("activation function", mats * e * T * f / t, "layer"))
    st += [("norms", 2 * 2 * e * Tn * h, "layer"), ("residual adds", 2 * 3 * e * Tn * h, "layer")]
    if K["dropout"]:
        st.append(("dropout", 2 * (2 * e + 1) * Tn * h, "layer"))
    return g, st


def _is_zero(x):
    """True for a literal zero (int, float, sympy number), False for a symbol or an array."""
    try:
        return float(x) == 0
    except (TypeError, ValueError):
        return False


def _price(ops_, K, o, parts=None):
    """(forward, backward) time of a :func:`layer_ops` table, only ``parts`` when given.

    With a low-precision step (``K["lp"]``) the linear layers' GEMMs (:data:`LOWP_GEMMS`) run
    forward, dgrad and wgrad in that format (:func:`gemm_time` with ``lowp``); their casts are
    priced apart (:func:`_cast_time`)."""
    gemms, streams = ops_
    fwd = bwd = 0
    e = K["act_bytes"]
    lp = K.get("lp") is not None
    # the fused attention kernel at its own measured efficiency (K["eta_attn"]) where known, its
    # backward at K["attn_bwd_rate"] of that rate
    Ka = K if K.get("eta_attn") is None else dict(K, eta_mm=K["eta_attn"])
    Kb = Ka if K.get("attn_bwd_rate") is None else dict(Ka, eta_mm=Ka["eta_mm"] * K["attn_bwd_rate"])
    for name, M, N, Kd, n, part, nb in gemms:
        if parts is not None and part not in parts:
            continue
        low = lp and name in LOWP_GEMMS
        if nb is None:
            fwd = fwd + n * gemm_time(M, N, Kd, K, o, e, nb, low)
            bwd = bwd + n * (gemm_time(M, Kd, N, K, o, e, None, low) + gemm_time(Kd, N, M, K, o, e, None, low))
        elif part == "attention":
            # fused attention (FlashAttention's backward, Dao 2023 §3.1.2): the backward kernel
            # recomputes the scores QKᵀ from Q, K and the saved log-sum-exp, then runs the four
            # gradient products — 2.5× the forward's FLOPs — and moves twice its bytes
            fwd = fwd + n * gemm_time(M, N, Kd, Ka, o, e, nb, low)
            redo = gemm_time(M, N, Kd, Kb, o, e, 0 * nb) if name == "attention_qk" else 0
            bwd = bwd + n * (redo + gemm_time(M, Kd, N, Kb, o, e, 2 * nb) + gemm_time(Kd, N, M, Kb, o, e, 2 * nb))
        else:          # fused: the backward kernel moves twice the forward's bytes
            fwd = fwd + n * gemm_time(M, N, Kd, K, o, e, nb, low)
            bwd = bwd + n * (gemm_time(M, Kd, N, K, o, e, 2 * nb) + gemm_time(Kd, N, M, K, o, e, 2 * nb))
    for _, nb, part in streams:
        if parts is not None and part not in parts:
            continue
        fwd = fwd + stream_time(nb, K)
        bwd = bwd + 2 * stream_time(nb, K)
    return fwd, bwd


def _cast_time(ops_, K, parts=None):
    """(forward, backward) time of the casts of a :func:`layer_ops` table's low-precision GEMMs
    (:func:`cast_bytes`), memory-bound at mem_bw·η_mem; (0, 0) for a 16-bit step."""
    if K.get("lp") is None:
        return 0, 0
    fwd = bwd = 0
    for name, M, N, Kd, n, part, _ in ops_[0]:
        if name in LOWP_GEMMS and (parts is None or part in parts):
            f, b = cast_bytes(M, N, Kd, n, K)
            fwd, bwd = fwd + f, bwd + b
    return stream_time(fwd, K), stream_time(bwd, K)


def lowp_modules(K, X, o, moe=False):
    """Low-precision GEMM modules (each with its input, weight and output-gradient scales) one
    GPU runs per step: the count of :data:`LOWP_GEMMS` over its L/p layers."""
    L_moe = K.get("L_moe", 0) if moe else 0
    tables = [(K["L"] - L_moe, layer_ops(K, X, o))]
    if moe:
        tables.append((L_moe, layer_ops(K, X, o, moe_layer=True)))
    n = 0
    for mult, (gemms, _) in tables:
        for name, _, _, _, cnt, _, _ in gemms:
            if name in LOWP_GEMMS:
                n = n + mult * cnt
    return n / X["p"]


def roofline(K, X, o, m, P_opt, moe=False):
    """Compute time of one step on one GPU from the device curves (``K["mode"] == "roofline"``).

    Per micro-batch a GPU runs L/p layers (the dense and MoE layers in proportion) and 1/p
    of the LM head (spread over the stages, as the MFU mode spreads all FLOPs evenly), each
    priced op by op from :func:`layer_ops`; m micro-batches per step.  The optimizer step
    streams (``bytes_G + 2·bytes_M + 2·bytes_O + bytes_W``) bytes for each of the ``P_opt``
    parameters this GPU updates (its ZeRO shard; 0 with the optimizer offloaded).

    :returns: dict ``compute`` (forward + backward), ``forward`` (its forward share),
        ``recompute`` (the forward work recomputation repeats), ``expert`` (forward + backward
        of the routed experts, for the routing imbalance), ``optimizer`` (s), ``flops``
        (FLOPs the GEMMs execute, forward + backward, excluding recomputation).
    """
    p, r = X["p"], X["r"]
    L = K["L"]
    L_moe = K.get("L_moe", 0) if moe else 0
    L_d = L - L_moe
    dense = layer_ops(K, X, o, moe_layer=False)
    fd, bd = _price(dense, K, o)
    cf, cb = _cast_time(dense, K)
    ad, _ = _price(dense, K, o, parts=("attention",))
    head_ops = layer_ops(K, X, o, head=True)
    hf, hb = _price(head_ops, K, o)
    ef, eb = _price(head_ops, K, o, parts=("embedding",))     # the lookup runs on the first stage
    fwd = L_d * (fd + cf) + hf
    bwd = L_d * (bd + cb) + hb
    cast = L_d * (cf + cb)
    attn_fwd = L_d * ad
    expert = 0 * fd
    if moe:
        mo = layer_ops(K, X, o, moe_layer=True)
        fm, bm = _price(mo, K, o)
        cfm, cbm = _cast_time(mo, K)
        am, _ = _price(mo, K, o, parts=("attention",))
        fe_, be_ = _price(mo, K, o, parts=("expert",))
        cfe, cbe = _cast_time(mo, K, parts=("expert",))
        fwd, bwd, attn_fwd = fwd + L_moe * (fm + cfm), bwd + L_moe * (bm + cbm), attn_fwd + L_moe * am
        cast = cast + L_moe * (cfm + cbm)
        expert = L_moe * (fe_ + be_ + cfe + cbe)
    layers_fwd = fwd - hf
    op_fwd = L_d * _op_recompute(dense, K, o)
    if moe:
        op_fwd = op_fwd + L_moe * _op_recompute(mo, K, o)
    rec = o.where(r == 3, op_fwd, o.where(r == 2, layers_fwd, o.where(r == 1, attn_fwd, 0 * fwd)))
    opt = stream_time((K["bytes_G"] + 2 * K["bytes_M"] + 2 * K["bytes_O"] + K["bytes_W"]) * P_opt, K)
    opt = opt * (1 - X.get("off", 0))
    return {"compute": m * (fwd + bwd) / p, "forward": m * fwd / p, "recompute": m * rec / p,
            "expert": m * expert / p, "optimizer": opt, "cast": m * cast / p,
            "head_forward": m * (hf - ef) / p, "head_backward": m * (hb - eb) / p,
            "embedding_forward": m * ef / p, "embedding_backward": m * eb / p}


#: GEMMs op-level checkpointing recomputes whole: every other matmul after the saved q ·
#: (k) · v: the attention output projection and one h×f matrix of the MLP
OP_RECOMPUTED = ("attention_out", "mlp_down", "expert_down", "shared_down")


def _op_recompute(ops_, K, o):
    """Forward time op-level selective checkpointing repeats on one layer: the key projection
    (kv/(a + 2kv) of the QKV GEMM), the attention output projection, one h×f matrix of the MLP
    (:data:`OP_RECOMPUTED`), and the layer's memory-bound work (norms, activation function,
    residual adds), which it never saves."""
    gemms, streams = ops_
    share = K["kv"] / (K["a"] + 2 * K["kv"])
    sel = [g for g in gemms if g[0] in OP_RECOMPUTED]
    sel += [(n, M, N, Kd, cnt * share, part, nb) for n, M, N, Kd, cnt, part, nb in gemms if n == "qkv"]
    st = [x for x in streams if x[2] != "attention"]
    f, _ = _price((sel, st), K, o)
    return f


def op_flops(K, X, o, moe=False):
    """Forward GEMM FLOPs of one micro-batch on one GPU, per part, from :func:`layer_ops`
    (for the tests and the report: their sum × 3 × m is the step's GEMM work)."""
    out = {}
    L_moe = K.get("L_moe", 0) if moe else 0
    tables = [(K["L"] - L_moe, layer_ops(K, X, o)), (1, layer_ops(K, X, o, head=True))]
    if moe:
        tables.append((L_moe, layer_ops(K, X, o, moe_layer=True)))
    for mult, (gemms, _) in tables:
        for name, M, N, Kd, n, part, _ in gemms:
            out[name] = out.get(name, 0) + mult * n * 2 * M * N * Kd
    return out


def shape_constants(a: dict, mo: dict, attn_matrices) -> dict:
    """The matrix shapes :func:`layer_ops` needs, from the model's architecture
    (:func:`plugins.model.decoder.architecture` / ``moe_architecture`` dicts, symbols or floats):
    ``qkv_w`` — output width of the fused input projections, the attention matrices less the
    output projection over h (MLA's compressions and up-projections folded into one GEMM of
    the same FLOPs), ``o_w`` = n_q·d_v, ``f_dense``, ``fe``, ``ks``."""
    dv = a["dh"]
    if mo.get("mla"):
        dv = mo["dv"] if mo.get("dv") is not None else a["dh"] - mo["dr"]
    o_w = a["nq"] * dv
    return {"qkv_w": (attn_matrices - o_w * a["h"]) / a["h"], "o_w": o_w,
            "f_dense": a["f"] if a.get("f") is not None else 0,
            "fe": mo["fe"] if mo.get("moe") else 0, "ks": mo["ks"] if mo.get("moe") else 0}


def evaluate(K: dict, X: dict, o, activations: str = "formula", moe: bool = False, lazy: bool = True) -> dict:
    """Step time terms and memory of layouts.

    ``K`` constants (base units): L h a kv dh V N N_emb N_exp E topk fwd_tok (forward FLOP per
    token, matrices) s B peak mfu gpus gph link nic nics latency overlap input wait
    bytes_W bytes_G bytes_M bytes_O transient.  ``X`` knobs (ints or int arrays): t p d c e b
    v z (ZeRO stage) r (recompute 0/1/2) sp (0/1).

    Compute mode ``K["mode"]`` (a Python string, the same for every candidate): ``"mfu"``
    (the default; ``K["mfu"]`` prices all FLOPs: 3·F_fwd·B/(gpus·peak·mfu)) or
    ``"roofline"`` (:func:`roofline`: each op of :func:`layer_ops` at
    max(F/(peak·η(F)), bytes/(mem_bw·η_mem)), η(F) = η_mm·F/(F + F_half)).  Roofline keys:
    ``K["eta_mm"]`` (device ``matmul_efficiency``, fraction), ``K["F_half"]``
    (``matmul_half_flops``, FLOP), ``K["eta_mem"]`` (``mem_efficiency``, fraction),
    ``K["mem_bw"]`` (B/s), plus the shapes of :func:`shape_constants` (``qkv_w o_w f_dense fe
    ks``), ``dv`` and ``mats``.  ``K["mfu"]`` is not read in roofline mode.

    Placement (innermost first): TP ranks are adjacent (stride 1), then CP (stride t),
    DP (stride t·c; EP is the innermost e of the DP ranks), PP outermost (stride t·c·d):
    the most frequent, latency-bound collectives (TP, per layer) get the fastest link; PP
    moves least (one activation per micro-batch and stage boundary), so it may span hosts.

    :returns: dict of arrays/expressions: ``m`` micro-batches, each term of :data:`TERMS`
        (s), ``step`` (s), ``persistent``/``activation``/``memory`` (bytes per GPU),
        ``tp_bw``/``dp_bw`` (B/s), ``tp_spans`` (bool), ``dp_volume`` (B), ``forward`` (the
        forward share of ``compute``), ``mfu_achieved`` (model FLOPs over step time × gpus ×
        peak), ``mfu_compute`` (the same over the compute term alone).

    In the sympy path (``o`` = ``ops("sympy")``) with ``lazy`` (the default) a value is built
    when it is first read from the returned dict (:class:`_Lazy`): a plan reads a dozen of the
    values, and the others (and the branches a layout does not take) cost nothing.  The
    expressions are the ones ``lazy=False`` builds, operation for operation.
    """
    if lazy and isinstance(o, _SympyOps):
        import sympy as sp

        def leaf(x):
            return _Lazy(None, None, x) if isinstance(x, sp.Basic) else x
        return _Built(_evaluate({k: leaf(x) for k, x in K.items()}, {k: leaf(x) for k, x in X.items()}, o,
                                activations, moe))
    return _evaluate(K, X, o, activations, moe)


class _Built(dict):
    """:func:`evaluate`'s result in the lazy sympy path: a value is built on its first read."""

    def __getitem__(self, k):
        x = dict.__getitem__(self, k)
        return x.force() if type(x) is _Lazy else x

    def get(self, k, default=None):
        return self[k] if k in self else default

    def values(self):
        return [self[k] for k in self]

    def items(self):
        return [(k, self[k]) for k in self]


def _evaluate(K: dict, X: dict, o, activations: str, moe: bool) -> dict:
    """:func:`evaluate` on values as given (numbers, arrays, sympy expressions or :class:`_Lazy`)."""
    t, p, d, c, e, b, v, z, r, sp_on = (X[k] for k in ("t", "p", "d", "c", "e", "b", "v", "z", "r", "sp"))
    L, h, kv, dh, s = K["L"], K["h"], K["kv"], K["dh"], K["s"]
    m = K["B"] / (d * b)                                   # micro-batches per pipeline per step
    s_loc = s / c                                          # tokens of a sequence on one CP rank
    # ---- compute: 6ND-style FLOPs of the matrices + causal attention, per GPU (§10.1.3)
    attn_tok = attention_per_token(K)                      # attention FLOP per token (QKᵀ, AV)
    fwd_tok = K["fwd_tok"] + attn_tok
    roof = K.get("mode", "mfu") == "roofline"
    if roof:
        # roofline: every op of the layer table on the device curves (see :func:`roofline`);
        # the optimizer step streams this GPU's ZeRO shard of the states
        zsh = z >= 1
        P_d = (K["N"] - K["N_exp"]) / (t * p)
        P_e = K["N_exp"] / (e * X.get("et", t) * p)
        P_opt = P_d * o.where(zsh, 1 / (d * c), 1) + P_e * o.where(zsh, 1 / (d * t * c / (e * X.get("et", t))), 1)
        rf = roofline(K, X, o, m, P_opt, moe)
        ideal, recompute, optimizer = rf["compute"], rf["recompute"], rf["optimizer"]
        forward, cast = rf["forward"], rf["cast"]
        ends = {k: rf[k] for k in ("head_forward", "head_backward", "embedding_forward", "embedding_backward")}
    else:
        if K.get("lp") is not None:
            # the linear layers' matrix FLOPs (all but the LM head) at the stated MFU of the
            # low-precision peak, attention and the LM head at the MFU of the 16-bit peak
            lin = K["fwd_tok"] - K["head_tok"]
            ideal = 3 * s * K["B"] * ((fwd_tok - lin) / K["peak"] + lin / K["peak_lp"]) / (K["gpus"] * K["mfu"])
        else:
            ideal = 3 * fwd_tok * s * K["B"] / (K["gpus"] * K["peak"] * K["mfu"])
        cast = 0 * ideal
        # full recomputation repeats the layers' forward (not the LM head): ≈ 8ND instead of 6ND;
        # selective recomputes the attention core (QKᵀ, softmax, AV) — the work a fused
        # FlashAttention backward redoes as well
        layers_fwd = fwd_tok - K["head_tok"]
        # op-level checkpointing recomputes the key and output projections and one h×f MLP matrix
        op_tok = 2 * L * h * (kv * dh + K["a"] * dh + K["f"])
        extra = o.where(r == 3, op_tok / (3 * fwd_tok),
                        o.where(r == 2, layers_fwd / (3 * fwd_tok), o.where(r == 1, attn_tok / (3 * fwd_tok), 0 * ideal)))
        recompute = ideal * extra
        optimizer, forward = 0 * ideal, ideal / 3
        # the LM head's share (16-bit in every format); the embedding lookup has no matrix FLOPs
        head_f = s * K["B"] * K["head_tok"] / (K["gpus"] * K["peak"] * K["mfu"])
        ends = {"head_forward": head_f, "head_backward": 2 * head_f, "embedding_forward": 0 * ideal,
                "embedding_backward": 0 * ideal}
    bubble = (ideal + recompute) * (p - 1) / (v * m)       # (p−1)/(v·m) of the ideal time
    pipe = X.get("pipe")
    if pipe is not None:
        # the schedule's makespan on the layout's chunks (the layout search: :func:`pipeline_inputs`
        # and plugins.training.pipeline.makespans) where known: it holds the bubble, the stage
        # imbalance and the boundary sends; the closed form elsewhere
        known = pipe == pipe                                 # not NaN
        bubble = o.where(known, pipe - ideal - recompute, bubble)
    # ---- TP: 2 all-reduces forward, 2 backward per layer and micro-batch (+2 with full
    # recomputation); reduce-scatter + all-gather with SP move the same bytes
    tp_bw, tp_spans = group_bandwidth(t, 1, K, o)
    act = b * s_loc * h * ACT_BYTES
    n_tp = o.where(r == 2, 6, 4) * (L / p) * m
    roof = K.get("mode", "mfu") == "roofline"             # collectives from plugins.hardware.collectives
    if roof:
        tp_call = o.where(sp_on == 1, comm_time("reduce_scatter", t, 1, act, K, o)
                          + comm_time("all_gather", t, 1, act, K, o), comm_time("all_reduce", t, 1, act, K, o))
        tp = n_tp * tp_call
    else:
        tp = n_tp * o.where(t > 1, ring_time(t, act, tp_bw, K["latency"], 2), 0 * act)
    # ---- CP: K and V of the local chunk go round the ring forward; backward again plus dK, dV
    cp_bw, _ = group_bandwidth(c, t, K, o)
    kv_bytes = 2 * b * s_loc * kv * dh * ACT_BYTES
    if roof:
        cp = 3 * (L / p) * m * (c - 1) * comm_time("send", c, t, kv_bytes, K, o)
    else:
        cp = 3 * (L / p) * m * o.where(c > 1, (c - 1) * (kv_bytes / cp_bw + K["latency"]), 0 * act)
    # ---- MoE: routing imbalance, expert TP, and the dispatch/combine all-to-all
    et = X.get("et", t)                                    # expert-TP degree (Megatron's ETP; default tp)
    imb = K.get("imb", 1)                                  # most loaded EP rank's dispatches / the mean
    if moe:
        # the most loaded rank's routed-expert work beyond the mean (Switch/GShard imbalance)
        if roof:
            imbalance = (imb - 1) * rf["expert"]
        else:
            imbalance = (imb - 1) * K.get("exp_tok", 0) * s * K["B"] / (K["gpus"] * K["peak"] * K["mfu"])
        ep_bw, _ = group_bandwidth(e, t * c, K, o)
        # each token's hidden state goes to top-k experts; (e−1)/e of them live on other ranks.
        # With sequence parallelism a TP rank holds and dispatches only its T/t tokens (Megatron's
        # all-to-all token dispatcher permutes the SP-sharded [S/TP, B, H] input and gathers the
        # received tokens over the expert-TP group afterwards: megatron/core/transformer/moe/
        # token_dispatcher.py, MoEAlltoAllTokenDispatcher); without it every TP rank holds all T
        sent = o.where(sp_on == 1, act / t, act) * K["topk"]
        if roof:   # the most loaded rank sends imb × the mean all-to-all buffer
            a2a = dispatch_time(e, t * c, imb * sent, K, o)
        else:
            a2a = imb * (e - 1) / e * sent / ep_bw + (e - 1) * K["latency"]
        ep = 4 * (K["L_moe"] / p) * m * o.where(e > 1, a2a, 0 * act)
        # expert TP other than tp: the MoE layers' MLP all-reduces run in the expert-TP group
        # on the dispatched tokens instead of the TP group
        etp_bw, _ = group_bandwidth(et, 1, K, o)
        n_mlp = o.where(r == 2, 3, 2) * (K["L_moe"] / p) * m
        if roof:
            et_ring = comm_time("all_reduce", et, 1, act * K["topk"], K, o)
            tp_ring = tp_call
        else:
            et_ring = o.where(et > 1, ring_time(et, act * K["topk"], etp_bw, K["latency"], 2), 0 * act)
            tp_ring = o.where(t > 1, ring_time(t, act, tp_bw, K["latency"], 2), 0 * act)
        etp_extra = o.where(et == t, 0 * act, n_mlp * (et_ring - tp_ring))
    else:
        imbalance = 0 * act
        ep = 0 * act
        etp_extra = 0 * act
    tp = tp + etp_extra
    # ---- PP: boundary sends (point-to-point) on the critical path of the schedule
    pp_bw, _ = group_bandwidth(p, t * c * d, K, o)
    pp_bytes = act / o.where(sp_on == 1, t, 1)
    if roof:
        # Megatron's scatter/gather (Narayanan et al. 2021 §4.1): each TP rank sends 1/t of the
        # boundary activation and the receiving stage all-gathers it over its TP group's link
        # (with sequence parallelism the activation is split already: no gather)
        gather = comm_time("all_gather", t, 1, act, K, o)
        pp_msg = comm_time("send", p, t * c * d, act / t, K, o) \
            + o.where((t > 1) & (sp_on == 0), gather, 0 * act)
    else:
        pp_msg = pp_bytes / pp_bw + K["latency"]
    pp = o.where(p > 1, pp_crossings(p, v, m, o) * pp_msg, 0 * act)
    if pipe is not None:
        pp = o.where(known, 0 * act, pp)
    # ---- DP / ZeRO over d (book §10.3.3, plugins/training/zero.py); model-parallel shard first
    # dense parameters are split by tp·pp and data-parallel over d; routed experts by
    # ep·etp·pp and data-parallel over the expert-data-parallel group d·tp·cp/(ep·etp)
    P_dense = (K["N"] - K["N_exp"]) / (t * p)
    P_exp = K["N_exp"] / (e * et * p)
    P_mp = P_dense + P_exp
    d_exp = d * t * c / (e * et)
    # the ZeRO/DP group of the dense parameters: the data-parallel ranks and the context-parallel
    # ranks, which hold the same parameters and reduce their gradients together (Megatron's
    # distributed optimizer shards over dp·cp; torchtitan's FSDP mesh is dp_shard·cp)
    dz = d * c
    W, G = K["bytes_W"] * P_mp, K["bytes_G"] * P_mp
    frac = (dz - 1) / dz
    raf = X.get("raf", K.get("raf", 1))

    def _vol(Wx, Gx, fr):
        # ZeRO-3: a pipeline stage gathers its parameters once per step and reduce-scatters its
        # accumulated gradients once; without a pipeline each micro-batch gathers them for its
        # forward and again for its backward (once with reshard_after_forward = false)
        z3 = o.where(p > 1, fr * (Wx + Gx), m * fr * ((1 + raf) * Wx + Gx))
        return o.where(z == 3, z3,
                       o.where(z == 2, m * fr * Gx + fr * Wx,
                               o.where(z == 1, fr * (Gx + Wx), 2 * fr * Gx)))
    vol = _vol(K["bytes_W"] * P_dense, K["bytes_G"] * P_dense, frac)
    if moe:
        vol = vol + _vol(K["bytes_W"] * P_exp, K["bytes_G"] * P_exp, (d_exp - 1) / d_exp)
    dp_bw, dp_spans = group_bandwidth(dz, t, K, o)
    if roof:
        # the bus bandwidth the DP collectives reach (vol counts bus bytes, so vol / busbw is
        # their time): one call per layer of the stage (FSDP units; DDP / Megatron buckets),
        # an all-reduce of the gradient shard under ZeRO-0, a reduce-scatter otherwise
        g_call = K["bytes_G"] * P_mp / (L / p)
        dp_ops = ("all_reduce", "reduce_scatter")
        dp_t = [o.where(dz > 1, comm_time(op, dz, t, g_call, K, o), 1 + 0 * g_call) for op in dp_ops]
        bus = [coll.bus_bandwidth(op, dz, g_call, x) for op, x in zip(dp_ops, dp_t)]
        dp_bw = o.where((dz > 1) & (g_call > 0), o.where(z == 0, bus[0], bus[1]), dp_bw)
    dp_time = vol / dp_bw
    emb = K["N_emb"] / t / P_mp                             # embedding share of the shard
    head = o.where(z >= 1, frac * W * emb / dp_bw, 0 * W)   # first AllGather (embedding)
    tail = o.where(z == 0, 2, 1) * frac * G * emb / dp_bw   # last reduction (embedding grad)
    # exposure (MegaScale; the `step` timeline of plugins/training/layout.py schedules exactly this):
    # the GPU runs the chain C of compute, recomputation, bubble and exposed TP/CP/EP/PP;
    # the link carries the DP/ZeRO collectives beside it
    # each collective's exposed share (its own overlap, the framework's ring or `overlap`; hidden ≤ compute)
    x_tp, x_cp, x_ep = exposed_shares(K, X, (tp, cp, ep), ideal + recompute, o)
    chain = ideal + imbalance + recompute + bubble + tp * x_tp + cp * x_cp + ep * x_ep + pp
    gather = o.where((z == 1) | (z == 2), frac * W / dp_bw, 0 * W)   # AllGather of updated weights
    # gradients appear only while the backward passes that produce them run: the last
    # micro-batch's (stages 0-1, 2/3 of its compute) or every micro-batch's (stage 2)
    window = o.where(z == 2, 2 * (ideal + recompute) / 3, 2 * (ideal + recompute) / (3 * m))
    exposed_3 = head + tail + o.max(0, dp_time - head - tail - chain)
    exposed_012 = head + tail + o.max(0, o.max(chain - window, gather - head) + dp_time - gather - tail - chain)
    dp = o.where(K["prefetch"] == 0, dp_time, o.where(z == 3, exposed_3, exposed_012))
    off = offload_terms(K, X, P_dense, P_exp, dz, d_exp, window, o)
    terms = {"compute": ideal, "imbalance": imbalance, "recompute": recompute, "bubble": bubble, "tp": tp * x_tp,
             "cp": cp * x_cp, "ep": ep * x_ep, "pp": pp, "dp": dp, "optimizer": optimizer, "offload": off["time"],
             "input": K["input"] + 0 * ideal}
    step = sum(terms.values())
    # ---- memory per GPU
    states = {"W": K["bytes_W"], "G": K["bytes_G"], "M": K["bytes_M"], "O": K["bytes_O"]}
    sharded = {"W": z >= 3, "G": z >= 2, "M": z >= 1, "O": z >= 1}
    persistent = sum((P_dense * o.where(sharded[k], 1 / dz, 1) + P_exp * o.where(sharded[k], 1 / d_exp, 1))
                     * states[k] for k in states) - off["host_bytes"]
    lp_copy, lp_scales = lowp_memory(K, X, o, moe, P_exp, dz, d_exp)
    persistent = persistent + lp_copy + lp_scales
    per_layer = activation_per_layer(K, X, o)
    logits = logits_bytes(K, X)
    redo = 0 * persistent
    if activations == "transient":
        activation = K["transient"] + 0 * persistent
    else:
        stage = per_layer * L / p
        # one stage (p = 1): one micro-batch in flight plus the logits; else the larger of the
        # first stage's in-flight micro-batches and the last stage's one plus the logits
        peak_in, last = stage * inflight(p, v, o, m), stage
        if X.get("stage_in") is not None:      # uneven chunks: layers × micro-batches in flight
            peak_in, last = per_layer * X["stage_in"], per_layer * X["stage_last"]
        # the backward of a layer re-materialises what recomputation dropped: one layer's
        # activations of one micro-batch as without recomputation, beside the checkpoints (the
        # runtime's peak only; activation_memory keeps Korthikanti et al.'s stored activations)
        redo = activation_per_layer(K, dict(X, r=0 * X["r"]), o) - per_layer
        activation = o.where(p == 1, stage + logits, o.max(peak_in, last + logits))
    # ---- runtime memory: what the caching allocator reserves (torch.cuda.max_memory_reserved)
    if activations == "transient":
        loss_rt, act_rt = 0 * persistent, activation
    else:
        loss_rt = loss_bytes(K, X)
        act_rt = o.where(p == 1, stage + redo + loss_rt, o.max(peak_in + redo, last + redo + loss_rt))
    gathered = gathered_bytes(K, X, o, P_mp, dz)
    # cuBLAS workspace, and fused attention's backward FP32 dQ accumulator of one layer
    workspace = K.get("cublas_ws", 0) + o.where(K["flash"] == 1, 4 * b * s_loc * K["a"] * dh / t, 0 * s_loc)
    allocated = persistent + act_rt + gathered + workspace
    runtime = allocated * (1 + K.get("reserve", 0))
    out = dict(terms)
    # achieved model FLOP utilisation: the model's FLOPs (exact count, no recomputation) over
    # the step time at the peak of every GPU; and the compute's own (the MFU the roofline implies)
    model_flops = 3 * fwd_tok * s * K["B"]
    out.update(forward=forward, mfu_achieved=model_flops / (step * K["gpus"] * K["peak"]),
               mfu_compute=model_flops / (ideal * K["gpus"] * K["peak"]))
    out.update(m=m, step=step, persistent=persistent, activation=activation,
               memory=persistent + activation, tp_bw=tp_bw, tp_spans=tp_spans, dp_bw=dp_bw,
               dp_spans=dp_spans, dp_volume=vol, comm_tp_total=tp, comm_dp_total=dp_time,
               P_dense=P_dense, P_exp=P_exp, d_exp=d_exp, dp_head=head, dp_tail=tail, dp_gather=gather, dp_window=window, chain=chain,
               activation_per_layer=per_layer, activation_redo=redo, logits=logits, pp_message=pp_msg,
               pp_bw=pp_bw, offload_volume=off["volume"], offload_cpu=off["cpu"], offload_host_bytes=off["host_bytes"],
               cast=cast, lowp_copy=lp_copy, lowp_scales=lp_scales, dz=dz, loss_runtime=loss_rt,
               activation_runtime=act_rt, gathered=gathered, workspace=workspace, allocated=allocated,
               runtime=runtime, **ends)
    return out


def lowp_memory(K, X, o, moe, P_exp, d, d_exp):
    """Memory of a low-precision step per GPU (bytes): ``(copy, scaling state)``.

    The copy: the low-precision weights of the linear layers this GPU holds —
    :func:`copy_bytes_per_param` × (dense linear parameters ``K["N_lin"]`` / (tp·pp) + routed
    experts ``P_exp``), sharded over dp like the weights under ZeRO-3 (FSDP gathers the copy);
    none when the stored weights are the copy (``K["lp_wcast"]`` = 0).  The scaling state:
    delayed scaling keeps an FP32 amax history of ``K["lp_hist"]`` entries for each of the
    three tensors (input, weight, output gradient) of every low-precision GEMM module
    (:func:`lowp_modules`); block scales of the weights are in the copy's bytes, those of
    activations are transient.  (0, 0) for a 16-bit step."""
    if K.get("lp") is None:
        return 0 * P_exp, 0 * P_exp
    z3 = X["z"] >= 3
    P_lin = K["N_lin"] / (X["t"] * X["p"])
    held = P_lin * o.where(z3, 1 / d, 1) + P_exp * o.where(z3, 1 / d_exp, 1)
    copy = copy_bytes_per_param(K) * held * K.get("lp_wcast", 1)
    scales = 3 * 4 * K["lp_hist"] * lowp_modules(K, X, o, moe)
    return copy, scales


def offload_terms(K, X, P_dense, P_exp, d, d_exp, window, o):
    """ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model
    Training"): with ``X["off"]`` = 1 the FP32 master weights and the optimizer states of
    this GPU's optimizer partition (its 1/d share under ZeRO ≥ 1, all of its model-parallel
    shard under ZeRO-0) live in host memory and the optimizer step runs on the CPU.  Per
    step the partition's gradients go to the host and the updated 16-bit weights come back
    over ``host_link`` — the paper's 2M + 2M bytes for M parameters in fp16, here
    (bytes_G + bytes_W)·M — and CPU Adam reads the gradient, reads and writes master and
    optimizer states and writes the weights, (bytes_G + 2·bytes_M + 2·bytes_O + bytes_W)·M
    bytes at ``host_bw`` (memory-bound).  Exposure: the gradient download overlaps the
    backward passes that produce the reduced gradients (``window`` of the DP block: the last
    micro-batch's, every micro-batch's under ZeRO-2), as the paper's overlapped offload; the
    CPU step and the weight upload follow (no one-step delayed update).

    :returns: ``time`` (s, exposed), ``volume`` (B over the host link), ``cpu`` (s), and
        ``host_bytes`` (B of master + optimizer state moved off the GPU).
    """
    on = X.get("off", 0)
    zsh = X["z"] >= 1
    M = P_dense * o.where(zsh, 1 / d, 1) + P_exp * o.where(zsh, 1 / d_exp, 1)
    if isinstance(on, (int, float)) and not on:
        zero = 0 * M
        return {"time": zero, "volume": zero, "cpu": zero, "host_bytes": zero}
    bw = K.get("host_link", 1)
    down = K["bytes_G"] * M / bw
    up = K["bytes_W"] * M / bw
    cpu = (K["bytes_G"] + 2 * K["bytes_M"] + 2 * K["bytes_O"] + K["bytes_W"]) * M / K.get("host_bw", 1)
    t = o.max(0, down - window) + cpu + up
    return {"time": on * t, "volume": on * (K["bytes_G"] + K["bytes_W"]) * M, "cpu": on * cpu,
            "host_bytes": on * (K["bytes_M"] + K["bytes_O"]) * M}


def _floor(x):
    if type(x) is _Lazy:
        return _Lazy(_floor, (x,))
    np = sys.modules.get("numpy")     # an array exists only once numpy is imported
    if np is not None and isinstance(x, np.ndarray):
        return np.floor(x)
    if isinstance(x, (int, float)):
        import math
        return math.floor(x)
    import sympy as sp
    if isinstance(x, sp.Rational):   # an exact number: its floor directly (same Integer)
        return sp.Integer(x.p // x.q)
    if x.is_number:
        return sp.floor(x)
    # symbolic: unevaluated (sympy's evaluation asks whether the argument is an integer,
    # milliseconds for a ratio of products, and keeps the floor of such a ratio anyway)
    return sp.floor(x, evaluate=False)


def _mod(x, k):
    if type(x) is _Lazy or type(k) is _Lazy:
        return _Lazy(_mod, (x, k))
    np = sys.modules.get("numpy")     # an array exists only once numpy is imported
    if np is not None and (isinstance(x, np.ndarray) or isinstance(k, np.ndarray)):
        return np.mod(x, k)
    import sympy as sp
    if isinstance(x, (int, sp.Rational)) and isinstance(k, (int, sp.Rational)) and k != 0 \
            and not isinstance(x, bool) and not isinstance(k, bool):
        return sp.Rational(x) % sp.Rational(k)    # exact numbers: what Mod evaluates to, without it
    if not any(isinstance(a, sp.Basic) and not a.is_number for a in (x, k)):
        return sp.Mod(x, k)
    return sp.Mod(x, k, evaluate=False)         # symbolic: as :func:`_floor`


# Validity rules: (name, reason shown for a rejected layout, lhs(K, X), op, rhs(K, X)).
# ``moe``-only and cross-host rules are filtered by :func:`rules`.
def rules(moe: bool, cross_host_tp: bool, explicit_dp: bool = False, stage_layers: bool = False):
    """The validity rules of a layout, in the order a rejected layout's reason is chosen.

    Each is ``(name, reason, lhs, op, rhs)`` with ``lhs``/``rhs`` functions of the constants
    ``K`` and knobs ``X`` (plus ``m`` micro-batches in ``X``), valid for numbers, sympy and
    numpy arrays.  Memory is checked separately (it needs the evaluated layout).
    """
    R = [
        ("tp_divides_heads", "tp does not divide the attention heads",
         lambda K, X: _mod(K["a"], X["t"]), "==", lambda K, X: 0),
        ("tp_divides_kv_heads", "tp does not divide the KV heads",
         lambda K, X: _mod(K["kv"], X["t"]), "==", lambda K, X: 0),
    ]
    if not cross_host_tp:
        R.append(("tp_within_host", "tp exceeds the GPUs of one host",
                  lambda K, X: X["t"], "<=", lambda K, X: K["gph"]))
    # pp·virtual need not divide the layers: the layers are split as evenly as the balance asks
    # (:func:`split_layers`) and the pipeline is priced chunk by chunk; each chunk holds one at least
    R += [] if stage_layers else [
        ("layers_fill_chunks", "fewer layers than pp·virtual pipeline chunks (each chunk holds one at least)",
         lambda K, X: X["p"] * X["v"], "<=", lambda K, X: K["L"])]
    R += [
        ("cp_divides_sequence", "cp does not divide the sequence length",
         lambda K, X: _mod(K["s"], X["c"]), "==", lambda K, X: 0),
        ("gpus_product", "dp·tp·pp·cp differs from the GPU count" if explicit_dp
         else "tp·pp·cp does not divide the GPU count",
         lambda K, X: X["d"] * X["t"] * X["p"] * X["c"], "==", lambda K, X: K["gpus"]),
    ]
    if moe:
        R.append(("ep_divides_experts", "ep does not divide the experts",
                  lambda K, X: _mod(K["E"], X["e"]), "==", lambda K, X: 0))
    else:
        R.append(("ep_needs_experts", "ep > 1 on a dense model (no experts)",
                  lambda K, X: X["e"], "==", lambda K, X: 1))
    R += [
        ("ep_divides_dp", "ep·etp does not divide dp·tp·cp (the expert-parallel × expert-TP groups tile the "
         "data-, tensor- and context-parallel ranks)",
         lambda K, X: _mod(X["d"] * X["t"] * X["c"], X["e"] * X.get("et", X["t"])), "==", lambda K, X: 0),
        ("micro_batches_whole", "global batch not divisible by dp·micro-batch",
         lambda K, X: _mod(K["B"], X["d"] * X["b"]), "==", lambda K, X: 0),
        ("interleave_microbatches", "interleaving needs the micro-batches to be a multiple of pp",
         lambda K, X: _mod(K["B"] / (X["d"] * X["b"]), X["p"]) * (X["v"] - 1), "==", lambda K, X: 0),
        ("sp_needs_tp", "sequence parallelism without tensor parallelism",
         lambda K, X: X["sp"] * (X["t"] == 1), "==", lambda K, X: 0),
        ("virtual_needs_pp", "virtual stages > 1 without pipeline parallelism",
         lambda K, X: (X["v"] - 1) * (X["p"] == 1),
         "==", lambda K, X: 0),
    ]
    return R

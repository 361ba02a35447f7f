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
from plugins.training.layout_ops import (  # noqa: F401  (re-exported: callers read them as lm.<name>)
    FP8_OPERANDS, FP8_RECIPES, LOWP_FIELDS, LOWP_GEMMS, LOWP_SUSTAINED, MATMUL_PRECISIONS, cast_constants,
    copy_bytes_per_param, eta_matmul, gemm_time, layer_ops, lowp_modules, op_flops, price_ops, recipe_of, roofline,
    shape_constants)

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
#: the device field of the share of the decomposed TP overlap's ideal 1 − 1/tp that it hides
TP_OVERLAP_FIELD = "tp_overlap_efficiency"



from plugins.training.layout_overlap import (ATTENTION_KERNELS, FRAMEWORKS, OVERLAP_PARAMS,  # noqa: E402,F401
                                             TP_COMM_OVERLAP, attention_field, collective_overlaps,
                                             exposed_shares)
from plugins.training.layout_memory import (LOSS_BYTES, LOSSES, RUNTIME_REFS, activation_per_layer,  # noqa: E402,F401
                                              framework_memory_constants, gathered_bytes, head_input_bytes,
                                              logits_bytes, loss_bytes, pipeline_buffer_bytes)


def inflight(p, v, o, m):
    """Micro-batches whose activations the first pipeline stage holds at its peak (in units of
    one micro-batch through the whole stage): p under 1F1B (Narayanan et al. 2021); interleaving
    with v chunks multiplies the stage's activation memory by 1 + (p−1)/(p·v) (Korthikanti et al.
    2022 §4.2.3) — p·v + p − 1 chunk forwards in flight, Megatron's interleaved warm-up
    2(p − 1) + (v − 1)·p plus the first steady-state forward.  With ``m`` micro-batches per step
    a stage never holds more than the step has: at most m under 1F1B, m·v chunk forwards
    interleaved (Megatron-LM ``forward_backward_pipelining_with_interleaving`` caps the warm-up
    at the step's m·v forwards; torch.distributed.pipelining's schedules likewise)."""
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
    if activations == "transient":   # a declared transient budget holds all of it (as plans price it)
        loss_rt, act_rt = 0 * persistent, activation
        buf_first = last_rest = gathered = workspace = 0 * persistent
    else:
        loss_rt = loss_bytes(K, X, o) + head_input_bytes(K, X, o)
        buf_first, buf_last = pipeline_buffer_bytes(K, X, o, m, inflight(p, v, o, m) * v)
        # the last rank beside its layers' checkpoints: the re-materialised layer, the loss, its buffers
        last_rest = redo + loss_rt + buf_last
        act_rt = o.where(p == 1, stage + redo + loss_rt, o.max(peak_in + redo + buf_first, last + last_rest))
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
               cast=cast, lowp_copy=lp_copy, lowp_scales=lp_scales, dz=dz, loss_runtime=loss_rt, pipeline_buffers=buf_first,
               last_rank_rest=last_rest,
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

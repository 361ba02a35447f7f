"""Closed forms of a parallel layout (TP × PP × DP/ZeRO × EP × CP), shared by ``use layout``
(sympy, one layout) and the layout search (numpy, a whole candidate grid at once).

Every function takes an ``ops`` namespace (:data:`NUMPY` or :data:`SYMPY`) for ``max``,
``min`` and ``where``, so one text serves both: in the sympy path the structural knobs
(tp, pp, …) are Python ints and ``where`` picks a branch; in the numpy path they are arrays.

Sources: book ch. 10 §10.2.4 (combined parallelism, per-GPU memory and per-link traffic),
§10.3 (overlap, pipeline bubbles); Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (activation bytes, §4); Narayanan et al. 2021
(Megatron-LM, 1F1B and interleaved schedules); the ZeRO volumes of ``plugins/zero.py``.
"""
from __future__ import annotations

from . import collectives as coll
from . import flops

# Terms of the step time, in the order the explanation lists them.
TERMS = ("compute", "imbalance", "recompute", "bubble", "tp", "cp", "ep", "pp", "dp", "offload", "input")
TERM_NAMES = {
    "compute": "compute (forward + backward at the stated MFU)",
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
RECOMPUTE = ("none", "selective", "full")
ACT_BYTES = 2            # 16-bit boundary messages and TP/CP collectives (Korthikanti et al. 2022)
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
ATTENTION = ("flash", "eager")


class _NumpyOps:
    def __init__(self):
        import numpy as np
        self.max, self.min, self.where = np.maximum, np.minimum, np.where


class _SympyOps:
    def __init__(self):
        import sympy as sp
        self.max, self.min = sp.Max, sp.Min

    @staticmethod
    def where(cond, a, b):
        import sympy as sp
        if cond is True or cond is False or isinstance(cond, bool):
            return a if cond else b
        if cond in (sp.true, sp.false):
            return a if cond == sp.true else b
        return sp.Piecewise((a, cond), (b, True))


def ops(kind: str):
    """``ops("numpy")`` or ``ops("sympy")``: the max/min/where namespace."""
    return _NumpyOps() if kind == "numpy" else _SympyOps()


def activation_per_layer(K, X, o):
    """Activation bytes one transformer layer keeps from forward to backward for one
    micro-batch on one GPU.

    Korthikanti et al. 2022 §4.1 count, for a GPT layer at 16-bit with dropout and eager
    attention, 34·s·b·h + 5·a·s²·b bytes: attention 11sbh + 5as²b (QKV input 2, Q and K 4,
    V 2, scores/softmax/dropout 5as²b, o-projection input 2, dropout mask 1), MLP 19sbh
    (input 2, GeLU input 8, GeLU output 8, dropout mask 1; f = 4h), two layer-norm inputs
    4sbh.  The same terms, kept per tensor, for any decoder (T = s·b tokens, e bytes per
    element of ``activation_precision``, one byte per dropout-mask element):

    * replicated across TP ranks (÷ t only with sequence parallelism): two norm inputs,
      QKV-projection input and MLP input, 4·T·h·e, and the two dropout masks 2·T·h (dropout);
    * split by TP: Q, K, V T·(n_q + 2·n_kv)·d_h·e, o-projection input T·n_q·d_h·e, the MLP's
      intermediate tensors (gate, up and their product for a 3-matrix SwiGLU/GeGLU MLP,
      input and output of the activation for a 2-matrix GeLU MLP) mats·T·f·e, and — eager
      attention only — the scores and softmax output 2·n_q·s·T·e plus the dropout mask
      n_q·s·T (with dropout); FlashAttention-style fused attention keeps none of the s×s
      tensors, only the per-head log-sum-exp T·n_q·4 bytes.

    For GPT-3 (n_q·d_h = h, n_kv = n_q, f = 4h, 2 matrices, e = 2, dropout, eager) this is
    exactly 34·s·b·h + 5·a·s²·b.  Selective recomputation drops the s×s tensors; full
    recomputation keeps only the layer input T·h·e (÷ t with SP).  CP splits the tokens.

    ``K`` constants: h a (heads) kv dh f (MLP width per token: the dense FFN, or the active
    experts' width for MoE layers) mats act_bytes flash dropout s; ``X`` knobs: b t c sp r.
    Works on numbers, sympy expressions or numpy arrays (``o`` = :func:`ops`).
    """
    h, a, kv, dh, e = K["h"], K["a"], K["kv"], K["dh"], K["act_bytes"]
    t, sp_on, r = X["t"], X["sp"], X["r"]
    s_loc = K["s"] / X["c"]
    T = s_loc * X["b"]
    drop = K["dropout"]
    rep = T * (4 * h * e + 2 * h * drop)
    split = T * ((a + 2 * kv) * dh * e + a * dh * e + K["mats"] * K["f"] * e)
    scores = o.where(K["flash"] == 1, T * a * 4, T * a * K["s"] * (2 * e + drop))
    rep_t = o.where(sp_on == 1, rep / t, rep)
    none = rep_t + (split + scores) / t
    sel = rep_t + (split + o.where(K["flash"] == 1, T * a * 4, 0 * T)) / t
    full = o.where(sp_on == 1, T * h * e / t, T * h * e)
    return o.where(r == 2, full, o.where(r == 1, sel, none))


def logits_bytes(K, X):
    """LM-head logits kept for the cross-entropy backward on the last stage: T·V FP32
    (4 bytes) split over TP (vocabulary-parallel), 0 for a classifier head."""
    return 4 * K["s"] / X["c"] * X["b"] * K["V"] / X["t"] * K["logits"]


def inflight(p, v, o):
    """Micro-batches whose activations the first pipeline stage holds at its peak:
    p under 1F1B (Narayanan et al. 2021); interleaving with v chunks multiplies the
    stage's activation memory by 1 + (p−1)/(p·v) (Korthikanti et al. 2022 §4.2.3)."""
    return o.where(v > 1, p * (1 + (p - 1) / (p * v)), p)


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
    spans = k > per_host
    sharing = gph / per_host                              # groups of this kind on a host
    cross = o.min(K["link"], K["nics"] * K["nic"] / sharing)
    return o.where(spans, cross, K["link"]), spans


# link-dict key of plugins.collectives -> suffix of its K key (K["link_alpha"], K["nic_eff"] …)
LINK_KEYS = (("latency", "_alpha"), ("launch", "_launch"), ("efficiency", "_eff"), ("nvls_efficiency", "_nvls_eff"),
             ("nvls_latency", "_nvls_lat"))


def link_dicts(K: dict):
    """Roofline mode: the GPU's ``link`` and one GPU's share of its host's NICs
    (nics·nic / gpus_per_host) as link dicts of :mod:`plugins.collectives`, from the ``K`` keys
    ``link_alpha``/``nic_alpha`` (α, s), ``*_launch`` (s), ``*_eff``, ``*_nvls`` (bool),
    ``*_nvls_eff``, ``*_nvls_lat`` (s); absent keys take the collectives' defaults."""
    def one(prefix, bw):
        d = {"bandwidth": bw, "nvls": bool(K.get(prefix + "_nvls", False))}
        for key, suffix in LINK_KEYS:
            if K.get(prefix + suffix) is not None:
                d[key] = K[prefix + suffix]
        return d
    return one("link", K["link"]), one("nic", K["nics"] * K["nic"] / K["gph"])


def comm_time(op, k, stride, size, K, o):
    """Roofline mode: time (s) of one ``op`` (:data:`plugins.collectives.OPS`) of ``size``
    bytes (nccl-tests convention) in a group of k GPUs ``stride`` ranks apart, placed as
    :func:`group_bandwidth` places it: on one host the GPU's link (the fastest of ring, tree,
    NVLS), across hosts :func:`plugins.collectives.spanning_time` (the fastest of the flat
    ring over the host cut, NCCL's tree and the hierarchical form) with the members of one
    host as ``k_intra``."""
    intra, inter = link_dicts(K)
    per_host = o.max(1, o.min(k, K["gph"] / stride))
    local = coll.collective_time(op, k, size, intra, o)
    across = coll.spanning_time(op, per_host, k / per_host, size, intra, inter, o)
    return o.where(k > per_host, across, local)


def attention_per_token(K: dict):
    """Attention-core forward FLOPs per token, all layers (:mod:`plugins.flops`):
    2·n_q·(d_h + d_v)·(query–key pairs per token summed over the layers), d_v = ``K["dv"]``
    (MLA's value width; d_h when absent).  The pairs are ``K["attn_pairs"]`` when given
    (sliding-window layers, bidirectional encoders: :func:`plugins.decoder.attention_pairs` / s),
    else causal L·(s+1)/2."""
    s, dv = K["s"], K.get("dv")
    pairs = K.get("attn_pairs")
    if pairs is None:
        pairs = K["L"] * flops.attention_pairs(s) / s
    return flops.attention_core(K["a"], K["dh"], K["dh"] if dv is None else dv, pairs)


def evaluate(K: dict, X: dict, o, activations: str = "formula", moe: bool = False) -> dict:
    """Step time terms and memory of layouts.

    ``K`` constants (base units): L h a kv dh V N N_emb N_exp E topk fwd_tok (forward FLOP per
    token, matrices) s B peak mfu gpus gph link nic nics latency overlap input wait
    bytes_W bytes_G bytes_M bytes_O transient.  ``X`` knobs (ints or int arrays): t p d c e b
    v z (ZeRO stage) r (recompute 0/1/2) sp (0/1).

    Placement (innermost first): TP ranks are adjacent (stride 1), then CP (stride t),
    DP (stride t·c; EP is the innermost e of the DP ranks), PP outermost (stride t·c·d):
    the most frequent, latency-bound collectives (TP, per layer) get the fastest link; PP
    moves least (one activation per micro-batch and stage boundary), so it may span hosts.

    :returns: dict of arrays/expressions: ``m`` micro-batches, each term of :data:`TERMS`
        (s), ``step`` (s), ``persistent``/``activation``/``memory`` (bytes per GPU),
        ``tp_bw``/``dp_bw`` (B/s), ``tp_spans`` (bool), ``dp_volume`` (B).
    """
    t, p, d, c, e, b, v, z, r, sp_on = (X[k] for k in ("t", "p", "d", "c", "e", "b", "v", "z", "r", "sp"))
    L, h, kv, dh, s = K["L"], K["h"], K["kv"], K["dh"], K["s"]
    m = K["B"] / (d * b)                                   # micro-batches per pipeline per step
    s_loc = s / c                                          # tokens of a sequence on one CP rank
    # ---- compute: 6ND-style FLOPs of the matrices + causal attention, per GPU (§10.1.3)
    attn_tok = attention_per_token(K)                      # attention FLOP per token (QKᵀ, AV)
    fwd_tok = K["fwd_tok"] + attn_tok
    ideal = 3 * fwd_tok * s * K["B"] / (K["gpus"] * K["peak"] * K["mfu"])
    # full recomputation repeats the layers' forward (not the LM head): ≈ 8ND instead of 6ND;
    # selective recomputes the attention core (QKᵀ, softmax, AV) — the work a fused
    # FlashAttention backward redoes as well
    layers_fwd = fwd_tok - K["head_tok"]
    extra = o.where(r == 2, layers_fwd / (3 * fwd_tok), o.where(r == 1, attn_tok / (3 * fwd_tok), 0 * ideal))
    recompute = ideal * extra
    bubble = (ideal + recompute) * (p - 1) / (v * m)       # (p−1)/(v·m) of the ideal time
    # ---- TP: 2 all-reduces forward, 2 backward per layer and micro-batch (+2 with full
    # recomputation); reduce-scatter + all-gather with SP move the same bytes
    tp_bw, tp_spans = group_bandwidth(t, 1, K, o)
    act = b * s_loc * h * ACT_BYTES
    n_tp = o.where(r == 2, 6, 4) * (L / p) * m
    roof = K.get("mode", "mfu") == "roofline"             # collectives from plugins.collectives
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
        imbalance = (imb - 1) * K.get("exp_tok", 0) * s * K["B"] / (K["gpus"] * K["peak"] * K["mfu"])
        ep_bw, _ = group_bandwidth(e, t * c, K, o)
        # each token's hidden state goes to top-k experts; (e−1)/e of them live on other ranks
        if roof:   # the most loaded rank sends imb × the mean all-to-all buffer
            a2a = comm_time("all_to_all", e, t * c, imb * act * K["topk"], K, o)
        else:
            a2a = imb * (e - 1) / e * act * K["topk"] / ep_bw + (e - 1) * K["latency"]
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
    exposed = 1 - K["overlap"]
    # ---- PP: boundary sends (point-to-point) on the critical path of the schedule
    pp_bw, _ = group_bandwidth(p, t * c * d, K, o)
    pp_bytes = act / o.where(sp_on == 1, t, 1)
    pp_msg = comm_time("send", p, t * c * d, pp_bytes, K, o) if roof else pp_bytes / pp_bw + K["latency"]
    pp = o.where(p > 1, pp_crossings(p, v, m, o) * pp_msg, 0 * act)
    # ---- DP / ZeRO over d (book §10.3.3, plugins/zero.py); model-parallel shard first
    # dense parameters are split by tp·pp and data-parallel over d; routed experts by
    # ep·etp·pp and data-parallel over the expert-data-parallel group d·tp·cp/(ep·etp)
    P_dense = (K["N"] - K["N_exp"]) / (t * p)
    P_exp = K["N_exp"] / (e * et * p)
    P_mp = P_dense + P_exp
    d_exp = d * t * c / (e * et)
    W, G = K["bytes_W"] * P_mp, K["bytes_G"] * P_mp
    frac = (d - 1) / d

    def _vol(Wx, Gx, fr):
        return o.where(z == 3, m * fr * (2 * Wx + Gx),
                       o.where(z == 2, m * fr * Gx + fr * Wx,
                               o.where(z == 1, fr * (Gx + Wx), 2 * fr * Gx)))
    vol = _vol(K["bytes_W"] * P_dense, K["bytes_G"] * P_dense, frac)
    if moe:
        vol = vol + _vol(K["bytes_W"] * P_exp, K["bytes_G"] * P_exp, (d_exp - 1) / d_exp)
    dp_bw, dp_spans = group_bandwidth(d, t * c, K, o)
    if roof:
        # the bus bandwidth the DP collectives reach (vol counts bus bytes, so vol / busbw is
        # their time): one call per layer of the stage (FSDP units; DDP / Megatron buckets),
        # an all-reduce of the gradient shard under ZeRO-0, a reduce-scatter otherwise
        g_call = K["bytes_G"] * P_mp / (L / p)
        dp_ops = ("all_reduce", "reduce_scatter")
        dp_t = [o.where(d > 1, comm_time(op, d, t * c, g_call, K, o), 1 + 0 * g_call) for op in dp_ops]
        bus = [coll.bus_bandwidth(op, d, g_call, x) for op, x in zip(dp_ops, dp_t)]
        dp_bw = o.where((d > 1) & (g_call > 0), o.where(z == 0, bus[0], bus[1]), dp_bw)
    dp_time = vol / dp_bw
    emb = K["N_emb"] / t / P_mp                             # embedding share of the shard
    head = o.where(z >= 1, frac * W * emb / dp_bw, 0 * W)   # first AllGather (embedding)
    tail = o.where(z == 0, 2, 1) * frac * G * emb / dp_bw   # last reduction (embedding grad)
    # exposure (MegaScale; the `step` timeline of plugins/layout.py schedules exactly this):
    # the GPU runs the chain C of compute, recomputation, bubble and exposed TP/CP/EP/PP;
    # the link carries the DP/ZeRO collectives beside it
    chain = ideal + imbalance + recompute + bubble + (tp + cp + ep) * exposed + pp
    gather = o.where((z == 1) | (z == 2), frac * W / dp_bw, 0 * W)   # AllGather of updated weights
    # gradients appear only while the backward passes that produce them run: the last
    # micro-batch's (stages 0-1, 2/3 of its compute) or every micro-batch's (stage 2)
    window = o.where(z == 2, 2 * (ideal + recompute) / 3, 2 * (ideal + recompute) / (3 * m))
    exposed_3 = head + tail + o.max(0, dp_time - head - tail - chain)
    exposed_012 = head + tail + o.max(0, o.max(chain - window, gather - head) + dp_time - gather - tail - chain)
    dp = o.where(K["prefetch"] == 0, dp_time, o.where(z == 3, exposed_3, exposed_012))
    off = offload_terms(K, X, P_dense, P_exp, d, d_exp, window, o)
    terms = {"compute": ideal, "imbalance": imbalance, "recompute": recompute, "bubble": bubble, "tp": tp * exposed,
             "cp": cp * exposed, "ep": ep * exposed, "pp": pp, "dp": dp, "offload": off["time"],
             "input": K["input"] + 0 * ideal}
    step = sum(terms.values())
    # ---- memory per GPU
    states = {"W": K["bytes_W"], "G": K["bytes_G"], "M": K["bytes_M"], "O": K["bytes_O"]}
    sharded = {"W": z >= 3, "G": z >= 2, "M": z >= 1, "O": z >= 1}
    persistent = sum((P_dense * o.where(sharded[k], 1 / d, 1) + P_exp * o.where(sharded[k], 1 / d_exp, 1))
                     * states[k] for k in states) - off["host_bytes"]
    per_layer = activation_per_layer(K, X, o)
    logits = logits_bytes(K, X)
    if activations == "transient":
        activation = K["transient"] + 0 * persistent
    else:
        stage = per_layer * L / p
        # one stage (p = 1): one micro-batch in flight plus the logits; else the larger of the
        # first stage's in-flight micro-batches and the last stage's one plus the logits
        activation = o.where(p == 1, stage + logits, o.max(stage * inflight(p, v, o), stage + logits))
    out = dict(terms)
    out.update(m=m, step=step, persistent=persistent, activation=activation,
               memory=persistent + activation, tp_bw=tp_bw, tp_spans=tp_spans, dp_bw=dp_bw,
               dp_spans=dp_spans, dp_volume=vol, comm_tp_total=tp, comm_dp_total=dp_time,
               P_dense=P_dense, P_exp=P_exp, d_exp=d_exp, dp_head=head, dp_tail=tail, dp_gather=gather, dp_window=window, chain=chain,
               activation_per_layer=per_layer, logits=logits, pp_message=pp_msg,
               pp_bw=pp_bw, offload_volume=off["volume"], offload_cpu=off["cpu"], offload_host_bytes=off["host_bytes"])
    return out


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
    try:
        import numpy as np
        if isinstance(x, np.ndarray):
            return np.floor(x)
    except ImportError:       # pragma: no cover - numpy is optional
        pass
    if isinstance(x, (int, float)):
        import math
        return math.floor(x)
    import sympy as sp
    return sp.floor(x)


def _mod(x, k):
    try:
        import numpy as np
        if isinstance(x, np.ndarray) or isinstance(k, np.ndarray):
            return np.mod(x, k)
    except ImportError:       # pragma: no cover - numpy is optional
        pass
    import sympy as sp
    return sp.Mod(x, k)


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
    R += [] if stage_layers else [
        ("pp_divides_layers", "pp·virtual does not divide the layers (or give stage_layers)",
         lambda K, X: _mod(K["L"], X["p"] * X["v"]), "==", lambda K, X: 0)]
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

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

# Terms of the step time, in the order the explanation lists them.
TERMS = ("compute", "recompute", "bubble", "tp", "cp", "ep", "pp", "dp", "input")
TERM_NAMES = {
    "compute": "compute (forward + backward at the stated MFU)",
    "recompute": "recomputation (extra forward)",
    "bubble": "pipeline bubble (p−1)/(v·m)",
    "tp": "exposed TP all-reduces",
    "cp": "exposed CP K/V exchange",
    "ep": "exposed EP all-to-all",
    "pp": "pipeline send/receive on fill and drain",
    "dp": "exposed DP/ZeRO collectives",
    "input": "input wait",
}
RECOMPUTE = ("none", "selective", "full")
ACT_BYTES = 2            # 16-bit activations (Korthikanti et al. 2022)


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
        return a if cond else b


def ops(kind: str):
    """``ops("numpy")`` or ``ops("sympy")``: the max/min/where namespace."""
    return _NumpyOps() if kind == "numpy" else _SympyOps()


def activation_per_layer(s, b, h, a, t, sp_on, recompute, o):
    """Activation bytes one transformer layer keeps for one micro-batch (16-bit activations).

    Korthikanti et al. 2022 §4 (s tokens, b sequences, h hidden, a heads, t TP degree):

    * no recomputation, TP without sequence parallelism: s·b·h·(10 + 24/t + 5·a·s/(h·t))
      (t = 1 gives the unparallelised s·b·h·(34 + 5·a·s/h));
    * no recomputation, TP + sequence parallelism: s·b·h·(34/t + 5·a·s/(h·t));
    * selective recomputation (attention core recomputed): s·b·h·34/t with SP,
      s·b·h·(10 + 24/t) without;
    * full recomputation (only each layer's input kept): 2·s·b·h, ÷ t with SP.

    ``recompute`` is 0/1/2 (none/selective/full); ``sp_on`` 0/1.  Works on numbers,
    sympy expressions or numpy arrays (``o`` = :func:`ops`).
    """
    sbh = s * b * h
    score = 5 * a * s / (h * t)
    none = o.where(sp_on == 1, sbh * (34 / t + score), sbh * (10 + 24 / t + score))
    sel = o.where(sp_on == 1, sbh * 34 / t, sbh * (10 + 24 / t))
    full = o.where(sp_on == 1, 2 * sbh / t, 2 * sbh)
    return o.where(recompute == 2, full, o.where(recompute == 1, sel, none))


def inflight(p, v, o):
    """Micro-batches whose activations the first pipeline stage holds at its peak:
    p under 1F1B (Narayanan et al. 2021); interleaving with v chunks multiplies the
    stage's activation memory by 1 + (p−1)/(p·v) (Korthikanti et al. 2022 §4.2.3)."""
    return o.where(v > 1, p * (1 + (p - 1) / (p * v)), p)


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
    L, h, a, kv, dh, s = K["L"], K["h"], K["a"], K["kv"], K["dh"], K["s"]
    m = K["B"] / (d * b)                                   # micro-batches per pipeline per step
    s_loc = s / c                                          # tokens of a sequence on one CP rank
    # ---- compute: 6ND-style FLOPs of the matrices + causal attention, per GPU (§10.1.3)
    attn_tok = 2 * 2 * a * dh * (s + 1) / 2 * L            # attention FLOP per token (QKᵀ, AV)
    fwd_tok = K["fwd_tok"] + attn_tok
    ideal = 3 * fwd_tok * s * K["B"] / (K["gpus"] * K["peak"] * K["mfu"])
    extra = o.where(r == 2, fwd_tok / (3 * fwd_tok), o.where(r == 1, attn_tok / (3 * fwd_tok), 0 * ideal))
    recompute = ideal * extra                              # full: 8ND instead of 6ND
    bubble = (ideal + recompute) * (p - 1) / (v * m)       # (p−1)/(v·m) of the ideal time
    # ---- TP: 2 all-reduces forward, 2 backward per layer and micro-batch (+2 with full
    # recomputation); reduce-scatter + all-gather with SP move the same bytes
    tp_bw, tp_spans = group_bandwidth(t, 1, K, o)
    act = b * s_loc * h * ACT_BYTES
    n_tp = o.where(r == 2, 6, 4) * (L / p) * m
    tp = n_tp * o.where(t > 1, ring_time(t, act, tp_bw, K["latency"], 2), 0 * act)
    # ---- CP: K and V of the local chunk go round the ring forward; backward again plus dK, dV
    cp_bw, _ = group_bandwidth(c, t, K, o)
    kv_bytes = 2 * b * s_loc * kv * dh * ACT_BYTES
    cp = 3 * (L / p) * m * o.where(c > 1, (c - 1) * (kv_bytes / cp_bw + K["latency"]), 0 * act)
    # ---- EP: dispatch and combine all-to-all forward and backward per MoE layer
    if moe:
        ep_bw, _ = group_bandwidth(e, t * c, K, o)
        a2a = (e - 1) / e * act * K["topk"] / ep_bw + (e - 1) * K["latency"]
        ep = 4 * (K["L_moe"] / p) * m * o.where(e > 1, a2a, 0 * act)
    else:
        ep = 0 * act
    exposed = 1 - K["overlap"]
    # ---- PP: the fill and drain cross p·v − 1 stage boundaries each way (point-to-point)
    pp_bw, _ = group_bandwidth(p, t * c * d, K, o)
    pp_bytes = act / o.where(sp_on == 1, t, 1)
    pp = o.where(p > 1, 2 * (p * v - 1) * (pp_bytes / pp_bw + K["latency"]), 0 * act)
    # ---- DP / ZeRO over d (book §10.3.3, plugins/zero.py); model-parallel shard first
    P_mp = (K["N"] - K["N_exp"]) / (t * p) + K["N_exp"] / (e * t * p)
    W, G = K["bytes_W"] * P_mp, K["bytes_G"] * P_mp
    frac = (d - 1) / d
    vol = o.where(z == 3, m * frac * (2 * W + G),
                  o.where(z == 2, m * frac * G + frac * W,
                          o.where(z == 1, frac * (G + W), 2 * frac * G)))
    dp_bw, dp_spans = group_bandwidth(d, t * c, K, o)
    dp_time = vol / dp_bw
    emb = K["N_emb"] / t / P_mp                             # embedding share of the shard
    head = o.where(z >= 1, frac * W * emb / dp_bw, 0 * W)   # first AllGather (embedding)
    tail = o.where(z == 0, 2, 1) * frac * G * emb / dp_bw   # last reduction (embedding grad)
    comp = ideal + recompute
    window = o.where(z >= 2, comp, o.where(z == 1, comp / 3 + 2 * comp / (3 * m), 2 * comp / (3 * m)))
    dp = head + tail + o.max(0, dp_time - head - tail - window)
    terms = {"compute": ideal, "recompute": recompute, "bubble": bubble, "tp": tp * exposed,
             "cp": cp * exposed, "ep": ep * exposed, "pp": pp, "dp": dp, "input": K["input"] + 0 * ideal}
    step = sum(terms.values())
    # ---- memory per GPU
    states = {"W": K["bytes_W"], "G": K["bytes_G"], "M": K["bytes_M"], "O": K["bytes_O"]}
    sharded = {"W": z >= 3, "G": z >= 2, "M": z >= 1, "O": z >= 1}
    persistent = sum(P_mp * states[k] * o.where(sharded[k], 1 / d, 1) for k in states)
    if activations == "transient":
        activation = K["transient"] + 0 * persistent
    else:
        per_layer = activation_per_layer(s_loc, b, h, a, t, sp_on, r, o)
        stage = per_layer * L / p
        logits = 4 * s_loc * b * K["V"] / t                  # LM-head logits on the last stage
        activation = o.max(stage * inflight(p, v, o), stage + logits)
    out = dict(terms)
    out.update(m=m, step=step, persistent=persistent, activation=activation,
               memory=persistent + activation, tp_bw=tp_bw, tp_spans=tp_spans, dp_bw=dp_bw,
               dp_spans=dp_spans, dp_volume=vol, comm_tp_total=tp, comm_dp_total=dp_time)
    return out


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
def rules(moe: bool, cross_host_tp: bool, explicit_dp: bool = False):
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
    R += [
        ("pp_divides_layers", "pp·virtual does not divide the layers",
         lambda K, X: _mod(K["L"], X["p"] * X["v"]), "==", lambda K, X: 0),
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
        ("ep_divides_dp", "ep does not divide dp (experts are sharded inside the data-parallel group)",
         lambda K, X: _mod(X["d"], X["e"]), "==", lambda K, X: 0),
        ("batch_divisible", "global batch not divisible by dp·micro-batch",
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

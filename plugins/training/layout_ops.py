"""Matrix products and memory-bound work of one training step, op by op (the roofline compute of
:mod:`plugins.training.layout_model`, which re-exports every name here): the low-precision
formats and their casts, the GEMM efficiency curve, the table of a layer's operations and its
pricing, forward and backward.  Sources in each function's docstring."""
from __future__ import annotations

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


def price_ops(ops_, K, o, parts=None):
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
    fd, bd = price_ops(dense, K, o)
    cf, cb = _cast_time(dense, K)
    ad, _ = price_ops(dense, K, o, parts=("attention",))
    head_ops = layer_ops(K, X, o, head=True)
    hf, hb = price_ops(head_ops, K, o)
    ef, eb = price_ops(head_ops, K, o, parts=("embedding",))     # the lookup runs on the first stage
    fwd = L_d * (fd + cf) + hf
    bwd = L_d * (bd + cb) + hb
    cast = L_d * (cf + cb)
    attn_fwd = L_d * ad
    expert = 0 * fd
    if moe:
        mo = layer_ops(K, X, o, moe_layer=True)
        fm, bm = price_ops(mo, K, o)
        cfm, cbm = _cast_time(mo, K)
        am, _ = price_ops(mo, K, o, parts=("attention",))
        fe_, be_ = price_ops(mo, K, o, parts=("expert",))
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
    f, _ = price_ops((sel, st), K, o)
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

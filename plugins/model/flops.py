"""Per-token FLOP formulas of decoder models, and the counting conventions of published
FLOP / MFU figures.  Not a plugin (registers no hooks): the one place the training step
(plugins/training/layout.py, plugins/training/layout_model.py), ``use compute`` (plugins/training/compute.py), the
model's derived FLOP fields (plugins/model/decoder.py) and prefill pricing (plugins/model/llmstate.py)
take their FLOP formulas from.

Arguments are the dicts of :func:`plugins.model.decoder.architecture` (``a``: ``L h f nq nkv dh V
mats`` …) and :func:`plugins.model.decoder.moe_architecture` (``m``: ``E k ks fe Ld rq rkv dr dv
mtp`` …; ``None`` for a dense model).  Every function is plain arithmetic on its arguments,
so it works on sympy expressions and on numpy arrays alike.

Conventions (one multiply-add = 2 FLOPs; "forward" = one pass; training = forward + dX + dW
= 3 × forward for every matrix product):

exact (the default)
    every matrix product a token takes part in: the attention projections (MLA's
    compressions and up-projections included), the FFN or the router plus the k routed and
    k_s shared experts, the LM head on the label tokens; QKᵀ and AV over the causal
    query–key pairs s(s+1)/2 of a sequence (s² without a causal mask).  Norms, softmax,
    activations and the embedding lookup are not matrix products and are not counted.
6nd
    6·N per token, N = the parameters a token uses (all of them for a dense model, the
    active ones for MoE) — the C ≈ 6·N·D rule of Kaplan et al. 2020 §2.1 (who take N
    without the embeddings), with the embeddings kept as most reports do; no attention term.
palm
    PaLM's model FLOPs (Chowdhery et al. 2022, appendix B): 6·N + 12·L·H·Q·T per token, N
    all (active) parameters, H heads of width Q, T the sequence length — attention counted
    over all T² pairs, no causal halving, no recomputation.  With MLA the 12·H·Q becomes
    6·H·(d_qk + d_v).
hardware
    the exact count plus the work activation recomputation repeats: ``full`` adds the
    blocks' forward once more (the LM head is not recomputed), ``selective`` the attention
    core QKᵀ/AV (Korthikanti et al. 2022 §5).  FLOPs per token over wall time give HFU.
megatron
    Megatron-LM ``num_floating_point_operations`` (NVIDIA/Megatron-LM,
    megatron/training/training.py at d98e8a64ddf34856e74b24714e3bedb2f5a39553): 3 passes ×
    2 FLOPs × (FFN widths × matrices — dense FFN, k routed experts, the shared experts, no
    router — plus the q/k/v/o projections, plus h·V for the logits once per output head)
    per token, plus core attention counted over s²/2 pairs (causal mask) for QKᵀ and AV:
    3·n_q·(d_qk + d_v)·s per token and layer.  With MLA it adds one FLOP per token per
    compressed width r_q and r_kv (their norms); MTP modules count as extra layers, with
    their 2h→h projection, three norms and one more logit head.  Megatron pads the
    vocabulary (to a multiple of 128·TP by default); this uses the model's vocabulary.
torchtitan
    torchtitan ``get_dense_model_nparams_and_flops`` / ``get_moe_model_nparams_and_flops``
    (pytorch/torchtitan, torchtitan/models/utils.py at
    b5bcd76c66d0acb1a08b176d9639425bc55e0b2a; the PaLM form): 6 × (all parameters minus
    the input embedding — kept when tied — with only k/E of the routed experts) per token
    plus 6·L·n_q·(d_qk + d_v)·s, i.e. attention over all s² pairs (its comment: "we do not
    account for sparsity in causal attention").
verl
    verl ``FlopsCounter`` (volcengine/verl, verl/utils/flops_counter.py at
    b178a3cd56f58b2d502255daba591e92833930a7, ``_estimate_qwen2_flops``,
    ``_estimate_qwen2_moe_flops``, ``_estimate_deepseek_v3_flops``): 6 × (the q/k/v/o and
    FFN matrices — router and k (+ shared) experts on MoE layers — plus both vocabulary
    matrices V·h, tied or not) per token, plus 6·Σ_seq s²·L·n_q·d_h per batch for attention
    (3·Σ s²·L·n_q·(d_qk + d_v) with MLA): per token of equal-length sequences 3·L·n_q·(d_qk
    + d_v)·s.  Its dense and MoE estimators assume a SwiGLU FFN (3 matrices); this uses the
    model's matrix count, the same for every SwiGLU model.

Book provenance of the ``exact`` convention: ch. 3 §3.4.1 and §3.4.3 (matrix-by-matrix FLOPs).
"""
from __future__ import annotations

CONVENTIONS = ("exact", "6nd", "palm", "hardware", "megatron", "torchtitan", "verl")

DESCRIPTIONS = {
    "exact": "exact matrix count, causal attention over s(s+1)/2 pairs",
    "6nd": "6·N per token (N: parameters a token uses)",
    "palm": "PaLM model FLOPs: 6·N + 12·L·H·Q·T per token",
    "hardware": "exact matrix count plus recomputed forward work",
    "megatron": "Megatron-LM num_floating_point_operations",
    "torchtitan": "torchtitan's FLOPs per token, formerly get_num_flop_per_token (6·N without the input "
                  "embedding + 12·L·H·Q·T)",
    "verl": "verl FlopsCounter (both vocabulary matrices, attention over s²/2 pairs)",
}

REFERENCES = {
    "exact": ("matrix-by-matrix FLOPs: 2·m·k·n per product, backward twice the forward",),
    "6nd": ("training compute C ≈ 6ND: Kaplan et al. 2020, 'Scaling Laws for Neural Language Models'",),
    "palm": ("Chowdhery et al. 2022, 'PaLM', appendix B (model FLOPs utilization)",),
    "hardware": ("Chowdhery et al. 2022, 'PaLM', appendix B (hardware FLOPs include rematerialization)",
                 "hardware FLOPs of selective activation recomputation: Korthikanti et al. 2022, 'Reducing "
                 "Activation Recomputation in Large Transformer Models'"),
    "megatron": ("NVIDIA/Megatron-LM megatron/training/training.py num_floating_point_operations "
                 "(commit d98e8a64ddf34856e74b24714e3bedb2f5a39553)",
                 "Narayanan et al. 2021, appendix (FLOPs of a GPT model)"),
    "torchtitan": ("pytorch/torchtitan torchtitan/models/utils.py get_dense_model_nparams_and_flops, "
                   "get_moe_model_nparams_and_flops (commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a)",),
    "verl": ("volcengine/verl verl/utils/flops_counter.py FlopsCounter "
             "(commit b178a3cd56f58b2d502255daba591e92833930a7)",),
}


def _moe(m):
    return m is not None and m.get("moe", False)


def head_widths(a, m):
    """(d_qk, d_v): query/key and value width per head (d_v = d_h unless MLA says otherwise)."""
    dh = a["dh"]
    if m is not None and m.get("mla") and m.get("dv") is not None:
        return dh, m["dv"]
    if m is not None and m.get("mla"):
        return dh, dh - m["dr"]
    return dh, dh


def attention_pairs(s, causal=True):
    """Query–key pairs of one sequence of s tokens: s(s+1)/2 under a causal mask, else s²."""
    return s * (s + 1) / 2 if causal else s * s


def attention_core(nq, d_qk, d_v, pairs):
    """Forward FLOPs of QKᵀ and AV of one layer over ``pairs`` query–key pairs:
    2·n_q·d_qk per pair for the scores and 2·n_q·d_v for the weighted values."""
    return 2 * nq * (d_qk + d_v) * pairs


def attention_forward_per_token(a, m, s, causal=None):
    """Forward attention-core FLOPs per token of a sequence of s tokens, all layers:
    L · 2·n_q·(d_qk + d_v) · pairs(s)/s — 4·L·n_q·d_h·(s+1)/2 causal without MLA.

    ``causal`` defaults to ``a.get("causal", True)``.  Sliding-window (local) layers score at
    most their window of keys per query: with ``a["window"]`` set (and ``causal`` not forced)
    the pairs are :func:`plugins.model.attention.attention_pairs` summed over global and local layers."""
    d_qk, d_v = head_widths(a, m)
    if causal is None and a.get("window") is not None:
        from plugins.model.attention import attention_pairs as layer_pairs
        return attention_core(a["nq"], d_qk, d_v, layer_pairs(a, s) / s)
    if causal is None:
        causal = a.get("causal", True)
    return a["L"] * attention_core(a["nq"], d_qk, d_v, attention_pairs(s, causal) / s)


def _attention_matrices(a, m):
    from plugins.model.attention import attention_params
    return attention_params(a, m if m is not None else {"mla": False}, matrices_only=True)


def _zero(x):
    """True for a literal zero (an int or sympy Integer), False for any symbol."""
    return isinstance(x, int) and x == 0 or getattr(x, "is_zero", False) is True and getattr(x, "is_Number", False)


def _layers(a, m):
    """(dense-FFN layers, MoE layers)."""
    if not _moe(m):
        return a["L"], 0
    return m["Ld"], a["L"] - m["Ld"]


def _ffn(a):
    return a["mats"] * a["h"] * a["f"] if a["f"] is not None else 0


def block_matrix_params(a, m):
    """Matrix weights a token multiplies in all blocks (no norms, no embedding, no LM head):
    attention projections, dense FFN or router + k routed + k_s shared experts."""
    Ld, Lm = _layers(a, m)
    attn = _attention_matrices(a, m)
    total = Ld * (attn + _ffn(a)) if not _zero(Ld) else 0
    if not _zero(Lm):
        expert = a["mats"] * a["h"] * m["fe"]
        total = total + Lm * (attn + a["h"] * m["E"] + (m["k"] + m["ks"]) * expert)
    return total


def lm_head_forward_per_token(a):
    """Forward FLOPs of the LM head per token through it: 2·h·V."""
    return 2 * a["h"] * a["V"]


def matrix_forward_per_token(a, m=None):
    """Forward matrix FLOPs per token: 2 × (the blocks' active matrices + the LM head V·h);
    no embedding lookup, no attention over the context (the model's ``flops_per_token_forward``)."""
    return 2 * block_matrix_params(a, m) + lm_head_forward_per_token(a)


def expert_training_per_token(a, m):
    """Training FLOPs of the routed and shared expert matmuls per token:
    3 passes × 2 × ffn_matrices·h·f_e·(k + k_s) × MoE layers (18·n_L·h·f_e·(k + k_s) for SwiGLU)."""
    _, Lm = _layers(a, m)
    return 2 * a["mats"] * 3 * Lm * a["h"] * m["fe"] * (m["k"] + m["ks"])


def sequence_forward(a, s, s_label, m=None, causal=None):
    """Forward FLOPs of one sequence of s tokens with s_label tokens through the LM head.

    :return: (forward, attention_forward) in FLOP — attention the QKᵀ/AV part of forward."""
    attn = s * attention_forward_per_token(a, m, s, causal)
    return s * 2 * block_matrix_params(a, m) + lm_head_forward_per_token(a) * s_label + attn, attn


def prefill(a, new, cached, logits=1, m=None):
    """Forward FLOPs of a prefill of ``new`` tokens after a reused prefix of ``cached``:
    2·new·(block matrices) + L·2·n_q·(d_qk + d_v)·Σ_{j=K+1}^{K+P} j + 2·h·V·logits — every
    new token attends to the whole prefix and to the new tokens before it."""
    d_qk, d_v = head_widths(a, m)
    # attention_core over new·(2K + new + 1)/2 pairs, written without the division (exact on ints)
    attn = a["nq"] * (d_qk + d_v) * new * (2 * cached + new + 1)
    return 2 * new * block_matrix_params(a, m) + a["L"] * attn + lm_head_forward_per_token(a) * logits


def decode(a, P, G, m=None):
    """FLOPs of the G − 1 decode steps of one response after a P-token prefill: each step
    feeds one token through the block matrices and the LM head, and the token at position
    P + j attends to P + j + 1 keys (j = 0 … G − 2): (G − 1)·P + G(G − 1)/2 pairs."""
    d_qk, d_v = head_widths(a, m)
    pairs = (G - 1) * P + G * (G - 1) / 2
    return ((G - 1) * (2 * block_matrix_params(a, m) + lm_head_forward_per_token(a))
            + a["L"] * attention_core(a["nq"], d_qk, d_v, pairs))


def recompute_forward_per_token(a, m, s, mode):
    """Forward FLOPs per token that activation recomputation repeats: ``full`` the blocks'
    forward (matrices and attention, not the LM head), ``selective`` the attention core."""
    attn = attention_forward_per_token(a, m, s)
    if mode == "full":
        return 2 * block_matrix_params(a, m) + attn
    if mode == "selective":
        return attn
    return 0


def per_token(convention, a, m, s, *, active_params, embedding_params, label_fraction=1, recompute="none"):
    """Training FLOPs per token (forward + backward) of a model at sequence length s under
    ``convention`` (one of :data:`CONVENTIONS`; see the module docstring).

    :param active_params: parameters one token uses (the model's ``active_params``).
    :param embedding_params: the input embedding V·h (``embedding_params``).
    :param label_fraction: share of tokens through the LM head (``exact``/``hardware`` only).
    :param recompute: ``none`` / ``selective`` / ``full`` (``hardware`` only).
    """
    L, h, V, nq = a["L"], a["h"], a["V"], a["nq"]
    d_qk, d_v = head_widths(a, m)
    if convention in ("exact", "hardware"):
        fwd = (2 * block_matrix_params(a, m) + lm_head_forward_per_token(a) * label_fraction
               + attention_forward_per_token(a, m, s))
        extra = recompute_forward_per_token(a, m, s, recompute) if convention == "hardware" else 0
        return 3 * fwd + extra
    if convention == "6nd":
        return 6 * active_params
    if convention == "palm":
        return 6 * active_params + 6 * L * nq * (d_qk + d_v) * s
    if convention == "torchtitan":
        n = active_params if a.get("tied_embeddings") else active_params - embedding_params
        return 6 * n + 6 * L * nq * (d_qk + d_v) * s
    if convention == "verl":
        return 6 * (block_matrix_params(a, m) + 2 * V * h) + 3 * L * nq * (d_qk + d_v) * s
    if convention == "megatron":
        return _megatron(a, m, s)
    raise ValueError(f"unknown FLOP convention {convention!r}")


def _megatron(a, m, s):
    L, h, V, nq = a["L"], a["h"], a["V"], a["nq"]
    d_qk, d_v = head_widths(a, m)
    mtp = m["mtp"] if m is not None and m.get("mtp") is not None else 0
    attn = _attention_matrices(a, m)
    if m is not None and m.get("mla"):
        attn = attn + (m["rq"] if m["rq"] is not None else 0) + m["rkv"]
    Ld, Lm = _layers(a, m)
    if _moe(m):
        mlp = Ld * a["mats"] * h * a["f"] if not _zero(Ld) else 0
        mlp = mlp + (Lm + mtp) * a["mats"] * h * m["fe"] * (m["k"] + m["ks"])
    else:
        mlp = (L + mtp) * _ffn(a)
    per = mlp + (L + mtp) * attn + mtp * (3 * h + 2 * h * h) + h * V * (1 + mtp)
    return 6 * per + 3 * (L + mtp) * nq * (d_qk + d_v) * s


def utilization(flops_per_token, tokens_per_s, gpus, peak):
    """Achieved FLOP/s over the peak of all GPUs: F_token · tokens/s / (gpus · peak)."""
    return flops_per_token * tokens_per_s / (gpus * peak)

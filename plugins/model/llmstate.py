"""Shared formulas of the agent and multimodal plugins: KV-cache bytes per token and the
matrix FLOPs of a prefill that reuses a cached prefix.  Not a plugin (registers no hooks).

Book ch. 3 §3.2.1 (P_i = I_i − K_i), ch. 2 (KV per token), docs of ``use compute`` for the
FLOP convention (a multiply-add is 2 FLOPs; causal attention counts each query–key pair once).
"""
from __future__ import annotations

from plugins.model.decoder import architecture, moe_architecture
from plugins.model.flops import block_matrix_params, prefill


def kv_bytes_per_token(view, element_bytes):
    """KV-cache bytes one token occupies when written: n_L · ``kv_cache_width`` · bytes per element.

    ``kv_cache_width`` is the model's derived field (decoder plugin): 2·n_kv·d_h elements per
    layer for grouped-query attention (K and V), r_kv + d_r for DeepSeek's latent attention.
    Every layer caches the new token; a sliding-window layer drops it again once it falls out
    of the window, so the bytes of a whole context are :func:`kv_bytes_per_sequence`.

    :param view: a ``DeclView`` of a ``model`` declaration.
    :param element_bytes: sympy expression in B (2 B for BF16).
    :return: sympy expression in B/token — Qwen3-8B and Qwen3-VL-4B in BF16: 147,456 B = 144 KiB.
    """
    return view.q("layers") * view.q("kv_cache_width") * element_bytes


def kv_widths(view):
    """(global width, local width, window): cached elements per token summed over the
    full-attention and the sliding-window layers, and the window (``None`` without one)."""
    import sympy as sp

    if not view.has("attention_window"):
        return None, sp.Integer(0), None
    return view.q("kv_cache_width_global"), view.q("kv_cache_width_local"), view.q("attention_window")


def kv_tokens(view, context):
    """The KV a sequence of ``context`` tokens caches, in tokens at the full width of every layer.

        C_eff = (W_g·C + W_l·min(C, w)) / (W_g + W_l)

    W_g / W_l are ``kv_cache_width_global`` / ``_local`` (the width summed over the full-attention
    and the sliding-window layers) and w the ``attention_window``: a local layer keeps at most the
    last w tokens.  Exactly C for a model without sliding-window layers.  Bytes of the sequence:
    :func:`kv_bytes_per_token` × C_eff — a per-GPU share of the per-token bytes (tensor or
    pipeline parallel) times C_eff is that GPU's share of the sequence.

    :param context: tokens in the sequence (a plain number or dimensionless sympy expression).
    """
    import sympy as sp

    g, l, w = kv_widths(view)
    if w is None or l == 0:
        return context
    return (g * context + l * sp.Min(context, w)) / (g + l)


def kv_tokens_summed(view, first, last):
    """Σ_{C = first}^{last} :func:`kv_tokens` (C): the KV read over consecutive decode steps.

    Without sliding-window layers (last − first + 1)(first + last)/2; a local layer adds
    Σ min(C, w) = t(t + 1)/2 − first(first − 1)/2 + (last − t)·w with t = min(max(w, first − 1), last).
    """
    import sympy as sp

    n = last - first + 1
    full = n * (first + last) / 2
    g, l, w = kv_widths(view)
    if w is None or l == 0:
        return full
    t = sp.Min(sp.Max(w, first - 1), last)
    capped = t * (t + 1) / 2 - first * (first - 1) / 2 + (last - t) * w
    return (g * full + l * capped) / (g + l)


def kv_bytes_per_sequence(view, element_bytes, context):
    """KV-cache bytes of one sequence of ``context`` tokens: bytes · (W_g·C + W_l·min(C, w)),
    every full-attention layer holding the whole context and every sliding-window layer at most
    its window (:func:`kv_tokens`)."""
    return kv_bytes_per_token(view, element_bytes) * kv_tokens(view, context)


def matmul_params(view):
    """Weights a token multiplies in the transformer blocks: n_L·(2·h·n_q·d_h + 2·h·n_kv·d_h +
    ffn_matrices·h·f) for a dense model; the router and the active experts on MoE layers, MLA's
    projections (norms and embeddings excluded; LM head counted separately):
    :func:`plugins.model.flops.block_matrix_params`."""
    return block_matrix_params(architecture(view), moe_architecture(view))


def prefill_flops(view, new, cached, logits=1):
    """Matrix FLOPs of a prefill of ``new`` tokens after a reused prefix of ``cached`` tokens.

        F = 2·P·N_mm + 4·n_L·n_q·d_h·Σ_{j=K+1}^{K+P} j + 2·h·V·logits
          = 2·P·N_mm + 2·n_L·n_q·d_h·P·(2K + P + 1) + 2·h·V·logits

    Projections and the FFN see only the P = I − K new tokens; every new token still attends
    to the whole prefix (book §3.2.1).  ``logits`` positions go through the LM head (1: the
    position that emits the first output token).  Arguments are plain numbers of tokens
    (dimensionless sympy expressions); the result is in FLOP (:func:`plugins.model.flops.prefill`;
    with MLA the scores use d_qk and the values d_v per head).
    """
    return prefill(architecture(view), new, cached, logits, moe_architecture(view))

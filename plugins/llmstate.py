"""Shared formulas of the agent and multimodal plugins: KV-cache bytes per token and the
matrix FLOPs of a prefill that reuses a cached prefix.  Not a plugin (registers no hooks).

Book ch. 3 §3.2.1 (P_i = I_i − K_i), ch. 2 (KV per token), docs of ``use compute`` for the
FLOP convention (a multiply-add is 2 FLOPs; causal attention counts each query–key pair once).
"""
from __future__ import annotations

from plugins.decoder import architecture, moe_architecture
from plugins.flops import block_matrix_params, prefill


def kv_bytes_per_token(view, element_bytes):
    """KV-cache bytes one token occupies: n_L · ``kv_cache_width`` · bytes per element.

    ``kv_cache_width`` is the model's derived field (decoder plugin): 2·n_kv·d_h elements per
    layer for grouped-query attention (K and V), r_kv + d_r for DeepSeek's latent attention.

    :param view: a ``DeclView`` of a ``model`` declaration.
    :param element_bytes: sympy expression in B (2 B for BF16).
    :return: sympy expression in B/token — Qwen3-8B and Qwen3-VL-4B in BF16: 147,456 B = 144 KiB.
    """
    return view.q("layers") * view.q("kv_cache_width") * element_bytes


def matmul_params(view):
    """Weights a token multiplies in the transformer blocks: n_L·(2·h·n_q·d_h + 2·h·n_kv·d_h +
    ffn_matrices·h·f) for a dense model; the router and the active experts on MoE layers, MLA's
    projections (norms and embeddings excluded; LM head counted separately):
    :func:`plugins.flops.block_matrix_params`."""
    return block_matrix_params(architecture(view), moe_architecture(view))


def prefill_flops(view, new, cached, logits=1):
    """Matrix FLOPs of a prefill of ``new`` tokens after a reused prefix of ``cached`` tokens.

        F = 2·P·N_mm + 4·n_L·n_q·d_h·Σ_{j=K+1}^{K+P} j + 2·h·V·logits
          = 2·P·N_mm + 2·n_L·n_q·d_h·P·(2K + P + 1) + 2·h·V·logits

    Projections and the FFN see only the P = I − K new tokens; every new token still attends
    to the whole prefix (book §3.2.1).  ``logits`` positions go through the LM head (1: the
    position that emits the first output token).  Arguments are plain numbers of tokens
    (dimensionless sympy expressions); the result is in FLOP (:func:`plugins.flops.prefill`;
    with MLA the scores use d_qk and the values d_v per head).
    """
    return prefill(architecture(view), new, cached, logits, moe_architecture(view))

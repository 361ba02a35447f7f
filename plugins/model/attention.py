"""Counts of a decoder's attention that both its parameter totals (:mod:`plugins.model.decoder`)
and its FLOP formulas (:mod:`plugins.model.flops`) read: the (query, key) pairs one sequence
scores, and the parameters of one block's attention.  Functions of the architecture dicts
only (``a`` of :func:`plugins.model.decoder.architecture`, ``m`` of
:func:`plugins.model.decoder.moe_architecture`); they import nothing else from plugins.
"""
from __future__ import annotations


def attention_pairs(a, s):
    """(query, key) pairs one sequence of ``s`` tokens scores, summed over the layers.

    Causal full layer s(s+1)/2, bidirectional s²; a sliding-window layer of window w (a query
    sees itself and the w − 1 tokens before it) min(s, w)·(2s − min(s, w) + 1)/2 causal, and
    s·min(s, w) bidirectional (as an approximation at the edges).  Sinks and logit soft-capping
    change no pair.

    :param a: :func:`plugins.model.decoder.architecture`; :param s: sequence length (a number or sympy expression).
    """
    import sympy as sp

    L, local, w = a["L"], a["local"], a["window"]
    full = s * s if a["bidirectional"] else s * (s + 1) / 2
    if w is None:
        return L * full
    m = sp.Min(s, w)
    win = s * m if a["bidirectional"] else m * (2 * s - m + 1) / 2
    return (L - local) * full + local * win


def attention_params(a, m, matrices_only=False):
    """Parameters of one block's attention (projections, q/k norms, biases, MLA norms).

    :param a: :func:`plugins.model.decoder.architecture`; :param m:
        :func:`plugins.model.decoder.moe_architecture`.
    :param matrices_only: count the projection matrices only (what a token multiplies by).
    """
    h, nq, nkv, dh = a["h"], a["nq"], a["nkv"], a["dh"]
    if m["mla"]:
        rkv, dr = m["rkv"], m["dr"]
        dv = m["dv"] if m["dv"] is not None else dh - dr
        norms = 0 if matrices_only else (rkv if m["rq"] is None else m["rq"] + rkv)
        q = h * nq * dh if m["rq"] is None else h * m["rq"] + m["rq"] * nq * dh
        kv = h * (rkv + dr) + rkv * nq * (dh - dr + dv)
        return q + kv + nq * dv * h + norms
    p = 2 * h * nq * dh + 2 * h * nkv * dh
    if matrices_only:
        return p
    if a["qk_norm"]:
        p += 2 * dh * a.get("nf", 1)
    if a["qkv_bias"]:
        p += (nq + 2 * nkv) * dh
    if a.get("out_bias"):
        p += h
    return p

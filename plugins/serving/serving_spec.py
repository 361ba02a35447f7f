"""Speculative decoding in the engine step model (``use serving_step { speculative = … }``).

A draft — a separate small model (``"draft"``) or multi-token-prediction / EAGLE-style heads of
the target (``"mtp"``, declared as a model of the head's layers with the target's hidden size and
vocabulary) — proposes k tokens per sequence, one decode step of the draft each; the target then
verifies the k + 1 positions (the k drafted tokens and the one after them) of every sequence in
one step, and keeps the accepted prefix plus one token of its own.

* **Expected tokens per step** with each drafted token accepted with probability α, independently
  of the others: E = Σ_{i=0..k} α^i = (1 − α^(k+1)) / (1 − α) (Leviathan, Kalman, Matias 2023,
  "Fast Inference from Transformers via Speculative Decoding", ICML, eq. 1).  With a per-position
  profile p_1 … p_k (p_i: probability that position i is accepted when every position before it
  was): E = 1 + Σ_{i=1..k} Π_{j≤i} p_j.
* **Step time** = k × (a decode step of the draft at the same batch and context, on the same
  device and tensor-parallel degree) + one step of the target verifying k + 1 tokens per sequence.
  The verification is priced as chunked prefill prices a chunk after a cached prefix
  (:func:`plugins.serving.serving_step_core.step_parts` with ``prefill_seqs`` = batch chunks of
  k + 1 tokens, each after ``context`` cached tokens): (k + 1)·B tokens through the dense matrices
  and the experts against one weight read, attention of k + 1 queries over each sequence's
  context and one read of it — except that every one of the (k + 1)·B positions emits logits
  (the LM head term is priced for all of them).
* TPOT = step time / E; decode tokens/s per GPU = batch · E / step time / tp.  The draft's own
  KV (bytes per token of the draft model) is read by its decode steps.

Units: times in s, α and p_i fractions, E tokens per sequence and step (a pure number).
"""
from __future__ import annotations

from plugins.serving.serving_step_core import lm_head_term, step_parts, step_time

MODES = ("none", "draft", "mtp")


def expected_tokens(alpha, k: int):
    """E = Σ_{i=0..k} α^i: tokens a sequence gains per verification step when each of the k
    drafted tokens is accepted with probability α independently (Leviathan et al. 2023, eq. 1;
    the closed form (1 − α^(k+1))/(1 − α) for α < 1, k + 1 at α = 1).  α a number or sympy
    expression; k a whole number ≥ 0."""
    total = 0
    for i in range(int(k) + 1):
        total = total + alpha ** i
    return total


def expected_tokens_profile(profile):
    """E = 1 + Σ_{i=1..k} Π_{j≤i} p_j for a per-position acceptance profile p_1 … p_k (p_i the
    probability that drafted position i is accepted given that positions 1 … i−1 were)."""
    total, run = 1, 1
    for p in profile:
        run = run * p
        total = total + run
    return total


def verify_parts(c, batch, k: int, context, o):
    """The terms (as :func:`step_parts`) of one target step verifying k + 1 tokens for each of
    ``batch`` sequences that have ``context`` cached tokens each: chunks of k + 1 tokens after a
    cached prefix, every position emitting logits."""
    n = int(k) + 1
    parts = step_parts(c, batch * n, 0, 0, o, prefill_prefix=context, prefill_seqs=batch)
    parts["lm_head"] = lm_head_term(c, batch * n, o)
    return parts


def verify_time(c, batch, k: int, context, o):
    """Seconds of the verification step (:func:`verify_parts`, its terms added in order)."""
    total = 0
    for t, _, _ in verify_parts(c, batch, k, context, o).values():
        total = total + t
    return total


def draft_time(c_draft, batch, k: int, context, o):
    """Seconds of the k draft decode steps: k × one decode step of the draft model (constants
    ``c_draft``) for ``batch`` sequences reading ``context`` cached tokens each of the draft's KV."""
    return int(k) * step_time(c_draft, 0, batch, batch * context, o)


def speculative_step(c, c_draft, batch, k: int, context, o):
    """(draft time, verify time) in s of one speculative step."""
    return draft_time(c_draft, batch, k, context, o), verify_time(c, batch, k, context, o)

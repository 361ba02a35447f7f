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

import math

from dsl.plugin import Param

from plugins.serving.serving_sim_base import affine_contexts, affine_fit
from plugins.serving.serving_step_core import lm_head_term, step_parts, step_time

MODES = ("none", "draft", "mtp")
SPEC_NAMES = ("draft_model", "spec_tokens", "acceptance", "acceptance_profile")
K_MAX = 16                 # drafted tokens per step at most

_MODE = Param("speculative", kind="choice", default='"none"', choices=MODES,
              doc="speculative decoding: none, a separate draft model, or MTP / EAGLE-style heads of the target")
_DRAFT = Param("draft_model", kind="ref", ref_kind="model", optional=True,
               doc="the draft (\"draft\") or the heads as a model of their layers (\"mtp\": the target's "
                   "hidden size and vocabulary); required with speculation")
_ACCEPTANCE = Param("acceptance", "", "70 %", "probability α that each drafted token is accepted (independently "
                    "of the others)", min=0, max=1)
_PROFILE = Param("acceptance_profile", "", kind="list", optional=True, min_items=1, min=0, max=1,
                 doc="per-position acceptance p_1 … p_k (p_i given positions before i were accepted), "
                     "instead of `acceptance`")

# the block parameters of speculation, shared by `use serving_step` and `use batching`
SPEC_PARAMS = (
    _MODE, _DRAFT,
    Param("spec_tokens", "", "3", "tokens k the draft proposes per step (the target verifies k + 1)",
          kind="int", min=1, max=K_MAX),
    _ACCEPTANCE, _PROFILE,
)

# the same for `use serving_search`, whose `spec_tokens` is a list of k to search (0: off)
SEARCH_SPEC_PARAMS = (
    _MODE, _DRAFT,
    Param("spec_tokens", "", "[0, 2, 4]", "tokens k the draft proposes per step, searched (0: no speculation; "
          "the target verifies k + 1)", kind="list", min=0, max=K_MAX, min_items=1),
    _ACCEPTANCE, _PROFILE,
)


def spec_settings(ctx, b):
    """The checked speculation of block ``b`` (a ``BlockView`` with :data:`SPEC_PARAMS`):
    None when ``speculative = "none"`` (warning ``unused`` at each speculation parameter given),
    else (mode, draft model view, k, E as a sympy expression, how E was found).  The checks are
    :func:`spec_choices`'."""
    k = int(b.value("spec_tokens"))
    got = spec_choices(ctx, b, [k])
    if got is None:
        return None
    mode, draft, per = got
    return (mode, draft, k) + per[k]


def spec_choices(ctx, b, ks):
    """The checked speculation of block ``b`` for each number of drafted tokens k of ``ks``
    (whole numbers 0 … :data:`K_MAX`; 0 is no speculation, E = 1): None when ``speculative =
    "none"`` (warning ``unused`` at each speculation parameter given), else (mode, draft model
    view, {k: (E as a sympy expression, how E was found)}).  Located errors: no draft model, a
    draft of another vocabulary, MTP heads of another hidden size or vocabulary, both
    `acceptance` and `acceptance_profile`, a profile of other than max(ks) probabilities (a
    smaller k reads its first k)."""
    mode = b.value("speculative")
    if mode == "none":
        for name in SPEC_NAMES:
            if b.given(name):
                b.warn_at(name, f"'{name}' has no effect without speculative decoding",
                          'add `speculative = "draft"` (or "mtp"), or remove it', code="unused")
        return None
    draft = b.ref("draft_model")
    if draft is None:
        b.error_at("speculative", f'`speculative = "{mode}"` needs the model that drafts',
                   "add `draft_model = <a small model>` (for MTP / EAGLE heads: a model of the heads' "
                   "layers, e.g. `model head extends qwen3_8b { layers = 1 }`)", code="missing-parameter")
    model = ctx.ref("model")
    if mode == "draft":
        dv, tv = draft.value("vocab"), model.value("vocab")
        if dv is not None and tv is not None and float(dv) != float(tv):
            b.error_at("draft_model", f"a draft model proposes token ids the target verifies, so it shares the "
                       f"target's tokenizer, but '{draft.name}' has vocab = {dv:g} and '{model.name}' {tv:g}",
                       "draft with a model of the target's family (the same vocabulary)")
    if mode == "mtp":
        for f in ("hidden", "vocab"):
            dv, tv = draft.value(f), model.value(f)
            if dv is not None and tv is not None and float(dv) != float(tv):
                b.error_at("draft_model", f"MTP heads read the target's hidden states and share its vocabulary, "
                           f"but '{draft.name}' has {f} = {dv:g} and '{model.name}' {tv:g}",
                           f"declare the heads as `model head extends {model.name} {{ layers = 1 }}`, or use "
                           '`speculative = "draft"` for a separate model')
    kmax = max(int(k) for k in ks)
    if b.given("acceptance_profile"):
        if b.given("acceptance"):
            b.error_at("acceptance_profile", "both `acceptance` and `acceptance_profile` are given",
                       "keep one: a single rate α, or one probability per drafted position")
        profile = b.q_list("acceptance_profile")
        if len(profile) != kmax:
            many = len(ks) > 1
            b.error_at("acceptance_profile", f"{len(profile)} acceptance probabilities for "
                       f"{'the largest ' if many else ''}spec_tokens = {kmax}",
                       "give one probability per drafted position (p_1 … p_k"
                       + (f", up to the largest k = {kmax}: a smaller k reads the first k)" if many else ")")
                       + ", or change `spec_tokens`")
        return mode, draft, {int(k): (expected_tokens_profile(profile[:int(k)]),
                                      f"1 + Σ Π p_j over the {int(k)} positions of the profile") for k in ks}
    alpha = b.q("acceptance")
    return mode, draft, {int(k): (expected_tokens(alpha, int(k)), f"(1 − α^{int(k) + 1}) / (1 − α) with α = "
                                  "acceptance (Leviathan et al. 2023, eq. 1)") for k in ks}


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


def decode_time(c, c_draft, n, k: int, context, o):
    """Seconds of the speculative decode part of an iteration: :func:`draft_time` plus
    :func:`verify_time` for ``n`` sequences reading ``context`` cached tokens in all (the mean
    ``context / n`` per sequence); numbers or numpy arrays (n > 0)."""
    per = context / n
    return draft_time(c_draft, n, k, per, o) + verify_time(c, n, k, per, o)


class SimSpec:
    """Speculation in the batching simulator (:func:`plugins.serving.serving_sim_core.simulate_reference`):
    ``k`` drafted tokens, ``E`` ≥ 1 the expected tokens a decoding sequence gains per step, and
    ``decode(n, context)`` the seconds of the speculative decode part of an iteration — the k
    draft steps and the verification of k + 1 tokens for ``n`` sequences reading ``context``
    cached tokens in all.  :meth:`for_step` builds it from the engine's step constants."""

    def __init__(self, k: int, E: float, decode):
        self.k, self.E, self.decode = int(k), float(E), decode

    def tokens(self, steps: int, left: int) -> int:
        """Tokens a sequence gains at its decode step number ``steps`` + 1 (0-based count of the
        steps it had), with ``left`` output tokens to go: ⌊(s+1)·E⌋ − ⌊s·E⌋ (at least 1, the mean
        E over many steps), at most ``left`` — so a sequence with G − 1 tokens after its first
        finishes after ⌈(G − 1)/E⌉ decode steps."""
        e = math.floor((steps + 1) * self.E + 1e-9) - math.floor(steps * self.E + 1e-9)
        return max(1, min(e, left))

    def gains(self, steps: int) -> list[int]:
        """:meth:`tokens` of steps 0 … ``steps`` − 1 with no limit on the tokens left (each ≥ 1):
        a simulator's table, read as ``min(gains[s], left)``."""
        return [self.tokens(s, 1 << 62) for s in range(int(steps))]

    @classmethod
    def for_step(cls, c, c_draft, k: int, E: float, o, top: int | None = None):
        """Priced by :func:`decode_time` (the draft's steps and the verification at the context
        per sequence).  ``top`` (tokens, the KV pool): for each n the cost is checked to be affine
        in the context over [0, top] — at five contexts, as the fast path's
        :class:`plugins.serving.serving_sim_core.Affine` checks a step — and then priced as
        α + β·context (equal to the direct evaluation to rounding); otherwise, and without
        ``top``, every call is priced directly."""
        def direct(n, context):
            return float(decode_time(c, c_draft, n, k, context, o))
        if top is None:
            return cls(k, E, direct)
        xs = affine_contexts(max(int(top), 16))
        memo: dict = {}

        def decode(n, context):
            ab = memo.get(n, False)
            if ab is False:
                ab = memo[n] = affine_fit(xs, [direct(n, x) for x in xs])
            return ab[0] + ab[1] * context if ab is not None else direct(n, context)
        return cls(k, E, decode)

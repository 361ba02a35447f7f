"""Synthetic prompts with shared prefixes for ``use batching``'s own arrivals (Poisson or
Gamma): system prompts shared by many requests and conversations of several turns, given as
block ids in the representation of a trace's ``hash_ids`` column, so that the prefix cache
(:mod:`plugins.serving.serving_prefix_cache`) reads them unchanged.

**The workload.**  The n synthetic requests, in arrival order, are cut into conversations of
``turns`` consecutive requests (the last one may be shorter).  Request i draws its input and
output lengths U_i, G_i as before (fixed ``input`` / ``output``, or sampled from a trace); U_i
is the *new user input* of its turn.  A conversation starts with one of ``system_prompts``
system prompts of ``system_prompt_tokens`` tokens each (L) with probability
``system_prompt_share``, the prompt chosen uniformly; otherwise with none (L = 0).  Its turn k
(requests r_0, r_1, …) has the prompt

    P_{r_k} = L + Σ_{m<k} (U_{r_m} + G_{r_m}) + U_{r_k}

— the previous prompt, the previous answer and the new input, as a chat client sends the whole
history.  The turns arrive as the arrival process gives them (the simulation does not wait for
an answer before the next turn arrives: an open-loop approximation of a conversation).

**Block ids.**  A conversation's full token sequence (system prompt, U_0, G_0, U_1, G_1, …) is
cut into blocks of ``hash_block`` tokens.  A block inside the system prompt gets the id of
(that system prompt, its index), shared by every conversation that starts with it; any other
block gets the id of (the conversation, its index).  Turn k's ids are those of its ⌊P/H⌋ full
blocks, then a fresh id for its partial last block if any (its content ends with the turn's
own input, which no other request has).  Ids count up from 0 in the order met, so the same
seed gives the same ids.  With ``hash_block`` equal to the engine's block, every full engine
block of a prompt has its own id, and a hit is exactly the blocks whose tokens are equal.

``with_output``: also the ids of the blocks the answer fills (⌊(P + G)/H⌋ full blocks of the
sequence), for a cache that keys generated tokens too.
"""
from __future__ import annotations

import numpy as np

PROMPT_PARAMS = ("system_prompts", "system_prompt_tokens", "system_prompt_share", "turns")


def conversations(n: int, turns: int) -> list[range]:
    """The requests (indices in arrival order) of each conversation: consecutive runs of ``turns``."""
    return [range(s, min(s + turns, n)) for s in range(0, n, turns)]


def conversation_tokens(U, G, turns: int, start=0):
    """Per request (numpy array, arrival order), its conversation's tokens up to the end of
    its answer: ``start`` + Σ_{m≤k} (U_{r_m} + G_{r_m}) for turn k of a conversation — its
    prompt P (module docstring) less the system prompt, plus its output G.  ``U``, ``G``: new
    input and output tokens of each request (numpy arrays; the sums are in their dtype);
    ``turns``: requests per conversation (:func:`conversations`); ``start``: tokens added to
    each (e.g. a system prompt's)."""
    done = np.cumsum(U + G) - (U + G)                  # tokens of the requests before each
    first = (np.arange(len(U)) // turns) * turns       # each conversation's first request
    return start + done - done[first] + U + G


def synthetic_prompts(U, G, *, turns: int = 1, system_prompts: int = 0, system_prompt_tokens: int = 0,
                      system_prompt_share: float = 1.0, hash_block: int = 16, seed: int = 0,
                      with_output: bool = False) -> tuple[np.ndarray, list[list[int]]]:
    """(P, hash_ids): each request's prompt tokens and its block ids (module docstring).

    ``U``, ``G``: new input and output tokens of each request in arrival order; ``turns`` ≥ 1;
    ``system_prompts`` distinct system prompts (0: none) of ``system_prompt_tokens`` tokens,
    started by a share ``system_prompt_share`` ∈ [0, 1] of the conversations; ids of blocks of
    ``hash_block`` tokens; ``seed`` as the block's.  Deterministic in its arguments."""
    U = [int(u) for u in U]
    G = [int(g) for g in G]
    n, H = len(U), int(hash_block)
    convs = conversations(n, int(turns))
    rng = np.random.default_rng([int(seed), 2])
    has = rng.random(len(convs)) < system_prompt_share
    which = rng.integers(0, max(int(system_prompts), 1), len(convs))
    ids: dict[tuple, int] = {}

    def intern(key) -> int:
        return ids.setdefault(key, len(ids))

    P = np.zeros(n, dtype=np.int64)
    out: list[list[int]] = [[] for _ in range(n)]
    for c, reqs in enumerate(convs):
        L = int(system_prompt_tokens) if system_prompts and has[c] else 0
        sys_blocks = L // H
        conv: list[int] = []             # ids of the conversation's full blocks so far

        def upto(tokens: int) -> list[int]:
            while len(conv) < tokens // H:
                j = len(conv)
                conv.append(intern(("s", int(which[c]), j) if j < sys_blocks else ("c", c, j)))
            return conv[:tokens // H]

        length = L
        for r in reqs:
            length += U[r]
            P[r] = length
            full = upto(length)
            if with_output:
                out[r] = list(upto(length + G[r]))
            else:
                out[r] = list(full)
            if length % H and not with_output:
                out[r].append(intern(("p", r)))
            length += G[r]
    return P, out

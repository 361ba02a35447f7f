"""Speculative decoding and prefix caching in the serving search
(:mod:`plugins.serving.serving_search_core`): what the screen and the simulations of a
configuration read when the search lists drafted tokens k (``spec_tokens``) or caches prefixes.

**Speculation** (:mod:`plugins.serving.serving_spec`: the draft, the verification, E).  A
configuration with k > 0 loads the draft beside the target and speculates on every decode step:

* *Memory*: the draft's weights (split over the same tp; for ``"mtp"`` heads the heads' layers
  alone — their embedding and LM head are the target's, as vLLM shares them with EAGLE / MTP
  heads) come off the KV budget, and every KV block holds the draft's KV beside the target's
  (vLLM allocates one block table for both), so the pool holds budget / (target + draft KV bytes
  per token) tokens.
* *Step*: an iteration prefills its chunks alone (the engine's step) and adds the speculative
  decode part, the k draft steps and the verification of k + 1 tokens per sequence
  (:func:`plugins.serving.serving_spec.decode_time`) — the rules of ``use batching`` with
  speculation.  A decoding sequence takes k + 1 tokens of the chunk budget.  In the screen's
  steady state the prefill pass is amortised over the iterations that have one
  (:func:`speculative_step`).
* *Screen*: a request needs ⌈(G − 1)/E⌉ + 1 ≈ Ḡ/E decode steps instead of Ḡ, so the steady state
  runs N = λ·(Ḡ/E)·t sequences; estimated TPOT = t/E.
* Pipeline parallelism with speculation is left out (vLLM: "speculative decoding is not
  compatible with pipeline parallelism", docs/features/spec_decode.md, v0.8 – v0.14).

**Prefix caching.**  The simulation is :func:`plugins.serving.serving_prefix_cache.simulate_cached`
on each engine (round-robin dispatch, a cache per engine).  The screen estimates the prefill a
cache saves with :func:`cached_tokens`: each request's hit is its longest prefix of whole blocks
that an earlier request dealt to the same engine had — its prompt at once, its answer once
finished (:class:`PrefixIndex`) — in an unbounded cache (no eviction: an upper bound on the
hits; the simulation decides); the prefill that is left attends to the cached prefix.

Units: seconds, tokens; E tokens per sequence and step.
"""
from __future__ import annotations

from dataclasses import dataclass

from plugins.serving.serving_sim_base import LazyNumpy
from plugins.serving.serving_spec import SimSpec, decode_time
from plugins.serving.serving_step_core import step_time


np = LazyNumpy(globals())     # numpy, imported on first use


@dataclass
class SearchSpec:
    """The search's speculation: ``mode`` ("draft" or "mtp"), ``draft`` (the draft model's
    name) and ``E[k]``, the expected tokens a sequence gains per step with k drafted tokens
    (E[0] = 1)."""

    mode: str
    draft: str
    E: dict


def speculative_step(c_draft, k: int, chunk):
    """The mean step cost (as the screen calls a step: numpy arrays) of an engine that speculates
    with k drafted tokens: its prefill passes plus :func:`plugins.serving.serving_spec.decode_time`
    of the decodes (0 without decodes).  An iteration with prefill tokens prices them in a pass of
    their own (the simulator's rule), so at a load of ``prefill_tokens`` p per iteration below one
    ``chunk`` (the tokens of one prompt's chunk) a share p / chunk of the iterations makes a pass
    of ``chunk`` tokens: the prefill part is min(1, p/chunk) · step(p / min(1, p/chunk)) — one pass
    of p tokens at or above a chunk, the amortised pass of a chunk below."""
    def f(c, prefill_tokens, decode_seqs, context_tokens, o, prefill_prefix=0):
        nd = np.asarray(decode_seqs, dtype=float)
        pf = np.asarray(prefill_tokens, dtype=float)
        passes = np.minimum(1.0, pf / np.maximum(chunk, 1.0))
        t_pf = passes * step_time(c, np.where(passes > 0, pf / np.maximum(passes, 1e-300), 0.0), 0 * nd, 0 * nd, o,
                                  prefill_prefix=prefill_prefix)
        safe = np.maximum(nd, 1.0)
        t_dec = np.where(nd > 0, decode_time(c, c_draft, safe, k, np.asarray(context_tokens, dtype=float), o), 0.0)
        return t_pf + t_dec
    return f


def sim_spec(g, k: int, E: float, kv_tokens: int, o):
    """The :class:`plugins.serving.serving_spec.SimSpec` of layout g at k (its target and draft
    constants), priced affinely in the context over the pool of ``kv_tokens`` tokens."""
    return SimSpec.for_step(g.c, g.draft_c, k, E, getattr(o, "scalar", o), top=kv_tokens)


class PrefixIndex:
    """The block keys of a workload's requests, flattened once for :func:`cached_tokens`:
    ``keys[i]`` the chained keys of request i's full blocks of ``block_size`` tokens
    (:func:`plugins.serving.serving_prefix_cache.block_keys`), prompt first (a synthetic
    workload keys its answer's blocks after them); ``ready[i]`` (s, default 0) how long after
    its arrival request i's answer blocks are cached — the search passes TTFT + (G − 1)·TPOT at
    its targets: a configuration that meets them has finished the answer by then."""

    def __init__(self, keys, prompt, arrival, block_size: int, ready=0.0):
        P = np.asarray(prompt, dtype=np.int64)
        n = len(P)
        lens = np.fromiter((len(k) for k in keys), dtype=np.int64, count=n)
        flat = np.fromiter((x for k in keys for x in k), dtype=np.int64, count=int(lens.sum()))
        self.n, self.bs, self.prompt = n, int(block_size), P
        self.req = np.repeat(np.arange(n, dtype=np.int64), lens)
        starts = np.cumsum(lens) - lens
        self.j = np.arange(flat.size, dtype=np.int64) - np.repeat(starts, lens)
        A = np.asarray(arrival, dtype=float)
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(A, kind="stable")] = np.arange(n, dtype=np.int64)
        self.arrival = A
        self.answer_at = (A + np.broadcast_to(np.asarray(ready, dtype=float), A.shape))
        self.pos = rank[self.req]                           # each block's request, in arrival order
        self.gid = np.unique(flat, return_inverse=True)[1].astype(np.int64).ravel() if flat.size else flat
        self.groups = int(self.gid.max()) + 1 if flat.size else 0
        lim = np.minimum(lens, (P - 1) // self.bs)          # at most num_tokens − 1 tokens hit
        self.query = self.j < lim[self.req]
        self.in_prompt = self.j < (P // self.bs)[self.req]
        self._memo: dict = {}

    def hits(self, engines: int, outputs: bool) -> np.ndarray:
        """Prompt tokens of each request (input order) found cached at its admission when the
        requests are dealt round-robin in arrival order over ``engines`` engines with unbounded
        caches: whole blocks, its longest prefix an earlier request on the same engine filled —
        its prompt's blocks (cached as it arrives), and with ``outputs`` its answer's once they
        are ready (an aggregated engine caches what it generates; a prefill pool never sees the
        answers).  The keys are chained (a key names its whole prefix), so a block is a hit
        exactly when its key was filled before."""
        e = max(int(engines), 1)
        got = self._memo.get((e, outputs))
        if got is not None:
            return got
        if self.groups == 0:
            got = np.zeros(self.n, dtype=np.int64)
        else:
            comb = self.gid * e + self.pos % e
            pr = self.in_prompt
            first = np.full(self.groups * e, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(first, comb[pr], self.pos[pr])
            hit = self.query & (first[comb] < self.pos)
            if outputs and not pr.all():
                ans = ~pr
                ready = np.full(self.groups * e, np.inf)
                np.minimum.at(ready, comb[ans], self.answer_at[self.req[ans]])
                hit |= self.query & (ready[comb] <= self.arrival[self.req])
            got = np.bincount(self.req[hit], minlength=self.n).astype(np.int64) * self.bs
        self._memo[(e, outputs)] = got
        return got


def cached_tokens(index: PrefixIndex | None, engines, outputs: bool = True):
    """Per candidate (an array of engine counts) the mean and the p95 (nearest rank) of the prompt
    tokens each request prefills after its cached prefix (:meth:`PrefixIndex.hits`); without an
    index (no prefix caching) None."""
    if index is None:
        return None
    from plugins.serving.serving_sim_core import QUANTILES, nearest_rank_np
    engines = np.asarray(engines, dtype=np.int64)
    mean, p95 = np.empty(engines.size), np.empty(engines.size)
    for e in np.unique(engines).tolist():
        left = index.prompt - index.hits(e, outputs)
        sel = engines == e
        mean[sel], p95[sel] = float(left.mean()), float(nearest_rank_np(left, QUANTILES[2]))
    return mean, p95

"""Automatic prefix caching in the continuous-batching simulation: vLLM's block pool with
cached blocks, and a request's prefill starting after its longest cached prefix.

The rules follow vLLM's v1 KV cache manager (``vllm/v1/core/kv_cache_manager.py``,
``vllm/v1/core/block_pool.py``, ``enable_prefix_caching``):

* **Blocks and their keys.**  The pool has ⌊kv_tokens / block_size⌋ physical blocks.  A block
  that a request has filled with prompt tokens gets the key of its content *and of everything
  before it* (vLLM hashes a block's tokens together with its parent block's hash), so equal
  keys mean equal prefixes.  Only full blocks are keyed.
* **The free queue is the cache.**  A block no request holds (reference count 0) sits in the
  free-block queue *with its key*: it stays reusable until it is handed out again.  Allocation
  takes the queue's head (the least recently freed block) and drops its key then — eviction is
  LRU over the blocks no running request holds.  A finished or preempted request returns its
  blocks to the queue's tail **in reverse order** (``KVCacheManager.free``: "tail blocks are
  evicted first"), so a prompt's shared head outlives its private tail.  Cached content thus
  competes with running requests for the same pool: it costs nothing while blocks are free and
  is evicted as soon as a request needs the block.
* **A hit.**  On admission a request looks up its keys in order and takes the longest run
  present (``get_computed_blocks``); at most ``num_tokens − 1`` tokens count (whole blocks
  only), so at least one token is computed and the step still yields logits.  Hit blocks that
  no one holds leave the free queue (``touch``); the admission check counts them against the
  free blocks, as ``allocate_slots`` does.  The request's computed tokens start at the hit.
  A preempted request's blocks keep their keys in the queue, so on readmission it may hit its
  own prompt.

**Trace block hashes → engine blocks.**  A trace gives a request's prompt as ids of fixed
blocks of ``hash_block`` tokens (Mooncake's public traces: 512 tokens, ids chained so that a
shared id means a shared prefix; ``kvcache-ai/Mooncake`` README, "Open source trace", and
``mooncake_trace.jsonl``).  Engine block j covers prompt tokens [j·B, (j+1)·B) (B =
``block_size``); it is keyed when it is full, lies within the prompt and within the hashed
blocks: its key is (the chain of trace ids up to hash block k = ⌊((j+1)·B − 1)/hash_block⌋,
the offset (j+1)·B − k·hash_block of its end inside that block).  So one hash block of 512
tokens is 32 engine blocks of 16, and an engine block that straddles two hash blocks is keyed
by the later one (its content is known only with both).  Only prompt blocks are keyed: the
output tokens of a request are not in the trace's hashes (vLLM also caches blocks of output,
which a following turn of a conversation could hit; a trace's next prompt carries their ids).

**Match granularity: vLLM's blocks, SGLang's radix tree.**  A hit is a run of whole engine
blocks, so the match is as fine as ``block_size``: vLLM hashes full blocks of 16 tokens
(``CacheConfig.DEFAULT_BLOCK_SIZE``), so a partial last block never hits; SGLang's
``RadixCache`` (``python/sglang/srt/mem_cache/radix_cache.py``) matches token by token on pages
of one token (``server_args.page_size = 1``) and caps the match at input_len − 1
(``Req._compute_max_prefix_len`` in ``managers/schedule_batch.py``) — the pool above with
``block_size`` 1, the ``sglang`` preset's.  SGLang evicts unlocked leaves of its tree, least
recently accessed first (a heap of leaves by ``last_access_time``); the free queue evicts
blocks of one token least recently released first, a request's tail before its head — a
leaf before its parent.  The two orders agree when each request's tokens are last used when
it is released; they differ when a hit refreshes a shared node without holding it.

**A replay without time.**  :func:`replay` feeds the same pool a trace's requests one at a
time: a trace's hit rate against the cache's capacity, as the published analyses of traces
compute it (Qin et al., FAST'25, Figure 9: "We consider only the sequence of requests"), which
``tests/test_serving_prefix_published.py`` checks against the Mooncake traces' figures.

The simulation here is one Python iteration per engine iteration — the rules of
:func:`plugins.serving.serving_sim_core.simulate_reference` (the readable definition; a test
checks that with no hit it gives the same schedule), plus the block pool above.  It is only
run when prefix caching is on, so the fast path without a cache is unchanged.
"""
from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass

from dsl.plugin import LimitError, Param, current_limits

from plugins.serving.serving_sim_base import sim_result, step_pricer, workload_arrays
from plugins.serving.serving_sim_core import SimError, SimResult, check_workload, clock_origin

MOONCAKE_HASH_BLOCK = 512      # tokens per hash id in Mooncake's public traces

# the block parameters of prefix caching and of synthetic prompts with shared prefixes, shared by
# `use batching` and `use serving_search`
PREFIX_PARAMS = (
    Param("enable_prefix_caching", kind="bool", default="false",
          doc="automatic prefix caching as vLLM's: a request skips the prefill of its longest cached "
          "prefix of whole blocks of `block_size` (a page of 1 token, as SGLang's radix cache, matches "
          "token by token); reads the trace's `hash_ids`, or the synthetic prompts' blocks"),
    Param("hash_block", "token", "512 token", "tokens per id of the trace's `hash_ids` (Mooncake's traces: 512)",
          min=1, whole=True),
    Param("system_prompts", "", None, "distinct system prompts of synthetic requests (a conversation starts "
          "with one, chosen uniformly)", min=1, whole=True, optional=True),
    Param("system_prompt_tokens", "token", None, "tokens of each system prompt", min=1, whole=True,
          optional=True),
    Param("system_prompt_share", "", "1", "share of synthetic conversations that start with a system prompt "
          "(0 to 1)", min=0, max=1),
    Param("turns", "", "1", "turns per synthetic conversation: a turn's prompt is the previous prompt, its "
          "answer and a new `input`", min=1, whole=True),
)


def block_keys(hash_ids, prompt, hash_block: int, block_size: int) -> list[list[int]]:
    """The keys of each request's full engine blocks (module docstring), as integers.

    ``hash_ids[i]``: the trace ids of request i's prompt blocks of ``hash_block`` tokens;
    ``prompt[i]``: its prompt tokens; ``block_size``: the engine's block (tokens).  Equal
    keys ⇔ the same chain of trace ids and the same end offset.  O(total engine blocks)."""
    chain: dict[tuple[int, int], int] = {}
    H, B = int(hash_block), int(block_size)
    span = H + 1
    out = []
    for ids, P in zip(hash_ids, prompt):
        n = min(int(P), len(ids) * H) // B
        if n == 0:
            out.append([])
            continue
        parents = []
        parent = -1
        for h in ids[:(n * B - 1) // H + 1]:
            parent = chain.setdefault((parent, h), len(chain))
            parents.append(parent)
        ks = []
        for j in range(1, n + 1):
            end = j * B
            k = (end - 1) // H
            ks.append(parents[k] * span + (end - k * H))
        out.append(ks)
    return out


@dataclass
class CacheStats:
    """Per request (input order): ``hit`` the prompt tokens found cached at its first admission
    (whole blocks), ``prompt`` its prompt tokens; ``evictions``: cached blocks handed out again."""

    hit: list
    prompt: list
    evictions: int

    @property
    def hit_rate(self) -> float:
        """Cached prompt tokens / prompt tokens (vLLM's prefix-cache hit rate: hits / queries)."""
        tot = sum(self.prompt)
        return sum(self.hit) / tot if tot else 0.0

    @property
    def saved(self) -> int:
        """Prompt tokens the first admissions did not prefill (tokens)."""
        return sum(self.hit)


class BlockPool:
    """vLLM's block pool with cached blocks (module docstring): ``blocks`` physical blocks, a
    free queue that is the cache (LRU: its head is handed out first and loses its key then),
    reference counts, and the key → block map, as the request-by-request replay (:func:`replay`)
    runs it.  The batching simulation (:func:`simulate_cached`) runs the same rule inlined on
    plain lists (its inner loop, once per engine iteration); a test checks that the two give the
    same hits and evictions on requests that do not overlap in time."""

    def __init__(self, blocks: int):
        self.blocks = nb = int(blocks)
        self.ref = [0] * nb
        self.bkey: list = [None] * nb            # the key a block holds (None: no cached content)
        self.cached: dict[int, int] = {}         # key → block
        self.freeq: OrderedDict = OrderedDict.fromkeys(range(nb))   # head: the next block handed out
        self.evictions = 0                       # cached blocks handed out again

    def lookup(self, ks, lim: int) -> list[int]:
        """The blocks of the longest run of ``ks`` (a request's keys, in order) present, at most
        ``lim`` of them (``get_computed_blocks``)."""
        hb, cached = [], self.cached
        while len(hb) < lim:
            b = cached.get(ks[len(hb)])
            if b is None:
                break
            hb.append(b)
        return hb

    def evictable(self, hb) -> int:
        """Of the hit blocks ``hb``, those in the free queue (no request holds them)."""
        ref = self.ref
        return sum(1 for b in hb if ref[b] == 0)

    def touch(self, hb) -> None:
        """A request holds its hit blocks: they leave the free queue (``touch``)."""
        ref, freeq = self.ref, self.freeq
        for b in hb:
            if ref[b] == 0:
                del freeq[b]
            ref[b] += 1

    def take(self, bl: list, k: int) -> None:
        """Append ``k`` blocks from the free queue's head to ``bl``, dropping their keys (evictions)."""
        freeq, bkey, cached, ref = self.freeq, self.bkey, self.cached, self.ref
        for _ in range(k):
            b, _ = freeq.popitem(last=False)
            kb = bkey[b]
            if kb is not None:
                if cached.get(kb) == b:
                    del cached[kb]
                bkey[b] = None
                self.evictions += 1
            ref[b] = 1
            bl.append(b)

    def release(self, bl: list) -> None:
        """Return a request's blocks to the free queue's tail in reverse order (``free``: its
        tail blocks are evicted first), keys kept."""
        ref, freeq = self.ref, self.freeq
        for b in reversed(bl):
            ref[b] -= 1
            if ref[b] == 0:
                freeq[b] = None

    def register(self, ks, bl, lo: int, hi: int) -> None:
        """Blocks ``bl[lo:hi]`` are full: they get keys ``ks[lo:hi]`` unless the key is cached
        already or the block holds one (``cache_full_blocks``)."""
        cached, bkey = self.cached, self.bkey
        for j in range(lo, hi):
            kj, b = ks[j], bl[j]
            if kj not in cached and bkey[b] is None:
                cached[kj] = b
                bkey[b] = kj


def simulate_cached(arrival, prompt, output, keys, eng, step_time, c=None, o=None, *, spec=None,
                    record: bool = True, max_events: int | None = None) -> tuple[SimResult, CacheStats]:
    """Continuous batching with automatic prefix caching (module docstring): the schedule of
    :func:`plugins.serving.serving_sim_core.simulate_reference` on vLLM's block pool with cached
    blocks.  ``keys[i]``: request i's block keys (:func:`block_keys`; [] for none).  Times in
    seconds, as the step cost returns them; an iteration is priced by ``step_time.for_numbers(c)``
    when the step cost has one (as the fast path prices its single iterations), else by the step
    cost on ``o.scalar`` (or ``o``).  ``spec`` (a :class:`plugins.serving.serving_spec.SimSpec`):
    speculative decoding with the reference's rules — a decoding sequence takes k + 1 tokens of
    the budget and gains ``spec.tokens(…)`` a step, the iteration costs its prefill chunks alone
    plus ``spec.decode``.  ``record=False``: no inter-token latencies and no event series (as
    :func:`plugins.serving.serving_sim_core.simulate`); ``max_events``: the iterations allowed
    (default: the limit ``sim_iterations`` in force).

    :raises SimError: for a workload the engine cannot serve; :raises LimitError:
        ``sim_iterations`` past the limit."""
    import numpy as np
    A, Pa, Ga = workload_arrays(arrival, prompt, output, keys)
    check_workload(A, Pa, Ga, eng)
    cap = current_limits().sim_iterations if max_events is None else int(max_events)
    n, bs, Bud, S = len(A), eng.block_size, eng.max_num_batched_tokens, eng.max_num_seqs
    chunked = eng.enable_chunked_prefill
    price = step_pricer(step_time, c, o)
    kk = spec.k + 1 if spec is not None else 0
    P, G, At = Pa.tolist(), Ga.tolist(), A.tolist()
    order = np.argsort(A, kind="stable").tolist()
    comp, out, pre, reg, steps = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
    blocks: list[list[int]] = [[] for _ in range(n)]
    prefilling = [True] * n
    hit, admitted = [0] * n, [False] * n
    first, last = [math.nan] * n, [math.nan] * n
    nb = eng.blocks
    ref = [0] * nb
    bkey = [None] * nb                   # the key a block holds (None: no cached content)
    cached: dict[int, int] = {}          # key → block
    freeq: OrderedDict = OrderedDict.fromkeys(range(nb))      # head: the next block handed out
    popfree = freeq.popitem
    ev = [0]                             # evictions
    running: list[int] = []
    waiting: deque = deque()
    itl_v, itl_w, ser = [], [], []
    t, nxt, done, it = 0.0, 0, 0, 0
    O, org, moved = 0.0, [0.0] * n, False

    def take(r, k):
        bl = blocks[r]
        for _ in range(k):
            b, _ = popfree(last=False)
            kb = bkey[b]
            if kb is not None:
                if cached.get(kb) == b:
                    del cached[kb]
                bkey[b] = None
                ev[0] += 1
            ref[b] = 1
            bl.append(b)

    def release(r):
        bl = blocks[r]
        for b in bl:
            ref[b] -= 1
        freeq.update(dict.fromkeys([b for b in reversed(bl) if ref[b] == 0]))   # tail blocks first
        blocks[r] = []
        reg[r] = 0

    # a decoding sequence has computed every token but its last output: comp = P + out − 1, so
    # it is scheduled 1 token (or, speculating, min(gains[steps], G − out) tokens and k + 1 of
    # the budget)
    gains = spec.gains(int(Ga.max()) + 1) if kk else None

    def register(r, cr):
        """Request r has cr tokens computed: its newly full blocks get their keys (cache_full_blocks)."""
        ks, j = keys[r], reg[r]
        full = cr // bs
        if full > len(ks):
            full = len(ks)
        if j < full:
            bl = blocks[r]
            while j < full:
                kj, b = ks[j], bl[j]
                if kj not in cached and bkey[b] is None:
                    cached[kj] = b
                    bkey[b] = kj
                j += 1
            reg[r] = j

    def run(t):
        """Advance runs of decode-only iterations at once (``record=False``): every running
        sequence decodes, nothing can be admitted (no request waiting, or max_num_seqs or the
        budget reached) and the budget covers every decode.  A segment of iterations with the
        same sequences ends with the iteration of the first finish (inclusive), before the first
        iteration whose allocations the free blocks do not cover, before the first iteration that
        starts at or after the next arrival (no request waiting), or at the limit of iterations;
        after a finish with no request waiting the next segment follows.  Each iteration's
        allocations (in running order), then its key registrations and releases (in running
        order), are made as the per-iteration loop makes them, and its time is the same call of
        the step cost.  Returns (iterations advanced, finished requests, the new time)."""
        total = fins = 0
        while running:
            nr = len(running)
            lim = At[order[nxt]] - O if (not waiting and nxt < n) else math.inf
            if t >= lim:
                break
            m, fin, t = _segment(t, nr, lim, cap - it - total)
            total += m
            if fin:
                fins += len(fin)
                keep = set(fin)
                running[:] = [r for r in running if r not in keep]
            if not fin or waiting or m == 0:
                break
        return total, fins, t

    def _finish_post(j_items, fin):
        """The post-phase of a finishing iteration: for each request in running order, its key
        registration (``j_items``: position → tokens computed), then its release if it finished."""
        for q in sorted(set(j_items) | set(fin)):
            r = running[q]
            if q in j_items:
                register(r, j_items[q])
            if q in fin:
                release(r)

    def _segment(t, nr, lim, room):
        """A segment without speculation: sequence r has comp_r + j tokens before iteration j, so
        it allocates a block when comp_r + j ≡ 0 and fills one when comp_r + j + 1 ≡ 0 (mod bs)."""
        groups = [[] for _ in range(bs)]
        csum, jf = 0, None
        for q, r in enumerate(running):
            cr = comp[r]
            groups[cr % bs].append(q)
            csum += cr
            left = G[r] - out[r] - 1
            if jf is None or left < jf:
                jf = left
        mmax = min(jf + 1, room)
        free = len(freeq)
        j = 0
        fin = []
        while j < mmax and t < lim:
            ga = groups[(-j) % bs]
            if len(ga) > free:
                break
            free -= len(ga)
            for q in ga:
                take(running[q], 1)
            t += price(0, nr, csum + nr * j, 0, 0)
            gr = groups[(-j - 1) % bs]
            if j == jf:
                fin = [q for q, r in enumerate(running) if G[r] - out[r] - 1 == jf]
                _finish_post({q: comp[running[q]] + j + 1 for q in gr}, set(fin))
            else:
                for q in gr:
                    r = running[q]
                    register(r, comp[r] + j + 1)
            j += 1
        for r in running:
            comp[r] += j
            out[r] += j
            last[r] = t
        return j, [running[q] for q in fin], t

    while done < n:
        while nxt < n and At[order[nxt]] - O <= t:
            org[order[nxt]] = O
            waiting.append(order[nxt])
            nxt += 1
        if not running and not waiting:
            a = At[order[nxt]]
            if clock_origin(a) != O:
                O, moved = clock_origin(a), True
            t = a - O
            continue
        if it >= cap:
            raise LimitError("sim_iterations", f"the simulation passed {cap:,} scheduler iterations "
                             f"({done:,} of {n:,} requests finished)")
        if record:
            ser.extend((O + t, len(waiting), len(running), nb - len(freeq)))
        elif not kk and running and len(running) <= Bud and not any(prefilling[r] for r in running) and (
                not waiting or len(running) >= S or len(running) >= Bud):
            m, fins, t = run(t)
            if m:
                it += m
                done += fins
                continue
        budget, sched, preempted = Bud, [], False
        pf = prefix = ends = nd = ctx = 0          # the iteration's work, as iteration_time adds it up
        i, nr = 0, len(running)
        while i < nr and budget > 0:
            r = running[i]
            cr = comp[r]
            decoding = not prefilling[r]
            if not decoding:
                new = P[r] + out[r] - cr
                if new > budget:
                    new = budget
            elif kk:
                new = gains[steps[r]]
                if new > G[r] - out[r]:
                    new = G[r] - out[r]
            else:
                new = 1
            need = -(-(cr + new) // bs) - len(blocks[r])
            if need > 0:
                ok = True
                while need > len(freeq):
                    v = running.pop()
                    nr -= 1
                    release(v)
                    comp[v], prefilling[v] = 0, True
                    pre[v] += 1
                    waiting.appendleft(v)
                    preempted = True
                    if v == r:
                        ok = False
                        break
                if not ok:
                    break
                take(r, need)
            sched.append((r, new))
            if decoding:
                nd += 1
                ctx += cr
                budget -= (kk if kk < budget else budget) if kk else 1
            else:
                pf += new
                prefix += cr
                if cr + new == P[r] + out[r]:
                    ends += 1
                budget -= new
            i += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < S:
                r = waiting[0]
                ks, tot = keys[r], P[r] + out[r]
                hb = []
                for kj in ks[:(tot - 1) // bs]:          # the longest run of cached blocks
                    b = cached.get(kj)
                    if b is None:
                        break
                    hb.append(b)
                c0 = len(hb) * bs
                new = tot - c0
                if not chunked and new > budget:
                    break
                if new > budget:
                    new = budget
                evictable = sum(1 for b in hb if ref[b] == 0)
                need = -(-(c0 + new) // bs) - len(hb)
                if need + evictable > len(freeq):
                    break
                waiting.popleft()
                for b in hb:
                    if ref[b] == 0:
                        del freeq[b]
                    ref[b] += 1
                blocks[r] = hb
                reg[r] = len(hb)
                take(r, need)
                comp[r] = c0
                if not admitted[r]:
                    admitted[r], hit[r] = True, c0
                running.append(r)
                sched.append((r, new))
                pf += new
                prefix += c0
                if new == tot - c0:
                    ends += 1
                budget -= new
        assert sched, "an iteration scheduled nothing"
        if not kk:
            dt = price(pf, nd, ctx, prefix, ends)
        else:
            dt = (price(pf, 0, 0, prefix, ends) if pf else 0.0) + (spec.decode(nd, ctx) if nd else 0.0)
        t_end = t + dt
        it += 1
        if record and nd and not kk:
            itl_v.append(dt)
            itl_w.append(nd)
        fin = False
        for r, new in sched:
            comp[r] = cr = comp[r] + new
            if cr >= (reg[r] + 1) * bs:          # a block filled: the call only then (hot loop)
                register(r, cr)
            if prefilling[r]:
                if cr != P[r] + out[r]:
                    continue
                out[r] += 1
                if out[r] == 1:
                    first[r] = t_end
                elif record:                        # resumed after a preemption
                    itl_v.append(t_end - last[r])
                    itl_w.append(1)
                prefilling[r] = False
            elif kk:                                # `new` accepted tokens, one ITL each
                out[r] += new
                steps[r] += 1
                if record:
                    itl_v.append(dt / new)
                    itl_w.append(new)
            else:
                out[r] += 1
            last[r] = t_end
            if out[r] == G[r]:
                release(r)
                done += 1
                fin = True
        if fin:
            running = [r for r in running if out[r] != G[r]]
        t = t_end
    res = sim_result(A, Pa, Ga, first, last, pre, np.asarray(itl_v, dtype=float), np.asarray(itl_w, dtype=np.int64),
                     ser, it, eng, events=it, origin=org if moved else None)
    return res, CacheStats(hit, P, ev[0])


def simulate_cached_replicas(arrival, prompt, output, keys, eng, step_time, c=None, o=None, replicas: int = 1, *,
                             spec=None, record: bool = True) -> tuple[SimResult, CacheStats]:
    """``replicas`` engines behind a round-robin dispatcher, as
    :func:`plugins.serving.serving_sim_core.simulate_replicas`, each with its own prefix cache
    (:func:`simulate_cached`: a request hits only what its own engine cached; one budget of
    iterations for all the engines).  The stats merge the engines' (requests in input order)."""
    from plugins.serving.serving_sim_core import simulate_replicas
    import numpy as np
    A = np.asarray(arrival, dtype=float)
    P, G = np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64)
    if len(keys) != len(A):
        raise SimError("arrival, input and output lengths and block keys must be lists of the same length")
    hit, evictions = [0] * len(A), [0]

    def engine(idx, left):
        r, s = simulate_cached(A[idx], P[idx], G[idx], [keys[i] for i in idx.tolist()], eng, step_time, c, o,
                               spec=spec, record=record, max_events=left)
        for i, h in zip(idx.tolist(), s.hit):
            hit[i] = h
        evictions[0] += s.evictions
        return r

    res = simulate_replicas(A, P, G, eng, step_time, c, o, replicas, record=record, engine=engine)
    return res, CacheStats(hit, P.tolist(), evictions[0])
def replay(keys, prompt, blocks: int, block_size: int, output=None) -> CacheStats:
    """The block pool of :func:`simulate_cached` fed the requests one at a time, in order: each
    admitted alone (its longest cached prefix, at most ⌊(P − 1)/B⌋ blocks), its prompt computed
    and its blocks keyed, then its ``output`` tokens (KV for P + G − 1 tokens, as the engine
    computes it; default none) and its blocks released — a cache replay of the sequence of
    requests only, without time, as published cache analyses of traces do (a trace's hit rate
    against the cache's capacity, ``blocks`` of ``block_size`` tokens).  It is the simulation's
    schedule when no two requests overlap (a test checks it).  O(total blocks).

    :raises SimError: a request needing more blocks than the pool has."""
    pool = BlockPool(blocks)
    B = int(block_size)
    P = [int(p) for p in prompt]
    G = [1] * len(P) if output is None else [int(g) for g in output]
    if len(keys) != len(P) or len(G) != len(P):
        raise SimError("block keys, input and output lengths must be lists of the same length")
    hit = [0] * len(P)
    for r, (ks, p, g) in enumerate(zip(keys, P, G)):
        kv = p + max(g, 1) - 1                       # tokens whose KV the request computes
        if -(-kv // B) > pool.blocks:
            raise SimError(f"request {r + 1} needs {-(-kv // B):,} blocks of {B} tokens, more than the "
                           f"{pool.blocks:,} of the cache", r, hint="give the cache more blocks")
        hb = pool.lookup(ks, min(len(ks), (p - 1) // B))
        pool.touch(hb)
        bl = list(hb)
        pool.take(bl, -(-kv // B) - len(hb))
        pool.register(ks, bl, len(hb), min(len(ks), kv // B))
        hit[r] = len(hb) * B
        pool.release(bl)
    return CacheStats(hit, P, pool.evictions)

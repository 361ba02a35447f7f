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

from dsl.plugin import LimitError, current_limits

from plugins.serving.serving_sim_core import (SimError, SimResult, check_workload, clock_origin, extra_args,
                                              iteration_time)

MOONCAKE_HASH_BLOCK = 512      # tokens per hash id in Mooncake's public traces


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
    reference counts, and the key → block map.  Shared by the batching simulation
    (:func:`simulate_cached`) and the request-by-request replay (:func:`replay`), so both run
    one eviction rule."""

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


def simulate_cached(arrival, prompt, output, keys, eng, step_time, c=None, o=None) -> tuple[SimResult, CacheStats]:
    """Continuous batching with automatic prefix caching (module docstring): the schedule of
    :func:`plugins.serving.serving_sim_core.simulate_reference` on vLLM's block pool with cached
    blocks.  ``keys[i]``: request i's block keys (:func:`block_keys`; [] for none).  Times in
    seconds, as the step cost returns them.

    :raises SimError: for a workload the engine cannot serve; :raises LimitError:
        ``sim_iterations`` past the limit in force."""
    import numpy as np
    A = np.asarray(arrival, dtype=float)
    Pa, Ga = np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64)
    if not (A.shape == Pa.shape == Ga.shape) or A.ndim != 1 or len(keys) != len(A):
        raise SimError("arrival, input and output lengths and block keys must be lists of the same length")
    check_workload(A, Pa, Ga, eng)
    cap = current_limits().sim_iterations
    n, bs, Bud, S = len(A), eng.block_size, eng.max_num_batched_tokens, eng.max_num_seqs
    extra = extra_args(step_time)
    P, G, At = Pa.tolist(), Ga.tolist(), A.tolist()
    order = np.argsort(A, kind="stable").tolist()
    comp, out, pre, reg = [0] * n, [0] * n, [0] * n, [0] * n
    blocks: list[list[int]] = [[] for _ in range(n)]
    prefilling = [True] * n
    hit, admitted = [0] * n, [False] * n
    first, last = [math.nan] * n, [math.nan] * n
    pool = BlockPool(eng.blocks)
    nb, freeq = pool.blocks, pool.freeq
    running: list[int] = []
    waiting: deque = deque()
    itl_v, itl_w, ser = [], [], []
    t, nxt, done, it = 0.0, 0, 0, 0
    O, org, moved = 0.0, [0.0] * n, False

    def take(r, k):
        pool.take(blocks[r], k)

    def release(r):
        pool.release(blocks[r])
        blocks[r] = []
        reg[r] = 0

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
        ser.extend((O + t, len(waiting), len(running), nb - len(freeq)))
        budget, sched, preempted = Bud, [], False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            new = min(P[r] + out[r] - comp[r], budget)
            ok = True
            while True:
                need = -(-(comp[r] + new) // bs) - len(blocks[r])
                if need <= len(freeq):
                    take(r, need)
                    break
                v = running.pop()
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
            sched.append((r, new))
            budget -= new
            i += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < S:
                r = waiting[0]
                ks, tot = keys[r], P[r] + out[r]
                lim = min(len(ks), (tot - 1) // bs)
                hb = pool.lookup(ks, lim)
                c0 = len(hb) * bs
                new = tot - c0
                if not eng.enable_chunked_prefill and new > budget:
                    break
                new = min(new, budget)
                need = -(-(c0 + new) // bs) - len(hb)
                if need + pool.evictable(hb) > len(freeq):
                    break
                waiting.popleft()
                pool.touch(hb)
                blocks[r] = hb
                reg[r] = len(hb)
                take(r, need)
                comp[r] = c0
                if not admitted[r]:
                    admitted[r], hit[r] = True, c0
                running.append(r)
                sched.append((r, new))
                budget -= new
        assert sched, "an iteration scheduled nothing"
        dt, nd = iteration_time(step_time, c, o, sched, prefilling, comp, P, out, extra)
        t_end = t + dt
        it += 1
        if nd:
            itl_v.append(dt)
            itl_w.append(nd)
        for r, new in sched:
            comp[r] += new
            ks = keys[r]
            full = min(len(ks), comp[r] // bs)
            if full > reg[r]:            # newly full prompt blocks get their keys (cache_full_blocks)
                pool.register(ks, blocks[r], reg[r], full)
                reg[r] = full
            if comp[r] == P[r] + out[r]:
                out[r] += 1
                if prefilling[r]:
                    if out[r] == 1:
                        first[r] = t_end
                    else:
                        itl_v.append(t_end - last[r])
                        itl_w.append(1)
                    prefilling[r] = False
                last[r] = t_end
                if out[r] == G[r]:
                    release(r)
                    running.remove(r)
                    done += 1
        t = t_end
    ser_a = np.asarray(ser, dtype=float).reshape(-1, 4)
    res = SimResult(A, Pa, Ga, np.asarray(first, dtype=float), np.asarray(last, dtype=float),
                    np.asarray(pre, dtype=np.int64), np.asarray(itl_v, dtype=float),
                    np.asarray(itl_w, dtype=np.int64), ser_a[:, 0], ser_a[:, 1].astype(np.int64),
                    ser_a[:, 2].astype(np.int64), ser_a[:, 3].astype(np.int64), it, nb, bs,
                    events=len(ser_a), origin=np.asarray(org, dtype=float) if moved else None)
    return res, CacheStats(hit, P, pool.evictions)


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

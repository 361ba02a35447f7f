"""Continuous batching on a request trace: a discrete simulation of an inference engine's
scheduler, from arrival times and input/output token counts alone.

The scheduler follows vLLM's v1 scheduler (``vllm/v1/core/sched/scheduler.py``; iteration-level
"continuous" batching, Yu et al., OSDI 2022 "Orca"; paged KV blocks, Kwon et al., SOSP 2023
"PagedAttention").  Each iteration (one forward pass of the engine):

1. **Running requests first**, in the order they were admitted.  A request has
   ``num_tokens = P + out`` tokens (prompt and outputs so far) of which ``computed`` have their
   KV cached; it is scheduled ``min(num_tokens − computed, budget)`` new tokens (1 for a
   decoding sequence, a chunk of the prompt for a prefill), within the iteration's token budget
   ``max_num_batched_tokens``.
2. **KV blocks**: a request holding ``ceil(computed / block_size)`` blocks needs
   ``ceil((computed + new) / block_size)``; the pool has ``kv_tokens // block_size`` blocks.
   When the free blocks do not cover a running request, the newest running request (the tail
   of the running list) is **preempted by recomputation**: it frees all its blocks, its
   computed tokens drop to 0 and it goes to the front of the waiting queue; this repeats until
   the request fits or is itself the victim.
3. **Waiting requests** (FCFS; only in an iteration without preemption) are admitted while the
   budget lasts, fewer than ``max_num_seqs`` are running and the head's first chunk gets its
   blocks; the first that does not fit stops admission.  A long prompt is prefilled in chunks
   over several iterations (chunked prefill); without chunked prefill a prompt that does not fit
   the remaining budget waits.  A resumed request recomputes its prompt and the outputs it had.
4. The iteration takes ``step_time(c, prefill_tokens, decode_seqs, context_tokens, o)`` seconds
   (the engine's step cost: tokens prefilled in the step, sequences decoding one token, the
   cached tokens those sequences read — decode j of a request reads P + j).  When a request's
   computed tokens reach ``num_tokens`` at the end of the iteration it emits one output token;
   the ``G``-th ends the request and frees its blocks.

The clock: each busy period (from an arrival on an idle engine until it is idle again) is
timed from :func:`clock_origin` of its first arrival, and a request's latencies are taken
against its own arrival in that frame, so they keep their digits however late the trace runs.

Two implementations of the same rules:

* :func:`simulate_reference` — one Python iteration per engine iteration, one object per
  request: the readable definition (tests compare against it).
* :func:`simulate` — event driven.  Decoding sequences are kept implicitly: a global decode
  counter ``D`` and, per sequence, ``key = computed − D``; the context sum is
  ``Σkey + n·D``, the blocks a step allocates are the sequences with ``(key + D) % block_size
  == 0`` (a histogram of ``key % block_size``), finishes a heap of the counter values at which
  they end.  Between events (an arrival that can be admitted, a prefill chunk, a finish, the
  step whose allocation would fail) every iteration is a decode of the same n sequences, so a
  *run* of k iterations is advanced in one numpy step: the k step times are evaluated as one
  vectorised call (context = Σkey + n·(D + j), j = 0 … k−1), their running sum gives the end
  of each iteration (the first iteration starting at or after the next arrival ends the run),
  and the step at which the pool runs out follows from the histogram in closed form (n blocks
  per ``block_size`` iterations).  When the step cost is affine in the context (checked per n),
  a run's times are the closed form α + β·(Σkey + n·(D + j)) instead of a call.  The schedule is
  the reference's, iteration for iteration; the times are summed in the same order, so they
  are equal to rounding (bitwise with ``affine=False`` and an affine cost).

Several engines behind a round-robin dispatcher: :func:`simulate_replicas` (each simulated
alone, the results merged).

Metrics (:class:`SimResult`): per request TTFT = t_1 − t_a, TPOT = (t_G − t_1)/(G − 1)
(G > 1), end-to-end latency t_G − t_a, preemptions; ITL over every output token after the first
(the step that produced it, or the gap across a preemption); percentiles by nearest rank
(:func:`plugins.serving.serving_trace.nearest_rank`); output throughput and goodput (requests meeting
TTFT ≤ x and TPOT ≤ y per second, as vLLM's ``benchmark_serving`` / DistServe define it) over
the span from the first arrival to the last token; time series of the waiting queue, the
running batch and the KV blocks in use at each event.

Other engines' scheduling policies (prefill-only iterations, multi-step decoding, host time per
scheduler call) and closed-loop clients: :mod:`plugins.serving.serving_sim_policy`, which
:func:`simulate` hands such an engine to.

This module is the simulator alone (numbers in, :class:`SimResult` out); the ``use batching``
block that reads a plan's workload, engine and step cost and runs it is
:mod:`plugins.serving.serving_sim`.
"""
from __future__ import annotations

import heapq
import math
import weakref
from array import array
from collections import deque

from dsl.plugin import LimitError, current_limits, no_gc


from plugins.serving.serving_sim_base import (  # noqa: F401  (re-exported: the simulator's public names)
    ORIGIN_GRID, QUANTILES, Engine, SimError, SimResult, check_workload, clock_origin, extra_args, gamma_arrivals,
    iteration_time, linear_step, nearest_rank_np, poisson_arrivals, sample_lengths, sim_result, weighted_nearest_rank,
    workload_arrays)
from plugins.serving.serving_sim_base import LazyNumpy, affine_contexts, affine_fit
from plugins.serving.serving_sim_policy import default_policy, simulate_policy


np = LazyNumpy(globals())     # numpy, imported on first use

RUN_CAP = 1 << 14          # iterations evaluated in one vectorised call at most
MEMO_CAP = 1 << 16         # single-iteration step costs remembered at most (then the memo starts over)
SHORT_RUN = 64             # runs up to this many iterations: a Python loop (numpy's per-call cost is higher)
BARE_RUN = 128             # the same without recording (≈70 ns an iteration against numpy's ≈10 µs a run)


# ---------------------------------------------------------------- the reference: one loop per iteration
def simulate_reference(arrival, prompt, output, eng: Engine, step_time, c=None, o=None, spec=None) -> SimResult:
    """The scheduler rules of the module docstring, one Python iteration per engine iteration.
    ``spec`` (a :class:`plugins.serving.serving_spec.SimSpec`): speculative decoding — a decoding
    sequence takes k + 1 tokens of the budget, gains ``spec.tokens(…)`` tokens a step (the mean E,
    KV blocks for those) and the iteration costs its prefill chunks alone plus ``spec.decode``."""
    A, Pa, Ga = workload_arrays(arrival, prompt, output)
    check_workload(A, Pa, Ga, eng)
    n, bs, B, S = len(A), eng.block_size, eng.max_num_batched_tokens, eng.max_num_seqs
    extra = extra_args(step_time)
    P, G, At = Pa.tolist(), Ga.tolist(), A.tolist()
    order = np.argsort(A, kind="stable").tolist()
    comp, out, held, pre = [0] * n, [0] * n, [0] * n, [0] * n
    prefilling = [True] * n
    steps = [0] * n                                # speculative decode steps of each request
    first, last = [math.nan] * n, [math.nan] * n
    free = eng.blocks
    running: list[int] = []
    waiting: deque = deque()
    itl_v, itl_w, ser = [], [], []
    t, nxt, done, it = 0.0, 0, 0, 0
    O, org, moved = 0.0, [0.0] * n, False        # the clock counts from O (clock_origin)
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
        ser.extend((O + t, len(waiting), len(running), eng.blocks - free))
        budget, sched, preempted = B, [], False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            new = min(P[r] + out[r] - comp[r], budget)
            if spec is not None and not prefilling[r]:         # the tokens it gains (+ 1 - 1: see below)
                new = spec.tokens(steps[r], G[r] - out[r])
            ok = True
            while True:
                need = -(-(comp[r] + new) // bs) - held[r]
                if need <= free:
                    free -= need
                    held[r] += need
                    break
                v = running.pop()
                free += held[v]
                held[v], comp[v], prefilling[v] = 0, 0, True
                pre[v] += 1
                waiting.appendleft(v)
                preempted = True
                if v == r:
                    ok = False
                    break
            if not ok:
                break
            sched.append((r, new))
            budget -= new if spec is None or prefilling[r] else min(spec.k + 1, budget)
            i += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < S:
                r = waiting[0]
                new = P[r] + out[r]
                if not eng.enable_chunked_prefill and new > budget:
                    break
                new = min(new, budget)
                need = -(-new // bs)
                if need > free:
                    break
                waiting.popleft()
                free -= need
                held[r] = need
                running.append(r)
                sched.append((r, new))
                budget -= new
        assert sched, "an iteration scheduled nothing"
        if spec is None:
            dt, nd = iteration_time(step_time, c, o, sched, prefilling, comp, P, out, extra)
        else:
            dec = [r for r, _ in sched if not prefilling[r]]
            pf = [(r, new) for r, new in sched if prefilling[r]]
            dt = iteration_time(step_time, c, o, pf, prefilling, comp, P, out, extra)[0] if pf else 0.0
            dt, nd = dt + (spec.decode(len(dec), sum(comp[r] for r in dec)) if dec else 0.0), 0
        t_end = t + dt
        it += 1
        if nd:
            itl_v.append(dt)
            itl_w.append(nd)
        for r, new in sched:
            if spec is not None and not prefilling[r]:          # `new` accepted tokens, one ITL each
                comp[r] += new
                out[r] += new
                steps[r] += 1
                itl_v.append(dt / new)
                itl_w.append(new)
            else:
                comp[r] += new
                if comp[r] != P[r] + out[r]:
                    continue
                out[r] += 1
                if prefilling[r]:
                    if out[r] == 1:
                        first[r] = t_end
                    else:                       # resumed after a preemption
                        itl_v.append(t_end - last[r])
                        itl_w.append(1)
                    prefilling[r] = False
            last[r] = t_end
            if out[r] == G[r]:
                free += held[r]
                held[r] = 0
                running.remove(r)
                done += 1
        t = t_end
    return sim_result(A, Pa, Ga, first, last, pre, np.asarray(itl_v, dtype=float),
                   np.asarray(itl_w, dtype=np.int64), ser, it, eng, origin=org if moved else None)


# ---------------------------------------------------------------- the fast path: runs of identical decodes
class Affine:
    """Per decode batch size n, the decode-only step cost as α + β·context when it is affine
    in the context: checked at five contexts spanning [0, the whole pool] (a step cost that is
    a sum of rooflines is affine there: its memory and compute sides both grow linearly with
    the KV read).  Otherwise None, and runs are evaluated by vectorised calls."""

    def __init__(self, step_time, c, o, top: int):
        self.f, self.c, self.o, self.top = step_time, c, o, max(int(top), 16)
        self.memo = affine_memo(step_time, c, o, self.top)

    def __call__(self, n: int):
        r = self.memo.get(n, False)
        if r is not False:
            return r
        xs = np.array(affine_contexts(self.top), dtype=np.int64)
        ys = np.broadcast_to(np.asarray(self.f(self.c, 0, n, xs, self.o), dtype=float), xs.shape)
        r = self.memo[n] = affine_fit(xs.tolist(), ys.tolist())
        return r


_AFFINE_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
AFFINE_SHARED_CAP = 64     # (constants, ops, pool) memos kept per step cost (then they start over)


def affine_memo(step_time, c, o, top: int) -> dict:
    """The memo of :class:`Affine` (decode batch n → (α, β) or None) shared by every
    simulation of the same step cost (the function object) at equal constants (by type and
    exact value), ops and pool size: the check is a pure function of those, and the engines
    of a round-robin deployment, the evaluations of a solve and a search's candidates of one
    layout and pool repeat it (≈30 µs per batch size).  A fresh dict when the constants are
    not hashable or the cost cannot be weakly referenced."""
    try:
        ck = None if c is None else tuple(sorted(
            (k, type(v), v.hex() if isinstance(v, float) else v) for k, v in c.items()))
        key = (ck, type(o), getattr(o, "max", None), getattr(o, "min", None), getattr(o, "where", None), top)
        hash(key)
        per = _AFFINE_SHARED.get(step_time)
        if per is None:
            per = _AFFINE_SHARED[step_time] = {}
    except (TypeError, AttributeError):
        return {}
    memo = per.get(key)
    if memo is None:
        if len(per) >= AFFINE_SHARED_CAP:
            per.clear()
        memo = per[key] = {}
    return memo


def simulate(arrival, prompt, output, eng: Engine, step_time, c=None, o=None, affine: bool = True,
             max_events: int | None = None, record: bool = True, spec=None) -> SimResult:
    """The same schedule as :func:`simulate_reference`, advancing runs of identical decode
    iterations in one step (module docstring).  ``affine``: evaluate the times of a run in
    closed form α + β·context when the step cost is affine in the context (:class:`Affine`;
    equal to the direct evaluation up to rounding); False calls the step cost on every run.
    ``o`` is passed to the step cost; an iteration computed alone passes ``o.scalar`` instead
    when ``o`` has one (``ops("numpy").scalar``: the same max/min/where on Python numbers, at a
    fraction of numpy's per-call cost), and its cost is remembered by its arguments — unless
    the step cost has ``for_numbers``: then ``step_time.for_numbers(c)`` is called once and
    the callable it returns prices each such iteration, ``(prefill_tokens, decode_seqs,
    context_tokens, prefill_prefix, prefill_seqs)`` (the last two only for a cost that takes
    them) → seconds, the same value as the step cost's on Python numbers
    (:class:`plugins.serving.serving_step_core.ScalarStep`: it remembers what does not depend on the context).

    ``record=False`` keeps only what the per-request figures need (first and last token times,
    preemptions, the iteration count): the inter-token latencies and the event series come back
    empty (``SimResult.events`` still counts the events) — the same schedule and the same times,
    for a caller that reads TTFT, TPOT, end-to-end latency and the span only (the SLO search).

    An engine with another scheduling policy (prefill-only iterations, multi-step decoding, host
    time per scheduler call: :class:`Engine`'s last three fields) is simulated by
    :func:`plugins.serving.serving_sim_policy.simulate_policy`, which records everything.

    :raises LimitError: ``sim_iterations`` when the loop passes ``max_events`` turns (one per
        iteration computed alone or run of identical decodes; default: the limit in force)."""
    if not default_policy(eng):  # another engine's scheduling policy: one loop per scheduler call
        if spec is not None:
            raise SimError("speculative decoding is simulated with vLLM's v1 scheduling policy only (mixed "
                           "iterations, one step per scheduler call, no host time)")
        return simulate_policy(arrival, prompt, output, eng, step_time, c, o, max_events=max_events)
    if spec is not None:        # speculation: decode steps of unequal gains, no runs — the reference
        return simulate_reference(arrival, prompt, output, eng, step_time, c, o, spec=spec)
    A, Pa, Ga = workload_arrays(arrival, prompt, output)
    check_workload(A, Pa, Ga, eng)
    # tens of thousands of small tuples (heap entries, events) and no cycle: without the
    # collector's passes over every live object
    with no_gc():
        return _simulate(A, Pa, Ga, eng, step_time, c, o, affine, max_events, record)


def _preempt(v, prefilling: bool, t_now: float, D: int, state) -> tuple:
    """Preempt request v by recomputation (:func:`simulate`'s state): it frees its blocks, its
    computed tokens drop to 0 and it goes to the front of the waiting queue; a decoder leaves
    the histogram and the heap (its generation moves on) with its outputs so far.  Returns
    (blocks freed, the decoder's key or None): the caller updates its counts."""
    bs, comp, key, hist, gen, out, last, P, pre, waiting = state
    if prefilling:
        freed, k = -(-comp[v] // bs), None
    else:
        k = key[v]
        hist[k % bs] -= 1
        freed = -(-(k + D) // bs)
        gen[v] += 1
        out[v] = k + D - P[v] + 1
        last[v] = t_now              # a decoder emitted at the end of the previous iteration
    comp[v] = 0
    pre[v] += 1
    waiting.appendleft(v)
    return freed, k


def _simulate(A, Pa, Ga, eng: Engine, step_time, c, o, affine: bool, max_events: int | None,
              record: bool = True) -> SimResult:
    n, bs, B, S, NB = len(A), eng.block_size, eng.max_num_batched_tokens, eng.max_num_seqs, eng.blocks
    chunked = eng.enable_chunked_prefill
    extra = extra_args(step_time)
    lin = Affine(step_time, c, o, NB * bs) if affine else None
    lin_memo = lin.memo if lin is not None else None
    so = getattr(o, "scalar", o)        # one iteration at a time: the ops on Python numbers
    memo: dict = {}                     # step costs of single iterations by their arguments
    one = getattr(step_time, "for_numbers", None)
    one = one(c) if one is not None else None
    P, G = Pa.tolist(), Ga.tolist()
    order = np.argsort(A, kind="stable")
    arr = A[order].tolist() + [math.inf]
    order = order.tolist()
    comp, out, key, gen, pre = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
    # C doubles and 64-bit counts, not lists of Python objects: numpy takes them without a pass
    # over objects scattered through memory (≈0.1 s over a slo-azure search's simulations)
    first, last = array('d', [math.nan]) * n, array('d', [math.nan]) * n
    # decoding sequences, implicitly: computed = key + D
    hist = [0] * bs                     # decoders by key % bs
    heap: list = []                     # (counter value after its last step, generation, request)
    n_dec, sum_key, D = 0, 0, 0
    X = -1                              # the running request still prefilling (always the tail), or -1
    free = NB
    running: dict = {}                  # in admission order (a dict: a finish leaves in O(1))
    waiting: deque = deque()
    itl_chunks: list = []               # (values array, weight) of vectorised runs
    itl_v, itl_w, ser = array('d'), array('q'), array('d')
    t, nxt, done, it = 0.0, 0, 0, 0
    O, org, moved = 0.0, array('d', [0.0]) * n, False     # the clock counts from O (clock_origin)
    ar = np.arange(RUN_CAP, dtype=np.int64)
    push, pop = heapq.heappush, heapq.heappop
    ser_add, v_add, w_add, w_ext = ser.extend, itl_v.append, itl_w.append, itl_w.extend
    cap = current_limits().sim_iterations if max_events is None else max_events
    events = 0

    # (the loop's counters stay plain locals: a nested function changing them would make every
    # access to them, in every iteration, go through a cell)
    state = (bs, comp, key, hist, gen, out, last, P, pre, waiting)

    while done < n:
        while arr[nxt] - O <= t:
            org[order[nxt]] = O
            waiting.append(order[nxt])
            nxt += 1
        if not running and not waiting:
            a = arr[nxt]
            if a >= ORIGIN_GRID and clock_origin(a) != O:
                O, moved = clock_origin(a), True
            t = a - O
            continue
        if record:
            ser_add((O + t, len(waiting), len(running), NB - free))
        events += 1
        if events > cap:
            _too_many_events(cap, done, n, sum(pre))
        nb = hist[(-D) % bs]
        # ---- a run of identical decode iterations: no prefill, nothing admissible, no preemption
        if X < 0 and n_dec and nb <= free:
            if waiting:
                h = waiting[0]
                hn = P[h] + out[h]
                room = B - n_dec
                blocked = (len(running) >= S or (not chunked and hn > room)
                           or -(-(hn if hn < room else room) // bs) > free - nb)
                ta = math.inf
            else:
                blocked, ta = True, arr[nxt] - O
            if blocked:
                while gen[heap[0][2]] != heap[0][1]:
                    pop(heap)
                k = heap[0][0] - D                        # up to the first finish
                q, rem = divmod(free, n_dec)
                if q * bs < k:                            # the pool may run out first
                    acc, j, d0 = 0, 0, -D
                    while True:
                        acc += hist[(d0 - j) % bs]
                        if acc > rem:
                            break
                        j += 1
                    k = min(k, q * bs + j)
                if k > RUN_CAP:
                    k = RUN_CAP
                ab = lin_memo.get(n_dec, False) if lin is not None else None
                if ab is False:
                    ab = lin(n_dec)
                if ab is not None and (k <= SHORT_RUN or not record and (
                        k <= BARE_RUN or ta - t < BARE_RUN * (ab[0] + ab[1] * (sum_key + n_dec * D)))):
                    # short run (or, without recording, one that ends within BARE_RUN steps of
                    # at least α each): a Python loop, closed form
                    a0 = ab[0] + ab[1] * (sum_key + n_dec * D)
                    b1 = ab[1] * n_dec
                    j, tt = 0, t
                    if not record:                        # the times alone
                        while j < k and tt < ta:
                            tt += a0 + b1 * j
                            j += 1
                    elif k <= 24:
                        while j < k and tt < ta:
                            dt = a0 + b1 * j
                            tt += dt
                            v_add(dt)
                            j += 1
                        w_ext([n_dec] * j)                # each value's weight: the run's decodes
                    else:                                 # the vectorised path's values, in its place
                        dts = []
                        d_add = dts.append
                        while j < k and tt < ta:
                            dt = a0 + b1 * j
                            tt += dt
                            d_add(dt)
                            j += 1
                        itl_chunks.append((dts, n_dec))
                    k = j
                else:
                    if ab is not None:
                        dts = (ab[0] + ab[1] * (sum_key + n_dec * D)) + (ab[1] * n_dec) * ar[:k]
                    else:
                        dts = np.asarray(step_time(c, 0, n_dec, sum_key + n_dec * (D + ar[:k]), o), dtype=float)
                        if dts.shape != (k,):
                            dts = np.broadcast_to(dts, (k,)).copy()
                    ends = dts.copy()
                    ends[0] += t
                    np.cumsum(ends, out=ends)             # t + dt0 + dt1 + …, in iteration order
                    if ta < math.inf:                     # iterations that start before the next arrival
                        k = 1 + int(np.searchsorted(ends[:k - 1], ta, side="left"))
                    if record:
                        itl_chunks.append((dts[:k], n_dec))
                    tt = float(ends[k - 1])
                # blocks allocated: n per bs iterations, and the sequences whose key ≡ −D − j
                # (mod bs) for the part (j = 0 … part − 1): a window of the histogram ending at −D
                full, part = divmod(k, bs)
                used = full * n_dec
                if part:
                    hi = (-D) % bs + 1
                    used += sum(hist[hi - part:hi]) if hi >= part else sum(hist[:hi]) + sum(hist[hi - part:])
                free -= used
                D += k
                it += k
                t = tt
                while heap and heap[0][0] <= D:           # finishes at the end of the run
                    e, g, r = pop(heap)
                    if g != gen[r]:
                        continue
                    kr = key[r]
                    n_dec -= 1
                    sum_key -= kr
                    hist[kr % bs] -= 1
                    free += -(-(kr + D) // bs)
                    out[r] = G[r]
                    last[r] = t
                    del running[r]
                    done += 1
                continue
        # ---- one iteration, the general rules
        preempted = False
        if nb > free:                     # decoders in order; preempt from the tail when the pool runs out
            i = 0
            lst = list(running)
            while i < len(lst):
                r = lst[i]
                if r == X:
                    break
                if (key[r] + D) % bs == 0:
                    gone = False
                    while free < 1:
                        v = lst.pop()
                        del running[v]
                        freed, kv = _preempt(v, v == X, t, D, state)
                        free += freed
                        if v == X:
                            X = -1
                        else:
                            n_dec -= 1
                            sum_key -= kv
                        preempted = True
                        if v == r:
                            gone = True
                            break
                    if gone:
                        break
                    free -= 1
                i += 1
        else:
            free -= nb
        budget = B - n_dec
        sched = []                        # prefill chunks: (request, tokens)
        prefix = ends_pf = 0              # ends_pf: chunks that complete their prompt (they emit logits)
        if X >= 0 and budget > 0:
            new = min(P[X] + out[X] - comp[X], budget)
            need = -(-(comp[X] + new) // bs) - (-(-comp[X] // bs))
            if need > free:
                running.popitem()         # X is the tail: it is its own victim
                free += _preempt(X, True, t, D, state)[0]
                X = -1
                preempted = True
            else:
                free -= need
                sched.append((X, new))
                budget -= new
                prefix = comp[X]
                if comp[X] + new == P[X] + out[X]:
                    ends_pf += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < S:
                r = waiting[0]
                new = P[r] + out[r]
                if not chunked and new > budget:
                    break
                if new > budget:
                    new = budget
                need = -(-new // bs)
                if need > free:
                    break
                waiting.popleft()
                free -= need
                running[r] = None
                sched.append((r, new))
                budget -= new
                if comp[r] + new == P[r] + out[r]:
                    ends_pf += 1
        pf = B - n_dec - budget
        ctx = sum_key + n_dec * D
        if extra and not ends_pf and not n_dec:
            ends_pf = None                # no logits at all: leave the cost its default (one head pass)
        if one is not None:               # the cost's own evaluator for Python numbers
            dt = float(one(pf, n_dec, ctx, prefix, ends_pf) if extra else one(pf, n_dec, ctx))
        elif (dt := memo.get(key_ := (pf, n_dec, ctx, prefix, ends_pf) if extra else (pf, n_dec, ctx))) is None:
            # the step cost is a function of its arguments: iterations repeat
            if extra:
                dt = float(step_time(c, pf, n_dec, ctx, so, prefill_prefix=prefix, prefill_seqs=ends_pf))
            else:
                dt = float(step_time(c, pf, n_dec, ctx, so))
            if len(memo) >= MEMO_CAP:
                memo.clear()
            memo[key_] = dt
        t_end = t + dt
        it += 1
        if n_dec and record:
            v_add(dt)
            w_add(n_dec)
        D += 1
        if sched and sched[0][0] == X:
            X = -1
        for r, new in sched:
            comp[r] += new
            if comp[r] == P[r] + out[r]:
                out[r] += 1
                if out[r] == 1:
                    first[r] = t_end
                elif record:              # resumed after a preemption: the gap since its last token
                    v_add(t_end - last[r])
                    w_add(1)
                last[r] = t_end
                if out[r] == G[r]:
                    free += -(-comp[r] // bs)
                    del running[r]
                    done += 1
                else:                     # a decoder from now on
                    k = comp[r] - D
                    key[r] = k
                    n_dec += 1
                    sum_key += k
                    hist[k % bs] += 1
                    push(heap, (P[r] + G[r] - 1 - k, gen[r], r))
            else:
                X = r
        while heap and heap[0][0] <= D:
            e, g, r = pop(heap)
            if g != gen[r]:
                continue
            kr = key[r]
            n_dec -= 1
            sum_key -= kr
            hist[kr % bs] -= 1
            free += -(-(kr + D) // bs)
            out[r] = G[r]
            last[r] = t_end
            del running[r]
            done += 1
        t = t_end
    vals = np.concatenate([np.frombuffer(itl_v, dtype=float)] + [np.asarray(v, dtype=float) for v, _ in itl_chunks])
    wts = np.concatenate([np.frombuffer(itl_w, dtype=np.int64),
                          np.repeat(np.array([w for _, w in itl_chunks], dtype=np.int64),
                                    [len(v) for v, _ in itl_chunks])])
    return sim_result(A, Pa, Ga, first, last, pre, vals, wts, ser, it, eng, events, org if moved else None)


def _too_many_events(cap: int, done: int, n: int, preemptions: int):
    raise LimitError("sim_iterations", f"the simulation passed {cap:,} scheduler iterations computed one at a time "
                     f"({done:,} of {n:,} requests finished, {preemptions:,} preemptions so far)")


def simulate_replicas(arrival, prompt, output, eng: Engine, step_time, c=None, o=None, replicas: int = 1,
                      record: bool = True, spec=None, engine=None):
    """``replicas`` independent engines behind a round-robin dispatcher (request i, in arrival
    order, to engine i mod replicas): each simulated alone, the results merged.  ``record``:
    as :func:`simulate` (False: no inter-token latencies, no event series).  ``engine``: the
    simulation of one engine instead of :func:`simulate`, called as ``engine(indices of its
    requests, max_events)`` (max_events None: the limit in force) → its :class:`SimResult`."""
    if engine is None:
        def engine(idx, left):
            return simulate(A[idx], P[idx], G[idx], eng, step_time, c, o, max_events=left, record=record, spec=spec)
    A, P, G = workload_arrays(arrival, prompt, output)
    if replicas <= 1:
        return engine(np.arange(len(A)), None)
    order = np.argsort(A, kind="stable")
    replicas = min(replicas, len(A))     # engines beyond the request count receive nothing
    parts, left = [], current_limits().sim_iterations       # one budget for all the engines
    for idx in (order[k::replicas] for k in range(replicas)):
        if idx.size:
            parts.append(engine(idx, left))
            left -= parts[-1].events
    first, last, pre = np.empty(len(A)), np.empty(len(A)), np.empty(len(A), dtype=np.int64)
    origin = np.zeros(len(A)) if any(r.origin is not None for r in parts) else None
    for k, r in enumerate(parts):
        idx = order[k::replicas]
        first[idx], last[idx], pre[idx] = r.first, r.last, r.preemptions
        if r.origin is not None:
            origin[idx] = r.origin
    events = sum(r.events for r in parts)
    if not record:
        empty = np.empty(0)
        return SimResult(A, P, G, first, last, pre, empty, empty.astype(np.int64), empty,
                         empty.astype(np.int64), empty.astype(np.int64), empty.astype(np.int64),
                         sum(r.iterations for r in parts), eng.blocks * len(parts), eng.block_size, events=events,
                         origin=origin)
    # the deployment's state: each engine's step function at every event of any engine, summed
    T = np.unique(np.concatenate([r.series_t for r in parts]))
    tot = np.zeros((3, T.size), dtype=np.int64)
    for r in parts:
        i = np.searchsorted(r.series_t, T, side="right") - 1
        ok = i >= 0
        for row, col in enumerate((r.series_waiting, r.series_running, r.series_kv)):
            tot[row, ok] += col[i[ok]]
    return SimResult(A, P, G, first, last, pre, np.concatenate([r.itl_values for r in parts]),
                     np.concatenate([r.itl_weights for r in parts]), T, tot[0], tot[1], tot[2],
                     sum(r.iterations for r in parts), eng.blocks * len(parts), eng.block_size, events=events,
                     origin=origin)

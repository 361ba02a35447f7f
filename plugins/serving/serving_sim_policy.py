"""Scheduling policies beyond vLLM's v1 scheduler, and closed-loop clients, in the
continuous-batching simulation: one Python iteration per scheduler call.

:mod:`plugins.serving.serving_sim_core` simulates vLLM's v1 scheduler, where a prefill chunk
shares each iteration with the running decodes and the host work of a step is hidden behind
the GPU.  Engines and releases differ on three points, each a field of the engine
(:class:`plugins.serving.serving_sim_base.Engine`, from the presets of
``specs/catalog/engines.plan``):

* ``mixed_batches`` — whether an iteration mixes prefill and decode.  vLLM's v1 scheduler does
  (one token budget for both), and so does vLLM 0.x with chunked prefill and TensorRT-LLM's
  in-flight batching.  vLLM 0.4 – 0.6 without chunked prefill runs prefill-only iterations:
  ``Scheduler._schedule_default`` (``vllm/core/scheduler.py``) schedules the waiting prompts
  first and "Don't schedule decodes if prefills are scheduled".  SGLang does the same unless
  ``--enable-mixed-chunk``: ``ModelTpServer.forward_step`` (``python/sglang/srt/managers/
  tp_worker.py``, 0.2 – 0.3; ``Scheduler.get_next_batch_to_run`` later) runs a new prefill batch
  when there is one, else the decode batch.  With ``mixed_batches`` false an iteration
  prefills — the running request still in a chunked prefill, then waiting requests admitted as
  usual — whenever there is prefill work it can schedule, and every running decode waits; else
  it decodes every running sequence.
* ``scheduler_steps`` — vLLM's multi-step scheduling (``--num-scheduler-steps n``, vLLM 0.6):
  a decode batch runs n forward steps before the scheduler runs again
  (``LLMEngine.step``: "Skip the scheduler if there are any remaining steps in the seq groups
  … the scheduler is only called again when the current batch has completed"), and its outputs
  are handed out when the n steps end (``ctx.append_output`` only when no step remains), so a
  request's tokens reach the client n at a time.  A batch that prefills runs one step
  (``init_multi_step(num_scheduler_steps=self._get_num_lookahead_slots(is_prefill=True) + 1)``
  with no lookahead slot for a prefill).  A new request waits for the running batch to end.
  Here a decode run is ``min(n, the most tokens any of its sequences still needs)`` steps; a
  sequence that finishes inside a run stays in the batch to its end (the batch is fixed for
  the run), and its KV blocks for the run's tokens are allocated when the run is scheduled
  (vLLM's lookahead slots).
* ``scheduler_overhead`` — host time per scheduler call that the GPU waits for: the scheduler,
  the preparation of the step's inputs and the processing of its outputs, run synchronously
  between forward passes.  It is added once per call (one prefill iteration, or one decode run
  of n steps).

**Closed-loop clients** (``concurrency`` N, as a benchmark's ``--max-concurrency`` with every
request ready at once): the requests are sent in arrival order, at most N in flight; a request
is sent at its arrival time or, when N are in flight, the moment one of them has its last
token.  Its latencies count from when it was sent (the result's ``arrival``), as the client
times them.

Latencies: TTFT is the end of the iteration that completes the prompt (a prefill runs one
step, so its first token is handed out at once); a decode run hands out its tokens at its end,
so TPOT spans whole runs and ITL counts one gap per hand-out, as a streaming client sees it
(with one step per run, one gap per token, as :mod:`plugins.serving.serving_sim_core`).
With ``mixed_batches`` true, one step per call, no host time and open-loop arrivals the
schedule and the times are those of :func:`plugins.serving.serving_sim_core.simulate_reference`
(a test checks it).  Not combined here: speculative decoding and prefix caching.
"""
from __future__ import annotations

import heapq
import math
from collections import deque

from dsl.plugin import LimitError, current_limits

from plugins.serving.serving_sim_base import (LazyNumpy, SimResult, check_workload, clock_origin, sim_result,
                                              step_pricer, workload_arrays)


np = LazyNumpy(globals())     # numpy, imported on first use


def default_policy(eng) -> bool:
    """True when ``eng`` schedules as vLLM's v1 scheduler: mixed iterations, one step per
    scheduler call, no host time (the simulators of :mod:`plugins.serving.serving_sim_core`)."""
    return eng.mixed_batches and eng.scheduler_steps == 1 and eng.scheduler_overhead == 0


def simulate_policy(arrival, prompt, output, eng, step_time, c=None, o=None, concurrency: int | None = None,
                    max_events: int | None = None) -> SimResult:
    """The continuous-batching simulation under ``eng``'s scheduling policy (module docstring),
    one Python iteration per scheduler call; ``concurrency``: closed-loop clients (at most that
    many requests in flight), else every request arrives at its time.

    :raises LimitError: ``sim_iterations`` when the scheduler is called more than ``max_events``
        times (default: the limit in force)."""
    A, Pa, Ga = workload_arrays(arrival, prompt, output)
    check_workload(A, Pa, Ga, eng)
    if concurrency is not None and concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    n, bs, B, S = len(A), eng.block_size, eng.max_num_batched_tokens, eng.max_num_seqs
    k_max, host, mixed = max(1, int(eng.scheduler_steps)), float(eng.scheduler_overhead), eng.mixed_batches
    price = step_pricer(step_time, c, o)
    P, G, At = Pa.tolist(), Ga.tolist(), A.tolist()
    order = np.argsort(A, kind="stable").tolist()
    sent = list(At)                                # when each request is sent (closed loop: a slot frees)
    slots = [-math.inf] * (concurrency or 0)       # closed loop: when each client became free (a heap)
    comp, out, held, pre = [0] * n, [0] * n, [0] * n, [0] * n
    prefilling = [True] * n
    first, last = [math.nan] * n, [math.nan] * n
    free = eng.blocks
    running: list[int] = []
    waiting: deque = deque()
    itl: dict = {}                                 # inter-token gap -> deliveries
    ser: list = []
    t, nxt, done, it, calls = 0.0, 0, 0, 0, 0
    O, org, moved = 0.0, [0.0] * n, False          # the clock counts from O (clock_origin)
    cap = current_limits().sim_iterations if max_events is None else max_events
    victims = 0                                    # preemptions so far

    def preempt_tail():
        nonlocal free, victims
        victims += 1
        v = running.pop()
        free += held[v]
        held[v], comp[v], prefilling[v] = 0, 0, True
        pre[v] += 1
        waiting.appendleft(v)
        return v

    def grow(r, tokens) -> bool:
        """Blocks for request r to hold ``tokens`` computed tokens, preempting from the tail of
        the running list; False when r itself was preempted."""
        nonlocal free
        while True:
            need = -(-tokens // bs) - held[r]
            if need <= free:
                free -= need
                held[r] += need
                return True
            if preempt_tail() == r:
                return False

    while done < n:
        while nxt < n and At[order[nxt]] - O <= t and (concurrency is None or (slots and slots[0] - O <= t)):
            r = order[nxt]
            if concurrency is not None:
                sent[r] = max(At[r], heapq.heappop(slots))
            org[r] = O
            waiting.append(r)
            nxt += 1
        if not running and not waiting:
            a = max(At[order[nxt]], slots[0]) if concurrency is not None else At[order[nxt]]
            if clock_origin(a) != O:
                O, moved = clock_origin(a), True
            t = a - O
            continue
        calls += 1
        if calls > cap:
            raise LimitError("sim_iterations", f"the simulation passed {cap:,} scheduler calls ({done:,} of {n:,} "
                             f"requests finished, {sum(pre):,} preemptions so far)")
        ser.extend((O + t, len(waiting), len(running), eng.blocks - free))
        budget, sched, before = B, [], victims
        # running requests first, in admission order: every one (mixed), or those still in
        # their prefill (prefill-only iterations); a decoder takes 1 token of the budget
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            if mixed or prefilling[r]:
                new = min(P[r] + out[r] - comp[r], budget)
                if not grow(r, comp[r] + new):
                    break
                sched.append((r, new))
                budget -= new
            i += 1
        if victims == before:                      # no admission in an iteration that preempted
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
        pf = [(r, new) for r, new in sched if prefilling[r]]
        if not pf and (not mixed or k_max > 1):    # a decode run: every running sequence, blocks for its steps
            sched, i = [], 0
            while i < len(running):
                r = running[i]
                if not grow(r, comp[r] + min(k_max, G[r] - out[r])):
                    break
                sched.append((r, 1))
                i += 1
        dec = [r for r, _ in sched if not prefilling[r]]
        assert sched, "an iteration scheduled nothing"
        # the forward steps: one when anything prefills, else a run of up to k_max decode steps
        k = 1 if pf or k_max == 1 else min(k_max, max(G[r] - out[r] for r in dec))
        prefix = sum(comp[r] for r, _ in pf)
        ends = sum(1 for r, new in pf if comp[r] + new == P[r] + out[r])
        nd, ctx = len(dec), sum(comp[r] for r in dec)
        dt = host + price(sum(new for _, new in pf), nd, ctx, prefix, ends)
        for j in range(1, k):
            dt += price(0, nd, ctx + j * nd, 0, 0)
        t_end = t + dt
        it += k
        for r, new in pf:
            comp[r] += new
            if comp[r] == P[r] + out[r]:
                out[r] += 1
                prefilling[r] = False
                if out[r] == 1:
                    first[r] = t_end
                else:                              # resumed after a preemption: the gap since its last token
                    itl[t_end - last[r]] = itl.get(t_end - last[r], 0) + 1
                last[r] = t_end
        for r in dec:
            got = min(k, G[r] - out[r])
            comp[r] += got
            out[r] += got
            gap = t_end - last[r]
            itl[gap] = itl.get(gap, 0) + (got if k == 1 else 1)
            last[r] = t_end
        for r, _ in sched:
            if out[r] == G[r] and held[r]:
                free += held[r]
                held[r] = 0
                running.remove(r)
                done += 1
                if concurrency is not None:
                    heapq.heappush(slots, O + t_end)
        t = t_end
    vals = np.fromiter(itl.keys(), dtype=float, count=len(itl))
    wts = np.fromiter(itl.values(), dtype=np.int64, count=len(itl))
    origin = org if moved else None
    return sim_result(np.asarray(sent, dtype=float), Pa, Ga, first, last, pre, vals, wts, ser, it, eng,
                      events=calls, origin=origin)

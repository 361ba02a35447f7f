"""An SLO search over serving deployments: the GPU type, tensor (tp) and pipeline (pp)
parallelism, replicas, the scheduler's ``max_num_seqs`` and chunk budget
(``max_num_batched_tokens``), and disaggregated prefill/decode pools — the configurations that
meet a TTFT-p95 and a TPOT-p95 target on a request trace at the fewest GPUs or the lowest cost
per million tokens, with their Pareto front.

The question is the one NVIDIA AIConfigurator answers (``aiconfigurator cli``: every
parallel layout of aggregated workers, and of xPyD disaggregated replicas — x prefill workers,
y decode workers — under TTFT/TPOT limits, ranked with a Pareto front of tokens/s/GPU against
tokens/s/user); here the workload is a trace rather than one (input, output) length pair, so the
latencies are percentiles of a simulation.

**Method: screen everything, simulate the few.**

1. *Candidates.* The product of the lists: aggregated (device, tp, pp, replicas, max_num_seqs,
   chunk) and, when ``prefill_replicas``/``decode_replicas`` are given, disaggregated (device,
   tp, x prefill replicas, y decode replicas, max_num_seqs, chunk; pp = 1), each at every number
   of drafted tokens k of speculative decoding (k = 0: none; what k > 0 and prefix caching change
   in the steps below: :mod:`plugins.serving.serving_search_spec`).  GPUs are tp·pp·replicas and
   tp·(x + y).
2. *Memory.* Each (device, tp, pp) is sized once with the formulas of ``use engine``
   (:func:`plugins.serving.serving_engine.per_gpu_sizes`: weights, KV bytes per token per GPU and the
   activation reserve per profiled token), then the KV tokens of every candidate follow in
   numpy from its max_num_seqs and chunk.  A layout that does not fit — tp not dividing the
   heads, pp above the layers, a KV budget ≤ 0, fewer KV tokens (per pipeline micro-batch) than
   ``max_model_len``, a chunk
   below max_num_seqs — is skipped and counted by reason, never an error.
3. *Screen* (vectorised numpy over all candidates of a layout, the step model of
   :func:`plugins.serving.serving_step_core.step_time`).  With λ the trace's arrival rate split evenly over
   the engines, P̄ and Ḡ the mean input and output lengths: an aggregated engine in steady
   state runs N = λ·Ḡ·t decoding sequences and prefills λ·P̄·t tokens per step of time t,
   t = step(λ·P̄·t, N, N·(P̄ + Ḡ/2)) — a fixed point found by iteration from the empty step
   (it converges from below when the engine keeps up; when it does not, the candidate is
   overloaded).  λ is the rate of the trace's busiest minute (its input + output tokens against
   the mean minute's): a deployment that keeps up with the mean but not with the bursts queues.
   Also overloaded: N above max_num_seqs, N·(P̄ + Ḡ) above the KV tokens, or
   the tokens of a step above the chunk.  Estimated TPOT = t; estimated TTFT = the iterations
   the p95 prompt needs at the chunk left beside the decodes, plus one step, over (1 − u) with
   u the share of that chunk the arriving prompts use (a queue of prompts waiting for the
   budget).  A disaggregated prefill engine is an M/G/1 queue of prefills (service time of each of the trace's prompts,
   chunked; estimated TTFT = the p95 prompt's prefill + 3 × the Pollaczek–Khinchine mean wait);
   a decode engine the fixed point above without prefills, its TPOT plus the mean prompt's KV
   transfer spread over Ḡ tokens.  Pipeline parallelism: a replica runs pp micro-batches in
   flight (pp virtual engines, each with 1/pp of the KV pool and the full max_num_seqs and
   chunk, as vLLM's pipeline-parallel scheduler), each step a pass over all stages — the tp
   step of the whole model plus (pp − 1) activation sends on the TP link.  A burst (the trace
   spans less than one mean request alone on the layout, :func:`lone_request_time`; all at
   t = 0 in the limit) has no steady state: it is estimated as the finite work it is
   (:func:`_burst`) and the simulation decides.
4. *Simulate* (:func:`plugins.serving.serving_sim_core.simulate_replicas`, the whole trace, round-robin
   dispatch) the candidates the screen ranks first: in the order (objective, estimated latency
   relative to the targets) those whose estimates are within ``screen_margin`` of both targets,
   until ``simulate`` are simulated and one meets the targets (at most 3 × ``simulate``); and
   the best-estimated candidate (at the busiest minute's load, then at the mean load) of each
   of up to ``simulate`` / 2 cheaper objective levels the screen rejected (an independent look
   below the screen's line).  A disaggregated candidate
   is two simulations: the prefill pool (each request's prompt and first token; TTFT), then
   the decode pool (requests arriving when their KV has crossed ``kv_link`` — one ``send`` per
   TP rank of its shard, :func:`plugins.hardware.collectives.collective_time` — already prefilled:
   their transferred tokens cost no compute, only KV blocks; the decode budget is at least the
   longest prompt so a transfer lands in one iteration).  TPOT = (t_G − t_1)/(G − 1) with t_1
   the prefill pool's first token (DistServe's definition), so the transfer counts.  The work
   is bounded by the limit ``search_requests`` on the requests simulated in all (a
   disaggregated candidate counts both pools): the first candidate that would pass it ends the
   simulations (a warning says so) — a count, not a clock, so the result does not depend on
   the machine.
5. *Choose*: among the simulated candidates meeting both p95 targets, the least objective
   (``"gpus"``, or ``"cost"``: GPUs × ``gpu_hour`` over the trace's duration per million of its
   input + output tokens), ties to fewer GPUs, then the most headroom (the lower of TTFT p95 /
   target and TPOT p95 / target, the larger of the two counting), then the candidate order —
   always a front member (whatever dominates a configuration that meets the targets meets them).
   The Pareto front: the simulated candidates no other
   simulated candidate dominates in (objective, TTFT p95, TPOT p95) — no worse in all three,
   better in one.

Deterministic: no randomness; candidates are enumerated in the order of the lists (an item listed
twice is searched once, :func:`distinct`).  Speed
(``benchmarks/serving_search_azure.py``): the screen prices thousands of candidates in
a fraction of a second (3,456 configurations: about 0.3 s); each simulation of the
19,366-request Azure conversation trace about 0.1–0.4 s (run without recording the
inter-token latencies and the event series, which the search does not read:
``simulate(record=False)``), so a search's time is set by its ``simulate`` budget and the limit
``search_requests``.

References: NVIDIA AIConfigurator 0.12 (``aiconfigurator/sdk/pareto_analysis.py``: aggregated
and xPyD disaggregated search, Pareto front); Zhong et al. 2024, "DistServe: Disaggregating
Prefill and Decoding for Goodput-optimized Large Language Model Serving" (OSDI; TTFT/TPOT
targets, prefill and decode pools, the KV transfer); Patel et al. 2024, "Splitwise" (ISCA);
Kleinrock 1975, "Queueing Systems" vol. 1 (the Pollaczek–Khinchine mean wait of M/G/1).

This module is the search alone (candidates, a workload and the targets in, a
:class:`SearchResult` out); the ``use serving_search`` block that reads them from a plan, and
its table, are :mod:`plugins.serving.serving_search`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from dsl.plugin import current_executor, current_limits

from plugins.serving import serving_sim_core as sim
from plugins.hardware.collectives import collective_time
from plugins.training.layout_model import ops
from plugins.serving.serving_sim_base import LazyNumpy
from plugins.serving.serving_step_core import ScalarStep, step_time
from plugins.serving import serving_search_spec as ssp


np = LazyNumpy(globals())     # numpy, imported on first use

SCREEN_ITERATIONS = 80
SCREEN_WINDOW = 60.0       # s: the screen prices the busiest minute's load
SIMULATE_DEFAULT = 4       # configurations simulated after the screen (the block's default)
REASONS = ("tp does not divide the heads", "pp above the layers", "does not fit (KV budget)",
           "KV below max_model_len", "chunk below max_num_seqs", "tp above one host's GPUs",
           "speculation with pp > 1", "draft does not split at this tp")


# ---------------------------------------------------------------- data
@dataclass
class Layout:
    """One (device, tp, pp): what every candidate on it shares.  Memory terms in bytes;
    ``c`` the step constants at tp (floats, :func:`plugins.serving.serving_step_core.constants`);
    ``link`` the TP group's link (dict, for the PP sends), ``price`` per GPU-second or None;
    ``reason`` set when no candidate on it can run.  With speculation: the draft's step
    constants at tp (``draft_c``), weights per GPU and KV bytes per token per GPU, or
    ``draft_reason`` when the draft cannot run at this tp."""

    device: str
    tp: int
    pp: int
    c: dict | None = None
    util: float = 0.9
    frac_of: str = "total"
    reserve: bool = True
    memory: float = 0.0
    weights: float = 0.0
    runtime: float = 0.0
    act_per_token: float = 0.0
    sampler_per_seq: float = 0.0
    kv_per_token: float = 1.0
    block_size: int = 16
    link: dict | None = None
    price: float | None = None
    reason: str = ""
    draft_c: dict | None = None
    draft_weights: float = 0.0
    draft_kv_per_token: float = 0.0
    draft_reason: str = ""
    scalar_decode: ScalarStep | None = field(default=None, repr=False, compare=False)   # decode_fn's
    step_cost: object = field(default=None, repr=False, compare=False)   # step_fn(g), made once

    def kv_tokens(self, S, T, draft: bool = False):
        """KV tokens of one replica at max_num_seqs S and chunk T (numpy): the engine's
        budget, whole blocks of block_size tokens (0 where the budget is not positive).
        ``draft``: the draft is loaded too — its weights off the budget, its KV in every block."""
        S, T = np.asarray(S, dtype=float), np.asarray(T, dtype=float)
        act = np.maximum(T * self.act_per_token, np.minimum(S, T) * self.sampler_per_seq) if self.reserve \
            else 0.0 * T
        weights = self.weights + self.draft_weights if draft else self.weights
        per_token = self.kv_per_token + self.draft_kv_per_token if draft else self.kv_per_token
        if self.frac_of == "free":
            budget = self.util * (self.memory - weights - act - self.runtime)
        else:
            budget = self.util * self.memory - weights - act - self.runtime
        blocks = np.floor(np.maximum(budget, 0.0) / (self.block_size * per_token))
        return (blocks * self.block_size).astype(np.int64)


@dataclass
class Workload:
    """The trace: arrival times (s), input and output tokens per request; with prefix caching
    each request's block keys (``keys``, :func:`plugins.serving.serving_prefix_cache.block_keys`
    of the engine's blocks) and their index for the screen (``prefix``)."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    keys: list | None = None
    prefix: object = field(default=None, repr=False)

    def with_keys(self, keys, block_size: int, ready=0.0) -> "Workload":
        """The same requests with prefix caching on: their block keys and the screen's index
        (``ready``: when after its arrival a request's answer blocks are cached,
        :class:`plugins.serving.serving_search_spec.PrefixIndex`)."""
        return Workload(self.arrival, self.prompt, self.output, keys,
                        ssp.PrefixIndex(keys, self.prompt, self.arrival, block_size, ready))

    @property
    def span(self) -> float:
        return max(float(self.arrival.max() - self.arrival.min()), 1e-9)

    @property
    def rate(self) -> float:
        return len(self.arrival) / self.span

    def peak_factor(self, window: float = 60.0) -> float:
        """Tokens (input + output) arriving in the busiest ``window`` seconds over the mean
        window's (≥ 1; 1 for a trace shorter than two windows)."""
        if self.span < 2 * window:
            return 1.0
        b = np.floor((self.arrival - self.arrival.min()) / window).astype(np.int64)
        tok = np.bincount(b, weights=(self.prompt + self.output).astype(float))
        full = tok[:-1] if tok.size > 1 else tok           # the last window is partial
        return max(float(full.max()) / float(full.mean()), 1.0)


@dataclass
class SearchResult:
    """Columns over every candidate (numpy arrays; see :data:`COLUMNS`), the indices simulated
    (``simulated``, with their figures in ``sim``), the Pareto front among them and the chosen
    candidate (index or None)."""

    layouts: list
    cols: dict
    simulated: list = field(default_factory=list)
    sim: dict = field(default_factory=dict)
    front: list = field(default_factory=list)
    chosen: int | None = None
    meta: dict = field(default_factory=dict)
    spec: ssp.SearchSpec | None = None

    def __len__(self):
        return len(self.cols["g"])

    def row(self, i: int) -> dict:
        """The candidate's settings and figures (estimates, and the simulation's when run)."""
        g = self.layouts[int(self.cols["g"][i])]
        disagg = bool(self.cols["disagg"][i])
        out = {"index": int(i), "device": g.device, "tp": g.tp, "pp": g.pp, "disaggregated": disagg,
               "replicas": int(self.cols["r"][i]), "prefill_replicas": int(self.cols["xp"][i]),
               "decode_replicas": int(self.cols["yd"][i]), "max_num_seqs": int(self.cols["S"][i]),
               "max_num_batched_tokens": int(self.cols["T"][i]), "gpus": int(self.cols["gpus"][i]),
               "kv_tokens": int(self.cols["kv"][i]), "est_ttft": float(self.cols["est_ttft"][i]),
               "est_tpot": float(self.cols["est_tpot"][i]), "reason": str(self.cols["reason"][i]),
               "spec_tokens": int(self.cols["k"][i])}
        out["accepted_tokens_per_step"] = self.spec.E[out["spec_tokens"]] if self.spec is not None else 1.0
        out.update(self.sim.get(int(i), {}))
        return out


# ---------------------------------------------------------------- candidates
def candidates(layouts, replicas, seqs, chunks, prefill_replicas=(), decode_replicas=(), ks=(0,)):
    """Column arrays of every candidate, in the order of the lists: for each layout its
    aggregated candidates (replicas × max_num_seqs × chunk × drafted tokens k), then (pp = 1
    layouts, when both pool lists are given) its disaggregated ones (x × y × max_num_seqs ×
    chunk × k); k = 0 is no speculation."""
    rows = []
    for gi, g in enumerate(layouts):
        for r in replicas:
            for S in seqs:
                for T in chunks:
                    for k in ks:
                        rows.append((gi, 0, r, 0, 0, S, T, k))
        if g.pp == 1 and prefill_replicas and decode_replicas:
            for x in prefill_replicas:
                for y in decode_replicas:
                    for S in seqs:
                        for T in chunks:
                            for k in ks:
                                rows.append((gi, 1, 0, x, y, S, T, k))
    a = np.array(rows, dtype=np.int64).reshape(-1, 8)
    cols = {k: a[:, j] for j, k in enumerate(("g", "disagg", "r", "xp", "yd", "S", "T", "k"))}
    tp = np.array([g.tp for g in layouts], dtype=np.int64)[cols["g"]]
    pp = np.array([g.pp for g in layouts], dtype=np.int64)[cols["g"]]
    cols["gpus"] = np.where(cols["disagg"] == 1, tp * (cols["xp"] + cols["yd"]), tp * pp * cols["r"])
    return cols


def kv_transfer_time(c, prompt_tokens, link, o=None):
    """Seconds to move one request's prompt KV from a prefill to a decode engine: each TP rank
    sends its shard, prompt_tokens · KV bytes per token per GPU, over ``link`` at once
    (:func:`plugins.hardware.collectives.collective_time` "send": launch + latency + bytes /
    (bandwidth · efficiency))."""
    o = o or ops("numpy")
    return collective_time("send", 2, np.asarray(prompt_tokens, dtype=float) * c["kv_bytes_per_token"], link, o)


def pp_send_time(g: Layout, tokens, o):
    """(pp − 1) activation sends of a step's tokens (h 16-bit values each) on the TP link."""
    if isinstance(tokens, (int, float)):         # one value (the simulator's iterations)
        return 0.0 if g.pp <= 1 else (g.pp - 1) * collective_time("send", 2, float(tokens) * 2.0 * g.c["h"],
                                                                   g.link, o)
    if g.pp <= 1:
        return 0.0 * np.asarray(tokens, dtype=float)
    size = np.asarray(tokens, dtype=float) * 2.0 * g.c["h"]
    return (g.pp - 1) * collective_time("send", 2, size, g.link, o)


def step_fn(g: Layout):
    """The step cost of one (virtual) engine of layout g, as serving_sim calls it; its
    ``for_numbers(c)`` is the same cost of one iteration on Python numbers (the simulator's
    hook, see :func:`plugins.serving.serving_sim_core.simulate`)."""
    py = ops("python")

    def plus_sends(t, T: int) -> float:
        """One iteration of T tokens on Python numbers: its step time plus the stage sends
        (without numpy's per-call cost)."""
        return float(t + pp_send_time(g, T, py)) if T > 0 else float(t)

    def numbers(c):
        one = ScalarStep.of(c)
        if g.pp <= 1:
            return one
        return lambda P, D, C, K=0, ps=None: plus_sends(one(P, D, C, K, ps), P + D)

    def f(c, prefill_tokens, decode_seqs, context_tokens, o=None, prefill_prefix=0, prefill_seqs=None):
        o = o or ops("numpy")
        t = step_time(c, prefill_tokens, decode_seqs, context_tokens, o, prefill_prefix, prefill_seqs)
        if g.pp > 1 and all(isinstance(x, int) for x in (prefill_tokens, decode_seqs, context_tokens)):
            return plus_sends(t, prefill_tokens + decode_seqs)
        if g.pp > 1:
            T = np.asarray(prefill_tokens) + np.asarray(decode_seqs)
            t = t + np.where(T > 0, pp_send_time(g, T, o), 0.0)
            if np.ndim(t) == 0:
                t = float(t)
        return t
    f.for_numbers = numbers
    return f


def decode_only_step(c, prefill_tokens, decode_seqs, context_tokens, o=None):
    """A decode pool's step: transferred prompt tokens cost no compute (their KV arrived by
    transfer), the decodes the engine's step."""
    return step_time(c, 0 * np.asarray(prefill_tokens), decode_seqs, context_tokens, o)


def decode_fn(g: Layout):
    """:func:`decode_only_step` with a ``for_numbers`` (the simulator's hook): a
    :class:`plugins.serving.serving_step_core.ScalarStep` of layout g's constants kept for its decode pools.
    Its prefill tokens are :func:`decode_only_step`'s numpy zero, so every term is the same
    numpy-scalar arithmetic (numpy's power of an integer exponent, in the routed experts'
    count, may differ from Python's in the last bit)."""
    def f(c, prefill_tokens, decode_seqs, context_tokens, o=None):
        return decode_only_step(c, prefill_tokens, decode_seqs, context_tokens, o)

    def numbers(c):
        if c is not g.c:
            one = ScalarStep(c)
        else:
            if g.scalar_decode is None:
                g.scalar_decode = ScalarStep(g.c)
            one = g.scalar_decode
        zero = 0 * np.asarray(0)
        return lambda P, D, C: one(zero, D, C)
    f.for_numbers = numbers
    return f


# ---------------------------------------------------------------- screen
def _fixed_point(f, lam, P, G):
    """t = f(λ·P̄·t, λ·Ḡ·t) by iteration from the empty step (arrays over candidates):
    (t, stable) — stable where the iteration has settled."""
    t = f(0.0 * lam, 0.0 * lam + 1.0)
    seen = [t]
    for i in range(1, SCREEN_ITERATIONS + 1):
        t = np.minimum(f(lam * P * t, lam * G * t), 1e6)
        # the map is elementwise and deterministic: once every element repeats with period 1 or
        # 2 (settled, or alternating in its last bit), iteration SCREEN_ITERATIONS is known
        if np.array_equal(t, seen[-1]):
            break
        if len(seen) > 1 and np.array_equal(t, seen[-2]):
            t = seen[-2] if (SCREEN_ITERATIONS - i) % 2 == 0 else seen[-1]
            break
        seen = [seen[-1], t]
    t_next = f(lam * P * t, lam * G * t)
    stable = np.isfinite(t) & (t_next <= t * (1 + 1e-3)) & (t < 60.0)
    return t_next, stable


def screen(layouts, cols, w: Workload, max_model_len: int, kv_link: dict | None = None, chunked: bool = True,
           spec: ssp.SearchSpec | None = None):
    """Fill the feasibility (``valid``, ``reason``, ``kv``) and the steady-state estimates
    (``est_ttft``, ``est_tpot`` in s; inf when overloaded) of every candidate at the busiest
    minute's load (module docstring, step 3), and ``mean_ttft``/``mean_tpot`` at the mean load
    (both loads in one pass: each fixed point iterates the two as rows of one array).
    ``spec``: the speculation of the candidates with k > 0 (:mod:`serving_search_spec`)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        cols = _screen(layouts, cols, w, max_model_len, kv_link, chunked, (1.0, w.peak_factor(SCREEN_WINDOW)), spec)
    cols["mean_ttft"], cols["est_ttft"] = cols["est_ttft"]
    cols["mean_tpot"], cols["est_tpot"] = cols["est_tpot"]
    return cols


def lone_request_time(g: Layout, P: float, G: float) -> float:
    """Seconds one request of P input and G output tokens takes alone on an engine of layout
    g: its prefill step and G − 1 decode steps of one sequence at the mean context P + G/2."""
    o, f = ops("numpy"), step_fn(g)
    return float(f(g.c, P, 0, 0, o)) + max(G - 1.0, 0.0) * float(f(g.c, 0, 1, P + G / 2, o))


def is_burst(g: Layout, w: Workload) -> bool:
    """The trace spans less than one mean request alone on layout g (:func:`lone_request_time`;
    all at t = 0: a span of 0): no steady load but a finite amount of work."""
    return float(w.arrival.max() - w.arrival.min()) < lone_request_time(g, float(w.prompt.mean()),
                                                                         float(w.output.mean()))


def _burst(g: Layout, cols, idx, w: Workload, S, T, P: float, G: float, o, cost, E: float = 1.0):
    """Estimates (TTFT, TPOT in s, arrays over the candidates ``idx`` of layout g) for a burst:
    all of the trace's n requests at once, shared evenly by the engines that take prompts
    (aggregated: replicas × pp; disaggregated: the prefill pool) — no steady state to reach,
    a finite amount of work.  TTFT: the p95 request's prompt is done once the prompts before it
    are, ⌈0.95·n_e·P̄ / chunk⌉ steps of a full chunk (chunk = min(max_num_batched_tokens,
    n_e·P̄)) plus its own share of the last; TPOT: one decode step of min(n_e, max_num_seqs)
    sequences at the mean context P̄ + Ḡ/2 (n_e the requests per decoding engine), over the E
    tokens a speculative step gives (``cost``: the layout's step, speculative or not)."""
    n = float(len(w.arrival))
    dis = cols["disagg"][idx] == 1
    agg_engines = np.maximum(cols["r"][idx] * g.pp, 1).astype(float)
    pre = np.where(dis, np.maximum(cols["xp"][idx], 1), agg_engines)
    dec = np.where(dis, np.maximum(cols["yd"][idx], 1), agg_engines)
    ne = n / pre
    chunk = np.maximum(np.minimum(T, ne * P), 1.0)
    before = np.ceil(ne * float(sim.QUANTILES[2])) * P  # prompt tokens up to the p95 request's
    t_chunk = step_fn(g)(g.c, chunk, 0 * chunk, 0 * chunk, o)
    ttft = np.ceil(before / chunk) * t_chunk
    nd = np.minimum(np.ceil(n / dec), S)
    tpot = cost(g.c, 0 * nd, nd, nd * (P + G / 2), o)
    tpot = tpot / E if E != 1.0 else tpot
    return ttft, np.where(G > 1, tpot, 0.0 * tpot)


def _screen(layouts, cols, w, max_model_len, kv_link, chunked, peaks, spec=None):
    """The screen at each load multiple of ``peaks`` at once: the estimates are arrays of
    (loads, candidates), every load's row the same elementwise arithmetic (one numpy call per
    fixed-point iteration for all the loads).  Each layout's candidates are screened per
    number of drafted tokens k (k = 0: no speculation)."""
    o = ops("numpy")
    n = len(cols["g"])
    kv = np.zeros(n, dtype=np.int64)
    reason = np.array([""] * n, dtype=object)
    est_ttft, est_tpot = np.full((len(peaks), n), np.inf), np.full((len(peaks), n), np.inf)
    Pm, Gm = float(w.prompt.mean()), float(w.output.mean())
    P95 = float(sim.nearest_rank_np(w.prompt, sim.QUANTILES[2]))
    Pmax = int(w.prompt.max())
    lam = np.array([w.rate * p for p in peaks])[:, None]         # (loads, 1)
    ks = cols["k"] if "k" in cols else np.zeros(n, dtype=np.int64)
    for gi, g in enumerate(layouts):
        gidx = np.flatnonzero(cols["g"] == gi)
        if gidx.size == 0:
            continue
        if g.reason:
            reason[gidx] = g.reason
            continue
        for k in np.unique(ks[gidx]).tolist():
            idx = gidx[ks[gidx] == k]
            if k and g.pp > 1:
                reason[idx] = REASONS[6]
                continue
            if k and g.draft_reason:
                reason[idx] = g.draft_reason
                continue
            E = float(spec.E[k]) if k else 1.0
            kv[idx], reason[idx], est_ttft[:, idx], est_tpot[:, idx] = _screen_group(
                g, cols, idx, w, max_model_len, kv_link, lam, len(peaks), k, E, Pm, Gm, P95, o)
            if not chunked:
                reason[idx] = np.where((reason[idx] == "") & (cols["T"][idx] < Pmax + 1),
                                       "chunk below the longest prompt", reason[idx])
    cols["kv"], cols["reason"] = kv, reason
    cols["valid"] = reason == ""
    cols["est_ttft"] = np.where(cols["valid"], est_ttft, np.inf)
    cols["est_tpot"] = np.where(cols["valid"], est_tpot, np.inf)
    return cols


def _screen_group(g, cols, idx, w, max_model_len, kv_link, lam, loads, k, E, Pm, Gm, P95, o):
    """(KV tokens, skip reasons, estimated TTFT, estimated TPOT) of the candidates ``idx`` of
    layout g at k drafted tokens (E tokens a step; the step: the layout's, or with k > 0
    :func:`plugins.serving.serving_search_spec.speculative_step`).  With prefix caching the
    prompts prefill only what the screen's cache estimate leaves
    (:func:`plugins.serving.serving_search_spec.cached_tokens`: mean and p95 per engine count)."""
    c = g.c
    S, T = cols["S"][idx].astype(float), cols["T"][idx].astype(float)
    kvt = g.kv_tokens(S, T, draft=k > 0)
    bad = np.where(kvt <= 0, REASONS[2], np.where(kvt // g.pp < max_model_len, REASONS[3],
                   np.where(T < S, REASONS[4], "")))
    dis = cols["disagg"][idx] == 1
    Ge = Gm / E if k else Gm                   # decode steps a request needs
    per_token = k + 1                          # budget tokens of one decoding sequence
    # aggregated: pp virtual engines per replica
    engines = np.maximum(cols["r"][idx] * g.pp, 1).astype(float)
    lam_e = lam / engines
    kv_e = kvt / g.pp
    hit = ssp.cached_tokens(w.prefix, engines)
    Pf, Pf95 = (Pm, P95) if hit is None else hit        # prefilled per request: mean, p95
    pre = {} if hit is None else {"prefill_prefix": Pm - Pf}     # a prefill attends to its cached prefix
    cost = ssp.speculative_step(g.draft_c, k, np.minimum(Pf, T)) if k else step_fn(g)

    def agg(pf, nd):
        return cost(c, pf, nd, nd * (Pm + Gm / 2), o, **pre)

    t, ok = _fixed_point(agg, lam_e, Pf, Ge)
    N = lam_e * Ge * t
    ok &= (N <= S) & (N * (Pm + Gm) <= kv_e) & (lam_e * Pf * t + N * per_token <= T)
    left = np.maximum(T - N * per_token, 1.0)
    chunk = np.minimum(Pf95, left)
    iters = np.ceil(Pf95 / chunk)
    t_chunk = cost(c, chunk, N, N * (Pm + Gm / 2), o, **pre)
    u = lam_e * Pf * t / left             # share of the chunk budget the prefills use
    a_ttft = np.where(ok & (u < 1), (iters * t_chunk + t) / np.maximum(1 - u, 1e-12), np.inf)
    a_tpot = np.where(ok, t / E if k else t, np.inf)
    # disaggregated: prefill pool (M/G/1 over the trace's prompts), decode pool (fixed point)
    d_ttft, d_tpot = np.full((loads, idx.size), np.inf), np.full((loads, idx.size), np.inf)
    if dis.any():
        xps = cols["xp"][idx]
        for Tv, x in sorted(set(zip(T[dis].tolist(), xps[dis].tolist() if w.prefix is not None
                                    else [0] * int(dis.sum())))):
            sel = dis & (T == Tv) & ((xps == x) if w.prefix is not None else True)
            hx = 0 if w.prefix is None else w.prefix.hits(x, outputs=False)
            pr = np.maximum(w.prompt - hx, 1)
            p95 = P95 if w.prefix is None else float(sim.nearest_rank_np(pr, sim.QUANTILES[2]))
            kc = np.ceil(pr / Tv)
            tau = kc * step_time(c, pr / kc, 0 * kc, 0 * kc, o, prefill_prefix=hx)   # chunks of equal size
            m1, m2 = float(tau.mean()), float((tau * tau).mean())
            kk = math.ceil(p95 / Tv)
            tau95 = kk * float(step_time(c, p95 / kk, 0, 0, o))
            lam_p = lam / xps[sel]
            rho = lam_p * m1
            wait = np.where(rho < 1, lam_p * m2 / (2 * np.maximum(1 - rho, 1e-12)), np.inf)
            d_ttft[:, sel] = np.where(rho < 0.95, tau95 + 3 * wait, np.inf)
        lam_d = lam / np.maximum(cols["yd"][idx], 1)

        def dec(pf, nd):
            return cost(c, 0 * pf, nd, nd * (Pm + Gm / 2), o)

        td, okd = _fixed_point(dec, lam_d, Pm, Ge)
        Nd = lam_d * Ge * td
        okd &= (Nd <= S) & (Nd * (Pm + Gm) <= kvt) & (Nd * per_token <= T)
        xfer = float(kv_transfer_time(c, Pm, kv_link, o)) if kv_link is not None else 0.0
        d_tpot = np.where(okd, (td / E if k else td) + xfer / max(Gm - 1, 1), np.inf)
    est_ttft = np.where(dis, d_ttft, a_ttft)
    est_tpot = np.where(dis, d_tpot, a_tpot)
    if is_burst(g, w):
        # its rate n / span is no steady load but a finite amount of work: estimated as such,
        # and the simulation decides
        est_ttft, est_tpot = _burst(g, cols, idx, w, S, T, Pm, Gm, o, cost, E)
    return kvt, bad, est_ttft, est_tpot


# ---------------------------------------------------------------- simulate
ROW = ("S", "T", "kv", "disagg", "xp", "yd", "r", "gpus", "k")   # the columns one simulation reads


def simulate(res: SearchResult, i: int, w: Workload, kv_link: dict | None, chunked: bool = True) -> dict:
    """Simulate candidate i on the whole trace: p95 TTFT and TPOT (s), output throughput
    (token/s, over the simulated span), the span and, when priced, the cost per million tokens:
    GPUs × price per GPU-second × the trace's span / its input + output tokens × 10⁶ (the
    deployment runs for the trace's duration; for a burst, shorter than one mean request alone
    on the layout, for the simulated span: the burst's duration is no time to serve it in).
    With k > 0 drafted tokens the decodes speculate (:func:`serving_search_spec.sim_spec`; a
    disaggregated configuration's decode pool); with the workload's block keys every engine that
    takes prompts caches prefixes (:func:`plugins.serving.serving_prefix_cache.simulate_cached`,
    a cache per engine), and ``prefix_hit_rate`` is the share of prompt tokens found cached."""
    return simulate_row(res.layouts[int(res.cols["g"][i])], row_of(res, i), w, kv_link, chunked)


def row_of(res: SearchResult, i: int) -> dict:
    """Candidate i's :data:`ROW` as plain numbers, with ``E``, the tokens a step gives at its k."""
    row = {k: res.cols[k][i].item() for k in ROW}
    row["E"] = float(res.spec.E[int(row["k"])]) if row["k"] else 1.0
    return row


def simulate_task(job) -> dict:
    """:func:`simulate_row` on ``(layout, row, workload, kv_link, chunked)`` — an executor task
    (:class:`dsl.plugin.Executor`) — with a candidate that cannot serve the trace (a limit the
    screen did not see) answered as infinite latencies."""
    try:
        return simulate_row(*job)
    except sim.SimError:
        return dict(UNSERVED)


UNSERVED = {"ttft_p95": math.inf, "tpot_p95": math.inf, "throughput": 0.0, "span": math.inf, "cost": None}


def simulate_row(g: Layout, cols: dict, w: Workload, kv_link: dict | None, chunked: bool = True) -> dict:
    """:func:`simulate` of one candidate given by its layout ``g`` and its ``cols`` (:func:`row_of`:
    plain numbers): what a worker process needs, nothing more."""
    S, T, kv, k = int(cols["S"]), int(cols["T"]), int(cols["kv"]), int(cols["k"])
    o = ops("numpy")
    if g.step_cost is None:           # one function per layout: its simulations share what they check
        g.step_cost = step_fn(g)
    spec = ssp.sim_spec(g, k, cols["E"], kv // g.pp, o) if k else None
    hit_rate = None

    def engines(arrival, prompt, output, eng, cost, replicas, spec=None):
        nonlocal hit_rate
        if w.keys is None:
            return sim.simulate_replicas(arrival, prompt, output, eng, cost, g.c, o, replicas, record=False,
                                         spec=spec)
        from plugins.serving.serving_prefix_cache import simulate_cached_replicas
        r, stats = simulate_cached_replicas(arrival, prompt, output, w.keys, eng, cost, g.c, o, replicas,
                                            spec=spec, record=False)
        hit_rate = stats.hit_rate
        return r

    if cols["disagg"]:
        eng_p = sim.Engine(kv, g.block_size, S, T, chunked)
        ones = np.ones_like(w.output)
        rp = engines(w.arrival, w.prompt, ones, eng_p, g.step_cost, int(cols["xp"]))
        first = rp.first_at                 # absolute: the decode pool's arrivals
        many = w.output > 1
        xfer = kv_transfer_time(g.c, w.prompt, kv_link, o) if kv_link is not None else 0.0 * first
        last = first.copy()
        if many.any():
            arr = (first + xfer)[many]
            eng_d = sim.Engine(kv, g.block_size, S, max(T, int(w.prompt.max()) + 1 + S * (k + 1)), True)
            rd = sim.simulate_replicas(arr, w.prompt[many] + 1, w.output[many] - 1, eng_d, decode_fn(g),
                                       g.c, o, int(cols["yd"]), record=False, spec=spec)
            last[many] = rd.last_at
        ttft = rp.ttft
        tpot = (last[many] - first[many]) / (w.output[many] - 1)
        span = float(last.max() - w.arrival.min())
    else:
        eng = sim.Engine(kv // g.pp, g.block_size, S, T, chunked)
        r = engines(w.arrival, w.prompt, w.output, eng, g.step_cost, int(cols["r"]) * g.pp, spec)
        ttft, tpot, span = r.ttft, r.tpot, r.span
    q = sim.QUANTILES[2]
    out = {"ttft_p95": sim.nearest_rank_np(ttft, q),
           "tpot_p95": sim.nearest_rank_np(tpot, q) if tpot.size else 0.0,
           "throughput": float(w.output.sum()) / span, "span": span}
    tokens_per_s = float(w.prompt.sum() + w.output.sum()) / (span if is_burst(g, w) else w.span)
    out["cost"] = (int(cols["gpus"]) * g.price / tokens_per_s * 1e6) if g.price is not None else None
    if hit_rate is not None:
        out["prefix_hit_rate"] = hit_rate
    return out


def _shippable(g: Layout) -> Layout:
    """``g`` without its per-process caches (the step functions made on first use): what a
    worker process is sent."""
    import dataclasses
    return dataclasses.replace(g, step_cost=None, scalar_decode=None)


def pareto(points) -> list:
    """Indices (into ``points``, rows of objectives to minimise) of the non-dominated rows: no
    other row is ≤ in every objective and < in one.  Duplicates are all kept."""
    p = np.asarray(points, dtype=float)
    keep = []
    for i in range(len(p)):
        dom = np.all(p <= p[i], axis=1) & np.any(p < p[i], axis=1)
        if not dom.any():
            keep.append(i)
    return keep


def requests_simulated(cols, i: int, w: Workload) -> int:
    """Requests candidate i's simulation follows: the workload's, and for a disaggregated
    candidate also its decode pool's (the requests with more than one output token)."""
    n = len(w.arrival)
    return n + int(np.count_nonzero(w.output > 1)) if cols["disagg"][i] else n


def run(layouts, cols, w: Workload, *, slo_ttft: float, slo_tpot: float, max_model_len: int,
        kv_link: dict | None = None, objective: str = "gpus", simulate_k: int = SIMULATE_DEFAULT,
        margin: float = 1.5, chunked: bool = True, max_requests: int | None = None,
        spec: ssp.SearchSpec | None = None, executor=None) -> SearchResult:
    """Screen every candidate, simulate the screen's best (module docstring, steps 3–5).

    ``max_requests`` (default: the limit ``search_requests`` in force) bounds the work: the
    requests of every simulation, summed (:func:`requests_simulated`); the first candidate in
    simulation order that would pass it ends the simulations, deterministically, and
    ``meta["cut"]`` is then ``(candidate, requests it needed)`` (else None).
    ``meta["requests"]`` holds the requests simulated.

    The simulations run on ``executor`` (:class:`dsl.plugin.Executor`; default the run's,
    :func:`dsl.plugin.current_executor`).  On several workers the candidates the rules above
    will reach next are simulated ahead, a batch of the executor's ``slots`` at a time, and
    the rules read their results in the same order as in one process: a simulation past the
    stopping point is discarded (and not counted), so the result is the same on any engine."""
    cap = current_limits().search_requests if max_requests is None else int(max_requests)
    ex = executor if executor is not None else current_executor()
    ahead: dict = {}                   # simulations run ahead on the executor (candidate -> figures)

    def fetch(upcoming: list) -> None:
        """Simulate the candidates of ``upcoming`` not run yet, in one batch on the executor."""
        todo = [i for i in upcoming if i not in ahead]
        if todo:
            jobs = [(_shippable(res.layouts[int(cols["g"][i])]), row_of(res, i), w, kv_link, chunked)
                    for i in todo]
            ahead.update(zip(todo, ex.map(simulate_task, jobs)))

    def within_budget(seq, used_now, most) -> list:
        """The prefix of ``seq`` the request budget lets run_one simulate (at most ``most``)."""
        out = []
        for i in seq:
            need = requests_simulated(cols, i, w)
            if len(out) >= most or used_now + need > cap:
                break
            used_now += need
            out.append(i)
        return out

    cols = screen(layouts, cols, w, max_model_len, kv_link, chunked, spec)
    res = SearchResult(layouts, cols, spec=spec)
    valid = cols["valid"]
    price = np.array([g.price if g.price is not None else np.nan for g in layouts])[cols["g"]]
    tokens_per_s = float(w.prompt.sum() + w.output.sum()) / w.span
    cols["est_cost"] = cols["gpus"] * price / tokens_per_s * 1e6
    obj = cols["gpus"].astype(float) if objective == "gpus" else cols["est_cost"]
    score = np.maximum(cols["est_ttft"] / slo_ttft, cols["est_tpot"] / slo_tpot)
    stable = valid & np.isfinite(score)
    passing = stable & (score <= margin)
    order = np.lexsort((np.arange(len(obj)), score, obj))          # objective, then score, then index
    ordered = [int(i) for i in order if passing[i]]
    picked, meets = [], []
    used, cut = [0], []

    def run_one(i) -> bool:
        need = requests_simulated(cols, i, w)
        if cut or used[0] + need > cap:
            if not cut:
                cut.append((i, need))
            return False
        used[0] += need
        if ex.parallel:
            if i not in ahead:          # the next batch of what the rules will reach
                k = upcoming.index(i) if i in upcoming else 0
                fetch(upcoming[k:k + max(ex.slots, simulate_k - len(picked))] or [i])
            res.sim[i] = ahead.pop(i)
        else:
            res.sim[i] = simulate_task((res.layouts[int(cols["g"][i])], row_of(res, i), w, kv_link, chunked))
        picked.append(i)
        if res.sim[i]["ttft_p95"] <= slo_ttft and res.sim[i]["tpot_p95"] <= slo_tpot:
            meets.append(i)
        return True

    upcoming = within_budget(ordered, 0, 3 * simulate_k) if ex.parallel else []
    for i in ordered:                  # until k are simulated and one meets (at most 3k)
        if len(picked) >= 3 * simulate_k or (len(picked) >= simulate_k and meets):
            break
        if not run_one(i):
            break
    if ordered:
        cheapest = obj[ordered[0]]
        below = [int(i) for i in order if valid[i] and obj[i] < cheapest]
        levels, seen = [], set()
        mscore = np.maximum(cols["mean_ttft"] / slo_ttft, cols["mean_tpot"] / slo_tpot)
        msum = cols["mean_ttft"] / slo_ttft + cols["mean_tpot"] / slo_tpot
        # nearest cheaper levels first, each by its estimate at the mean load
        for i in sorted(below, key=lambda j: (-obj[j], score[j], mscore[j], msum[j], j)):
            if obj[i] not in seen:
                seen.add(obj[i])
                levels.append(i)
            if len(levels) >= max(simulate_k // 2, 1):
                break
        if ex.parallel and not cut:
            upcoming = within_budget(levels, used[0], len(levels))
            fetch(upcoming)
        for i in levels:
            if not run_one(i):
                break
    picked.sort(key=lambda j: (obj[j], score[j], j))
    res.simulated = picked

    def objective_of(i):
        return float(res.sim[i]["cost"]) if objective == "cost" else float(cols["gpus"][i])

    if picked:
        pts = [(objective_of(i), res.sim[i]["ttft_p95"], res.sim[i]["tpot_p95"]) for i in picked]
        res.front = [picked[j] for j in pareto(pts)]
    # a configuration dominating one that meets the targets meets them too: the choice is a front member
    meets = [i for i in meets if i in res.front]
    if meets:
        res.chosen = min(meets, key=lambda i: (objective_of(i), int(cols["gpus"][i]), max(
            res.sim[i]["ttft_p95"] / slo_ttft, res.sim[i]["tpot_p95"] / slo_tpot), i))
    res.meta = {"candidates": len(obj), "valid": int(valid.sum()), "stable": int(stable.sum()),
                "passing": int(passing.sum()), "simulated": len(picked), "objective": objective,
                "requests": used[0], "max_requests": cap, "cut": cut[0] if cut else None,
                "slo_ttft": slo_ttft, "slo_tpot": slo_tpot,
                "skipped": {r: int((cols["reason"] == r).sum()) for r in sorted(set(cols["reason"]) - {""})}}
    return res

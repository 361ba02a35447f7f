"""What every continuous-batching simulator shares: the engine's scheduler limits
(:class:`Engine`), the synthetic workloads, the checks of a workload against an engine, the
clock origin of a busy period, the price of one scheduled iteration, and the results
(:class:`SimResult`: per-request latencies, nearest-rank percentiles, throughput, goodput).

The simulators themselves are :mod:`plugins.serving.serving_sim_core` (vLLM's v1 scheduler:
the reference loop and the fast path), :mod:`plugins.serving.serving_sim_policy` (the
scheduling policies of other engines and releases: prefill-only iterations, multi-step
decoding, host time per scheduler call; closed-loop clients) and
:mod:`plugins.serving.serving_prefix_cache` (automatic prefix caching); they import these
names from here, and :mod:`plugins.serving.serving_sim_core` re-exports them.
"""
from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from fractions import Fraction


class LazyNumpy:
    """numpy, imported on first use: a plan that does not simulate a batch does not pay its
    import (≈0.1 s of a cold `plan eval`).  A module binds ``np = LazyNumpy(globals())``; the
    first attribute read imports numpy and rebinds the module's ``np`` (``name``) to numpy
    itself, so later reads cost what a plain import's do."""

    def __init__(self, namespace: dict, name: str = "np"):
        self._namespace, self._name = namespace, name

    def __getattr__(self, attr):
        import numpy
        self._namespace[self._name] = numpy
        return getattr(numpy, attr)


np = LazyNumpy(globals())

QUANTILES = (Fraction(50, 100), Fraction(90, 100), Fraction(95, 100), Fraction(99, 100))
ORIGIN_GRID = 2.0 ** 20    # s (≈12 days): the clock's origin is a whole multiple of it (see clock_origin)


def clock_origin(arrival: float) -> float:
    """The origin the simulators' clock counts from in a busy period that starts at ``arrival``
    (s): the last whole multiple of :data:`ORIGIN_GRID` at or before it.  A busy period's times
    are held relative to it, so a double resolves them to about 2^-31 s (ulp of 2^21 s) however
    late the trace runs — absolute times of 10^14 s would be spaced 1/64 s apart, and a step of a
    few milliseconds added to one would be lost.  Arrivals before 2^20 s count from 0, exactly as
    absolute times (every arrival time minus a multiple of 2^20 s at or below it is exact)."""
    return math.floor(arrival / ORIGIN_GRID) * ORIGIN_GRID if arrival >= ORIGIN_GRID else 0.0


class SimError(ValueError):
    """A workload the engine cannot serve: ``index`` is the request (0-based, input order)."""

    def __init__(self, message: str, index: int | None = None, hint: str = ""):
        super().__init__(message)
        self.index, self.hint = index, hint


@dataclass(frozen=True)
class Engine:
    """The scheduler's limits (vLLM's names): KV pool ``kv_tokens`` in blocks of
    ``block_size`` tokens, at most ``max_num_seqs`` running requests and
    ``max_num_batched_tokens`` tokens per iteration; and its policy (vLLM's v1 scheduler by
    default; :mod:`plugins.serving.serving_sim_policy`): whether an iteration mixes prefill
    chunks with decodes (``mixed_batches``), the forward steps a decode batch runs per scheduler
    call (``scheduler_steps``, vLLM's ``--num-scheduler-steps``) and the host seconds each call
    adds (``scheduler_overhead``)."""

    kv_tokens: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    mixed_batches: bool = True
    scheduler_steps: int = 1
    scheduler_overhead: float = 0.0

    @property
    def blocks(self) -> int:
        return self.kv_tokens // self.block_size


def linear_step(c, prefill_tokens, decode_seqs, context_tokens, o=None):
    """A step cost affine in the work: ``c["overhead"] + c["token"]·(prefill + decodes) +
    c["context"]·context`` (seconds; numbers or numpy arrays).  The hand-checkable cost of the
    tests, and the block's cost when the plan gives it."""
    return c["overhead"] + c["token"] * (prefill_tokens + decode_seqs) + c["context"] * context_tokens


# ---------------------------------------------------------------- workloads
def poisson_arrivals(rate: float, n: int, seed: int = 0) -> np.ndarray:
    """n arrival times (s) of a Poisson process of ``rate`` requests/s from t = 0 (exponential
    gaps, numpy ``default_rng(seed)``): the same seed gives the same times."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate, n))


def gamma_arrivals(rate: float, n: int, cv: float, seed: int = 0) -> np.ndarray:
    """n arrival times with Gamma-distributed gaps of mean 1/rate and coefficient of variation
    ``cv`` (shape 1/cv², scale cv²/rate): cv = 1 is Poisson-like, cv > 1 bursty."""
    rng = np.random.default_rng(seed)
    k = 1.0 / (cv * cv)
    return np.cumsum(rng.gamma(k, 1.0 / (rate * k), n))


def sample_lengths(prompt, output, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n (input, output) pairs drawn with replacement from the rows of a trace (the pair of one
    row stays together)."""
    rng = np.random.default_rng([seed, 1])
    i = rng.integers(0, len(prompt), n)
    return np.asarray(prompt, dtype=np.int64)[i], np.asarray(output, dtype=np.int64)[i]


def check_workload(arrival, prompt, output, eng: Engine) -> None:
    """:raises SimError: for a request the engine can never run (no prompt or output token, or
    more KV than the whole pool), or limits the scheduler cannot work with."""
    if eng.block_size < 1 or eng.max_num_seqs < 1 or eng.max_num_batched_tokens < 1:
        raise SimError("block_size, max_num_seqs and max_num_batched_tokens must be at least 1")
    if eng.max_num_batched_tokens < eng.max_num_seqs:
        raise SimError(f"max_num_batched_tokens ({eng.max_num_batched_tokens}) is below max_num_seqs "
                       f"({eng.max_num_seqs}): an iteration could not decode every running sequence",
                       hint="vLLM requires max_num_batched_tokens ≥ max_num_seqs")
    if len(arrival) == 0:
        raise SimError("the workload has no requests")
    if eng.blocks == 0:
        raise SimError(f"the KV pool of {eng.kv_tokens:,} tokens holds no whole block of block_size = "
                       f"{eng.block_size:,} tokens", None,
                       f"use a block size that divides the pool many times (vLLM's default is 16 tokens)"
                       if eng.block_size > eng.kv_tokens else "give the engine more KV memory")
    P, G = np.asarray(prompt), np.asarray(output)
    bad = np.flatnonzero((P < 1) | (G < 1))
    if bad.size:
        i = int(bad[0])
        raise SimError(f"request {i + 1} has {int(P[i])} input and {int(G[i])} output tokens; the engine needs "
                       "at least one of each", i)
    need = -(-(P + G - 1) // eng.block_size)
    bad = np.flatnonzero(need > eng.blocks)
    if bad.size:
        i = int(bad[0])
        raise SimError(f"request {i + 1} needs {int(P[i] + G[i] - 1)} tokens of KV cache but the pool holds "
                       f"{eng.blocks * eng.block_size} ({eng.blocks} blocks of {eng.block_size})", i,
                       "give the engine more KV memory or drop requests longer than the pool")
    if not eng.enable_chunked_prefill:
        bad = np.flatnonzero(P + G - 1 > eng.max_num_batched_tokens)
        if bad.size:
            i = int(bad[0])
            raise SimError(f"request {i + 1} has more tokens ({int(P[i] + G[i] - 1)}) than one iteration may "
                           f"schedule ({eng.max_num_batched_tokens}) and chunked prefill is off", i,
                           "enable chunked prefill or raise max_num_batched_tokens")


# ---------------------------------------------------------------- results
def _rank(q, n: int) -> int:
    q = q if isinstance(q, Fraction) else Fraction(str(q))
    return max(1, math.ceil(q * n))


def nearest_rank_np(values: np.ndarray, q) -> float:
    """The ⌈q·n⌉-th smallest value (the rule of :func:`plugins.serving.serving_trace.nearest_rank`)."""
    v = np.sort(np.asarray(values, dtype=float))
    if v.size == 0:
        raise ValueError("no observations")
    return float(v[_rank(q, v.size) - 1])


def weighted_nearest_rank(values: np.ndarray, weights: np.ndarray, q) -> float:
    """Nearest rank over ``values[i]`` repeated ``weights[i]`` times."""
    o = np.argsort(values, kind="stable")
    cw = np.cumsum(np.asarray(weights)[o])
    if cw.size == 0 or cw[-1] == 0:
        raise ValueError("no observations")
    r = _rank(q, int(cw[-1]))
    return float(np.asarray(values)[o][int(np.searchsorted(cw, r, side="left"))])


@dataclass
class SimResult:
    """Outcome of a simulation (seconds, tokens; requests in input order).

    ``first``/``last``: time of each request's first and last output token, counted from
    ``origin`` (per request: the clock origin of its busy period, :func:`clock_origin`; None when
    every origin is 0, the times then absolute) — ``first_at``/``last_at`` are the absolute
    times; latencies are taken against each request's own arrival in that frame, so they keep
    their digits when the times are large; ``preemptions``
    per request; ``itl_values``/``itl_weights``: inter-token latencies, each value standing
    for ``weight`` tokens; ``series_*``: at each event, the time, the waiting requests, the
    running requests and the KV blocks in use; ``iterations``: engine iterations simulated;
    ``events``: the scheduler's events (the length of the series when they are recorded; -1 when
    not counted)."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    first: np.ndarray
    last: np.ndarray
    preemptions: np.ndarray
    itl_values: np.ndarray
    itl_weights: np.ndarray
    series_t: np.ndarray
    series_waiting: np.ndarray
    series_running: np.ndarray
    series_kv: np.ndarray
    iterations: int
    blocks: int
    block_size: int
    _cache: dict = field(default_factory=dict, repr=False)
    events: int = -1
    origin: np.ndarray | None = None

    def _arrived(self) -> np.ndarray:
        """Arrival times in the frame of ``first``/``last`` (each minus its origin: exact)."""
        return self.arrival if self.origin is None else self.arrival - self.origin

    @property
    def first_at(self) -> np.ndarray:
        return self.first if self.origin is None else self.origin + self.first

    @property
    def last_at(self) -> np.ndarray:
        return self.last if self.origin is None else self.origin + self.last

    @property
    def ttft(self) -> np.ndarray:
        return self.first - self._arrived()

    @property
    def e2e(self) -> np.ndarray:
        return self.last - self._arrived()

    @property
    def tpot(self) -> np.ndarray:
        """(t_G − t_1)/(G − 1) of the requests with G > 1."""
        m = self.output > 1
        return (self.last[m] - self.first[m]) / (self.output[m] - 1)

    @property
    def span(self) -> float:
        """From the first arrival to the last output token."""
        if self.origin is None:
            return float(self.last.max() - self.arrival.min())
        return float(((self.origin - self.arrival.min()) + self.last).max())

    @property
    def max_queue(self) -> int:
        return int(self.series_waiting.max()) if self.series_waiting.size else 0

    def quantile(self, metric: str, q) -> float:
        """Nearest-rank quantile of ``ttft``, ``tpot``, ``e2e`` (per request) or ``itl`` (per token)."""
        srt = self._cache.get(metric)
        if srt is None:
            if metric == "itl":
                o = np.argsort(self.itl_values, kind="stable")
                srt = (self.itl_values[o], np.cumsum(self.itl_weights[o]))
            else:
                srt = (np.sort(getattr(self, metric)), None)
            self._cache[metric] = srt
        vals, cw = srt
        if vals.size == 0:
            raise ValueError("no observations")
        if cw is None:
            return float(vals[_rank(q, vals.size) - 1])
        return float(vals[int(np.searchsorted(cw, _rank(q, int(cw[-1])), side="left"))])

    def throughput(self) -> float:
        """Output tokens per second over :attr:`span` (inf for steps that take no time)."""
        span = self.span
        return float(self.output.sum()) / span if span > 0 else math.inf

    def goodput(self, slo_ttft: float | None = None, slo_tpot: float | None = None) -> float:
        """Requests per second over :attr:`span` with TTFT ≤ slo_ttft and TPOT ≤ slo_tpot (a
        request with one output token has no TPOT and meets that part)."""
        span = self.span
        return float(self.meets(slo_ttft, slo_tpot).sum()) / span if span > 0 else math.inf

    def meets(self, slo_ttft: float | None = None, slo_tpot: float | None = None) -> np.ndarray:
        ok = np.ones(len(self.arrival), dtype=bool)
        if slo_ttft is not None:
            ok &= self.ttft <= slo_ttft
        if slo_tpot is not None:
            tp = np.zeros(len(self.arrival))
            m = self.output > 1
            tp[m] = (self.last[m] - self.first[m]) / (self.output[m] - 1)
            ok &= tp <= slo_tpot
        return ok

    def summary(self, slo_ttft: float | None = None, slo_tpot: float | None = None) -> dict[str, float]:
        """Every aggregate by name (seconds, tokens/s, requests/s)."""
        out: dict[str, float] = {}
        for m in ("ttft", "tpot", "itl", "e2e"):
            vals = self.itl_values if m == "itl" else getattr(self, m)
            if vals.size == 0:
                continue
            if m == "itl":
                out["itl_mean"] = float(np.dot(self.itl_values, self.itl_weights) / self.itl_weights.sum())
            else:
                out[f"{m}_mean"] = float(vals.mean())
            for q in QUANTILES:
                out[f"{m}_p{int(q * 100)}"] = self.quantile(m, q)
        out["throughput"] = self.throughput()
        if slo_ttft is not None or slo_tpot is not None:
            out["goodput"] = self.goodput(slo_ttft, slo_tpot)
            out["slo_attainment"] = float(self.meets(slo_ttft, slo_tpot).mean())
        out["preemptions"] = float(self.preemptions.sum())
        out["max_queue"] = float(self.max_queue)
        out["max_running"] = float(self.series_running.max())
        out["peak_kv"] = float(self.series_kv.max()) / self.blocks
        out["iterations"] = float(self.iterations)
        out["span"] = self.span
        return out


def sim_result(A, P, G, first, last, pre, itl_v, itl_w, ser, iterations, eng, events=-1, origin=None):
    """The :class:`SimResult` of a simulation's raw records: per request (input order) arrival
    ``A`` (s), prompt ``P`` and output ``G`` (tokens), ``first`` / ``last`` token times (s,
    lists or ``array('d')``), preemptions ``pre``; the inter-token latencies ``itl_v`` (s) with
    their weights ``itl_w`` (tokens), as arrays; ``ser`` the event series flat, four numbers an
    iteration (time in s, waiting, running, KV blocks in use); the iterations run, the engine
    ``eng`` (its blocks and block size), ``events`` and the clock ``origin`` per request (s;
    None: one origin, 0)."""
    ser = (np.frombuffer(ser, dtype=float).copy() if isinstance(ser, array)
           else np.fromiter(ser, dtype=float, count=len(ser))).reshape(-1, 4)
    first, last = ((np.frombuffer(x, dtype=float).copy() if isinstance(x, array) else np.asarray(x, dtype=float))
                   for x in (first, last))
    return SimResult(np.asarray(A, dtype=float), np.asarray(P, dtype=np.int64), np.asarray(G, dtype=np.int64),
                     first, last, np.asarray(pre, dtype=np.int64),
                     itl_v, itl_w, ser[:, 0], ser[:, 1].astype(np.int64), ser[:, 2].astype(np.int64),
                     ser[:, 3].astype(np.int64), iterations, eng.blocks, eng.block_size, events=events,
                     origin=None if origin is None else np.asarray(origin, dtype=float))


def workload_arrays(arrival, prompt, output, keys=None):
    """A workload as arrays: arrival times (s, float), prompt and output lengths (tokens,
    int64), one each per request; with ``keys`` (a list per request: its prefix-cache block
    keys), their count is checked too.

    :raises SimError: lists of different lengths, or not one-dimensional."""
    A = np.asarray(arrival, dtype=float)
    P = np.asarray(prompt, dtype=np.int64)
    G = np.asarray(output, dtype=np.int64)
    if not (A.shape == P.shape == G.shape) or A.ndim != 1 or (keys is not None and len(keys) != len(A)):
        raise SimError("arrival, input and output lengths must be three lists of the same length" if keys is None
                       else "arrival, input and output lengths and block keys must be lists of the same length")
    return A, P, G


def iteration_time(step_time, c, o, sched, prefilling, comp, P, out, extra: bool) -> tuple[float, int]:
    """Seconds of one scheduler iteration and its decode sequences, from what it schedules:
    ``sched`` the (request, new tokens) pairs, ``prefilling[r]`` whether request r is still in
    its prefill, ``comp[r]`` its tokens computed before this iteration, ``P[r] + out[r]`` its
    tokens to compute; the prefill chunks' tokens, the decode sequences and their context go to
    ``step_time(c, prefill_tokens, decode_seqs, decode_context, o)`` — with ``extra``, also the
    chunks' cached prefix and the number of chunks that end their prefill (the step cost model's
    ``prefill_prefix`` / ``prefill_seqs``).

    :returns: (dt in s as a float, the number of decode sequences)."""
    chunks = [(r, new) for r, new in sched if prefilling[r]]
    pf = sum(new for r, new in chunks)
    dec = [r for r, _ in sched if not prefilling[r]]
    nd, ctx = len(dec), sum(comp[r] for r in dec)
    if extra:
        ends_pf = sum(1 for r, new in chunks if comp[r] + new == P[r] + out[r])
        dt = step_time(c, pf, nd, ctx, o, prefill_prefix=sum(comp[r] for r, _ in chunks),
                       prefill_seqs=ends_pf if ends_pf or nd else None)
    else:
        dt = step_time(c, pf, nd, ctx, o)
    return float(dt), nd


def extra_args(step_time) -> bool:
    """True when the step cost takes the optional ``prefill_prefix`` / ``prefill_seqs``
    keywords (the cached tokens before a prefill chunk; the prefills that emit logits)."""
    import inspect
    try:
        ps = inspect.signature(step_time).parameters
    except (TypeError, ValueError):
        return False
    return "prefill_prefix" in ps and "prefill_seqs" in ps


def step_pricer(step_time, c, o):
    """``price(prefill tokens, decodes, context, prefix, chunks ending their prefill)`` → seconds
    of one iteration, called as :func:`iteration_time` calls the step cost (the chunks that end
    their prefill are passed when there are any, or decodes; none at all: the cost's default of
    one head pass): the cost's evaluator for Python numbers when it has one (``for_numbers``),
    else the cost itself on scalar ops.  For the per-iteration simulators' inner loops."""
    extra = extra_args(step_time)
    one = getattr(step_time, "for_numbers", None)
    one = one(c) if one is not None else None
    so = getattr(o, "scalar", o)

    def price(pf, nd, ctx, prefix, ends):
        if extra and not ends and not nd:
            ends = None
        if one is not None:
            return float(one(pf, nd, ctx, prefix, ends) if extra else one(pf, nd, ctx))
        if extra:
            return float(step_time(c, pf, nd, ctx, so, prefill_prefix=prefix, prefill_seqs=ends))
        return float(step_time(c, pf, nd, ctx, so))
    return price


def affine_contexts(top: int) -> tuple[int, ...]:
    """The five contexts (tokens) at which a decode's cost is checked to be affine in its
    context over [0, ``top``]: 0, ⌊top/7⌋, ⌊top/3⌋, ⌊2·top/3⌋ and ``top``."""
    top = int(top)
    return 0, top // 7, top // 3, (2 * top) // 3, top


def affine_fit(xs, ys):
    """(α, β) of the line α + β·x through the first and last points when every point
    (``xs`` contexts in tokens, ``xs[0]`` = 0; ``ys`` their costs in s) lies on it to a relative
    1e-11, else None: a cost that is a sum of rooflines is affine in the context, its memory
    and compute sides both growing linearly with the KV read.  Used at :func:`affine_contexts`
    by the fast path's memo (:class:`plugins.serving.serving_sim_core.Affine`) and the
    speculative decode's price (:meth:`plugins.serving.serving_spec.SimSpec.for_step`)."""
    a, b = float(ys[0]), float(ys[-1] - ys[0]) / float(xs[-1])
    if all(abs(a + b * x - y) <= 1e-11 * abs(y) for x, y in zip(xs, ys)):
        return a, b
    return None

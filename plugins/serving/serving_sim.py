"""``use batching``: continuous batching of a plan's request stream on its engine's scheduler —
TTFT, TPOT, ITL and end-to-end latency percentiles, throughput, goodput, preemptions, queue and
KV use — with its table (``batching-latency``) and figures (``batching-queue``,
``batching-latency``).

The block reads the workload (a trace's requests, or Poisson / Gamma arrivals with fixed or
sampled lengths and, on request, prompts with shared prefixes:
:mod:`plugins.serving.serving_prompts`), leaves out the requests above ``max_model_len`` (as vLLM's server refuses
them), takes the scheduler's limits from the block, ``use engine`` or vLLM's defaults and the
step cost from the block (affine) or the engine's step model
(:mod:`plugins.serving.serving_step`), checks the work against the limits, and runs the
simulator of :mod:`plugins.serving.serving_sim_core` (its rules and metrics are described
there).  The simulator's public names are imported here too (``serving_sim.simulate``,
``serving_sim.Engine``, …), as the tests, benchmarks and ``use serving_search`` read them.
"""
from __future__ import annotations

import math
import weakref

import sympy as sp

from dsl.plugin import FigureSpec, Param, Table, TableSpec, UseSpec, current_limits, hookimpl, limit_hint

from plugins.serving.serving_prefix_cache import PREFIX_PARAMS
from plugins.serving.serving_spec import SPEC_PARAMS, SimSpec, spec_settings
from plugins.serving.serving_sim_core import (  # noqa: F401  (the simulator, read through this module too)
    AFFINE_SHARED_CAP, BARE_RUN, MEMO_CAP, ORIGIN_GRID, QUANTILES, RUN_CAP, SHORT_RUN, Affine, Engine, SimError,
    SimResult, affine_memo, check_workload, clock_origin, gamma_arrivals, linear_step, nearest_rank_np,
    poisson_arrivals, sample_lengths, simulate, simulate_reference, simulate_replicas, weighted_nearest_rank)
from plugins.serving.serving_sim_base import LazyNumpy
from plugins.serving.serving_sim_policy import default_policy, simulate_policy
# the tests' names of the fast path's affine check and its shared memo
from plugins.serving.serving_sim_core import Affine as _Affine, affine_memo as _affine_memo  # noqa: F401


np = LazyNumpy(globals())     # numpy, imported on first use


ENGINE_NAMES = (("kv_tokens", "token"), ("block_size", "token"), ("max_num_seqs", "seq"),
                ("max_num_batched_tokens", "token"))
# Without `use engine`: vLLM's OpenAI-server defaults on GPUs below 70 GiB (and A100).
ENGINE_DEFAULTS = {"block_size": 16, "max_num_seqs": 256, "max_num_batched_tokens": 2048}

BATCHING = UseSpec(
    "batching",
    "continuous batching of a request stream on the engine's scheduler: TTFT/TPOT/ITL percentiles, goodput",
    references=(
        "vLLM v1 scheduler (vllm/v1/core/sched/scheduler.py): running requests first, token budget, "
        "KV blocks allocated as sequences grow, preemption of the newest running request by recomputation",
        "Yu et al. 2022, 'Orca: A Distributed Serving System for Transformer-Based Generative Models' "
        "(OSDI; iteration-level scheduling)",
        "Kwon et al. 2023, 'Efficient Memory Management for Large Language Model Serving with "
        "PagedAttention' (SOSP; KV blocks, preemption by recomputation)",
        "Agrawal et al. 2024, 'Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve' "
        "(chunked prefill)",
        "Zhong et al. 2024, 'DistServe' (OSDI; goodput: requests per second meeting TTFT and TPOT SLOs)",
        "vLLM EngineArgs defaults (vllm/engine/arg_utils.py get_batch_defaults, OpenAI server below 70 GiB): "
        "block_size 16, max_num_seqs 256, max_num_batched_tokens 2048",
        "vLLM automatic prefix caching (vllm/v1/core/kv_cache_manager.py, block_pool.py); SGLang RadixCache "
        "(python/sglang/srt/mem_cache/radix_cache.py, page_size 1: token-granular matches)",
        "Qin et al. 2025, 'Mooncake: Trading More Storage for Less Computation' (FAST; traces with "
        "512-token block hashes, prefix-cache hit rates against capacity)",
    ),
    params=(
        Param("trace", kind="file", optional=True,
              doc="CSV of requests (arrived_at, num_prefill_tokens, num_decode_tokens): arrivals and lengths"),
        Param("arrivals", kind="choice", choices=("trace", "poisson", "gamma"), default=None, optional=True,
              doc='"trace" (default with a trace), "poisson" or "gamma" (bursty: Gamma gaps of cv)'),
        Param("rate", "request/s", None, "mean arrival rate of synthetic arrivals", min=0, min_open=True,
              optional=True),
        Param("requests", "", None, "synthetic requests to simulate", min=1, whole=True, optional=True),
        Param("cv", "", "2", "coefficient of variation of the Gamma gaps (1: as random as Poisson; at most 100)",
              min=0, min_open=True, max=100),
        Param("seed", "", "0", "seed of the synthetic arrivals and sampled lengths", kind="int", min=0),
        Param("input", "token", None, "input tokens of every request (default: sampled from the trace)",
              min=1, whole=True, optional=True),
        Param("output", "token", None, "output tokens of every request (default: sampled from the trace)",
              min=1, whole=True, optional=True),
        Param("slo_ttft", "s", None, "TTFT target of goodput", min=0, optional=True),
        Param("slo_tpot", "s", None, "TPOT target of goodput", min=0, optional=True),
        Param("kv_tokens", "token", None, "tokens the KV pool holds (default: `kv_tokens` of `use engine`)",
              min=1, whole=True, optional=True),
        Param("block_size", "token", None, "tokens per KV block (default: `use engine`'s, else 16)", min=1,
              whole=True, optional=True),
        Param("max_num_seqs", "seq", None, "requests running at once (default: `use engine`'s, else 256)",
              min=1, whole=True, optional=True),
        Param("max_num_batched_tokens", "token", None, "token budget of one iteration (default: `use engine`'s, "
              "else 2048)", min=1, whole=True, optional=True),
        Param("enable_chunked_prefill", kind="bool", default="true",
              doc="prefill long prompts in chunks within the budget (default: `use engine`'s, else true as "
              "vLLM V1)"),
        *PREFIX_PARAMS,
        Param("concurrency", "", None, "closed-loop clients: at most this many requests in flight, the next sent "
              "when one finishes (without `rate`: every request ready at once, as a benchmark's --max-concurrency)",
              kind="int", min=1, optional=True),
        Param("mixed_batches", kind="bool", default=None, optional=True,
              doc="prefill chunks share iterations with the running decodes (default: `use engine`'s, else true "
              "as vLLM V1; false: an iteration that prefills runs no decode)"),
        Param("num_scheduler_steps", "", None, "forward steps a decode batch runs per scheduler call, its tokens "
              "handed out when they end (default: `use engine`'s, else 1)", kind="int", min=1, optional=True),
        Param("scheduler_overhead", "s", None, "host time per scheduler call that the GPU waits for (default: "
              "`use engine`'s, else 0)", min=0, optional=True),
        Param("step_overhead", "s", None, "fixed time of an iteration (with step_token and step_context: an "
              "affine step cost instead of the engine's step model)", min=0, optional=True),
        Param("step_token", "s/token", None, "time per token scheduled in an iteration (prefill or decode)",
              min=0, optional=True),
        Param("step_context", "s/token", None, "time per cached context token the decodes read", min=0,
              optional=True),
        *SPEC_PARAMS,
    ),
    order=67,
    provides=("ttft_mean", "ttft_p50", "ttft_p90", "ttft_p95", "ttft_p99", "tpot_mean", "tpot_p50", "tpot_p90",
              "tpot_p95", "tpot_p99", "itl_mean", "itl_p50", "itl_p90", "itl_p95", "itl_p99", "e2e_mean",
              "e2e_p50", "e2e_p90", "e2e_p95", "e2e_p99", "throughput", "goodput", "slo_attainment",
              "preemptions", "max_queue", "max_running", "peak_kv_use", "sim_requests", "sim_iterations",
              "sim_span", "rejected_requests", "prefix_hit_rate", "prefill_tokens_saved"),
)

def refuse_over_max_model_len(where, param: str, P, G, max_len: int, who: str):
    """The requests an engine of ``max_model_len`` serves: a boolean mask over the requests
    (``P`` input, ``G`` output tokens, int arrays of one shape), True where P + G ≤ ``max_len``.

    vLLM's OpenAI server refuses a request whose prompt plus ``max_tokens`` exceeds
    ``max_model_len`` before it reaches the scheduler (``OpenAIServing._validate_prompt_and_tokenize``
    in ``vllm/entrypoints/openai/serving_engine.py``: ``token_num + request.max_tokens >
    self.max_model_len`` raises "This model's maximum context length is …", answered with HTTP
    400) and serves the others; a trace's output count is the request's ``max_tokens`` (a
    benchmark sends the recorded length with ``ignore_eos``).  So the refused requests leave the
    simulation: a warning ``rejected`` at ``param`` of block ``where`` (a :class:`BlockView`)
    gives their count and the longest; when every request is refused it is an error there.
    ``who`` names the block in the message (```use batching` in 'p'``)."""
    tokens = P + G
    keep = tokens <= max_len
    n_out = int(keep.size - np.count_nonzero(keep))
    if n_out:
        longest = int(tokens.max())
        over = (f"{who}: {n_out:,} of the {keep.size:,} requests have more input + output tokens than "
                f"max_model_len = {max_len:,} (the longest {longest:,})")
        hint = f"raise max_model_len to {longest:,} token to serve every request, or shorten the requests"
        if n_out == keep.size:
            where.error_at(param, f"{over}: the engine rejects every request", hint)
        where.warn_at(param, f"{over}; the engine rejects them, as vLLM's server does, so they are left out "
                      "of the latency figures", hint, code="rejected")
    return keep


class PerEvaluation:
    """What a plugin computed for one plan of one evaluation (for its tables and figures), kept
    as long as that evaluation's declaration record lives.  Keyed by the record itself, not by
    (file, plan): a named solve re-evaluates the same file at other values, and those runs must
    not replace what the evaluation being shown computed."""

    def __init__(self) -> None:
        self._d: dict = {}

    def put(self, info, value) -> None:
        k = id(info)
        got = self._d.get(k)
        if got is None or got[0]() is not info:
            weakref.finalize(info, self._d.pop, k, None)
        self._d[k] = (weakref.ref(info), value)

    def get(self, info):
        got = self._d.get(id(info))
        return got[1] if got is not None and got[0]() is info else None


_RESULTS = PerEvaluation()   # plan's declaration record -> (SimResult, slo_ttft, slo_tpot, rejected requests)


@hookimpl
def plan_blocks_register():
    return [BATCHING]


def _workload(ctx, b):
    """(arrival, input, output) arrays of the block."""
    from plugins.serving import serving_trace as st

    path = b.path("trace")
    tr = None
    if path is not None:
        try:
            tr = st.load_trace(path)
        except st.TraceError as e:
            st.trace_error(ctx, b, e)
    kind = b.value("arrivals") or ("trace" if tr is not None else "poisson")
    fixed_in, fixed_out = b.value("input"), b.value("output")
    if tr is not None:            # the lengths read from the trace: a request of 0 tokens is its row's error
        try:
            st.require_tokens(tr, [c for c, fixed in (("num_prefill_tokens", fixed_in), ("num_decode_tokens",
                                   fixed_out)) if fixed is None])
        except st.TraceError as e:
            st.trace_error(ctx, b, e)
    if kind == "trace":
        if tr is None:
            b.error_at("arrivals", '`arrivals = "trace"` needs a trace file',
                       'add `trace = "requests.csv"`, or choose `arrivals = "poisson"` with a rate',
                       code="missing-parameter")
        for p in ("rate", "requests"):
            if b.given(p):
                b.error_at(p, f"'{p}' sets synthetic arrivals, but the arrivals come from the trace",
                           f'remove \'{p}\' or choose `arrivals = "poisson"`')
        A = np.asarray(tr.arrived, dtype=float)
        P = np.asarray(tr.prefill, dtype=np.int64)
        G = np.asarray(tr.decode, dtype=np.int64)
        if fixed_in is not None:
            P = np.full(len(A), int(fixed_in), dtype=np.int64)
        if fixed_out is not None:
            G = np.full(len(A), int(fixed_out), dtype=np.int64)
        return A, P, G
    closed = b.given("concurrency") and not b.given("rate")       # every request ready at once
    for p in ("requests",) if closed else ("rate", "requests"):
        if not b.given(p):
            b.error_at("arrivals", f'synthetic arrivals ("{kind}") need \'{p}\'',
                       "add `rate = 5 request/s; requests = 2000`, or `concurrency = 16; requests = 200` for "
                       "closed-loop clients", code="missing-parameter")
    n = int(b.value("requests"))
    cap = current_limits().activities
    if n > cap:
        b.error_at("requests", f"{n:,} requests is more than a simulation takes (the limit on activities is "
                   f"{cap:,})", "simulate fewer requests (percentiles settle within a few thousand), or "
                   + limit_hint("activities"), code="limit")
    rate, seed = b.value("rate"), int(b.value("seed"))
    if closed:
        A = np.zeros(n)
    else:
        A = poisson_arrivals(rate, n, seed) if kind == "poisson" else gamma_arrivals(rate, n, b.value("cv"), seed)
    if fixed_in is None or fixed_out is None:
        if tr is None:
            miss = "input" if fixed_in is None else "output"
            b.error_at(miss, f"synthetic requests need '{miss}' (or a trace to sample lengths from)",
                       f"add `{miss} = 256 token`, or `trace = \"requests.csv\"`", code="missing-parameter")
        Ps, Gs = sample_lengths(tr.prefill, tr.decode, n, seed)
    P = np.full(n, int(fixed_in), dtype=np.int64) if fixed_in is not None else Ps
    G = np.full(n, int(fixed_out), dtype=np.int64) if fixed_out is not None else Gs
    return A, P, G


def _check_size(ctx, b, A, P, G) -> None:
    """The work a simulation may do: requests within the limit on activities, output tokens
    (each keeps its inter-token latency) within the limit on simulated tokens."""
    cap = current_limits().activities
    if len(A) > cap:
        ctx.error(f"`use batching` in '{ctx.name}': the trace has {len(A):,} requests, more than a simulation "
                  f"takes (the limit on activities is {cap:,})", limit_hint("activities"), span=b.span,
                  code="limit")
    tokens, cap = int(np.sum(G, dtype=np.float64)), current_limits().sim_tokens
    if tokens > cap:
        where = "output" if b.given("output") else "requests" if b.given("requests") else None
        summary = (f"{len(A):,} requests with {tokens:,} output tokens in all is more than a simulation follows "
                   f"({cap:,} tokens)")
        hint = "simulate fewer or shorter requests, or " + limit_hint("sim_tokens")
        if where is not None:
            b.error_at(where, summary, hint, code="limit")
        ctx.error(f"`use batching` in '{ctx.name}': {summary}", hint, span=b.span, code="limit")


def _check_iterations(ctx, b, P, eng: Engine) -> None:
    """Up front: every iteration prefills at most ``max_num_batched_tokens`` tokens, so the
    prompts alone take at least ΣP / budget iterations, each computed alone (the limit
    ``sim_iterations``; the simulation also stops when preemptions push it past the limit)."""
    need, cap = -(-int(np.sum(P, dtype=np.float64)) // eng.max_num_batched_tokens), current_limits().sim_iterations
    if need > cap:
        summary = (f"prefilling {int(np.sum(P, dtype=np.float64)):,} input tokens at most "
                   f"{eng.max_num_batched_tokens:,} per iteration takes at least {need:,} scheduler iterations, "
                   f"more than a simulation computes ({cap:,})")
        hint = "raise max_num_batched_tokens, simulate fewer or shorter requests, or " + limit_hint("sim_iterations")
        where = next((p for p in ("max_num_batched_tokens", "input", "requests") if b.given(p)), None)
        if where is not None:
            b.error_at(where, summary, hint, code="limit")
        ctx.error(f"`use batching` in '{ctx.name}': {summary}", hint, span=b.span, code="limit")


def _engine(ctx, b) -> Engine:
    e = ctx.block("engine")
    if e is not None and not b.given("kv_tokens") and not ctx.defined("kv_tokens"):
        # `use engine` stopped at its own error (a model that does not fit, a tp that does not
        # divide the heads): that error is the root, so this block reports nothing more
        raise ctx.Abort()
    vals = {}
    for name, unit in ENGINE_NAMES:
        if b.given(name):
            vals[name] = int(b.value(name))
        elif ctx.defined(name):
            v = ctx.nominal(ctx.q(name, unit), structural=True)
            if v is None:
                ctx.error(f"`use batching` in '{ctx.name}' reads '{name}', which has no value",
                          f"give `{name} = …` in `use batching`", span=b.span, code="missing-quantity")
            vals[name] = int(sp.floor(v))
        elif name in ENGINE_DEFAULTS:
            vals[name] = ENGINE_DEFAULTS[name]
        else:
            ctx.error(f"`use batching` in '{ctx.name}' needs the KV pool's size: 'kv_tokens', or `use engine`",
                      "add `kv_tokens = 200000 token` to `use batching`, or `use engine { … }` to the plan",
                      span=b.span, code="missing-parameter")
    chunked = bool(b.value("enable_chunked_prefill"))
    if e is not None and not b.given("enable_chunked_prefill"):       # the engine's choice (its block, else its preset)
        chunked = bool(e.value("enable_chunked_prefill")) if e.given("enable_chunked_prefill") \
            else bool(e.ref("engine").value("enable_chunked_prefill", False))
    for name, unit in ENGINE_NAMES:    # the scheduler counts in 64-bit integers
        if vals[name] > _COUNT_MAX:
            summary = f"'{name}' = {vals[name]:.4g} {unit} is beyond what the simulation counts (at most 2^53)"
            hint = f"give a realistic {name}; a pool or a budget larger than the workload behaves as unbounded"
            if b.given(name):
                b.error_at(name, summary, hint)
            ctx.error(f"`use batching` in '{ctx.name}': {summary} (from the plan)", hint, span=b.span,
                      code="out-of-range")
    return Engine(vals["kv_tokens"], vals["block_size"], vals["max_num_seqs"], vals["max_num_batched_tokens"],
                  chunked, *_policy(ctx, b, e))


POLICY = (("mixed_batches", True), ("num_scheduler_steps", 1), ("scheduler_overhead", 0.0))


def _policy(ctx, b, e) -> tuple:
    """(mixed_batches, scheduler_steps, scheduler_overhead in s) of the engine: each as `use
    batching` writes it, else as `use engine` writes it, else its preset's, else vLLM v1's (mixed
    iterations, one step per scheduler call, no host time)."""
    pre = e.ref("engine") if e is not None else None
    out = []
    for name, default in POLICY:
        blk = next((x for x in (b, e) if x is not None and x.given(name)), None)
        if blk is not None:
            v = blk.value(name) if name != "scheduler_overhead" else ctx.nominal(blk.q(name), structural=True)
        elif pre is not None and pre.value(name) is not None:
            v = pre.value(name) if name != "scheduler_overhead" else ctx.nominal(pre.q(name, "s"), structural=True)
        else:
            v = default
        out.append(float(v) if name == "scheduler_overhead" else int(v) if name == "num_scheduler_steps" else bool(v))
    return tuple(out)


_COUNT_MAX = 2 ** 53


def _replicas(ctx) -> int:
    """Independent engine copies of `use engine` (1 without it)."""
    e = ctx.block("engine")
    return int(e.value("replicas")) if e is not None else 1


def _step_cost(ctx, b):
    """(step_time, c, o): the block's affine cost, or the engine's step model of the plan."""
    mine = [p for p in ("step_overhead", "step_token", "step_context") if b.given(p)]
    if mine:
        c = {"overhead": b.value("step_overhead") or 0.0, "token": b.value("step_token") or 0.0,
             "context": b.value("step_context") or 0.0}
        return linear_step, c, None
    try:
        from plugins.serving import serving_step
    except ImportError:
        serving_step = None
    if serving_step is not None and ctx.value("model") is not None and ctx.value("device") is not None:
        from plugins.training.layout_model import ops
        eng, stp = ctx.block("engine"), ctx.block("serving_step")
        tp = int(eng.value("tp")) if eng is not None and eng.value("tp") is not None else 1
        if tp > 1 and not (stp is not None and stp.given("link")) and not eng.given("link"):
            eng.error_at("tp", f"`use batching` in '{ctx.name}' prices each iteration with the engine's step "
                         f"model, and tp = {tp} needs the link its tensor-parallel all-reduces cross",
                         "add `link = nvlink4` to `use engine` (the GPUs' link inside the host: nvlink4 for "
                         "H100/H200, nvlink5 for B200, pcie4_x16 for consumer cards), or give `step_overhead`, "
                         "`step_token` and `step_context` in `use batching`", code="missing-parameter")
        # the simulation runs at these numbers: the inputs behind them shape the plan (a sweep
        # over one re-evaluates it)
        for v in serving_step.step_constants(ctx, numeric=False).values():
            if isinstance(v, sp.Basic):
                ctx.nominal(v, structural=True)
        return serving_step.step_time, serving_step.step_constants(ctx), ops("numpy")
    ctx.error(f"`use batching` in '{ctx.name}' needs the time of an engine iteration",
              "give `step_overhead`, `step_token` and `step_context` in `use batching`"
              + (", or a model and a device" if serving_step is not None else ""),
              span=b.span, code="missing-parameter")


def _spec(ctx, b, c, o):
    """The block's speculation as a :class:`SimSpec` priced by the engine's step model on the
    plan's device (target ``c``, the draft model's constants), or None without speculation."""
    got = spec_settings(ctx, b)
    if got is None:
        return None
    _, draft, k, E, _ = got
    mine = [p for p in ("step_overhead", "step_token", "step_context") if b.given(p)]
    if mine:
        b.error_at(mine[0], "speculative decoding prices the draft and the verification with the engine's step "
                   "model, not with an affine step cost", f"remove '{mine[0]}' (and the other step_* costs) and "
                   "give the plan a model and a device", code="unsupported")
    from plugins.serving import serving_step
    for v in serving_step.step_constants(ctx, numeric=False, model=draft).values():
        if isinstance(v, sp.Basic):           # the simulation runs at the draft's numbers too
            ctx.nominal(v, structural=True)
    e = float(ctx.nominal(E, structural=True))
    return SimSpec.for_step(c, serving_step.step_constants(ctx, model=draft), k, e, getattr(o, "scalar", o))


def _check_policy(ctx, b, eng: Engine, spec) -> None:
    """What the simulation of another scheduling policy or of closed-loop clients
    (:mod:`plugins.serving.serving_sim_policy`) does not combine with, as located errors."""
    closed = b.given("concurrency")
    if default_policy(eng) and not closed:
        return
    what = ("closed-loop clients (`concurrency`)" if closed else
            "the engine's scheduling policy (prefill-only iterations, multi-step decoding or host time per "
            "scheduler call)")
    fix = "remove `concurrency`" if closed else ("give `mixed_batches = true; num_scheduler_steps = 1; "
                                                 "scheduler_overhead = 0 s`")
    if spec is not None:
        b.error_at("speculative", f"speculative decoding is not simulated with {what}", f"remove `speculative`, or "
                   f"{fix}", code="unsupported")
    if b.value("enable_prefix_caching"):
        b.error_at("enable_prefix_caching", f"prefix caching is not simulated with {what}",
                   f"remove `enable_prefix_caching`, or {fix}", code="unsupported")
    if closed and _replicas(ctx) > 1:
        b.error_at("concurrency", f"closed-loop clients are simulated on one engine; `use engine` has "
                   f"{_replicas(ctx)} replicas", "simulate one replica (replicas = 1), or give the clients a "
                   "`rate`-free open-loop workload", code="unsupported")


def _synthetic(b) -> bool:
    return (b.value("arrivals") or ("trace" if b.path("trace") is not None else "poisson")) != "trace"


def _prompts(ctx, b, A, P, G):
    """(P, hash_ids): synthetic requests' prompts with shared prefixes
    (:mod:`plugins.serving.serving_prompts`) and their ids of engine blocks, when the block asks
    for them or caches prefixes; else (P, None)."""
    from plugins.serving.serving_prompts import PROMPT_PARAMS, conversation_tokens, synthetic_prompts

    given = [p for p in PROMPT_PARAMS if b.given(p)]
    if not _synthetic(b):
        if given:
            b.error_at(given[0], f"'{given[0]}' shapes synthetic prompts, but the prompts come from the trace",
                       f'remove \'{given[0]}\', or choose `arrivals = "poisson"` with a rate and requests')
        return P, None
    if not given and not b.value("enable_prefix_caching"):
        return P, None
    sys_n, sys_len = b.given("system_prompts"), b.given("system_prompt_tokens")
    if sys_len and not sys_n:
        b.error_at("system_prompt_tokens", "'system_prompt_tokens' needs 'system_prompts' (how many distinct ones)",
                   "add `system_prompts = 1`", code="missing-parameter")
    if sys_n and not sys_len:
        b.error_at("system_prompts", "'system_prompts' needs their length, 'system_prompt_tokens'",
                   "add `system_prompt_tokens = 1024 token`", code="missing-parameter")
    if b.given("system_prompt_share") and not sys_n:
        b.error_at("system_prompt_share", "'system_prompt_share' needs 'system_prompts' and "
                   "'system_prompt_tokens'", "add `system_prompts = 1; system_prompt_tokens = 1024 token`",
                   code="missing-parameter")
    if b.given("hash_block"):
        b.error_at("hash_block", "'hash_block' is the block of a trace's `hash_ids`; synthetic prompts are "
                   "keyed by the engine's blocks", "remove 'hash_block'")
    eng = _engine(ctx, b)
    bs = eng.block_size
    sys_tokens = int(b.value("system_prompt_tokens") or 0)
    if sys_tokens > eng.kv_tokens:          # before any block id is built (the ids grow with it)
        b.error_at("system_prompt_tokens", f"a system prompt of {sys_tokens:,} tokens cannot fit the KV pool of "
                   f"{int(eng.kv_tokens):,} tokens", "shorten the system prompt or give the engine more KV cache",
                   code="out-of-range")
    turns = int(b.value("turns"))
    if turns > 1:                           # the longest conversation's last prompt, before building its ids
        import numpy as np
        # each request's prompt, then its answer, in KV
        need = conversation_tokens(np.asarray(P, dtype=np.int64), np.asarray(G, dtype=np.int64), turns) - 1
        if len(need) and int(need.max()) > eng.kv_tokens:
            b.error_at("turns", f"a conversation of {min(turns, len(need))} turns grows to {int(need.max()):,} tokens of KV, "
                       f"beyond the pool of {int(eng.kv_tokens):,}", "fewer turns, shorter turns or a larger KV "
                       "cache", code="out-of-range")
    import numpy as np                      # the ids to build: every block of every conversation's tokens
    conv = conversation_tokens(np.asarray(P, dtype=np.float64), np.asarray(G, dtype=np.float64), turns, sys_tokens)
    _check_keys(ctx, b, int(np.sum(conv // bs)), bs)
    return synthetic_prompts(U=P, G=G, turns=turns,
                             system_prompts=int(b.value("system_prompts") or 0),
                             system_prompt_tokens=int(b.value("system_prompt_tokens") or 0),
                             system_prompt_share=float(b.value("system_prompt_share")),
                             hash_block=bs, seed=int(b.value("seed")),
                             with_output=bool(b.value("enable_prefix_caching")))


def _prefix_keys(ctx, b, n: int, keep, eng: Engine, P=None, G=None, hashes=None) -> list:
    """The engine-block keys of each simulated request (:func:`serving_prefix_cache.block_keys`)
    from the trace's ``hash_ids`` (its prompts' blocks), or the synthetic prompts' ``hashes``
    (ids of the engine blocks of prompt and answer, ``P`` + ``G`` tokens, all already without
    the rejected requests: so the blocks an answer fills are keyed too, as vLLM's
    ``allocate_slots`` caches the full blocks of ``request.num_tokens``, generated tokens
    included); ``keep``: the mask of requests not rejected (or None)."""
    from plugins.serving import serving_trace as st
    from plugins.serving.serving_prefix_cache import block_keys

    if hashes is not None:
        assert len(hashes) == n
        return block_keys(hashes, np.asarray(P) + np.asarray(G), eng.block_size, eng.block_size)
    path = b.path("trace")
    tr = st.load_trace(path) if path is not None else None
    if not tr.hashes or b.given("input"):         # a block without a trace has synthetic prompts
        why = "the trace has no `hash_ids` column" if not tr.hashes else "`input` replaces the trace's prompts"
        b.error_at("enable_prefix_caching", f"prefix caching needs each request's prompt blocks: {why}",
                   "give a trace with a `hash_ids` column (ids of the prompt's blocks of `hash_block` tokens, "
                   "as Mooncake's traces), its arrivals and its input lengths", code="missing-parameter")
    hashes = tr.hashes if keep is None else [h for h, k in zip(tr.hashes, keep) if k]
    P = tr.prefill if keep is None else [p for p, k in zip(tr.prefill, keep) if k]
    assert len(hashes) == n
    H = int(b.value("hash_block"))
    _check_keys(ctx, b, sum(min(p, len(h) * H) // eng.block_size for h, p in zip(hashes, P)), eng.block_size)
    return block_keys(hashes, P, H, eng.block_size)


def _check_keys(ctx, b, n: int, bs: int) -> None:
    """The prefix cache keys every full block of every prompt (and answer): ``n`` keys, one per
    ``bs`` tokens (a block of 1 token, SGLang's page, keys every token), within the limit
    ``sim_tokens``."""
    cap = current_limits().sim_tokens
    if n > cap:
        summary = (f"prefix caching keys {n:,} blocks of {bs:,} token{'s' if bs != 1 else ''}, more than a "
                   f"simulation follows ({cap:,})")
        hint = "a larger block_size, fewer or shorter requests, or " + limit_hint("sim_tokens")
        b.error_at("block_size" if b.given("block_size") else "enable_prefix_caching", summary, hint,
                   code="limit")


def _num(v: float):
    return sp.Rational(repr(float(v)))


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("batching")
    if b is None:
        return
    A, P, G = _workload(ctx, b)
    P, hashes = _prompts(ctx, b, A, P, G)
    e = ctx.block("engine")
    rejected = 0
    if e is not None and ctx.defined("max_model_len"):
        max_len = ctx.nominal(ctx.q("max_model_len", "token"), structural=True)
        if max_len is not None:
            keep = refuse_over_max_model_len(e, "max_model_len", P, G, int(sp.floor(max_len)),
                                             f"`use batching` in '{ctx.name}'")
            rejected = int(keep.size - np.count_nonzero(keep))
            if rejected:
                A, P, G = A[keep], P[keep], G[keep]
                if hashes is not None:
                    hashes = [h for h, k in zip(hashes, keep) if k]
    _check_size(ctx, b, A, P, G)
    eng = _engine(ctx, b)
    _check_iterations(ctx, b, P, eng)
    step_time, c, o = _step_cost(ctx, b)
    spec = _spec(ctx, b, c, o)
    _check_policy(ctx, b, eng, spec)
    cache = None
    try:
        if b.given("concurrency"):
            r = simulate_policy(A, P, G, eng, step_time, c, o, concurrency=int(b.value("concurrency")))
        elif b.value("enable_prefix_caching"):
            keys = _prefix_keys(ctx, b, len(A), keep if rejected else None, eng, P, G, hashes)
            from plugins.serving.serving_prefix_cache import simulate_cached_replicas
            r, cache = simulate_cached_replicas(A, P, G, keys, eng, step_time, c, o, _replicas(ctx), spec=spec)
        else:
            r = simulate_replicas(A, P, G, eng, step_time, c, o, _replicas(ctx), spec=spec)
    except SimError as e:
        ctx.error(f"`use batching` in '{ctx.name}': {e}", e.hint or "check the engine's limits and the requests",
                  span=b.span, code="out-of-range")
    x, y = b.value("slo_ttft"), b.value("slo_tpot")
    _RESULTS.put(ctx.info, (r, x, y, rejected))
    s = r.summary(x, y)
    sim = "simulated continuous batching"
    ref = ("vLLM v1 scheduler (vllm/v1/core/sched/scheduler.py)",)

    def define(name, unit, doc, headline=False, value=None):
        v = s.get(name) if value is None else value
        if v is None or not math.isfinite(v):
            return
        ctx.define(name, _num(v), unit, f"{doc} ({sim})", headline=headline, references=ref)

    for m, unit, what in (("ttft", "s", "time to first token t_1 − t_a"),
                          ("tpot", "ms", "time per output token (t_G − t_1)/(G − 1), requests with G > 1"),
                          ("itl", "ms", "inter-token latency, every output token after the first (a multi-step run's "
                           "tokens, handed out together: one gap per hand-out)"),
                          ("e2e", "s", "end-to-end latency t_G − t_a")):
        define(f"{m}_mean", unit, f"mean {what}", headline=m in ("ttft", "tpot"))
        for q in (50, 90, 95, 99):
            define(f"{m}_p{q}", unit, f"p{q} {what} (nearest rank)", headline=q == 95 and m != "itl")
    whole = "whole deployment" + (" (every replica)" if _replicas(ctx) > 1 else "")
    define("throughput", "token/s", f"{whole}: output tokens per second from the first arrival to the last token",
           headline=True)
    if "goodput" in s:
        slo = " and ".join(t for t in (("TTFT ≤ slo_ttft" if x is not None else ""),
                                       ("TPOT ≤ slo_tpot" if y is not None else "")) if t)
        define("goodput", "request/s", f"{whole}: requests per second meeting {slo}", headline=True)
        define("slo_attainment", "%", f"share of requests meeting {slo}", headline=True)
    define("preemptions", "", f"{whole}: preemptions by recomputation when the KV pool ran out", headline=True)
    define("max_queue", "request", f"{whole}: longest waiting queue at an iteration start"
           + (" (the replicas' queues summed)" if _replicas(ctx) > 1 else ""), headline=True)
    define("max_running", "request", f"{whole}: most requests running at once")
    define("peak_kv_use", "%", f"{whole}: largest share of the KV blocks in use", value=s["peak_kv"])
    define("sim_requests", "request", "requests simulated (the trace's, less those rejected)", value=float(len(A)))
    if e is not None and ctx.defined("max_model_len"):
        define("rejected_requests", "request", "requests the engine rejects: input + output tokens above "
               "max_model_len (left out of every other figure)", headline=rejected > 0, value=float(rejected))
    define("sim_iterations", "", "engine iterations simulated", value=s["iterations"])
    if cache is not None:
        define("prefix_hit_rate", "%", "prompt tokens found in the prefix cache at admission / prompt tokens",
               headline=True, value=cache.hit_rate)
        define("prefill_tokens_saved", "token", "prompt tokens not prefilled thanks to cached prefixes",
               headline=True, value=float(cache.saved))
    define("sim_span", "s", "first arrival to last output token", value=s["span"])


# ---------------------------------------------------------------- tables and figures
def _stored(ev, plan):
    d = ev.decls.get(plan)
    if d is None or "batching" not in d.uses:
        return None
    return _RESULTS.get(d)


def _build_table(ev, plan):
    got = _stored(ev, plan)
    if got is None:
        return None
    r, x, y, rejected = got
    rows = []
    for m, scale, unit in (("ttft", 1, "s"), ("tpot", 1e3, "ms"), ("itl", 1e3, "ms"), ("e2e", 1, "s")):
        try:
            rows.append((f"{m} ({unit})",) + tuple(float(f"{r.quantile(m, q) * scale:.6g}") for q in QUANTILES))
        except ValueError:
            continue
    notes = (f"{len(r.arrival):,} requests" + (f" ({rejected:,} more rejected: above max_model_len)" if rejected else "")
             + f", {r.iterations:,} iterations, "
             f"{int(r.preemptions.sum()):,} preemptions; nearest-rank percentiles",)
    return Table(("metric", "p50", "p90", "p95", "p99"), tuple(rows), notes)


def binned_max(t: np.ndarray, y: np.ndarray, end: float, bins: int = 1200):
    """(edges, values): the step function y (value y[i] from t[i] on) as its maximum over each
    of ``bins`` equal intervals of [t[0], end] — every peak stays visible in a small figure."""
    edges = np.linspace(float(t[0]), max(float(end), float(t[0]) + 1e-9), bins + 1)
    carry = y[np.clip(np.searchsorted(t, edges[:-1], side="right") - 1, 0, None)].astype(float)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    inside = np.full(bins, -np.inf)
    np.maximum.at(inside, idx, y.astype(float))
    return edges, np.maximum(carry, inside)


def _draw_queue(ev, plan, fig) -> bool:
    got = _stored(ev, plan)
    if got is None:
        return False
    r = got[0]
    ax1, ax2, ax3 = fig.subplots(3, 1, sharex=True)
    fig.set_size_inches(8, 6.5)
    t, end = r.series_t, float(r.last_at.max())
    for ax, y, color, label in ((ax1, r.series_waiting, "#C44E52", "waiting"),
                                (ax2, r.series_running, "#4C72B0", "running"),
                                (ax3, 100.0 * r.series_kv / r.blocks, "#55A868", "KV blocks used (%)")):
        edges, vals = binned_max(t, np.asarray(y), end)
        ax.stairs(vals, edges, color=color, lw=0.8)
        ax.set_ylabel(label)
    ax1.set_title(f"{plan}: continuous batching, {len(r.arrival):,} requests (maximum per interval)",
                  fontsize=9)
    ax3.set_xlabel("time (s)")
    fig.tight_layout()
    return True


def _draw_latency(ev, plan, fig) -> bool:
    got = _stored(ev, plan)
    if got is None:
        return False
    r, x, y, _ = got
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    fig.set_size_inches(8, 5.5)
    ax1.plot(r.arrival, r.ttft, ".", ms=1.5, color="#4C72B0", alpha=0.6, rasterized=len(r.arrival) > 2000)
    ax1.set_ylabel("TTFT (s)")
    if x is not None:
        ax1.axhline(x, color="#C44E52", ls="--", lw=1, label=f"SLO {x:g} s")
        ax1.legend(fontsize=7, frameon=False, loc="upper right")
    ax1.set_title(f"{plan}: latency by arrival time (p95 TTFT {r.quantile('ttft', QUANTILES[2]):.3g} s)",
                  fontsize=9)
    m = r.output > 1
    ax2.plot(r.arrival[m], 1e3 * (r.last[m] - r.first[m]) / (r.output[m] - 1), ".", ms=1.5, color="#DD8452",
             alpha=0.6, rasterized=len(r.arrival) > 2000)
    if y is not None:
        ax2.axhline(1e3 * y, color="#C44E52", ls="--", lw=1, label=f"SLO {1e3 * y:g} ms")
        ax2.legend(fontsize=7, frameon=False, loc="upper right")
    ax2.set_ylabel("TPOT (ms)")
    ax2.set_xlabel("arrival time (s)")
    fig.tight_layout()
    return True


@hookimpl
def plan_tables_register():
    return [TableSpec("batching-latency", "Simulated latency percentiles", _build_table,
                      "TTFT, TPOT, ITL and end-to-end latency at p50/p90/p95/p99 from the batching simulation")]


@hookimpl
def plan_figures_register():
    return [FigureSpec("batching-queue", "Waiting queue, running batch and KV use over time", _draw_queue,
                       "the scheduler's state at every event of the continuous-batching simulation"),
            FigureSpec("batching-latency", "TTFT and TPOT of each request by arrival time", _draw_latency,
                       "per-request latencies of the continuous-batching simulation against the SLO")]

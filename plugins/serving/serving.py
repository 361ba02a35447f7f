"""Serving workloads (book ch. 3 §3.1.1–3.1.3): call chains, the decode bandwidth bound,
request classes over time windows, request traces, the fluid queue of decode work and the
state a waiting job keeps resident.

Blocks (each in a ``plan``):

``use call_chain { context = S; input = P; output = G; requests = n }``
    One request restores S context tokens, processes P new ones and returns G: one prefill
    and G−1 decodes; decode j (j = 0 … G−2) reads S+P+j cached tokens and writes one
    (§3.1.1, exercise 3-1).  Counts, FLOPs and bytes per chain.
``use decode_bound { batch = 64 seq; context = 2742 token }``
    The memory-bandwidth floor of one decode step of ``batch`` sequences on ``device``: the
    weights (all but the embedding table) are read once per step, each sequence reads its
    KV cache and writes one token's KV (example 3-1).  ``cards`` (plan level) copies serve
    in parallel.  Also the KV pool's capacity in sequences and the admission limit.
``use request_mix { window = 60 s; requests = [240, 240]; input = […]; output = […]; mix = ["9:1", "1:9"] }``
    Request classes (input/output lengths) arriving over consecutive windows in the given
    per-window mixes: new input tokens/s and decode steps/s per window (example 3-1).
``use trace { file = "requests.csv"; window = 60 s }``
    The same window demands derived from a request trace (CSV: arrival, input and output
    tokens; latency metrics when measured first/last-token times are present).
``use fluid_queue { }``
    Q_{k+1} = max(0, Q_k + A_k − μ·Δt) over the windows of ``request_mix``/``trace`` (or a
    ``demand`` list): backlog, drain time and the closed forms (λ_w − μ)τ, (λ_w − μ)τ/μ.
``use state_residency { rate = 2 request/s; state = 1 GiB; wait = 10 s }``
    A_M = ∫M(t)dt per job and the steady-state λ·M₀·τ held by waiting jobs (§3.1.2).

Work in the queue is counted in decode steps of one sequence, each producing one token, so
decode demand and capacity are in token/s.  Every quantity is a sympy expression of the
plan's inputs: ``solve PLAN.cards for PLAN.peak_backlog <= 0 token`` gives the smallest
number of cards that keeps up.

Book provenance of the fluid queue and its figure: ch. 3 §3.1.2, fig. 3-7.
"""
from __future__ import annotations

from fractions import Fraction

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import FigureSpec, Param, Table, TableSpec, UseSpec

# bytes per stored element by format (book ch. 2 conventions)
FORMAT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": Fraction(1, 2)}
_FORMATS = tuple(FORMAT_BYTES)

MODEL_DEVICE = (
    Param("model", kind="ref", ref_kind="model", doc="the model served"),
)

CALL_CHAIN = UseSpec(
    "call_chain",
    "one request's calls: a prefill of P new tokens after S restored ones, then G−1 decodes",
    references=("call chains: a request's model calls, each a prefill and a decode",
                "one long request versus several short ones: prefill and decode work of each chain"),
    params=(
        Param("context", "token", "0 token", "context tokens S restored before the request (prefix cache)", min=0),
        Param("input", "token", None, "new input tokens P processed by the prefill", min=0),
        Param("output", "token", None, "output tokens G returned (the prefill returns the first)", min=1),
        Param("requests", "", "1", "identical requests n (e.g. 1 × 1024 vs 8 × 128 tokens)", min=1, whole=True),
        Param("weights", kind="choice", default='"bf16"', choices=_FORMATS, doc="format of the weights read"),
        Param("kv", kind="choice", default='"bf16"', choices=_FORMATS, doc="format of the KV cache"),
    ),
    plan_params=MODEL_DEVICE[:1],
    order=60,
    provides=("prefills", "decode_steps", "final_context", "weight_passes", "weight_passes_batched",
              "prefill_flops", "decode_flops", "chain_flops", "prefill_bytes", "decode_bytes", "chain_bytes",
              "kv_bytes_per_token", "decode_weight_bytes"),
)

DECODE_BOUND = UseSpec(
    "decode_bound",
    "memory-bandwidth floor of a decode step and the decode rate it allows per card",
    references=("decode bandwidth bound: each decode step reads the weights and the KV cache once (roofline: "
                "Williams, Waterman and Patterson 2009, 'Roofline: An Insightful Visual Performance Model for "
                "Multicore Architectures')",),
    params=(
        Param("batch", "seq", None, "sequences decoded together in one step", min=0, min_open=True),
        Param("context", "token", None, "mean context a sequence reads per step (default: the decode-weighted "
              "mean of `use request_mix` or `use trace`)", min=0, optional=True),
        Param("weights", kind="choice", default='"bf16"', choices=_FORMATS, doc="format of the weights read"),
        Param("kv", kind="choice", default='"bf16"', choices=_FORMATS, doc="format of the KV cache"),
        Param("kv_pool", "B", None, "memory reserved for the KV cache on one card (default: device memory "
              "minus the weights)", min=0, optional=True),
    ),
    plan_params=(
        MODEL_DEVICE[0],
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
        Param("cards", "", "1", "accelerators serving decode, each with a full copy of the weights",
              min=1, whole=True),
    ),
    order=61,
    provides=("kv_bytes_per_token", "decode_weight_bytes", "decode_step_bytes", "decode_step_time",
              "card_decode_rate", "decode_capacity", "kv_pool", "kv_pool_sequences", "admission_limit"),
)

REQUEST_MIX = UseSpec(
    "request_mix",
    "request classes arriving over consecutive windows in per-window mixes",
    references=("request mixes per time window: decode demand against capacity window by window",),
    params=(
        Param("window", "s", None, "length Δt of each window", min=0, min_open=True),
        Param("requests", "", None, "requests arriving in each window", kind="list", min_items=1),
        Param("input", "token", None, "input tokens of each class", kind="list", min_items=1),
        Param("output", "token", None, "output tokens of each class (the first comes from the prefill)",
              kind="list", min_items=1),
        Param("mix", kind="list", item="string", default=None, optional=True,
              doc='shares of the classes in each window, e.g. ["9:1", "1:9"] (default: equal shares)'),
        Param("classes", kind="list", item="string", default=None, optional=True, doc="names of the classes"),
    ),
    order=62,
    provides=("windows", "requests", "input_rate", "decode_rate", "peak_decode_rate", "decode_steps_total",
              "decode_mean_context", "arrival_time"),
)

TRACE = UseSpec(
    "trace",
    "window demands and latency metrics from a request trace (CSV)",
    references=("latency metrics of a trace: time to first token, time per output token, end-to-end latency and "
                "their quantiles",),
    params=(
        Param("file", kind="file", doc="CSV with arrived_at, num_prefill_tokens, num_decode_tokens "
              "[, first_token_at, last_token_at]"),
        Param("window", "s", "60 s", "length Δt of the windows the arrivals are counted in", min=0, min_open=True),
    ),
    order=62,
    # the measured latency metrics (ttft_mean, ttft_p95, latency_mean, latency_p95, inter_token_mean,
    # inter_token_p95) exist only when the trace has first/last-token columns, so they are not listed:
    # `use batching` simulates them from the arrivals and token counts
    provides=("windows", "requests", "input_rate", "decode_rate", "peak_decode_rate", "decode_steps_total",
              "decode_mean_context", "arrival_time", "mean_input", "mean_output"),
)

FLUID_QUEUE = UseSpec(
    "fluid_queue",
    "decode backlog window by window: Q_{k+1} = max(0, Q_k + A_k − μ·Δt)",
    references=("fluid queue of decode work: backlog of demand above capacity over time",),
    params=(
        Param("demand", "token/s", None, "decode steps per second arriving in each window (default: the "
              "windows of `use request_mix` or `use trace`)", kind="list", optional=True, min_items=1),
        Param("window", "s", None, "window length Δt (default: the request_mix or trace window)",
              min=0, min_open=True, optional=True),
        Param("capacity", "token/s", None, "decode steps per second the cards complete, μ (default: "
              "decode_capacity of `use decode_bound`)", min=0, min_open=True, optional=True),
        Param("burst", "s", None, "duration τ of the peak rate in the closed forms (default: one window)",
              min=0, optional=True),
        Param("initial", "token", "0 token", "backlog Q_0 when the first window starts", min=0),
    ),
    order=63,
    provides=("peak_backlog", "final_backlog", "drain_time", "busy_until", "decode_work_time", "burst_backlog",
              "burst_drain_time"),
)

STATE_RESIDENCY = UseSpec(
    "state_residency",
    "state held while jobs wait: A_M = ∫M(t)dt per job and λ·A_M in steady state",
    references=("state residency A_M = ∫ M(t) dt; λ·M₀·τ held in steady state by Little 1961, 'A Proof for the "
                "Queuing Formula: L = λW'",),
    params=(
        Param("rate", "request/s", None, "jobs entering the wait per second λ", min=0),
        Param("state", "B", "0 B", "state M₀ a waiting job holds", min=0),
        Param("wait", "s", "0 s", "time τ a job waits holding its state", min=0),
        Param("sizes", "B", None, "piecewise-constant state profile M_i of one job (replaces state)",
              kind="list", optional=True, min_items=1),
        Param("durations", "s", None, "duration of each piece of `sizes` (replaces wait)",
              kind="list", optional=True, min_items=1),
    ),
    order=64,
    provides=("state_area", "waiting_jobs", "resident_state"),
)

SPECS = (CALL_CHAIN, DECODE_BOUND, REQUEST_MIX, TRACE, FLUID_QUEUE, STATE_RESIDENCY)


@hookimpl
def plan_blocks_register():
    return list(SPECS)


# ---------------------------------------------------------------- model-derived sizes
def _sizes(ctx, b):
    """(kv bytes per token, weight bytes read per decode step, all weight bytes, arch, matmul params).

    KV per token = 2·L·n_kv·d_h·bytes(kv)  (K and V of every layer; Qwen3-8B BF16 144 KiB).
    Weights read per step = bytes(weights)·(params − embedding_params), plus V·h when the LM
    head is tied to the embedding (the table is then read as the LM head); the embedding
    lookup touches only the rows of the batch's tokens.  Qwen3-8B BF16: 15.14 GB.
    """
    from plugins.model.decoder import architecture
    from plugins.model.llmstate import kv_bytes_per_token, matmul_params

    m = ctx.ref("model")
    a = architecture(m)
    kvb = sp.nsimplify(FORMAT_BYTES[b.value("kv")])
    wb = sp.nsimplify(FORMAT_BYTES[b.value("weights")])
    params, emb = m.q("params", "param"), m.q("embedding_params", "param")
    read = params - emb + (a["V"] * a["h"] if a["tied_embeddings"] else 0)
    kv = kv_bytes_per_token(m, kvb)
    mm = matmul_params(m) + a["V"] * a["h"]
    return kv, wb * read, wb * params, a, mm


def _define_sizes(ctx, b, done: set):
    kv, w_read, w_all, a, mm = _sizes(ctx, b)
    if "sizes" not in done:
        done.add("sizes")
        kv = ctx.define("kv_bytes_per_token", kv, "KiB/token",
                        "KV cache per token: 2·L·n_kv·d_h·bytes (K and V of every layer)", headline=True)
        w_read = ctx.define("decode_weight_bytes", w_read, "GB",
                            "weights read once per decode step: all but the embedding table", headline=True)
    else:
        kv, w_read = ctx.q("kv_bytes_per_token"), ctx.q("decode_weight_bytes")
    return kv, w_read, w_all, a, mm


def attention_per_pair(view):
    """Forward FLOPs of QKᵀ and AV per (query, key) pair over all layers (:mod:`plugins.model.flops`):
    L·2·n_q·(d_qk + d_v) — 4·L·n_q·d_h without MLA."""
    from plugins.model.decoder import architecture, moe_architecture
    from plugins.model.flops import attention_core, head_widths

    a, mo = architecture(view), moe_architecture(view)
    return a["L"] * attention_core(a["nq"], *head_widths(a, mo), 1)


# ---------------------------------------------------------------- pricing
def _call_chain(ctx, b, done):
    kv, w, _, a, mm = _define_sizes(ctx, b, done)
    S, P, G, n = b.q("context"), b.q("input"), b.q("output"), b.q("requests")
    nd = G - 1                                    # decodes after the prefill
    att = attention_per_pair(ctx.ref("model"))   # QKᵀ and AV: 2·2·n_q·d_h per (query, key) pair, all layers
    ctx.define("prefills", n, "", "one prefill per request", headline=True)
    ctx.define("decode_steps", n * nd, "", "n·(G − 1) decodes: the prefill returns the first token", headline=True)
    ctx.define("final_context", S + P + G, "token", "S + P + G tokens in a request's context when it completes",
               headline=True)
    ctx.define("weight_passes", n * G, "", "weight reads when every call runs alone: n·(1 + G − 1)", headline=True)
    ctx.define("weight_passes_batched", G, "",
               "weight reads when the n requests run in lockstep and share each read: 1 + (G − 1)", headline=True)
    pf = ctx.define("prefill_flops", n * (2 * mm * P + att * (P * S + P * (P + 1) / 2)), "TFLOP",
                    "n·[2·N_mm·P + 4·L·n_q·d_h·(P·S + P(P+1)/2)]: matmuls and causal attention")
    # decode j attends over S+P+j cached tokens and itself
    df = ctx.define("decode_flops", n * (2 * mm * nd + att * (nd * (S + P + 1) + nd * (nd - 1) / 2)), "TFLOP",
                    "n·Σ_j [2·N_mm + 4·L·n_q·d_h·(S+P+j+1)], j = 0 … G−2")
    ctx.define("chain_flops", pf + df, "TFLOP", "prefill and decode FLOPs of the n chains", headline=True)
    from plugins.model.llmstate import kv_tokens, kv_tokens_summed
    m = ctx.ref("model")
    # sliding-window layers hold at most their window of the context (plugins.model.llmstate.kv_tokens)
    pb = ctx.define("prefill_bytes", n * (w + kv * kv_tokens(m, S + P)), "GB",
                    "n·[weights + KV read for S + KV written for P] (calls unbatched)")
    db = ctx.define("decode_bytes", n * (nd * w + kv * kv_tokens_summed(m, S + P + 1, S + P + nd)), "GB",
                    "n·Σ_j [weights + KV read for S+P+j + KV written for 1] (calls unbatched)")
    ctx.define("chain_bytes", pb + db, "GB", "bytes moved by the n chains, each call alone", headline=True)


def _decode_bound(ctx, b, done):
    kv, w, w_all, _, _ = _define_sizes(ctx, b, done)
    dev = ctx.ref("device")
    B = b.q("batch")
    if not b.given("context") and not ctx.provided("decode_mean_context") \
            and not ctx.defined("decode_mean_context"):
        ctx.error("`use decode_bound` needs the mean context a sequence reads: 'context', or the "
                  "decode-weighted mean of `use request_mix` or `use trace`",
                  "add `context = 2742 token` to `use decode_bound`", span=b.span, code="missing-parameter")
    c = b.q("context") if b.given("context") else ctx.q("decode_mean_context", "token")
    from plugins.model.llmstate import kv_tokens
    held = kv_tokens(ctx.ref("model"), c + 1)      # sliding-window layers: at most their window
    moved = ctx.define("decode_step_bytes", w + B * held * kv, "GB",
                       "weights + per sequence: KV of the context read and one token's KV written", headline=True)
    t = ctx.define("decode_step_time", moved / dev.q("mem_bw", "B/s", positive=True), "ms",
                   "lower bound of one decode step: bytes moved / memory bandwidth", headline=True)
    r = ctx.define("card_decode_rate", B / t, "token/s",
                   "upper bound of decode steps per second on one card (one token per sequence per step)",
                   headline=True)
    ctx.define("decode_capacity", ctx.param("cards") * r, "token/s", "μ: decode steps per second of all cards",
               headline=True)
    pool = b.q("kv_pool") if b.given("kv_pool") else dev.q("memory", "B", positive=True) - w_all
    if not b.given("kv_pool"):
        left = ctx.nominal(pool)
        if left is not None and left <= 0:
            mem, wts = float(ctx.nominal(dev.q("memory", "B"))), float(ctx.nominal(w_all))
            ctx.error(f"the weights of model '{ctx.ref('model').name}' do not fit one '{dev.name}': "
                      f"{wts / 2**30:,.2f} GiB of weights in {mem / 2**30:,.2f} GiB leave no KV pool "
                      f"({float(left) / 2**30:,.2f} GiB)",
                      "each card holds a full copy here; shard the weights over GPUs with `use engine { engine = "
                      "vllm; tp = 4; … }` (import \"@catalog/engines.plan\"), or use lower-precision weights "
                      "(weights = \"fp8\")", span=b.span, code="does-not-fit")
    pool = ctx.define("kv_pool", pool, "GiB", "memory for the KV cache on one card")
    seqs = ctx.define("kv_pool_sequences", pool / (held * kv), "seq",
                      "sequences whose KV fits in the pool at the mean context", headline=True)
    ctx.define("admission_limit", sp.Min(B, sp.floor(seqs)), "seq",
               "sequences that can run at once: min(batch, whole sequences the KV pool holds)", headline=True)
    ctx.require("kv_pool_holds_batch", B, "<=", seqs, "seq", "the KV pool holds every sequence of the batch")


def _mix_shares(b, k_windows, n_classes):
    """Per-window class shares as exact Fractions from strings such as "9:1"."""
    mix = b.value("mix")
    if mix is None:
        return [[Fraction(1, n_classes)] * n_classes for _ in range(k_windows)]
    if len(mix) != k_windows:
        b.error_at("mix", f"'mix' has {len(mix)} entries but 'requests' has {k_windows} windows",
                   "give one mix per window, e.g. mix = [\"9:1\", \"1:9\"] for two windows", code="out-of-range")
    out = []
    for s in mix:
        parts = s.split(":")
        try:
            w = [Fraction(p.strip()) for p in parts]
        except (ValueError, ZeroDivisionError):
            w = None
        if w is None or any(x < 0 for x in w) or sum(w) == 0:
            b.error_at("mix", f"mix '{s}' is not a ratio of non-negative numbers such as \"9:1\"",
                       "write the shares of the classes separated by ':'", code="out-of-range")
        if len(w) != n_classes:
            b.error_at("mix", f"mix '{s}' has {len(w)} shares but there are {n_classes} classes",
                       "one share per class, in the order of 'input' and 'output'", code="out-of-range")
        tot = sum(w)
        out.append([x / tot for x in w])
    return out


def _windows_from_mix(ctx, b):
    """(Δt, [(requests, input tokens, decode steps) per window], context sums) from classes and mixes."""
    ns, P, G = b.q_list("requests"), b.q_list("input"), b.q_list("output")
    if len(P) != len(G):
        b.error_at("output", f"'input' lists {len(P)} classes but 'output' lists {len(G)}",
                   "give the input and output length of every class", code="out-of-range")
    names = b.value("classes")
    if names is not None and len(names) != len(P):
        b.error_at("classes", f"'classes' names {len(names)} classes but 'input' lists {len(P)}",
                   "one name per class", code="out-of-range")
    for g, gv in zip(G, b.value("output")):
        if gv < 1:
            b.error_at("output", "every class returns at least one output token", "output lengths are ≥ 1 token")
    shares = _mix_shares(b, len(ns), len(P))
    wins, ctx_sum, steps = [], 0, 0
    for n, sh in zip(ns, shares):
        cnt = [n * sp.Rational(s.numerator, s.denominator) for s in sh]
        inp = sum(c * p for c, p in zip(cnt, P))
        dec = sum(c * (g - 1) for c, g in zip(cnt, G))
        wins.append((n, inp, dec))
        ctx_sum += sum(c * (g - 1) * (p + (g - 2) / 2) for c, p, g in zip(cnt, P, G))
        steps += dec
    return b.q("window"), wins, ctx_sum, steps


def _windows_from_trace(ctx, b):
    from plugins.serving import serving_trace as st

    path = b.path("file")
    try:
        tr = st.load_trace(path)
    except st.TraceError as e:
        st.trace_error(ctx, b, e, "file")
    dt = b.value("window")
    wins = [(sp.Integer(w.requests), sp.Integer(w.input_tokens), sp.Integer(w.decode_steps))
            for w in st.windows(tr, dt)]
    s, n = st.decode_context_sums(tr)
    ctx.define("mean_input", sp.Rational(sum(tr.prefill), len(tr)), "token", "mean input tokens per request",
               headline=True)
    ctx.define("mean_output", sp.Rational(sum(tr.decode), len(tr)), "token", "mean output tokens per request",
               headline=True)
    docs = {"ttft_mean": "mean TTFT t_1 − t_a", "ttft_p95": "p95 TTFT (nearest rank ⌈0.95 n⌉)",
            "latency_mean": "mean request latency t_G − t_a", "latency_p95": "p95 request latency (nearest rank)",
            "inter_token_mean": "mean over requests of (t_G − t_1)/(G − 1)",
            "inter_token_p95": "p95 of the per-request mean inter-token time"}
    # beside `use batching` (which simulates ttft_p95 …) the measured metrics are named measured_…
    pre = "measured_" if ctx.block("batching") is not None else ""
    for k, v in st.latency_metrics(tr).items():
        ctx.define(pre + k, sp.Rational(repr(v)), "ms" if k.startswith("inter") else "s",
                   docs[k] + (" (measured in the trace)" if pre else ""), headline=True)
    return b.q("window"), wins, sp.Rational(s.numerator, s.denominator), sp.Integer(n)


def _max(xs):
    """Max of expressions without sympy's pairwise simplification (quadratic in the number
    of arguments, each comparison a symbolic inequality with assumptions): the nominal value
    and the solver evaluate it at numbers, where it is cheap."""
    xs = list(xs)
    return xs[0] if len(xs) == 1 else sp.Max(*xs, evaluate=False)


def _windows(ctx, b, dt, wins, ctx_sum, steps):
    """Per-window quantities and their aggregates; returns the decode-rate symbols."""
    K = len(wins)
    ctx.define("windows", sp.Integer(K), "", "number of windows")
    rates = []
    for k, (n, inp, dec) in enumerate(wins, start=1):
        ctx.define(f"window{k}_requests", n, "request", f"requests arriving in window {k}")
        ctx.define(f"window{k}_input_rate", inp / dt, "token/s", f"new input tokens per second in window {k}",
                   headline=K <= 6)
        rates.append(ctx.define(f"window{k}_decode_rate", dec / dt, "token/s",
                                f"decode steps per second arriving in window {k} (output − 1 per request)",
                                headline=K <= 6))
    ctx.define("requests", sum(w[0] for w in wins), "request", "requests in all windows", headline=True)
    ctx.define("arrival_time", K * dt, "s", "K·Δt: the windows' span")
    ctx.define("input_rate", sum(w[1] for w in wins) / (K * dt), "token/s", "mean new input tokens per second",
               headline=True)
    ctx.define("decode_rate", steps / (K * dt), "token/s", "mean decode steps per second", headline=True)
    ctx.define("peak_decode_rate", _max(rates), "token/s", "largest window decode rate", headline=True)
    ctx.define("decode_steps_total", steps, "token", "decode steps of all requests")
    ctx.define("decode_mean_context", ctx_sum / steps if steps != 0 else sp.Integer(0), "token",
               "decode-weighted mean context: Σ over decode steps of the context read / steps", headline=True)
    return dt, rates


def _fluid_queue(ctx, b, source):
    if b.given("demand"):
        if not b.given("window"):
            ctx.error("`use fluid_queue` with a 'demand' list needs 'window' (the length of each window)",
                      "add `window = 60 s`", span=b.span, code="missing-parameter")
        dt, rates = b.q("window"), b.q_list("demand")
    elif source is not None:
        dt, rates = source
        if b.given("window"):
            dt = b.q("window")
    else:
        ctx.error("`use fluid_queue` needs arrivals: a 'demand' list, `use request_mix` or `use trace`",
                  "add `demand = [7471.2 token/s]` and `window = 60 s`", span=b.span, code="missing-parameter")
    mu = b.q("capacity") if b.given("capacity") else ctx.q("decode_capacity", "token/s")
    Q = [b.q("initial")]
    for k, r in enumerate(rates, start=1):
        Q.append(ctx.define(f"window{k}_backlog", sp.Max(0, Q[-1] + (r - mu) * dt, evaluate=False), "token",
                            f"Q_{k} = max(0, Q_{k-1} + (A_{k} − μ)·Δt): decode steps waiting when window {k} ends",
                            headline=len(rates) <= 6))
    ctx.define("peak_backlog", _max(Q), "token", "largest backlog at a window boundary", headline=True)
    ctx.define("final_backlog", Q[-1], "token", "backlog when arrivals stop")
    drain = ctx.define("drain_time", Q[-1] / mu, "s", "time to empty the queue after arrivals stop: Q_K/μ",
                       headline=True)
    ctx.define("busy_until", len(rates) * dt + drain, "s", "K·Δt + drain time: when the last decode step ends")
    ctx.define("decode_work_time", sp.Add(*rates) * dt / mu, "s",
               "Σ A_k·Δt / μ: the least time the decode work of all windows takes", headline=True)
    tau = b.q("burst") if b.given("burst") else dt
    lam = _max(rates)
    bb = ctx.define("burst_backlog", sp.Max(0, (lam - mu) * tau, evaluate=False), "token",
                    "closed form (λ_w − μ)·τ for a burst at the peak rate from an empty queue", headline=True)
    ctx.define("burst_drain_time", bb / mu, "s", "closed form (λ_w − μ)·τ/μ", headline=True)
    # with Q_0 = 0 no backlog ever forms exactly when μ covers the busiest window; stated on the
    # rates, the requirement stays cheap for the solver on traces of many windows
    ctx.require("keeps_up", b.q("initial") / dt + lam, "<=", mu, "token/s",
                "Q_0/Δt + max_k A_k/Δt ≤ μ: no window adds to the backlog (and none is waiting at the start)")


def _state_residency(ctx, b):
    lam = b.q("rate")
    if b.given("sizes") or b.given("durations"):
        sizes, durs = b.q_list("sizes"), b.q_list("durations")
        if len(sizes) != len(durs):
            b.error_at("durations" if b.given("durations") else "sizes",
                       f"'sizes' has {len(sizes)} pieces but 'durations' has {len(durs)}",
                       "give one duration per state size", code="out-of-range")
        area, tau = sum(m * d for m, d in zip(sizes, durs)), sum(durs)
    else:
        area, tau = b.q("state") * b.q("wait"), b.q("wait")
    area = ctx.define("state_area", area, "GiB*s", "A_M = ∫M(t)dt of one job (1 GiB for 10 s = 10 GiB·s)",
                      headline=True)
    ctx.define("waiting_jobs", lam * tau, "request", "λ·τ jobs waiting on average (Little's law)", headline=True)
    ctx.define("resident_state", lam * area, "GiB", "λ·A_M = λ·M₀·τ held by waiting jobs in steady state",
               headline=True)


@hookimpl
def plan_quantities_price(ctx):
    blocks = {s.name: ctx.block(s.name) for s in SPECS}
    if not any(blocks.values()):
        return
    done: set = set()
    if blocks["decode_bound"] is not None:
        _decode_bound(ctx, blocks["decode_bound"], done)
    if blocks["call_chain"] is not None:
        _call_chain(ctx, blocks["call_chain"], done)
    mix, tr = blocks["request_mix"], blocks["trace"]
    if mix is not None and tr is not None:
        ctx.error("a plan takes its windows from `use request_mix` or from `use trace`, not both",
                  "split them into two plans (plan b extends a { … })", code="duplicate")
    source = None
    if mix is not None:
        source = _windows(ctx, mix, *_windows_from_mix(ctx, mix))
    elif tr is not None:
        source = _windows(ctx, tr, *_windows_from_trace(ctx, tr))
    if blocks["fluid_queue"] is not None:
        _fluid_queue(ctx, blocks["fluid_queue"], source)
    if blocks["state_residency"] is not None:
        _state_residency(ctx, blocks["state_residency"])


# ---------------------------------------------------------------- table and figure
def _num(ws, nid):
    v = ws.base_value(nid) if nid in ws.nodes else None
    return None if v is None else float(v)


def _queue_series(ws, plan):
    """Nominal (Δt, [(start, requests, input rate, decode rate, backlog at end)], μ, Q_0) or None."""
    K = _num(ws, f"{plan}.windows")
    fq = f"{plan}.peak_backlog" in ws.nodes
    if K is None and not fq:
        return None
    dt = None
    for blk in ("fluid_queue", "request_mix", "trace"):
        nid = f"{plan}.{blk}.window"
        if nid in ws.nodes and (blk != "fluid_queue" or ws.decls[plan].uses.get("fluid_queue", {}).get("window")):
            dt = _num(ws, nid)
            break
    rows, k = [], 1
    while f"{plan}.window{k}_decode_rate" in ws.nodes or f"{plan}.window{k}_backlog" in ws.nodes:
        rows.append(((k - 1) * dt if dt is not None else None, _num(ws, f"{plan}.window{k}_requests"),
                     _num(ws, f"{plan}.window{k}_input_rate"), _num(ws, f"{plan}.window{k}_decode_rate"),
                     _num(ws, f"{plan}.window{k}_backlog")))
        k += 1
    mu = _num(ws, f"{plan}.fluid_queue.capacity") if f"{plan}.fluid_queue.capacity" in ws.nodes else \
        _num(ws, f"{plan}.decode_capacity")
    q0 = _num(ws, f"{plan}.fluid_queue.initial") or 0.0
    return dt, rows, mu, q0


def _build_windows(ws, plan):
    s = _queue_series(ws, plan)
    if s is None or not s[1]:
        return None
    dt, rows, mu, _ = s
    nid = f"{plan}.fluid_queue.demand"
    demand = ws.list_value(nid) if nid in ws.nodes and ws.decls[plan].uses.get("fluid_queue", {}).get("demand") \
        else [None] * len(rows)
    out = [(k, start, req, inp, dec if dec is not None else d, q)
           for k, ((start, req, inp, dec, q), d) in enumerate(zip(rows, demand), start=1)]
    notes = [f"window length {dt:g} s" if dt is not None else "window length from the plan"]
    if mu is not None:
        notes.append(f"decode capacity μ = {mu:,.2f} steps/s; backlog in decode steps at the end of each window")
    return Table(("window", "start (s)", "requests", "input (token/s)", "decode (steps/s)", "backlog (steps)"),
                 tuple(out), tuple(notes))


def _draw_backlog(ws, plan, fig) -> bool:
    s = _queue_series(ws, plan)
    if s is None or f"{plan}.peak_backlog" not in ws.nodes:
        return False
    dt, rows, mu, q0 = s
    dt = dt if dt is not None else 1.0
    # decode demand of each window (from the demand list when the plan gives one)
    demand = [r[3] for r in rows]
    if any(d is None for d in demand):
        nid = f"{plan}.fluid_queue.demand"
        demand = list(ws.list_value(nid)) if nid in ws.nodes else demand
    ts, qs, q = [0.0], [q0], q0
    for k, a in enumerate(demand):
        t0 = k * dt
        slope = a - mu
        if slope < 0 and q + slope * dt < 0:
            ts.append(t0 + q / -slope)
            qs.append(0.0)
            q = 0.0
        else:
            q = max(0.0, q + slope * dt)
        ts.append(t0 + dt)
        qs.append(q)
    end = len(demand) * dt
    if q > 0:
        ts.append(end + q / mu)
        qs.append(0.0)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    fig.set_size_inches(8, 5.5)
    xs = [k * dt for k in range(len(demand) + 1)]
    ax1.stairs(demand, xs, color="#4C72B0", label="decode demand A_k/Δt")
    ax1.axhline(mu, color="#C44E52", ls="--", lw=1, label=f"capacity μ = {mu:,.0f} steps/s")
    ax1.set_ylabel("decode steps/s")
    ax1.legend(fontsize=7, frameon=False, loc="best")
    ax1.set_title(f"{plan}: fluid queue of decode work", fontsize=9)
    ax2.plot(ts, qs, color="#DD8452")
    ax2.fill_between(ts, qs, color="#DD8452", alpha=0.25)
    i = max(range(len(qs)), key=lambda j: qs[j])
    if qs[i] > 0:
        ax2.annotate(f"{qs[i]:,.0f} steps", (ts[i], qs[i]), fontsize=7, textcoords="offset points",
                     xytext=(4, -10))
        ax2.axvline(end, color="#8C8C8C", lw=0.8, ls=":")
        if ts[-1] > end:
            ax2.annotate(f"drained {ts[-1] - end:.2f} s after arrivals stop", (ts[-1], 0), fontsize=7,
                         textcoords="offset points", xytext=(-150, 12))
    ax2.set_ylabel("backlog (decode steps)")
    ax2.set_xlabel("time (s)")
    fig.tight_layout()
    return True


@hookimpl
def plan_tables_register():
    return [TableSpec("serving-windows", "Arrivals and decode backlog per window", _build_windows,
                      "requests, input tokens/s, decode steps/s and the fluid-queue backlog of each window")]


@hookimpl
def plan_figures_register():
    return [FigureSpec("backlog", "Decode backlog of the fluid queue over time", _draw_backlog,
                       "decode demand per window against capacity, and the backlog it leaves",
                       references=("fluid queue of decode work: backlog of demand above capacity over time",))]

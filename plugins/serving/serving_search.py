"""``use serving_search``: an SLO search over serving deployments — the GPU type, tensor (tp) and
pipeline (pp) parallelism, replicas, the scheduler's ``max_num_seqs`` and chunk budget
(``max_num_batched_tokens``), disaggregated prefill/decode pools and the drafted tokens of
speculative decoding (``spec_tokens``), with prefix caching on request — for the configurations
that meet a TTFT-p95 and a TPOT-p95 target on a request trace at the fewest GPUs or the lowest
cost per million tokens, with their Pareto front; its table is ``serving-search``.

Block (in a plan with a ``model``)::

    use serving_search {
      engine = vllm; max_model_len = 16384 token; trace = "requests.csv"
      devices = [h100_sxm, a100_sxm_80gb]; links = [nvlink4, nvlink4]; gpu_hour = [3 USD/h, 2 USD/h]
      tp = [1, 2, 4]; pp = [1, 2]; replicas = [1, 2, 3, 4]
      max_num_seqs = [128 seq, 256 seq]; max_num_batched_tokens = [2048 token, 8192 token]
      prefill_replicas = [1, 2]; decode_replicas = [1, 2, 3]; kv_link = nic_400g
      slo_ttft = 2 s; slo_tpot = 100 ms; objective = "gpus"
    }

The block reads the model, the engine preset, the lists, the devices' fields and links and the
workload (a trace, or Poisson arrivals of fixed lengths) from the plan, sizes every (device, tp,
pp) once (:class:`Layout`), leaves out the requests above ``max_model_len`` and runs the search
of :mod:`plugins.serving.serving_search_core` (the method — screen everything, simulate the few
— is described there), then defines the chosen configuration's figures.  The search's public
names are imported here too (``serving_search.run``, ``serving_search.Layout``, …), as the tests
and benchmarks read them.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import Param, Table, TableSpec, UseSpec, hookimpl, limit_hint

from plugins.serving import serving_sim as sim
from plugins.serving.serving_engine import (GPUS_PER_HOST, fraction_at, per_gpu_sizes, tp_split_problem,
                                             utilization_table)
from plugins.serving.serving_prefix_cache import PREFIX_PARAMS
from plugins.serving.serving_search_spec import SearchSpec
from plugins.serving.serving_sim_base import LazyNumpy
from plugins.serving.serving_spec import SEARCH_SPEC_PARAMS, spec_choices
from plugins.serving.serving_search_core import (  # noqa: F401  (the search, read through this module too)
    REASONS, SCREEN_ITERATIONS, SCREEN_WINDOW, SIMULATE_DEFAULT, Layout, SearchResult, Workload, candidates,
    decode_fn, decode_only_step, is_burst, kv_transfer_time, lone_request_time, pareto, pp_send_time,
    requests_simulated, run, screen, simulate, step_fn)
from plugins.serving.serving_step_core import DEVICE_FIELDS as STEP_DEVICE_FIELDS, constants as step_constants_of, \
    kv_window_of


np = LazyNumpy(globals())     # numpy, imported on first use

FORMATS = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")
MAX_PROMPT_BLOCKS = 50_000_000     # engine blocks of synthetic prompts and answers a search keys at most


# ---------------------------------------------------------------- the block
_ENGINE_NUMBERS = ("non_torch_memory", "tp_comm_memory", "cuda_graph_memory", "cuda_context")

SERVING_SEARCH = UseSpec(
    "serving_search",
    "SLO search over serving deployments: GPU type, TP, PP, replicas, max_num_seqs, chunk, disaggregated pools",
    references=("NVIDIA AIConfigurator 0.12, aiconfigurator/sdk/pareto_analysis.py (aggregated and xPyD "
                "disaggregated search, Pareto front)",
                "Zhong et al. 2024, 'DistServe' (OSDI): TTFT/TPOT targets, prefill and decode pools, KV transfer",
                "Kleinrock 1975, 'Queueing Systems' vol. 1 (M/G/1 mean wait, the screen of a prefill pool)"),
    params=(
        Param("engine", kind="ref", ref_kind="engine", doc="the engine preset (vllm, sglang, trtllm …)"),
        Param("max_model_len", "token", None, "longest request the engine accepts", min=1),
        Param("trace", kind="file", optional=True,
              doc="CSV of requests (arrived_at, num_prefill_tokens, num_decode_tokens)"),
        Param("rate", "request/s", None, "without a trace: Poisson arrivals at this rate", min=0, min_open=True,
              optional=True),
        Param("requests", "", None, "without a trace: requests to simulate", min=1, optional=True),
        Param("input", "token", None, "without a trace: input tokens of every request", min=1, optional=True),
        Param("output", "token", None, "without a trace: output tokens of every request", min=1, optional=True),
        Param("seed", "", "0", "seed of the Poisson arrivals", kind="int", min=0),
        Param("devices", kind="list", item="ref", ref_kind="device", min_items=1, doc="the GPU types tried"),
        Param("links", kind="list", item="ref", ref_kind="link", optional=True,
              doc="the TP group's link of each device (one for all, or one per device); needed when tp or pp > 1"),
        Param("gpu_hour", "USD/h", None, "price of one GPU-hour of each device (one for all, or one per device); "
              "default none: no cost", kind="list", optional=True),
        Param("tp", "", "[1, 2, 4, 8]", "tensor-parallel degrees", kind="list", min=1, min_items=1),
        Param("pp", "", "[1]", "pipeline-parallel degrees", kind="list", min=1, min_items=1),
        Param("replicas", "", "[1, 2, 3, 4, 6, 8]", "replicas of an aggregated deployment", kind="list", min=1,
              min_items=1),
        Param("max_num_seqs", "seq", "[128 seq, 256 seq]", "sequences an engine runs at once", kind="list", min=1,
              min_items=1),
        Param("max_num_batched_tokens", "token", "[2048 token, 8192 token]", "token budgets (chunks) of one step",
              kind="list", min=1, min_items=1),
        Param("prefill_replicas", "", None, "prefill engines of a disaggregated deployment (with decode_replicas)",
              kind="list", optional=True, min=1, min_items=1),
        Param("decode_replicas", "", None, "decode engines of a disaggregated deployment", kind="list",
              optional=True, min=1, min_items=1),
        Param("kv_link", kind="ref", ref_kind="link", optional=True,
              doc="the link a request's KV crosses from the prefill to the decode pool (per GPU)"),
        Param("load", "", "1", "the trace's load multiple: arrival times divided by it (2: twice the requests "
              "per second, same lengths)", min=0, min_open=True),
        Param("slo_ttft", "s", None, "p95 time-to-first-token target", min=0, min_open=True),
        Param("slo_tpot", "s", None, "p95 time-per-output-token target", min=0, min_open=True),
        Param("objective", kind="choice", choices=("gpus", "cost"), default='"gpus"',
              doc="minimise GPUs, or cost per million tokens (needs gpu_hour)"),
        Param("simulate", "", str(SIMULATE_DEFAULT), "candidates simulated on the trace after the screen (within "
              "the limit search_requests on the requests simulated in all)", kind="int", min=1),
        Param("screen_margin", "", "1.5", "a candidate is simulated when its estimates are within this factor of "
              "the targets", min=1),
        Param("weights", kind="choice", default='"bf16"', choices=FORMATS, doc="format of the weights"),
        Param("kv", kind="choice", default='"bf16"', choices=FORMATS, doc="format of the KV cache"),
        *SEARCH_SPEC_PARAMS,
        *PREFIX_PARAMS,
    ),
    plan_params=(Param("model", kind="ref", ref_kind="model", doc="the model served"), GPUS_PER_HOST),
    order=72,
    provides=("search_gpus", "search_cost", "search_ttft_p95", "search_tpot_p95", "search_throughput",
              "search_tp", "search_pp", "search_replicas", "search_prefill_replicas", "search_decode_replicas",
              "search_max_num_seqs", "search_max_num_batched_tokens", "search_spec_tokens",
              "search_accepted_tokens_per_step", "search_prefix_hit_rate", "search_candidates", "search_valid",
              "search_simulated", "search_rejected_requests"),
)

_RESULTS = sim.PerEvaluation()   # plan's declaration record -> SearchResult


@hookimpl
def plan_blocks_register():
    return [SERVING_SEARCH]


def _float(ctx, expr) -> float:
    v = ctx.nominal(expr, structural=True)
    return float(v) if v is not None else float("nan")


def distinct(b, name, items, show=str):
    """``items`` of the search list ``name`` without repeats (the first of each kept, in list
    order: candidates are enumerated in the order of the lists).  A repeated item would search
    the same configurations twice — two rows of one configuration, one "chosen" and its twin on
    the "front" — so it is dropped, with a warning at the list naming it (a typo such as
    ``[1, 1]`` for ``[1, 2]`` shows; a generated list with repeats still runs)."""
    out, seen, twice = [], set(), []
    for x in items:
        if x in seen:
            if x not in twice:
                twice.append(x)
            continue
        seen.add(x)
        out.append(x)
    if twice:
        b.warn_at(name, f"'{name}' lists {', '.join(show(x) for x in twice)} more than once; each configuration "
                  "is searched once", "remove the repeated items", code="duplicate")
    return out


def _ints(b, name):
    vals = b.value(name)
    if vals is None:
        return []
    out = []
    for v in vals:
        f = float(v)
        if f != int(f) or f < 1:
            b.error_at(name, f"'{name}' holds {f:g}: every item must be a whole number ≥ 1",
                       f"write `{name} = [1, 2, 4]`")
        out.append(int(f))
    return distinct(b, name, out)


def _spec_tokens(b) -> list[int]:
    """The block's list of drafted tokens k to search (whole numbers 0 … 16; 0: no speculation)."""
    out = []
    for v in b.value("spec_tokens") or []:
        f = float(v)
        if f != int(f):
            b.error_at("spec_tokens", f"'spec_tokens' holds {f:g}: every item must be a whole number of tokens "
                       "(0 for no speculation)", "write `spec_tokens = [0, 2, 4]`")
        out.append(int(f))
    return distinct(b, "spec_tokens", out)


def _per_device(b, name, n):
    items = b.value(name)
    if items is None:
        return None
    items = list(items)
    if len(items) == 1:
        return items * n
    if len(items) != n:
        b.error_at(name, f"'{name}' has {len(items)} items for {n} devices",
                   f"give one item for all devices or one per device ({n})")
    return items


def _link_dict(ctx, name):
    v = ctx.decl(name)
    out = {"bandwidth": _float(ctx, v.q("bandwidth", "B/s", positive=True))}
    for f, unit in (("latency", "s"), ("efficiency", ""), ("launch", "s")):
        if v.has(f):
            out[f] = _float(ctx, v.q(f, unit))
    out["nvls"] = bool(v.value("nvls", False)) if v.has("nvls") else False
    return out


def _layouts(ctx, b, model, draft=None, mode: str = "draft"):
    """Layout records of every (device, tp, pp) of the block's lists; with a ``draft`` model
    (speculation), its step constants, weights and KV bytes per token per GPU at each tp
    (:func:`_draft_sizes`)."""
    from plugins.model.decoder import architecture, moe_architecture
    from plugins.model.llmstate import kv_bytes_per_token

    eng = b.ref("engine")
    devs = [d.name for d in b.value("devices")]
    links = _per_device(b, "links", len(devs))
    prices = None
    if b.given("gpu_hour"):
        raw = b.q_list("gpu_hour")
        if len(raw) not in (1, len(devs)):
            b.error_at("gpu_hour", f"'gpu_hour' has {len(raw)} items for {len(devs)} devices",
                       f"give one price for all devices or one per device ({len(devs)})")
        prices = [_float(ctx, x) for x in raw] * (len(devs) if len(raw) == 1 else 1)
    # a device listed twice with the same link and price is one set of configurations
    keys = [(d, links[i].name if links is not None else None, prices[i] if prices is not None else None)
            for i, d in enumerate(devs)]
    first = [keys.index(k) for k in distinct(b, "devices", keys, lambda k: k[0])]
    if len(first) < len(devs):
        devs = [devs[i] for i in first]
        links = [links[i] for i in first] if links is not None else None
        prices = [prices[i] for i in first] if prices is not None else None
    tps, pps = _ints(b, "tp"), _ints(b, "pp")
    layers = int(model.value("layers"))
    a, mo = architecture(model), moe_architecture(model)
    conv = (lambda x: _float(ctx, x))
    an = {k: (conv(v) if isinstance(v, sp.Basic) else v) for k, v in a.items()}
    mn = {k: (conv(v) if isinstance(v, sp.Basic) else v) for k, v in mo.items()}
    wfmt, kvfmt = b.value("weights"), b.value("kv")
    kvb = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": sp.Rational(1, 2)}[kvfmt]
    kv_model = conv(kv_bytes_per_token(model, sp.nsimplify(kvb)))
    kv_win = kv_window_of(model, conv)

    def eng_num(name, unit):
        if not eng.has(name):
            return 0.0
        return conv(eng.q(name, unit))

    util = conv(eng.q("gpu_memory_utilization"))
    util_table = tuple((d, conv(f)) for d, f in utilization_table(ctx, eng))   # SGLang: lower at larger tp
    bs = int(conv(eng.q("block_size", "token")))
    sampler = eng_num("sampler_bytes", "B")
    frac_of = eng.value("memory_fraction_of", "total")
    reserve = bool(eng.value("reserve_activations", True))
    rt_base = sum(eng_num(n, "B") for n in ("non_torch_memory", "cuda_graph_memory", "cuda_context"))
    tp_comm = eng_num("tp_comm_memory", "B")
    V = an["V"]
    out, sizes, drafts = [], {}, {}
    gph = int(ctx.value("gpus_per_host"))
    if draft is not None:
        da, dmo = architecture(draft), moe_architecture(draft)
        dan = {k: (conv(v) if isinstance(v, sp.Basic) else v) for k, v in da.items()}
        dmn = {k: (conv(v) if isinstance(v, sp.Basic) else v) for k, v in dmo.items()}
        kv_draft = conv(kv_bytes_per_token(draft, sp.nsimplify(kvb)))
        kv_win_d = kv_window_of(draft, conv)
    for di, dname in enumerate(devs):
        dv = ctx.decl(dname)
        M = conv(dv.q("cuda_memory", "B")) if dv.has("cuda_memory") else conv(dv.q("memory", "B", positive=True))
        d = {"peak_flops": conv(dv.q("peak_flops", "FLOP/s", positive=True)),
             "mem_bw": conv(dv.q("mem_bw", "B/s", positive=True))}
        for f, unit in STEP_DEVICE_FIELDS:
            if dv.has(f):
                d[f] = conv(dv.q(f, unit))
        link = _link_dict(ctx, links[di].name) if links is not None else None
        price = prices[di] if prices is not None else None
        for tp in tps:
            for pp in pps:
                g = Layout(dname, tp, pp, util=fraction_at(util_table, tp, util), frac_of=frac_of, reserve=reserve,
                           memory=M, block_size=bs, link=link, price=price)
                if tp_split_problem(model, tp) is not None:
                    g.reason = REASONS[0]
                elif tp > gph:                       # its all-reduces would cross hosts on the GPU link
                    g.reason = REASONS[5]
                elif pp > layers:
                    g.reason = REASONS[1]
                elif (tp > 1 or pp > 1) and link is None:
                    b.error_at("links", f"tp = {tp}, pp = {pp} on {dname} needs the link of its GPU group",
                               "add `links = [nvlink4]` (one for all devices, or one per device)",
                               code="missing-parameter")
                else:
                    if (tp, pp) not in sizes:        # the same for every device: sized once
                        sizes[tp, pp] = tuple(conv(x) for x in per_gpu_sizes(model, tp, pp, wfmt, kvfmt))
                    g.weights, g.kv_per_token, g.act_per_token = sizes[tp, pp]
                    g.sampler_per_seq = V * sampler
                    g.runtime = rt_base + (tp_comm if tp > 1 else 0.0)
                    g.c = step_constants_of(an, mn, d, kv_bytes=kv_model, tp=tp, link=link, weights=wfmt,
                                            kv_window=kv_win)
                    if draft is not None and tp_split_problem(draft, tp) is not None:
                        g.draft_reason = REASONS[7]
                    elif draft is not None:
                        if tp not in drafts:
                            drafts[tp] = tuple(conv(x) for x in _draft_sizes(draft, mode, tp, wfmt, kvfmt))
                        g.draft_weights, g.draft_kv_per_token = drafts[tp]
                        g.draft_c = step_constants_of(dan, dmn, d, kv_bytes=kv_draft, tp=tp, link=link,
                                                      weights=wfmt, kv_window=kv_win_d)
                out.append(g)
    return out


def _draft_sizes(draft, mode: str, tp: int, wfmt: str, kvfmt: str):
    """(weights bytes per GPU, KV bytes per token per GPU) of the draft at ``tp`` (sympy): a
    separate draft model as ``use engine`` sizes a model (:func:`per_gpu_sizes`); MTP / EAGLE
    heads their layers alone, split over tp — their embedding and LM head are the target's."""
    w, kv, _ = per_gpu_sizes(draft, tp, 1, wfmt, kvfmt)
    if mode == "mtp":
        from plugins.serving.serving import FORMAT_BYTES
        layers = draft.q("params", "param") - draft.q("embedding_params", "param") - \
            draft.q("lm_head_params", "param")
        w = sp.nsimplify(FORMAT_BYTES[wfmt]) * layers / tp
    return w, kv


def _workload(ctx, b) -> tuple[Workload, list | None]:
    """The trace's requests, or Poisson arrivals of fixed lengths; arrival times over ``load``;
    and the trace's ``hash_ids`` (None without a trace)."""
    from plugins.serving import serving_trace as st

    load = float(b.value("load"))
    if b.given("trace"):
        for p in ("rate", "requests", "input", "output"):
            if b.given(p):
                b.error_at(p, f"'{p}' sets synthetic requests, but the requests come from the trace",
                           f"remove '{p}' or the trace")
        try:
            tr = st.load_trace(b.path("trace"))
            st.require_tokens(tr)
        except st.TraceError as e:
            st.trace_error(ctx, b, e)
        return Workload(np.asarray(tr.arrived, dtype=float) / load, np.asarray(tr.prefill, dtype=np.int64),
                        np.asarray(tr.decode, dtype=np.int64)), tr.hashes
    for p in ("rate", "requests", "input", "output"):
        if not b.given(p):
            b.error_at(p, f"without a trace the search needs '{p}' (Poisson arrivals of fixed lengths)",
                       'add `trace = "requests.csv"`, or `rate = 5 request/s; requests = 2000; input = 1024 token; '
                       'output = 256 token`', code="missing-parameter")
    n = int(b.value("requests"))
    if n > 1_000_000:
        b.error_at("requests", f"{n:,} requests is more than a search simulates (1,000,000)",
                   "percentiles settle within a few thousand requests")
    A = sim.poisson_arrivals(float(b.value("rate")), n, int(b.value("seed"))) / load
    return Workload(A, np.full(n, int(b.value("input")), dtype=np.int64),
                    np.full(n, int(b.value("output")), dtype=np.int64)), None


def _prompts(b, w: Workload, hashes, block_size: int):
    """(workload, block ids or None, their block in tokens): synthetic requests get prompts with
    shared prefixes when the block shapes them or caches prefixes
    (:func:`plugins.serving.serving_prompts.synthetic_prompts`, ids of the engine's blocks
    covering prompt and answer, as ``use batching`` builds them); a trace keeps its prompts and
    its ``hash_ids`` of ``hash_block`` tokens."""
    from plugins.serving.serving_prompts import PROMPT_PARAMS, conversation_tokens, synthetic_prompts

    cache = bool(b.value("enable_prefix_caching"))
    given = [p for p in PROMPT_PARAMS if b.given(p)]
    if b.given("trace"):
        if given:
            b.error_at(given[0], f"'{given[0]}' shapes synthetic prompts, but the prompts come from the trace",
                       f"remove '{given[0]}', or the trace")
        if cache and not hashes:
            b.error_at("enable_prefix_caching", "prefix caching needs each request's prompt blocks: the trace has "
                       "no `hash_ids` column", "give a trace with a `hash_ids` column (ids of the prompt's blocks "
                       "of `hash_block` tokens, as Mooncake's traces), or synthetic requests with "
                       "`system_prompts` / `turns`", code="missing-parameter")
        return w, (hashes if cache else None), int(b.value("hash_block"))
    if b.given("hash_block"):
        b.error_at("hash_block", "'hash_block' is the block of a trace's `hash_ids`; synthetic prompts are "
                   "keyed by the engine's blocks", "remove 'hash_block'")
    if not given and not cache:
        return w, None, block_size
    sys_n, sys_len = b.given("system_prompts"), b.given("system_prompt_tokens")
    if sys_n != sys_len:
        b.error_at("system_prompts" if sys_n else "system_prompt_tokens", "'system_prompts' (how many) and "
                   "'system_prompt_tokens' (their length) go together", "give both, e.g. `system_prompts = 4; "
                   "system_prompt_tokens = 1024 token`", code="missing-parameter")
    if b.given("system_prompt_share") and not sys_n:
        b.error_at("system_prompt_share", "'system_prompt_share' needs 'system_prompts' and 'system_prompt_tokens'",
                   "add `system_prompts = 1; system_prompt_tokens = 1024 token`", code="missing-parameter")
    turns = int(b.value("turns"))
    tokens = int(conversation_tokens(w.prompt, w.output, turns).sum()) \
        + len(w.prompt) * int(b.value("system_prompt_tokens") or 0)
    if tokens // block_size > MAX_PROMPT_BLOCKS:      # before any block id is built (the ids grow with it)
        b.error_at("turns" if turns > 1 else "system_prompt_tokens", f"the synthetic prompts and answers come to "
                   f"{tokens // block_size:,} blocks of {block_size} tokens to key, more than a search keys "
                   f"({MAX_PROMPT_BLOCKS:,})", "fewer requests, fewer or shorter turns, or shorter system prompts",
                   code="out-of-range")
    P, ids = synthetic_prompts(U=w.prompt, G=w.output, turns=int(b.value("turns")),
                               system_prompts=int(b.value("system_prompts") or 0),
                               system_prompt_tokens=int(b.value("system_prompt_tokens") or 0),
                               system_prompt_share=float(b.value("system_prompt_share")), hash_block=block_size,
                               seed=int(b.value("seed")), with_output=True)
    return Workload(w.arrival, P, w.output), (ids if cache else None), block_size


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("serving_search")
    if b is None:
        return
    model = ctx.ref("model")
    objective = b.value("objective")
    if objective == "cost" and not b.given("gpu_hour"):
        b.error_at("objective", '`objective = "cost"` needs the price of a GPU-hour',
                   "add `gpu_hour = [2.5 USD/h]` (one for all devices, or one per device)", code="missing-parameter")
    xs, ys = _ints(b, "prefill_replicas"), _ints(b, "decode_replicas")
    if bool(xs) != bool(ys):
        b.error_at("prefill_replicas" if xs else "decode_replicas",
                   "a disaggregated deployment needs both prefill_replicas and decode_replicas",
                   "give both lists, or neither (aggregated only)", code="missing-parameter")
    if xs and not b.given("kv_link"):
        b.error_at("prefill_replicas", "disaggregated pools need the link their KV transfers cross",
                   "add `kv_link = nic_400g`", code="missing-parameter")
    kv_link = _link_dict(ctx, b.value("kv_link").name) if b.given("kv_link") else None
    ks = _spec_tokens(b)
    got = spec_choices(ctx, b, ks)
    spec, draft = None, None
    if got is None:
        ks = [0]
    else:
        mode, draft, per = got
        spec = SearchSpec(mode, draft.name, {k: float(ctx.nominal(E, structural=True)) for k, (E, _) in per.items()})
    layouts = _layouts(ctx, b, model, draft, spec.mode if spec is not None else "draft")
    seqs = distinct(b, "max_num_seqs", [int(round(_float(ctx, x))) for x in b.q_list("max_num_seqs")],
                    lambda v: f"{v} seq")
    chunks = distinct(b, "max_num_batched_tokens", [int(round(_float(ctx, x)))
                                                    for x in b.q_list("max_num_batched_tokens")], lambda v: f"{v} token")
    w, hashes = _workload(ctx, b)
    eng = b.ref("engine")
    bs = int(_float(ctx, eng.q("block_size", "token")))
    w, ids, id_block = _prompts(b, w, hashes, bs)
    max_len = int(_float(ctx, b.q("max_model_len")))
    keep = sim.refuse_over_max_model_len(b, "max_model_len", w.prompt, w.output, max_len,
                                         f"`use serving_search` in '{ctx.name}'")
    rejected = int(keep.size - np.count_nonzero(keep))
    if rejected:
        w = Workload(w.arrival[keep], w.prompt[keep], w.output[keep])
        ids = [h for h, k in zip(ids, keep.tolist()) if k] if ids is not None else None
    if ids is not None:
        from plugins.serving.serving_prefix_cache import block_keys
        # a trace's ids are chained into keys of the engine's blocks; synthetic ids are those of the
        # engine's blocks of prompt and answer, each naming its block with its whole prefix (a
        # system prompt's block j, or a conversation's), so they are the keys as they stand
        # the screen counts an earlier answer's blocks once a configuration meeting the targets has
        # finished it: TTFT + (G − 1)·TPOT after its arrival
        ready = float(b.value("slo_ttft")) + (w.output - 1) * float(b.value("slo_tpot"))
        w = w.with_keys(block_keys(ids, w.prompt, id_block, bs) if hashes is not None else ids, bs, ready)
    chunked = bool(eng.value("enable_chunked_prefill", False))
    cols = candidates(layouts, _ints(b, "replicas"), seqs, chunks, xs, ys, ks)
    res = run(layouts, cols, w, slo_ttft=float(b.value("slo_ttft")), slo_tpot=float(b.value("slo_tpot")),
              max_model_len=max_len, kv_link=kv_link, objective=objective, simulate_k=int(b.value("simulate")),
              margin=float(b.value("screen_margin")), chunked=chunked, spec=spec)
    res.meta["rejected"] = rejected
    _RESULTS.put(ctx.info, res)
    m = res.meta
    if m["cut"] is not None:
        ctx.warn(f"the serving search of plan '{ctx.name}' stopped at the limit on simulated requests "
                 f"({m['max_requests']:,}): {m['simulated']} configurations simulated ({m['requests']:,} requests), "
                 f"the next needed {m['cut'][1]:,} more", "lower `simulate`, or " + limit_hint("search_requests"),
                 code="limit")
    how = "serving search"
    unmet = res.chosen is None           # the counts then say how far the search got
    ctx.define("search_candidates", sp.Integer(m["candidates"]), "", f"configurations enumerated ({how})",
               headline=unmet)
    ctx.define("search_valid", sp.Integer(m["valid"]), "", f"configurations that fit their devices ({how})",
               headline=unmet)
    ctx.define("search_simulated", sp.Integer(m["simulated"]), "", f"configurations simulated on the trace ({how})",
               headline=unmet)
    ctx.define("search_rejected_requests", sp.Integer(rejected), "request", "requests every configuration rejects: "
               f"input + output tokens above max_model_len (left out of the simulations; {how})", headline=rejected > 0)
    if res.chosen is None and m["valid"] == 0:
        _none_fits(ctx, b, model, m["skipped"], int(w.prompt.max()))
        return
    if res.chosen is None:
        ctx.warn(f"no simulated configuration of plan '{ctx.name}' meets TTFT p95 ≤ {m['slo_ttft']:g} s and TPOT "
                 f"p95 ≤ {m['slo_tpot'] * 1e3:g} ms ({m['passing']} of {m['candidates']} passed the screen)",
                 "add larger tp or replica counts, faster devices, or relax the targets", code="unmet")
        return
    r = res.row(res.chosen)
    ref = ("the chosen configuration of the serving search (simulated on the trace)",)

    def define(name, value, unit, doc, headline=True):
        if not isinstance(value, sp.Basic):
            value = sp.Rational(repr(float(value))) if not isinstance(value, int) else sp.Integer(value)
        ctx.define(name, value, unit, f"{doc} ({how})", headline=headline, references=ref)

    define("search_gpus", r["gpus"], "", f"GPUs of the chosen configuration ({r['device']})")
    if r.get("cost") is not None:
        define("search_cost", sp.Rational(repr(float(r["cost"]))) / 10**6, "USD/Mtoken",
               "cost per million tokens (input + output) of the chosen configuration")
    define("search_ttft_p95", r["ttft_p95"], "s", "p95 time to first token of the chosen configuration")
    define("search_tpot_p95", r["tpot_p95"], "ms", "p95 time per output token of the chosen configuration")
    define("search_throughput", r["throughput"], "token/s", "output tokens per second of the chosen configuration")
    define("search_tp", r["tp"], "", "tensor-parallel degree of the chosen configuration", headline=False)
    define("search_pp", r["pp"], "", "pipeline-parallel degree of the chosen configuration", headline=False)
    define("search_replicas", r["replicas"] if not r["disaggregated"] else
           r["prefill_replicas"] + r["decode_replicas"], "", "engines of the chosen configuration", headline=False)
    if r["disaggregated"]:
        define("search_prefill_replicas", r["prefill_replicas"], "", "prefill engines of the chosen (disaggregated) "
               "configuration", headline=False)
        define("search_decode_replicas", r["decode_replicas"], "", "decode engines of the chosen (disaggregated) "
               "configuration", headline=False)
    define("search_max_num_seqs", r["max_num_seqs"], "seq", "max_num_seqs of the chosen configuration",
           headline=False)
    define("search_max_num_batched_tokens", r["max_num_batched_tokens"], "token", "max_num_batched_tokens of the chosen configuration",
           headline=False)
    if spec is not None:
        define("search_spec_tokens", r["spec_tokens"], "", "tokens the draft proposes per step in the chosen "
               "configuration (0: no speculative decoding)")
        define("search_accepted_tokens_per_step", r["accepted_tokens_per_step"], "", "expected tokens a sequence "
               "gains per decode step in the chosen configuration (1 without speculation)", headline=False)
    if r.get("prefix_hit_rate") is not None:
        define("search_prefix_hit_rate", r["prefix_hit_rate"], "%", "prompt tokens found in the prefix cache at "
               "admission / prompt tokens, in the chosen configuration's simulation")


def _none_fits(ctx, b, model, skipped: dict, longest: int) -> None:
    """The warning of a search none of whose configurations can run: the skip reasons with their
    counts, at the list that causes the most of them, with that reason's remedy."""
    heads, layers = int(model.value("heads")), int(model.value("layers"))
    nkv = int(model.value("kv_heads", heads))
    fits = [t for t in (1, 2, 4, 8, 16, 32, 64) if tp_split_problem(model, t) is None]
    remedy = {
        REASONS[0]: ("tp", f"list tp values that divide the {heads} query heads of model '{model.name}' and divide "
                     f"or are multiples of its {nkv} KV heads, e.g. [{', '.join(map(str, fits))}]"),
        REASONS[1]: ("pp", f"list pp values of at most the {layers} layers of model '{model.name}'"),
        REASONS[2]: ("devices", "larger tp or pp (the weights split over more GPUs), devices with more memory, "
                     "or lower-precision weights (weights = \"fp8\")"),
        REASONS[3]: ("max_model_len", "a shorter max_model_len, larger tp or pp, or devices with more memory"),
        REASONS[4]: ("max_num_batched_tokens", "list max_num_batched_tokens ≥ max_num_seqs (vLLM requires it)"),
        REASONS[5]: ("tp", "list tp values of at most the plan's gpus_per_host (more GPUs: replicas or pp), or set "
                           "`gpus_per_host` to the GPUs one NVLink domain holds (72 for an NVL72 rack)"),
        "chunk below the longest prompt": ("max_num_batched_tokens", "without chunked prefill a step holds a whole "
                                           f"prompt: list a max_num_batched_tokens above the longest ({longest:,} "
                                           "tokens), or an engine with enable_chunked_prefill"),
    }
    top = max(skipped, key=lambda r: (skipped[r], r))
    param, hint = remedy.get(top, ("devices", "check the lists of the search"))
    why = "; ".join(f"{r} ({n:,})" for r, n in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])))
    b.warn_at(param, f"no configuration of the serving search of plan '{ctx.name}' can run: {why}", hint,
              code="unmet")


# ---------------------------------------------------------------- table
def describe(r: dict) -> str:
    """``h100_sxm tp2`` / ``… pp2 ×3`` / ``… 1P+2D``: device, parallelism, engines."""
    s = f"{r['device']} tp{r['tp']}" + (f" pp{r['pp']}" if r["pp"] > 1 else "")
    return s + (f" {r['prefill_replicas']}P+{r['decode_replicas']}D" if r["disaggregated"] else f" ×{r['replicas']}")


def table(res: SearchResult) -> Table:
    """The simulated configurations (front members and the chosen one marked), cheapest first."""
    rows = []
    spec = res.spec is not None
    cached = any("prefix_hit_rate" in res.sim.get(i, {}) for i in res.simulated)
    for i in res.simulated:
        r = res.row(i)
        mark = "chosen" if i == res.chosen else ("front" if i in res.front else "")
        extra = ((r["spec_tokens"],) if spec else ()) + \
            ((float(f"{r['prefix_hit_rate'] * 100:.4g}") if r.get("prefix_hit_rate") is not None else "—",)
             if cached else ())
        rows.append((describe(r), r["max_num_seqs"], r["max_num_batched_tokens"]) + extra +
                    (r["gpus"], "—" if r["cost"] is None else float(f"{r['cost']:.4g}"),
                     float(f"{r['ttft_p95']:.4g}"), float(f"{r['tpot_p95'] * 1e3:.4g}"),
                     float(f"{r['throughput']:.5g}"), mark))
    m = res.meta
    notes = [f"{m['candidates']:,} configurations, {m['valid']:,} fit, {m['stable']:,} keep up in the screen, "
             f"{m['passing']:,} within the screen margin, {m['simulated']} simulated on the trace; "
             f"targets TTFT p95 ≤ {m['slo_ttft']:g} s, TPOT p95 ≤ {m['slo_tpot'] * 1e3:g} ms; "
             f"objective: {m['objective']}"]
    if m.get("rejected"):
        notes.append(f"{m['rejected']:,} requests above max_model_len rejected (left out of every simulation)")
    if m["skipped"]:
        notes.append("skipped: " + "; ".join(f"{k} ({v:,})" for k, v in m["skipped"].items()))
    if spec:
        notes.append(f"speculative decoding ({res.spec.mode}, draft {res.spec.draft}): spec_tokens k drafted per "
                     "step, E = " + ", ".join(f"{v:.4g} at k = {k}" for k, v in sorted(res.spec.E.items()))
                     + " tokens a step")
    if res.chosen is not None:
        r = res.row(res.chosen)
        notes.append("chosen: " + describe(r) + (f", spec_tokens {r['spec_tokens']}" if spec else ""))
    head = ("configuration", "max_num_seqs", "max_num_batched_tokens") + (("spec_tokens",) if spec else ()) + \
        (("prefix hit %",) if cached else ()) + ("GPUs", "USD/Mtok", "TTFT p95 (s)", "TPOT p95 (ms)", "output tok/s",
                                                  "front")
    return Table(head, tuple(rows), tuple(notes))


def result_of(ev, plan: str) -> SearchResult | None:
    """The :class:`SearchResult` of plan ``plan`` of an evaluated workspace (None without
    ``use serving_search``)."""
    d = ev.decls.get(plan)
    if d is None or "serving_search" not in d.uses:
        return None
    return _RESULTS.get(d)


def _build_table(ev, plan):
    res = result_of(ev, plan)
    return table(res) if res is not None else None


@hookimpl
def plan_tables_register():
    return [TableSpec("serving-search", "Serving configurations simulated by the SLO search", _build_table,
                      "the screened configurations simulated on the trace, the Pareto front and the chosen one")]

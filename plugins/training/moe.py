"""Mixture-of-experts routing and long-context work: expert capacity, dropped dispatches and
zero padding, load imbalance across expert-parallel devices, causal attention work of a
packed batch, routing-replay records and the distribution of expert weights.

Blocks (book ch. 10 §10.3.4, §10.5.2, §10.5.4, footnotes 5 and 25; ch. 3 §3.4.2):

``use moe_routing { tokens = 8192 token; capacity_factor = 1.25; routing = "hot_cold" }``
    A token is dispatched to k of E experts: D = tokens·k dispatches, mean load D/E.  Expert
    capacity (Switch Transformer eq. 3, GShard) ``C = ⌊c·tokens·k/E⌋`` rows; an expert that
    receives n_e dispatches drops max(0, n_e − C) and pads max(0, C − n_e) zero rows; every
    expert executes C rows.  Routing distribution: ``uniform`` (every expert D/E),
    ``hot_cold`` (a fraction φ of the experts at ρ × the mean, the rest share what is left:
    (1 − φρ)/(1 − φ) × the mean) or ``histogram`` (a CSV of dispatches per expert, scaled to D).
    The smallest capacity factor with no drops is the solver's answer to
    ``solve capacity_factor for expert_capacity >= max_expert_load``.
    Imbalance (§10.3.4): experts are placed contiguously on ``devices`` expert-parallel
    devices; the expert phase lasts as long as the most loaded device
    (``max_device_rows`` × ``row_time``), against the mean for a balanced routing.

``use long_context { seq_lens = [7168 token, 1024 token] }`` or ``{ lengths = "hist.csv" }``
    A causal sequence of s tokens has s(s+1)/2 query–key pairs; a packed batch
    Σ s_i(s_i+1)/2.  The forward QKᵀ and AV of one layer cost 2·n_q·(d_qk + d_v) FLOPs per
    pair (4·n_q·d_h for a GQA model, ch. 3 §3.4.2).  Compared with the same tokens in as many
    sequences of equal length.  With ``devices`` > 1 whole sequences are placed longest first on
    the least loaded device (LPT): the most loaded device sets the attention time (length
    grouping evens the triangles out; context parallelism would split a long one).

``use routing_replay { tokens = 8192 token; id_bytes = 2 B }``
    Routing-replay (R3) record: tokens × MoE layers × k × id width (§10.5.4, exercise 10-8).

``use expert_sync { receivers = 16 }``
    Expert weights of the model (routed experts × bytes per parameter), each receiver's
    shard under expert parallelism, and the volume of sending all of them to every receiver
    versus each its shard (§10.5.2).

Book provenance of the ``capacity-curve`` figure: ch. 10 §10.3.4, fig. 10-27.
"""
from __future__ import annotations

import csv

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import FigureSpec, Param, TableSpec, Table, UseSpec, hinge_sum, max_of, shortfall_sum, subs_numbers

from plugins.model.decoder import architecture, moe_architecture, top_k_problem

ROUTINGS = ("uniform", "hot_cold", "histogram")
DISPATCHES = ("dropless", "padded", "dropping")

ROUTING = UseSpec(
    "moe_routing",
    "expert capacity, dropped dispatches, zero padding and device imbalance of an MoE layer",
    references=("Fedus et al. 2021, 'Switch Transformers', eq. 3 (expert capacity)", "Lepikhin et al. 2020, 'GShard'",
                "expert capacity and device imbalance: dispatches beyond ⌊c·tokens·k/E⌋ dropped, the busiest device "
                "sets the pace"),
    params=(
        Param("tokens", "token", doc="tokens routed through the layer in one step (per expert-parallel group)",
              min=0, min_open=True),
        Param("experts", doc="routed experts E (default: the model's)", kind="int", min=1, optional=True),
        Param("top_k", doc="experts per token k (default: the model's)", kind="int", min=1, optional=True),
        Param("capacity_factor", "", "1", "capacity factor c: rows per expert as a multiple of the mean load",
              min=0, min_open=True),
        Param("routing", default='"uniform"', kind="choice", choices=ROUTINGS,
              doc="distribution of dispatches over experts"),
        Param("dispatch", default='"dropless"', kind="choice", choices=DISPATCHES,
              doc="what each expert executes: dropless (every dispatched row, no capacity: Megatron-Core's and "
                  "MegaBlocks' default), padded (exactly its capacity: rows beyond it dropped, the rest zero-padded, "
                  "as GShard and Switch), or dropping (its rows up to the capacity, no padding)"),
        Param("hot_fraction", "", "0.5", "hot_cold: fraction of the experts that are hot", min=0, min_open=True,
              max=1),
        Param("hot_load", "", "1.5", "hot_cold: load of a hot expert as a multiple of the mean", min=1),
        Param("histogram", kind="file", optional=True,
              doc="histogram: CSV `expert,dispatches` (relative counts, one row per expert)"),
        Param("devices", doc="expert-parallel devices the experts are spread over (default: E)", kind="int",
              min=1, optional=True),
        Param("row_time", "s/token", optional=True, doc="time one device spends on one dispatched row"),
    ),
    order=60,
    provides=("dispatches", "mean_expert_load", "max_expert_load", "expert_capacity", "dropped_dispatches",
              "drop_fraction", "executed_rows", "padded_rows", "padding_fraction", "max_device_rows",
              "mean_device_rows", "imbalance_saving", "expert_time", "balanced_expert_time"),
)

LONG = UseSpec(
    "long_context",
    "causal attention work of a packed batch from its sequence lengths",
    references=("packed long-context batches: causal attention work Σ s_i(s_i+1)/2 per packed batch",
                "causal attention FLOPs: 4·n_q·d_h per query–key pair"),
    params=(
        Param("seq_lens", "token", kind="list", optional=True, min_items=1, min=0, min_open=True,
              doc="lengths of the sequences packed together"),
        Param("lengths", kind="file", optional=True,
              doc="CSV `length,count` histogram of sequence lengths (instead of seq_lens)"),
        Param("devices", "", "1", "devices the batch's attention work is spread over", min=1, whole=True),
    ),
    plan_params=(Param("model", kind="ref", ref_kind="model", doc="the model"),),
    order=61,
    provides=("packed_tokens", "packed_sequences", "attention_pairs", "attention_pairs_equal",
              "attention_increase", "attention_flops_layer", "attention_flops_step",
              "attention_flops_per_device", "attention_pairs_max_device", "attention_imbalance",
              "attention_flops_max_device"),
)

REPLAY = UseSpec(
    "routing_replay",
    "size of the routing-replay record of expert ids (R3)",
    references=("routing replay (R3): Ma et al. 2025, 'Stabilizing MoE Reinforcement Learning by Aligning Training "
                "and Inference Routers'",),
    params=(
        Param("tokens", "token", doc="tokens whose routing is recorded", min=0, min_open=True),
        Param("id_bytes", "B", "2 B", "bytes of one expert id (uint16: 2 B, int32: 4 B)", min=0, min_open=True),
        Param("context_parallel", "", "1", "devices a sequence's tokens are split over", min=1, whole=True),
    ),
    plan_params=(Param("model", kind="ref", ref_kind="model", doc="the MoE model"),),
    order=62,
    provides=("routing_record", "routing_record_per_device"),
)

SYNC = UseSpec(
    "expert_sync",
    "distribution of expert weights from a trainer to expert-parallel receivers",
    references=("expert weights to expert-parallel ranks: full copies to every rank versus each rank its shard",),
    params=(
        Param("receivers", "", "16", "expert-parallel receivers (EP degree)", min=1, whole=True),
        Param("bytes_per_param", "B/param", "2 B/param", "bytes of one weight (BF16: 2)", min=0, min_open=True),
    ),
    plan_params=(Param("model", kind="ref", ref_kind="model", doc="the MoE model"),),
    order=63,
    provides=("expert_weight_bytes", "expert_shard_bytes", "broadcast_volume", "sharded_volume"),
)


@hookimpl
def plan_blocks_register():
    return [ROUTING, LONG, REPLAY, SYNC]


# ---------------------------------------------------------------- helpers
def read_csv_column(ctx, b, param, columns):
    """Rows of a two-column CSV file parameter as exact Rationals.

    :param columns: the two header names expected, e.g. ``("expert", "dispatches")``.
    :return: list of ``(first, second)`` pairs (sympy Rationals); errors name the row.
    """
    path = b.path(param)
    rows = []
    try:
        # utf-8-sig: spreadsheets save CSV with a byte-order mark before the header
        import dsl.plugin as safeio
        text = safeio.read_text(path, what="data file")
    except safeio.FileRefused as e:
        if e.kind == "encoding":
            b.error_at(param, f"'{path.name}' is not UTF-8 text (line {e.line}, column {e.column})",
                       "save the CSV as UTF-8", code="bad-file")
        b.error_at(param, e.summary, e.hint, code=e.code)
    except OSError as e:
        b.error_at(param, f"cannot read '{path.name}': {e.strerror or e}", "check the file", code="bad-file")
    # blank and comment lines skipped, each row kept with its line in the file (errors point at it)
    lines = [(i, line) for i, line in enumerate(text.splitlines(), start=1)
             if line.strip() and not line.lstrip().startswith("#")]
    header = next(csv.reader([lines[0][1]]), None) if lines else None
    if header is None or [h.strip() for h in header] != list(columns):
        b.error_at(param, f"'{path.name}' must start with the header `{','.join(columns)}`",
                   f"got `{','.join(header or [])}`", code="bad-file")
    where = b.value_span(param)
    related = ((f"`{param}` of `use {b.name}` in '{ctx.name}'", where),) if where is not None else ()
    for n, line in lines[1:]:
        row = next(csv.reader([line]), [])
        try:
            if len(row) != 2:
                raise ValueError
            a, c = (sp.Rational(x.strip()) for x in row)
            if c < 0:
                raise ValueError
        except (ValueError, TypeError, SyntaxError, ZeroDivisionError):
            ctx.error(f"'{path.name}' row {n} is not two numbers `{','.join(columns)}` with a non-negative "
                      f"count: {','.join(row)!r}", "one row per item, e.g. `3,1200`",
                      span=ctx.file_span(path, n, 1, len(line) + 1), code="bad-file", related=related)
        rows.append((a, c))
    if not rows or sum(c for _, c in rows) == 0:
        b.error_at(param, f"'{path.name}' has no rows with a positive count", "add rows below the header",
                   code="bad-file")
    return rows


def _model_int(ctx, b, param, field):
    """A structural count from the block or, when not given, from the plan's model."""
    if b.value(param) is not None:
        return b.q(param), int(b.value(param))
    if ctx.value("model") is None:
        b.error_at(param, f"`use {b.name}` needs `{param} = …` or a plan `model = …` with {field}",
                   f"write `{param} = …` in the block", code="missing-parameter")
    m = ctx.ref("model")
    if not m.has(field):
        b.error_at(param, f"model '{m.name}' is not a mixture-of-experts model (no field '{field}')",
                   f"write `{param} = …` in the block or use an MoE model", code="missing-parameter")
    return m.q(field), int(m.value(field))


def _loads(ctx, b, E, n_E, D):
    """Per-expert dispatch counts as a list of (count of experts, load expr) groups, in expert
    order, and the per-expert list (length n_E) for device grouping."""
    routing = b.value("routing")
    if routing == "uniform":
        return [D / E] * n_E
    if routing == "hot_cold":
        hot = int(round(float(b.value("hot_fraction")) * n_E))
        if not 0 < hot < n_E:
            b.error_at("hot_fraction", f"hot_fraction × experts = {hot} hot experts of {n_E}: "
                       "need at least one hot and one cold expert", "use routing = \"uniform\" instead")
        rho = b.q("hot_load")
        phi = sp.Integer(hot) / E
        mean = D / E
        if float(b.value("hot_load")) * hot > n_E:
            b.error_at("hot_load", f"{hot} hot experts at {b.value('hot_load')}× the mean take more than "
                       "every dispatch", "lower hot_load or hot_fraction")
        cold = (1 - phi * rho) / (1 - phi) * mean
        return [rho * mean] * hot + [cold] * (n_E - hot)
    if b.value("histogram") is None:
        b.error_at("routing", 'routing = "histogram" needs `histogram = "file.csv"`',
                   "add the CSV of dispatches per expert", code="missing-parameter")
    rows = read_csv_column(ctx, b, "histogram", ("expert", "dispatches"))
    if len(rows) != n_E:
        b.error_at("histogram", f"the histogram has {len(rows)} experts but the layer has {n_E}",
                   "one row per routed expert", code="bad-file")
    total = sum(c for _, c in rows)
    return [c / total * D for _, c in sorted(rows, key=lambda r: r[0])]


def _max(xs):
    return max_of(xs)


# ---------------------------------------------------------------- pricing
@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("moe_routing")
    if b is not None and b.value("row_time") is not None:
        E, n_E, k, _D, loads, per_dev = _routing(ctx, b)
        _schedule_experts(ctx, b, _device_rows(b, loads, per_dev, n_E, _capacity(b, E, k))[0])


@hookimpl
def plan_quantities_price(ctx):
    if ctx.block("moe_routing") is not None:
        _price_routing(ctx, ctx.block("moe_routing"))
    if ctx.block("long_context") is not None:
        _price_long(ctx, ctx.block("long_context"))
    if ctx.block("routing_replay") is not None:
        _price_replay(ctx, ctx.block("routing_replay"))
    if ctx.block("expert_sync") is not None:
        _price_sync(ctx, ctx.block("expert_sync"))


def _routing(ctx, b):
    """Structure of one routed layer: (E, number of experts, k, dispatches D = tokens·k,
    per-expert loads, per-device rows), all sympy in token units; errors at the parameters."""
    E, n_E = _model_int(ctx, b, "experts", "experts")
    k, n_k = _model_int(ctx, b, "top_k", "experts_per_token")
    problem = top_k_problem(n_k, n_E)
    if problem:
        b.error_at("top_k" if b.given("top_k") else "experts", f"`use {b.name}`: {problem}",
                   f"lower top_k to at most {n_E} or raise experts")
    D = b.q("tokens") * k
    loads = _loads(ctx, b, E, n_E, D)
    n_dev = int(b.value("devices") or n_E)
    if n_E % n_dev:
        b.error_at("devices", f"{n_E} experts do not split evenly over {n_dev} devices",
                   "use a divisor of the expert count")
    g = n_E // n_dev
    per_dev = [sum(loads[i * g:(i + 1) * g]) for i in range(n_dev)]
    return E, n_E, k, D, loads, per_dev


def _price_routing(ctx, b):
    E, n_E, k, D, loads, per_dev = _routing(ctx, b)
    T, c = b.q("tokens"), b.q("capacity_factor")
    n_dev = len(per_dev)
    D = ctx.define("dispatches", D, "token", "token dispatches: tokens × k", headline=True)
    ctx.define("mean_expert_load", D / E, "token", "mean dispatches per expert: tokens·k/E")
    ctx.define("max_expert_load", _max(loads), "token", "dispatches of the most loaded expert")
    cap = ctx.define("expert_capacity", _capacity(b, E, k), "token",
                     "rows per expert: ⌊c·tokens·k/E⌋", headline=True,
                     references=("Fedus et al. 2021, 'Switch Transformers', eq. 3 (expert capacity)",
                                 "expert capacity and device imbalance: dispatches beyond ⌊c·tokens·k/E⌋ dropped, "
                                 "the busiest device sets the pace"))
    drop = ctx.define("dropped_dispatches", hinge_sum(loads, cap), "token",
                      "dispatches beyond an expert's capacity, passed on by the residual", headline=True)
    ctx.define("drop_fraction", drop / D, "%", "dropped share of all dispatches", headline=True)
    if ctx.nominal(cap) == 0:
        k_n = int(ctx.nominal(k))
        who = "tokens" if b.given("tokens") else "capacity_factor"
        b.error_at(who, f"the expert capacity ⌊c·tokens·k/E⌋ = ⌊{float(ctx.nominal(c)):g} × "
                   f"{float(ctx.nominal(T)):g} × {k_n} / {n_E}⌋ is 0 rows: every expert drops every dispatch, "
                   "and no row is executed", f"raise tokens or capacity_factor so that c·tokens·k ≥ {n_E} "
                   "(one row per expert at least)")
    rows = ctx.define("executed_rows", E * cap, "token", "rows every expert executes: E × capacity")
    pad = ctx.define("padded_rows", shortfall_sum(loads, cap), "token",
                     "zero rows filling unused capacity (still computed and sent)", headline=True)
    ctx.define("padding_fraction", pad / rows, "%", "zero-padded share of the executed rows", headline=True)

    mode = b.value("dispatch")
    executed, what = _device_rows(b, loads, per_dev, n_E, cap)
    if mode == "dropless" and b.given("capacity_factor") and ctx.provided("step_time"):
        b.warn_at("capacity_factor", "with dispatch = \"dropless\" the capacity factor does not reach the "
                  "training step: every dispatched row runs (the capacity columns say what a capacity would drop "
                  "and pad)", 'set dispatch = "padded" (GShard, Switch) or "dropping" to price a capacity',
                  code="unused")
    worst = ctx.define("max_device_rows", _max(executed), "token", what, headline=True)
    even = ctx.define("mean_device_rows", D / n_dev, "token", "dispatched rows per device when balanced")
    ctx.define("imbalance_saving", 1 - even / worst, "%",
               "share of the expert phase a balanced routing saves: 1 − mean/max", headline=True,
               references=("expert capacity and device imbalance: dispatches beyond ⌊c·tokens·k/E⌋ dropped, the "
                           "busiest device sets the pace",))
    if b.value("row_time") is not None:
        ctx.define("balanced_expert_time", even * b.q("row_time"), "ms",
                   "expert phase with every device at the mean")


def _device_rows(b, loads, per_dev, n_E, cap):
    """The rows each expert-parallel device executes, and what they are: the step's expert phase
    and its all-to-all follow the busiest device (max_device_rows / mean_device_rows is the
    imbalance `use layout` reads).  dropless: every dispatched row; padded: each expert exactly
    its capacity (GShard, Switch: rows beyond it dropped, the rest zero rows, computed and sent);
    dropping: each expert's rows up to its capacity."""
    n_dev = len(per_dev)
    g = n_E // n_dev
    mode = b.value("dispatch")
    if mode == "padded":
        return [g * cap] * n_dev, "rows of every expert-parallel device: its experts' capacity (padded)"
    if mode == "dropping":
        return ([sum(sp.Min(ld, cap) for ld in loads[i * g:(i + 1) * g]) for i in range(n_dev)],
                "rows of the most loaded expert-parallel device, each expert's capped at its capacity")
    return per_dev, "dispatched rows of the most loaded expert-parallel device (no capacity limit)"


def _capacity(b, E, k):
    """⌊c·tokens·k/E⌋ rows per expert (Fedus et al. 2021, eq. 3)."""
    return sp.floor(b.q("capacity_factor") * b.q("tokens") * k / E)


def _schedule_experts(ctx, b, per_dev):
    """Timeline ``experts``: each device computes its dispatched rows, then the combine waits
    for all of them — the most loaded device is the critical path."""
    rt = b.q("row_time")
    tl = ctx.timeline("experts")
    for i, rows in enumerate(per_dev):
        tl.add(f"experts_dev{i}", rows * rt, f"dev{i}", kind="compute", label=str(i),
               doc=f"expert FFNs of device {i}: its dispatched rows × row time")
    tl.add("combine", 0, None, after=[f"experts_dev{i}" for i in range(len(per_dev))], kind="comm",
           doc="combine: every token's expert outputs are needed")
    tl.makespan_quantity("expert_time", "ms", "expert phase: the most loaded device sets it",
                         references=("expert capacity and device imbalance: dispatches beyond ⌊c·tokens·k/E⌋ "
                                     "dropped, the busiest device sets the pace",))


def _pairs(s):
    """Causal query–key pairs of one sequence (:func:`plugins.model.flops.attention_pairs`)."""
    from plugins.model.flops import attention_pairs
    return attention_pairs(s)


def _price_long(ctx, b):
    given = [p for p in ("seq_lens", "lengths") if b.value(p) is not None]
    if len(given) != 1:
        b.error_at("seq_lens", "`use long_context` needs exactly one of `seq_lens = [...]` and "
                   "`lengths = \"hist.csv\"`", "give the packed lengths as a list or a histogram",
                   code="missing-parameter")
    if given[0] == "seq_lens":
        items = [(s, sp.Integer(1), v) for s, v in zip(b.q_list("seq_lens"), b.value("seq_lens"))]
    else:
        items = [(s, c, float(s)) for s, c in read_csv_column(ctx, b, "lengths", ("length", "count")) if c]
        bad = next((s for s, _, _ in items if not s > 0), None)
        if bad is not None:
            b.error_at("lengths", f"'{b.path('lengths').name}' has a sequence length {bad}; lengths must be positive",
                       "one row per length in tokens, e.g. `4096,2`", code="bad-file")
    n = sum(c for _, c, _ in items)
    T = ctx.define("packed_tokens", sum(s * c for s, c, _ in items), "token", "tokens of the packed batch")
    ctx.define("packed_sequences", n, "", "sequences in the packed batch")
    P = ctx.define("attention_pairs", sum(c * _pairs(s) for s, c, _ in items), "",
                   "causal query–key pairs Σ s_i(s_i+1)/2", headline=True,
                   references=("packed long-context batches: causal attention work Σ s_i(s_i+1)/2 per packed batch",))
    Pe = ctx.define("attention_pairs_equal", n * _pairs(T / n), "",
                    "pairs of the same tokens in as many sequences of equal length")
    ctx.define("attention_increase", P / Pe - 1, "%", "extra attention work over equal lengths", headline=True)
    model = ctx.ref("model")
    a, m = architecture(model), moe_architecture(model)
    dqk = a["dh"]
    dv = (m["dv"] if m["dv"] is not None else a["dh"] - m["dr"]) if m["mla"] else a["dh"]
    layer = ctx.define("attention_flops_layer", 2 * a["nq"] * (dqk + dv) * P, "TFLOP",
                       "forward QKᵀ and AV FLOPs of one layer: 2·n_q·(d_qk + d_v) per pair",
                       headline=True, references=("causal attention FLOPs: 4·n_q·d_h per query–key pair",))
    step = ctx.define("attention_flops_step", 3 * a["L"] * layer, "TFLOP",
                      "forward + backward attention FLOPs of all layers for the batch")
    ctx.define("attention_flops_per_device", step / b.q("devices"), "TFLOP",
               "attention FLOPs per device when the batch's work is spread evenly")
    # whole sequences on devices: longest-processing-time-first assignment (nominal lengths)
    n_dev = int(round(float(b.value("devices"))))
    from dsl.plugin import current_limits as current, limit_hint as raise_hint
    if n_dev > current().activities:
        b.error_at("devices", f"devices = {n_dev:.3g} is more than the {current().activities:,} devices a "
                   "placement can list one by one", raise_hint("activities"), code="limit")
    if n_dev > 1:
        if n > 100_000:
            b.error_at("devices", f"{n} sequences are too many to place one by one",
                       "give the histogram of one step's batch")
        per_dev = _assign(items, n_dev)
        worst = ctx.define("attention_pairs_max_device", _max(per_dev), "",
                           "pairs of the most loaded device, whole sequences placed longest first",
                           headline=True)
        ctx.define("attention_imbalance", worst * b.q("devices") / P - 1, "%",
                   "extra attention time of the most loaded device over an even split", headline=True)
        ctx.define("attention_flops_max_device", step * worst / P, "TFLOP",
                   "attention FLOPs of the most loaded device")


def _assign(items, n_dev):
    """Place whole sequences on ``n_dev`` devices, longest first, each on the device with the
    fewest pairs so far (LPT, at nominal lengths).

    :param items: [(length expr, count, nominal length)]; :return: per-device pair sums (sympy).
    """
    import heapq
    order = sorted(range(len(items)), key=lambda j: (-items[j][2], j))
    heap = [(0.0, i) for i in range(n_dev)]
    per = [dict() for _ in range(n_dev)]
    for j in order:
        s, c, v = items[j]
        for _ in range(int(c)):
            load, i = heapq.heappop(heap)
            per[i][j] = per[i].get(j, 0) + 1
            heapq.heappush(heap, (load + v * (v + 1) / 2, i))
    return [sum((n * _pairs(items[j][0]) for j, n in d.items()), sp.Integer(0)) for d in per]


def _price_replay(ctx, b):
    model = ctx.ref("model")
    m = moe_architecture(model)
    if not m["moe"]:
        ctx.error(f"model '{model.name}' has no routed experts; `use routing_replay` records expert ids",
                  "use a mixture-of-experts model", code="missing-parameter")
    a = architecture(model)
    rec = ctx.define("routing_record", b.q("tokens") * (a["L"] - m["Ld"]) * m["k"] * b.q("id_bytes"), "MiB",
                     "routing-replay record: tokens × MoE layers × k × id width", headline=True,
                     references=("routing replay (R3): Ma et al. 2025, 'Stabilizing MoE Reinforcement Learning by "
                                 "Aligning Training and Inference Routers'",))
    ctx.define("routing_record_per_device", rec / b.q("context_parallel"), "MiB",
               "record held by one device when the context is split (ids travel with their tokens)",
               headline=True)


def _price_sync(ctx, b):
    model = ctx.ref("model")
    if not moe_architecture(model)["moe"]:
        ctx.error(f"model '{model.name}' has no routed experts to distribute", "use a mixture-of-experts model",
                  code="missing-parameter")
    W = ctx.define("expert_weight_bytes", model.q("expert_params", "param") * b.q("bytes_per_param"), "GiB",
                   "routed expert weights of the model", headline=True)
    R = b.q("receivers")
    ctx.define("expert_shard_bytes", W / R, "GiB", "expert weights one receiver needs (its EP shard)",
               headline=True)
    ctx.define("broadcast_volume", R * W, "GiB", "sending every expert to every receiver", headline=True)
    ctx.define("sharded_volume", W, "GiB", "sending each receiver only its shard", headline=True)


# ---------------------------------------------------------------- table and figure
CURVE = [sp.Rational(x, 100) for x in range(100, 201, 5)]
BOOK_FACTORS = (sp.Integer(1), sp.Rational(5, 4), sp.Rational(3, 2), sp.Integer(2))


def _curve(ws, plan, factors):
    """(c, capacity, drop fraction, padding fraction) at each capacity factor, everything else
    at its nominal value; ``None`` when the plan has no ``use moe_routing``."""
    from dsl.plugin import symbol
    cid = f"{plan}.moe_routing.capacity_factor"
    if cid not in ws.nodes or f"{plan}.drop_fraction" not in ws.nodes:
        return None
    at = ws.nominal_map(exclude={cid})
    free = frozenset({cid})
    exprs = [ws.full_expr(f"{plan}.{q}", free)
             for q in ("expert_capacity", "drop_fraction", "padding_fraction")]
    c = symbol(cid)
    # every input at once, so each max(0, x − capacity) is built from numbers: substituting the
    # nominal point first leaves sums of Max in c that sympy simplifies pairwise (slow)
    return [(f, *(subs_numbers(e, {**at, c: f}) for e in exprs)) for f in factors]


def _table(ws, plan):
    rows = _curve(ws, plan, BOOK_FACTORS)
    if rows is None:
        return None
    return Table(("capacity factor", "capacity / rows", "dropped dispatches", "zero-padded rows"),
                 tuple((f"{float(c):g}", f"{int(cap):,}", f"{100 * float(d):.3g} %", f"{100 * float(p):.3g} %")
                       for c, cap, d, p in rows),
                 ("padding as a share of executed rows",))


def _draw(ws, plan, fig):
    rows = _curve(ws, plan, CURVE)
    if rows is None:
        return False
    xs = [float(r[0]) for r in rows]
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(xs, [100 * float(r[2]) for r in rows], marker="o", label="dropped dispatches")
    ax.plot(xs, [100 * float(r[3]) for r in rows], marker="s", label="zero-padded rows (of executed)")
    ax.set_xlabel("capacity factor c")
    ax.set_ylabel("%")
    ax.set_title(f"{plan}: drops and padding vs capacity factor")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return True


@hookimpl
def plan_tables_register():
    return [TableSpec("capacity-factor", "Capacity factor: drops and zero padding", _table,
                      references=("capacity factor table: Fedus et al. 2021, 'Switch Transformers: Scaling to "
                                  "Trillion Parameter Models with Simple and Efficient Sparsity'",
                                  "Fedus et al. 2021, 'Switch Transformers', eq. 3 (expert capacity)"), per_plan=False)]


@hookimpl
def plan_figures_register():
    return [FigureSpec("capacity-curve", "Dropped dispatches and zero padding vs capacity factor",
                       _draw, references=("capacity factor against dropped dispatches and zero padding: Fedus et al. "
                                          "2021, 'Switch Transformers: Scaling to Trillion Parameter Models with "
                                          "Simple and Efficient Sparsity'",))]

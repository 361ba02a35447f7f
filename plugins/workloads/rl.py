"""Reinforcement-learning loops: stage rates and the bottleneck, synchronous vs asynchronous
rollout–train–sync loops on the shared timeline engine, and weight synchronisation.

Blocks (book ch. 10 §10.5.2–10.5.3, exercise 10-7; ch. 3 §3.5.2–3.5.3, exercise 3-7):

``use rl_stages { gen_rate; verify_rate; train_rate; keep }``
    Three stages in series on independent resources, each rate in one unit of work
    (trajectories of equal length per second).  After verification only a fraction q is kept
    (stale policy version, filtered).  The steady pipelined upper bound (§10.5.2)::

        effective_rate = min(r_train, q · min(r_gen, r_verify))

    Every stage's capacity is expressed at the training input (q·r_gen, q·r_verify, r_train);
    the smallest is the bottleneck, the second smallest (``next_bottleneck_rate``, the median of
    the three) is the rate reached once the bottleneck alone is scaled far enough.  Rates
    12 / 6 / 8 per second with q = 0.75 give 4.5; doubling generation leaves 4.5; doubling
    verification gives 8 and training becomes the bottleneck (table ``rl-stages``).

``use rl_loop { gen_time; train_time; sync_time; keep; batch; iterations }``
    The feedback loop as activities on two timelines, ``rl_sync`` and ``rl_async``, over
    ``iterations`` batches:

    * synchronous (Fig. 10-42): generate batch k → train on it → blocking weight sync → the
      next generation;
    * asynchronous (Fig. 10-43): generation of batch k+1 runs on its own resources while the
      trainer works on batch k (both start after the previous sync); the sync needs both
      done and blocks both sides.

    The period is measured on the schedule as the time between the last two weight syncs
    (``Timeline.event_quantity``), so it is the steady state, not the warm-up (reached after the
    first sync, so 2–3 batches suffice).  Up to 3 batches the period is the exact max-plus
    expression, valid for every input; with more it is the symbolic length of the nominal
    critical path (the max-plus tree of this loop doubles with each batch):
    60 s and max(40, 16) + 4 = 44 s for the book's 40 / 16 / 4 s.  With B trajectories per
    batch and a kept fraction q in the asynchronous loop, effective rates are B/T_sync and
    q·B/T_async; ``async_gain`` = q·T_sync/T_async − 1 (+9 % at q = 0.8, −5 % at q = 0.7).
    The break-even q* = T_async/T_sync = 11/15 is a ``solve`` on ``async_rate >= sync_rate``.

``use rl_weight_sync { instances; bytes_per_param; weights; receivers; shard_aware; fanout;
groups; link }``
    Publishing new weights to r generation instances (§3.5.3, §10.5.2).  Each instance has
    ``receivers`` ranks (e.g. EP16); with ``shard_aware`` each rank receives only its shard
    M_W/receivers, otherwise the full M_W.  Bytes delivered: r · receivers · per-rank bytes
    (4 × 16.381 GB ≈ 65.526 GB for Qwen3-8B BF16).  Bytes the source sends: all of them for
    ``unicast``; one instance's worth for ``broadcast`` (a chain/tree where receivers forward);
    ``groups`` instances' worth for ``hierarchical`` (one copy per group, relayed inside).
    The book's EP example: 423 GiB of experts to 16 ranks: 16 × 423 = 6,768 GiB as full copies,
    423 GiB shard-aware (26.4 GiB per rank).
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import FigureSpec, Param, Table, TableSpec, UseSpec

STAGES = UseSpec(
    "rl_stages",
    "RL stage rates (generation, verification, training) and the effective training rate",
    references=("RL stage rates: the pipelined loop runs at its slowest stage, min(r_train, q · min(r_gen, r_verify))",),
    params=(
        Param("gen_rate", "sample/s", doc="trajectories generated per second", min=0, min_open=True),
        Param("verify_rate", "sample/s", doc="trajectories verified (rewarded) per second", min=0, min_open=True),
        Param("train_rate", "sample/s", doc="trajectories the trainer consumes per second", min=0, min_open=True),
        Param("keep", "", "1", "fraction of verified trajectories kept for training (q)", min=0, min_open=True,
              max=1),
    ),
    order=60,
    provides=("gen_capacity", "verify_capacity", "train_capacity", "offered_rate", "effective_rate",
              "next_bottleneck_rate", "bottleneck_headroom"),
)

LOOP = UseSpec(
    "rl_loop",
    "synchronous vs asynchronous rollout–train–weight-sync loops on timelines",
    references=("synchronous and asynchronous RL loops: generation, verification and training in sequence or "
                "overlapped with stale policies",),
    params=(
        Param("gen_time", "s", doc="generation of one batch", min=0, min_open=True),
        Param("train_time", "s", doc="training on one batch", min=0, min_open=True),
        Param("sync_time", "s", "0 s", "weight synchronisation, blocking both sides", min=0),
        Param("keep", "", "1", "fraction of an asynchronous batch kept (not too stale)", min=0, min_open=True, max=1),
        Param("batch", "sample", doc="trajectories per batch (rates in batch/s when omitted)", optional=True,
              min=0, min_open=True),
        Param("iterations", "", "3", "batches put on each timeline (the period is measured between the last two)",
              kind="int", min=2, max=50),
    ),
    order=61,
    provides=("sync_period", "async_period", "sync_rate", "async_rate", "async_gain"),
)

SYNC = UseSpec(
    "rl_weight_sync",
    "publishing updated weights to generation instances: bytes delivered and sent by the source",
    references=("weight synchronisation: publishing new policy weights to the generation instances",
                "expert-parallel weight distribution: each rank receives only its own experts"),
    params=(
        Param("instances", "", doc="generation instances that need the new weights (r)", min=1, whole=True),
        Param("bytes_per_param", "B/param", "2 B/param", "bytes per weight sent (2 for BF16)", min=0,
              min_open=True),
        Param("weights", "B", doc="bytes of one full copy of the weights (default: params × bytes_per_param)",
              optional=True, min=0, min_open=True),
        Param("receivers", "", "1", "ranks per instance that hold a shard (e.g. 16 for EP16)", min=1, whole=True),
        Param("shard_aware", default="true", kind="bool",
              doc="each rank receives only its shard (otherwise the full weights)"),
        Param("fanout", default='"unicast"', kind="choice", choices=("unicast", "broadcast", "hierarchical"),
              doc="unicast: the source sends every copy; broadcast: one copy, receivers forward; "
                  "hierarchical: one copy per group"),
        Param("groups", "", "1", "groups the source feeds under `hierarchical` fan-out", min=1, whole=True),
        Param("link", kind="ref", ref_kind="link", optional=True, doc="the source's link (gives the sync time)"),
    ),
    order=62,
    provides=("weight_bytes", "receiver_bytes", "weight_receivers", "delivered_bytes", "source_bytes",
              "weight_sync_time"),
)


@hookimpl
def plan_units_register():
    # a trajectory is one sampled answer (one sample of training data)
    return [("trajectory", 1, None, "sample"), ("trajectories", 1, None, "sample")]


@hookimpl
def plan_blocks_register():
    return [STAGES, LOOP, SYNC]


FULL_ITERATIONS = 3    # batches up to which the loop's period is an exact max-plus expression


def median3(a, b, c):
    """The middle value of three (sympy): max(min(a, b), min(max(a, b), c))."""
    return sp.Max(sp.Min(a, b), sp.Min(sp.Max(a, b), c))


@hookimpl
def plan_quantities_price(ctx):
    _price_stages(ctx)
    _price_loop(ctx)
    _price_sync(ctx)


def _price_stages(ctx):
    b = ctx.block("rl_stages")
    if b is None:
        return
    q = b.q("keep")
    rg, rv, rl = b.q("gen_rate"), b.q("verify_rate"), b.q("train_rate")
    cg = ctx.define("gen_capacity", q * rg, "sample/s", "generation rate at the training input: q·r_gen")
    cv = ctx.define("verify_capacity", q * rv, "sample/s", "verification rate at the training input: q·r_verify")
    cl = ctx.define("train_capacity", rl, "sample/s", "training rate r_train")
    ctx.define("offered_rate", q * sp.Min(rg, rv), "sample/s",
               "kept trajectories offered to training: q·min(r_gen, r_verify)", headline=True, rank=60)
    eff = ctx.define("effective_rate", sp.Min(rl, q * sp.Min(rg, rv)), "sample/s",
                     "trainable trajectories per second: min(r_train, q·min(r_gen, r_verify))",
                     references=("RL stage rates: the pipelined loop runs at its slowest stage, min(r_train, q · "
                                 "min(r_gen, r_verify))",),
                     headline=True, rank=61)
    nxt = ctx.define("next_bottleneck_rate", median3(cg, cv, cl), "sample/s",
                     "the rate once the bottleneck alone is scaled up: the second-smallest stage capacity",
                     headline=True, rank=62)
    ctx.define("bottleneck_headroom", nxt / eff, "", "speed-up available from scaling the bottleneck stage alone")


def _price_loop(ctx):
    b = ctx.block("rl_loop")
    if b is None:
        return
    t_sync = ctx.define("sync_period", ctx.q("rl_sync_last", "s") - ctx.q("rl_sync_prev", "s"), "s",
                        "synchronous loop: time between consecutive weight syncs on the rl_sync timeline "
                        "(gen + train + sync)", headline=True, rank=63)
    t_async = ctx.define("async_period", ctx.q("rl_async_last", "s") - ctx.q("rl_async_prev", "s"), "s",
                         "asynchronous loop in steady state: time between the last two weight syncs on the "
                         "rl_async timeline (max(gen, train) + sync)", headline=True, rank=64)
    batch = b.q("batch") if b.value("batch") is not None else sp.Integer(1)
    unit = "sample/s" if b.value("batch") is not None else "s^-1"
    what = "trajectories" if unit == "sample/s" else "batches"
    r_s = ctx.define("sync_rate", batch / t_sync, unit, f"effective {what} per second, synchronous (nothing dropped)",
                     headline=True, rank=65)
    r_a = ctx.define("async_rate", b.q("keep") * batch / t_async, unit,
                     f"effective {what} per second, asynchronous: q·B / period", headline=True, rank=66)
    ctx.define("async_gain", r_a / r_s - 1, "%", "effective-rate change of the asynchronous loop",
               headline=True, rank=67, references=("asynchronous RL loop: generation overlapped with training on a "
                                                   "stale policy",))


def _price_sync(ctx):
    b = ctx.block("rl_weight_sync")
    if b is None:
        return
    if b.value("weights") is not None:
        w = b.q("weights")
    else:
        if ctx.value("model") is None:   # the plan's model, when it names one, sizes the weights
            ctx.error("`use rl_weight_sync` needs the size of the weights",
                      "give `weights = … GB` in the block or a plan-level `model = …`", code="missing-parameter")
        w = ctx.ref("model").q("params", "param") * b.q("bytes_per_param")
    w = ctx.define("weight_bytes", w, "GB", "one full copy of the weights M_W", headline=True, rank=70)
    n = b.q("receivers")
    per = w / n if b.value("shard_aware") else w
    per = ctx.define("receiver_bytes", per, "GB", "bytes each receiving rank gets (its shard, or everything)",
                     headline=True, rank=70.5)
    r = b.q("instances")
    ctx.define("weight_receivers", r * n, "", "receiving ranks: instances × receivers per instance")
    total = ctx.define("delivered_bytes", r * n * per, "GB", "bytes delivered to all instances: r·M_W when unsharded",
                       headline=True, rank=71)
    fan = b.value("fanout")
    src = {"unicast": total, "broadcast": n * per, "hierarchical": b.q("groups") * n * per}[fan]
    src = ctx.define("source_bytes", src, "GB", f"bytes the source sends ({fan} fan-out)", headline=True, rank=72)
    link = b.ref("link")
    if link is not None:
        ctx.define("weight_sync_time", src / link.q("bandwidth", "B/s", positive=True), "s",
                   "time the source's link needs for its bytes", headline=True, rank=73)


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("rl_loop")
    if b is None:
        return
    g, t, s = b.q("gen_time"), b.q("train_time"), b.q("sync_time")
    n = int(b.value("iterations"))

    sync = ctx.timeline("rl_sync")
    asy = ctx.timeline("rl_async")
    if n > FULL_ITERATIONS:
        # the exact max-plus expression of this loop doubles in size with every batch (each sync
        # merges two chains that both descend from the previous sync): beyond a few batches use
        # the symbolic length of the nominal critical path, exact in the current regime
        sync.symbolic = asy.symbolic = "path"
    for k in range(n):
        sync.add(f"gen{k}", g, "rollout", after=[f"sync{k - 1}"] if k else [], kind="rollout", lane="generation",
                 label=f"G{k}", doc=f"generate batch {k} with weights v{k}")
        sync.add(f"train{k}", t, "trainer", after=[f"gen{k}"], kind="update", lane="training", label=f"T{k}",
                 doc=f"train on batch {k}")
        sync.add(f"sync{k}", s, "weights", after=[f"train{k}"], kind="transfer", lane="weight sync",
                 label=f"S{k}", doc=f"publish weights v{k + 1}; both sides wait")
    sync.event_quantity("rl_sync_last", f"sync{n - 1}", doc="finish of the last weight sync (synchronous loop)")
    sync.event_quantity("rl_sync_prev", f"sync{n - 2}", doc="finish of the weight sync before it")
    sync.makespan_quantity("rl_sync_makespan", doc=f"{n} iterations of the synchronous loop", headline=False)

    asy.add("gen0", g, "rollout", kind="rollout", lane="generation", label="G0",
            doc="generate the first batch (warm-up: nothing to train on yet)")
    for k in range(n):
        prev = [f"sync{k - 1}"] if k else []
        asy.add(f"train{k}", t, "trainer", after=[f"gen{k}"] + prev, kind="update", lane="training",
                label=f"T{k}", doc=f"train on batch {k}")
        asy.add(f"gen{k + 1}", g, "rollout", after=prev, kind="rollout", lane="generation", label=f"G{k + 1}",
                doc=f"generate batch {k + 1} with the weights available (one version behind)")
        asy.add(f"sync{k}", s, "weights", after=[f"train{k}", f"gen{k + 1}"], kind="transfer", lane="weight sync",
                label=f"S{k}", doc=f"publish weights v{k + 1}; blocks generation and training")
    asy.event_quantity("rl_async_last", f"sync{n - 1}", doc="finish of the last weight sync (asynchronous loop)")
    asy.event_quantity("rl_async_prev", f"sync{n - 2}", doc="finish of the weight sync before it")
    asy.makespan_quantity("rl_async_makespan", doc=f"{n} iterations of the asynchronous loop", headline=False)


# ---------------------------------------------------------------- report
def _fmt(v, unit):
    from dsl.plugin import convert, format_number
    return format_number(convert(float(v), unit)) if v is not None else "—"


def _stages_table(ws, plan):
    if "rl_stages" not in ws.decls[plan].uses:
        return None
    names = [("generation", "gen_capacity", "gen_rate"), ("verification", "verify_capacity", "verify_rate"),
             ("training", "train_capacity", "train_rate")]
    caps = []
    for label, cap, rate in names:
        c, r = ws.base_value(f"{plan}.{cap}"), ws.base_value(f"{plan}.rl_stages.{rate}")
        if c is None or r is None:
            return None
        caps.append((float(c), label, r, c))
    low = min(c for c, *_ in caps)
    first = [x for x in caps if x[0] == low]
    rest = [x for x in caps if x[0] > low]
    second = [x for x in rest if x[0] == min(c for c, *_ in rest)] if rest else []
    role = {x[1]: "bottleneck" for x in first} | {x[1]: "next" for x in second}
    rows = tuple((label, _fmt(r, "sample/s"), _fmt(c, "sample/s"), role.get(label, ""))
                 for _, label, r, c in caps)
    eff = ws.base_value(f"{plan}.effective_rate")
    names = (lambda xs: " and ".join(x[1] for x in xs))
    note = f"effective rate {_fmt(eff, 'sample/s')} sample/s, set by {names(first)}"
    if second:
        note += (f"; scaling {names(first)} alone lifts it to at most {_fmt(second[0][3], 'sample/s')} "
                 f"sample/s, where {names(second)} {'become' if len(second) > 1 else 'becomes'} the bottleneck")
    notes = (note,)
    return Table(("stage", "rate (sample/s)", "at training input (sample/s)", "role"), rows, notes)


def _draw_loops(ws, plan, fig) -> bool:
    from dsl.plugin import gantt
    from dsl.plugin import format_number

    tls = [ws.timelines.get((plan, n)) for n in ("rl_sync", "rl_async")]
    if any(tl is None or tl.schedule is None for tl in tls):
        return False
    fig.set_size_inches(9, 4.6)
    axes = fig.subplots(2, 1)
    span = max(tl.schedule.makespan for tl in tls)
    for ax, tl, name, period in zip(axes, tls, ("synchronous", "asynchronous"), ("sync_period", "async_period")):
        p = ws.base_value(f"{plan}.{period}")
        gantt(ax, tl, unit="s", title=f"{plan}: {name} loop, period {format_number(float(p))} s",
              lanes=["generation", "training", "weight sync"])
        ax.set_xlim(0, span * 1.01)
    fig.tight_layout()
    return True


@hookimpl
def plan_tables_register():
    return [TableSpec("rl-stages", "RL stages: capacity at the training input and the bottleneck", _stages_table)]


@hookimpl
def plan_figures_register():
    return [FigureSpec("rl-loops", "Synchronous and asynchronous RL loops", _draw_loops,
                       "generation, training and weight sync per batch; the period between syncs")]

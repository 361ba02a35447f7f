"""Communication on a shared link: a gradient reduction that competes with other traffic
(MoE expert exchange) for one link, split into buckets that fit the link's idle gaps — an
event model on the shared timeline engine (book ch. 10 §10.3.3–10.3.4, figs. 10-25/10-26,
footnote 14).

``use shared_link { gaps = [2 ms, 2 ms, 2 ms]; busy = [3 ms, 3 ms, 3 ms]; gradient = 72 MiB;
peers = 4; link = nic_200g; launch = 0.02 ms; buckets = 3; max_buckets = 6 }``

Timeline ``overlap`` (all gradients ready at t = 0, the book's simplification of fig. 10-25):

* ``compute`` on the GPU: the independent compute left after the gradients are ready
  (default: the whole link pattern, Σ gaps + Σ busy);
* ``exchange{i}`` on the link: other traffic, released at gap₀ + busy₀ + … + gapᵢ and lasting
  busyᵢ — between them the link is idle;
* ``bucket{j}`` on the link: ring AllReduce of one of n equal buckets among p peers:
  t_b = 2·(p − 1)/p · (G/n) / B + launch  (or ``reduction`` when given directly).

Buckets are placed first-fit, in order, into the gaps they fit at nominal values; a bucket
that fits no gap runs after the last exchange.  Exposed communication =
makespan(``overlap``) − makespan(``overlap_base``), the same timeline without the reduction.

Bucket count (a search over a declared range, not ``solve``: the count is structural): with
``max_buckets = N`` the timelines ``overlap_n1`` … ``overlap_nN`` are built, ``exposed_n{n}``
are their exposed times and ``best_buckets`` is the smallest n with the least exposed time (a
symbolic Piecewise argmin), ``best_exposed_time`` its exposed time; the table
``bucket-sweep`` lists them.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, Table, TableSpec, UseSpec

SPEC = UseSpec(
    "shared_link",
    "gradient reduction in buckets on a link shared with expert exchange (event model)",
    references=("gradient reduction in buckets overlapped with backward on a link shared with expert exchange "
                "(buckets as in Li et al. 2020, 'PyTorch Distributed: Experiences on Accelerating Data Parallel "
                "Training')",),
    params=(
        Param("gaps", "s", kind="list", min_items=1, min=0, doc="idle windows of the link, each before a busy period"),
        Param("busy", "s", kind="list", min_items=1, min=0, doc="other traffic (expert exchange) after each gap"),
        Param("compute", "s", optional=True, doc="independent compute after the gradients are ready "
              "(default: Σ gaps + Σ busy)"),
        Param("reduction", "s", optional=True, doc="duration of the whole reduction, instead of gradient/link"),
        Param("gradient", "B", optional=True, doc="gradient buffer reduced by ring AllReduce"),
        Param("peers", "", "4", "data-parallel peers of the ring AllReduce", min=2, whole=True),
        Param("link", kind="ref", ref_kind="link", optional=True, doc="the link (its bandwidth per direction)"),
        Param("launch", "s", "0 s", "fixed time of launching one collective", min=0),
        Param("buckets", "", "1", "buckets the gradient is split into", kind="int", min=1),
        Param("max_buckets", "", "0", "search bucket counts 1..max_buckets (0: no search)", kind="int", min=0,
              max=64),
    ),
    order=64,
    provides=("bucket_time", "reduction_link_time", "exposed_time", "best_buckets", "best_exposed_time"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


def _bucket_time(b, n):
    """(symbolic, nominal seconds) duration of one of n buckets."""
    if b.value("reduction") is not None:
        if n != 1:
            b.error_at("buckets", "a reduction given by its duration cannot be split into buckets",
                       "give `gradient = …` and `link = …` instead of `reduction = …`")
        return b.q("reduction"), float(b.value("reduction"))
    if b.value("gradient") is None or b.value("link") is None:
        b.error_at("gradient", "`use shared_link` needs `reduction = …` or both `gradient = …` and `link = …`",
                   "e.g. `gradient = 72 MiB; link = nic_200g`", code="missing-parameter")
    link = b.ref("link")
    p = b.q("peers")
    bw = link.q("bandwidth", "B/s", positive=True)
    t = 2 * (p - 1) / p * b.q("gradient") / n / bw + b.q("launch")
    pn = float(b.value("peers"))
    tn = 2 * (pn - 1) / pn * float(b.value("gradient")) / n / float(link.value("bandwidth")) + float(b.value("launch"))
    return t, tn


def _check_lists(b):
    gaps, busy = b.q_list("gaps"), b.q_list("busy")
    if len(gaps) != len(busy):
        b.error_at("busy", f"{len(busy)} busy periods for {len(gaps)} gaps: each gap is followed by one busy period",
                   "give lists of equal length", code="out-of-range")
    return gaps, busy


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("shared_link")
    if b is None:
        return
    _check_lists(b)
    n = int(b.value("buckets"))
    t, _ = _bucket_time(b, n)
    ctx.define("bucket_time", t, "ms", "link time of one bucket: 2(p−1)/p·(G/n)/B + launch", headline=True)
    ctx.define("reduction_link_time", n * t, "ms", "link time of all buckets", headline=True)
    ctx.define("exposed_time", ctx.q("overlap_makespan", "s") - ctx.q("overlap_base_makespan", "s"), "ms",
               "communication the step waits for: makespan with the reduction − without", headline=True)
    N = int(b.value("max_buckets"))
    if N:
        ex = []
        for k in range(1, N + 1):
            ex.append(ctx.define(f"exposed_n{k}", ctx.q(f"overlap_n{k}_makespan", "s")
                                 - ctx.q("overlap_base_makespan", "s"), "ms", f"exposed time with {k} buckets"))
        pieces = []
        for i, e in enumerate(ex):
            cond = sp.And(*[e < o for o in ex[:i]], *[e <= o for o in ex[i + 1:]])
            pieces.append((sp.Integer(i + 1), cond))
        ctx.define("best_buckets", sp.Piecewise(*pieces[:-1], (pieces[-1][0], True)), "",
                   f"bucket count in 1..{N} with the least exposed time (smallest on ties)", headline=True)
        # unevaluated: the arguments are distinct quantities, which sympy's pairwise comparison
        # (tens of milliseconds) cannot order; the nominal value evaluates the Min at once
        ctx.define("best_exposed_time", sp.Min(*ex, evaluate=False), "ms", "least exposed time over the searched counts",
                   headline=True)


def _schedule(ctx, b, name, n, with_reduction=True):
    gaps, busy = _check_lists(b)
    gn = [float(x) for x in b.value("gaps")]
    bn = [float(x) for x in b.value("busy")]
    tl = ctx.timeline(name)
    compute = b.q("compute") if b.value("compute") is not None else sum(gaps) + sum(busy)
    tl.add("compute", compute, "gpu", kind="compute", doc="independent compute after the gradients are ready")
    t, tn = _bucket_time(b, n) if with_reduction else (0, 0.0)
    todo = list(range(n)) if with_reduction else []
    cursor, release, release_n = 0.0, sp.Integer(0), 0.0
    for i, (g, bz) in enumerate(zip(gaps, busy)):
        release, release_n = release + g, release_n + gn[i]
        while todo and cursor + tn <= release_n + 1e-15:
            j = todo.pop(0)
            tl.add(f"bucket{j}", t, "link", kind="comm", label=str(j), doc=f"AllReduce of bucket {j} in gap {i}")
            cursor += tn
        tl.add(f"exchange{i}", bz, "link", release=release, kind="exchange", label="EP",
               doc="expert exchange on the shared link")
        cursor = max(cursor, release_n) + bn[i]
        release, release_n = release + bz, release_n + bn[i]
    for j in todo:
        tl.add(f"bucket{j}", t, "link", kind="comm", label=str(j), doc=f"AllReduce of bucket {j} after the exchanges")
    tl.makespan_quantity(f"{name}_makespan", "ms", f"makespan of timeline {name}", headline=False)


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("shared_link")
    if b is None:
        return
    _schedule(ctx, b, "overlap", int(b.value("buckets")))
    _schedule(ctx, b, "overlap_base", 1, with_reduction=False)
    for k in range(1, int(b.value("max_buckets")) + 1):
        _schedule(ctx, b, f"overlap_n{k}", k)


def _sweep(ws, plan):
    if f"{plan}.exposed_n1" not in ws.nodes:
        return None
    rows, k = [], 1
    from dsl.plugin import convert
    while f"{plan}.exposed_n{k}" in ws.nodes:
        tl = ws.timelines.get((plan, f"overlap_n{k}"))
        acts = [a for a in tl.activities.values() if a.id.startswith("bucket")] if tl else []
        per = None
        sched = tl.schedule if tl else None
        if sched is not None and acts:
            idx = sched.index()
            per = sched.finish[idx[acts[0].id]] - sched.start[idx[acts[0].id]]
        rows.append((k, "" if per is None else f"{convert(per, 'ms'):.3f}",
                     "" if per is None else f"{convert(k * per, 'ms'):.3f}",
                     f"{convert(float(ws.base_value(f'{plan}.exposed_n{k}')), 'ms'):.3f}"))
        k += 1
    best = ws.base_value(f"{plan}.best_buckets")
    return Table(("buckets", "per bucket / ms", "link time / ms", "exposed / ms"), tuple(rows),
                 (f"least exposed time with {best} buckets (smallest count on ties)",))


@hookimpl
def plan_tables_register():
    return [TableSpec("bucket-sweep", "Gradient buckets on a shared link: exposed time by bucket count", _sweep)]

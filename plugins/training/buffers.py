"""Peak memory from tensor and buffer lifetimes (book ch. 10 §10.1.2, §10.2.1).

``use buffers { ops = ["forward", "gather", "backward"]; names = ["activations", "gather"];
sizes = [8 GiB, 4 GiB]; first = ["forward", "gather"]; last = ["backward", "backward"] }``

The ops run one after another on the ``memory`` timeline (each ``durations`` item long; by
default 1 ms each, so the time axis is the order of operations, like the book's fig. 10-13).
Tensor ``names[i]`` of ``sizes[i]`` bytes is allocated when op ``first[i]`` starts and freed
when op ``last[i]`` finishes: a hold on [start of first, finish of last) in pool ``gpu``.  The
persistent state is a hold over the whole timeline (``persistent``; by default the plan's
``persistent_memory`` when a block prices it, e.g. ``use memory`` + ``use zero``).

    peak_memory    = max_t [ M_persistent + M_activation(t) + M_temporary(t) ]     (§10.1.2)
    transient_peak = peak_memory − persistent

computed by the shared timeline engine (:mod:`dsl.engine.timeline`); the symbolic value is the sum of
the holds live at the nominal peak, and ``plan eval`` lists them (table ``memory-peaks``).
8 GiB of activations live together with a 4 GiB gather buffer make 12 GiB; freeing the
activations before the gather lets the buffer reuse their region (peak 8 GiB).  With
``use memory``, a ``transient`` that is not written defaults to ``transient_peak``.

Errors: lists of different lengths (``out-of-range``), an op in ``first``/``last`` that is not
in ``ops`` (``unknown-name``, listing the ops), a tensor freed before it is allocated
(``out-of-range``), a name used twice (``duplicate``).
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

TIMELINE, POOL = "memory", "gpu"
DEFAULT_OP = sp.Rational(1, 1000)     # 1 ms per op when no durations are given

SPEC = UseSpec(
    "buffers",
    "tensors and buffers with lifetimes over a sequence of operations: the peak of what is live together",
    references=("peak memory from tensor lifetimes: max over time of persistent + activation + temporary bytes",),
    params=(
        Param("ops", kind="list", item="string", min_items=1, doc="operations in the order they run"),
        Param("durations", "s", kind="list", optional=True, min=0,
              doc="duration of each op (default 1 ms each: the time axis is the order of operations)"),
        Param("names", kind="list", item="string", min_items=1, doc="tensors and buffers"),
        Param("sizes", "B", kind="list", min=0, doc="bytes of each tensor"),
        Param("first", kind="list", item="string", doc="op at whose start each tensor is allocated"),
        Param("last", kind="list", item="string", doc="op at whose finish each tensor is freed"),
        Param("persistent", "B", optional=True, min=0,
              doc="state live during the whole sequence (default: persistent_memory when priced, else 0)"),
        Param("usable", "B", optional=True, min=0, min_open=True,
              doc="memory available; adds the requirement fits_peak"),
    ),
    order=12,
    provides=("peak_memory", "transient_peak"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("buffers")
    if b is None:
        return
    if b.given("usable"):
        ctx.require("fits_peak", ctx.q("peak_memory", "B"), "<=", b.q("usable"), "GiB",
                    "the lifetime peak fits in usable memory")


def _persistent(ctx, b):
    if b.given("persistent"):
        return b.q("persistent")
    if ctx.provided("persistent_memory"):
        return ctx.q("persistent_memory", "B")
    return sp.Integer(0)


def _check(b):
    ops, names = list(b.value("ops")), list(b.value("names"))
    for p in ("sizes", "first", "last"):
        v = b.value(p)
        if len(v) != len(names):
            b.error_at(p, f"`{p}` has {len(v)} items but `names` has {len(names)}",
                       f"give one item of `{p}` per tensor in `names`")
    if b.value("durations") is not None and len(b.value("durations")) != len(ops):
        b.error_at("durations", f"`durations` has {len(b.value('durations'))} items but `ops` has {len(ops)}",
                   "give one duration per op, or leave `durations` out")
    for lst in (ops, names):
        dup = sorted({x for x in lst if lst.count(x) > 1})
        if dup:
            b.error_at("ops" if lst is ops else "names", f"'{dup[0]}' appears twice", "use distinct names",
                       code="duplicate")
    pos = {o: i for i, o in enumerate(ops)}
    for p in ("first", "last"):
        for x in b.value(p):
            if x not in pos:
                b.error_at(p, f"`{p}` names op '{x}' that is not in `ops`",
                           "ops: " + ", ".join(ops), code="unknown-name")
    for n, f, l in zip(names, b.value("first"), b.value("last")):
        if pos[l] < pos[f]:
            b.error_at("last", f"'{n}' is freed after op '{l}', before it is allocated at op '{f}'",
                       "`last` must not come before `first` in `ops`")
    return ops, names


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("buffers")
    if b is None:
        return
    ops, names = _check(b)
    durs = b.q_list("durations") if b.value("durations") is not None else [DEFAULT_OP] * len(ops)
    tl = ctx.timeline(TIMELINE)
    for op, d in zip(ops, durs):
        tl.add(op, d, "ops", kind="compute", doc=f"operation '{op}'")
    persistent = _persistent(ctx, b)
    if persistent != 0:
        tl.hold("persistent", persistent, POOL, doc="persistent training state", kind="persistent")
    for n, size, f, l in zip(names, b.q_list("sizes"), b.value("first"), b.value("last")):
        tl.hold(n, size, POOL, start=(f, "start"), end=(l, "finish"), doc=f"tensor '{n}'")
    tl.peak_quantity("peak_memory", POOL, "GiB", "peak of persistent + activations + temporaries over the "
                     "ops", headline=True, rank=2.5,
                     references=("peak memory from tensor lifetimes: max over time of persistent + activation + "
                                 "temporary bytes",))
    ctx.define("transient_peak", ctx.q("peak_memory", "B") - persistent, "GiB",
               "activations and temporaries live together at the peak", headline=True, rank=2.6)

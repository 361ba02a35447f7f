"""Colocated RL: switching one set of GPUs between training and generation, and the order of
load / free / allocate steps that decides whether the switch fits in memory.

``use rl_colocate { buffers; sizes; resident; steps; constraints; usable; step_time; load_bw }``
(plan-level ``device``).

Book ch. 10 §10.5.2, Figs. 10-38/10-39: on an H100 SXM (80 GB ≈ 74.5 GiB) the training state
takes 40 GiB, generation needs ≈15.3 GiB of BF16 weights and a 24 GiB KV pool, 4 GiB are shared.
Each phase alone fits (44 and ≈43.3 GiB).  Restoring the generation weights and the KV pool
before freeing the training state peaks at 40 + 15.3 + 24 + 4 ≈ 83.3 GiB — it does not fit;
loading the weights, freeing the training state, then allocating the KV pool peaks at
40 + 15.3 + 4 ≈ 59.3 GiB.  Both end in the same state; the peaks differ by one KV pool.

Model.  ``buffers`` names the regions and ``sizes`` their bytes; ``resident`` are live before
the switch.  ``steps`` is the declared switch sequence, each ``"load NAME"``, ``"allocate NAME"``
or ``"free NAME"``.  The steps run one after another on the timeline ``switch`` (each lasts
``step_time``, a load ``size / load_bw`` when ``load_bw`` is given); each buffer is a memory
hold of the engine, live from the start of its load/allocate step (or from the start, if
resident) to the finish of its free step (or the end): the timeline's peak is the switch's peak
(``switch_peak``), checked against ``usable`` by requirement ``switch_fits``.

Search.  ``constraints`` are precedences ``"STEP before STEP"`` (e.g. the generation weights are
copied from the training state, so ``"load generation_weights before free training_state"``);
a buffer must also be loaded before it is freed.  Among all orders of the declared steps that
respect them, the plugin finds one of least peak by dynamic programming over subsets of steps
(the level after a set of steps does not depend on their order, so the best peak of a set is
max(level, best over its last step)): O(2^k · k) for k steps, at most 12 steps (4,096 subsets).
The order found is scheduled on the timeline ``switch_best`` (``best_switch_peak``); when the
declared order is already optimal it is kept.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import FigureSpec, Param, Table, TableSpec, UseSpec

MAX_STEPS = 12
VERBS = ("load", "allocate", "free")

SPEC = UseSpec(
    "rl_colocate",
    "memory peak of switching colocated GPUs between training and generation, and a feasible step order",
    references=("colocated training and generation: one set of GPUs switches between the training state and the KV "
                "pool",),
    params=(
        Param("buffers", kind="list", item="string", min_items=1, doc="names of the memory regions"),
        Param("sizes", "B", kind="list", min_items=1, min=0, doc="bytes of each buffer, in the order of `buffers`"),
        Param("resident", kind="list", item="string", optional=True, doc="buffers live before the switch"),
        Param("steps", kind="list", item="string", min_items=1,
              doc='the declared switch sequence: "load NAME", "allocate NAME" or "free NAME"'),
        Param("constraints", kind="list", item="string", optional=True,
              doc='precedences the search must respect: "STEP before STEP"'),
        Param("usable", "B", "device.memory", "memory one GPU can use", min=0, min_open=True),
        Param("step_time", "s", "1 s", "duration of one step on the timeline (the axis is the step order)",
              min=0, min_open=True),
        Param("load_bw", "B/s", doc="bandwidth of a load (a load then lasts size / load_bw)", optional=True,
              min=0, min_open=True),
    ),
    plan_params=(Param("device", kind="ref", ref_kind="device", doc="the accelerator"),),
    order=65,
    provides=("memory_before", "memory_after", "switch_peak", "best_switch_peak", "switch_saving"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


def _parse(b):
    """Validated structure of the block: names, nominal sizes, resident set, steps (verb, buffer
    index), precedence pairs (i, j) meaning step i before step j."""
    names = list(b.value("buffers"))
    sizes = list(b.value("sizes"))
    if len(sizes) != len(names):
        b.error_at("sizes", f"`sizes` has {len(sizes)} items but `buffers` names {len(names)}",
                   "give one size per buffer, in the same order")
    seen = set()
    for n in names:
        if n in seen:
            b.error_at("buffers", f"buffer '{n}' is named twice", "give each buffer one name", code="duplicate")
        seen.add(n)
    idx = {n: i for i, n in enumerate(names)}
    resident = list(b.value("resident") or ())
    for n in resident:
        if n not in idx:
            b.error_at("resident", f"unknown buffer '{n}' in `resident`", "buffers: " + ", ".join(names),
                       code="unknown-name")
    steps = []
    for text in b.value("steps"):
        parts = text.split()
        if len(parts) != 2 or parts[0] not in VERBS:
            b.error_at("steps", f"step '{text}' is not VERB BUFFER",
                       "write \"load NAME\", \"allocate NAME\" or \"free NAME\"")
        if parts[1] not in idx:
            b.error_at("steps", f"step '{text}' names an unknown buffer '{parts[1]}'", "buffers: " + ", ".join(names),
                       code="unknown-name")
        steps.append((parts[0], idx[parts[1]]))
    if len(steps) > MAX_STEPS:
        b.error_at("steps", f"{len(steps)} steps: the order search handles at most {MAX_STEPS}",
                   "merge steps that always go together")
    texts = [f"{v} {names[k]}" for v, k in steps]
    if len(set(texts)) != len(texts):
        dup = next(t for t in texts if texts.count(t) > 1)
        b.error_at("steps", f"step '{dup}' appears twice", "each buffer is loaded/allocated and freed at most once",
                   code="duplicate")
    # the declared order must be valid: allocate what is not live, free what is live
    live = set(idx[n] for n in resident)
    for (verb, k), text in zip(steps, texts):
        if verb == "free" and k not in live:
            b.error_at("steps", f"step '{text}' frees '{names[k]}', which is not live at that point",
                       "list it in `resident` or load/allocate it first")
        if verb != "free" and k in live:
            b.error_at("steps", f"step '{text}': '{names[k]}' is already live at that point",
                       "free it first, or drop it from `resident`")
        (live.discard if verb == "free" else live.add)(k)
    pos = {t: i for i, t in enumerate(texts)}
    prec = []
    for c in b.value("constraints") or ():
        lhs, sep, rhs = c.partition(" before ")
        lhs, rhs = " ".join(lhs.split()), " ".join(rhs.split())
        if not sep or lhs not in pos or rhs not in pos:
            bad = lhs if sep and lhs not in pos else rhs
            b.error_at("constraints", f"constraint '{c}' is not \"STEP before STEP\" over the declared steps"
                       + (f" ('{bad}' is not a step)" if sep else ""), "steps: " + "; ".join(texts))
        prec.append((pos[lhs], pos[rhs]))
    for i, (verb, k) in enumerate(steps):       # a buffer is loaded before it is freed
        if verb == "free":
            prec += [(j, i) for j, (v2, k2) in enumerate(steps) if k2 == k and v2 != "free"]
    return names, sizes, resident, steps, texts, prec


def best_order(base: float, deltas: list[float], prec: list[tuple[int, int]], prefer: list[int]):
    """Order of least peak memory (nominal floats) by dynamic programming over subsets.

    :param base: bytes live before the first step; ``deltas[i]`` the change of step i.
    :param prec: pairs (i, j): step i must come before step j.
    :param prefer: an order to keep when it is optimal (the declared one).
    :return: (peak, order) or None when the precedences admit no order (a cycle).
    """
    k = len(deltas)
    need = [0] * k
    for i, j in prec:
        need[j] |= 1 << i
    full = (1 << k) - 1
    level = [0.0] * (1 << k)
    for s in range(1, 1 << k):
        low = (s & -s).bit_length() - 1
        level[s] = level[s & (s - 1)] + deltas[low]
    inf = float("inf")
    best = [inf] * (1 << k)
    last = [-1] * (1 << k)
    best[0] = base
    for s in range(1, 1 << k):
        here = base + level[s]
        for j in range(k):
            if s >> j & 1 and (need[j] & ~(s ^ (1 << j))) == 0 and best[s ^ (1 << j)] < inf:
                v = max(here, best[s ^ (1 << j)])
                if v < best[s] - 1e-9 * max(1.0, abs(v)):
                    best[s], last[s] = v, j
    if best[full] == inf:
        return None

    def peak_of(order):
        lv, pk = base, base
        for i in order:
            lv += deltas[i]
            pk = max(pk, lv)
        return pk

    ok = all(prefer.index(i) < prefer.index(j) for i, j in prec)
    if ok and peak_of(prefer) <= best[full] * (1 + 1e-12):
        return peak_of(prefer), list(prefer)
    order, s = [], full
    while s:
        j = last[s]
        order.append(j)
        s ^= 1 << j
    order.reverse()
    return best[full], order


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("rl_colocate")
    if b is None:
        return
    names, sizes, resident, steps, texts, prec = _parse(b)
    q = b.q_list("sizes")
    before = sum((q[names.index(n)] for n in resident), sp.Integer(0))
    ctx.define("memory_before", before, "GiB", "buffers live before the switch", headline=True, rank=100)
    live = set(names.index(n) for n in resident)
    for verb, k in steps:
        (live.discard if verb == "free" else live.add)(k)
    ctx.define("memory_after", sum((q[k] for k in sorted(live)), sp.Integer(0)), "GiB",
               "buffers live after the switch", headline=True, rank=101)
    usable = b.q("usable")
    ctx.define("switch_usable", usable, "GiB", "memory one GPU can use", headline=True, rank=102)
    peak = ctx.q("switch_peak", "B")
    ctx.require("switch_fits", peak, "<=", usable, "GiB", "the declared switch order fits in memory")
    best = ctx.q("best_switch_peak", "B")
    ctx.require("best_switch_fits", best, "<=", usable, "GiB", "the best switch order found fits in memory")
    ctx.define("switch_saving", peak - best, "GiB", "peak saved by the best order over the declared one",
               headline=True, rank=105)


def _schedule(ctx, b, tl, order, names, steps, texts):
    q = b.q_list("sizes")
    load_bw = b.q("load_bw") if b.value("load_bw") is not None else None
    start: dict[int, str] = {}
    end: dict[int, str] = {}
    for i in order:
        verb, k = steps[i]
        aid = f"{i + 1}:{texts[i].replace(' ', '_')}"
        dur = q[k] / load_bw if (verb == "load" and load_bw is not None) else b.q("step_time")
        tl.add(aid, dur, "gpu", kind=verb, lane="switch",
               label=texts[i], doc=f"switch step: {texts[i]}")
        (end if verb == "free" else start)[k] = aid
    resident = set(b.value("resident") or ())
    for k, n in enumerate(names):
        if n not in resident and k not in start:
            continue
        tl.hold(n, q[k], "gpu", start=start.get(k), end=end.get(k), doc=f"buffer {n}")


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("rl_colocate")
    if b is None:
        return
    names, sizes, resident, steps, texts, prec = _parse(b)
    declared = list(range(len(steps)))
    tl = ctx.timeline("switch")
    _schedule(ctx, b, tl, declared, names, steps, texts)
    tl.peak_quantity("switch_peak", "gpu", "GiB", "peak memory of the declared switch order", headline=True, rank=103)
    base = sum(sizes[names.index(n)] for n in resident)
    deltas = [(-1 if v == "free" else 1) * sizes[k] for v, k in steps]
    found = best_order(base, deltas, prec, declared)
    if found is None:
        b.error_at("constraints", "the constraints admit no order of the steps (they form a cycle)",
                   "drop or reverse one of them")
    tl2 = ctx.timeline("switch_best")
    _schedule(ctx, b, tl2, found[1], names, steps, texts)
    tl2.peak_quantity("best_switch_peak", "gpu", "GiB", "peak memory of the best order found (least peak)",
                      headline=True, rank=104)


# ---------------------------------------------------------------- report
def _levels(ws, plan, name):
    tl = ws.timelines.get((plan, name))
    if tl is None or tl.schedule is None or "gpu" not in tl.profiles:
        return None
    return tl


def _switch_table(ws, plan):
    if "rl_colocate" not in ws.decls[plan].uses:
        return None
    from dsl.plugin import format_number
    rows = []
    usable = ws.base_value(f"{plan}.switch_usable")
    for label, name in (("declared", "switch"), ("best", "switch_best")):
        tl = _levels(ws, plan, name)
        if tl is None or usable is None:
            return None
        prof = tl.profiles["gpu"]
        order = [tl.activities[a].label for a in tl.schedule.ids]
        rows.append((label, " → ".join(order), format_number(prof.peak / 2 ** 30),
                     "yes" if prof.peak <= float(usable) * (1 + 1e-12) else "no", ", ".join(prof.live)))
    return Table(("order", "steps", "peak (GiB)", "fits", "live at the peak"), tuple(rows),
                 (f"usable memory {format_number(float(usable) / 2 ** 30)} GiB",))


def _after_each_step(ws, tl):
    """(labels, GiB live before the switch and after each step) of a switch timeline."""
    ids = tl.schedule.ids
    pos = {a: i for i, a in enumerate(ids)}
    labels, levels = ["before"], []
    for i in range(-1, len(ids)):
        live = 0.0
        for h in tl.holds.values():
            born = h.start is None or pos[h.start[0]] <= i
            dead = h.end is not None and pos[h.end[0]] <= i
            if born and not dead:
                live += float(ws.subs_value(h.bytes))
        levels.append(live / 2 ** 30)
        if i >= 0:
            labels.append(tl.activities[ids[i]].label)
    return labels, levels


def _draw_switch(ws, plan, fig) -> bool:
    if "rl_colocate" not in ws.decls[plan].uses:
        return False
    tls = [(label, _levels(ws, plan, n)) for label, n in (("declared order", "switch"), ("best order", "switch_best"))]
    usable = ws.base_value(f"{plan}.switch_usable")
    if any(t is None for _, t in tls) or usable is None:
        return False
    from dsl.plugin import format_number
    fig.set_size_inches(9, 3.6)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (label, tl) in zip(axes, tls):
        names, levels = _after_each_step(ws, tl)
        peak = max(levels)
        colors = ["#C44E52" if v > float(usable) / 2 ** 30 else "#4C72B0" for v in levels]
        ax.bar(range(len(levels)), levels, color=colors, width=0.6)
        ax.axhline(float(usable) / 2 ** 30, color="#C44E52", linestyle="--", linewidth=1)
        for x, v in enumerate(levels):
            ax.text(x, v, format_number(v), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels(names, rotation=20, fontsize=7, ha="right")
        ax.set_title(f"{plan}: {label}, peak {format_number(peak)} GiB", fontsize=9)
        ax.set_ylabel("GiB live after the step")
    fig.tight_layout()
    return True


@hookimpl
def plan_tables_register():
    return [TableSpec("rl-switch", "Colocated switch: declared vs best step order", _switch_table)]


@hookimpl
def plan_figures_register():
    return [FigureSpec("rl-switch", "Memory of the declared and the best switch order", _draw_switch,
                       "live GiB after each step against the usable memory (dashed)")]

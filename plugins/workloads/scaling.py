"""Scaling and deadline analysis (book ch. 10 §10.1.1, §10.1.3, §10.4.1, §10.6.2–10.6.4;
exercises 10-2, 10-3, 10-5, 10-9, 10-10).

Blocks
------
``use batch_noise``   critical batch size from the gradient noise scale (§10.1.1).  The
    empirical law (S/S_min − 1)(E/E_min − 1) = 1 with E = S·b and B_crit = E_min/S_min ≈
    B_noise gives, for a run that reaches the target in S steps of b tokens,
    S/S_min = 1 + B_noise/b.  Weak scaling (batch × k): S_k = S_min·(1 + B_noise/(k·b)) at
    the same step time; strong scaling (batch fixed): the same S, per-GPU compute ÷ k plus
    the fixed waits (communication and input) that do not shrink.

``use gpu_bound``     lower bounds on the GPU count (§10.1.3, §10.6.4)::

        T = F / (p·P·η),   p_compute = ⌈F / (P·η·T_available)⌉,   p_memory = ⌈state / memory⌉

    reading ``flops_total`` (from ``use compute`` or ``use work_6nd``) and, when priced,
    ``state_memory``.  A table and figures 10-3…10-5 / 10-47 cover other accelerators and
    efficiencies.

``use work_6nd``      F = 6·N·D for a dense model of N parameters on D tokens (§10.6.4).

``use input_pipeline`` the data-loading budget (§10.4.1, exercise 10-5): required rate from the
    token budget, loader capacity, the prefetch a loader outage needs (fluid model) and the
    resume rule "resume after the last *consumed* batch, not the last dispatched one".

``use comm_budget``   the communication a step can still afford (§10.6.2):
    budget = step_budget − compute_time − input_wait.

``use compare``       a table ranking plans by one quantity (exercise 10-9: which single
    degraded input, restored, shortens the critical path most).
"""
from __future__ import annotations

from dsl.plugin import hookimpl
from dsl.plugin import FigureSpec, Param, Table, TableSpec, UseSpec, ceiling_of

from plugins.reliability.finish import require_time_to_train

DAY = 86400.0

NOISE = UseSpec(
    "batch_noise", "critical batch size and weak vs strong scaling from the gradient noise scale",
    references=("critical batch size from the gradient noise scale: McCandlish et al. 2018, 'An Empirical Model of "
                "Large-Batch Training'",),
    params=(
        Param("noise_scale", "token", doc="gradient noise scale B_noise ≈ critical batch B_crit", min=0, min_open=True),
        Param("compare_gpus", "", kind="list", optional=True, min=1,
              doc="GPU counts to compare under weak and strong scaling"),
    ),
    order=60,
    provides=("min_steps", "min_tokens", "weak_scaling_limit", "batch_to_noise"),
)

BOUND = UseSpec(
    "gpu_bound", "lower bounds on the GPU count from compute and from memory",
    references=("per-GPU compute time F / (peak · MFU); model FLOPs utilization as defined by Chowdhery et al. 2022, "
                "'PaLM: Scaling Language Modeling with Pathways', Appendix B",
                "GPU count for a deadline: ⌈F / (peak · MFU · available time)⌉"),
    params=(
        Param("available", "day", default="workload.deadline",
              doc="time available for training compute T_available", min=0, min_open=True),
        Param("devices", kind="list", item="ref", ref_kind="device", optional=True,
              doc="accelerators to compare in the table and figures"),
        Param("efficiencies", "", kind="list", optional=True, min=0, min_open=True, max=1, doc="efficiencies η to compare (e.g. [30 %, 40 %, 50 %])"),
    ),
    plan_params=(
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
        Param("gpus", "", doc="number of GPUs", min=1, whole=True),
        Param("mfu", "", doc="single-GPU compute efficiency (fraction of peak)", min=0, min_open=True, max=1),
    ),
    order=60,
    provides=("compute_days", "gpus_for_compute", "gpus_for_memory", "token_rate_per_gpu", "required_token_rate",
              "cluster_token_rate", "gpu_hours"),
)

WORK = UseSpec(
    "work_6nd", "training work F = 6·N·D of a dense model",
    references=("training work F = 6ND: Kaplan et al. 2020, 'Scaling Laws for Neural Language Models'",),
    params=(
        Param("params", "param", doc="model parameters N", min=0, min_open=True),
        Param("tokens", "token", doc="training tokens D (write 20 token/param * params for D = 20N)",
              min=0, min_open=True),
    ),
    order=20,
    provides=("flops_total", "flops_per_token"),
)

INPUT = UseSpec(
    "input_pipeline", "data loading: required rate, loader capacity, prefetch for outages, resume point",
    references=("input pipeline: the data-loading rate a step needs",),
    params=(
        Param("workers", "", "4", "loader processes", min=1, whole=True),
        Param("worker_rate", "seq/s", doc="sequences one loader prepares per second", min=0, min_open=True),
        Param("token_bytes", "B/token", "8 B/token", "bytes of one token id sent to the GPU (int64: 8)", min=0),
        Param("outage_workers", "", "0", "loaders down during an outage", min=0, whole=True),
        Param("outage", "s", "0 s", "duration of the outage", min=0),
        Param("trained_through", "", optional=True, kind="int", min=0,
              doc="last batch whose optimizer step completed (the checkpoint's data position)"),
        Param("dispatched_through", "", optional=True, kind="int", min=0,
              doc="last batch handed to the loaders (prefetch position)"),
    ),
    plan_params=(Param("workload", kind="ref", ref_kind="workload", doc="the training workload"),),
    order=60,
    provides=("required_token_rate_budget", "required_seq_rate", "input_bandwidth", "loader_rate",
              "consumption_rate", "loader_headroom", "outage_prefetch", "refill_time", "resume_batch"),
)

COMM = UseSpec(
    "comm_budget", "communication a step can still afford within the deadline",
    references=("communication budget of a step: step budget − compute time − input wait",),
    order=60,
    provides=("comm_budget", "comm_budget_margin", "exposed_if_no_overlap"),
)

AMDAHL = UseSpec(
    "what_if", "what a change of one resource buys: T'/T = 1 − f + f/r with f measured on the step's critical "
               "path",
    references=("Amdahl's law on the critical path: Amdahl 1967, 'Validity of the single processor approach to "
                "achieving large scale computing capabilities'",),
    params=(
        Param("resources", kind="list", item="string", min_items=1,
              doc="resources of the step timeline to change (gpu, link, input …)"),
        Param("factors", "", kind="list", min_items=1, min=0, min_open=True,
              doc="performance multipliers r to try (0.5 = halved, 2 = doubled)"),
        Param("timeline", kind="string", default='"step"', doc="the timeline whose critical path is used"),
    ),
    order=90,
)

COMPARE = UseSpec(
    "compare", "rank plans by one quantity",
    references=("which degraded input to restore: the gain of restoring each input to its nominal value",),
    params=(
        Param("plans", kind="list", item="ref", ref_kind="plan", min_items=2,
              doc="the plans to compare; the first is the reference"),
        Param("quantity", kind="string", default='"step_time"', doc="the quantity compared"),
    ),
    order=90,
)


@hookimpl
def plan_blocks_register():
    return [NOISE, BOUND, WORK, INPUT, COMM, AMDAHL, COMPARE]


# ---------------------------------------------------------------- pricing
@hookimpl
def plan_quantities_price(ctx):
    _noise(ctx)
    _work(ctx)
    _bound(ctx)
    _input(ctx)
    _comm(ctx)


def _noise(ctx):
    b = ctx.block("batch_noise")
    if b is None:
        return
    import sympy as sp
    S, tok = ctx.q("steps", ""), ctx.q("tokens_per_step", "token")
    bn = b.q("noise_scale")
    smin = ctx.define("min_steps", S / (1 + bn / tok), "", "S_min = S/(1 + B_noise/b)", headline=True)
    ctx.define("min_tokens", bn * smin, "token", "E_min = B_crit·S_min", headline=True)
    ctx.define("weak_scaling_limit", 1 + bn / tok, "", "S/S_min: the most weak scaling can shorten the run",
               headline=True)
    ctx.define("batch_to_noise", tok / bn, "", "tokens per step / B_noise")
    t_s, t_c = ctx.q("step_time", "s"), ctx.q("compute_time", "s")
    fixed = t_s - t_c
    n0 = ctx.param("gpus")
    for k in b.value("compare_gpus") or ():
        if k <= 0 or k != int(k):
            b.error_at("compare_gpus", f"GPU count {k:g} is not a positive whole number")
        k = int(k)
        r = sp.Integer(k) / n0
        ctx.define(f"weak_time_{k}", smin * (1 + bn / (tok * r)) * t_s, "day",
                   f"weak scaling to {k} GPUs: S_min(1 + B_noise/(k·b)) steps of unchanged length")
        ctx.define(f"strong_time_{k}", S * (t_c / r + fixed), "day",
                   f"strong scaling to {k} GPUs: same steps, compute ÷ k, fixed waits unchanged")


def _work(ctx):
    b = ctx.block("work_6nd")
    if b is None:
        return
    n, d = b.q("params"), b.q("tokens")
    ctx.define("flops_total", 6 * n * d, "FLOP", "F = 6·N·D", headline=True)
    ctx.define("flops_per_token", 6 * n, "GFLOP/token", "6·N FLOPs per training token")


def _bound(ctx):
    b = ctx.block("gpu_bound")
    if b is None:
        return
    import sympy as sp
    dev = ctx.ref("device")
    peak = dev.q("peak_flops", "FLOP/s", positive=True)
    F, fpt = ctx.q("flops_total", "FLOP"), ctx.q("flops_per_token", "FLOP/token")
    eta, p, T = ctx.param("mfu"), ctx.param("gpus"), b.q("available")
    ctx.define("compute_days", F / (p * peak * eta), "day", "T = F/(p·P·η): compute alone, every GPU busy",
               headline=True)
    ctx.define("gpus_for_compute", ceiling_of(F / (peak * eta * T)), "", "⌈F/(P·η·T_available)⌉", headline=True)
    ctx.define("token_rate_per_gpu", peak * eta / fpt, "token/s", "tokens one GPU trains per second", headline=True)
    ctx.define("cluster_token_rate", p * peak * eta / fpt, "token/s", "tokens all GPUs train per second",
               headline=True)
    ctx.define("required_token_rate", F / fpt / T, "token/s", "tokens per second the available time requires",
               headline=True)
    ctx.define("gpu_hours", F / (peak * eta), "h", "GPU-hours of the work at this efficiency", headline=True)
    if ctx.provided("state_memory"):
        ctx.define("gpus_for_memory", ceiling_of(ctx.q("state_memory", "B") / dev.q("memory", "B", positive=True)),
                   "", "⌈persistent state / device memory⌉ (perfectly even sharding)", headline=True)


def _input(ctx):
    b = ctx.block("input_pipeline")
    if b is None:
        return
    import sympy as sp
    wl = ctx.ref("workload")
    tokens, seq = wl.q("tokens", "token", positive=True), wl.q("seq_len", "token", positive=True)
    budget = wl.q("deadline", "s", positive=True) - wl.q("reserved", "s", nonnegative=True)
    require_time_to_train(ctx, wl)
    tok_rate = ctx.define("required_token_rate_budget", tokens / budget, "token/s",
                          "useful tokens per second the training time (deadline − reserved) requires", headline=True)
    ctx.define("required_seq_rate", tok_rate / seq, "seq/s", "sequences per second at that rate", headline=True)
    ctx.define("input_bandwidth", tok_rate * b.q("token_bytes"), "MB/s", "bytes of token ids per second",
               headline=True)
    rate = b.q("worker_rate")
    load = ctx.define("loader_rate", b.q("workers") * rate, "seq/s", "workers × per-worker rate", headline=True)
    batch = wl.q("global_batch", "seq", positive=True)
    use = ctx.define("consumption_rate", batch / (ctx.q("step_time", "s") - ctx.q("input_wait", "s")), "seq/s",
                     "sequences the GPUs consume per second when input is ready: global batch / (step time − "
                     "input wait)", headline=True)
    ctx.define("loader_headroom", load - use, "seq/s", "loader rate − consumption (must be positive)",
               headline=True)
    ctx.require("loaders_keep_up", load, ">", use, "seq/s", "the loaders produce faster than training consumes")
    during = (b.q("workers") - b.q("outage_workers")) * rate
    deficit = ctx.define("outage_prefetch", sp.Max(0, use - during) * b.q("outage"), "seq",
                         "sequences to prefetch so an outage never starves training: (consumption − "
                         "rate of the remaining loaders) × outage (fluid queue)", headline=True)
    ctx.define("refill_time", deficit / (load - use), "s",
               "time after the outage for the prefetch queue to refill at loader − consumption rate",
               headline=True)
    t, d = b.value("trained_through"), b.value("dispatched_through")
    if t is not None or d is not None:
        if t is None or d is None:
            b.error_at("trained_through" if t is None else "dispatched_through",
                       "the resume rule needs both trained_through and dispatched_through",
                       "give the last trained batch and the last batch handed to the loaders", code="missing-parameter")
        if d < t:
            b.error_at("dispatched_through", f"dispatched_through = {int(d)} is before trained_through = {int(t)}",
                       "a batch is dispatched to the loaders before it is trained on")
        ctx.define("resume_batch", sp.Integer(int(t) + 1), "", "first batch to train after a restart: "
                   "the one after the last consumed batch (dispatched ones are re-prepared)", headline=True)
        ctx.define("in_flight_batches", sp.Integer(int(d - t)), "",
                   "batches dispatched but not yet trained: lost from the queue at a failure, prepared again")


def _comm(ctx):
    b = ctx.block("comm_budget")
    if b is None:
        return
    budget = ctx.define("comm_budget", ctx.q("step_budget", "s") - ctx.q("compute_time", "s")
                        - ctx.q("input_wait", "s"), "s",
                        "exposed communication a step can afford: step budget − compute − input wait", headline=True)
    t = ctx.q("transfer_time", "s")
    ctx.define("exposed_if_no_overlap", t, "s", "communication exposed if prefetch/overlap fails entirely")
    ctx.define("comm_budget_margin", budget - t, "s",
               "budget left if the whole transfer is exposed (negative: meeting the deadline depends on overlap)",
               headline=True)


# ---------------------------------------------------------------- tables
def _val(ws, nid, unit=""):
    from dsl.plugin import convert
    if nid not in ws.nodes:
        return None
    v = ws.base_value(nid)
    return None if v is None else convert(float(v), unit)


def _noise_table(ws, plan):
    if "batch_noise" not in ws.decls[plan].uses:
        return None
    ks = ws.python_value(f"{plan}.batch_noise.compare_gpus") if f"{plan}.batch_noise.compare_gpus" in ws.nodes else ()
    n0 = _val(ws, f"{plan}.gpus")
    tok = _val(ws, f"{plan}.tokens_per_step", "token")
    days = _val(ws, f"{plan}.train_time", "day")
    rows = [(f"{n0:,.0f} (reference)", f"{tok:,.0f}", f"{days:.1f}", f"{days:.1f}")]
    for k in ks or ():
        k = int(k)
        rows.append((f"{k:,}", f"{tok * k / n0:,.0f}", f"{_val(ws, f'{plan}.weak_time_{k}', 'day'):.1f}",
                     f"{_val(ws, f'{plan}.strong_time_{k}', 'day'):.1f}"))
    lim = _val(ws, f"{plan}.weak_scaling_limit")
    return Table(("GPUs", "weak: tokens per step", "weak: days", "strong: days"), tuple(rows),
                 (f"weak scaling can shorten the run at most {lim:.2f}× (S/S_min); days exclude checkpoint "
                  "overhead and reserved time",))


def _bound_rows(ws, plan):
    from dsl.plugin import convert
    pre = f"{plan}.gpu_bound"
    F = _val(ws, f"{plan}.flops_total")
    T = _val(ws, f"{pre}.available")
    state = _val(ws, f"{plan}.state_memory")
    devs = ws.python_value(f"{pre}.devices") if f"{pre}.devices" in ws.nodes else None
    devs = [d.name for d in devs] if devs else [ws.python_value(f"{plan}.device").name]
    etas = ws.python_value(f"{pre}.efficiencies") if f"{pre}.efficiencies" in ws.nodes else None
    etas = list(etas) if etas else [_val(ws, f"{plan}.mfu")]
    import math
    out = []
    for d in devs:
        peak = _val(ws, f"{d}.peak_flops")
        mem = _val(ws, f"{d}.memory")
        for eta in etas:
            need = F / (peak * eta * T)
            out.append((d, eta, need, math.ceil(need - 1e-9),
                        math.ceil(state / mem - 1e-9) if state is not None and mem else None,
                        convert(F / (peak * eta), "h")))
    return out


def _bound_table(ws, plan):
    if "gpu_bound" not in ws.decls[plan].uses:
        return None
    rows = tuple((d, f"{eta * 100:g} %", f"{need:,.1f}", f"{p:,}", "—" if m is None else f"{m:,}", f"{h:,.0f}")
                 for d, eta, need, p, m, h in _bound_rows(ws, plan))
    T = _val(ws, f"{plan}.gpu_bound.available", "day")
    return Table(("device", "η", "GPUs (continuous)", "GPUs for compute", "GPUs for memory", "GPU-hours"), rows,
                 (f"compute bound ⌈F/(P·η·T)⌉ with T = {T:g} days; memory bound ⌈state/memory⌉ with the state "
                  "perfectly sharded",))


def _compare_table(ws, plan):
    if "compare" not in ws.decls[plan].uses:
        return None
    plans = [p.name for p in ws.python_value(f"{plan}.compare.plans")]
    q = ws.python_value(f"{plan}.compare.quantity")
    vals = []
    for p in plans:
        nid = f"{p}.{q}"
        if nid not in ws.nodes:
            return Table(("plan", q), ((p, f"no quantity '{q}'"),))
        n = ws.nodes[nid]
        vals.append((p, _val(ws, nid, n.unit), n.unit))
    ref = vals[0][1]
    rows = [(p, f"{v:,.4g} {u}".strip(), "reference" if i == 0 else f"{v - ref:+,.4g} {u}".strip())
            for i, (p, v, u) in enumerate(vals)]
    body = [rows[0]] + sorted(rows[1:], key=lambda r: next(v for p, v, _ in vals if p == r[0]))
    return Table(("plan", q, f"change vs {plans[0]}"), tuple(body),
                 (f"sorted by {q}: the first row after the reference gains the most",))


def path_shares(ws, plan: str, timeline: str) -> dict | None:
    """Seconds of the nominal critical path of ``timeline`` charged to each resource.

    An activity on the path is charged to its resource (or to the one it names as its
    ``charge``: the GPU waiting for a collective is the link's time).  An activity that
    stands for no resource's work — a wait whose duration is built from other activities'
    times, such as the compute before the gradient reduction can start — is split by the
    time quantities it is made of: the part ``s·∂d/∂s`` of its duration ``d`` goes to the
    resource whose activities' durations are made of ``s`` (a quantity in the work of two
    resources is charged to neither).  For a duration linear in those times this is exact:
    it is how much the wait shortens when that resource's work does.  None without a
    schedule.
    """
    import sympy as sp
    from dsl.plugin import parse_unit

    cp = ws.critical_path(plan, timeline)
    if cp is None:
        return None
    tl = ws.timeline(plan, timeline)
    on_path = set(cp["path"])
    shares: dict = {}
    owners = None
    second = parse_unit("s").dim
    for row in cp["activities"]:
        if row["id"] not in on_path:
            continue
        act = tl.activities[row["id"]]
        res = act.charged
        if res:
            shares[res] = shares.get(res, 0.0) + row["duration"]
            continue
        if owners is None:          # time quantity -> the resources whose work is made of it
            owners = {}
            for r, durs in tl.charged_durations().items():
                for d in durs:
                    for s in d.free_symbols:
                        n = ws.nodes.get(s.name)
                        if n is not None and n.dim == second:
                            owners.setdefault(s, set()).add(r)
        for s in sorted(act.duration.free_symbols & owners.keys(), key=lambda x: x.name):
            if len(owners[s]) != 1:
                continue
            part = ws.subs_value(s * sp.diff(act.duration, s))
            if part is not None:
                r = next(iter(owners[s]))
                shares[r] = shares.get(r, 0.0) + float(part)
    return shares


def amdahl_rows(ws, plan):
    """(resource, f, r, T, T') for each declared resource and factor; f is the share of the
    nominal critical path charged to that resource (:func:`path_shares`; book §10.6.3)."""
    pre = f"{plan}.what_if"
    tl_name = ws.python_value(f"{pre}.timeline")
    cp = ws.critical_path(plan, tl_name)
    if cp is None:
        return None
    T = cp["makespan"]
    shares = path_shares(ws, plan, tl_name)
    out = []
    for res in ws.python_value(f"{pre}.resources"):
        f = shares.get(res, 0.0) / T if T else 0.0
        for r in ws.python_value(f"{pre}.factors"):
            out.append((res, f, r, T, T * (1 - f + f / r)))
    return out


def _amdahl_table(ws, plan):
    if "what_if" not in ws.decls[plan].uses:
        return None
    rows = amdahl_rows(ws, plan)
    if rows is None:
        return Table(("resource",), (("no timeline with a schedule",),))
    return Table(("resource", "share f of the critical path", "factor r", "T (s)", "T' (s)", "T'/T"),
                 tuple((res, f"{f * 100:.2f} %", f"{r:g}", f"{T:.4g}", f"{t2:.4g}", f"{t2 / T:.4f}")
                       for res, f, r, T, t2 in rows),
                 ("T'/T = 1 − f + f/r holds while the critical path keeps its shape; re-evaluate the plan "
                  "with the changed input to check (a larger change can move the path)",))


# ---------------------------------------------------------------- figures
def _draw_bound(ws, plan, fig) -> bool:
    if "gpu_bound" not in ws.decls[plan].uses:
        return False
    rows = _bound_rows(ws, plan)
    etas = sorted({r[1] for r in rows})
    devs = list(dict.fromkeys(r[0] for r in rows))
    fig.set_size_inches(4 * len(etas), 3.5)
    axes = fig.subplots(1, len(etas), squeeze=False)[0]
    top = max(max(r[3] for r in rows), max((r[4] or 0) for r in rows)) * 1.15
    for ax, eta in zip(axes, etas):
        sel = [r for r in rows if r[1] == eta]
        ax.bar(range(len(devs)), [r[3] for r in sel], color="C0", label="compute bound")
        ax.plot(range(len(devs)), [r[4] if r[4] is not None else float("nan") for r in sel], "D", color="C1",
                label="memory bound")
        ax.set_xticks(range(len(devs)))
        ax.set_xticklabels(devs, rotation=45, fontsize=7)
        ax.set_ylim(0, top)
        ax.set_title(f"η = {eta * 100:g} %", fontsize=9)
        ax.set_ylabel("GPUs")
    axes[0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


def _draw_frontier(ws, plan, fig) -> bool:
    """GPUs needed to finish by the available time vs model size (fig. 10-47)."""
    if "gpu_bound" not in ws.decls[plan].uses or "work_6nd" not in ws.decls[plan].uses:
        return False
    import sympy as sp
    nid = f"{plan}.work_6nd.params"
    F = ws.full_expr(f"{plan}.flops_total", free=frozenset({nid}))
    sym = sp.Symbol(nid)
    others = {s: ws.nominal_map().get(s) for s in F.free_symbols if s != sym}
    f_of_n = sp.lambdify(sym, F.xreplace(others))
    T = _val(ws, f"{plan}.gpu_bound.available")
    n0 = _val(ws, nid)
    sizes = [n0 * 10 ** (x / 20) for x in range(-40, 21)]
    ax = fig.subplots()
    pre = f"{plan}.gpu_bound"
    devs = ws.python_value(f"{pre}.devices") if f"{pre}.devices" in ws.nodes else None
    devs = [d.name for d in devs] if devs else [ws.python_value(f"{plan}.device").name]
    etas = ws.python_value(f"{pre}.efficiencies") if f"{pre}.efficiencies" in ws.nodes else None
    etas = list(etas) if etas else [_val(ws, f"{plan}.mfu")]
    for i, d in enumerate(devs):
        peak = _val(ws, f"{d}.peak_flops")
        for j, eta in enumerate(etas):
            ax.plot([n / 1e9 for n in sizes], [float(f_of_n(n)) / (peak * eta * T) for n in sizes],
                    color=f"C{i}", ls="-" if j == len(etas) - 1 else "--", label=f"{d}, η = {eta * 100:g} %")
    ax.axhline(_val(ws, f"{plan}.gpus"), color="k", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("model parameters (B)")
    ax.set_ylabel("GPUs needed")
    ax.set_title(f"GPUs to finish within {T / DAY:g} days", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


@hookimpl
def plan_tables_register():
    return [TableSpec("batch-scaling", "Weak vs strong scaling with the gradient noise scale", _noise_table,
                      references=("critical batch size from the gradient noise scale: McCandlish et al. 2018, 'An "
                                  "Empirical Model of Large-Batch Training'",)),
            TableSpec("gpu-bounds", "GPU lower bounds: compute and memory", _bound_table,
                      references=("GPU count for a deadline: ⌈F / (peak · MFU · available time)⌉, and the memory "
                                  "floor ⌈state / memory⌉",), per_plan=False),
            TableSpec("compare", "Plans compared", _compare_table,
                      references=("which degraded input to restore: the gain of restoring each input to its nominal "
                                  "value",), per_plan=False),
            TableSpec("what-if", "What a change of one resource buys (Amdahl on the critical path)", _amdahl_table,
                      references=("Amdahl's law on the critical path: Amdahl 1967, 'Validity of the single processor "
                                  "approach to achieving large scale computing capabilities'",))]


@hookimpl
def plan_figures_register():
    return [FigureSpec("gpu-bounds", "GPUs needed by compute (bars) and memory (diamonds)",
                       _draw_bound, references=("GPU count against deadline and per-GPU efficiency",)),
            FigureSpec("size-frontier", "GPUs needed vs model size for a deadline", _draw_frontier,
                       references=("model-size frontier: days to train N parameters on D tokens per device type",))]

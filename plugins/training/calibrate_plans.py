"""Calibration against measured runs written as plans (``use calibrate { plans = [...] }``).

Each run is a ``plan`` of the file that states the run as it was made — any model the
catalog or a config describes (GQA, SwiGLU, MoE, sliding windows), any layout ``use layout``
prices (TP·PP·CP·EP, ZeRO, interleaved schedules, recomputation, flash attention) — and its
measurement as a plan field:

* ``measured_step_time`` (s): seconds per optimizer step, or
* ``measured_throughput`` (token/s): tokens per second of the whole run; the measured step
  is then the plan's ``tokens_per_step`` over it.

The prediction is the run plan's own ``step_time``: the quantity ``plan eval`` prints for it,
through every block it uses, so calibration and evaluation can never disagree.  The fitted
fields are *inputs* of the file — a field of the calibrating plan's ``device``
(``matmul_efficiency``) or of any declaration (``"ib_ndr_400g.efficiency"``) — and each run's
step time is read as a numeric function of them (every other input at its nominal value,
:meth:`dsl.plugin.ComputedView.function`).  Bounded least squares over the relative residuals
predicted / measured − 1 of the selected runs (``rows``; default every run) gives the fitted
values, quantities of the calibrating plan that another device can extend:

    device h100_fit extends h100_sxm { matmul_efficiency = fit.matmul_efficiency }

Bounds: a dimensionless field (an efficiency) in [0.001, 1]; a field with a unit on a log scale
within a factor 1000 of its stated value (``matmul_half_flops``: [10³, 10¹⁶] FLOP).
"""
from __future__ import annotations

import math

import sympy as sp

from dsl.plugin import symbol

MEASURED = (("measured_step_time", "s"), ("measured_throughput", "token/s"))
EFFICIENCY_BOUNDS = (1e-3, 1.0)


def fitted_name(name: str) -> str:
    """The calibrating plan's quantity for fitted field ``name`` (``nvlink4.efficiency`` →
    ``nvlink4_efficiency``; a device field keeps its name)."""
    return name.replace(".", "_")


def _targets(ctx, b, names, fields):
    """``[(name, input node id, nominal, lo, hi, log, display unit)]`` for the fitted names."""
    dev = ctx.ref("device")
    out = []
    for n in names:
        if "." in n:
            decl, field = n.split(".", 1)
            view = ctx.decl(decl)
        else:
            view, field = dev, n
        if not view.has(field):
            b.error_at("fit", f"{view.kind} '{view.name}' states no field '{field}' to fit",
                       f"fit a field {view.name} states (a device field such as matmul_efficiency, or "
                       "'LINK.efficiency'), or add it to the declaration", code="unknown-name")
        spec = fields.get(field)
        sym = view.q(field, spec[1] if spec is not None else None)   # any other field in its own unit
        nominal = ctx.nominal(sym)
        if nominal is None:
            b.error_at("fit", f"'{n}' has no value to start the fit from", "give the field a value")
        nominal = float(nominal)
        if spec is not None:
            (lo, hi), log = spec[2], spec[3] == "log"
        elif 0 < nominal <= 1 and field.endswith("efficiency"):
            (lo, hi), log = EFFICIENCY_BOUNDS, False
        elif nominal > 0:
            lo, hi, log = nominal / 1000, nominal * 1000, True
        else:
            b.error_at("fit", f"'{n}' = {nominal:g} cannot be fitted (a fitted field must be positive)",
                       "fit an efficiency, a bandwidth, a latency or another positive field")
        shown = (spec[1] if spec is not None else view.unit(field)) or ("%" if hi <= 1 else "")
        out.append((n, sym.name, nominal, lo, hi, log, "GFLOP" if shown == "FLOP" else shown))
    return out


def _runs(ctx, b):
    """``[(run plan, its step_time symbol, the measurement field, its symbol)]``."""
    out = []
    for ref in b.value("plans"):
        run = ctx.decl(ref.name)
        if ref.name == ctx.name:
            b.error_at("plans", f"plan '{ctx.name}' lists itself as a measured run",
                       "list the plans that state the measured runs", code="cycle")
        if not run.uses("layout"):
            b.error_at("plans", f"run '{ref.name}' prices no training step (it has no `use layout`)",
                       "describe the run with `use layout { … }` so that it has a step_time",
                       code="missing-quantity")
        given = [(f, u) for f, u in MEASURED if run.has(f)]
        if len(given) != 1:
            b.error_at("plans", f"run '{ref.name}' states {'no' if not given else 'two'} measurement"
                       f"{'s' if given else ''}: give exactly one of measured_step_time (s) or "
                       "measured_throughput (token/s, the whole run)",
                       f"add e.g. `measured_step_time = 14.72 s` to plan {ref.name}", code="missing-field")
        field, unit = given[0]
        m = run.q(field, unit, positive=True)
        out.append((ref.name, symbol(f"{ref.name}.step_time"), field, m))
    return out


def price(ctx, b, names, fields, warn_bound, docs, references):
    """Define the fitted fields, ``fit_rms_error`` and ``max_prediction_error`` of plan-written
    runs as computed quantities (:meth:`dsl.plugin.PlanContext.define_computed`)."""
    targets = _targets(ctx, b, names, fields)
    runs = _runs(ctx, b)
    wanted = b.value("rows")
    by = {r[0] for r in runs}
    if wanted is not None:
        for w in (str(x) for x in wanted):
            if w not in by:
                from difflib import get_close_matches
                guess = get_close_matches(w, list(by), 1)
                b.error_at("rows", f"'{w}' is not one of the runs in `plans`",
                           (f"did you mean '{guess[0]}'? " if guess else "") + "runs: " + ", ".join(sorted(by)),
                           code="unknown-name")
    selected = {r[0] for r in runs} if wanted is None else {str(x) for x in wanted}
    if len(selected) < len(targets):
        b.error_at("rows", f"{len(selected)} run(s) cannot fit {len(targets)} fields",
                   "select at least as many runs as fitted fields")
    reads = [s for name, step, field, m in runs
             for s in (step, m) + ((symbol(f"{name}.tokens_per_step"),) if field == "measured_throughput" else ())]
    cell = {}

    def solve(view):
        if "r" in cell:
            return cell["r"]
        cell["r"] = None
        ids = [t[1] for t in targets]
        funcs, measured = [], []
        for name, step, field, m in runs:
            if name in selected and not view.inputs(step) & set(ids):
                view.error(f"run '{name}' does not depend on {', '.join(names)}: its step time does not change "
                           "with the fitted fields", "price the run on the calibrating plan's device with "
                           "efficiency = \"roofline\" (a stated mfu ignores the device's efficiency fields)",
                           code="unknown-name")
                return None
            mv = view.value(m)
            if field == "measured_throughput" and mv is not None:
                tokens = view.value(symbol(f"{name}.tokens_per_step"))
                mv = None if tokens is None else tokens / mv
            try:
                funcs.append(view.function(step, ids))
            except ValueError:
                mv = None
            if mv is None:
                view.error(f"run '{name}' has no step time to compare", "evaluate the run plan on its own to see why")
                return None
            measured.append(mv)
        return _fit(view, cell, targets, runs, funcs, measured, selected, warn_bound)

    for t in targets:
        fname = fitted_name(t[0])
        field = t[0].split(".")[-1]
        ctx.define_computed(fname, reads, (lambda view, k=t[0]: _pick(solve(view), "values", k)),
                            t[6], docs.get(field, f"{t[0]} fitted to the measured runs"), headline=True, rank=1,
                            references=references)
    ctx.define_computed("fit_rms_error", reads, lambda view: _pick(solve(view), "rms", None), "%",
                        "RMS error of the predicted throughput on the fitted runs", headline=True, rank=2)
    if len(selected) < len(runs):
        ctx.define_computed("max_prediction_error", reads, lambda view: _pick(solve(view), "max_held", None), "%",
                            "largest |error| of the predicted throughput on the runs left out of the fit",
                            headline=True, rank=2)


def _pick(result, key, sub):
    if result is None:
        return None
    v = result[key] if sub is None else result[key][sub]
    return (v, result)


def _fit(view, cell, targets, runs, funcs, measured, selected, warn_bound):
    import numpy as np
    from plugins.training.fitting import least_squares_bounded

    lo = [math.log10(t[3]) if t[5] else t[3] for t in targets]
    hi = [math.log10(t[4]) if t[5] else t[4] for t in targets]
    x0 = [min(max(math.log10(t[2]) if t[5] else t[2], a + 1e-9 * (c - a)), c - 1e-9 * (c - a))
          for t, a, c in zip(targets, lo, hi)]

    def actual(x):
        return [10 ** xi if t[5] else float(xi) for t, xi in zip(targets, x)]

    idx = [i for i, r in enumerate(runs) if r[0] in selected]
    meas = np.array([measured[i] for i in idx])

    def residuals(x):
        a = actual(x)
        return np.array([funcs[i](*a) for i in idx]) / meas - 1

    with np.errstate(all="ignore"):
        r0 = residuals(np.array(x0))
    bad = np.flatnonzero(~(np.isfinite(r0) & (np.abs(r0) < 1e100)))
    if bad.size:
        view.error(f"run '{runs[idx[int(bad[0])]][0]}' measures a step of {meas[int(bad[0])]:.3g} s, which no value "
                   "of the fitted fields can match", "check its measured_step_time or measured_throughput")
        return None
    x, cost, status, nfev = least_squares_bounded(residuals, x0, lo, hi)
    vals = actual(x)
    for t, v in zip(targets, vals):
        if min(abs(v - t[3]) / t[3], abs(t[4] - v) / t[4]) < 1e-6:
            warn_bound(view, t[0], v)
    rows = []
    for i, (name, *_rest) in enumerate(runs):
        pred = float(funcs[i](*vals))
        rows.append({"run": name, "measured_step": measured[i], "predicted_step": pred,
                     "error": 100 * (measured[i] / pred - 1), "fitted": name in selected})
    fitted = [r["error"] for r in rows if r["fitted"]]
    held = [abs(r["error"]) for r in rows if not r["fitted"]]
    result = {"values": dict(zip((t[0] for t in targets), vals)), "rows": rows,
              "rms": round(math.sqrt(sum(e * e for e in fitted) / len(fitted)), 6) / 100,
              "max_held": max(held) / 100 if held else None, "cost": cost, "status": status, "nfev": nfev}
    cell["r"] = result
    return result

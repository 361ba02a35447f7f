"""Prediction bands: how far measured runs fell from the tool's prediction, on the plan's device
and regime.

Every plan whose training step is priced by ``use layout`` on the device's curves
(``efficiency = "roofline"``, the way the validation corpus is priced) gets the band of its device
and regime — dense or MoE model, 16-bit or FP8 training, one node or several — from
``bands.csv``, which ``benchmarks/validation_table.py --write`` generates from the corpus in
``specs/data/validation/`` (its README states the quantiles): the range of measured / predicted
step time over the corpus's test-set runs of that group.  The plugin defines

* ``step_time_low`` / ``step_time_high`` = step_time × the band's low / high ratio;
* ``train_time_low`` / ``train_time_high`` likewise (steps × step time);
* ``finish_time_low`` / ``finish_time_high`` = finish_time + (ratio − 1) × train_time: the
  training time's band, the other terms (reserved time, checkpoint and failure overhead) held;
* ``runtime_memory_low`` / ``runtime_memory_high`` = runtime_memory × the band of measured /
  predicted peak memory over the group's runs that publish it (``bands.csv`` rows of quantity
  ``runtime_memory``), with a warning where the plan fits at its prediction but not at the high end;

and the table "Prediction bands" (text, JSON and reports).  A plan on a device and regime with
too few validated runs gets a warning instead, with how to calibrate (``use calibrate``); a
serving plan's table says that no serving rows are validated (the corpus has none yet).  A step priced at a stated ``mfu`` carries no band and
no warning: its accuracy is that of the stated mfu, which the corpus does not measure.

The regime is read at nominal values (``gpus`` against ``gpus_per_host``); the precision is the
format ``use layout`` prices the matrix products in (``matmul_precision``), or the plan's
``use bands { precision = … }`` when given.  The device is matched by its declaration
name (a device derived with ``extends`` is a device the corpus has not measured).
"""
from __future__ import annotations

import csv
import io
from functools import lru_cache
from pathlib import Path

from dsl.plugin import FileRefused, Param, Table, TableSpec, UseSpec, hookimpl, read_text

TIMES = ("step_time", "train_time", "finish_time")
MEMORY = "runtime_memory"
SERVING_TIMES = ("ttft_floor", "tpot", "ttft_mean", "tpot_mean")
PRECISIONS = {"bf16": "16-bit", "fp16": "16-bit", "fp8": "FP8", "fp4": "FP4"}
CALIBRATE_HINT = ("calibrate the device on your own measured runs with `use calibrate` "
                  "(docs/plugins/calibrate.md) and price the plan on the fitted device, or add published runs "
                  "to specs/data/validation/ and regenerate the bands with "
                  "`python benchmarks/validation_table.py --write`")
REFERENCES = ("prediction bands: quantiles of measured / predicted step time over published training runs "
              "(specs/data/validation/training-runs.csv, test set)",)

MEMORY_REFERENCES = ("prediction bands of the runtime memory: quantiles of measured / predicted peak memory "
                     "(torch.cuda.max_memory_reserved as the runs publish it) over published training runs "
                     "(specs/data/validation/training-runs.csv, test set)",)

SPEC = UseSpec(
    "bands",
    "states the regime of a plan's prediction band (the band itself is attached to every training plan)",
    params=(Param("precision", kind="choice", choices=tuple(PRECISIONS), optional=True,
                  doc="the number format whose validated runs give the band: bf16 or fp16 (16-bit runs), fp8 or "
                      "fp4 (default: the format `use layout` prices the matrix products in, matmul_precision)"),
            Param("error", kind="choice", choices=("none", "sampled"), default='"none"',
                  doc="none: train and finish times are the prediction, the band shown beside them; sampled: "
                      "they carry `step_time_error`, the measured / predicted step time of a validated run of the "
                      "band's group drawn at random by `plan eval --samples` (its expected value, the runs' mean "
                      "ratio, multiplies them in deterministic outputs)")),
    order=90,
    provides=("step_time_error",),
    provides_when=(("step_time_error", 'error = "sampled"'),),
    references=REFERENCES,
)


def bands_path() -> Path:
    """``bands.csv``: packaged beside this module in a wheel, else the checkout's corpus copy."""
    here = Path(__file__).resolve().parent
    packaged = here / "validation_bands.csv"
    return packaged if packaged.is_file() else here.parents[1] / "specs" / "data" / "validation" / "bands.csv"


@lru_cache(maxsize=4)
def _read(path: str) -> dict:
    p = Path(path)
    text = read_text(p, root=p.parent, what="prediction bands", remember=False)
    out: dict = {"time": {}, "memory": {}}
    for d in csv.DictReader(io.StringIO(text, newline="")):
        key = (d["device"], d["arch"], d["precision"], d["nodes"])
        if d.get("quantity") == MEMORY:      # the runtime memory's terms are the framework's: keyed by it
            out["memory"][key + (d.get("framework") or "none",)] = d
        else:
            out["time"][key] = d
    return out


def load_bands(kind: str = "time") -> dict:
    """{(device, arch, precision, nodes): row of bands.csv} of the times (``kind`` "time": the
    training step's and the serving times), or {(device, arch, precision, nodes, framework): row} of
    the runtime memory ("memory"); empty when the file cannot be read."""
    try:
        return _read(str(bands_path()))[kind]
    except FileRefused:
        return {}


def quantiles_text(row: dict, table: bool = False) -> str:
    """What a band row's ends are: its 10th–90th percentile, or min–max (in a table, with why)."""
    if row["quantiles"] == "p10-p90":
        return "10th–90th percentile"
    return "min–max (fewer than 10 runs)" if table else "min–max"


def regime_label(key: tuple) -> str:
    return " · ".join(key[1:])


def lookup(device: str, moe: bool, precision: str, gpus: float | None, gpus_per_host: float | None,
           kind: str = "time", framework: str = "none"):
    """(group key, band row or None, count of validated runs in the group) of the step time, or of
    the runtime memory with ``kind`` = "memory" (its group also names the plan's ``framework``)."""
    nodes = "1 node" if gpus is not None and gpus_per_host is not None and gpus <= gpus_per_host else "multi-node"
    key = (device, "moe" if moe else "dense", PRECISIONS.get(precision, "16-bit"), nodes)
    if kind == "memory":
        key += (framework,)
    row = load_bands(kind).get(key)
    if row is None:
        return key, None, 0
    return key, (row if row["low"] else None), int(row["runs"])


def _mode(ctx) -> str | None:
    """How the plan's step is priced: "roofline", "mfu", "stated", or None (no training step);
    the rule of :func:`plugins.training.layout.efficiency_mode`."""
    from plugins.training.layout_stated import RATES, default_mode
    lay = ctx.block("layout")
    if lay is not None:
        return default_mode(lay.value("efficiency"), any(lay.value(k) is not None for k in RATES),
                            ctx.stated("mfu"))
    return "mfu" if ctx.provided("step_time") else None


def _nominal_param(ctx, name):
    if not ctx.stated(name):
        return None
    v = ctx.nominal(ctx.param(name))
    return None if v is None else float(v)


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl(trylast=True)      # after the other blocks: a plan's own errors come before this warning
def plan_quantities_price(ctx):
    mode = _mode(ctx)
    if mode is None:
        _price_serving(ctx)
        return
    if not ctx.stated("device"):
        return
    device = ctx.ref("device").name
    moe = ctx.ref("model").has("experts") if ctx.stated("model") else False
    b = ctx.block("bands")
    lay = ctx.block("layout")
    priced = lay.value("matmul_precision") if lay is not None else "bf16"    # the format the step prices
    precision = b.value("precision") if b is not None and b.given("precision") else priced
    gpus, gph = _nominal_param(ctx, "gpus"), _nominal_param(ctx, "gpus_per_host")
    framework = lay.value("framework") if lay is not None else "none"
    _price_memory(ctx, device, moe, precision, gpus, gph, framework)    # priced alike in every mode
    if mode != "roofline":
        return          # priced at the plan's stated mfu or throughput: its accuracy is that figure's, no band
    key, row, runs = lookup(device, moe, precision, gpus, gph)
    sampled = b is not None and b.value("error") == "sampled"
    if row is None:
        if sampled:
            b.error_at("error", f"error = \"sampled\" needs the prediction band of plan '{ctx.name}', but the "
                       f"validation corpus has {runs or 'no'} validated test-set run{'s' if runs != 1 else ''} on "
                       f"device '{device}' in its regime ({regime_label(key)}), too few for a band",
                       "keep error = \"none\" (the default), or " + CALIBRATE_HINT, code="unvalidated")
            return
        have = (f"only {runs} validated test-set run{'s' if runs != 1 else ''}, too few for a band,"
                if runs else "no validated test-set runs")
        where = (f"in the plan's regime ({regime_label(key)})" if any(k[0] == device for k in load_bands())
                 else "in any regime (bands come from the test set; runs kept for fitting defaults give none)")
        ctx.warn(f"the step time of plan '{ctx.name}' carries no prediction band: the validation corpus has {have} "
                 f"on device '{device}' {where}", CALIBRATE_HINT, code="unvalidated")
        return
    lo, hi = float(row["low"]), float(row["high"])
    how = quantiles_text(row)
    src = f"{how} of measured / predicted step time, from {runs} validated {device} runs ({regime_label(key)})"
    step = ctx.q("step_time", "s")
    for side, r in (("low", lo), ("high", hi)):
        ctx.define(f"step_time_{side}", step * _ratio(r), "s", f"step time × {r:.4g}: the band's {side} end, {src}",
                   references=REFERENCES)
    err = _define_error(ctx, row, key, device) if sampled else None
    wl = ctx.ref("workload") if ctx.stated("workload") else None
    if wl is None or not wl.has("tokens"):
        return
    train = ctx.q("train_time", "day")
    if err is not None:         # train_time carries the error: the band is on the prediction, steps × step time
        train = ctx.q("steps", "") * step
    for side, r in (("low", lo), ("high", hi)):
        ctx.define(f"train_time_{side}", train * _ratio(r), "day",
                   f"train time × {r:.4g}: the band's {side} end, {src}", references=REFERENCES)
    fin = ctx.q("finish_time", "day")
    for side, r in (("low", lo), ("high", hi)):
        ctx.define(f"finish_time_{side}", fin + train * (_ratio(r) - (1 if err is None else err)), "day",
                   f"finish time + ({r:.4g} − 1) × train time: the band's {side} end on the training time, "
                   f"reserved time and overhead held; {src}", references=REFERENCES)


def _price_memory(ctx, device, moe, precision, gpus, gph, framework):
    """``runtime_memory_low`` / ``runtime_memory_high``: the runtime memory × the band of measured /
    predicted peak memory (``torch.cuda.max_memory_reserved`` as the runs publish it) over the
    corpus's test-set runs of the plan's device, regime and framework that publish it; nothing
    where they are too few.  Where the plan fits at its prediction but not at the band's high end, a warning
    says so: runs of that regime measured up to that much more than their prediction."""
    if not ctx.defined(MEMORY):
        return
    key, row, runs = lookup(device, moe, precision, gpus, gph, kind="memory", framework=framework)
    if row is None:
        return
    how = quantiles_text(row)
    src = (f"{how} of measured / predicted peak memory (as the runtime reserves it), from {runs} validated "
           f"{device} runs that publish it ({regime_label(key)})")
    mem = ctx.q(MEMORY, "GiB")
    for side in ("low", "high"):
        ctx.define(f"{MEMORY}_{side}", mem * _ratio(float(row[side])), "GiB",
                   f"runtime memory × {float(row[side]):.4g}: the band's {side} end, {src}",
                   references=MEMORY_REFERENCES)
    if not ctx.defined("usable_memory"):
        return
    usable, m = (ctx.nominal(x) for x in (ctx.q("usable_memory", "GiB"), mem))   # bytes
    if usable is None or m is None:
        return
    usable, m = float(usable) / 2 ** 30, float(m) / 2 ** 30
    top = m * float(row["high"])
    if m <= usable < top:
        ctx.warn(f"plan '{ctx.name}' fits at its predicted runtime memory ({m:.4g} of {usable:.4g} GiB usable), "
                 f"but not at its band's high end, {top:.4g} GiB: validated {device} runs of its "
                 f"regime ({regime_label(key)}) reserved up to {float(row['high']):.3g} × their prediction",
                 "leave that margin (fewer micro-batch tokens, more recomputation or sharding), or measure "
                 "torch.cuda.max_memory_reserved on a short run of the layout", code="unvalidated")


def run_ratios(row: dict) -> list[float]:
    """The measured / predicted step times of a band row's validated runs (its ``ratios`` column)."""
    return [float(x) for x in (row.get("ratios") or "").split()]


def draw_ratios(ratios: tuple, rng, n: int):
    """``n`` ratios drawn with replacement from ``ratios``, each run equally likely (a bootstrap of
    the group's runs)."""
    import numpy as np
    return rng.choice(np.asarray(ratios, dtype=float), size=n, replace=True)


def _define_error(ctx, row, key, device):
    """``step_time_error``: the ratio measured / predicted of the step time, a random quantity
    drawn from the validated runs of the plan's device and regime; its expected value is their
    mean ratio.  ``use finish`` multiplies the train and finish times by it."""
    import functools
    import sympy as sp
    ratios = tuple(run_ratios(row))
    mean = sp.Rational(sum(sp.Rational(str(r)) for r in ratios), len(ratios))
    return ctx.define_random(
        "step_time_error", mean, functools.partial(draw_ratios, ratios), (), "",
        f"measured / predicted step time: one of the {len(ratios)} validated {device} runs ({regime_label(key)}) "
        f"drawn at random by `plan eval --samples`; expected value their mean ratio, {float(mean):.4g}, which "
        "multiplies the train and finish times", headline=True, rank=11.5, references=REFERENCES)


def serving_band(device: str, quantity: str):
    """``(row, runs)`` of bands.csv for a serving time of ``device`` (arch ``serving``, precision =
    the quantity), row None when the corpus has too few runs for a band."""
    row = load_bands().get((device, "serving", quantity, "any"))
    if row is None:
        return None, 0
    return (row if row["low"] else None), int(row["runs"])


def _price_serving(ctx):
    """A serving plan's times (``ttft_floor`` …) get the band of the corpus's serving runs on
    its device, or a warning that none is validated."""
    # the serving step's times (ttft_floor, tpot) are priced before this block, which runs last:
    # one missing means its block was stopped by an error the plan gets instead of this warning.
    # A simulation's times (ttft_mean …) come later: their table rows say "no band", unwarned.
    step = [q for q in ("ttft_floor", "tpot") if ctx.provided(q)]
    if any(not ctx.defined(q) for q in step):
        return
    times = step + [q for q in SERVING_TIMES if q not in step and ctx.provided(q) and ctx.defined(q)]
    if not times or not ctx.stated("device"):
        return
    device = ctx.ref("device").name
    missing = []
    for q in times:
        row, runs = serving_band(device, q)
        if row is None:
            missing.append(q)
            continue
        how = quantiles_text(row)
        src = f"{how} of measured / predicted {q}, from {runs} validated {device} serving runs"
        t = ctx.q(q, "s")
        for side in ("low", "high"):
            r = float(row[side])
            ctx.define(f"{q}_{side}", t * _ratio(r), "ms", f"{q} × {r:.4g}: the band's {side} end, {src}",
                       references=REFERENCES)
    if missing:
        ctx.warn(f"the serving times of plan '{ctx.name}' ({', '.join(missing)}) carry no prediction band: the "
                 f"validation corpus has no validated serving runs of them on device '{device}' (its serving time "
                 "rows: " + (", ".join(sorted({f"{k[2]} on {k[0]}" for k in load_bands() if k[1] == "serving"}))
                             or "none") + ")",
                 "compare them with your own measured serving runs, or add published ones to "
                 "specs/data/validation/serving-runs.csv and regenerate the bands with "
                 "`python benchmarks/validation_table.py --write`", code="unvalidated")


def _ratio(r: float):
    import sympy as sp
    return sp.Rational(str(r))


def _pct(x: float) -> str:
    return f"{100 * x:+.0f} %".replace("-", "\u2212")


def _serving_table(ev, plan, serving):
    rows, notes = [], []
    for q in serving:
        unit = ev.nodes[f"{plan}.{q}"].unit
        v = ev.value(f"{plan}.{q}", unit)
        if ev.has(f"{plan}.{q}_low"):
            lo, hi = (ev.value(f"{plan}.{q}_{side}", unit) for side in ("low", "high"))
            rows.append((q, unit, f"{v:.4g}", f"{lo:.4g}", f"{hi:.4g}", f"{_pct(lo / v - 1)} / {_pct(hi / v - 1)}"))
            doc = ev.nodes[f"{plan}.{q}_low"].doc
            notes.append(f"{q}: " + doc[doc.index("min") if "min–max" in doc else doc.index("10th"):])
        else:
            rows.append((q, unit, f"{v:.4g}", "—", "—", "no band"))
    if any(r[-1] == "no band" for r in rows):
        notes.append("no band: the validation corpus (specs/data/validation/serving-runs.csv) has no validated "
                     "serving runs of that time on this device; compare it with your own measured serving runs")
    return Table(("quantity", "unit", "predicted", "low", "high", "band"), tuple(rows), tuple(notes))


def _table(ev, plan):
    timed, memory = ev.has(f"{plan}.step_time_low"), ev.has(f"{plan}.{MEMORY}_low")
    if not (timed or memory):
        serving = [q for q in SERVING_TIMES if ev.has(f"{plan}.{q}") and not ev.has(f"{plan}.step_time")]
        return _serving_table(ev, plan, serving) if serving else None
    try:
        device = ev.python_value(f"{plan}.device").name
        model = ev.python_value(f"{plan}.model").name
        moe = ev.has(f"{model}.experts")
        precision = (ev.python_value(f"{plan}.bands.precision") if ev.has(f"{plan}.bands.precision")
                     else ev.python_value(f"{plan}.layout.matmul_precision") if ev.has(f"{plan}.layout.matmul_precision")
                     else "bf16")
        where = (device, moe, precision, ev.value(f"{plan}.gpus"), ev.value(f"{plan}.gpus_per_host"))
        key, row, runs = lookup(*where)
        framework = (ev.python_value(f"{plan}.layout.framework") if ev.has(f"{plan}.layout.framework")
                     else "none")
        mkey, mrow, mruns = lookup(*where, kind="memory", framework=framework)
    except (AttributeError, KeyError, ValueError):
        return None
    if (row is None or not timed) and (mrow is None or not memory):
        return None
    rows, notes = [], ()
    if row is not None and timed:
        for q in TIMES:
            if not ev.has(f"{plan}.{q}_low"):
                continue
            unit = ev.nodes[f"{plan}.{q}"].unit
            v, lo, hi = (ev.value(f"{plan}.{n}", unit) for n in (q, f"{q}_low", f"{q}_high"))
            rows.append((q, unit, f"{v:.4g}", f"{lo:.4g}", f"{hi:.4g}",
                         f"{_pct(lo / v - 1)} / {_pct(hi / v - 1)}"))
        how = quantiles_text(row, table=True)
        notes = (f"from {runs} validated {device} runs ({regime_label(key)}): {how} of measured / predicted step "
                 f"time, {float(row['low']):.3g}–{float(row['high']):.3g} (median {float(row['median']):.3g})",
                 "finish time: the training time's band, reserved time and overhead held")
    if mrow is not None and memory:
        v, lo, hi = (ev.value(f"{plan}.{n}", "GiB") for n in (MEMORY, f"{MEMORY}_low", f"{MEMORY}_high"))
        rows.append((MEMORY, "GiB", f"{v:.4g}", f"{lo:.4g}", f"{hi:.4g}", f"{_pct(lo / v - 1)} / {_pct(hi / v - 1)}"))
        mhow = quantiles_text(mrow, table=True)
        notes += (f"runtime memory: from the {mruns} validated {device} runs ({regime_label(mkey)}) that publish their "
                  f"peak memory: {mhow} of measured / predicted, {float(mrow['low']):.3g}–{float(mrow['high']):.3g} "
                  f"(median {float(mrow['median']):.3g})",)
    err = ev.nodes.get(f"{plan}.step_time_error")
    if err is not None and getattr(err, "sampler", None) is not None:
        notes += (f"error = \"sampled\": train and finish times are the prediction × step_time_error at its "
                  f"expected value, {ev.value(f'{plan}.step_time_error', ''):.4g} (the runs' mean ratio); "
                  "`plan eval --samples` draws it from the runs, and their low and high are the prediction's band",)
    return Table(("quantity", "unit", "predicted", "low", "high", "band"), tuple(rows), notes)


@hookimpl
def plan_tables_register():
    return [TableSpec("bands", "Prediction bands", _table,
                      "the band of each headline time, and of the runtime memory, from validated runs of the "
                      "plan's device and regime", references=REFERENCES)]

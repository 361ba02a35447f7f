"""Vectorised parameter sweeps: `plan sweep FILE --vary NAME=START:STOP:N …`.

Each output of a plan (its headline quantities and both sides of each requirement) is
expanded to a sympy expression of the inputs (``ws.full_expr``) with the varied names kept
free — a varied name may be an input or a derived quantity, whose definition is then cut, as
in ``solve`` — every other input at its nominal value, and compiled **once** with
``sympy.lambdify(..., "numpy", cse=True)``.  A grid (the product of the ``N`` values of each
varied name) or ``random`` uniform samples are then evaluated as numpy arrays: millions of
evaluations per second on one core (``benchmarks/bench_sweep.py``).  ``max``/``min``,
piecewise choices and ``ceil``/``floor`` are evaluated exactly per point.

A *structural* input — one a plugin reads as a number while building the plan (a ZeRO stage,
a TP degree, the GPU count a layout divides) — shapes the graph itself, so substituting into
the expressions would silently keep the structure of the nominal value.  The sweep instead
re-evaluates the plan once per combination of structural values (``overrides``) and compiles
the continuous inputs within each; a whole-number parameter (``kind="int"`` or ``whole``)
swept to a fractional value is an error, and so is sampling one at random.

numpy is a dependency of plan-dsl; in an install without it :class:`SweepError`
says so when it is missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from dsl.syntax.diagnostics import Diagnostic, PlanError


class SweepError(Exception):
    """A sweep cannot run (numpy missing)."""


def _numpy():
    try:
        import numpy
    except ImportError as e:
        raise SweepError('plan sweep needs numpy (a dependency of plan-dsl): pip install numpy') from e
    return numpy


@dataclass
class Vary:
    """One varied name: node id, start and stop (base units), number of grid points; or
    ``values``, the listed points (base units; then start/stop are their least and largest)."""

    id: str
    start: float
    stop: float
    n: int = 21
    values: tuple | None = None

    def grid(self):
        """The points of this name on a grid (numpy array, base units)."""
        np = _numpy()
        return np.asarray(self.values, dtype=float) if self.values is not None else np.linspace(self.start, self.stop,
                                                                                                self.n)


@dataclass
class SweepResult:
    """Columns of a sweep: ``columns`` maps a name to a numpy array (display units of
    ``units``); requirement columns are booleans; ``feasible`` is their conjunction."""

    plan: str
    columns: dict = field(default_factory=dict)
    units: dict = field(default_factory=dict)
    varied: list = field(default_factory=list)
    requirements: list = field(default_factory=list)
    # structural values at which the plan cannot be built: ({varied id: value in its display
    # unit}, the error's "error[code]: summary"); their points are infeasible, outputs NaN
    not_built: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.columns["feasible"]) if "feasible" in self.columns else 0

    def to_frame(self):
        """A pandas DataFrame when pandas is installed, else the ``columns`` dict."""
        try:
            import pandas as pd
        except ImportError:
            return dict(self.columns)
        return pd.DataFrame(self.columns)

    def summary(self) -> dict:
        """Feasible points: count, share, and for each varied name its smallest and largest
        feasible value; for each requirement the share of points where it fails."""
        np = _numpy()
        f = self.columns["feasible"]
        out = {"points": int(f.size), "feasible": int(f.sum()), "share": float(f.mean()) if f.size else 0.0,
               "ranges": {}, "failing": {}}
        for v in self.varied:
            col = self.columns[v]
            out["ranges"][v] = (float(col[f].min()), float(col[f].max())) if f.any() else None
        for r in self.requirements:
            out["failing"][r] = float(np.mean(~self.columns[r])) if f.size else 0.0
        out["not_built"] = [{"at": at, "reason": why} for at, why in self.not_built]
        return out

    def write_csv(self, path) -> None:
        """Columns with units in the header (``gpus48.mfu [%]``); booleans as true/false."""
        import csv
        np = _numpy()
        names = list(self.columns)
        head = [f"{n} [{self.units[n]}]" if self.units.get(n) else n for n in names]
        cols = [self.columns[n] for n in names]
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(head)
            for i in range(len(self)):
                w.writerow([("true" if c[i] else "false") if c.dtype == np.bool_ else
                            str(c[i]) if c.dtype.kind in "OU" else repr(float(c[i])) for c in cols])


def parse_vary(ws, text: str) -> Vary:
    """``NAME=START:STOP[:N]`` (START/STOP are `.plan` values with units, ``30%``,
    ``1800 s``), ``NAME=[V1, V2, …]`` (the listed values, a `.plan` list) or ``NAME`` alone
    for its declared range ``in [lo, hi]``.

    :raises PlanError: ``error[sweep]`` for a malformed spec, a name without a declared range,
        bounds of the wrong dimension, a count below 2 or an empty or repeating list.
    """
    from dsl.syntax.parser import parse_expression

    name, eq, rng = text.partition("=")
    name = name.strip()
    nid = ws.lookup(name)
    n = ws.nodes[nid]
    if not n.numeric:
        raise PlanError([Diagnostic("error", "sweep", f"'{name}' is not a number", None, "vary a numeric input")])
    if not eq:
        if n.range is None:
            raise PlanError([Diagnostic("error", "sweep", f"'{name}' has no declared range", None,
                                        f"give one: --vary {name}=START:STOP:N, or declare `in [lo, hi]` in the plan")])
        return Vary(nid, float(n.range[0]), float(n.range[1]), 21)
    if rng.strip().startswith("["):
        return _vary_list(ws, nid, name, n, text, rng)
    parts = rng.split(":")
    if len(parts) not in (2, 3):
        raise PlanError([Diagnostic("error", "sweep", f"bad --vary '{text}'", None,
                                    "write NAME=START:STOP:N, e.g. gpus48.mfu=30%:50%:21")])
    count = 21
    if len(parts) == 3:
        try:
            count = int(parts[2])
        except ValueError:
            count = 0
        if count < 2:
            raise PlanError([Diagnostic("error", "sweep", f"the number of points in '{text}' must be a whole "
                                        "number of at least 2", None, "e.g. gpus48.mfu=30%:50%:21")])
    bounds = [_vary_value(ws, name, n, parse_expression(p.strip(), "<--vary>"), p.strip()) for p in parts[:2]]
    _check_allowed(ws, nid, name, bounds)
    _check_whole(ws, nid, name, bounds, count)
    return Vary(nid, bounds[0], bounds[1], count)


def _vary_value(ws, name: str, n, expr, text: str, listed: bool = False) -> float:
    """One value of a ``--vary`` (an expression of constants in the unit of ``name``), in base units;
    ``listed``: ``text`` is the whole list (the hint shows a list with units)."""
    v = ws.eval_expr(expr)
    if v.dim != n.dim or v.expr.free_symbols:
        from dsl.engine.units import describe_dim
        what = "a list of values" if listed else "a value"
        if not n.unit:
            example = "a plain number"
        elif listed:
            example = f"{name}=[1 {n.unit}, 2 {n.unit}, 4 {n.unit}] (each value with its unit)"
        else:
            example = f"2 {n.unit} (a number with its unit)"
        raise PlanError([Diagnostic("error", "sweep", f"'{text}' is not {what} in the unit of '{name}' "
                                    f"({describe_dim(n.dim)})", None, f"write it like {example}")])
    return float(v.expr)


def _vary_list(ws, nid: str, name: str, n, text: str, rng: str) -> Vary:
    """``NAME=[V1, V2, …]``: the listed values (a `.plan` list, at least one, no repeats)."""
    from dsl.syntax.ast import List
    from dsl.syntax.parser import parse_expression

    hint = f"e.g. {name}=[1, 2, 4, 8]"
    try:
        expr = parse_expression(rng.strip(), "<--vary>")
    except PlanError:
        expr = None
    if not isinstance(expr, List) or not expr.items:
        raise PlanError([Diagnostic("error", "sweep", f"bad --vary '{text}': a list is [V1, V2, …]", None, hint)])
    values = [_vary_value(ws, name, n, e, rng.strip(), listed=True) for e in expr.items]
    if len(set(values)) != len(values):
        raise PlanError([Diagnostic("error", "sweep", f"the list in '{text}' repeats a value", None,
                                    "give each value once")])
    _check_allowed(ws, nid, name, values)
    if _whole(ws, nid):
        _check_whole(ws, nid, name, values, 0)
    return Vary(nid, min(values), max(values), len(values), tuple(values))




def _whole(ws, nid: str) -> bool:
    p = ws.param_specs.get(nid)
    return p is not None and (p.kind == "int" or p.whole)


def _check_whole(ws, nid: str, name: str, bounds: list[float], count: int) -> None:
    """A whole-number parameter swept only to whole numbers (``tp=1:8:4`` would give 3.33);
    ``count`` 0: ``bounds`` is a list of values, each checked."""
    if not _whole(ws, nid):
        return
    from dsl.engine.units import parse_unit
    p = ws.param_specs[nid]
    scale = float(parse_unit(p.unit).scale) if p.unit else 1.0
    if not count:
        bad = next((v / scale for v in bounds if abs(v / scale - round(v / scale)) > 1e-9), None)
        if bad is not None:
            raise PlanError([Diagnostic("error", "sweep", f"'{name}' takes whole numbers, but the list has {bad:g}",
                                        None, "list whole numbers")])
        return
    a, b = bounds[0] / scale, bounds[1] / scale
    vals = [a + (b - a) * i / (count - 1) for i in range(count)]
    bad = next((v for v in vals if abs(v - round(v)) > 1e-9), None)
    if bad is not None:
        step = (b - a) / (count - 1)
        hint = (f"use {count_hint(a, b)} points, or list the values: {name}=[{a:g}, …, {b:g}]"
                if float(a).is_integer() and float(b).is_integer() and b != a else "start and stop at whole numbers")
        raise PlanError([Diagnostic("error", "sweep", f"'{name}' takes whole numbers, but {a:g}:{b:g}:{count} "
                                    f"steps by {step:g} (it would evaluate {name} = {bad:.3g})", None, hint)])


def count_hint(a: float, b: float) -> str:
    """The point count that steps a whole-number range by 1."""
    return str(int(abs(b - a)) + 1)


def _check_allowed(ws, nid: str, name: str, bounds: list[float]) -> None:
    """Both bounds inside the parameter's allowed range (``mfu`` in (0, 1], ``gpus`` >= 1)
    and the sign a plugin requires of a declaration field: a grid outside them would only
    give inf/NaN columns."""
    from dsl.engine.units import format_quantity, parse_unit

    p = ws.param_specs.get(nid)
    unit = ws.nodes[nid].unit
    shown = " .. ".join(format_quantity(b, unit) if unit and unit != "1" else f"{b:g}" for b in bounds)
    bad = None
    if p is not None and (p.min is not None or p.max is not None):
        scale = float(parse_unit(p.unit).scale) if p.unit else 1.0
        for b in bounds:
            x = b / scale
            if p.min is not None and (x <= p.min if p.min_open else x < p.min) or p.max is not None and x > p.max:
                bad = (("(" if p.min_open else "[") + f"{p.min:g}" if p.min is not None else "(-inf") + ", " \
                    + (f"{p.max:g}]" if p.max is not None else "inf)") + (f" {p.unit}" if p.unit else "")
                break
    elif nid in ws.bounds:
        kind = ws.bounds[nid][0]
        if any(b <= 0 if kind == "positive" else b < 0 for b in bounds):
            bad = "> 0" if kind == "positive" else ">= 0"
    if bad:
        raise PlanError([Diagnostic("error", "out-of-range", f"the sweep of '{name}' ({shown}) leaves its allowed "
                                    f"range {bad}", None, "keep START and STOP inside the range")])


def plan_requirements(ws, plan: str) -> list:
    """The requirements a sweep of ``plan`` checks: the plan's own, then each file-level
    ``require`` that reads a quantity of ``plan`` and no named solve's answer (those are
    checked at the answers, by ``plan check``)."""
    own = [r for r in ws.requirements if r.plan == plan]
    pre = plan + "."
    files = [r for r in getattr(ws, "file_requirements", ()) if not r.answers
             and any(s.name.startswith(pre) for e in (r.lhs, r.rhs) for s in getattr(e, "free_symbols", ()))]
    return own + files


def holds(op: str, lv, rv):
    """Where ``lv op rv`` holds (numpy arrays; the sweep's points and the odds' samples): ``<=``,
    ``>=`` and ``==`` within a relative tolerance of 1e-12 of the larger side, ``<`` and ``>``
    exactly."""
    import numpy as np
    tol = 1e-12 * np.maximum(np.abs(lv), np.abs(rv))
    return {"<=": lv <= rv + tol, ">=": lv >= rv - tol, "<": lv < rv, ">": lv > rv,
            "==": np.abs(lv - rv) <= tol}[op]


def compile_outputs(ws, plan: str, varied: list[str], outputs: list[str] | None = None,
                    requirements: bool = True):
    """Compile the outputs of ``plan`` as one numpy function of the varied node ids.

    :returns: ``(fn, names, units, reqs)``: ``fn(*arrays) -> list`` of arrays in base units —
        the outputs in order, then lhs and rhs of each requirement (unless
        ``requirements=False``); ``names`` of the outputs,
        their display ``units`` and the requirements (:class:`~dsl.evaluate.workspace.Requirement`).
    """
    _numpy()
    free = frozenset(varied)
    syms = [sp.Symbol(v, real=True) for v in varied]
    ids = outputs if outputs is not None else [n.id for n in ws.headline(plan)]
    reqs = plan_requirements(ws, plan) if requirements else []
    nominal = ws.nominal_map(exclude=free)

    def full(e):
        e = e.xreplace({s: ws.full_expr(s.name, free) for s in e.free_symbols if s.name in ws.nodes})
        # constants folded to floats: the compiled code does float arithmetic only
        return e.xreplace(nominal).evalf(17)

    exprs = [full(sp.Symbol(i, real=True)) for i in ids]
    for r in reqs:
        exprs += [full(r.lhs), full(r.rhs)]
    raw = sp.lambdify(syms, exprs, modules="numpy", cse=True)

    def fn(*arrays):
        r = raw(*arrays)
        return list(r) if isinstance(r, (list, tuple)) else [r]
    return fn, ids, [ws.nodes[i].unit for i in ids], reqs


def run(ws, plan: str, varies: list[Vary], random: int | None = None, seed: int = 0,
        outputs: list[str] | None = None, executor=None) -> SweepResult:
    """Evaluate ``plan`` on a grid (product of each :class:`Vary`'s ``n`` points) or on
    ``random`` uniform samples of the boxes [start, stop]; see :class:`SweepResult`.

    Structural inputs (``ws.structural``) are re-evaluated per value (module docstring), at
    most ``sweep_evaluations`` of them (``dsl.syntax.limits``: a count of work, so the same
    sweep gives the same answer on an idle and on a busy machine).

    The evaluations of structural values are the heavy part: each is a task of ``executor``
    (:class:`dsl.engine.executor.Executor`; default: this process), and the result is the same
    whatever runs them.

    :raises PlanError: random samples of a structural input, or more structural combinations
        than ``sweep_evaluations`` (``error[limit]``, located at the varied input that
        re-evaluates the plan).
    :raises ExecutorError: the executor cannot run (an unreachable Dask scheduler).
    """
    return _run(ws, plan, varies, random, seed, outputs, executor)


def _run(ws, plan, varies, random, seed, outputs, executor=None) -> SweepResult:
    np = _numpy()
    from ..syntax.limits import current, raise_hint
    points = random if random else 1
    if not random:
        for v in varies:
            points *= v.n
    if points > current().points:
        raise PlanError([Diagnostic("error", "limit", f"the sweep has {points:,} points, above the limit of "
                                    f"{current().points:,}", None, raise_hint("points"))])
    varied = [v.id for v in varies]
    structural = [i for i, v in enumerate(varies) if v.id in getattr(ws, "structural", ())]
    if random:
        if structural:
            raise PlanError([Diagnostic("error", "sweep", f"'{varies[structural[0]].id}' shapes the plan (a plugin "
                                        "reads it to build it), so it cannot be sampled at random", None,
                                        "sweep it on a grid (NAME=START:STOP:N), which re-evaluates each value")])
        rng = np.random.default_rng(seed)
        arrays = [rng.choice(np.asarray(v.values, dtype=float), size=random) if v.values is not None
                  else rng.uniform(v.start, v.stop, size=random) for v in varies]
    else:
        grids = np.meshgrid(*[v.grid() for v in varies], indexing="ij")
        arrays = [g.ravel() for g in grids]
    size = arrays[0].size if arrays else 1
    not_built = []
    if structural:
        vals, ids, units, reqs, not_built = _structural_values(ws, plan, varies, arrays, structural, outputs, size,
                                                               executor)
    else:
        fn, ids, units, reqs = compile_outputs(ws, plan, varied, outputs)
        with np.errstate(all="ignore"):
            vals = [np.broadcast_to(np.asarray(x, dtype=float), (size,)) for x in fn(*arrays)]
    res = SweepResult(plan)
    for v, a in zip(varies, arrays):
        u = ws.nodes[v.id].unit
        res.columns[v.id] = a / _scale(u)
        res.units[v.id] = u
        res.varied.append(v.id)
    for i, u in zip(ids, units):
        res.columns[ws.nodes[i].name if i.startswith(plan + ".") else i] = vals.pop(0) / _scale(u)
        res.units[ws.nodes[i].name if i.startswith(plan + ".") else i] = u
    feasible = np.ones(size, dtype=bool)
    for r in reqs:
        lv, rv = vals.pop(0), vals.pop(0)
        ok = holds(r.op, lv, rv)
        res.columns[r.name] = ok
        res.requirements.append(r.name)
        feasible &= ok
    if not_built:
        reason = np.full(size, "", dtype=object)
        for at, why, mask in not_built:
            feasible &= ~mask
            reason[mask] = why
            res.not_built.append((at, why))
        res.columns["not_built"] = reason
    res.columns["feasible"] = feasible
    return res


def _structural_values(ws, plan, varies, arrays, structural, outputs, size, executor=None):
    """Outputs per point when some varied inputs are structural: one evaluation of the file per
    combination of their values (overrides), the continuous inputs compiled within each — one
    task of ``executor`` per combination (:func:`structural_task`).  The
    columns are those of the nominal plan; an output or requirement a structure does not have
    is NaN (a requirement: not met) at its points.  A combination at which the plan cannot be
    built (an evaluation error: a tp that does not divide the GPUs) is not an error of the
    sweep: its points are NaN and listed in the returned ``not_built`` as (values, reason,
    mask of its points)."""
    import numpy as np

    from ..engine.executor import Executor
    from ..plugin.manager import get_plugins
    from ..syntax.limits import current, raise_hint
    combos = sorted({tuple(float(arrays[i][k]) for i in structural) for k in range(size)})
    cap = current().sweep_evaluations
    if len(combos) > cap:
        node = next((ws.nodes[varies[i].id] for i in structural if ws.nodes[varies[i].id].span is not None), None)
        raise PlanError([Diagnostic("error", "limit", f"the sweep of plan '{plan}' needs {len(combos):,} values of "
                                    f"structural inputs, each a full evaluation of the file (limit "
                                    f"'sweep_evaluations' {cap:,})", node.span if node is not None else None,
                                    "sweep fewer values of " + ", ".join(varies[i].id for i in structural) + ", or "
                                    + raise_hint("sweep_evaluations"))])
    continuous = [i for i in range(len(varies)) if i not in structural]
    ids = list(outputs) if outputs is not None else [n.id for n in ws.headline(plan)]
    units = [ws.nodes[i].unit for i in ids]
    reqs = plan_requirements(ws, plan)
    out = [np.full(size, np.nan) for _ in range(len(ids) + 2 * len(reqs))]
    ex = executor if executor is not None else Executor("serial")
    blocked = tuple(getattr(ws.plugins, "blocked", ()))
    # a worker loads the installed plugins; plugins given only to this process keep it here
    if ex.parallel and get_plugins(blocked) is not ws.plugins:
        ex = Executor("serial")
    jobs, masks = [], []
    for combo in combos:
        mask = np.ones(size, dtype=bool)
        for i, x in zip(structural, combo):
            mask &= arrays[i] == x
        masks.append(mask)
        jobs.append({"path": str(ws.path), "plugins": None if ex.parallel else ws.plugins, "blocked": blocked,
                     "plan": plan, "ids": ids, "continuous": [varies[i].id for i in continuous],
                     "arrays": [arrays[i][mask] for i in continuous], "n": int(mask.sum()),
                     "overrides": {varies[i].id: _exact(x, _whole(ws, varies[i].id)) for i, x in zip(structural, combo)}})
    from dsl.engine.progress import progress
    with progress(len(combos), f"sweeping {len(combos)} structural values") as advance:
        parts = ex.map(structural_task, jobs, progress=lambda done, total: advance())
    not_built = []
    for combo, mask, part in zip(combos, masks, parts):
        if isinstance(part, str):
            not_built.append(_not_built(ws, varies, structural, combo, mask, part))
            continue
        have, vals, req_names = part
        for k, i in enumerate(have):
            out[ids.index(i)][mask] = vals[k]
        by_name = {r: n for n, r in enumerate(req_names)}
        for n, r in enumerate(reqs):
            m = by_name.get(r.name)
            if m is not None:
                out[len(ids) + 2 * n][mask] = vals[len(have) + 2 * m]
                out[len(ids) + 2 * n + 1][mask] = vals[len(have) + 2 * m + 1]
    return out, ids, units, reqs, not_built


def _not_built(ws, varies, structural, combo, mask, why: str):
    """(values, reason, mask) of a structural combination whose evaluation failed: the values in
    display units by varied id."""
    at = {varies[i].id: x / _scale(ws.nodes[varies[i].id].unit) for i, x in zip(structural, combo)}
    return at, why, mask


def structural_task(job: dict):
    """One combination of structural values (an executor task, in this process or a worker):
    the file evaluated with ``job["overrides"]``, its outputs compiled over the continuous
    inputs and computed at their points.  Returns ``(outputs it has, their arrays and both sides
    of each requirement, the requirements' names)``, or, when the plan cannot be built there,
    its first error as ``"error[code]: summary"`` (data: it travels back from a worker)."""
    import numpy as np

    from dsl.results.evaluation import evaluate_file
    plugins = job["plugins"]
    if plugins is None:
        from ..plugin.manager import get_plugins
        plugins = get_plugins(job["blocked"])
    try:
        ev = evaluate_file(job["path"], plugins=plugins, overrides=job["overrides"])
        have = [i for i in job["ids"] if i in ev.nodes]
        fn, _, _, ev_reqs = compile_outputs(ev, job["plan"], job["continuous"], have)
        with np.errstate(all="ignore"):
            vals = [np.broadcast_to(np.asarray(x, dtype=float), (job["n"],)).copy() for x in fn(*job["arrays"])]
    except PlanError as e:
        d = next((d for d in e.diagnostics if d.severity == "error"), e.diagnostics[0] if e.diagnostics else None)
        return f"error[{d.code}]: {d.summary}" if d is not None else str(e)
    return have, vals, [r.name for r in ev_reqs]


def _exact(x: float, whole: bool):
    """A grid value as an exact sympy number (whole numbers exactly)."""
    return sp.Integer(round(x)) if whole else sp.Rational(repr(x))


def _scale(unit: str) -> float:
    from dsl.engine.units import parse_unit
    return float(parse_unit(unit).scale) if unit and unit != "1" else 1.0

"""Uncertain inputs: an assignment whose whole value is a distribution (`mfu = normal(40 %, 3 %)`).

The arguments are constant numbers whose dimensions agree with each other (and so with the
input: every reader checks the input's dimension as for a plain literal); the input's nominal
value is the distribution's stated central value (:mod:`dsl.engine.distributions`) and its
:class:`~dsl.engine.distributions.Dist` is kept on the node for sampling.  A distribution
anywhere else (inside a formula, a range, a list) is an error: it would make a formula of a
random value, which the language does not have.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import sympy as sp

from ..syntax import ast as A
from ..engine.distributions import KINDS, Dist
from ..engine.nodes import Val
from ..engine.units import DIMENSIONLESS, describe_dim

HINT = ("write `normal(mean, sd)`, `uniform(lo, hi)`, `lognormal(median, sigma)`, `triangular(lo, mode, hi)`, "
        "`empirical(\"file.csv\", \"column\", unit)` or `choice(32, 48, 64)`")


def is_distribution(e) -> bool:
    """True when expression ``e`` is a call of a distribution constructor."""
    return isinstance(e, A.Call) and e.func in KINDS


def build_distribution(b, e: A.Call, node) -> Val:
    """The nominal :class:`Val` of distribution call ``e`` assigned to ``node`` (sets
    ``node.dist``); ``b`` is the expression builder (its ``_eval``/``_num``/``_fail``)."""
    names = KINDS[e.func]
    if e.func == "empirical":
        return _empirical(b, e, node)
    if e.func == "choice":
        return _choice(b, e, node)
    if len(e.args) != len(names):
        b._fail("arity", f"{e.func}() takes {len(names)} arguments ({', '.join(names)}), got {len(e.args)}",
                e.span, HINT)
    vals = []
    for a in e.args:
        v = b._num(b._eval(a, node.scope, None), a)
        if v.expr.free_symbols or not v.expr.is_number:
            b._fail("distribution", f"the arguments of {e.func}() must be numbers, not formulas of other values",
                    a.span, "write each argument as a literal with its unit")
        vals.append(v)
    unit_args = [(v, a, n) for v, a, n in zip(vals, e.args, names) if n != "sigma"]
    first = unit_args[0][0]
    for v, a, n in unit_args[1:]:
        if v.dim != first.dim:
            b._fail("unit-mismatch", f"{e.func}(): '{n}' is in {describe_dim(v.dim)} but '{names[0]}' is in "
                    f"{describe_dim(first.dim)}", a.span, "give every argument the input's unit")
    x = [v.expr for v in vals]
    f = [float(v) for v in x]
    if e.func == "normal":
        _positive(b, e, 1, x[1], "the standard deviation")
        nominal = x[0]
    elif e.func == "uniform":
        if not x[0] < x[1]:
            b._fail("distribution", "uniform(lo, hi) needs lo < hi", e.span, HINT)
        nominal = (x[0] + x[1]) / 2
    elif e.func == "lognormal":
        if not vals[1].dim.dimensionless:
            b._fail("unit-mismatch", f"lognormal(): 'sigma' is the standard deviation of ln x, dimensionless, "
                    f"not {describe_dim(vals[1].dim)}", e.args[1].span, "write sigma as a plain number (0.25)")
        _positive(b, e, 0, x[0], "the median")
        _positive(b, e, 1, x[1], "sigma")
        nominal = x[0]
    else:   # triangular
        if not (x[0] <= x[1] <= x[2] and x[0] < x[2]):
            b._fail("distribution", "triangular(lo, mode, hi) needs lo <= mode <= hi and lo < hi", e.span, HINT)
        nominal = x[1]
    node.dist = Dist(e.func, tuple(f), _text(e))
    return Val(nominal, first.dim)


def _positive(b, e, i, x, what):
    if not x > 0:
        b._fail("distribution", f"{e.func}(): {what} must be positive", e.args[i].span, HINT)


def _text(e: A.Call) -> str:
    from ..syntax.format import format_expr
    return format_expr(e)


def _choice(b, e: A.Call, node) -> Val:
    """``choice(a, b, …)``: one of the values, each equally likely (an in-line empirical sample);
    nominal: the lower middle value."""
    if not e.args:
        b._fail("arity", "choice() takes at least one value: choice(32, 48, 64)", e.span, HINT)
    vals = []
    for a in e.args:
        v = b._num(b._eval(a, node.scope, None), a)
        if v.expr.free_symbols or not v.expr.is_number:
            b._fail("distribution", "the values of choice() must be numbers, not formulas of other values",
                    a.span, "write each value as a literal with its unit")
        if vals and v.dim != vals[0].dim:
            b._fail("unit-mismatch", f"choice(): a value is in {describe_dim(v.dim)} but the first is in "
                    f"{describe_dim(vals[0].dim)}", a.span, "give every value the input's unit")
        vals.append(v)
    xs = sorted((v.expr for v in vals), key=float)
    node.dist = Dist("empirical", tuple(float(x) for x in xs), _text(e))
    return Val(xs[(len(xs) - 1) // 2], vals[0].dim)


def _empirical(b, e: A.Call, node) -> Val:
    """``empirical("file.csv", "column"[, unit])``: the column's numbers times ``unit``
    (default dimensionless 1), read through :func:`dsl.plugin.csvdata.open_csv`."""
    from ..plugin.csvdata import CsvError, open_csv
    if len(e.args) not in (2, 3) or not all(isinstance(a, A.String) for a in e.args[:2]):
        b._fail("arity", "empirical() takes a CSV file, a column name and optionally a unit: "
                "empirical(\"runs.csv\", \"mfu\", 1 %)", e.span, HINT)
    unit = Val(sp.Integer(1), DIMENSIONLESS)
    if len(e.args) == 3:
        unit = b._num(b._eval(e.args[2], node.scope, None), e.args[2])
        if unit.expr.free_symbols or not unit.expr.is_Rational:
            b._fail("distribution", "the unit of empirical() must be a literal such as 1 % or 1 h", e.args[2].span)
    fa, ca = e.args[0], e.args[1]
    path = (Path(node.assign.span.file).parent / fa.value).resolve()
    try:
        rows, header, pos = open_csv(path, "sample file", columns=ca.value)
        if ca.value not in pos:
            b._fail("distribution", f"'{path.name}' has no column '{ca.value}' (columns: {', '.join(header)})",
                    ca.span, "name one of its columns")
        k = pos[ca.value]
        vals = []
        for i, row in enumerate(rows, start=2):
            cell = row[k].strip() if k < len(row) else ""
            if not cell:
                continue
            try:
                vals.append(Fraction(cell))
            except (ValueError, ZeroDivisionError):
                b._fail("distribution", f"'{path.name}', row {i}, column '{ca.value}': '{cell[:20]}' is not a number",
                        ca.span, "the column must hold plain numbers (the unit is empirical()'s third argument)")
    except CsvError as err:
        b._fail("distribution", str(err), fa.span, err.hint or HINT)
    if not vals:
        b._fail("distribution", f"column '{ca.value}' of '{path.name}' has no values", ca.span)
    from ..syntax import limits as L
    if len(vals) > L.current().list_items:
        b._fail("limit", f"the sample has {len(vals):,} values, above the limit of {L.current().list_items:,}",
                fa.span, L.raise_hint("list_items"))
    vals.sort()
    scale = unit.expr
    median = vals[(len(vals) - 1) // 2]
    node.dist = Dist("empirical", tuple(float(v * Fraction(int(scale.p), int(scale.q))) for v in vals), _text(e))
    return Val(sp.Rational(median.numerator, median.denominator) * scale, unit.dim)

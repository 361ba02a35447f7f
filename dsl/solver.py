"""Break-even queries: ``solve TARGET for LHS op RHS``.

The equation ``LHS − RHS = 0`` is built symbolically with TARGET kept free (if TARGET is a
derived quantity, its definition is cut), every other input at its nominal value.

1. **Symbolic**: each ``Max``/``Min`` is replaced by the branch active at the nominal point
   (piecewise max-plus: the critical path stays the same near the answer), then
   ``sympy.solve``; every root is verified on the full equation and the real root nearest
   the nominal value is kept.
2. **Numeric** fallback: a sign change is bracketed by scanning geometrically around the
   nominal value and refined by bisection (which also finds the jump of a ceil()/floor()
   step function, where a root-polishing method would not).

A readable symbolic answer is also given in terms of the neighbouring quantities (only the
nodes between TARGET and the equation are expanded), when it stays short.  For ``<=``/``>=``/``<``/``>`` the
boundary is returned with the side on which the relation holds.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from . import ast as A
from .diagnostics import Diagnostic, PlanError
from .units import format_dim


@dataclass
class Solution:
    query: str
    target: str
    unit: str
    value: float | None          # base units
    nominal: float | None
    method: str                  # symbolic | numeric | none
    symbolic: str | None
    holds: str | None            # for inequalities: "target >= boundary" …
    note: str = ""
    feasible: bool = True        # False when the answer lies outside the target's allowed range

    def to_json(self) -> dict:
        """``value``/``nominal`` in ``unit`` (as ``plan eval`` shows), ``*_si`` in base units;
        ``symbolic`` is in base units."""
        from .units import convert
        conv = (lambda v: None if v is None else convert(v, self.unit))
        return {"query": self.query, "target": self.target, "unit": self.unit, "value": conv(self.value),
                "si": self.value, "nominal": conv(self.nominal), "nominal_si": self.nominal,
                "method": self.method, "symbolic": self.symbolic, "holds": self.holds, "note": self.note,
                "feasible": self.feasible}


def _branch(e, at: dict):
    """Replace Max/Min (and nothing else) by the argument active at point ``at``."""
    if not e.args:
        return e
    args = [_branch(a, at) for a in e.args]
    if isinstance(e, (sp.Max, sp.Min)):
        vals = [float(a.xreplace(at)) for a in args]
        pick = vals.index(max(vals)) if isinstance(e, sp.Max) else vals.index(min(vals))
        return args[pick]
    return e.func(*args)


def solve_query(ws, q: A.Query) -> Solution:
    """Answer one query against a loaded :class:`~dsl.model.Workspace`.

    :raises PlanError: on unknown names, unit mismatch, or a target the equation does not
        depend on.
    """
    from .model import _Fail, _S

    span = q.target.span
    start = len(ws.rep.items)
    try:
        target = ws._resolve(q.target.parts, None, span)
    except _Fail:
        ws._raise_since(start)
    node = ws.nodes.get(target) if isinstance(target, str) else None
    if node is None or not node.numeric:
        raise PlanError([Diagnostic("error", "solve", f"'{q.target.dotted}' is not a numeric field or quantity",
                                    span, "solve for a number, e.g. plan.mfu")])
    lhs, rhs = ws.eval_expr(q.lhs), ws.eval_expr(q.rhs)
    if lhs.dim != rhs.dim:
        raise PlanError([Diagnostic("error", "unit-mismatch",
                                    f"the two sides are in {format_dim(lhs.dim)} and {format_dim(rhs.dim)}",
                                    q.span, "compare quantities of the same dimension")])
    x = _S(target)
    free = frozenset({target})
    f = lhs.expr - rhs.expr
    full = f.xreplace({s: ws.full_expr(s.name, free) for s in f.free_symbols})
    text = q.text()
    x0v = ws.value(target)
    x0 = float(x0v) if x0v is not None else None
    if x not in full.free_symbols:
        raise PlanError([Diagnostic("error", "solve", f"'{text}' does not depend on {q.target.dotted}",
                                    span, "pick a target that the two sides depend on")])
    nominal = ws.nominal_map(exclude={target})
    g = full.xreplace(nominal)
    gf = sp.lambdify(x, g, modules=["mpmath"])

    def resid(v: float) -> float:
        try:
            return float(gf(v))
        except (ZeroDivisionError, ValueError, TypeError, OverflowError):
            return float("nan")

    scale = max(abs(resid(x0)) if x0 is not None else 0.0, float(abs(rhs.expr.xreplace(
        {s: ws.value(s.name) for s in rhs.expr.free_symbols}) or 1)), 1e-300)
    tol = 1e-12 * scale

    def holds_at(v: float) -> bool | None:
        """Truth of the relation at v; equality is judged with a tolerance relative to the
        sides' magnitude, since the residual is evaluated in floating point."""
        r = resid(v)
        if r != r:
            return None
        return {"<=": r <= tol, "<": r < -tol, ">=": r >= -tol, ">": r > tol, "==": abs(r) <= tol}[q.op]

    value, method = None, "none"
    at0 = {x: sp.Float(x0 if x0 is not None else 1.0)}
    try:
        gb = _branch(g, at0)
        roots = [complex(r) for r in sp.solve(gb, x)]
        good = [r.real for r in roots if abs(r.imag) < 1e-12 and abs(resid(r.real)) <= 1e-9 * scale]
        if good:
            value = min(good, key=lambda r: abs(r - (x0 or 0)))
            method = "symbolic"
    except Exception:
        pass
    if value is None:
        if q.op == "==":
            fn = resid
        else:
            # bracket the change of truth of the relation, not a root of LHS − RHS: with
            # ceil()/floor() the difference is flat (zero) over whole intervals
            def fn(v: float) -> float:
                ok = holds_at(v)
                return float("nan") if ok is None else (1.0 if ok else -1.0)
        value = _bracket(fn, x0 if x0 else 1.0)
        method = "numeric" if value is not None else "none"

    symbolic = None
    try:
        keep = _between(ws, target, f)
        fk = f.xreplace({s: ws.full_expr(s.name, free, keep) for s in f.free_symbols})
        at = {s: ws.value(s.name) for s in fk.free_symbols if s != x}
        at[x] = sp.Float(value if value is not None else (x0 or 1.0))
        if sp.count_ops(fk) <= 120:
            sols = sp.solve(_branch(fk, at), x)
            text_sol = f"{target} = " + "; ".join(sp.sstr(_tidy(s)) for s in sols)
            if sols and len(text_sol) <= 600:
                symbolic = text_sol
    except Exception:
        symbolic = None

    holds = None
    if q.op != "==" and value is not None:
        eps = abs(value) * 1e-6 or 1e-9
        ok_above = bool(holds_at(value + eps))
        strict = q.op in ("<", ">")
        holds = f"{target} {('>' if ok_above else '<') + ('' if strict else '=')} boundary"
    note, feasible = "", True
    spec = ws.param_specs.get(target)
    if value is not None and spec is not None and (spec.min is not None or spec.max is not None):
        from .units import parse_unit
        x = value / float(parse_unit(spec.unit).scale) if spec.unit else value
        low = spec.min is not None and (x <= spec.min if spec.min_open else x < spec.min)
        high = spec.max is not None and x > spec.max
        if low or high:
            feasible = False
            rng = (("(" if spec.min_open else "[") + (f"{spec.min:g}" if spec.min is not None else "-inf") + ", "
                   + (f"{spec.max:g}]" if spec.max is not None else "inf)") + (f" {spec.unit}" if spec.unit else ""))
            note = f"infeasible: the answer lies outside the allowed range {rng} of {q.target.dotted}"
    if value is None:
        symbolic = None
        note = "no root found: the two sides do not cross for any value of the target near its nominal value"
    return Solution(text, target, node.unit, value, x0, method, symbolic, holds, note, feasible)


def _tidy(e):
    """Present a rational expression readably: numerator and denominator factored, and each
    sum collected on its most frequent symbol (``steps*(1 + L)*(a + b + c)`` rather than the
    expanded six-term sum)."""
    def t(x):
        x = sp.factor(x)
        if isinstance(x, sp.Mul):
            return sp.Mul(*[t(a) for a in x.args])
        if isinstance(x, sp.Add):
            syms = sorted(x.free_symbols, key=lambda s: (-sum(s in a.free_symbols for a in x.args), s.name))
            if syms:
                c = sp.collect(x, syms[0], evaluate=False)
                if len(c) > 1 or next(iter(c)) != 1:
                    return sp.Add(*[k * sp.factor_terms(t(v)) if k != 1 else t(v) for k, v in c.items()])
        return x

    try:
        n, d = sp.fraction(sp.together(e))
        return t(n) / t(d)
    except Exception:  # presentation only: fall back to the raw form
        return e


def _between(ws, target: str, f) -> frozenset:
    """Nodes on dependency paths from ``target`` to the symbols of ``f`` (to expand)."""
    import networkx as nx

    g = ws.graph
    desc = nx.descendants(g, target) | {target}
    anc = set()
    for s in f.free_symbols:
        if s.name in g:
            anc |= nx.ancestors(g, s.name) | {s.name}
    return frozenset(desc & anc)


def _bisect(resid, a: float, b: float) -> float:
    """Bisection on a bracket [a, b] with a sign change: robust for the step functions that
    ceil()/floor() create (it converges to the jump) as well as for continuous ones."""
    ra = resid(a)
    for _ in range(200):
        mid = (a + b) / 2
        if mid in (a, b) or b - a <= 1e-15 * max(abs(a), abs(b)):
            break
        rm = resid(mid)
        if rm == 0:
            return mid
        if (rm > 0) == (ra > 0):
            a, ra = mid, rm
        else:
            b = mid
    return (a + b) / 2


def _bracket(resid, x0: float) -> float | None:
    """Find a sign change of ``resid`` around ``x0`` (geometric scan) and refine it by bisection."""
    import math

    r0 = resid(x0)
    if r0 == 0:
        return x0
    pts = [x0]
    for k in range(1, 80):
        pts += [x0 * (1.25 ** k), x0 / (1.25 ** k)]
    prev_hi, prev_lo = (x0, r0), (x0, r0)
    for i in range(1, len(pts), 2):
        for cand, prev_name in ((pts[i], "hi"), (pts[i + 1], "lo")):
            r = resid(cand)
            prev = prev_hi if prev_name == "hi" else prev_lo
            if not math.isnan(r) and not math.isnan(prev[1]) and (r == 0 or (r > 0) != (prev[1] > 0)):
                a, b = sorted((prev[0], cand))
                return _bisect(resid, a, b)
            if prev_name == "hi":
                prev_hi = (cand, r)
            else:
                prev_lo = (cand, r)
    return None

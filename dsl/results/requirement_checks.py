"""The plan's requirements judged away from the nominal point of a solve: which fail with the
target substituted at a value (full expressions, no rebuild), which are whole-number ones
(equalities whose sides round), and every requirement's verdict in an evaluation.
"""
from __future__ import annotations

import sympy as sp


def discrete_requirements(ws, x, free, nominal) -> list:
    """The requirements that a whole-number target can break between two neighbouring whole
    numbers: equalities whose sides round it (floor(), ceil(), a remainder — "the global batch
    splits into whole micro-batches", ``m == floor(m)``), as ``(name, lhs(v), op, rhs(v))`` with the other inputs at nominal."""
    out = []
    for r in ws.requirements:
        sides = [e.xreplace({s: ws.full_expr(s.name, free) for s in e.free_symbols}) for e in (r.lhs, r.rhs)]
        if not any(x in fe.free_symbols for fe in sides):
            continue
        if r.op != "==" or not any(fe.has(sp.floor, sp.ceiling, sp.Mod, sp.frac) for fe in sides):
            continue   # a bound such as a deadline is the question's business, not whole-numberness
        out.append((f"{r.plan}.{r.name}", sides[0].xreplace(nominal), r.op, sides[1].xreplace(nominal)))
    return out


def holds_exact(lhs, op, rhs, x, v: int) -> bool:
    at = {x: sp.Integer(v)}
    try:
        lv, rv = lhs.xreplace(at), rhs.xreplace(at)
        lv, rv = lv if lv.is_Rational else float(lv), rv if rv.is_Rational else float(rv)
    except (TypeError, ValueError):
        return True
    tol = 0 if isinstance(lv, sp.Rational) and isinstance(rv, sp.Rational) else 1e-9 * max(abs(float(lv)),
                                                                                            abs(float(rv)), 1e-300)
    return {"<=": lv <= rv + tol, ">=": lv >= rv - tol, "<": lv < rv, ">": lv > rv, "==": abs(lv - rv) <= tol}[op]


def requirement_checker(ws, x, free, nominal, names=None):
    """``failing(v)``: the names of the plan's requirements (those in ``names``, default all)
    that depend on the target symbol ``x`` and fail when it takes value ``v``, every other
    input at its nominal value.  Their sides' full expressions are built once; each call
    substitutes (30-digit floats, relative tolerance 1e-9).  A requirement whose sides cannot
    be computed at ``v`` is not counted as failing."""
    checks = []
    for r in ws.requirements:
        name = f"{r.plan}.{r.name}"
        if names is not None and name not in names:
            continue
        sides = [e.xreplace({s: ws.full_expr(s.name, free) for s in e.free_symbols}) for e in (r.lhs, r.rhs)]
        if any(x in fe.free_symbols for fe in sides):
            checks.append((name, r.op, sides))

    def failing(v: float) -> list[str]:
        at = dict(nominal)
        at[x] = sp.Float(v, 30)
        out = []
        for name, op, sides in checks:
            try:
                lv, rv = (float(fe.xreplace(at)) for fe in sides)
            except (TypeError, ValueError):
                continue
            tol = 1e-9 * max(abs(lv), abs(rv), 1e-300)
            ok = {"<=": lv <= rv + tol, ">=": lv >= rv - tol, "<": lv < rv, ">": lv > rv,
                  "==": abs(lv - rv) <= tol}[op]
            if not ok:
                out.append(name)
        return sorted(out)
    return failing


def requirement_states(ev) -> dict:
    """``{plan.name: (rounds, ok, lhs, rhs)}`` for every requirement of an evaluation whose sides
    have values: ``rounds`` for the whole-number ones (equalities whose sides round: the global
    batch splits into whole micro-batches), ``ok`` the verdict (relative tolerance 1e-9),
    ``lhs``/``rhs`` the sides as floats in base units."""
    out = {}
    for r in ev.requirements:
        lv, rv = ev.subs_value(r.lhs), ev.subs_value(r.rhs)
        if lv is None or rv is None:
            continue
        lf, rf = float(lv), float(rv)
        tol = 1e-9 * max(abs(lf), abs(rf), 1e-300)
        ok = {"<=": lf <= rf + tol, ">=": lf >= rf - tol, "<": lf < rf, ">": lf > rf,
              "==": abs(lf - rf) <= tol}[r.op]
        rounds = r.op == "==" and any(
            e.xreplace({s: ev.full_expr(s.name) for s in e.free_symbols}).has(sp.floor, sp.ceiling, sp.Mod, sp.frac)
            for e in (r.lhs, r.rhs))
        out[f"{r.plan}.{r.name}"] = (rounds, ok, lf, rf)
    return out

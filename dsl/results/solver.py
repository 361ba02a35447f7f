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

A whole-number target (a GPU count) answers a whole number
(:func:`~dsl.results.whole_search.whole_answer`; for ``==`` the first one from the root upwards
at which the sides have met).  One that plugins read to build the plan is answered by
rebuilding the plan at candidate whole numbers (:func:`~dsl.results.whole_search.search_whole`).

The parts live beside this entry (:func:`solve_query`, :func:`named_solutions`,
:func:`file_requirement_results`): root finding in :mod:`dsl.results.roots`, the answer record
and its readable closed form in :mod:`dsl.results.solution`, the plan's requirements judged at
other values of the target in :mod:`dsl.results.requirement_checks`, whole-number answers and
the search over rebuilt plans in :mod:`dsl.results.whole_search`.
"""
from __future__ import annotations

import sympy as sp

from dsl.syntax import ast as A
from dsl.syntax.diagnostics import Diagnostic, PlanError
from dsl.engine.units import format_dim
from dsl.results.requirement_checks import requirement_checker
from dsl.results.roots import (active_branch, bisect_root, bounded_mpmath_function, exact_roots, grid_bounds,
                               in_domain, linear_root, param_domain, sign_changes, truth_intervals)
from dsl.results.solution import TEXT_MAX, Solution, long_closed_form, nodes_between, tidy
from dsl.results.whole_search import is_count, is_whole_target, search_whole, whole_answer
# the search's helpers under the names they had here (tests import them)
from dsl.results.whole_search import next_candidate as _next_candidate, search_points as _search_points


def solve_query(ws, q: A.Query) -> Solution:
    """Answer one query against a loaded :class:`~dsl.evaluate.workspace.Workspace`.

    :raises PlanError: on unknown names, unit mismatch, or a target the equation does not
        depend on.
    """
    from dsl.engine.nodes import symbol

    span = q.target.span
    target = ws.resolve(q.target.parts, span)
    node = ws.nodes.get(target) if isinstance(target, str) else None
    spec = ws.param_specs.get(target) if isinstance(target, str) else None
    if spec is not None and spec.kind == "int" and not is_count(spec):
        raise PlanError([Diagnostic("error", "solve", f"'{q.target.dotted}' is a structural parameter: plugins "
                                    "fix it while building the plan, so it cannot be solved for", span,
                                    "compare plans that differ in it (plan a extends b { … })")])
    if node is None or not node.numeric:
        raise PlanError([Diagnostic("error", "solve", f"'{q.target.dotted}' is not a numeric field or quantity",
                                    span, "solve for a number, e.g. plan.mfu")])
    lhs, rhs = ws.eval_expr(q.lhs), ws.eval_expr(q.rhs)
    if lhs.dim != rhs.dim:
        raise PlanError([Diagnostic("error", "unit-mismatch",
                                    f"the two sides are in {format_dim(lhs.dim)} and {format_dim(rhs.dim)}",
                                    q.span, "compare quantities of the same dimension")])
    x = symbol(target)
    free = frozenset({target})
    f = lhs.expr - rhs.expr
    full = f.xreplace({s: ws.full_expr(s.name, free) for s in f.free_symbols})
    from dsl.syntax.format import query_text
    text = query_text(q)
    x0v = ws.base_value(target)
    x0 = float(x0v) if x0v is not None else None
    structural = target in getattr(ws, "structural", ())
    whole_target = is_whole_target(node, spec, x0)
    if structural and whole_target and (x not in full.free_symbols or spec is not None and spec.kind == "int"):
        # a count a plugin read to build the plan: the expressions hold it fixed, so the plan
        # itself is rebuilt at candidate whole numbers
        return search_whole(ws, q, target, node, spec, x0, text, lhs.dim)
    if x not in full.free_symbols:
        if structural:
            raise PlanError([Diagnostic("error", "solve", f"'{text}' depends on {q.target.dotted} only through the "
                                        "plan's structure (plugins read it as a number to build the plan), and it "
                                        "is not a whole number, which a search over rebuilt plans needs", span,
                                        f"compare values with `plan sweep FILE --vary {q.target.dotted}=START:STOP:N`, "
                                        "or solve for a count")])
        raise PlanError([Diagnostic("error", "solve", f"'{text}' does not depend on {q.target.dotted}",
                                    span, "pick a target that the two sides depend on")])
    other = rhs.expr if lhs.expr == x else lhs.expr if rhs.expr == x else None
    if node is not None and other is not None and (
            node.kind != "field" or not node.input and not other.free_symbols):
        # a plugin's quantity solved for a relation that states it directly, or a field written
        # as a formula set equal to a constant: the answer is the other side, whatever the plan —
        # a query that asks nothing (a field's budget against another quantity, `usable for
        # peak <= usable`, is a real question: the other side's value)
        raise PlanError([Diagnostic("error", "solve", f"'{text}' solves the computed quantity {q.target.dotted} for "
                                    "itself: the answer is the other side", span,
                                    "solve for an input it depends on (e.g. an efficiency, a count or a bandwidth), "
                                    "or compare another quantity")])
    nominal = ws.nominal_map(exclude={target})
    g = full.xreplace(nominal)
    gf = bounded_mpmath_function(x, g)

    def resid(v: float) -> float:
        try:
            return float(gf(v))
        except (ZeroDivisionError, ValueError, TypeError, OverflowError):
            return float("nan")

    scale = max(abs(resid(x0)) if x0 is not None else 0.0, float(abs(rhs.expr.xreplace(
        {s: ws.base_value(s.name) for s in rhs.expr.free_symbols}) or 1)), 1e-300)
    tol = 1e-12 * scale

    def holds_at(v: float) -> bool | None:
        """Truth of the relation at v; equality is judged with a tolerance relative to the
        sides' magnitude, since the residual is evaluated in floating point."""
        r = resid(v)
        if r != r:
            return None
        return {"<=": r <= tol, "<": r < -tol, ">=": r >= -tol, ">": r > tol, "==": abs(r) <= tol}[q.op]

    if q.op == "==":
        fn = resid
    else:
        # look for changes of truth of the relation, not roots of LHS − RHS: with
        # ceil()/floor() the difference is flat (zero) over whole intervals
        def fn(v: float) -> float:
            ok = holds_at(v)
            return float("nan") if ok is None else (1.0 if ok else -1.0)

    # 1. symbolic roots of the branch active at the nominal point, verified on the full equation
    method = "none"
    sym_roots: list[float] = []
    try:
        gb = active_branch(g, {x: sp.Float(x0 if x0 is not None else 1.0)})
        for r in exact_roots(gb, x):
            c = complex(r)
            if abs(c.imag) < 1e-12 and abs(resid(c.real)) <= 1e-9 * scale:
                sym_roots.append(c.real)
    except TimeoutError:  # the CPU-time safety net fired: not this step's failure
        raise
    except Exception:
        pass
    # 2. every sign change on a geometric grid around the nominal value, refined by bisection
    base = x0 if x0 else 1.0
    num_roots = [bisect_root(fn, a, b, prefer_positive=q.op != "==") for a, b in sign_changes(fn, base)]
    roots = sorted(sym_roots)
    for r in num_roots:
        if all(abs(r - o) > 1e-7 * max(abs(r), abs(o), 1e-300) for o in roots):
            roots.append(r)
    roots.sort()
    # the target's domain: its declared range, else the sign of its nominal value
    spec = ws.param_specs.get(target)
    dom = param_domain(spec, x0)
    inside = [r for r in roots if in_domain(r, dom)]
    if q.op == "==":
        # an answer outside the range is still shown (and flagged infeasible below)
        pick = inside or roots
    else:
        pick = inside
    value = min(pick, key=lambda r: abs(r - (x0 or 0))) if pick else None
    if value is not None:
        method = "symbolic" if any(abs(value - r) <= 1e-7 * max(abs(r), 1e-300) for r in sym_roots) else "numeric"

    symbolic = None
    if value is not None and method == "symbolic":
        try:
            keep = nodes_between(ws, target, f)
            fk = f.xreplace({s: ws.full_expr(s.name, free, keep) for s in f.free_symbols})
            at = {s: ws.base_value(s.name) for s in fk.free_symbols if s != x}
            at[x] = sp.Float(value)
            eq = active_branch(fk, at) if sp.count_ops(fk) <= 120 else None
            if eq is not None and not long_closed_form(eq, x, TEXT_MAX):
                # the printed form: tidy() rebuilds it from the reduced fraction, so a linear
                # root needs only its cancelled −c₀/c₁, not sympy.solve's simplification (the
                # slowest part of a solve); roots were checked above
                r = linear_root(eq, x)
                sols = [sp.cancel(r)] if r is not None else sp.solve(eq, x, check=False)
                text_sol = f"{target} ="
                for i, sol in enumerate(sols):    # stop tidying once the text is too long to show
                    text_sol += (" " if i == 0 else "; ") + sp.sstr(tidy(sol))
                    if len(text_sol) > TEXT_MAX:
                        break
                if sols and len(text_sol) <= TEXT_MAX:
                    symbolic = text_sol
        except TimeoutError:  # the CPU-time safety net fired: not this step's failure
            raise
        except Exception:
            symbolic = None

    holds, intervals, notes = None, [], []
    if q.op != "==":
        intervals = truth_intervals(holds_at, inside, dom)
        if len(inside) == 1:
            ok_above = bool(holds_at(value + (abs(value) * 1e-6 or 1e-9)))
            strict = q.op in ("<", ">")
            holds = f"{target} {('>' if ok_above else '<') + ('' if strict else '=')} boundary"
    failing_at = requirement_checker(ws, x, free, nominal) if value is not None else None
    shown_unit = "" if getattr(node, "unit", "1") in ("1", None) else node.unit
    if q.op == "==" and value is not None:
        if abs(resid(value)) > 1e-6 * scale:
            notes.append("the two sides never meet exactly: the left side jumps over the right one at this "
                         "value (a step)")
        elif len(roots) == 1 and all(abs(resid(value * (1 + e))) <= tol for e in (1e-6, -1e-6)):
            notes.append("the two sides are equal on a whole interval around this value")
        others = [r for r in pick if r != value]
        if others:
            from dsl.engine.units import format_quantity

            def other(r) -> str:
                shown = format_quantity(r, shown_unit)
                bad = failing_at(r)
                return shown + (f" (where {', '.join(bad)} fail{'s' if len(bad) == 1 else ''})" if bad else "")
            notes.append("other solutions: " + ", ".join(other(r) for r in others))
    whole = None
    whole_only = spec is not None and bool(spec.whole)
    if value is not None and whole_only:
        if q.op == "==":
            # the smallest whole number from the root upwards at which the two sides have met:
            # the relation that holds just above the root (they rarely meet at a whole number)
            above = resid(value + (abs(value) * 1e-6 or 1e-9))
            rel = "==" if abs(above) <= tol else ">=" if above > 0 else "<="

            def met(v: float, rel=rel) -> bool | None:
                r = resid(v)
                return None if r != r else {"<=": r <= tol, ">=": r >= -tol, "==": abs(r) <= tol}[rel]
            whole, note = whole_answer(ws, q, x, free, nominal, value, True, met, dom, rel)
        else:
            up = bool(holds_at(value + (abs(value) * 1e-6 or 1e-9)))
            whole, note = whole_answer(ws, q, x, free, nominal, value, up, holds_at, dom)
        if note:
            notes.append(note)
    if value is not None:
        failing = failing_at(whole if whole is not None else value)
        if failing:
            notes.append("at this value these requirements fail: " + ", ".join(failing))
        if q.op != "==":                  # the other ends of the intervals where it holds
            from dsl.engine.units import format_quantity
            ends = sorted({e for iv in intervals for e in iv if e is not None and e != value})
            for e in ends:
                bad = failing_at(e)
                if bad:
                    notes.append(f"at {format_quantity(e, shown_unit)} these requirements fail: {', '.join(bad)}")
    if value is not None and structural:
        check, same = _structural_compare(ws, q, target, whole if whole is not None else value, spec, resid, scale)
        if same is False and whole_target:
            # the structure changes between the nominal value and the answer: rebuild the plan instead
            return search_whole(ws, q, target, node, spec, x0, text, lhs.dim,
                                 reason=f"the expressions keep the plan's structure at the nominal "
                                 f"{q.target.dotted}, and the plan rebuilt at the closed-form answer differs")
        notes.extend(check)
    elif value is None and structural and whole_target:
        return search_whole(ws, q, target, node, spec, x0, text, lhs.dim,
                             reason="the expressions, which keep the plan's structure at the nominal "
                             f"{q.target.dotted}, have no {'solution' if q.op == '==' else 'boundary'}")
    feasible = True
    if value is not None and spec is not None and (spec.min is not None or spec.max is not None):
        from dsl.engine.units import parse_unit
        xv = value / float(parse_unit(spec.unit).scale) if spec.unit else value
        low = spec.min is not None and (xv <= spec.min if spec.min_open else xv < spec.min)
        high = spec.max is not None and xv > spec.max
        if low or high:
            feasible = False
            rng = (("(" if spec.min_open else "[") + (f"{spec.min:g}" if spec.min is not None else "-inf") + ", "
                   + (f"{spec.max:g}]" if spec.max is not None else "inf)") + (f" {spec.unit}" if spec.unit else ""))
            notes.append(f"infeasible: the answer lies outside the allowed range {rng} of {q.target.dotted}")
    if value is None:
        lo, hi = grid_bounds(base)
        where = (f"in the allowed range of {q.target.dotted}" if spec is not None and
                 (spec.min is not None or spec.max is not None) else f"scanned ({lo:.3g} to {hi:.3g}, base units)")
        if q.op != "==" and intervals:
            notes.append(f"the relation holds for every value {where}: no boundary")
        elif q.op != "==":
            notes.append(f"the relation holds for no value {where}")
        else:
            notes.append(f"no solution: the two sides do not meet for any value scanned ({lo:.3g} to {hi:.3g}, "
                         "base units)")
    note = "; ".join(notes)
    return Solution(text, target, node.unit, value, x0, method, symbolic, holds, note, feasible,
                    roots, intervals, q.name, float(whole) if whole is not None else None, whole_only)


def named_solutions(ev, names=None) -> dict:
    """``{name: Solution}`` of the root file's named solves (``solve NAME: …``), in file order,
    solved once per evaluation (memoised in ``ev.memo``); ``names`` limits the solves answered.

    :raises PlanError: when a named solve cannot be posed (unknown name, unit mismatch …).
    """
    from dsl.syntax import limits as L
    memo = ev.memo.setdefault("solutions", {})
    out = {}
    for name, q in ev.solve_names.items():
        if names is not None and name not in names:
            continue
        if name not in memo:
            with L.time_budget():
                memo[name] = solve_query(ev, q)
        out[name] = memo[name]
    return out


def file_requirement_results(ev) -> list[dict]:
    """Each file-level ``require`` at the nominal point, its named solves at their answers:
    name, ok, lhs/rhs (base units), op, unit, text, answers (the solves it reads), where;
    ``ok`` is False with a ``note`` when a solve it reads has no answer."""
    from dsl.engine.nodes import answer_symbol
    out = []
    for r in ev.file_requirements:
        sols = named_solutions(ev, set(r.answers)) if r.answers else {}
        missing = [n for n in r.answers if sols[n].answer is None]
        row = {"name": r.name, "op": r.op, "unit": r.unit, "doc": r.doc, "plugin": "file", "text": r.text,
               "answers": list(r.answers), "where": f"{r.span.file}:{r.span.line}:{r.span.column}"}
        if missing:
            out.append(dict(row, ok=False, lhs_si=None, rhs_si=None,
                            note="no answer: " + "; ".join(f"{n}: {sols[n].note}" for n in missing)))
            continue
        at = {answer_symbol(n): sp.Float(sols[n].answer, 30) if sols[n].whole is None else sp.Integer(
            round(sols[n].whole)) for n in r.answers}
        lv = ev.subs_value(r.lhs.xreplace(at))
        rv = ev.subs_value(r.rhs.xreplace(at))
        if lv is None or rv is None:
            continue
        lf, rf = float(lv), float(rv)
        tol = 1e-12 * max(abs(lf), abs(rf), 1e-300) if r.answers else 0.0
        ok = {"<=": lf <= rf + tol, ">=": lf >= rf - tol, "<": lf < rf, ">": lf > rf,
              "==": abs(lf - rf) <= tol}[r.op]
        out.append(dict(row, ok=bool(ok), lhs_si=lf, rhs_si=rf))
    return out


def _structural_check(ws, q, target: str, value: float, spec, resid, scale: float) -> list[str]:
    """Notes from re-evaluating the plan at the answer when a plugin read the target to build the
    plan (a GPU count a layout divides): the answer assumed the structure of the nominal value,
    so the plan is rebuilt at the answer (a whole number where the target must be one) and its
    LHS − RHS compared with the one the expressions predict there."""
    return _structural_compare(ws, q, target, value, spec, resid, scale)[0]


def _structural_compare(ws, q, target: str, value: float, spec, resid, scale: float) -> tuple:
    """:func:`_structural_check`'s notes and whether the rebuilt plan agrees with the expressions
    (True, False, or None when it could not be compared)."""
    from dsl.results.evaluation import evaluate_file

    whole = spec is not None and (spec.whole or spec.kind == "int")
    at = sp.Integer(round(value)) if whole or float(value).is_integer() else sp.Rational(repr(float(value)))
    shown = f"{q.target.dotted} = {float(at):g}"
    try:
        ev = evaluate_file(ws.path, plugins=ws.plugins, overrides={target: at})
        lv, rv = ev.subs_value(ev.eval_expr(q.lhs).expr), ev.subs_value(ev.eval_expr(q.rhs).expr)
    except PlanError as e:
        return [f"the plan rebuilt at {shown} has errors: {e.diagnostics[0].summary}"], None
    if lv is None or rv is None:
        return [], None
    rebuilt, predicted = float(lv - rv), resid(float(at))
    if predicted == predicted and abs(rebuilt - predicted) <= 1e-9 * max(scale, abs(predicted)):
        return [f"checked on the plan rebuilt at {shown}: plugins read it to build the plan, and the "
                "structure is the same there"], True
    return [f"plugins read {q.target.dotted} to build the plan, and the plan rebuilt at {float(at):g} differs from "
            f"the expressions (left − right {rebuilt:.4g} instead of {predicted:.4g}, base units): the structure "
            "changes there, so compare plans with `plan sweep` over it"], False

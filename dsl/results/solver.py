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

A whole-number target (a GPU count) answers a whole number (:func:`_whole_answer`; for ``==``
the first one from the root upwards at which the sides have met).  One that plugins read to
build the plan is answered by rebuilding the plan at candidate whole numbers
(:func:`_search_whole`).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from dsl.syntax import ast as A
from dsl.syntax.diagnostics import Diagnostic, PlanError
from dsl.engine.piecewise import lambdify
from dsl.engine.units import format_dim


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
    roots: list = None           # every boundary found (base units), sorted
    intervals: list = None       # for inequalities: [(lo, hi)] where the relation holds (None = unbounded)
    name: str | None = None      # `solve NAME: …`
    whole: float | None = None   # a whole-number target: the whole number that answers (base units)
    whole_only: bool = False     # the target is a whole number: only ``whole`` answers

    @property
    def answer(self) -> float | None:
        """The answer as a result (base units): for a whole-number target the whole number
        (the nearest one past the boundary where the relation and the plan's whole-number
        requirements hold; None when there is none), else the boundary ``value``."""
        return self.whole if self.whole is not None or self.whole_only else self.value

    def to_json(self) -> dict:
        """``value``/``nominal``/``answer`` in ``unit`` (as ``plan eval`` shows), ``*_si`` in base
        units; ``symbolic`` is in base units."""
        from dsl.engine.units import convert
        conv = (lambda v: None if v is None else convert(v, self.unit))
        return {"name": self.name, "answer": conv(self.answer), "answer_si": self.answer,
                "whole": conv(self.whole), "whole_si": self.whole,
                "query": self.query, "target": self.target, "unit": self.unit, "value": conv(self.value),
                "si": self.value, "nominal": conv(self.nominal), "nominal_si": self.nominal,
                "method": self.method, "symbolic": self.symbolic, "holds": self.holds, "note": self.note,
                "feasible": self.feasible, "roots": [conv(r) for r in (self.roots or [])],
                "intervals": [[conv(a), conv(b)] for a, b in (self.intervals or [])]}


def active_branch(e, at: dict):
    """Replace Max/Min and Piecewise by the branch active at point ``at``."""
    if not e.args:
        return e
    args = [active_branch(a, at) for a in e.args]
    if isinstance(e, (sp.Max, sp.Min)):
        vals = [float(a.xreplace(at)) for a in args]
        pick = vals.index(max(vals)) if isinstance(e, sp.Max) else vals.index(min(vals))
        return args[pick]
    if isinstance(e, sp.Piecewise):
        for pair in e.args:
            if bool(pair.cond.xreplace(at)):
                return active_branch(pair.expr, at)
    return e.func(*args)


#: log10 of the largest magnitude a residual is computed at: beyond the values a plan holds
#: (1e±300) with room for intermediate terms that cancel; past it a power or exp is an
#: overflow (the residual is NaN there), never handed to mpmath, whose exp(exp(x)) at a large
#: x needs a precision no evaluation reaches
_MAX_LOG10 = 4000


def _bounded_exp(x):
    import mpmath
    if abs(x) > _MAX_LOG10 * 2.302585092994046:
        raise OverflowError("exp() beyond the range a residual is computed in")
    return mpmath.exp(x)


def _bounded_pow(b, x):
    import mpmath
    if b != 0 and x != 0:
        b_abs = abs(b)
        if b_abs != 1 and abs(x) * abs(mpmath.log10(b_abs)) > _MAX_LOG10:
            raise OverflowError("a power beyond the range a residual is computed in")
    return b ** x


def bounded_mpmath_function(x, g):
    """``g`` as a function of the symbol ``x`` evaluated with mpmath (``lambdify``), every
    ``exp`` and power checked against a magnitude of 10^±4000 before it is computed: beyond it
    the call raises :class:`OverflowError` instead of running without end."""
    from sympy.printing.pycode import MpmathPrinter

    class Printer(MpmathPrinter):
        def _print_Pow(self, expr, rational=False):
            if expr.exp == sp.Rational(1, 2):
                return super()._print_Pow(expr, rational=rational)
            return f"_bounded_pow({self._print(expr.base)}, {self._print(expr.exp)})"

        def _print_exp(self, expr):
            return f"_bounded_exp({self._print(expr.args[0])})"

    guarded = {"_bounded_pow": _bounded_pow, "_bounded_exp": _bounded_exp}
    # the settings lambdify gives its own printer: functions a plugin defined with an
    # implementation (``implemented_function``) print by name and are found in the namespace
    printer = Printer({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
                       "user_functions": {k: k for k in guarded}})
    return lambdify(x, g, modules=[guarded, "mpmath"], printer=printer)


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
    if spec is not None and spec.kind == "int" and not _is_count(spec):
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
    whole_target = _whole_target(node, spec, x0)
    if structural and whole_target and (x not in full.free_symbols or spec is not None and spec.kind == "int"):
        # a count a plugin read to build the plan: the expressions hold it fixed, so the plan
        # itself is rebuilt at candidate whole numbers
        return _search_whole(ws, q, target, node, spec, x0, text, lhs.dim)
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
        for r in _roots(gb, x):
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
            keep = _between(ws, target, f)
            fk = f.xreplace({s: ws.full_expr(s.name, free, keep) for s in f.free_symbols})
            at = {s: ws.base_value(s.name) for s in fk.free_symbols if s != x}
            at[x] = sp.Float(value)
            eq = active_branch(fk, at) if sp.count_ops(fk) <= 120 else None
            if eq is not None and not _long_closed_form(eq, x, _TEXT_MAX):
                # the printed form: _tidy() rebuilds it from the reduced fraction, so a linear
                # root needs only its cancelled −c₀/c₁, not sympy.solve's simplification (the
                # slowest part of a solve); roots were checked above
                r = _linear_root(eq, x)
                sols = [sp.cancel(r)] if r is not None else sp.solve(eq, x, check=False)
                text_sol = f"{target} ="
                for i, sol in enumerate(sols):    # stop tidying once the text is too long to show
                    text_sol += (" " if i == 0 else "; ") + sp.sstr(_tidy(sol))
                    if len(text_sol) > _TEXT_MAX:
                        break
                if sols and len(text_sol) <= _TEXT_MAX:
                    symbolic = text_sol
        except TimeoutError:  # the CPU-time safety net fired: not this step's failure
            raise
        except Exception:
            symbolic = None

    holds, intervals, notes = None, [], []
    if q.op != "==":
        intervals = _truth_intervals(holds_at, inside, dom)
        if len(inside) == 1:
            ok_above = bool(holds_at(value + (abs(value) * 1e-6 or 1e-9)))
            strict = q.op in ("<", ">")
            holds = f"{target} {('>' if ok_above else '<') + ('' if strict else '=')} boundary"
    failing_at = _requirement_checker(ws, x, free, nominal) if value is not None else None
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
            whole, note = _whole_answer(ws, q, x, free, nominal, value, True, met, dom, rel)
        else:
            up = bool(holds_at(value + (abs(value) * 1e-6 or 1e-9)))
            whole, note = _whole_answer(ws, q, x, free, nominal, value, up, holds_at, dom)
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
            return _search_whole(ws, q, target, node, spec, x0, text, lhs.dim,
                                 reason=f"the expressions keep the plan's structure at the nominal "
                                 f"{q.target.dotted}, and the plan rebuilt at the closed-form answer differs")
        notes.extend(check)
    elif value is None and structural and whole_target:
        return _search_whole(ws, q, target, node, spec, x0, text, lhs.dim,
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
        lo, hi = _grid_bounds(base)
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


WHOLE_STEPS = 100_000   # whole numbers tried past the boundary before giving up


def _discrete_requirements(ws, x, free, nominal) -> list:
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


def _holds_exact(lhs, op, rhs, x, v: int) -> bool:
    at = {x: sp.Integer(v)}
    try:
        lv, rv = lhs.xreplace(at), rhs.xreplace(at)
        lv, rv = lv if lv.is_Rational else float(lv), rv if rv.is_Rational else float(rv)
    except (TypeError, ValueError):
        return True
    tol = 0 if isinstance(lv, sp.Rational) and isinstance(rv, sp.Rational) else 1e-9 * max(abs(float(lv)),
                                                                                            abs(float(rv)), 1e-300)
    return {"<=": lv <= rv + tol, ">=": lv >= rv - tol, "<": lv < rv, ">": lv > rv, "==": abs(lv - rv) <= tol}[op]


def _whole_answer(ws, q, x, free, nominal, value: float, up: bool, holds_at, dom, met: str | None = None) -> tuple:
    """The whole number that answers a query on a whole-number target: from the boundary
    towards the side where the relation holds, the first whole number at which the relation
    holds and so do the plan's whole-number requirements (see :func:`_discrete_requirements`;
    a GPU count that must divide the global batch answers the next count that divides it).
    For an equality ``holds_at`` is the relation ``met`` (``<=``, ``>=`` or ``==`` between
    the two sides) that holds just above the root, and ``up`` is True: the answer is the first
    whole number from the root upwards at which the sides have met.
    Returns ``(whole or None, note)``."""
    from dsl.syntax.format import format_expr
    import math

    step = 1 if up else -1
    first = math.ceil(value) if up else math.floor(value)
    if not holds_at(first):
        first += step
    if not holds_at(first) or not in_domain(float(first), dom):
        return None, ""
    discrete = _discrete_requirements(ws, x, free, nominal)
    k, broken = first, {}
    for _ in range(WHOLE_STEPS):
        if not in_domain(float(k), dom) or not holds_at(k):
            k = None
            break
        fails = [n for n, lhs, op, rhs in discrete if not _holds_exact(lhs, op, rhs, x, k)]
        if not fails:
            break
        for n in fails:
            broken.setdefault(n, []).append(k)
        k += step
    else:
        k = None
    sym = ">=" if up else "<="
    who = q.target.dotted
    reached = "" if met is None else f" at which {format_expr(q.lhs)} {met} {format_expr(q.rhs)}"
    if k is None:
        names = ", ".join(sorted(broken))
        return None, (f"no whole number {sym} {first} meets the relation together with {names}" if broken else "")
    if k == first:
        return k, (f"as a whole number: {who} {sym} {k}" if met is None else
                   f"as a whole number: {who} = {k}, the first whole number {sym} {first}{reached}")
    skipped = sorted({v for vs in broken.values() for v in vs})
    shown = (f"{skipped[0]}" if len(skipped) == 1 else f"{skipped[0]} … {skipped[-1]}" if
             skipped == list(range(skipped[0], skipped[-1] + 1)) else ", ".join(map(str, skipped[:6])) +
             (", …" if len(skipped) > 6 else ""))
    return k, (f"as a whole number: {who} = {k}, the first whole number {sym} {first}"
               f"{reached + ' and' if met else ' at which'} "
               f"{', '.join(sorted(broken))} also hold{'s' if len(broken) == 1 else ''} "
               f"({shown} break{'s' if len(skipped) == 1 else ''} it)")


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


_TEXT_MAX = 600      # a readable answer longer than this is not shown


_POLY: dict = {}       # (e, x) -> (numerator, denominator, Poly of the numerator in x), or the error


def _numer_poly(e, x):
    """Numerator and denominator of ``e`` over a common denominator (``sympy.together``) and the
    numerator as a polynomial in ``x``; remembered, since the readable answer asks twice (is
    the closed form short? is it linear?).

    :raises sympy.PolynomialError: when the numerator is not a polynomial in ``x``."""
    key = (e, x)
    got = _POLY.get(key)
    if got is None:
        n, d = sp.fraction(sp.together(e))
        try:
            got = (n, d, sp.Poly(n, x))
        except sp.PolynomialError as err:
            got = err
        if len(_POLY) > 64:
            _POLY.clear()
        _POLY[key] = got
    if isinstance(got, Exception):
        raise got
    return got


def _long_closed_form(e, x, limit: int) -> bool:
    """True when the closed-form roots of ``e = 0`` in ``x`` would be too long to show, judged
    before sympy builds them: the numerator is a polynomial of degree n ≥ 2 in ``x`` and n times
    the length of the names its coefficients use exceeds ``limit`` (each of the n roots names
    them; the two roots of the GPU-count quadratic over 16 inputs run to 18,000 characters
    each, and building them takes sympy seconds)."""
    try:
        _, _, p = _numer_poly(e, x)
    except sp.PolynomialError:
        return False
    if p.degree() < 2:
        return False
    names = {s.name for c in p.all_coeffs() for s in c.free_symbols}
    return p.degree() * sum(map(len, names)) > limit


def _linear_root(e, x):
    """The exact root −c₀/c₁ of ``e = 0`` in ``x`` when the numerator of ``e`` over a common
    denominator is linear in ``x``, has no float, and the denominator does not vanish there;
    else None."""
    if e.has(sp.Float):
        return None
    try:
        n, d, p = _numer_poly(e, x)
    except sp.PolynomialError:
        return None
    if p.degree() != 1:
        return None
    c1, c0 = p.all_coeffs()
    r = -c0 / c1
    return r if d.xreplace({x: r}).is_zero is not True else None


def _roots(e, x) -> list:
    """The roots of ``e = 0`` in ``x`` (exact; their values are what ``sympy.solve`` gives,
    not necessarily its printed form).  When the numerator of
    ``e`` (over a common denominator) is linear in ``x`` — a break-even query usually is — the
    root is its exact −c₀/c₁ (:func:`_linear_root`), found without sympy's general solver
    (which costs tens of milliseconds per call); anything else (higher degree, ``x`` under a
    function, floats, a root where the denominator vanishes) goes to ``sympy.solve``."""
    r = _linear_root(e, x)
    return [r] if r is not None else sp.solve(e, x)


_FACTORED: dict = {}     # expression -> sympy.factor(expression): the same sub-sums recur


def _factor(x):
    """``sympy.factor(x)``, remembered (a pure function of ``x``; a readable answer factors the
    same sub-sums again — ``overhead + 1`` in a numerator and a denominator, in every query of
    one plan)."""
    r = _FACTORED.get(x)
    if r is None:
        r = sp.factor(x)
        if len(_FACTORED) > 1024:
            _FACTORED.clear()
        _FACTORED[x] = r
    return r


def _tidy(e):
    """Present a rational expression readably: numerator and denominator factored, and each
    sum collected on its most frequent symbol (``steps*(1 + L)*(a + b + c)`` rather than the
    expanded six-term sum)."""
    def t(x):
        y = _factor(x)
        if isinstance(y, sp.Mul):
            # with float coefficients factor() can return 1.0·x: x itself is not factored again
            return sp.Mul(*[a if a.is_number or a == x else t(a) for a in y.args])
        x = y
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
    except TimeoutError:  # the CPU-time safety net fired: not this step's failure
        raise
    except Exception:  # presentation only: fall back to the raw form
        return e


def _between(ws, target: str, f) -> frozenset:
    """Nodes on dependency paths from ``target`` to the symbols of ``f`` (to expand)."""
    desc = ws.reachable(target) | {target}
    anc = set()
    for s in f.free_symbols:
        if s.name in ws.nodes:
            anc |= ws.reachable(s.name, up=True) | {s.name}
    return frozenset(desc & anc)


_STEPS, _RATIO = 80, 1.25


def _grid_bounds(base: float) -> tuple[float, float]:
    a, b = base / _RATIO ** _STEPS, base * _RATIO ** _STEPS
    return (min(a, b), max(a, b))


def sign_changes(fn, base: float) -> list[tuple[float, float]]:
    """Brackets of every sign change of ``fn`` on a geometric grid base·1.25^k, |k| ≤ 80
    (both signs of the target when ``base`` is 0).  Linear in the grid size."""
    import math

    if base == 0:
        ks = [1.25 ** k for k in range(-_STEPS, _STEPS + 1)]
        pts = sorted([-v for v in ks] + [0.0] + ks)
    else:
        pts = sorted(base * _RATIO ** k for k in range(-_STEPS, _STEPS + 1))
    out, prev = [], None
    for p in pts:
        v = fn(p)
        if math.isnan(v):
            prev = None
            continue
        if prev is not None and v != 0 and prev[1] != 0 and (v > 0) != (prev[1] > 0):
            out.append((prev[0], p))
        elif v == 0 and prev is not None and prev[1] != 0:
            out.append((p, p))
        prev = (p, v)
    return out


def bisect_root(fn, a: float, b: float, prefer_positive: bool = False) -> float:
    """Bisection on a bracket [a, b] with a sign change of ``fn``: robust for the step
    functions ceil()/floor() create (it converges to the jump) as well as for continuous ones.
    With ``prefer_positive`` the endpoint where ``fn > 0`` (the relation holds) is returned."""
    if a == b:
        return a
    fa = fn(a)
    for _ in range(200):
        mid = (a + b) / 2
        if mid in (a, b) or b - a <= 1e-15 * max(abs(a), abs(b)):
            break
        fm = fn(mid)
        if fm == 0:
            return mid
        if (fm > 0) == (fa > 0):
            a, fa = mid, fm
        else:
            b = mid
    if prefer_positive:
        return a if fa > 0 else b
    return (a + b) / 2


def param_domain(spec, x0: float | None) -> tuple:
    """(lo, hi, lo_open) in base units: the target's declared range, else the sign of its
    nominal value (a positive quantity stays positive); None for an unbounded end."""
    if spec is not None and (spec.min is not None or spec.max is not None):
        from dsl.engine.units import parse_unit
        k = float(parse_unit(spec.unit).scale) if spec.unit else 1.0
        return (spec.min * k if spec.min is not None else None, spec.max * k if spec.max is not None else None,
                spec.min_open)
    if x0 is not None and x0 > 0:
        return (0.0, None, True)
    if x0 is not None and x0 < 0:
        return (None, 0.0, False)
    return (None, None, False)


def in_domain(r: float, dom: tuple) -> bool:
    lo, hi, lo_open = dom
    return (lo is None or (r > lo if lo_open else r >= lo)) and (hi is None or r <= hi)


def _truth_intervals(holds_at, roots: list[float], dom: tuple = (None, None, False)) -> list[tuple]:
    """Where the relation holds within the domain, as [(lo, hi)] with None for an unbounded
    end, from its truth between the sorted boundaries and the domain's ends."""
    lo, hi, _ = dom
    edges = [lo] + list(roots) + [hi]
    probes = []
    for a, b in zip(edges, edges[1:]):
        if a is None and b is None:
            probes.append(0.0)
        elif a is None:
            probes.append(b - max(abs(b), 1.0))
        elif b is None:
            probes.append(a + max(abs(a), 1.0))
        else:
            probes.append((a + b) / 2)
    out = []
    for i, p in enumerate(probes):
        if holds_at(p):
            a, b = edges[i], edges[i + 1]
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
    return out


def _requirement_checker(ws, x, free, nominal, names=None):
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


# ---------------------------------------------------------------- whole numbers plugins build from
def _is_count(spec) -> bool:
    """A ``kind="int"`` knob that counts something (a TP degree, replicas, buckets: its range
    starts at 1 or above) rather than choosing (a ZeRO stage 0–3, a seed): only a count can be
    searched for."""
    return spec.kind == "int" and not spec.choices and spec.min is not None and spec.min >= 1


def _whole_target(node, spec, x0) -> bool:
    """The target is a whole number: a parameter declared whole (``whole=True``) or an integer
    count knob; without a parameter spec, an input whose nominal value is a whole number and
    whose dimension is a plain number or a count with a noun (``seq``, ``token``)."""
    if spec is not None:
        return bool(spec.whole) or _is_count(spec)
    from dsl.engine.units import DIMENSIONLESS, count_noun
    return (node is not None and node.input and x0 is not None and float(x0).is_integer()
            and (node.dim == DIMENSIONLESS or count_noun(node.dim) is not None))


def _whole_domain(ws, target: str, node, spec, x0) -> tuple[int, int | None]:
    """The whole numbers a search may try: the parameter's allowed range and the input's
    declared range ``in [lo, hi]``; without a lower bound, from 1 (from 0 when the nominal
    value is 0)."""
    import math
    lo, hi, lo_open = param_domain(spec, x0) if spec is not None and (spec.min is not None or spec.max is not None) \
        else (None, None, False)
    wlo = None if lo is None else (math.floor(lo) + 1 if lo_open and float(lo).is_integer() else math.ceil(lo))
    whi = None if hi is None else math.floor(hi)
    rng = getattr(node, "range", None)
    if rng is not None:
        wlo = max(wlo if wlo is not None else -math.inf, math.ceil(float(rng[0])))
        whi = min(whi if whi is not None else math.inf, math.floor(float(rng[1])))
    if wlo is None:
        wlo = 0 if x0 == 0 else 1
    return int(wlo), (None if whi is None else int(whi))


GROWTH = 2 ** 20   # without an upper bound, a search doubles up to this many times the nominal value


class _Probe:
    """The plan rebuilt at one whole value of the target: both sides (base units), or the
    error that stopped the build; ``broken``: the plan's whole-number requirements that fail
    there and hold in the plan as loaded; ``reqs``: every requirement's state there
    (:func:`_requirement_states`)."""

    __slots__ = ("k", "lv", "rv", "error", "broken", "reqs")

    def __init__(self, k, lv=None, rv=None, error=None, broken=(), reqs=None):
        self.k, self.lv, self.rv, self.error, self.broken, self.reqs = k, lv, rv, error, tuple(broken), reqs or {}

    @property
    def r(self) -> float | None:
        return None if self.error else self.lv - self.rv


# whole values of the target screened by substitution between two rebuilt plans, at most
SCREEN_LIMIT = 100_000


def _whole_number_screen(ws, target: str, names):
    """``breaks(k)``: the names (sorted) of the nominal plan's whole-number requirements
    ``names`` (see :func:`_requirement_states`) that depend on ``target`` and fail with
    ``target = k`` and every other input at its nominal value (:func:`_requirement_checker`:
    substitution into their full expressions, no rebuild).  A value that breaks one cannot meet
    the rebuilt plan's requirements either when they are the same expressions (a micro-batch
    count from the GPU count); the solver still rebuilds the plan at every value it answers, so
    the screen only chooses which values are worth rebuilding."""
    from dsl.engine.nodes import symbol
    return _requirement_checker(ws, symbol(target), frozenset(), ws.nominal_map(exclude={target}), names=set(names))


def _requirement_states(ev) -> dict:
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


def _search_points(lo: int, cap: int, nominal: int | None) -> list[int]:
    """The whole numbers a search tries first, in increasing order: ``lo``, and the nominal
    value halved while it stays a whole number of at least ``lo`` and doubled up to ``cap`` —
    values that keep the nominal value's factors, at which a plan built at the nominal value
    can likely be built again (a GPU count stays a multiple of tp·pp); ``lo`` doubling up to
    ``cap`` when the nominal value is not a positive whole number in ``[lo, cap]``."""
    pts = {lo}
    if nominal is not None and nominal > 0 and lo <= nominal <= cap:
        k = nominal
        while k >= lo:
            pts.add(k)
            if k % 2:
                break
            k //= 2
        k = nominal * 2
    else:
        k = lo * 2 if lo > 0 else 1
    while k <= cap:
        pts.add(k)
        k *= 2
    return sorted(pts)


def _next_candidate(a: int, b: int, breaks, dead: set, screened: dict) -> int | None:
    """The whole number strictly between ``a`` and ``b`` that a bisection rebuilds the plan at
    next: the one nearest the midpoint that breaks none of the whole-number requirements with
    the target substituted (``breaks``, :func:`_whole_number_screen`) and is not known to be
    unbuildable (``dead``); None when there is none.  Values that break one are recorded in
    ``screened`` ({value: names}); at most ``SCREEN_LIMIT`` values are screened per call."""
    m, scanned = (a + b) // 2, 0
    for d in range(b - a):
        if m + d >= b and m - d <= a:
            break
        for k in ((m,) if d == 0 else (m + d, m - d)):
            if not a < k < b or k in dead or k in screened:
                continue
            bad = breaks(k)
            if not bad:
                return k
            screened[k] = bad
            scanned += 1
            if scanned >= SCREEN_LIMIT:
                return None
    return None


def _side_unit(ws, e) -> str | None:
    """The unit to show a side of the query in: a quantity's own unit, a literal's unit."""
    from dsl.syntax import ast as A
    if isinstance(e, A.Ref):
        try:
            nid = ws.resolve(e.parts, e.span)
        except PlanError:
            return None
        n = ws.nodes.get(nid) if isinstance(nid, str) else None
        return n.unit if n is not None else None
    if isinstance(e, A.Number):
        return e.unit or ""
    return None


def _search_whole(ws, q, target: str, node, spec, x0, text: str, dim, reason: str = "") -> Solution:
    """Answer a query on a whole-number target that plugins read to build the plan (replicas of
    an engine, a TP degree, a GPU count a layout divides) by **re-evaluating** the plan at
    candidate values: ``lo`` and the nominal value halved and doubled (:func:`_search_points`;
    the nominal plan counts as one probe for free) until the relation changes, then bisection
    between the last two values, trying only values that keep the plan's whole-number
    requirements with the target substituted (:func:`_next_candidate`).  A value at which the
    plan cannot be built tells nothing about the relation: it is left out, neither meeting nor
    failing it.  The relation is assumed monotone in the target — one change from failing to
    holding, or the reverse — which is checked at the probed points (a note says when it is
    not).  A value that breaks one of the plan's whole-number requirements (see
    :func:`_requirement_states`) is skipped towards the side where the relation holds.  For
    ``==`` the answer is the smallest whole number, from the lowest one the plan can be built
    at upwards, at which the two sides have met (are equal, or have crossed).  At most the
    limit ``solve_evaluations`` re-evaluations (``error[limit]`` beyond)."""
    from dsl.engine.units import format_dim, format_quantity
    from dsl.results.evaluation import evaluate_file
    from dsl.syntax import limits as L
    from dsl.syntax.format import format_expr

    who = q.target.dotted
    lo, hi = _whole_domain(ws, target, node, spec, x0)
    if hi is not None and hi < lo:
        raise PlanError([Diagnostic("error", "solve", f"{who} has no whole number in its allowed range", q.target.span,
                                    "widen its range")])
    if node is not None and not node.input:
        raise PlanError([Diagnostic("error", "solve", f"'{who}' is computed from other inputs, so the plan cannot be "
                                    "rebuilt at values of it", q.target.span,
                                    "solve for the input it is computed from")])
    limit = L.current().solve_evaluations
    probes: dict[int, _Probe] = {}
    order: list[int] = []
    used = [0]
    nominal_k = int(x0) if x0 is not None and float(x0).is_integer() else None
    states0 = _requirement_states(ws)
    breaks = _whole_number_screen(ws, target, [n for n, st in states0.items() if st[0]])

    def sides(ev):
        return ev.subs_value(ev.eval_expr(q.lhs).expr), ev.subs_value(ev.eval_expr(q.rhs).expr)

    def probe(k: int) -> _Probe:
        if k in probes:
            return probes[k]
        if k == nominal_k:
            ev = ws
        else:
            if used[0] >= limit:
                shown = ", ".join(map(str, order))
                raise PlanError([Diagnostic("error", "limit", f"solving '{text}' by rebuilding the plan at values of "
                                            f"{who} needs more than {limit} evaluations of the plan (tried {shown})",
                                            q.span, L.raise_hint("solve_evaluations"))])
            used[0] += 1
            try:
                ev = evaluate_file(ws.path, plugins=ws.plugins, overrides={target: sp.Integer(k)})
            except PlanError as e:
                p = _Probe(k, error=e.diagnostics[0].summary if e.diagnostics else "it has errors")
                probes[k] = p
                order.append(k)
                return p
        try:
            lv, rv = sides(ev)
        except PlanError as e:
            lv = rv = None
            err = e.diagnostics[0].summary if e.diagnostics else "a side cannot be computed"
        else:
            err = None if lv is not None and rv is not None else "a side has no value"
        if err is None:
            states = states0 if ev is ws else _requirement_states(ev)
            broken = sorted(n for n, (rounds, ok, _, _) in states.items()
                            if rounds and not ok and states0.get(n, (True, True))[1])
            p = _Probe(k, float(lv), float(rv), None, broken, states)
        else:
            p = _Probe(k, error=err)
        probes[k] = p
        order.append(k)
        return p

    op = q.op

    def holds(p: _Probe, rel: str) -> bool:
        if p.error:
            return False      # a plan that cannot be built meets nothing (callers skip it)
        lv, rv = p.lv, p.rv
        tol = 1e-12 * max(abs(lv), abs(rv), 1e-300)
        return {"<=": lv <= rv + tol, "<": lv < rv - tol, ">=": lv >= rv - tol, ">": lv > rv + tol,
                "==": abs(lv - rv) <= tol}[rel]

    def closeness(p: _Probe, rel: str) -> float:
        """How far into the side where ``rel`` holds (positive: holds)."""
        return (p.rv - p.lv) if rel in ("<=", "<") else (p.lv - p.rv)

    # the candidates: lo, the nominal value halved and doubled, within the range
    cap = hi if hi is not None else max(lo, 1, nominal_k or 1) * GROWTH
    seq = _search_points(lo, cap, nominal_k)
    if hi is not None and seq[-1] != hi:
        seq.append(hi)
    if nominal_k is not None and lo <= nominal_k <= cap:
        probe(nominal_k)                  # free: the plan as loaded
    # an equality is searched as the inequality that fails at the lowest value the plan can be
    # built at: the answer is where the two sides have met
    rel, first = op, None
    if op == "==":
        first = next((p for p in map(probe, seq) if not p.error), None)
        rel = "<=" if first is None or first.lv > first.rv else ">="
    t0, flip, stop, evaluable, prev = None, None, None, [], None
    if first is not None and holds(first, "=="):
        stop = "equal-at-lowest"
    else:
        for k in seq:
            p = probe(k)
            if p.error:                   # tells nothing about the relation
                if evaluable:
                    stop = "unbuildable"  # built below, not here: larger values will not build either
                    break
                continue
            t = holds(p, rel)
            if t0 is None:
                t0 = t
            elif t != t0:
                flip = (prev, k)
                break
            prev = k
            evaluable.append(p)
            if len(evaluable) >= 2:
                a, b = evaluable[-2], evaluable[-1]
                tol = 1e-12 * max(abs(a.lv), abs(a.rv), abs(b.lv), abs(b.rv), 1e-300)
                d = closeness(b, rel) - closeness(a, rel)
                if t0 and d > tol and a.k == evaluable[0].k:
                    stop = "holds-above"       # holds at the lowest value and more so above it
                    break
                if not t0 and d < -tol:
                    stop = "fails-above"       # fails and moves away from holding as it grows
                    break
                if len(evaluable) >= 3 and all(abs(closeness(x, rel) - closeness(evaluable[-1], rel)) <= tol
                                               for x in evaluable[-3:]):
                    stop = "flat"
                    break
    answer, up, bracket = None, True, None
    screened: dict[int, list] = {}        # values not rebuilt: they break a whole-number requirement
    if flip is not None:
        a, b = flip
        dead = {k for k, p in probes.items() if p.error}
        while (m := _next_candidate(a, b, breaks, dead, screened)) is not None:
            p = probe(m)
            if p.error:
                dead.add(m)
            elif holds(p, rel) == t0:
                a = m
            else:
                b = m
        up = not t0                   # holds from b upwards, else up to a
        answer, bracket = (b if up else a), (a, b)
    elif stop == "holds-above":
        answer, up = evaluable[0].k, True
    elif stop == "equal-at-lowest":
        answer, up = first.k, True
    # the plan's whole-number requirements: step towards the side where the relation holds,
    # past values that break them or cannot be built; a value is rebuilt only when the nominal
    # plan's whole-number requirements, with the target set to it, hold (a cheap substitution)
    skipped: list[int] = []
    broken_names: set = set()
    boundary = answer
    if answer is not None:
        step = 1 if up else -1
        k, at_boundary = answer, True
        while True:
            p = probe(k)
            if not at_boundary and p.error:
                skipped.append(k)         # cannot be built there: the next one may be
            elif not holds(p, rel) or k < lo or (hi is not None and k > hi):
                answer = None
                break
            elif not p.broken:
                answer = k
                break
            else:
                skipped.append(k)
                broken_names.update(p.broken)
            at_boundary = False
            k += step
            scanned = 0
            while lo <= k and (hi is None or k <= hi) and (hi is not None or k <= cap) and scanned < SCREEN_LIMIT:
                bad = breaks(k)
                if not bad:
                    break
                screened[k] = bad
                k += step
                scanned += 1
            if k < lo or (hi is not None and k > hi) or (hi is None and k > cap) or scanned >= SCREEN_LIMIT:
                answer = None
                break
    exact = answer is not None and holds(probe(answer), "==")
    # notes: the method, the bracket, monotonicity, errors
    unit = _side_unit(ws, q.lhs) or _side_unit(ws, q.rhs)

    def fmt(v: float) -> str:
        if unit is None:
            return format_quantity(v, "") + ("" if not dim.exps else f" {format_dim(dim)}")
        return format_quantity(v, unit)

    notes = []
    if reason:
        notes.append(reason + ": answered by rebuilding the plan instead")
    tried = ", ".join(f"{k} (nominal)" if k == nominal_k else str(k) for k in order)
    done = f"re-evaluated the plan at {who} = {tried} (plugins read it to build the plan)"
    if answer is not None and op != "==":
        notes.append(f"{done}: {answer} is the {'smallest' if up else 'largest'} whole number that meets it")
    elif exact:
        notes.append(f"{done}: the two sides are equal at {answer}")
    elif answer is not None:
        notes.append(f"{done}: no whole number makes the two sides equal, and {answer} is the smallest at which they "
                     f"have met ({format_expr(q.lhs)} {rel} {format_expr(q.rhs)})")
    else:
        notes.append(done)
    neg = {"<=": ">", "<": ">=", ">=": "<", ">": "<="}

    def at(k: int) -> str:
        p = probes[k]
        if p.error:
            return f"at {k}: cannot be built"
        if op == "==":
            c = "==" if holds(p, "==") else "<" if p.lv < p.rv else ">"
        else:
            c = op if holds(p, rel) else neg[op]
        return f"at {k}: {fmt(p.lv)} {c} {fmt(p.rv)}"

    if bracket is not None:
        a, b = bracket
        if answer is not None:        # the nearest value tried on the failing side that could be built
            side = [k for k, p in probes.items() if not p.error and not holds(p, rel)
                    and (k < answer if up else k > answer)]
            side = [k for k in side if not probes[k].broken] or side
            if side:
                a, b = (max(side), answer) if up else (answer, min(side))
        notes.append("left and right sides " + ", ".join(at(k) for k in (a, b)))
    if answer is None:
        span_txt = f"{lo} to {max(order)}"
        if t0 is None and stop is None:
            notes.append(f"the plan cannot be built at any value tried ({span_txt})")
        elif op == "==" and bracket is not None and not broken_names:
            a, b = bracket
            notes.append(f"no whole number makes the two sides equal: they cross between {a} and {b}")
        elif stop == "flat":
            same = ", ".join(str(p.k) for p in evaluable[-3:])
            notes.append(f"the sides stop changing with {who} (the same at {same}): the relation holds for "
                         f"{'every value' if t0 else 'no value'} from {span_txt}, no boundary")
        elif t0:
            notes.append(f"the relation holds for every value tried ({span_txt}): no boundary")
        elif broken_names:
            notes.append(f"no whole number meets the relation together with {', '.join(sorted(broken_names))}")
        else:
            notes.append(f"the relation holds for no value tried ({span_txt})"
                         + (": it moves away from holding as the value grows" if stop == "fails-above" else ""))
    elif stop == "holds-above":
        lowest = "the lowest allowed value" if answer == lo else "the lowest value tried at which the plan can be built"
        notes.append(f"it holds at {answer}, {lowest}, and more so above")
    if skipped and broken_names:
        end = answer if answer is not None else max(skipped) if up else min(skipped)
        inside = sorted(k for k, p in probes.items() if not p.error and p.broken and holds(p, rel)
                        and min(boundary, end) <= k <= max(boundary, end))
        if inside:
            names = ", ".join(sorted({n for k in inside for n in probes[k].broken} | broken_names))
            notes.append(f"{', '.join(map(str, inside))} meet{'s' if len(inside) == 1 else ''} it but "
                         f"break{'s' if len(inside) == 1 else ''} {names}")
    if answer is not None and not probes[answer].error:
        # the answer meets the relation, but the plan may still fail other requirements there —
        # and fail them at every value tried (a layout rule no count fixes: tp above one host)
        own = target.rsplit(".", 1)[0] + "."
        built = [pr for pr in probes.values() if not pr.error]
        fails = sorted(n for n, st in probes[answer].reqs.items() if n.startswith(own) and not st[1]
                       and n not in probes[answer].broken)
        if fails:
            always = [n for n in fails if all(not pr.reqs[n][1] for pr in built if n in pr.reqs)]
            notes.append(f"at {answer} the plan still fails {', '.join(fails)}")
            if always:
                notes.append(f"{', '.join(always)} fail{'s' if len(always) == 1 else ''} at every value tried, "
                             f"so no {who} fixes {'it' if len(always) == 1 else 'them'}")
    if screened:
        names = ", ".join(sorted({n for v in screened.values() for n in v}))
        n = len(screened)
        notes.append(f"{n:,} value{'s' if n != 1 else ''} from {min(screened)} to {max(screened)} "
                     f"break{'s' if n == 1 else ''} {names} with {who} substituted (not rebuilt)")
    errors = sorted(k for k, p in probes.items() if p.error)
    if errors:
        why = (probes[errors[0]].error if len(errors) == 1 else f"at {errors[0]}: {probes[errors[0]].error}")
        notes.append(f"the plan cannot be built at {who} = {', '.join(map(str, errors))} "
                     f"({why}): left out, as neither meeting nor failing it")
    # monotone in the target? the truth changes at most once, and LHS − RHS moves one way only
    good = sorted((p for p in probes.values() if not p.error), key=lambda p: p.k)
    truths = [holds(p, rel) for p in good]
    changes = sum(1 for u, v in zip(truths, truths[1:]) if u != v)
    rs = [p.lv - p.rv for p in good]
    scale = max([abs(v) for p in good for v in (p.lv, p.rv)] + [1e-300])
    steps = [v - u for u, v in zip(rs, rs[1:]) if abs(v - u) > 1e-9 * scale]
    if changes > 1 or (steps and any((s > 0) != (steps[0] > 0) for s in steps)):
        yes = [p.k for p, t in zip(good, truths) if t]
        no = [p.k for p, t in zip(good, truths) if not t]
        notes.append(f"warning: the relation is not monotone in {who} at the values tried (it holds at "
                     f"{', '.join(map(str, yes)) or 'none'} and not at {', '.join(map(str, no)) or 'none'}): "
                     f"other whole numbers may answer too, compare them with `plan sweep FILE --vary {who}=…`")
    elif answer is not None or (op == "==" and bracket is not None):
        notes.append(f"this assumes the relation changes once as {who} grows, as it does at the values tried")
    if answer is not None:
        # the other requirements that fail there and read the target: their sides change between
        # the values tried (another plan of the file does not move with this one's target)
        seen: dict[str, set] = {}
        for p in good:
            for n, (_, _, lf, rf) in p.reqs.items():
                seen.setdefault(n, set()).add((lf, rf))
        failing = sorted(n for n, (rounds, ok, _, _) in probes[answer].reqs.items()
                         if not rounds and not ok and len(seen.get(n, ())) > 1)
        if failing:
            notes.append("at this value these requirements fail: " + ", ".join(failing))
    value = float(answer) if answer is not None else None
    holds_txt = intervals = None
    if value is not None and op != "==":
        holds_txt = f"{target} {'>=' if up else '<='} boundary"
        intervals = [(value, float(hi) if hi is not None else None)] if up else [(float(lo), value)]
    return Solution(text, target, node.unit, value, x0, "re-evaluation", None, holds_txt, "; ".join(notes), True,
                    [value] if value is not None else [], intervals or [], q.name,
                    value, True)

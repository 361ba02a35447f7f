"""Whole-number answers of break-even queries (:mod:`dsl.results.solver`) on a target that
must be a whole number (a GPU count): the nearest whole number past a closed-form boundary at
which the plan's whole-number requirements hold (:func:`whole_answer`), and, for a count that
plugins read to build the plan, the search that rebuilds the plan at candidate whole numbers
(:func:`search_whole`).
"""
from __future__ import annotations

import sympy as sp

from dsl.syntax.diagnostics import Diagnostic, PlanError
from dsl.results.requirement_checks import discrete_requirements, holds_exact, requirement_checker, requirement_states
from dsl.results.roots import in_domain, param_domain
from dsl.results.solution import Solution


WHOLE_STEPS = 100_000   # whole numbers tried past the boundary before giving up


def whole_answer(ws, q, x, free, nominal, value: float, up: bool, holds_at, dom, met: str | None = None) -> tuple:
    """The whole number that answers a query on a whole-number target: from the boundary
    towards the side where the relation holds, the first whole number at which the relation
    holds and so do the plan's whole-number requirements (see
    :func:`~dsl.results.requirement_checks.discrete_requirements`; a GPU count that must
    divide the global batch answers the next count that divides it).
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
    discrete = discrete_requirements(ws, x, free, nominal)
    k, broken = first, {}
    for _ in range(WHOLE_STEPS):
        if not in_domain(float(k), dom) or not holds_at(k):
            k = None
            break
        fails = [n for n, lhs, op, rhs in discrete if not holds_exact(lhs, op, rhs, x, k)]
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


# ---------------------------------------------------------------- whole numbers plugins build from
def is_count(spec) -> bool:
    """A ``kind="int"`` knob that counts something (a TP degree, replicas, buckets: its range
    starts at 1 or above) rather than choosing (a ZeRO stage 0–3, a seed): only a count can be
    searched for."""
    return spec.kind == "int" and not spec.choices and spec.min is not None and spec.min >= 1


def is_whole_target(node, spec, x0) -> bool:
    """The target is a whole number: a parameter declared whole (``whole=True``) or an integer
    count knob; without a parameter spec, an input whose nominal value is a whole number and
    whose dimension is a plain number or a count with a noun (``seq``, ``token``)."""
    if spec is not None:
        return bool(spec.whole) or is_count(spec)
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
    (:func:`~dsl.results.requirement_checks.requirement_states`)."""

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
    ``names`` (see :func:`~dsl.results.requirement_checks.requirement_states`) that depend on
    ``target`` and fail with ``target = k`` and every other input at its nominal value
    (:func:`~dsl.results.requirement_checks.requirement_checker`: substitution into their full
    expressions, no rebuild).  A value that breaks one cannot meet
    the rebuilt plan's requirements either when they are the same expressions (a micro-batch
    count from the GPU count); the solver still rebuilds the plan at every value it answers, so
    the screen only chooses which values are worth rebuilding."""
    from dsl.engine.nodes import symbol
    return requirement_checker(ws, symbol(target), frozenset(), ws.nominal_map(exclude={target}), names=set(names))


def search_points(lo: int, cap: int, nominal: int | None) -> list[int]:
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


def next_candidate(a: int, b: int, breaks, dead: set, screened: dict) -> int | None:
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


def search_whole(ws, q, target: str, node, spec, x0, text: str, dim, reason: str = "") -> Solution:
    """Answer a query on a whole-number target that plugins read to build the plan (replicas of
    an engine, a TP degree, a GPU count a layout divides) by **re-evaluating** the plan at
    candidate values: ``lo`` and the nominal value halved and doubled (:func:`search_points`;
    the nominal plan counts as one probe for free) until the relation changes, then bisection
    between the last two values, trying only values that keep the plan's whole-number
    requirements with the target substituted (:func:`next_candidate`).  A value at which the
    plan cannot be built tells nothing about the relation: it is left out, neither meeting nor
    failing it.  The relation is assumed monotone in the target — one change from failing to
    holding, or the reverse — which is checked at the probed points (a note says when it is
    not).  A value that breaks one of the plan's whole-number requirements (see
    :func:`~dsl.results.requirement_checks.requirement_states`) is skipped towards the side where the
    relation holds.  For
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
    states0 = requirement_states(ws)
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
            states = states0 if ev is ws else requirement_states(ev)
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
    seq = search_points(lo, cap, nominal_k)
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
        while (m := next_candidate(a, b, breaks, dead, screened)) is not None:
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

"""Sensitivity of results to inputs: derivatives, elasticities, declared ranges, break-evens.

Everything is computed from the symbolic full expression of a quantity (``ws.full_expr``),
at the nominal point (design §"The solver", *Sensitivity*):

* **partial derivative** ∂y/∂x and **elasticity** ε = (∂y/∂x)·x/y = ∂ln y/∂ln x: a 1 % change
  of x changes y by about ε %.  ``max``/``min``/piecewise choices are replaced by the branch
  active at the nominal point (the critical path stays the same near it), and
  ``ceil``/``floor`` by their argument — a step count is treated as continuous, so the
  elasticity of a finish time to the token count is 1, not 0.
* **tornado**: y at each end of an input's declared range (``mfu = 40 % in [30 %, 50 %]``)
  with every other input nominal.
* **break-even**: the value of one input at which a requirement flips (``meets_deadline``
  fails when MFU < 31.3 %), every other input nominal; found on the exact relation (steps
  included) by a geometric scan around the nominal value and bisection — ``None`` ("never")
  when no value in the input's allowed range flips it.
* **drivers** of a requirement: the inputs with the largest elasticity of the ratio of its two
  sides, ε(lhs/rhs) = ε(lhs) − ε(rhs).

Values are in base units (s, B, FLOP …); callers convert with ``dsl.engine.units.convert``.
"""
from __future__ import annotations

import math

import sympy as sp

from dsl.engine.piecewise import lambdify


def full_expression(ws, expr):
    """``expr`` (over node symbols) expanded to the declared inputs (a ``Max``/``Min`` over
    symbolic arguments kept unevaluated: :func:`dsl.engine.piecewise.substitute`)."""
    from dsl.engine.piecewise import substitute
    return substitute(expr, {s: ws.full_expr(s.name) for s in expr.free_symbols if s.name in ws.nodes})


def inputs_of(ws, expr) -> list[str]:
    """Ids of the numeric inputs the (full) expression depends on, sorted."""
    out = []
    for s in expr.free_symbols:
        n = ws.nodes.get(s.name)
        if n is not None and n.input and n.numeric:
            out.append(s.name)
    return sorted(out)


def nominal_floats(ws) -> dict:
    """{Symbol: exact nominal value} of every input."""
    return ws.nominal_map()


def active_branch(expr, at: dict):
    """``expr`` with Max/Min/Piecewise replaced by the branch active at ``at`` and
    ceiling/floor by their argument (see the module docstring)."""
    from dsl.results.roots import active_branch

    fs = expr.free_symbols       # only the symbols the expression holds: ``at`` covers every input
    e = active_branch(expr, {k: sp.Float(v, 30) for k, v in at.items() if k in fs})
    return e.replace(lambda x: isinstance(x, (sp.ceiling, sp.floor)), lambda x: x.args[0])


def _meter():
    from dsl.syntax.limits import Meter
    return Meter("analysis_ops", "the sensitivity analysis")


def _postorder(e, meter) -> list:
    """The distinct sub-expressions of ``e``, children before parents, without recursion; each
    counts one operation of ``meter``."""
    order: list = []
    seen: set = set()
    stack = [(e, False)]
    while stack:
        n, done = stack.pop()
        if done:
            if n not in seen:
                seen.add(n)
                order.append(n)
                meter.spend()
            continue
        if n in seen:
            continue
        stack.append((n, True))
        for a in n.args:
            if a not in seen:
                stack.append((a, False))
    return order


def _float_values(order: list, at: dict) -> dict | None:
    """{sub-expression: float} for ``order`` (:func:`_postorder`) at the point ``at``, in double
    precision with every operation bounded (an overflow is ±inf, an undefined value NaN; no
    mpmath and no symbolic simplification is involved); None when a node is not one the
    language builds (+, ×, powers, exp, log, abs, min, max, floor, ceil, mod, piecewise)."""
    from sympy.functions.elementary.piecewise import ExprCondPair

    inf, nan = math.inf, math.nan
    val: dict = {}

    def power(b: float, x: float) -> float:
        try:
            return b ** x if b >= 0 or x == int(x) else nan
        except OverflowError:
            return inf
        except ZeroDivisionError:
            return nan

    for n in order:
        if n.is_Symbol:
            v = at.get(n)
            if v is None:
                return None
            r = float(v)
        elif n.is_Number or n.is_NumberSymbol:
            r = float(n)
        elif n.is_Add:
            r = math.fsum(val[a] for a in n.args) if all(math.isfinite(val[a]) for a in n.args) \
                else sum(val[a] for a in n.args)
        elif n.is_Mul:
            r = 1.0
            for a in n.args:
                r *= val[a]
        elif n.is_Pow:
            r = power(val[n.base], val[n.exp])
        elif isinstance(n, sp.exp):
            x = val[n.args[0]]
            r = inf if x > 709 else math.exp(x)
        elif isinstance(n, sp.log):
            x = val[n.args[0]]
            r = math.log(x) if x > 0 else (-inf if x == 0 else nan)
        elif isinstance(n, sp.Abs):
            r = abs(val[n.args[0]])
        elif isinstance(n, sp.Max):
            r = max(val[a] for a in n.args)
        elif isinstance(n, sp.Min):
            r = min(val[a] for a in n.args)
        elif isinstance(n, (sp.floor, sp.ceiling)):
            x = val[n.args[0]]
            r = x if not math.isfinite(x) else float(math.floor(x) if isinstance(n, sp.floor) else math.ceil(x))
        elif isinstance(n, sp.Mod):
            a, b = val[n.args[0]], val[n.args[1]]
            r = a - b * math.floor(a / b) if b != 0 and math.isfinite(a) and math.isfinite(b) else nan
        elif isinstance(n, sp.Piecewise):
            r = nan
            for ex, cond in n.args:
                c = val[cond]
                if c != c:
                    break
                if c:
                    r = val[ex]
                    break
        elif isinstance(n, ExprCondPair):
            r = nan                    # a branch: read through its Piecewise
        elif n is sp.true or n is sp.false:
            r = 1.0 if n is sp.true else 0.0
        elif isinstance(n, sp.core.relational.Relational):
            a, b = val[n.lhs], val[n.rhs]
            r = nan if a != a or b != b else float({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
                                                     "==": a == b, "!=": a != b}[n.rel_op])
        elif isinstance(n, (sp.And, sp.Or, sp.Not)):
            vs = [val[a] for a in n.args]
            if any(v != v for v in vs):
                r = nan
            else:
                r = float(all(vs) if isinstance(n, sp.And) else any(vs) if isinstance(n, sp.Or) else not vs[0])
        else:
            return None
        val[n] = r
    return val


def _num(e, at, meter=None) -> float:
    """The value of ``e`` at the point ``at`` ({Symbol: rational value}) as a float: exact (and
    then rounded) when the expression is rational, else in bounded double precision
    (:func:`_float_values`); NaN when it cannot be evaluated.  Never hands the expression to
    sympy's or mpmath's arbitrary-precision evaluation, which has no bound on its work."""
    from dsl.engine.piecewise import NotRational, exact_rational

    meter = meter if meter is not None else _meter()
    order = _postorder(e, meter)
    try:
        return float(exact_rational(e, at))
    except (NotRational, ZeroDivisionError, OverflowError):
        pass
    vals = _float_values(order, at)
    return float("nan") if vals is None else vals[e]


def _float_gradient(e, at: dict, meter) -> dict | None:
    """Partial derivatives of ``e`` at ``at`` with respect to each of its symbols, by one
    reverse accumulation over the expression's DAG in double precision: the rules of calculus
    for +, ×, powers, exp, log and abs, and of the branch taken for min/max/piecewise;
    floor/ceil have derivative 0 and ``Mod(a, b)`` the derivatives 1 and −floor(a/b).  None for
    any other node.  Linear in the size of the expression (each node counts one operation of
    ``meter``)."""
    order = _postorder(e, meter)
    val = _float_values(order, at)
    if val is None:
        return None
    adj: dict = {e: 1.0}

    def add(c, d):
        adj[c] = adj.get(c, 0.0) + d

    for n in reversed(order):
        meter.spend()
        a = adj.get(n)
        if not a or not n.args:
            continue
        if n.is_Add:
            for c in n.args:
                add(c, a)
        elif n.is_Mul:
            vs = [val[c] for c in n.args]
            for i, c in enumerate(n.args):
                p = a
                for j, v in enumerate(vs):
                    if j != i:
                        p *= v
                add(c, p)
        elif n.is_Pow:
            b, x = val[n.base], val[n.exp]
            if n.base.free_symbols:
                add(n.base, a * x * (b ** (x - 1) if b != 0 or x >= 1 else math.nan) if b >= 0 or x == int(x)
                    else math.nan)
            if n.exp.free_symbols:
                add(n.exp, a * val[n] * math.log(b) if b > 0 else math.nan)
        elif isinstance(n, sp.exp):
            add(n.args[0], a * val[n])
        elif isinstance(n, sp.log):
            x = val[n.args[0]]
            add(n.args[0], a / x if x != 0 else math.nan)
        elif isinstance(n, sp.Abs):
            x = val[n.args[0]]
            add(n.args[0], a * (1.0 if x > 0 else -1.0 if x < 0 else 0.0))
        elif isinstance(n, (sp.Max, sp.Min)):
            pick = next(c for c in n.args if val[c] == val[n])
            add(pick, a)
        elif isinstance(n, sp.Mod):
            x, y = val[n.args[0]], val[n.args[1]]
            add(n.args[0], a)
            add(n.args[1], -a * math.floor(x / y) if y != 0 and math.isfinite(x / y) else math.nan)
        elif isinstance(n, sp.Piecewise):
            for ex, cond in n.args:
                if val[cond]:
                    add(ex, a)
                    break
        # floor, ceiling, relations and booleans: derivative 0 almost everywhere
    return {n: adj.get(n, 0.0) for n in order if n.is_Symbol}


def _gradient(e, at: dict) -> dict | None:
    """Exact partial derivatives of ``e`` at the point ``at`` ({Symbol: rational value}) with
    respect to each of its symbols, by one reverse accumulation over the expression's DAG in
    Python fractions: the numbers ``float(diff(e, x).xreplace(at))`` gives for every ``x`` at
    once.  None when ``e`` holds anything but sums, products, integer powers, rationals and
    symbols of ``at`` (a division by zero included): the caller differentiates with sympy."""
    from fractions import Fraction

    order: list = []
    val: dict = {}
    stack = [(e, False)]
    while stack:                       # post-order over the DAG, without recursion
        n, done = stack.pop()
        if done:
            if n not in val:
                val[n] = None
                order.append(n)
            continue
        if n in val:
            continue
        stack.append((n, True))
        for a in n.args:
            if a not in val:
                stack.append((a, False))
    val.clear()
    try:
        for n in order:
            if n.is_Symbol:
                v = at.get(n)
                if v is None or not v.is_Rational:
                    return None
                val[n] = Fraction(int(v.p), int(v.q))
            elif n.is_Rational:
                val[n] = Fraction(int(n.p), int(n.q))
            elif n.is_Add:
                val[n] = sum((val[a] for a in n.args), Fraction(0))
            elif n.is_Mul:
                p = Fraction(1)
                for a in n.args:
                    p *= val[a]
                val[n] = p
            elif n.is_Pow and n.exp.is_Integer:
                val[n] = val[n.base] ** int(n.exp)
            else:
                return None
        adj: dict = {e: Fraction(1)}
        for n in reversed(order):
            a = adj.get(n)
            if not a or not n.args:
                continue
            if n.is_Add:
                for c in n.args:
                    adj[c] = adj.get(c, 0) + a
            elif n.is_Mul:
                vs = [val[c] for c in n.args]
                pre = [Fraction(1)]
                for v in vs[:-1]:
                    pre.append(pre[-1] * v)
                suf = Fraction(1)
                for i in range(len(vs) - 1, -1, -1):
                    c = n.args[i]
                    adj[c] = adj.get(c, 0) + a * pre[i] * suf
                    suf *= vs[i]
            else:                      # Pow with an integer exponent
                k = int(n.exp)
                adj[n.base] = adj.get(n.base, 0) + a * k * val[n.base] ** (k - 1)
    except ZeroDivisionError:
        return None
    return {n: adj.get(n, Fraction(0)) for n in order if n.is_Symbol}


def elasticities(ws, expr) -> list[dict]:
    """Partial derivatives and elasticities of ``expr`` (node symbols, base units) with
    respect to every input it depends on, at the nominal point.

    :returns: ``[{"input", "value", "derivative", "elasticity"}]`` (base units), sorted by
        decreasing |elasticity| then name; inputs whose derivative is zero at the nominal point
        (a branch not taken) are kept with elasticity 0.
    """
    meter = _meter()
    full = full_expression(ws, expr)
    at = nominal_floats(ws)
    y = _num(full, at, meter)
    g = active_branch(full, at)
    grad = _gradient(g, at)            # exact, when the active branch is rational
    if grad is None:
        grad = _float_gradient(g, at, meter)
    out = []
    for nid in inputs_of(ws, full):
        x = sp.Symbol(nid, real=True)
        xv = float(at[x])
        d = float(grad.get(x, 0)) if grad is not None else float("nan")
        el = d * xv / y if y not in (0.0,) and not math.isnan(d) else float("nan")
        out.append({"input": nid, "value": xv, "derivative": d, "elasticity": el})
    out.sort(key=lambda r: (-abs(r["elasticity"]) if not math.isnan(r["elasticity"]) else 0, r["input"]))
    return out


LEVER_KINDS = ("plan", "workload")


def is_lever(ws, nid: str) -> bool:
    """Whether input ``nid`` is a choice of the plan (a field or block parameter of a plan or a
    workload: GPUs, MFU, batch, deadline) rather than a property of what it runs on (a model's
    layers, a device's bandwidth)."""
    n = ws.nodes.get(nid)
    d = ws.decls.get(n.owner) if n is not None else None
    return d is not None and d.ast.kind in LEVER_KINDS


def requirement_drivers(ws, req, top: int | None = None) -> list[dict]:
    """Inputs ranked by the elasticity of ``lhs/rhs`` of requirement ``req`` (a
    :class:`~dsl.evaluate.workspace.Requirement`): how strongly a 1 % change of each moves the
    margin.  The plan's own choices (:func:`is_lever`) come first, each group by decreasing
    |elasticity|: the first rows are what the user can change."""
    ratio = req.lhs / req.rhs if req.rhs != 0 else req.lhs
    rows = [r for r in elasticities(ws, ratio) if r["elasticity"] == r["elasticity"] and r["elasticity"] != 0]
    for r in rows:
        r["lever"] = is_lever(ws, r["input"])
    rows.sort(key=lambda r: not r["lever"])          # stable: elasticity order within each group
    return rows[:top] if top else rows


def tornado(ws, expr, inputs: list[str] | None = None) -> list[dict]:
    """``expr`` evaluated at both ends of each input's declared range (others nominal).

    :returns: ``[{"input", "lo", "hi", "y_lo", "y_hi", "y0"}]`` in base units, sorted by
        decreasing swing |y_hi − y_lo|; inputs without a declared range are skipped.
    """
    meter = _meter()
    full = full_expression(ws, expr)
    at = nominal_floats(ws)
    y0 = _num(full, at, meter)
    dep = set(inputs_of(ws, full))
    names = inputs if inputs is not None else sorted(n for n in dep if ws.nodes[n].range is not None)
    out = []
    for nid in names:
        n = ws.nodes[nid]
        if n.range is None or nid not in dep:
            continue
        x = sp.Symbol(nid, real=True)
        ys = []
        for b in n.range:
            a2 = dict(at)
            a2[x] = b
            ys.append(_num(full, a2, meter))
        out.append({"input": nid, "lo": float(n.range[0]), "hi": float(n.range[1]), "y_lo": ys[0],
                    "y_hi": ys[1], "y0": y0})
    out.sort(key=lambda r: (-abs(r["y_hi"] - r["y_lo"]), r["input"]))
    return out


def _holds(op: str, lv: float, rv: float) -> bool:
    tol = 1e-12 * max(abs(lv), abs(rv), 1e-300)
    return {"<=": lv <= rv + tol, ">=": lv >= rv - tol, "<": lv < rv - tol, ">": lv > rv + tol,
            "==": abs(lv - rv) <= tol}[op]


_SIDES: dict = {}      # (workspace id, requirement) -> (workspace, compiled sides): one report's scans


def compile_sides(ws, req):
    """Both sides of requirement ``req`` compiled once, as float functions of all the inputs
    they depend on (``lambdify`` with common subexpressions): ``(sides, symbols, nominal
    floats, f_lhs, f_rhs)``; cached per workspace and requirement."""
    key = (id(ws), req.plan, req.name, req.lhs, req.rhs)
    got = _SIDES.get(key)
    hit = got[1] if got is not None and got[0] is ws else None
    if hit is None:
        sides = [full_expression(ws, e) for e in (req.lhs, req.rhs)]
        syms = sorted(set().union(*(e.free_symbols for e in sides)), key=lambda s: s.name)
        at = nominal_floats(ws)
        x0 = [float(at[s]) if s in at else float("nan") for s in syms]
        fs = [lambdify(syms, e, modules="math", cse=True) for e in sides]
        hit = (sides, syms, x0, fs[0], fs[1])
        if len(_SIDES) > 256:
            _SIDES.clear()
        _SIDES[key] = (ws, hit)
    return hit


def break_even(ws, req, nid: str) -> dict:
    """The value of input ``nid`` at which requirement ``req`` flips, others nominal.

    :returns: ``{"input", "nominal", "value", "holds"}`` in base units: ``value`` is the
        boundary nearest the nominal value inside the input's allowed range (None: never),
        ``holds`` says on which side the requirement holds (``"<="``/``">="``) or None.  For a
        whole-number input the value is the nearest whole number on the holding side (``whole``:
        True), or None when that number is outside the input's range or does not hold.
    """
    from dsl.results.roots import bisect_root, param_domain, in_domain, sign_changes

    x = sp.Symbol(nid, real=True)
    x0 = float(ws.nodes[nid].nominal)       # an input's nominal value (what nominal_floats holds)
    sides, syms, args0, f_l, f_r = compile_sides(ws, req)
    pos = syms.index(x) if x in syms else None

    class _F:
        def __init__(self, f):
            self.f = f

        def __call__(self, v):
            a = list(args0)
            a[pos] = v
            return self.f(*a)

    fs = [_F(f_l), _F(f_r)] if pos is not None else []

    def holds(v: float):
        try:
            lv, rv = float(fs[0](v)), float(fs[1](v))
        except (ZeroDivisionError, ValueError, TypeError, OverflowError):
            return None
        if math.isnan(lv) or math.isnan(rv):
            return None
        return _holds(req.op, lv, rv)

    def fn(v: float) -> float:
        h = holds(v)
        return float("nan") if h is None else (1.0 if h else -1.0)

    out = {"input": nid, "nominal": x0, "value": None, "holds": None}
    if req.op == "==" or not any(x in s.free_symbols for s in sides):
        return out
    dom = param_domain(ws.param_specs.get(nid), x0)
    roots = [bisect_root(fn, a, b, prefer_positive=True) for a, b in sign_changes(fn, x0 if x0 else 1.0)]
    roots = [r for r in roots if in_domain(r, dom)]
    if not roots:
        return out
    v = min(roots, key=lambda r: abs(r - x0))
    step = abs(v) * 1e-6 or 1e-9
    up, down = holds(v + step), holds(v - step)
    out["value"] = v
    out["holds"] = ">=" if up and not down else "<=" if down and not up else None
    spec = ws.param_specs.get(nid)
    if out["holds"] and spec is not None and (spec.kind == "int" or spec.whole):
        # a whole-number input (GPUs, micro-batch): the nearest whole value on the side where it
        # holds, in the input's own unit; none when that value leaves its allowed range
        from dsl.engine.units import parse_unit
        scale = float(parse_unit(spec.unit).scale) if spec.unit else 1.0
        w = (math.ceil(v / scale - 1e-9) if out["holds"] == ">=" else math.floor(v / scale + 1e-9)) * scale
        if in_domain(w, dom) and holds(w):
            out["value"], out["whole"] = w, True
        else:
            out["value"], out["holds"] = None, None
    return out


def requirement_report(ws, req, top: int = 3) -> dict:
    """Margin and drivers of one requirement: ``lhs``, ``rhs``, ``margin`` (rhs − lhs for
    ``<=``/``<``, lhs − rhs otherwise; base units), ``relative`` margin (of rhs) and the
    ``top`` drivers, each with its elasticity and break-even value."""
    lv, rv = float(ws.subs_value(req.lhs)), float(ws.subs_value(req.rhs))
    margin = rv - lv if req.op in ("<=", "<") else lv - rv
    drivers = requirement_drivers(ws, req, top)
    for d in drivers:
        d["break_even"] = break_even(ws, req, d["input"])
    return {"plan": req.plan, "name": req.name, "lhs": lv, "rhs": rv, "op": req.op, "unit": req.unit,
            "margin": margin, "relative": margin / abs(rv) if rv else float("nan"), "drivers": drivers}

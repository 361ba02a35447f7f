"""Root finding for break-even queries (:mod:`dsl.results.solver`): the branch of each
``Max``/``Min``/``Piecewise`` active at a point, exact roots of the active branch (a linear
numerator's −c₀/c₁ without sympy's general solver), residuals evaluated with mpmath under a
magnitude bound, every sign change on a geometric grid refined by bisection, and the target's
domain and the intervals where a relation holds.
"""
from __future__ import annotations

import sympy as sp

from dsl.engine.piecewise import lambdify


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


_POLY: dict = {}       # (e, x) -> (numerator, denominator, Poly of the numerator in x), or the error


def numer_poly(e, x):
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


def linear_root(e, x):
    """The exact root −c₀/c₁ of ``e = 0`` in ``x`` when the numerator of ``e`` over a common
    denominator is linear in ``x``, has no float, and the denominator does not vanish there;
    else None."""
    if e.has(sp.Float):
        return None
    try:
        n, d, p = numer_poly(e, x)
    except sp.PolynomialError:
        return None
    if p.degree() != 1:
        return None
    c1, c0 = p.all_coeffs()
    r = -c0 / c1
    return r if d.xreplace({x: r}).is_zero is not True else None


def exact_roots(e, x) -> list:
    """The roots of ``e = 0`` in ``x`` (exact; their values are what ``sympy.solve`` gives,
    not necessarily its printed form).  When the numerator of
    ``e`` (over a common denominator) is linear in ``x`` — a break-even query usually is — the
    root is its exact −c₀/c₁ (:func:`linear_root`), found without sympy's general solver
    (which costs tens of milliseconds per call); anything else (higher degree, ``x`` under a
    function, floats, a root where the denominator vanishes) goes to ``sympy.solve``."""
    r = linear_root(e, x)
    return [r] if r is not None else sp.solve(e, x)


_STEPS, _RATIO = 80, 1.25


def grid_bounds(base: float) -> tuple[float, float]:
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


def truth_intervals(holds_at, roots: list[float], dom: tuple = (None, None, False)) -> list[tuple]:
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

"""Piecewise-linear sums built without sympy's pairwise simplification.

``sum(sp.Max(0, x - c) for x in xs)`` costs milliseconds per term: every evaluated ``Max``
searches its arguments for provable orderings and every ``+`` re-sorts the growing sum.  The
helpers here build the same exact expression in one pass: equal terms are collected first
(``n · max(0, x − c)``), each ``Max`` is left unevaluated (``evaluate=False``) and the sum is
one ``Add``.  The expression is exact for every input value, so ``plan explain`` and ``plan
solve`` see the true piecewise-linear form; its nominal value, like any quantity's, comes from
substituting numbers, which evaluates each ``Max`` on numbers at once.
"""
from __future__ import annotations

from collections import Counter


def hinge(x, c=0):
    """``max(0, x − c)`` as an unevaluated sympy ``Max`` (a number when both are numbers).

    ``x`` is a sympy expression or a Python number (strings are refused, as everywhere)."""
    import sympy as sp

    from .nodes import as_expr

    d = as_expr(x) - c
    if d.is_number:
        return sp.Max(0, d)
    return sp.Max(0, d, evaluate=False)


def hinge_sum(xs, c=0, weights=None):
    """``Σ_i w_i · max(0, x_i − c)`` with equal ``x_i`` collected: O(distinct terms)."""
    import sympy as sp

    n: Counter = Counter()
    for i, x in enumerate(xs):
        n[x] += 1 if weights is None else weights[i]
    return sp.Add(*[k * hinge(x, c) for x, k in n.items()]) if n else sp.Integer(0)


def shortfall_sum(xs, c):
    """``Σ_i max(0, c − x_i)`` (unused capacity), equal ``x_i`` collected."""
    import sympy as sp

    n = Counter(xs)
    return sp.Add(*[k * hinge(c, x) for x, k in n.items()]) if n else sp.Integer(0)


def max_of(xs):
    """``max(x_1, …)`` of distinct expressions, unevaluated (no pairwise simplification)."""
    import sympy as sp

    xs = list(dict.fromkeys(xs))
    if not xs:
        raise ValueError("max_of() of no terms")
    if len(xs) == 1:
        return xs[0]
    if all(getattr(x, "is_number", False) for x in xs):
        return sp.Max(*xs)
    return sp.Max(*xs, evaluate=False)


_REAL_ONLY = None    # the assumptions of a node's symbol: real, nothing else


def ceiling_of(x):
    """``sympy.ceiling(x)``, the same expression, without sympy's assumption queries where they
    cannot simplify it.

    For x = c · Π sᵢ^±1 — a nonzero rational c times distinct symbols that are real and carry no
    other assumption (node symbols, :func:`dsl.engine.nodes.symbol`), each to the power 1 or −1:
    a ratio such as gpus / gpus_per_host — x takes the values c, −c and 1/2 (some sᵢ = ±1, one
    scaled), so no rule of ``ceiling`` applies (x is not provably an integer, infinite, imaginary,
    zero, positive or negative) and sympy returns ``ceiling(x)`` unevaluated after asking each of
    those questions (milliseconds for a ratio of three symbols).  This builds that expression
    directly.  Anything else (numbers included): ``sympy.ceiling(x)``.
    """
    import sympy as sp

    global _REAL_ONLY
    if isinstance(x, sp.Basic) and not x.is_number:
        if _REAL_ONLY is None:
            _REAL_ONLY = sp.Symbol("x", real=True).assumptions0
        factors = x.args if x.is_Mul else (x,)
        seen = set()
        ok = True
        for i, f in enumerate(factors):
            if i == 0 and f.is_Rational and x.is_Mul:
                continue
            base = f.base if f.is_Pow and f.exp in (1, -1) else f
            if not base.is_Symbol or base.assumptions0 != _REAL_ONLY or base in seen:
                ok = False
                break
            seen.add(base)
        if ok and seen:
            return sp.ceiling(x, evaluate=False)
    return sp.ceiling(x)


class NotRational(Exception):
    """The expression is not a rational function of rational numbers after substitution."""


# a power is computed exactly only below this many bits (a larger one goes to sympy, whose
# callers bound powers first: see ValuesMixin._powers_in_range)
_POW_BITS = 4096


def exact_rational(expr, subs: dict):
    """The exact value of ``expr.xreplace(subs)`` as a :class:`fractions.Fraction`, computed
    with Python's rational arithmetic, when every leaf becomes a rational number and every
    operation is one of ``+``, ``×``, an integer power, ``Max``, ``Min``, ``floor``,
    ``ceiling`` or ``Mod``; otherwise raises :class:`NotRational`.

    Rational arithmetic has one exact answer, so this is the number sympy builds for the same
    substitution, without sympy's per-operation cost (the canonical ordering of every ``Add``
    and ``Mul`` and its assumption queries: tens of microseconds each, against one for a
    ``Fraction``).  Shared sub-expressions are evaluated once."""
    import math
    from fractions import Fraction

    import sympy as sp

    Add, Mul, Pow, Max, Min, floor, ceiling, Mod = sp.Add, sp.Mul, sp.Pow, sp.Max, sp.Min, sp.floor, sp.ceiling, sp.Mod
    memo: dict = {}

    def number(v):
        if isinstance(v, int):
            return Fraction(v)
        if getattr(v, "is_Rational", False):
            return Fraction(int(v.p), int(v.q))
        raise NotRational

    def ev(e):
        r = memo.get(e)
        if r is not None:
            return r
        v = subs.get(e)
        if v is not None:
            r = number(v)
        elif e.is_Rational:
            r = Fraction(int(e.p), int(e.q))
        else:
            f, args = e.func, e.args
            if f is Add:
                r = Fraction(0)
                for a in args:
                    r += ev(a)
            elif f is Mul:
                r = Fraction(1)
                for a in args:
                    r *= ev(a)
            elif f is Pow:
                n = args[1]
                if not n.is_Integer:
                    raise NotRational
                b, n = ev(args[0]), int(n)
                if (b == 0 and n < 0) or abs(n) * max(b.numerator.bit_length(), b.denominator.bit_length()) > _POW_BITS:
                    raise NotRational
                r = b ** n
            elif f is Max:
                r = max(ev(a) for a in args)
            elif f is Min:
                r = min(ev(a) for a in args)
            elif f is floor:
                r = Fraction(math.floor(ev(args[0])))
            elif f is ceiling:
                r = Fraction(math.ceil(ev(args[0])))
            elif f is Mod:                   # x − y·⌊x/y⌋, as sympy's Mod of numbers
                y = ev(args[1])
                if y == 0:
                    raise NotRational
                r = ev(args[0]) % y
            else:
                raise NotRational
        memo[e] = r
        return r

    return ev(expr)


def subs_numbers(expr, subs: dict):
    """``expr.xreplace(subs)``, computed as fast as it is exact.

    When every leaf becomes a rational number and the operations are rational
    (:func:`exact_rational`), the value is computed with Python fractions and returned as a
    sympy ``Rational``.  Otherwise sympy substitutes, except that a ``Max``/``Min`` of many
    arguments whose arguments all become numbers is reduced by plain comparisons, in linear
    time (sympy's constructor compares every pair of arguments).  Same result either way."""
    import sympy as sp

    try:
        r = exact_rational(expr, subs)
    except NotRational:
        pass
    else:
        return sp.Integer(r.numerator) if r.denominator == 1 else sp.Rational(r.numerator, r.denominator)

    MaxMin = (sp.Max, sp.Min)

    def sub(e):
        v = subs.get(e)
        if v is not None:
            return v
        args = e.args
        if not args:
            return e
        new = [sub(a) for a in args]
        if isinstance(e, MaxMin) and len(new) > 8 and all(x.is_number and x.is_comparable for x in new):
            best = new[0]
            if isinstance(e, sp.Max):
                for x in new[1:]:
                    if (x > best) == sp.true:
                        best = x
            else:
                for x in new[1:]:
                    if (x < best) == sp.true:
                        best = x
            return best
        if all(x is a for x, a in zip(new, args)):
            return e
        return e.func(*new)

    return sub(expr)


def substitute(expr, mapping: dict):
    """``expr.xreplace(mapping)`` for substituting expressions (a quantity's definition for
    its symbol), except that a ``Max``/``Min`` whose new arguments are not all numbers is
    rebuilt unevaluated.  sympy's constructor would search the symbolic arguments for provable
    orderings (tens of milliseconds for arguments with ``floor`` or long products) and can
    rarely drop one; the unevaluated form is the same function of the inputs, and a ``Max`` of
    numbers is still reduced to its number.  Exact; linear in the size of the expression."""
    import sympy as sp

    MaxMin = (sp.Max, sp.Min)

    def node(e, new, same):
        if same:
            return e
        if isinstance(e, MaxMin) and not all(x.is_number for x in new):
            new = list(dict.fromkeys(new))
            return new[0] if len(new) == 1 else e.func(*new, evaluate=False)
        return e.func(*new)

    return _rebuild(expr, node, mapping)


def _rebuild(expr, node, mapping: dict | None = None):
    """``expr`` rebuilt bottom up, each distinct sub-expression once: a leaf or an expression in
    ``mapping`` is replaced by its mapping (itself when absent); any other ``e`` by
    ``node(e, new_args, same)``, ``same`` when no argument changed."""
    memo: dict = {}

    def sub(e):
        if mapping is not None:
            v = mapping.get(e)
            if v is not None:
                return v
        args = e.args
        if not args:
            return e
        r = memo.get(e)
        if r is None:
            new = [sub(a) for a in args]
            r = memo[e] = node(e, new, all(x is a for x, a in zip(new, args)))
        return r

    return sub(expr)


def rename(expr, mapping: dict):
    """``expr.xreplace(mapping)`` for a renaming of symbols: :func:`substitute`, whose
    unevaluated ``Max``/``Min`` are exactly what a renaming needs — the arguments are the same
    under another name, so comparing them again (sympy's constructor does, at milliseconds per
    ``Max``) cannot remove any."""
    return substitute(expr, mapping)


def lambdify(symbols, expr, **kw):
    """``sympy.lambdify(symbols, expr, **kw)`` with the symbols first renamed to plain
    identifiers by :func:`rename`.  Node symbols (``gpus48.mfu``) are not identifiers, and
    lambdify's own renaming rebuilds every ``Max``/``Min`` of the expression evaluated, which
    costs more than the rest of the compilation.  With ``cse=True`` the common subexpressions
    are found by :func:`_cse`, which leaves the ``Max``/``Min`` it rebuilds unevaluated too.
    Same function, same floats."""
    import sympy as sp

    single = isinstance(symbols, sp.Basic)
    syms = [symbols] if single else list(symbols)
    new = [sp.Symbol(f"_x{i}", **s.assumptions0) for i, s in enumerate(syms)]
    mapping = dict(zip(syms, new))
    if isinstance(expr, (list, tuple)):
        body = type(expr)(rename(e, mapping) for e in expr)
    else:
        body = rename(expr, mapping)
    if kw.get("cse") is True:
        kw["cse"] = _cse
    return sp.lambdify(new[0] if single else new, body, **kw)


_KEPT: tuple = ()


def _kept_classes() -> tuple:
    """``(KeptMax, KeptMin)``: ``Max``/``Min`` whose constructor does not evaluate unless told
    to (``evaluate=True``); printed, compared by ``isinstance`` and evaluated as ``Max``/``Min``."""
    global _KEPT
    if not _KEPT:
        import sympy as sp

        class KeptMax(sp.Max):
            def __new__(cls, *args, evaluate=False, **assumptions):
                return sp.Max.__new__(cls, *args, evaluate=evaluate, **assumptions)

        class KeptMin(sp.Min):
            def __new__(cls, *args, evaluate=False, **assumptions):
                return sp.Min.__new__(cls, *args, evaluate=evaluate, **assumptions)
        _KEPT = (KeptMax, KeptMin)
    return _KEPT


def _cse(expr):
    """``sympy.cse(expr, list=False)`` (what lambdify's ``cse=True`` calls) without comparing
    the arguments of a ``Max``/``Min`` again: sympy's cse rebuilds every expression one of whose
    arguments became a common-subexpression symbol, and sympy's ``Max`` constructor compares its
    symbolic arguments pairwise (≈1 s for the 59 windows of a trace, 6917 comparisons).  Each
    ``Max``/``Min`` is swapped for a subclass whose constructor leaves it unevaluated during the
    search, and back to an unevaluated ``Max``/``Min`` afterwards (what the printer knows), so
    the compiled function is the same."""
    import sympy as sp
    from sympy.simplify.cse_main import cse

    kmax, kmin = _kept_classes()

    def swap(expr, to_max, to_min):
        def node(e, new, same):
            if isinstance(e, sp.Max) and type(e) is not to_max:
                return to_max(*new, evaluate=False)
            if isinstance(e, sp.Min) and type(e) is not to_min:
                return to_min(*new, evaluate=False)
            return e if same else e.func(*new)
        return (_rebuild(expr, node) if isinstance(expr, sp.Basic)
                else type(expr)(_rebuild(e, node) for e in expr))

    subs, reduced = cse(swap(expr, kmax, kmin), list=False)
    return ([(v, swap(e, sp.Max, sp.Min)) for v, e in subs], swap(reduced, sp.Max, sp.Min))

"""Property tests of the solver: answers agree with closed forms computed here."""
from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsl.results.evaluation import evaluate_file as Workspace
from dsl.syntax.parser import parse_query
from dsl.results.solver import solve_query

pos = st.fractions(min_value=Fraction(1, 10), max_value=Fraction(1000)).map(lambda f: f.limit_denominator(1000))


def _ws(text: str) -> Workspace:
    return Workspace("mem.plan", text=text)


def _lit(f: Fraction) -> str:
    return f"({f.numerator} / {f.denominator})"


@settings(max_examples=60, deadline=None)
@given(a=pos, b=pos, c=pos, x0=pos)
def test_linear_break_even(a, b, c, x0):
    """y = a·x + b seconds; solving x for y == c gives (c − b)/a exactly."""
    ws = _ws(f"workload w {{ x = {_lit(x0)} * 1 s; y = {_lit(a)} * x + {_lit(b)} * 1 s }}")
    s = solve_query(ws, parse_query(f"w.x for w.y == {_lit(c)} * 1 s"))
    expected = float((c - b) / a)
    assert s.value == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert s.method == "symbolic"


@settings(max_examples=60, deadline=None)
@given(a=pos, b=pos, c=pos, k=pos)
def test_inverse_break_even(a, b, c, k):
    """t = k/x + b (like compute time over efficiency); x for t == b + c gives k/c."""
    ws = _ws(f"workload w {{ x = {_lit(a)}; t = {_lit(k)} * 1 s / x + {_lit(b)} * 1 s }}")
    s = solve_query(ws, parse_query(f"w.x for w.t == {_lit(b + c)} * 1 s"))
    assert s.value == pytest.approx(float(k / c), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(a=pos, b=pos, x0=pos, extra=pos)
def test_max_plus_branch(a, b, x0, extra):
    """y = max(a·x, b) + 1 s; a target above b + 1 s is reached on the a·x branch."""
    target = b + 1 + extra
    ws = _ws(f"workload w {{ x = {_lit(x0)} * 1 s; y = max({_lit(a)} * x, {_lit(b)} * 1 s) + 1 s }}")
    s = solve_query(ws, parse_query(f"w.x for w.y == {_lit(target)} * 1 s"))
    assert s.value == pytest.approx(float((target - 1) / a), rel=1e-6)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(min_value=1, max_value=10**6), per=pos, goal=st.integers(min_value=2, max_value=200))
def test_ceil_goes_numeric_and_lands_on_the_step(n, per, goal):
    """steps = ceil(n / x); solving x for steps·per <= goal·per lands on the jump x = n/goal
    (a bracketed numeric root of a step function), and the relation holds above it."""
    ws = _ws(f"workload w {{ x = 1; t = ceil({n} / x) * {_lit(per)} * 1 s }}")
    s = solve_query(ws, parse_query(f"w.x for w.t <= {goal} * {_lit(per)} * 1 s"))
    assert s.method == "numeric"
    assert s.value == pytest.approx(n / goal, rel=1e-9)
    assert s.holds == "w.x >= boundary"


# ---------------------------------------------------------------- exact numeric substitution
def _exprs():
    """Random expressions over three symbols with the operations nominal values use."""
    import sympy as sp
    x, y, z = sp.symbols("x y z")
    leaves = st.sampled_from([x, y, z]) | st.fractions(min_value=-50, max_value=50, max_denominator=12).map(
        lambda f: sp.Rational(f.numerator, f.denominator))

    def built(f):
        """f as a strategy map that drops a node sympy refuses to build (the floor of a constant
        that became complex under a square root, say)."""
        def g(args):
            try:
                return f(*args)
            except (ValueError, TypeError, ArithmeticError):
                return None
        return g

    def grow(kids):
        two = st.tuples(kids, kids)
        one = st.tuples(kids)
        nodes = st.one_of(
            two.map(built(lambda a, b: a + b)), two.map(built(lambda a, b: a * b)),
            st.tuples(kids, st.integers(-2, 2)).map(built(sp.Pow)),
            st.lists(kids, min_size=2, max_size=10).map(lambda a: built(lambda *a: sp.Max(*a, evaluate=False))(a)),
            st.lists(kids, min_size=2, max_size=10).map(lambda a: built(lambda *a: sp.Min(*a, evaluate=False))(a)),
            one.map(built(sp.floor)), one.map(built(sp.ceiling)), one.map(built(sp.sqrt)),
            # as the layout model builds it: unevaluated only over symbols, never by a zero constant
            two.filter(lambda t: not (t[1].is_number and t[1] == 0)).map(
                built(lambda a, b: sp.Mod(a, b, evaluate=bool(a.is_number and b.is_number)))))
        # a plan's constants are real and finite: no I, zoo or nan left unevaluated in a node
        return nodes.filter(lambda e: e is not None and not e.has(sp.I, sp.zoo, sp.nan, sp.oo))
    return st.recursive(leaves, grow, max_leaves=8), (x, y, z)


_EXPRS, _XYZ = _exprs()


@pytest.mark.filterwarnings("ignore:Generating overly large repr")   # the recursive strategy's own repr
@settings(max_examples=150, deadline=None)
@given(e=_EXPRS, vals=st.tuples(*[st.fractions(min_value=-20, max_value=20, max_denominator=9)] * 3))
def test_numeric_substitution_is_sympys_exact_value(e, vals):
    """subs_numbers (Python fractions where the expression is rational after substitution,
    sympy otherwise) gives the same number as sympy's own substitution, or the same failure."""
    import sympy as sp

    from dsl.engine.piecewise import subs_numbers
    subs = {s: sp.Rational(v.numerator, v.denominator) for s, v in zip(_XYZ, vals)}

    def outcome(f):
        try:
            return f()
        except (ValueError, TypeError, ArithmeticError) as exc:
            return type(exc)
    mine = outcome(lambda: subs_numbers(e, subs))
    ref = outcome(lambda: e.xreplace(subs).doit())
    if isinstance(ref, type) or isinstance(mine, type):
        assert mine == ref
    else:
        assert mine == ref or (mine.is_number and ref.is_number and sp.simplify(mine - ref) == 0), (e, subs)

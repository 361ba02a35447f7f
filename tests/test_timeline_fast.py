"""Engine additions made for large pipeline timelines (dsl/engine/timeline.py): the max-plus
makespan over Pareto-optimal path forms, its form limit, the topological fast path, the
pool index and collected pool totals.  Expected values are worked by hand."""
from __future__ import annotations

import sympy as sp

from dsl.engine.timeline import Timeline, no_gc


def test_full_expr_keeps_only_non_dominated_paths():
    a, b, c = sp.symbols("a b c", nonnegative=True)
    tl = Timeline("p", "t")
    tl.add("x", a, "r1")
    tl.add("y", a + b, "r2")                 # dominates x: a + b >= a for b >= 0
    tl.add("z", c, "r3")
    tl.add("end", 1, "r4", after=["x", "y", "z"])
    e = tl.full_expr()
    # max(a, a + b, c) + 1 -> the a-only path is dropped
    assert isinstance(e, sp.Max) and set(e.args) == {a + b + 1, c + 1}
    assert e.xreplace({a: 2, b: 3, c: 4}) == 6
    assert e.xreplace({a: 2, b: 3, c: 9}) == 10


def test_full_expr_collects_scaled_durations_of_one_input():
    f = sp.Symbol("f")
    tl = Timeline("p", "t")
    tl.add("c5", f * sp.Rational(5, 9), "r")
    tl.add("c4", f * sp.Rational(4, 9), "r")
    assert sp.simplify(tl.full_expr() - f) == 0      # 5/9 f + 4/9 f on one resource


def _fan(coeffs, a, b):
    """Parallel branches of durations p·a + q·b into one sink (makespan = max over branches)."""
    tl = Timeline("p", "t")
    for i, (p, q) in enumerate(coeffs):
        tl.add(f"b{i}", p * a + q * b, f"r{i}")
    tl.add("end", 0, "z", after=[f"b{i}" for i in range(len(coeffs))])
    return tl


def test_full_expr_pareto_with_rational_and_huge_coefficients():
    """Fourteen incomparable branches k/3·a + (13−k)/7·b (k = 0..13) and six dominated ones
    (k/3·a + (12−k)/7·b ≤ the k-th): the makespan is the max of exactly the fourteen, whatever
    the size of the coefficients (int64 columns, or Python ints past 2^62)."""
    a, b = sp.symbols("a b", nonnegative=True)
    for scale in (sp.Integer(1), sp.Integer(2) ** 70):
        keep = [(scale * sp.Rational(k, 3), scale * sp.Rational(13 - k, 7)) for k in range(14)]
        drop = [(scale * sp.Rational(k, 3), scale * sp.Rational(12 - k, 7)) for k in range(6)]
        for coeffs in (keep + drop, drop + keep, keep[:5] + drop[:2]):
            e = _fan(coeffs, a, b).full_expr(limit=64)
            want = {p * a + q * b for p, q in coeffs if (p, q) in keep}
            assert set(e.args if isinstance(e, sp.Max) else [e]) == want


def test_full_expr_gives_up_beyond_the_form_limit():
    xs = sp.symbols("x0:6", nonnegative=True)
    tl = Timeline("p", "t")
    for i, x in enumerate(xs):
        tl.add(f"a{i}", x, f"r{i}")
    tl.add("end", 0, "z", after=[f"a{i}" for i in range(6)])
    assert tl.full_expr(limit=3) is None          # six incomparable paths
    assert len(tl.full_expr(limit=6).args) == 6


def test_topological_fast_path_and_general_order_agree():
    preds = [[], [(0, None, "finish")], [(1, None, "finish")]]
    assert Timeline.topo(3, preds) == [0, 1, 2]
    preds = [[(2, None, "finish")], [], [(1, None, "finish")]]
    assert Timeline.topo(3, preds) == [1, 2, 0]
    assert Timeline.topo(2, [[(1, None, "finish")], [(0, None, "finish")]]) is None


def test_edges_are_cached_until_the_next_add():
    tl = Timeline("p", "t")
    tl.add("a", 1, "r")
    first = tl.edges()
    assert tl.edges() is first
    tl.add("b", 1, "r")
    assert tl.edges()[0] == ["a", "b"]


def test_pool_index_and_collected_total():
    B = sp.Symbol("B")
    tl = Timeline("p", "t")
    tl.add("f", 1, "gpu")
    for i in range(3):
        tl.hold(f"h{i}", B, "s0", start=("f", "finish"), end=None)
    tl.hold("o", 2 * B, "s1", start="f")
    assert [h.id for h in tl.holds_in("s0")] == ["h0", "h1", "h2"]
    assert tl.pools() == ["s0", "s1"]
    assert tl.pool_total("s0") == 3 * B
    tl.hold("h3", B, "s0")
    assert tl.pool_total("s0") == 4 * B               # the index is rebuilt after a new hold


def test_no_gc_restores_the_collector():
    import gc
    assert gc.isenabled()
    with no_gc():
        assert not gc.isenabled()
    assert gc.isenabled()

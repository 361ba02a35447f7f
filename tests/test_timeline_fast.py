"""Engine additions made for large pipeline timelines (dsl/engine/timeline/): the max-plus
makespan over Pareto-optimal path forms, its form limit, the topological fast path, the
pool index and collected pool totals.  Expected values are worked by hand."""
from __future__ import annotations

import pytest
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


def _pareto_path(arrays: bool, monkeypatch) -> None:
    """Make the Pareto filter of path forms take its int64 blocks (numpy) or its pairwise
    Python comparison whatever the number of forms (both must keep the same rows)."""
    import dsl.engine.timeline.maxplus as T
    monkeypatch.setattr(T, "PARETO_ARRAYS", 0 if arrays else 10 ** 9)
    monkeypatch.setattr(T, "PARETO_IMPORT", 0 if arrays else 10 ** 9)


@pytest.mark.parametrize("arrays", [True, False])
def test_full_expr_pareto_of_hundreds_of_forms(arrays, monkeypatch):
    """300 incomparable branches k·a + (299−k)·b and 300 dominated ones (each ≤ one of them,
    shuffled in): more forms than one block of the int64 comparison, so a row is checked
    against the rows kept from earlier blocks and against its own block."""
    import random

    _pareto_path(arrays, monkeypatch)

    a, b = sp.symbols("a b", nonnegative=True)
    keep = [(k, 299 - k) for k in range(300)]
    drop = [(k, 298 - k) for k in range(299)] + [(0, 0)]
    coeffs = keep + drop
    random.Random(7).shuffle(coeffs)
    e = _fan(coeffs, a, b).full_expr(limit=10 ** 9)
    assert set(e.args) == {p * a + q * b for p, q in keep}


@pytest.mark.parametrize("arrays", [True, False])
def test_full_expr_pareto_agrees_with_the_definition(arrays, monkeypatch):
    """Random fans of 1-60 branches over three inputs: the Max keeps exactly the coefficient
    rows that no other row is ≥ in every column (checked pair by pair here)."""
    import random

    _pareto_path(arrays, monkeypatch)

    xs = sp.symbols("x0:3", nonnegative=True)
    rng = random.Random(3)
    for _ in range(40):
        rows = list({tuple(rng.randint(0, 4) for _ in xs) for _ in range(rng.randint(1, 60))})
        rows = [r for r in rows if any(r)] or [(1, 0, 0)]
        tl = Timeline("p", "t")
        for i, r in enumerate(rows):
            tl.add(f"b{i}", sum(c * x for c, x in zip(r, xs)), f"r{i}")
        tl.add("end", 0, "z", after=[f"b{i}" for i in range(len(rows))])
        want = {sum(c * x for c, x in zip(r, xs)) for r in rows
                if not any(o != r and all(p >= q for p, q in zip(o, r)) for o in rows)}
        e = tl.full_expr(limit=10 ** 9)
        assert set(e.args if isinstance(e, sp.Max) else [e]) == want


def test_deferred_makespan_knows_its_symbols_and_value_before_it_is_built():
    """max(a, a + b, c) + 1 with a = 2, b = 3/2, c = 9/4: 9/2, from the forms alone; the
    expression is built on the first read only."""
    a, b, c = sp.symbols("a b c", nonnegative=True)
    tl = Timeline("p", "t")
    tl.add("x", a, "r1")
    tl.add("y", a + b, "r2")
    tl.add("z", c, "r3")
    tl.add("end", 1, "r4", after=["x", "y", "z"])
    d = tl.full_expr_deferred()
    assert d.free_symbols == {a, b, c}
    assert d.exact({a: sp.Integer(2), b: sp.Rational(3, 2), c: sp.Rational(9, 4)}) == sp.Rational(9, 2)
    assert d.exact({a: sp.Integer(2), b: sp.Float(1.5), c: sp.Integer(1)}) is None   # not exact: declined
    e = d.get()
    assert d.get() is e and set(e.args) == {a + b + 1, c + 1}
    t2 = Timeline("p", "t")
    t2.add("x", a * b, "r1")                          # a non-linear term: built at once
    assert t2.full_expr_deferred().exact({a: sp.Integer(2), b: sp.Integer(3)}) is None


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


# ---------------------------------------------------------------- the array passes against a plain one
def _random_timeline(data):
    """A random timeline of up to 14 activities: integer durations (ties are frequent), lags,
    start-to-start edges, releases and shared resources (which chain their activities)."""
    from hypothesis import strategies as st
    n = data.draw(st.integers(1, 14))
    tl = Timeline("p", "t")
    acts = []
    for i in range(n):
        deps = []
        for j in data.draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else ():
            lag = data.draw(st.sampled_from([None, 0, 1, 2]))
            on = data.draw(st.sampled_from(["finish", "start"]))
            deps.append((f"a{j}", lag, on))
        dur = data.draw(st.integers(0, 5))
        rel = data.draw(st.sampled_from([None, None, 0, 3, 7]))
        res = data.draw(st.sampled_from([None, None, "r1", "r2"]))
        tl.add(f"a{i}", dur, res, after=deps, release=rel)
        acts.append((dur, rel, res, deps))
    return tl, acts


def _plain_schedule(acts):
    """Earliest starts, finishes and latest starts by the definitions, activity by activity
    (insertion order is topological here); a resource runs its activities in insertion order
    unless an activity names the resource's previous one itself."""
    n = len(acts)
    preds = [[] for _ in range(n)]               # (pred, lag, on)
    last = {}
    for i, (dur, rel, res, deps) in enumerate(acts):
        for name, lag, on in deps:
            preds[i].append((int(name[1:]), lag or 0, on))
        if res is not None:        # an explicit edge to the resource's previous activity replaces it
            if res in last and all(j != last[res] for j, _, _ in preds[i]):
                preds[i].append((last[res], 0, "finish"))
            last[res] = i
    S, F = [0] * n, [0] * n
    for i, (dur, rel, _, _) in enumerate(acts):
        ready = [(S[j] if on == "start" else F[j]) + lag for j, lag, on in preds[i]]
        S[i] = max(ready + ([rel] if rel is not None else []) + ([0] if not ready and rel is None else []))
        F[i] = S[i] + dur
    span = max(F)
    LS = [0] * n
    for i in range(n - 1, -1, -1):
        lf = span
        for k in range(i + 1, n):
            for j, lag, on in preds[k]:
                if j == i:
                    lf = min(lf, LS[k] - lag + (acts[i][0] if on == "start" else 0))
        LS[i] = lf - acts[i][0]
    return S, F, LS, preds, span


def test_array_schedule_matches_the_definitions():
    """Starts, finishes, slack and binding predecessors of the generation-by-generation array
    passes agree with a plain activity-by-activity computation on random timelines."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=200, deadline=None)
    @given(st.data())
    def check(data):
        tl, acts = _random_timeline(data)
        S, F, LS, preds, span = _plain_schedule(acts)
        sc = tl.compute(float)
        assert list(sc.start) == S and list(sc.finish) == F and sc.makespan == span
        assert list(sc.slack) == [max(0, l - s) for l, s in zip(LS, S)]
        for i, (dur, rel, _, _) in enumerate(acts):
            b = sc.binding.get(f"a{i}")
            ready = {j: (S[j] if on == "start" else F[j]) + lag for j, lag, on in preds[i]}
            if rel is not None and rel >= max(ready.values(), default=rel):
                assert b == "release"                 # a release binds on ties
            elif ready:
                j = int(b[0][1:])
                assert ready[j] == S[i]               # the binding predecessor sets the start
        path = sc.path                                # a chain of bindings ending at the makespan
        assert F[int(path[-1][1:])] == span
    check()


def test_expanded_terms_of_durations_with_max_factors_are_sympys():
    """The path forms read a duration's expanded terms; a Max/Min that is a plain factor is
    expanded once on its own (dsl.engine.timeline.maxplus._expanded_terms).  Reference: sympy.expand
    of the whole expression — the same terms (structurally) and coefficients, for plain
    factors, nested Max, shared Max, and the cases that must fall back to the whole expansion
    (a Max under a power or a function, two Max whose expansions coincide, a Max whose
    expansion decides it)."""
    from dsl.engine.timeline.maxplus import _expanded_terms
    L, m, h, f, e, p, w, q = sp.symbols("L m h f e p w q", real=True)
    gemm = sp.Max((f + 2 * h * (m + 1)) / (e * p), (2 * m + 4 * h) / (w * q))
    gemm2 = sp.Max(m * h * (f + 1) / (e * p), (m + h) * (f + 2) / (w * q))
    exprs = [
        L * (m * h * gemm + 3 * gemm2) + sp.Rational(7, 4) * m * h / w,      # roofline: plain factors
        L * (gemm - gemm2) * (1 + h) + 2 * gemm * gemm2,                     # products of two Max
        L * sp.Max(1, sp.Min(2, 16 / p)) * (h + m),                          # nested Min inside a Max
        sp.sqrt(gemm) * L + gemm2,                                           # a Max under a power
        sp.exp(gemm2) + L * gemm,                                            # … under a function
        L * sp.Max(h * (m + 1), 3) + L * sp.Max(h * m + h, 3, evaluate=False),   # two, one expansion
        L * sp.Max(2 * (h + 1), 2 * h + 1) + m,                              # expansion decides it
        0.3 * m * gemm + sp.Float("1.5") * L,                                # float coefficients
    ]
    for x in exprs:
        want = dict(sp.expand(x).as_coefficients_dict())
        got = dict(_expanded_terms(x))
        assert got == want, x
        assert {sp.srepr(t) for t in got} == {sp.srepr(t) for t in want}

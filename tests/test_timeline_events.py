"""Timeline.event_quantity: the time an activity starts or finishes, as a plan quantity —
exact max-plus on small timelines, the symbolic binding path on large ones.  Expected values
are worked by hand."""
from __future__ import annotations

import sympy as sp
import pytest

import dsl
from dsl.engine.timeline import Timeline


def num(subs):
    return lambda e: float(sp.sympify(e).xreplace(subs)) if not isinstance(e, (int, float)) else float(e)


def test_full_times_and_path_to():
    a, b = sp.symbols("a b", positive=True)
    tl = Timeline("p", "t")
    tl.add("x", a, "r1")
    tl.add("y", b, "r2")
    tl.add("z", 1, "r1", after=["y"])
    ids, st, fin = tl.full_times()
    i = ids.index("z")
    # z starts when x (same resource) and y are done: max(a, b); finishes 1 later
    assert st[i].xreplace({a: 2, b: 5}) == 5 and fin[i].xreplace({a: 7, b: 5}) == 8
    sc = tl.compute(num({a: 2, b: 5}))
    assert Timeline.path_to(sc, "z") == ["y", "z"]
    assert sp.simplify(tl.path_expr(sc, "z") - (b + 1)) == 0
    assert sp.simplify(tl.path_expr(sc, "z", at="start") - b) == 0


def _plan(write_plan, n):
    return write_plan(f"""
plan p {{
  use rl_loop {{ gen_time = 40 s; train_time = 16 s; sync_time = 4 s; iterations = {n} }}
}}
""")


def test_event_quantities_in_a_plan(write_plan):
    ws = dsl.load(_plan(write_plan, 3))
    # synchronous loop: the third sync finishes at 3 × 60 s, the second at 2 × 60 s
    assert ws.base_value("p.rl_sync_last") == 180 and ws.base_value("p.rl_sync_prev") == 120
    # the event quantity is exact max-plus: its expression keeps the Max over both sides
    expr = ws.full_expr("p.rl_async_last")
    names = {s.name for s in expr.free_symbols}
    assert expr.has(sp.Max) and {"p.rl_loop.gen_time", "p.rl_loop.train_time"} <= names


def test_event_quantity_on_large_timeline(write_plan, monkeypatch):
    import dsl.evaluate.graph
    monkeypatch.setattr(dsl.evaluate.graph, "FULL_LIMIT", 3)       # force the critical-path form
    ws = dsl.load(_plan(write_plan, 4))
    assert ws.base_value("p.rl_async_last") - ws.base_value("p.rl_async_prev") == 44
    assert ws.base_value("p.rl_sync_last") == 240


def test_unknown_activity_rejected():
    tl = Timeline("p", "t")
    with pytest.raises(ValueError):
        tl.event_quantity("x", "a", at="middle")

"""Engine helpers added for event models: symbolic activity times, hold areas (∫ M dt) and the
pruning of predecessors that cannot bind.  Values worked by hand."""
from __future__ import annotations

import sympy as sp

from dsl.engine.timeline import Timeline

GiB = 2 ** 30


def num(e):
    return float(sp.sympify(e))


def test_area_of_holds():
    a, b = sp.symbols("a b", positive=True)
    tl = Timeline("p", "t")
    tl.add("m1", 2, None)
    tl.add("t1", a, None, after=["m1"])
    tl.add("t2", b, None, after=["m1"])
    tl.add("m2", 3, None, after=["t1", "t2"])
    tl.hold("ctx", GiB, "kv", start=("m1", "finish"), end=("m2", "start"))
    ids, st, fin = tl.full_times()
    pos = {x: i for i, x in enumerate(ids)}
    area = tl.area_expr("kv", lambda x: st[pos[x]], lambda x: fin[pos[x]], tl.full_expr())
    assert area.xreplace({a: 6, b: 10}) == 10 * GiB          # max(6, 10) s of waiting
    assert area.xreplace({a: 12, b: 10}) == 12 * GiB


def test_chain_expr_with_start_lag():
    x = sp.Symbol("x", positive=True)
    tl = Timeline("p", "t")
    tl.add("net0", 38, None)
    tl.add("play0", 20, "spk", after=[("net0", x)])
    tl.add("play1", 20, "spk", after=[("play0", 20, "start")])
    sc = tl.compute(lambda e: float(sp.sympify(e).xreplace({x: 40})))
    assert sc.start[sc.index()["play0"]] == 78
    assert sp.simplify(tl.chain_expr(sc, "play0", "start") - (38 + x)) == 0
    assert sp.simplify(tl.chain_expr(sc, "play1", "finish") - (38 + x + 40)) == 0


def test_dominated_predecessor_is_pruned():
    a = sp.Symbol("a", positive=True)
    tl = Timeline("p", "t")
    tl.add("m1", a, "gpu")
    tl.add("tool", 1, "cpu", after=["m1"])
    tl.add("m2", 1, "gpu", after=["tool"])        # also after m1 on the gpu: m1 cannot bind
    _, st, _ = tl.full_times()
    assert not st[2].has(sp.Max)
    assert st[2] == a + 1

"""The shared event-model engine (dsl/engine/timeline/): schedules, critical paths, slack,
symbolic makespans and memory peaks from holds.  Expected values are worked by hand."""
from __future__ import annotations

import sympy as sp
import pytest

from dsl.engine.timeline import Timeline

GiB = 2 ** 30


def num(subs):
    return lambda e: float(sp.sympify(e).xreplace(subs)) if not isinstance(e, (int, float)) else float(e)


def test_chain_fork_join_and_critical_path():
    a, b, c = sp.symbols("a b c", positive=True)
    tl = Timeline("p", "t")
    tl.add("m1", a, "gpu", kind="model")
    tl.add("tool1", b, "tools1", after=["m1"])
    tl.add("tool2", c, "tools2", after=["m1"])
    tl.add("m2", 3, "gpu", after=["tool1", "tool2"])
    sc = tl.compute(num({a: 2, b: 6, c: 10}))
    # independent tools: 2 + max(6, 10) + 3 = 15 s; tool1 has 4 s of slack
    assert sc.makespan == 15
    assert sc.path == ["m1", "tool2", "m2"]
    assert sc.slack[sc.index()["tool1"]] == pytest.approx(4)
    assert sp.simplify(tl.path_expr(sc) - (a + c + 3)) == 0
    full = tl.full_expr()
    assert full.xreplace({a: 2, b: 6, c: 10}) == 15
    assert full.xreplace({a: 2, b: 12, c: 10}) == 17          # the other branch once b > c


def test_dependent_tools_on_one_resource():
    tl = Timeline("p", "t")
    tl.add("m1", 2, "gpu")
    tl.add("tool1", 6, "tools", after=["m1"])
    tl.add("tool2", 10, "tools", after=["m1"])   # same resource: runs after tool1
    tl.add("m2", 3, "gpu", after=["tool1", "tool2"])
    assert tl.compute(num({})).makespan == 21


def test_release_lag_and_start_to_start():
    tl = Timeline("p", "t")
    tl.add("copy", 0.5, "gpu", release=20)
    tl.add("upload", 16, "nic", after=["copy"])
    tl.add("commit", 0, None, after=[("upload", 0)])
    tl.add("probe", 1, "x", after=[("copy", 2, "start")])     # 2 s after the copy starts
    sc = tl.compute(num({}))
    i = sc.index()
    assert sc.finish[i["commit"]] == pytest.approx(36.5)
    assert sc.start[i["probe"]] == pytest.approx(22)
    assert sc.binding["copy"] == "release"
    assert float(tl.path_expr(sc)) == 36.5


def test_lag_is_part_of_symbolic_path():
    f, x = sp.symbols("f x", positive=True)
    tl = Timeline("p", "t")
    tl.add("F0", f, "s0")
    tl.add("F1", f, "s1", after=[("F0", x)])
    sc = tl.compute(num({f: 10, x: 1}))
    assert sc.makespan == 21
    assert sp.simplify(tl.path_expr(sc) - (2 * f + x)) == 0


def test_peak_from_lifetimes_and_reuse():
    tl = Timeline("p", "t")
    tl.add("fwd", 1, "gpu")
    tl.add("gather", 1, "gpu")
    tl.add("bwd", 1, "gpu")
    tl.hold("activations", 8 * GiB, "gpu", start="fwd", end="bwd")
    tl.hold("gather_buf", 4 * GiB, "gpu", start="gather", end="gather")
    sc = tl.compute(num({}))
    prof = tl.profile("gpu", num({}), sc)
    assert prof.peak == 12 * GiB
    assert prof.live == ["activations", "gather_buf"]
    # freed first: the buffer is released when the activations are allocated -> 8 GiB
    tl2 = Timeline("p", "t")
    tl2.add("gather", 1, "gpu")
    tl2.add("fwd", 1, "gpu")
    tl2.hold("gather_buf", 4 * GiB, "gpu", start="gather", end="gather")
    tl2.hold("activations", 8 * GiB, "gpu", start="fwd", end="fwd")
    p2 = tl2.profile("gpu", num({}), tl2.compute(num({})))
    assert p2.peak == 8 * GiB and p2.live == ["activations"]


def test_cycle_detected():
    tl = Timeline("p", "t")
    tl.add("a", 1, after=["b"])
    tl.add("b", 1, after=["a"])
    ids, preds = tl.edges()
    assert tl.topo(len(ids), preds) is None
    cyc = tl.find_cycle(ids, preds)
    assert set(cyc) == {"a", "b"}


def test_duplicate_activity_rejected():
    tl = Timeline("p", "t")
    tl.add("a", 1)
    with pytest.raises(ValueError):
        tl.add("a", 2)


def test_large_timeline_is_linear():
    # 4 stages x 2000 micro-batches of forward work, chained: makespan (m + p - 1) * t_f
    tl = Timeline("p", "t")
    p, m = 4, 2000
    for j in range(m):
        for s in range(p):
            tl.add(f"F{j}.{s}", 1, f"s{s}", after=[f"F{j}.{s-1}"] if s else [])
    sc = tl.compute(num({}))
    assert sc.makespan == m + p - 1
    assert len(sc.path) == m + p - 1

"""The plain-Python schedule of small timelines (``Timeline._compute_small``, used up to
``SMALL_LIMIT`` activities added one by one) against the numpy engine (``Timeline._compute``):
the same starts, finishes, slack, makespan, critical path and binding predecessors, bit for
bit, on random timelines with ties, lags, start-to-start edges, releases, resources,
``before`` and ``splice_after``.  The reference is the existing numpy engine run on the same
timeline (two implementations of one definition), not a pasted output."""
from __future__ import annotations

import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
import sympy as sp

import dsl.engine.timeline.structure as T
from dsl.engine.timeline import Timeline

ROOT = Path(__file__).resolve().parent.parent


def _num(e):
    return float(e)


def _random_timeline(rng: random.Random, n: int) -> Timeline:
    tl = Timeline("p", "t")
    # few distinct values, so that ready times tie and the binding rule (first edge; a
    # release on ties) is exercised; zero durations too
    vals = [sp.Integer(0), sp.Integer(1), sp.Integer(2), sp.Rational(1, 3), sp.Rational(2, 3),
            sp.Float(0.1), sp.Float(0.2), sp.Float(0.30000000000000004)]
    for i in range(n):
        after = []
        for j in rng.sample(range(i), k=min(i, rng.randint(0, 3))):
            kind = rng.random()
            if kind < 0.5:
                after.append(f"a{j}")
            elif kind < 0.8:
                after.append((f"a{j}", rng.choice(vals)))
            else:
                after.append((f"a{j}", rng.choice(vals), "start"))
        res = rng.choice([None, None, "r0", "r1", "r2"])
        release = rng.choice(vals + [sp.Integer(3)]) if rng.random() < 0.2 else None
        tl.add(f"a{i}", rng.choice(vals), res, after=after, release=release)
    if n > 3 and rng.random() < 0.3:     # an activity another one waits for, declared after it
        tl.add("late", rng.choice(vals), None, before=[f"a{rng.randrange(n)}"])
    if n > 2 and rng.random() < 0.3:     # a spliced extension of an activity
        tl.add("ext", rng.choice(vals), None, splice_after=f"a{rng.randrange(n)}")
    return tl


def _same(a, b) -> None:
    assert list(a.ids) == list(b.ids)
    assert [repr(x) for x in a.start] == [repr(x) for x in b.start]
    assert [repr(x) for x in a.finish] == [repr(x) for x in b.finish]
    assert [repr(x) for x in a.slack] == [repr(x) for x in b.slack]
    assert repr(a.makespan) == repr(b.makespan)
    assert list(a.path) == list(b.path)
    assert dict(a.binding) == dict(b.binding) and len(a.binding) == len(b.binding)
    assert [int(x) for x in a._bsrc] == [int(x) for x in b._bsrc]


@pytest.mark.parametrize("seed", range(40))
def test_small_schedule_equals_the_numpy_engine(seed):
    rng = random.Random(seed)
    for n in (0, 1, 2, 5, 12, 40):
        tl = _random_timeline(rng, n)
        assert tl._small()
        py = tl._compute_small(_num)
        lag_py = list(tl._lagtab)
        ref = tl._compute(_num)
        assert lag_py == list(tl._lagtab)
        _same(py, ref)
        # what reads the schedule afterwards: the critical path's and each chain's expression
        if n:
            assert tl.path_expr(py) == tl.path_expr(ref)
            for a in list(py.ids)[:: max(1, len(py.ids) // 5)]:
                assert tl.chain_expr(py, a, "start") == tl.chain_expr(ref, a, "start")
                assert tl.chain_expr(py, a, "finish") == tl.chain_expr(ref, a, "finish")


@pytest.mark.parametrize("seed", range(10))
def test_small_structure_equals_the_numpy_structure(seed, monkeypatch):
    rng = random.Random(100 + seed)
    tl = _random_timeline(rng, 30)
    rows, edges = tl.mirror()
    cyc = tl.has_cycle()
    monkeypatch.setattr(T, "SMALL_LIMIT", -1)      # the numpy paths
    tl._edges = tl._arr = None
    assert not tl._small()
    assert tl.mirror() == (rows, edges)
    assert tl.has_cycle() == cyc is False


def test_small_profile_reads_the_schedule_like_the_numpy_one():
    tl = Timeline("p", "t")
    tl.add("a", sp.Integer(2), "r")
    tl.add("b", sp.Integer(3), "r")
    tl.add("c", sp.Integer(1), None, after=["a"])
    tl.hold("h1", sp.Integer(10), pool="m", start=("a", "start"), end=("b", "finish"))
    tl.hold("h2", sp.Integer(7), pool="m", start=("c", "start"), end=("c", "finish"))
    py, ref = tl._compute_small(_num), tl._compute(_num)
    p1, p2 = tl.profile("m", _num, py), tl.profile("m", _num, ref)
    # by hand: a [0, 2), b [2, 5), c [2, 3); h1 over [0, 5), h2 over [2, 3) -> 17 B at t = 2
    assert (p1.peak, p1.time, p1.live) == (p2.peak, p2.time, p2.live) == (17.0, 2.0, ["h1", "h2"])
    assert p1.steps == p2.steps


def test_a_cycle_and_a_value_that_is_not_a_number():
    tl = Timeline("p", "t")
    tl.add("a", sp.Integer(1), None, after=["b"])
    tl.add("b", sp.Integer(1), None, after=["a"])
    assert tl.has_cycle()
    with pytest.raises(ValueError, match="cycle"):
        tl.compute(_num)
    tl = Timeline("p", "t")
    tl.add("a", sp.Integer(1))
    tl.add("b", sp.nan, None, after=["a"])
    assert tl._compute_small(_num) is None          # NaN: left to numpy, which defines it
    sched = tl.compute(_num)
    assert math.isnan(sched.finish[1])


def test_design_case_does_not_import_numpy():
    """The numpy import (≈0.1 s) is not paid by a plan whose timelines are small."""
    code = ("import sys, io, contextlib\nfrom dsl.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['eval', 'specs/cases/cpt-qwen3-8b-4090.plan'])\n"
            "print('numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _random_holds(rng: random.Random, tl: Timeline, n_holds: int) -> None:
    ids = list(tl.activities)
    sizes = [sp.Integer(1), sp.Integer(2), sp.Integer(3), sp.Rational(1, 2), sp.Float(0.1)]
    for k in range(n_holds):
        a, b = rng.choice(ids), rng.choice(ids)
        start = None if rng.random() < 0.15 else (a, rng.choice(["start", "finish"]))
        end = None if rng.random() < 0.15 else (b, rng.choice(["start", "finish"]))
        tl.hold(f"h{k}", rng.choice(sizes), pool=rng.choice(["m0", "m1"]), start=start, end=end)


@pytest.mark.parametrize("seed", range(30))
def test_small_profile_equals_the_numpy_profile(seed):
    """Memory profiles of a small schedule (the Python event sweep) and of the numpy
    schedule (the array sweep): the same peak, instant, live holds and steps — with holds
    that end before they start, run to the end, or have zero length."""
    rng = random.Random(500 + seed)
    tl = _random_timeline(rng, rng.randint(2, 30))
    _random_holds(rng, tl, rng.randint(1, 25))
    py, ref = tl._compute_small(_num), tl._compute(_num)
    assert isinstance(py._T, list) and not isinstance(ref._T, list)
    for pool in ("m0", "m1", "absent"):
        p1, p2 = tl.profile(pool, _num, py), tl.profile(pool, _num, ref)
        assert (repr(p1.peak), repr(p1.time), p1.live) == (repr(p2.peak), repr(p2.time), p2.live)
        assert [(repr(t), repr(v)) for t, v in p1.steps] == [(repr(t), repr(v)) for t, v in p2.steps]

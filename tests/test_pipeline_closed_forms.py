"""Closed forms of book §10.3.2 / exercise 10-4 next to the event model
(specs/cases/pipeline-closed-forms.plan: p = 4, t_f = 10 ms, t_b = 20 ms, no transfer, no
update), and the symbolic makespan checked against numeric evaluations at other points.

Expected values are the book's formulas evaluated by hand in the test."""
from __future__ import annotations

import pytest
import sympy as sp

import dsl
from conftest import CASES, qval

CASE = CASES / "pipeline-closed-forms.plan"
BOOK = CASES / "pipeline-schedules.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


@pytest.mark.parametrize("plan, m", [("fd_m1", 1), ("fd_m4", 4), ("fd_m8", 8), ("fd_m16", 16),
                                     ("f1b_m8", 8), ("f1b_m16", 16)])
def test_fill_drain_and_1f1b_time_and_utilization(ws, plan, m):
    p, tf, tb = 4, 10, 20
    assert qval(ws, f"{plan}.pipeline_time", "ms") == pytest.approx((m + p - 1) * (tf + tb))
    assert qval(ws, f"{plan}.ideal_time", "ms") == pytest.approx((m + p - 1) * (tf + tb))
    assert qval(ws, f"{plan}.utilization") == pytest.approx(m / (m + p - 1))
    assert qval(ws, f"{plan}.ideal_utilization") == pytest.approx(m / (m + p - 1))
    # bubble (p−1)(t_f+t_b) = 90 ms on each stage, fraction (p−1)/m of the work
    assert qval(ws, f"{plan}.idle_time", "ms") == pytest.approx(90)
    assert qval(ws, f"{plan}.bubble_bound", "ms") == pytest.approx(90)
    assert qval(ws, f"{plan}.bubble_fraction") == pytest.approx(3 / m)


@pytest.mark.parametrize("m, pct", [(1, 25.0), (4, 57.1), (8, 72.7), (16, 84.2)])
def test_ideal_utilization_book_percentages(ws, m, pct):
    assert qval(ws, f"fd_m{m}.ideal_utilization", "%") == pytest.approx(pct, abs=0.05)


def test_1f1b_bubble_fraction_at_16_microbatches(ws):
    # §10.3.2: 37.5 % at m = 8, 18.8 % at m = 16
    assert qval(ws, "f1b_m8.bubble_fraction", "%") == pytest.approx(37.5, abs=0.05)
    assert qval(ws, "f1b_m16.bubble_fraction", "%") == pytest.approx(18.75)   # printed 18.8


def test_zb_h1_meets_its_lower_bound_without_transfers(ws):
    # (p−1)(T_F + T_B − T_W) = 3 · (10 + 10 − 10) = 30 ms, exactly
    assert qval(ws, "zb_h1.bubble_bound", "ms") == pytest.approx(30)
    assert qval(ws, "zb_h1.idle_time", "ms") == pytest.approx(30)
    # ZB-H2's bound (p−1)(T_F + T_B − 2T_W) = 0; our trapezoid is not below ZB-H1
    assert qval(ws, "zb_h2.bubble_bound", "ms") == 0
    assert qval(ws, "zb_h2.pipeline_time", "ms") <= qval(ws, "zb_h1.pipeline_time", "ms")


def test_interleaved_bubble_is_one_vth(ws):
    # v = 2 chunks of 4 layers: (1/v)(p−1)(t_f+t_b) = 45 ms; fraction (1/v)(p−1)/m = 18.75 %
    assert qval(ws, "interleaved.idle_time", "ms") == pytest.approx(45)
    assert qval(ws, "interleaved.bubble_fraction", "%") == pytest.approx(18.75)


def test_dualpipe_bound_is_a_comparison(ws):
    # (PP/2 − 1)(F&B + B − 3W) with F&B = F + B = 30, B = 20, W = 10: (2−1)(30+20−30) = 20 ms
    assert qval(ws, "dualpipe.bubble_bound", "ms") == pytest.approx(20)
    assert qval(ws, "dualpipe.idle_time", "ms") <= 20


def _at(ws, nid, **vals):
    e = ws.full_expr(ws.lookup(nid))
    subs = {}
    for s in e.free_symbols:
        short = s.name.rsplit(".", 1)[1]
        subs[s] = sp.Rational(vals[short]) / 1000 if short in vals else ws.base_value(s.name)
    return float(e.xreplace(subs)) * 1e3


@pytest.mark.parametrize("tf, tb, c", [(10, 20, 1), (5, 20, 0), (12, 30, 3), (1, 1, 2)])
def test_symbolic_fill_drain_makespan_equals_closed_form(tf, tb, c):
    ws = dsl.load(BOOK)
    m, p, u = 8, 4, 1
    got = _at(ws, "fill_drain.pipeline_time", forward=tf, backward=tb, transfer=c)
    assert got == pytest.approx((m + p - 1) * (tf + tb) + 2 * (p - 1) * c + u)


def test_symbolic_makespan_matches_numeric_event_model(write_plan):
    """The max-plus expression of the 1F1B timeline (built once) evaluated at other inputs
    equals fresh event-model runs at those inputs."""
    base = '''plan x {{ use pipeline {{ schedule = "{s}"; stages = 4; microbatches = 6
        forward = {tf} ms; backward = {tb} ms; weight_grad = {tw} ms; transfer = {c} ms; update = 1 ms }} }}'''
    for s in ("1f1b", "zb_h1"):
        ws0 = dsl.load(write_plan(base.format(s=s, tf=10, tb=20, tw=10, c=1), f"{s}0.plan"))
        for tf, tb, tw, c in [(10, 20, 10, 1), (3, 20, 15, 0), (10, 11, 1, 4), (7, 9, 4, 9)]:
            ws1 = dsl.load(write_plan(base.format(s=s, tf=tf, tb=tb, tw=tw, c=c), f"{s}{tf}{tb}{c}.plan"))
            assert _at(ws0, "x.pipeline_time", forward=tf, backward=tb, weight_grad=tw, transfer=c,
                       transfer_back=c) == pytest.approx(qval(ws1, "x.pipeline_time", "ms"))


def test_bubble_bound_is_the_max_sympy_would_build():
    """The plugin builds ``Max(bound, 0)`` unevaluated (sympy's evaluation only spends time on a
    bound whose sign it cannot know); evaluating it from its arguments gives the same Max, for
    every schedule with a closed-form bound."""
    ev = dsl.load(BOOK)
    seen = set()
    for plan in ("fill_drain", "one_f_one_b", "interleaved", "zb_h1", "zb_h2", "dualpipe"):
        e = ev.nodes[ev.lookup(f"{plan}.bubble_bound")].expr
        assert isinstance(e, sp.Max) and sp.S.Zero in e.args
        again = sp.Max(*e.args)
        assert again == e and sp.srepr(again) == sp.srepr(e)
        seen.add(sp.srepr(e.xreplace({s: sp.Symbol(s.name.split(".", 1)[1], real=True) for s in e.free_symbols})))
    assert len(seen) == 5      # fill-drain and 1F1B share (p−1)(t_f+t_b); the other four differ

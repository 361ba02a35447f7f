"""Choice under a memory budget (book §10.3.2): "only 1 GB for activations and buffers"
selects 1F1B (347 ms); with enough memory fill–drain finishes first (337 ms).  The choice
is the plan's `fastest_in_budget` quantity and its table; the break-even budget is a
`solve` in specs/cases/pipeline-schedules.plan."""
from __future__ import annotations

import json

import pytest

import dsl
from conftest import CASES, qval
from dsl.syntax.parser import parse_query
from dsl.results.solver import solve_query

CASE = CASES / "pipeline-schedules.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_one_gigabyte_selects_1f1b(ws):
    assert qval(ws, "budget_1gb.fastest_in_budget", "ms") == pytest.approx(347, abs=0.5)
    assert qval(ws, "budget_all.fastest_in_budget", "ms") == pytest.approx(347, abs=0.5)


def test_enough_memory_selects_fill_drain(ws):
    assert qval(ws, "budget_ample.fastest_in_budget", "ms") == pytest.approx(337, abs=0.5)


def test_choice_table_names_the_schedule(run_cli):
    code, out, err = run_cli("eval", CASE, "--format", "json")
    assert code == 0, err
    data = json.loads(out)

    def table(plan):
        return data["plans"][plan]["tables"]["pipeline-schedules"]

    assert any("1f1b (347 ms)" in n for n in table("budget_1gb")["notes"])
    assert any("fill_drain (337 ms)" in n for n in table("budget_ample")["notes"])


def test_break_even_budget_is_fill_drains_peak(ws):
    # fill-drain becomes the choice once its largest stage (≈2.57 GB, fig. 10-20) fits
    s = solve_query(ws, parse_query("budget_1gb.pipeline.budget for budget_1gb.fastest_in_budget <= 337 ms"))
    assert s.value / 1e9 == pytest.approx(2.57, rel=0.005)
    assert s.value == pytest.approx(qval(ws, "budget_1gb.activation_peak"), rel=1e-6)
    assert s.holds is not None and ">=" in s.holds


def test_fastest_in_budget_is_the_min_sympy_would_build(ws):
    """The plugin builds the Min over the compared schedules unevaluated (sympy cannot order two
    of its Piecewise arguments); evaluating it from its arguments gives the same Min."""
    import sympy as sp

    for plan, n in (("budget_1gb", 2), ("budget_ample", 2), ("budget_all", 4)):
        e = ws.nodes[ws.lookup(f"{plan}.fastest_in_budget")].expr
        assert isinstance(e, sp.Min) and len(e.args) == n
        again = sp.Min(*e.args)
        assert again == e and sp.srepr(again) == sp.srepr(e)

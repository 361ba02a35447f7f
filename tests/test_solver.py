"""Break-even queries: `solve TARGET for LHS op RHS` (dsl.results.solver and `plan solve`).

Expected answers are derived by hand from the case's nominal values (the first-order model
T_finish = T_0 + steps · t_s · (1 + L)), not from the solver itself.
"""
from __future__ import annotations

from dsl.syntax.format import query_text
import json
import math

import pytest

import dsl
from conftest import CASE, qval
from dsl.syntax.diagnostics import PlanError
from dsl.syntax.parser import parse_query
from dsl.results.solver import solve_query

DAY = 86_400


def solve(ws, text):
    return solve_query(ws, parse_query(text))


# ---------------------------------------------------------------- symbolic

def test_symbolic_step_budget(case_ws):
    s = solve(case_ws, "gpus48.step_time for gpus48.finish_time == cpt.deadline")
    assert s.method == "symbolic"
    assert s.target == "gpus48.step_time" and s.unit == "s"
    L = qval(case_ws, "gpus48.overhead")
    expected = (30 - 5) * DAY / (31_790 * (1 + L))     # (deadline - reserved) / (steps (1 + L))
    assert s.value == pytest.approx(expected, rel=1e-12)
    assert s.nominal == pytest.approx(qval(case_ws, "gpus48.step_time"), rel=1e-12)
    assert s.holds is None
    assert s.symbolic and s.symbolic.startswith("gpus48.step_time = ")
    assert "cpt.deadline - cpt.reserved" in s.symbolic


def test_symbolic_mfu_meets_deadline_end_to_end(case_ws, write_plan):
    """The solved MFU, put back into a plan, makes gpus32 finish exactly at the deadline."""
    s = solve(case_ws, "gpus32.mfu for gpus32.finish_time == cpt.deadline")
    assert s.method == "symbolic" and s.unit == "%"
    assert s.nominal == pytest.approx(0.4)
    assert 0.465 < s.value < 0.475
    p = write_plan(f'import "{CASE.as_posix()}"\n'
                   f"plan check32 extends gpus32 {{ mfu = {s.value * 100!r} % }}\n")
    ws = dsl.load(p)
    assert qval(ws, "check32.finish_time", "day") == pytest.approx(30, abs=1e-6)
    assert qval(ws, "check32.deadline_slack", "day") == pytest.approx(0, abs=1e-6)


def test_symbolic_linear_in_input_wait(case_ws):
    s = solve(case_ws, "gpus48.input_wait for gpus48.step_time == 60 s")
    assert s.method == "symbolic"
    # step = input_wait + head + compute + tail on the critical path; the rest is fixed
    rest = qval(case_ws, "gpus48.step_time") - qval(case_ws, "gpus48.input_wait")
    assert s.value == pytest.approx(60 - rest, rel=1e-12)


def test_query_in_file_are_parsed(case_ws):
    assert [query_text(q) for q in case_ws.queries] == [
        "gpus32.mfu for gpus32.finish_time == cpt.deadline",
        "gpus48.step_time for gpus48.finish_time == cpt.deadline",
        "gpus48.mfu for gpus48.finish_time == cpt.deadline",
    ]


# ---------------------------------------------------------------- numeric (ceil)

def test_numeric_when_query_contains_ceil(case_ws):
    s = solve(case_ws, "gpus48.mfu for ceil(gpus48.compute_time / 1 s) == 60")
    assert s.method == "numeric"
    # compute_time = c0 · 0.4 / mfu; ceil(...) == 60 for compute_time in (59, 60]
    c0 = qval(case_ws, "gpus48.compute_time")
    lo, hi = c0 * 0.4 / 60, c0 * 0.4 / 59
    assert lo - 1e-9 <= s.value <= hi + 1e-9


def test_numeric_through_ceil_in_steps(case_ws):
    """steps = ceil(tokens / tokens_per_step) makes the equation a staircase -> numeric."""
    s = solve(case_ws, "cpt.tokens for gpus48.finish_time == cpt.deadline")
    assert s.method == "numeric" and s.unit == "token"
    per_step = 8192 * 384
    t_s, L = qval(case_ws, "gpus48.step_time"), qval(case_ws, "gpus48.overhead")
    steps = (30 - 5) * DAY / (t_s * (1 + L))         # continuous number of steps that fits
    assert abs(s.value - steps * per_step) <= per_step


# ---------------------------------------------------------------- inequalities

def test_le_reports_side_where_it_holds(case_ws):
    s = solve(case_ws, "gpus32.mfu for gpus32.finish_time <= cpt.deadline")
    eq = solve(case_ws, "gpus32.mfu for gpus32.finish_time == cpt.deadline")
    assert s.value == pytest.approx(eq.value, rel=1e-12)
    # higher MFU -> shorter finish time: the relation holds above the boundary
    assert s.holds == "gpus32.mfu >= boundary"


def test_ge_reports_opposite_side(case_ws):
    s = solve(case_ws, "gpus32.mfu for gpus32.finish_time >= cpt.deadline")
    assert s.holds == "gpus32.mfu <= boundary"


def test_inequality_on_derived_target(case_ws):
    s = solve(case_ws, "cpt.reserved for gpus48.finish_time >= cpt.deadline")
    # finish = reserved + train_time (1 + L) >= deadline  <=>  reserved >= deadline - train (1 + L)
    train, L = qval(case_ws, "gpus48.train_time"), qval(case_ws, "gpus48.overhead")
    assert s.value == pytest.approx(30 * DAY - train * (1 + L), rel=1e-12)
    assert s.holds == "cpt.reserved >= boundary"


def test_inequality_gpu_count(case_ws):
    """How many GPUs would the gpus32 design need to meet the deadline: between 32 and 48."""
    s = solve(case_ws, "gpus32.gpus for gpus32.finish_time <= cpt.deadline")
    # the model has a second boundary far away: with millions of GPUs the failure overhead
    # λτ/2 grows past the deadline again, so the relation holds on a bounded interval
    (lo, hi), = s.intervals
    assert lo == s.value and hi > 1e6
    assert 32 < s.value < 48
    assert math.ceil(s.value) == 38


def test_no_root(case_ws):
    """Finish time never drops below the 5 reserved days: no MFU gives 1 day."""
    s = solve(case_ws, "gpus48.mfu for gpus48.finish_time == 1 day")
    assert s.value is None and s.method == "none"
    assert "no solution" in s.note


# ---------------------------------------------------------------- errors

def _codes(ei):
    return [d.code for d in ei.value.diagnostics if d.severity == "error"]


def test_target_not_in_equation(fresh_case_ws):
    with pytest.raises(PlanError) as ei:
        solve(fresh_case_ws, "gpus48.mfu for gpus48.memory_per_gpu == 10 GiB")
    assert _codes(ei) == ["solve"]
    assert "does not depend on gpus48.mfu" in ei.value.diagnostics[0].summary


def test_unit_mismatch_between_sides(fresh_case_ws):
    with pytest.raises(PlanError) as ei:
        solve(fresh_case_ws, "gpus48.mfu for gpus48.finish_time == 5 GiB")
    assert _codes(ei) == ["unit-mismatch"]
    d = ei.value.diagnostics[0]
    assert "s" in d.summary and "B" in d.summary


def test_non_numeric_target(fresh_case_ws):
    with pytest.raises(PlanError) as ei:
        solve(fresh_case_ws, "gpus48.model for gpus48.finish_time == 1 day")
    assert _codes(ei) == ["solve"]


def test_unknown_target(fresh_case_ws):
    with pytest.raises(PlanError) as ei:
        solve(fresh_case_ws, "gpus48.mfuu for gpus48.finish_time == cpt.deadline")
    assert _codes(ei) == ["unknown-name"]
    assert "mfu" in ei.value.diagnostics[0].hint


def test_errors_do_not_leak_between_queries(fresh_case_ws):
    with pytest.raises(PlanError):
        solve(fresh_case_ws, "gpus48.mfu for gpus48.finish_time == 1 GB + 1 s")
    with pytest.raises(PlanError) as ei:
        solve(fresh_case_ws, "gpus48.nope for gpus48.finish_time == cpt.deadline")
    assert _codes(ei) == ["unknown-name"]


# ---------------------------------------------------------------- CLI

def test_cli_solve_file_queries(run_cli):
    code, out, err = run_cli("solve", CASE)
    assert code == 0, err
    assert out.count("solve ") == 3
    assert "gpus32.mfu = 46.99 %" in out
    assert "gpus48.step_time = 67.22 s" in out
    assert "symbolic" in out


def test_cli_solve_query_le_text(run_cli):
    code, out, err = run_cli("solve", CASE, "--query", "gpus32.mfu for gpus32.finish_time <= cpt.deadline")
    assert code == 0, err
    assert "the relation holds for gpus32.mfu >= 46.99 %" in out


def test_cli_solve_json(run_cli):
    code, out, err = run_cli("solve", CASE, "--format", "json", "--query",
                             "gpus48.mfu for ceil(gpus48.compute_time / 1 s) == 60")
    assert code == 0, err
    (s,) = json.loads(out)["solutions"]
    assert s["method"] == "numeric" and s["target"] == "gpus48.mfu" and s["unit"] == "%"


def test_cli_solve_no_root_text(run_cli):
    code, out, err = run_cli("solve", CASE, "--query", "gpus48.mfu for gpus48.finish_time == 1 day")
    assert code == 0, err
    assert "no solution" in out


@pytest.mark.parametrize("query,code_name", [
    ("gpus48.mfu for gpus48.finish_time == 5 GiB", "unit-mismatch"),
    ("gpus48.mfu for gpus48.memory_per_gpu == 10 GiB", "solve"),
])
def test_cli_solve_errors(run_cli, query, code_name):
    code, out, err = run_cli("solve", CASE, "--query", query)
    assert code == 2      # a --query that cannot be posed is a bad command line
    assert f"error[{code_name}]" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("query, words", [
    # a query ends where the command-line argument ends: not "end of file"
    ("gpus48.mfu for gpus48.finish_time <= (1 day", "unexpected end of the query; expected ')'"),
    ("gpus48.mfu for", "unexpected end of the query; expected '(', '+', '-', '[', 'false', 'true', a name, "
                       "a number, a string"),
    # what only a file allows after a value (a new line, ';', '}', `in`, `source`), closing brackets
    # nothing opened, and a second comparison are not offered
    ("gpus48.mfu for gpus48.finish_time <= 1 day 2", "unexpected '2'; expected '*', '+', '-', '/', '^'\n"),
    ("gpus48.mfu fo gpus48.finish_time <= 1 day", "unexpected 'fo'; expected '.', 'for'\n"),
])
def test_cli_query_syntax_errors_speak_of_the_query(run_cli, query, words):
    code, _, err = run_cli("solve", CASE, "--query", query)
    assert code == 2 and "<query>:1:" in err and words in err, err
    assert "end of file" not in err and "'source'" not in err and "'}'" not in err


def test_far_end_of_the_interval_names_the_requirements_that_fail_there():
    """y = (x − 1)(9 − x) ≥ 7 holds for 2 ≤ x ≤ 8 (roots of x² − 10x + 16); the plan also
    requires x ≤ 5, which holds at the answer 2 and fails at the interval's other end, 8."""
    ws = dsl.load("far.plan", text="plan p {\n  x = 3\n  y = (x - 1) * (9 - x)\n  require x <= 5\n}\n")
    s = solve(ws, "p.x for p.y >= 7")
    assert s.intervals == [(pytest.approx(2), pytest.approx(8))]
    notes = s.note.split("; ")
    assert any(n.startswith("at 8 these requirements fail: p.") for n in notes), notes
    assert not any(n.startswith("at 2 ") or n.startswith("at this value") for n in notes), notes

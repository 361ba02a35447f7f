"""Cost of interruptions from a run log (book §10.4.4, figure 10-36, footnote 6):
specs/cases/checkpoint-interruptions.plan with specs/data/mimo-v2.6-pro-run-log.csv, and the
errors for malformed logs."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval, run_cli

FILE = CASES / "checkpoint-interruptions.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(FILE)


def test_mimo_pro_book_numbers(ws):
    assert ws.base_value(ws.lookup("mimo_pro.restarts")) == 14
    assert abs(qval(ws, "mimo_pro.wasted_time", "h") - 30.1) <= 0.05
    assert abs(qval(ws, "mimo_pro.wasted_share", "%") - 23.6) <= 0.05
    assert abs(qval(ws, "mimo_pro.wasted_cost", "kUSD") - 619) <= 0.5
    # halving the interruptions: ≈15 h and ≈$310k
    assert abs(qval(ws, "mimo_pro.saved_time", "h") - 15) <= 0.5
    assert abs(qval(ws, "mimo_pro.saved_cost", "kUSD") - 310) <= 0.5


def test_the_three_restarts_the_book_itemises(ws):
    code, out, err = run_cli("eval", FILE, "--format", "json")
    assert code == 0, err
    import json
    rows = json.loads(out)["plans"]["mimo_pro"]["tables"]["interruptions"]["rows"]
    by_event = {r[4]: float(r[3]) for r in rows}
    assert by_event["restart 5"] == 2.76 and by_event["restart 6"] == 2.63 and by_event["restart 8"] == 2.95


PLAN = 'plan p {\n  use interruptions { log = "log.csv"; rate = 20.6e3 USD/h }\n}\n'


@pytest.mark.parametrize("csv,row,column,what", [
    ("kind,restarts,hours\nrestart,1,2.5\nrestart,1,abc\n", 3, "hours", "'abc' is not a number"),
    ("kind,restarts,hours\nreboot,1,2.5\n", 2, "kind", "'reboot' is not one of steps, restart, invalidated"),
    ("kind,restarts,hours\nrestart,one,2.5\n", 2, "restarts", "'one' is not a whole number"),
    ("kind,restarts,hours\nsteps,0,10\nrestart,1\n", 3, "hours", "2 fields, the header has 3"),
    ("kind,hours\nrestart,2\n", 1, "restarts", "the header has no column 'restarts'"),
    ("kind,restarts,hours\nrestart,1,-2\n", 2, "hours", "'-2' is negative"),
])
def test_malformed_row_names_file_row_and_column(write_plan, csv, row, column, what):
    f = write_plan(PLAN)
    (f.parent / "log.csv").write_text(csv, encoding="utf-8")
    code, out, err = run_cli("eval", f)
    assert code == 1 and "Traceback" not in err
    assert "error[bad-data]" in err
    assert f"malformed run log log.csv: row {row}, column '{column}': {what}" in err
    assert 'log = "log.csv"' in err and "hint:" in err          # points at the parameter


def test_missing_log_file(write_plan):
    f = write_plan(PLAN)
    code, out, err = run_cli("eval", f)
    assert code == 1 and "error[missing-file]" in err

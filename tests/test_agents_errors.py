"""Errors of the agent blocks: malformed trajectory logs name the line and column; bad
dependency strings and list lengths are reported at the parameter."""
from __future__ import annotations

import pytest

HEADER = "round,model_s,tool_s,input_tokens,cached_tokens,output_tokens\n"


@pytest.mark.parametrize("body, needle", [
    ("1,2.0,0.1,100,0,10\n2,abc,0.1,200,100,10\n", "line 3, column 'model_s': 'abc' is not a number"),
    ("1,2.0,0.1,100,200,10\n", "line 2, column 'cached_tokens'"),
    ("1,2.0,0.1,100,0\n", "line 2: has 5 cells"),
    ("2,2.0,0.1,100,0,10\n", "line 2, column 'round'"),
    ("1,2.0,-0.1,100,0,10\n", "column 'tool_s': -0.1 is negative"),
])
def test_malformed_log(write_plan, run_cli, body, needle):
    write_plan(HEADER + body, "log.csv")
    p = write_plan('plan p { use trajectory { log = "log.csv" } }\n')
    code, out, err = run_cli("eval", p)
    assert code == 1
    assert "error[bad-data]" in err and needle in err and "t.plan:1:" in err
    assert "Traceback" not in err


def test_missing_column(write_plan, run_cli):
    write_plan("round,model_s\n1,2\n", "log.csv")
    p = write_plan('plan p { use trajectory { log = "log.csv" } }\n')
    code, out, err = run_cli("eval", p)
    assert code == 1 and "lacks column 'tool_s'" in err


def test_bad_dependency_string(write_plan, run_cli):
    p = write_plan('plan p { use task_dag { activities = ["a", "b"]; durations = [1 s, 2 s]; after = ["a-b"] } }\n')
    code, out, err = run_cli("eval", p)
    assert code == 1 and 'write "a>b"' in err


def test_unknown_activity_in_dependency(write_plan, run_cli):
    p = write_plan('plan p { use task_dag { activities = ["a", "b"]; durations = [1 s, 2 s]; after = ["a>c"] } }\n')
    code, out, err = run_cli("eval", p)
    assert code == 1 and "error[unknown-name]" in err and "activities: a, b" in err


def test_length_mismatch(write_plan, run_cli):
    p = write_plan('plan p { use task_dag { activities = ["a", "b"]; durations = [1 s] } }\n')
    code, out, err = run_cli("eval", p)
    assert code == 1 and "`durations` has 1 items but `activities` has 2" in err


def test_cycle_in_task_graph(write_plan, run_cli):
    p = write_plan('plan p { use task_dag { activities = ["a", "b"]; durations = [1 s, 2 s]; '
                   'after = ["a>b", "b>a"] } }\n')
    code, out, err = run_cli("eval", p)
    assert code == 1 and "error[cycle]" in err


def test_negative_duration(write_plan, run_cli):
    p = write_plan('plan p { use task_dag { activities = ["a", "b"]; durations = [1 s, -2 s] } }\n')
    code, out, err = run_cli("eval", p)
    assert code == 1 and "duration 2 (activity 'b') is negative" in err

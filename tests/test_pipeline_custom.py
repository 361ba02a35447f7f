"""Custom slot orders (specs/cases/pipeline-custom.plan) and the pipeline block's errors."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval
from plugins.training import pipeline_schedules as S

CASE = CASES / "pipeline-custom.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_hand_written_1f1b_prices_like_the_generator(ws):
    # the book's 1F1B: 347 ms, idle 106 ms
    assert qval(ws, "hand_1f1b.pipeline_time", "ms") == pytest.approx(347, abs=0.5)
    assert qval(ws, "hand_1f1b.idle_time", "ms") == pytest.approx(106, abs=0.5)
    assert S.parse_custom(ws.python_value("hand_1f1b.pipeline.order"), 4, 1) == S.one_f_one_b(4, 8)


def test_deferring_dw_on_the_last_stage(ws):
    # stage 3 sends each dX after 10 ms instead of 20: by hand, stage 3 runs F0 at 33-43,
    # X0 at 43-53, and stage 2 gets the gradient at 54 ms (1F1B: 64 ms)
    sc = ws.timelines[("late_dw", "pipeline")].schedule
    assert sc.start[sc.index()["B0@2"]] * 1e3 == pytest.approx(54)
    assert ws.timelines[("late_dw", "pipeline")].activities["W7@3"].kind == "dW"


BASE = '''plan x {{
  use pipeline {{ forward = 1 ms; {extra} }}
}}'''
SM = "stages = 2; microbatches = 2; "


@pytest.mark.parametrize("extra, code, text", [
    ('schedule = "custom"; order = ["F0 F1 B0 B1"]', "bad-order", "1 stage(s) but the pipeline has 2"),
    ('schedule = "custom"; order = ["F0 F1 B0 B1", "F0 Q1 B0 B1 F1"]', "bad-order", "cannot read slot 'Q1'"),
    ('schedule = "custom"; order = ["F0 F1 B0 B1", "F0 B0 B1"]', "bad-order", "no forward slot F1"),
    ('schedule = "custom"; order = ["F0 F1 B0 B1", "F0 F1 B0 F1 B1"]', "bad-order", "appears twice"),
    ('schedule = "custom"; order = ["F0 F1 B0 B1", "F0 F1 B0 X1"]', "bad-order", "no backward slot W1"),
    ('schedule = "custom"; order = ["F0 F1 B0 B1", "F0 F2 B0 B1 F1"]', "bad-order", "micro-batch 2"),
    ('schedule = "custom"; order = ["F0 F1 B0 B1", "B0 F0 F1 B1"]', "bad-order", "cannot run"),
    ('schedule = "custom"', "missing-parameter", "needs an `order`"),
    ('schedule = "zigzag"', "out-of-range", "fill_drain"),
    ('schedule = "interleaved"', "out-of-range", "virtual"),
    ('stages = 2; schedule = "interleaved"; virtual = 2; microbatches = 3', "out-of-range", "multiple"),
    ('microbatches = 8; schedule = "dualpipe"; stages = 3', "out-of-range", "even"),
    ('schedule = "dualpipe"', "out-of-range", "2p"),
    ('compare = ["gpipe"]', "out-of-range", "unknown schedule 'gpipe'"),
    ('chunk_layers = [1, 2, 3]', "out-of-range", "2 × 1 = 2"),
])
def test_errors(write_plan, run_cli, extra, code, text):
    path = write_plan(BASE.format(extra=extra if "stages" in extra else SM + extra))
    rc, out, err = run_cli("eval", path)
    assert rc != 0
    msg = out + err
    assert f"error[{code}]" in msg, msg
    assert text in msg, msg
    assert "Traceback" not in msg

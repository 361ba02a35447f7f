"""State held while jobs wait (book ch. 3 §3.1.2, exercise 3-2) and the serving blocks' errors."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval
from dsl.syntax.diagnostics import PlanError

CASE = CASES / "serving-burst-and-wait.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_state_area(ws):
    # 1 GiB resident for 10 s is 10 GiB·s (fig. 3-3)
    assert qval(ws, "tool_wait_10s.state_area", "GiB*s") == 10


def test_steady_state(ws):
    # 2 jobs/s × 10 s × 1 GiB: 20 jobs waiting, 20 GiB; 30 s → 60 jobs, 60 GiB
    assert qval(ws, "tool_wait_10s.waiting_jobs", "request") == 20
    assert qval(ws, "tool_wait_10s.resident_state", "GiB") == 20
    assert qval(ws, "tool_wait_30s.waiting_jobs", "request") == 60
    assert qval(ws, "tool_wait_30s.resident_state", "GiB") == 60


def test_state_profile(write_plan):
    # a job holds 1 GiB for 10 s, then 3 GiB for 5 s: A_M = 10 + 15 = 25 GiB·s
    p = write_plan("plan p { use state_residency { rate = 2 request/s; sizes = [1 GiB, 3 GiB]; "
                   "durations = [10 s, 5 s] } }\n")
    ws = dsl.load(p)
    assert qval(ws, "p.state_area", "GiB*s") == 25
    assert qval(ws, "p.waiting_jobs", "request") == 30
    assert qval(ws, "p.resident_state", "GiB") == 50


def _errors(write_plan, text):
    p = write_plan(text)
    with pytest.raises(PlanError) as e:
        dsl.load(p)
    return e.value.diagnostics


def test_profile_lengths_differ(write_plan):
    ds = _errors(write_plan, "plan p { use state_residency { rate = 1 request/s; sizes = [1 GiB, 2 GiB]; "
                             "durations = [1 s] } }\n")
    d = next(d for d in ds if d.code == "out-of-range")
    assert "'sizes' has 2 pieces but 'durations' has 1" in d.summary and d.span.line == 1


MIX = """import "@catalog/models.plan"
plan p {{
  use request_mix {{ window = 60 s; requests = [240, 240]; input = [8192 token, 1024 token]
                    output = [256 token, 2048 token]; mix = {mix} }}
}}
"""


@pytest.mark.parametrize("mix,words", [
    ('["9:1"]', "1 entries but 'requests' has 2 windows"),
    ('["9:1", "1:x"]', "not a ratio"),
    ('["9:1", "1:2:3"]', "3 shares but there are 2 classes"),
    ('["0:0", "1:1"]', "not a ratio"),
])
def test_bad_mix(write_plan, run_cli, mix, words):
    ds = _errors(write_plan, MIX.format(mix=mix))
    d = next(d for d in ds if d.code == "out-of-range")
    assert words in d.summary
    assert d.span.line == 4                      # at the `mix = …` text
    code, out, err = run_cli("eval", write_plan(MIX.format(mix=mix), "c.plan"))
    assert code == 1 and "Traceback" not in err and "hint:" in err


def test_classes_lengths_differ(write_plan):
    ds = _errors(write_plan, "plan p { use request_mix { window = 1 s; requests = [1]; input = [1 token]; "
                             "output = [2 token, 3 token] } }\n")
    assert any("'input' lists 1 classes but 'output' lists 2" in d.summary for d in ds)


def test_fluid_queue_without_arrivals(write_plan):
    ds = _errors(write_plan, "plan p { use fluid_queue { capacity = 1 token/s } }\n")
    assert any(d.code == "missing-parameter" and "needs arrivals" in d.summary for d in ds)


def test_demand_without_window(write_plan):
    ds = _errors(write_plan, "plan p { use fluid_queue { capacity = 1 token/s; demand = [2 token/s] } }\n")
    assert any(d.code == "missing-parameter" and "needs 'window'" in d.summary for d in ds)


def test_mix_and_trace_together(write_plan):
    write_plan("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,2\n", "t.csv")
    ds = _errors(write_plan, 'plan p {\n use trace { file = "t.csv" }\n use request_mix { window = 1 s; '
                             'requests = [1]; input = [1 token]; output = [2 token] }\n}\n')
    assert any(d.code == "duplicate" and "not both" in d.summary for d in ds)


def test_queue_without_capacity_names_the_block(write_plan):
    ds = _errors(write_plan, "plan p { use fluid_queue { window = 1 s; demand = [2 token/s] } }\n")
    assert any(d.code == "missing-quantity" and "decode_bound" in (d.summary + d.hint) for d in ds)


def test_unknown_format_lists_choices(write_plan):
    ds = _errors(write_plan, 'import "@catalog/models.plan"\nplan p { model = qwen3_8b\n'
                             '  use call_chain { input = 1 token; output = 2 token; kv = "fp9" } }\n')
    d = next(d for d in ds if d.code == "out-of-range")
    assert "bf16" in d.summary + d.hint


def test_decode_bound_without_context(write_plan):
    ds = _errors(write_plan, 'import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'
                             "plan p { model = qwen3_8b; device = rtx_pro_6000_bw; use decode_bound { batch = 64 seq } }\n")
    d = next(d for d in ds if d.code == "missing-parameter")
    assert "`use decode_bound` needs the mean context" in d.summary and "context = " in d.hint


def test_context_as_plan_field(write_plan):
    p = write_plan('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'
                   "plan p { model = qwen3_8b; device = rtx_pro_6000_bw; decode_mean_context = 2742 token\n"
                   "  use decode_bound { batch = 64 seq } }\n")
    ws = dsl.load(p)
    assert qval(ws, "p.decode_step_bytes", "GB") == pytest.approx(41.02, abs=0.005)

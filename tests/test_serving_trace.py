"""Request traces as inputs (book ch. 3 §3.1.2–3.1.3): the Azure 2023 traces, window demands,
latency metrics from measured columns, p95 by nearest rank, and malformed-row errors."""
from __future__ import annotations

import csv
import math

import pytest

import dsl
from conftest import CASES, REPO_ROOT, qval
from dsl.syntax.diagnostics import PlanError
from plugins.serving import serving_trace as st

TRACES = REPO_ROOT / "specs" / "data" / "traces"
CASE = CASES / "serving-azure-trace.plan"


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_nearest_rank():
    # book §3.1.2: of four requests p95 is the maximum; of 480 it is the 456th
    assert st.nearest_rank([3.0, 1.0, 4.0, 2.0]) == 4.0
    assert st.nearest_rank(range(1, 481)) == 456
    assert st.nearest_rank([7.0]) == 7.0
    with pytest.raises(ValueError):
        st.nearest_rank([])


def test_read_real_traces():
    conv = st.read_trace(TRACES / "azure-llm-2023-conv.csv")
    code = st.read_trace(TRACES / "azure-llm-2023-code.csv")
    assert len(conv) == 19_366 and len(code) == 8_819
    assert conv.measured == ()


def test_windows_partition_the_trace():
    tr = st.read_trace(TRACES / "azure-llm-2023-code.csv")
    rows = _rows(TRACES / "azure-llm-2023-code.csv")
    ws_ = st.windows(tr, 60.0)
    assert sum(w.requests for w in ws_) == len(rows)
    assert sum(w.input_tokens for w in ws_) == sum(int(r["num_prefill_tokens"]) for r in rows)
    assert sum(w.decode_steps for w in ws_) == sum(max(int(r["num_decode_tokens"]) - 1, 0) for r in rows)
    first = [r for r in rows if float(r["arrived_at"]) < 60]
    assert ws_[0].requests == len(first)
    assert len(ws_) == math.floor(max(float(r["arrived_at"]) for r in rows) / 60) + 1


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_trace_case_quantities(ws):
    rows = _rows(TRACES / "azure-llm-2023-conv.csv")
    n = len(rows)
    P = [int(r["num_prefill_tokens"]) for r in rows]
    G = [int(r["num_decode_tokens"]) for r in rows]
    assert qval(ws, "azure_conv.requests", "request") == n
    assert qval(ws, "azure_conv.mean_input", "token") == pytest.approx(sum(P) / n, rel=1e-12)
    assert qval(ws, "azure_conv.mean_output", "token") == pytest.approx(sum(G) / n, rel=1e-12)
    # decode j of a request reads P + j tokens, j = 0 … G−2
    num = sum(sum(p + j for j in range(g - 1)) for p, g in zip(P, G))
    assert qval(ws, "azure_conv.decode_mean_context", "token") == pytest.approx(
        num / sum(g - 1 for g in G if g > 1), rel=1e-12)
    K = math.floor(max(float(r["arrived_at"]) for r in rows) / 60) + 1
    assert qval(ws, "azure_conv.windows") == K
    busiest = max(sum(g - 1 for r, g in zip(rows, G) if float(r["arrived_at"]) // 60 == k) for k in range(K))
    assert qval(ws, "azure_conv.peak_decode_rate", "token/s") == pytest.approx(busiest / 60, rel=1e-12)


def test_trace_without_measurements_reports_no_latencies(ws):
    assert "azure_conv.ttft_p95" not in ws.nodes


def test_trace_cards_solve(run_cli):
    code, out, err = run_cli("solve", CASE)
    assert code == 0, err
    assert "as a whole number: azure_conv_batch8.cards >= 2" in out


MEASURED = """arrived_at,num_prefill_tokens,num_decode_tokens,first_token_at,last_token_at
0.0,100,5,0.5,0.9
1.0,200,1,1.2,1.2
2.0,300,3,2.1,3.1
3.0,400,11,4.0,5.0
"""


def test_measured_metrics(write_plan):
    p = write_plan(MEASURED, "m.csv")
    plan = write_plan('plan m { use trace { file = "m.csv"; window = 2 s } }\n')
    ws = dsl.load(plan)
    # TTFT 0.5, 0.2, 0.1, 1.0; latency 0.9, 0.2, 1.1, 2.0; inter-token 0.1, –, 0.5, 0.1
    assert qval(ws, "m.ttft_mean", "s") == pytest.approx((0.5 + 0.2 + 0.1 + 1.0) / 4, abs=1e-12)
    assert qval(ws, "m.ttft_p95", "s") == pytest.approx(1.0, abs=1e-12)          # 4 requests: the maximum
    assert qval(ws, "m.latency_mean", "s") == pytest.approx((0.9 + 0.2 + 1.1 + 2.0) / 4, abs=1e-12)
    assert qval(ws, "m.latency_p95", "s") == pytest.approx(2.0, abs=1e-12)
    assert qval(ws, "m.inter_token_mean", "ms") == pytest.approx((100 + 500 + 100) / 3, abs=1e-9)
    assert qval(ws, "m.window1_requests", "request") == 2
    assert qval(ws, "m.window1_input_rate", "token/s") == pytest.approx(300 / 2)
    assert qval(ws, "m.window2_decode_rate", "token/s") == pytest.approx((2 + 10) / 2)
    assert p.exists()


@pytest.mark.parametrize("text,row,col,what", [
    ("arrived_at,num_prefill_tokens\n0,1\n", 1, "num_decode_tokens", "no column"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,2\n1.5,abc,2\n", 3, "num_prefill_tokens", "not a token"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,2\n1.5,3\n", 3, "num_decode_tokens", "no value"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n-1,1,2\n", 2, "arrived_at", "≥ 0"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,2.5\n", 2, "num_decode_tokens", "whole number"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens,first_token_at\n5,1,2,4\n", 2, "first_token_at", "before"),
    # 10^23 tokens: beyond 2^53, not a count the simulators hold (it reached numpy as an OverflowError)
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,2\n0,100,99999999999999999999999\n", 3,
     "num_decode_tokens", "beyond what a trace counts"),
])
def test_malformed_rows(write_plan, run_cli, text, row, col, what):
    write_plan(text, "bad.csv")
    plan = write_plan('plan m { use trace { file = "bad.csv" } }\n')
    with pytest.raises(PlanError) as e:
        dsl.load(plan)
    d = next(d for d in e.value.diagnostics if d.code == "bad-trace")
    assert d.span.file.endswith("bad.csv") and d.span.line == row
    assert f"row {row}" in d.summary and f"'{col}'" in d.summary and what in d.summary
    code, out, err = run_cli("eval", plan)
    assert code == 1 and "Traceback" not in err
    assert f"bad.csv:{row}:" in err and "error[bad-trace]" in err


def test_empty_trace(write_plan):
    write_plan("arrived_at,num_prefill_tokens,num_decode_tokens\n", "e.csv")
    plan = write_plan('plan m { use trace { file = "e.csv" } }\n')
    with pytest.raises(PlanError) as e:
        dsl.load(plan)
    assert any(d.code == "bad-trace" and "no requests" in d.summary for d in e.value.diagnostics)


def test_missing_trace_file(write_plan):
    plan = write_plan('plan m { use trace { file = "nope.csv" } }\n')
    with pytest.raises(PlanError) as e:
        dsl.load(plan)
    assert any(d.code == "missing-file" for d in e.value.diagnostics)


def test_nearest_rank_float_quantile():
    # 0.95 · 20 = 19 exactly: the 19th, not the 20th (a double 0.95 is slightly off)
    assert st.nearest_rank(range(1, 21), 0.95) == 19
    assert st.nearest_rank(range(1, 481), 0.95) == 456

"""`use serving_search` (plugins/serving/serving_search.py): the SLO search over serving deployments.

The screen is checked against a brute force: every configuration of a small search simulated
through serving_sim, the least objective among those meeting the targets, compared with the
search's choice.  The KV transfer of a disaggregated pool is priced by hand from the model's
shape and the link's datasheet fields.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import dsl
from conftest import qval
from dsl.syntax.diagnostics import PlanError
from plugins.serving import serving_search as ss

HEAD = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"
"""

# 40 requests/s for 30 s, prompts of 1,000 and 3,000 tokens in turn, 20 output tokens: about
# 80,000 prompt tokens/s, more than one H100 prefills (Qwen3-8B, ~16 GFLOP per token at
# ~0.8 × 989 TFLOP/s ≈ 48,000 tokens/s), so the answer needs more than one GPU.
def _trace(path, n=1200, rate=40.0):
    rows = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    for i in range(n):
        rows.append(f"{i / rate:.6f},{1000 if i % 2 == 0 else 3000},20")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


SMALL = HEAD + """
plan small {
  model = qwen3_8b
  use serving_search {
    engine = vllm; max_model_len = 4096 token; trace = "t.csv"
    devices = [h100_sxm, a100_sxm_80gb]; links = [nvlink4]; gpu_hour = [3 USD/h, 2 USD/h]
    tp = [1, 2]; replicas = [1, 2, 3]
    max_num_seqs = [16 seq, 64 seq]; max_num_batched_tokens = [512 token, 4096 token]
    slo_ttft = 500 ms; slo_tpot = 50 ms; simulate = 4
  }
}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("search")
    _trace(d / "t.csv")
    (d / "s.plan").write_text(SMALL, encoding="utf-8")
    ws = dsl.load(d / "s.plan")
    return ws, ss.result_of(ws, "small"), d


def _workload(d):
    from plugins.serving.serving_trace import load_trace
    tr = load_trace(d / "t.csv")
    return ss.Workload(np.asarray(tr.arrived, float), np.asarray(tr.prefill, np.int64),
                       np.asarray(tr.decode, np.int64))


def test_choice_matches_a_brute_force_over_every_configuration(small):
    ws, res, d = small
    w = _workload(d)
    assert len(res) == 2 * 2 * 3 * 2 * 2          # devices × tp × replicas × seqs × chunks
    best = None
    for i in range(len(res)):
        if not res.cols["valid"][i]:
            continue
        s = ss.simulate(res, i, w, None)
        if s["ttft_p95"] <= 0.5 and s["tpot_p95"] <= 0.05:
            g = int(res.cols["gpus"][i])
            best = g if best is None else min(best, g)
    assert best is not None and best > 1            # one GPU cannot prefill 80,000 tokens/s
    r = res.row(res.chosen)
    assert r["gpus"] == best
    assert r["ttft_p95"] <= 0.5 and r["tpot_p95"] <= 0.05
    assert qval(ws, "small.search_gpus") == best
    assert qval(ws, "small.search_ttft_p95", "s") == pytest.approx(r["ttft_p95"], rel=1e-12)
    # the chosen knobs under vLLM's names, as `use engine` and `use batching` take them
    assert qval(ws, "small.search_max_num_seqs", "seq") == r["max_num_seqs"]
    assert qval(ws, "small.search_max_num_batched_tokens", "token") == r["max_num_batched_tokens"]
    assert r["max_num_batched_tokens"] == int(res.cols["T"][res.chosen])


def test_pareto_front_has_no_dominated_member(small):
    _, res, _ = small
    pts = {i: (res.row(i)["gpus"], res.row(i)["ttft_p95"], res.row(i)["tpot_p95"]) for i in res.simulated}
    assert res.chosen in res.front and set(res.front) <= set(res.simulated)

    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    for i in res.front:
        assert not any(dominates(pts[j], pts[i]) for j in pts)
    for i in set(res.simulated) - set(res.front):
        assert any(dominates(pts[j], pts[i]) for j in res.front)
    # by hand: (1, 5, 5) and (2, 1, 1) trade off; (2, 2, 1) is dominated by (2, 1, 1); duplicates stay
    assert ss.pareto([(1, 5, 5), (2, 1, 1), (2, 2, 1), (2, 1, 1)]) == [0, 1, 3]


def test_cost_is_gpus_times_price_over_the_trace_tokens(small):
    _, res, d = small
    w = _workload(d)
    r = res.row(res.chosen)
    price = {"h100_sxm": 3.0, "a100_sxm_80gb": 2.0}[r["device"]]
    # the trace: 1,200 requests of (1,000 or 3,000) + 20 tokens over 1,199/40 = 29.975 s
    tokens = 600 * 1020 + 600 * 3020
    assert int(w.prompt.sum() + w.output.sum()) == tokens
    assert r["cost"] == pytest.approx(r["gpus"] * price / 3600 * 29.975 / tokens * 1e6, rel=1e-9)


def test_search_is_deterministic(small, run_cli):
    _, _, d = small
    outs = [run_cli("eval", "--format", "json", str(d / "s.plan"), cwd=d) for _ in range(2)]
    assert outs[0][0] == 0 and outs[0][1] == outs[1][1]
    assert "search_gpus" in json.dumps(json.loads(outs[0][1]))


def test_layouts_that_do_not_fit_are_skipped(tmp_path):
    _trace(tmp_path / "t.csv", n=200, rate=4.0)
    body = HEAD + """
plan moe {
  model = qwen3_30b_a3b
  use serving_search {
    engine = vllm; max_model_len = 4096 token; trace = "t.csv"
    devices = [rtx4090]; links = [pcie4_x16]
    tp = [1, 2, 3, 4]; replicas = [1, 2]
    max_num_seqs = [16 seq]; max_num_batched_tokens = [8 token, 4096 token]
    slo_ttft = 5 s; slo_tpot = 200 ms; simulate = 2
  }
}
"""
    (tmp_path / "m.plan").write_text(body, encoding="utf-8")
    ws = dsl.load(tmp_path / "m.plan")
    res = ss.result_of(ws, "moe")
    sk = res.meta["skipped"]
    # 61 GB of BF16 weights: tp 1 and 2 leave no KV budget on a 24 GB card; 32 heads / 3 is no
    # whole number; a chunk of 8 tokens is below max_num_seqs 16
    assert sk["tp does not divide the heads"] == 4          # tp 3: 2 replicas × 2 chunks
    assert sk["does not fit (KV budget)"] == 8              # tp 1, 2
    assert sk["chunk below max_num_seqs"] == 2               # tp 4, chunk 8
    assert res.meta["valid"] == 2
    for i in res.simulated:
        assert res.cols["valid"][i] and res.row(i)["tp"] == 4


def test_kv_transfer_priced_by_hand(small):
    _, res, _ = small
    g = next(g for g in res.layouts if g.tp == 2)
    # Qwen3-8B: 36 layers × 8 KV heads × 128 × (K, V) × 2 B = 147,456 B per token; tp 2 halves it
    assert g.c["kv_bytes_per_token"] == pytest.approx(36 * 8 * 128 * 2 * 2 / 2, rel=1e-12)
    # nic_400g: 400 Gbit/s = 50 GB/s at 94 %, 14 µs latency, 8.4 µs launch (catalog fields)
    link = {"bandwidth": 50e9, "efficiency": 0.94, "latency": 14e-6, "launch": 8.4e-6}
    t = float(ss.kv_transfer_time(g.c, 1000, link))
    assert t == pytest.approx(8.4e-6 + 14e-6 + 1000 * 73728 / (50e9 * 0.94), rel=1e-12)   # 1.591 ms


def test_disaggregated_tpot_counts_the_transfer(tmp_path):
    _trace(tmp_path / "t.csv", n=100, rate=2.0)
    body = HEAD + """
plan dis {
  model = qwen3_8b
  use serving_search {
    engine = vllm; max_model_len = 4096 token; trace = "t.csv"
    devices = [h100_sxm]; tp = [1]; replicas = [1]
    max_num_seqs = [64 seq]; max_num_batched_tokens = [4096 token]
    prefill_replicas = [1]; decode_replicas = [1]; kv_link = nic_400g
    slo_ttft = 2 s; slo_tpot = 100 ms; simulate = 2
  }
}
"""
    (tmp_path / "d.plan").write_text(body, encoding="utf-8")
    ws = dsl.load(tmp_path / "d.plan")
    res = ss.result_of(ws, "dis")
    i = int(np.flatnonzero(res.cols["disagg"] == 1)[0])
    assert res.row(i)["gpus"] == 2
    w = _workload(tmp_path)
    fast = ss.simulate(res, i, w, {"bandwidth": 1e15})
    slow = ss.simulate(res, i, w, {"bandwidth": 1e9})
    # at 1 GB/s a 3,000-token prompt's KV (3,000 × 147,456 B = 442 MB) arrives 0.442 s later,
    # before its 19 decodes: its TPOT grows by 0.442 / 19 = 23.3 ms; TTFT is the prefill pool's
    assert fast["ttft_p95"] == slow["ttft_p95"]
    assert slow["tpot_p95"] - fast["tpot_p95"] == pytest.approx(3000 * 147456 / 1e9 / 19, rel=0.01)


def test_errors_are_located(tmp_path):
    _trace(tmp_path / "t.csv", n=20, rate=2.0)
    base = SMALL.replace("gpu_hour = [3 USD/h, 2 USD/h]", "")
    for text, code, words in (
            (base.replace("simulate = 4", 'simulate = 4; objective = "cost"'), "missing-parameter", "GPU-hour"),
            (base.replace("simulate = 4", "simulate = 4; prefill_replicas = [1]; decode_replicas = [1]"),
             "missing-parameter", "link their KV"),
            (base.replace("simulate = 4", "simulate = 4; prefill_replicas = [1]"), "missing-parameter",
             "both prefill_replicas"),
            (base.replace("links = [nvlink4]", ""), "missing-parameter", "needs the link")):
        p = tmp_path / "e.plan"
        p.write_text(text, encoding="utf-8")
        with pytest.raises(PlanError) as e:
            dsl.load(p)
        d = e.value.diagnostics[0]
        assert d.code == code and words in d.summary, d.summary
        assert d.span.line > 5


def test_pipeline_step_adds_the_stage_sends_by_hand(small):
    from dataclasses import replace

    from plugins.serving.serving_step import step_time
    _, res, _ = small
    g1 = next(g for g in res.layouts if g.tp == 1 and g.device == "h100_sxm")
    link = {"bandwidth": 450e9, "efficiency": 0.824, "latency": 3.4e-6, "launch": 8.4e-6}   # nvlink4 fields
    g2 = replace(g1, pp=2, link=link)
    base = step_time(g1.c, 100, 10, 1000)
    # one send between the two stages of the step's 110 tokens × 4,096 hidden × 2 B
    send = 8.4e-6 + 3.4e-6 + 110 * 4096 * 2 / (450e9 * 0.824)
    assert ss.step_fn(g2)(g2.c, 100, 10, 1000) == pytest.approx(base + send, rel=1e-12)
    assert ss.step_fn(g1)(g1.c, 100, 10, 1000) == base


def test_the_simulators_step_is_the_step_cost_bit_for_bit(small):
    """The step costs' ``for_numbers`` (one iteration on Python numbers, terms remembered across
    the candidates of a layout) give the step costs' own values exactly: the aggregated step
    with and without pipeline sends, and a decode pool's step of a mixture of experts (its
    expert count raises a float to a numpy integer power, which may differ from Python's in the
    last bit: the decode pool's evaluator must compute it the same way)."""
    from dataclasses import replace

    from plugins.training.layout_model import ops
    from plugins.serving.serving_step import step_constants
    _, res, _ = small
    g1 = next(g for g in res.layouts if g.tp == 1 and g.device == "h100_sxm")
    g2 = replace(g1, pp=2, link={"bandwidth": 450e9, "efficiency": 0.824, "latency": 3.4e-6, "launch": 8.4e-6})
    ws = dsl.load("m.plan", text=HEAD + "plan m { model = qwen3_30b_a3b; device = a100_sxm_80gb; "
                  "use serving_step { tp = 2; link = nvlink4 } }")
    gm = ss.Layout("a100_sxm_80gb", 2, 1, c=step_constants(ws, "m"))
    o = ops("python")
    rng = np.random.default_rng(5)
    for g in (g1, g2, gm):
        f, dec = ss.step_fn(g), ss.decode_fn(g)
        one, one_dec = f.for_numbers(g.c), dec.for_numbers(g.c)
        for D in range(0, 200):
            for P, K, ps in ((0, 0, None), (int(rng.integers(1, 3000)), 0, 1), (512, int(rng.integers(1, 4000)), 0)):
                C = D * int(rng.integers(0, 9000))
                assert one(P, D, C, K, ps) == float(f(g.c, P, D, C, o, prefill_prefix=K, prefill_seqs=ps))
                assert one_dec(P, D, C) == float(dec(g.c, P, D, C, o))
    assert ss.step_fn(g1).for_numbers(dict(g1.c)) is ss.step_fn(g1).for_numbers(g1.c)    # one memo, every candidate


def test_simulated_requests_are_bounded_by_a_count(small):
    """The limit `search_requests` bounds a search's simulations by the requests they follow,
    not by a clock: with room for 3,000 requests, the small search (1,200 requests per
    aggregated simulation) simulates two configurations — the first two it simulates without
    the limit, with the same figures — and records the third, which would need 1,200 more."""
    from dsl.syntax import limits as L
    _, res, d = small
    w = _workload(d)
    full = ss.run(res.layouts, ss.candidates(res.layouts, [1, 2, 3], [16, 64], [512, 4096]), w, slo_ttft=0.5,
                  slo_tpot=0.05, max_model_len=4096, simulate_k=4)
    with L.override(search_requests=3000):
        cut = ss.run(res.layouts, ss.candidates(res.layouts, [1, 2, 3], [16, 64], [512, 4096]), w, slo_ttft=0.5,
                     slo_tpot=0.05, max_model_len=4096, simulate_k=4)
    assert full.meta["simulated"] > 2 and full.meta["cut"] is None
    assert full.meta["requests"] == 1200 * full.meta["simulated"]
    assert cut.meta["simulated"] == 2 and cut.meta["requests"] == 2400 and cut.meta["max_requests"] == 3000
    i, need = cut.meta["cut"]
    assert need == 1200 and i in full.simulated and i not in cut.simulated
    for j in cut.simulated:
        assert cut.sim[j] == full.sim[j]
    # a disaggregated candidate counts both pools: every request, and again those with more than one token
    cols = {"disagg": np.array([0, 1])}
    small_w = ss.Workload(np.zeros(3), np.array([5, 5, 5]), np.array([1, 2, 7]))
    assert [ss.requests_simulated(cols, k, small_w) for k in (0, 1)] == [3, 5]


def test_fuzz_default_search_is_bounded_by_the_limit_and_warns():
    """Fuzz finding (tests/fuzzing.py mutate_case seeds 2255 and 14643): serving-slo-azure.plan
    without its `objective = "cost"; simulate = 3` line ran the default search — then 8
    configurations, up to 28 simulations of the 19,366-request trace per plan, 19 s of CPU.
    The default is now 4, and the limit search_requests (120,000) allows at most
    ⌊120,000 / 19,366⌋ = 6 simulations of that trace per plan, whatever the machine."""
    from conftest import CASES
    # the mutation, rebuilt directly (the seeds pick another case as the case list grows)
    name = "serving-slo-azure.plan"
    lines = (CASES / name).read_text(encoding="utf-8").split("\n")
    text = "\n".join(ln for ln in lines if ln.strip() != 'objective = "cost"; simulate = 3')
    assert "simulate = 3" not in text and len(text.split("\n")) == len(lines) - 1
    ws = dsl.load(CASES / name, text=text)
    warned = {d.summary.split("'")[1] for d in ws.diagnostics if d.code == "limit"}
    for plan in ("qwen3_8b_azure", "qwen3_30b_a3b_azure", "qwen3_8b_azure_x8"):
        res = ss.result_of(ws, plan)
        m = res.meta
        assert len(res.sim) == m["simulated"] and m["max_requests"] == 120_000
        assert 19_366 * m["simulated"] <= m["requests"] <= 120_000      # each simulation follows every request
        assert m["simulated"] <= 6
        assert (m["cut"] is not None) == (plan in warned)


ONE = HEAD + """
plan one {
  model = qwen3_8b
  use serving_search {
    engine = vllm; max_model_len = 4096 token; trace = "t.csv"
    devices = [h100_sxm]; links = [nvlink4]; tp = [1]; replicas = [1]
    max_num_seqs = [16 seq]; max_num_batched_tokens = [4096 token]
    slo_ttft = 5 s; slo_tpot = 200 ms; simulate = 1
  }
}
"""


def _one(tmp_path, rows):
    """Plan `one` (a single H100 configuration) on a trace of (arrival, input, output) rows."""
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                                    + "".join(f"{a},{p},{g}\n" for a, p, g in rows), encoding="utf-8")
    (tmp_path / "o.plan").write_text(ONE, encoding="utf-8")
    return dsl.load(tmp_path / "o.plan")


def test_requests_above_max_model_len_are_rejected_as_batching_does(tmp_path):
    """A request of more input + output tokens than max_model_len is rejected by the engine
    (vLLM's server answers HTTP 400) and the others are served: the search simulates the rest,
    counts the rejected ones and warns at max_model_len, as `use batching` does."""
    ws = _one(tmp_path, [(i / 4, 4090, 7) if i % 4 == 0 else (i / 4, 1000, 20) for i in range(20)])
    # requests 0, 4, 8, 12, 16 have 4,090 + 7 = 4,097 tokens, one above max_model_len
    assert qval(ws, "one.search_rejected_requests", "request") == 5
    assert ss.result_of(ws, "one").meta["requests"] == 15
    w = [d for d in ws.diagnostics if d.code == "rejected"]
    assert len(w) == 1 and "5 of the 20 requests" in w[0].summary and "4,097" in w[0].summary
    assert (w[0].span.line, w[0].span.column) == (8, 36)


def test_a_longest_request_within_max_model_len_is_not_rejected(tmp_path):
    """The check is on each request's input + output, not the longest input plus the longest
    output of different requests."""
    ws = _one(tmp_path, [(0, 4000, 2), (0.5, 10, 100)])      # 4,000 + 100 would be 4,100 > 4,096
    assert qval(ws, "one.search_rejected_requests", "request") == 0


BURST = HEAD + """
plan b {
  model = qwen3_8b
  use serving_search {
    engine = vllm; max_model_len = 4096 token; trace = "t.csv"
    devices = [h100_sxm]; links = [nvlink4]
    tp = [1, 2]; replicas = [1, 2]
    max_num_seqs = [128 seq]; max_num_batched_tokens = [8192 token]
    slo_ttft = 1 s; slo_tpot = 50 ms; simulate = 2
  }
}
"""


@pytest.mark.parametrize("rows", [["0,100,10"], ["0,100,10"] * 100, ["0,100,10", "1e-9,100,10"]])
def test_burst_trace_is_screened_and_simulated(tmp_path, rows):
    # one request, 100 at t = 0, two 1 ns apart: a span of (nearly) 0 is no infinite rate but a finite amount of
    # work (it was "0 keep up in the screen" and nothing simulated).  The choice is the brute force's: the fewest
    # GPUs among every configuration simulated on the trace that meets both targets
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n",
                                    encoding="utf-8")
    (tmp_path / "b.plan").write_text(BURST, encoding="utf-8")
    ws = dsl.load(tmp_path / "b.plan")
    res = ss.result_of(ws, "b")
    assert res.meta["stable"] == len(res) and res.simulated and res.chosen is not None
    w = _workload(tmp_path)
    meets = [int(res.cols["gpus"][i]) for i in range(len(res))
             if (lambda s: s["ttft_p95"] <= 1 and s["tpot_p95"] <= 0.05)(ss.simulate(res, i, w, None))]
    assert res.row(res.chosen)["gpus"] == min(meets) == 1


def _line_of(text, needle):
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_empty_or_zero_search_lists_are_located_errors(tmp_path):
    _trace(tmp_path / "t.csv", n=20, rate=2.0)
    for old, new, words in (("tp = [1, 2]", "tp = []", "'tp' needs at least 1 item, got 0"),
                            ("replicas = [1, 2, 3]", "replicas = []", "'replicas' needs at least 1 item"),
                            ("max_num_seqs = [16 seq, 64 seq]", "max_num_seqs = [0 seq]",
                             "item 1 of 'max_num_seqs' = 0 seq is outside [1, inf)")):
        text = SMALL.replace(old, new)
        (tmp_path / "e.plan").write_text(text, encoding="utf-8")
        with pytest.raises(PlanError) as e:
            dsl.load(tmp_path / "e.plan")
        d = e.value.diagnostics[0]
        assert d.code == "out-of-range" and words in d.summary, d.summary
        assert d.span.line == _line_of(text, new)              # at the list
        assert not [x for x in e.value.diagnostics if x.code == "unmet"]


def test_repeated_list_items_are_searched_once(tmp_path):
    # tp = [1, 1, 2] is tp = [1, 2] with a warning: a repeat would simulate one configuration twice (two rows, one
    # "chosen", its twin on the "front")
    _trace(tmp_path / "t.csv", n=20, rate=2.0)
    (tmp_path / "d.plan").write_text(SMALL.replace("tp = [1, 2]", "tp = [1, 1, 2]").replace(
        "max_num_seqs = [16 seq, 64 seq]", "max_num_seqs = [16 seq, 64 seq, 16 seq]"), encoding="utf-8")
    ws = dsl.load(tmp_path / "d.plan")
    res = ss.result_of(ws, "small")
    assert len(res) == 2 * 2 * 3 * 2 * 2
    w = [d for d in ws.diagnostics if d.code == "duplicate"]
    assert [d.summary for d in w] == ["'tp' lists 1 more than once; each configuration is searched once",
                                      "'max_num_seqs' lists 16 seq more than once; each configuration is searched "
                                      "once"]
    rows = [tuple(sorted((k, v) for k, v in res.row(i).items() if k != "index")) for i in res.simulated]
    assert len(rows) == len(set(rows))


def test_no_configuration_runs_names_the_cause(tmp_path):
    # tp 3 and 5 split none of qwen3_8b's 32 heads: all 2 devices × 2 tp × 3 replicas × 2 × 2 = 48 configurations are
    # skipped for it, and the warning says so at tp (not "add larger tp … faster devices")
    _trace(tmp_path / "t.csv", n=20, rate=2.0)
    text = SMALL.replace("tp = [1, 2]", "tp = [3, 5]")
    (tmp_path / "n.plan").write_text(text, encoding="utf-8")
    ws = dsl.load(tmp_path / "n.plan")
    w = [d for d in ws.diagnostics if d.code == "unmet"]
    assert len(w) == 1 and w[0].span.line == _line_of(text, "tp = [3, 5]")
    assert "can run: tp does not divide the heads (48)" in w[0].summary
    assert "divide the 32 query heads" in w[0].hint and "[1, 2, 4, 8, 16, 32]" in w[0].hint
    assert "larger tp" not in w[0].hint
    assert qval(ws, "small.search_candidates") == 48 and qval(ws, "small.search_valid") == 0
    assert ws.nodes["small.search_candidates"].headline


def test_tp_above_one_host_is_left_out(tmp_path):
    # tp 16 on 8-GPU hosts would price its all-reduces on NVLink across hosts: the search leaves those
    # layouts out (2 devices × 3 replicas × 2 × 2 = 24 of the 48 configurations), unless the plan states a
    # larger NVLink domain; with tp = [16] alone nothing runs and the warning names that cause at tp
    _trace(tmp_path / "t.csv", n=20, rate=2.0)
    both = SMALL.replace("tp = [1, 2]", "tp = [1, 16]")
    (tmp_path / "a.plan").write_text(both, encoding="utf-8")
    ws = dsl.load(tmp_path / "a.plan")
    assert qval(ws, "small.search_candidates") == 48 and qval(ws, "small.search_valid") <= 24
    assert not [d for d in ws.diagnostics if d.code == "unmet"]
    (tmp_path / "b.plan").write_text(both.replace("model = qwen3_8b", "model = qwen3_8b; gpus_per_host = 16"),
                                     encoding="utf-8")
    assert qval(dsl.load(tmp_path / "b.plan"), "small.search_valid") > qval(ws, "small.search_valid")
    only = SMALL.replace("tp = [1, 2]", "tp = [16]")
    (tmp_path / "c.plan").write_text(only, encoding="utf-8")
    w = [d for d in dsl.load(tmp_path / "c.plan").diagnostics if d.code == "unmet"]
    assert len(w) == 1 and w[0].span.line == _line_of(only, "tp = [16]")
    assert "can run: tp above one host's GPUs (24)" in w[0].summary and "gpus_per_host" in w[0].hint


def test_request_without_output_is_the_trace_rows_error(tmp_path):
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n0.5,100,0\n",
                                    encoding="utf-8")
    (tmp_path / "b.plan").write_text(BURST, encoding="utf-8")
    with pytest.raises(PlanError) as e:
        dsl.load(tmp_path / "b.plan")
    d = e.value.diagnostics[0]
    assert d.code == "bad-trace" and d.span.file.endswith("t.csv") and d.span.line == 3
    assert "0 output tokens" in d.summary and d.related


def test_burst_cost_is_priced_over_the_simulated_span(tmp_path):
    # 100 requests at t = 0 last 0 s as a trace: the cost per million tokens is GPUs × price × the time the
    # deployment serves them (its simulated span) over their 100 · (100 + 10) tokens -- not ~0
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "0,100,10\n" * 100,
                                    encoding="utf-8")
    (tmp_path / "b.plan").write_text(BURST.replace("simulate = 2", "simulate = 2; gpu_hour = [3.6 USD/h]"),
                                     encoding="utf-8")
    ws = dsl.load(tmp_path / "b.plan")
    res = ss.result_of(ws, "b")
    for i in res.simulated:
        r = res.row(i)
        assert r["cost"] == pytest.approx(r["gpus"] * 0.001 * r["span"] / (100 * 110) * 1e6, rel=1e-12)
        assert r["cost"] > 1e-3


def test_sglang_search_sizes_each_tp_with_its_fraction(tmp_path):
    """SGLang 0.3 – 0.4 lowers mem_fraction_static as tp grows (0.88, 0.87, 0.85 at tp 1, 2, 4):
    the search sizes each layout's pool with the fraction `use engine` would use at that tp."""
    (tmp_path / "s.plan").write_text(HEAD + """
plan sg {
  model = qwen3_8b
  use serving_search {
    engine = sglang; max_model_len = 4096 token
    rate = 2 request/s; requests = 50; input = 512 token; output = 32 token
    devices = [h100_sxm]; links = [nvlink4]; tp = [1, 2, 4]; replicas = [1]
    max_num_seqs = [64 seq]; max_num_batched_tokens = [4096 token]
    slo_ttft = 5 s; slo_tpot = 200 ms; simulate = 1
  }
}
""", encoding="utf-8")
    ws = dsl.load(tmp_path / "s.plan")
    res = ss.result_of(ws, "sg")
    got = {g.tp: g.util for g in res.layouts}
    assert got == {1: 0.88, 2: 0.87, 4: 0.85}

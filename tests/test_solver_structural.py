"""`solve` for whole numbers a plugin reads to build the plan (a scheduler's sequence limit, an
engine's replicas or TP degree): the expressions hold such a number fixed, so the solver
re-evaluates the plan at candidate values (doubling, then bisection) and checks that the
relation is monotone at the values it tried.

Numbers:
* the burst toy: 20 requests of 100 prompt tokens and 1 output token all arrive at t = 0; one
  iteration costs 10 ms + 10 µs per scheduled token (the affine step cost of `use batching`),
  the token budget never binds, so with at most m requests running the requests finish in
  batches of m. The 19th of 20 (the nearest-rank p95) is in batch j = ceil(19/m), and batch i
  takes 10 ms + (its requests) × 1 ms. Hence TTFT p95(m) = j·(10 + m) ms when batch j is full,
  else (j − 1)(10 + m) + 10 + (20 − (j − 1)m) ms:
  m = 1: 209, 2: 120, 3: 90, 4: 70, 6: 60, 7: 50, 18: 40, 19: 29, 20 and above: 30 (ms).
* the engine's weights per GPU: Qwen3-8B's 8.19e9 parameters in BF16 are 16.4 GB (Qwen3
  model card), split over tp GPUs: 7.6 GiB at tp = 2, 3.8 GiB at tp = 4; tp = 3 does not divide
  its 32 query heads (config.json), so 4 is the smallest TP degree under 5 GiB.
* the serving case: the answer is found by brute force over rebuilt plans in the test itself.
"""
from __future__ import annotations

import json

import pytest
import sympy as sp

from conftest import run_cli
from dsl.results.evaluation import evaluate_file
from dsl.results.solver import solve_query
from dsl.syntax import limits as L
from dsl.syntax.diagnostics import PlanError
from dsl.syntax.parser import parse_query

BURST = """\
plan p {
  use batching {
    trace = "burst.csv"; kv_tokens = 100000 token; max_num_batched_tokens = 100000 token
    max_num_seqs = 16 seq%s
    step_overhead = 10 ms; step_token = 10 us/token; step_context = 0 s/token
  }
}
%s
"""


def _burst(tmp_path, solves: str = "", rng: str = "", name: str = "burst.plan"):
    (tmp_path / "burst.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "0,100,1\n" * 20,
                                        encoding="utf-8")
    f = tmp_path / name
    f.write_text(BURST % (rng, solves), encoding="utf-8")
    return f


def _solve(ev, text: str):
    return solve_query(ev, parse_query(text))


def test_smallest_sequence_limit_found_by_re_evaluation(tmp_path):
    ev = evaluate_file(_burst(tmp_path))
    assert "p.batching.max_num_seqs" in ev.structural
    s = _solve(ev, "p.batching.max_num_seqs for p.ttft_p95 <= 100 ms")
    # m = 2: 10 batches of 12 ms = 120 ms; m = 3: 6 batches of 13 ms + one of 12 ms = 90 ms
    assert s.method == "re-evaluation" and s.answer == 3 and s.whole == 3 and s.value == 3
    assert s.holds == "p.batching.max_num_seqs >= boundary"
    assert "16 (nominal), 1, 2, 4, 3" in s.note and "3 is the smallest whole number" in s.note
    assert "at 2: 0.12 s > 0.1 s, at 3: 0.09 s <= 0.1 s" in s.note
    assert "warning" not in s.note


def test_largest_value_when_the_relation_holds_below(tmp_path):
    ev = evaluate_file(_burst(tmp_path))
    # TTFT p95 >= 60 ms holds up to m = 6 (60 ms) and not at 7 (50 ms)
    s = _solve(ev, "p.batching.max_num_seqs for p.ttft_p95 >= 60 ms")
    assert s.answer == 6 and "largest" in s.note and s.holds == "p.batching.max_num_seqs <= boundary"


def test_equality_exact_or_between_two_whole_numbers(tmp_path):
    ev = evaluate_file(_burst(tmp_path))
    s = _solve(ev, "p.batching.max_num_seqs for p.ttft_p95 == 90 ms")
    assert s.answer == 3 and "equal at 3" in s.note
    # 120 ms at 2, 90 ms at 3: no whole number makes them equal; 3 is the first at which the
    # TTFT has come down to 100 ms (a whole-number target answers a whole number)
    s = _solve(ev, "p.batching.max_num_seqs for p.ttft_p95 == 100 ms")
    assert s.answer == 3 and s.whole == 3 and s.holds is None
    assert "no whole number makes the two sides equal, and 3 is the smallest at which they have met" in s.note
    assert "(p.ttft_p95 <= 100 ms)" in s.note and "at 2: 0.12 s > 0.1 s, at 3: 0.09 s < 0.1 s" in s.note


def test_non_monotone_relation_is_flagged(tmp_path):
    # within the declared range 16..24: 40 ms up to 18, 29 ms at 19, 30 ms from 20 on
    ev = evaluate_file(_burst(tmp_path, rng=" in [16 seq, 24 seq]"))
    s = _solve(ev, "p.batching.max_num_seqs for p.ttft_p95 <= 35 ms")
    assert s.answer == 19
    assert "warning: the relation is not monotone in p.batching.max_num_seqs" in s.note
    assert "plan sweep" in s.note
    # the search stays in the declared range
    s = _solve(ev, "p.batching.max_num_seqs for p.ttft_p95 <= 100 ms")
    assert s.answer == 16 and "lowest allowed value" in s.note


def test_no_boundary_when_the_sides_stop_changing(tmp_path):
    ev = evaluate_file(_burst(tmp_path))
    s = _solve(ev, "p.batching.max_num_seqs for p.ttft_p95 <= 1 ms")    # never below 29 ms
    assert s.answer is None and "holds for no value" in s.note


def test_limit_on_re_evaluations_is_a_located_error(tmp_path):
    f = _burst(tmp_path, "solve p.batching.max_num_seqs for p.ttft_p95 <= 100 ms")
    ev = evaluate_file(f)
    with L.override(solve_evaluations=3):
        with pytest.raises(PlanError) as e:
            solve_query(ev, ev.queries[0])
    d = e.value.diagnostics[0]
    assert d.code == "limit" and (d.span.line, d.span.column) == (8, 1)
    assert "more than 3 evaluations" in d.summary and "1, 2, 4" in d.summary
    assert "--limit solve_evaluations=N" in d.hint and "default 40" in d.hint
    code, out, err = run_cli("--limit", "solve_evaluations=3", "solve", f)
    assert code == 1 and "error[limit]" in err and "burst.plan:8:1" in err
    code, out, err = run_cli("--limit", "solve_evaluations=4", "solve", f)
    assert code == 0 and "= 3 seq" in out, err


def test_named_solve_get_json_and_determinism(tmp_path):
    f = _burst(tmp_path, "solve seqs: p.batching.max_num_seqs for p.ttft_p95 <= 100 ms\n"
                         "require few: seqs <= 4 seq")
    code, out, err = run_cli("get", f, "seqs")
    assert (code, out.strip()) == (0, "3"), err
    code, out, err = run_cli("get", f, "few")
    assert (code, out.strip()) == (0, "true"), err
    code, out, err = run_cli("eval", f, "--format", "json")
    assert code == 0, err
    sol = json.loads(out)["solves"]["seqs"]
    assert (sol["answer"], sol["whole"], sol["method"], sol["unit"]) == (3, 3, "re-evaluation", "seq")
    first = run_cli("solve", f)
    again = run_cli("solve", f)
    assert first[0] == 0 and first == again
    assert "p.batching.max_num_seqs = 3 seq   (nominal 16 seq; re-evaluation)" in first[1]
    js = [run_cli("solve", f, "--format", "json")[1] for _ in range(2)]
    assert js[0] == js[1] and json.loads(js[0])["solutions"][0]["answer"] == 3


def test_choices_are_still_refused_and_continuous_structural_inputs_explained(tmp_path):
    ev = evaluate_file(_burst(tmp_path))
    with pytest.raises(PlanError) as e:
        _solve(ev, "p.batching.seed for p.ttft_p95 <= 1 s")        # an integer knob that is not a count
    assert "is a structural parameter" in e.value.diagnostics[0].summary
    with pytest.raises(PlanError) as e:
        _solve(ev, "p.batching.step_token for p.ttft_p95 <= 50 ms")
    d = e.value.diagnostics[0]
    assert "only through the plan's structure" in d.summary and "plan sweep" in d.hint


ENGINE = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"
plan p {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; max_model_len = 8192 token }
%s}
"""


def test_integer_count_knob_tp_skips_values_the_plan_cannot_be_built_at(tmp_path):
    f = tmp_path / "tp.plan"
    f.write_text(ENGINE % "", encoding="utf-8")
    ev = evaluate_file(f)
    assert ev.param_specs["p.engine.tp"].kind == "int"
    s = _solve(ev, "p.engine.tp for p.weights_per_gpu <= 5 GiB")
    assert s.answer == 4 and s.method == "re-evaluation"
    assert "cannot be built at p.engine.tp = 3" in s.note and "32 query heads" in s.note
    assert "at 2: 7.628 GiB > 5 GiB, at 4: 3.814 GiB <= 5 GiB" in s.note


def test_engine_replicas_for_a_ttft_target_match_brute_force(tmp_path):
    pytest.importorskip("plugins.serving.serving_sim")
    f = tmp_path / "serve.plan"
    f.write_text(ENGINE % '  use batching { arrivals = "poisson"; rate = 200 request/s; requests = 600; seed = 3\n'
                 '                 input = 1024 token; output = 128 token }\n', encoding="utf-8")
    ev = evaluate_file(f)
    assert "p.engine.replicas" in ev.structural
    s = _solve(ev, "p.engine.replicas for p.ttft_p95 <= 2 s")
    # brute force: rebuild the plan at 1, 2, … replicas and take the first that meets 2 s
    brute = None
    for r in range(1, 17):
        e = evaluate_file(f, plugins=ev.plugins, overrides={"p.engine.replicas": sp.Integer(r)})
        if float(e.base_value("p.ttft_p95")) <= 2.0:
            brute = r
            break
    assert brute is not None and brute > 1           # one replica does not keep up
    assert s.answer == brute and s.method == "re-evaluation"
    assert "smallest whole number" in s.note


def _branching_plugin():
    import types

    from dsl.plugin import hookimpl

    @hookimpl
    def plan_quantities_price(ctx):
        if not ctx.defined("n"):
            return
        factor = 2 if ctx.value("n") < 10 else 3      # a structural decision on the nominal value
        ctx.define("q", factor * ctx.param("n"), "", "n times a factor chosen by n")

    mod = types.ModuleType("ext_branching_whole")
    mod.plan_quantities_price = plan_quantities_price
    return mod


def test_closed_form_answer_whose_structure_differs_is_replaced_by_a_search(tmp_path):
    from dsl.testing import evaluate_snippet
    ev = evaluate_snippet("plan p {\n  n = 5\n}\n", plugins=[_branching_plugin()], directory=tmp_path)
    assert "p.n" in ev.structural
    # the expressions (q = 2n, the structure at n = 5) answer n >= 15; rebuilt, q = 2n below 10
    # and 3n from 10 on: q(9) = 18 < 30, q(10) = 30, so 10 is the smallest whole n
    s = _solve(ev, "p.n for p.q >= 30")
    assert s.method == "re-evaluation" and s.answer == 10
    assert "the plan rebuilt at the closed-form answer differs" in s.note
    assert "at 9: 18 < 30, at 10: 30 >= 30" in s.note
    # below 10 the structure is the one of the nominal value: the closed form stands
    s = _solve(ev, "p.n for p.q >= 12")
    assert s.method == "symbolic" and s.answer == 6 and "structure is the same there" in s.note


# ---------------------------------------------------------------- a pipeline's micro-batch count
PIPE = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 2e12 token; seq_len = 8192 token; global_batch = 1024 seq; deadline = %s }
plan p {
  model = llama31_70b; workload = w; device = h100_sxm; gpus = %d; gpus_per_host = 8; mfu = 40 %%
  use memory { weights = "bf16"; grads = "fp32"; master = "fp32"; optimizer = "adamw" }
  use finish {}
  use layout { tp = 8; pp = 4; zero = 1; link = nvlink4; nic = ib_ndr_400g; nics_per_host = 8 }
}
"""


def test_a_pipeline_rebuilt_when_the_gpu_count_changes_its_micro_batches(tmp_path):
    """The pipeline's schedule has one slot per micro-batch, m = global batch / (dp · micro-batch)
    with dp = gpus / (tp · pp): a sweep or solve over the GPU count rebuilds the plan, and
    agrees with the plan evaluated at that count.  With tp·pp = 32 and a batch of 1,024, the
    GPU counts with whole micro-batches are 32·dp for dp dividing 1,024; if 512 GPUs miss the
    deadline, the next such count, 1,024, is the answer."""
    f = tmp_path / "pipe.plan"
    f.write_text(PIPE % ("60 day", 512))
    at = {}
    for g in (512, 1024):
        g_file = tmp_path / f"pipe{g}.plan"
        g_file.write_text(PIPE % ("60 day", g))
        ws = evaluate_file(str(g_file))
        at[g] = (ws.value("p.step_time"), ws.value("p.finish_time"))
    from dsl.results.sweep import parse_vary, run
    ws = evaluate_file(str(f))
    assert "p.gpus" in ws.structural
    res = run(ws, "p", [parse_vary(ws, "p.gpus=512:1024:3")])
    cols = dict(zip(res.columns["p.gpus"].tolist(), res.columns["step_time"].tolist()))
    assert cols[1024] == pytest.approx(at[1024][0], rel=1e-9)
    assert cols[512] == pytest.approx(at[512][0], rel=1e-9)
    assert at[512][1] > 60                        # this plan misses 60 days at 512 GPUs
    s = solve_query(evaluate_file(str(f)), parse_query("p.gpus for p.finish_time <= w.deadline"))
    assert s.value == 1024 and s.holds
    # the reason for the values it cannot be built at is the first one's, and says so
    assert "the plan cannot be built at p.gpus = 1, 2, 4," in s.note
    assert "(at 1: tp·pp·cp = 32 does not divide the 1 GPU)" in s.note

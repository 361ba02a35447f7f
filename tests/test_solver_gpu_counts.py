"""`solve` for a GPU count, the whole number a user most often asks for (found by a new-user
trial): a pipelined Llama-3.1-70B plan answers `==`, `<=` and `>=` by rebuilding the plan at
whole counts, and a plan without a pipeline answers in closed form, showing the whole number
first.

Numbers, independent of the solver:
* the pipelined plan (tp 8, pp 4, one sequence per micro-batch, a 2,048-sequence batch): it can
  be built at 32·dp GPUs only, and the batch splits into whole micro-batches when dp divides
  2,048 = 2^11, so the counts it is valid at are 32·2^j (32, 64, …, 65,536). The smallest valid
  change below 8,192 is to 4,096, every count strictly between them breaks
  `micro_batches_whole`, and no count below 32 can be built. Which side of 60 days each count
  is on comes from evaluating the plan written with that count (not from the solver): the
  answer must meet the relation and its valid neighbour must not.
* the plan without a pipeline (Qwen3-8B, `use compute`, no link, no input wait): the finish
  time is steps × 3·F·B/(gpus·peak·mfu), so finish(g) = finish(8)·8/g and the continuous root
  of finish == 1 h is 8·finish(8)/1 h; the 384-sequence batch (2^7·3) splits into whole
  micro-batches on its divisors, …, 24, 32, 48, 64, …: none lies from 35 to 47.
"""
from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli
from dsl.results.evaluation import evaluate_file
from dsl.results.solver import solve_query
from dsl.syntax.parser import parse_query

PIPE = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload pre { tokens = 15e12 token; seq_len = 8192 token; global_batch = 2048 seq; deadline = 60 day }
plan p {
  model = llama31_70b; workload = pre; device = h100_sxm; gpus = %d; gpus_per_host = 8; mfu = 40 %%
  micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = 80 GB }
  use layout { tp = 8; pp = 4; zero = 1; link = nvlink4; nic = nic_400g; nics_per_host = 8 }
}
# another design in the same file: its requirements do not move with p.gpus
plan other extends p { gpus = 512 }
solve gpus_needed: p.gpus for p.finish_time == pre.deadline
"""

DAY = 86400.0

# The three solves of the pipelined plan (`<=`, `>=` and the named `==`) rebuild it at the same GPU
# counts (each a full evaluation, ≈0.4 s): on one worker, each count is evaluated once for the module.
pytestmark = pytest.mark.xdist_group("solver_gpu_counts")

_REBUILT: dict = {}


@pytest.fixture(autouse=True)
def rebuilt_once(monkeypatch):
    """The solver's re-evaluations of a file at ``overrides`` (``evaluate_file``), shared by this
    module's tests: an Evaluation is read-only, and the key holds everything the result depends
    on (the file as it is on disk, the plugins, the overrides, the limits in force but the time
    budget, which only decides whether there is a result).  The solver itself runs unchanged: its
    probes, their order and its count of evaluations against the ``solve_evaluations`` limit.
    Errors are not kept."""
    import dataclasses

    import dsl.results.evaluation as E
    from dsl.syntax import limits as L
    build = E.evaluate_file

    def evaluate_file(path, text=None, plugins=None, evaluate=True, overrides=None):
        if text is not None or not overrides:
            return build(path, text=text, plugins=plugins, evaluate=evaluate, overrides=overrides)
        st = os.stat(path)
        key = (os.path.abspath(path), str(path), os.getcwd(), st.st_mtime_ns, st.st_size, id(plugins), evaluate,
               tuple(sorted((str(k), repr(v)) for k, v in overrides.items())),
               dataclasses.replace(L.current(), cpu_seconds=1))
        hit = _REBUILT.get(key)
        if hit is None or hit[0] is not plugins:
            hit = _REBUILT[key] = (plugins, build(path, text=text, plugins=plugins, evaluate=evaluate,
                                                  overrides=overrides))
        return hit[1]

    evaluate_file.__doc__ = build.__doc__
    monkeypatch.setattr(E, "evaluate_file", evaluate_file)


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    """The plan at 1,024 GPUs, and its finish time (days) evaluated on its own at 4,096 and 8,192."""
    d = tmp_path_factory.mktemp("gpus")
    finish = {}
    for g in (4096, 8192):
        f = d / f"p{g}.plan"
        f.write_text(PIPE % g, encoding="utf-8")
        finish[g] = float(evaluate_file(str(f)).base_value("p.finish_time")) / DAY
    f = d / "p.plan"
    f.write_text(PIPE % 1024, encoding="utf-8")
    return f, evaluate_file(str(f)), finish


def test_the_deadline_lies_between_the_two_valid_counts(pipe):
    _, _, finish = pipe
    assert finish[4096] > 60 > finish[8192]


def test_le_answers_the_smallest_valid_count_that_meets_the_deadline(pipe):
    _, ws, finish = pipe
    s = solve_query(ws, parse_query("p.gpus for p.finish_time <= 60 day"))
    assert s.method == "re-evaluation" and s.answer == 8192 and s.whole == 8192
    assert finish[8192] <= 60 < finish[4096]              # N meets it, N − step does not
    assert "left and right sides at 4096:" in s.note and "at 8192:" in s.note
    assert "4,095 values from 4097 to 8191 break p.micro_batches_whole" in s.note
    # the counts it cannot be built at are left out, not counted as failing
    assert "the plan cannot be built at p.gpus = 1, 2, 4, 8, 16 (" in s.note
    assert "neither meeting nor failing it" in s.note
    assert "other." not in s.note                         # the other design's deadline is not this answer's
    assert "warning" not in s.note


def test_ge_answers_the_largest_valid_count_that_still_takes_60_days(pipe):
    # before: "p.gpus = 32 … holds for p.gpus >= 32", from counting 1–31 (unbuildable) as failing
    _, ws, finish = pipe
    s = solve_query(ws, parse_query("p.gpus for p.finish_time >= 60 day"))
    assert s.answer == 4096 and s.holds == "p.gpus <= boundary"
    assert finish[4096] >= 60 > finish[8192]              # N meets it, N + step does not
    assert "4096 is the largest whole number that meets it" in s.note
    # 8,192 was tried: the search went past the nominal 1,024 to where the relation changes
    assert "2048, 4096, 8192" in s.note
    assert "at this value these requirements fail: p.meets_deadline" in s.note
    assert "other.meets_deadline" not in s.note


def test_equality_on_a_gpu_count_answers_a_whole_number(pipe):
    # before: "no solution … scanned (1.81e-05 to 5.8e+10, base units)" and `plan get` exit 1
    f, _, finish = pipe
    # (each value tried is a full evaluation, ~0.7 s CPU: a generous wall-clock budget under load)
    code, out, err = run_cli("get", f, "gpus_needed", )
    assert (code, out.strip()) == (0, "8192"), err
    assert finish[8192] <= 60 < finish[4096]


# ---------------------------------------------------------------- a closed-form answer
FLAT = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 384 seq; deadline = 2 day }
plan p {
  model = qwen3_8b; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %
  use compute {}
  use finish {}
}
solve need: p.gpus for p.finish_time <= 1 h
solve meet: p.gpus for p.finish_time == 1 h
solve never: p.gpus for p.finish_time <= 0 s
"""


def test_whole_number_first_and_the_continuous_root_beside_it(tmp_path):
    f = tmp_path / "flat.plan"
    f.write_text(FLAT, encoding="utf-8")
    ws = evaluate_file(str(f))
    root = 8 * float(ws.base_value("p.finish_time")) / 3600       # finish(g) = finish(8)·8/g
    assert 34 < root < 35
    at = {}
    for g in (32, 48):
        v = tmp_path / f"flat{g}.plan"
        v.write_text(FLAT.replace("gpus = 8", f"gpus = {g}"), encoding="utf-8")
        at[g] = float(evaluate_file(str(v)).base_value("p.finish_time")) / 3600
    assert at[48] <= 1 < at[32]                           # 48 meets 1 h, 32 (the valid count below) does not
    code, out, err = run_cli("solve", f)
    assert code == 0, err
    blocks = out.split("\n\n")
    shown = f"{root:.4g}"
    for b in blocks[:2]:                                  # <= and ==: the whole number first
        assert f"  p.gpus = 48   (nominal 8; symbolic; continuous root {shown})" in b
        assert "35 … 47 break it" in b
    assert "p.finish_time <= 1 h and p.micro_batches_whole also holds" in blocks[1]
    assert "  p.gpus: no whole number answers" not in out
    code, out, err = run_cli("eval", f, "--format", "json")
    sols = json.loads(out)["solves"]
    for name in ("need", "meet"):                         # JSON fields as before: value the root, answer the count
        assert sols[name]["answer"] == 48 and sols[name]["whole"] == 48
        assert sols[name]["value"] == pytest.approx(root, rel=1e-9)
    code, out, err = run_cli("get", f, "meet")
    assert (code, out.strip()) == (0, "48"), err


def test_a_named_solve_without_an_answer_is_a_located_error(tmp_path):
    f = tmp_path / "flat.plan"
    f.write_text(FLAT, encoding="utf-8")
    code, out, err = run_cli("get", f, "never")
    assert code == 1 and out == ""
    line = FLAT.splitlines().index("solve never: p.gpus for p.finish_time <= 0 s") + 1
    assert err.startswith(f"{f}:{line}:1: error[solve]: 'never' has no answer: ")
    assert "hint: `plan solve" in err and "Traceback" not in err
    code, _, err = run_cli("get", f, "never", "--expr")
    assert code == 1 and err.startswith(f"{f}:{line}:1: error[solve]: 'never' has no answer: ")
    code, out, err = run_cli("get", f, "need", "--expr")  # an answer with a symbolic form prints it
    assert code == 0 and out.startswith("p.gpus = "), err


def test_search_points_keep_the_nominal_values_factors():
    from dsl.results.solver import _search_points
    # 24 halved while whole (12, 6, 3) and doubled (48) within [1, 64], and the lowest value 1
    assert _search_points(1, 64, 24) == [1, 3, 6, 12, 24, 48]
    # a nominal value of 1 (replicas, a TP degree): doubling from it, as before
    assert _search_points(1, 40, 1) == [1, 2, 4, 8, 16, 32]
    # no usable nominal value: doubling from the lowest value (0 goes to 1 first)
    assert _search_points(0, 8, None) == [0, 1, 2, 4, 8]


def test_bisection_candidates_skip_screened_and_unbuildable_values():
    from dsl.results.solver import _next_candidate
    breaks = (lambda k: [] if k % 4 == 0 else ["r"])     # only multiples of 4 pass the screen
    screened = {}
    assert _next_candidate(0, 16, breaks, set(), screened) == 8
    assert _next_candidate(0, 16, breaks, {8}, {}) in (4, 12)   # nearest the middle after 8
    assert _next_candidate(8, 12, breaks, set(), screened) is None and {9, 10, 11} <= set(screened)


def test_the_answer_names_the_rules_no_gpu_count_fixes(tmp_path):
    # tp = 16 on 8-GPU hosts (and 16 > Llama-3.1-70B's 8 KV heads) fails tp_within_host and
    # tp_divides_kv_heads whatever the GPU count: the solve still answers the count that meets the deadline,
    # and says the plan fails those rules there and at every count it built
    from conftest import run_cli
    p = tmp_path / "e.plan"
    p.write_text('''import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload pt { tokens = 15e12 token; seq_len = 8192 token; global_batch = 2048 seq; deadline = 60 day }
plan roof {
  model = llama31_70b; workload = pt; device = h100_sxm; gpus = 1024; gpus_per_host = 8; mfu = 40 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 16; pp = 4; zero = 1; sequence_parallel = true; link = nvlink4; nic = nic_400g }
}
solve need: roof.gpus for roof.finish_time == pt.deadline
''', encoding="utf-8")
    code, out, err = run_cli("solve", str(p))
    assert code == 0, err
    assert "the plan still fails roof.tp_divides_kv_heads, roof.tp_within_host" in out
    assert "roof.tp_divides_kv_heads, roof.tp_within_host fail at every value tried, so no roof.gpus fixes them" in out

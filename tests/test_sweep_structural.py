"""Sweeps over structural inputs: a value a plugin reads to build the plan (a ZeRO stage, a TP
degree) is re-evaluated per grid value, never substituted into fixed expressions; a whole-number
knob swept to a fractional value is an error."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, run_cli
from dsl.results import sweep
from dsl.syntax.diagnostics import PlanError

ZERO = CASES / "zero-stages-qwen3-8b.plan"
LAYOUT = CASES / "layout-qwen3-8b-4090.plan"


def test_zero_stage_is_structural_and_each_stage_is_re_evaluated():
    ev = dsl.load(ZERO)
    assert "stage0.layout.zero" in ev.structural
    res = sweep.run(ev, "stage0", [sweep.parse_vary(ev, "stage0.layout.zero=0:3:4")])
    # Qwen3-8B state over d = 8 GPUs per ZeRO stage (Training systems chapter, ZeRO/FSDP table):
    # 122.1 / 42.0 / 28.6 / 15.3 GiB
    assert list(res.columns["stage0.layout.zero"]) == [0, 1, 2, 3]
    assert list(res.columns["persistent_memory"]) == pytest.approx([122.1, 42.0, 28.6, 15.3], abs=0.05)


def test_whole_number_knob_swept_to_a_fraction_is_an_error():
    ev = dsl.load(LAYOUT)
    with pytest.raises(PlanError) as e:
        sweep.parse_vary(ev, "gpus48.layout.tp=1:8:4")
    d = e.value.diagnostics[0]
    assert d.code == "sweep" and "3.33" in d.summary and "8 points" in d.hint


def test_structural_input_cannot_be_sampled_at_random():
    ev = dsl.load(ZERO)
    with pytest.raises(PlanError) as e:
        sweep.run(ev, "stage0", [sweep.parse_vary(ev, "stage0.layout.zero=0:3:4")], random=10)
    assert "cannot be sampled at random" in e.value.diagnostics[0].summary


def test_sweep_over_tp_rebuilds_the_layout():
    """dp = gpus / (tp·pp·cp): 48 GPUs at tp 1 and 2 give dp 48 and 24 (hand computation)."""
    ev = dsl.load(LAYOUT)
    assert "gpus48.layout.tp" in ev.structural
    res = sweep.run(ev, "gpus48", [sweep.parse_vary(ev, "gpus48.layout.tp=1:2:2")])
    assert list(res.columns["dp"]) == [48, 24]
    code, out, err = run_cli("sweep", LAYOUT, "--vary", "gpus48.layout.tp=1:2:2")
    assert code == 0 and "2 points" in out, err


# ---------------------------------------------------------------- solve over a structural input
def _branching_plugin():
    import types

    from dsl.plugin import hookimpl

    @hookimpl
    def plan_quantities_price(ctx):
        if not ctx.defined("n"):
            return
        factor = 2 if ctx.value("n") < 10 else 3      # a structural decision on the nominal value
        ctx.define("q", factor * ctx.param("n"), "", "n times a factor chosen by n")

    mod = types.ModuleType("ext_branching")
    mod.plan_quantities_price = plan_quantities_price
    return mod


def _solve(ev, text):
    from dsl.results.solver import solve_query
    from dsl.syntax.parser import parse_query
    return solve_query(ev, parse_query(text))


def test_solve_over_a_structural_input_rebuilds_the_plan_at_the_answer(tmp_path):
    from dsl.testing import evaluate_snippet
    ev = evaluate_snippet("plan p {\n  n = 5\n}\n", plugins=[_branching_plugin()], directory=tmp_path)
    assert "p.n" in ev.structural
    # at the nominal n = 5 the plan is q = 2n, so q == 30 gives n = 15; rebuilt at 15, q = 3n = 45:
    # the structure changes there, so the plan is rebuilt at whole n instead, and q(10) = 3·10 = 30
    r = _solve(ev, "p.n for p.q == 30")
    assert r.method == "re-evaluation" and r.value == 10 and r.answer == 10
    assert "the plan rebuilt at the closed-form answer differs" in r.note
    assert "the two sides are equal at 10" in r.note
    # q == 12 gives n = 6, below 10: the rebuilt plan has the same structure
    r = _solve(ev, "p.n for p.q == 12")
    assert r.value == pytest.approx(6) and "structure is the same there" in r.note


def test_a_structural_sweep_draws_a_progress_bar_on_stderr_only(tmp_path):
    """With PLAN_PROGRESS=1 (as on a terminal) the bar goes to stderr and stdout is the same
    bytes as without it; PLAN_PROGRESS=0 draws nothing."""
    pytest.importorskip("rich")
    import os
    import subprocess
    import sys
    args = [sys.executable, "-m", "dsl.cli", "sweep", str(ZERO), "--plan", "stage0", "--vary",
            "stage0.layout.zero=0:3:4"]
    env = dict(os.environ, PLAN_PROGRESS="1", COLUMNS="100")
    on = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    off = subprocess.run(args, capture_output=True, text=True, env=dict(env, PLAN_PROGRESS="0"), timeout=300)
    assert on.returncode == off.returncode == 0, on.stderr
    assert on.stdout == off.stdout
    assert "sweeping 4 structural values" in on.stderr and "sweeping" not in off.stderr


def test_values_at_which_the_plan_cannot_be_built_are_infeasible_rows():
    """tp 5 and 7 do not divide 48 GPUs: those points are rows marked infeasible with the
    error as their reason, and the sweep goes on; dp = 48 / tp elsewhere (hand computation)."""
    ev = dsl.load(LAYOUT)
    res = sweep.run(ev, "gpus48", [sweep.parse_vary(ev, "gpus48.layout.tp=1:8:8")])
    assert list(res.columns["gpus48.layout.tp"]) == [1, 2, 3, 4, 5, 6, 7, 8]
    dp = res.columns["dp"]
    assert [dp[i] for i in (0, 1, 2, 3, 5, 7)] == [48, 24, 16, 12, 8, 6]
    assert dp[4] != dp[4] and dp[6] != dp[6]                          # NaN: no plan at tp 5 and 7
    assert not res.columns["feasible"][4] and not res.columns["feasible"][6]
    assert [at for at, _ in res.not_built] == [{"gpus48.layout.tp": 5.0}, {"gpus48.layout.tp": 7.0}]
    why = res.columns["not_built"]
    assert why[4] == res.not_built[0][1] and "= 5 does not divide the 48 GPUs" in why[4]
    assert why[4].startswith("error[out-of-range]: ") and why[0] == ""
    assert res.summary()["not_built"][1] == {"at": {"gpus48.layout.tp": 7.0}, "reason": why[6]}


def test_a_sweep_with_unbuildable_values_reports_them_and_exits_0(tmp_path):
    code, out, err = run_cli("sweep", LAYOUT, "--plan", "gpus48", "--vary", "gpus48.layout.tp=[4, 5]",
                             "--out", str(tmp_path / "s.csv"))
    assert code == 0, err
    assert "2 points (grid)" in out
    assert "not built at gpus48.layout.tp = 5: error[out-of-range]: tp·pp·cp = 5 does not divide the 48 GPUs" in out
    rows = (tmp_path / "s.csv").read_text(encoding="utf-8").splitlines()
    assert rows[0].endswith(",not_built,feasible") and rows[2].endswith("does not divide the 48 GPUs,false")


def test_a_list_of_values():
    """`NAME=[V1, V2, …]` sweeps exactly the listed values (the `.plan` list syntax)."""
    ev = dsl.load(LAYOUT)
    v = sweep.parse_vary(ev, "gpus48.layout.tp=[1, 2, 4]")
    assert v.values == (1.0, 2.0, 4.0) and (v.start, v.stop, v.n) == (1.0, 4.0, 3)
    res = sweep.run(ev, "gpus48", [v])
    assert list(res.columns["dp"]) == [48, 24, 12] and not res.not_built
    m = sweep.parse_vary(ev, "gpus48.mfu=[30 %, 45 %]")
    assert m.values == pytest.approx((0.30, 0.45), abs=1e-15)
    drawn = sweep.run(ev, "gpus48", [m], random=50, seed=3).columns["gpus48.mfu"]
    assert set(drawn.round(9)) == {30.0, 45.0}                     # random samples come from the list


@pytest.mark.parametrize("spec, msg", [
    ("gpus48.layout.tp=[1, 2.5]", "takes whole numbers, but the list has 2.5"),
    ("gpus48.layout.tp=[2, 2]", "repeats a value"),
    ("gpus48.layout.tp=[]", "a list is [V1, V2, …]"),
    ("gpus48.layout.tp=[1, 2", "a list is [V1, V2, …]"),
    ("gpus48.mfu=[30 %, 2 s]", "is not a list of values in the unit of"),
    ("gpus48.mfu=[30 %, 140 %]", "leaves its allowed range"),
])
def test_bad_lists(spec, msg):
    ev = dsl.load(LAYOUT)
    with pytest.raises(PlanError) as e:
        sweep.parse_vary(ev, spec)
    assert msg in e.value.diagnostics[0].summary


def test_a_list_without_units_shows_one_with_them():
    # micro_batch is in seq: `[1, 2, 4]` are plain numbers, and the hint writes the list with the unit
    ev = dsl.load(LAYOUT)
    with pytest.raises(PlanError) as e:
        sweep.parse_vary(ev, "gpus48.micro_batch=[1, 2, 4]")
    d = e.value.diagnostics[0]
    assert "is not a list of values in the unit of 'gpus48.micro_batch'" in d.summary
    assert "gpus48.micro_batch=[1 seq, 2 seq, 4 seq]" in d.hint


def test_a_whole_number_range_that_does_not_step_by_whole_numbers_suggests_a_list():
    ev = dsl.load(LAYOUT)
    with pytest.raises(PlanError) as e:
        sweep.parse_vary(ev, "gpus48.layout.tp=1:8:4")
    assert "gpus48.layout.tp=[1, …, 8]" in e.value.diagnostics[0].hint

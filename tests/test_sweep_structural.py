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

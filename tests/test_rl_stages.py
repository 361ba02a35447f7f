"""RL stage rates and the bottleneck (book ch. 10 §10.5.2, Fig. 10-37, exercise 10-7):
``specs/cases/rl-stages.plan``.  Expected numbers are the book's (4.5, 4.5, 9 → 8) or worked
by hand in the test (8 / 0.75)."""
from __future__ import annotations

import json

import pytest

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query

CASE = CASES / "rl-stages.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


@pytest.mark.parametrize("plan,offered,effective", [
    ("stages", 4.5, 4.5),            # 6 × 0.75 = 4.5 reach training
    ("gen_doubled", 4.5, 4.5),       # generation ×2: verification still limits
    ("verify_doubled", 9, 8),        # verification ×2: 9 offered, training takes 8
])
def test_effective_rate(ws, plan, offered, effective):
    assert qval(ws, f"{plan}.offered_rate", "sample/s") == pytest.approx(offered, abs=0.05)
    assert qval(ws, f"{plan}.effective_rate", "sample/s") == pytest.approx(effective, abs=0.05)


def test_next_bottleneck(ws):
    # relieving verification alone lifts the rate to training's 8 trajectories/s
    assert qval(ws, "stages.next_bottleneck_rate", "sample/s") == pytest.approx(8, abs=0.05)
    assert qval(ws, "stages.bottleneck_headroom") == pytest.approx(8 / 4.5, rel=1e-9)


def test_trajectory_unit_is_a_sample(ws):
    assert qval(ws, "stages.rl_stages.gen_rate", "sample/s") == 12


def test_bottleneck_table(run_cli):
    code, out, _ = run_cli("eval", CASE, "--format", "json")
    assert code == 0
    tables = json.loads(out)["plans"]

    def role(plan):
        return {r[0]: r[3] for r in tables[plan]["tables"]["rl-stages"]["rows"]}
    assert role("stages") == {"generation": "", "verification": "bottleneck", "training": "next"}
    assert role("gen_doubled")["verification"] == "bottleneck"
    assert role("verify_doubled")["training"] == "bottleneck"


def test_solver_moves_the_bottleneck(ws):
    q = ws.queries[0]
    s = solve_query(ws, q)
    # training becomes the bottleneck once 0.75 · r_verify >= 8: r_verify >= 32/3
    assert s.value == pytest.approx(32 / 3, rel=1e-9) and s.method == "symbolic"
    assert ">=" in s.holds
    s = solve_query(ws, ws.queries[1])
    # generation limits only below verification's 6 trajectories/s
    assert s.value == pytest.approx(6, rel=1e-6)

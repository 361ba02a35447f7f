"""Training budgets, scaling laws and lifecycle cost (book ch. 3 §3.4.1–3.4.3, §3.6.1–3.6.3;
exercises 3-6, 3-8, 3-9, 3-10).  Expected numbers are the book's, asserted to its last digit,
or computed independently in the test."""
from __future__ import annotations

import random

import pytest
import sympy as sp

import dsl
from conftest import CASES, qval, run_cli
from dsl.syntax.diagnostics import PlanError
from dsl.results.solver import solve_query

BUDGETS = CASES / "training-budgets.plan"
LAW = CASES / "scaling-law.plan"
FIT = CASES / "scaling-fit.plan"
LIFE = CASES / "lifecycle.plan"


@pytest.fixture(scope="module")
def budgets():
    return dsl.load(BUDGETS)


@pytest.fixture(scope="module")
def law():
    return dsl.load(LAW)


@pytest.fixture(scope="module")
def life():
    return dsl.load(LIFE)


# ---------------------------------------------------------------- tokens per update (§3.4.2, ex. 3-6)
def test_tokens_per_update(budgets):
    assert qval(budgets, "sft_update.input_tokens_per_update", "token") == 65536
    assert qval(budgets, "sft_update.label_tokens_per_update", "token") == 16384
    assert qval(budgets, "sft_update.loss_weight_per_label", "token^-1") == pytest.approx(1 / 16384)


def test_linear_layer_flops(budgets):
    m, k, n = 8192, 4096, 12288
    assert qval(budgets, "gate_proj.forward_flops", "FLOP") == 2 * m * k * n
    assert qval(budgets, "gate_proj.layer_train_flops", "FLOP") == 6 * m * k * n
    # frozen: no weight gradient, the input gradient still flows to earlier layers
    assert qval(budgets, "gate_proj_frozen.weight_grad_flops", "FLOP") == 0
    assert qval(budgets, "gate_proj_frozen.input_grad_flops", "FLOP") == 2 * m * k * n
    assert qval(budgets, "gate_proj_frozen.layer_train_flops", "FLOP") == 4 * m * k * n


# ---------------------------------------------------------------- published budgets (§3.6.2)
@pytest.mark.parametrize("run,dn,flops,tol", [
    ("llama1_7b", 149, 4.02e22, 0.005e22),
    ("llama2_7b", 286, 8.40e22, 0.005e22),
    ("llama31_8b", 1875, 7.20e23, 0.005e23),
    ("qwen25_7b", 2571, 7.56e23, 0.005e23),
    ("qwen3_8b_run", 4500, 1.728e24, 0.0005e24),
])
def test_tokens_per_param_and_6nd(budgets, run, dn, flops, tol):
    assert qval(budgets, f"{run}.tokens_per_param", "token/param") == pytest.approx(dn, abs=0.5)
    assert qval(budgets, f"{run}.train_flops", "FLOP") == pytest.approx(flops, abs=tol)


def test_moe_uses_active_parameters(budgets):
    assert qval(budgets, "deepseek_v3_run.train_flops", "FLOP") == pytest.approx(6 * 37e9 * 14.8e12)
    code, out, _ = run_cli("eval", BUDGETS, "--plan", "published_runs")
    assert code == 0 and "671.0 B (37 B active)" in out


@pytest.mark.parametrize("run,days", [
    ("llama1_65b", 20.80), ("llama1_65b_on_1024", 41.60), ("deepseek_v3_run", 54.20), ("llama31_405b", 78.43),
])
def test_calendar_time(budgets, run, days):
    assert qval(budgets, f"{run}.calendar_time", "day") == pytest.approx(days, abs=0.005)


def test_a100_equivalent_hours(budgets):
    assert qval(budgets, "published_runs.h100_sxm_peak_ratio") == pytest.approx(3.17, abs=0.005)
    assert qval(budgets, "published_runs.llama31_405b_equivalent_hours", "h") == pytest.approx(30.84e6 * 989.4 / 312)
    assert qval(budgets, "published_runs.llama1_65b_equivalent_hours", "h") == 1022362


# ---------------------------------------------------------------- scaling law (§3.6.1, ex. 3-8)
def test_n_opt_is_derived_and_matches_the_book_form(law):
    """The plugin derives N_opt from dL/dN = 0; it must equal the book's closed form."""
    e = law.full_expr(law.lookup("chinchilla.n_opt"))
    names = {s.name.rsplit(".", 1)[1]: s for s in e.free_symbols}
    A, B, a, b, C = (names[k] for k in ("A", "B", "alpha", "beta", "budget"))
    book = (a * A / (b * B)) ** (1 / (a + b)) * (C / 6) ** (b / (a + b))
    rnd = random.Random(7)
    for _ in range(20):
        pt = {A: rnd.uniform(10, 1000), B: rnd.uniform(10, 1000), a: rnd.uniform(0.1, 0.9),
              b: rnd.uniform(0.1, 0.9), C: 10 ** rnd.uniform(18, 26)}
        assert float(e.xreplace(pt)) == pytest.approx(float(book.xreplace(pt)), rel=1e-9)
    d = law.full_expr(law.lookup("chinchilla.d_opt"))
    assert sp.simplify(d * e - C / 6) == 0           # C = 6 N D at the optimum


def test_closed_form_split_is_the_stationary_point():
    """optimal_split's closed form zeroes dL/dN of L(N, C/(6N)) and is a minimum there
    (second derivative > 0), checked by sympy on the symbols, not by re-deriving it."""
    from plugins.workloads.budgets import optimal_split
    n_opt, d_opt, (A, B, a, b, C) = optimal_split()
    N = sp.Symbol("N", positive=True)
    loss = A / N ** a + B / (C / (6 * N)) ** b
    # dL/dN = −αA·N^(−α−1) + βB·(6/C)^β·N^(β−1): both terms have equal logarithms at N_opt
    pull = -sp.diff(A / N ** a, N).subs(N, n_opt)
    push = sp.diff(B / (C / (6 * N)) ** b, N).subs(N, n_opt)
    assert sp.simplify(sp.expand_log(sp.log(pull), force=True) - sp.expand_log(sp.log(push), force=True)) == 0
    assert sp.simplify(d_opt * n_opt - C / 6) == 0
    second = sp.diff(loss, N, 2).subs(N, n_opt)
    rnd = random.Random(11)
    for _ in range(10):
        pt = {A: rnd.uniform(10, 1000), B: rnd.uniform(10, 1000), a: rnd.uniform(0.1, 0.9),
              b: rnd.uniform(0.1, 0.9), C: 10 ** rnd.uniform(18, 26)}
        assert float(second.xreplace(pt)) > 0


def test_equal_exponents_double_and_triple(law):
    n1, d1 = qval(law, "equal_exponents.n_opt"), qval(law, "equal_exponents.d_opt")
    assert qval(law, "equal_exponents_4x.n_opt") / n1 == pytest.approx(2, rel=1e-12)
    assert qval(law, "equal_exponents_4x.d_opt") / d1 == pytest.approx(2, rel=1e-12)
    assert qval(law, "equal_exponents_9x.n_opt") / n1 == pytest.approx(3, rel=1e-12)
    assert qval(law, "equal_exponents_9x.d_opt") / d1 == pytest.approx(3, rel=1e-12)


def test_optimum_is_a_minimum(law):
    E, A, B, a, b = 1.69, 406.4, 410.7, 0.34, 0.28
    C = 5.76e23
    n = qval(law, "chinchilla.n_opt")
    loss = lambda N: E + A / N ** a + B / (C / (6 * N)) ** b   # noqa: E731
    assert qval(law, "chinchilla.loss_opt") == pytest.approx(loss(n), rel=1e-12)
    assert loss(n) < loss(0.9 * n) and loss(n) < loss(1.1 * n)


def test_budget_for_a_size_is_solved(law):
    r = solve_query(law, law.queries[0])
    C = r.value
    # independent: invert N = (aA/(bB))^(1/(a+b)) (C/6)^(b/(a+b)) for N = 70e9
    a, b, A, B = 0.34, 0.28, 406.4, 410.7
    want = 6 * (70e9 / (a * A / (b * B)) ** (1 / (a + b))) ** ((a + b) / b)
    assert float(C) == pytest.approx(want, rel=1e-9)


# ---------------------------------------------------------------- fitting (example 3-5)
def _write_obs(path, coef, rows):
    E, A, B, a, b = coef
    lines = ["params,tokens,loss"] + [f"{n!r},{d!r},{E + A / n ** a + B / d ** b!r}" for n, d in rows]
    path.write_text("\n".join(lines) + "\n")


def test_fit_recovers_known_coefficients(tmp_path):
    coef = (1.8, 520.0, 300.0, 0.31, 0.26)
    rows = [(5e7, 8e9), (1e8, 4e10), (2e8, 1.5e10), (4e8, 9e10), (8e8, 2.5e10), (1.2e9, 1.6e11),
            (3e9, 6e10), (6e9, 2e11)]
    _write_obs(tmp_path / "obs.csv", coef, rows)
    (tmp_path / "f.plan").write_text('plan f {\n  use scaling_fit { data = "obs.csv"; holdout_from = 2e9 param }\n}\n')
    ws = dsl.load(tmp_path / "f.plan")
    for name, want in zip(("E", "A", "B", "alpha", "beta"), coef):
        assert qval(ws, f"f.fit_{name}") == pytest.approx(want, rel=1e-4), name
    assert qval(ws, "f.holdout_rmse") < 1e-6 and qval(ws, "f.fit_rmse") < 1e-6


def test_fit_reports_heldout_errors_and_rmse(tmp_path):
    """With noise on the held-out points only, the held-out RMSE is the RMS of that noise."""
    coef = (1.69, 406.4, 410.7, 0.34, 0.28)
    rows = [(7e7, 1e10), (1.5e8, 5e10), (3e8, 2e10), (6e8, 1e11), (1e9, 3e10), (1.5e9, 2e11)]
    E, A, B, a, b = coef
    held = [(2.5e9, 5e10, +0.009), (4e9, 1e11, -0.026)]
    lines = ["params,tokens,loss"] + [f"{n},{d},{E + A / n ** a + B / d ** b}" for n, d in rows]
    lines += [f"{n},{d},{E + A / n ** a + B / d ** b - err}" for n, d, err in held]
    (tmp_path / "obs.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "f.plan").write_text('plan f {\n  use scaling_fit { data = "obs.csv"; holdout_from = 2e9 param }\n}\n')
    ws = dsl.load(tmp_path / "f.plan")
    assert qval(ws, "f.holdout_rmse") == pytest.approx(((0.009 ** 2 + 0.026 ** 2) / 2) ** 0.5, rel=1e-4)
    code, out, _ = run_cli("eval", tmp_path / "f.plan")
    assert code == 0 and "H2" in out and "+0.0090" in out and "-0.0260" in out


def test_case_fit_recovers_chinchilla_coefficients():
    ws = dsl.load(FIT)
    for name, want in zip(("E", "A", "B", "alpha", "beta"), (1.69, 406.4, 410.7, 0.34, 0.28)):
        assert qval(ws, f"c4_style_fit.fit_{name}") == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize("csv,needle", [
    ("params,tokens,loss\n1e8,1e10,3.1\n2e8,x,3.0\n", "row 3, column 'tokens'"),
    ("params,tokens\n1e8,1e10\n", "missing column loss"),
    ("params,tokens,loss\n1e8,1e10,\n", "row 2, column 'loss': empty"),
    ("params,tokens,loss\n-1e8,1e10,3\n", "row 2, column 'params'"),
])
def test_bad_observations_name_the_row(tmp_path, csv, needle):
    (tmp_path / "obs.csv").write_text(csv)
    (tmp_path / "f.plan").write_text('plan f {\n  use scaling_fit { data = "obs.csv" }\n}\n')
    code, _, err = run_cli("eval", tmp_path / "f.plan")
    assert code == 1 and "error[bad-data]" in err and needle in err and "f.plan:2:" in err
    assert "Traceback" not in err


def test_too_few_observations_to_fit(tmp_path):
    _write_obs(tmp_path / "obs.csv", (1.7, 400, 400, 0.3, 0.3), [(1e8, 1e10), (2e8, 2e10), (3e9, 3e10)])
    (tmp_path / "f.plan").write_text('plan f {\n  use scaling_fit { data = "obs.csv"; holdout_from = 2e9 param }\n}\n')
    with pytest.raises(PlanError) as exc:
        dsl.load(tmp_path / "f.plan")
    assert "only 2 observation(s) left" in exc.value.diagnostics[0].summary


# ---------------------------------------------------------------- lifecycle (§3.6.3, ex. 3-10)
def test_break_even_tasks_is_solved(life):
    r = solve_query(life, life.queries[0])
    assert float(r.value) == pytest.approx(5e8, rel=1e-12)


def test_cost_difference_at_two_demands(life, tmp_path):
    gap = qval(life, "smaller.life_cost", "s") - qval(life, "larger.life_cost", "s")
    assert gap == pytest.approx(2.16e8, rel=1e-12)          # at 2e8 tasks the larger model is cheaper
    text = LIFE.read_text().replace("tasks = 2e8", "tasks = 1e9")
    (tmp_path / "l.plan").write_text(text)
    ws = dsl.load(tmp_path / "l.plan")
    gap = qval(ws, "smaller.life_cost", "s") - qval(ws, "larger.life_cost", "s")
    assert gap == pytest.approx(-3.6e8, rel=1e-12)          # at 1e9 the smaller one is cheaper by 3.6e8


def test_request_cost(life):
    assert qval(life, "request_0_5b.request_flops", "FLOP") == pytest.approx(2 * 0.5e9 * (512 + 127))
    # 40 % of 989.4 TFLOP/s = 395.76 TFLOP per GPU-second
    assert qval(life, "request_0_5b.request_gpu_time", "s") == pytest.approx(6.39e11 / 395.76e12)


@pytest.mark.parametrize("body,needle", [
    ("per_task = [1 s, 2 s]; mix = [1]", "mix has 1 shares for 2 task classes"),
    ("per_task = [1 s, 2 s]; mix = [0.5, 0.6]", "sum to 1.1"),
])
def test_mix_errors(tmp_path, body, needle):
    (tmp_path / "l.plan").write_text(f"plan p {{\n  use lifecycle {{ upfront = 1 h; tasks = 10; {body} }}\n}}\n")
    code, _, err = run_cli("eval", tmp_path / "l.plan")
    assert code == 1 and needle in err and "l.plan:2:" in err


def test_task_mix_weights_costs(tmp_path):
    (tmp_path / "l.plan").write_text("plan p {\n  use lifecycle { upfront = 1 h; tasks = 100; per_task = [1 s, 3 s]; "
                                     "mix = [0.75, 0.25] }\n}\n")
    ws = dsl.load(tmp_path / "l.plan")
    assert qval(ws, "p.task_cost", "s") == pytest.approx(1.5)
    assert qval(ws, "p.life_cost", "s") == pytest.approx(3600 + 150)


def test_label_tokens_cannot_exceed_sequence(tmp_path):
    (tmp_path / "b.plan").write_text("plan p {\n  use batch { micro_batch = 2 seq; seq_len = 100 token; "
                                     "label_len = 200 token }\n}\n")
    code, _, err = run_cli("eval", tmp_path / "b.plan")
    assert code == 1 and "exceed the sequence length" in err


def test_figures_render(tmp_path):
    for case, name in ((BUDGETS, "published-runs"), (FIT, "scaling-fit"), (LIFE, "lifecycle")):
        code, out, err = run_cli("figure", case, "-o", tmp_path, "--name", name)
        assert code == 0, err
        svg = next(tmp_path.glob(f"*-{name}.svg")).read_text()
        assert svg.startswith("<?xml") and "<svg" in svg

"""Training–inference consistency (book ch. 10 §10.3.1, §10.5.3): ``specs/cases/rl-consistency.plan``.
Book: e^0.25 ≈ 1.28; gradients 0.32 (token mean), 0.30 (sample mean), 0.04 (double division);
Qwen3-8B KV at 8K tokens in BF16 1.125 GiB.  Survival e^(−λt) is checked by hand."""
from __future__ import annotations

import math

import pytest

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query

CASE = CASES / "rl-consistency.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_importance_ratio(ws):
    assert qval(ws, "ratio.importance_ratio") == 1
    assert qval(ws, "ratio.optimisation_ratio") * qval(ws, "ratio.staleness_ratio") == 1
    assert qval(ws, "ratio.recomputed_ratio") == pytest.approx(1.28, abs=0.005)
    assert qval(ws, "ratio.weight_inflation") == pytest.approx(1.28, abs=0.005)


def test_ratio_factorises(write_plan):
    # π_θ/μ = (π_θ/π_old)(π_old/μ): −2.9 vs −3.0 vs −3.2 -> e^0.1 · e^0.2 = e^0.3
    ws = dsl.load(write_plan("plan p { use rl_ratio { policy_logprob = -2.9; old_logprob = -3.0; "
                             "behaviour_logprob = -3.2 } }"))
    assert qval(ws, "p.optimisation_ratio") == pytest.approx(math.exp(0.1), rel=1e-12)
    assert qval(ws, "p.staleness_ratio") == pytest.approx(math.exp(0.2), rel=1e-12)
    assert qval(ws, "p.importance_ratio") == pytest.approx(math.exp(0.3), rel=1e-12)


@pytest.mark.parametrize("name,book", [
    ("loss_norm.token_mean_grad", 0.32),
    ("loss_norm.sample_mean_grad", 0.30),
    ("loss_norm.double_division_grad", 0.04),
    ("loss_norm.microbatch_mean_grad", 0.30),      # hand: micro-batches of 4 short, 4 long: (0.2 + 0.4)/2
])
def test_loss_normalisation(ws, name, book):
    assert qval(ws, name) == pytest.approx(book, abs=0.005)


def test_loss_tokens(ws):
    assert qval(ws, "loss_norm.loss_tokens") == 20 and qval(ws, "loss_norm.answers") == 8


def test_resume_kv_and_survival(ws):
    assert qval(ws, "resume.resume_kv_bytes", "GiB") == 1.125          # exact: 2·36·8·128·8192·2 B
    assert qval(ws, "resume.survival") == pytest.approx(math.exp(-0.5), rel=1e-12)   # λt = 1/h · 0.5 h
    s = solve_query(ws, ws.queries[0])
    assert s.value == pytest.approx(math.log(2) * 3600, rel=1e-9) and s.method == "symbolic"


def test_reload_vs_rebuild(write_plan):
    ws = dsl.load(write_plan('import "@catalog/models.plan"\nplan p { model = qwen3_8b\n use rl_resume { '
                             'tokens = 8192 token; reload_bw = 1.125 GiB/s; rebuild_rate = 100 TFLOP/s } }'))
    assert qval(ws, "p.reload_time", "s") == pytest.approx(1, rel=1e-12)
    # hand: forward of 8,192 tokens with the LM head on the last one
    L, lin = 36, 2 * 4096 * (2 * 32 * 128 + 2 * 8 * 128) + 2 * 4096 * 12288 * 3
    s = 8192
    f = L * lin * s + L * 4 * 32 * 128 * s * (s + 1) // 2 + 2 * 4096 * 151936
    assert qval(ws, "p.rebuild_flops") == pytest.approx(f, rel=1e-12)
    assert qval(ws, "p.rebuild_time", "s") == pytest.approx(f / 100e12, rel=1e-12)

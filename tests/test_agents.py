"""Agent task graphs, shared prefixes and measured trajectories (book ch. 3 §3.2.1–3.2.4,
example 3-2, exercise 3-4) from specs/cases/agent-tasks.plan."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query

CASE = CASES / "agent-tasks.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_tool_chain_dependent_vs_independent(ws):
    # book: 2 + 6 + 10 + 3 = 21 s; 2 + max(6, 10) + 3 = 15 s; tool work 16 s either way
    assert qval(ws, "tools_dependent.task_time", "s") == pytest.approx(21, abs=0.5)
    assert qval(ws, "tools_independent.task_time", "s") == pytest.approx(15, abs=0.5)
    for p in ("tools_dependent", "tools_independent"):
        assert qval(ws, f"{p}.tool_work", "s") == pytest.approx(16, abs=0.5)
    # the critical path comes from the shared engine
    assert ws.critical_path("tools_independent", "task")["path"] == ["plan", "tool_b", "answer"]


def test_state_held_during_tool_waits(ws):
    # exercise 3-4: 1 GiB held while waiting for the tools: 16 GiB*s sequential, 10 GiB*s parallel
    assert qval(ws, "tools_dependent.state_area", "GiB*s") == pytest.approx(16, abs=1e-9)
    assert qval(ws, "tools_independent.state_area", "GiB*s") == pytest.approx(10, abs=1e-9)
    assert qval(ws, "tools_independent.state_peak", "GiB") == 1


def test_shared_prefix_counted_once(ws):
    # c_KV = 2*36*8*128*2 B = 144 KiB; state = c_KV*(2000 + 300 + 500) vs c_KV*(2300 + 2500)
    assert qval(ws, "branches.kv_per_token", "KiB/token") == 144
    assert qval(ws, "branches.shared_state", "KiB") == 144 * 2800
    assert qval(ws, "branches.unshared_state", "KiB") == 144 * 4800


def test_code_task_totals(ws):
    # book §3.2.4 table: 4 rounds, 76.294 s model, 0.078 s tools, 76.510 s in all, 2,733 output tokens
    assert qval(ws, "code_task.rounds") == 4
    assert qval(ws, "code_task.model_time", "s") == pytest.approx(76.294, abs=0.0005)
    assert qval(ws, "code_task.tool_time", "s") == pytest.approx(0.078, abs=0.0005)
    assert qval(ws, "code_task.task_time", "s") == pytest.approx(76.510, abs=0.0005)
    assert qval(ws, "code_task.output_tokens", "token") == 2733


def test_halving_round_one(ws):
    # example 3-2: 36.375 s halved -> 58.323 s, speed-up ≈1.31, saving ≈23.8 %
    assert qval(ws, "code_task_round1_x2.task_time", "s") == pytest.approx(58.323, abs=0.001)  # exact 58.3225, printed rounded up
    assert qval(ws, "code_task_round1_x2.speedup") == pytest.approx(1.31, abs=0.005)
    assert qval(ws, "code_task_round1_x2.time_saving", "%") == pytest.approx(23.8, abs=0.05)


def test_exercise_3_4_variants(ws):
    # 4x on round 1 saves 36.375*3/4 = 27.281 s; 2x on all tools saves 0.078/2 = 0.039 s
    assert qval(ws, "code_task_round1_x4.time_saved", "s") == pytest.approx(36.375 * 3 / 4, abs=0.0005)
    assert qval(ws, "code_task_tools_x2.time_saved", "s") == pytest.approx(0.039, abs=0.0005)


def test_reasoning_off_vs_on(ws):
    # book table: 12 vs 4 rounds, 765 vs 2,733 output tokens, 13.156 vs 76.294 s model, 0.476 vs 0.078 s tools
    off, on = "code_task_no_reasoning", "code_task"
    assert (qval(ws, f"{off}.rounds"), qval(ws, f"{on}.rounds")) == (12, 4)
    assert (qval(ws, f"{off}.output_tokens", "token"), qval(ws, f"{on}.output_tokens", "token")) == (765, 2733)
    assert qval(ws, f"{off}.model_time", "s") == pytest.approx(13.156, abs=0.0005)
    assert qval(ws, f"{off}.tool_time", "s") == pytest.approx(0.476, abs=0.0005)
    assert qval(ws, f"{off}.cache_hit_rate", "%") == pytest.approx(83.4, abs=0.05)


def test_prefix_reuse_tokens_and_flops(ws):
    # book §3.2.1: 5,297 input tokens, 4,480 cached, 817 not; 76.196 vs 11.976 TFLOP of prefill matmuls
    assert qval(ws, "code_task.input_tokens", "token") == 5297
    assert qval(ws, "code_task.cached_tokens", "token") == 4480
    assert qval(ws, "code_task.uncached_tokens", "token") == 817
    assert qval(ws, "code_task.prefill_flops_nocache", "TFLOP") == pytest.approx(76.196, abs=0.0005)
    assert qval(ws, "code_task.prefill_flops_cached", "TFLOP") == pytest.approx(11.976, abs=0.0005)


def test_round_two_prefill_by_hand():
    # round 2: I = 1,443, K = 1,392 -> P = 51 new rows; appending 100 tokens adds 100 rows;
    # editing token 501 of 2,000 leaves a 500-token prefix (P = 1,500)
    from plugins.model.llmstate import prefill_flops

    class View:           # Qwen3-8B fields
        f = {"layers": 36, "hidden": 4096, "ffn": 12288, "heads": 32, "kv_heads": 8, "head_dim": 128,
             "vocab": 151936}

        def has(self, k):
            return k in self.f

        def q(self, k):
            return self.f[k]

        def value(self, k, d=None):
            return d

    n_mm = 36 * (2 * 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 3 * 4096 * 12288)
    attn = lambda p, k: 4 * 36 * 32 * 128 * sum(range(k + 1, k + p + 1))   # noqa: E731
    head = 2 * 4096 * 151936
    v = View()
    assert prefill_flops(v, 51, 1392) == 2 * 51 * n_mm + attn(51, 1392) + head
    assert prefill_flops(v, 1443, 0) == 2 * 1443 * n_mm + attn(1443, 0) + head
    assert prefill_flops(v, 100, 2000) == 2 * 100 * n_mm + attn(100, 2000) + head
    assert prefill_flops(v, 1500, 500) == 2 * 1500 * n_mm + attn(1500, 500) + head


def test_speedup_query(ws):
    # task 60 s needs round 1 at 36.375 / (60 - 40.135) = 1.831x (hand computation)
    s = solve_query(ws, ws.queries[0])
    assert s.value == pytest.approx(36.375 / (60 - (76.510 - 36.375)), abs=0.0005)


def test_trajectory_table(run_cli):
    code, out, err = run_cli("eval", CASE, "--plan", "code_task")
    assert code == 0, err
    assert "prefilled P_i" in out and "1392" in out


def test_context_held_during_tool_calls(ws):
    # KV of the context (I_i + O_i tokens, 144 KiB each) held while round i's tool runs:
    # round 2: (1443 + 812) tokens for 0.004 s; round 3: (1520 + 212) tokens for 0.074 s (from the log)
    kib_s = 144 * ((1443 + 812) * 0.004 + (1520 + 212) * 0.074)
    assert qval(ws, "code_task.wait_state_area", "KiB*s") == pytest.approx(kib_s, rel=1e-9)

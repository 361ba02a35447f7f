"""Engines' scheduling policies and closed-loop clients in the batching simulation
(plugins/serving/serving_sim_policy.py): prefill-only iterations, multi-step decoding, host time
per scheduler call, `concurrency`; the worked case specs/cases/serving-ttft-concurrency.plan.

Every number here is an independent hand computation (the comments) of an affine step cost."""
from __future__ import annotations

import numpy as np
import pytest

from plugins.serving.serving_sim_base import QUANTILES, Engine, linear_step
from plugins.serving.serving_sim_core import simulate, simulate_reference
from plugins.serving.serving_sim_policy import default_policy, simulate_policy

C = {"overhead": 10e-3, "token": 0.1e-3, "context": 0.0}     # 10 ms + 0.1 ms per token scheduled


def _ms(x):
    return np.asarray(x) * 1e3


def test_default_policy_is_the_reference_schedule():
    """Mixed iterations, one step per call, no host time, open loop: the same schedule and times
    as simulate_reference, preemptions included (random workloads on small pools)."""
    rng = np.random.default_rng(3)
    preempted = 0
    for _ in range(30):
        n = int(rng.integers(5, 120))
        A = np.sort(rng.exponential(0.05, n).cumsum())
        P, G = rng.integers(1, 600, n), rng.integers(1, 60, n)
        S = int(rng.integers(1, 40))
        eng = Engine(int(max(P + G) + rng.integers(0, 800)), int(rng.choice([1, 4, 16])), S,
                     max(int(rng.integers(64, 1024)), S, int(max(P + G))), bool(rng.integers(0, 2)))
        assert default_policy(eng)
        c = {"overhead": 1e-3, "token": 2e-5, "context": 3e-8}
        r1 = simulate_reference(A, P, G, eng, linear_step, c)
        r2 = simulate_policy(A, P, G, eng, linear_step, c)
        np.testing.assert_allclose(r2.first, r1.first, rtol=0, atol=1e-12)
        np.testing.assert_allclose(r2.last, r1.last, rtol=0, atol=1e-12)
        assert (r1.preemptions == r2.preemptions).all() and r1.iterations == r2.iterations
        for q in QUANTILES:
            assert r2.quantile("itl", q) == pytest.approx(r1.quantile("itl", q), abs=1e-12)
        preempted += int(r1.preemptions.sum())
    assert preempted > 0


def test_prefill_only_iterations_stall_the_decodes():
    """A (100 in, 3 out) at 0, B (100 in, 2 out) at 15 ms.
    Mixed: it1 A's prompt 10 + 10 = 20 ms; it2 A's decode and B's prompt 10 + 10.1 = 20.1 → 40.1;
    it3 both decode 10.2 → 50.3: B's TTFT 25.1 ms, A's TPOT (50.3 − 20)/2 = 15.15 ms.
    Prefill-only: it2 is B's prompt alone (20 → 40), it3 both decode (10.2 → 50.2, B done), it4 A
    alone (10.1 → 60.3): B's TTFT 25 ms, A's TPOT (60.3 − 20)/2 = 20.15 ms."""
    A, P, G = np.array([0.0, 0.015]), np.array([100, 100]), np.array([3, 2])
    mixed = simulate_policy(A, P, G, Engine(10_000, 16, 8, 512), linear_step, C)
    apart = simulate_policy(A, P, G, Engine(10_000, 16, 8, 512, mixed_batches=False), linear_step, C)
    np.testing.assert_allclose(_ms(mixed.ttft), [20, 25.1], atol=1e-9)
    np.testing.assert_allclose(_ms(mixed.tpot), [15.15, 10.2], atol=1e-9)
    np.testing.assert_allclose(_ms(apart.ttft), [20, 25], atol=1e-9)
    np.testing.assert_allclose(_ms(apart.tpot), [20.15, 10.2], atol=1e-9)
    assert apart.iterations == 4
    # the fast path hands such an engine to this simulator
    r = simulate(A, P, G, Engine(10_000, 16, 8, 512, mixed_batches=False), linear_step, C)
    np.testing.assert_allclose(r.last, apart.last, atol=1e-15)


def test_multi_step_runs_and_host_time():
    """3 steps per scheduler call, 2 ms of host time per call, prefill-only iterations.
    One request (100 in, 5 out): prefill 2 + 20 = 22 ms (first token); a run of 3 decodes
    2 + 3 × 10.1 = 32.3 → 54.3 ms (tokens 2-4 handed out together); a run of 1, 2 + 10.1 → 66.4:
    TTFT 22, TPOT (66.4 − 22)/4 = 11.1 ms, one gap per hand-out (32.3 and 12.1 ms), 5 steps.
    B (100 in, 2 out) sent at 30 ms waits for the running batch to end at 54.3, then its prompt
    alone 22 → 76.3 (TTFT 46.3 ms); both then need one token: a run of 1, 2 + 10 + 0.2 → 88.5."""
    eng = Engine(10_000, 16, 8, 512, mixed_batches=False, scheduler_steps=3, scheduler_overhead=2e-3)
    r = simulate_policy(np.array([0.0]), np.array([100]), np.array([5]), eng, linear_step, C)
    assert _ms(r.ttft)[0] == pytest.approx(22, abs=1e-9) and _ms(r.tpot)[0] == pytest.approx(11.1, abs=1e-9)
    assert sorted(_ms(r.itl_values)) == pytest.approx([12.1, 32.3], abs=1e-9) and list(r.itl_weights) == [1, 1]
    assert r.iterations == 5
    r = simulate_policy(np.array([0.0, 0.030]), np.array([100, 100]), np.array([5, 2]), eng, linear_step, C)
    np.testing.assert_allclose(_ms(r.ttft), [22, 46.3], atol=1e-9)
    np.testing.assert_allclose(_ms(r.last), [88.5, 88.5], atol=1e-9)


def test_closed_loop_clients_send_when_one_finishes():
    """One client, three requests (100 in, 2 out) ready at 0: each takes 20 + 10.1 = 30.1 ms, so
    they are sent at 0, 30.1 and 60.2 ms and each finds the engine idle (TTFT 20 ms)."""
    r = simulate_policy(np.zeros(3), np.full(3, 100), np.full(3, 2), Engine(10_000, 16, 8, 512), linear_step, C,
                        concurrency=1)
    np.testing.assert_allclose(_ms(r.arrival), [0, 30.1, 60.2], atol=1e-9)
    np.testing.assert_allclose(_ms(r.ttft), [20, 20, 20], atol=1e-9)
    with pytest.raises(ValueError):
        simulate_policy(np.zeros(3), np.full(3, 100), np.full(3, 2), Engine(10_000), linear_step, C, concurrency=0)


# ---------------------------------------------------------------- the worked case
def test_worked_case_numbers():
    """The hand check in specs/cases/serving-ttft-concurrency.plan."""
    import dsl
    from conftest import CASES, qval
    ws = dsl.load(CASES / "serving-ttft-concurrency.plan")
    floor, step1 = 5 + 0.020 * 2048, 5 + 0.020
    mixed, dec64 = 5 + 0.020 * (2048 + 63), 5 + 0.020 * 64
    assert qval(ws, "affine_c1.ttft_p50", "ms") == pytest.approx(floor, abs=1e-9)            # 45.96
    assert qval(ws, "affine_c1.tpot_p50", "ms") == pytest.approx(step1, abs=1e-9)            # 5.02
    assert qval(ws, "affine_c64.ttft_p50", "ms") == pytest.approx(mixed, abs=1e-9)           # 47.22
    assert qval(ws, "affine_c64.tpot_p50", "ms") == pytest.approx((63 * mixed + 192 * dec64) / 255, abs=1e-9)
    assert qval(ws, "affine_c1_host.ttft_p50", "ms") == pytest.approx(4 + floor, abs=1e-9)   # 49.96
    assert qval(ws, "affine_c1_host.tpot_p50", "ms") == pytest.approx(4 + step1, abs=1e-9)   # 9.02
    assert qval(ws, "affine_c64_host.ttft_p50", "ms") == pytest.approx(4 + mixed, abs=1e-9)  # 51.22
    assert qval(ws, "affine_c64_host.tpot_p50", "ms") == pytest.approx(
        (63 * (4 + mixed) + 192 * (4 + dec64)) / 255, abs=1e-9)                              # 20.3946
    # the step model: one client meets the prefill floor; vLLM 0.6 adds its 4 ms per call
    floor_q = qval(ws, "qwen_floor.ttft_floor", "ms")
    assert qval(ws, "qwen_c1.ttft_p50", "ms") == pytest.approx(floor_q, rel=1e-9)
    assert qval(ws, "qwen_c1_v0.ttft_p50", "ms") == pytest.approx(floor_q + 4, rel=1e-9)
    assert qval(ws, "qwen_c1_v0.tpot_p50", "ms") == pytest.approx(qval(ws, "qwen_c1.tpot_p50", "ms") + 4, rel=1e-9)
    # 64 sequences: the 63 decodes' KV read (≈ 20.2 GB at 0.9 × 3.35 TB/s ≈ 6.7 ms) and their 63 tokens
    # through the weights (≈ 1.1 ms) on top of the floor
    assert qval(ws, "qwen_c64.ttft_p50", "ms") - floor_q == pytest.approx(6.7 + 1.1, abs=0.4)


# ---------------------------------------------------------------- the block
def test_engine_policy_comes_from_the_preset_and_the_block(write_plan):
    import dsl
    from plugins.serving import serving_sim
    p = write_plan("""import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"
plan v0 {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm_v0; max_model_len = 4096 token; num_scheduler_steps = 10 }
  use batching { arrivals = "poisson"; rate = 1 request/s; requests = 5; input = 100 token; output = 20 token }
}
plan v1 extends v0 { use engine { engine = vllm; num_scheduler_steps = 1 } }
plan own extends v1 { use batching { mixed_batches = false; scheduler_overhead = 1 ms } }
""")
    seen = {}
    real = serving_sim.simulate_replicas

    def spy(A, P, G, eng, *a, **k):
        seen.setdefault("engines", []).append(eng)
        return real(A, P, G, eng, *a, **k)
    serving_sim.simulate_replicas = spy
    try:
        dsl.load(p)
    finally:
        serving_sim.simulate_replicas = real
    pol = [(e.mixed_batches, e.scheduler_steps, e.scheduler_overhead) for e in seen["engines"]]
    assert pol == [(False, 10, pytest.approx(4e-3)), (True, 1, 0.0), (False, 1, pytest.approx(1e-3))]


@pytest.mark.parametrize("extra,where,what", [
    ("concurrency = 4; speculative = \"mtp\"; draft_model = head", "speculative", "closed-loop clients"),
    ("mixed_batches = false; enable_prefix_caching = true", "enable_prefix_caching", "scheduling policy"),
])
def test_policy_refuses_what_it_does_not_simulate(write_plan, run_cli, extra, where, what):
    p = write_plan(f"""import "@catalog/hardware.plan"
import "@catalog/models.plan"
model head extends qwen3_8b {{ layers = 1 }}
plan p {{
  model = qwen3_8b; device = h100_sxm
  use batching {{ arrivals = "poisson"; rate = 1 request/s; requests = 5; input = 100 token; output = 20 token
                 kv_tokens = 100000 token
                 {extra} }}
}}
""")
    rc, out, err = run_cli("eval", p)
    assert rc != 0 and "unsupported" in err and what in err and "t.plan:8:" in err and "Traceback" not in err


def test_closed_loop_on_replicas_is_refused(write_plan, run_cli):
    p = write_plan("""import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"
plan p {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; max_model_len = 4096 token; replicas = 2 }
  use batching { concurrency = 4; requests = 8; input = 100 token; output = 20 token }
}
""")
    rc, out, err = run_cli("eval", p)
    assert rc != 0 and "unsupported" in err and "replicas" in err and "t.plan:7:" in err

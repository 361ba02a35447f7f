"""Prefix caching in the batching simulation (plugins/serving/serving_prefix_cache.py).

Every expected number below is traced by hand in the comments from the rules of vLLM's v1
block pool (module docstring): LRU free queue, blocks returned in reverse order, whole-block
hits, at least one token computed."""
from fractions import Fraction

import numpy as np
import pytest

from plugins.serving.serving_prefix_cache import block_keys, simulate_cached
from plugins.serving.serving_sim_core import Engine, linear_step, simulate_reference

C = {"overhead": 0.01, "token": 0.001, "context": 0.0}      # s, s/token, s/token


def _run(ids, P, G, eng, hash_block=4, gap=10.0):
    A = [gap * i for i in range(len(P))]                       # far apart: one request at a time
    keys = block_keys(ids, P, hash_block, eng.block_size)
    return simulate_cached(A, P, G, keys, eng, linear_step, C)


def test_three_requests_share_a_two_block_prefix():
    # block 4 tokens, prompts of 16 tokens = 4 blocks each; the first two ids are shared.
    # request 0: nothing cached; 1 and 2: blocks 0-1 cached = 8 tokens each.
    # hit rate = (0 + 8 + 8) / (3·16) = 16/48 = 1/3; saved 16 tokens.
    ids = [[1, 2, 3, 4], [1, 2, 5, 6], [1, 2, 7, 8]]
    r, s = _run(ids, [16, 16, 16], [1, 1, 1], Engine(kv_tokens=1024, block_size=4))
    assert s.hit == [0, 8, 8]
    assert Fraction(s.hit_rate).limit_denominator(1000) == Fraction(1, 3)
    assert s.saved == 16
    # TTFT = one step: 0.01 s + 0.001 s/token · tokens prefilled (16, then 8, 8)
    assert r.ttft == pytest.approx([0.026, 0.018, 0.018], abs=1e-12)


def test_at_least_one_token_is_computed():
    # the same 16-token prompt twice: the hit stops at ⌊(16 − 1)/4⌋ = 3 blocks = 12 tokens,
    # the last block's 4 tokens are prefilled again (TTFT 0.01 + 0.004 s)
    r, s = _run([[1, 2, 3, 4], [1, 2, 3, 4]], [16, 16], [1, 1], Engine(kv_tokens=1024, block_size=4))
    assert s.hit == [0, 12]
    assert r.ttft[1] == pytest.approx(0.014, abs=1e-12)


def test_hash_blocks_larger_than_engine_blocks():
    # hash block 8 = two engine blocks of 4: ids [10, 11] and [10, 12] share tokens 0-7
    # (engine blocks 0, 1); the keys of blocks 2, 3 differ.
    k = block_keys([[10, 11], [10, 12]], [16, 16], 8, 4)
    assert len(k[0]) == len(k[1]) == 4
    assert k[0][:2] == k[1][:2] and k[0][2] != k[1][2] and k[0][3] != k[1][3]
    # a 14-token prompt has ⌊14/4⌋ = 3 full engine blocks; ids cover 2·8 = 16 ≥ 14 tokens
    assert len(block_keys([[10, 11]], [14], 8, 4)[0]) == 3
    # a prompt longer than its ids: 20 tokens but one id of 8 → ⌊8/4⌋ = 2 keyed blocks
    assert len(block_keys([[10]], [20], 8, 4)[0]) == 2


def test_engine_block_straddling_two_hash_blocks_needs_both():
    # engine block 3 tokens, hash block 4: engine blocks end at 3, 6, 9, 12 tokens; block 1
    # (tokens 3-5) ends in hash block 1, so [1, 2, 3] and [1, 9, 3] share block 0 only
    k = block_keys([[1, 2, 3], [1, 9, 3]], [12, 12], 4, 3)
    assert k[0][0] == k[1][0] and all(a != b for a, b in zip(k[0][1:], k[1][1:]))


def test_lru_eviction_order_on_a_small_pool():
    # pool of 4 blocks of 4 tokens; one output token each (the prefill step ends the request).
    # free queue (head first) at the start: [0, 1, 2, 3]
    # r0 ids [1,2] P=8: takes 0, 1 (keys a=(1), b=(1,2)); frees in reverse → [2, 3, 1, 0]
    # r1 ids [3,4] P=8: takes 2, 3 (c=(3), d=(3,4)) → [1, 0] + reverse → [1, 0, 3, 2]
    # r2 ids [5]   P=4: takes 1 → evicts b (r0's tail, not its head a); key e → [0, 3, 2, 1]
    # r3 ids [1,2] P=8: at most ⌊7/4⌋ = 1 block → a on block 0 hits (4 tokens); touches 0,
    #    takes 3 → evicts d; block 3 gets key b again; frees 3, 0 → [2, 1, 3, 0]
    # r4 ids [3,4] P=8: c on block 2 hits (4 tokens); takes 1 → evicts e
    # hits 0, 0, 0, 4, 4 of 8+8+4+8+8 = 36 prompt tokens → 8/36 = 2/9; 3 evictions
    ids = [[1, 2], [3, 4], [5], [1, 2], [3, 4]]
    r, s = _run(ids, [8, 8, 4, 8, 8], [1] * 5, Engine(kv_tokens=16, block_size=4, max_num_batched_tokens=64,
                                                      max_num_seqs=4))
    assert s.hit == [0, 0, 0, 4, 4]
    assert Fraction(s.hit_rate).limit_denominator(1000) == Fraction(2, 9)
    assert s.evictions == 3


def test_without_hits_the_schedule_is_the_reference():
    # no keys: the same iterations, preemptions and times as simulate_reference
    rng = np.random.default_rng(1)
    n = 200
    A = np.cumsum(rng.exponential(0.05, n))
    P, G = rng.integers(1, 600, n), rng.integers(1, 200, n)
    eng = Engine(4000, 16, 32, 512)
    c = {"overhead": 0.01, "token": 1e-4, "context": 1e-6}
    r0 = simulate_reference(A, P, G, eng, linear_step, c)
    r1, s = simulate_cached(A, P, G, [[]] * n, eng, linear_step, c)
    assert r0.preemptions.sum() > 0            # the pool runs out: preemption is exercised
    assert np.array_equal(r0.first, r1.first) and np.array_equal(r0.last, r1.last)
    assert np.array_equal(r0.preemptions, r1.preemptions) and r0.iterations == r1.iterations
    assert s.saved == 0


# ---------------------------------------------------------------- the worked case and the block
def test_worked_case_numbers():
    # the hand check in the case's comments
    import dsl
    from conftest import CASES, qval
    ws = dsl.load(CASES / "serving-prefix-cache.plan")
    assert qval(ws, "cached.prefix_hit_rate") == pytest.approx(384 / 1152, abs=1e-12)
    assert qval(ws, "cached.prefill_tokens_saved", "token") == 384
    assert qval(ws, "cached.ttft_mean", "ms") == pytest.approx((35.6 + 22.8 + 22.8 + 35.6) / 4, abs=1e-9)
    assert qval(ws, "cached.ttft_p50", "ms") == pytest.approx(22.8, abs=1e-9)
    assert qval(ws, "cached.ttft_p95", "ms") == pytest.approx(35.6, abs=1e-9)
    assert qval(ws, "cached.tpot_mean", "ms") == pytest.approx(10.1, abs=1e-9)
    assert qval(ws, "no_cache.ttft_mean", "ms") == pytest.approx((35.6 * 3 + 48.4) / 4, abs=1e-9)


def test_worked_case_match_granularity_follows_the_engine():
    # the case's second hand check: vLLM's preset keys blocks of 16 tokens, SGLang's pages of 1
    # token (its radix cache's token-granular match); the same chats, alone on the engine
    import dsl
    from conftest import CASES, qval
    ws = dsl.load(CASES / "serving-prefix-cache.plan")
    assert qval(ws, "vllm_chat.block_size", "token") == 16 and qval(ws, "sglang_chat.block_size", "token") == 1
    assert qval(ws, "vllm_chat.max_queue", "request") == 1 == qval(ws, "sglang_chat.max_queue", "request")
    assert qval(ws, "vllm_chat.prefill_tokens_saved", "token") == 3 * 1248 + 2 * 992
    assert qval(ws, "sglang_chat.prefill_tokens_saved", "token") == 3 * 1249 + 2 * 1000
    assert qval(ws, "vllm_chat.prefix_hit_rate") == pytest.approx(5728 / 7950, abs=1e-12)
    assert qval(ws, "sglang_chat.prefix_hit_rate") == pytest.approx(5747 / 7950, abs=1e-12)
    assert qval(ws, "vllm_chat.ttft_mean", "ms") == pytest.approx((130 + 3 * 30.2 + 2 * 30.8) / 6, abs=1e-9)
    assert qval(ws, "sglang_chat.ttft_mean", "ms") == pytest.approx((130 + 3 * 30.1 + 2 * 30.0) / 6, abs=1e-9)
    assert qval(ws, "vllm_chat.tpot_mean", "ms") == pytest.approx(10.1, abs=1e-9)


def test_token_granular_match_of_a_repeated_prompt():
    # the same 100-token prompt twice (ids of 50-token hash blocks), request 1 alone after 0:
    # blocks of 16 → at most ⌊99/16⌋ = 6 blocks = 96 tokens; pages of 1 token (SGLang) → 99
    # tokens, every token but the one the engine computes for the logits.
    # TTFT of request 1: 0.01 + 0.001·(100 − 96) = 0.014 s, or 0.01 + 0.001·1 = 0.011 s
    for bs, hit, ttft in ((16, 96, 0.014), (1, 99, 0.011)):
        r, s = _run([[7, 8], [7, 8]], [100, 100], [1, 1], Engine(kv_tokens=1024, block_size=bs),
                    hash_block=50)
        assert s.hit == [0, hit]
        assert r.ttft[1] == pytest.approx(ttft, abs=1e-12)


def test_keys_beyond_the_limit_are_located(write_plan, run_cli):
    # pages of 1 token key every token: 4 requests of 40 + 10 tokens = 200 keys > a limit of 100
    p = write_plan("""plan p {
  use batching {
    arrivals = "poisson"; rate = 1 request/s; requests = 4; input = 40 token; output = 10 token
    enable_prefix_caching = true; kv_tokens = 1000 token; block_size = 1 token
    step_overhead = 10 ms; step_token = 0.1 ms/token; step_context = 0 s/token
  }
}
""")
    rc, out, err = run_cli("eval", p, "--limit", "sim_tokens=100")
    assert rc != 0 and "error[limit]" in err and "200 blocks of 1 token" in err
    assert "t.plan:4:" in err and "Traceback" not in err


def test_prefix_caching_needs_hash_ids(write_plan, run_cli, repo_root):
    p = write_plan(f"""plan p {{
  use batching {{
    trace = "{repo_root}/specs/data/traces/azure-llm-2023-code.csv"
    enable_prefix_caching = true
    kv_tokens = 100000 token; step_overhead = 10 ms; step_token = 0.1 ms/token; step_context = 0 s/token
  }}
}}
""")
    rc, out, err = run_cli("eval", p)
    assert rc != 0 and "no `hash_ids` column" in err and "t.plan:4:" in err and "Traceback" not in err


def test_bad_hash_id_is_located(tmp_path, write_plan, run_cli):
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens,hash_ids\n"
                                    "0,16,1,0 1\n1,16,1,0 x\n", encoding="utf-8")
    p = write_plan("""plan p {
  use batching {
    trace = "t.csv"; enable_prefix_caching = true; hash_block = 8 token
    kv_tokens = 1000 token; step_overhead = 10 ms; step_token = 0.1 ms/token; step_context = 0 s/token
  }
}
""")
    rc, out, err = run_cli("eval", p)
    assert rc != 0 and "t.csv:3:" in err and "'x' is not a block id" in err and "Traceback" not in err


# ---------------------------------------------------------------- speculation, replicas, runs
def test_speculation_without_hits_is_the_reference():
    # no keys: the speculative schedule of simulate_reference, iteration for iteration (the
    # toy decode part 20 ms + 1 ms per sequence + 1 µs per cached token; E = 2.2 tokens a step)
    from plugins.serving.serving_spec import SimSpec
    rng = np.random.default_rng(1)
    n = 200
    A = np.cumsum(rng.exponential(0.05, n))
    P, G = rng.integers(1, 600, n), rng.integers(1, 200, n)
    eng = Engine(4000, 16, 32, 512)
    c = {"overhead": 0.01, "token": 1e-4, "context": 1e-6}
    spec = SimSpec(3, 2.2, lambda m, ctx: 0.02 + 0.001 * m + 1e-6 * ctx)
    r0 = simulate_reference(A, P, G, eng, linear_step, c, spec=spec)
    r1, s = simulate_cached(A, P, G, [[]] * n, eng, linear_step, c, spec=spec)
    assert r0.preemptions.sum() > 0
    assert np.array_equal(r0.first, r1.first) and np.array_equal(r0.last, r1.last)
    assert np.array_equal(r0.itl_values, r1.itl_values) and r0.iterations == r1.iterations


def test_speculation_with_a_hit_by_hand():
    # two requests 10 s apart, prompts of 16 tokens sharing their first two blocks of 4, G = 9;
    # k = 3, α = 1 (E = 4): the decode part is 1 s per step, the prefill 0.01 + 0.001 s per token.
    # request 0: prefill 16 tokens (0.026 s), then ⌈8/4⌉ = 2 speculative steps: last at 2.026 s.
    # request 1: 8 tokens cached, prefill 8 (0.018 s), the same 2 steps: TTFT 0.018, last 10 + 2.018.
    from plugins.serving.serving_spec import SimSpec
    spec = SimSpec(3, 4.0, lambda m, ctx: 1.0)
    keys = block_keys([[1, 2, 3, 4], [1, 2, 5, 6]], [16, 16], 4, 4)
    r, s = simulate_cached([0.0, 10.0], [16, 16], [9, 9], keys, Engine(kv_tokens=1024, block_size=4),
                           linear_step, C, spec=spec)
    assert s.hit == [0, 8]
    assert r.ttft == pytest.approx([0.026, 0.018], abs=1e-12)
    assert r.last_at == pytest.approx([2.026, 12.018], abs=1e-12)
    assert r.iterations == 6


def test_each_replica_caches_alone():
    # the same 16-token prompt prefix twice (two blocks of 8 shared): one engine hits 8 tokens on
    # the second request; two engines behind round-robin send it to the other, empty cache
    from plugins.serving.serving_prefix_cache import simulate_cached_replicas
    keys = block_keys([[1, 2, 3], [1, 2, 9]], [12, 12], 4, 4)
    eng = Engine(kv_tokens=1024, block_size=4)
    one, s1 = simulate_cached_replicas([0.0, 10.0], [12, 12], [1, 1], keys, eng, linear_step, C, replicas=1)
    two, s2 = simulate_cached_replicas([0.0, 10.0], [12, 12], [1, 1], keys, eng, linear_step, C, replicas=2)
    assert s1.hit == [0, 8] and s2.hit == [0, 0]
    assert one.ttft == pytest.approx([0.022, 0.014], abs=1e-12) and two.ttft == pytest.approx([0.022, 0.022])


def test_runs_of_decodes_are_the_per_iteration_schedule():
    # record=False advances runs of decode-only iterations at once; the schedule, the times
    # (bitwise), the hits and the evictions are those of the per-iteration loop (record=True),
    # on random conversations with shared system prompts, pools small enough to preempt
    from plugins.serving.serving_prompts import synthetic_prompts
    rng = np.random.default_rng(3)
    checked = preempting = 0
    for trial in range(40):
        n = int(rng.integers(20, 300))
        A = np.cumsum(rng.exponential(rng.uniform(0.005, 0.2), n))
        U, G = rng.integers(1, 300, n), rng.integers(1, 120, n)
        bs = int(rng.choice([4, 16]))
        P, ids = synthetic_prompts(U, G, turns=int(rng.integers(1, 4)), system_prompts=3,
                                   system_prompt_tokens=int(rng.integers(1, 200)), hash_block=bs, seed=trial,
                                   with_output=True)
        keys = block_keys(ids, P + G, bs, bs)
        S = int(rng.integers(2, 64))
        eng = Engine(int(rng.integers(2000, 20000)), bs, S, int(rng.integers(S, 2048)), bool(rng.integers(0, 2)))
        c = {"overhead": 0.01, "token": 1e-4, "context": 1e-6}
        try:
            r1, s1 = simulate_cached(A, P, G, keys, eng, linear_step, c, record=True)
        except Exception:           # a request beyond this pool or this budget: another draw
            continue
        r0, s0 = simulate_cached(A, P, G, keys, eng, linear_step, c, record=False)
        assert np.array_equal(r0.first, r1.first) and np.array_equal(r0.last, r1.last), trial
        assert r0.iterations == r1.iterations and np.array_equal(r0.preemptions, r1.preemptions)
        assert s0.hit == s1.hit and s0.evictions == s1.evictions
        checked += 1
        preempting += int(r1.preemptions.sum() > 0)
    assert checked >= 20 and preempting >= 3

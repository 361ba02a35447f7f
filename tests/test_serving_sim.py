"""Continuous batching (plugins/serving/serving_sim.py): schedules worked out by hand from the scheduler
rules (vLLM v1: running requests first, a token budget per iteration, KV blocks as sequences
grow, the newest running request preempted by recomputation), nearest-rank percentiles,
synthetic arrivals, determinism, and the run-skipping fast path against the per-iteration
reference.

The step cost of the hand-computed cases is affine, t = a + b·(prefill + decodes) + γ·context
with a = 10 ms, b = 1 ms/token, γ = 0.1 ms/token, so every iteration's time is a short sum."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st_

import dsl
from conftest import REPO_ROOT, qval
from dsl.syntax.diagnostics import PlanError
from plugins.serving import serving_sim as S
from plugins.serving import serving_trace as st

C = {"overhead": 0.010, "token": 0.001, "context": 0.0001}
AZURE = REPO_ROOT / "specs" / "data" / "traces" / "azure-llm-2023-conv.csv"


def both(A, P, G, eng, c=C):
    """The reference and the fast path (exact: no closed form) on the same workload."""
    return (S.simulate_reference(A, P, G, eng, S.linear_step, c),
            S.simulate(A, P, G, eng, S.linear_step, c, affine=False))


# ---------------------------------------------------------------- schedules by hand
def test_one_request_ttft_is_its_prefill():
    # P = 100, G = 4 arriving at 0.5 s: one prefill iteration, then three decodes reading
    # 100, 101, 102 cached tokens
    eng = S.Engine(kv_tokens=1024, block_size=16, max_num_seqs=4, max_num_batched_tokens=2048)
    for r in both([0.5], [100], [4], eng):
        prefill = 0.010 + 0.001 * 100                                   # 0.11 s
        d = [0.010 + 0.001 + 0.0001 * ctx for ctx in (100, 101, 102)]   # 0.021, 0.0211, 0.0212 s
        assert r.ttft[0] == pytest.approx(prefill, abs=1e-12)
        assert r.first[0] == pytest.approx(0.61, abs=1e-12)
        assert r.last[0] == pytest.approx(0.61 + sum(d), abs=1e-12)    # 0.6733 s
        assert r.e2e[0] == pytest.approx(0.1733, abs=1e-12)
        assert r.tpot[0] == pytest.approx(0.0633 / 3, abs=1e-12)
        assert sorted(np.repeat(r.itl_values, r.itl_weights)) == pytest.approx([0.021, 0.0211, 0.0212], abs=1e-12)
        assert r.iterations == 4 and r.preemptions[0] == 0


@pytest.mark.parametrize("start", [0.5, 1e12, 5e14, 1e17])
def test_latencies_keep_their_digits_far_from_time_zero(start):
    # The request of test_one_request_ttft_is_its_prefill, alone on an idle engine, arriving at `start` s: its
    # latencies are the same whatever the arrival time -- TTFT its prefill step 0.010 + 0.001·100 = 0.11 s, TPOT
    # the mean of its three decodes (0.021 + 0.0211 + 0.0212)/3 = 0.0211 s, e2e 0.11 + 0.0633 = 0.1733 s.  An
    # absolute clock at 5e14 s is spaced 0.0625 s apart (it froze there: TTFT 0.0625, TPOT 0); the busy period is
    # timed from a multiple of 2^20 s at or below its arrival, resolved to 2^-31 s (ulp of 2^21 s) < 1e-9 s
    eng = S.Engine(kv_tokens=1024, block_size=16, max_num_seqs=4, max_num_batched_tokens=2048)
    A = [start, start + 3e9]                 # two busy periods far apart, the same request each
    for r in both(A, [100, 100], [4, 4], eng):
        assert r.ttft == pytest.approx([0.11, 0.11], abs=1e-9)
        assert r.tpot == pytest.approx([0.0211, 0.0211], abs=1e-9)
        assert r.e2e == pytest.approx([0.1733, 0.1733], abs=1e-9)
        assert r.span == pytest.approx(3e9 + 0.1733, rel=1e-15)
        assert r.first_at[1] == pytest.approx(start + 3e9 + 0.11, rel=1e-15)
    ref, fast = both(A, [100, 100], [4, 4], eng)
    assert np.array_equal(ref.first, fast.first) and np.array_equal(ref.last, fast.last)
    if start < S.ORIGIN_GRID:        # a trace within its first 2^20 s is timed from 0 as before: absolute times
        assert S.simulate([start], [100], [4], eng, S.linear_step, C).origin is None


def test_batching_at_a_vanishing_rate_serves_each_request_alone():
    # 1e-15 request/s: 500 Poisson arrivals ~1e15 s apart (up to ~5e17 s), each on an idle engine.  By hand, with
    # the plan's affine step 6 ms + 33 us/token + 55 ns/context token: TTFT = the 2,048-token prefill,
    # 0.006 + 33e-6·2048 = 0.073584 s; TPOT = the mean decode of 255, decode j reading 2,048 + j tokens,
    # 0.006 + 33e-6 + 55e-9·(2048 + 127) = 0.006152625 s -- every percentile the same (it was 0 at this rate)
    ws = dsl.load("b.plan", text="""plan chat {
  use batching {
    arrivals = "poisson"; rate = 1e-15 request/s; requests = 500; seed = 1
    input = 2048 token; output = 256 token
    kv_tokens = 200000 token; max_num_batched_tokens = 2048 token
    step_overhead = 6 ms; step_token = 33 us/token; step_context = 55 ns/token
  }
}""")
    for q in ("p50", "p99"):
        assert qval(ws, f"chat.ttft_{q}") == pytest.approx(0.073584, abs=1e-9)
        assert qval(ws, f"chat.tpot_{q}") == pytest.approx(0.006152625, abs=1e-9)


def test_two_requests_chunked_prefill_within_the_budget():
    # A and B (300 input tokens, 2 output) arrive together; the budget is 256 tokens:
    #   it 1: A's first chunk of 256 (budget spent, B waits)           0.01 + 0.256          = 0.266
    #   it 2: A's last 44, B's first 212 (A emits its first token)     0.01 + 0.256          = 0.266
    #   it 3: A decodes (reads 300) and B's last 88: A ends, B's first 0.01 + 0.089 + 0.030  = 0.129
    #   it 4: B decodes (reads 300) and ends                            0.01 + 0.001 + 0.030  = 0.041
    eng = S.Engine(kv_tokens=4096, block_size=16, max_num_seqs=8, max_num_batched_tokens=256)
    for r in both([0.0, 0.0], [300, 300], [2, 2], eng):
        assert r.first == pytest.approx([0.532, 0.661], abs=1e-12)
        assert r.last == pytest.approx([0.661, 0.702], abs=1e-12)
        assert r.ttft == pytest.approx([0.532, 0.661], abs=1e-12)
        assert r.tpot == pytest.approx([0.129, 0.041], abs=1e-12)
        assert r.iterations == 4


def test_kv_exhausted_preempts_the_newest_and_recomputes():
    # 3 blocks of 4 tokens.  A (4 in, 3 out) and B (4 in, 2 out) arrive together.
    #   it 1: both prefill (1 block each, 1 free)               0.01 + 0.008            = 0.018
    #   it 2: A's decode needs its 2nd block (the last free); B's needs one too: none left, B is the
    #         newest running request and is preempted (blocks freed, back to the queue front)
    #                                                           0.01 + 0.001 + 0.0004   = 0.0114
    #   it 3: A decodes in its 2nd block and ends; B's recompute of 5 tokens needs 2 blocks, 1 free
    #                                                           0.01 + 0.001 + 0.0005   = 0.0115
    #   it 4: B recomputes its prompt and its output (5 tokens) and emits its 2nd token
    #                                                           0.01 + 0.005            = 0.015
    eng = S.Engine(kv_tokens=12, block_size=4, max_num_seqs=4, max_num_batched_tokens=64)
    for r in both([0.0, 0.0], [4, 4], [3, 2], eng):
        assert list(r.preemptions) == [0, 1]
        assert r.first == pytest.approx([0.018, 0.018], abs=1e-12)
        assert r.last == pytest.approx([0.0409, 0.0559], abs=1e-12)
        assert r.tpot == pytest.approx([0.0229 / 2, 0.0379], abs=1e-12)
        # B's second token comes 0.0379 s after its first: the gap across the preemption
        assert sorted(np.repeat(r.itl_values, r.itl_weights)) == pytest.approx([0.0114, 0.0115, 0.0379], abs=1e-12)
        assert r.iterations == 4
        assert r.max_queue == 2              # both wait when the first iteration starts


def test_max_num_seqs_holds_a_request_back():
    # one sequence at a time: B's prefill starts when A ends (A: 10 in, 2 out)
    eng = S.Engine(kv_tokens=1024, block_size=16, max_num_seqs=1, max_num_batched_tokens=64)
    for r in both([0.0, 0.0], [10, 10], [2, 2], eng):
        a1 = 0.010 + 0.010                    # A's prefill
        a2 = 0.010 + 0.001 + 0.001            # A's decode reading 10 tokens
        assert r.first == pytest.approx([a1, a1 + a2 + a1], abs=1e-12)
        assert r.ttft[1] == pytest.approx(0.052, abs=1e-12)


def test_without_chunked_prefill_a_prompt_waits_for_room():
    # budget 64, chunking off: B's 64-token prompt does not fit beside A's decode (1 + 64 > 64), so it
    # waits for A to end instead of starting a chunk
    eng = S.Engine(kv_tokens=1024, block_size=16, max_num_seqs=4, max_num_batched_tokens=64, enable_chunked_prefill=False)
    for r in both([0.0, 0.001], [30, 64], [2, 1], eng):
        a1 = 0.010 + 0.030                    # A's prefill, alone (B arrives after it starts)
        a2 = 0.010 + 0.001 + 0.003            # A's decode; B's 64 tokens do not fit beside it
        assert r.last[0] == pytest.approx(a1 + a2, abs=1e-12)
        assert r.first[1] == pytest.approx(a1 + a2 + 0.010 + 0.064, abs=1e-12)


# ---------------------------------------------------------------- percentiles
def test_nearest_rank_by_hand():
    assert S.nearest_rank_np([5.0, 1.0, 4.0, 2.0, 3.0], Fraction(1, 2)) == 3.0     # ⌈2.5⌉ = 3rd
    assert S.nearest_rank_np([5.0, 1.0, 4.0, 2.0, 3.0], Fraction(9, 10)) == 5.0    # ⌈4.5⌉ = 5th
    assert S.nearest_rank_np(np.arange(1.0, 21.0), Fraction(95, 100)) == 19.0       # ⌈19⌉ = 19th
    assert S.nearest_rank_np(np.arange(1.0, 481.0), 0.95) == 456.0                  # 456th of 480
    # [1, 2, 3] with weights [1, 1, 8] are ten observations: the 5th is 3, the 1st 1, the 2nd 2
    v, w = np.array([3.0, 1.0, 2.0]), np.array([8, 1, 1])
    assert S.weighted_nearest_rank(v, w, Fraction(1, 2)) == 3.0
    assert S.weighted_nearest_rank(v, w, Fraction(1, 10)) == 1.0
    assert S.weighted_nearest_rank(v, w, Fraction(2, 10)) == 2.0


def test_percentiles_follow_the_trace_rule():
    rng = np.random.default_rng(5)
    for n in (1, 4, 7, 480, 1001):
        x = rng.random(n)
        for q in (0.5, 0.9, 0.95, 0.99):
            assert S.nearest_rank_np(x, q) == st.nearest_rank(list(x), q)


def test_summary_percentiles_are_of_the_requests():
    eng = S.Engine(kv_tokens=4096, block_size=16, max_num_seqs=8, max_num_batched_tokens=256)
    r = S.simulate([0.0, 0.0], [300, 300], [2, 2], eng, S.linear_step, C)
    s = r.summary(slo_ttft=0.6, slo_tpot=0.1)
    assert s["ttft_p50"] == pytest.approx(0.532, abs=1e-12)     # ⌈0.5·2⌉ = 1st of (0.532, 0.661)
    assert s["ttft_p95"] == pytest.approx(0.661, abs=1e-12)     # ⌈1.9⌉ = 2nd
    assert s["tpot_p50"] == pytest.approx(0.041, abs=1e-12)
    # A meets TTFT ≤ 0.6 s but not TPOT ≤ 0.1 s (0.129); B misses TTFT: no good request
    assert s["goodput"] == 0.0
    span = 0.702
    assert s["throughput"] == pytest.approx(4 / span, rel=1e-12)
    s = r.summary(slo_ttft=0.7, slo_tpot=0.2)
    assert s["goodput"] == pytest.approx(2 / span, rel=1e-12)


# ---------------------------------------------------------------- arrivals
def test_poisson_rate_within_its_statistical_tolerance():
    # n arrivals of a Poisson process: t_n ~ Gamma(n, 1/rate), so n/t_n has a relative
    # standard deviation of 1/√n; 4 of them bound it
    n, rate = 20_000, 5.0
    t = S.poisson_arrivals(rate, n, seed=3)
    assert np.all(np.diff(t) >= 0)
    assert abs(n / t[-1] - rate) / rate < 4 / math.sqrt(n)


def test_gamma_arrivals_rate_and_burstiness():
    # Gamma gaps of mean 1/rate and cv 2 (shape 1/4): the mean gap's relative sd is cv/√n; the
    # sample cv's is about √((κ + 2)/n)/2 with excess kurtosis κ = 6·cv² = 24, 1.8 % at n = 20,000
    n, rate, cv = 20_000, 5.0, 2.0
    t = S.gamma_arrivals(rate, n, cv, seed=4)
    gaps = np.diff(np.concatenate(([0.0], t)))
    assert abs(gaps.mean() * rate - 1) < 4 * cv / math.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - cv) / cv < 4 * math.sqrt(26 / n) / 2


def test_same_seed_same_bytes():
    a = S.poisson_arrivals(2.0, 500, seed=11)
    b = S.poisson_arrivals(2.0, 500, seed=11)
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != S.poisson_arrivals(2.0, 500, seed=12).tobytes()
    P, G = S.sample_lengths([10, 20, 30], [1, 2, 3], 100, seed=1)
    assert np.array_equal(G, P // 10)                 # a row's pair stays together
    eng = S.Engine(kv_tokens=4096, block_size=16, max_num_seqs=16, max_num_batched_tokens=512)
    r1 = S.simulate(a, np.full(500, 100), np.full(500, 20), eng, S.linear_step, C)
    r2 = S.simulate(a, np.full(500, 100), np.full(500, 20), eng, S.linear_step, C)
    for f in ("first", "last", "preemptions", "itl_values", "itl_weights", "series_t", "series_kv"):
        assert getattr(r1, f).tobytes() == getattr(r2, f).tobytes()


# ---------------------------------------------------------------- fast path = reference
def _same(a, b, exact=True):
    assert a.iterations == b.iterations
    assert np.array_equal(a.preemptions, b.preemptions)
    assert a.max_queue == b.max_queue
    ia, ib = np.sort(np.repeat(a.itl_values, a.itl_weights)), np.sort(np.repeat(b.itl_values, b.itl_weights))
    if exact:
        assert np.array_equal(a.first, b.first) and np.array_equal(a.last, b.last)
        assert np.array_equal(ia, ib)
    else:
        assert np.allclose(a.first, b.first, rtol=1e-9, atol=1e-12)
        assert np.allclose(a.last, b.last, rtol=1e-9, atol=1e-12)
        assert np.allclose(ia, ib, rtol=1e-9, atol=1e-12)


@st_.composite
def workloads(draw):
    n = draw(st_.integers(1, 25))
    A = sorted(draw(st_.lists(st_.integers(0, 400), min_size=n, max_size=n)))
    P = draw(st_.lists(st_.integers(1, 150), min_size=n, max_size=n))
    G = draw(st_.lists(st_.integers(1, 80), min_size=n, max_size=n))
    bs = draw(st_.sampled_from([1, 2, 4, 16]))
    need = max(-(-(p + g - 1) // bs) for p, g in zip(P, G))
    blocks = draw(st_.integers(need, 3 * need))
    seqs = draw(st_.integers(1, 8))
    budget = draw(st_.integers(max(seqs, 8), 300))
    chunked = draw(st_.booleans())
    if not chunked:
        budget = max(budget, max(p + g for p, g in zip(P, G)))
    eng = S.Engine(blocks * bs, bs, seqs, budget, chunked)
    return [a / 1000 for a in A], P, G, eng


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_fast_path_equals_the_reference(w):
    A, P, G, eng = w
    ref = S.simulate_reference(A, P, G, eng, S.linear_step, C)
    _same(ref, S.simulate(A, P, G, eng, S.linear_step, C, affine=False))
    # the closed form of a run (α + β·context) agrees up to rounding — on arrivals a third of a
    # microsecond off the 0.1 ms grid of the step times: on the grid an iteration can end exactly
    # at an arrival, and which side of it the rounding falls decides whether the arrival joins
    # the next iteration (a different schedule; seen with 7 requests of 1-52 tokens)
    A = [a + 1e-6 / 3 for a in A]
    full = S.simulate(A, P, G, eng, S.linear_step, C)
    _same(S.simulate_reference(A, P, G, eng, S.linear_step, C), full, exact=False)
    _same_unrecorded(full, S.simulate(A, P, G, eng, S.linear_step, C, record=False))


def _same_unrecorded(full, bare):
    """Without recording (the SLO search's simulations): the same schedule and times, bit for
    bit, and no inter-token latencies or event series — only their count."""
    assert bare.events == full.events == full.series_t.size
    assert bare.iterations == full.iterations
    assert np.array_equal(bare.first, full.first) and np.array_equal(bare.last, full.last)
    assert np.array_equal(bare.preemptions, full.preemptions)
    assert bare.itl_values.size == bare.itl_weights.size == bare.series_t.size == 0


def test_fast_path_with_a_step_cost_not_affine_in_the_context():
    # a roofline-like max of two lines: runs are evaluated by vectorised calls of the cost
    def cost(c, prefill, decodes, context, o=None):
        return 0.01 + np.maximum(0.001 * (prefill + decodes), 2e-5 * context + 1e-3) + 0 * context

    rng = np.random.default_rng(2)
    for _ in range(20):
        n = 30
        A = np.sort(rng.uniform(0, 0.3, n))
        P, G = rng.integers(1, 120, n), rng.integers(1, 90, n)
        eng = S.Engine(kv_tokens=4 * 400, block_size=4, max_num_seqs=6, max_num_batched_tokens=64)
        ref = S.simulate_reference(A, P, G, eng, cost, None)
        # the same schedule; numpy may round a vectorised call one ulp apart from a scalar one
        _same(ref, S.simulate(A, P, G, eng, cost, None), exact=False)
        assert S._Affine(cost, None, None, 1600)(6) is None


def test_preemption_heavy_trace_slice():
    # the first 400 Azure conversation requests on a small pool: preemptions happen and both paths agree
    tr = st.read_trace(AZURE)
    A, P, G = (np.asarray(x[:400]) for x in (tr.arrived, tr.prefill, tr.decode))
    eng = S.Engine(kv_tokens=8000, block_size=16, max_num_seqs=64, max_num_batched_tokens=2048)
    c = {"overhead": 0.006, "token": 3e-5, "context": 5e-8}
    ref = S.simulate_reference(A, P, G, eng, S.linear_step, c)
    assert ref.preemptions.sum() > 0
    _same(ref, S.simulate(A, P, G, eng, S.linear_step, c, affine=False))
    full = S.simulate(A, P, G, eng, S.linear_step, c)
    _same_unrecorded(full, S.simulate(A, P, G, eng, S.linear_step, c, record=False))
    # round-robin engines: the same merge of the requests' figures
    two = S.simulate_replicas(A, P, G, eng, S.linear_step, c, replicas=2)
    bare = S.simulate_replicas(A, P, G, eng, S.linear_step, c, replicas=2, record=False)
    assert np.array_equal(two.first, bare.first) and np.array_equal(two.last, bare.last)
    assert bare.events == two.events > 0 and bare.iterations == two.iterations


# ---------------------------------------------------------------- workloads the engine cannot run
def test_request_longer_than_the_pool_is_an_error():
    eng = S.Engine(kv_tokens=64, block_size=16)
    with pytest.raises(S.SimError, match="request 2 needs 80 tokens of KV cache"):
        S.simulate([0.0, 1.0], [10, 70], [1, 11], eng, S.linear_step, C)
    with pytest.raises(S.SimError, match="max_num_batched_tokens"):
        S.simulate([0.0], [10], [1], S.Engine(640, 16, 256, 128), S.linear_step, C)


# ---------------------------------------------------------------- the block
def _plan(tmp_path, body, name="t.plan"):
    p = tmp_path / name
    p.write_text(body, encoding="utf-8")
    return p


SYN = """\
plan syn {
  use batching {
    arrivals = "poisson"; rate = 4 request/s; requests = 300; seed = 7
    input = 512 token; output = 64 token
    slo_ttft = 500 ms; slo_tpot = 20 ms
    kv_tokens = 50000 token; max_num_batched_tokens = 1024 token
    step_overhead = 6 ms; step_token = 30 us/token; step_context = 50 ns/token
  }
}
"""


def test_block_defines_the_simulated_metrics(tmp_path):
    ws = dsl.load(_plan(tmp_path, SYN))
    A = S.poisson_arrivals(4.0, 300, 7)
    eng = S.Engine(50000, 16, 256, 1024)
    r = S.simulate(A, np.full(300, 512), np.full(300, 64), eng, S.linear_step,
                   {"overhead": 0.006, "token": 30e-6, "context": 50e-9})
    s = r.summary(0.5, 0.02)
    for name, unit, key in (("ttft_p95", "s", "ttft_p95"), ("tpot_p99", "s", "tpot_p99"),
                            ("e2e_p95", "s", "e2e_p95"), ("throughput", "token/s", "throughput"),
                            ("goodput", "request/s", "goodput"), ("ttft_p50", "s", "ttft_p50")):
        assert qval(ws, f"syn.{name}", unit) == pytest.approx(s[key], rel=1e-12)
    assert qval(ws, "syn.preemptions") == 0
    # a lone 512-token prompt takes 6 ms + 512·30 µs = 21.36 ms: no TTFT is shorter
    assert qval(ws, "syn.ttft_p50", "s") >= 0.02136 - 1e-12


def test_block_errors_are_located(tmp_path):
    with pytest.raises(PlanError) as e:
        dsl.load(_plan(tmp_path, SYN.replace("kv_tokens = 50000 token; ", "")))
    d = e.value.diagnostics[0]
    assert d.code == "missing-parameter" and "kv_tokens" in d.summary and d.span.line == 2
    with pytest.raises(PlanError) as e:
        dsl.load(_plan(tmp_path, SYN.replace("kv_tokens = 50000", "kv_tokens = 500")))
    assert "needs 575 tokens of KV cache" in e.value.diagnostics[0].summary
    with pytest.raises(PlanError) as e:
        dsl.load(_plan(tmp_path, SYN.replace("rate = 4 request/s; ", "")))
    assert "need 'rate'" in e.value.diagnostics[0].summary


def test_trace_block_and_measured_names(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text("arrived_at,num_prefill_tokens,num_decode_tokens,first_token_at,last_token_at\n"
                   "0,100,4,0.2,0.5\n0.1,50,2,0.3,0.4\n", encoding="utf-8")
    body = """plan m {
  use trace { file = "m.csv" }
  use batching { trace = "m.csv"; kv_tokens = 4096 token
                 step_overhead = 10 ms; step_token = 1 ms/token; step_context = 0.1 ms/token }
}
"""
    ws = dsl.load(_plan(tmp_path, body))
    assert qval(ws, "m.measured_ttft_p95", "s") == pytest.approx(0.2, abs=1e-12)   # max of (0.2, 0.2)
    # simulated: it 1 prefills the first request alone (0.11 s; the second arrives at 0.1 s); it 2
    # decodes it (reading 100) beside the second's 50-token prefill: 0.01 + 0.051 + 0.01 = 0.071 s,
    # so the second's TTFT is 0.11 + 0.071 − 0.1 = 0.081 s
    assert qval(ws, "m.ttft_p50", "s") == pytest.approx(0.081, abs=1e-12)
    assert qval(ws, "m.ttft_p95", "s") == pytest.approx(0.11, abs=1e-12)
    from plugins.serving.serving import TRACE
    assert "ttft_p95" not in TRACE.provides and "ttft_p95" in S.BATCHING.provides


def test_plan_eval_is_deterministic(tmp_path, run_cli):
    p = _plan(tmp_path, SYN)
    outs = [run_cli("eval", "--format", "json", str(p), cwd=tmp_path) for _ in range(2)]
    assert outs[0][0] == 0 and outs[0][1] == outs[1][1]


def test_replicas_split_the_stream_round_robin():
    # two requests arriving together on two engines: each is prefilled alone (0.01 + 0.1 s), where one
    # engine would have prefilled them together (0.01 + 0.2 s)
    eng = S.Engine(kv_tokens=1024, block_size=16, max_num_seqs=4, max_num_batched_tokens=2048)
    two = S.simulate_replicas([0.0, 0.0], [100, 100], [1, 1], eng, S.linear_step, C, replicas=2)
    assert two.ttft == pytest.approx([0.11, 0.11], abs=1e-12)
    one = S.simulate_replicas([0.0, 0.0], [100, 100], [1, 1], eng, S.linear_step, C, replicas=1)
    assert one.ttft == pytest.approx([0.21, 0.21], abs=1e-12)
    assert two.max_queue == 2 and two.blocks == 2 * eng.blocks     # the deployment's queue and pool


ENGINE_PLAN = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"
plan e {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; max_model_len = 8192 token }
  use batching { arrivals = "poisson"; rate = 8 request/s; requests = 200; input = 1024 token; output = 128 token }
}
"""


def test_engine_names_and_step_model_are_read(tmp_path):
    pytest.importorskip("plugins.serving.serving_step")
    from plugins.serving import serving_step
    from plugins.training.layout_model import ops
    ws = dsl.load(_plan(tmp_path, ENGINE_PLAN))
    kv = int(qval(ws, "e.kv_tokens", "token"))
    eng = S.Engine(kv, int(qval(ws, "e.block_size", "token")), int(qval(ws, "e.max_num_seqs", "seq")),
                   int(qval(ws, "e.max_num_batched_tokens", "token")), True)
    # the vllm preset on a GPU of at least 70 GiB that is not an A100 (vLLM's server defaults)
    assert (eng.block_size, eng.max_num_seqs, eng.max_num_batched_tokens) == (16, 1024, 8192)
    r = S.simulate(S.poisson_arrivals(8.0, 200, 0), np.full(200, 1024), np.full(200, 128), eng,
                   serving_step.step_time, serving_step.step_constants(ws, "e"), ops("numpy"))
    assert qval(ws, "e.ttft_p95", "s") == pytest.approx(r.quantile("ttft", 0.95), rel=1e-12)
    assert qval(ws, "e.tpot_p50", "s") == pytest.approx(r.quantile("tpot", 0.5), rel=1e-12)


def test_inputs_behind_the_simulation_are_structural(tmp_path):
    # the simulation runs at nominal numbers: the inputs behind the engine's KV pool and step time
    # (device memory as CUDA reports it and bandwidth, the engine's memory fraction) shape the plan,
    # so a sweep over one re-evaluates it instead of keeping the nominal result
    pytest.importorskip("plugins.serving.serving_step")
    ws = dsl.load(_plan(tmp_path, ENGINE_PLAN))
    assert {"h100_sxm.cuda_memory", "h100_sxm.mem_bw", "vllm.gpu_memory_utilization"} <= set(ws.structural)


def test_malformed_trace_is_located(tmp_path):
    (tmp_path / "bad.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,2\n1.5,abc,2\n",
                                      encoding="utf-8")
    with pytest.raises(PlanError) as e:
        dsl.load(_plan(tmp_path, 'plan m { use batching { trace = "bad.csv"; kv_tokens = 1000 token; '
                                 'step_overhead = 1 ms } }\n'))
    d = e.value.diagnostics[0]
    assert d.code == "bad-trace" and d.span.file.endswith("bad.csv") and (d.span.line, d.span.column) == (3, 5)


@pytest.mark.parametrize("row,col,column", [("0,100,0", "num_decode_tokens", 7), ("0,0,5", "num_prefill_tokens", 3)])
def test_request_without_tokens_is_its_trace_rows_error(tmp_path, row, col, column):
    # a request the engine cannot run (no input or no output token) is a malformed row of the file, located at its
    # cell (bad.csv:3), not an error of the block's line
    (tmp_path / "bad.csv").write_text(f"arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,2\n{row}\n",
                                      encoding="utf-8")
    with pytest.raises(PlanError) as e:
        dsl.load(_plan(tmp_path, 'plan m { use batching { trace = "bad.csv"; kv_tokens = 1000 token; '
                                 'step_overhead = 1 ms } }\n'))
    d = e.value.diagnostics[0]
    assert d.code == "bad-trace" and d.span.file.endswith("bad.csv") and (d.span.line, d.span.column) == (3, column)
    assert f"column '{col}'" in d.summary and "request 2" in d.summary and d.related
    # lengths the block gives replace the trace's: the row is then served
    ws = dsl.load(_plan(tmp_path, 'plan m { use batching { trace = "bad.csv"; input = 10 token; output = 2 token; '
                                  'kv_tokens = 1000 token; step_overhead = 1 ms } }\n'))
    assert qval(ws, "m.sim_requests", "request") == 2


def test_block_larger_than_the_pool_names_the_block_size():
    # 100 tokens of KV in blocks of 10^6: no whole block -- the cause is the block size, not the memory
    eng = S.Engine(kv_tokens=100, block_size=10 ** 6)
    with pytest.raises(S.SimError) as e:
        S.simulate([0.0], [10], [2], eng, S.linear_step, C)
    assert "holds no whole block of block_size = 1,000,000 tokens" in str(e.value) and "16 tokens" in e.value.hint


def test_binned_max_keeps_every_peak():
    # y = 1 from t = 0, 5 from 1, 2 from 2, 0 from 3; two intervals of [0, 4]: max 5 on [0, 2), 2 on [2, 4)
    edges, vals = S.binned_max(np.array([0.0, 1.0, 2.0, 3.0]), np.array([1, 5, 2, 0]), 4.0, bins=2)
    assert list(edges) == [0.0, 2.0, 4.0] and list(vals) == [5.0, 2.0]
    # an interval without events keeps the value carried into it
    edges, vals = S.binned_max(np.array([0.0, 3.5]), np.array([7, 1]), 4.0, bins=4)
    assert list(vals) == [7.0, 7.0, 7.0, 7.0]


def test_figures_draw(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    ws = dsl.load(_plan(tmp_path, SYN))
    for draw in (S._draw_queue, S._draw_latency):
        assert draw(ws, "syn", Figure()) is True
    t = S._build_table(ws, "syn")
    assert [row[0] for row in t.rows] == ["ttft (s)", "tpot (ms)", "itl (ms)", "e2e (s)"]


def test_tensor_parallel_engine_without_a_link_is_a_located_error(tmp_path):
    """`use engine { tp = 2 }` under `use batching` prices TP all-reduces: without a link the
    error points at the engine's tp (was a ZeroDivisionError shown as a plugin failure)."""
    import dsl
    from dsl.syntax.diagnostics import PlanError
    text = ('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\nimport "@catalog/engines.plan"\n'
            'plan p { model = qwen3_8b; device = h100_sxm\n'
            '  use engine { engine = vllm; tp = 2; max_model_len = 8192 token }\n'
            '  use batching { arrivals = "poisson"; rate = 2 request/s; requests = 50; input = 512 token; '
            'output = 16 token }\n}\n')
    with pytest.raises(PlanError) as e:
        dsl.load("t.plan", text=text)
    d = e.value.diagnostics[0]
    assert d.code == "missing-parameter" and d.span.line == 5 and "link" in d.summary and "nvlink4" in d.hint
    ok = dsl.load("t.plan", text=text.replace("  use batching", "  use serving_step { link = nvlink4 }\n  use batching"))
    assert ok.base_value("p.ttft_p95") is not None


def test_the_engine_carries_the_tensor_parallel_link(tmp_path):
    """`use engine { tp = 2; link = nvlink4 }` is enough for `use batching` and `use serving_step`:
    the same simulation as with the link written in `use serving_step`, and the missing-link
    error's hint names the line to add to `use engine`."""
    import dsl
    from dsl.syntax.diagnostics import PlanError
    head = ('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\nimport "@catalog/engines.plan"\n'
            'plan p { model = qwen3_8b; device = h100_sxm\n')
    sim = ('  use batching { arrivals = "poisson"; rate = 2 request/s; requests = 50; input = 512 token; '
           'output = 16 token }\n}\n')
    on_engine = dsl.load("t.plan", text=head + '  use engine { engine = vllm; tp = 2; max_model_len = 8192 token; '
                         'link = nvlink4 }\n  use serving_step { batch = 8 seq }\n' + sim)
    on_step = dsl.load("t.plan", text=head + '  use engine { engine = vllm; tp = 2; max_model_len = 8192 token }\n'
                       '  use serving_step { batch = 8 seq; link = nvlink4 }\n' + sim)
    for q in ("p.ttft_p95", "p.tpot_p95", "p.tpot"):
        assert on_engine.get(q, "s") == on_step.get(q, "s")
    with pytest.raises(PlanError) as e:
        dsl.load("t.plan", text=head + '  use engine { engine = vllm; tp = 2; max_model_len = 8192 token }\n' + sim)
    assert "add `link = nvlink4` to `use engine`" in e.value.diagnostics[0].hint


def test_a_failed_engine_reports_only_its_own_error(tmp_path):
    """A model that does not fit stops `use engine`; `use batching`, a requirement and a solve on
    the latencies it would have given say nothing more (one root error, not four)."""
    import dsl
    from dsl.syntax.diagnostics import PlanError
    text = ('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\nimport "@catalog/engines.plan"\n'
            'plan p { model = llama31_70b; device = a100_sxm_80gb\n'
            '  use engine { engine = vllm; max_model_len = 8192 token }\n'
            '  use serving_step { batch = 8 seq }\n'
            '  use batching { arrivals = "poisson"; rate = 1 request/s; requests = 20; input = 512 token; '
            'output = 16 token }\n}\n'
            'require fast: p.ttft_p95 <= 2 s\n'
            'solve copies: p.engine.replicas for p.ttft_p95 <= 2 s\n'
            'plan q { use batching { arrivals = "poisson"; rate = 1 request/s; requests = 5; input = 8 token; '
            'output = 2 token; step_overhead = 1 ms } }\n')
    with pytest.raises(PlanError) as e:
        dsl.load("t.plan", text=text)
    errors = [d for d in e.value.diagnostics if d.severity == "error"]
    # the engine's error, and q's own (no pool size): an error in another plan is still reported
    assert [(d.code, d.span.line) for d in errors] == [("does-not-fit", 5), ("missing-parameter", 11)], errors


def test_the_old_chunked_prefill_name_points_at_the_new_one(tmp_path):
    import dsl
    from dsl.syntax.diagnostics import PlanError
    with pytest.raises(PlanError) as e:
        dsl.load("t.plan", text='plan p { use batching { arrivals = "poisson"; rate = 1 request/s; requests = 5; '
                 'input = 8 token; output = 2 token; kv_tokens = 1000 token; chunked_prefill = false; '
                 'step_overhead = 1 ms } }\n')
    d = e.value.diagnostics[0]
    assert d.code == "unknown-name" and "did you mean 'enable_chunked_prefill'?" in d.hint and d.span.column > 1


def test_affine_checks_are_shared_by_equal_costs_only():
    # the (α, β) of a decode batch is a pure function of the cost, its constants (type and exact
    # value), the ops and the pool: simulations that share them share the check
    m = S._affine_memo(S.linear_step, dict(C), None, 1600)
    assert S._affine_memo(S.linear_step, {k: float(v) for k, v in C.items()}, None, 1600) is m
    assert S._affine_memo(S.linear_step, dict(C), None, 1616) is not m
    assert S._affine_memo(S.linear_step, {**C, "overhead": 0.0100000001}, None, 1600) is not m
    assert S._affine_memo(S.linear_step, {**C, "token": 1}, None, 1600) is not \
        S._affine_memo(S.linear_step, {**C, "token": 1.0}, None, 1600)
    assert S._affine_memo(lambda *a: S.linear_step(*a), dict(C), None, 1600) is not m
    assert S._affine_memo(S.linear_step, {**C, "bad": {}}, None, 1600) == {}       # unhashable: its own
    # the times are those of an unshared check, bit for bit
    tr = st.read_trace(AZURE)
    A, P, G = (np.asarray(x[:300]) for x in (tr.arrived, tr.prefill, tr.decode))
    eng = S.Engine(kv_tokens=60000, block_size=16, max_num_seqs=64, max_num_batched_tokens=2048)
    c = {"overhead": 0.006, "token": 3e-5, "context": 5e-8}
    first = S.simulate(A, P, G, eng, S.linear_step, c)
    shared = S._affine_memo(S.linear_step, c, None, eng.blocks * eng.block_size)
    assert shared                                          # filled by the first simulation
    again = S.simulate(A, P, G, eng, S.linear_step, dict(c))
    alone = S.simulate(A, P, G, eng, lambda *a: S.linear_step(*a), c)     # a cost of its own
    for r in (again, alone):
        assert np.array_equal(r.first, first.first) and np.array_equal(r.last, first.last)
        assert np.array_equal(r.itl_values, first.itl_values)


REJECT = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"
plan r {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; max_model_len = 2048 token }
  use batching { trace = "r.csv"
                 step_overhead = 10 ms; step_token = 1 ms/token; step_context = 0.1 ms/token }
}
"""


def test_requests_above_max_model_len_are_rejected_and_counted(tmp_path):
    """vLLM's server refuses a request whose prompt + max_tokens exceeds max_model_len (HTTP 400,
    OpenAIServing._validate_prompt_and_tokenize) and serves the rest: the simulation leaves it
    out of the latency figures, counts it and warns at max_model_len."""
    (tmp_path / "r.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                                    "0,100,4\n0.1,2000,49\n0.2,50,2\n", encoding="utf-8")
    ws = dsl.load(_plan(tmp_path, REJECT))
    assert qval(ws, "r.rejected_requests", "request") == 1            # 2,000 + 49 = 2,049 > 2,048
    assert qval(ws, "r.sim_requests", "request") == 2
    # the first request alone: prefill 0.01 + 100 × 0.001 = 0.11 s, three decodes reading 100,
    # 101, 102 tokens end at 0.1733 s; the third arrives at 0.2 s to an idle engine: 0.01 + 0.05
    assert qval(ws, "r.ttft_p50", "s") == pytest.approx(0.06, abs=1e-12)
    assert qval(ws, "r.ttft_p95", "s") == pytest.approx(0.11, abs=1e-12)
    w = [d for d in ws.diagnostics if d.code == "rejected"]
    assert len(w) == 1 and "1 of the 3 requests" in w[0].summary and "2,049" in w[0].summary
    assert (w[0].span.line, w[0].span.column) == (6, 47)                 # the value of max_model_len
    assert "2,049 token" in w[0].hint


def test_a_request_at_max_model_len_is_served(tmp_path):
    (tmp_path / "r.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,2000,48\n",
                                    encoding="utf-8")
    ws = dsl.load(_plan(tmp_path, REJECT))
    assert qval(ws, "r.rejected_requests", "request") == 0 and qval(ws, "r.sim_requests", "request") == 1
    assert not [d for d in ws.diagnostics if d.code == "rejected"]


def test_every_request_rejected_is_a_located_error(tmp_path):
    (tmp_path / "r.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,3000,4\n",
                                    encoding="utf-8")
    with pytest.raises(PlanError) as e:
        dsl.load(_plan(tmp_path, REJECT))
    d = e.value.diagnostics[0]
    assert "rejects every request" in d.summary and (d.span.line, d.span.column) == (6, 47)


def test_lone_arrival_far_from_zero_is_served(tmp_path):
    # one request arriving at 1e15 s (a zero span at the absolute clock's resolution of 1/8 s there: it divided by 0)
    # alone on an idle engine: TTFT = its prefill step 1 ms + 10 us · 100 = 2 ms; 9 decodes of 1 ms + 10 us each
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n1e15,100,10\n", encoding="utf-8")
    ws = dsl.load(_plan(tmp_path, 'plan m { use batching { trace = "t.csv"; kv_tokens = 1000 token; '
                                  'step_overhead = 1 ms; step_token = 10 us/token } }\n'))
    assert qval(ws, "m.ttft_p50", "s") == pytest.approx(0.002, abs=1e-9)
    assert qval(ws, "m.tpot_p50", "s") == pytest.approx(0.00101, abs=1e-9)
    assert qval(ws, "m.throughput", "token/s") == pytest.approx(10 / (0.002 + 9 * 0.00101), rel=1e-6)

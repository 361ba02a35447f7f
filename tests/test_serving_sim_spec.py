"""Speculative decoding in `use batching` (serving_spec.SimSpec in serving_sim_core.simulate_reference):
schedules traced by hand with a toy step cost, the block on the toy decoder of
tests/test_serving_step_spec.py against serving_spec's step prices, speculation off unchanged, and
the located errors."""
from __future__ import annotations

import pytest

import dsl
from dsl.syntax.diagnostics import PlanError
from plugins.serving import serving_sim as S
from plugins.serving import serving_spec as sd

# target iterations: affine, 1 s + 0.1 s per prefill token (no decode is priced by it with speculation)
C = {"overhead": 1.0, "token": 0.1, "context": 0.0}
ENG = S.Engine(kv_tokens=1024, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048)


def toy_spec(k, E):
    # the speculative decode part of an iteration: 2 s + 0.5 s per sequence + 0.01 s per cached token read
    return sd.SimSpec(k, E, lambda n, ctx: 2.0 + 0.5 * n + 0.01 * ctx)


def test_tokens_per_step_is_the_mean_E():
    # E = 1.5: gains ⌊1.5⌋ − 0 = 1, ⌊3⌋ − 1 = 2, ⌊4.5⌋ − 3 = 1, ⌊6⌋ − 4 = 2: 6 tokens in 4 steps
    s = toy_spec(1, 1.5)
    assert [s.tokens(i, 100) for i in range(4)] == [1, 2, 1, 2]
    assert s.tokens(1, 1) == 1                  # capped by the tokens left
    assert toy_spec(3, 1.0).tokens(7, 5) == 1   # E = 1 (nothing accepted): one token a step, as without


def test_one_request_alone_k3_alpha1_by_hand():
    # P = 4, G = 10 arriving at 0, k = 3, α = 1: E = 1 + 1 + 1 + 1 = 4.
    # iteration 1: the prefill of 4 tokens, 1 + 0.1·4 = 1.4 s: first token at 1.4 (out = 1, 4 tokens cached)
    # then 9 tokens to go at 4 a step: gains 4, 4, 1 → ⌈9/4⌉ = 3 decode iterations, one sequence each,
    #   reading 4, 8, 12 cached tokens: 2.54 s, 2.58 s, 2.62 s (7.74 s); last token at 1.4 + 7.74 = 9.14
    E = sd.expected_tokens(1, 3)
    assert E == 4
    for r in (S.simulate_reference([0.0], [4], [10], ENG, S.linear_step, C, spec=toy_spec(3, E)),
              S.simulate([0.0], [4], [10], ENG, S.linear_step, C, spec=toy_spec(3, E))):
        assert r.iterations == 4
        assert r.ttft[0] == pytest.approx(1.4)
        assert r.last_at[0] == pytest.approx(9.14)
        assert r.tpot[0] == pytest.approx(7.74 / 9)               # (t_G − t_1)/(G − 1) = 0.86 s
        # ITL: each step's time over the tokens it gave, once per token: 2.54/4 ×4, 2.58/4 ×4, 2.62 ×1
        assert sorted(zip(r.itl_values.tolist(), r.itl_weights.tolist())) == pytest.approx(
            sorted([(2.54 / 4, 4), (2.58 / 4, 4), (2.62, 1)]))
        # p50 by nearest rank: the ⌈0.5·9⌉ = 5th of 0.635 ×4, 0.645 ×4, 2.62 ×1 → 0.645
        assert r.quantile("itl", 0.5) == pytest.approx(2.58 / 4)


def test_mixed_iteration_prices_the_chunk_plus_the_speculative_decodes():
    # A: P = 4, G = 10 at 0; B: P = 4, G = 2 at 1.0; k = 3, α = 1 (E = 4).
    # it 1 [0, 1.4]: A's prefill (1.4 s).  it 2 from 1.4: A decodes (4 cached) and B's prefill of 4:
    #   chunk alone 1 + 0.4 = 1.4 s, plus the decode part 2 + 0.5 + 0.04 = 2.54 s → 3.94 s, ends 5.34:
    #   A out 5 (8 cached), B's first token at 5.34 (TTFT 4.34).
    # it 3: A and B decode, 8 + 4 = 12 cached: 2 + 1 + 0.12 = 3.12 s, ends 8.46: A gains 4 (out 9,
    #   12 cached), B gains min(4, 1) = 1 and ends at 8.46.
    # it 4: A alone, 12 cached: 2.62 s, ends 11.08: A gains 1 and ends.
    r = S.simulate_reference([0.0, 1.0], [4, 4], [10, 2], ENG, S.linear_step, C, spec=toy_spec(3, 4))
    assert r.iterations == 4
    assert r.ttft.tolist() == pytest.approx([1.4, 4.34])
    assert r.last_at.tolist() == pytest.approx([11.08, 8.46])


def test_budget_counts_k_plus_1_tokens_per_decode():
    # budget 5, k = 3: a decoding sequence takes 4 of the 5 tokens, so B's prompt of 4 is prefilled
    # 1 token in iteration 2 and 3 in iteration 3 (chunked prefill).  A: P = 4, G = 3; B: P = 4, G = 1 at 0.5.
    # it 1 [0, 1.4]: A's prefill.  it 2: A decodes (gain 2 = min(4, 2 left): A ends) + B's chunk of 1:
    #   1.1 + (2 + 0.5 + 0.04) = 3.64 s, ends 5.04.  it 3: B's last 3 tokens: 1.3 s, ends 6.34 (B's only token)
    eng = S.Engine(kv_tokens=1024, block_size=16, max_num_seqs=2, max_num_batched_tokens=5)
    r = S.simulate_reference([0.0, 0.5], [4, 4], [3, 1], eng, S.linear_step, C, spec=toy_spec(3, 4))
    assert r.iterations == 3
    assert r.last_at.tolist() == pytest.approx([5.04, 6.34])


TOY = """
device d { peak_flops = 1000 FLOP/s; mem_bw = 100 B/s; matmul_efficiency = 100 %
           matmul_half_flops = 0 FLOP; mem_efficiency = 100 % }
model toy { layers = 2; hidden = 4; ffn = 8; heads = 2; kv_heads = 1; head_dim = 2; vocab = 16 }
model head extends toy { layers = 1 }
plan p { model = toy; device = d
  use serving_step { attention_efficiency = 100 %; kernel_overhead = 0 s }
  use batching { rate = 0.001 request/s; requests = 1; input = 4 token; output = 10 token; kv_tokens = 1000 token
                 speculative = "mtp"; draft_model = head; spec_tokens = 3; acceptance = 100 % } }
plan plain extends p { use batching { speculative = "none" } }
"""


def test_block_on_the_toy_decoder():
    # one request of 4 + 10 tokens: the prefill as without speculation (TTFT equal), then ⌈9/4⌉ = 3
    # speculative steps at 4, 8, 12 cached tokens, each the head's 3 decode steps plus the target's
    # verification of 4 tokens (serving_spec.draft_time + verify_time, hand-checked in
    # tests/test_serving_step_spec.py), instead of 9 plain decode steps
    ws = dsl.load("t.plan", text=TOY)
    from plugins.serving.serving_step import step_constants
    from plugins.training.layout_model import ops
    c, cd, o = step_constants(ws, "p"), step_constants(ws, "p", model="head"), ops("numpy")
    steps = [sd.draft_time(cd, 1, 3, s, o) + sd.verify_time(c, 1, 3, s, o) for s in (4, 8, 12)]
    assert float(ws.base_value("p.ttft_mean")) == pytest.approx(float(ws.base_value("plain.ttft_mean")))
    assert float(ws.base_value("p.sim_iterations")) == 4 and float(ws.base_value("plain.sim_iterations")) == 10
    assert float(ws.base_value("p.tpot_mean")) == pytest.approx(sum(steps) / 9)     # s (base unit)


def _error(block):
    with pytest.raises(PlanError) as e:
        dsl.load("e.plan", text=TOY.replace('speculative = "mtp"; draft_model = head; spec_tokens = 3; '
                                            'acceptance = 100 %', block))
    return str(e.value)


@pytest.mark.parametrize("block, words", [
    ('speculative = "draft"', "needs the model that drafts"),
    ('speculative = "mtp"; draft_model = head; spec_tokens = 2; acceptance_profile = [0.8, 0.6, 0.5]',
     "3 acceptance probabilities for spec_tokens = 2"),
    ('speculative = "mtp"; draft_model = head; step_overhead = 1 ms', "not with an affine step cost"),
])
def test_located_errors(block, words):
    msg = _error(block)
    assert words in msg and ":9:" in msg and "Traceback" not in msg


def test_speculation_with_prefix_caching_in_the_block():
    # the toy plan with prefix caching on: its one synthetic request finds nothing cached, so the
    # cached simulation runs the same speculative schedule (4 iterations, the same TTFT and TPOT)
    ws = dsl.load("t.plan", text=TOY + "plan cached extends p { use batching { enable_prefix_caching = true } }\n")
    for q in ("ttft_mean", "tpot_mean", "sim_iterations"):
        assert float(ws.base_value(f"cached.{q}")) == pytest.approx(float(ws.base_value(f"p.{q}")), rel=1e-12)
    assert float(ws.base_value("cached.prefix_hit_rate")) == 0

"""Synthetic prompts with shared prefixes (plugins/serving/serving_prompts.py) and the prefix
cache reading them (plugins/serving/serving_prefix_cache.py).

Every expected number is traced by hand in the comments from the generator's rules (module
docstring: a turn's prompt = previous prompt + previous answer + new input; shared system
prompt blocks) and the cache's (whole engine blocks of computed tokens are keyed; at least one
token is computed).  A trace's hashes cover prompts only; the synthetic prompts also key the
full blocks an answer fills, as vLLM caches generated tokens (``allocate_slots`` in
vllm/v1/core/kv_cache_manager.py caches the full blocks of min(computed + new tokens,
request.num_tokens), and request.num_tokens counts the output tokens)."""
from fractions import Fraction

import numpy as np
import pytest

import dsl
from conftest import qval
from plugins.serving.serving_prefix_cache import block_keys, simulate_cached
from plugins.serving.serving_prompts import synthetic_prompts
from plugins.serving.serving_sim_core import Engine, linear_step, poisson_arrivals

C = {"overhead": 0.01, "token": 0.001, "context": 0.0}      # s, s/token, s/token
COST = "step_overhead = 10 ms; step_token = 0.1 ms/token; step_context = 0 s/token"

SYSTEM = f"""plan p {{
  use batching {{
    arrivals = "poisson"; rate = 0.01 request/s; requests = 5; seed = 1
    input = 20 token; output = 1 token
    system_prompts = 1; system_prompt_tokens = 32 token
    enable_prefix_caching = true
    kv_tokens = 100000 token; block_size = 16 token
    {COST}
  }}
}}
"""


def test_one_system_prompt_shared_by_every_request(write_plan):
    # 5 requests, mean gap 100 s (rate 0.01/s), each done in ~15 ms: one at a time.
    # every prompt = 32-token system prompt (2 blocks of 16) + 20 input tokens = 52 tokens.
    # request 0 finds nothing; requests 1-4 find the 2 system-prompt blocks = 32 tokens each
    # (⌊(52 − 1)/16⌋ = 3 ≥ 2 blocks allowed; block 2 holds the request's own input).
    # hit rate = (5 − 1)·32 / (5·52) = 128/260; saved 128 tokens.
    # TTFT: request 0 prefills 52 tokens: 10 + 5.2 = 15.2 ms; the others 20: 10 + 2 = 12 ms;
    # mean (15.2 + 4·12)/5 = 12.64 ms.
    ws = dsl.load(write_plan(SYSTEM))
    assert qval(ws, "p.prefix_hit_rate") == pytest.approx(128 / 260, abs=1e-12)
    assert qval(ws, "p.prefill_tokens_saved", "token") == 128
    assert qval(ws, "p.ttft_mean", "ms") == pytest.approx((15.2 + 4 * 12) / 5, abs=1e-9)


def test_no_request_starts_with_a_system_prompt(write_plan):
    # system_prompt_share = 0: every prompt is its own 20 input tokens, no block is shared
    ws = dsl.load(write_plan(SYSTEM.replace("seed = 1", "seed = 1; system_prompt_share = 0")))
    assert qval(ws, "p.prefix_hit_rate") == 0
    assert qval(ws, "p.ttft_mean", "ms") == pytest.approx(12, abs=1e-9)    # 10 + 20·0.1 ms


def test_three_turns_hit_the_previous_prompt_and_answer_blocks(write_plan):
    # the block's synthetic prompts key the answers' full blocks too.  One conversation of
    # 3 turns, U = 20, G = 30, blocks of 16; prompts 20, 70, 120 (as below).
    #   turn 0 computes P + G − 1 = 49 tokens (the last output token is sampled, never fed
    #   back): ⌊49/16⌋ = 3 full blocks = U0 + the first 28 answer tokens; turn 1 (70 tokens,
    #   ≤ ⌊69/16⌋ = 4 blocks) hits those 3: 48 tokens (block 3 = A0[28:30] + U1[0:14] was
    #   never full in turn 0).
    #   turn 1 computes 70 + 29 = 99 tokens: ⌊99/16⌋ = 6 blocks; turn 2 (120 tokens, ≤ 7)
    #   hits 6 blocks = 96 tokens.
    # hit rate = (0 + 48 + 96) / (20 + 70 + 120) = 144/210; saved 144 tokens.
    # TTFT = 10 ms + 0.1 ms/token · prefilled: 20 → 12 ms; 70 − 48 = 22 → 12.2; 120 − 96 = 24 → 12.4
    A = poisson_arrivals(0.01, 3, 1)
    assert min(np.diff(A)) > 5       # premise: each turn alone (a turn takes < 1 s here)
    ws = dsl.load(write_plan(SYSTEM.replace("requests = 5", "requests = 3; turns = 3")
                             .replace("system_prompts = 1; system_prompt_tokens = 32 token", "")
                             .replace("output = 1 token", "output = 30 token")))
    assert qval(ws, "p.prefix_hit_rate") == pytest.approx(144 / 210, abs=1e-12)
    assert qval(ws, "p.prefill_tokens_saved", "token") == 144
    assert qval(ws, "p.ttft_mean", "ms") == pytest.approx((12 + 12.2 + 12.4) / 3, abs=1e-9)
    # the same through the functions: ids of ⌊(P + G)/16⌋ = 3, 6, 9 blocks
    P, ids = synthetic_prompts([20] * 3, [30] * 3, turns=3, hash_block=16, with_output=True)
    assert [len(x) for x in ids] == [3, 6, 9]
    keys = block_keys(ids, P + 30, 16, 16)
    r, s = simulate_cached([0, 10, 20], P, [30] * 3, keys, Engine(kv_tokens=10000, block_size=16), linear_step, C)
    assert s.hit == [0, 48, 96]


def test_three_turns_hit_the_previous_prompt_blocks_only():
    # with prompt blocks alone keyed (as a trace's hashes give them):
    # one conversation of 3 turns, input U = 20, output G = 30, blocks of 16, no system prompt.
    # prompts: 20; 20 + 30 + 20 = 70; 70 + 30 + 20 = 120 tokens.
    P, ids = synthetic_prompts([20, 20, 20], [30, 30, 30], turns=3, hash_block=16)
    assert P.tolist() == [20, 70, 120]
    # full blocks: ⌊20/16⌋ = 1, ⌊70/16⌋ = 4, ⌊120/16⌋ = 7, each turn extending the previous
    # turn's full blocks; + one id of the partial last block (20, 70 and 120 are not multiples of 16:
    # 20 = 16 + 4, 70 = 64 + 6, 120 = 112 + 8)
    assert [len(x) for x in ids] == [2, 5, 8]
    assert ids[1][:1] == ids[0][:1] and ids[2][:4] == ids[1][:4]
    assert ids[1][1] != ids[0][1]           # turn 0's partial block ≠ turn 1's full block 1
    # alone on the engine (arrivals 10 s apart).  Only prompt blocks are keyed:
    #   turn 0 keys ⌊20/16⌋ = 1 block; turn 1 hits it: 16 tokens (its block 1, tokens 16-31,
    #   holds U0[16:20] + the answer's first 12 tokens: not keyed by turn 0);
    #   turn 1 keys ⌊70/16⌋ = 4 blocks; turn 2 hits them: 64 tokens (≤ ⌊119/16⌋ = 7 allowed).
    # hit rate = (0 + 16 + 64) / (20 + 70 + 120) = 80/210
    keys = block_keys(ids, P, 16, 16)
    r, s = simulate_cached([0, 10, 20], P, [30, 30, 30], keys, Engine(kv_tokens=10000, block_size=16),
                           linear_step, C)
    assert s.hit == [0, 16, 64]
    assert Fraction(s.hit_rate).limit_denominator(1000) == Fraction(80, 210)
    # TTFT = 10 ms + 1 ms/token · prefilled tokens: 20, 70 − 16 = 54, 120 − 64 = 56
    assert r.ttft == pytest.approx([0.030, 0.064, 0.066], abs=1e-12)


def test_conversations_and_system_prompts_together():
    # 4 requests, turns = 2 → conversations {0, 1} and {2, 3}; one system prompt of 8 tokens,
    # every conversation starts with it (share 1); blocks of 4; U = 2, G = 3.
    # conversation sequence: S(8) U(2) G(3) U(2): prompts 8 + 2 = 10 and 10 + 3 + 2 = 15.
    P, ids = synthetic_prompts([2, 2, 2, 2], [3, 3, 3, 3], turns=2, system_prompts=1, system_prompt_tokens=8,
                               hash_block=4)
    assert P.tolist() == [10, 15, 10, 15]
    # the system prompt's 2 blocks are shared by both conversations; block 2 (tokens 8-11)
    # holds the conversation's own input: shared between its turns only
    assert ids[0][:2] == ids[1][:2] == ids[2][:2] == ids[3][:2]
    assert ids[1][2] != ids[3][2]


def test_deterministic(write_plan, run_cli):
    # the same plan twice: the same report, byte for byte; a mix of 3 system prompts, half of
    # the conversations with one, 4 turns each
    text = SYSTEM.replace("system_prompts = 1", "system_prompts = 3; system_prompt_share = 0.5; turns = 4") \
                 .replace("rate = 0.01", "rate = 50")
    p = write_plan(text)
    a, b = run_cli("eval", p), run_cli("eval", p)
    assert a[0] == 0 and a == b
    P1, h1 = synthetic_prompts([5] * 9, [7] * 9, turns=4, system_prompts=3, system_prompt_tokens=40,
                               system_prompt_share=0.5, hash_block=16, seed=3)
    P2, h2 = synthetic_prompts([5] * 9, [7] * 9, turns=4, system_prompts=3, system_prompt_tokens=40,
                               system_prompt_share=0.5, hash_block=16, seed=3)
    assert P1.tolist() == P2.tolist() and h1 == h2


@pytest.mark.parametrize("change, where, says", [
    ("system_prompts = 1; ", "system_prompt_tokens", "needs 'system_prompts'"),
    ("system_prompt_tokens = 32 token", "system_prompts", "needs their length"),
    ("seed = 1", "hash_block", "keyed by the engine's blocks"),
    ("seed = 1", "system_prompt_share", "outside [0, 1]"),
])
def test_located_errors(write_plan, run_cli, change, where, says):
    text = SYSTEM.replace(change, "")
    if where == "hash_block":
        text = text.replace("enable_prefix_caching = true", "enable_prefix_caching = true; hash_block = 64 token")
    if where == "system_prompt_share":
        text = text.replace("enable_prefix_caching = true", "enable_prefix_caching = true; system_prompt_share = 2")
    rc, out, err = run_cli("eval", write_plan(text))
    line = next(i for i, l in enumerate(text.splitlines(), 1) if where in l)
    assert rc != 0 and says in err and f"t.plan:{line}:" in err and "Traceback" not in err


def test_system_prompts_with_a_trace_is_located(write_plan, run_cli, repo_root):
    rc, out, err = run_cli("eval", write_plan(f"""plan p {{
  use batching {{
    trace = "{repo_root}/specs/data/traces/prefix-shared-prompt.csv"
    turns = 2
    kv_tokens = 100000 token; {COST}
  }}
}}
"""))
    assert rc != 0 and "prompts come from the trace" in err and "t.plan:4:" in err and "Traceback" not in err


def test_a_system_prompt_beyond_the_pool_is_refused_before_its_blocks_are_built(write_plan, run_cli):
    # 10^9 tokens would be 62.5 million block ids per prompt: the pool of 100,000 tokens refuses it first
    text = SYSTEM.replace("system_prompt_tokens = 32 token", "system_prompt_tokens = 1e9 token")
    rc, out, err = run_cli("eval", write_plan(text))
    assert rc != 0 and "cannot fit the KV pool" in err and "t.plan:5:" in err and "Traceback" not in err


def test_a_conversation_beyond_the_pool_is_refused(write_plan, run_cli):
    # 5 turns of 20 in + 1 out: the last turn holds 4·21 + 20 + 1 − 1 = 104 tokens of KV (no system
    # prompt counted) against a pool of 100
    text = SYSTEM.replace("system_prompts = 1; system_prompt_tokens = 32 token", "turns = 5") \
        .replace("kv_tokens = 100000 token", "kv_tokens = 100 token")
    rc, out, err = run_cli("eval", write_plan(text))
    assert rc != 0 and "104 tokens of KV" in err and "t.plan:5:" in err and "Traceback" not in err

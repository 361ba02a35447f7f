"""Speculative decoding and prefix caching in `use serving_search`
(plugins/serving/serving_search_spec.py, serving_search_core.py).

The worked case specs/cases/serving-search-speculative.plan carries the hand check: E from
Leviathan et al. 2023 eq. 1, the KV budget with and without the draft from vLLM's memory
formula, the TPOT of one request alone from the step prices of specs/cases/serving-speculative.plan,
and the prefix hits of one and two engines from the trace's hash_ids.
"""
from __future__ import annotations

import numpy as np
import pytest

import dsl
from conftest import CASES, qval
from dsl.syntax.diagnostics import PlanError
from plugins.serving import serving_search as ss
from plugins.serving.serving_search_spec import PrefixIndex

HEAD = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"
model mtp_head extends qwen3_8b { layers = 1 }
"""


@pytest.fixture(scope="module")
def case():
    return dsl.load(CASES / "serving-search-speculative.plan")


def _rows(ws, plan):
    res = ss.result_of(ws, plan)
    return res, [res.row(i) for i in res.simulated]


def test_worked_case_speculation(case):
    res, rows = _rows(case, "spec")
    by_k = {r["spec_tokens"]: r for r in rows}
    assert set(by_k) == {0, 3}
    # E = 1 + 0.7 + 0.49 + 0.343
    assert by_k[3]["accepted_tokens_per_step"] == pytest.approx(2.533, abs=1e-12)
    assert by_k[0]["accepted_tokens_per_step"] == 1
    # the KV budget of the comments: 401,856 tokens; with the head's weights and KV 388,448
    assert by_k[0]["kv_tokens"] == 401_856 and by_k[3]["kv_tokens"] == 388_448
    # TPOT: 128 plain steps of 5.907 ms; 51 speculative steps of 7.63 ms over 128 tokens
    assert by_k[0]["tpot_p95"] * 1e3 == pytest.approx(5.907, rel=2e-3)
    assert by_k[3]["tpot_p95"] * 1e3 == pytest.approx(51 * 7.63 / 128, rel=2e-3)
    # the same prefill with and without speculation
    assert by_k[3]["ttft_p95"] == by_k[0]["ttft_p95"]
    # the search chooses the speculation that meets TPOT ≤ 4 ms
    assert qval(case, "spec.search_spec_tokens") == 3
    assert qval(case, "spec.search_accepted_tokens_per_step") == pytest.approx(2.533, abs=1e-12)
    assert qval(case, "spec.search_tpot_p95", "ms") == pytest.approx(51 * 7.63 / 128, rel=2e-3)


def test_screen_prices_the_speculative_step(case):
    # at this light load the screen's step is the speculative step of about one sequence
    # (7.63 ms) over E = 2.533 tokens: 3.01 ms, and the plain step 5.907 ms (both within the
    # KV-read difference of the mean context, 320 against 256 tokens)
    res, _ = _rows(case, "spec")
    k = res.cols["k"].tolist()
    assert res.cols["est_tpot"][k.index(3)] * 1e3 == pytest.approx(7.63 / 2.533, rel=3e-3)
    assert res.cols["est_tpot"][k.index(0)] * 1e3 == pytest.approx(5.907, rel=3e-3)


def test_worked_case_prefix_caching(case):
    res, rows = _rows(case, "cached")
    hits = {r["replicas"]: r["prefix_hit_rate"] for r in rows}
    assert hits[1] == pytest.approx(384 / 1152, abs=1e-12)
    assert hits[2] == pytest.approx(128 / 1152, abs=1e-12)
    assert qval(case, "cached.search_prefix_hit_rate") == pytest.approx(1 / 3, abs=1e-12)


def test_table_shows_k_and_the_hit_rate(case, run_cli):
    rc, out, err = run_cli("eval", str(CASES / "serving-search-speculative.plan"))
    assert rc == 0, err
    assert "spec_tokens" in out and "prefix hit %" in out and "chosen: h100_sxm tp1 ×1, spec_tokens 3" in out


def test_prefix_index_hits_by_hand():
    # blocks of 4; requests in arrival order 0, 1, 2, 3 with chained keys (block_keys):
    #   0: a b c      1: a b d      2: a b c e (prompt 16 + answer keys)      3: x
    # one engine: 1 hits a b (8 tokens), 2 hits a b c (12; at most ⌊(16 − 1)/4⌋ = 3 blocks), 3 none
    # two engines (0, 2 on one; 1, 3 on the other): 1 none, 2 hits a b c, 3 none
    from plugins.serving.serving_prefix_cache import block_keys
    ids = [[1, 2, 3], [1, 2, 4], [1, 2, 3, 5], [9]]
    P = np.array([12, 12, 16, 4])
    keys = block_keys(ids, P, 4, 4)
    idx = PrefixIndex(keys, P, np.array([0.0, 1.0, 2.0, 3.0]), 4)
    assert idx.hits(1, True).tolist() == [0, 8, 12, 0]
    assert idx.hits(2, True).tolist() == [0, 0, 12, 0]
    # arrival order, not input order, decides who was first: 3, 1, 2, 0 — request 2 finds a b
    # (request 1's), request 0 finds a b c (request 2's) but its 12 tokens allow ⌊11/4⌋ = 2 blocks
    idx = PrefixIndex(keys, P, np.array([3.0, 1.0, 2.0, 0.0]), 4)
    assert idx.hits(1, True).tolist() == [8, 0, 8, 0]
    # keys past the prompt (a synthetic answer's blocks): request 0 has an 8-token prompt and a
    # 4-token answer (a b | c), request 1 a 16-token prompt a b c d.  An aggregated engine caches
    # the answer (1 hits a b c, 12 tokens); a prefill pool only the prompt (a b, 8 tokens)
    keys = block_keys([[1, 2, 3], [1, 2, 3, 4]], [12, 16], 4, 4)
    idx = PrefixIndex(keys, np.array([8, 16]), np.array([0.0, 1.0]), 4)
    assert idx.hits(1, True).tolist() == [0, 12] and idx.hits(1, False).tolist() == [0, 8]
    # an answer is cached once it is finished: ready 2 s after its arrival, request 1 (at 1 s)
    # finds request 0's prompt blocks a b only; at 3 s it would find c too
    idx = PrefixIndex(keys, np.array([8, 16]), np.array([0.0, 1.0]), 4, ready=2.0)
    assert idx.hits(1, True).tolist() == [0, 8]
    idx = PrefixIndex(keys, np.array([8, 16]), np.array([0.0, 3.0]), 4, ready=2.0)
    assert idx.hits(1, True).tolist() == [0, 12]


def test_speculation_with_pipeline_parallelism_is_left_out(tmp_path):
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,256,64\n5,256,64\n",
                                    encoding="utf-8")
    (tmp_path / "s.plan").write_text(HEAD + """
plan p {
  model = qwen3_8b
  use serving_search {
    engine = vllm; max_model_len = 4096 token; trace = "t.csv"
    devices = [h100_sxm]; links = [nvlink4]; tp = [1]; pp = [1, 2]; replicas = [1]
    max_num_seqs = [64 seq]; max_num_batched_tokens = [2048 token]
    speculative = "mtp"; draft_model = mtp_head; spec_tokens = [0, 2]
    slo_ttft = 1 s; slo_tpot = 50 ms
  }
}
""", encoding="utf-8")
    res = ss.result_of(dsl.load(tmp_path / "s.plan"), "p")
    assert res.meta["candidates"] == 4 and res.meta["valid"] == 3
    assert res.meta["skipped"] == {"speculation with pp > 1": 1}


def test_draft_that_does_not_split_is_left_out(tmp_path):
    # a draft of 6 query heads cannot run at tp 4 (the target's 32 can): its k > 0 candidates
    # at tp 4 are skipped, k = 0 at tp 4 and every k at tp 1 run
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,256,64\n5,256,64\n",
                                    encoding="utf-8")
    (tmp_path / "s.plan").write_text(HEAD + """
model odd_draft extends qwen3_8b { layers = 2; hidden = 768; heads = 6; kv_heads = 6; head_dim = 128; ffn = 2048 }
plan p {
  model = qwen3_8b
  use serving_search {
    engine = vllm; max_model_len = 4096 token; trace = "t.csv"
    devices = [h100_sxm]; links = [nvlink4]; tp = [1, 4]; replicas = [1]
    max_num_seqs = [64 seq]; max_num_batched_tokens = [2048 token]
    speculative = "draft"; draft_model = odd_draft; spec_tokens = [0, 2]
    slo_ttft = 1 s; slo_tpot = 50 ms
  }
}
""", encoding="utf-8")
    res = ss.result_of(dsl.load(tmp_path / "s.plan"), "p")
    assert res.meta["skipped"] == {"draft does not split at this tp": 1}


def _error(tmp_path, block, trace=True):
    rows = "arrived_at,num_prefill_tokens,num_decode_tokens\n0,256,64\n5,256,64\n"
    (tmp_path / "t.csv").write_text(rows, encoding="utf-8")
    src = HEAD + """plan p {
  model = qwen3_8b
  use serving_search {
    engine = vllm; max_model_len = 4096 token; WORKLOAD
    devices = [h100_sxm]; tp = [1]; replicas = [1]; max_num_seqs = [64 seq]; max_num_batched_tokens = [2048 token]
    slo_ttft = 1 s; slo_tpot = 50 ms
    BLOCK
  }
}
""".replace("WORKLOAD", 'trace = "t.csv"' if trace else
            "rate = 1 request/s; requests = 20; input = 128 token; output = 16 token").replace("BLOCK", block)
    (tmp_path / "e.plan").write_text(src, encoding="utf-8")
    with pytest.raises(PlanError) as e:
        dsl.load(tmp_path / "e.plan")
    return str(e.value)


@pytest.mark.parametrize("block, trace, words", [
    ('speculative = "mtp"; draft_model = mtp_head; spec_tokens = [0, 2.5]', True, "whole number of tokens"),
    ('speculative = "mtp"; draft_model = mtp_head; spec_tokens = [0, 4]; acceptance_profile = [0.8, 0.6]', True,
     "2 acceptance probabilities for the largest spec_tokens = 4"),
    ('speculative = "mtp"; spec_tokens = [0, 2]', True, "needs the model that drafts"),
    ("spec_tokens = [0, 17]", True, "spec_tokens"),
    ("enable_prefix_caching = true", True, "no `hash_ids` column"),
    ("system_prompts = 2; system_prompt_tokens = 64 token", True, "the prompts come from the trace"),
    ("enable_prefix_caching = true; hash_block = 64 token", False, "'hash_block' is the block of a trace"),
    ("system_prompts = 2", False, "go together"),
])
def test_located_errors(tmp_path, block, trace, words):
    msg = _error(tmp_path, block, trace)
    assert words in msg and "e.plan:" in msg and "Traceback" not in msg


def test_spec_tokens_without_speculation_warns(tmp_path):
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,256,64\n5,256,64\n",
                                    encoding="utf-8")
    (tmp_path / "s.plan").write_text(HEAD + """
plan p {
  model = qwen3_8b
  use serving_search {
    engine = vllm; max_model_len = 4096 token; trace = "t.csv"
    devices = [h100_sxm]; tp = [1]; replicas = [1]; max_num_seqs = [64 seq]; max_num_batched_tokens = [2048 token]
    spec_tokens = [0, 2]; slo_ttft = 1 s; slo_tpot = 50 ms
  }
}
""", encoding="utf-8")
    ws = dsl.load(tmp_path / "s.plan")
    assert any(d.code == "unused" and "spec_tokens" in d.summary for d in ws.warnings)
    assert ss.result_of(ws, "p").meta["candidates"] == 1          # k = 0 only

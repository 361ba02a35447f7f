"""The prefix cache against a published trace analysis: Mooncake's FAST'25 traces
(specs/data/serving/mooncake-fast25/, sources and provenance in specs/data/serving/README.md)
and the figures the paper prints about them (specs/data/serving/mooncake-fast25-prefix-cache.csv).

The cache is the engine's block pool (plugins/serving/serving_prefix_cache.py: LRU over the
blocks no request holds, blocks of 512 tokens as the traces' hash ids) fed the requests in
order, one at a time — the paper's Figure 9 "consider[s] only the sequence of requests and
do[es] not account for factors such as prefill computation time"."""
import csv
from functools import lru_cache

import pytest

from plugins.serving.serving_prefix_cache import MOONCAKE_HASH_BLOCK, block_keys, replay, simulate_cached
from plugins.serving.serving_sim_core import Engine, linear_step
from plugins.serving.serving_trace import TraceError, read_mooncake

DATA = "specs/data/serving"
B = MOONCAKE_HASH_BLOCK
BAND = (2_500_000, 3_500_000)      # "about 3 million tokens": one significant figure


def _rows(repo_root):
    with open(repo_root / DATA / "mooncake-fast25-prefix-cache.csv", newline="") as f:
        return list(csv.DictReader(f))


@lru_cache(maxsize=None)
def _trace(root, name):
    t = read_mooncake(root / DATA / "mooncake-fast25" / (name + ".xz"))
    return t, block_keys(t.hashes, t.prefill, B, B)


@lru_cache(maxsize=None)
def _hit_rate(root, name, capacity_tokens):
    """The replayed hit rate at a capacity in tokens (None: every block ever filled fits)."""
    t, keys = _trace(root, name)
    blocks = sum(-(-p // B) for p in t.prefill) if capacity_tokens is None else capacity_tokens // B
    s = replay(keys, t.prefill, blocks, B)
    if capacity_tokens is None:
        assert s.evictions == 0
    return s.hit_rate


def _trace_bound(t) -> float:
    """Independently of the block pool: each request's longest run of leading ids seen in an
    earlier request, in whole blocks, less the last token (the engine computes one token at
    least), over the prompt tokens — an unbounded cache's hit rate."""
    seen, hit = set(), 0
    for ids, p in zip(t.hashes, t.prefill):
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        hit += min(k, (p - 1) // B) * B
        seen.update(ids[:p // B])          # the full blocks are the ones keyed
    return hit / sum(t.prefill)


@pytest.mark.parametrize("check", ["exact", "rounded", "not_reproduced", "capacity_band"])
def test_published_rows(repo_root, check):
    rows = [r for r in _rows(repo_root) if r["check"] == check]
    assert rows
    for row in rows:
        t, _ = _trace(repo_root, row["trace"])
        pub = float(row["published"])
        q = row["quantity"]
        if q == "requests":
            assert len(t) == int(pub), row["id"]
        elif q in ("mean input tokens", "mean output tokens"):
            vals = t.prefill if q == "mean input tokens" else t.decode
            assert abs(sum(vals) / len(vals) - pub) <= 0.5, row["id"]       # printed to the token
        elif check == "not_reproduced":
            # the paper's cache ratio is not what the released trace gives (README: 40 % and
            # 66 % printed; 37.3 % and 65.0 % here).  What is checked: the block pool with room
            # for every block equals the trace's own bound computed without it, so the gap is
            # between the paper and the released trace, not the cache's rule.
            assert _hit_rate(repo_root, row["trace"], None) == pytest.approx(_trace_bound(t), abs=1e-12)
        else:
            # Figure 9: the hit rate at "about 3 million tokens" over the unbounded one, printed to
            # the percent.  The curve is steep there, so the published ratio must fall between
            # ours at the two ends of what "about 3 million" allows.
            assert int(row["capacity_tokens"]) == 3_000_000
            top = _hit_rate(repo_root, row["trace"], None)
            lo, mid, hi = (_hit_rate(repo_root, row["trace"], c) / top for c in (BAND[0], 3_000_000, BAND[1]))
            assert lo <= mid <= hi                  # LRU is a stack algorithm: more room never hurts
            assert lo - 0.005 <= pub <= hi + 0.005, (row["id"], lo, mid, hi)


def test_three_million_tokens_is_under_half_the_bound(repo_root):
    # §5.3.1: "a local cache with a 3M token capacity does not achieve 50% of the theoretical
    # maximum hit rate in most scenarios" — both traces here, at 3M tokens exactly
    for name in ("conversation_trace.jsonl", "synthetic_trace.jsonl"):
        assert _hit_rate(repo_root, name, 3_000_000) < 0.5 * _hit_rate(repo_root, name, None)


def test_replay_is_the_simulation_without_overlap(repo_root):
    # the conversation trace's first 150 requests, far apart (one at a time), on a pool of 300
    # blocks of 512 tokens (evictions happen): the batching simulation and the replay agree
    # request by request, output tokens included
    t, keys = _trace(repo_root, "conversation_trace.jsonl")
    n = 150
    P, G = t.prefill[:n], [min(g, 3) for g in t.decode[:n]]
    eng = Engine(kv_tokens=300 * B, block_size=B, max_num_batched_tokens=200_000, max_num_seqs=4)
    _, sim = simulate_cached([1000.0 * i for i in range(n)], P, G, keys[:n], eng, linear_step,
                             {"overhead": 0.01, "token": 1e-6, "context": 0.0})
    rep = replay(keys[:n], P, 300, B, output=G)
    assert rep.hit == sim.hit and rep.evictions == sim.evictions
    assert sum(rep.hit) > 0 and rep.evictions > 0


def test_mooncake_lines_are_checked(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n'
                 '{"timestamp": 5, "input_length": 10, "hash_ids": [0]}\n')
    with pytest.raises(TraceError) as e:
        read_mooncake(p)
    assert e.value.row == 2 and e.value.column == "output_length"
    p.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0, -1]}\n')
    with pytest.raises(TraceError) as e:
        read_mooncake(p)
    assert e.value.row == 1 and e.value.column == "hash_ids"
    p.write_text('{"timestamp": 1500, "input_length": 10, "output_length": 2, "hash_ids": [3]}\n')
    t = read_mooncake(p)
    assert t.arrived == [1.5] and t.prefill == [10] and t.decode == [2] and t.hashes == [[3]]

"""Routing-replay records and expert weight distribution (book ch. 10 §10.5.4, exercise 10-8,
footnote 25; §10.5.2).

Book: 8,192 × 48 × 8 × 2 B = 6 MiB (uint16), 12 MiB (int32); Qwen3-235B-A22B expert weights
in BF16 423 GiB, EP16 ≈26.4 GiB per receiver, all-to-all-16 6,768 GiB vs shards 423 GiB.
"""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval
from dsl.syntax.diagnostics import PlanError

CASE = CASES / "moe-routing-metadata.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_routing_record(ws):
    assert qval(ws, "replay_uint16.routing_record", "B") == 8192 * 48 * 8 * 2
    assert qval(ws, "replay_uint16.routing_record", "MiB") == 6
    assert qval(ws, "replay_int32.routing_record", "MiB") == 12
    assert qval(ws, "replay_cp4.routing_record_per_device", "MiB") == 1.5


def test_expert_weights(ws):
    assert qval(ws, "expert_weights_ep16.expert_weight_bytes", "GiB") == pytest.approx(423, abs=0.5)
    assert qval(ws, "expert_weights_ep16.expert_shard_bytes", "GiB") == pytest.approx(26.4, abs=0.05)
    assert qval(ws, "expert_weights_ep16.broadcast_volume", "GiB") == pytest.approx(6768, abs=8)
    assert qval(ws, "expert_weights_ep16.sharded_volume", "GiB") == pytest.approx(423, abs=0.5)
    # 16 × the sharded volume exactly
    assert qval(ws, "expert_weights_ep16.broadcast_volume") == 16 * qval(ws, "expert_weights_ep16.sharded_volume")


def test_replay_needs_an_moe_model(tmp_path):
    (tmp_path / "t.plan").write_text('import "@catalog/models.plan"\nplan p { model = qwen3_8b\n'
                                     '  use routing_replay { tokens = 8 token } }\n')
    with pytest.raises(PlanError) as ei:
        dsl.load(tmp_path / "t.plan")
    assert "no routed experts" in ei.value.diagnostics[0].summary

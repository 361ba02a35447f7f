"""Weight synchronisation to the generation side (book ch. 3 §3.5.3, ch. 10 §10.5.2):
``specs/cases/rl-weight-sync.plan``.  Book: 4 × 16.381 GB ≈ 65.526 GB; EP16 of 423 GiB:
16 × 423 = 6,768 GiB as full copies, 423 GiB as shards, ≈26.4 GiB per rank.  Broadcast and
hierarchical sent bytes and the link time are worked by hand."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval

CASE = CASES / "rl-weight-sync.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_unicast_full_copies(ws):
    assert qval(ws, "unicast.weight_bytes", "GB") == pytest.approx(16.381, abs=0.0005)
    assert qval(ws, "unicast.delivered_bytes", "GB") == pytest.approx(65.526, abs=0.0005)
    assert qval(ws, "unicast.source_bytes", "GB") == pytest.approx(65.526, abs=0.0005)
    # NDR 400 Gbit/s = 50 GB/s
    assert qval(ws, "unicast.weight_sync_time", "s") == pytest.approx(65.526 / 50, abs=0.0005 / 50)


def test_broadcast_and_hierarchical(ws):
    assert qval(ws, "broadcast.delivered_bytes", "GB") == pytest.approx(65.526, abs=0.0005)
    assert qval(ws, "broadcast.source_bytes", "GB") == pytest.approx(16.381, abs=0.0005)
    assert qval(ws, "hierarchical.source_bytes", "GB") == pytest.approx(2 * 16.381, abs=0.001)


def test_sharded_targets(ws):
    assert qval(ws, "ep16_full_copies.delivered_bytes", "GiB") == pytest.approx(6768, abs=0.5)
    assert qval(ws, "ep16_shards.delivered_bytes", "GiB") == pytest.approx(423, abs=0.5)
    assert qval(ws, "ep16_shards.receiver_bytes", "GiB") == pytest.approx(26.4, abs=0.05)
    assert qval(ws, "ep16_full_copies.weight_receivers") == 16

"""Group placement (innermost first: TP, CP, DP, PP) and the link each group crosses,
on DGX A100 hosts (8 GPUs, NVLink 3 at 300 GB/s per direction, 8 × 200 Gbit/s NICs)."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval

NVLINK, NIC = 300e9, 200e9 / 8


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASES / "layout-activations-gpt3.plan")


def test_tp_inside_a_host_uses_nvlink(ws):
    assert qval(ws, "tp8.tp_bandwidth", "B/s") == NVLINK


def test_dp_across_hosts_shares_the_nics(ws):
    # TP = 1: one DP ring per host crosses the cut: min(NVLink, 8 NICs) = 200 GB/s
    assert qval(ws, "none.link_bandwidth", "B/s") == min(NVLINK, 8 * NIC)
    # TP = 8: each of the 8 GPUs of a host is in a different DP ring; the 8 rings share 8 NICs
    assert qval(ws, "tp8.link_bandwidth", "B/s") == min(NVLINK, 8 * NIC / 8)


def test_cp_exchange_hand_computed(ws):
    # cp = 2 with stride 8: the pair spans two hosts, 8 pairs share the host's 8 NICs → 25 GB/s.
    # Per layer and micro-batch: K and V of the local 1,024 tokens, 2·b·(s/2)·kv·d_h·2 B, pass
    # once forward and twice backward; m = 1536 / 96 = 16 micro-batches, 96 layers, no latency.
    kv_bytes = 2 * 1 * 1024 * 96 * 128 * 2
    assert qval(ws, "tp8_cp2.cp_comm", "s") == pytest.approx(3 * 96 * 16 * kv_bytes / NIC, rel=1e-12)
    # CP halves the tokens in each layer's activations (TP + SP, s = 1024 per rank); the local
    # queries' scores still span all 2,048 keys: 5·a·s·(s/2)·b / t
    sbh = 1024 * 12288
    assert qval(ws, "tp8_cp2.activation_per_layer", "B") == pytest.approx(
        sbh * 34 / 8 + 5 * 96 * 2048 * 1024 / 8, abs=0.5)

"""The MoE dispatch all-to-all with node-limited routing (``use layout { ep_nodes_per_token = M }``,
plugins/training/layout_model.py ``dispatch_time``).

DeepSeek-V3 (Technical Report §2.1.2 and §3.2.2; its config's topk_group = 4 of n_group = 8)
sends each token to at most M = 4 nodes: one copy per destination node over InfiniBand,
forwarded to the token's experts inside the node over NVLink (DeepEP).  Hand computations
below: a rank's dispatch of S bytes (top-k copies of its tokens) over e GPUs on 8-GPU hosts, the
NIC share 8 × 50 GB/s / 8 = 50 GB/s per GPU, NVLink 400 GB/s, no latency.
"""
from __future__ import annotations

import pytest

from plugins.hardware.ops import ops
from plugins.training import layout_model as lm

K = {"gph": 8, "topk": 8, "link": 400e9, "nic": 50e9, "nics": 8}
S = 1e9
O = ops("python")


def test_pairwise_dispatch_across_hosts():
    # 64 ranks on 8 hosts: (64 − 8)/64 of S crosses the NICs, 7/64 stays on NVLink:
    # max(7/64 · 1e9 / 400e9, 56/64 · 1e9 / 50e9) = 0.0175 s
    assert lm.dispatch_time(64, 1, S, K, O) == pytest.approx(0.0175, rel=1e-12)


def test_node_limited_dispatch_halves_the_nic_bytes():
    # M = 4 of 8 hosts: S/8 per token copy × 4 copies × 7/8 remote = 0.4375 · S over the NIC
    # share: 0.4375e9 / 50e9 = 0.00875 s (NVLink: 7/64 · 1e9 / 400e9 = 0.27 ms, not binding)
    assert lm.dispatch_time(64, 1, S, dict(K, ep_nodes=4), O) == pytest.approx(0.00875, rel=1e-12)


def test_node_limit_at_the_host_count_and_inside_one_host():
    # M = 8 = top-k on 8 hosts: 8/8 · 7/8 · S, the pairwise volume again
    assert lm.dispatch_time(64, 1, S, dict(K, ep_nodes=8), O) == pytest.approx(0.0175, rel=1e-12)
    # one host (e = 8): no NIC, the limit changes nothing: 7/8 · 1e9 / 400e9
    assert lm.dispatch_time(8, 1, S, dict(K, ep_nodes=4), O) == pytest.approx(7 / 8 * 1e9 / 400e9, rel=1e-12)

"""The comparison table of book §10.2.4 filled from a plan (sharding, recomputation, offload).

Spec: ``specs/cases/memory-methods.plan``.  Expected values are hand computations from the
book's formulas (§10.2.1-10.2.3), not the tool's output.
"""
from __future__ import annotations

import json

import pytest

from conftest import CASES, run_cli

METHODS = CASES / "memory-methods.plan"
N = 8_190_735_360
GiB, MiB = 2 ** 30, 2 ** 20


@pytest.fixture(scope="module")
def table():
    code, out, err = run_cli("eval", METHODS, "--format", "json")
    assert code == 0, err
    return json.loads(out)["plans"]["combined"]["tables"]["memory-methods"]


def test_rows(table):
    assert [r[0] for r in table["rows"]] == ["sharding (ZeRO/FSDP)", "recomputation", "offload"]
    assert table["columns"][1:] == ["memory it removes", "removed", "unit", "extra work",
                                    "timing condition that decides"]


def test_sharding_row(table):
    r = table["rows"][0]
    # ZeRO-3 over 8: 16N − 16N/8 removed per GPU
    assert r[2] == pytest.approx((16 * N - 16 * N / 8) / GiB, abs=0.005) and r[3] == "GiB"
    # 48 micro-batches per GPU: V = 3m(d−1)/d · 2N (§10.3.3)
    assert f"{3 * 48 * 7 / 8 * 2 * N / 1e9:.1f} GB" in r[4]
    assert "gather finishes before its module runs" in r[5]


def test_recompute_row(table):
    r = table["rows"][1]
    # 1 micro-batch in flight, 36 layers, 8192 tokens, BF16: 36 · 8192 · 2 · (2·4096 + 12288) bytes
    assert r[2] == pytest.approx(36 * 8192 * 2 * (2 * 4096 + 12288) / MiB, abs=0.005) and r[3] == "MiB"
    assert "critical path" in r[5] and "s of GPU work per step" in r[5]


def test_offload_row(table):
    r = table["rows"][2]
    assert r[2] == 192 and r[3] == "MiB"                     # the FP32 copy kept on the host
    assert "96 MiB" in r[4]
    assert "T_wait = max(0, V/B − W) = 3.15 ms" in r[5]      # 96 MiB / 32 GB/s, no window


def test_provides_lists_what_each_memory_block_defines():
    """UseSpec.provides (hints, docs) matches what buffers, recompute and offload define."""
    import dsl
    from dsl.plugin.manager import get_plugins

    ws_methods = dsl.load(METHODS)
    ws_life = dsl.load(CASES / "memory-lifetimes.plan")
    blocks = get_plugins().blocks
    for ws, plan, block in ((ws_methods, "combined", "recompute"), (ws_methods, "combined", "offload"),
                            (ws_life, "act_and_gather", "buffers")):
        spec = blocks[block]
        defined = {n.name for n in ws.nodes.values()
                   if n.owner == plan and n.kind == "quantity" and n.plugin == spec.plugin}
        assert defined == set(spec.provides), block

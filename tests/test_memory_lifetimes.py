"""Peak memory from tensor lifetimes (book ch. 10 §10.1.2, §10.2.1, exercise 10-1).

Spec: ``specs/cases/memory-lifetimes.plan``.  Each peak is computed by the shared timeline
engine from holds; the tests also check which holds are live at it.
"""
from __future__ import annotations

import json

import pytest

import dsl
from conftest import CASES, qval, run_cli

LIFE = CASES / "memory-lifetimes.plan"
N = 8_190_735_360
GiB, MiB = 2 ** 30, 2 ** 20


@pytest.fixture(scope="module")
def ws():
    return dsl.load(LIFE)


def _live(ws, plan, timeline="memory", pool="gpu"):
    return set(ws.timelines[(plan, timeline)].profiles[pool].live)


def test_live_together_12_gib(ws):
    # 8 GiB of activations and a 4 GiB gather buffer live together: 12 GiB
    assert qval(ws, "act_and_gather.peak_memory", "GiB") == 12
    assert _live(ws, "act_and_gather") == {"activations", "gather_buffer"}


def test_freed_first_reuses_region(ws):
    # activations freed before the gather: the buffer reuses their region, peak = max(8, 4)
    assert qval(ws, "act_freed_first.peak_memory", "GiB") == 8
    assert _live(ws, "act_freed_first") == {"activations"}


@pytest.mark.parametrize("plan,persistent,peak", [("fsdp2_2ranks", 18, 39), ("fsdp2_4ranks", 9, 30)])
def test_fsdp2_cpu_experiment(ws, plan, persistent, peak):
    # book: persistent ≈18 -> 9 MiB, peak ≈39 -> 30 MiB (≈21 MiB of other tensors stay)
    assert qval(ws, f"{plan}.peak_memory", "MiB") == pytest.approx(peak, abs=0.5)
    assert qval(ws, f"{plan}.peak_memory", "MiB") - qval(ws, f"{plan}.transient_peak", "MiB") == \
        pytest.approx(persistent, abs=0.5)
    assert _live(ws, plan) == {"persistent", "other_tensors_and_buffers"}


def test_fsdp2_peak_drops_23_percent(ws):
    a, b = qval(ws, "fsdp2_2ranks.peak_memory"), qval(ws, "fsdp2_4ranks.peak_memory")
    assert 1 - b / a == pytest.approx(0.23, abs=0.005)     # book: "only about 23 %"


def test_gathered_buffer_does_not_shrink_with_d(ws):
    # the full weights of one layer in BF16: 2 B x layer_params, whatever d
    layer = qval(ws, "qwen3_8b.layer_params")
    for plan, d in (("gather_d8", 8), ("gather_d16", 16)):
        tl = ws.timelines[(plan, "memory")]
        prof = tl.profiles["gpu"]
        assert "full_layer_weights" in prof.live
        assert qval(ws, f"{plan}.persistent_memory") == pytest.approx(16 * N / d, rel=1e-12)
        assert qval(ws, f"{plan}.peak_memory") == pytest.approx(16 * N / d + 8 * GiB + 2 * layer, rel=1e-12)
    # halving the shards halves the persistent part only
    drop = qval(ws, "gather_d8.peak_memory") - qval(ws, "gather_d16.peak_memory")
    assert drop == pytest.approx(16 * N / 8 - 16 * N / 16, rel=1e-12)
    assert qval(ws, "gather_d8.transient_peak") == qval(ws, "gather_d16.transient_peak")


@pytest.mark.parametrize("stage,bpp", [(1, 6 + 12 / 8), (2, 2 + 16 / 8), (3, 18 / 8)])
def test_exercise_10_1(ws, stage, bpp):
    # FP32 grads over 8 GPUs; 6 GiB activations + two 3 GiB buffers: together +12 GiB, reused +9 GiB
    together = qval(ws, f"zero{stage}_together.peak_memory")
    reused = qval(ws, f"zero{stage}_reused.peak_memory")
    assert together == pytest.approx(bpp * N + 12 * GiB, rel=1e-12)
    assert reused == pytest.approx(bpp * N + 9 * GiB, rel=1e-12)
    # memory_per_gpu of `use memory` takes the lifetime peak when `transient` is not written
    assert qval(ws, f"zero{stage}_together.memory_per_gpu") == together


def test_peak_table_lists_live_holds():
    code, out, err = run_cli("eval", LIFE, "--plan", "act_and_gather", "--format", "json")
    assert code == 0, err
    t = json.loads(out)["plans"]["act_and_gather"]["tables"]["memory-peaks"]
    rows = [r for r in t["rows"]]
    assert rows[0][2] == "PEAK" and rows[0][3] == 12 and rows[0][4] == "GiB"
    assert {r[2] for r in rows[1:]} == {"activations", "gather_buffer"}


def test_eval_text_and_timeline_show_the_peak():
    code, out, _ = run_cli("eval", LIFE, "--plan", "fsdp2_2ranks")
    assert code == 0 and "other_tensors_and_buffers" in out and "PEAK" in out
    code, out, _ = run_cli("timeline", LIFE, "--plan", "act_and_gather")
    assert code == 0
    assert "peak of gpu: 12,288 MiB" in out and "activations" in out and "gather_buffer" in out

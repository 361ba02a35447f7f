"""Selective recomputation (book ch. 10 §10.2.2, exercise 10-4).

Spec: ``specs/cases/memory-recompute.plan`` — Qwen3-8B, 128 tokens per micro-batch in FP32,
a 9-layer stage, 4 micro-batches waiting for backward.
"""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, REPO_ROOT, qval, run_cli

REC = CASES / "memory-recompute.plan"
MiB = 2 ** 20


@pytest.fixture(scope="module")
def ws():
    return dsl.load(REC)


@pytest.mark.parametrize("name,unit,book,tol", [
    ("selective.recomputable_per_layer", "MiB", 10, 0),     # 6 + 2 + 2 MiB
    ("selective.gemm_inputs_per_layer", "MiB", 15, 0),      # 10 + 5 (Q, K, V, attention output)
    ("save_all.saved_per_microbatch", "MiB", 135, 0),       # 9 layers x 15 MiB
    ("selective.saved_per_microbatch", "MiB", 45, 0),       # 9 layers x 5 MiB
    ("selective.recompute_saving", "MiB", 360, 0),          # 4 x 90 MiB
    ("selective.recompute_saving", "MB", 377, 0.5),         # "about 377 MB"
    ("selective.recompute_workspace", "MiB", 6, 0),         # h = a⊙u [128, 12288] FP32
])
def test_book_values(ws, name, unit, book, tol):
    assert qval(ws, name, unit) == pytest.approx(book, abs=tol)


def test_saving_per_stage_90_mib(ws):
    # 90 MiB (≈94 MB) per micro-batch on a 9-layer stage
    per_mb = qval(ws, "save_all.saved_per_microbatch", "MiB") - qval(ws, "selective.saved_per_microbatch", "MiB")
    assert per_mb == 90
    assert per_mb * MiB / 1e6 == pytest.approx(94, abs=0.5)


def test_rebuild_multiplies(ws):
    # the product h alone: 128 x 12288 ≈ 1.57 M multiplies; plus two norm outputs 128 x 4096 each
    assert 128 * 12288 / 1e6 == pytest.approx(1.57, abs=0.005)
    assert qval(ws, "selective.recompute_multiplies") == 128 * 12288 + 2 * 128 * 4096
    assert qval(ws, "selective.recompute_flops") == 9 * (128 * 12288 + 2 * 128 * 4096)


def test_peaks_from_lifetimes(ws):
    # all 4 micro-batches' saved inputs live at the first backward; selective adds one 6 MiB workspace
    assert qval(ws, "save_all.activation_peak", "MiB") == 4 * 135
    assert qval(ws, "selective.activation_peak", "MiB") == 4 * 45 + 6
    prof = ws.timelines[("selective", "recompute")].profiles["gpu"]
    workspaces = [h for h in prof.live if h.startswith("workspace")]
    assert len(workspaces) == 1           # the workspace is reused layer after layer


def test_workspace_reused_layer_by_layer(ws):
    tl = ws.timelines[("selective", "recompute")]
    sc = tl.schedule
    idx = sc.index()
    spans = sorted((sc.start[idx[h.start[0]]], sc.finish[idx[h.end[0]]])
                   for h in tl.holds.values() if h.id.startswith("workspace"))
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))   # never two at once


def test_extra_flops_go_into_the_step(write_plan):
    p = write_plan(f'''
import "{REPO_ROOT}/specs/catalog/hardware.plan"
import "{REPO_ROOT}/specs/catalog/models.plan"
workload w {{ tokens = 1e9 token; seq_len = 8192 token; global_batch = 8 seq }}
plan base {{
  model = qwen3_8b; workload = w; device = rtx4090; gpus = 1; mfu = 40 %
  use compute {{}}
}}
plan rec extends base {{
  use recompute {{ tokens = 8192 token; activations = "bf16"; policy = "selective" }}
}}
''')
    ws = dsl.load(p)
    extra = 8 * 36 * 8192 * (12288 + 2 * 4096) / (165.2e12 * 0.4)     # m · L · T(f + 2h) / (P · η)
    assert qval(ws, "rec.recompute_time", "s") == pytest.approx(extra, rel=1e-9)
    assert qval(ws, "rec.step_time", "s") - qval(ws, "base.step_time", "s") == pytest.approx(extra, rel=1e-9)


def test_cli_timeline_shows_peak():
    code, out, err = run_cli("timeline", REC, "--plan", "selective")
    assert code == 0, err
    assert "peak of gpu: 186 MiB" in out

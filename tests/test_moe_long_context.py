"""Causal attention work of a packed batch (book ch. 10 §10.3.4 figs. 10-28/10-29; ch. 3 §3.4.2).

Book: 4,096 + 4,096 -> 16,781,312 pairs; 7,168 + 1,024 -> 26,218,496 (+56 %); one Qwen3-8B
layer, forward QKᵀ and AV: 0.275 -> 0.430 TFLOPs.
"""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval, run_cli
from dsl.syntax.diagnostics import PlanError

CASE = CASES / "moe-long-context.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_pairs(ws):
    assert qval(ws, "equal_halves.attention_pairs") == 16_781_312
    assert qval(ws, "long_short.attention_pairs") == 26_218_496
    assert qval(ws, "long_short.attention_increase", "%") == pytest.approx(56, abs=0.5)


def test_qwen3_8b_layer_flops(ws):
    assert qval(ws, "equal_halves.attention_flops_layer", "TFLOP") == pytest.approx(0.275, abs=0.0005)
    assert qval(ws, "long_short.attention_flops_layer", "TFLOP") == pytest.approx(0.430, abs=0.0005)


def test_histogram_and_devices(ws):
    # hand computation: 2·(7168·7169/2) + 2·(1024·1025/2) + 4·(4096·4097/2)
    pairs = 2 * 7168 * 7169 // 2 + 2 * 1024 * 1025 // 2 + 4 * 4096 * 4097 // 2
    assert qval(ws, "from_histogram.attention_pairs") == pairs
    assert qval(ws, "from_histogram.packed_tokens", "token") == 2 * 7168 + 2 * 1024 + 4 * 4096
    per_pair = 2 * 32 * (128 + 128)                   # QKᵀ and AV, 32 heads of 128
    step = 3 * 36 * per_pair * pairs                  # forward + backward, 36 layers
    assert qval(ws, "from_histogram.attention_flops_per_device", "FLOP") == pytest.approx(step / 4, rel=1e-12)
    # longest first on 4 devices: the two 7,168-token sequences alone on two devices, the
    # 4,096s and 1,024s shared by the other two (2·8,390,656 + 524,800 = 17,306,112 < 25,693,696)
    worst = 7168 * 7169 // 2
    assert 2 * (4096 * 4097 // 2) + 1024 * 1025 // 2 < worst
    assert qval(ws, "from_histogram.attention_pairs_max_device") == worst
    assert qval(ws, "from_histogram.attention_imbalance") == pytest.approx(4 * worst / pairs - 1, rel=1e-12)
    assert qval(ws, "from_histogram.attention_flops_max_device", "FLOP") == pytest.approx(
        3 * 36 * per_pair * worst, rel=1e-12)


def test_both_list_and_histogram_is_an_error(tmp_path):
    (tmp_path / "l.csv").write_text("length,count\n10,1\n")
    (tmp_path / "t.plan").write_text('import "@catalog/models.plan"\nplan p { model = qwen3_8b\n'
                                     '  use long_context { seq_lens = [10 token]; lengths = "l.csv" } }\n')
    code, _, err = run_cli("eval", tmp_path / "t.plan")
    assert code != 0 and "exactly one of" in err and "t.plan:3" in err


def test_bad_histogram_header(tmp_path):
    (tmp_path / "l.csv").write_text("len,n\n10,1\n")
    (tmp_path / "t.plan").write_text('import "@catalog/models.plan"\nplan p { model = qwen3_8b\n'
                                     '  use long_context { lengths = "l.csv" } }\n')
    with pytest.raises(PlanError) as ei:
        dsl.load(tmp_path / "t.plan")
    d = ei.value.diagnostics[0]
    assert d.code == "bad-file" and "length,count" in d.summary


def test_missing_histogram_file(tmp_path):
    (tmp_path / "t.plan").write_text('import "@catalog/models.plan"\nplan p { model = qwen3_8b\n'
                                     '  use long_context { lengths = "nope.csv" } }\n')
    with pytest.raises(PlanError) as ei:
        dsl.load(tmp_path / "t.plan")
    assert ei.value.diagnostics[0].code == "missing-file"

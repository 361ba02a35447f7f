"""ZeRO / FSDP stages: replicated vs sharded state per GPU (book ch. 10 §10.2.1, figs. 10-6..10-9).

Spec: ``specs/cases/memory-zero.plan`` (memory only: `use zero` without a link).
"""
from __future__ import annotations

import json

import pytest

import dsl
from conftest import CASES, qval, run_cli

ZERO = CASES / "memory-zero.plan"
N = 8_190_735_360
GiB = 2 ** 30


@pytest.fixture(scope="module")
def ws():
    return dsl.load(ZERO)


@pytest.mark.parametrize("stage,book", [(0, 122.1), (1, 42.0), (2, 28.6), (3, 15.3)])
def test_book_table_d8(ws, stage, book):
    assert qval(ws, f"d8_stage{stage}.persistent_memory", "GiB") == pytest.approx(book, abs=0.05)


@pytest.mark.parametrize("stage,bytes_per_param", [
    # M0 = 16N, M1 = 4N + 12N/d, M2 = 2N + 14N/d, M3 = 16N/d at d = 4 (the book's illustration)
    (0, 16), (1, 4 + 12 / 4), (2, 2 + 14 / 4), (3, 16 / 4)])
def test_four_gpu_illustration(ws, stage, bytes_per_param):
    assert qval(ws, f"d4_stage{stage}.persistent_memory") == pytest.approx(bytes_per_param * N, rel=1e-12)


def test_fp32_grads(ws):
    # 18 B/param = 147.43 GB; over 8 GPUs: ZeRO-1 6N + 12N/8, ZeRO-2 2N + 16N/8, ZeRO-3 18N/8
    assert qval(ws, "d8_fp32_stage0.state_memory", "GB") == pytest.approx(147.43, abs=0.005)
    for stage, bpp in ((1, 6 + 12 / 8), (2, 2 + 16 / 8), (3, 18 / 8)):
        assert qval(ws, f"d8_fp32_stage{stage}.persistent_memory") == pytest.approx(bpp * N, rel=1e-12)


@pytest.mark.parametrize("stage,sharded", [
    (0, set()), (1, {"master", "optimizer"}), (2, {"grads", "master", "optimizer"}),
    (3, {"weights", "grads", "master", "optimizer"})])
def test_split_per_state(ws, stage, sharded):
    whole = {"weights": 2, "grads": 2, "master": 4, "optimizer": 8}
    for k, bpp in whole.items():
        per_gpu = qval(ws, f"d4_stage{stage}.{k}_per_gpu")
        assert per_gpu == pytest.approx(bpp * N / (4 if k in sharded else 1), rel=1e-12), k


def test_states_table():
    code, out, err = run_cli("eval", ZERO, "--plan", "d8_stage1", "--format", "json")
    assert code == 0, err
    t = json.loads(out)["plans"]["d8_stage1"]["tables"]["memory-states"]
    rows = {r[0]: r for r in t["rows"]}
    assert rows["weights"][3] == "replicated" and rows["grads"][3] == "replicated"
    assert rows["master"][3] == "sharded over 8" and rows["optimizer"][3] == "sharded over 8"
    assert rows["total"][4] == pytest.approx(42.0, abs=0.05)


def test_zero_without_link_needs_no_compute(ws):
    # a memory-only ZeRO plan prices no collective
    assert "d8_stage3.transfer_volume" not in ws.nodes
    assert not ws.errors


def test_states_table_note_under_model_parallelism(tmp_path):
    """With tp = 2 every state is first split over the tensor-parallel ranks: the replicated
    16-bit weights are 2N/2 bytes per GPU, not the whole 2N the plain note would imply."""
    src = ('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'
           "workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq }\n"
           "plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 16; mfu = 40 %\n"
           '  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }\n'
           "  use layout { tp = 2; zero = 1; link = nvlink4; nic = nic_400g } }\n")
    (tmp_path / "p.plan").write_text(src)
    code, out, err = run_cli("eval", tmp_path / "p.plan", "--format", "json")
    assert code == 0, err
    t = json.loads(out)["plans"]["p"]["tables"]["memory-states"]
    rows = {r[0]: r for r in t["rows"]}
    assert rows["weights"][3] == "replicated"
    assert rows["weights"][4] == pytest.approx(2 * N / 2 / GiB, abs=0.005)   # 7.63 GiB
    assert t["notes"] == ["per GPU = the model-parallel shard (whole ÷ tp·pp) / d for sharded states, "
                          "the shard for replicated ones"]

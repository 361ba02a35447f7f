"""The training step on H100 against NVIDIA's Megatron-Bridge performance summary
(specs/data/calibration/megatron-bridge-h100.csv; its README cites the page, the commit and
each column; benchmarks/h100_megatron_bridge.py builds the plans and states every assumption).

Sources of the numbers asserted here:

* the published rows (tokens/s/GPU, model TFLOP/s/GPU, layouts) — the CSV, copied from
  Megatron-Bridge docs/performance-summary-archive.md at commit 067f987d;
* Megatron's FLOP count per token, typed below from its published form
  12·L·h²·(1 + n_kv/n_q + s/(2h) + 1.5·f/h) + 6·V·h, and the three models' shapes from their
  Hugging Face configs (specs/catalog/hf/Llama-3.1-{8B,70B,405B}.json), written out by hand;
* NVIDIA's statement of the FP8 speedup over BF16, "typically … 1.2–1.5X" (Megatron-Bridge
  docs/performance-guide.md, same commit): every published H100 Llama row is FP8 and the
  training step prices BF16 matrix products, so a right BF16 prediction is 1/1.5 … 1/1.2 of
  the published FP8 throughput.

The model's stated error on this comparison is 10 %: the published throughput of one layout
moved by up to 12 % between container releases (405B: 292 → 328 tokens/s/GPU, 25.11 →
26.04.01), so a tighter claim could not be told apart from software drift; the 70B and 405B
rows fall within 5 % of the band.
"""
from __future__ import annotations

import csv
import importlib.util
import sys

import pytest

from conftest import REPO_ROOT

CSV = REPO_ROOT / "specs" / "data" / "calibration" / "megatron-bridge-h100.csv"
ERROR = 0.10                      # the model's stated error on this comparison (see the docstring)
SPEEDUP = (1.2, 1.5)              # FP8 over BF16, Megatron-Bridge docs/performance-guide.md


def _bench():
    spec = importlib.util.spec_from_file_location("h100_megatron_bridge",
                                                  REPO_ROOT / "benchmarks" / "h100_megatron_bridge.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)      # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return sys.modules[spec.name]


def _published():
    with open(CSV, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _key(row) -> str:
    return f"{row['model']}@{row['release']}"


PUBLISHED = _published()
KEYS = [_key(r) for r in PUBLISHED]


# ---------------------------------------------------------------- the data set
def test_rows_are_the_pages_h100_llama_pretraining_rows():
    """13 rows: 70B in six releases, 405B in five, 8B in two; all DGX-H100, FP8 where the
    release prints a precision, sequence length 8,192."""
    assert len(PUBLISHED) == 13
    by_model = {}
    for r in PUBLISHED:
        by_model.setdefault(r["model"], []).append(r["release"])
        assert r["system"] == "DGX-H100" and r["seq_length"] == "8192"
        assert r["precision"] in ("FP8", "FP8-CS", "")
        assert (r["precision"] == "") == (r["release"] == "25.09")
    assert by_model == {"LLAMA3.1_405B": ["26.06", "26.04.01", "26.02", "25.11", "25.09"],
                        "LLAMA3_70B": ["26.04.01", "26.04", "26.02.01", "26.02", "25.11", "25.09"],
                        "LLAMA3_8B": ["25.11", "25.09"]}


def test_gradient_accumulation_is_the_batch_over_dp_and_micro_batch():
    """GA = GBS / (dp · MBS), dp = GPUs / (TP · PP · CP), on every row that prints GA
    (70B 25.11: 128 / (64/32 · 1) = 64)."""
    printed = 0
    for r in PUBLISHED:
        gpus, tp, pp, cp = (int(r[k]) for k in ("gpus", "tp", "pp", "cp"))
        assert gpus % (tp * pp * cp) == 0, _key(r)
        dp = gpus // (tp * pp * cp)
        assert int(r["gbs"]) % (dp * int(r["mbs"])) == 0, _key(r)
        if r["ga"]:
            printed += 1
            assert int(r["ga"]) == int(r["gbs"]) // (dp * int(r["mbs"])), _key(r)
    assert printed == 6


def _megatron_flops_per_token(L, h, nq, nkv, f, V, s):
    """12·L·h²·(1 + n_kv/n_q + s/(2h) + 1.5·f/h) + 6·V·h (SwiGLU, causal attention)."""
    return 12 * L * h * h * (1 + nkv / nq + s / (2 * h) + 1.5 * f / h) + 6 * V * h


# L, h, n_q, n_kv, f from the Hugging Face configs; V = 128,256; s = 8,192
SHAPES = {"LLAMA3_8B": (32, 4096, 32, 8, 14336), "LLAMA3_70B": (80, 8192, 64, 8, 28672),
          "LLAMA3.1_405B": (126, 16384, 128, 8, 53248)}
# by hand: 8B 48,318,382,080 + 3,152,019,456; 70B 442,918,502,400 + 6,304,038,912;
# 405B 2,511,347,908,608 + 12,608,077,824 FLOP per token
BY_HAND = {"LLAMA3_8B": 51_470_401_536, "LLAMA3_70B": 449_222_541_312, "LLAMA3.1_405B": 2_523_955_986_432}


def test_the_hand_counts_are_the_formula():
    for model, (L, h, nq, nkv, f) in SHAPES.items():
        assert _megatron_flops_per_token(L, h, nq, nkv, f, 128256, 8192) == BY_HAND[model]


@pytest.mark.parametrize("key", [
    pytest.param(k, marks=pytest.mark.xfail(strict=True, reason="the page's 26.04.01 70B row prints 731 TFLOP/s "
                                            "at 1,664 tokens/s: 0.4393 TFLOP per token, 2.2 % below the 0.449 of "
                                            "every other 70B row — one of its two numbers is not the same run's"))
    if k == "LLAMA3_70B@26.04.01" else k for k in KEYS])
def test_published_tflops_are_megatrons_count_times_tokens(key):
    """Model TFLOP/s / tokens/s = Megatron's FLOPs per token, within the rounding of the two
    printed integers (each ±0.5)."""
    r = next(r for r in PUBLISHED if _key(r) == key)
    tflops, tokens = float(r["model_tflops_per_gpu"]), float(r["tokens_per_sec_per_gpu"])
    tol = 0.5 / tflops + 0.5 / tokens
    assert tflops * 1e12 / tokens == pytest.approx(BY_HAND[r["model"]], rel=tol)


# ---------------------------------------------------------------- the predictions
@pytest.fixture(scope="module")
def predicted():
    bench = _bench()
    rows = bench.read_rows()
    pred = bench.predict(rows)
    return {f"{r.model}@{r.release}": (r, pred[r.name]) for r in rows}


def test_every_published_run_is_priced(predicted):
    assert list(predicted) == KEYS


@pytest.mark.parametrize("key", KEYS)
def test_bf16_prediction_is_slower_than_the_fp8_run(predicted, key):
    """The same layout in BF16 cannot outrun the measured FP8 run (FP8 matrix products are
    never slower): predicted tokens/s below the published one on every row."""
    r, d = predicted[key]
    assert d["tokens_per_gpu"] < r.tokens_per_gpu


@pytest.mark.parametrize("key", [
    pytest.param(k, marks=pytest.mark.xfail(strict=True, reason="8B: the FP8 recipe recomputes 5 of 32 layers, "
                                            "which `recompute` (none / selective / full) cannot state, and NVIDIA "
                                            "notes a lower FP8 speedup for small hidden sizes: its "
                                            "ratio lies above the band"))
    if k.startswith("LLAMA3_8B") else k for k in KEYS])
def test_bf16_prediction_within_the_fp8_speedup_band(predicted, key):
    """predicted (BF16) / published (FP8) in [1/1.5, 1/1.2], widened by the model's 10 %:
    [0.600, 0.917]."""
    r, d = predicted[key]
    ratio = d["tokens_per_gpu"] / r.tokens_per_gpu
    lo, hi = (1 - ERROR) / SPEEDUP[1], (1 + ERROR) / SPEEDUP[0]
    assert lo <= ratio <= hi, f"{key}: predicted {d['tokens_per_gpu']:.0f} vs published {r.tokens_per_gpu:.0f}"


@pytest.mark.parametrize("key", KEYS)
def test_published_runs_fit_in_memory(predicted, key):
    """Each layout ran on 80 GB GPUs: the step's memory per GPU fits (BF16 weights and
    gradients, FP32 master and Adam moments, no recomputation for 70B and 405B)."""
    _, d = predicted[key]
    assert d["fits"] and d["memory_gib"] < 80e9 / 2**30

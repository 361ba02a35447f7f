"""Speculative decoding against published speedups (specs/data/serving/speculative-decoding.csv,
sources in specs/data/serving/README.md): each priced row's plan in speculative-decoding.plan
takes the published acceptance as its input and predicts `spec_speedup`.

Tolerance: 10 % on the speedup.  The speedup is a ratio of two step times of one engine on one
GPU, so the device's efficiencies cancel to first order; what is left — the head's share of
the step, the engine's per-step work outside the model (sampling, rejection, scheduling), the
estimated contexts — is priced roughly, and 10 % is what a ratio priced that way can claim."""
from __future__ import annotations

import csv

import pytest

import dsl
from conftest import REPO_ROOT
from plugins.serving import serving_spec as sd

DATA = REPO_ROOT / "specs" / "data" / "serving"
TOLERANCE = 0.10


def _rows():
    with open(DATA / "speculative-decoding.csv", newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def ws():
    return dsl.load(DATA / "speculative-decoding.plan")


def test_csv_rows_and_inputs(ws):
    rows = _rows()
    assert set(rows) == {"pr29334_mtbench", "pr29334_longspec", "deepseek_v3_mtp"}
    # k = 1: E = 1 + α, so the published mean accepted lengths 1.70 and 1.76 are α = 0.70, 0.76
    assert float(ws.base_value("pr29334_mtbench.accepted_tokens_per_step")) == pytest.approx(1.70, rel=1e-12)
    assert float(ws.base_value("pr29334_longspec.accepted_tokens_per_step")) == pytest.approx(1.76, rel=1e-12)


def test_mtbench_speedup(ws):
    # vLLM PR #29334: 108.88 / 74.87 tokens/s on MT-bench, one A100 40GB, batch 1, k = 1
    published = 108.88 / 74.87
    assert float(ws.base_value("pr29334_mtbench.spec_speedup")) == pytest.approx(published, rel=TOLERANCE)


@pytest.mark.xfail(strict=True, reason=(
    "LongSpec-Bench row: measured 75.52 / 72.73 = 1.04x at accepted length 1.76, so the speculative "
    "step took 1.76 / 1.04 = 1.70 plain steps; the step model prices one head step plus a verification "
    "of 2 tokens, about 1.1 plain steps at 4,600 tokens of context (the KV read is small beside 16 GB of "
    "weights at batch 1), and predicts about the MT-bench speedup. The plain throughput barely moved "
    "between the two benchmarks (74.87 and 72.73 tokens/s), so what slowed is the speculative run; the "
    "source (one sample of 10 turns) does not say why, and nothing in the step model accounts for it"))
def test_longspec_speedup(ws):
    published = 75.52 / 72.73
    assert float(ws.base_value("pr29334_longspec.spec_speedup")) == pytest.approx(published, rel=TOLERANCE)


def test_deepseek_v3_mtp_consistent():
    # DeepSeek-V3 report: second-token acceptance 85-90 %, 1.8x tokens per second, k = 1.
    # E = 1 + α = 1.85 to 1.90: a speedup cannot exceed E (the step can be no cheaper than a
    # plain one), and 1.8x leaves the MTP step 1.85/1.8 = 1.028 to 1.90/1.8 = 1.056 plain steps
    low, high = sd.expected_tokens(0.85, 1), sd.expected_tokens(0.90, 1)
    assert (low, high) == (pytest.approx(1.85), pytest.approx(1.90))
    assert 1.8 <= low
    assert low / 1.8 == pytest.approx(1.028, abs=1e-3) and high / 1.8 == pytest.approx(1.056, abs=1e-3)

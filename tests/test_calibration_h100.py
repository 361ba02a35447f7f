"""The training step on H100 against NVIDIA's published Megatron runs of Llama 3 / 3.1
(specs/data/calibration/megatron-bridge-h100.csv and dgxc-benchmarking-llama31-h100.csv; their
README cites pages, commits and columns; benchmarks/h100_megatron_bridge.py builds the plans
and states every assumption).

Sources of the numbers asserted here:

* the published runs — the two CSVs: NVIDIA Megatron-Bridge's performance summary (DGX-H100,
  FP8, containers 25.09 – 26.06) and NVIDIA DGX Cloud Benchmarking's Llama 3.1 tables (H100,
  NeMo 24.09, BF16 and FP8 on the same layouts);
* Megatron's FLOP count per token, typed below from its published form
  12·L·h²·(1 + n_kv/n_q + s/(2h) + 1.5·f/h) + 6·V·h, with the three models' shapes from their
  Hugging Face configs (specs/catalog/hf/Llama-3.1-{8B,70B,405B}.json), written out by hand;
* NVIDIA's statement that FP8 trains "typically … 1.2–1.5X" faster than BF16 (Megatron-Bridge
  docs/performance-guide.md): the Megatron-Bridge rows are all FP8 and the step prices BF16
  matrix products, so a right BF16 prediction is 1/1.5 … 1/1.2 of their throughput.

The model's stated error here is 10 %, from the observed spread: the published throughput of
one layout moved by up to 12 % between container releases (Megatron-Bridge 405B: 292 → 328
tokens/s/GPU, 25.11 → 26.04.01), the BF16 runs on a device fitted to one of them are predicted
within 9.5 %, and the Megatron-Bridge 70B and 405B rows fall within 6 % of the FP8 band (70B at
0.854 – 0.876 against its upper end 0.833).

Where the catalog device misses (xfail below): its ``matmul_efficiency`` (81.2 %, isolated
``torch.matmul`` at 2048³ – 8192³) overstates the matrix products' throughput inside a training
step. The 8B run without tensor or pipeline parallelism isolates it — its step is compute, a
context-parallel ring in one host and an overlapped data-parallel reduction — and the catalog
device prices it 22 % fast; fitted to that one run, the ceiling falls to ≈ 65 % and the 70B
runs follow within 3.5 %, the 405B runs within 9.3 %, with no other change, so the layout terms
(TP, CP, PP, DP) are not where the error is.  The A100 validation shows the same gap (catalog 94 %, fitted 66.6 %).
The plans here run on the catalog H100's GEMM curve as measured (``sustained_efficiency = 100 %``):
the catalog's own ``sustained_efficiency`` is a default fitted on the validation corpus's fit set
(the DGX Cloud 8B page, benchmarks/fit_defaults.py), which these tests neither use nor check.
"""
from __future__ import annotations

import csv
import functools
import importlib.util
import sys

import pytest

from conftest import REPO_ROOT

DATA = REPO_ROOT / "specs" / "data" / "calibration"
ERROR = 0.10                      # the model's stated error on these comparisons (see the docstring)
SPEEDUP = (1.2, 1.5)              # FP8 over BF16, Megatron-Bridge docs/performance-guide.md


@functools.lru_cache(maxsize=None)
def _bench():
    spec = importlib.util.spec_from_file_location("h100_megatron_bridge",
                                                  REPO_ROOT / "benchmarks" / "h100_megatron_bridge.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)      # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return sys.modules[spec.name]


def _csv(name):
    with open(DATA / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _params(keys, misses: dict):
    """``keys`` as pytest parameters, each key of ``misses`` marked xfail(strict) with its reason."""
    return [pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=misses[k])) if k in misses else k
            for k in keys]


MBRIDGE = _csv("megatron-bridge-h100.csv")
DGXC = _csv("dgxc-benchmarking-llama31-h100.csv")


def _mkey(row) -> str:
    return f"{row['model']}@{row['release']}"


MKEYS = [_mkey(r) for r in MBRIDGE]


# ---------------------------------------------------------------- Megatron-Bridge: the data
def test_mbridge_rows_are_the_pages_h100_llama_pretraining_rows():
    """13 rows: 70B in six releases, 405B in five, 8B in two; all DGX-H100, FP8 where the
    release prints a precision, sequence length 8,192."""
    assert len(MBRIDGE) == 13
    by_model = {}
    for r in MBRIDGE:
        by_model.setdefault(r["model"], []).append(r["release"])
        assert r["system"] == "DGX-H100" and r["seq_length"] == "8192"
        assert r["precision"] in ("FP8", "FP8-CS", "")
        assert (r["precision"] == "") == (r["release"] == "25.09")
    assert by_model == {"LLAMA3.1_405B": ["26.06", "26.04.01", "26.02", "25.11", "25.09"],
                        "LLAMA3_70B": ["26.04.01", "26.04", "26.02.01", "26.02", "25.11", "25.09"],
                        "LLAMA3_8B": ["25.11", "25.09"]}


def _dp(r) -> int:
    gpus, tp, pp, cp = (int(r[k]) for k in ("gpus", "tp", "pp", "cp"))
    assert gpus % (tp * pp * cp) == 0
    return gpus // (tp * pp * cp)


def test_gradient_accumulation_is_the_batch_over_dp_and_micro_batch():
    """GA = GBS / (dp · MBS), dp = GPUs / (TP · PP · CP), on every row that prints GA
    (Megatron-Bridge 70B 25.11: 128 / (64/32 · 1) = 64; DGX Cloud 405B: 252 / (576/144) = 63)."""
    printed = 0
    for r in MBRIDGE + DGXC:
        dp = _dp(r)
        assert int(r["gbs"]) % (dp * int(r["mbs"])) == 0, r
        if r["ga"]:
            printed += 1
            assert int(r["ga"]) == int(r["gbs"]) // (dp * int(r["mbs"])), r
    assert printed == 6 + 28


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


@pytest.mark.parametrize("key", _params(MKEYS, {
    "LLAMA3_70B@26.04.01": "the page's 26.04.01 70B row prints 731 TFLOP/s at 1,664 tokens/s: 0.4393 TFLOP per "
                           "token, 2.2 % below the 0.449 of every other 70B row — one of its two numbers is not the "
                           "same run's"}))
def test_published_tflops_are_megatrons_count_times_tokens(key):
    """Model TFLOP/s / tokens/s = Megatron's FLOPs per token, within the rounding of the two
    printed integers (each ±0.5)."""
    r = next(r for r in MBRIDGE if _mkey(r) == key)
    tflops, tokens = float(r["model_tflops_per_gpu"]), float(r["tokens_per_sec_per_gpu"])
    assert tflops * 1e12 / tokens == pytest.approx(BY_HAND[r["model"]], rel=0.5 / tflops + 0.5 / tokens)


# ---------------------------------------------------------------- DGX Cloud Benchmarking: the data
def test_dgxc_rows_are_the_readmes_full_model_columns():
    """BF16 and FP8 for each of 8B (8 – 128 GPUs), 70B (64 – 2,048) and 405B (576 – 2,304)."""
    got = {}
    for r in DGXC:
        got.setdefault((r["model"], r["precision"]), []).append(int(r["gpus"]))
        assert r["container"] == "24.09" and r["seq_length"] == "8192" and r["mbs"] == "1"
    assert got == {("Llama 3.1 8b", p): [8, 16, 32, 64, 128] for p in ("BF16", "FP8")} | \
        {("Llama 3.1 70b", p): [64, 128, 256, 512, 1024, 2048] for p in ("BF16", "FP8")} | \
        {("Llama 3.1 405b", p): [576, 1152, 2304] for p in ("BF16", "FP8")}


DKEYS = [f"{r['model']} {r['precision']} {r['gpus']}" for r in DGXC]


@pytest.mark.parametrize("key", _params(DKEYS, {
    "Llama 3.1 70b BF16 2048": "the 70B BF16 2,048-GPU column prints a 14.98 s step but 2,248,957 tokens/s and "
                               "53.38 % MFU, which are 8,192 · 4,096 / 14.92 s and the 1,024-GPU column's MFU: its "
                               "throughput is not its step's"}))
def test_dgxc_throughput_is_tokens_per_step_over_step_time(key):
    """tokens/s = 8,192 · GBS / step time, within half a unit of the step time's last printed
    digit (70B on 256 GPUs: 8,192 · 512 / 14.8 = 283,398.9, printed 283,399)."""
    r = next(r for r in DGXC if f"{r['model']} {r['precision']} {r['gpus']}" == key)
    step = r["step_time_s"]
    half = 0.5 * 10 ** -len(step.split(".")[1])
    exact = 8192 * int(r["gbs"]) / float(step)
    assert abs(float(r["tokens_per_sec"]) - exact) <= exact * half / float(step) + 0.5


def test_dgxc_fp8_speedup_over_bf16_is_at_least_nvidias_lower_bound():
    """BF16 step / FP8 step on the same model and scale ≥ 1.2 (NVIDIA's 1.2–1.5× FP8 speedup;
    measured 1.31 – 1.55: 70B on 2,048 GPUs 14.98 / 11.39 = 1.315, 405B on 1,152 GPUs
    17.52 / 11.31 = 1.549)."""
    steps = {(r["model"], r["gpus"], r["precision"]): float(r["step_time_s"]) for r in DGXC}
    ratios = [steps[m, g, "BF16"] / steps[m, g, "FP8"] for (m, g, p) in steps if p == "BF16"]
    assert len(ratios) == 14 and min(ratios) >= SPEEDUP[0]
    assert min(ratios) == pytest.approx(14.98 / 11.39) and max(ratios) == pytest.approx(17.52 / 11.31)


# every test of this module on one pytest-xdist worker (--dist loadgroup): the module-scoped
# predictions (19 plans priced, ≈10 s) are computed once instead of once per worker
pytestmark = pytest.mark.xdist_group("calibration_h100")


# ---------------------------------------------------------------- the predictions
@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def rows(bench):
    return {r.name: r for r in bench.read_rows()}


@functools.lru_cache(maxsize=None)
def _predicted():
    b = _bench()
    return b.predict(b.read_rows())


@functools.lru_cache(maxsize=None)
def _fitted():
    b = _bench()
    rows = b.read_rows()
    eta = b.fit_matmul_efficiency(rows)
    return eta, b.predict([r for r in rows if not r.fp8], "0 %", eta)


# once per test process: pytest tears a module fixture down whenever pytest-xdist runs a test of
# another module in between, and these price 19 and 14 plans (≈8 and ≈6 s)
@pytest.fixture()
def predicted():
    return _predicted()


@pytest.fixture()
def fitted():
    return _fitted()


def _names(source, precision=None):
    out = []
    for r in _bench().read_rows():
        if r.source == source and (precision is None or (precision == "BF16") == (not r.fp8)):
            out.append(r.name)
    return out


def test_every_published_run_is_priced(rows, predicted):
    assert len(rows) == 13 + 28 and set(predicted) == set(rows)


@pytest.mark.parametrize("name", _names("mbridge") + _names("dgxc", "FP8"))
def test_bf16_prediction_is_slower_than_the_fp8_run(rows, predicted, name):
    """The same layout in BF16 cannot outrun the measured FP8 run (FP8 matrix products are
    never slower): predicted tokens/s below the published one on every FP8 row."""
    assert predicted[name]["tokens_per_gpu"] < rows[name].tokens_per_gpu


MBRIDGE_8B_MISS = ("8B: the FP8 recipe recomputes 5 of 32 layers, which `recompute` (none / selective / full) "
                   "cannot state, and on the catalog device the step's compute is priced too fast (see the module "
                   "docstring): its ratio lies above the band")


@pytest.mark.parametrize("name", _params(_names("mbridge"), {"mbridge_llama3_8b_25_09": MBRIDGE_8B_MISS}))
def test_bf16_prediction_within_the_fp8_speedup_band(rows, predicted, name):
    """Megatron-Bridge (FP8): predicted (BF16) / published in [1/1.5, 1/1.2], widened by the
    model's 10 %: [0.600, 0.917]."""
    ratio = predicted[name]["tokens_per_gpu"] / rows[name].tokens_per_gpu
    assert (1 - ERROR) / SPEEDUP[1] <= ratio <= (1 + ERROR) / SPEEDUP[0], f"{name}: {ratio:.3f}"


CATALOG_MISS = ("the catalog's matmul_efficiency (isolated torch.matmul, 81.2 %) prices the matrix products of a "
                "training step too fast: 8B without TP or PP is 22 % fast (see the module docstring)")


@pytest.mark.parametrize("name", _params(_names("dgxc", "BF16"), {n: CATALOG_MISS for n in _names("dgxc", "BF16")
                                                                  if "405b" not in n}))
def test_bf16_run_on_the_catalog_device_within_10_percent(rows, predicted, name):
    """DGX Cloud Benchmarking (BF16): predicted tokens/s within 10 % of the published."""
    ratio = predicted[name]["tokens_per_gpu"] / rows[name].tokens_per_gpu
    assert abs(ratio - 1) <= ERROR, f"{name}: {ratio:.3f}"


def test_the_catalog_device_overstates_every_bf16_run(rows, predicted):
    """The miss has one sign: every BF16 run is predicted faster than measured."""
    assert all(predicted[n]["tokens_per_gpu"] > rows[n].tokens_per_gpu for n in _names("dgxc", "BF16"))


def test_the_fit_lowers_the_ceiling(fitted):
    """Fitted to the 8B run on 8 GPUs, the curve's ceiling lies below the catalog's isolated
    matmul figure (81.2 %) and above half of it."""
    eta, _ = fitted
    assert 0.406 < eta < 0.812


@pytest.mark.parametrize("name", _names("dgxc", "BF16"))
def test_bf16_run_on_the_fitted_device_within_10_percent(rows, fitted, name):
    """DGX Cloud Benchmarking (BF16), the device fitted to the 8B run on 8 GPUs (tp = pp = 1:
    the fit sees the device, not the layout): every other run — 8B to 128 GPUs, 70B with
    TP·PP·CP·VP = 4·4·2·5 to 2,048 GPUs, 405B with 8·9·2·7 to 2,304 — within 10 %."""
    _, pred = fitted
    ratio = pred[name]["tokens_per_gpu"] / rows[name].tokens_per_gpu
    assert abs(ratio - 1) <= ERROR, f"{name}: {ratio:.3f}"


@pytest.mark.parametrize("name", _names("mbridge") + _names("dgxc", "BF16"))
def test_published_runs_fit_in_memory(predicted, name):
    """Each layout ran on 80 GB GPUs: the step's memory per GPU fits (BF16 weights and
    gradients, FP32 master and Adam moments, no recomputation)."""
    assert predicted[name]["fits"] and predicted[name]["memory_gib"] < 80e9 / 2**30

"""Prediction bands (plugins/training/bands.py, docs/plugins/bands.md): the band a plan carries is
the quantile range of measured / predicted step time over the committed corpus rows of its device
and regime — recomputed here from training-runs.csv and predictions.csv, not from bands.csv or
the generator — and a plan without validated rows is warned."""
from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import dsl
from conftest import run_cli

REPO = Path(__file__).resolve().parent.parent
VALIDATION = REPO / "specs" / "data" / "validation"

HEAD = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload cpt { tokens = 100e9 token; seq_len = 8192 token; global_batch = 128 seq; deadline = 30 day }
"""
H100X64 = HEAD + """
plan h100x64 {
  model = llama31_70b; workload = cpt; device = h100_sxm
  gpus = 64; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 8; pp = 4; zero = 1; sequence_parallel = true; recompute = "full"
               link = nvlink4; nic = ib_ndr_400g }
}
plan h100x64_fp8 extends h100x64 { use layout { matmul_precision = "fp8" } }
plan h100x8 extends h100x64 { gpus = 8; use layout { tp = 8; pp = 1; zero = 1 } }
plan h200x64 extends h100x64 { device = h200 }
plan b200x64_moe extends h100x64 { device = b200; model = qwen3_30b_a3b
  use layout { tp = 4; pp = 1; ep = 8; zero = 1; matmul_precision = "fp8" } }
plan mfu40 extends h100x64 { mfu = 40 %; use layout { efficiency = "mfu" } }
"""


def _corpus_ratios(device: str, arch: str, fp8: bool, multi_node: bool) -> list[float]:
    """Measured / predicted step time of the committed test-set rows of one device and regime,
    read straight from the CSVs."""
    with open(VALIDATION / "training-runs.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with open(VALIDATION / "predictions.csv", newline="", encoding="utf-8") as f:
        preds = {d["id"]: d["predicted"] for d in csv.DictReader(f)}
    out = []
    for r in rows:
        if (r["split"] != "test" or r["catalog_device"].split(":")[0] != device or r["arch"] != arch
                or r["precision"].upper().startswith("FP8") != fp8
                or (int(r["gpus"]) > int(r["gpus_per_host"])) != multi_node or not preds[r["id"]]):
            continue
        measured, predicted = float(r["measured"]), float(preds[r["id"]])
        # a throughput metric is ∝ 1 / step time; GPU-hours per token ∝ step time
        out.append(measured / predicted if r["metric"] == "gpu_hours_per_1e12_tokens" else predicted / measured)
    return out


@pytest.fixture(scope="module")
def res():
    return dsl.load(REPO / "specs" / "cases" / "bands-example.plan", text=H100X64)


@pytest.mark.parametrize("plan,fp8,multi,quantiles", [
    ("h100x64", False, True, "p10-p90"),       # 14 runs
    ("h100x64_fp8", True, True, "p10-p90"),    # 29 runs
])
def test_band_is_the_quantiles_of_the_corpus_rows(res, plan, fp8, multi, quantiles):
    ratios = _corpus_ratios("h100_sxm", "dense", fp8, multi)
    assert len(ratios) >= 3
    if quantiles == "p10-p90":
        assert len(ratios) >= 10
        lo, hi = np.percentile(ratios, [10, 90])       # linear interpolation, numpy's default
    else:
        assert len(ratios) < 10
        lo, hi = min(ratios), max(ratios)
    p = res[plan]
    step = p.value("step_time", "s")
    assert p.value("step_time_low", "s") / step == pytest.approx(lo, rel=1e-3)    # bands.csv keeps 4 digits
    assert p.value("step_time_high", "s") / step == pytest.approx(hi, rel=1e-3)
    train = p.value("train_time", "day")
    assert p.value("train_time_low", "day") / train == pytest.approx(lo, rel=1e-3)
    assert p.value("train_time_high", "day") / train == pytest.approx(hi, rel=1e-3)
    # finish time: the training time's band added, the other terms held
    fin = p.value("finish_time", "day")
    assert p.value("finish_time_high", "day") - fin == pytest.approx(p.value("train_time_high", "day") - train)
    assert str(len(ratios)) in res.nodes[f"{plan}.step_time_low"].doc


def _pct(x: float) -> str:
    """A band end as the plugin prints it: whole percent, signed, a true minus sign."""
    v = round(100 * x)
    return f"{'−' if v < 0 else '+'}{abs(v)} %"


def test_unvalidated_plans_are_warned(res):
    warned = {w.summary.split("'")[1]: w for w in res.warnings if w.code == "unvalidated"}
    # h100x8: one node, 16-bit: two test-set runs (torchtitan's 8B on 8 GPUs; the DGX Cloud 8B runs
    # on one node are in the fit set); mfu40: priced at a stated mfu, no band, no warning
    assert set(warned) == {"h200x64", "b200x64_moe", "h100x8"}
    h200 = warned["h200x64"]
    assert "no validated test-set runs on device 'h200'" in h200.summary and "dense · 16-bit · multi-node" in h200.summary
    assert "`use calibrate`" in h200.hint and "docs/plugins/calibrate.md" in h200.hint
    assert "only 2 validated test-set runs, too few for a band, on device 'b200' in the plan's regime (moe · FP8 · multi-node)" in warned["b200x64_moe"].summary
    for plan in list(warned) + ["mfu40"]:
        assert not res.has(f"{plan}.step_time_low")


SERVING = HEAD + """
model llama2_7b from "hf/Llama-2-7b-hf.json"
plan on_a100 { model = llama2_7b; device = a100_sxm_80gb; use serving_step { prefill = 2048 token } }
plan on_h100 extends on_a100 { device = h100_sxm }
"""


def test_serving_ttft_band_is_the_min_max_of_the_corpus_serving_rows(tmp_path):
    """A100 TTFT: the serving rows of the corpus (TensorRT-LLM's published first-token latencies)
    give a min–max band of measured / predicted (4 runs); the TPOT and the H100 have none and
    are warned."""
    import shutil
    shutil.copytree(REPO / "specs" / "catalog" / "hf", tmp_path / "hf")
    (tmp_path / "s.plan").write_text(SERVING, encoding="utf-8")
    with open(VALIDATION / "serving-runs.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "ttft_ms" and r["catalog_device"] == "a100_sxm_80gb"]
    with open(VALIDATION / "serving-predictions.csv", newline="", encoding="utf-8") as f:
        preds = {d["id"]: float(d["predicted"]) for d in csv.DictReader(f)}
    ratios = [float(r["measured"]) / preds[r["id"]] for r in rows]
    assert len(ratios) == 4
    r = dsl.load(tmp_path / "s.plan")
    t = r["on_a100"].value("ttft_floor", "ms")
    assert r["on_a100"].value("ttft_floor_low", "ms") / t == pytest.approx(min(ratios), rel=1e-3)
    assert r["on_a100"].value("ttft_floor_high", "ms") / t == pytest.approx(max(ratios), rel=1e-3)
    assert not r.has("on_h100.ttft_floor_low") and not r.has("on_a100.tpot_low")
    warned = {w.summary.split("'")[1]: w.summary for w in r.warnings if w.code == "unvalidated"}
    assert "(tpot)" in warned["on_a100"] and "(ttft_floor, tpot)" in warned["on_h100"]
    from plugins.training.bands import _table
    tab = _table(r, "on_h100")
    assert [row[0] for row in tab.rows] == ["ttft_floor", "tpot"] and all(row[-1] == "no band" for row in tab.rows)


def test_json_output_has_the_band_table_and_the_warning(tmp_path):
    f = tmp_path / "bands.plan"
    f.write_text(H100X64, encoding="utf-8")
    code, out, err = run_cli("eval", str(f), "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    t = d["plans"]["h100x64_fp8"]["tables"]["bands"]
    rows = {r[0]: r for r in t["rows"]}
    assert set(rows) == {"step_time", "train_time", "finish_time"}
    ratios = _corpus_ratios("h100_sxm", "dense", True, True)
    lo, hi = np.percentile(ratios, [10, 90])
    assert rows["step_time"][-1] == f"{_pct(lo - 1)} / {_pct(hi - 1)}"
    assert f"from {len(ratios)} validated h100_sxm runs (dense · FP8 · multi-node)" in t["notes"][0]
    assert "bands" not in d["plans"]["h200x64"].get("tables", {})
    assert any(x["code"] == "unvalidated" and "h200x64" in x["summary"] for x in d["diagnostics"])


def test_bands_csv_is_current():
    """bands.csv is what validation_table.py derives from the committed predictions.csv."""
    spec = importlib.util.spec_from_file_location("validation_table", REPO / "benchmarks" / "validation_table.py")
    vt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vt)
    want = [{k: str(v) for k, v in b.items()}
            for b in vt.bands(vt.read_rows(), vt.read_predictions())
            + vt.serving_bands(vt.read_serving(), vt.read_serving_predictions())]
    assert vt.read_bands() == want, "rerun `python benchmarks/validation_table.py --write` and commit"


def test_headline_rows_carry_the_band_inline(tmp_path):
    """Text: the value followed by the band's two ends relative to it; JSON: the band's ends equal
    the step_time_low / step_time_high quantities; the Markdown report names the runs."""
    f = tmp_path / "bands.plan"
    f.write_text(H100X64, encoding="utf-8")
    ratios = _corpus_ratios("h100_sxm", "dense", False, True)
    lo, hi = np.percentile(ratios, [10, 90])
    band = f"{_pct(lo - 1)} / {_pct(hi - 1)}"
    code, out, err = run_cli("eval", str(f), "--plan", "h100x64")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("step_time "))
    assert line.endswith(f"({band})"), line
    code, out, err = run_cli("eval", str(f), "--plan", "h100x64", "--format", "json")
    q = json.loads(out)["plans"]["h100x64"]["quantities"]
    step = q["step_time"]
    assert step["band"]["text"] == band
    assert step["band"]["low"] / step["value"] == pytest.approx(lo, rel=1e-3)
    assert step["band"]["high"] / step["value"] == pytest.approx(hi, rel=1e-3)
    assert f"from {len(ratios)} validated h100_sxm runs (dense · 16-bit · multi-node)" == step["band"]["basis"]
    assert "band" in q["finish_time"] and "band" not in q["memory_per_gpu"]
    code, out, err = run_cli("report", str(f), "--plan", "h100x64", "--format", "md")
    assert code == 0, err
    assert f"({band} from {len(ratios)} validated h100_sxm runs" in out


def _memory_ratios(device: str, fp8: bool, multi_node: bool) -> list[float]:
    """Measured / predicted peak memory of the committed dense test-set rows of one device and
    regime that publish it, read straight from the CSVs."""
    with open(VALIDATION / "training-runs.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with open(VALIDATION / "predictions.csv", newline="", encoding="utf-8") as f:
        preds = {d["id"]: d["predicted_memory_gib"] for d in csv.DictReader(f)}
    return [float(r["measured_memory_gib"]) / float(preds[r["id"]]) for r in rows
            if r["split"] == "test" and r["catalog_device"].split(":")[0] == device and r["arch"] == "dense"
            and r["precision"].upper().startswith("FP8") == fp8 and r["measured_memory_gib"] and preds[r["id"]]
            and (int(r["gpus"]) > int(r["gpus_per_host"])) == multi_node]


MEMORY = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w70 { tokens = 1e11 token; seq_len = 8192 token; global_batch = 512 seq }
plan titan70 { model = llama31_70b; workload = w70; device = h100_500w
  gpus = 256; gpus_per_host = 8; micro_batch = 16 seq
  use memory { weights = "bf16"; grads = "fp32"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 8; zero = 3; sequence_parallel = true; recompute = "full"; efficiency = "roofline"
               matmul_precision = "fp8"; link = nvlink4; nic = roce_400g; nics_per_host = 8
               framework = "torchtitan" }
}
workload w70_tight { tokens = 1e11 token; seq_len = 8192 token; global_batch = 640 seq }
plan titan70_tight extends titan70 { workload = w70_tight; micro_batch = 20 seq }
plan sxm70 extends titan70 { device = h100_sxm }
plan mega70 extends titan70 {
  use layout { tp = 8; zero = 3; sequence_parallel = true; recompute = "full"; efficiency = "roofline"
               matmul_precision = "fp8"; link = nvlink4; nic = roce_400g; nics_per_host = 8
               framework = "megatron" } }
plan mfu70 extends titan70 { mfu = 40 %
  use layout { tp = 8; zero = 3; sequence_parallel = true; recompute = "full"; efficiency = "mfu"
               matmul_precision = "fp8"; link = nvlink4; nic = roce_400g; nics_per_host = 8
               framework = "torchtitan" } }
"""


@pytest.fixture(scope="module")
def mem(tmp_path_factory):
    f = tmp_path_factory.mktemp("mem") / "mem.plan"
    f.write_text(MEMORY, encoding="utf-8")
    return dsl.load(f)


def test_runtime_memory_band_is_the_range_of_the_corpus_rows(mem):
    ratios = _memory_ratios("h100_500w", True, True)
    assert 3 <= len(ratios) < 10                      # min–max below 10 runs
    p = mem["titan70"]
    m = p.value("runtime_memory", "GiB")
    assert p.value("runtime_memory_low", "GiB") / m == pytest.approx(min(ratios), rel=1e-3)   # 4 digits kept
    assert p.value("runtime_memory_high", "GiB") / m == pytest.approx(max(ratios), rel=1e-3)
    assert f"from {len(ratios)} validated h100_500w runs" in mem.nodes["titan70.runtime_memory_low"].doc
    # no run on the catalog's h100_sxm publishes its memory: no band
    assert not mem.has("sxm70.runtime_memory_low")


def test_the_memory_band_is_the_frameworks(mem):
    # the memory-publishing runs are torchtitan's: the same layout under Megatron gets no memory
    # band (its runtime holds other tensors), while its step time keeps the regime's band
    assert not mem.has("mega70.runtime_memory_low")
    assert mem.has("mega70.step_time_low") and mem.has("titan70.runtime_memory_low")


def test_a_plan_that_fits_only_at_its_prediction_is_warned(mem):
    warned = [w.summary for w in mem.warnings if w.code == "unvalidated" and "band's high end" in w.summary]
    assert len(warned) == 1 and "'titan70_tight'" in warned[0]
    p = mem["titan70_tight"]
    assert p.value("runtime_memory", "GiB") <= p.value("usable_memory", "GiB") < p.value("runtime_memory_high", "GiB")
    assert mem.requirement("titan70_tight", "fits_memory")["ok"]


def test_the_memory_band_does_not_depend_on_what_prices_the_step(mem):
    # a stated mfu prices the step (no step-time band) but not the memory: the same runtime memory,
    # the same band
    p, q = mem["titan70"], mem["mfu70"]
    assert q.value("runtime_memory", "GiB") == pytest.approx(p.value("runtime_memory", "GiB"), rel=1e-12)
    assert q.value("runtime_memory_high", "GiB") == pytest.approx(p.value("runtime_memory_high", "GiB"), rel=1e-12)
    assert not mem.has("mfu70.step_time_low")

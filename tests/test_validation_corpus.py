"""The validation corpus (specs/data/validation/) and its README table.

Pricing all 84 plans takes about 40 s, so the README table is checked against the committed
``predictions.csv`` (benchmarks/validation_table.py --write writes both), and one row of each
source is re-priced here to catch a stale ``predictions.csv``; ``validation_table.py --check``
re-prices every row.
"""
from __future__ import annotations

import csv
import re
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "specs" / "data"


def _module():
    spec = importlib.util.spec_from_file_location("validation_table", REPO / "benchmarks" / "validation_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


VT = _module()
ROWS = VT.read_rows()
CONDITIONS = ("device", "catalog_device", "gpus", "gpus_per_host", "model", "catalog_model", "arch", "precision",
              "tp", "pp", "cp", "ep", "vp", "dp", "zero", "global_batch", "micro_batch", "seq_len", "framework",
              "schedule", "recompute", "metric", "measured")


def test_corpus_size_and_schema():
    assert len(ROWS) >= 40
    assert len({r["id"] for r in ROWS}) == len(ROWS)
    for r in ROWS:
        assert r["source_id"] and r["source"], r["id"]
        for c in CONDITIONS:
            assert r[c] != "", (r["id"], c)
        assert r["split"] in ("fit", "test"), r["id"]
        assert r["arch"] in ("dense", "moe") and r["metric"] in VT.METRICS, r["id"]
        tp, pp, cp, g = (int(r[k]) for k in ("tp", "pp", "cp", "gpus"))
        assert int(r["dp"]) * tp * pp * cp == g, r["id"]
        float(r["measured"])
        # every assumed column is a column, and an assumption is explained
        for a in filter(None, r["assumed"].split(";")):
            assert a in r or a in ("peak_flops", "routing_imbalance", "link", "nic", "prefetch"), (r["id"], a)
        assert r["assumptions"], r["id"]


#: rule 3: sources publishing the same runs with one mechanism on and off (their pairs differ only
#: in that mechanism's setting)
ON_OFF = {"torchtitan-asynctp-2025-06": "tp_comm_overlap"}


def test_split_rule():
    """By source (one split per source), the fit set at most a third of the rows, and exactly the
    sources the three rules of specs/data/validation/README.md name: Narayanan 2021; for each
    device with two or more sources (on/off sources aside) the page with the most 16-bit TP = PP = 1
    runs; and the on/off sources, whose rows come in pairs that differ only in the mechanism."""
    split = {}
    for r in ROWS:
        split.setdefault(r["source_id"], set()).add(r["split"])
    assert all(len(s) == 1 for s in split.values()), split
    expected = {"narayanan2021"} | set(ON_OFF)
    for src, knob in ON_OFF.items():
        rows = [r for r in ROWS if r["source_id"] == src]
        off = {r["id"].replace("_vanilla_", "_"): r for r in rows if "_vanilla_" in r["id"]}
        on = {r["id"].replace("_async_", "_"): r for r in rows if "_async_" in r["id"]}
        assert off.keys() == on.keys() and len(off) * 2 == len(rows), src
        for k in off:
            diff = {c for c in off[k] if off[k][c] != on[k][c]}
            assert diff <= {"id", "framework", "layout_extra", "measured", "assumptions"}, (k, diff)
            assert knob in on[k]["layout_extra"] and knob not in off[k]["layout_extra"], k
    by_device: dict = {}
    for r in ROWS:
        if r["source_id"] in ON_OFF:
            continue
        by_device.setdefault(r["catalog_device"].split(":")[0], {}).setdefault(r["source_id"], []).append(r)
    for dev, sources in by_device.items():
        if len(sources) >= 2 and dev != "a100_sxm_80gb":
            def bound(rs):
                return sum(int(r["tp"]) == 1 and int(r["pp"]) == 1 and not r["precision"].upper().startswith("FP8")
                           for r in rs)
            best = max(sources, key=lambda s: (bound(sources[s]), s))
            if bound(sources[best]):
                expected.add(best)
    assert {k for k, s in split.items() if s == {"fit"}} == expected == {"narayanan2021", "dgxc-benchmarking-8b",
                                                                          "torchtitan-asynctp-2025-06"}
    assert 3 * sum(r["split"] == "fit" for r in ROWS) <= len(ROWS)


def _calibration(name, key):
    with open(DATA / "calibration" / name, newline="", encoding="utf-8") as f:
        return {key(d): d for d in csv.DictReader(f)}


def test_referenced_rows_agree_with_the_calibration_data():
    """Rows reused from specs/data/calibration/ carry the same measured value and layout."""
    nar = _calibration("narayanan2021-table1.csv", lambda d: d["run"])
    dgx = _calibration("dgxc-benchmarking-llama31-h100.csv", lambda d: (d["model"], d["precision"], d["gpus"]))
    mbr = _calibration("megatron-bridge-h100.csv", lambda d: (d["release"], d["model"]))
    n = 0
    for r in ROWS:
        if not r["ref"]:
            continue
        # "FILE key=value … column", values may hold spaces ("model=Llama 3.1 8b")
        fields = dict(re.findall(r"(\w+)=(.*?)(?= \w+=| \w+$)", r["ref"]))
        col = r["ref"].rsplit(" ", 1)[1]
        if "narayanan" in r["ref"]:
            d = nar[fields["run"]]
        elif "dgxc" in r["ref"]:
            d = dgx[(fields["model"], fields["precision"], fields["gpus"])]
        else:
            d = mbr[(fields["release"], fields["model"])]
        assert float(d[col]) == float(r["measured"]), r["id"]
        assert int(d.get("gpus")) == int(r["gpus"]), r["id"]
        assert int(d.get("tp")) == int(r["tp"]) and int(d.get("pp")) == int(r["pp"]), r["id"]
        n += 1
    assert n == 10 + 28 + 13


def test_readme_table_is_current():
    preds = VT.read_predictions()
    assert list(preds) == [r["id"] for r in ROWS], "rerun `python benchmarks/validation_table.py --write`"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    serving = (VT.read_serving(), VT.read_serving_predictions())
    assert VT.markdown(ROWS, preds, serving) in readme, "rerun `python benchmarks/validation_table.py --write` and commit"


def test_a_run_that_ran_is_never_declared_out_of_memory():
    """Every corpus run ran on its GPUs: priced as a plan, its runtime memory (what the caching
    allocator reserves) must fit the device's usable memory."""
    preds = VT.read_predictions()
    priced = {k: p for k, p in preds.items() if p["value"] is not None}
    assert len(priced) >= 80
    assert [k for k, p in priced.items() if not p["fits"]] == []


SERVING_ROWS = VT.read_serving()


def test_serving_rows_cite_their_source_and_equal_the_data_set_they_reference():
    """Each serving row names its source and the data-set cell its measured value equals (the
    data sets' README cites the thread or page); all are test rows."""
    assert len(SERVING_ROWS) >= 9 and len({r["id"] for r in SERVING_ROWS}) == len(SERVING_ROWS)
    for r in SERVING_ROWS:
        assert r["source"] and r["split"] == "test" and r["metric"] in VT.SERVING_METRICS, r["id"]
        path, key, col = r["ref"].split(" ")
        with open(REPO / path, newline="", encoding="utf-8") as f:
            d = next(x for x in csv.DictReader(f) if x["row"] == key.split("=", 1)[1])
        assert float(d[col]) == float(r["measured"]), r["id"]
        assert (REPO / r["plan_file"]).is_file()


def test_serving_predictions_are_current():
    """Every serving row re-priced now equals the committed prediction."""
    assert VT.predict_serving(SERVING_ROWS) == VT.read_serving_predictions()


@pytest.mark.parametrize("source", sorted({r["source_id"] for r in ROWS}))
def test_predictions_are_current(source):
    """One row per source re-priced now equals the committed prediction (catches a stale predictions.csv)."""
    row = next(r for r in ROWS if r["source_id"] == source)
    assert VT.predict(row) == VT.read_predictions()[row["id"]]


def test_fitted_defaults_are_current_and_fitted_on_the_fit_set_only():
    """benchmarks/fit_defaults.py re-fits every catalog default from the fit set and finds the
    catalog and fitted-defaults.csv as committed; every run it used is a fit-set row."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("fit_defaults", REPO / "benchmarks" / "fit_defaults.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--check"]) == 0
    split = {r["id"]: r["split"] for r in ROWS}
    for row in mod.read_fitted():
        assert all(split[i] == "fit" for i in row["runs"].split(";")), row
        text = (REPO / "specs" / "catalog" / "hardware.plan").read_text(encoding="utf-8")
        assert f'{row["field"]} = {row["value_percent"]} % source "fitted by benchmarks/fit_defaults.py' in text

"""Calibration against measured runs (``use calibrate``, plugins/training/calibrate.py) and the validation
set of Narayanan et al. 2021 Table 1 (specs/data/calibration/narayanan2021-table1.csv).

Numbers here come from the paper's table (the CSV, whose README cites each column) or from hand
computations written out in the comments, never from the code's output.
"""
from __future__ import annotations

import math

import pytest

import dsl
from conftest import REPO_ROOT, run_main
from dsl.syntax.diagnostics import PlanError
from plugins.training import calibrate as cal

CSV = REPO_ROOT / "specs" / "data" / "calibration" / "narayanan2021-table1.csv"
CASE = REPO_ROOT / "specs" / "cases" / "calibrate-megatron-a100.plan"
RUNS = cal.read_runs(CSV)
BY_NAME = {r.name: r for r in RUNS}


def _published():
    import csv
    with open(CSV, newline="", encoding="utf-8") as f:
        return {row["run"]: row for row in csv.DictReader(f)}


# ---------------------------------------------------------------- the data set
def test_table1_is_consistent_within_its_printed_digits():
    """Aggregate = GPUs × per-GPU throughput, % of peak = per-GPU / 312 TFLOP/s, and the printed
    parameters = the GPT count, each within the rounding of its last printed digit."""
    pub = _published()
    assert list(pub) == ["1.7B", "3.6B", "7.5B", "18B", "39B", "76B", "145B", "310B", "530B", "1T"]
    for name, row in pub.items():
        gpus, per_gpu = int(row["gpus"]), float(row["achieved_tflops"])
        # the per-GPU figure is rounded to 1 TFLOP/s: the product may be off by gpus × 0.5 TFLOP/s
        assert abs(float(row["aggregate_pflops"]) - gpus * per_gpu / 1000) <= gpus * 0.5 / 1000 + 0.05, name
        assert abs(float(row["percent_peak"]) - per_gpu / 312 * 100) <= 0.5 + 0.5 / 312 * 100, name
        # parameters printed to 0.1 B
        assert abs(BY_NAME[name].params / 1e9 - float(row["params_billion"])) <= 0.05, name
    # hand count of the 1 T model: V·h + s·h + l·(12h² + 13h) + 2h with h = 25,600, l = 128
    h, l = 25600, 128
    assert BY_NAME["1T"].params == 51200 * h + 2048 * h + l * (12 * h * h + 13 * h) + 2 * h


def test_layouts_divide():
    for r in RUNS:
        assert r.gpus % (r.tp * r.pp) == 0 and r.batch % (r.dp * r.micro_batch) == 0, r.name
        assert r.layers % (r.pp * r.virtual) == 0, r.name
    # dp of the 1 T run: 3,072 / (8 · 64) = 6; micro-batches 3,072 / (6 · 1) = 512
    assert BY_NAME["1T"].dp == 6


def test_measured_step_is_the_papers_flops_over_the_achieved_throughput():
    """The 1 T row by hand: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (the paper's §5.1 form,
    typed here independently of the module's passes form), t = F / (3,072 × 163 TFLOP/s)."""
    B, s, l, h, V = 3072, 2048, 128, 25600, 51200
    F = 96 * B * s * l * h ** 2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert cal.narayanan_flops(BY_NAME["1T"]) == pytest.approx(F, rel=1e-12)
    assert cal.measured_step(BY_NAME["1T"]) == pytest.approx(F / (3072 * 163e12), rel=1e-12)
    # by hand: 96·3,072·2,048·128·25,600² = 5.0665e19; × (1 + 0.013333 + 0.000977) = 5.139e19 FLOP,
    # over 3,072 × 163e12 FLOP/s = 5.0074e17 FLOP/s: 102.6 s per iteration
    assert F == pytest.approx(5.139e19, rel=1e-3)
    assert cal.measured_step(BY_NAME["1T"]) == pytest.approx(102.6, rel=1e-3)


def test_the_megatron_convention_of_flops_py_is_not_the_papers_count():
    """plugins/model/flops.py's ``megatron`` convention is today's Megatron-LM code (3 passes, causal
    attention): 72·B·s·l·h²·(1 + s/(12h) + V/(12·l·h)) for a GPT without recomputation, not the
    paper's 96·… with recomputation — so a measured throughput of the paper is not converted with it."""
    from plugins.model import flops
    r = BY_NAME["1.7B"]
    h, l, s, V = r.hidden, r.layers, r.seq_len, r.vocab
    a = {"L": l, "h": h, "nq": r.heads, "nkv": r.heads, "dh": h // r.heads, "V": V, "f": 4 * h, "mats": 2,
         "qk_norm": False, "qkv_bias": False}
    per_token = flops.per_token("megatron", a, None, s, active_params=0, embedding_params=0)
    assert per_token * s == pytest.approx(72 * s * l * h * h * (1 + s / (12 * h) + V / (12 * l * h)), rel=1e-12)
    assert cal.narayanan_flops(r) / (r.batch * s) > 1.3 * per_token


# ---------------------------------------------------------------- the fit machinery (hand-known answers)
TOY_HEADER = "run,heads,hidden,layers,seq_len,vocab,tp,pp,gpus,batch,micro_batch,step_time\n"
TOY_PLAN = """
device toy {{ peak_flops = 1 TFLOP/s; memory = 1 GB; mem_bw = 1 TB/s }}
link toy_link {{ bandwidth = 10 GB/s }}
plan fit {{
  device = toy
  use calibrate {{ runs = "runs.csv"; fit = ["mfu"]{rows}; link = toy_link; flop_count = "model" }}
}}
"""
# Tiny GPT on one GPU (no communication): h = 64, a = 4, l = 2, s = 16, V = 128, B = b = 8.
# Forward FLOPs per token: matrices 2·l·12h² + 2hV = 196,608 + 16,384 = 212,992, causal attention
# l·2·h·(s+1) = 4,352; training 3 × 217,344 = 652,032 per token, × 128 tokens = 83,460,096 FLOP.
# At 1 TFLOP/s and efficiency 0.4 the step is 208.65024 µs; at 0.5, 166.920192 µs.
TOY_FLOPS = 83_460_096


def _toy(write_plan, rows_csv, rows=""):
    write_plan(TOY_HEADER + rows_csv, "runs.csv")
    return write_plan(TOY_PLAN.format(rows=rows))


def test_fit_one_run_recovers_the_efficiency(write_plan, qval):
    plan = _toy(write_plan, f"a,4,64,2,16,128,1,1,1,8,8,{TOY_FLOPS / 0.4e12!r}\n")
    ws = dsl.load(plan)
    assert qval(ws, "fit.mfu") == pytest.approx(0.4, rel=1e-9)
    assert qval(ws, "fit.fit_rms_error") == pytest.approx(0, abs=1e-8)
    assert cal.model_flops(cal.read_runs(plan.parent / "runs.csv")[0]) == TOY_FLOPS


def test_fit_two_runs_is_the_least_squares_of_relative_errors(write_plan, qval):
    """Runs measured at efficiencies 0.4 and 0.5: the residuals are 0.4/m − 1 and 0.5/m − 1,
    whose squares sum least at 1/m = (0.4 + 0.5)/(0.4² + 0.5²): m = 0.41/0.9 = 0.4556.
    Fitting only the first run instead gives 0.4 and predicts the second 20 % slow."""
    csv = f"a,4,64,2,16,128,1,1,1,8,8,{TOY_FLOPS / 0.4e12!r}\nb,4,64,2,16,128,1,1,1,8,8,{TOY_FLOPS / 0.5e12!r}\n"
    ws = dsl.load(_toy(write_plan, csv))
    assert qval(ws, "fit.mfu") == pytest.approx(0.41 / 0.9, rel=1e-9)
    ws = dsl.load(_toy(write_plan, csv, rows='; rows = ["a"]'))
    assert qval(ws, "fit.mfu") == pytest.approx(0.4, rel=1e-9)
    # predicted throughput of b: 0.4/0.5 of the measured one, an error of −20 %
    assert qval(ws, "fit.max_prediction_error") == pytest.approx(0.2, rel=1e-9)
    t = cal._table(ws, "fit")
    assert [r[0] for r in t.rows] == ["a", "b"] and [r[-1] for r in t.rows] == ["fit", "predicted"]
    assert t.rows[1][5] == "-20.0"


def test_achieved_throughput_counted_as_the_model_counts(write_plan, qval):
    """`flop_count = "model"`: 0.4 TFLOP/s achieved on a 1 TFLOP/s device, FLOPs counted as the
    step counts them, is an efficiency of 0.4 exactly (no communication on one GPU)."""
    write_plan(TOY_HEADER.replace("step_time", "achieved_tflops") + "a,4,64,2,16,128,1,1,1,8,8,0.4\n", "runs.csv")
    ws = dsl.load(write_plan(TOY_PLAN.format(rows="")))
    assert qval(ws, "fit.mfu") == pytest.approx(0.4, rel=1e-9)


def test_a_fitted_value_drives_another_plan(write_plan, qval):
    """`mfu = fit.mfu` in a training plan: its compute time is the toy's FLOPs at the fitted 0.4."""
    write_plan(TOY_HEADER + f"a,4,64,2,16,128,1,1,1,8,8,{TOY_FLOPS / 0.4e12!r}\n", "runs.csv")
    plan = write_plan(TOY_PLAN.format(rows="") + """
model toy_gpt { layers = 2; hidden = 64; ffn = 256; heads = 4; vocab = 128; ffn_matrices = 2; tied_embeddings = true }
workload toy_w { seq_len = 16 token; global_batch = 8 seq }
plan train {
  model = toy_gpt; workload = toy_w; device = toy; gpus = 1; micro_batch = 8 seq
  mfu = fit.mfu
  use layout {}
}
""")
    ws = dsl.load(plan)
    assert qval(ws, "train.compute_time", "s") == pytest.approx(TOY_FLOPS / 0.4e12, rel=1e-9)


def test_roofline_fit_recovers_the_fields_that_made_the_measurements():
    """Round trip on three of the table's layouts: "measured" steps priced by the model itself at
    matmul_efficiency 0.6, mem_efficiency 0.5, matmul_half_flops 1e10 FLOP are fitted back from
    other starting values (the half size on its log scale)."""
    truth = {"matmul_efficiency": 0.6, "mem_efficiency": 0.5, "matmul_half_flops": 1e10}
    hw = dict(_hw(), values=dict(truth))
    import dataclasses
    runs = [dataclasses.replace(BY_NAME[n], achieved_tflops=None, step_time=p["step"])
            for n, p in zip(("1.7B", "18B", "145B"), cal.predict([BY_NAME[n] for n in ("1.7B", "18B", "145B")],
                                                               hw, "roofline"))]
    got = cal.fit(runs, dict(_hw(), values={}), list(truth), runs,
                  start={"matmul_efficiency": 0.8, "mem_efficiency": 0.8, "matmul_half_flops": 1e9})
    assert got["values"]["matmul_efficiency"] == pytest.approx(0.6, rel=1e-4)
    assert got["values"]["mem_efficiency"] == pytest.approx(0.5, rel=1e-4)
    assert got["values"]["matmul_half_flops"] == pytest.approx(1e10, rel=1e-3)


def test_a_fit_at_its_bound_is_a_warning(write_plan, qval):
    """A run measured faster than the device's peak (50 µs for 83.46 MFLOP on 1 TFLOP/s:
    1.67 × peak) cannot be matched: the efficiency stops at its bound 1 and the plan says so."""
    ws = dsl.load(_toy(write_plan, "a,4,64,2,16,128,1,1,1,8,8,5e-05\n"))
    assert qval(ws, "fit.mfu") == pytest.approx(1.0)
    assert any("sits at its bound" in d.summary for d in ws.warnings)



def test_table_notes_give_units_and_both_flop_counts(write_plan):
    """The notes name matmul_half_flops with its unit (FLOP, the unit the quantity is shown in) and
    give the paper's count with and without full recomputation (rows may be either)."""
    write_plan(TOY_HEADER + "a,4,64,2,16,128,1,1,1,8,8,0.001\nb,4,64,2,16,128,1,1,1,8,8,0.002\n", "runs.csv")
    ws = dsl.load(write_plan(TOY_PLAN.format(rows="").replace(
        'fit = ["mfu"]', 'fit = ["matmul_efficiency", "matmul_half_flops"]').replace(
        '; flop_count = "model"', "")))
    notes = cal._table(ws, "fit").notes
    assert "matmul_half_flops = " in notes[0] and notes[0].endswith(" FLOP")
    assert "with full recomputation, 72·B·s·l·h²·(1 + s/6h) + 6·B·s·h·V without" in notes[1]

# ---------------------------------------------------------------- errors
BAD = [
    ("a,4,64,2,16,128,1,1,1,8,8,x\n", 2, "step_time", "not a number"),
    ("a,4,64,2,16,128,1,1,1,8,8,0.1\na,4,64,2,16,128,1,1,1,8,8,0.1\n", 3, "run", "appears twice"),
    ("a,4,64,2,16,128,2,1,3,8,8,0.1\n", 2, "gpus", "does not divide"),
    ("a,4,64,2,16,128,1,1,1,8,3,0.1\n", 2, "batch", "does not divide"),
    ("a,4,64,2.5,16,128,1,1,1,8,8,0.1\n", 2, "layers", "whole number"),
    ("a,4,64,2,16,128,1,1,1,8,8,-1\n", 2, "step_time", "positive"),
    ("a,4,64,2,16\n", 2, "vocab", "no value"),
]


@pytest.mark.parametrize("rows,line,col,what", BAD)
def test_bad_csv_is_a_located_error(write_plan, rows, line, col, what):
    plan = _toy(write_plan, rows)
    with pytest.raises(PlanError) as e:
        dsl.load(plan)
    d = next(d for d in e.value.diagnostics if d.code == "bad-data")
    assert d.span.file.endswith("runs.csv") and d.span.line == line
    assert f"row {line}" in d.summary and f"'{col}'" in d.summary and what in d.summary
    code, out, err = run_main("eval", str(plan))
    assert code == 1 and "Traceback" not in err
    assert f"runs.csv:{line}:" in err and "error[bad-data]" in err


def test_bad_cell_caret_spans_the_cell(write_plan):
    plan = _toy(write_plan, "a,4,64,2,16,128,1,1,1,8,8,oops\n")
    with pytest.raises(PlanError) as e:
        dsl.load(plan)
    d = next(d for d in e.value.diagnostics if d.code == "bad-data")
    # "a,4,64,2,16,128,1,1,1,8,8," is 26 characters: the cell starts at column 27
    assert (d.span.line, d.span.column, d.span.end_column) == (2, 27, 31)


def test_missing_column(write_plan):
    write_plan("run,heads,hidden\na,4,64\n", "runs.csv")
    plan = write_plan(TOY_PLAN.format(rows=""))
    with pytest.raises(PlanError) as e:
        dsl.load(plan)
    assert any(d.code == "bad-data" and "no column 'layers'" in d.summary for d in e.value.diagnostics)


@pytest.mark.parametrize("block,code,what", [
    ('fit = ["matmul_eficiency"]', "unknown-name", "not a field calibration can fit"),
    ('fit = ["mfu", "matmul_efficiency"]', "out-of-range", "fitted alone"),
    ('fit = ["mfu"]; rows = ["c"]', "unknown-name", "no run 'c'"),
])
def test_bad_block_is_located_at_the_parameter(write_plan, block, code, what):
    write_plan(TOY_HEADER + f"a,4,64,2,16,128,1,1,1,8,8,{TOY_FLOPS / 0.4e12!r}\n", "runs.csv")
    plan = write_plan(TOY_PLAN.format(rows="").replace('fit = ["mfu"]', block))
    with pytest.raises(PlanError) as e:
        dsl.load(plan)
    d = next(d for d in e.value.diagnostics if d.code == code)
    assert what in d.summary and d.span.line == 6
    code_, _, err = run_main("eval", str(plan))
    assert code_ == 1 and "Traceback" not in err


# ---------------------------------------------------------------- the validation set
def _validation():
    ws = dsl.load(CASE)
    return ws, {r[0]: r for r in cal._table(ws, "fit").rows}


@pytest.fixture(scope="module")
def validation():
    return _validation()


def test_validation_table_lists_every_run(validation):
    ws, rows = validation
    assert list(rows) == [r.name for r in RUNS]
    # the published throughput is the measured column, to its printed digits
    for name, row in _published().items():
        assert float(rows[name][3]) == pytest.approx(float(row["achieved_tflops"]), abs=0.5e-3 * 163)
    assert [rows[n][-1] for n in rows].count("fit") == 1 and rows["1.7B"][-1] == "fit"


@pytest.mark.parametrize("name", [r.name for r in RUNS])
def test_prediction_within_15_percent(validation, name):
    """Fitted on the 1.7 B run (tp = pp = 1: compute, recomputation and an overlapped all-reduce,
    so the fit measures the device, not the layout), every run of the table is predicted
    within 15 % of its published throughput — no row needs an exception."""
    _, rows = validation
    err = float(rows[name][5])
    assert abs(err) <= 15, f"{name}: predicted {rows[name][4]} TFLOP/s vs published {rows[name][3]} ({err:+.1f} %)"


def test_39b_plan_prices_the_tables_prediction(validation, qval):
    """The case's `gpt_39b` plan (`use layout` in the roofline mode on the fitted device
    `a100_fit`, the pipeline on the event engine) gives the step the table predicts for the 39 B
    run (closed-form bubble) within 1 %."""
    ws, rows = validation
    assert qval(ws, "gpt_39b.step_time", "s") == pytest.approx(float(rows["39B"][2]), rel=0.01)


def test_readme_table_is_current():
    """README.md's validation table is what benchmarks/calibration_table.py prints today."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("calibration_table", REPO_ROOT / "benchmarks" / "calibration_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert mod.markdown() in readme, "rerun `python benchmarks/calibration_table.py --write` and commit README.md"


def test_fit_is_deterministic():
    a = cal.fit(RUNS, _hw(), ["mfu"], RUNS[:1])
    b = cal.fit(RUNS, _hw(), ["mfu"], RUNS[:1])
    assert a == b and math.isfinite(a["values"]["mfu"])


def _hw():
    return {"peak": 312e12, "mem_bw": 2039e9, "gph": 8, "link": 300e9, "nic": 25e9, "nics": 8, "latency": 0.0,
            "values": {}}


@pytest.mark.parametrize("name", ["mfu", "matmul_efficiency", "mem_efficiency", "matmul_half_flops"])
@pytest.mark.parametrize("rows", [("1.7B",), ("1.7B", "18B"), ("1.7B", "39B", "145B", "1T")])
def test_one_field_fit_is_as_good_as_scipy_trf(name, rows):
    """A single field is fitted without scipy (Gauss–Newton, polished at float resolution).
    Independent reference: scipy's trust-region reflective least squares on the same bounded
    problem (same residuals, start and bounds, tolerances 1e-12).  One run: a sum of squares no
    larger than trf's and the same root to 1e-12; several: a sum of squares equal to float
    rounding (1e-14 relative), the same field value to 1e-7 (√ε times the conditioning)."""
    import numpy as np
    from scipy.optimize import least_squares

    selected = [BY_NAME[r] for r in rows]
    got = cal.fit(RUNS, _hw(), [name], selected)
    measured = np.array([cal.measured_step(r, "narayanan2021") for r in selected])
    mode = "mfu" if name == "mfu" else "roofline"
    _key, _unit, (lo, hi), scale = cal.FIELDS[name]
    log = scale == "log"
    lo, hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)

    def residuals(x):
        v = 10 ** x[0] if log else float(x[0])
        pred = np.array([p["step"] for p in cal.predict(selected, dict(_hw(), values={name: v}), mode)])
        return pred / measured - 1

    ref = least_squares(residuals, np.array([(lo + hi) / 2]), bounds=([lo], [hi]), method="trf", x_scale="jac",
                        xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=2000)
    want = 10 ** ref.x[0] if log else float(ref.x[0])
    assert got["status"] > 0
    if len(rows) == 1:      # trf stops within its tolerance of the root; this fit at its float
        assert got["cost"] <= ref.cost
        assert got["values"][name] == pytest.approx(want, rel=1e-12)
    else:
        assert got["cost"] <= ref.cost * (1 + 1e-14)
        # a sum of squares equal to float rounding pins its minimiser only to about √ε ≈ 1.5e-8
        # relative, times the problem's conditioning (scipy 1.17's trf stops 1.4e-8 from this
        # fit on four runs, with the same cost): 1e-7
        assert got["values"][name] == pytest.approx(want, rel=1e-7)

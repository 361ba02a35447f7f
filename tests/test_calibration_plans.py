"""Calibration against measured runs written as plans (``use calibrate { plans = [...] }``,
plugins/training/calibrate_plans.py) and the computed quantities it rests on
(``PlanContext.define_computed``).

Measured numbers come from NVIDIA's DGX Cloud Benchmarking tables as
specs/data/validation/training-runs.csv records them (with their source); the criterion "within
10 %" is the acceptance bound for calibrating those runs.  The other checks are identities: a
fit to a measurement that *is* the model's own prediction on the catalog device must return the
catalog's value (h100_sxm.matmul_efficiency = 0.812, cited in specs/catalog/hardware.plan).
"""
from __future__ import annotations

import csv

import pytest

import dsl
from conftest import REPO_ROOT
from dsl.syntax.diagnostics import PlanError

CASE = REPO_ROOT / "specs" / "cases" / "calibrate-dgxc-h100.plan"
CORPUS = REPO_ROOT / "specs" / "data" / "validation" / "training-runs.csv"

HEAD = '''import "@catalog/hardware.plan"
model llama8b from "@catalog/hf/Llama-3.1-8B.json"
workload w { tokens = 1e12 token; seq_len = 8192 token; global_batch = 128 seq }
'''


def run(name: str, measured: str, extra: str = "", device: str = "h100_sxm", tp: int = 1) -> str:
    return f'''plan {name} {{
  model = llama8b; workload = w; device = {device}
  {measured}
  gpus = 8; gpus_per_host = 8; micro_batch = 1 seq
  use memory {{ weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }}
  use layout {{ tp = {tp}; pp = 1; cp = 2; zero = 1; recompute = "none"; efficiency = "roofline"
    link = nvlink4; nic = ib_ndr_400g; nics_per_host = 8 }}
  {extra}
}}
'''


@pytest.fixture(scope="module")
def case():
    return dsl.load(str(CASE))


def _corpus():
    with open(CORPUS, newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def _runs_within_10_percent(case, quantity, bf16):
    """The DGX Cloud runs of one precision as ``quantity``'s fit sees them: all 14 there, each
    measured step = global batch · sequence / tokens per second (the source's throughput), each
    predicted within 10 %.  :returns: the fit's detail."""
    rows = {r["id"]: r for r in _corpus().values()
            if r["source_id"].startswith("dgxc-benchmarking") and (r["precision"] == "BF16") == bf16}
    detail = case.computed_detail(quantity)
    got = {r["run"]: r for r in detail["rows"]}
    assert set(got) == set(rows) and len(rows) == 14
    for rid, r in rows.items():
        measured = int(r["global_batch"]) * int(r["seq_len"]) / float(r["measured"])
        assert got[rid]["measured_step"] == pytest.approx(measured, rel=1e-12)
        assert abs(got[rid]["predicted_step"] / measured - 1) < 0.10, rid
    return detail


def test_dgx_cloud_bf16_llama_runs_calibrate_within_10_percent(case):
    detail = _runs_within_10_percent(case, "dgxc_fit.sustained_efficiency", bf16=True)
    eta = detail["values"]["sustained_efficiency"]
    assert 0.001 < eta < 1          # an interior optimum, not the bound the GPT-only calibration hit


def test_dgx_cloud_fp8_llama_runs_calibrate_within_10_percent(case):
    """The same runs in FP8, fitted on the share of the FP8 curve whole steps sustain (three
    runs): one field cannot follow the measured FP8 speedup, which grows with the model (1.33x
    for 70B on 64 GPUs, 1.53x for 405B on 576: the corpus's measurements), so 70B is predicted
    fast; every run lies within the same 10 % as the BF16 runs, and the fit's optimum is inside
    its bounds."""
    detail = _runs_within_10_percent(case, "dgxc_fit_fp8.fp8_sustained_efficiency", bf16=False)
    assert 0.001 < detail["values"]["fp8_sustained_efficiency"] < 1


def test_the_fitted_device_carries_into_another_plan(case):
    detail = case.computed_detail("dgxc_fit.sustained_efficiency")
    table = {r["run"]: r["predicted_step"] for r in detail["rows"]}
    assert case.get("llama70b_64_calibrated.step_time", "s") == pytest.approx(table["dgxc_70b_bf16_64"], rel=1e-9)
    assert case.get("h100_dgxc.sustained_efficiency", "%") == pytest.approx(
        100 * detail["values"]["sustained_efficiency"], rel=1e-12)


def test_the_table_lists_every_run():
    from conftest import run_cli
    code, out, err = run_cli("eval", str(CASE), "--plan", "dgxc_fit")
    assert code == 0, err
    lines = [ln.split() for ln in out.splitlines() if ln.startswith("  dgxc_")]
    assert len(lines) == 14          # the BF16 runs (--plan keeps the calibrating plan's own runs)
    assert sorted(ln[-1] for ln in lines).count("fit") == 3 and "fitted: sustained_efficiency" in out


def test_a_fit_to_the_models_own_prediction_returns_the_catalog_value(write_plan, qval):
    # the measurement is the twin's own step time on the catalog H100: the least-squares optimum
    # is the catalog's matmul_efficiency, 0.812
    text = HEAD + run("twin", "") + run("r", "measured_step_time = twin.step_time") + '''
plan fit { device = h100_sxm; use calibrate { plans = [r]; fit = ["matmul_efficiency"] } }
'''
    res = dsl.load(str(write_plan(text)))
    assert res.get("fit.matmul_efficiency", "%") == pytest.approx(81.2, rel=1e-6)
    assert res.get("fit.fit_rms_error", "%") == pytest.approx(0, abs=1e-4)


def test_a_slower_measurement_lowers_the_efficiency_in_proportion_to_compute(write_plan):
    # measured 10 % slower than the twin: the fitted efficiency is below 0.812, and the run priced
    # at it matches the measurement (one run, one field: the residual is zero)
    text = HEAD + run("twin", "") + run("r", "measured_step_time = 1.1 * twin.step_time") + '''
plan fit { device = h100_sxm; use calibrate { plans = [r]; fit = ["matmul_efficiency"] } }
device h100_fit extends h100_sxm { matmul_efficiency = fit.matmul_efficiency }
plan check extends twin { device = h100_fit }
'''
    res = dsl.load(str(write_plan(text)))
    assert res.get("fit.matmul_efficiency", "%") < 81.2
    assert res.get("check.step_time", "s") == pytest.approx(1.1 * res.get("twin.step_time", "s"), rel=1e-6)


def test_a_link_field_can_be_fitted(write_plan):
    # two runs whose measurements are their twins' own step times on the catalog devices: the
    # optimum is the catalog's values, 81.2 % and nvlink4's stated efficiency
    text = (HEAD + run("twin1", "") + run("r1", "measured_step_time = twin1.step_time")
            + run("twin2", "", tp=4) + run("r2", "measured_step_time = twin2.step_time", tp=4) + '''
plan fit { device = h100_sxm
  use calibrate { plans = [r1, r2]; fit = ["matmul_efficiency", "nvlink4.efficiency"] } }
''')
    pytest.importorskip("scipy")
    res = dsl.load(str(write_plan(text)))
    assert res.get("fit.matmul_efficiency", "%") == pytest.approx(81.2, rel=1e-4)
    assert res.get("fit.nvlink4_efficiency", "%") == pytest.approx(82.4, rel=1e-3)
    assert res.get("fit.fit_rms_error", "%") == pytest.approx(0, abs=1e-3)


@pytest.mark.parametrize("body, code, what", [
    (run("r", "") + 'plan fit { device = h100_sxm; use calibrate { plans = [r]; fit = ["matmul_efficiency"] } }',
     "missing-field", "states no measurement"),
    ('plan r { device = h100_sxm; measured_step_time = 1 s }\n'
     'plan fit { device = h100_sxm; use calibrate { plans = [r]; fit = ["matmul_efficiency"] } }',
     "missing-quantity", "prices no training step"),
    (run("r", "measured_step_time = 10 s") +
     'plan fit { device = h100_sxm; use calibrate { plans = [r]; fit = ["mfu"] } }', "unknown-name", "not mfu"),
    (run("r", "measured_step_time = 10 s") +
     'plan fit { device = h100_sxm; use calibrate { plans = [r]; fit = ["peak_efficiency"] } }',
     "unknown-name", "states no field 'peak_efficiency'"),
    (run("r", "measured_step_time = 10 s") +
     'plan fit { device = h100_sxm; use calibrate { plans = [r]; rows = ["q"]; fit = ["matmul_efficiency"] } }',
     "unknown-name", "'q' is not one of the runs"),
    (run("r", "measured_step_time = 10 s") +
     'plan fit { device = h100_sxm; use calibrate { fit = ["matmul_efficiency"] } }',
     "missing-parameter", "exactly one of `plans`"),
    (run("r", "measured_step_time = 10 s", device="a100_sxm_80gb") +
     'plan fit { device = h100_sxm; use calibrate { plans = [r]; fit = ["matmul_efficiency"] } }',
     "unknown-name", "does not depend on matmul_efficiency"),
])
def test_bad_calibration_is_a_located_error(write_plan, body, code, what):
    with pytest.raises(PlanError) as e:
        dsl.load(str(write_plan(HEAD + body)))
    d = [x for x in e.value.diagnostics if x.severity == "error"]
    assert d and d[0].code == code and what in d[0].summary, [str(x) for x in d]
    assert d[0].span is not None and d[0].span.line >= 1


def test_one_plan_of_the_file_evaluates_alone(case):
    """`--plan` keeps what the plan reads — the calibrated device's fit and its runs — and drops a
    declaration that reads a plan it skips (the calibrated device, for a run plan alone)."""
    from conftest import run_cli
    code, out, err = run_cli("eval", str(CASE), "--plan", "dgxc_8b_bf16_8")
    assert code == 0 and "error" not in err, err
    code, out, err = run_cli("get", str(CASE), "llama70b_64_calibrated.step_time")
    assert code == 0, err
    r = dsl.load(str(CASE), plans=["llama70b_64_calibrated"])
    assert r.get("llama70b_64_calibrated.step_time", "s") == pytest.approx(
        case.get("llama70b_64_calibrated.step_time", "s"), rel=1e-12)


def test_a_mixture_of_experts_run_calibrates_like_a_dense_one(write_plan):
    """An MoE run (Qwen3-30B-A3B, EP 8) written as a plan: the fit to its twin's own step time on
    the catalog H100 gives back the catalog's matmul_efficiency, 81.2 % (an identity)."""
    text = '''import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e11 token; seq_len = 4096 token; global_batch = 64 seq }
plan twin { model = qwen3_30b_a3b; workload = w; device = h100_sxm
  gpus = 8; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 1; pp = 1; ep = 8; zero = 1; efficiency = "roofline"; link = nvlink4 }
}
plan r extends twin { measured_step_time = twin.step_time }
plan fit { device = h100_sxm; use calibrate { plans = [r]; fit = ["matmul_efficiency"] } }
'''
    res = dsl.load(str(write_plan(text)))
    assert res.get("fit.matmul_efficiency", "%") == pytest.approx(81.2, rel=1e-6)


def test_a_field_with_a_unit_is_fitted_in_its_unit(write_plan):
    """A link's bandwidth (Gbit/s, not a plain number) can be fitted: measured as the step of a
    twin whose NIC runs at 200 Gbit/s, the fit of the catalog's 400 Gbit/s NIC returns 200 Gbit/s
    (an identity), shown in the field's own unit."""
    text = '''import "@catalog/hardware.plan"
model llama8b from "@catalog/hf/Llama-3.1-8B.json"
workload w { tokens = 1e12 token; seq_len = 8192 token; global_batch = 128 seq }
link slow_ib extends ib_ndr_400g { bandwidth = 200 Gbit/s }
plan twin { model = llama8b; workload = w; device = h100_sxm
  gpus = 16; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 1; pp = 1; zero = 3; prefetch = false; efficiency = "roofline"
               link = nvlink4; nic = slow_ib; nics_per_host = 1 } }
plan r extends twin { measured_step_time = twin.step_time; use layout { nic = ib_ndr_400g } }
plan fit { device = h100_sxm; use calibrate { plans = [r]; fit = ["ib_ndr_400g.bandwidth"] } }
'''
    res = dsl.load(str(write_plan(text)))
    assert res.nodes["fit.ib_ndr_400g_bandwidth"].unit == "Gbit/s"
    assert res.get("fit.ib_ndr_400g_bandwidth", "Gbit/s") == pytest.approx(200, rel=1e-6)

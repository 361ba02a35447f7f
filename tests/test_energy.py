"""Energy and carbon quantities (plugins/hardware/energy.py) against published figures and hand
computations.

The published rows (specs/data/energy/published.csv) price each run as a plan of
specs/cases/energy-carbon.plan: its GPU-hours at the device's board power, times the grid's
carbon intensity.  Each tolerance is the rounding of the published figure (the CSV names its
origin), not a fit.
"""
from __future__ import annotations

import csv
from fractions import Fraction

import pytest

import dsl
from dsl.engine.units import convert
from dsl.syntax.diagnostics import PlanError
from conftest import REPO_ROOT

CASE = REPO_ROOT / "specs" / "cases" / "energy-carbon.plan"
ROWS = list(csv.DictReader((REPO_ROOT / "specs" / "data" / "energy" / "published.csv").open(encoding="utf-8")))


@pytest.fixture(scope="module")
def ev():
    return dsl.load(CASE)


def _v(ev, name, unit):
    return convert(float(ev.base_value(name)), unit)


@pytest.mark.parametrize("row", ROWS, ids=[r["plan"] for r in ROWS])
def test_published_run(ev, row):
    p = row["plan"]
    assert _v(ev, f"{p}.gpu_hours", "h") == pytest.approx(float(row["gpu_hours"]), rel=1e-12)
    assert _v(ev, f"{p}.power_per_gpu", "W") == float(row["board_power_w"])
    if row["published_energy_kwh"]:
        assert abs(_v(ev, f"{p}.energy", "kWh") - float(row["published_energy_kwh"])) <= float(row["energy_tolerance_kwh"])
    assert abs(_v(ev, f"{p}.carbon", "t") - float(row["published_carbon_t"])) <= float(row["carbon_tolerance_t"])


def test_bloom_by_hand(ev):
    # 1,082,990 h × 400 W = 433,196 kWh; × 57 g/kWh = 24,692,172 g
    assert ev.base_value("bloom_176b.energy") == 1082990 * 400 * 3600
    assert ev.base_value("bloom_176b.carbon") == Fraction(433196 * 57, 1000)


def test_facility_terms_by_hand(ev):
    p = "qwen3_cpt"
    pw = (700 + 150) * Fraction(12, 10)                       # (TDP + host) · PUE = 1,020 W
    assert ev.base_value(f"{p}.power_per_gpu") == pw
    step = ev.base_value(f"{p}.step_time")
    assert ev.base_value(f"{p}.energy_per_step") == step * 64 * pw
    hours = 64 * ev.base_value(f"{p}.finish_time")             # GPU-seconds
    assert ev.base_value(f"{p}.gpu_hours") == hours
    energy = hours * pw
    assert ev.base_value(f"{p}.energy") == energy
    assert ev.base_value(f"{p}.energy_per_token") == energy / Fraction(100 * 10**9)
    assert ev.base_value(f"{p}.carbon") == energy / 3600000 * Fraction(400, 1000)   # 400 g/kWh in kg
    assert ev.base_value(f"{p}.energy_cost") == energy / 3600000 * Fraction(1, 10)
    assert float(ev.base_value(f"{p}.gpu_cost")) == pytest.approx(float(hours / 3600 * 2), rel=1e-12)


TRAINING = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq; deadline = 9 day }
plan p {
  model = qwen3_8b; workload = w; device = DEVICE; gpus = 8; mfu = 40 %
  use compute {}
  use finish {}
}
"""


def test_every_training_plan_gets_energy_without_a_block(tmp_path):
    f = tmp_path / "t.plan"
    f.write_text(TRAINING.replace("DEVICE", "h100_sxm"), encoding="utf-8")
    ev = dsl.load(f)
    assert ev.base_value("p.energy_per_step") == ev.base_value("p.step_time") * 8 * 700
    assert ev.base_value("p.energy") == 8 * ev.base_value("p.finish_time") * 700
    assert ev.base_value("p.energy_per_token") == ev.base_value("p.energy") / 10**9
    names = {n.name for n in ev.headline("p")}
    assert "energy" not in names and "carbon" not in names     # standard, not headline, without `use energy`


def test_a_device_without_power_gets_none(tmp_path):
    f = tmp_path / "t.plan"
    f.write_text(TRAINING.replace("DEVICE", "d")
                 + "device d { peak_flops = 989.4 TFLOP/s; memory = 80 GB; mem_bw = 3350 GB/s }\n", encoding="utf-8")
    ev = dsl.load(f)
    assert ev.has("p.step_time") and not ev.has("p.energy") and not ev.has("p.power_per_gpu")


def test_use_energy_on_a_device_without_power_is_located(tmp_path):
    f = tmp_path / "t.plan"
    f.write_text("device d { memory = 80 GB }\nplan p { device = d; gpus = 8\n"
                 "  use energy { gpu_hours = 10 h }\n}\n", encoding="utf-8")
    with pytest.raises(PlanError) as exc:
        dsl.load(f)
    d = [d for d in exc.value.diagnostics if d.code == "missing-parameter"]
    assert d and "power" in d[0].summary and "power = " in d[0].hint


def test_serving_energy_per_token(tmp_path):
    f = tmp_path / "s.plan"
    f.write_text('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'
                 "plan s {\n  model = qwen3_8b; device = h100_sxm\n"
                 "  use serving_step { batch = 32 seq; context = 2048 token; prefill = 2048 token }\n"
                 "  use energy { pue = 1.1 }\n}\n", encoding="utf-8")
    ev = dsl.load(f)
    assert ev.base_value("s.energy_per_token") == 700 * Fraction(11, 10) / ev.base_value("s.decode_tokens_per_s")

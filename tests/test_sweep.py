"""`plan sweep` (issue 12 item 5) on the design case of book ch. 10 §10.6.1: 48 RTX 4090s at
40 % MFU finish in ~24.6 days, 32 in ~34.3 days; 32 GPUs meet the 30-day deadline only from
~47 % MFU."""
from __future__ import annotations

import csv
import sys

import pytest

np = pytest.importorskip("numpy")

from dsl.results import sweep  # noqa: E402
from dsl.syntax.diagnostics import PlanError  # noqa: E402

CASE = "specs/cases/cpt-qwen3-8b-4090.plan"


def test_compiled_finish_time_matches_the_book(case_ws):
    fn, ids, units, reqs = sweep.compile_outputs(case_ws, "gpus48", ["gpus48.mfu", "gpus48.gpus"],
                                                 ["gpus48.finish_time"], requirements=False)
    (out,) = fn(np.array([0.40, 0.40]), np.array([48.0, 32.0]))
    assert out / 86400 == pytest.approx([24.6, 34.3], abs=0.05)


def test_grid_feasibility_of_32_gpus(case_ws):
    vs = [sweep.parse_vary(case_ws, "gpus32.mfu=40%:50%:101")]
    res = sweep.run(case_ws, "gpus32", vs)
    assert len(res) == 101 and res.units["gpus32.mfu"] == "%"
    ok = res.columns["gpus32.mfu"][res.columns["meets_deadline"]]
    # the smallest feasible MFU on a 0.1 % grid is the book's ~47 %
    assert ok.min() == pytest.approx(47, abs=0.5)
    s = res.summary()
    assert s["ranges"]["gpus32.mfu"][1] == pytest.approx(50)
    assert s["failing"]["fits_memory"] == 0.0
    # finish time at 40 % is the book's 34.3 days
    assert res.columns["finish_time"][0] == pytest.approx(34.3, abs=0.05)


def test_declared_range_and_random_sampling(case_ws):
    v = sweep.parse_vary(case_ws, "gpus48.mfu")
    assert (v.start, v.stop, v.n) == (0.30, 0.50, 21)
    a = sweep.run(case_ws, "gpus48", [v], random=1000, seed=3)
    b = sweep.run(case_ws, "gpus48", [v], random=1000, seed=3)
    assert np.array_equal(a.columns["finish_time"], b.columns["finish_time"])
    assert a.columns["gpus48.mfu"].min() >= 30 and a.columns["gpus48.mfu"].max() <= 50
    # hand: 48 GPUs miss the deadline below ~31.3 % (40 % · 52.2 s / (67.2 − 0.58) s, §10.6.2)
    fails = a.columns["gpus48.mfu"][~a.columns["meets_deadline"]]
    assert fails.max() == pytest.approx(40 * 52.2 / (67.2 - 0.58), abs=0.2)


@pytest.mark.parametrize("spec, msg", [
    ("gpus48.gpus", "has no declared range"),
    ("gpus48.mfu=30 s:50 s:3", "is not a value in the unit of 'gpus48.mfu'"),
    ("gpus48.mfu=30%:50%:1", "at least 2"),
    ("gpus48.mfu=30%", "bad --vary"),
])
def test_bad_vary(case_ws, spec, msg):
    with pytest.raises(PlanError) as e:
        sweep.parse_vary(case_ws, spec)
    assert msg in e.value.diagnostics[0].summary


def test_cli_csv(run_cli, tmp_path):
    out = tmp_path / "s.csv"
    rc, so, err = run_cli("sweep", CASE, "--vary", "gpus32.mfu=30%:50%:5", "--vary", "gpus32.gpus=32:48:3",
                          "--out", out)
    assert rc == 0, err
    assert "plan gpus32: 15 points (grid)" in so and "requirement meets_deadline" in so
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 15
    row = next(r for r in rows if float(r["gpus32.mfu [%]"]) == 40 and float(r["gpus32.gpus"]) == 48)
    assert float(row["finish_time [day]"]) == pytest.approx(24.6, abs=0.05)
    assert row["meets_deadline"] == "true"
    rc, _, err = run_cli("sweep", CASE, "--vary", "gpus32.nope=1:2:3")
    assert rc == 2 and "error[unknown-name]" in err       # a bad --vary is a bad command line


def test_missing_numpy_is_explained(monkeypatch, capsys):
    from dsl.cli import main
    monkeypatch.setitem(sys.modules, "numpy", None)
    rc = main(["sweep", CASE, "--vary", "gpus48.mfu"])
    err = capsys.readouterr().err
    assert rc == 3                      # a missing package: exit 3, as for every command
    assert 'plan sweep needs numpy (a dependency of plan-dsl): pip install numpy' in err


def test_to_frame_without_pandas(case_ws, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    res = sweep.run(case_ws, "gpus48", [sweep.parse_vary(case_ws, "gpus48.mfu=30%:50%:3")])
    frame = res.to_frame()
    assert isinstance(frame, dict) and list(frame["gpus48.mfu"]) == [30, 40, 50]


def test_file_level_requirement_on_the_plan_counts_in_feasibility(tmp_path):
    """A file-level `require` that reads the swept plan is a requirement column of its sweep:
    the design case's 32-GPU plan finishes in 30 days from an MFU of about 47 % (the book), so a
    file-level gate of 30 days fails below it, as the plan's own meets_deadline does."""
    import shutil

    from dsl.results.evaluation import evaluate_file
    src = sweep.__file__.rsplit("dsl", 1)[0] + "specs/cases/cpt-qwen3-8b-4090.plan"
    f = tmp_path / "case.plan"
    shutil.copy(src, f)
    f.write_text(f.read_text(encoding="utf-8").replace('import "../catalog/', 'import "@catalog/')
                 + "\nrequire month: gpus32.finish_time <= 30 day\n", encoding="utf-8")
    ws = evaluate_file(str(f))
    res = sweep.run(ws, "gpus32", [sweep.parse_vary(ws, "gpus32.mfu=40%:50%:101")])
    assert "month" in res.requirements
    assert (res.columns["month"] == (res.columns["finish_time"] <= 30 + 1e-9)).all()
    ok = res.columns["gpus32.mfu"][res.columns["month"]]
    assert ok.min() == pytest.approx(47, abs=0.5)
    assert not res.columns["feasible"][~res.columns["month"]].any()

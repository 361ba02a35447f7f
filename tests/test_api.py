"""The notebook API (issue 12 item 9) on the design case of book ch. 10 §10.6.1."""
from __future__ import annotations

import sys

import pytest
import sympy as sp


def test_plan_handle_values(case_ws):
    p = case_ws["gpus48"]
    assert p.value("finish_time") == pytest.approx(24.6, abs=0.05)          # book: ~24.6 days
    assert p.value("finish_time", "h") == pytest.approx(24.6 * 24, abs=1.2)
    assert p.value("step_time", "s") == pytest.approx(52.8, abs=0.05)       # book: 52.8 s
    assert p.value("cpt.deadline", "day") == 30
    assert p.value("memory.usable", "GiB") == 22
    assert case_ws["gpus32"].requirements["meets_deadline"] is False
    assert case_ws["gpus48"].requirements["meets_deadline"] is True


def test_expr_is_symbolic(case_ws):
    e = case_ws["gpus48"].expr("compute_time")
    names = {s.name for s in e.free_symbols}
    assert {"gpus48.mfu", "gpus48.gpus", "rtx4090.peak_flops"} <= names
    # compute time ∝ 1/MFU: doubling MFU halves it
    mfu = sp.Symbol("gpus48.mfu", real=True)
    assert sp.simplify(e.subs(mfu, 2 * mfu) / e) == sp.Rational(1, 2)


def test_errors(case_ws):
    from dsl.syntax.diagnostics import PlanError
    from dsl.engine.units import UnitError
    with pytest.raises(KeyError, match="did you mean 'gpus48'"):
        case_ws["gpus84"]
    with pytest.raises(PlanError):
        case_ws["gpus48"].value("finish_tme")
    with pytest.raises(UnitError):
        case_ws["gpus48"].value("finish_time", "GB")


def test_html_display_and_reports(case_ws):
    html = case_ws["gpus48"]._repr_html_()
    assert html.startswith("<!DOCTYPE html>") and "<math" in html and 'id="plan-gpus48"' in html
    assert 'id="plan-gpus32"' not in html
    md = case_ws["gpus48"].report("md")
    assert "## plan `gpus48`" in md
    assert "gpus48.finish_time" in case_ws["gpus48"].explain("finish_time").splitlines()[0]


def test_sweep_without_pandas_gives_arrays(case_ws, monkeypatch):
    pytest.importorskip("numpy")
    monkeypatch.setitem(sys.modules, "pandas", None)
    r = case_ws["gpus32"].sweep(mfu=("40 %", "50 %", 11))
    assert list(r["gpus32.mfu"]) == pytest.approx([40 + i for i in range(11)])
    # book: 32 GPUs need ~47 % MFU to meet the deadline
    ok = r["gpus32.mfu"][r["meets_deadline"]]
    assert ok.min() == pytest.approx(47, abs=0.5)


def test_sweep_dataframe_when_pandas_is_installed(case_ws):
    pd = pytest.importorskip("pandas")
    df = case_ws["gpus48"].sweep(mfu=None)
    assert isinstance(df, pd.DataFrame) and len(df) == 21

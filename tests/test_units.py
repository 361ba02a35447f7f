"""Units: parsing, exact conversion, hints for unknown units, dimension algebra, formatting.

Expected values are worked out by hand in each test (powers of ten and two), never read back
from the code under test.
"""
from __future__ import annotations

from fractions import Fraction

import pytest

import dsl
from dsl.syntax.diagnostics import PlanError
from dsl.syntax.parser import parse_expression
from dsl.engine.units import (DIMENSIONLESS, Dim, UnitError, check_unit_for, convert, default_unit_for,
                       format_dim, format_number, format_quantity, parse_unit, unit_hint)

TIME, INFO, FLOP = Dim.of(time=1), Dim.of(info=1), Dim.of(flop=1)


# ---------------------------------------------------------------- parsing and scale

@pytest.mark.parametrize("unit,scale,dim", [
    ("B", 1, INFO),
    ("kB", 1000, INFO),
    ("GB", 10**9, INFO),
    ("TB", 10**12, INFO),
    ("KiB", 1024, INFO),
    ("MiB", 1024 * 1024, INFO),
    ("GiB", 1024 ** 3, INFO),
    ("TiB", 1024 ** 4, INFO),
    ("bit", Fraction(1, 8), INFO),
    ("Gbit", Fraction(10**9, 8), INFO),
    ("FLOP", 1, FLOP),
    ("TFLOP", 10**12, FLOP),
    ("PFLOP", 10**15, FLOP),
    ("ns", Fraction(1, 10**9), TIME),
    ("ms", Fraction(1, 1000), TIME),
    ("s", 1, TIME),
    ("min", 60, TIME),
    ("h", 60 * 60, TIME),
    ("day", 24 * 60 * 60, TIME),
    ("week", 7 * 24 * 60 * 60, TIME),
    ("%", Fraction(1, 100), DIMENSIONLESS),
    ("token", 1, Dim.of(token=1)),
    ("param", 1, Dim.of(param=1)),
    ("g", Fraction(1, 1000), Dim.of(mass=1)),
    ("kg", 1, Dim.of(mass=1)),
    ("t", 1000, Dim.of(mass=1)),          # the tonne
    ("Mt", 10**9, Dim.of(mass=1)),
    ("kWh", 3600 * 1000, Dim.of(energy=1)),
    ("MWh", 3600 * 10**6, Dim.of(energy=1)),
    ("kW", 1000, Dim.of(energy=1, time=-1)),
])
def test_unit_scale(unit, scale, dim):
    u = parse_unit(unit)
    assert u.scale == Fraction(scale)
    assert u.dim == dim


@pytest.mark.parametrize("unit,scale,dim", [
    ("GB/s", 10**9, Dim.of(info=1, time=-1)),
    ("Gbit/s", Fraction(10**9, 8), Dim.of(info=1, time=-1)),
    ("TFLOP/s", 10**12, Dim.of(flop=1, time=-1)),
    ("B/param", 1, Dim.of(info=1, param=-1)),
    ("GFLOP/token", 10**9, Dim.of(flop=1, token=-1)),
    ("GiB*s", 2**30, Dim.of(info=1, time=1)),
    ("GB·s", 10**9, Dim.of(info=1, time=1)),
    ("s^-1", 1, Dim.of(time=-1)),
    ("s^2", 1, Dim.of(time=2)),
    ("kB/ms", Fraction(1000, Fraction(1, 1000)), Dim.of(info=1, time=-1)),
    # a grid's carbon intensity: 1 g/kWh is 10^-3 kg per 3.6·10^6 J
    ("g/kWh", Fraction(1, 1000 * 3600 * 1000), Dim.of(mass=1, energy=-1)),
    ("USD/kWh", Fraction(1, 3600 * 1000), Dim.of(USD=1, energy=-1)),
])
def test_compound_units(unit, scale, dim):
    u = parse_unit(unit)
    assert u.scale == Fraction(scale)
    assert u.dim == dim


@pytest.mark.parametrize("alias,canonical", [("tokens", "token"), ("params", "param"), ("FLOPs", "FLOP"),
                                             ("days", "day"), ("hours", "h"), ("sec", "s")])
def test_aliases(alias, canonical):
    a, c = parse_unit(alias), parse_unit(canonical)
    assert (a.scale, a.dim) == (c.scale, c.dim)


def test_gb_and_gib_are_distinct():
    gb, gib = parse_unit("GB"), parse_unit("GiB")
    assert gb.dim == gib.dim
    assert gb.scale != gib.scale
    assert gib.scale - gb.scale == 1_073_741_824 - 1_000_000_000


def test_200_gbit_per_s_is_25_gb_per_s():
    assert 200 * parse_unit("Gbit/s").scale == 25 * parse_unit("GB/s").scale
    assert convert(200 * float(parse_unit("Gbit/s").scale), "GB/s") == pytest.approx(25.0, rel=1e-15)


# ---------------------------------------------------------------- conversion

@pytest.mark.parametrize("base,unit,expected", [
    (86_400, "day", 1.0),
    (3 * 86_400, "h", 72.0),
    (5_400, "h", 1.5),
    (90, "min", 1.5),
    (1.5, "ms", 1500.0),
    (0.4, "%", 40.0),
    (2**30, "GiB", 1.0),
    (2**30, "GB", 1.073741824),
    (10**9, "GiB", 10**9 / 2**30),
    (1e9, "Gbit", 8.0),
    (165.2e12, "TFLOP/s", 165.2),
    (3.5, "", 3.5),
    (3.5, "1", 3.5),
])
def test_convert(base, unit, expected):
    assert convert(base, unit) == pytest.approx(expected, rel=1e-15)


def test_check_unit_for_accepts_same_dimension():
    check_unit_for(INFO, "GiB")
    check_unit_for(INFO, "Gbit")
    check_unit_for(Dim.of(flop=1, time=-1), "TFLOP/s")
    check_unit_for(DIMENSIONLESS, "%")
    check_unit_for(DIMENSIONLESS, "")


@pytest.mark.parametrize("dim,unit", [(TIME, "GB"), (INFO, "s"), (Dim.of(info=1, time=-1), "GB"),
                                      (INFO, ""), (DIMENSIONLESS, "s")])
def test_check_unit_for_rejects_other_dimension(dim, unit):
    with pytest.raises(UnitError) as ei:
        check_unit_for(dim, unit)
    assert ei.value.hint


def test_default_units():
    assert default_unit_for(TIME) == "s"
    assert default_unit_for(INFO) == "GB"
    assert default_unit_for(Dim.of(info=1, time=-1)) == "GB/s"
    assert default_unit_for(Dim.of(flop=1, time=-1)) == "TFLOP/s"
    assert default_unit_for(DIMENSIONLESS) == ""


# ---------------------------------------------------------------- unknown units and hints

@pytest.mark.parametrize("text,must_contain", [
    ("KB", ["kB", "KiB"]),
    ("Gb", ["Gbit", "GB"]),
    ("TFLOPS", ["TFLOP/s"]),
    ("hr", ["h"]),
    ("d", ["day"]),
    ("GiBB", ["GiB"]),
])
def test_unknown_unit_hint(text, must_contain):
    with pytest.raises(UnitError) as ei:
        parse_unit(text)
    assert repr(text) in str(ei.value) or text in str(ei.value)
    for s in must_contain:
        assert s in ei.value.hint
    assert ei.value.hint == unit_hint(text)


def test_unknown_unit_inside_compound():
    with pytest.raises(UnitError) as ei:
        parse_unit("KB/s")
    assert "KB" in str(ei.value)
    assert "kB" in ei.value.hint and "KiB" in ei.value.hint


@pytest.mark.parametrize("text", ["GB /s", "GB//s", "/s", "GB s"])
def test_malformed_unit(text):
    with pytest.raises(UnitError) as ei:
        parse_unit(text)
    assert "malformed" in str(ei.value)


def test_unknown_unit_in_a_plan_file(write_plan):
    p = write_plan("link l { bandwidth = 32 KB/s }\n")
    with pytest.raises(PlanError) as ei:
        dsl.load(p)
    d = [d for d in ei.value.diagnostics if d.severity == "error"]
    assert d and "KB" in d[0].summary
    assert "kB" in d[0].hint and "KiB" in d[0].hint
    assert d[0].span.line == 1


# ---------------------------------------------------------------- dimension algebra

def test_dim_algebra():
    rate = INFO / TIME
    assert rate == Dim.of(info=1, time=-1)
    assert rate * TIME == INFO
    assert (INFO / INFO).dimensionless
    assert TIME ** 2 == Dim.of(time=2)
    assert (TIME ** 2) ** Fraction(1, 2) == TIME
    assert TIME ** 0 == DIMENSIONLESS
    assert Dim.of(info=1, time=0) == INFO


@pytest.mark.parametrize("dim,text", [
    (DIMENSIONLESS, "1"),
    (Dim.of(info=1, time=-1), "B/s"),
    (Dim.of(time=-1), "1/s"),
    (Dim.of(info=1, time=1), "B*s"),
    (Dim.of(flop=1, token=-1), "FLOP/token"),
    (Dim.of(time=2), "s^2"),
])
def test_format_dim(dim, text):
    assert format_dim(dim) == text


@pytest.fixture(scope="module")
def catalog_ws(tmp_path_factory):
    p = tmp_path_factory.mktemp("units") / "cat.plan"
    p.write_text('import "@catalog/hardware.plan"\n', encoding="utf-8")
    return dsl.load(p)


@pytest.mark.parametrize("expr,value,dim", [
    ("200 Gbit/s", 25 * 10**9, Dim.of(info=1, time=-1)),
    ("nic_200g.bandwidth", 25 * 10**9, Dim.of(info=1, time=-1)),
    ("nic_400g.bandwidth / pcie4_x16.bandwidth", Fraction(50, 32), DIMENSIONLESS),
    ("rtx4090.peak_flops", 165_200 * 10**9, Dim.of(flop=1, time=-1)),
    ("rtx4090.memory", 24 * 10**9, INFO),
    ("1 GiB - 1 GB", 2**30 - 10**9, INFO),
    ("1 day / 1 h", 24, DIMENSIONLESS),
    ("2 GB / 1 s * 3 s", 6 * 10**9, INFO),
    ("sqrt(4 s^2)", 2, TIME),
    ("40 %", Fraction(2, 5), DIMENSIONLESS),
    ("1.5 h + 30 min", 2 * 3600, TIME),
    ("storage_7.bandwidth * 1 min", 420 * 10**9, INFO),
])
def test_expression_units(catalog_ws, expr, value, dim):
    v = catalog_ws.eval_expr(parse_expression(expr))
    assert v.dim == dim
    got = v.expr.xreplace({s: catalog_ws.base_value(s.name) for s in v.expr.free_symbols})
    assert got == value


@pytest.mark.parametrize("expr,code", [
    ("1 GB + 1 s", "unit-mismatch"),
    ("1 GB - 1 GB/s", "unit-mismatch"),
    ("ceil(1 GB)", "unit-mismatch"),
    ("max(1 s, 1 GB)", "unit-mismatch"),
])
def test_expression_dimension_errors(tmp_path, expr, code):
    p = tmp_path / "cat.plan"
    p.write_text('import "@catalog/hardware.plan"\n', encoding="utf-8")
    ws = dsl.load(p)
    with pytest.raises(PlanError) as ei:
        ws.eval_expr(parse_expression(expr))
    assert [d.code for d in ei.value.diagnostics] == [code]


# ---------------------------------------------------------------- format_number

@pytest.mark.parametrize("x,text", [
    (0.0, "0"),
    (31790.0, "31,790"),
    (8_190_735_360.0, "8,190,735,360"),
    (114_670_295_040.0, "114,670,295,040"),
    (-42.0, "-42"),
    (12.542738914, "12.54"),
    (52.8, "52.8"),
    (0.5, "0.5"),
    (0.07617058, "0.07617"),
    (-4.3314, "-4.331"),
    (1234.5678, "1,235"),
    (0.46989, "0.4699"),
    (9.99999, "10"),
    (1e-4, "0.0001"),
    (5e-5, "5.000e-05"),
    (1e16, "1.000e+16"),
    (2.5e15, "2.500e+15"),
    (float("nan"), "nan"),
    (float("inf"), "inf"),
    (float("-inf"), "-inf"),
])
def test_format_number(x, text):
    assert format_number(x) == text


def test_format_number_sig():
    assert format_number(3.14159265, sig=2) == "3.1"
    assert format_number(3.14159265, sig=6) == "3.14159"


@pytest.mark.parametrize("base,unit,text", [
    (0.4, "%", "40 %"),
    (12.03, "s", "12.03 s"),
    (2**30 * 12.5, "GiB", "12.5 GiB"),
    (86_400 * 24.6, "day", "24.6 day"),
    (3.0, "", "3"),
])
def test_format_quantity(base, unit, text):
    assert format_quantity(base, unit) == text


# ---------------------------------------------------------------- exchange rates on the command line

def test_plan_get_converts_currency_only_with_a_rate(tmp_path):
    """100 USD at 0.92 EUR/USD is 92 EUR (and 0.092 kEUR); 92 EUR back at the same rate is
    100 USD; a rate per hour unit works on a price per hour (2 USD/h → 1.84 EUR/h)."""
    from conftest import run_main
    f = tmp_path / "c.plan"
    f.write_text("plan p {\n  cost = 100 USD\n  eur = cost * 0.92 EUR/USD\n  price = 2 USD/h\n}\n", encoding="utf-8")
    ok = lambda *a: float(run_main("get", f, *a)[1])  # noqa: E731
    assert ok("p.cost", "--in", "EUR", "--rate", "0.92 EUR/USD") == pytest.approx(92, abs=1e-9)
    assert ok("p.cost", "--in", "kEUR", "--rate", "0.92EUR/USD") == pytest.approx(0.092, abs=1e-12)
    assert ok("p.eur", "--in", "USD", "--rate", "0.92 EUR/USD") == pytest.approx(100, abs=1e-9)
    assert ok("p.price", "--in", "EUR/h", "--rate", "0.92 EUR/USD") == pytest.approx(1.84, abs=1e-12)
    rc, _, err = run_main("get", f, "p.cost", "--in", "EUR")
    assert rc == 2 and "--rate 'R EUR/USD'" in err
    for bad in ("abc", "2 GB/s", "-1 EUR/USD"):
        rc, _, err = run_main("get", f, "p.cost", "--in", "EUR", "--rate", bad)
        assert rc == 2 and "error[usage]" in err and "Traceback" not in err, (bad, err)

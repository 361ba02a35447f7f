"""``Results.value`` (dotted names) and ``Plan.value`` agree in type and unit; the engine's
exact accessor is ``base_value``.  Numbers are hand computations on a small text plan."""
from __future__ import annotations

import pytest
import sympy as sp

import dsl
from dsl.engine.units import UnitError
from dsl.syntax.diagnostics import PlanError

TEXT = "plan p {\n  x = 2 s\n  y = x * 3\n  m = 1536 MiB\n  label = \"a\"\n}\nplan q {\n  z = 5 ms\n}\n"


@pytest.fixture(scope="module")
def r():
    return dsl.load("api-values.plan", text=TEXT)


def test_ws_value_is_plan_value(r):
    # y = 2 s × 3 = 6 s (display unit s); in ms 6000; exact in min: 6/60 = 1/10
    assert r.value("p.y") == r["p"].value("y") == 6.0
    assert isinstance(r.value("p.y"), float)
    assert r.value("p.y", "ms") == r["p"].value("y", "ms") == 6000.0
    assert r.value("p.y", "min", exact=True) == r["p"].value("y", "min", exact=True) == sp.Rational(1, 10)
    # 1536 MiB = 1.5 GiB = 1536 × 2**20 B
    assert r.value("p.m", "GiB") == 1.5
    assert r.value("p.m", "GiB", exact=True) == sp.Rational(3, 2)
    assert r.value("q.z", "s", exact=True) == sp.Rational(1, 200)


def test_base_value_is_exact_in_base_units(r):
    assert r.base_value("p.y") == sp.Integer(6)
    assert r.base_value("q.z") == sp.Rational(1, 200)
    assert r.base_value("p.m") == 1536 * 2 ** 20


def test_wrong_calls_name_the_choices(r):
    with pytest.raises(PlanError, match="p.y"):
        r.value("p.yy")
    with pytest.raises(UnitError) as e:
        r.value("p.y", "GB")
    msg = str(e.value) + " " + (e.value.hint if hasattr(e.value, "hint") else "")
    assert "in s as GB (B)" in msg          # both dimensions: the value's (s) and the unit's (B)
    with pytest.raises(PlanError, match="no numeric value"):
        r.value("p.label")
    with pytest.raises(KeyError, match="plans: p, q"):
        r["nope"]

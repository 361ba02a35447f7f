"""List, string and file parameters of `use` blocks: values reach the plugin typed and in
base units; wrong shapes, units and missing files are errors at the offending text."""
from __future__ import annotations

import sys
import types

import pytest

from dsl.syntax.diagnostics import PlanError
from dsl.plugin import hookimpl
from dsl.results.evaluation import evaluate_file as Workspace
from dsl.plugin.manager import get_plugins
from dsl.plugin import Param, UseSpec

seen: dict = {}


def _make_plugin():
    mod = types.ModuleType("plan_test_kinds")

    @hookimpl
    def plan_blocks_register():
        return [UseSpec("kinds", "test block", params=(
            Param("times", "ms", kind="list", min_items=2, doc="durations"),
            Param("names", kind="list", item="string", optional=True, doc="labels"),
            Param("title", kind="string", default='"none"', doc="a title"),
            Param("data", kind="file", optional=True, doc="a CSV file"),
        ))]

    @hookimpl
    def plan_quantities_price(ctx):
        b = ctx.block("kinds")
        if b is None:
            return
        seen["times"] = b.value("times")
        seen["exprs"] = b.q_list("times")
        seen["names"] = b.value("names")
        seen["title"] = b.value("title")
        seen["data"] = b.path("data")
        import sympy as sp
        ctx.define("total", sp.Add(*b.q_list("times")), "ms", headline=True)

    mod.plan_blocks_register = plan_blocks_register
    mod.plan_quantities_price = plan_quantities_price
    return mod


PLUGIN = _make_plugin()
sys.modules[PLUGIN.__name__] = PLUGIN


def load(tmp_path, body: str, files: dict | None = None) -> Workspace:
    for name, text in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    f = tmp_path / "t.plan"
    f.write_text("workload w { t = 5 ms }\nplan p {\n" + body + "\n}\n")
    return Workspace(f, plugins=get_plugins(extra=(PLUGIN,)))


def codes(exc) -> list[str]:
    return [d.code for d in exc.value.diagnostics]


def test_values_reach_the_plugin(tmp_path):
    ws = load(tmp_path, 'use kinds {\n  times = [10 ms, 0.02 s, w.t]\n  names = ["F", "B",]\n'
                        '  title = "x"\n  data = "d/log.csv"\n}', {"d/log.csv": "a,b\n1,2\n"})
    assert seen["times"] == pytest.approx((0.010, 0.020, 0.005))
    assert seen["names"] == ("F", "B") and seen["title"] == "x"
    assert seen["data"] == (tmp_path / "d" / "log.csv").resolve()
    assert float(ws.base_value("p.total")) == pytest.approx(0.035)
    assert any(s.name == "w.t" for e in seen["exprs"] for s in e.free_symbols)   # items stay symbolic


def test_multiline_list_with_comments(tmp_path):
    load(tmp_path, "use kinds {\n  times = [\n    10 ms,   # first\n    20 ms\n  ]\n}")
    assert seen["times"] == pytest.approx((0.010, 0.020))


@pytest.mark.parametrize("body,code,line", [
    ("use kinds { times = [10 ms, 2 GB] }", "unit-mismatch", 3),
    ("use kinds { times = [10 ms] }", "out-of-range", 3),
    ("use kinds { times = 10 ms }", "type", 3),
    ('use kinds { times = [10 ms, "x"] }', "type", 3),
    ('use kinds { times = [1 ms, 2 ms]; names = ["a", 3] }', "type", 3),
    ('use kinds { times = [1 ms, 2 ms]; data = "missing.csv" }', "missing-file", 3),
    ('use kinds { times = [1 ms, 2 ms]; title = 3 }', "type", 3),
    ("use kinds { times = [1 ms, [2 ms]] }", "type", 3),
])
def test_errors_point_at_the_text(tmp_path, body, code, line):
    with pytest.raises(PlanError) as exc:
        load(tmp_path, body)
    d = next(d for d in exc.value.diagnostics if d.code == code)
    assert d.span is not None and d.span.line == line and d.span.file.endswith("t.plan")
    assert d.hint or code == "type"


def test_list_in_arithmetic_is_a_type_error(tmp_path):
    f = tmp_path / "a.plan"
    f.write_text("workload w {\n  a = [1, 2]\n  b = a * 2\n}\n")
    with pytest.raises(PlanError) as exc:
        Workspace(f)
    d = next(d for d in exc.value.diagnostics if d.severity == "error")
    assert d.code == "type" and "a list" in d.summary and d.span.line == 3



"""A plugin table that cannot be built (a missing optional package, a bug) is reported as a
warning and left out; `plan eval` still prints the plan's values."""
from __future__ import annotations

import sys
import types

from dsl.cli import plugin_tables
from dsl.plugin import hookimpl
from dsl.results.evaluation import evaluate_file as Workspace
from dsl.plugin.manager import get_plugins
from dsl.plugin import Table, TableSpec


def _plugin():
    mod = types.ModuleType("plan_test_bad_table")

    def broken(ws, plan):
        raise RuntimeError("needs numpy: pip install \"plan-dsl[numeric]\"")

    def fine(ws, plan):
        return Table(("a",), ((1,),))

    @hookimpl
    def plan_tables_register():
        return [TableSpec("zz-broken", "Broken", broken), TableSpec("zz-fine", "Fine", fine)]

    mod.plan_tables_register = plan_tables_register
    return mod


PLUGIN = _plugin()
sys.modules[PLUGIN.__name__] = PLUGIN


def test_broken_table_is_a_warning(tmp_path, capsys):
    f = tmp_path / "t.plan"
    f.write_text("plan p { }\n")
    ws = Workspace(f, plugins=get_plugins(extra=(PLUGIN,)))
    out = plugin_tables(ws, "p")
    assert "zz-fine" in out and "zz-broken" not in out
    err = capsys.readouterr().err
    assert "warning[plugin]" in err and "zz-broken" in err and "needs numpy" in err

"""`plan plugins` (issue 12 item 8): installed plugins, their `use` blocks with parameters,
units, defaults and docs, the quantities each block provides, and the plugins' tables and
figures (which `plan report` includes)."""
from __future__ import annotations

import json

from dsl.plugin.manager import get_plugins


def test_text_lists_blocks_params_provides_and_figures(run_cli):
    rc, out, err = run_cli("plugins")
    assert rc == 0, err
    assert "use checkpoint { … }" in out
    assert "interval     s       required    useful training time between two saves" in out
    assert "provides: train_time, finish_time, deadline, step_budget, deadline_slack" in out
    pl = get_plugins()
    for name, spec in pl.figures.items():
        assert f"{name}  — {spec.title}  [plugin {spec.plugin}]" in out
    for name, spec in pl.tables.items():
        assert f"{name}  — {spec.title}  [plugin {spec.plugin}]" in out


def test_json(run_cli):
    rc, out, _ = run_cli("plugins", "--format", "json")
    data = json.loads(out)
    fin = next(b for b in data["blocks"] if b["name"] == "finish")
    assert "finish_time" in fin["provides"]
    assert {f["name"] for f in data["figures"]} == set(get_plugins().figures)


def test_report_survives_a_failing_plugin_table(case_ws, monkeypatch):
    """A plugin table that raises is shown as a note; the rest of the report is built."""
    from dsl.present import report
    from dsl.plugin import Table, TableSpec

    def boom(ws, plan):
        raise RuntimeError("bug in a plugin")

    def ok(ws, plan):
        return Table(("a",), ((1.5,),), ("a note",))
    tables = dict(case_ws.plugins.tables)
    tables["zz-broken"] = TableSpec("zz-broken", "Broken", boom, plugin="ext")
    tables["zz-ok"] = TableSpec("zz-ok", "Fine", ok, plugin="ext")
    monkeypatch.setattr(case_ws.plugins, "tables", tables, raising=False)
    data = report.build(case_ws, ["gpus48"], figures=False)
    got = {t["name"]: t for t in data["plans"]["gpus48"]["tables"]}
    assert "this table failed: RuntimeError: bug in a plugin" in got["zz-broken"]["notes"][0]
    assert got["zz-ok"]["rows"] == [["1.5"]] and got["zz-ok"]["plugin"] == "ext"
    assert 'data-table="zz-ok"' in report.render_html(data)

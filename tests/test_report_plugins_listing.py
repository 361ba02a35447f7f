"""`plan plugins` (issue 12 item 8): installed plugins, their `use` blocks with parameters,
units, defaults and docs, the quantities each block provides, and the plugins' tables and
figures (which `plan report` includes)."""
from __future__ import annotations

import json

from dsl.plugins import get_plugins


def test_text_lists_blocks_params_provides_and_figures(run_cli):
    rc, out, err = run_cli("plugins")
    assert rc == 0, err
    assert "use checkpoint { … }" in out
    assert "interval     s     required  useful training time between two saves" in out
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

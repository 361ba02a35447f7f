"""Every docstring example of the package runs (doctest), so the examples people copy work."""
from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for pkg in ("dsl", "plugins") for p in (ROOT / pkg).rglob("*.py")
    if ">>>" in p.read_text(encoding="utf-8"))


def test_there_are_examples():
    assert {"dsl.api", "dsl.syntax.diagnostics", "dsl.present.report"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)            # examples that load a text plan need no file on disk
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, report=True)
    assert res.attempted > 0 and res.failed == 0, name

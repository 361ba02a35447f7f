"""The layering of the core, checked on the import graph (every import, including those inside
functions): ``dsl/`` never imports ``plugins/``; no import cycles among core modules; packages
import only the layers below them; no module imports another module's private names; plugins
use the public plugin surface and never reach into the workspace.

Layers, bottom to top (a module may import its own package and any package below)::

    dsl.syntax → dsl.engine → dsl.plugin → dsl.resolve → dsl.evaluate → dsl.results
        → dsl.present → dsl.api → dsl.testing → dsl.cli

The built-in plugins are packages by concern, layered the same way (a plugin module imports its
own package, the packages of lower levels, and the root modules ``plugins.vocabulary`` and
``plugins.starter``)::

    plugins.model, plugins.hardware → plugins.reliability → plugins.training
        → plugins.serving → plugins.workloads

with no import cycle among plugin modules, and no import from ``dsl`` but the contract
``dsl.plugin``.  No source file is longer than :data:`MAX_LINES`.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_LEVELS = {"plugins.model": 0, "plugins.hardware": 0, "plugins.reliability": 1, "plugins.training": 2,
                 "plugins.serving": 3, "plugins.workloads": 4}
PLUGIN_ROOT = {"plugins", "plugins.vocabulary", "plugins.starter"}
MAX_LINES = 1000
LAYERS = ("dsl.syntax", "dsl.engine", "dsl.plugin", "dsl.resolve", "dsl.evaluate", "dsl.results",
          "dsl.present", "dsl.api", "dsl.testing", "dsl.cli")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    """The parsed source of ``path``, once per test process (every test here walks every module;
    the trees are only read)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path):
    """(imported module, imported names, line) for every import statement in ``path``."""
    mod = _module_name(path)
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = tuple(a.name for a in node.names)
            if node.module is None:   # `from . import x`: each name is a module
                for n in names:
                    yield f"{target}.{n}", (), node.lineno
            else:
                yield target, names, node.lineno


def _files(pkg: str):
    return sorted(p for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def _graph(pkg: str = "dsl"):
    mods = {_module_name(p): p for p in _files(pkg)}
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for m, p in mods.items():
        for target, names, line in _imports(p):
            for t in (target, *(f"{target}.{n}" for n in names)):
                if t in mods and t != m:
                    g.add_edge(m, t, line=line)
    return g, mods


def _layer(mod: str) -> int | None:
    for i, name in enumerate(LAYERS):
        if mod == name or mod.startswith(name + "."):
            return i
    return None


def test_core_never_imports_plugins():
    bad = [f"{_module_name(p)}:{line} imports {t}" for p in _files("dsl") for t, _, line in _imports(p)
           if t == "plugins" or t.startswith("plugins.")]
    assert not bad, "\n".join(bad)


def test_no_import_cycles_among_core_modules():
    g, _ = _graph()
    cycles = sorted(sorted(c) for c in nx.simple_cycles(g))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_layers_import_only_downwards():
    g, _ = _graph()
    bad = []
    for a, b, d in g.edges(data=True):
        la, lb = _layer(a), _layer(b)
        if la is not None and lb is not None and lb > la:
            bad.append(f"{a}:{d['line']} imports {b} (layer {LAYERS[lb]} is above {LAYERS[la]})")
    assert not bad, "\n".join(sorted(bad))


def test_every_core_module_is_in_a_layer():
    _, mods = _graph()
    loose = [m for m in mods if m != "dsl" and _layer(m) is None]
    assert not loose, f"modules outside the layers: {loose}"


@pytest.mark.parametrize("pkg", ["dsl", "plugins"])
def test_no_private_names_imported_across_modules(pkg):
    bad = []
    for p in _files(pkg):
        for target, names, line in _imports(p):
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{_module_name(p)}:{line} imports {target}.{n}")
    assert not bad, "\n".join(bad)


def test_plugins_use_only_the_public_core_surface():
    """Plugins import ``dsl.plugin`` (the contract) and the public helper modules for units and
    figures; the resolver, the evaluator and the workspace are internal."""
    allowed = ("dsl.plugin",)
    bad = []
    for p in _files("plugins"):
        for target, _, line in _imports(p):
            if target.startswith("dsl") and not any(target == a or target.startswith(a + ".") for a in allowed):
                bad.append(f"{_module_name(p)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_plugins_never_reach_into_the_workspace():
    """``ctx.ws`` and the workspace's private state are not part of the contract."""
    bad = []
    for p in _files("plugins"):
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.Attribute) and node.attr == "ws" and isinstance(node.value, ast.Name) \
                    and node.value.id == "ctx":
                bad.append(f"{_module_name(p)}:{node.lineno} uses ctx.ws")
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and isinstance(node.value, ast.Name) and node.value.id in ("ws", "ev", "ctx", "b", "block"):
                bad.append(f"{_module_name(p)}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not bad, "\n".join(bad)


def _plugin_level(mod: str) -> int | None:
    for name, level in PLUGIN_LEVELS.items():
        if mod == name or mod.startswith(name + "."):
            return level
    return 0 if mod in PLUGIN_ROOT else None


def test_no_import_cycles_among_plugin_modules():
    g, _ = _graph("plugins")
    cycles = sorted(sorted(c) for c in nx.simple_cycles(g))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_plugin_packages_import_only_downwards():
    g, _ = _graph("plugins")
    bad = []
    for a, b, d in g.edges(data=True):
        la, lb = _plugin_level(a), _plugin_level(b)
        if la is not None and lb is not None and lb > la:
            bad.append(f"{a}:{d['line']} imports {b} (level {lb} is above {la})")
    assert not bad, "\n".join(sorted(bad))


def test_every_plugin_module_is_in_a_concern_package():
    """At most the two root modules stay at plugins/'s top; every other is in a package whose
    name says what it models."""
    _, mods = _graph("plugins")
    loose = sorted(m for m in mods if _plugin_level(m) is None)
    assert not loose, f"plugin modules outside the concern packages: {loose}"
    root = sorted(m for m in mods if m.count(".") == 1 and m not in PLUGIN_LEVELS)
    assert len(root) <= 2, f"more than two modules at plugins/'s root: {root}"


@pytest.mark.parametrize("pkg", ["dsl", "plugins"])
def test_no_source_file_is_too_long_to_hold_in_ones_head(pkg):
    long = sorted(f"{p.relative_to(ROOT)}: {n} lines" for p in _files(pkg)
                  if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES)
    assert not long, f"split by responsibility (at most {MAX_LINES} lines):\n" + "\n".join(long)


def test_the_architecture_checks_catch_what_they_guard(tmp_path, monkeypatch):
    """The checks above fail on a cycle and on an import of a core internal: a plugin package
    written with both is reported by the same functions."""
    pkg = tmp_path / "plugins"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / "__init__.py").write_text("")
    (pkg / "model" / "a.py").write_text("from plugins.model import b\nfrom dsl.engine.units import convert\n")
    (pkg / "model" / "b.py").write_text("from plugins.model import a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    _tree.cache_clear()
    try:
        g, _ = _graph("plugins")
        assert sorted(sorted(c) for c in nx.simple_cycles(g)) == [["plugins.model.a", "plugins.model.b"]]
        with pytest.raises(AssertionError, match="plugins.model.a:2 imports dsl.engine.units"):
            test_plugins_use_only_the_public_core_surface()
    finally:
        _tree.cache_clear()

"""The scripts of benchmarks/ still match the code they time: each compiles, every module and
name it imports from this project exists (imports inside functions and Python code held in
strings for a child process included), and each answers ``--help``.  No benchmark is run and
no timing is asserted (benchmarks/bench_pipeline.py imported the removed `dsl.model` inside a
`python -c` string for a long time unnoticed)."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

SCRIPTS = sorted((REPO_ROOT / "benchmarks").glob("*.py"))
OURS = ("dsl", "plugins")


def _trees(tree: ast.AST):
    """``tree`` and the Python code held in its string constants (a ``python -c`` program)."""
    yield tree
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
            try:
                yield ast.parse(node.value)
            except SyntaxError:          # a .plan text, a message
                continue


def _project_imports(tree: ast.AST):
    """(module, name or None) of every import of this project's modules, at any depth."""
    for t in _trees(tree):
        for node in ast.walk(t):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in OURS:
                        yield a.name, None
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] in OURS:
                for a in node.names:
                    yield node.module, a.name


def test_there_are_benchmarks():
    assert len(SCRIPTS) >= 10 and REPO_ROOT / "benchmarks" / "bench_pipeline.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_compiles_and_imports_what_exists(script):
    source = script.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(script))
    compile(tree, str(script), "exec")
    for module, name in _project_imports(tree):
        assert importlib.util.find_spec(module) is not None, f"{script.name}: no module {module}"
        if name is not None and name != "*":
            mod = importlib.import_module(module)
            assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}") is not None, \
                f"{script.name}: {module} has no {name}"


_HELP_ALL = """
import contextlib, io, runpy, sys
failed = []
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        code = "returned without exiting"
    except SystemExit as e:
        code = e.code
    if code not in (0, None) or "usage:" not in out.getvalue():
        failed.append(f"{path}: {code!r}")
print("\\n".join(failed))
"""


def test_every_benchmark_answers_help():
    """One process runs every script's ``--help`` (argparse exits before any work), so a
    module-level import that no longer resolves fails here."""
    p = subprocess.run([sys.executable, "-c", _HELP_ALL, *map(str, SCRIPTS)], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "", p.stdout + p.stderr

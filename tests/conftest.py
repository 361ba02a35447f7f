"""Shared fixtures for the `plan` test-suite.

* ``REPO_ROOT`` / ``repo_root``: the checkout (``dsl/``, ``plugins/``, ``specs/``).
* ``CASE`` / ``case_path``: the design case of book chapter 10.
* ``case_ws`` (session): ``dsl.load(CASE)`` — treat as read-only.  Failed queries leave
  diagnostics behind, so tests that expect errors should use ``fresh_case_ws``.
* ``run_cli(*args, cwd=REPO_ROOT, stdin=None) -> (exit_code, stdout, stderr)``: runs
  ``python -m dsl.cli ARGS`` in a subprocess (also importable: ``from conftest import run_cli``).
* ``run_main(*args, cwd=REPO_ROOT) -> (exit_code, stdout, stderr)``: the same through
  ``dsl.cli.main`` in this process (no interpreter start-up; importable too).
* ``write_plan(text, name="t.plan") -> Path``: writes a `.plan` file into ``tmp_path``;
  ``@catalog/…`` imports and absolute imports of the case files work from there.
* ``qval(ws, "plan.quantity", unit="") -> float``: nominal value converted to ``unit``.
* ``--update-goldens``: rewrite ``tests/goldens/`` from the current output instead of
  comparing (``python -m pytest tests/test_goldens.py --update-goldens``).
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dsl
from dsl.engine.units import convert

def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite tests/goldens/ from the current `plan eval` output instead of comparing")


REPO_ROOT = Path(__file__).resolve().parent.parent
CASES = REPO_ROOT / "specs" / "cases"
CASE = CASES / "cpt-qwen3-8b-4090.plan"


def run_cli(*args, cwd: str | Path = REPO_ROOT, stdin: str | None = None, timeout: float = 120):
    """Run the `plan` CLI as ``python -m dsl.cli ARGS``; return (exit_code, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "dsl.cli", *map(str, args)], cwd=str(cwd), input=stdin,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def run_main(*args, cwd: str | Path = REPO_ROOT):
    """Run the `plan` CLI in-process through ``dsl.cli.main(ARGS)`` with ``cwd`` as the
    working directory; return (exit_code, stdout, stderr).  ``--help`` and usage errors
    (argparse's SystemExit) give their exit code."""
    from dsl.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in args])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue()


def qval(ws, name: str, unit: str = "") -> float:
    """Nominal value of ``name`` (``plan.quantity`` …) in ``unit`` (base units when empty)."""
    v = ws.value(ws.lookup(name))
    assert v is not None, f"{name} has no value"
    return convert(float(v), unit)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def case_path() -> Path:
    return CASE


@pytest.fixture(scope="session")
def case_ws():
    return dsl.load(CASE)


@pytest.fixture
def fresh_case_ws():
    return dsl.load(CASE)


@pytest.fixture(name="run_cli")
def run_cli_fixture():
    return run_cli


@pytest.fixture(name="qval")
def qval_fixture():
    return qval


@pytest.fixture
def write_plan(tmp_path):
    def write(text: str, name: str = "t.plan") -> Path:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        return p
    return write

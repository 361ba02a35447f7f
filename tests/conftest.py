"""Shared fixtures for the `plan` test-suite.

* ``REPO_ROOT`` / ``repo_root``: the checkout (``dsl/``, ``plugins/``, ``specs/``).
* ``CASE`` / ``case_path``: the design case of book chapter 10.
* evaluations of the case files are cached per test process (see ``_install_eval_cache``);
  what lives as long as the process is frozen out of the garbage collector's scans
  (``_freeze_long_lived``; ``PLAN_TEST_NO_GC_FREEZE=1`` turns that off).
* ``case_ws`` (session): ``dsl.load(CASE)`` — treat as read-only.  Failed queries leave
  diagnostics behind, so tests that expect errors should use ``fresh_case_ws`` (never cached).
* ``run_cli(*args, cwd=REPO_ROOT, stdin=None, process=None) -> (exit_code, stdout, stderr)``:
  the CLI in this process (``run_main``), or ``python -m dsl.cli ARGS`` in a subprocess with
  ``process=True``, with ``stdin`` or under ``PLAN_TEST_CLI_PROCESS=1`` (also importable:
  ``from conftest import run_cli``).
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
import warnings
from pathlib import Path

import pytest

# Tests write plans into tmp_path that import the case files by absolute path, i.e. from outside
# the project root, which a run refuses by default; the suite allows it (in process and in the
# CLI subprocesses).  tests/test_hardening.py clears this to test the containment itself.
os.environ["PLAN_LIMITS"] = "allow_outside_root=1"

# `pytest -m fuzz --hypothesis-profile=long`: the fuzz tests run 10^5 inputs each
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("long", max_examples=100_000, deadline=None, suppress_health_check=list(HealthCheck))

import dsl
import dsl.syntax.limits  # noqa: F401  (raises the recursion limit once, before any test)
from dsl.engine.units import convert


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite tests/goldens/ from the current `plan eval` output instead of comparing")


REPO_ROOT = Path(__file__).resolve().parent.parent
CASES = REPO_ROOT / "specs" / "cases"
CASE = CASES / "cpt-qwen3-8b-4090.plan"


# One evaluation per case file and test process: the goldens (text and JSON), the module
# fixtures and the in-process CLI runs evaluate the same files of specs/cases/ again and again,
# and an evaluation is read-only (dsl.results.evaluation), so the first one is shared.  Only
# `dsl.load(path)` of a checked-in case file without text or extra plugins is cached, keyed by
# everything the result depends on: the path as given and the working directory (the output
# shows the path), the file's mtime and size, evaluate, the disabled plugins and the limits
# in force.  Errors are not cached.  PLAN_TEST_NO_EVAL_CACHE=1 turns the cache off.
_EVALS: dict = {}


def _install_eval_cache() -> None:
    import dsl.api
    from dsl.syntax import limits as L

    uncached = dsl.api.load

    def load(path, text=None, evaluate=True, disable=(), extra=(), **options):
        key = None
        # the CLI always passes `plans` (None unless `plan eval --plan`): part of the key, and
        # any other option given makes the call uncached
        given = {k: v for k, v in options.items() if v is not None}
        if text is None and not extra and set(given) <= {"plans"}:
            try:
                full = Path(os.path.abspath(path))
                if full.parent == CASES and full.suffix == ".plan":
                    st = full.stat()
                    plans = given.get("plans")
                    key = (str(path), os.getcwd(), st.st_mtime_ns, st.st_size, bool(evaluate),
                           None if plans is None else tuple(plans),
                           dsl.api.disabled_plugins(disable), L.current(), os.environ.get("PLAN_LIMITS"))
            except (OSError, TypeError, ValueError):
                key = None
        if key is None:
            return uncached(path, text=text, evaluate=evaluate, disable=disable, extra=extra, **options)
        got = _EVALS.get(key)
        if got is None:
            got = _EVALS[key] = uncached(path, text=text, evaluate=evaluate, disable=disable, extra=extra,
                                         **options)
        return got

    load.__doc__ = uncached.__doc__
    load.__wrapped__ = uncached
    dsl.api.load = load


if not os.environ.get("PLAN_TEST_NO_EVAL_CACHE"):
    _install_eval_cache()


# The cyclic garbage collector, as the `plan` command treats it (dsl.cli.console_main): what
# lives as long as the process — the imports, and here the evaluations cached above — is frozen
# out of its scans (gc.freeze), so a full collection no longer walks every cached evaluation
# again (it had been ≈15 % of a worker's CPU time).  After a test that added evaluations to the
# cache, the garbage is collected first and then what is alive is frozen; objects created later
# are collected as usual.  PLAN_TEST_NO_GC_FREEZE=1 leaves the collector as Python sets it.
_GC_FREEZE = not os.environ.get("PLAN_TEST_NO_GC_FREEZE")
_FROZEN_EVALS = [0]


def _freeze_long_lived() -> None:
    import gc
    gc.collect()
    gc.freeze()


if _GC_FREEZE:
    _freeze_long_lived()                  # the imports: sympy, lark, the core, pytest


def pytest_runtest_logfinish(nodeid, location):
    if _GC_FREEZE and len(_EVALS) != _FROZEN_EVALS[0]:
        _FROZEN_EVALS[0] = len(_EVALS)
        _freeze_long_lived()


def run_cli(*args, cwd: str | Path = REPO_ROOT, stdin: str | None = None, timeout: float = 120,
            process: bool | None = None):
    """Run the `plan` CLI; return (exit_code, stdout, stderr).

    In this process through :func:`run_main` (no interpreter start-up and imports: ≈0.6 s CPU
    per call) unless ``process=True`` or ``stdin`` is given, or ``PLAN_TEST_CLI_PROCESS=1`` is
    set: then as ``python -m dsl.cli ARGS`` in a subprocess.  Tests of what only a new process
    shows (start-up imports, the environment a process inherits, the entry point) pass
    ``process=True``."""
    if process is None:
        process = stdin is not None or bool(os.environ.get("PLAN_TEST_CLI_PROCESS"))
    if not process:
        return run_main(*args, cwd=cwd)
    p = subprocess.run([sys.executable, "-m", "dsl.cli", *map(str, args)], cwd=str(cwd), input=stdin,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


# An in-process run shows a Python warning on its stderr as `python -m dsl.cli` would: under the
# default filters of a new interpreter (pytest installs its own around each test).
_PROCESS_WARNING_FILTERS = (("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                            ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                            ("ignore", ResourceWarning, ""))


def _show_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def run_main(*args, cwd: str | Path = REPO_ROOT):
    """Run the `plan` CLI in-process through ``dsl.cli.main(ARGS)`` with ``cwd`` as the
    working directory; return (exit_code, stdout, stderr).  ``--help`` and usage errors
    (argparse's SystemExit) give their exit code; Python warnings go to the captured stderr
    under the filters of a new interpreter."""
    from dsl.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.resetwarnings()                  # (also forgets which warnings were shown)
            for action, category, module in _PROCESS_WARNING_FILTERS:
                warnings.filterwarnings(action, category=category, module=module, append=True)
            warnings.showwarning = _show_warning
            try:
                rc = main([str(a) for a in args])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue()


def qval(ws, name: str, unit: str = "") -> float:
    """Nominal value of ``name`` (``plan.quantity`` …) in ``unit`` (base units when empty)."""
    v = ws.base_value(ws.lookup(name))
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
    import dsl.api
    return getattr(dsl.api.load, "__wrapped__", dsl.api.load)(CASE)   # not the shared evaluation


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

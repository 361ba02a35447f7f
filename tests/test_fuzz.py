"""Fuzzing through the real CLI entry: generated and mutated `.plan` files never make
``plan`` exit outside {0, 1, 2}, print "internal error" or a traceback, or hang.

The default run is bounded (about two thousand inputs, about a minute on one idle core).
The long mode runs the same properties with 10^5 inputs per test::

    pytest -m fuzz --hypothesis-profile=long tests/test_fuzz.py

and ``benchmarks/fuzz_long.py`` runs them in worker processes with a memory figure (see its
docstring).  A failure found here becomes a test in tests/test_hardening.py.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import COMMANDS, mutated_cases, plan_files, run_one, verdict

LONG = settings.default.max_examples >= 10_000   # --hypothesis-profile=long (tests/conftest.py)


def budget(n: int) -> settings:
    return settings(max_examples=settings.default.max_examples if LONG else n, deadline=None, derandomize=not LONG,
                    suppress_health_check=list(HealthCheck), database=None)


pytestmark = pytest.mark.fuzz


def _check(text: str, cmd: str, seconds: float = 20.0) -> None:
    rc, out, err = run_one(text, COMMANDS[cmd], seconds=seconds)
    bad = verdict(rc, out, err)
    assert bad is None, f"{bad} on `plan {' '.join(COMMANDS[cmd])}` of:\n{text[:2000]}\n--- stderr:\n{err[-3000:]}"


@budget(1500)
@given(plan_files())
def test_generated_files_check(text):
    _check(text, "check")


@budget(300)
@given(plan_files(), st.sampled_from(["eval", "eval-json", "solve", "timeline", "fmt"]))
def test_generated_files_other_commands(text, cmd):
    _check(text, cmd)


@budget(150)
@given(mutated_cases())
def test_mutated_cases_check(case):
    # the CPU-time budget of eval below: the heaviest worked case (calibrate-dgxc-h100.plan, 28
    # runs priced and fitted) takes about 18 s of CPU to check unmutated
    _check(case[1], "check", seconds=40)


@budget(40)
@given(mutated_cases())
def test_mutated_cases_eval(case):
    _check(case[1], "eval", seconds=40)

"""Golden outputs: `plan eval` text and `plan eval --format json` of every file in
``specs/cases/`` are kept as reviewed snapshots in ``tests/goldens/`` (``CASE.txt``,
``CASE.json``), so a change to what users see shows up in review as a diff of those files.

The CLI runs in-process (``dsl.cli.main``, see ``conftest.run_main``) from the checkout's
root, so the file names in the output are the relative ``specs/cases/…`` paths; any
absolute path of the checkout is written as ``<repo>``.  A text golden is the standard
output, followed by ``--- stderr ---`` and the warnings when there are any.

After an intended change, regenerate and review the diff::

    python -m pytest tests/test_goldens.py --update-goldens
    git diff tests/goldens/
"""
from __future__ import annotations

import difflib

import pytest

from conftest import CASES, REPO_ROOT, run_main

GOLDENS = REPO_ROOT / "tests" / "goldens"
CASE_FILES = sorted(CASES.glob("*.plan"))
FORMATS = {"txt": (), "json": ("--format", "json")}
DIFF_LINES = 60


def _output(case: str, fmt: str) -> str:
    rc, out, err = run_main("eval", f"specs/cases/{case}.plan", *FORMATS[fmt])
    assert rc == 0, f"plan eval specs/cases/{case}.plan exited {rc}:\n{err}"
    text = out if fmt == "json" or not err else out + "--- stderr ---\n" + err
    return text.replace(str(REPO_ROOT), "<repo>")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
# one worker per case file under pytest-xdist (--dist loadgroup): its text and JSON goldens and
# the other per-case tests of its group share one evaluation (the cache in conftest.py)
@pytest.mark.parametrize("case", [pytest.param(c.stem, marks=pytest.mark.xdist_group(c.stem)) for c in CASE_FILES])
def test_golden(case, fmt, request):
    got = _output(case, fmt)
    path = GOLDENS / f"{case}.{fmt}"
    if request.config.getoption("--update-goldens"):
        path.write_text(got, encoding="utf-8")
        return
    assert path.exists(), (f"no golden {path.relative_to(REPO_ROOT)}: run "
                           "`python -m pytest tests/test_goldens.py --update-goldens` and review it")
    want = path.read_text(encoding="utf-8")
    if got != want:
        diff = list(difflib.unified_diff(want.splitlines(), got.splitlines(), f"tests/goldens/{case}.{fmt}",
                                         f"plan eval specs/cases/{case}.plan", lineterm=""))
        more = f"\n… {len(diff) - DIFF_LINES} more diff lines" if len(diff) > DIFF_LINES else ""
        pytest.fail(f"`plan eval` output of {case}.plan ({fmt}) differs from its golden; if the change is "
                    "intended, rerun with --update-goldens and review `git diff tests/goldens/`\n"
                    + "\n".join(diff[:DIFF_LINES]) + more, pytrace=False)


def test_every_golden_has_its_case():
    """A golden whose case file was renamed or removed would never be checked again."""
    cases = {c.stem for c in CASE_FILES}
    stale = sorted(p.name for p in GOLDENS.iterdir()
                   if p.suffix in (".txt", ".json") and p.stem not in cases)
    assert not stale, f"goldens without a case in specs/cases/: {stale}"

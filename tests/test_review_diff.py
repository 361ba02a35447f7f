"""Review: `plan diff REV:PATH` with a PATH outside the repository (a sibling checkout, a
Windows-looking `c:/x.plan`) is error[diff], not an internal error."""
from __future__ import annotations

import shutil

import pytest

from conftest import REPO_ROOT, run_cli

CASE = "specs/cases/cpt-qwen3-8b-4090.plan"


@pytest.mark.skipif(shutil.which("git") is None or not (REPO_ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("old", ["HEAD:../outside/x.plan", "c:/x.plan", "HEAD:/x.plan"])
def test_rev_path_outside_the_repository(old):
    code, out, err = run_cli("diff", old, CASE)
    assert code == 1, err
    assert "internal error" not in err
    assert "error[diff]" in err and "outside the git repository" in err

"""`plan diff` (issue 12 item 3): 48 vs 32 RTX 4090s of book ch. 10 §10.6.1 — the finish time
goes from ~24.6 to ~34.3 days and the 30-day deadline requirement flips."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

CASE = "specs/cases/cpt-qwen3-8b-4090.plan"
VARIANTS = "specs/cases/cpt-variants.plan"


def _finish_row(text: str):
    m = re.search(r"finish_time\s+day\s+([\d.]+)\s+([\d.]+)\s+\+([\d.]+)\s+\+([\d.]+) %", text)
    assert m, text
    return [float(x) for x in m.groups()]


def test_two_plans_of_one_file(run_cli):
    rc, out, err = run_cli("diff", f"{CASE}#gpus48", f"{CASE}#gpus32")
    assert rc == 0, err
    assert "gpus: 48 -> 32" in out
    old, new, delta, rel = _finish_row(out)
    assert old == pytest.approx(24.6, abs=0.05) and new == pytest.approx(34.3, abs=0.05)
    assert delta == pytest.approx(34.3 - 24.6, abs=0.1)
    assert rel == pytest.approx((34.3 - 24.6) / 24.6 * 100, abs=0.5)
    assert re.search(r"meets_deadline: ok -> FAIL\s+\(34.33 day <= 30 day\)", out)
    # memory still fits on both sides: not a flip
    assert "fits_memory" not in out.split("requirements that flipped")[1]


def test_variants_markdown(run_cli):
    # §10.3.3: one 200 Gbit/s NIC per host instead of eight, without prefetch: the step
    # grows to ~68.1 s and the 48-GPU plan misses the deadline
    rc, out, err = run_cli("diff", f"{VARIANTS}#gpus48_noprefetch", f"{VARIANTS}#gpus48_onenic_noprefetch",
                           "--format", "md")
    assert rc == 0, err
    assert "| `layout.nics_per_host` | 8 | 1 |" in out
    m = re.search(r"\| `step_time` \| s \| ([\d.]+) \| ([\d.]+) \|", out)
    assert float(m.group(2)) == pytest.approx(68.1, abs=0.05)
    assert "❌ requirement `meets_deadline` flipped: ok → FAIL" in out


def test_json(run_cli):
    rc, out, _ = run_cli("diff", f"{CASE}#gpus48", f"{CASE}#gpus32", "--format", "json")
    data = json.loads(out)
    (pair,) = data["pairs"]
    assert [r["name"] for r in pair["requirements"] if r["flipped"]] == ["meets_deadline"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_rev_path_from_git(run_cli, tmp_path, repo_root):
    repo = tmp_path / "repo"
    shutil.copytree(repo_root / "specs" / "catalog", repo / "specs" / "catalog")
    (repo / "specs" / "cases").mkdir(parents=True)
    plan = repo / "specs" / "cases" / "cpt.plan"
    shutil.copy(repo_root / CASE, plan)
    env = ["-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", *env, "commit", "-qm", "48 GPUs"], cwd=repo, check=True)
    # a pull request that moves the design from 48 to 32 GPUs
    text = plan.read_text()
    assert "  gpus = 48;" in text
    plan.write_text(text.replace("  gpus = 48;", "  gpus = 32;"))
    rc, out, err = run_cli("diff", "HEAD:specs/cases/cpt.plan", "specs/cases/cpt.plan", cwd=repo)
    assert rc == 0, err
    section = out.split("plan gpus48")[1].split("plan gpus32")[0]
    assert "gpus: 48 -> 32" in section
    old, new, _, _ = _finish_row(section)
    assert (old, new) == (pytest.approx(24.6, abs=0.05), pytest.approx(34.3, abs=0.05))
    assert "meets_deadline: ok -> FAIL" in section
    # gpus32 already set its own count: unchanged
    assert "no change" in out.split("plan gpus32")[1]
    # from a subdirectory, paths are relative to it (as `git show REV:./path`)
    rc, out2, err = run_cli("diff", "HEAD:cpt.plan", "cpt.plan", cwd=repo / "specs" / "cases")
    assert rc == 0, err
    assert "gpus: 48 -> 32" in out2
    rc, _, err = run_cli("diff", "HEAD:specs/cases/nope.plan", "specs/cases/cpt.plan", cwd=repo)
    assert rc == 1 and "error[diff]" in err and "does not exist at revision 'HEAD'" in err
    # a revision the repository does not have is named as such, not as a missing file
    rc, _, err = run_cli("diff", "HEAD~99999:specs/cases/cpt.plan", "specs/cases/cpt.plan", cwd=repo)
    assert rc == 1 and "'HEAD~99999' in 'HEAD~99999:specs/cases/cpt.plan' is not a revision" in err
    assert "does not exist" not in err and "git log" in err


def test_missing_file(run_cli):
    rc, _, err = run_cli("diff", "nope.plan", CASE)
    assert rc == 1 and "error[diff]: 'nope.plan' does not exist" in err


def test_unknown_plan(run_cli):
    rc, _, err = run_cli("diff", f"{CASE}#gpus64", CASE)
    assert rc == 2 and "no plan 'gpus64'" in err

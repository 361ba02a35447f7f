"""Output is byte-identical across runs and hash seeds: every command's text and JSON for a
few case files, run in fresh interpreters with different ``PYTHONHASHSEED`` values (set,
dict and graph orders must never leak into what `plan` prints)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CASES = REPO / "specs" / "cases"

RUNS = [
    ["eval", "cpt-qwen3-8b-4090.plan"], ["eval", "cpt-qwen3-8b-4090.plan", "--format", "json"],
    ["get", "cpt-qwen3-8b-4090.plan", "gpus48.finish_time"],
    ["check", "cpt-qwen3-8b-4090.plan", "--format", "json"], ["check", "cpt-qwen3-8b-4090.plan", "--strict"],
    ["solve", "cpt-qwen3-8b-4090.plan"], ["solve", "cpt-qwen3-8b-4090.plan", "--format", "json"],
    ["explain", "cpt-qwen3-8b-4090.plan", "gpus48.finish_time"],
    ["explain", "cpt-qwen3-8b-4090.plan", "gpus48.finish_time", "--format", "json"],
    ["timeline", "cpt-qwen3-8b-4090.plan"],
    ["eval", "pipeline-closed-forms.plan"], ["eval", "pipeline-closed-forms.plan", "--format", "json"],
    ["timeline", "pipeline-closed-forms.plan", "--plan", "zb_h1"], ["check", "pipeline-closed-forms.plan"],
    ["get", "pipeline-closed-forms.plan", "fd_m8.pipeline_time", "--in", "ms"],
    ["explain", "pipeline-closed-forms.plan", "fd_m8.pipeline_time"],
    ["eval", "memory-zero.plan"], ["eval", "memory-zero.plan", "--format", "json"], ["check", "memory-zero.plan"],
    ["timeline", "memory-zero.plan", "--plan", "d4_stage0"],
]

# Each interpreter evaluates each (file, options) once and every command of that file reads the
# shared read-only evaluation (the suite's cache, tests/conftest.py): the evaluation and every
# command's output still run under each hash seed.
# The other commands, each on a small input: files they write are compared byte for byte too
# (``{out}`` is a fresh directory per interpreter; the same relative names in each).
RUNS_FILES = [
    ["report", "cpt-qwen3-8b-4090.plan", "--format", "md"],
    ["report", "cpt-qwen3-8b-4090.plan", "--format", "html", "-o", "{out}/r.html"],
    ["figure", "pipeline-closed-forms.plan", "--plan", "zb_h1", "--format", "svg", "-o", "{out}/fig"],
    ["graph", "memory-zero.plan", "--plan", "d4_stage0"], ["graph", "memory-zero.plan", "--format", "mermaid"],
    ["graph", "memory-zero.plan", "--plan", "d4_stage0", "--format", "svg", "-o", "{out}/g.svg"],
    ["diff", "cpt-qwen3-8b-4090.plan#gpus32", "cpt-qwen3-8b-4090.plan#gpus48"],
    ["diff", "cpt-qwen3-8b-4090.plan#gpus32", "cpt-qwen3-8b-4090.plan#gpus48", "--format", "json"],
    ["sweep", "cpt-qwen3-8b-4090.plan", "--plan", "gpus48", "--vary", "gpus48.mfu=30%:50%:5"],
    ["sweep", "cpt-qwen3-8b-4090.plan", "--plan", "gpus48", "--vary", "gpus48.mfu=30%:50%", "--random", "7",
     "--seed", "3", "--format", "json"],
    ["fmt", "-"], ["plugins"], ["plugins", "--format", "json"],
    ["search", "layout-qwen3-8b-4090.plan", "--top", "5"],
    ["search", "layout-qwen3-8b-4090.plan", "--top", "5", "--format", "json"],
    ["init", "--model", "qwen3_8b", "--device", "h100_sxm", "--gpus", "16", "-o", "{out}/start.plan"],
    ["eval", "serving-engine-qwen3-8b.plan"], ["eval", "serving-engine-qwen3-8b.plan", "--format", "json"],
    ["launch", "serving-engine-qwen3-8b.plan", "--plan", "h100_2x", "--engine", "vllm"],
    ["launch", "serving-engine-qwen3-8b.plan", "--plan", "h100_sglang", "--engine", "sglang", "--format", "json"],
]

SCRIPT = """
import contextlib, io, json, os, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import conftest  # noqa: F401  (installs the evaluation cache)
from dsl.cli import main
out, tmp = [], tempfile.mkdtemp()
for args in json.loads(sys.argv[1]):
    args = [a.replace("{out}", tmp) for a in args]
    o, e = io.StringIO(), io.StringIO()
    if args[:2] == ["fmt", "-"]:
        sys.stdin = io.TextIOWrapper(io.BytesIO(Path("cpt-qwen3-8b-4090.plan").read_bytes()), encoding="utf-8")
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(args)
    files = {str(f.relative_to(tmp)): f.read_bytes().hex() for f in sorted(Path(tmp).rglob("*")) if f.is_file()}
    for f in Path(tmp).rglob("*"):
        if f.is_file():
            f.unlink()
    out.append([rc, o.getvalue().replace(tmp, "{out}"), e.getvalue().replace(tmp, "{out}"), files])
sys.stdout.write(json.dumps(out))
"""


def _run(seed: str, runs: list = RUNS) -> list:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    p = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(runs), str(REPO / "tests")], cwd=str(CASES),
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_output_is_identical_across_hash_seeds():
    first = _run("0")
    for (rc, out, err, _), args in zip(first, RUNS):
        assert rc in (0, 1), (args, err)
        assert out or err, args
    for seed in ("1", "4242"):
        other = _run(seed)
        for a, b, args in zip(first, other, RUNS):
            assert a == b, f"`plan {' '.join(args)}` differs between PYTHONHASHSEED=0 and {seed}"


def test_every_other_command_and_the_files_it_writes_are_identical_across_hash_seeds():
    first = _run("0", RUNS_FILES)
    for (rc, out, err, files), args in zip(first, RUNS_FILES):
        assert rc == 0, (args, err)
        assert out or files, args
    other = _run("4242", RUNS_FILES)
    for a, b, args in zip(first, other, RUNS_FILES):
        assert a == b, f"`plan {' '.join(args)}` differs between PYTHONHASHSEED=0 and 4242"

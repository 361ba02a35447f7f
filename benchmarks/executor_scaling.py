"""The executor's speed-up with 1, 2 and 4 workers on each engine (dsl/engine/executor.py).

Two heavy jobs, each run as the `plan` command a user types, once per engine and worker count:

* ``check`` — ``plan check`` over the first ``--files`` case files of specs/cases/ (sorted),
  each file a task;
* ``sweep`` — a structural sweep of specs/cases/layout-qwen3-8b-4090.plan over tp × ZeRO stage
  (16 full evaluations of the file, each a task) and 5 values of the efficiency.

Wall time and CPU time (this process's children: the command and the workers it waited for)
per run, and whether the output is byte-identical to the serial run's.  Prints a Markdown
table; ``--append`` adds it to benchmarks/RESULTS.md with the command and the machine.

    python benchmarks/executor_scaling.py [--files 12] [--append]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "specs" / "cases"
LAYOUT = CASES / "layout-qwen3-8b-4090.plan"
RUNS = [("serial", 1), ("processes", 1), ("processes", 2), ("processes", 4), ("dask", 1), ("dask", 2), ("dask", 4)]


def jobs(files: int) -> dict:
    """The command lines of the jobs (without the engine options)."""
    cases = [str(p.relative_to(ROOT)) for p in sorted(CASES.glob("*.plan"))[:files]]
    return {f"check ({files} files)": ["check", *cases],
            "sweep (16 structural values)": ["sweep", str(LAYOUT.relative_to(ROOT)), "--plan", "gpus48",
                                             "--vary", "gpus48.layout.tp=[1, 2, 4, 8]",
                                             "--vary", "gpus48.layout.zero=[0, 1, 2, 3]",
                                             "--vary", "gpus48.mfu=30%:50%:5"]}


def run(argv: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the children, sha256 of stdout) of ``plan ARGV``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "dsl.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PLAN_PROGRESS": "0"})
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 1):
        raise SystemExit(f"plan {' '.join(argv)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, hashlib.sha256(p.stdout.encode()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=12, help="case files plan check reads (default 12)")
    ap.add_argument("--append", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = ap.parse_args()
    lines = ["| job | engine | workers | wall s | CPU s | speed-up (wall, vs serial) | output = serial's |",
             "|---|---|---:|---:|---:|---:|---|"]
    for name, argv in jobs(args.files).items():
        base = None
        for engine, workers in RUNS:
            wall, cpu, digest = run([*argv, "--engine", engine, "--workers", str(workers)])
            base = base or (wall, digest)
            row = (f"| {name} | {engine} | {workers} | {wall:.1f} | {cpu:.1f} | {base[0] / wall:.2f} | "
                   f"{'yes' if digest == base[1] else 'NO'} |")
            print(row, flush=True)
            lines.append(row)
    cpus = os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = "\n".join(lines)
    print(text)
    if args.append:
        head = (f"\n\n## The executor: 1, 2 and 4 workers on each engine ({time.strftime('%Y-%m-%d')})\n\n"
                f"`python benchmarks/executor_scaling.py --files {args.files} --append` on {platform.machine()} "
                f"Linux, {cpus} CPU cores shared with other jobs (load average {load:.1f} at the end), "
                f"Python {platform.python_version()}.\n\n")
        with open(ROOT / "benchmarks" / "RESULTS.md", "a", encoding="utf-8") as f:
            f.write(head + text + "\n")


if __name__ == "__main__":
    main()

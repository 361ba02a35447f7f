"""Cold wall time of evaluating the design case (`plan eval`), in fresh processes.

Run:  python benchmarks/bench_eval.py [--repeat 5]
Prints the median, min and max of: `plan --help` (import cost), `plan check` and `plan eval`
of specs/cases/cpt-qwen3-8b-4090.plan, each in a new Python process (cold caches).
Results are recorded in benchmarks/RESULTS.md by hand; no timing is asserted in unit tests.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "specs" / "cases" / "cpt-qwen3-8b-4090.plan"


def timed(args: list[str], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dsl.cli", *args], check=True, capture_output=True)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    for label, args in [("plan --help", ["--help"]), ("plan check", ["check", str(CASE)]),
                        ("plan eval", ["eval", str(CASE)]), ("plan solve", ["solve", str(CASE)])]:
        ts = timed(args, a.repeat)
        print(f"{label:<12} median {statistics.median(ts):.3f} s  min {min(ts):.3f} s  max {max(ts):.3f} s")


if __name__ == "__main__":
    main()

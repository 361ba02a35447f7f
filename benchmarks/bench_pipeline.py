"""Cold `plan eval` of the pipeline scale case (p = 64, m = 1,024, v = 4 interleaved:
524,352 activities on one timeline), in fresh processes.

Run:  python benchmarks/bench_pipeline.py [--repeat 3]
Prints wall and CPU time (user + system of the child) of `plan eval` of the case (activations
only) and of a copy with `buffer = 2 MiB` (plus send/receive buffers: ~1.3 M memory holds).  CPU time is
the stable figure on a shared machine.  Results go to benchmarks/RESULTS.md by hand; no timing
is asserted in unit tests.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "specs" / "cases" / "pipeline-scale.plan"


def timed(args: list[str], repeat: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for _ in range(repeat):
        before = os.times()
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dsl.cli", *args], check=True, capture_output=True, cwd=ROOT)
        wall.append(time.perf_counter() - t)
        after = os.times()
        cpu.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        buffers = Path(d) / "pipeline-scale-buffers.plan"
        buffers.write_text(CASE.read_text(encoding="utf-8").replace("activation = 25.5 MiB",
                                                                     "activation = 25.5 MiB; buffer = 2 MiB"),
                           encoding="utf-8")
        for label, path in (("activations", CASE), ("+ buffers", buffers)):
            wall, cpu = timed(["eval", str(path)], a.repeat)
            print(f"plan eval scale ({label:<11}) wall median {statistics.median(wall):.2f} s  "
                  f"cpu median {statistics.median(cpu):.2f} s  (min {min(cpu):.2f}, max {max(cpu):.2f})")


if __name__ == "__main__":
    main()

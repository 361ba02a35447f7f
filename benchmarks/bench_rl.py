"""Speed of the RL plugins' two non-trivial parts: the colocated switch order search at its
12-step bound (dynamic programming over 4,096 subsets) and an RL loop case evaluated cold.

    python benchmarks/bench_rl.py [--repeat N]
"""
from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def search(repeat: int) -> list[float]:
    from plugins.workloads.rl_colocate import best_order

    rng = random.Random(1)
    times = []
    for _ in range(repeat):
        deltas = [rng.choice([-1, 1]) * rng.randint(1, 40) for _ in range(12)]
        prec = [(i, i + 1) for i in range(0, 12, 3)]
        t = time.perf_counter()
        best_order(50.0, deltas, prec, list(range(12)))
        times.append(time.perf_counter() - t)
    return times


def cold(args: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dsl.cli", *args], cwd=ROOT, capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    n = ap.parse_args().repeat
    for name, ts in (("switch search, 12 steps", search(n)),
                     ("plan eval rl-loop.plan", cold(["eval", "specs/cases/rl-loop.plan"], n)),
                     ("plan eval rl-colocate.plan", cold(["eval", "specs/cases/rl-colocate.plan"], n))):
        print(f"{name:28s} median {statistics.median(ts):.3f} s  min {min(ts):.3f} s  max {max(ts):.3f} s")


if __name__ == "__main__":
    main()

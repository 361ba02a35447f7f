"""Benchmark: 10⁶ Monte Carlo samples of the design case's finish time (specs/cases/deadline-odds.plan,
MFU and device MTBF uncertain), CPU time of drawing + evaluating the compiled numeric form
(the compilation, once per plan, reported apart).  `python benchmarks/bench_odds.py [--repeat 5]`."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from dsl.results.evaluation import evaluate_file
from dsl.results.odds import compile_plan, sample_plan

CASE = Path(__file__).resolve().parent.parent / "specs" / "cases" / "deadline-odds.plan"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--samples", type=int, default=1_000_000)
    a = ap.parse_args()
    ev = evaluate_file(CASE)
    t = time.process_time()
    compile_plan(ev, "gpus48", ["gpus48.finish_time"])
    print(f"compile gpus48.finish_time and its requirements: {time.process_time() - t:.3f} s CPU")
    for outputs, what in ((["gpus48.finish_time"], "finish_time + requirements"), (None, "every headline + requirements")):
        times = []
        for _ in range(a.repeat):
            t = time.process_time()
            o = sample_plan(ev, "gpus48", a.samples, seed=1, outputs=outputs)
            times.append(time.process_time() - t)
        times.sort()
        print(f"{a.samples:,} samples, {what}: median {times[len(times) // 2]:.3f} s CPU, min {times[0]:.3f} s "
              f"(each call compiles again; full expressions cached after the first); P(meets_deadline) = {o.probability('meets_deadline'):.4f}")


if __name__ == "__main__":
    main()

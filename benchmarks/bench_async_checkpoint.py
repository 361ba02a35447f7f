"""Asynchronous checkpoints at the block's limit: 200 snapshots (800 activities on the
``checkpoint`` timeline, the path-based symbolic mode) and 50 snapshots (200 activities, the
exact max-plus mode), every 10 s at 7 GB/s, so the write queue grows all the way.

Run:  python benchmarks/bench_async_checkpoint.py [--repeat 3]
Prints the median in-process time of ``dsl.load`` + the value of ``rework`` and of the last
commit.  Record results in benchmarks/RESULTS.md by hand; no timing is asserted in unit tests.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

PLAN = """plan q{n} {{
  use async_checkpoint {{ interval = 10 s; snapshots = {n}; size = 112 GB; copy = 0.5 s
                         upload_bw = 7 GB/s; failure_at = 500 s }}
}}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import dsl

    for n in (50, 200):
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "q.plan"
            f.write_text(PLAN.format(n=n), encoding="utf-8")
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                ws = dsl.load(f)
                rework = float(ws.base_value(ws.lookup(f"q{n}.rework")))
                last = float(ws.base_value(ws.lookup(f"q{n}.commit_time_{n}")))
                times.append(time.perf_counter() - t)
            print(f"{n:4d} snapshots ({4 * n} activities): {statistics.median(times):.2f} s "
                  f"(rework {rework:g} s, last commit {last:g} s)")


if __name__ == "__main__":
    main()

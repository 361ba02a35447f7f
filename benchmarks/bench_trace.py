"""Reading request traces and deriving their window demands (the `use trace` block).

Run:  python benchmarks/bench_trace.py [--repeat 5]
Prints the median, min and max over REPEAT runs of: reading each Azure 2023 trace of
specs/data/traces/ with ``plugins.serving.serving_trace.read_trace`` (csv module, validation of every
cell), bucketing it into 60 s windows and the decode-weighted context sums; and the cold wall
time of `plan eval specs/cases/serving-azure-trace.plan` (three plans over both traces, in a
new process).  Results go in benchmarks/RESULTS.md by hand; no unit test asserts a timing.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from plugins.serving import serving_trace as st  # noqa: E402

TRACES = sorted((ROOT / "specs" / "data" / "traces").glob("*.csv"))
CASE = ROOT / "specs" / "cases" / "serving-azure-trace.plan"


def _stats(ts: list[float]) -> str:
    return f"median {statistics.median(ts):.3f} s  min {min(ts):.3f} s  max {max(ts):.3f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    for path in TRACES:
        ts = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            tr = st.read_trace(path)
            st.windows(tr, 60.0)
            st.decode_context_sums(tr)
            ts.append(time.perf_counter() - t)
        print(f"read+windows {path.name:<28} {len(tr):>6} requests  {_stats(ts)}")
    ts = []
    for _ in range(a.repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dsl.cli", "eval", str(CASE)], check=True, capture_output=True)
        ts.append(time.perf_counter() - t)
    print(f"plan eval {CASE.name:<31} {_stats(ts)}")


if __name__ == "__main__":
    main()

"""Throughput of `plan sweep`: evaluations per second of the design case's finish time.

Run:  python benchmarks/bench_sweep.py [--points 4000000] [--repeat 5] [--figure PATH.svg]

The 48-GPU plan of specs/cases/cpt-qwen3-8b-4090.plan is compiled once
(``dsl.results.sweep.compile_outputs``: full symbolic expression of ``gpus48.finish_time`` with MFU
and the GPU count free, every other input nominal, lambdify + numpy + CSE), then evaluated
on batches of random points (MFU uniform in [30 %, 50 %], whole GPU counts 32..128) in this
one process (numpy ufuncs run on one core).  Prints the best and median evaluations per
second per batch size; --figure draws them.  Recorded in benchmarks/RESULTS.md by hand
(target: at least 1e6 evaluations per second).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "specs" / "cases" / "cpt-qwen3-8b-4090.plan"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--figure", metavar="SVG")
    a = ap.parse_args()
    import numpy as np

    import dsl
    from dsl.results.sweep import compile_outputs

    ws = dsl.load(CASE)
    t = time.perf_counter()
    fn, *_ = compile_outputs(ws, "gpus48", ["gpus48.mfu", "gpus48.gpus"], ["gpus48.finish_time"],
                                requirements=False)
    print(f"compile (full expression, lambdify, cse): {time.perf_counter() - t:.3f} s")
    rng = np.random.default_rng(0)
    sizes = [n for n in (10_000, 100_000, 1_000_000, a.points) if n <= a.points]
    rows = []
    for n in sizes:
        mfu = rng.uniform(0.30, 0.50, n)
        gpus = rng.integers(32, 129, n).astype(float)
        rates = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            (out,) = fn(mfu, gpus)
            rates.append(n / (time.perf_counter() - t))
        assert out.shape == (n,)
        rows.append((n, max(rates), statistics.median(rates)))
        print(f"{n:>10,} points  best {max(rates) / 1e6:6.2f} M eval/s  median {statistics.median(rates) / 1e6:6.2f} M eval/s")
    if a.figure:
        from dsl.plugin.figures import new_figure, save
        fig = new_figure(6, 3.5)
        ax = fig.add_subplot(111)
        ax.plot([r[0] for r in rows], [r[2] / 1e6 for r in rows], "o-", label="median")
        ax.plot([r[0] for r in rows], [r[1] / 1e6 for r in rows], "s--", label="best")
        ax.axhline(1.0, color="grey", linestyle=":", label="target 1 M/s")
        ax.set_xscale("log")
        ax.set_xlabel("points per call")
        ax.set_ylabel("million evaluations / s")
        ax.set_title("plan sweep: finish time of gpus48 (one core)")
        ax.legend()
        print(save(fig, a.figure))


if __name__ == "__main__":
    main()

"""A Calculon-sized layout search: Megatron-Turing NLG 530B on 5,128 A100s, 7,680 candidates.

Run:  python benchmarks/bench_layout.py [--repeat 7]

Loads specs/cases/layout-mt-nlg-530b.plan once, then times ``plugins.layout_search.run`` (local engine:
constants, candidate grid, the vectorised closed forms of ``plugins/layout_model.py``, the
validity rules with reasons, the Pareto front and the explanations) for each plan — 5,128,
4,096 and the published 4,480 GPUs — in this one process (numpy runs on one core; the
thread pools of BLAS are not used by these elementwise operations).  Prints the best and
median wall time and CPU time per search and the ratio to Calculon's ≈60 s on two cores
(Isaev et al., SC'23, "Calculon: a Methodology and Tool for High-Level Codesign of Systems
and Large Language Models": ≈8,000 layouts of MT-NLG 530B in about a minute).  Recorded in
benchmarks/RESULTS.md by hand (issue 13 target: well under a second on one core).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "specs" / "cases" / "layout-mt-nlg-530b.plan"
CALCULON_S = 60.0          # ≈ 1 minute on two cores (Calculon paper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    import dsl
    from plugins import layout_search as search

    t = time.perf_counter()
    ws = dsl.load(CASE)
    print(f"load and evaluate the .plan: {time.perf_counter() - t:.3f} s (once)")
    for plan in ("mtnlg", "mtnlg_4096", "published"):
        walls, cpus = [], []
        for _ in range(a.repeat):
            w, c = time.perf_counter(), time.process_time()
            res = search.run(ws, plan)
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
        n, v = len(res), int(res.columns["valid"].sum())
        best = min(walls)
        print(f"{plan}: {n} candidates, {v} valid; wall best {best * 1e3:.1f} ms, median "
              f"{statistics.median(walls) * 1e3:.1f} ms; CPU median {statistics.median(cpus) * 1e3:.1f} ms; "
              f"{n / best:,.0f} layouts/s; Calculon ≈{CALCULON_S:.0f} s on 2 cores -> "
              f"{CALCULON_S / statistics.median(walls):,.0f}× faster (median, 1 core)")


if __name__ == "__main__":
    main()

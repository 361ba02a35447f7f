"""A Calculon-sized layout search: Megatron-Turing NLG 530B on 5,128 A100s, 7,680 candidates.

Run:  python benchmarks/bench_layout.py [--repeat 7]

Method: in-process.  Loads specs/cases/layout-mt-nlg-530b.plan once, then times
``plugins.training.layout_search.run`` (local engine: constants, candidate grid, the vectorised closed forms of
``plugins/training/layout_model.py``, the validity rules with reasons, the Pareto front and the
explanations) for each plan, and for a plan without a valid layout its diagnosis (the nearest
batch and GPU count) apart — 5,128, 4,096 and the published 4,480 GPUs — in this one process
(numpy runs on one core), and the cold `plan search` of the first plan in a new process.
Prints wall and CPU times and layouts per second.  It compares with nothing: a ratio to another
tool is only printed by benchmarks/peers.py, which runs both side by side (Calculon with
``--calculon PATH``).  Recorded in benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "specs" / "cases" / "layout-mt-nlg-530b.plan"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    import dsl
    from plugins.training import layout_search as search

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
        print(f"{plan}: {n} candidates, {v} valid; in-process wall best {best * 1e3:.1f} ms, median "
              f"{statistics.median(walls) * 1e3:.1f} ms; CPU median {statistics.median(cpus) * 1e3:.1f} ms; "
              f"{n / statistics.median(cpus):,.0f} layouts per CPU second")
        if res.best is None and hasattr(res, "diagnose"):
            # no valid layout: the follow-up search of neighbouring batches and GPU counts
            # (`plan search` prints it), timed on its own
            dw = []
            for _ in range(a.repeat):
                r2 = search.run(ws, plan)
                w = time.perf_counter()
                d = r2.diagnose()
                dw.append(time.perf_counter() - w)
            print(f"  diagnosis (nearest batch {d.get('nearest_batch')}, nearest GPU count {d.get('nearest_gpus')}): "
                  f"wall median {statistics.median(dw) * 1e3:.1f} ms")
    import os
    import subprocess
    import sys
    cpu = []
    for _ in range(max(1, a.repeat // 2)):
        before = os.times()
        subprocess.run([sys.executable, "-m", "dsl.cli", "search", str(CASE), "--plan", "mtnlg"], check=True,
                       capture_output=True, cwd=ROOT)
        after = os.times()
        cpu.append(after.children_user - before.children_user + after.children_system - before.children_system)
    print(f"cold `plan search --plan mtnlg` (new process, imports included): CPU median {statistics.median(cpu):.2f} s")


if __name__ == "__main__":
    main()

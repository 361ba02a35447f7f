"""Same input, same answer: run the cases whose answers once depended on machine load, first on
an idle machine and then with N busy loops beside them, and compare stdout, stderr and exit code
byte for byte.

    python benchmarks/same_answer_under_load.py            # 4 busy loops
    python benchmarks/same_answer_under_load.py --busy 8 --out under-load.json

The cases are those a wall-clock limit once decided: the serving SLO search over the Azure trace
(19 trace simulations), the serving trace, `plan check --strict` of a failing requirement (its
drivers), a structural sweep, and the search's work budget lowered so that it stops mid-way.
Prints, per case, the exit code, CPU and wall time of both runs and whether they agree; exits 1
when any output differs.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "specs" / "cases"

RUNS = [
    ("serving-slo-azure eval", ["eval", str(CASES / "serving-slo-azure.plan")]),
    ("serving-slo-azure, search_requests=20000", ["eval", str(CASES / "serving-slo-azure.plan"),
                                                   "--limit", "search_requests=20000"]),
    ("serving-azure-trace eval", ["eval", str(CASES / "serving-azure-trace.plan")]),
    ("design case check --strict", ["check", "--strict", str(CASES / "cpt-qwen3-8b-4090.plan")]),
    ("design case solve", ["solve", str(CASES / "cpt-qwen3-8b-4090.plan")]),
    ("structural sweep", ["sweep", str(CASES / "cpt-qwen3-8b-4090.plan"), "--plan", "gpus32",
                          "--vary", "gpus32.gpus=16:64:4"]),
]


def _burn(stop):
    while not stop.is_set():
        pass


def _run(args: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "dsl.cli", *args], capture_output=True, text=True, cwd=str(ROOT),
                       env=dict(os.environ, PLAN_LIMITS="", PLAN_PROGRESS="0"))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr, "cpu_s": round(cpu, 2),
            "wall_s": round(wall, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", type=int, default=4, help="busy loops beside the second run (default 4)")
    ap.add_argument("--out", help="write the summary as JSON")
    args = ap.parse_args(argv)
    rows, same_all = [], True
    idle = {name: _run(a) for name, a in RUNS}
    stop = multiprocessing.Event()
    loops = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(args.busy)]
    for p in loops:
        p.start()
    try:
        loaded = {name: _run(a) for name, a in RUNS}
    finally:
        stop.set()
        for p in loops:
            p.join(5)
    print(f"{'case':42} {'rc':>3} {'idle CPU':>9} {'idle wall':>9} {'busy CPU':>9} {'busy wall':>9}  same")
    for name, _ in RUNS:
        a, b = idle[name], loaded[name]
        same = (a["rc"], a["stdout"], a["stderr"]) == (b["rc"], b["stdout"], b["stderr"])
        same_all &= same
        print(f"{name:42} {a['rc']:>3} {a['cpu_s']:>8.2f}s {a['wall_s']:>8.2f}s {b['cpu_s']:>8.2f}s "
              f"{b['wall_s']:>8.2f}s  {'yes' if same else 'NO'}")
        rows.append({"case": name, "rc": [a["rc"], b["rc"]], "cpu_s": [a["cpu_s"], b["cpu_s"]],
                     "wall_s": [a["wall_s"], b["wall_s"]], "same": same})
    print(f"{args.busy} busy loops beside the second run; outputs and exit codes "
          + ("identical" if same_all else "DIFFER"))
    if args.out:
        Path(args.out).write_text(json.dumps({"busy": args.busy, "rows": rows, "same": same_all}, indent=2) + "\n",
                                  encoding="utf-8")
    return 0 if same_all else 1


if __name__ == "__main__":
    sys.exit(main())

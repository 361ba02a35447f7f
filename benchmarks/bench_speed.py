"""Cold-process CPU time and peak memory of the commands the speed work targets, optionally
next to another checkout of this project in the same run (before/after tables).

Run:  python benchmarks/bench_speed.py [--repeat 3] [--baseline DIR] [--cases] [--eval FILE ...]

Method: every figure is a new Python process (``python -m dsl.cli …`` with the checkout as the
working directory, so its own ``dsl`` and ``plugins`` are imported), timed by ``os.wait4`` as
the child's CPU time (user + system) and peak resident memory; the median of ``--repeat`` runs,
the baseline and this checkout alternating run by run so that both see the same machine load.
The load average is printed; CPU time is the figure that stays stable on a shared machine,
wall time is printed beside it.  ``--cases`` also evaluates every file of ``specs/cases/``
once per checkout (alternating file by file) and prints them side by side.

Caches: the warm-up run also fills the parser's cache (the analysed grammar and the files'
parse trees, see dsl/syntax/parser.py), as any second run of an installed ``plan`` finds it;
the row "same, empty parser cache" is the design case's first run after installation (each
run with a new empty ``PLAN_CACHE_DIR``).

Bytecode: an installed program runs from compiled ``.pyc`` files.  The children run with
``PYTHONDONTWRITEBYTECODE`` removed and ``PYTHONPYCACHEPREFIX`` pointing at a cache directory
of each checkout (one untimed warm-up run fills it), so an environment that forbids writing
bytecode does not add the compilation of every module (≈0.1 s) to each figure;
``--no-bytecode`` keeps the environment as it is.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
plan azure_conv {
  model = qwen3_8b; device = rtx_pro_6000_bw; cards = 1
  use trace { file = "%s"; window = %s s }
  use decode_bound { batch = 64 seq }
  use fluid_queue {}
}
"""


BYTECODE = True


def child_env(tree: Path) -> dict:
    env = dict(os.environ)
    if BYTECODE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "plan-bench-pyc" / tree.name)
    return env


def run(tree: Path, args: list[str], fresh_cache: bool = False) -> tuple[float, float, float]:
    env = child_env(tree)
    if fresh_cache:     # a first run: no analysed grammar, no parse trees (PLAN_CACHE_DIR empty dir)
        env["PLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="plan-cache-")
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "dsl.cli", *args], cwd=tree, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{tree}: plan {' '.join(args)} crashed")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout of this project (e.g. `git archive` of main)")
    ap.add_argument("--cases", action="store_true", help="also every file of specs/cases/ (once each)")
    ap.add_argument("--eval", nargs="+", metavar="FILE", default=None,
                    help="only `plan eval FILE` of these files (paths relative to the checkout), --repeat runs each")
    ap.add_argument("--imports", action="store_true",
                    help="only the import tree of `plan eval` of the design case (python -X importtime)")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="run the children in this environment as it is (see the module docstring)")
    a = ap.parse_args()
    global BYTECODE
    BYTECODE = not a.no_bytecode
    if a.imports:
        return imports(([a.baseline.resolve()] if a.baseline else []) + [ROOT], a.repeat)
    trees = ([("before", a.baseline.resolve())] if a.baseline else []) + [("after", ROOT)]
    tmp = Path(tempfile.mkdtemp())
    conv = ROOT / "specs" / "data" / "traces" / "azure-llm-2023-conv.csv"
    jobs = [("plan eval design case", ["eval", "specs/cases/cpt-qwen3-8b-4090.plan"]),
            ("  same, empty parser cache", ["eval", "specs/cases/cpt-qwen3-8b-4090.plan"], True),
            ("plan solve design case", ["solve", "specs/cases/cpt-qwen3-8b-4090.plan"]),
            ("plan report design case (html)", ["report", "specs/cases/cpt-qwen3-8b-4090.plan", "-o",
                                                str(tmp / "r.html")]),
            ("plan eval moe-capacity", ["eval", "specs/cases/moe-capacity.plan"]),
            ("plan eval pipeline-scale", ["eval", "specs/cases/pipeline-scale.plan"])]
    if a.eval:
        jobs = [(f"plan eval {Path(f).name}", ["eval", f]) for f in a.eval]
    for w in (() if a.eval else ("7.5", "3.75", "1.875")):
        f = tmp / f"trace-{w}.plan"
        f.write_text(TRACE % (conv, w), encoding="utf-8")
        jobs.append((f"trace, {w} s windows ({int(3540 / float(w))}-ish)", ["eval", str(f)]))
    for _, tree in trees:       # warm-up: compile the checkout's modules once (untimed)
        run(tree, ["eval", "specs/cases/cpt-qwen3-8b-4090.plan"])
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; cold processes, median of {a.repeat}; "
          "CPU = user + system of the child")
    print(f"{'command':<36} " + "  ".join(f"{t:>8} CPU s {t:>6} MiB {t:>7} wall" for t, _ in trees))
    for label, args, *fresh in jobs:
        res: dict = {t: [] for t, _ in trees}
        for _ in range(a.repeat):
            for t, tree in trees:
                res[t].append(run(tree, args, bool(fresh)))
        cells = []
        for t, _ in trees:
            cpu = statistics.median(r[0] for r in res[t])
            rss = statistics.median(r[1] for r in res[t])
            wall = statistics.median(r[2] for r in res[t])
            cells.append(f"{cpu:>14.2f} {rss:>10.0f} {wall:>12.2f}")
        print(f"{label:<36} " + "  ".join(cells), flush=True)
    if a.cases:
        files = [f.name for f in sorted((ROOT / "specs" / "cases").glob("*.plan")) if f.name != "pipeline-scale.plan"]
        cpus: dict = {t: {} for t, _ in trees}
        for name in files:          # once each, the checkouts alternating file by file
            for t, tree in trees:
                if (tree / "specs" / "cases" / name).exists():
                    cpus[t][name] = run(tree, ["eval", f"specs/cases/{name}"])[0]
        print(f"\nspecs/cases/ (without the scale case), one cold `plan eval` each, CPU s; load average "
              f"{os.getloadavg()[0]:.2f}")
        print(f"{'file':<40}" + "".join(f"{t:>10}" for t, _ in trees))
        for name in files:
            print(f"{name:<40}" + "".join(f"{cpus[t][name]:>10.2f}" if name in cpus[t] else f"{'—':>10}"
                                         for t, _ in trees))
        for t, _ in trees:
            v = cpus[t]
            over = [f"{k} {x:.2f}" for k, x in sorted(v.items(), key=lambda kv: -kv[1]) if x > 1.0]
            print(f"{t}: {len(v)} files, median {statistics.median(v.values()):.2f} s CPU, max {max(v.values()):.2f} s; "
                  f"{len(over)} over 1 s: {', '.join(over) or 'none'}", flush=True)


def imports(trees: list[Path], repeat: int) -> None:
    """Median cumulative import time (µs, as ``-X importtime`` reports it: wall time) of the
    top-level packages `plan eval` of the design case imports, per checkout."""
    keys = ("sympy", "networkx", "numpy", "lark", "pluggy", "matplotlib", "scipy")
    rows: dict = {t: {k: [] for k in keys + ("plugins.*", "total")} for t in trees}
    for t in trees:
        run(t, ["eval", "specs/cases/cpt-qwen3-8b-4090.plan"])     # warm-up (bytecode)
    for _ in range(repeat):
        for t in trees:
            p = subprocess.run([sys.executable, "-X", "importtime", "-m", "dsl.cli", "eval",
                                "specs/cases/cpt-qwen3-8b-4090.plan"], cwd=t, capture_output=True, text=True,
                               env=child_env(t))
            seen = {k: 0 for k in keys + ("plugins.*", "total")}
            for line in p.stderr.splitlines():
                if not line.startswith("import time:") or "|" not in line:
                    continue
                _, cum, name = line.split("|")
                if not cum.strip().isdigit():
                    continue
                mod = name.strip()
                if mod in keys:                     # wherever it is first imported
                    seen[mod] += int(cum)
                elif mod.startswith("plugins.") and mod.count(".") == 1:
                    seen["plugins.*"] += int(cum)
                if not name.startswith("  "):       # top level
                    seen["total"] += int(cum)
            for k, v in seen.items():
                rows[t][k].append(v)
    print(f"load average {os.getloadavg()[0]:.2f}; import times of `plan eval` of the design case, ms (median of {repeat})")
    print(f"{'package':<12}" + "".join(f"{t.name[:14]:>16}" for t in trees))
    for k in keys + ("plugins.*", "total"):
        print(f"{k:<12}" + "".join(f"{statistics.median(rows[t][k]) / 1000:>16.0f}" for t in trees))


if __name__ == "__main__":
    main()

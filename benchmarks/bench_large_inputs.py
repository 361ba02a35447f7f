"""Cost of large inputs: CPU seconds per MB to check (or reject) a large `.plan` file, and the
reports whose formulas are large — optionally next to another checkout of this project.

Run:  python benchmarks/bench_large_inputs.py [--repeat 1] [--baseline DIR] [--only NAME ...]

Inputs, written to a temporary directory (the repository holds no large file):

* ``semicolons-1mb`` — the lifecycle case with 1 MB of ``;`` between two declarations and an
  out-of-range number: ``plan eval --format json`` rejects it (a fuzzer's 'hang');
* ``semicolons-2mb`` — 2,000,000 ``;`` after an import: ``plan check`` accepts it;
* ``offload-2mb`` — the offload case with 1 MB of ``;`` inside each of two bodies and a
  declaration named twice: rejected;
* ``fields-100k-line`` — 100,000 fields of one declaration on one line (above the ``fields``
  limit of 20,000) and a syntax error 9 lines later: rejected;
* ``dense-0.5mb``, ``dense-1mb``, ``dense-2mb`` — plans of 40 formula fields each
  (``f7 = 7 s * (1 + 7/3) - 2 s / (7+1)``), 0.5, 1 and 1.95 MB: well-formed, ``plan check`` accepts them;
* ``report-md``, ``report-html`` — ``plan report specs/cases/serving-azure-trace.plan`` (three
  plans, 59-window ``Max`` formulas).

Method: as benchmarks/bench_speed.py — a new Python process per figure (``python -m dsl.cli``
with the checkout as the working directory), its CPU time (user + system) and peak resident
memory from ``os.wait4``, the median of ``--repeat`` runs, the baseline and this checkout
alternating run by run.  Every run starts from a copy of a warmed parser cache (the analysed
grammar and the catalog's parse trees, as any second run of an installed ``plan`` finds them)
in a new ``PLAN_CACHE_DIR``, so a large file is parsed, never read back from the cache.  The
load average is printed: on a shared machine CPU time is the stable figure.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LIFECYCLE = """import "@catalog/hardware.plan"

workload demand { tasks = 2e8 }

%s
plan larger {
  use lifecycle { upfront = 1e308 h; per_task = [0.72 s]; tasks = demand.tasks }
}

plan smaller {
  use lifecycle { upfront = 100000 h; per_task = [0 s]; tasks = demand.tasks }
}

solve demand.tasks for smaller.life_cost == larger.life_cost
"""

OFFLOAD = """import "@catalog/hardware.plan"

plan pcie4 {
  device = rtx4090
  use offload {
    tensor = 12288 * 4096 * 2 B
    link = pcie4_x16
    cpu_bw = 8 * 4800e6 * 8 B/s
    convert = "cpu"
  }
}
plan pcie4_window extends pcie4 {
  use offload { window = 2 ms }
%s
}
plan pcie4_window extends pcie4 {
  use offload { window = 2 ms }
%s
}
"""

FIELDS = """import "@catalog/models.plan"

plan replay_uint16 {
  model = qwen3_30b_a3b
  use routing_replay { tokens = 8192 token; id_bytes = 2 B }
}

plan big { %s }
plan replay_int32 extends replay_uint16 { use routing_replay { id_bytes = 4 B } }

plan expert_weights_ep16 {
  model = qwen3_235b_a22b
  use expert_sync { receivers < 16; bytes_per_param = 2 B/param }
}
"""


def dense(mb: float) -> str:
    """Plans of 40 formula fields each, up to ``mb`` MB (slow-dense-2mb.py of the reproducers)."""
    parts, size, i = [], 0, 0
    while size < mb * 1e6:
        s = f"plan p{i} {{\n" + "".join(f"  f{j} = {j} s * (1 + {j}/3) - 2 s / ({j}+1)\n" for j in range(40)) + "}\n"
        parts.append(s)
        size += len(s)
        i += 1
    return "".join(parts)


def inputs(d: Path) -> dict:
    """{name: (command-line arguments, MB of the file or None)} of the inputs, written under ``d``."""
    files = {
        "semicolons-1mb": (LIFECYCLE % (";" * 1_000_000), ["eval", "--format", "json"]),
        "semicolons-2mb": ('import "@catalog/hardware.plan"\n' + ";" * 2_000_000 + "\n", ["check"]),
        "offload-2mb": (OFFLOAD % (";" * 1_000_000, ";" * 1_000_000), ["check"]),
        "fields-100k-line": (FIELDS % "; ".join(f"a{i} = {i}" for i in range(100_000)), ["check"]),
        "dense-0.5mb": (dense(0.5), ["check"]),
        "dense-1mb": (dense(1.0), ["check"]),
        "dense-2mb": (dense(1.95), ["check"]),
    }
    out = {}
    for name, (text, cmd) in files.items():
        p = d / f"{name}.plan"
        p.write_text(text, encoding="utf-8")
        out[name] = ([*cmd, str(p)], len(text.encode()) / 1e6)
    trace = str(ROOT / "specs" / "cases" / "serving-azure-trace.plan")
    out["report-md"] = (["report", trace, "--format", "md"], None)
    out["report-html"] = (["report", trace, "--format", "html"], None)
    return out


def run(tree: Path, args: list[str], cache: Path) -> tuple[float, float, int]:
    """(CPU s, peak MiB, exit code) of ``plan ARGS`` run from checkout ``tree``."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "plan-bench-pyc" / tree.name)
    run_cache = Path(tempfile.mkdtemp(prefix="plan-cache-"))
    shutil.copytree(cache, run_cache, dirs_exist_ok=True)
    os.chmod(run_cache, 0o700)
    env["PLAN_CACHE_DIR"] = str(run_cache)
    try:
        p = subprocess.Popen([sys.executable, "-m", "dsl.cli", *args], cwd=tree, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env)
        _, status, ru = os.wait4(p.pid, 0)
    finally:
        shutil.rmtree(run_cache, ignore_errors=True)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def warm_cache(tree: Path, work: Path) -> Path:
    """A parser cache holding the analysed grammar and the catalog (one untimed run from ``tree``)."""
    cache = Path(tempfile.mkdtemp(prefix="plan-cache-warm-"))
    (work / "warm.plan").write_text('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'
                                    "plan w { a = 1 }\n", encoding="utf-8")
    env = dict(os.environ, PLAN_CACHE_DIR=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "plan-bench-pyc" / tree.name)
    subprocess.run([sys.executable, "-m", "dsl.cli", "check", str(work / "warm.plan")], cwd=tree, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return cache


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--baseline", type=Path, help="another checkout of this project (e.g. `git archive` of main)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these inputs (names as listed in the docstring)")
    a = ap.parse_args()
    trees = ([("before", a.baseline.resolve())] if a.baseline else []) + [("after", ROOT)]
    with tempfile.TemporaryDirectory(prefix="plan-large-") as tmp:
        work = Path(tmp)
        cases = inputs(work)
        if a.only:
            unknown = set(a.only) - set(cases)
            if unknown:
                raise SystemExit(f"unknown input(s) {', '.join(sorted(unknown))}; inputs: {', '.join(cases)}")
            cases = {k: v for k, v in cases.items() if k in a.only}
        caches = {label: warm_cache(tree, work) for label, tree in trees}
        print(f"load average {os.getloadavg()[0]:.2f}; median of {a.repeat} cold process(es); CPU = user + system")
        head = f"{'input':<18} {'MB':>5}"
        for label, _ in trees:
            head += f" | {label + ' CPU s':>13} {'s/MB':>6} {'MiB':>6} {'exit':>4}"
        print(head)
        for name, (args, mb) in cases.items():
            got = {label: [] for label, _ in trees}
            for _ in range(a.repeat):
                for label, tree in trees:
                    got[label].append(run(tree, args, caches[label]))
            row = f"{name:<18} {mb if mb is not None else float('nan'):>5.2f}"
            for label, _ in trees:
                cpu = statistics.median(r[0] for r in got[label])
                mem = statistics.median(r[1] for r in got[label])
                per = f"{cpu / mb:6.2f}" if mb else f"{'':>6}"
                row += f" | {cpu:13.2f} {per} {mem:6.0f} {got[label][-1][2]:>4}"
            print(row, flush=True)
        for c in caches.values():
            shutil.rmtree(c, ignore_errors=True)
        print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

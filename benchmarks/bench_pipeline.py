"""Cold `plan eval` of the pipeline scale case (p = 64, m = 1,024, v = 4 interleaved:
524,352 activities on one timeline), in fresh processes; and the cost of small timelines
around the size up to which activities are mirrored into the quantity graph.

Run:  python benchmarks/bench_pipeline.py [--repeat 3] [--quick]

Method: cold processes; for each, the child's CPU time (user + system) and peak resident
memory (``os.wait4``), and wall time; medians over ``--repeat``.  CPU time is the stable
figure on a shared machine.  Cases: the scale case (activations only), a copy with
`buffer = 2 MiB` (plus send/receive buffers: ~1.3 M memory holds), and 1F1B schedules of
2,056 (p 8, m 128: mirrored) and 8,208 (p 16, m 256: not mirrored) activities, evaluated
in-process after a warm-up (no imports) to show there is no cliff at the mirroring limit
(``dsl.load`` in a child process).  ``--quick``: one run of the scale case (activations only)
and of each small schedule, to check that the benchmark runs.
Results go to benchmarks/RESULTS.md by hand; no timing is asserted in unit tests.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "specs" / "cases" / "pipeline-scale.plan"

SMALL = """plan scale {
  use pipeline {
    schedule = "1f1b"; stages = %d; microbatches = %d; layers = 4
    forward = 10 ms; backward = 20 ms; transfer = 1 ms; update = 1 ms
    activation = 25.5 MiB
  }
}
"""


def timed(args: list[str], repeat: int) -> tuple[list[float], list[float], list[float]]:
    wall, cpu, rss = [], [], []
    for _ in range(repeat):
        t = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "dsl.cli", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall.append(time.perf_counter() - t)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"plan {' '.join(args)} failed")
        cpu.append(ru.ru_utime + ru.ru_stime)
        rss.append(ru.ru_maxrss / 1024)          # KiB -> MiB (Linux)
    return wall, cpu, rss


def in_process(path: Path, repeat: int) -> float:
    """Median CPU time of ``dsl.load(path)`` in a child process, after one untimed load there."""
    out = subprocess.run([sys.executable, __file__, "--in-process", str(path), "--repeat", str(repeat)], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def _child(path: str, repeat: int) -> None:
    """The child of :func:`in_process`: prints the median CPU time of evaluating ``path``."""
    sys.path.insert(0, str(ROOT))
    import dsl
    dsl.load(path)                      # warm-up: imports, plugins, parser tables
    ts = []
    for _ in range(repeat):
        t = time.process_time()
        dsl.load(path)
        ts.append(time.process_time() - t)
    print(statistics.median(ts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one run of each case, without the buffers case")
    ap.add_argument("--in-process", metavar="PLAN", help=argparse.SUPPRESS)   # the child of in_process()
    a = ap.parse_args()
    if a.in_process:
        return _child(a.in_process, a.repeat)
    if a.quick:
        a.repeat = 1
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        buffers = Path(d) / "pipeline-scale-buffers.plan"
        buffers.write_text(CASE.read_text(encoding="utf-8").replace("activation = 25.5 MiB",
                                                                     "activation = 25.5 MiB; buffer = 2 MiB"),
                           encoding="utf-8")
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        for label, path in (("activations", CASE),) + (() if a.quick else (("+ buffers", buffers),)):
            wall, cpu, rss = timed(["eval", str(path)], a.repeat)
            print(f"plan eval scale ({label:<11}) wall median {statistics.median(wall):.2f} s  "
                  f"cpu median {statistics.median(cpu):.2f} s  (min {min(cpu):.2f}, max {max(cpu):.2f})  "
                  f"peak RSS median {statistics.median(rss):.0f} MiB")
        from dsl.engine.timeline import MIRROR_LIMIT
        for p, m in ((8, 128), (16, 256)):
            n = p * m * 2 + p
            f = Path(d) / f"small-{n}.plan"
            f.write_text(SMALL % (p, m), encoding="utf-8")
            c = in_process(f, 1 if a.quick else 7)
            print(f"1f1b p {p:>2} m {m:>3}: {n:>5} activities ({'mirrored' if n <= MIRROR_LIMIT else 'not mirrored'}):"
                  f" in-process CPU median {c * 1e3:.1f} ms")


if __name__ == "__main__":
    main()

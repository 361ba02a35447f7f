"""Long fuzz run: N generated or mutated `.plan` files through the real CLI, each in its own
process, with its CPU time and peak memory measured.

    python benchmarks/fuzz_long.py --level check --inputs 100000 --jobs 2 --out check.json
    python benchmarks/fuzz_long.py --level eval --inputs 10000 --start 500000 --jobs 2 --out eval.json

Inputs are the seeds START … START+N-1 of ``tests/fuzzing.py`` (even seeds: a file generated
from the grammar; odd seeds: a mutated case file), so any failure is reproduced by its seed::

    python -c "import sys; sys.path.insert(0, 'tests'); import fuzzing; print(fuzzing.gen_plan(SEED))"
    python -c "import sys; sys.path.insert(0, 'tests'); import fuzzing; print(fuzzing.mutate_case(SEED)[1])"

How an input runs.  This process imports the CLI, the plugins, numpy and scipy and runs four
case files once (warm-up, no alarm), then never runs an input itself: each input runs in a
``fork()`` of it — a fresh copy of a cleanly initialised interpreter, so nothing an input
does (an import interrupted by the alarm, a cache left half-built) can reach the next one.
The promise checked is the one of ``tests/test_fuzz.py``: exit code in {0, 1, 2}, no
"internal error", "this is a bug in plugin" (a plugin's exception) or traceback in the output, and

* **hang** = the input used more than ``--cpu-seconds`` (default 10) of *CPU time* (user +
  sys of its own process: an ``ITIMER_PROF`` alarm, and ``RLIMIT_CPU`` at twice that + 5 s as
  a kernel kill if the alarm cannot interrupt C code).  Time a process waits for a core is not
  CPU time, so other processes loading the machine never make a hang;
* **slow under load** = no answer after ``--wall-seconds`` (default 120) of wall-clock time
  while below the CPU threshold: the process is killed and the input retried once at the end
  of the run, alone; still slow → reported as such (not counted as a hang, and not as ok);
* **over 1 GiB** = the process's peak resident memory (``ru_maxrss`` from ``wait4``, which
  includes the ≈200 MiB of the warmed interpreter it was forked from, as a CLI run has) above
  1 GiB; each process also runs under a 4 GiB address-space cap;
* **crash** = the process died without an answer below the CPU threshold (a signal).

Prints progress to stderr, then a summary (inputs, ok, located errors, internal errors with
seeds and first line, hangs, slow under load, max RSS, wall and CPU time, the command) and the
JSON summary (also written to ``--out``).  Exits 1 on any internal error, traceback, bad exit
code, hang, crash or input above 1 GiB, else 0.
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):   # no BLAS threads to fork
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import shlex  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GIB = 2 ** 30
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

FAILURES = ("internal error", "plugin bug", "traceback", "bad exit", "hang", "crash", "over 1 GiB")


def _text(seed: int) -> str:
    import fuzzing
    return fuzzing.gen_plan(seed) if seed % 2 == 0 else fuzzing.mutate_case(seed)[1]


def _warm(level: str, slots: int) -> None:
    """Import and run everything an input may need once, in this (the parent) process, so the
    forked children start warm; no alarm is set, so no import here can be interrupted."""
    import fuzzing
    import numpy  # noqa: F401
    import scipy.optimize  # noqa: F401
    from dsl.cli import main
    from dsl.syntax import limits

    for k in range(slots):
        fuzzing.scratch(k)
    fuzzing._blocks()
    fuzzing._kinds()
    fuzzing._case_texts()
    for case in ("layout-qwen3-8b-4090.plan", "serving-replicas-h100.plan", "calibrate-megatron-a100.plan",
                 "scaling-fit.plan"):
        path = fuzzing.scratch(0) / "cases" / case
        if not path.exists():
            continue
        for cmd in (["check", str(path)], ["eval", str(path)] if level == "eval" else None):
            if cmd is None:
                continue
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                try:
                    main(cmd)
                except SystemExit:
                    pass
            limits.set_limits(None)
    gc.collect()
    gc.freeze()          # the children do not rewrite (copy) the parent's objects when they collect


def _child(seed: int, level: str, cpu: float, slot: int, wfd: int) -> None:
    """Run one input (in the forked child) and write its verdict to ``wfd`` as JSON."""
    try:
        hard = int(2 * cpu + 5)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))
        import fuzzing
        cmd = fuzzing.COMMANDS["eval" if level == "eval" else "check"]
        rc, out, err = fuzzing.run_one(_text(seed), cmd, seconds=cpu, clock="cpu", slot=slot)
        bad = fuzzing.verdict(rc, out, err)
        if bad is not None and bad.startswith("exit "):
            bad = "bad exit"
        first = ""
        if bad is not None:
            lines = (out + "\n" + err).splitlines()
            key = {"internal error": "internal error", "traceback": "Traceback",
                   "plugin bug": "this is a bug in plugin"}.get(bad)
            first = next((x for x in lines if key and key in x), next((x for x in lines if x.strip()), ""))
        msg = {"rc": rc, "bad": bad, "first": first[:300], "tail": (err[-600:] if bad else "")}
    except BaseException as e:          # the harness itself failed: report it, do not hide it
        msg = {"rc": "harness", "bad": "crash", "first": f"harness: {type(e).__name__}: {e}"[:300], "tail": ""}
    data = json.dumps(msg).encode()
    while data:
        data = data[os.write(wfd, data):]
    os._exit(0)


class Run:
    """One input's process: its seed, pid, result pipe and start time."""

    def __init__(self, seed: int, level: str, cpu: float, slot: int):
        self.seed, self.slot = seed, slot
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _child(seed, level, cpu, slot, w)
        os.close(w)
        self.pid, self.fd, self.t0, self.buf = pid, r, time.monotonic(), b""

    def read(self) -> bool:
        """Read what is there; True at end of file (the child has answered or died)."""
        chunk = os.read(self.fd, 65536)
        self.buf += chunk
        return not chunk

    def finish(self, killed: bool = False) -> dict:
        if killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        _, status, ru = os.wait4(self.pid, 0)
        os.close(self.fd)
        wall = time.monotonic() - self.t0
        try:
            msg = json.loads(self.buf.decode()) if self.buf else None
        except ValueError:
            msg = None
        return {"seed": self.seed, "msg": msg, "status": status, "killed": killed, "wall": wall,
                "cpu": ru.ru_utime + ru.ru_stime, "rss": ru.ru_maxrss * 1024}


def classify(res: dict, cpu: float) -> str:
    """ok / located error / exit0 / exit2 / one of :data:`FAILURES` / slow under load."""
    msg = res["msg"]
    if msg is None:            # no answer: killed by us (wall), by RLIMIT_CPU, or a crash
        if res["cpu"] >= cpu:
            return "hang"
        return "slow under load" if res["killed"] else "crash"
    if msg["bad"] == "hang":
        return "hang"
    if msg["bad"]:
        return msg["bad"]
    if res["rss"] > GIB:
        return "over 1 GiB"
    return {0: "exit0", 1: "located error", 2: "exit2"}.get(msg["rc"], "bad exit")


def run_seeds(seeds, level: str, cpu: float, wall: float, jobs: int, progress=None) -> list:
    """Run ``seeds`` with up to ``jobs`` processes at once; one :class:`Result` per seed, in order."""
    todo = list(seeds)[::-1]
    running: dict[int, Run] = {}
    free = list(range(jobs))[::-1]
    out: dict[int, dict] = {}
    while todo or running:
        while todo and free:
            r = Run(todo.pop(), level, cpu, free.pop())
            running[r.fd] = r
        ready, _, _ = select.select(list(running), [], [], 0.5)
        done = []
        for fd in ready:
            if running[fd].read():
                done.append((fd, False))
        now = time.monotonic()
        for fd, r in running.items():
            if (fd, False) not in done and now - r.t0 > wall:
                done.append((fd, True))
        for fd, killed in done:
            r = running.pop(fd)
            res = r.finish(killed)
            res["kind"] = classify(res, cpu)
            out[r.seed] = Result(res)
            free.append(r.slot)
            if progress:
                progress(res)
    return [out[s] for s in seeds]


class Result:
    """One input's outcome, kept small (the parent holds one per input, and each child's
    resident memory counts the parent's pages): the answer only for a failure or a slow input."""

    __slots__ = ("seed", "kind", "cpu", "rss", "wall", "killed", "msg")

    def __init__(self, res: dict):
        for k in ("seed", "kind", "cpu", "rss", "wall", "killed"):
            setattr(self, k, res[k])
        self.msg = res["msg"] if res["kind"] in FAILURES or res["kind"] == "slow under load" else None

    def __getitem__(self, key):
        return getattr(self, key)


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def summarise(results: list[dict], retried: dict, args, wall: float, command: str) -> dict:
    kinds: dict[str, int] = {}
    for r in results:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    ok = sum(kinds.get(k, 0) for k in ("exit0", "located error", "exit2"))
    top = max(results, key=lambda r: r["rss"]) if results else None
    cpus = sorted(r["cpu"] for r in results)

    def listed(kind):
        return [{"seed": r["seed"], "first": (r["msg"] or {}).get("first", ""), "cpu_s": round(r["cpu"], 2),
                 "wall_s": round(r["wall"], 1), "rss_mib": r["rss"] // 2 ** 20} for r in results if r["kind"] == kind]

    def pct(q):
        return round(cpus[min(len(cpus) - 1, int(q * len(cpus)))], 3) if cpus else 0.0

    children_cpu = sum(cpus)
    me = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "command": command, "commit": _git_commit(), "level": args.level,
        "seeds": [args.start, args.start + args.inputs - 1], "jobs": args.jobs,
        "cpu_seconds_threshold": args.cpu_seconds, "wall_seconds_backstop": args.wall_seconds,
        "inputs": len(results), "ok": ok, "exit0": kinds.get("exit0", 0),
        "located errors": kinds.get("located error", 0), "exit2": kinds.get("exit2", 0),
        **{k: kinds.get(k, 0) for k in FAILURES}, "slow under load": kinds.get("slow under load", 0),
        "max_rss_mib": round(top["rss"] / 2 ** 20) if top else 0, "max_rss_seed": top["seed"] if top else None,
        "over_1gib": listed("over 1 GiB"),
        "internal_errors": listed("internal error"), "plugin_bugs": listed("plugin bug"),
        "tracebacks": listed("traceback"),
        "bad_exits": listed("bad exit"), "hangs": listed("hang"), "crashes": listed("crash"),
        "slow_under_load": listed("slow under load"), "retried_after_slow": retried,
        "wall_s": round(wall, 1), "cpu_s_inputs": round(children_cpu, 1),
        "cpu_s_harness": round(me.ru_utime + me.ru_stime, 1),
        "cpu_s_per_input": {"mean": round(children_cpu / max(1, len(cpus)), 3), "p50": pct(0.5), "p90": pct(0.9),
                            "p99": pct(0.99), "max": round(cpus[-1], 2) if cpus else 0.0},
        "slowest": [{"seed": r["seed"], "cpu_s": round(r["cpu"], 2)}
                    for r in sorted(results, key=lambda r: -r["cpu"])[:10]],
    }


def report(s: dict) -> str:
    lines = [f"fuzz {s['level']}: {s['inputs']} inputs (seeds {s['seeds'][0]}…{s['seeds'][1]}, commit {s['commit']}, "
             f"{s['jobs']} job(s))",
             f"  ok {s['ok']} (exit 0: {s['exit0']}, located errors: {s['located errors']}, usage: {s['exit2']})",
             f"  internal errors {s['internal error']}, plugin exceptions shown as plugin bugs {s['plugin bug']}, "
             f"tracebacks {s['traceback']}, bad exit codes {s['bad exit']}, "
             f"crashes {s['crash']}",
             f"  hangs (> {s['cpu_seconds_threshold']:g} s CPU) {s['hang']}, slow under load (> "
             f"{s['wall_seconds_backstop']:g} s wall, below the CPU threshold, after one retry) {s['slow under load']}",
             f"  max RSS {s['max_rss_mib']} MiB (seed {s['max_rss_seed']}), inputs above 1 GiB {s['over 1 GiB']}",
             f"  wall {s['wall_s']:.0f} s, CPU {s['cpu_s_inputs']:.0f} s in inputs (mean {s['cpu_s_per_input']['mean']:.3f}"
             f" s, p99 {s['cpu_s_per_input']['p99']:.2f} s, max {s['cpu_s_per_input']['max']:.2f} s) + "
             f"{s['cpu_s_harness']:.0f} s harness",
             f"  command: {s['command']}"]
    for key in ("internal_errors", "plugin_bugs", "tracebacks", "bad_exits", "hangs", "crashes", "over_1gib", "slow_under_load"):
        for f in s[key][:50]:
            lines.append(f"  {key[:-1] if key.endswith('s') else key} seed {f['seed']}: cpu {f['cpu_s']} s, wall "
                         f"{f['wall_s']} s, {f['rss_mib']} MiB: {f['first']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--level", choices=("check", "eval"), default="check")
    ap.add_argument("--inputs", type=int, default=10_000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="inputs run at once (default 1)")
    ap.add_argument("--cpu-seconds", type=float, default=10.0,
                    help="CPU time (user+sys) after which an input is a hang (default 10)")
    ap.add_argument("--wall-seconds", type=float, default=120.0,
                    help="wall-clock backstop: an input still running is killed and counted 'slow under load' "
                         "when below the CPU threshold (default 120)")
    ap.add_argument("--out", default=None, help="write the JSON summary here too")
    args = ap.parse_args(argv)
    command = "python " + " ".join(shlex.quote(a) for a in ["benchmarks/fuzz_long.py"] + list(
        sys.argv[1:] if argv is None else argv))
    t0 = time.monotonic()
    _warm(args.level, max(1, args.jobs))
    n = {"done": 0, "bad": 0, "peak": 0}

    def progress(res):
        n["done"] += 1
        n["peak"] = max(n["peak"], res["rss"])
        if res["kind"] in FAILURES:
            n["bad"] += 1
            print(f"seed {res['seed']}: {res['kind']}: {(res['msg'] or {}).get('first', '')}", file=sys.stderr,
                  flush=True)
        if n["done"] % 500 == 0:
            print(f"{n['done']} inputs, {n['bad']} failures, peak {n['peak'] / 2 ** 20:.0f} MiB, "
                  f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)

    seeds = list(range(args.start, args.start + args.inputs))
    results = run_seeds(seeds, args.level, args.cpu_seconds, args.wall_seconds, max(1, args.jobs), progress)
    retried = {}
    slow = [r["seed"] for r in results if r["kind"] == "slow under load"]
    if slow:                                # once more, one at a time, with twice the backstop
        again = {r["seed"]: r for r in run_seeds(slow, args.level, args.cpu_seconds, 2 * args.wall_seconds, 1)}
        results = [again.get(r["seed"], r) for r in results]
        retried = {str(s): again[s]["kind"] for s in slow}
    s = summarise(results, retried, args, time.monotonic() - t0, command)
    text = json.dumps(s, indent=2, sort_keys=True)
    print(text)
    print(report(s), file=sys.stderr)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 1 if any(s[k] for k in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())

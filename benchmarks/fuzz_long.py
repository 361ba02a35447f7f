"""Long fuzz run: N generated or mutated `.plan` files through the real CLI, in a worker process
that is killed and replaced when an input does not answer, with the peak memory measured.

    python benchmarks/fuzz_long.py --level check --inputs 100000        # parse + check
    python benchmarks/fuzz_long.py --level eval --inputs 10000          # eval
    python benchmarks/fuzz_long.py --level check --inputs 1000 --start 5000 --jobs 2

Inputs are the seeds START … START+N-1 of ``tests/fuzzing.py`` (even seeds: a file generated
from the grammar; odd seeds: a mutated case file), so any failure is reproduced by its seed::

    python -c "import sys; sys.path.insert(0, 'tests'); import fuzzing; print(fuzzing.gen_plan(SEED))"

The property is the one of ``tests/test_fuzz.py``: exit code in {0, 1, 2}, no "internal error"
or traceback, an answer within ``--seconds`` (the worker is killed after twice that), and the
worker's peak resident memory below 1 GiB (each worker runs under a 4 GiB address-space cap so
that a runaway input cannot take the machine).  Prints a JSON summary; exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIB = 2 ** 30


def _worker(conn, level: str, seconds: float) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))
    import fuzzing
    cmd = fuzzing.COMMANDS["eval" if level == "eval" else "check"]
    while True:
        seed = conn.recv()
        if seed is None:
            return
        text = fuzzing.gen_plan(seed) if seed % 2 == 0 else fuzzing.mutate_case(seed)[1]
        rc, out, err = fuzzing.run_one(text, cmd, seconds=seconds)
        bad = fuzzing.verdict(rc, out, err)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        conn.send((bad, rc, rss, err[-400:] if bad else ""))


class Worker:
    def __init__(self, level: str, seconds: float):
        self.parent, child = mp.Pipe()
        self.proc = mp.Process(target=_worker, args=(child, level, seconds), daemon=True)
        self.proc.start()

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            self.parent.send(None)
        self.proc.join(10)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--level", choices=("check", "eval"), default="check")
    ap.add_argument("--inputs", type=int, default=10_000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=20.0, help="answer time per input (default 20)")
    ap.add_argument("--out", default=None, help="write the JSON summary here too")
    args = ap.parse_args(argv)
    t0 = time.time()
    w = Worker(args.level, args.seconds)
    counts = {"inputs": 0, "ok": 0, "exit0": 0, "exit1": 0, "exit2": 0, "internal error": 0, "traceback": 0,
              "hang": 0, "other exit": 0, "over 1 GiB": 0}
    failures, peak = [], 0
    for seed in range(args.start, args.start + args.inputs):
        w.parent.send(seed)
        if not w.parent.poll(2 * args.seconds + 30):   # killed: a hang the alarm could not interrupt
            w.stop(kill=True)
            w = Worker(args.level, args.seconds)
            bad, rc, rss, tail = "hang", "killed", 0, ""
        else:
            try:
                bad, rc, rss, tail = w.parent.recv()
            except EOFError:   # the worker died (a crash, or the address-space cap)
                w = Worker(args.level, args.seconds)
                bad, rc, rss, tail = "crash", "died", 0, ""
        counts["inputs"] += 1
        if isinstance(rc, int) and rc in (0, 1, 2):
            counts[f"exit{rc}"] += 1
        peak = max(peak, rss)
        if rss > GIB:
            counts["over 1 GiB"] += 1
            failures.append({"seed": seed, "kind": "over 1 GiB", "rss_mib": rss // 2**20})
            w.stop(kill=True)
            w = Worker(args.level, args.seconds)
        if bad is None:
            counts["ok"] += 1
        else:
            counts[bad if bad in counts else "other exit"] += 1
            failures.append({"seed": seed, "kind": bad, "rc": rc, "stderr": tail})
        if counts["inputs"] % 500 == 0:
            print(f"{counts['inputs']} inputs, {len(failures)} failures, peak {peak / 2**20:.0f} MiB, "
                  f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    w.stop()
    summary = {"level": args.level, "seeds": [args.start, args.start + args.inputs - 1], **counts,
               "peak_rss_mib": round(peak / 2**20), "seconds": round(time.time() - t0), "failures": failures[:200]}
    text = json.dumps(summary, indent=2, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

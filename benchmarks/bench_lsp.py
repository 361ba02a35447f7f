"""How fast ``plan lsp`` answers while typing: the evaluation behind diagnostics after a
keystroke, and a hover, in milliseconds (a benchmark, not a timed test).

Run:  python benchmarks/bench_lsp.py [--file specs/cases/cpt-qwen3-8b-4090.plan] [--edits 10]

Method: in this process, :func:`dsl.cli.lsp_features.analyze` evaluates FILE's text once
(imports parsed, the plugins loaded: the first open of a file), then ``--edits`` times a text
changed by one keystroke (a trailing comment, a different character each time, so nothing is
a cached text); each is what the server runs after a pause in typing.  Then a hover on each
quantity of the first plan.  Reported: the first evaluation, the median and largest edit and
the median hover, wall time, with the machine's load average.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=str(ROOT / "specs" / "cases" / "cpt-qwen3-8b-4090.plan"))
    ap.add_argument("--edits", type=int, default=10)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from dsl.cli.lsp_features import analyze, hover

    text = Path(a.file).read_text(encoding="utf-8")
    t0 = time.perf_counter()
    an = analyze(a.file, text)
    first = time.perf_counter() - t0
    edits = []
    for i in range(a.edits):
        t0 = time.perf_counter()
        an = analyze(a.file, text + f"\n# edit {i}\n")
        edits.append(time.perf_counter() - t0)
    lines = an.text.split("\n")
    hovers = []
    for n, line in enumerate(lines):
        word = line.strip().split(" ")[0]
        if "=" in line and word.isidentifier():
            t0 = time.perf_counter()
            hover(an, n, line.index(word))
            hovers.append(time.perf_counter() - t0)
    ms = lambda s: f"{s * 1000:.1f} ms"   # noqa: E731
    print(f"{Path(a.file).name}: first evaluation {ms(first)}; an edit: median {ms(statistics.median(edits))}, "
          f"largest {ms(max(edits))} ({a.edits} edits); hover: median "
          f"{ms(statistics.median(hovers)) if hovers else '-'} ({len(hovers)} names); "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""How fast ``plan lsp`` answers while typing: the work behind diagnostics after a keystroke,
and a hover, in CPU milliseconds against the language server's targets (a benchmark, not a timed test).

Run:  python benchmarks/bench_lsp.py [--file specs/cases/cpt-qwen3-8b-4090.plan] [--edits 10]

Method: in this process, :func:`dsl.cli.lsp_features.analyze` evaluates FILE's text once
(imports parsed, the plugins loaded: the first open of a file), then ``--edits`` times a text
changed by one keystroke (a trailing comment, a different character each time, so nothing is
a cached text).  An edit costs what the server's worker runs after a pause in typing: the cheap
pass (:func:`~dsl.cli.lsp_features.quick`: parse and resolve, whose errors are published at
once) and the evaluation (:func:`~dsl.cli.lsp_features.analyze`).  Then a hover on each
quantity assigned in the file.  CPU time of this process (``time.process_time``), so the
figures do not depend on what else the machine runs; wall time is printed beside them.
Targets: diagnostics after an edit within 300 ms, a hover within 100 ms.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_EDIT_MS, TARGET_HOVER_MS = 300.0, 100.0


def _timed(fn, *args):
    c, w = time.process_time(), time.perf_counter()
    out = fn(*args)
    return out, (time.process_time() - c) * 1000, (time.perf_counter() - w) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=str(ROOT / "specs" / "cases" / "cpt-qwen3-8b-4090.plan"))
    ap.add_argument("--edits", type=int, default=10)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from dsl.cli.lsp_features import analyze, hover, quick

    text = Path(a.file).read_text(encoding="utf-8")
    an, first, first_wall = _timed(analyze, a.file, text)
    quicks, edits, walls = [], [], []
    for i in range(a.edits):
        t = text + f"\n# edit {i}\n"
        _, qc, qw = _timed(quick, a.file, t)
        an, ec, ew = _timed(analyze, a.file, t, (), an)
        quicks.append(qc)
        edits.append(qc + ec)
        walls.append(qw + ew)
    hovers = []
    for n, line in enumerate(an.text.split("\n")):
        word = line.strip().split(" ")[0]
        if "=" in line and word.isidentifier():
            _, hc, _ = _timed(hover, an, n, line.index(word))
            hovers.append(hc)
    med = statistics.median
    edit_ok = med(edits) <= TARGET_EDIT_MS
    hover_ok = (med(hovers) if hovers else 0) <= TARGET_HOVER_MS
    print(f"{Path(a.file).name}: first evaluation {first:.0f} ms CPU ({first_wall:.0f} ms wall)")
    print(f"  diagnostics after an edit ({a.edits} edits): median {med(edits):.0f} ms CPU, largest "
          f"{max(edits):.0f} ms (cheap pass, errors first: median {med(quicks):.0f} ms; wall median "
          f"{med(walls):.0f} ms) — target {TARGET_EDIT_MS:.0f} ms: {'met' if edit_ok else 'MISSED'}")
    print(f"  hover ({len(hovers)} names): median {med(hovers) if hovers else 0:.2f} ms CPU, largest "
          f"{max(hovers) if hovers else 0:.2f} ms — target {TARGET_HOVER_MS:.0f} ms: {'met' if hover_ok else 'MISSED'}")


if __name__ == "__main__":
    main()

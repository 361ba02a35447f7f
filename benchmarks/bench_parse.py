"""Parsing throughput: `.plan` text to AST, in characters per CPU second.

Run:  python benchmarks/bench_parse.py [--mb 1] [--repeat 3]

Method: two texts of about ``--mb`` MB each: *catalog* — ``specs/catalog/hardware.plan``
repeated (its declarations renamed per copy), ordinary `.plan` text with comments — and
*dense* — plans of 10,000 short formula fields each (``f123 = 123 GB * 2 + x123``), the slowest
text per character a plan is likely to hold.  Each is parsed in this process with the on-disk
AST cache disabled (``PLAN_CACHE_DIR`` empty), after one untimed parse that loads lark and the
parser tables; the median CPU time (``time.process_time``) of ``--repeat`` parses is reported
with the machine's load average.  This is the figure behind the ``file_mb`` limit's
documentation (docs/security.md).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    os.environ["PLAN_CACHE_DIR"] = ""          # parse every time: no AST cache
    sys.path.insert(0, str(ROOT))
    from dsl.syntax.parser import parse

    src = (ROOT / "specs" / "catalog" / "hardware.plan").read_text(encoding="utf-8")
    parse(src, "warm-up.plan")
    copies, size, i = [], 0, 0
    while size < a.mb * 1e6:
        c = re.sub(r"^(\s*(?:device|link|nic|model|host|plan)\s+)(\w+)",
                   lambda m: f"{m.group(1)}{m.group(2)}_{i}", src, flags=re.M)
        copies.append(c)
        size += len(c)
        i += 1
    catalog = "\n".join(copies)
    n = int(a.mb * 1e6 / 31)
    parts = []
    for k in range(n):
        if k % 10_000 == 0:                 # 10,000 fields a plan (the `fields` limit is 20,000)
            parts.append(("}\n" if k else "") + f"plan p{k} {{\n")
        parts.append(f"  f{k} = {k} GB * 2 + x{k}\n")
    dense = "".join(parts) + "}\n"
    print(f"load average {os.getloadavg()[0]:.2f}; median CPU time of {a.repeat} parses")
    for label, text in ((f"catalog ({i} copies of hardware.plan)", catalog), (f"dense ({n:,} formula fields)", dense)):
        times = []
        for _ in range(a.repeat):
            t = time.process_time()
            parse(text, "bench.plan")
            times.append(time.process_time() - t)
        cpu = statistics.median(times)
        print(f"  {label}: {len(text):,} characters, {cpu:.2f} s CPU, {len(text) / cpu / 1e3:,.0f} KB per CPU second")


if __name__ == "__main__":
    main()

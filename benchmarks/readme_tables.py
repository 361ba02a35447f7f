"""The generated tables of README.md: each lives between a BEGIN and an END marker line that the
script generating it owns (benchmarks/calibration_table.py, benchmarks/validation_table.py)."""
from __future__ import annotations

import sys
from pathlib import Path


def replace_section(path: Path, begin: str, end: str, md: str, what: str) -> int:
    """Replace the text from ``begin`` through ``end`` in ``path`` by ``md`` (which carries both
    markers).  Returns 0, or 1 with a message on stderr when the file lacks a marker."""
    text = path.read_text(encoding="utf-8")
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < 0:
        print(f"{path.name} has no {what} markers", file=sys.stderr)
        return 1
    path.write_text(text[:i] + md + text[j + len(end):], encoding="utf-8")
    return 0

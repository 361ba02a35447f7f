"""Text tables shared by `plan eval`, `plan diff` and reports."""
from __future__ import annotations

from dsl.engine.units import format_number
from dsl.syntax.diagnostics import printable


def render_table(title: str, columns: list, rows: list, notes: list = ()) -> list[str]:
    """A text table: ``title``, a header row, a rule, rows (floats formatted to 4 significant
    digits, ``None`` as an em dash, numbers right-aligned) and ``notes`` under it, as lines;
    control characters (a cell read from a data file) are shown as escapes."""
    def cell(c):
        if isinstance(c, float):
            return format_number(c)
        return "—" if c is None else printable(str(c))
    body = [[cell(c) for c in r] for r in rows]
    cols = [printable(str(c)) for c in columns]
    w = [max([len(cols[i])] + [len(r[i]) for r in body if i < len(r)]) for i in range(len(cols))]
    lines = [printable(title)]
    lines.append("  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(cols)).rstrip())
    lines.append("  " + "  ".join("-" * x for x in w))
    for r in body:
        lines.append("  " + "  ".join((c.rjust(w[i]) if numlike(c) else c.ljust(w[i]))
                                      for i, c in enumerate(r)).rstrip())
    lines.extend(printable(f"  {n}") for n in notes)
    return lines


def numlike(c: str) -> bool:
    t = c.replace(",", "").replace("%", "").replace("−", "-").strip()
    try:
        float(t.split()[0] if t else "x")
        return True
    except ValueError:
        return False

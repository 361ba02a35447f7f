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


def quantity_band(ws, plan: str, name: str) -> dict | None:
    """The uncertainty band of quantity ``name`` when a plugin defines ``NAME_low`` and
    ``NAME_high`` beside it (the prediction bands of the validation corpus): ``low_si``/``high_si``
    in base units, ``text`` the two ends relative to the value ("−8 % / +14 %") and ``basis``
    (what the band is, from the low end's doc: "from 12 validated h100_sxm runs …")."""
    lo_id, hi_id, nid = f"{plan}.{name}_low", f"{plan}.{name}_high", f"{plan}.{name}"
    if not (ws.has(lo_id) and ws.has(hi_id)):
        return None
    v, lo, hi = (ws.base_value(x) for x in (nid, lo_id, hi_id))
    if v is None or lo is None or hi is None or float(v) == 0:
        return None
    v, lo, hi = float(v), float(lo), float(hi)

    def pct(x: float) -> str:
        return f"{100 * (x / v - 1):+.0f} %".replace("-", "\u2212")
    doc = ws.nodes[lo_id].doc or ""
    basis = doc[doc.index("from "):] if "from " in doc else doc
    return {"low_si": lo, "high_si": hi, "text": f"{pct(lo)} / {pct(hi)}", "basis": basis}

"""Cost of interruptions from a run log (book §10.4.4, figure 10-36, footnote 6).

``use interruptions { log = "../data/mimo-v2.6-pro-run-log.csv"; rate = 20.6e3 USD/h }``

The log is a CSV file with a header row and the columns

* ``kind`` — ``steps`` (time of completed steps), ``restart`` (time from the previous event
  to a restart: lost) or ``invalidated`` (completed steps thrown away by a rollback: lost);
* ``restarts`` — restarts the row stands for (0 for ``steps``; more than 1 for a row that
  aggregates several restarts);
* ``hours`` — wall-clock hours of the row;

and any further columns (``event``, ``source``, …), which are kept for the reader.  Out::

    wasted_time  = Σ hours of restart and invalidated rows
    run_time     = Σ hours of every row
    wasted_share = wasted_time / run_time
    wasted_cost  = wasted_time × rate
    saved_time   = reduction × wasted_time,  saved_cost = saved_time × rate

MiMo-V2.6 Pro: 14 restarts, ≈30.1 h lost = 23.6 % of the run, ≈$619k at $20.6k/h; halving the
interruptions saves ≈15 h and ≈$310k.  A malformed row is ``error[bad-data]`` naming the
file, the row and the column.  The ``interruptions`` table lists the log.
"""
from __future__ import annotations

import csv
from fractions import Fraction

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, Table, TableSpec, UseSpec

KINDS = ("steps", "restart", "invalidated")
LOST = ("restart", "invalidated")
COLUMNS = ("kind", "restarts", "hours")

SPEC = UseSpec(
    "interruptions",
    "time and money lost to interruptions, from a run log (CSV)",
    references=("cost of interruptions from a run log: time lost before each restart, priced at the cluster's hourly "
                "cost",),
    params=(
        Param("log", kind="file", doc="CSV run log: kind, restarts, hours (+ any other columns)"),
        Param("rate", "USD/h", None, "cost of the whole job per wall-clock hour", min=0),
        Param("reduction", "", "50 %", "share of the lost time a fix removes (for the savings)", min=0, max=1),
    ),
    order=45,
    provides=("restarts", "wasted_time", "run_time", "wasted_share", "wasted_cost", "saved_time", "saved_cost"),
)


class LogError(ValueError):
    """A malformed run log: ``row`` is the 1-based line number in the file (header = 1)."""

    def __init__(self, path, row, column, message):
        super().__init__(f"{path}: row {row}, column '{column}': {message}")
        self.path, self.row, self.column, self.message = path, row, column, message


def read_log(path) -> list[dict]:
    """Parse a run log.

    :return: rows as dicts with ``kind`` (str), ``restarts`` (int), ``hours`` (Fraction, exact
        decimal) plus the other columns as strings, and ``row`` (line number).
    :raises LogError: a missing column, an unknown kind, a value that is not a number, a
        negative value, or a row with a different number of fields than the header.
    """
    import io

    import dsl.plugin as safeio
    with io.StringIO(safeio.read_text(path, what="run log"), newline="") as f:
        rd = csv.reader(f)
        try:
            header = [h.strip() for h in next(rd)]
        except StopIteration:
            raise LogError(path, 1, "kind", "the file is empty; expected a header row "
                           + ",".join(COLUMNS)) from None
        for c in COLUMNS:
            if c not in header:
                raise LogError(path, 1, c, f"the header has no column '{c}' (columns: {', '.join(header)})")
        out = []
        for line in rd:
            row = rd.line_num
            if not any(x.strip() for x in line):
                continue
            if len(line) != len(header):
                col = header[min(len(line), len(header)) - 1] if len(line) > len(header) else header[len(line)]
                raise LogError(path, row, col, f"{len(line)} fields, the header has {len(header)}")
            rec = {h: x.strip() for h, x in zip(header, line)}
            if rec["kind"] not in KINDS:
                raise LogError(path, row, "kind", f"'{rec['kind']}' is not one of {', '.join(KINDS)}")
            try:
                n = int(rec["restarts"])
            except ValueError:
                raise LogError(path, row, "restarts", f"'{rec['restarts']}' is not a whole number") from None
            try:
                h = Fraction(rec["hours"])
            except ValueError:
                raise LogError(path, row, "hours", f"'{rec['hours']}' is not a number") from None
            if n < 0 or h < 0:
                col = "restarts" if n < 0 else "hours"
                raise LogError(path, row, col, f"'{rec[col]}' is negative")
            rec.update(kind=rec["kind"], restarts=n, hours=h, row=row)
            out.append(rec)
    return out


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("interruptions")
    if b is None:
        return
    path = b.path("log")
    try:
        rows = read_log(path)
    except LogError as e:
        b.error_at("log", f"malformed run log {path.name}: row {e.row}, column '{e.column}': {e.message}",
                   f"fix the row in {path}; columns: kind ({' | '.join(KINDS)}), restarts (whole number), "
                   "hours (number)", code="bad-data")
    except OSError as e:
        b.error_at("log", f"cannot read the run log {path}: {e.strerror}", "check the file", code="missing-file")
    h = sp.Integer(3600)
    lost = sum((r["hours"] for r in rows if r["kind"] in LOST), Fraction(0))
    total = sum((r["hours"] for r in rows), Fraction(0))
    ctx.define("restarts", sum(r["restarts"] for r in rows), "", "restarts in the run log")
    w = ctx.define("wasted_time", sp.Rational(lost) * h, "h", "hours of restart and invalidated intervals",
                   headline=True)
    ctx.define("run_time", sp.Rational(total) * h, "h", "hours of the whole run log")
    if total:
        ctx.define("wasted_share", sp.Rational(lost) / sp.Rational(total), "%", "lost share of the run",
                   headline=True)
    ctx.define("wasted_cost", w * b.q("rate"), "kUSD", "lost hours × rate", headline=True)
    s = ctx.define("saved_time", b.q("reduction") * w, "h", "hours saved by removing `reduction` of the losses")
    ctx.define("saved_cost", s * b.q("rate"), "kUSD", "money saved at the same rate")


def _table(ws, plan):
    if "interruptions" not in ws.decls[plan].uses:
        return None
    try:
        rows = read_log(ws.file_param(f"{plan}.interruptions.log"))
    except (LogError, OSError):
        return None
    # a `source` column says where each row comes from: a reference, shown with --sources
    extra = [c for c in rows[0] if c not in (*COLUMNS, "row", "source")] if rows else []
    label = extra[0] if extra else "row"
    return Table(("row", "kind", "restarts", "hours", *extra),
                 tuple((r["row"], r["kind"], r["restarts"], f"{float(r['hours']):g}", *(r[c] for c in extra))
                       for r in rows),
                 ("lost: rows of kind restart and invalidated",),
                 tuple(f"{r[label]}: {r['source']}" for r in rows if r.get("source")))


@hookimpl
def plan_tables_register():
    return [TableSpec("interruptions", "Run log: restarts and lost time", _table,
                      "the rows of the run log given to `use interruptions`")]

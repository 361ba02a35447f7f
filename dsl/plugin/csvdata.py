"""CSV data files for plugins: one way to read them, and errors located at the offending cell.

Every CSV a plugin reads (a request trace, a file of measured runs, scaling-law observations)
goes through :func:`open_csv`: :func:`dsl.plugin.read_text`'s checks (regular files under the
project root, size-capped, UTF-8), the first row as the header, a column named twice refused.
A malformed row is a :class:`CsvError` naming the file's row and column; :func:`cell_span`
turns it into the line and text columns a diagnostic's caret points at.
"""
from __future__ import annotations

import csv
from pathlib import Path


class CsvError(ValueError):
    """A malformed CSV file: ``row`` is the 1-based line of the file (the header is line 1),
    ``column`` the column's name and ``index`` its 0-based position (None when the column is
    missing from the header); ``hint`` what to do about it."""

    def __init__(self, path: Path, row: int, column: str | None, message: str, index: int | None = None,
                 hint: str = ""):
        self.path, self.row, self.column, self.index, self.hint = path, row, column, index, hint
        where = f"{path.name}, row {row}" + (f", column '{column}'" if column else "")
        super().__init__(f"{where}: {message}")
        self.message = message


def _cell_columns(line: str) -> list[int]:
    """1-based text column where each comma-separated cell of ``line`` starts (for carets)."""
    cols, pos = [1], 0
    for ch in line:
        pos += 1
        if ch == ",":
            cols.append(pos + 1)
    return cols


def open_csv(path: Path, what: str, error=None, columns: str = ""):
    """Open a CSV data file: read it with :func:`dsl.plugin.read_text` (regular files under the
    project root, size-capped, UTF-8), take the first row as the header (names stripped) and
    refuse a column named twice.

    :param what: the file's name in messages ("trace", "runs file").
    :param error: the exception class raised (a :class:`CsvError` subclass; default CsvError).
    :param columns: the expected header, for the hint of an empty file.
    :returns: ``(rows, header, pos)``: a ``csv.reader`` over the rows after the header, the
        header's names and {name: 0-based position}.
    :raises CsvError: (of class ``error``) the file refused or not UTF-8, empty, a column twice.
    """
    import io

    from ..engine.safeio import FileRefused, read_text
    from ..syntax.diagnostics import display_path
    error = error or CsvError
    try:
        text = read_text(path, what=what, display=display_path(path))
    except FileRefused as e:
        if e.kind == "encoding":
            raise error(path, e.line, None, f"the {what} is not UTF-8 text (column {e.column})",
                        hint=f"save the {what} as UTF-8") from None
        raise error(path, 0, None, f"cannot read the {what}: {e.summary}", hint=e.hint) from None
    rows = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in next(rows)]
    except StopIteration:
        raise error(path, 1, None, f"the {what} is empty (no header row)",
                    hint="the first row names the columns: " + columns) from None
    except csv.Error as e:
        raise error(path, 1, None, f"not valid CSV: {e}") from None
    pos = {h: i for i, h in enumerate(header)}
    dup = next((h for i, h in enumerate(header) if h and pos[h] != i), None)
    if dup is not None:
        raise error(path, 1, dup, f"the header names column '{dup}' twice", pos[dup], "keep one column of each name")
    return rows, header, pos


def cell_span(err: CsvError):
    """(line, column, end_column) of the offending cell of ``err`` in its file, for a caret."""
    try:
        import io

        from ..engine.safeio import read_text
        with io.StringIO(read_text(err.path, what="data file", remember=False), newline="") as f:
            for i, line in enumerate(f, start=1):
                if i == err.row:
                    text = line.rstrip("\r\n")
                    break
            else:
                return err.row, 1, 2
    except OSError:
        return err.row, 1, 2
    cols = _cell_columns(text)
    if err.index is None or err.index >= len(cols):
        return err.row, 1, max(2, len(text) + 1)
    start = cols[err.index]
    end = cols[err.index + 1] - 1 if err.index + 1 < len(cols) else len(text) + 1
    return err.row, start, max(end, start + 1)

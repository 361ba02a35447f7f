"""Diagnostics: one type for every problem the language reports.

A :class:`Diagnostic` has a severity, a stable ``code`` (``syntax``, ``unknown-name``,
``unit-mismatch``, ``cycle``, ``missing-import``, ``duplicate``, ``division-by-zero``,
``out-of-range``, ``plugin`` …), a one-line summary, an optional hint, the subject
:class:`Span` and related spans.  Passes accumulate diagnostics and keep going;
:class:`PlanError` carries the list out of the API when any of them is an error.

Rendering follows the compiler convention ``file:line:col: error[code]: summary`` followed by
the source line with a caret under the offending text, then ``hint: …``.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Span:
    """A source range: 1-based line and column of start and end (end exclusive)."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Diagnostic:
    severity: str  # "error" | "warning"
    code: str
    summary: str
    span: Span | None = None
    hint: str = ""
    related: tuple[tuple[str, Span], ...] = ()

    def to_json(self) -> dict:
        d = {"severity": self.severity, "code": self.code, "summary": self.summary, "hint": self.hint}
        if self.span:
            d["file"], d["line"], d["column"] = self.span.file, self.span.line, self.span.column
        d["related"] = [{"note": n, "file": s.file, "line": s.line, "column": s.column}
                        for n, s in self.related]
        return d


class PlanError(Exception):
    """Raised when a pass produced errors; ``diagnostics`` holds all of them."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(render(d) for d in self.diagnostics))


class Reporter:
    """Collects diagnostics across passes.

    ``items`` is the list in report order.  Read it freely; change it only through
    :meth:`error`, :meth:`warning`, :meth:`extend`, :meth:`replace` and :meth:`truncate`, which
    keep the index that makes de-duplicating a warning O(1) (a file of 70,000 plans warns
    70,000 times).
    """

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []
        self._count: dict[Diagnostic, int] = {}   # how often each diagnostic is in items[:_indexed]
        self._at: dict[tuple, int] = {}            # errors in items[:_indexed] by (code, span)
        self._indexed = 0

    def _sync(self) -> dict[Diagnostic, int]:
        """The index, brought up to date with items appended directly (``items.append``); rebuilt
        when the list shrank behind its back."""
        items, count = self.items, self._count
        if len(items) < self._indexed:
            count.clear()
            self._at.clear()
            self._indexed = 0
        for d in items[self._indexed:]:
            count[d] = count.get(d, 0) + 1
            self._note(d, 1)
        self._indexed = len(items)
        return count

    def has_error_at(self, code: str, span: Span) -> bool:
        """An error of ``code`` at ``span`` is recorded, whatever its wording (a hash look-up; what
        :meth:`truncate` removes — a failed query's errors — no longer counts)."""
        self._sync()
        return self._at.get((code, span), 0) > 0

    def _note(self, d: Diagnostic, step: int) -> None:
        """Count ``d`` in (``step`` 1) or out of (−1) the index by code and place of errors."""
        if d.severity == "error":
            key = (d.code, d.span)
            self._at[key] = self._at.get(key, 0) + step

    def error(self, code: str, summary: str, span: Span | None = None, hint: str = "",
              related: tuple = ()) -> None:
        self.items.append(Diagnostic("error", code, summary, span, hint, tuple(related)))

    def warning(self, code: str, summary: str, span: Span | None = None, hint: str = "",
                related: tuple = ()) -> None:
        """Record a warning; one identical to a recorded one (plans that inherit a block share its
        text, so a plugin warns about it once per plan) is kept once (a hash look-up)."""
        d = Diagnostic("warning", code, summary, span, hint, tuple(related))
        if self._sync().get(d, 0) == 0:
            self.items.append(d)

    def extend(self, diagnostics) -> None:
        """Append diagnostics found elsewhere (an imported file's, a confined error's)."""
        self.items.extend(diagnostics)

    def replace(self, i: int, d: Diagnostic) -> None:
        """Put ``d`` in place of ``items[i]`` (the same problem, restated)."""
        count = self._sync()
        old = self.items[i]
        count[old] -= 1
        count[d] = count.get(d, 0) + 1
        self._note(old, -1)
        self._note(d, 1)
        self.items[i] = d

    def truncate(self, start: int) -> list[Diagnostic]:
        """Remove and return the diagnostics from position ``start`` on (a query's, when it is
        reported apart from the file's)."""
        count = self._sync()
        gone = self.items[start:]
        for d in gone:
            count[d] -= 1
            self._note(d, -1)
        del self.items[start:]
        self._indexed = len(self.items)
        return gone

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "warning"]

    def raise_if_errors(self) -> None:
        """Raise :class:`PlanError` with every diagnostic (sorted by file, line and column,
        diagnostics without a location last, an identical one reported twice shown once) when
        any of them is an error."""
        if self.errors:
            raise PlanError(sorted(dict.fromkeys(self.items), key=lambda d: (d.span is None, d.span.file if d.span else "",
                                                             d.span.line if d.span else 0,
                                                             d.span.column if d.span else 0)))


_source_cache: dict[str, list[str]] = {}


def remember_source(path: str, text: str) -> None:
    """Keep a file's text so diagnostics can quote it."""
    _source_cache[path] = split_lines(text)


def split_lines(text: str) -> list[str]:
    """Lines as the parser counts them: split at ``\n`` only (``str.splitlines`` also splits
    at form feeds, ``\x1c``-``\x1e``, ``\u2028`` …, which would shift line numbers)."""
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _source_line(path: str, line: int) -> str | None:
    """Line ``line`` of a text that was parsed or read through :mod:`dsl.engine.safeio` (and so
    remembered); a file that was never read (refused, or never named) is never quoted."""
    lines = _source_cache.get(path)
    if lines is None:
        return None
    if 1 <= line <= len(lines):
        return lines[line - 1]
    return None


QUOTE_WIDTH = 160   # characters of a quoted line shown around the caret


def printable(text: str, lines: bool = False) -> str:
    """``text`` with its control characters (NUL, ESC of a terminal escape sequence, carriage
    return …) shown as escapes (``\\x1b``), never written raw: for every text shown on a terminal
    that may quote a file, a cell or an argument.  A tab is kept, and with ``lines`` a newline
    too (a text of several lines written by plan itself)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\t" or (lines and c == "\n") else repr(c)[1:-1]
                   for c in text)



def render(d: Diagnostic) -> str:
    """Render a diagnostic for people: location, summary, quoted line with caret, hint — each
    with its control characters escaped (a summary or hint may quote a data file's cell)."""
    head = f"{d.span}: " if d.span else ""
    out = [printable(f"{head}{d.severity}[{d.code}]: {d.summary}")]
    if d.span:
        out.extend(_quote(d.span))
    for note, sp in d.related:
        out.append(printable(f"  note: {note} at {sp}"))
        out.extend("  " + q for q in _quote(sp))
    if d.hint:
        out.append(printable(f"  hint: {d.hint}", lines=True))
    return "\n".join(out)


def _quote(span: Span) -> list[str]:
    src = _source_line(span.file, span.line)
    if src is None:
        return []
    width = (span.end_column - span.column) if span.end_line == span.line else len(src) - span.column + 1
    width = max(1, width)
    col = span.column
    if len(src) > QUOTE_WIDTH:   # a window around the caret: a 1 MB line is not copied per diagnostic
        lo = max(0, min(col - 1 - QUOTE_WIDTH // 4, len(src) - QUOTE_WIDTH))
        src = ("…" if lo else "") + src[lo: lo + QUOTE_WIDTH] + ("…" if lo + QUOTE_WIDTH < len(src) else "")
        col = col - lo + (1 if lo else 0)
        width = max(1, min(width, QUOTE_WIDTH - (col - 1)))
    shown = printable(src)
    if shown != src:   # escapes change the columns: point at the start of the line
        col, width = 1, 1
    gutter = f"{span.line:>4} | "
    return [gutter + shown, " " * (len(gutter) + col - 1) + "^" * width]


def install_hint(extra: str) -> str:
    """How to install an optional extra of this project (``numeric``, ``plot``, ``dist``): by its
    package name, and from a checkout, where that name does not resolve."""
    return f'pip install "plan-dsl[{extra}]" (in a checkout of plan: pip install ".[{extra}]")'


def did_you_mean(name: str, candidates) -> str | None:
    """The candidate ``name`` most likely stands for, or None: the same name in another case;
    else a candidate that starts with it or contains it as a ``_``-separated part (``h100`` →
    ``h100_sxm``, ``sxm`` → ``h100_sxm``; the shortest one when several do); else the nearest by
    similarity (difflib ratio ≥ 0.6).

    >>> did_you_mean("h100", ["h100_sxm", "h200", "a100_sxm_80gb"])
    'h100_sxm'
    >>> did_you_mean("finish_tme", ["finish_time", "train_time"])
    'finish_time'
    >>> did_you_mean("qqq", ["finish_time"]) is None
    True
    """
    cands = sorted(set(candidates))
    if not name or not cands:
        return None
    low = {c.lower(): c for c in cands}
    if name.lower() in low and low[name.lower()] != name:
        return low[name.lower()]
    key = name.lower()
    if len(key) >= 2:
        part = [c for c in cands if c != name and (c.lower().startswith(key) or
                                                   key in c.lower().split("_") or
                                                   (len(key) >= 3 and key in c.lower()))]
        if part:
            return min(part, key=lambda c: (not c.lower().startswith(key), len(c), c))
    m = difflib.get_close_matches(name, cands, n=1, cutoff=0.6)
    return m[0] if m else None


def display_path(p: Path) -> str:
    """``p`` relative to the working directory when it is below it (as diagnostics show files)."""
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)

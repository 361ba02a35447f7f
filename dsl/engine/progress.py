"""Progress bars on long loops — structural sweeps, layout searches, large timelines.

Drawn on stderr with `rich <https://rich.readthedocs.io>`_ (the optional ``progress`` extra)
when it is installed and stderr is a terminal; otherwise nothing is drawn.  Standard output is
never touched, so text and JSON results stay byte-identical with or without a bar.  The
environment variable ``PLAN_PROGRESS`` overrides the choice: ``0`` never draws, ``1`` draws
even when stderr is not a terminal (tests, logs).

Usage (plugins import it from :mod:`dsl.plugin`)::

    with progress(len(combos), "sweeping structural values") as advance:
        for c in combos:
            ...
            advance()
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Iterator


def _noop(n: int = 1) -> None:
    return None


def enabled() -> bool:
    """Whether a bar would be drawn now (``PLAN_PROGRESS``, a terminal on stderr, rich)."""
    mode = os.environ.get("PLAN_PROGRESS", "auto").strip().lower()
    if mode in ("0", "no", "off", "false"):
        return False
    if mode not in ("1", "yes", "on", "true") and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return False
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def progress(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """A progress bar of ``total`` steps labelled ``description``; yields ``advance(n=1)``.

    Nothing is drawn for fewer than two steps or when :func:`enabled` is false (then
    ``advance`` does nothing).  The bar is transient: it disappears when the loop ends.
    """
    if total < 2 or not enabled():
        yield _noop
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(file=sys.stderr, force_terminal=True if os.environ.get("PLAN_PROGRESS") == "1" else None)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)

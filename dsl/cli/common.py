"""What the ``plan`` commands share: the exit codes, the errors that end a command with exit 2
(:class:`CommandLineError`, :class:`UsageError`, :func:`cannot_write`), loading FILE with the
plugins the run did not disable (its warnings printed), and choosing its plans.

The run's state has its one home here: the plugins ``--disable-plugin`` blocks
(:func:`set_disabled`, :func:`disabled`) and the errors confined to one declaration that
:func:`load` printed (``CONFINED``, a list changed in place, never rebound).
"""
from __future__ import annotations

import sys

from dsl.syntax.diagnostics import PlanError

EXIT_OK, EXIT_PLAN, EXIT_USAGE, EXIT_MISSING = 0, 1, 2, 3


class CommandLineError(PlanError):
    """Diagnostics about what was given on the command line (a name the file does not have, a
    malformed ``--query`` or ``--vary``): exit 2, not 1."""


def cmdline(fn, *args):
    """``fn(*args)``, its PlanError re-raised as :class:`CommandLineError` (exit 2)."""
    try:
        return fn(*args)
    except CommandLineError:
        raise
    except PlanError as e:
        raise CommandLineError(e.diagnostics) from None


class UsageError(Exception):
    """A bad command-line argument or an output path that cannot be written (exit 2)."""

    def __init__(self, code: str, summary: str, hint: str = ""):
        super().__init__(summary)
        self.code, self.hint = code, hint


def cannot_write(path, exc: OSError | None = None) -> "UsageError | None":
    """Why ``path`` cannot be written, as the usage error to raise (exit 2) with a hint naming
    the real cause — a directory, a missing or read-only directory, a full device, a directory
    that takes no new files (``/proc``) — or None when nothing stands in the way yet (``exc``:
    the error a write raised, if one did).  Without ``exc``, a path that does not exist yet is
    created and removed again (the permission bits do not stop root, a special file system
    does), so that a command can refuse it before doing its work."""
    import errno
    import os
    from pathlib import Path
    p = Path(path)
    parent = p.parent
    if p.is_dir():
        return UsageError("output", f"cannot write '{path}': it is a directory",
                          f"name a file inside it: {p / 'FILE'}")
    if not parent.is_dir():
        return UsageError("output", f"cannot write '{path}': the directory '{parent}' does not exist",
                          "create it first, or write elsewhere")
    if not os.access(parent, os.W_OK) and not p.exists():
        return UsageError("output", f"cannot write '{path}': the directory '{parent}' is not writable",
                          "write to a directory you can write to")
    if exc is None:
        if p.exists() or p.is_symlink():
            return None
        try:
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS):
                return UsageError("output", f"cannot write '{path}': the directory '{parent}' takes no new "
                                  f"files ({e.strerror or e})", "write to a directory you can write to")
            return cannot_write(path, e)
        try:
            p.unlink()
        except OSError:     # the write at the end reports what stands in the way then
            pass
        return None
    if exc.errno == errno.ENOSPC:
        return UsageError("output", f"cannot write '{path}': no space left on the device",
                          "free space on that device, or write elsewhere")
    return UsageError("output", f"cannot write '{path}': {exc.strerror or exc}",
                      "check the path's permissions, or write elsewhere")


def write_output(path, write) -> None:
    """Run ``write(path)``; an unwritable path is a usage error, not an internal error."""
    try:
        write(path)
    except OSError as e:
        raise cannot_write(path, e) from None


def warn(ws) -> None:
    """Print the warnings of an evaluation to stderr."""
    from dsl.syntax.diagnostics import render
    for d in ws.warnings:
        print(render(d), file=sys.stderr)


_DISABLED: tuple[str, ...] = ()   # set by main() from --disable-plugin (set_disabled)


def set_disabled(names: tuple[str, ...]) -> None:
    """The plugins this run does not load (``--disable-plugin``, ``PLAN_DISABLE_PLUGINS``)."""
    global _DISABLED
    _DISABLED = names


def disabled() -> tuple[str, ...]:
    """The plugins this run does not load (see :func:`set_disabled`)."""
    return _DISABLED


CONFINED: list = []   # errors confined to one declaration, already printed (see load); main() clears it


def load(path: str, evaluate: bool = True, plans=None, strict: bool = False):
    """The evaluation of FILE with the plugins not disabled (``--disable-plugin``); with
    ``plans``, only those plans and the plans they depend on are priced.

    When every error is confined to one declaration (a model whose config cannot be read), the
    errors are printed here and the rest of the file is returned; the command then exits 1.
    With ``strict``, such errors raise PlanError like any other (nothing printed or recorded)."""
    from dsl.api import load as load_results
    from dsl.syntax.diagnostics import render
    try:
        return load_results(path, evaluate=evaluate, disable=_DISABLED, plans=plans)
    except PlanError as e:
        partial = getattr(e, "partial", None)
        if partial is None or strict:
            raise
        for d in e.diagnostics:
            if d.severity == "error" and d not in CONFINED:   # a command may load twice
                print(render(d), file=sys.stderr)
                CONFINED.append(d)
        return partial


def select_plans(ws, file: str, wanted):
    """The plans a command works on: ``wanted`` (``--plan``), each checked against the file's
    plans (an unknown one is a :class:`CommandLineError`), or the root file's own plans."""
    from dsl.syntax.diagnostics import Diagnostic, did_you_mean
    plans = ws.plans(own=not wanted)
    if wanted:
        plans = ws.plans()
        unknown = [p for p in wanted if p not in plans]
        if unknown:
            g = did_you_mean(unknown[0], plans)
            raise CommandLineError([Diagnostic("error", "unknown-name", f"no plan '{unknown[0]}' in {file}",
                                               None, f"did you mean '{g}'?" if g else "plans: " + ", ".join(plans))])
        plans = [p for p in plans if p in wanted]
    return plans

"""The ``plan`` command line.

Exit codes (every command, one per kind of failure): 0 ok; 1 a problem in the plan or its
files (syntax, names, units, cycles, missing imports, out-of-range values …; with ``--strict``
also a violated requirement such as a missed deadline or a plan that does not fit in memory);
2 a bad command line (an unknown option, a malformed value such as ``--vary`` or ``--query``,
an unknown unit, a name the file does not have, an output that cannot be written); 3 a missing
optional package (matplotlib, scipy, dask).
Diagnostics go to stderr as ``file:line:col: error[code]: summary`` with the quoted line,
a caret and a hint; no traceback reaches the user.
"""
from __future__ import annotations

import argparse
import json
import sys

from dsl.present.tables import render_table

EXIT_OK, EXIT_PLAN, EXIT_USAGE, EXIT_MISSING = 0, 1, 2, 3

from dsl.syntax.diagnostics import PlanError as _PlanError  # noqa: E402  (a light module)


class CommandLineError(_PlanError):
    """Diagnostics about what was given on the command line (a name the file does not have, a
    malformed ``--query`` or ``--vary``): exit 2, not 1."""


def _cmdline(fn, *args):
    """``fn(*args)``, its PlanError re-raised as :class:`CommandLineError` (exit 2)."""
    try:
        return fn(*args)
    except CommandLineError:
        raise
    except _PlanError as e:
        raise CommandLineError(e.diagnostics) from None


def _count(least: int):
    """argparse type: a whole number >= ``least`` (a bad one is a usage error, exit 2)."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = None
        if n is None or n < least:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {text!r}")
        return n
    parse.__name__ = "count"
    return parse


def _parser(commands: dict | None = None) -> argparse.ArgumentParser:
    """The argument parser: core commands plus ``commands`` (name -> CommandSpec) from plugins."""
    p = argparse.ArgumentParser(
        prog="plan",
        description="Evaluate .plan files: will this training design fit, and will it finish in time?",
        epilog="Exit codes: 0 ok, 1 a problem in the plan (or, with --strict, a failed requirement), 2 a bad "
               "command line, 3 a missing optional package.  See docs/language.md.")
    p.add_argument("--version", action="version", version="plan 0.1.0")
    p.add_argument("--disable-plugin", dest="disable_plugin", action="append", default=[], metavar="NAME",
                   help="do not load plugin NAME (repeatable; also PLAN_DISABLE_PLUGINS=a,b); "
                        "`plan plugins` lists the names")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    e = sub.add_parser("eval", help="evaluate every plan: headline quantities, requirements, critical path",
                       description="Evaluate the plans declared in FILE (imported plans only when named with "
                                   "--plan, or when FILE declares none) and print their headline quantities "
                                   "with units, requirements (memory fits, deadline met), the answers of "
                                   "named solves (`solve NAME: …`) and the step's critical path.")
    e.add_argument("file", metavar="FILE")
    e.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    e.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable)")
    e.add_argument("--in", dest="units", action="append", metavar="UNIT", default=[],
                   help="show every quantity of UNIT's dimension in UNIT (repeatable: --in day --in GB)")
    e.add_argument("--strict", action="store_true",
                   help="exit 1 when a requirement is violated (deadline missed, memory exceeded)")
    e.add_argument("--tables", choices=("default", "all", "none"), default=None,
                   help="plugin tables to show: default (those that answer the plans' question; a table "
                        "shared by several plans once), all, or none.  JSON lists every table unless "
                        "this is given")
    e.add_argument("--sources", action="store_true",
                   help="also show the references (papers, chapters, measurements) behind the shown "
                        "quantities, the blocks the plans use and the tables shown")

    g = sub.add_parser("get", help="print one quantity as a bare number (for scripts and CI)",
                       description="Print the nominal value of NAME (plan.quantity, plan.block.param or "
                                   "declaration.field) as a bare number, in the unit `plan eval` shows for it "
                                   "(GiB, day, % …) unless --in UNIT is given; scripts should pass --in. "
                                   "A named solve (`solve min_mfu: …`) prints its answer; a requirement "
                                   "(plan.meets_deadline, or a file-level `require` by its name) prints true or false.")
    g.add_argument("file", metavar="FILE")
    g.add_argument("name", metavar="NAME", help="e.g. gpus48.finish_time, qwen3_8b.params, a named solve such as "
                                                "min_mfu, or a requirement such as gpus48.meets_deadline "
                                                "(prints true/false)")
    g.add_argument("--in", dest="unit", metavar="UNIT", help="unit to print in, e.g. day, GiB, s, %%")
    g.add_argument("--rate", dest="rates", action="append", default=[], metavar="RATE",
                   help="an exchange rate for --in across currencies, e.g. --in EUR --rate '0.92 EUR/USD' "
                        "(a value in USD, or in USD/h, is multiplied by it); repeatable")
    g.add_argument("--expr", action="store_true",
                   help="print the symbolic expression of NAME in terms of the declared inputs (base units)")
    g.add_argument("--with-unit", action="store_true",
                   help="print the unit after the number (24.64 day); scripts that read the number alone omit it")
    g.add_argument("--format", choices=("text", "json"), default="text",
                   help="json prints {\"name\", \"value\", \"unit\"} (a requirement: value true/false, unit null)")

    c = sub.add_parser("check", help="parse, resolve names, build the graph and check units; compute no value",
                       description="Parse FILE and its imports, resolve names, extends and imports, build "
                                   "the plugins' graph and check every unit and reference; no value is computed.")
    c.add_argument("file", metavar="FILE")
    c.add_argument("--format", choices=("text", "json"), default="text")
    c.add_argument("--strict", action="store_true",
                   help="also evaluate, and exit 1 when a requirement fails (a plan's, or a file-level "
                        "`require` on a named solve's answer), naming it, its margin and the inputs that "
                        "drive it (a CI gate)")
    c.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable; with --strict)")

    s = sub.add_parser("solve", help="answer break-even queries (`solve X for LHS == RHS`)",
                       description="Answer the file's `solve` queries, or QUERY given on the command line "
                                   "as 'TARGET for LHS == RHS' (also <=, >=, <, >).")
    s.add_argument("file", metavar="FILE")
    s.add_argument("--query", metavar="QUERY", help="e.g. \"gpus32.mfu for gpus32.finish_time == cpt.deadline\"")
    s.add_argument("--in", dest="unit", metavar="UNIT", help="unit of the answers (default: the target's unit)")
    s.add_argument("--format", choices=("text", "json"), default="text")

    f = sub.add_parser("figure", help="draw the plugins' figures (Gantt charts, memory, curves) to files",
                       description="Draw every figure the plugins offer for the plans in FILE (or only --name) "
                                   "into DIR as PLAN-NAME.FORMAT.  Needs matplotlib "
                                   "(pip install \"plan-dsl[plot]\").")
    f.add_argument("file", metavar="FILE")
    f.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable)")
    f.add_argument("--name", action="append", metavar="FIGURE", help="only this figure (repeatable); see --list")
    f.add_argument("-o", "--out", metavar="DIR", default=".", help="output directory (default: current)")
    f.add_argument("--format", choices=("svg", "png", "pdf"), default="svg")
    f.add_argument("--list", action="store_true", help="list the figures that apply to FILE's plans (with the "
                                                         "plans) and exit")

    t = sub.add_parser("timeline", help="print a plan's timeline as a compact text Gantt chart",
                       description="Print each timeline of the plans in FILE (a training step, a pipeline "
                                   "schedule, a checkpoint stream …) as one row per resource, one letter per "
                                   "kind of work, with the makespan and the critical path.")
    t.add_argument("file", metavar="FILE")
    t.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable)")
    t.add_argument("--timeline", metavar="NAME", help="only this timeline (default: all)")
    t.add_argument("--width", type=_count(1), default=100, help="columns of the chart (default 100)")
    t.add_argument("--in", dest="unit", metavar="UNIT", default=None, help="time unit (default: ms or s)")

    r = sub.add_parser("report", help="sensitivity report: formulas, inputs, elasticities, break-evens, figures",
                       description="Per plan: headline values and formulas, inputs with ranges and sources, "
                                   "partial derivatives and elasticities, a tornado chart over the declared ranges, "
                                   "the value of every input at which each requirement flips, the critical path "
                                   "with slack, and every plugin table and figure.  HTML is one self-contained "
                                   "file (inline SVG and MathML); Markdown suits PR comments.")
    r.add_argument("file", metavar="FILE")
    r.add_argument("--format", choices=("html", "md", "text"), default=None,
                   help="default: from the suffix of -o (.html, .md), else text")
    r.add_argument("-o", "--out", metavar="PATH", help="write to PATH instead of standard output")
    r.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable)")

    d = sub.add_parser("diff", help="what changed between two plans: inputs, outputs, flipped requirements",
                       description="Compare OLD and NEW, each [REV:]PATH[#PLAN]: a .plan file, the file as of "
                                   "git revision REV (its imports as of the same revision), and optionally one "
                                   "plan of it (x.plan#gpus48 x.plan#gpus32).  Shows changed inputs, changed "
                                   "headline outputs with absolute and relative deltas, and the requirements "
                                   "that flipped.")
    d.add_argument("old", metavar="OLD")
    d.add_argument("new", metavar="NEW")
    d.add_argument("--format", choices=("text", "md", "json"), default="text")

    w = sub.add_parser("sweep", help="evaluate a plan over a grid or random samples of inputs (numpy)",
                       description="Vary inputs (NAME=START:STOP:N, values with units, e.g. gpus48.mfu=30%:50%:21; "
                                   "NAME=[V1, V2, …] for listed values, e.g. 'p.layout.tp=[1, 2, 4, 8]'; "
                                   "NAME alone uses its declared range) and evaluate the plan's headline quantities "
                                   "and requirements at every point, compiled once with lambdify and vectorised "
                                   "with numpy.  A value that shapes the plan (a tp degree) re-evaluates it; where "
                                   "the plan cannot be built at a value, those points are infeasible and the "
                                   "summary gives the reason.  Prints a feasibility "
                                   "summary; --out writes every point as CSV.")
    w.add_argument("file", metavar="FILE")
    w.add_argument("--vary", action="append", metavar="NAME=START:STOP:N", required=True,
                   help="a varied input, START:STOP:N or a list [V1, V2, …] (repeatable: the grid is the product)")
    w.add_argument("--plan", action="append", metavar="NAME", help="plan to evaluate (default: the plan of "
                                                                     "the varied names, else the file's plans)")
    w.add_argument("--random", type=_count(1), metavar="COUNT", help="COUNT uniform random samples instead of a grid")
    w.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    w.add_argument("--out", metavar="CSV", help="write every point to CSV")
    w.add_argument("--format", choices=("text", "json"), default="text")

    fm = sub.add_parser("fmt", help="format .plan files canonically (comments kept)",
                        description="Rewrite each FILE in the canonical layout: one member group per line, "
                                    "two-space indents, single spaces around operators, minimal parentheses, "
                                    "blank-line runs collapsed, comments kept.  Idempotent.  '-' reads standard "
                                    "input and writes standard output.")
    fm.add_argument("files", nargs="+", metavar="FILE")
    fm.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 listing the files that are not formatted (for CI)")

    x = sub.add_parser("explain", help="the derivation tree of a quantity down to the inputs",
                       description="Print how NAME (plan.quantity) is derived: at each node its value, the "
                                   "plugin or declaration that defines it, its formula over the nodes below, its "
                                   "documentation and references and, for inputs, range and source; for a requirement "
                                   "(plan.requirement, or a file-level require by its name) its verdict and both sides' trees.")
    x.add_argument("file", metavar="FILE")
    x.add_argument("name", metavar="NAME", help="e.g. gpus48.finish_time, or a requirement such as "
                                                "gpus48.meets_deadline (both of its sides explained)")
    x.add_argument("--depth", type=_count(0), metavar="N", help="stop N levels below NAME")
    x.add_argument("--format", choices=("text", "json"), default="text")

    gr = sub.add_parser("graph", help="the quantity and activity graph of a plan (dot, mermaid, svg)",
                        description="Export the dependency graph of a plan's quantities and activities: "
                                    "Graphviz dot, Mermaid (renders in GitHub Markdown) or SVG (matplotlib).  "
                                    "--quantity keeps only what one quantity depends on.")
    gr.add_argument("file", metavar="FILE")
    gr.add_argument("--plan", metavar="NAME", help="the plan (default: the file's first plan)")
    gr.add_argument("--quantity", metavar="NAME", help="only the ancestors of this quantity (plan.quantity, or "
                                                         "quantity of the --plan)")
    gr.add_argument("--format", choices=("dot", "mermaid", "svg"), default="dot")
    gr.add_argument("-o", "--out", metavar="PATH", help="write to PATH instead of standard output")

    pl = sub.add_parser("plugins", help="list installed plugins and the `use` blocks they provide",
                        description="List plugins, their `use` blocks and each parameter's unit and default.")
    pl.add_argument("--format", choices=("text", "json"), default="text")
    for name, spec in sorted((commands or {}).items()):
        if name in sub.choices:     # a plugin command cannot replace a core command
            continue
        c = sub.add_parser(name, help=spec.help, description=spec.description or spec.help,
                           epilog=f"This command comes from plugin '{spec.plugin}'.")
        spec.add_arguments(c)
    # global options, accepted before or after the command
    for parser, default in [(p, None)] + [(sp_, argparse.SUPPRESS) for sp_ in sub.choices.values()]:
        parser.add_argument("--limit", action="append", metavar="NAME=VALUE",
                            default=[] if default is None else default,
                            help="raise a limit for this run, e.g. --limit imports=5000 (repeatable; "
                                 "see docs/security.md; also the PLAN_LIMITS environment variable)")
        parser.add_argument("--allow-outside-root", action="store_true",
                            default=False if default is None else default,
                            help="read imports, configs and data files outside the project root, "
                                 "and symbolic links")
    return p


class CommandContext:
    """What a plugin's command (:class:`dsl.plugin.CommandSpec`) gets from the CLI.

    * ``load(file, strict=False)`` — the :class:`~dsl.api.Results` of FILE with the plugins not
      disabled; its warnings are printed to stderr.  An error confined to one declaration (a
      config that cannot be read) is printed and the rest of the file returned (the command
      then exits 1); with ``strict`` it raises PlanError like any other error, and is neither
      printed nor counted here (for a caller that evaluates a file of its own, quietly or not);
    * ``select_plans(ev, file, names)`` — ``names`` checked against the file's plans (all of the
      root file's plans when ``names`` is empty); an unknown one raises PlanError;
    * ``UsageError(code, summary, hint)`` — raise it for a bad argument (exit 2);
    * ``cannot_write(path, exc=None)`` — the usage error for an output path that cannot be
      written (a directory, a missing or read-only directory, a full device), or None;
    * ``EXIT_OK``, ``EXIT_PLAN``, ``EXIT_USAGE``, ``EXIT_MISSING`` — the exit codes (3: a
      missing optional package).
    """

    EXIT_OK, EXIT_PLAN, EXIT_USAGE, EXIT_MISSING = EXIT_OK, EXIT_PLAN, EXIT_USAGE, EXIT_MISSING

    def __init__(self) -> None:
        self.UsageError = UsageError

    def load(self, file: str, strict: bool = False):
        ev = _load(file, strict=strict)
        _warn(ev)
        return ev

    def select_plans(self, ev, file: str, names) -> list[str]:
        return _select_plans(ev, file, names)

    def cannot_write(self, path, exc: OSError | None = None):
        """The usage error for an output ``path`` that cannot be written (see :func:`cannot_write`)."""
        return cannot_write(path, exc)


def _plugin_commands(disabled: tuple[str, ...]) -> dict:
    from dsl.plugin.manager import get_plugins
    try:
        return get_plugins(blocked=disabled).commands
    finally:
        _resume_gc()


_GC_PAUSED = False   # set by console_main: the cyclic GC is off until the imports are done


def _resume_gc() -> None:
    """After the import floor (sympy, the core, the plugins): move every object alive so far
    into the collector's permanent generation (``gc.freeze``: modules, classes and functions
    live as long as the process) and turn the collector back on, with the threshold
    :func:`console_main` set.  A no-op unless :func:`console_main` paused it."""
    global _GC_PAUSED
    if _GC_PAUSED:
        import gc
        gc.freeze()
        gc.enable()
        _GC_PAUSED = False


def _apply_limits(args):
    """Install the run's limits (PLAN_LIMITS, then --limit); check the command's counts."""
    from dsl.syntax import limits as L
    try:
        lim = L.from_cli(getattr(args, "limit", []), getattr(args, "allow_outside_root", False))
    except ValueError as e:
        raise UsageError("limit", str(e), "write --limit NAME=VALUE, e.g. --limit imports=5000") from None
    L.set_limits(lim)
    for opt in ("width", "top", "chunks", "depth"):
        v = getattr(args, opt, None)
        if isinstance(v, int) and v > lim.width:
            what = "" if opt == "width" else " (the limit named `width` bounds --width, --top, --chunks and --depth)"
            raise UsageError("limit", f"--{opt} {v} is above the limit of {lim.width}{what}", L.raise_hint("width"))
    if getattr(args, "random", None) and args.random > lim.points:
        raise UsageError("limit", f"--random {args.random} is above the limit of {lim.points:,} points",
                         L.raise_hint("points"))
    return lim


def main(argv: list[str] | None = None) -> int:
    global _DISABLED
    from dsl.api import disabled_plugins

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--disable-plugin", dest="disable_plugin", action="append", default=[])
    known, _ = pre.parse_known_args(argv)
    _DISABLED = disabled_plugins(known.disable_plugin)
    commands = _plugin_commands(_DISABLED)
    parser = _parser(commands)
    args = parser.parse_args(argv)
    if not args.cmd:
        parser.print_help()
        return EXIT_USAGE
    from dsl.syntax import limits as L
    from dsl.syntax.diagnostics import PlanError, printable, render

    try:
        _apply_limits(args)
        run = {"eval": cmd_eval, "get": cmd_get, "check": cmd_check, "solve": cmd_solve,
                "plugins": cmd_plugins, "figure": cmd_figure, "timeline": cmd_timeline,
                "report": cmd_report, "diff": cmd_diff, "sweep": cmd_sweep, "fmt": cmd_fmt,
                "explain": cmd_explain, "graph": cmd_graph}.get(args.cmd)
        _CONFINED.clear()
        if run is None:
            rc = commands[args.cmd].run(args, CommandContext())
        else:
            rc = run(args)
        if _CONFINED:
            n = len(_CONFINED)
            print(f"{n} error{'s' if n != 1 else ''} (the plans that do not use "
                  f"{'it' if n == 1 else 'them'} were evaluated)", file=sys.stderr)
            return max(rc or EXIT_OK, EXIT_PLAN)
        return rc
    except PlanError as e:
        fmt = getattr(args, "format", "text")
        if fmt == "json":
            try:
                print(json.dumps({"diagnostics": [d.to_json() for d in e.diagnostics]}, indent=2, sort_keys=True))
            except BrokenPipeError:   # stdout closed (`| head`): the diagnostics still go to stderr, and the
                pass                  # exit code still says the plan failed
        for d in e.diagnostics:
            print(render(d), file=sys.stderr)
        n = sum(d.severity == "error" for d in e.diagnostics)
        print(f"{n} error{'s' if n != 1 else ''}", file=sys.stderr)
        if isinstance(e, CommandLineError):
            return EXIT_USAGE
        errs = [d for d in e.diagnostics if d.severity == "error"]
        if errs and all(d.code == "missing-dependency" for d in errs):
            return EXIT_MISSING
        return EXIT_PLAN
    except UsageError as e:
        print(printable(f"plan: error[{e.code}]: {e}") + printable(f"\n  hint: {e.hint}" if e.hint else "", lines=True),
              file=sys.stderr)     # a path or argument quoted in it may hold anything
        return EXIT_USAGE
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:  # stdout closed (`| head`): stop quietly; confined errors still fail the run
        return EXIT_PLAN if _CONFINED else EXIT_OK
    except L.LimitError as e:
        print(printable(f"plan: error[limit]: {e}") + printable(f"\n  hint: {e.hint}", lines=True), file=sys.stderr)
        return EXIT_PLAN
    except TimeoutError as e:
        print(f"plan: error[limit]: {e}\n  hint: {L.raise_hint('cpu_seconds')}", file=sys.stderr)
        return EXIT_PLAN
    except (MemoryError, RecursionError) as e:
        print(f"plan: error[limit]: the input is too large to process ({type(e).__name__})\n"
              "  hint: a count, size or nesting in the plan or on the command line is extreme; "
              "check it, or see docs/security.md for the limits", file=sys.stderr)
        return EXIT_PLAN
    except Exception as e:  # no traceback reaches the user
        print(f"plan: internal error: {type(e).__name__}: {printable(str(e)[:300])}\n"
              "  hint: this is a bug in plan or a plugin; please report it with the .plan file", file=sys.stderr)
        return EXIT_PLAN
    finally:
        L.set_limits(None)


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


def _output(path, write) -> None:
    """Run ``write(path)``; an unwritable path is a usage error, not an internal error."""
    try:
        write(path)
    except OSError as e:
        raise cannot_write(path, e) from None


def _warn(ws) -> None:
    from dsl.syntax.diagnostics import render
    for d in ws.warnings:
        print(render(d), file=sys.stderr)


_DISABLED: tuple[str, ...] = ()   # set by main() from --disable-plugin


_CONFINED: list = []   # errors confined to one declaration, already printed (see _load)


def _load(path: str, evaluate: bool = True, plans=None, strict: bool = False):
    """The evaluation of FILE with the plugins not disabled (``--disable-plugin``); with
    ``plans``, only those plans and the plans they depend on are priced.

    When every error is confined to one declaration (a model whose config cannot be read), the
    errors are printed here and the rest of the file is returned; the command then exits 1.
    With ``strict``, such errors raise PlanError like any other (nothing printed or recorded)."""
    from dsl.api import load
    from dsl.syntax.diagnostics import PlanError, render
    try:
        return load(path, evaluate=evaluate, disable=_DISABLED, plans=plans)
    except PlanError as e:
        partial = getattr(e, "partial", None)
        if partial is None or strict:
            raise
        for d in e.diagnostics:
            if d.severity == "error" and d not in _CONFINED:   # a command may load twice
                print(render(d), file=sys.stderr)
                _CONFINED.append(d)
        return partial


def parse_rate(text: str):
    """A command-line exchange rate such as ``0.92 EUR/USD`` (or ``0.92EUR/USD``): (value in
    base units, dimension).  Parsed as a number and a unit of the unit table — never
    evaluated as an expression.

    :raises UnitError: not a positive number followed by a unit of one currency per another.
    """
    import re
    from dsl.engine.units import CURRENCIES, UnitError, parse_unit
    from dsl.syntax.limits import current as current_limits

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z][A-Za-z0-9/^*·]*)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise UnitError(f"--rate '{text}' is not an exchange rate", "write a positive number and a unit of one "
                        "currency per another, e.g. --rate '0.92 EUR/USD'", code="usage")
    x, top = float(m.group(1)), current_limits().exponent
    if not (10.0 ** -top <= x <= 10.0 ** top):   # 1e400 reads as inf
        raise UnitError(f"--rate '{text}' is beyond what a plan can hold (magnitudes from 1e-{top} to 1e{top})",
                        "write the exchange rate as a plain number, e.g. --rate '0.92 EUR/USD'", code="usage")
    u = parse_unit(m.group(2))
    exps = dict(u.dim.exps)
    if len(exps) != 2 or sorted(exps.values()) != [-1, 1] or not set(exps) <= set(CURRENCIES):
        raise UnitError(f"--rate '{text}' is not in one currency per another", "e.g. --rate '0.92 EUR/USD'",
                        code="usage")
    return float(m.group(1)) * float(u.scale), u.dim


def _display(ws, nid: str, unit: str | None = None, rates=()) -> tuple[float | None, str]:
    """Value of ``nid`` in ``unit`` (default its own); ``rates`` (``--rate '0.92 EUR/USD'``)
    convert between currencies: the value is multiplied by the rate (or divided by it, for
    the inverse direction) that makes its dimension the requested unit's."""
    from dsl.engine.units import CURRENCIES, UnitError, check_unit_for, convert, parse_unit

    n = ws.nodes[nid]
    u = n.unit if unit is None else unit
    v = ws.base_value(nid)
    if v is None:
        return None, u
    dim, val = n.dim, float(v)
    if rates and u and u != "1":
        want = parse_unit(u).dim
        for text in rates:
            r, rdim = parse_rate(text)
            if dim != want and dim * rdim == want:
                dim, val = dim * rdim, val * r
            elif dim != want and dim / rdim == want:
                dim, val = dim / rdim, val / r
    try:
        check_unit_for(dim, u)
    except UnitError as e:
        money = [b for b, _ in dim.exps if b in CURRENCIES]
        other = [b for b, _ in parse_unit(u).dim.exps if b in CURRENCIES] if u and u != "1" else []
        if money and other and money != other:
            raise UnitError(str(e), f"pass the exchange rate, e.g. --rate 'R {other[0]}/{money[0]}'") from None
        raise
    return convert(val, u), u


def _report(ws, plans: list[str], units: list[str] = (), sources: bool = False, tables: str = "default") -> dict:
    """Headline quantities (``value`` in ``unit``, ``si`` in base units), requirements
    (``lhs``/``rhs`` in ``unit``, ``lhs_si``/``rhs_si`` in base units), critical paths,
    plugin tables and, with ``sources``, the references behind the quantities, the blocks
    and the tables shown under ``--tables tables``."""
    from dsl.engine.units import convert, format_number, parse_unit

    by_dim = {}
    for u in units:
        by_dim.setdefault(parse_unit(u).dim, u)
    out = {}
    for p in plans:
        qs = {}
        for n in ws.headline(p):
            val, u = _display(ws, n.id, by_dim.get(n.dim))
            qs[n.name] = {"value": val, "unit": u, "si": float(ws.base_value(n.id)), "doc": n.doc,
                          "plugin": n.plugin, "text": format_number(val) if val is not None else None}
        cp = None
        for slot in ws.plugins.slots.values():     # the critical path behind a slot's quantity
            st = ws.nodes.get(f"{p}.{slot.critical_path_of}") if slot.critical_path_of else None
            # a plan that sets the quantity itself has no timeline behind that number
            if st is not None and st.kind == "quantity" and (p, slot.timeline) in ws.timelines:
                cp = dict(ws.critical_path(p, slot.timeline), slot=slot.name)
                break
        if cp is not None:
            import sympy as sp
            cp = dict(cp, expr=sp.sstr(cp["expr"]))
        reqs = ws.requirement_results(p)
        for r in reqs:
            u = by_dim.get(parse_unit(r["unit"]).dim if r["unit"] else None) or r["unit"]
            r["unit"] = u
            r["lhs"], r["rhs"] = convert(r["lhs_si"], u), convert(r["rhs_si"], u)
        out[p] = {"quantities": qs, "requirements": reqs, "critical_path": cp,
                  "tables": _tables(ws, p, set(qs))}
        if sources:
            from dsl.present.sources import plan_sources
            out[p]["sources"] = plan_sources(ws, p, tables={n: t["references"] for n, t in out[p]["tables"].items()
                                                            if _shown(t, tables)})
    return out


def _tables(ws, plan: str, headline: set = frozenset()) -> dict:
    """Tables the plugins compute for ``plan`` (name -> title, columns, rows, notes, and how
    ``plan eval`` shows them: ``per_plan``, ``shown_by_default``, ``references``).  A table
    is shown by default unless its spec says ``default=False`` or the plan's ``headline``
    has one of the spec's ``hidden_with`` quantities."""
    out = {}
    for name, spec in sorted(ws.plugins.tables.items()):
        from dsl.syntax.diagnostics import PlanError
        try:
            t = spec.build(ws, plan)
        except TimeoutError:  # the CPU-time safety net fired: not this step's failure
            raise
        except PlanError:     # a problem in the plan's input to the table (e.g. a bad layout_search list)
            raise
        except Exception as e:  # a table that cannot be built must not hide the plan's values
            print(f"plan: warning[plugin]: table '{name}' (plugin '{spec.plugin}') of plan '{plan}' "
                  f"was not built: {e}", file=sys.stderr)
            continue
        if t is None:
            continue
        out[name] = {"title": spec.title, "plugin": spec.plugin, "columns": list(t.columns),
                     "rows": [[c if isinstance(c, (int, float, str)) or c is None else str(c) for c in r]
                              for r in t.rows], "notes": list(t.notes),
                     "per_plan": bool(getattr(spec, "per_plan", True)),
                     "shown_by_default": bool(getattr(spec, "default", True))
                     and not set(getattr(spec, "hidden_with", ())) & set(headline),
                     "references": list(getattr(spec, "references", ()))
                     + [r for r in getattr(t, "references", ()) if r not in getattr(spec, "references", ())]}
    return out


def _select_plans(ws, file: str, wanted):
    from dsl.syntax.diagnostics import Diagnostic, PlanError, did_you_mean
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


def cmd_figure(args) -> int:
    from pathlib import Path

    from dsl.plugin.figures import FigureError, new_figure, save

    ws = _load(args.file)
    _warn(ws)
    specs = ws.plugins.figures
    if args.list:
        return _list_figures(ws, args, specs)
    unknown = [n for n in (args.name or []) if n not in specs]
    if unknown:
        from dsl.syntax.diagnostics import did_you_mean
        g = did_you_mean(unknown[0], specs)
        print(f"plan: error[unknown-name]: no figure '{unknown[0]}'\n  hint: "
              + (f"did you mean '{g}'? " if g else "") + "figures: " + ", ".join(sorted(specs)), file=sys.stderr)
        return EXIT_USAGE
    plans = _select_plans(ws, args.file, args.plan)
    out = Path(args.out)
    _output(out, lambda d: d.mkdir(parents=True, exist_ok=True))
    written = 0
    try:
        for p in plans:
            for name, spec in sorted(specs.items()):
                if args.name and name not in args.name:
                    continue
                fig = new_figure()
                if spec.draw(ws, p, fig):
                    _output(out / f"{p}-{name}.{args.format}", lambda f: save(fig, f))
                    print(out / f"{p}-{name}.{args.format}")
                    written += 1
    except FigureError as e:
        from dsl.plugin.figures import MissingPackage
        missing = isinstance(e, MissingPackage)
        print(f"plan: error[{'missing-dependency' if missing else 'figure'}]: {e}", file=sys.stderr)
        return EXIT_MISSING if missing else EXIT_PLAN
    if not written:
        print(f"{args.file}: no figure applies to these plans", file=sys.stderr)
    return EXIT_OK


def _list_figures(ws, args, specs) -> int:
    """`plan figure FILE --list`: the figures that apply to FILE's plans (each drawn once, off
    screen, to find out), with the plans they apply to; the others are counted."""
    from dsl.plugin.figures import FigureError, MissingPackage, new_figure

    plans = _select_plans(ws, args.file, args.plan)
    rows, others = [], 0
    for name, spec in sorted(specs.items()):
        if args.name and name not in args.name:
            continue
        hit = []
        for p in plans:
            try:
                if spec.draw(ws, p, new_figure()):
                    hit.append(p)
            except MissingPackage as e:
                print(f"plan: error[missing-dependency]: {e}", file=sys.stderr)
                return EXIT_MISSING
            except FigureError:
                continue
        if hit:
            rows.append((name, spec, hit))
        else:
            others += 1
    if not rows:
        print(f"{args.file}: no figure applies to its plans ({', '.join(plans) or 'none'})", file=sys.stderr)
    for name, spec, hit in rows:
        print(f"{name:24s} {spec.title}  [plugin {spec.plugin}]  plans: {', '.join(hit)}")
    if others:
        print(f"({others} other figure{'s' if others != 1 else ''} apply to none of these plans; "
              "`plan plugins` lists every figure)")
    return EXIT_OK


def cmd_timeline(args) -> int:
    from dsl.plugin.figures import text_timeline
    from dsl.engine.units import UnitError, check_unit_for, format_number, parse_unit

    ws = _load(args.file)
    _warn(ws)
    if args.unit:
        try:
            parse_unit(args.unit)
        except UnitError as err:
            print(f"plan: error[unknown-unit]: {err}\n  hint: {err.hint}", file=sys.stderr)
            return EXIT_USAGE
        try:
            check_unit_for(parse_unit("s").dim, args.unit)
        except UnitError as err:
            print(f"plan: error[unit-mismatch]: {err}\n  hint: {err.hint}", file=sys.stderr)
            return EXIT_USAGE
    plans = _select_plans(ws, args.file, args.plan)
    shown = 0
    for (p, name), tl in sorted(ws.timelines.items(), key=lambda kv: (plans.index(kv[0][0])
                                                                       if kv[0][0] in plans else 0, kv[0][1])):
        if p not in plans or (args.timeline and name != args.timeline) or tl.schedule is None:
            continue
        unit = args.unit or ("ms" if tl.schedule.makespan < 10 else "s")
        print(text_timeline(tl, max(20, args.width), unit))
        path = tl.schedule.path
        scale = float(parse_unit(unit).scale)
        if path:
            shown_path = path if len(path) <= 12 else path[:5] + ["…"] + path[-5:]
            print(f"  critical path ({len(path)} activities): " + " → ".join(shown_path))
        for pool, prof in sorted(tl.profiles.items()):
            print(f"  peak of {pool}: {format_number(prof.peak / 2 ** 20)} MiB at "
                  f"{format_number(prof.time / scale)} {unit} (live: {', '.join(prof.live[:8])}"
                  + (", …" if len(prof.live) > 8 else "") + ")")
        print()
        shown += 1
    if not shown:
        which = f"timeline '{args.timeline}'" if args.timeline else "timeline"
        print(f"{args.file}: no {which} in these plans", file=sys.stderr)
        return EXIT_PLAN if args.timeline else EXIT_OK
    return EXIT_OK


def cmd_eval(args) -> int:
    ws = _load(args.file, plans=args.plan)
    _warn(ws)
    plans = _select_plans(ws, args.file, args.plan)
    from dsl.engine.units import UnitError, parse_unit
    for u in args.units:
        try:
            parse_unit(u)
        except UnitError as err:
            print(f"plan: error[unknown-unit]: {err}\n  hint: {err.hint}", file=sys.stderr)
            return EXIT_USAGE
    if not plans and not ws.solve_names and not ws.file_requirements and args.format == "text":
        n = len([d for d in ws.decls.values() if d.ast.span.file == ws.modules[0].file]) if ws.modules else 0
        declared = bool(ws.modules) and any(d.kind == "plan" for d in ws.modules[0].decls)
        if declared:   # its plans were stopped by the errors printed above
            print(f"{args.file}: no plan evaluated (the errors above stopped them)", file=sys.stderr)
            return EXIT_PLAN
        what = ("is empty" if not ws.modules or not (ws.modules[0].decls or ws.modules[0].imports)
                else f"declares no plan ({n} other declaration{'s' if n != 1 else ''})" if n
                else "declares nothing of its own (only imports)")
        print(f"{args.file} {what}: nothing to evaluate; declare a plan with `plan NAME {{ … }}` "
              "(`plan plugins` lists the blocks it can use)")
        return EXIT_OK
    if not plans:
        print(f"{args.file}: no plans to evaluate (declare one with `plan NAME {{ … }}`)", file=sys.stderr)
    rep = _report(ws, plans, args.units, sources=args.sources,
                  tables=args.tables or ("all" if args.format == "json" else "default"))
    solves, freqs = _file_results(ws, plans if args.plan else None, args.units)
    violated = any(not r["ok"] for p in rep.values() for r in p["requirements"]) or \
        any(not r["ok"] for r in freqs)
    if args.format == "json":
        if args.tables is not None:         # JSON lists every table unless asked otherwise
            for r in rep.values():
                r["tables"] = {n: t for n, t in r["tables"].items() if _shown(t, args.tables)}
        print(json.dumps({"file": args.file, "plans": rep, "solves": solves, "requirements": freqs,
                          "diagnostics": [d.to_json() for d in ws.diagnostics]}, indent=2, sort_keys=True))
        return EXIT_PLAN if (violated and args.strict) else EXIT_OK
    print(_render_eval(args.file, rep, plans, args.units, tables=args.tables or "default",
                       sources=args.sources, solves=solves, file_requirements=freqs))
    return EXIT_PLAN if (violated and args.strict) else EXIT_OK


def _file_scope(ws, plans) -> tuple[set, set]:
    """The named solves and file-level requirements that concern only ``plans`` (all of them
    when ``plans`` is None): a solve whose target is in one of them, a requirement whose
    solves are among those and whose other names belong to them or to non-plan declarations."""
    def owner_ok(nid: str) -> bool:
        n = ws.nodes.get(nid)
        return n is None or ws.decls[n.owner].kind != "plan" or n.owner in plans
    if plans is None:
        return set(ws.solve_names), {r.name for r in ws.file_requirements}
    sv = {n for n, q in ws.solve_names.items() if q.target.parts[0] in plans}
    rq = set()
    for r in ws.file_requirements:
        syms = {x.name for e in (r.lhs, r.rhs) for x in e.free_symbols if not x.name.startswith("solve:")}
        if set(r.answers) <= sv and all(owner_ok(x) for x in syms):
            rq.add(r.name)
    return sv, rq


def _file_results(ws, plans=None, units=()) -> tuple[dict, list]:
    """Named solves (name -> the solution's JSON, ``answer`` in ``unit``) and the file-level
    requirements (``lhs``/``rhs`` in ``unit``) of the root file, limited to ``plans``."""
    from dsl.engine.units import convert, parse_unit
    from dsl.results.solver import file_requirement_results, named_solutions

    sv, rq = _file_scope(ws, plans)
    if not sv and not rq:
        return {}, []
    by_dim = {}
    for u in units:
        by_dim.setdefault(parse_unit(u).dim, u)
    sols = named_solutions(ws, sv)
    out = {}
    for name, sol in sols.items():
        u = by_dim.get(ws.nodes[sol.target].dim)
        if u:
            sol.unit = u
        out[name] = sol.to_json()
    reqs = []
    for r in file_requirement_results(ws):
        if r["name"] not in rq:
            continue
        u = by_dim.get(parse_unit(r["unit"]).dim if r["unit"] else None) or r["unit"]
        r["unit"] = u
        r["lhs"] = None if r["lhs_si"] is None else convert(r["lhs_si"], u)
        r["rhs"] = None if r["rhs_si"] is None else convert(r["rhs_si"], u)
        reqs.append(r)
    return out, reqs


def _shown(t: dict, mode: str) -> bool:
    """Whether table ``t`` (an entry of :func:`_tables`) is shown under ``--tables mode``."""
    return mode == "all" or (mode == "default" and t.get("shown_by_default", True))


def _render_tables(rep: dict, plans: list[str], mode: str) -> list[str]:
    """The plugin tables of `plan eval` text: a per-plan table once per plan, titled with the
    plan; a shared one (``per_plan=False``) once per distinct content, titled with the plans
    it stands for; then which tables ``--tables all`` would add."""
    lines: list[str] = []
    done: set[str] = set()
    hidden: list[str] = []
    for p in plans:
        for name, t in rep[p].get("tables", {}).items():
            if not _shown(t, mode):
                if mode == "default" and name not in hidden:
                    hidden.append(name)
                continue
            if t.get("per_plan", True):
                lines.append("")
                lines.extend(render_table(f"{t['title']} ({p})", t["columns"], t["rows"], t["notes"]))
                continue
            if name in done:
                continue
            done.add(name)
            groups: dict = {}
            for q in plans:
                u = rep[q].get("tables", {}).get(name)
                if u is not None and _shown(u, mode):
                    key = json.dumps([u["title"], u["columns"], u["rows"], u["notes"]], sort_keys=True, default=str)
                    groups.setdefault(key, (u, []))[1].append(q)
            for u, ps in groups.values():
                who = "all plans" if len(ps) == len(plans) > 1 else ", ".join(ps)
                lines.append("")
                lines.extend(render_table(f"{u['title']} ({who})", u["columns"], u["rows"], u["notes"]))
    if hidden:
        lines.append("")
        lines.append(f"not shown: table{'s' if len(hidden) > 1 else ''} {', '.join(hidden)} "
                     f"(`--tables all` shows {'them' if len(hidden) > 1 else 'it'})")
    return lines


def _render_eval(file: str, rep: dict, plans: list[str], units: list[str], tables: str = "default",
                 sources: bool = False, solves: dict | None = None, file_requirements=()) -> str:
    """The text of `plan eval`: a quantity × plan table, requirements, plugin tables (see
    :func:`_render_tables`), critical paths and, with ``sources``, the references."""
    from dsl.engine.units import convert, format_number, parse_unit

    rows: list[tuple[str, str]] = []
    for p in plans:
        for name, q in rep[p]["quantities"].items():
            if (name, q["unit"]) not in rows:
                rows.append((name, q["unit"]))
    header = ["quantity", "unit"] + plans
    table = [header]
    for name, unit in rows:
        cells = [name, unit]
        for p in plans:
            q = rep[p]["quantities"].get(name)
            cells.append(q["text"] if q and q["unit"] == unit and q["text"] is not None else "—")
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = [f"{file}", ""]
    for i, r in enumerate(table):
        lines.append("  ".join(c.ljust(widths[j]) if j < 2 else c.rjust(widths[j]) for j, c in enumerate(r)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if any(rep[p]["requirements"] for p in plans) or file_requirements:
        lines.append("")
        lines.append("requirements")
    for p in plans:
        for r in rep[p]["requirements"]:
            mark = "ok  " if r["ok"] else "FAIL"
            vals = f"{format_number(r['lhs'])} {r['op']} {format_number(r['rhs'])} {r['unit']}".rstrip()
            expr = r.get("expr", "")
            head = vals if not expr or expr.replace(" ", "") == vals.replace(" ", "") else f"{expr}: {vals}"
            ins = "; ".join(f"{k} = {format_number(v)} {u}".rstrip() for k, (v, u) in r.get("inputs", {}).items())
            lines.append(f"  {mark} {p}.{r['name']}: {head}" + (f"  ({ins})" if ins else "")
                         + ("" if r["ok"] else "  <- violated"))
    for r in file_requirements:
        mark = "ok  " if r["ok"] else "FAIL"
        if r["lhs"] is None:
            lines.append(f"  FAIL {r['name']}: {r['text']}  <- {r['note']}")
            continue
        lines.append(f"  {mark} {r['name']}: {format_number(r['lhs'])} {r['op']} "
                     f"{format_number(r['rhs'])} {r['unit']}".rstrip() + ("" if r["ok"] else "  <- violated"))
    if solves:
        lines.append("")
        lines.append("solves")
        w = max(len(n) for n in solves)
        for name, s in solves.items():
            u = "" if s["unit"] == "1" else s["unit"]
            shown = (f"{format_number(s['answer'])} {u}".rstrip() if s["answer"] is not None else "no answer")
            lines.append(f"  {name.ljust(w)}  {shown}   ({s['query']})")
    lines.extend(_render_tables(rep, plans, tables))
    cps = [(p, rep[p]["critical_path"]) for p in plans if rep[p]["critical_path"]]
    if cps:
        lines.append("")
        lines.append("critical path of one " + cps[0][1]["slot"].replace("_", " "))
        for p, cp in cps:
            tu = next((u for u in units if parse_unit(u).dim == parse_unit("s").dim), "s")
            path = [a["id"] for a in cp["activities"] if a["id"] in cp["path"] and a["duration"] > 0]
            lines.append(f"  {p}: " + " -> ".join(path) + f"  ({format_number(convert(cp['makespan'], tu))} {tu})")
    if sources:
        from dsl.present.sources import render_text
        lines.append("")
        lines.extend(render_text({p: rep[p].get("sources") for p in plans}, plans))
    return "\n".join(lines)


def _emit(args, value, unit: str | None = None) -> int:
    """Print one result of `plan get`: bare, with its unit (``--with-unit``) or as JSON."""
    if isinstance(value, float):
        shown = str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    elif isinstance(value, bool):
        shown = "true" if value else "false"
    else:
        shown = str(value)
    u = None if unit in (None, "", "1") else unit
    if getattr(args, "format", "text") == "json":
        print(json.dumps({"name": args.name, "value": value, "unit": u}, sort_keys=True))
    else:
        print(shown + (f" {u}" if u and getattr(args, "with_unit", False) else ""))
    return EXIT_OK


def cmd_get(args) -> int:
    from dsl.engine.units import UnitError

    ws = _load(args.file)
    if args.name in ws.solve_names:
        return _get_answer(ws, args)
    if "." not in args.name and any(r.name == args.name for r in ws.file_requirements):
        from dsl.results.solver import file_requirement_results
        r = next(r for r in file_requirement_results(ws) if r["name"] == args.name)
        return _emit(args, bool(r["ok"]))
    plan, _, rest = args.name.partition(".")
    if plan in ws.decls and ws.decls[plan].kind == "plan" and rest and f"{plan}.{rest}" not in ws.nodes:
        req = ws.requirement(plan, rest)
        if req is not None:
            return _emit(args, bool(req["ok"]))
    nid = _cmdline(ws.lookup, args.name)
    n = ws.nodes[nid]
    if not n.numeric:
        from dsl.present.explain import show_value
        return _emit(args, n.value if isinstance(n.value, (str, bool)) else show_value(ws, nid))
    try:
        val, shown_unit = _display(ws, nid, args.unit, getattr(args, "rates", ()))
    except UnitError as e:
        print(f"plan: error[{e.code}]: {e}\n  hint: {e.hint}", file=sys.stderr)
        return EXIT_USAGE
    if val is None:
        print(f"plan: error: '{args.name}' has no value", file=sys.stderr)
        return EXIT_PLAN
    if args.expr:
        import sympy as sp
        print(sp.sstr(ws.full_expr(nid)))
        return EXIT_OK
    return _emit(args, float(val), shown_unit)


def _get_answer(ws, args) -> int:
    """`plan get FILE NAME` for a named solve: its answer (the whole number for a whole-number
    target), in the target's unit or ``--in``; ``--expr`` prints its symbolic form."""
    from dsl.engine.units import UnitError, check_unit_for, convert
    from dsl.results.solver import named_solutions
    from dsl.syntax.diagnostics import Diagnostic, render

    sol = named_solutions(ws, {args.name})[args.name]
    span = ws.solve_names[args.name].span     # errors point at the solve
    if sol.answer is None:
        print(render(Diagnostic("error", "solve", f"'{args.name}' has no answer: {sol.note}", span,
                                f"`plan solve {args.file}` shows the query and what was scanned")), file=sys.stderr)
        return EXIT_PLAN
    if args.expr:
        if sol.symbolic is None:
            print(render(Diagnostic("error", "solve", f"'{args.name}' has no symbolic form ({sol.method} answer)",
                                    span, "drop --expr to print the number")), file=sys.stderr)
            return EXIT_PLAN
        print(sol.symbolic)
        return EXIT_OK
    unit = args.unit or sol.unit
    try:
        check_unit_for(ws.nodes[sol.target].dim, unit)
    except UnitError as e:
        print(f"plan: error[{e.code}]: {e}\n  hint: {e.hint}", file=sys.stderr)
        return EXIT_USAGE
    return _emit(args, float(convert(sol.answer, unit)), unit)


def cmd_check(args) -> int:
    ws = _load(args.file, evaluate=args.strict)
    _warn(ws)
    if args.strict:
        return _check_strict(ws, args)
    if args.format == "json":
        print(json.dumps({"file": args.file, "ok": not _CONFINED, "declarations": len(ws.decls),
                          "diagnostics": [d.to_json() for d in ws.diagnostics]}, indent=2, sort_keys=True))
    elif not _CONFINED:
        nd, nf = len(ws.decls), len(ws.modules)
        print(f"{args.file}: ok ({nd} declaration{'s' if nd != 1 else ''} in {nf} file{'s' if nf != 1 else ''})")
    return EXIT_OK


def _check_strict(ws, args) -> int:
    """`plan check --strict`: every requirement of the selected plans; each failing one is an
    ``error[requirement]`` with its margin and its drivers (largest elasticities of lhs/rhs),
    each with the value at which the requirement would hold again."""
    from dsl.syntax.diagnostics import Diagnostic, render
    from dsl.results.sensitivity import requirement_report
    from dsl.engine.units import format_quantity

    plans = _select_plans(ws, args.file, args.plan)
    failed, checked = [], 0
    for p in plans:
        results = {r["name"]: r for r in ws.requirement_results(p)}
        for req in [r for r in ws.requirements if r.plan == p]:
            res = results.get(req.name)
            if res is None:
                continue
            checked += 1
            if res["ok"]:
                continue
            rr = requirement_report(ws, req, top=5)
            u = req.unit
            side = req.text or req.doc or req.name
            summary = (f"requirement '{p}.{req.name}' fails: {format_quantity(rr['lhs'], u)} {req.op} "
                       f"{format_quantity(rr['rhs'], u)} does not hold (margin {format_quantity(rr['margin'], u)}"
                       + (f", {rr['relative'] * 100:+.1f} %)" if rr['relative'] == rr['relative'] else ")"))
            drivers = []
            for d in rr["drivers"]:
                n = ws.nodes[d["input"]]
                be = d["break_even"]
                flip = ("holds when " + d["input"] + f" {be['holds']} " + format_quantity(be["value"], n.unit)
                        if be["value"] is not None and be["holds"] else "no single change of it fixes this")
                drivers.append(f"{d['input']} = {format_quantity(d['value'], n.unit)} "
                               f"(elasticity {d['elasticity']:+.3g}; {flip})")
            hint = (f"wanted: {side}; the inputs that drive it (the plan's own first, largest elasticities "
                    "of lhs/rhs first):\n"
                    + "\n".join(f"    - {x}" for x in drivers)) if drivers else side
            span = req.span or ws.decls[p].ast.name_span
            diag = Diagnostic("error", "requirement", summary, span, hint)
            failed.append((diag, rr))
    _, rq = _file_scope(ws, plans if args.plan else None)
    if rq:
        from dsl.results.solver import file_requirement_results, named_solutions
        for res in file_requirement_results(ws):
            if res["name"] not in rq:
                continue
            checked += 1
            if res["ok"]:
                continue
            req = next(r for r in ws.file_requirements if r.name == res["name"])
            sols = named_solutions(ws, set(req.answers))
            where = "; ".join(f"{n} is the answer of `solve {n}: {s.query}`"
                              + (f" ({s.note})" if s.note else "") for n, s in sols.items())
            u = req.unit
            if res["lhs_si"] is None:
                summary = f"requirement '{req.name}' fails: {res['note']}"
                rr = {"name": req.name, "text": req.text, "unit": u, "lhs": None, "rhs": None, "margin": None,
                      "relative": None, "drivers": [], "note": res["note"]}
            else:
                margin = (res["rhs_si"] - res["lhs_si"]) if req.op in ("<=", "<") else res["lhs_si"] - res["rhs_si"]
                if req.op == "==":
                    margin = -abs(res["lhs_si"] - res["rhs_si"])
                rel = margin / abs(res["rhs_si"]) if res["rhs_si"] else 0.0
                summary = (f"requirement '{req.name}' fails: {format_quantity(res['lhs_si'], u)} {req.op} "
                           f"{format_quantity(res['rhs_si'], u)} does not hold (margin {format_quantity(margin, u)}, "
                           f"{rel * 100:+.1f} %)")
                rr = {"name": req.name, "text": req.text, "unit": u, "lhs": res["lhs_si"], "rhs": res["rhs_si"],
                      "margin": margin, "relative": rel, "drivers": []}
            rr["answers"] = {n: s.to_json() for n, s in sols.items()}
            failed.append((Diagnostic("error", "requirement", summary, req.span,
                                      f"{req.text}; {where}" if where else req.text), rr))
    if args.format == "json":
        print(json.dumps({"file": args.file, "ok": not failed, "requirements_checked": checked,
                          "failed": [dict(_in_units(ws, rr), where=str(d.span)) for d, rr in failed]},
                         indent=2, sort_keys=True, default=str))
    else:
        for d, _ in failed:
            print(render(d), file=sys.stderr)
        if failed:
            print(f"{len(failed)} of {checked} requirements fail", file=sys.stderr)
        else:
            print(f"{args.file}: ok ({checked} requirement{'s' if checked != 1 else ''} hold"
                  f"{'' if checked != 1 else 's'})")
    return EXIT_PLAN if failed else EXIT_OK


def _in_units(ws, rr: dict) -> dict:
    """A requirement report for JSON: ``lhs``, ``rhs``, ``margin`` in the requirement's ``unit``
    (``*_si`` in base units); each driver's ``value`` and break-even in the input's ``unit``."""
    from dsl.engine.units import convert

    u = rr["unit"]
    out = dict(rr, **{k: None if rr[k] is None else convert(rr[k], u) for k in ("lhs", "rhs", "margin")},
               **{f"{k}_si": rr[k] for k in ("lhs", "rhs", "margin")})
    drivers = []
    for d in rr["drivers"]:
        du = ws.nodes[d["input"]].unit
        be = dict(d["break_even"])
        for k in ("value", "nominal"):
            if be.get(k) is not None:
                be[f"{k}_si"], be[k] = be[k], convert(be[k], du)
        drivers.append(dict(d, unit=du, value=convert(d["value"], du), value_si=d["value"], break_even=be))
    out["drivers"] = drivers
    return out


def cmd_solve(args) -> int:
    from dsl.syntax.format import query_text
    from dsl.syntax.parser import parse_query
    from dsl.results.solver import solve_query
    from dsl.engine.units import convert, format_number

    if args.query is not None and not args.query.strip():
        raise UsageError("usage", "--query is empty", "write --query \"TARGET for LHS == RHS\"")
    ws = _load(args.file)
    _warn(ws)
    queries = [_cmdline(parse_query, args.query)] if args.query else list(ws.queries)
    if not queries:
        if ws.modules and ws.modules[0].queries:   # every query is about a plan an error stopped
            print(f"{args.file}: no `solve` query asked: each is about a plan the errors above stopped",
                  file=sys.stderr)
            return EXIT_PLAN
        print(f"{args.file}: no `solve` queries (give one with --query)", file=sys.stderr)
        return EXIT_OK
    from dsl.syntax.diagnostics import PlanError, render
    sols, failed = [], []
    from dsl.syntax import limits as L
    for q in queries:
        try:
            with L.time_budget():
                sols.append(solve_query(ws, q))
        except TimeoutError as e:
            from dsl.syntax.diagnostics import Diagnostic
            from dsl.syntax.format import query_text
            failed.append((q, PlanError([Diagnostic("error", "limit", f"solving '{query_text(q)}' {e}", q.span,
                                                    L.raise_hint("cpu_seconds"))])))
            for d in failed[-1][1].diagnostics:
                print(render(d), file=sys.stderr)
        except PlanError as e:  # one bad query does not hide the others' answers
            failed.append((q, e))
            for d in e.diagnostics:
                print(render(d), file=sys.stderr)
    rc = (EXIT_USAGE if args.query else EXIT_PLAN) if failed else EXIT_OK   # --query is the command line
    if args.unit:
        from dsl.engine.units import UnitError, check_unit_for
        for s in sols:
            try:
                check_unit_for(ws.nodes[s.target].dim, args.unit)
            except UnitError as err:
                print(f"plan: error[{err.code}]: {err}\n  hint: {err.hint}", file=sys.stderr)
                return EXIT_USAGE
            s.unit = args.unit
    if args.format == "json":
        print(json.dumps({"file": args.file, "solutions": [s.to_json() for s in sols],
                          "diagnostics": [d.to_json() for _, e in failed for d in e.diagnostics]},
                         indent=2, sort_keys=True))
        return rc
    lines = []
    for s in sols:
        lines.append(f"solve {s.name + ': ' if s.name else ''}{s.query}")
        if s.value is None:
            lines.append(f"  {s.note}")
        else:
            u = "" if s.unit == "1" else s.unit
            shown = f"{format_number(convert(s.value, s.unit))} {u}".rstrip()
            nominal = f"{format_number(convert(s.nominal, s.unit))} {u}".rstrip() if s.nominal is not None else "?"
            if s.whole_only and s.whole != s.value:
                # a whole-number target: the whole number first, the continuous root beside it
                answer = (": no whole number answers" if s.whole is None else
                          f" = {format_number(convert(s.whole, s.unit))} {u}".rstrip())
                lines.append(f"  {s.target}{answer}   (nominal {nominal}; {s.method}; continuous root {shown})")
            else:
                lines.append(f"  {s.target} = {shown}   (nominal {nominal}; {s.method})")
            if s.holds:
                lines.append(f"  the relation holds for {s.holds.replace('boundary', shown)}")
            elif s.intervals:
                le = "<" if s.query and (" < " in s.query or " > " in s.query) else "<="

                def fmt(v):
                    return f"{format_number(convert(v, s.unit))} {u}".rstrip()
                parts = []
                for lo, hi in s.intervals:
                    if lo is None and hi is None:
                        parts.append("every value")
                    elif lo is None:
                        parts.append(f"{s.target} {le} {fmt(hi)}")
                    elif hi is None:
                        parts.append(f"{s.target} {'>' if le == '<' else '>='} {fmt(lo)}")
                    else:
                        parts.append(f"{fmt(lo)} {le} {s.target} {le} {fmt(hi)}")
                lines.append("  the relation holds for " + (" or ".join(parts) if parts else "no value"))
            for n in (s.note.split("; ") if s.note else []):
                lines.append(f"  note: {n}")
            if s.symbolic:
                lines.append(f"  where {s.symbolic}")
        lines.append("")
    if lines:
        print("\n".join(lines).rstrip())
    if failed:
        print(f"{len(failed)} of {len(queries)} queries failed", file=sys.stderr)
    return rc


def cmd_report(args) -> int:
    from pathlib import Path

    from dsl.present import report

    fmt = args.format
    if fmt is None:
        suffix = Path(args.out).suffix.lower() if args.out else ""
        fmt = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}.get(suffix, "text")
    if args.out:   # find out that the path cannot be written before building the report
        problem = cannot_write(args.out)
        if problem is not None:
            raise problem
    ws = _load(args.file)
    _warn(ws)
    plans = _select_plans(ws, args.file, args.plan)
    text = report.render(report.build(ws, plans, figures=fmt == "html"), fmt)
    if args.out:
        _output(Path(args.out), lambda f: f.write_text(text, encoding="utf-8"))
        print(args.out)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def cmd_diff(args) -> int:
    import tempfile
    from pathlib import Path

    from dsl.present import diff

    with tempfile.TemporaryDirectory(prefix="plan-diff-") as tmp:
        old = diff.load_side(args.old, Path(tmp))
        new = diff.load_side(args.new, Path(tmp))
        try:
            res = diff.compare(old, new)
        except _PlanError as e:   # `#PLAN` naming no plan of the file is a bad command line
            if all(d.code == "unknown-name" and d.span is None for d in e.diagnostics):
                raise CommandLineError(e.diagnostics) from None
            raise
    if args.format == "json":
        print(json.dumps(res, indent=2, sort_keys=True, default=str))
    elif args.format == "md":
        sys.stdout.write(diff.render_markdown(res))
    else:
        print(diff.render_text(res))
    return EXIT_OK


def cmd_sweep(args) -> int:
    from dsl.results import sweep
    from dsl.engine.units import format_number

    try:
        sweep._numpy()
    except sweep.SweepError as e:
        print(f"plan: error[missing-dependency]: {e}", file=sys.stderr)
        return EXIT_MISSING
    ws = _load(args.file)
    _warn(ws)
    varies = [_cmdline(sweep.parse_vary, ws, v) for v in args.vary]
    if not args.random:   # the grid the command line asks for, refused like --random (exit 2)
        from dsl.syntax import limits as L
        import math
        grid = math.prod(v.n for v in varies)
        if grid > L.current().points:
            raise UsageError("limit", f"the --vary grid has {grid:,} points, above the limit of "
                             f"{L.current().points:,}", L.raise_hint("points"))
    if args.plan:
        plans = _select_plans(ws, args.file, args.plan)
    else:
        plans = [p for p in ws.plans() if any(v.id.startswith(p + ".") for v in varies)] or ws.plans(own=True)
    out = {}
    for p in plans:
        res = sweep.run(ws, p, varies, random=args.random, seed=args.seed)
        out[p] = res
        if args.out:
            path = args.out if len(plans) == 1 else args.out.replace(".csv", "") + f"-{p}.csv"
            _output(path, res.write_csv)
            print(path, file=sys.stderr)
    if args.format == "json":
        print(json.dumps({p: r.summary() for p, r in out.items()}, indent=2, sort_keys=True))
        return EXIT_OK
    for p, res in out.items():
        s = res.summary()
        print(f"plan {p}: {s['points']:,} points ({'random' if args.random else 'grid'}), "
              f"{s['feasible']:,} feasible ({s['share'] * 100:.1f} %)")
        for v in res.varied:
            u = res.units[v]
            rng = s["ranges"][v]
            shown = "none" if rng is None else f"{format_number(rng[0])} .. {format_number(rng[1])} {u}".rstrip()
            print(f"  {v}: feasible {shown}")
        for r, share in s["failing"].items():
            print(f"  requirement {r}: fails at {share * 100:.1f} % of points")
        for at, why in res.not_built:
            shown = ", ".join(f"{v} = {format_number(x)} {res.units[v]}".rstrip() for v, x in at.items())
            print(f"  not built at {shown}: {why}")
        for name, col in res.columns.items():
            if name in res.varied or col.dtype == bool or col.dtype.kind == "O":
                continue
            u = res.units.get(name, "")
            ok = col[col == col]                  # the points where it has a value (not NaN)
            if not len(ok):
                print(f"  {name}: no value at any point")
                continue
            missing = len(col) - len(ok)
            print(f"  {name}: {format_number(float(ok.min()))} .. {format_number(float(ok.max()))} {u}".rstrip()
                  + (f" (no value at {missing:,} point{'s' if missing != 1 else ''})" if missing else ""))
    return EXIT_OK


def cmd_fmt(args) -> int:
    from pathlib import Path

    from dsl.syntax.diagnostics import PlanError, render
    from dsl.syntax.format import format_source

    unformatted, errors = [], 0
    for f in args.files:
        if f == "-":
            try:
                text = sys.stdin.buffer.read().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            except UnicodeDecodeError as e:
                print(f"plan: error[encoding]: standard input is not UTF-8 text (byte {e.object[e.start]:#04x})\n"
                      "  hint: save the file as UTF-8", file=sys.stderr)
                errors += 1
                continue
            try:
                out = format_source(text, "<stdin>")
            except PlanError as e:
                for d in e.diagnostics:
                    print(render(d), file=sys.stderr)
                errors += 1
                continue
            if args.check:
                if out != text:
                    unformatted.append("<stdin>")
            else:
                sys.stdout.write(out)
            continue
        try:
            text = Path(f).read_text(encoding="utf-8")
        except OSError as e:
            print(f"plan: error[missing-file]: cannot read '{f}': {e.strerror}", file=sys.stderr)
            errors += 1
            continue
        except UnicodeDecodeError as e:
            print(f"plan: error[encoding]: '{f}' is not UTF-8 text (byte {e.object[e.start]:#04x})\n"
                  "  hint: save the file as UTF-8", file=sys.stderr)
            errors += 1
            continue
        try:
            out = format_source(text, f)
        except PlanError as e:
            for d in e.diagnostics:
                print(render(d), file=sys.stderr)
            errors += 1
            continue
        if out != text:
            unformatted.append(f)
            if not args.check:
                _output(Path(f), lambda p: p.write_text(out, encoding="utf-8"))
                print(f"formatted {f}", file=sys.stderr)
    if args.check and unformatted:
        for f in unformatted:
            print(f"would reformat {f}", file=sys.stderr)
    if errors:
        return EXIT_PLAN
    return EXIT_PLAN if (args.check and unformatted) else EXIT_OK


def cmd_explain(args) -> int:
    from dsl.present import explain

    ws = _load(args.file)
    _warn(ws)
    plan, _, rest = args.name.partition(".")
    if plan in ws.decls and ws.decls[plan].kind == "plan" and rest and f"{plan}.{rest}" not in ws.nodes:
        rt = explain.requirement_tree(ws, plan, rest, args.depth)
        if rt is not None:
            if args.format == "json":
                print(json.dumps(rt, indent=2, sort_keys=True))
            else:
                print(explain.render_requirement(rt, plan))
            return EXIT_OK
    if "." not in args.name and args.name not in ws.nodes:
        rt = explain.file_requirement_tree(ws, args.name, args.depth)
        if rt is not None:
            if args.format == "json":
                print(json.dumps(rt, indent=2, sort_keys=True))
            else:
                print(explain.render_requirement(rt, ""))
            return EXIT_OK
    nid = _cmdline(ws.lookup, args.name)
    t = explain.tree(ws, nid, args.depth)
    if args.format == "json":
        print(json.dumps(t, indent=2, sort_keys=True))
    else:
        print(explain.render(t, ws.nodes[nid].owner))
    return EXIT_OK


def _lookup_in(ws, name: str, plan: str | None) -> str:
    """Node id of a command-line ``name`` read relative to ``plan`` (``--plan base --quantity
    step_time`` is ``base.step_time``); a name whose first part is a declaration (``base.…``,
    ``h100_sxm.peak_flops``) or no plan: as written.  :raises PlanError: unknown name."""
    if plan is None or name.split(".")[0] in ws.decls:
        return ws.lookup(name)
    return ws.lookup(f"{plan}.{name}")


def cmd_graph(args) -> int:
    from pathlib import Path

    from dsl.present import graphviz

    ws = _load(args.file)
    _warn(ws)
    plan = _select_plans(ws, args.file, [args.plan])[0] if args.plan else None
    q = _cmdline(_lookup_in, ws, args.quantity, plan) if args.quantity else None
    if plan is None:
        plan = ws.nodes[q].owner if q else (ws.plans(own=True) or [None])[0]
    if plan is None:
        print(f"{args.file}: no plan to draw", file=sys.stderr)
        return EXIT_PLAN
    g = graphviz.subgraph(ws, plan, q)
    from dsl.plugin.figures import MissingPackage
    try:
        text = {"dot": graphviz.to_dot, "mermaid": graphviz.to_mermaid, "svg": graphviz.to_svg}[args.format](ws, g, plan)
    except MissingPackage as e:     # SVG is drawn with matplotlib, an optional package (as for `plan figure`)
        print(f"plan: error[missing-dependency]: {e}\n  hint: --format dot and --format mermaid need no "
              "optional package", file=sys.stderr)
        return EXIT_MISSING
    if args.out:
        _output(Path(args.out), lambda f: f.write_text(text, encoding="utf-8"))
        print(args.out)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_plugins(args) -> int:
    from dsl.plugin.manager import get_plugins

    pl = get_plugins(blocked=_DISABLED)
    for w in pl.warnings:
        print(f"warning: {w}", file=sys.stderr)
    blocks = sorted(pl.blocks.values(), key=lambda s: (s.order, s.name))
    if args.format == "json":
        print(json.dumps({"plugins": pl.names, "blocks": [
            {"name": b.name, "plugin": b.plugin, "doc": b.doc,
             "params": [vars(p) | {"choices": list(p.choices)} for p in b.params],
             "plan_params": [vars(p) | {"choices": list(p.choices)} for p in b.plan_params],
             "provides": list(b.provides), "references": list(b.references)} for b in blocks],
            "tables": [{"name": n, "title": t.title, "plugin": t.plugin, "references": list(t.references),
                        "per_plan": t.per_plan, "default": t.default, "hidden_with": list(t.hidden_with)}
                       for n, t in sorted(pl.tables.items())],
            "figures": [{"name": n, "title": f.title, "plugin": f.plugin, "references": list(f.references)}
                        for n, f in sorted(pl.figures.items())]},
            indent=2, sort_keys=True, default=str))
        return EXIT_OK
    lines = ["plugins: " + ", ".join(pl.names), ""]
    for b in blocks:
        lines.append(f"use {b.name} {{ … }}  — {b.doc}  [plugin {b.plugin}]")
        rows = [("parameter", "unit", "default", "meaning")]
        for where, params in (("", b.params), ("plan.", b.plan_params)):
            for p in params:
                unit = {"choice": "choice", "ref": p.ref_kind or "ref", "bool": "bool", "string": "string",
                        "file": "file"}.get(p.kind) or (
                    ({"string": "list of strings", "ref": f"list of {p.ref_kind or 'ref'}"}.get(
                        p.item, f"list of {p.unit or '1'}")) if p.kind == "list"
                    else p.unit or {"int": "int"}.get(p.kind, "1"))
                default = "required" if p.default is None and not p.optional else (p.default or "optional")
                meaning = p.doc + (f" ({', '.join(p.choices)})" if p.choices else "")
                rows.append((where + p.name, unit, default, meaning))
        w = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            lines.append("    " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r[:3])) + "  " + r[3])
        if b.provides:
            lines.append("    provides: " + ", ".join(b.provides))
        lines.append("")
    for what, specs in (("tables", pl.tables), ("figures", pl.figures)):
        if specs:
            lines.append(f"{what} (shown by " + ("`plan eval` and `plan report`" if what == "tables" else
                                                 "`plan report` and `plan figure`") + "):")
            lines.extend(f"    {n}  — {s.title}  [plugin {s.plugin}]" for n, s in sorted(specs.items()))
            lines.append("")
    lines.append("`plan.NAME` rows are fields of the plan itself, shared by the blocks that read them.")
    print("\n".join(lines).rstrip())
    return EXIT_OK


def console_main() -> None:
    """The ``plan`` program (the console script and ``python -m dsl.cli``): :func:`main`, then a
    fast exit.

    Three things cost a short command about a fifth of its time and buy nothing in a process
    that ends right after it: the cyclic garbage collector running every 700 allocations while
    sympy builds many thousands of small objects that are never freed in cycles; numpy's
    OpenBLAS starting a thread per core on import; and the interpreter's teardown, which frees
    every module and object one by one.  So the collector is off while the modules are
    imported (sympy, the core and the plugins: a fixed set of long-lived objects that
    collections would only scan again and again) and then runs less often, the imported
    objects frozen out of its scans (:func:`_resume_gc`; all generations of what the command
    builds are still collected: memory stays bounded).  The young generation is collected every
    10,000 net allocations and the middle one every 100 of those (Python's default is 10): a
    command of a few dozen young collections then never rescans its whole young heap in the middle
    generation (≈20–35 ms each for the larger case files, freeing nothing measurable — peak memory
    within 2 MiB).  OpenBLAS gets one thread unless the user set
    ``OPENBLAS_NUM_THREADS`` (no matrix here is large enough to gain from more), and once
    ``main`` has returned, the ``atexit`` handlers have run (the parser's cache is written there)
    and stdout/stderr are flushed, the process leaves with ``os._exit`` and ``main``'s exit
    code.  Library callers of :func:`main` (tests, notebooks) keep Python's normal behaviour.
    Measured by benchmarks/bench_speed.py (benchmarks/RESULTS.md).
    """
    import atexit
    import gc
    import os
    global _GC_PAUSED
    gc.set_threshold(10_000, 100, 10)
    gc.disable()
    _GC_PAUSED = True
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        code = main()
    except SystemExit as e:           # argparse's --help / usage errors
        code = e.code
    except KeyboardInterrupt:         # Ctrl-C before main's own handler is in place
        code = 130
    if code is None:
        code = EXIT_OK
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = EXIT_PLAN
    try:
        atexit._run_exitfuncs()
    except Exception:                 # pragma: no cover  (a handler's failure must not hide the answer)
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):   # a closed pipe: nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()

"""The ``plan`` program: :func:`main` (the run's limits, the plugins' commands, the command
line parsed and dispatched, every failure turned into diagnostics and an exit code) and
:func:`console_main` (the console script: the collector paused for the imports, a fast exit).
:class:`CommandContext` is what a plugin's command gets from the CLI."""
from __future__ import annotations

import argparse
import json
import sys

from dsl.engine.executor import ExecutorError, MissingEngine
import dsl.cli.arguments as arguments   # main reads arguments.build_parser (tests/fuzzing.py swaps it)
from dsl.cli.analysis import cmd_solve, cmd_sweep
from dsl.cli.common import (CONFINED, EXIT_MISSING, EXIT_OK, EXIT_PLAN, EXIT_USAGE, CommandLineError,
                            UsageError, cannot_write, disabled, load, select_plans, set_disabled, warn)
from dsl.cli.evaluation import cmd_check, cmd_eval, cmd_explain, cmd_get
from dsl.cli.many import many_files, run_many
from dsl.cli.output import cmd_diff, cmd_figure, cmd_graph, cmd_report, cmd_timeline
from dsl.cli.project import cmd_fmt, cmd_plugins


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
        ev = load(file, strict=strict)
        warn(ev)
        return ev

    def select_plans(self, ev, file: str, names) -> list[str]:
        return select_plans(ev, file, names)

    def cannot_write(self, path, exc: OSError | None = None):
        """The usage error for an output ``path`` that cannot be written (see :func:`cannot_write`)."""
        return cannot_write(path, exc)


def plugin_commands(blocked: tuple[str, ...]) -> dict:
    """The commands of the plugins not ``blocked`` (name -> CommandSpec); the collector resumes
    after this import floor (:func:`_resume_gc`)."""
    from dsl.plugin.manager import get_plugins
    try:
        return get_plugins(blocked=blocked).commands
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
    from dsl.api import disabled_plugins

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--disable-plugin", dest="disable_plugin", action="append", default=[])
    known, _ = pre.parse_known_args(argv)
    set_disabled(disabled_plugins(known.disable_plugin))
    commands = plugin_commands(disabled())
    parser = arguments.build_parser(commands)
    args = parser.parse_args(argv)
    if not args.cmd:
        parser.print_help()
        return EXIT_USAGE
    return execute(args, commands)


def run_one_file(args) -> tuple[int, str, str]:
    """One file of ``plan eval``/``plan check`` over many files (a task of the executor, in
    this process or a worker): :func:`execute` on ``args`` (whose ``file`` is that one file),
    its standard output and error captured — (exit code, stdout, stderr).  It runs in the
    caller's working directory (``args.cwd``, where it exists here), so a relative FILE names
    the same file and prints the same in a worker process."""
    from dsl.api import disabled_plugins
    from dsl.engine.executor import captured
    set_disabled(disabled_plugins(args.disable_plugin))
    args.exec_engine, args.workers, args.scheduler = "serial", 1, None     # the file's own work: here
    try:
        rc, out, err = captured(_in_directory, getattr(args, "cwd", None), execute, args, {})
    finally:
        CONFINED.clear()        # this file's confined errors are in its own exit code
    return rc, out, err


def _in_directory(cwd, fn, *args):
    """``fn(*args)`` with ``cwd`` (if given and present) as the working directory."""
    import os
    if not cwd or not os.path.isdir(cwd) or os.path.realpath(cwd) == os.path.realpath(os.getcwd()):
        return fn(*args)
    before = os.getcwd()
    os.chdir(cwd)
    try:
        return fn(*args)
    finally:
        os.chdir(before)


def cmd_lsp(args) -> int:
    """``plan lsp`` (:func:`dsl.cli.lsp.cmd_lsp`), imported only when it runs: the language
    server's modules (asyncio among them) cost every other command's start-up otherwise."""
    from dsl.cli.lsp import cmd_lsp as serve
    return serve(args)


def execute(args, commands: dict) -> int:
    """Run the parsed command ``args`` (``commands``: the plugins' commands, name ->
    CommandSpec): the run's limits installed, every failure turned into diagnostics on stderr
    and an exit code."""
    from dsl.syntax import limits as L
    from dsl.syntax.diagnostics import PlanError, printable, render

    from dsl.engine import executor as X
    try:
        _apply_limits(args)
        if hasattr(args, "exec_engine"):       # the run's executor (--engine, --workers, --scheduler)
            X.install(X.from_args(args))
        run = {"eval": cmd_eval, "get": cmd_get, "check": cmd_check, "solve": cmd_solve,
                "plugins": cmd_plugins, "figure": cmd_figure, "timeline": cmd_timeline,
                "report": cmd_report, "diff": cmd_diff, "sweep": cmd_sweep, "fmt": cmd_fmt,
                "explain": cmd_explain, "graph": cmd_graph, "lsp": cmd_lsp}.get(args.cmd)
        CONFINED.clear()
        if args.cmd in ("eval", "check") and isinstance(args.file, list):
            files = many_files(args.file)
            if files is None:             # one file: the command as always
                args.file = args.file[0]
            else:
                return run_many(args, files, run_one_file)
        if run is None:
            rc = commands[args.cmd].run(args, CommandContext())
        else:
            rc = run(args)
        if CONFINED:
            n = len(CONFINED)
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
    except ExecutorError as e:
        code = "missing-dependency" if isinstance(e, MissingEngine) else "engine"
        print(printable(f"plan: error[{code}]: {e}") + printable(f"\n  hint: {e.hint}" if e.hint else "", lines=True),
              file=sys.stderr)
        return EXIT_MISSING if isinstance(e, MissingEngine) else EXIT_USAGE
    except UsageError as e:
        print(printable(f"plan: error[{e.code}]: {e}") + printable(f"\n  hint: {e.hint}" if e.hint else "", lines=True),
              file=sys.stderr)     # a path or argument quoted in it may hold anything
        return EXIT_USAGE
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:  # stdout closed (`| head`): stop quietly; confined errors still fail the run
        return EXIT_PLAN if CONFINED else EXIT_OK
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
        X.current().close()
        X.install(None)


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

"""The ``plan`` command line.

Exit codes (every command, one per kind of failure): 0 ok; 1 a problem in the plan or its
files (syntax, names, units, cycles, missing imports, out-of-range values …; with ``--strict``
also a violated requirement such as a missed deadline or a plan that does not fit in memory);
2 a bad command line (an unknown option, a malformed value such as ``--vary`` or ``--query``,
an unknown unit, a name the file does not have, an output that cannot be written); 3 a missing
optional package (matplotlib, scipy, dask).
Diagnostics go to stderr as ``file:line:col: error[code]: summary`` with the quoted line,
a caret and a hint; no traceback reaches the user.

The package, by job: :mod:`~dsl.cli.arguments` (the argparse parser), :mod:`~dsl.cli.program`
(``main``, dispatch, exit codes, ``console_main``), :mod:`~dsl.cli.common` (what every command
shares, and the run's state), and the commands by family: :mod:`~dsl.cli.evaluation` (eval, get,
check, explain), :mod:`~dsl.cli.analysis` (solve, sweep), :mod:`~dsl.cli.output` (report,
figure, timeline, graph, diff) and :mod:`~dsl.cli.project` (fmt, plugins).
"""
from __future__ import annotations

from dsl.cli.arguments import build_parser
from dsl.cli.common import (EXIT_MISSING, EXIT_OK, EXIT_PLAN, EXIT_USAGE, CommandLineError, UsageError,
                            cannot_write, load, select_plans)
from dsl.cli.evaluation import parse_rate, plugin_tables, render_plugin_tables
from dsl.cli.program import CommandContext, console_main, main, plugin_commands

__all__ = ["EXIT_MISSING", "EXIT_OK", "EXIT_PLAN", "EXIT_USAGE", "CommandContext", "CommandLineError",
           "UsageError", "build_parser", "cannot_write", "console_main", "load", "main", "parse_rate",
           "plugin_commands", "plugin_tables", "render_plugin_tables", "select_plans"]

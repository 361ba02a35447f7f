"""The plugin contract: everything a plugin (built-in or third-party) may import.

A plugin is a module (or object) with functions marked ``@hookimpl`` implementing hooks of
:mod:`dsl.plugin.hookspecs`, registered through the ``plan.plugins`` entry-point group.  Import
the names below from ``dsl.plugin``; other modules of ``dsl`` are internal and may change.

* records returned by registration hooks: :class:`Param`, :class:`UseSpec`, :class:`KindSpec`,
  :class:`QuantitySpec`, :class:`SlotSpec`, :class:`Table`, :class:`TableSpec`,
  :class:`FigureSpec`, :class:`CommandSpec`;
* the contexts hooks receive: :class:`PlanContext`, :class:`DeclContext`, :class:`BlockView`,
  :class:`DeclView`, :class:`ComputedView` (see ``docs/plugins.md`` for every method);
* diagnostics: :class:`Diagnostic`, :class:`PlanError` (raise it from a command);
* helpers: :func:`symbol` (the sympy symbol of a node id), :class:`Span`, :func:`display_path`,
  :class:`Timeline`, :func:`no_gc`, units :func:`parse_unit`, :func:`convert`,
  :func:`format_number`, :func:`format_quantity`, :func:`progress` (a progress bar on stderr
  for a long loop, drawn only on a terminal with rich installed); :class:`Executor` (heavy work
  mapped over items on local processes or Dask, results in input order; :class:`ExecutorError`,
  :class:`MissingEngine`, :data:`ENGINES`; :func:`add_engine_arguments` and
  :func:`executor_from_args` for a command's ``--engine``/``--workers``/``--scheduler``;
  :func:`current_executor`, the run's executor, which the CLI installs from those options); sympy builders that skip
  simplification sympy cannot do: :func:`hinge`, :func:`hinge_sum`, :func:`shortfall_sum`,
  :func:`max_of`, :func:`ceiling_of`, and :func:`subs_numbers` (exact substitution);
* standard figure kinds, drawn on the matplotlib axes a :class:`FigureSpec`'s ``draw`` makes:
  :func:`gantt` (a timeline's schedule, one row per lane, bars coloured by kind) and
  :func:`memory_profile` (a pool's live bytes over time, the peak marked); :class:`FigureError`
  when there is nothing to draw;
* files and limits: :func:`read_text` (the one way to read a data file: regular files under the
  project root, size-capped, UTF-8), :func:`open_csv` / :func:`cell_span` / :class:`CsvError`
  (a CSV data file, its errors located at the offending cell), :class:`FileRefused`, :func:`current_limits`,
  :func:`limit_hint`, :class:`LimitError` (see ``docs/security.md``);
* :mod:`dsl.testing`: a fresh plugin manager and evaluation of a snippet with extra plugins.
"""
from __future__ import annotations

from ..engine.nodes import symbol
from ..engine.piecewise import ceiling_of, hinge, hinge_sum, max_of, shortfall_sum, subs_numbers
from ..engine.executor import ENGINES, Executor, ExecutorError, MissingEngine
from ..engine.executor import add_arguments as add_engine_arguments
from ..engine.executor import current as current_executor
from ..engine.executor import from_args as executor_from_args
from ..engine.progress import progress
from ..engine.safeio import FileRefused, read_text
from ..syntax.limits import LimitError
from ..syntax.limits import current as current_limits
from ..syntax.limits import raise_hint as limit_hint
from ..engine.timeline import Timeline, no_gc
from ..engine.units import convert, format_number, format_quantity, parse_unit
from ..syntax.diagnostics import Diagnostic, PlanError, Span, did_you_mean, display_path, install_hint
from .context import BlockView, ComputedView, DeclContext, DeclView, PlanContext
from .csvdata import CsvError, cell_span, open_csv
from .figures import FigureError, gantt, memory_profile
from .hookspecs import hookimpl, hookspec
from .records import (CommandSpec, FigureSpec, KindSpec, Param, QuantitySpec, SlotSpec, Table, TableSpec,
                      UseSpec)

__all__ = ["BlockView", "CommandSpec", "Diagnostic", "FileRefused", "LimitError", "current_limits", "limit_hint",
           "read_text", "PlanError", "DeclContext", "DeclView", "FigureSpec", "KindSpec", "Param",
           "ComputedView", "PlanContext", "QuantitySpec", "SlotSpec", "Span", "Table", "TableSpec", "Timeline", "UseSpec",
           "convert", "did_you_mean", "display_path", "format_number", "install_hint", "format_quantity", "hookimpl", "hookspec", "no_gc",
           "parse_unit", "progress", "symbol", "ceiling_of", "hinge", "hinge_sum", "max_of", "shortfall_sum",
           "subs_numbers", "FigureError", "gantt", "memory_profile", "CsvError", "cell_span", "open_csv",
           "ENGINES", "Executor", "ExecutorError", "MissingEngine", "add_engine_arguments",
           "current_executor", "executor_from_args"]

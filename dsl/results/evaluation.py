"""The immutable result of evaluating a `.plan` file: what the solver, sensitivity, sweeps,
reports, tables, figures, the CLI and the notebook API read.

An :class:`Evaluation` is made once the workspace has resolved, priced and evaluated every
plan; the workspace is then sealed (its nodes, declarations and timelines refuse changes), and
the evaluation exposes only read access: node records, exact and Python values, full
symbolic expressions, requirements, timelines and their schedules, diagnostics.  Values are
memoised on first request (a pure cache: the same id always gives the same value).

Queries made after evaluation (``lookup``, ``resolve``, ``eval_expr``: names and expressions
given on the command line or in ``solve`` statements) build their expressions without
changing any node; their diagnostics are raised as :class:`~dsl.syntax.diagnostics.PlanError`
and leave the evaluation as it was.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any


class Evaluation:
    """Read-only view of an evaluated workspace (see the module docstring).

    :ivar path: the root `.plan` file.
    :ivar nodes: node id -> node record (read-only mapping; records refuse assignment).
    :ivar decls: declaration name -> declaration record (read-only mapping).
    :ivar timelines: ``(plan, timeline)`` -> :class:`~dsl.engine.timeline.Timeline` (sealed).
    :ivar requirements: every requirement, as a tuple.
    :ivar queries: the file's ``solve`` statements.
    :ivar solve_names: name -> query of the root file's named solves (``solve NAME: …``).
    :ivar file_requirements: the root file's file-level ``require`` statements (they may read
        named solves' answers: :func:`dsl.results.solver.file_requirement_results`).
    :ivar memo: a pure cache of derived results (named solves' answers), filled on first use.
    :ivar diagnostics: warnings (and, for a checked-only file, nothing else) as a tuple.
    :ivar plugins: the plugin facade that priced the file (its registries are read-only).
    :ivar structural: inputs plugins read as numbers while building the plan (their value
        shapes the graph: a sweep over one re-evaluates the plan per value).
    """

    __slots__ = ("_ws", "path", "nodes", "decls", "timelines", "requirements", "queries", "diagnostics",
                 "plugins", "param_specs", "bounds", "modules", "structural", "solve_names",
                 "file_requirements", "memo")

    def __init__(self, ws) -> None:
        ws.seal()
        set_ = object.__setattr__
        set_(self, "_ws", ws)
        set_(self, "path", ws.path)
        set_(self, "nodes", MappingProxyType(ws.nodes))
        set_(self, "decls", MappingProxyType(ws.decls))
        set_(self, "timelines", MappingProxyType(ws.timelines))
        set_(self, "requirements", tuple(ws.requirements))
        set_(self, "queries", tuple(ws.queries))
        set_(self, "diagnostics", tuple(ws.rep.items))
        set_(self, "plugins", ws.plugins)
        set_(self, "param_specs", MappingProxyType(ws.param_specs))
        set_(self, "bounds", MappingProxyType(ws.bounds))
        set_(self, "modules", tuple(ws.modules))
        set_(self, "structural", frozenset(ws.structural))
        set_(self, "solve_names", MappingProxyType(dict(ws.solve_names)))
        set_(self, "file_requirements", tuple(ws.file_requirements))
        set_(self, "memo", {})

    @property
    def graph(self):
        """The dependency graph (networkx DiGraph, built on first use)."""
        return self._ws.graph

    def reachable(self, nid: str, up: bool = False) -> set:
        """Descendants of node ``nid`` in :attr:`graph` (with ``up``, its ancestors), ``nid``
        excluded; empty for a node not in the graph."""
        return self._ws.reachable(nid, up)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"an Evaluation is read-only (cannot set '{name}')")

    def __repr__(self) -> str:
        return f"<evaluation of {self.path}: {len(self.plans())} plans>"

    # ------------------------------------------------------------ diagnostics
    @property
    def warnings(self) -> tuple:
        """The warnings found while loading and evaluating (``Diagnostic`` records)."""
        return tuple(d for d in self.diagnostics if d.severity == "warning")

    @property
    def errors(self) -> tuple:
        """Errors: empty, except in ``PlanError.partial`` — the evaluation of a file whose only
        errors are confined to one declaration (a model whose config cannot be read)."""
        return tuple(d for d in self.diagnostics if d.severity == "error")

    # ------------------------------------------------------------ nodes
    def __contains__(self, nid: str) -> bool:
        return nid in self.nodes

    def has(self, nid: str) -> bool:
        """True when node ``nid`` (``plan.quantity``, ``plan.block.param``) exists."""
        return nid in self.nodes

    def uses(self, plan: str) -> MappingProxyType:
        """The ``use`` blocks of ``plan``: block name -> {parameter: assignment} (read-only)."""
        return MappingProxyType(self.decls[plan].uses)

    def kind(self, name: str) -> str | None:
        """The kind of declaration ``name`` (``plan``, ``model`` …), or None."""
        d = self.decls.get(name)
        return d.kind if d else None

    def plans(self, own: bool = False) -> list[str]:
        """Plan names in declaration order; with ``own``, only those of the root file."""
        return self._ws.plans(own)

    def headline(self, plan: str) -> list:
        """The plan's headline nodes in display order."""
        return self._ws.headline(plan)

    # ------------------------------------------------------------ values
    def value(self, name: str, unit: str | None = None, exact: bool = False):
        """The nominal value of dotted ``name`` (``gpus48.finish_time``) in ``unit`` (default:
        the unit ``plan eval`` shows): a float, or with ``exact`` the exact sympy number in that
        unit — what :meth:`dsl.api.Plan.value` gives for a plan-relative name.

        :raises PlanError: an unknown name (naming the nearest), a value that is not a number.
        :raises UnitError: a unit of another dimension (naming the dimension).
        """
        from dsl.engine.units import check_unit_for, convert, parse_unit
        from dsl.syntax.diagnostics import Diagnostic, PlanError
        nid = name if name in self.nodes else self.lookup(name)
        n = self.nodes[nid]
        v = self._ws.value(nid) if n.numeric else None
        if v is None:
            raise PlanError([Diagnostic("error", "type", f"'{nid}' has no numeric value", None,
                                        "read strings, booleans, lists and declarations with python_value()")])
        u = n.unit if unit is None else unit
        check_unit_for(n.dim, u)
        if exact:
            import sympy as sp
            scale = parse_unit(u).scale if u and u != "1" else 1
            return v / sp.Rational(scale.numerator, scale.denominator) if scale != 1 else v
        return float(convert(float(v), u))

    def base_value(self, nid: str):
        """The engine's accessor: the exact nominal value (sympy number, in base units: s, B,
        FLOP …) of numeric node ``nid``, or None (also on the workspace plugins see while a
        plan is priced).  People read :meth:`value`."""
        return self._ws.value(nid)

    def python_value(self, nid: str):
        """Nominal value as Python: float (base units) for numbers, else str/bool/declaration."""
        return self._ws.python_value(nid)

    def list_value(self, nid: str) -> tuple:
        """Nominal items of a list field: floats (base units) for numbers, else as written."""
        return self._ws.list_value(nid)

    def file_param(self, nid: str):
        """Path named by string field ``nid``, relative to the file the assignment is in."""
        return self._ws.file_param(nid)

    def computed_detail(self, nid: str):
        """What the procedure of computed quantity ``nid`` kept for its plugin's tables
        (:meth:`dsl.plugin.PlanContext.define_computed`), or None."""
        return self._ws.computed_details.get(nid)

    def full_expr(self, nid: str, free: frozenset = frozenset(), keep: frozenset | None = None):
        """Expression of ``nid`` in terms of the declared inputs (see the workspace)."""
        return self._ws.full_expr(nid, free, keep)

    def nominal_map(self, exclude=()) -> dict:
        """{input symbol: nominal value} of every input (base units)."""
        return self._ws.nominal_map(exclude)

    def subs_value(self, expr):
        """``expr`` (over node symbols) at the nominal point, or None when a value is missing."""
        return self._ws.subs_value(expr)

    # ------------------------------------------------------------ requirements and timelines
    def requirement_results(self, plan: str) -> list[dict]:
        """Each requirement of ``plan`` at the nominal point (name, ok, lhs/rhs in base units …)."""
        return self._ws.requirement_results(plan)

    def requirement(self, plan: str, name: str) -> dict | None:
        """One requirement's result, or None."""
        return self._ws.requirement(plan, name)

    def timeline(self, plan: str, name: str):
        """The (sealed) timeline ``name`` of ``plan``, or None."""
        return self.timelines.get((plan, name))

    def critical_path(self, plan: str, timeline: str) -> dict | None:
        """Critical path of a timeline at nominal values (activities with start, finish, slack)."""
        return self._ws.critical_path(plan, timeline)

    def memory_profile(self, plan: str, timeline: str, pool: str):
        """:class:`~dsl.engine.timeline.Profile` of memory ``pool`` on a timeline, or None."""
        return self._ws.memory_profile(plan, timeline, pool)

    # ------------------------------------------------------------ queries (names and expressions)
    def lookup(self, dotted: str) -> str:
        """Node id for a dotted name given on the command line (``plan.quantity``)."""
        return self._ws.lookup(dotted)

    def resolve(self, parts: tuple, span):
        """Resolve dotted ``parts``: a node id, a declaration or a block (raises PlanError)."""
        return self._ws.resolve(parts, span)

    def eval_expr(self, e, scope=None):
        """Build an expression AST in global scope (queries); raises PlanError."""
        return self._ws.eval_expr(e, scope)


def evaluate_file(path, text: str | None = None, plugins=None, evaluate: bool = True,
                  overrides: dict | None = None) -> Evaluation:
    """Load, resolve, price and evaluate the `.plan` file at ``path`` (its text may be given).

    :param plugins: a plugin facade (default: every installed plugin not disabled).
    :param evaluate: False checks names, units, cycles and the plugins' graph without
        computing values (``plan check``).
    :param overrides: ``{input node id: exact value in base units}`` (structural sweeps).
    :raises PlanError: with every diagnostic when the file has errors.
    """
    from dsl.evaluate.workspace import Workspace
    return Evaluation(Workspace(path, text=text, plugins=plugins, evaluate=evaluate, overrides=overrides))

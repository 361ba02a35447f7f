"""The workspace: a loaded `.plan` file with its imports, resolved, priced and evaluated.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


from ..syntax import ast as A
from ..syntax.diagnostics import PlanError, Reporter
from ..plugin.records import Param
from ..engine.timeline import Timeline
from ..engine.nodes import DeclInfo, Node, Requirement
from ..plugin.manager import Plugins, get_plugins
from ..resolve.loader import LoaderMixin
from ..resolve.declarations import DeclarationsMixin
from ..resolve.names import NamesMixin
from ..resolve.expr import ExprMixin
from ..resolve.shapes import ShapesMixin
from .graph import GraphMixin
from .validate import ValidateMixin
from .values import ValuesMixin


class Workspace(LoaderMixin, DeclarationsMixin, NamesMixin, ExprMixin, ShapesMixin, GraphMixin, ValidateMixin, ValuesMixin):
    """A loaded `.plan` file with its imports: resolved, priced by the plugins and evaluated.

    :param path: the root `.plan` file.
    :param text: its text (optional; read from ``path`` otherwise).
    :param plugins: a :class:`~dsl.plugin.manager.Plugins` facade (default: all installed).
    :param evaluate: False builds and checks everything (names, units, cycles, plugins'
        graph) without evaluating the nodes numerically (``plan check``).
    :param overrides: ``{input node id: exact value in base units}`` replacing the nominal
        value of inputs (a sweep re-evaluating a structural parameter per value).
    :param only: plan names: price only these and the plans they depend on (see
        :meth:`_keep_plans`); an unknown name keeps every plan (the caller reports it).
    :raises PlanError: when any error was found; ``diagnostics`` lists all of them.

    ``structural`` collects the inputs plugins read as numbers while building (a ZeRO stage, a
    TP degree, a GPU count that decides a layout): their value shapes the graph, so a sweep over
    one re-evaluates the plan per value instead of substituting into fixed expressions.
    """

    def __init__(self, path: str | Path, text: str | None = None, plugins: Plugins | None = None,
                 evaluate: bool = True, overrides: dict | None = None, only=None):
        self.path = str(path)
        self.overrides = dict(overrides or {})   # input node id -> exact nominal (base units)
        self.structural: set[str] = set()         # inputs plugins read as numbers while building
        self.sealed = False
        self.plugins = plugins or get_plugins()
        from ..engine.units import activate
        activate(self.plugins.units)      # this evaluation's unit table (core + its plugins' units)
        self.rep = Reporter()
        for w in self.plugins.warnings:
            self.rep.warning("plugin", w)
        for c in self.plugins.conflicts:
            self.rep.error("plugin", c)
        self.modules: list[A.Module] = []
        self.decls: dict[str, DeclInfo] = {}
        self.nodes: dict[str, Node] = {}
        self.requirements: list[Requirement] = []
        self.file_requirements: list[Requirement] = []   # file-level `require` (may read solve answers)
        self.solve_names: dict = {}                      # name -> the root file's `solve NAME: …`
        self.timelines: dict[tuple, Timeline] = {}
        self.expectations: list[tuple] = []
        self._activity_edges: list[tuple[str, str]] = []
        self._activity_resource: dict[str, str | None] = {}
        self._validated: set[str] = set()
        self.param_specs: dict[str, Param] = {}   # node id -> the spec it must satisfy
        self.bounds: dict[str, tuple[str, str]] = {}
        self._spec_reported: set[str] = set()
        self.wanted: dict[str, str] = {}
        self.used: set[str] = set()
        self._values: dict[str, Any] = {}
        self.timelines_done: set = set()            # timelines scheduled (their makespans final)
        self.computed_early = False                 # a computed quantity was asked for too early
        self.computed_details: dict[str, Any] = {}   # node id -> what a computed quantity's procedure kept
        self._full: dict[tuple, Any] = {}
        self._stack: list[str] = []
        from ..syntax import limits as L
        self._chain_limit = L.current().chain
        L.ensure_recursion(self._chain_limit)
        self._graph = self._graph_ops = self._adjacency = None
        self.contained: list = []     # errors confined to one declaration (a bad config)
        self.broken: set[str] = set()  # the declarations they are about
        self._load(Path(path), text)
        self.queries = self.modules[0].queries if self.modules else ()
        self.solve_name_set = frozenset(q.name for q in self.queries if q.name)
        self.skipped_plans: frozenset = frozenset()
        if only:
            self._keep_plans(set(only))
        self._raise_if_errors()
        self._declarations()
        self._raise_if_errors()
        self._plans()
        self._named_solves()
        if not self.rep.errors:
            self._finalize(numeric=evaluate)
        self._raise_if_errors()
        if self.contained:
            # the rest of the file evaluated: the error is raised with this evaluation attached
            # (``PlanError.workspace``), so a caller can still show the plans it did not affect
            self.rep.extend(self.contained)
            self.contained = []
            try:
                self.rep.raise_if_errors()
            except PlanError as e:
                e.workspace = self
                raise

    def _raise_if_errors(self) -> None:
        """Raise every error found so far, the confined ones (a bad config) included."""
        if self.rep.errors and self.contained:
            self.rep.extend(self.contained)
            self.contained = []
        self.rep.raise_if_errors()


    def _keep_plans(self, only: set) -> None:
        """Drop the plans that ``only`` neither names nor depends on — through ``extends`` or a
        name its fields, blocks and requirements read (``a.finish_time``, ``plans = [a, b]``),
        transitively — so that they are not priced."""
        plans = {n for n, d in self.decls.items() if d.kind == "plan"}
        if not only <= plans:
            return

        def refs_of(name):
            d = self.decls[name].ast
            refs = set(A.ref_heads(d))
            if d.extends:
                refs.add(d.extends)
            return {r for r in refs if r in self.decls}

        # through every declaration a kept plan reads (a device whose field reads a calibrating
        # plan keeps that plan)
        keep, todo = set(), list(only)
        while todo:
            p = todo.pop()
            if p in keep:
                continue
            keep.add(p)
            todo.extend(r for r in refs_of(p) if r not in keep)
        self.skipped_plans = frozenset(plans - keep)
        # a declaration no kept plan reads that reads a skipped plan goes too (it cannot be built)
        dropped, changed = set(self.skipped_plans), True
        while changed:
            changed = False
            for n in list(self.decls):
                if n not in keep and n not in dropped and refs_of(n) & dropped:
                    dropped.add(n)
                    changed = True
        for p in dropped:
            del self.decls[p]

    def seal(self) -> None:
        """Make the evaluated nodes, declarations and timelines read-only (an
        :class:`~dsl.results.evaluation.Evaluation` reads them; nothing may change them)."""
        for n in self.nodes.values():
            n.seal()
        for d in self.decls.values():
            d.__dict__["_sealed"] = True
        for tl in self.timelines.values():
            tl.sealed = True
        self.sealed = True

    # ------------------------------------------------------------ queries on results
    def plans(self, own: bool = False) -> list[str]:
        """Plan names in declaration order; with ``own``, only those of the root file (all
        plans when the root file declares none)."""
        every = [n for n, d in self.decls.items() if d.kind == "plan"]
        if not own or not self.modules:
            return every
        root = self.modules[0].file
        mine = [n for n in every if self.decls[n].ast.span.file == root]
        return mine or every

    def _owned(self, plan: str):
        """The nodes ``plan`` owns, in definition order: from an index built once when the
        workspace is sealed (a report over 8,000 plans asks for each plan's; a scan of every node
        per plan made it quadratic), by a scan while it is still being built."""
        if not self.sealed:
            return [n for n in self.nodes.values() if n.owner == plan]
        index = self.__dict__.get("_by_owner")
        if index is None:
            index = {}
            for n in self.nodes.values():
                index.setdefault(n.owner, []).append(n)
            self._by_owner = index
        return index.get(plan, ())

    def headline(self, plan: str) -> list[Node]:
        """The plan's headline quantities in the plugins' order, then its derived fields (see
        :meth:`derived_fields`) in the order they are written."""
        qs = sorted((n for n in self._owned(plan) if n.headline), key=lambda n: n.order)
        names = {n.name for n in qs}
        return qs + [n for n in self.derived_fields(plan) if n.name not in names]

    def derived_fields(self, plan: str) -> list[Node]:
        """Numeric fields of ``plan`` itself computed from other values (``gap = gpus32.finish_time
        - gpus48.finish_time``): results the user defined, shown like the plugins' quantities and
        never warned unused; not the plan parameters blocks read (``mfu``, ``gpus``)."""
        out = []
        for n in self._owned(plan):
            if n.kind != "field" or n.assign is None or n.input or n.scope is None:
                continue
            if n.scope[1] is not None or n.id in self.param_specs or n.id != f"{plan}.{n.name}":
                continue
            if n.state == 2 and n.numeric:
                out.append(n)
        return sorted(out, key=lambda n: (n.span.file, n.span.line, n.span.column) if n.span else ("", 0, 0))


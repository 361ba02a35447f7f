"""Resolution and evaluation: AST modules -> a priced networkx graph of quantities.

Data flow (see ``docs/architecture.md``)::

    files --parse--> Modules --resolve--> declarations (imports, `extends`, `from` configs)
          --fields--> nodes with local sympy expressions over placeholder Symbols
          --plugins--> quantity nodes, requirements, timelines (activities)
          --finalize--> dependency DiGraph, dimension checks, nominal values

Every node has a *local* expression whose free symbols are the ids of the nodes it depends
on.  A field whose value contains no reference is an **input**: its full expression is its
own Symbol, with the literal as nominal value.  ``full_expr(id)`` substitutes recursively,
so every result is a sympy expression of the inputs; ``value(id)`` evaluates exactly
(rationals) through the local expressions.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import sympy as sp

from . import ast as A
from .diagnostics import Diagnostic, PlanError, Reporter, Span, did_you_mean, remember_source
from .parser import parse, parse_expression
from .piecewise import subs_numbers
from .plugins import Param, Plugins, UseSpec, get_plugins
from .timeline import FORM_LIMIT, FULL_LIMIT, MIRROR_LIMIT, Activity, Timeline  # noqa: F401  (re-exported)
from .units import DIMENSIONLESS, Dim, UnitError, default_unit_for, describe_dim, format_dim, parse_unit

CORE_KINDS = {
    "model": "a neural network architecture (fields such as layers, hidden, heads)",
    "device": "an accelerator (peak_flops, memory, mem_bw …)",
    "link": "an interconnect (bandwidth per direction)",
    "storage": "a storage tier (bandwidth)",
    "workload": "the work to do (tokens, seq_len, global_batch, deadline …)",
    "plan": "a design: a model, workload and hardware priced by `use` blocks",
}
CATALOG_PREFIX = "@catalog/"


def catalog_dir() -> Path:
    """The packaged catalog (``dsl/catalog`` in a wheel) or ``specs/catalog`` in a checkout."""
    here = Path(__file__).resolve().parent
    packaged = here / "catalog"
    return packaged if packaged.is_dir() else here.parent / "specs" / "catalog"


# ---------------------------------------------------------------- values
@dataclass(frozen=True)
class DeclRef:
    """A reference to a declaration used as a value (``device = rtx4090``)."""

    name: str
    kind: str


@dataclass(frozen=True)
class BlockRef:
    plan: str
    block: str


@dataclass(frozen=True)
class Val:
    """A numeric value under construction: sympy expression (base units) and dimension."""

    expr: Any
    dim: Dim


@dataclass
class Node:
    id: str
    kind: str                    # field | quantity | activity
    owner: str                   # declaration name
    name: str
    assign: A.Assign | None = None
    scope: tuple | None = None   # (decl, block|None) for fields
    expr: Any = None             # local sympy expression
    dim: Dim | None = None
    value: Any = None            # non-numeric value: str | bool | DeclRef
    unit: str = ""
    plugin: str | None = None
    doc: str = ""
    span: Span | None = None
    input: bool = False
    nominal: Any = None
    headline: bool = False
    order: tuple = ()
    fallback: bool = False
    state: int = 0               # 0 unbuilt, 1 building, 2 built, 3 failed
    default: str | None = None   # the plugin's default text when the user gave no value
    div_checks: list = field(default_factory=list)
    range: tuple | None = None   # declared `in [lo, hi]` of an input: exact sympy numbers, base units
    source: str | None = None    # declared `source "…"`
    references: tuple = ()       # where a plugin's formula comes from (papers, books); shown on request

    @property
    def numeric(self) -> bool:
        return self.value is None and self.expr is not None


@dataclass(frozen=True)
class ListVal:
    """Value of a list literal: items are :class:`Val` (numbers), str, bool or DeclRef."""

    items: tuple
    spans: tuple = ()

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class Requirement:
    plan: str
    name: str
    lhs: Any
    op: str
    rhs: Any
    unit: str
    doc: str
    plugin: str
    span: Span | None = None     # a `require` written in the plan
    text: str = ""               # its text as written (canonical form)


class Abort(Exception):
    """Raised inside a plugin context to stop pricing one plugin after an error."""


def _S(node_id: str) -> sp.Symbol:
    return _symbol(node_id)


_SYMS: dict[str, sp.Symbol] = {}


def _symbol(node_id: str) -> sp.Symbol:
    s = _SYMS.get(node_id)
    if s is None:
        s = _SYMS[node_id] = sp.Symbol(node_id, real=True)
    return s


def _as_expr(x):
    """A sympy expression from a plugin's value: sympy objects pass, Python numbers become
    exact numbers; anything else (a string in particular) is refused — user text never
    reaches sympy's parser."""
    if isinstance(x, sp.Basic):
        return x
    if isinstance(x, bool) or not isinstance(x, (int, float, Fraction)):
        raise TypeError(f"expected a sympy expression or a number, got {type(x).__name__}")
    return sp.Float(x) if isinstance(x, float) else sp.Rational(x.numerator, x.denominator)


def _rat(fr: Fraction) -> sp.Rational:
    return sp.Rational(fr.numerator, fr.denominator)


# ---------------------------------------------------------------- contexts for plugins
class _ContextBase:
    Abort = Abort

    def __init__(self, ws: "Workspace", owner: str):
        self.ws = ws
        self.name = owner
        self._current_plugin: str | None = None

    def plugin_failed(self, plugin: str, exc: Exception) -> None:
        span = self.ws.decls[self.name].ast.name_span
        self.ws.rep.error("plugin", f"plugin '{plugin}' failed while pricing '{self.name}': "
                          f"{type(exc).__name__}: {exc}", span,
                          f"this is a bug in plugin '{plugin}' or an input it does not handle")

    def error(self, summary: str, hint: str = "", span: Span | None = None, code: str = "plugin") -> None:
        """Report an error found by the current plugin and stop it (raises :class:`Abort`)."""
        self.ws.rep.error(code, summary, span or self.ws.decls[self.name].ast.name_span, hint)
        raise Abort()

    def _define(self, node_id: str, name: str, expr, unit: str, doc: str, headline: bool,
                fallback: bool, order: tuple, references: tuple = ()) -> sp.Symbol:
        ws = self.ws
        dim = parse_unit(unit).dim if unit else DIMENSIONLESS
        existing = ws.nodes.get(node_id)
        plugin = self._current_plugin
        if existing is not None:
            if existing.kind == "field":
                # a user's field overrides the plugin's quantity (dimension checked later)
                ws.expect(node_id, dim, f"plugin '{plugin}' (quantity '{name}')", existing.span)
                existing.doc = existing.doc or doc
                existing.headline = existing.headline or headline
                existing.order = existing.order or order
                existing.references = existing.references or tuple(references)
                if existing.unit == "" or existing.unit == default_unit_for(existing.dim or DIMENSIONLESS):
                    existing.unit = unit
                if _as_expr(expr) != _S(node_id):
                    existing.plugin = existing.plugin or f"{plugin} (overridden by the plan)"
                return _S(node_id)
            if fallback:
                return _S(node_id)
            if not existing.fallback:
                ws.rep.error("duplicate", f"quantity '{node_id}' is defined by plugins '{existing.plugin}' "
                             f"and '{plugin}'", ws.decls[self.name].ast.name_span,
                             "remove one of the two `use` blocks or block one plugin")
                return _S(node_id)
        ws.nodes[node_id] = Node(node_id, "quantity", self.name, name, expr=_as_expr(expr), dim=dim,
                                 unit=unit, plugin=plugin, doc=doc, headline=headline, order=order,
                                 fallback=fallback, state=2, references=tuple(references))
        return _S(node_id)


class DeclView:
    """Read access to a declaration's fields from a plugin, with unit expectations."""

    def __init__(self, ctx: _ContextBase, name: str, span: Span | None):
        self._ctx, self.name, self._span = ctx, name, span
        self.kind = ctx.ws.decls[name].kind

    def has(self, field_name: str) -> bool:
        return f"{self.name}.{field_name}" in self._ctx.ws.nodes

    def q(self, field_name: str, unit: str = "", positive: bool = False, nonnegative: bool = False) -> sp.Symbol:
        """Placeholder for numeric field ``field_name``; its dimension must match ``unit``.

        ``positive``/``nonnegative`` add a sign check of the field's nominal value, reported
        at the field (``out-of-range``) when violated.
        """
        nid = f"{self.name}.{field_name}"
        ws = self._ctx.ws
        if nid not in ws.nodes:
            cands = [n.split(".", 1)[1] for n in ws.nodes if n.startswith(self.name + ".") and n.count(".") == 1]
            guess = did_you_mean(field_name, cands)
            self._ctx.error(f"{self.kind} '{self.name}' has no field '{field_name}', which plugin "
                            f"'{self._ctx._current_plugin}' needs for '{self._ctx.name}'",
                            (f"did you mean '{guess}'? " if guess else "") +
                            f"add `{field_name} = …` to {self.kind} {self.name}",
                            self._span or ws.decls[self.name].ast.name_span, code="missing-field")
        ws.expect(nid, parse_unit(unit).dim if unit else DIMENSIONLESS,
                  f"plugin '{self._ctx._current_plugin}'", self._span)
        if positive or nonnegative:
            prev = ws.bounds.get(nid)
            if prev is None or (positive and prev[0] != "positive"):
                ws.bounds[nid] = ("positive" if positive else "nonnegative", f"plugin '{self._ctx._current_plugin}'")
        ws.used.add(nid)
        return _S(nid)

    def value(self, field_name: str, default=None):
        """Nominal Python value of a field (str, bool, DeclRef, or float for numbers)."""
        nid = f"{self.name}.{field_name}"
        if nid not in self._ctx.ws.nodes:
            return default
        self._ctx.ws.used.add(nid)
        return self._ctx.ws.python_value(nid)


class DeclContext(_ContextBase):
    """Context of ``plan_declaration_derive`` for one non-plan declaration."""

    def __init__(self, ws: "Workspace", name: str):
        super().__init__(ws, name)
        self.kind = ws.decls[name].kind
        self.view = DeclView(self, name, None)

    def has(self, f: str) -> bool:
        return self.view.has(f)

    def field(self, f: str, unit: str = "") -> sp.Symbol:
        return self.view.q(f, unit)

    def value(self, f: str, default=None):
        return self.view.value(f, default)

    def define(self, name: str, expr, unit: str = "", doc: str = "", references: tuple = ()) -> sp.Symbol:
        """Add derived field ``name`` (a user's explicit field of that name wins); ``references``
        cite the formula's sources (shown by ``plan explain``, not by default output)."""
        return self._define(f"{self.name}.{name}", name, expr, unit, doc, False, False, (0,), references)


class BlockView:
    """A plan's ``use`` block as seen by its plugin."""

    def __init__(self, ctx: "PlanContext", spec: UseSpec):
        self._ctx, self.spec = ctx, spec
        self.name = spec.name
        self.span = ctx.ws.decls[ctx.name].use_spans[spec.name]

    def q(self, param: str) -> sp.Symbol:
        """Placeholder Symbol of numeric parameter ``param`` (dimension checked against its spec)."""
        nid = f"{self._ctx.name}.{self.name}.{param}"
        self._ctx.ws.used.add(nid)
        return _S(nid)

    def value(self, param: str):
        """Nominal Python value of ``param`` (int/choice/bool/ref params, or float); None
        for an optional parameter that was not given."""
        nid = f"{self._ctx.name}.{self.name}.{param}"
        if nid not in self._ctx.ws.nodes:
            return None
        self._ctx.ws.used.add(nid)
        return self._ctx.ws.python_value(nid)

    def ref(self, param: str) -> DeclView | None:
        v = self.value(param)
        if v is None:
            return None
        return DeclView(self._ctx, v.name, self._ctx.ws.nodes[f"{self._ctx.name}.{self.name}.{param}"].span)

    def path(self, param: str):
        """:class:`pathlib.Path` of a ``kind="file"`` parameter (checked to exist), or None."""
        nid = f"{self._ctx.name}.{self.name}.{param}"
        if nid not in self._ctx.ws.nodes:
            return None
        self._ctx.ws.python_value(nid)
        return self._ctx.ws.file_param(nid)

    def q_list(self, param: str) -> list:
        """Items of a numeric list parameter as sympy expressions (base units); the items may
        refer to other quantities, which stay symbolic."""
        nid = f"{self._ctx.name}.{self.name}.{param}"
        if nid not in self._ctx.ws.nodes:
            return []
        self._ctx.ws.python_value(nid)   # validates items against the spec
        return [it.expr for it in self._ctx.ws.nodes[nid].value.items]

    def error_at(self, param: str, summary: str, hint: str = "", code: str = "out-of-range") -> None:
        """Report an error at the text of ``param`` (or at the block when it was defaulted)
        and stop this plugin."""
        nid = f"{self._ctx.name}.{self.name}.{param}"
        n = self._ctx.ws.nodes.get(nid)
        span = n.assign.value.span if n is not None and n.assign and n.default is None else self.span
        self._ctx.error(summary, hint, span=span, code=code)

    def given(self, param: str) -> bool:
        """True when the user wrote ``param`` (not a default)."""
        a = self._ctx.ws.decls[self._ctx.name].uses.get(self.name, {})
        return param in a


class PlanContext(_ContextBase):
    """Context of ``plan_quantities_price`` / ``plan_activities_schedule`` for one plan."""

    def __init__(self, ws: "Workspace", name: str):
        super().__init__(ws, name)
        self.info = ws.decls[name]

    def block(self, name: str) -> BlockView | None:
        spec = self.ws.plugins.blocks.get(name)
        if spec is None or name not in self.info.uses:
            return None
        return BlockView(self, spec)

    def param(self, name: str) -> sp.Symbol:
        """Placeholder of plan-level numeric parameter ``name``."""
        nid = f"{self.name}.{name}"
        self.ws.used.add(nid)
        return _S(nid)

    def value(self, name: str, default=None):
        nid = f"{self.name}.{name}"
        if nid not in self.ws.nodes:
            return default
        self.ws.used.add(nid)
        return self.ws.python_value(nid)

    def ref(self, name: str) -> DeclView:
        """The declaration a plan-level parameter refers to (``model``, ``device`` …)."""
        nid = f"{self.name}.{name}"
        v = self.value(name)
        if not isinstance(v, DeclRef):
            self.error(f"plan '{self.name}' needs `{name} = <declaration>` for plugin '{self._current_plugin}'",
                       f"add `{name} = …` naming a declaration", code="missing-parameter")
        return DeclView(self, v.name, self.ws.nodes[nid].span)

    def q(self, name: str, unit: str | None = None) -> sp.Symbol:
        """Placeholder of plan quantity ``name`` (defined by any plugin, resolved later)."""
        nid = f"{self.name}.{name}"
        if unit is not None:
            self.ws.expect(nid, parse_unit(unit).dim if unit else DIMENSIONLESS,
                           f"plugin '{self._current_plugin}'", None)
        self.ws.wanted.setdefault(nid, self._current_plugin)
        return _S(nid)

    def define(self, name: str, expr, unit: str = "", doc: str = "", headline: bool = False,
               fallback: bool = False, rank: float | None = None, references: tuple = ()) -> sp.Symbol:
        """Add quantity ``name`` = ``expr`` (sympy, base units) displayed in ``unit``.

        ``fallback=True`` defines it only if no other plugin does (e.g. ``overhead = 0``
        without a checkpoint model).  A user's plan field of the same name overrides it (and
        defining a quantity under the name of a plan field marks that field for reports).
        ``headline`` quantities appear in ``plan eval``, sorted by ``rank`` (then by the
        block's order and definition order).  ``references`` are the sources of the formula
        (papers, books, measurements) as short citations; ``plan explain``, ``plan report``
        and ``plan eval --sources`` show them, default output does not.
        """
        spec = self.ws.plugins.block_of(self._current_plugin)
        order = (rank if rank is not None else 1000 + (spec.order if spec else 100), len(self.ws.nodes))
        return self._define(f"{self.name}.{name}", name, expr, unit, doc, headline, fallback, order,
                            references)

    def require(self, name: str, lhs, op: str, rhs, unit: str = "", doc: str = "") -> None:
        """Declare requirement ``lhs op rhs`` (op in ``<=``, ``>=``, ``<``, ``>``, ``==``)."""
        self.ws.requirements.append(Requirement(self.name, name, _as_expr(lhs), op, _as_expr(rhs),
                                                unit, doc, self._current_plugin or ""))

    def provided(self, quantity: str) -> bool:
        """True when a block this plan uses declares that it prices ``quantity``."""
        return any(quantity in self.ws.plugins.blocks[b].provides
                   for b in self.info.uses if b in self.ws.plugins.blocks)

    def warn(self, summary: str, hint: str = "", code: str = "incomplete") -> None:
        """Report a warning about this plan (at its name)."""
        self.ws.rep.warning(code, summary, self.info.ast.name_span, hint)

    def timeline(self, name: str) -> Timeline:
        key = (self.name, name)
        tl = self.ws.timelines.get(key)
        if tl is None:
            tl = self.ws.timelines[key] = Timeline(self.name, name)
        tl._plugin = self._current_plugin or ""
        return tl


# ---------------------------------------------------------------- declarations
@dataclass
class DeclInfo:
    name: str
    kind: str
    ast: A.Decl
    fields: dict[str, A.Assign] = field(default_factory=dict)
    uses: dict[str, dict[str, A.Assign]] = field(default_factory=dict)
    use_spans: dict[str, Span] = field(default_factory=dict)
    parents: tuple[str, ...] = ()
    requires: dict[str, A.Require] = field(default_factory=dict)



def _lex_topo(nodes, succ) -> list | None:
    """Topological order of the dependency graph, smallest id first among the ready ones
    (networkx's ``lexicographical_topological_sort``), or None on a cycle."""
    import heapq

    indeg = dict.fromkeys(nodes, 0)
    for u, vs in succ.items():
        indeg.setdefault(u, 0)
        for v in vs:
            indeg[v] = indeg.get(v, 0) + 1
    ready = [u for u, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        u = heapq.heappop(ready)
        out.append(u)
        for v in succ.get(u, ()):
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, v)
    return out if len(out) == len(indeg) else None


def _replay_graph(ops, order_edges):
    """The networkx DiGraph of the dependency graph, built by the same calls in the same order
    as the adjacency of ``_finalize`` (so node and edge order match)."""
    import networkx as nx

    g = nx.DiGraph()
    for nid, attrs, srcs in ops:
        g.add_node(nid, **attrs)
        for x in srcs:
            g.add_edge(x, nid)
    for u, v in order_edges:
        g.add_edge(u, v, kind="order")
    return g

class Workspace:
    """A loaded `.plan` file with its imports: resolved, priced by the plugins and evaluated.

    :param path: the root `.plan` file.
    :param text: its text (optional; read from ``path`` otherwise).
    :param plugins: a :class:`~dsl.plugins.Plugins` facade (default: all installed).
    :param evaluate: False builds and checks everything (names, units, cycles, plugins'
        graph) without evaluating the nodes numerically (``plan check``).
    :raises PlanError: when any error was found; ``diagnostics`` lists all of them.
    """

    def __init__(self, path: str | Path, text: str | None = None, plugins: Plugins | None = None,
                 evaluate: bool = True):
        self.path = str(path)
        self.plugins = plugins or get_plugins()
        self.rep = Reporter()
        for w in self.plugins.warnings:
            self.rep.warning("plugin", w)
        for c in self.plugins.conflicts:
            self.rep.error("plugin", c)
        self.modules: list[A.Module] = []
        self.decls: dict[str, DeclInfo] = {}
        self.nodes: dict[str, Node] = {}
        self.requirements: list[Requirement] = []
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
        self._full: dict[tuple, Any] = {}
        self._stack: list[str] = []
        self._graph = self._graph_ops = None
        self._load(Path(path), text)
        self.queries = self.modules[0].queries if self.modules else ()
        self.rep.raise_if_errors()
        self._declarations()
        self.rep.raise_if_errors()
        self._plans()
        if not self.rep.errors:
            self._finalize(numeric=evaluate)
        self.rep.raise_if_errors()

    # ------------------------------------------------------------ loading
    def _load(self, root: Path, text: str | None) -> None:
        seen: dict[Path, A.Module] = {}

        def load(p: Path, src: str | None, from_span: Span | None):
            rp = p.resolve()
            if rp in seen:
                return
            if src is None:
                try:
                    src = rp.read_text(encoding="utf-8")
                except OSError as e:
                    if from_span is None:
                        self.rep.error("missing-file", f"cannot read '{p}': {e.strerror}", None,
                                       "check the path")
                    else:
                        self.rep.error("missing-import", f"imported file '{p}' does not exist", from_span,
                                       "import paths are relative to the importing file; "
                                       f"the catalog is imported as \"{CATALOG_PREFIX}hardware.plan\"")
                    return
                except UnicodeDecodeError as e:
                    raw, file = e.object[: e.start], str(p) if from_span is None else _display_path(rp)
                    line, col = raw.count(b"\n") + 1, len(raw) - (raw.rfind(b"\n") + 1) + 1
                    remember_source(file, e.object.decode("utf-8", "replace"))
                    self.rep.error("encoding", f"'{p}' is not UTF-8 text (byte 0x{e.object[e.start]:02x})",
                                   Span(file, line, col, line, col + 1), "save the file as UTF-8")
                    return
            try:
                mod = parse(src, str(p) if from_span is None else _display_path(rp))
            except PlanError as e:
                self.rep.items.extend(e.diagnostics)
                return
            seen[rp] = mod
            self.modules.append(mod)
            for imp in mod.imports:
                load(self._import_path(rp.parent, imp.path), None, imp.span)

        load(root, text, None)
        self._files = {m.file: Path(m.file) for m in self.modules}
        for mod in self.modules:
            for d in mod.decls:
                if d.name in self.decls:
                    first = self.decls[d.name].ast
                    self.rep.error("duplicate", f"'{d.name}' is declared twice", d.name_span,
                                   "names of declarations are global across imported files; rename one",
                                   related=(("first declared", first.name_span),))
                    continue
                self.decls[d.name] = DeclInfo(d.name, d.kind, d)

    @staticmethod
    def _import_path(base: Path, path: str) -> Path:
        if path.startswith(CATALOG_PREFIX):
            return catalog_dir() / path[len(CATALOG_PREFIX):]
        return base / path

    # ------------------------------------------------------------ declarations
    def _declarations(self) -> None:
        kinds = set(CORE_KINDS) | set(self.plugins.kinds)
        for info in list(self.decls.values()):
            d = info.ast
            if d.kind not in kinds:
                guess = did_you_mean(d.kind, kinds)
                self.rep.error("unknown-kind", f"unknown declaration kind '{d.kind}'", d.kind_span,
                               (f"did you mean '{guess}'? " if guess else "") +
                               "kinds: " + ", ".join(sorted(kinds)))
        for info in self.decls.values():
            self._merge(info, [])
        for info in self.decls.values():
            scope = (info.name, None)
            for fname, a in info.fields.items():
                nid = f"{info.name}.{fname}"
                self.nodes[nid] = Node(nid, "field", info.name, fname, assign=a, scope=scope, span=a.span)
            for block, params in info.uses.items():
                for pname, a in params.items():
                    nid = f"{info.name}.{block}.{pname}"
                    self.nodes[nid] = Node(nid, "field", info.name, pname, assign=a, scope=(info.name, block),
                                           span=a.span)
        for info in self.decls.values():
            spec = self.plugins.kinds.get(info.kind)
            if info.kind == "plan" or spec is None:
                continue
            # documented fields of the kind: defaults and type checks apply once the
            # declaration has every required field (a partial one is left free-form)
            if any(p.default is None and not p.optional and p.name not in info.fields for p in spec.fields):
                continue
            known = {p.name for p in spec.fields}
            for fname, a in info.fields.items():
                if fname not in known:
                    guess = did_you_mean(fname, known)
                    self.rep.warning("unknown-field", f"{info.kind} '{info.name}' has a field '{fname}' that no "
                                     f"plugin documents for a {info.kind}", a.name_span,
                                     (f"did you mean '{guess}'? " if guess else "") +
                                     f"documented fields: {', '.join(sorted(known))}")
            for p in spec.fields:
                nid = f"{info.name}.{p.name}"
                if p.name not in info.fields and p.default is not None:
                    self._default_node(nid, info, p, (info.name, None), info.kind)
                if nid in self.nodes:
                    self._register_spec(nid, p)
        if self.rep.errors:
            return
        for info in self.decls.values():
            if info.kind != "plan":
                self.plugins.derive(DeclContext(self, info.name))

    def _merge(self, info: DeclInfo, chain: list[str]) -> None:
        if info.fields or info.uses or info.parents or getattr(info, "_merged", False):
            return
        d = info.ast
        fields: dict[str, A.Assign] = {}
        uses: dict[str, dict[str, A.Assign]] = {}
        spans: dict[str, Span] = {}
        parents: tuple[str, ...] = ()
        requires: dict[str, A.Require] = {}
        if d.extends:
            parent = self.decls.get(d.extends)
            if parent is None:
                guess = did_you_mean(d.extends, [n for n, i in self.decls.items() if i.kind == d.kind])
                self.rep.error("unknown-name", f"'{d.name}' extends unknown {d.kind} '{d.extends}'",
                               d.extends_span, f"did you mean '{guess}'?" if guess else
                               "declare it or import the file that does")
            elif d.name in chain or parent.name == d.name:
                cyc = " -> ".join((chain[chain.index(d.name):] if d.name in chain else [d.name]) + [d.name])
                self.rep.error("cycle", f"'extends' forms a cycle: {cyc}", d.extends_span,
                               "a declaration cannot extend itself, directly or indirectly")
            elif parent.kind != d.kind:
                self.rep.error("kind-mismatch", f"{d.kind} '{d.name}' cannot extend {parent.kind} '{parent.name}'",
                               d.extends_span, f"extend a {d.kind}")
            else:
                self._merge(parent, chain + [d.name])
                fields.update(parent.fields)
                requires.update(parent.requires)
                for b, ps in parent.uses.items():
                    uses[b] = dict(ps)
                spans.update(parent.use_spans)
                parents = (parent.name,) + parent.parents
        if d.source is not None:
            fields.update(self._config_fields(d))
        own: dict[str, A.Assign] = {}
        for a in d.assigns:
            if a.name in own:
                self.rep.error("duplicate", f"field '{a.name}' is assigned twice in '{d.name}'", a.name_span,
                               "one assignment per name and scope", related=(("first assigned", own[a.name].name_span),))
                continue
            own[a.name] = a
        fields.update(own)
        own_blocks: set[str] = set()
        for u in d.uses:
            if u.plugin in own_blocks:
                self.rep.error("duplicate", f"block 'use {u.plugin}' appears twice in '{d.name}'", u.name_span,
                               "merge the two blocks")
                continue
            own_blocks.add(u.plugin)
            if d.kind != "plan":
                self.rep.error("syntax", f"`use` blocks belong in plans, not in {d.kind} '{d.name}'",
                               u.name_span, "move it into a plan")
                continue
            merged = uses.setdefault(u.plugin, {})
            seen_p: set[str] = set()
            for a in u.assigns:
                if isinstance(a, A.Require):
                    self.rep.error("syntax", f"`require` cannot be inside `use {u.plugin}`", a.span,
                                   "write requirements in the plan's body, after the `use` blocks")
                    continue
                if isinstance(a, A.UseBlock):
                    self.rep.error("syntax", f"`use {a.plugin}` cannot be nested inside `use {u.plugin}`",
                                   a.name_span, f"close `use {u.plugin} {{ … }}` with '}}' before `use {a.plugin}`")
                    continue
                if a.name in seen_p:
                    self.rep.error("duplicate", f"parameter '{a.name}' is assigned twice in 'use {u.plugin}'",
                                   a.name_span, "one assignment per name and scope")
                    continue
                seen_p.add(a.name)
                merged[a.name] = a
            spans[u.plugin] = u.name_span
        own_req: set[str] = set()
        for r in d.requires:
            if d.kind != "plan":
                self.rep.error("syntax", f"`require` belongs in plans, not in {d.kind} '{d.name}'", r.span,
                               "move it into the plan that must satisfy it")
                continue
            name = r.name or requirement_slug(r)
            if name in own_req:
                self.rep.error("duplicate", f"requirement '{name}' is declared twice in '{d.name}'",
                               r.name_span or r.span, "give each `require` its own name: `require NAME: …`")
                continue
            own_req.add(name)
            requires[name] = r   # a child's requirement of the same name replaces its parent's
        info.fields, info.uses, info.use_spans, info.parents = fields, uses, spans, parents
        info.requires = requires
        info._merged = True

    def _config_fields(self, d: A.Decl) -> dict[str, A.Assign]:
        path = self._import_path(Path(d.span.file).resolve().parent, d.source)
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except OSError:
            self.rep.error("missing-import", f"config file '{d.source}' does not exist", d.source_span,
                           f"paths are relative to the .plan file (looked for {path})")
            return {}
        except json.JSONDecodeError as e:
            self.rep.error("bad-config", f"config file '{d.source}' is not valid JSON: {e.msg} "
                           f"(line {e.lineno}, column {e.colno})", d.source_span, "fix the JSON file")
            return {}
        try:
            mapped = self.plugins.config_import(d.kind, cfg, str(path))
        except (ValueError, KeyError) as e:
            msg = str(e) if isinstance(e, ValueError) else f"missing key {e} in '{d.source}'"
            self.rep.error("bad-config", msg, d.source_span, "describe the model by its fields instead")
            return {}
        if mapped is None:
            self.rep.error("bad-config", f"no plugin understands '{d.source}' as a {d.kind}", d.source_span,
                           "supported: Hugging Face config.json of dense decoders")
            return {}
        out = {}
        sp_ = d.source_span
        for k, (val, unit) in mapped.items():
            if isinstance(val, bool):
                e = A.Bool(val, sp_)
            elif isinstance(val, str) and not _is_number(val):
                e = A.String(val, sp_)
            else:
                e = A.Number(str(val), unit or None, sp_)
            out[k] = A.Assign(k, e, sp_, sp_)
        return out

    # ------------------------------------------------------------ plans
    def _plans(self) -> None:
        blocks = self.plugins.blocks
        for info in self.decls.values():
            if info.kind != "plan":
                continue
            ok = True
            for bname in info.uses:
                if bname not in blocks:
                    guess = did_you_mean(bname, blocks)
                    self.rep.error("unknown-plugin", f"no plugin provides `use {bname}`", info.use_spans[bname],
                                   (f"did you mean '{guess}'? " if guess else "") +
                                   "available blocks: " + ", ".join(sorted(blocks)))
                    ok = False
            if not ok:
                continue
            self._apply_defaults(info)
        if self.rep.errors:
            return
        for info in self.decls.values():
            if info.kind == "plan":
                ctx = PlanContext(self, info.name)
                self.plugins.price(ctx)
        for info in self.decls.values():
            if info.kind == "plan":
                ctx = PlanContext(self, info.name)
                self.plugins.schedule(ctx)
        for tl in self.timelines.values():
            self._timeline_quantities(tl)
        for info in self.decls.values():
            if info.kind == "plan":
                self._user_requirements(info)

    def _user_requirements(self, info: DeclInfo) -> None:
        """`require [NAME:] LHS op RHS` of a plan (inherited through `extends`): both sides are
        built in the plan's scope (plugin quantities included) and must share a dimension."""
        taken = {r.name for r in self.requirements if r.plan == info.name}
        for name, r in info.requires.items():
            scope = (info.name, None)
            try:
                lhs = self._num(self._eval(r.lhs, scope, None), r.lhs)
                rhs = self._num(self._eval(r.rhs, scope, None), r.rhs)
            except (_Fail, _Cycle):
                continue
            if lhs.dim != rhs.dim:
                self.rep.error("unit-mismatch", f"requirement '{name}' compares {describe_dim(lhs.dim)} with "
                               f"{describe_dim(rhs.dim)}", r.span, "both sides of a requirement need the same "
                               "dimension")
                continue
            if name in taken:
                self.rep.error("duplicate", f"plan '{info.name}' already has a requirement '{name}' (from a "
                               "plugin)", r.name_span or r.span, "choose another name: `require NAME: …`")
                continue
            unit = _display_unit(r.lhs, lhs.dim)
            if isinstance(r.lhs, A.Ref):
                try:
                    t = self._resolve(r.lhs.parts, scope, r.lhs.span)
                    if isinstance(t, str) and self.nodes[t].unit:
                        unit = self.nodes[t].unit
                except _Fail:
                    pass
            self.requirements.append(Requirement(info.name, name, lhs.expr, r.op, rhs.expr, unit,
                                                 r.text(), "plan", r.span, r.text()))

    def _apply_defaults(self, info: DeclInfo) -> None:
        blocks = self.plugins.blocks
        plan_params: dict[str, Param] = {}
        for bname in sorted(info.uses, key=lambda b: (blocks[b].order, b)):
            spec = blocks[bname]
            given = info.uses[bname]
            known = {p.name: p for p in spec.params}
            for pname, a in given.items():
                if pname not in known:
                    guess = did_you_mean(pname, known)
                    self.rep.error("unknown-name", f"`use {bname}` has no parameter '{pname}'", a.name_span,
                                   (f"did you mean '{guess}'? " if guess else "") +
                                   ("parameters: " + ", ".join(sorted(known)) if known else
                                    f"`use {bname}` takes no parameters"))
            for p in spec.params:
                nid = f"{info.name}.{bname}.{p.name}"
                if p.name in given:
                    self._register_spec(nid, p)
                    continue
                if p.default is None and p.optional:
                    continue
                if p.default is None:
                    self.rep.error("missing-parameter", f"`use {bname}` in '{info.name}' needs '{p.name}'"
                                   + (f" ({p.doc})" if p.doc else ""), info.use_spans[bname],
                                   f"add `{p.name} = …`" + (f" in {p.unit}" if p.unit else ""))
                    continue
                self._default_node(nid, info, p, (info.name, bname), f"use {bname}")
                self._register_spec(nid, p)
            for p in spec.plan_params:
                plan_params.setdefault(p.name, p)
        for pname, p in plan_params.items():
            nid = f"{info.name}.{pname}"
            if pname in info.fields:
                self._register_spec(nid, p)
                continue
            if p.default is None:
                users = sorted(b for b in info.uses if any(q.name == pname for q in blocks[b].plan_params))
                self.rep.error("missing-parameter", f"plan '{info.name}' needs '{pname}'"
                               + (f" ({p.doc})" if p.doc else "") + f" for `use {', '.join(users)}`",
                               info.ast.name_span, f"add `{pname} = …` to the plan" + (f" in {p.unit}" if p.unit else ""))
                continue
            self._default_node(nid, info, p, (info.name, None), "plan")
            self._register_spec(nid, p)

    def _default_node(self, nid: str, info: DeclInfo, p: Param, scope, where: str) -> None:
        expr = parse_expression(p.default, f"<default of {where}.{p.name}>")
        a = A.Assign(p.name, expr, info.ast.name_span, info.ast.name_span)
        self.nodes[nid] = Node(nid, "field", info.name, p.name, assign=a, scope=scope, span=info.ast.name_span,
                               doc=p.doc, default=p.default)

    def _register_spec(self, nid: str, p: Param) -> None:
        """Node ``nid`` must satisfy ``p`` (dimension, kind, range); its doc defaults to p's."""
        self.param_specs[nid] = p
        if p.doc and nid in self.nodes and not self.nodes[nid].doc:
            self.nodes[nid].doc = p.doc


    def _timeline_quantities(self, tl: Timeline) -> None:
        """Check a timeline's structure and define its makespan and peak quantities.

        Small timelines get their exact max-plus makespan now; larger ones a placeholder over
        the same inputs, replaced in :meth:`_schedule_timelines` by the symbolic length of the
        nominal critical path once the inputs have been range-checked.
        """
        import sympy as sp

        span = self.decls[tl.plan].ast.name_span
        try:
            tl.structure()
        except KeyError as e:
            other, who = e.args[0]
            self.rep.error("missing-quantity", f"activity '{who}' of timeline '{tl.name}' (plugin "
                           f"'{tl.activities[who].plugin}') must be ordered against activity '{other}', which "
                           "no block in use schedules", span,
                           "add the `use` block that schedules it (the step's input_wait and compute "
                           "come from `use compute`)")
            return
        bad = tl.unanchored()
        if bad is not None:
            h, anchor = bad
            self.rep.error("missing-quantity", f"memory hold '{h.id}' of timeline '{tl.name}' (plugin "
                           f"'{h.plugin}') is anchored to activity '{anchor[0]}', which is not "
                           "scheduled", span, "schedule the activity or anchor the hold elsewhere")
            return
        if tl.has_cycle():
            ids, preds = tl.edges()
            self.rep.error("cycle", f"timeline '{tl.name}' of '{tl.plan}' has a cycle: "
                           + " -> ".join(tl.find_cycle(ids, preds)), span,
                           "an activity waits, directly or through others, for itself; check the order of "
                           "work on each resource and the declared dependencies")
            return
        full = tl.symbolic == "full" or (tl.symbolic == "auto" and len(tl.activities) <= FULL_LIMIT)
        if full:
            tl.makespan_expr = tl.full_expr(limit=10 ** 9 if tl.symbolic == "full" else FORM_LIMIT)
        if tl.makespan_expr is not None:
            total = tl.makespan_expr
        else:   # placeholder over every duration (a lower bound), replaced after range checks
            sums = tl.resource_sums()
            total = (sp.Max(*sums, evaluate=False) if len(sums) > 1 else sums[0]) if sums else sp.Integer(0)
        for name, unit, doc, headline, plugin, rank in tl.makespans:
            ctx = PlanContext(self, tl.plan)
            ctx._current_plugin = plugin
            ctx.define(name, total, unit, doc, headline, rank=rank, references=tl.refs.get(name, ()))
        for name, pool, unit, doc, headline, plugin, rank in tl.peaks:
            ctx = PlanContext(self, tl.plan)
            ctx._current_plugin = plugin
            ctx.define(name, tl.pool_total(pool), unit, doc, headline, rank=rank, references=tl.refs.get(name, ()))
        if tl.times or tl.areas:
            times = (tl.full_times(limit=10 ** 9 if tl.symbolic == "full" else FORM_LIMIT)
                     if tl.makespan_expr is not None else None)
            if times is not None:
                ids, st, fin = times
                pos = {a: i for i, a in enumerate(ids)}
                start_of, finish_of = (lambda a: st[pos[a]]), (lambda a: fin[pos[a]])
            else:   # placeholders over the same inputs, replaced in _schedule_timelines
                start_of = finish_of = (lambda a: total)
            for name, act, at, unit, doc, headline, plugin, rank in tl.times:
                if act not in tl.activities:
                    self.rep.error("missing-quantity", f"quantity '{name}' of timeline '{tl.name}' (plugin "
                                   f"'{plugin}') is the {at} of activity '{act}', which is not scheduled", span,
                                   "schedule the activity first")
                    continue
                ctx = PlanContext(self, tl.plan)
                ctx._current_plugin = plugin
                ctx.define(name, start_of(act) if at == "start" else finish_of(act), unit, doc, headline, rank=rank,
                           references=tl.refs.get(name, ()))
            for name, pool, unit, doc, headline, plugin, rank in tl.areas:
                ctx = PlanContext(self, tl.plan)
                ctx._current_plugin = plugin
                ctx.define(name, tl.area_expr(pool, start_of, finish_of, total), unit, doc, headline, rank=rank,
                           references=tl.refs.get(name, ()))
        if len(tl.activities) <= MIRROR_LIMIT:
            rows, edges = tl.mirror()
            tl.graph = {r[0]: [] for r in rows}     # activity -> successors
            for u, v in edges:
                tl.graph[u].append(v)
            dim, pre = Dim.of(time=1), f"{tl.plan}.{tl.name}."
            for aid, dur, res, plugin, doc in rows:
                nid = pre + aid
                self.nodes[nid] = Node(nid, "activity", tl.plan, aid, expr=dur, dim=dim, unit="s", plugin=plugin,
                                       doc=doc, state=2)
                self._activity_resource[nid] = res
            self._activity_edges.extend((pre + u, pre + v) for u, v in edges)

    def _schedule_timelines(self, g) -> None:
        """Nominal schedules and memory profiles of every timeline; makespans of large
        timelines become the symbolic length of their critical path, peaks the symbolic sum of
        the holds live at the peak instant.  Timelines are taken in the order of their
        quantities in the dependency graph, so one timeline may use another's makespan."""
        pos = {nid: i for i, nid in enumerate(g[2])}

        def first_pos(tl):
            names = ([m[0] for m in tl.makespans] + [p[0] for p in tl.peaks] + [t[0] for t in tl.times]
                     + [a[0] for a in tl.areas])
            return min((pos.get(f"{tl.plan}.{n}", len(pos)) for n in names), default=len(pos) + 1)

        class _NoValue(Exception):
            pass

        def num(e):
            v = self._subs_value(e)
            if v is None or not getattr(v, "is_number", False):
                raise _NoValue()
            return float(v)

        for key in sorted(self.timelines, key=lambda k: (first_pos(self.timelines[k]), k)):
            tl = self.timelines[key]
            if tl.graph is None and len(tl.activities) <= MIRROR_LIMIT and tl.activities:
                continue   # structural error already reported
            try:
                tl.schedule = tl.compute(num)
            except (_NoValue, ValueError, KeyError):
                tl.schedule = None
                continue
            changed = False
            full_sym = tl.makespan_expr is not None
            if tl.makespan_expr is None:
                tl.makespan_expr = tl.path_expr(tl.schedule)
                for name, *_ in tl.makespans:
                    self.nodes[f"{tl.plan}.{name}"].expr = tl.makespan_expr
                changed = True
            if not full_sym and (tl.times or tl.areas):
                sc = tl.schedule
                start_of = (lambda a: tl.chain_expr(sc, a, "start"))
                finish_of = (lambda a: tl.chain_expr(sc, a, "finish"))
                for name, act, at, *_ in tl.times:
                    self.nodes[f"{tl.plan}.{name}"].expr = start_of(act) if at == "start" else finish_of(act)
                for name, pool, *_ in tl.areas:
                    self.nodes[f"{tl.plan}.{name}"].expr = tl.area_expr(pool, start_of, finish_of,
                                                                         tl.makespan_expr)
                changed = True
            for name, pool, *_ in tl.peaks:
                try:
                    prof = tl.profiles[pool] = tl.profile(pool, num, tl.schedule)
                except _NoValue:
                    continue
                self.nodes[f"{tl.plan}.{name}"].expr = tl.peak_expr(prof)
                changed = True
            for pool in tl.pools():
                if pool not in tl.profiles:
                    try:
                        tl.profiles[pool] = tl.profile(pool, num, tl.schedule)
                    except _NoValue:
                        pass
            if changed:
                self._values.clear()
                self._full.clear()

    # ------------------------------------------------------------ expectations
    def expect(self, nid: str, dim: Dim, who: str, span: Span | None) -> None:
        self.expectations.append((nid, dim, who, span))

    # ------------------------------------------------------------ building fields
    def build(self, nid: str) -> Node | None:
        """Build the local expression of field ``nid`` (memoized; cycles are reported)."""
        node = self.nodes.get(nid)
        if node is None:
            return None
        if node.state == 2 or node.state == 3:
            return node
        if node.state == 1:
            i = self._stack.index(nid)
            cyc = self._stack[i:] + [nid]
            related = tuple((f"'{c}' is defined here", self.nodes[c].span) for c in cyc[1:-1] if self.nodes[c].span)
            self.rep.error("cycle", "cyclic definition: " + " -> ".join(cyc), node.span,
                           "break the cycle by giving one of these a value that does not depend on the others",
                           related=related)
            raise _Cycle()
        node.state = 1
        self._stack.append(nid)
        start = len(self.rep.items)
        try:
            v = self._eval(node.assign.value, node.scope, node)
        except _Fail:
            if node.default is not None:
                self._relocate_default_errors(node, start)
            node.state = 3
            self._stack.pop()
            return node
        except _Cycle:
            node.state = 3
            self._stack.pop()
            if self._stack:
                raise
            return node
        except _Fail:
            node.state = 3
            self._stack.pop()
            return node
        self._stack.pop()
        if isinstance(v, Val):
            node.expr, node.dim = v.expr, v.dim
            free = v.expr.free_symbols
            node.input = not free
            if node.input:
                node.nominal = v.expr
            node.unit = _display_unit(node.assign.value, v.dim)
        else:
            node.value = v
        node.source = node.assign.source if node.default is None else None
        if node.assign.range is not None and node.default is None:
            self._declared_range(node, v)
        node.state = 2
        return node

    def _declared_range(self, node: Node, v) -> None:
        """Check and store `in [lo, hi]` of an input: constant bounds of the value's dimension,
        lo <= nominal <= hi."""
        a = node.assign
        if not isinstance(v, Val) or not node.input:
            self.rep.error("range", f"'{node.id}' is not an input number, so it cannot have a range",
                           a.range_span, "a range belongs to a literal value (`mfu = 40 % in [30 %, 50 %]`); "
                           "a derived value's range follows from its inputs'")
            return
        bounds = []
        for e in a.range:
            try:
                b = self._num(self._eval(e, node.scope, None), e)
            except (_Fail, _Cycle):
                return
            if b.expr.free_symbols:
                self.rep.error("range", "the bounds of a range must be numbers, not formulas of other values",
                               e.span, "write both bounds as literals with units")
                return
            if b.dim != v.dim:
                self.rep.error("unit-mismatch", f"the range of '{node.id}' is in {describe_dim(b.dim)} but its "
                               f"value is {describe_dim(v.dim)}", e.span, "give the bounds the value's unit")
                return
            bounds.append(b.expr)
        lo, hi = bounds
        if bool(lo > hi):
            self.rep.error("range", f"the range of '{node.id}' is empty (lower bound above the upper one)",
                           a.range_span, "write `in [low, high]`")
            return
        if bool(v.expr < lo) or bool(v.expr > hi):
            self.rep.error("out-of-range", f"the value of '{node.id}' lies outside its declared range",
                           a.value.span, "a range brackets the nominal value: widen it or fix the value")
            return
        node.range = (lo, hi)

    def wanted_block(self, plugin: str) -> str:
        """The block name a plugin registered (for messages), or the plugin's own name."""
        spec = self.plugins.block_of(plugin)
        return spec.name if spec else plugin

    def _provider_hint(self, name: str, plan: str) -> str | None:
        """"'x' is priced by `use B`" when a block that plan does not use provides ``name``."""
        for spec in sorted(self.plugins.blocks.values(), key=lambda s: s.name):
            if name in spec.provides and spec.name not in self.decls[plan].uses:
                return f"'{name}' is priced by `use {spec.name}`, which plan '{plan}' does not use"
        return None

    def _relocate_default_errors(self, node: Node, start: int) -> None:
        """Errors inside a plugin's default expression point at the plan (or its block)
        that relies on the default, since the default's own text is not in any file."""
        owner = self.decls[node.owner]
        block = node.scope[1] if node.scope else None
        span = owner.use_spans.get(block, owner.ast.name_span) if block else owner.ast.name_span
        where = f"`use {block}` parameter" if block else "plan parameter"
        for i in range(start, len(self.rep.items)):
            d = self.rep.items[i]
            if d.span is not None and d.span.file.startswith("<default"):
                self.rep.items[i] = Diagnostic(d.severity, d.code,
                                               f"{d.summary} (in the default `{node.default}` of {where} "
                                               f"'{node.name}')", span,
                                               d.hint or f"set `{node.name} = …` explicitly", d.related)

    def _fail(self, code: str, summary: str, span: Span, hint: str = "", related=()):
        self.rep.error(code, summary, span, hint, related)
        raise _Fail()

    def _resolve(self, parts: tuple[str, ...], scope, span: Span):
        first = parts[0]
        target: Any = None
        owner, block = scope if scope else (None, None)
        if owner:
            if block and f"{owner}.{block}.{first}" in self.nodes:
                target = f"{owner}.{block}.{first}"
            elif f"{owner}.{first}" in self.nodes:
                target = f"{owner}.{first}"
            elif self.decls[owner].kind == "plan" and first in self.decls[owner].uses:
                target = BlockRef(owner, first)
        if target is None and first in self.decls:
            target = DeclRef(first, self.decls[first].kind)
        if target is None:
            cands = set(self.decls)
            if owner:
                cands |= {n.split(".")[-1] for n in self.nodes if n.startswith(owner + ".")}
            guess = did_you_mean(first, cands)
            where = f" in '{owner}'" + (f" (use {block})" if block else "") if owner else ""
            hint = self._provider_hint(first, owner) if owner and self.decls[owner].kind == "plan" else None
            self._fail("unknown-name", f"unknown name '{first}'{where}", span,
                       hint or (f"did you mean '{guess}'?" if guess else "declare it or import the file that does"))
        for part in parts[1:]:
            if isinstance(target, str):
                node = self.build(target)
                if node is None or node.state == 3:
                    raise _Fail()
                if isinstance(node.value, DeclRef):
                    target = node.value
                else:
                    self._fail("unknown-name", f"'{target}' is a value, it has no field '{part}'", span,
                               "only declarations (and fields naming one) have fields")
            if isinstance(target, DeclRef):
                d = target.name
                if f"{d}.{part}" in self.nodes:
                    target = f"{d}.{part}"
                elif self.decls[d].kind == "plan" and part in self.decls[d].uses:
                    target = BlockRef(d, part)
                else:
                    cands = [n[len(d) + 1:] for n in self.nodes if n.startswith(d + ".") and n.count(".") == 1]
                    cands += list(self.decls[d].uses)
                    guess = did_you_mean(part, cands)
                    hint = self._provider_hint(part, d) if target.kind == "plan" else None
                    self._fail("unknown-name", f"{target.kind} '{d}' has no field '{part}'", span,
                               hint or (f"did you mean '{guess}'?" if guess else
                                        ("fields: " + ", ".join(sorted(cands)[:12])) if cands else "it has no fields"))
            elif isinstance(target, BlockRef):
                nid = f"{target.plan}.{target.block}.{part}"
                if nid not in self.nodes:
                    spec = self.plugins.blocks.get(target.block)
                    if spec is not None and any(p.name == part for p in spec.params):
                        self._fail("unknown-name", f"optional parameter '{part}' of `use {target.block}` is not set "
                                   f"in '{target.plan}'", span,
                                   "set it in the block, or read the quantity the block derives instead "
                                   "(`plan plugins` lists what each block provides)")
                    cands = [n.split(".")[-1] for n in self.nodes if n.startswith(f"{target.plan}.{target.block}.")]
                    guess = did_you_mean(part, cands)
                    self._fail("unknown-name", f"`use {target.block}` of '{target.plan}' has no parameter '{part}'",
                               span, f"did you mean '{guess}'?" if guess else "")
                target = nid
        return target

    def _eval(self, e, scope, node: Node | None):
        if isinstance(e, A.Number):
            text = e.text.replace("_", "")
            mant, _, exp = text.lower().partition("e")
            digits = len(mant.split(".")[0].lstrip("0"))
            if (int(exp) if exp else 0) + digits - 1 > 300 or (int(exp) if exp else 0) < -300:
                self._fail("out-of-range", f"the number '{e.text}' is outside the range a plan can hold "
                           "(magnitudes from 1e-300 to 1e300)", e.span, "use another unit or check the exponent")
            try:
                val = Fraction(text)
            except (ValueError, ZeroDivisionError):
                self._fail("syntax", f"bad number '{e.text}'", e.span)
            dim = DIMENSIONLESS
            if e.unit:
                try:
                    u = parse_unit(e.unit)
                except UnitError as ue:
                    usp = Span(e.span.file, e.span.end_line, e.span.end_column - len(e.unit), e.span.end_line,
                               e.span.end_column)
                    self._fail("unknown-unit", str(ue), usp, ue.hint)
                val *= u.scale
                dim = u.dim
            return Val(_rat(val), dim)
        if isinstance(e, A.String):
            return e.value
        if isinstance(e, A.List):
            items = []
            for it in e.items:
                v = self._eval(it, scope, node)
                if isinstance(v, ListVal):
                    self._fail("type", "a list cannot contain a list", it.span, "flatten it: [a, b, c]")
                items.append(v)
            return ListVal(tuple(items), tuple(it.span for it in e.items))
        if isinstance(e, A.Bool):
            return e.value
        if isinstance(e, A.Ref):
            t = self._resolve(e.parts, scope, e.span)
            if isinstance(t, DeclRef):
                return t
            if isinstance(t, BlockRef):
                self._fail("type", f"'{e.dotted}' is a `use` block, not a value", e.span, "refer to one of its parameters")
            n = self.build(t)
            if n is None or n.state == 3:
                raise _Fail()
            self.used.add(t)
            if n.kind == "quantity" or n.numeric:
                return Val(_S(t), n.dim)
            return n.value
        if isinstance(e, A.Neg):
            v = self._num(self._eval(e.operand, scope, node), e.operand)
            return Val(-v.expr, v.dim)
        if isinstance(e, A.BinOp):
            a = self._num(self._eval(e.left, scope, node), e.left)
            b = self._num(self._eval(e.right, scope, node), e.right)
            if e.op in "+-":
                if a.dim != b.dim:
                    self._fail("unit-mismatch", f"cannot {'add' if e.op == '+' else 'subtract'} "
                               f"{describe_dim(a.dim)} and {describe_dim(b.dim)}", e.span,
                               f"both sides of '{e.op}' need the same dimension: left is {describe_dim(a.dim)}, "
                               f"right is {describe_dim(b.dim)}")
                return Val(a.expr + b.expr if e.op == "+" else a.expr - b.expr, a.dim)
            if e.op == "*":
                return Val(a.expr * b.expr, a.dim * b.dim)
            if e.op == "/":
                if b.expr == 0:
                    self._fail("division-by-zero", "division by zero", e.right.span,
                               "the divisor is zero")
                if node is not None:
                    node.div_checks.append((b.expr, e.right.span))
                return Val(a.expr / b.expr, a.dim / b.dim)
            if e.op == "^":
                if not b.dim.dimensionless:
                    self._fail("unit-mismatch", f"an exponent must be dimensionless, not {describe_dim(b.dim)}",
                               e.right.span)
                if a.expr.is_number and b.expr.is_number and a.expr != 0:
                    import math
                    try:
                        mag = abs(float(b.expr) * math.log10(abs(float(a.expr))))
                    except (OverflowError, ValueError, TypeError):
                        mag = math.inf
                    if mag > 300:
                        self._fail("out-of-range", "the power is outside the range a plan can hold "
                                   "(magnitudes from 1e-300 to 1e300)", e.span, "check the exponent")
                if a.dim.dimensionless:
                    return Val(a.expr ** b.expr, a.dim)
                if not b.expr.is_Rational:
                    self._fail("unit-mismatch", "a quantity with units can only be raised to a constant power",
                               e.right.span, "make the exponent a plain number")
                return Val(a.expr ** b.expr, a.dim ** Fraction(int(b.expr.p), int(b.expr.q)))
        if isinstance(e, A.Call):
            return self._call(e, scope, node)
        raise TypeError(e)  # pragma: no cover

    def _num(self, v, e) -> Val:
        if isinstance(v, Val):
            return v
        what = {str: "a string", bool: "a boolean", DeclRef: "a declaration",
                ListVal: "a list"}.get(type(v), "not a number")
        self._fail("type", f"expected a number, got {what}", e.span,
                   "arithmetic needs numbers with units" if not isinstance(v, DeclRef)
                   else "refer to one of its fields, e.g. name.field")

    def _call(self, e: A.Call, scope, node):
        f = e.func
        known = ("min", "max", "ceil", "floor", "sqrt", "log", "exp", "abs")
        if f not in known:
            guess = did_you_mean(f, known)
            self._fail("unknown-name", f"unknown function '{f}'", e.func_span,
                       (f"did you mean '{guess}'? " if guess else "") + "functions: " + ", ".join(known))
        args = [self._num(self._eval(a, scope, node), a) for a in e.args]
        if f in ("min", "max"):
            if not args:
                self._fail("arity", f"{f}() needs at least one argument", e.span)
            for a, ast_a in zip(args[1:], e.args[1:]):
                if a.dim != args[0].dim:
                    self._fail("unit-mismatch", f"{f}() arguments must share a dimension: "
                               f"{describe_dim(args[0].dim)} vs {describe_dim(a.dim)}", ast_a.span)
            fn = sp.Min if f == "min" else sp.Max
            return Val(fn(*[a.expr for a in args]), args[0].dim)
        if len(args) != 1:
            self._fail("arity", f"{f}() takes one argument, got {len(args)}", e.span)
        a = args[0]
        if f == "abs":
            return Val(sp.Abs(a.expr), a.dim)
        if f == "sqrt":
            return Val(sp.sqrt(a.expr), a.dim ** Fraction(1, 2))
        if not a.dim.dimensionless:
            self._fail("unit-mismatch", f"{f}() needs a dimensionless argument, got {describe_dim(a.dim)}",
                       e.args[0].span, "divide by a unit first, e.g. ceil(x / y)")
        fn = {"ceil": sp.ceiling, "floor": sp.floor, "log": sp.log, "exp": sp.exp}[f]
        return Val(fn(a.expr), DIMENSIONLESS)

    # ------------------------------------------------------------ finalize
    @property
    def graph(self):
        """The dependency graph (networkx DiGraph), built on first use."""
        if self._graph is None and self._graph_ops is not None:
            ops, order, acts = self._graph_ops
            g = self._graph = _replay_graph(ops, order)
            for nid, dur, res in acts:
                if nid in g:
                    g.nodes[nid]["duration"] = dur
                    g.nodes[nid]["resource"] = res
        return self._graph

    @graph.setter
    def graph(self, g) -> None:
        self._graph, self._graph_ops = g, None

    def _finalize(self, numeric: bool = True) -> None:
        """Build every field, check dimensions and references, build the dependency graph
        (reporting cycles) and, when ``numeric``, evaluate every node at nominal values."""
        for nid in sorted(self.nodes):
            n = self.nodes[nid]
            if n.kind == "field" and n.state == 0:
                try:
                    self.build(nid)
                except _Cycle:
                    pass
        if self.rep.errors:
            return
        self._check_expectations()   # first: they point at the user's own fields
        self._check_specs()
        missing: dict[tuple, list[str]] = {}
        for nid, plugin in sorted(self.wanted.items()):
            if nid not in self.nodes:
                plan, q = nid.split(".", 1)
                provider = next((s.name for s in sorted(self.plugins.blocks.values(), key=lambda s: s.name)
                                 if q in s.provides), None)
                missing.setdefault((plan, plugin, provider), []).append(q)
        for (plan, plugin, provider), qs in missing.items():
            names = ", ".join(f"'{q}'" for q in qs)
            if provider:
                self.rep.error("missing-quantity", f"`use {self.wanted_block(plugin)}` in plan '{plan}' needs "
                               f"{names}, priced by `use {provider}`", self.decls[plan].ast.name_span,
                               f"add `use {provider} {{ … }}` to plan '{plan}'")
            else:
                self.rep.error("missing-quantity", f"plugin '{plugin}' needs {names} of plan '{plan}', which no "
                               "block in use defines", self.decls[plan].ast.name_span,
                               f"add the `use` block that prices it, or set `{qs[0]} = …` in the plan")
        if self.rep.errors:
            return
        # the dependency graph, first as plain adjacency (networkx is imported only when
        # ``ws.graph`` is read or a cycle has to be named): the same nodes, edges and order
        ops: list = []                      # replayed by _build_graph: (nid, attrs, sources)
        succ: dict = {}
        for nid in sorted(self.nodes):
            n = self.nodes[nid]
            srcs = ()
            if n.expr is not None:
                srcs = tuple(x for x in sorted((s.name for s in n.expr.free_symbols)) if x != nid)
                for x in srcs:
                    succ.setdefault(x, set()).add(nid)
            ops.append((nid, dict(kind=n.kind, expr=n.expr, unit=n.unit, plugin=n.plugin, doc=n.doc), srcs))
        for nid in sorted(set(succ) - set(self.nodes)):
            preds = sorted(succ[nid])
            self.rep.error("missing-quantity", f"'{nid}' is used by {', '.join(preds)} but never defined",
                           self.nodes[preds[0]].span, "a plugin refers to a quantity no block defines")
        if self.rep.errors:
            return
        if _lex_topo(self.nodes, succ) is None:
            import networkx as nx

            cyc = nx.find_cycle(_replay_graph(ops, ()))
            names = [e[0] for e in cyc] + [cyc[0][0]]
            related = tuple((f"'{c}' ({self.nodes[c].plugin or 'field'})", self.nodes[c].span)
                            for c in names[:-1] if self.nodes[c].span)
            first = next((self.nodes[c].span for c in names if self.nodes[c].span), None)
            self.rep.error("cycle", "cyclic definition: " + " -> ".join(names), first,
                           "a quantity depends on itself through these definitions", related=related)
            return
        # the step's activities live in the same graph: duration dependencies (above) plus
        # their order on the timeline (edges of kind "order", not formula dependencies)
        for u, v in self._activity_edges:
            succ.setdefault(u, set()).add(v)
        act_attrs = [(nid, self.nodes[nid].expr, res) for nid, res in self._activity_resource.items()]
        self._graph_ops = (ops, tuple(self._activity_edges), act_attrs)
        self._graph = None
        g = (self.nodes, succ, _lex_topo(self.nodes, succ))     # with the order edges
        if not numeric:
            # `plan check`: literal parameters are still range-checked (no formula is evaluated)
            self.check_ranges(inputs_only=True)
            self._warn_unused()
            return
        if numeric:
            # out-of-range inputs (gpus = 0) are reported on their own text before they
            # cause a division by zero downstream
            self.check_ranges()
            if self.rep.errors:
                return
            self._schedule_timelines(g)
            for nid in g[2]:
                self.value(nid)
        self._warn_unused()

    def _check_specs(self, only: str | None = None) -> None:
        items = [(only, self.param_specs[only])] if only else sorted(self.param_specs.items())
        for nid, p in items:
            n = self.nodes.get(nid)
            if n is None or n.state != 2 or (only is None and nid in self._spec_reported):
                continue
            if n.default is not None and self.rep.errors:
                continue  # a default is only wrong because of an error already reported
            span = n.assign.value.span if n.assign else n.span
            if p.kind in ("quantity", "int"):
                if not n.numeric:
                    self.rep.error("type", f"'{n.name}' must be a number" + (f" in {p.unit}" if p.unit else ""),
                                   span, p.doc)
                    continue
                want = parse_unit(p.unit).dim if p.unit else DIMENSIONLESS
                if n.dim != want:
                    self._spec_reported.add(nid)
                    self.rep.error("unit-mismatch", f"'{n.name}' must be {_as(want)}, got {describe_dim(n.dim)}",
                                   span, f"write it in a unit like {p.unit}" if p.unit else "drop the unit")
                    continue
                if p.unit and n.unit == "":
                    n.unit = p.unit
            elif p.kind == "choice":
                if not isinstance(n.value, str) or n.value not in p.choices:
                    guess = did_you_mean(str(n.value), p.choices) if isinstance(n.value, str) else None
                    self.rep.error("out-of-range", f"'{n.name}' must be one of " + ", ".join(f'"{c}"' for c in p.choices),
                                   span, f'did you mean "{guess}"?' if guess else p.doc)
            elif p.kind == "ref":
                if not isinstance(n.value, DeclRef) or (p.ref_kind and n.value.kind != p.ref_kind):
                    self.rep.error("type", f"'{n.name}' must name a {p.ref_kind or 'declaration'}", span, p.doc)
            elif p.kind == "bool":
                if not isinstance(n.value, bool):
                    self.rep.error("type", f"'{n.name}' must be true or false", span, p.doc)
            elif p.kind in ("string", "file"):
                if not isinstance(n.value, str):
                    what = "a file path in double quotes" if p.kind == "file" else "a string in double quotes"
                    self.rep.error("type", f"'{n.name}' must be {what}", span, p.doc)
                elif p.kind == "file":
                    f = self.file_param(nid)
                    if f.is_dir():
                        self.rep.error("missing-file", f"'{n.value}' is a directory, not a file "
                                       f"({_display_path(f)})", span, "name a file inside it")
                    elif not f.is_file():
                        self.rep.error("missing-file", f"file '{n.value}' not found (looked for {_display_path(f)})",
                                       span, "paths are relative to the .plan file that names them")
            elif p.kind == "list":
                if not isinstance(n.value, ListVal):
                    self.rep.error("type", f"'{n.name}' must be a list like [a, b, c]", span, p.doc)
                    continue
                want = parse_unit(p.unit).dim if p.unit else DIMENSIONLESS
                for i, (it, isp) in enumerate(zip(n.value.items, n.value.spans or [span] * len(n.value))):
                    if p.item == "ref":
                        if not isinstance(it, DeclRef) or (p.ref_kind and it.kind != p.ref_kind):
                            self.rep.error("type", f"item {i + 1} of '{n.name}' must name a "
                                           f"{p.ref_kind or 'declaration'}", isp, p.doc)
                            break
                    elif p.item == "string":
                        if not isinstance(it, str):
                            self.rep.error("type", f"item {i + 1} of '{n.name}' must be a string in double quotes",
                                           isp, p.doc)
                            break
                    elif not isinstance(it, Val):
                        self.rep.error("type", f"item {i + 1} of '{n.name}' must be a number"
                                       + (f" in {p.unit}" if p.unit else ""), isp, p.doc)
                        break
                    elif it.dim != want:
                        self.rep.error("unit-mismatch", f"item {i + 1} of '{n.name}' must be {_as(want)}, got "
                                       f"{describe_dim(it.dim)}", isp,
                                       f"write it in a unit like {p.unit}" if p.unit else "drop the unit")
                        break
                if p.min_items is not None and len(n.value) < p.min_items:
                    self.rep.error("out-of-range", f"'{n.name}' needs at least {p.min_items} item"
                                   f"{'s' if p.min_items != 1 else ''}, got {len(n.value)}", span, p.doc)

    def check_ranges(self, only: str | None = None, inputs_only: bool = False) -> None:
        """Report parameters outside their declared range (exact comparisons), then the sign
        constraints plugins put on declaration fields.  ``inputs_only`` limits the check to
        literal values (nothing derived is evaluated)."""
        items = [(only, self.param_specs[only])] if only else sorted(self.param_specs.items())
        for nid, p in items:
            n = self.nodes.get(nid)
            if p.kind == "list" and n is not None and isinstance(n.value, ListVal) and p.item == "quantity" \
                    and (p.min is not None or p.max is not None) and nid not in self._spec_reported:
                if not inputs_only or not any(isinstance(it, Val) and it.expr.free_symbols for it in n.value.items):
                    self._check_list_items(n, p)
                continue
            if inputs_only and (n is None or not n.input):
                continue
            if n is None or not n.numeric or (p.min is None and p.max is None and p.kind != "int" and not p.whole):
                continue
            if only is None and nid in self._spec_reported:
                continue
            v = self.value(nid)
            if v is None:
                continue
            # exact comparisons: the nominal value is a sympy number, the bounds are rationals
            scale = _rat(parse_unit(p.unit).scale) if p.unit else sp.Integer(1)
            xe = v / scale
            x = float(xe)
            span = n.assign.value.span if n.assign else n.span
            if (p.kind == "int" or p.whole) and not (xe.is_Rational and xe.q == 1):
                self.rep.error("out-of-range", f"'{n.name}' must be a whole number, got {float(xe):.12g}", span, p.doc)
                continue
            lo = _rat(Fraction(str(p.min))) if p.min is not None else None
            hi = _rat(Fraction(str(p.max))) if p.max is not None else None
            lo_bad = lo is not None and bool(xe <= lo if p.min_open else xe < lo)
            hi_bad = hi is not None and bool(xe > hi)
            if lo_bad or hi_bad:
                rng = (f"{'(' if p.min_open else '['}{p.min:g}" if p.min is not None else "(-inf") + ", " + \
                      (f"{p.max:g}]" if p.max is not None else "inf)")
                shown = f"{x:g}" if x != 0 or xe == 0 else f"{sp.N(xe, 6)}"
                hint = p.doc
                if not p.unit and p.max == 1 and 1 < x <= 100:
                    hint = f"{p.doc}: write {x:g} % for a percentage"
                self.rep.error("out-of-range", f"'{n.name}' = {shown}{(' ' + p.unit) if p.unit else ''} is outside "
                               f"{rng}", span, hint)
        if only is None:
            self._check_bounds(inputs_only)

    def _check_list_items(self, n: Node, p) -> None:
        """Each number of a list parameter inside the parameter's ``min``/``max`` (a negative
        sequence length or buffer size is as wrong in a list as in a scalar)."""
        try:
            items = self.list_value(n.id)
        except Abort:
            return
        scale = float(parse_unit(p.unit).scale) if p.unit else 1.0
        spans = n.value.spans or [n.assign.value.span if n.assign else n.span] * len(items)
        for i, (v, sp_) in enumerate(zip(items, spans)):
            if not isinstance(v, float):
                continue
            x = v / scale
            if (p.min is not None and (x <= p.min if p.min_open else x < p.min)) or (p.max is not None and x > p.max):
                rng = (f"{'(' if p.min_open else '['}{p.min:g}" if p.min is not None else "(-inf") + ", " + \
                      (f"{p.max:g}]" if p.max is not None else "inf)")
                self._spec_reported.add(n.id)
                self.rep.error("out-of-range", f"item {i + 1} of '{n.name}' = {x:g}{(' ' + p.unit) if p.unit else ''}"
                               f" is outside {rng}", sp_, p.doc)
                return

    def _check_bounds(self, inputs_only: bool = False) -> None:
        """Sign constraints plugins put on fields of declarations they read (``positive``)."""
        for nid, (kind, who) in sorted(self.bounds.items()):
            n = self.nodes.get(nid)
            if n is None or not n.numeric or nid in self._spec_reported or (inputs_only and not n.input):
                continue
            v = self.value(nid)
            if v is None:
                continue
            bad = bool(v <= 0) if kind == "positive" else bool(v < 0)
            if bad:
                self._spec_reported.add(nid)
                from .units import format_quantity
                self.rep.error("out-of-range", f"'{nid}' must be {'positive' if kind == 'positive' else 'non-negative'}"
                               f" for {who}, got {format_quantity(float(v), n.unit)}",
                               n.assign.value.span if n.assign else n.span,
                               "a count, a size, a rate or a duration cannot be negative")

    def _check_expectations(self) -> None:
        done = set()
        for nid, dim, who, span in self.expectations:
            if (nid, dim) in done:
                continue
            done.add((nid, dim))
            n = self.nodes.get(nid)
            if nid in self._spec_reported:
                continue
            if n is None or n.state != 2 or n.dim is None:
                if n is not None and n.state == 2 and n.value is not None:
                    self.rep.error("type", f"'{nid}' must be a number ({describe_dim(dim)}) for {who}", n.span)
                continue
            if n.dim != dim:
                self._spec_reported.add(nid)
                self.rep.error("unit-mismatch", f"'{nid}' is {_as(n.dim)} but {who} needs "
                               + ("a plain number" if dim.dimensionless else f"it {_as(dim)}"),
                               n.span if n.kind == "field" else span,
                               f"give it a value {_as(dim)}")

    def _warn_unused(self) -> None:
        referenced = {s.name for m in self.nodes.values() if m.expr is not None for s in m.expr.free_symbols}
        known = [p.name for s in self.plugins.blocks.values() for p in s.plan_params]
        for nid in sorted(self.nodes):
            n = self.nodes[nid]
            if n.kind != "field" or nid in self.used or nid in self.param_specs or not n.assign:
                continue
            if self.decls[n.owner].kind != "plan" or n.scope[1] is not None:
                continue
            if nid in referenced:
                continue
            guess = did_you_mean(n.name, known)
            self.rep.warning("unused", f"field '{n.name}' of plan '{n.owner}' is not used by any block",
                             n.assign.name_span, f"did you mean '{guess}'?" if guess else "")

    # ------------------------------------------------------------ evaluation
    def value(self, nid: str):
        """Exact nominal value (sympy number, base units) of numeric node ``nid``, or None."""
        if nid in self._values:
            return self._values[nid]
        n = self.nodes[nid]
        if n.kind == "field" and n.state != 2:
            self.build(nid)
        if n.expr is None:
            self._values[nid] = None
            return None
        if n.kind == "activity":        # durations repeat: one evaluation per distinct expression
            key = ("activity", n.expr)
            if key in self._values:
                v = self._values[nid] = self._values[key]
                return v
        if n.input:
            v = n.nominal
        else:
            subs = {}
            for s in n.expr.free_symbols:
                dv = self.value(s.name) if s.name in self.nodes else None
                if dv is None:
                    self._values[nid] = None
                    return None
                subs[s] = dv
            v = subs_numbers(n.expr, subs)
            if not v.is_Rational:
                v = sp.N(v, 40) if v.is_number else v
        if v is not None and v.is_number and v.is_real and v != 0 and v not in (sp.oo, -sp.oo) \
                and (abs(v) > _HUGE or abs(v) < 1 / _HUGE):
            who = f"quantity '{n.name}' of '{n.owner}' (plugin '{n.plugin}')" if n.kind == "quantity" else f"'{nid}'"
            self.rep.error("out-of-range", f"{who} evaluates to about {sp.N(v, 3)}, beyond what a plan can hold "
                           "(magnitudes from 1e-300 to 1e300)", n.span or self.decls[n.owner].ast.name_span,
                           "an input it depends on is extreme; check the exponents and units")
            self._values[nid] = None
            return None
        if v is sp.zoo or v is sp.nan or v in (sp.oo, -sp.oo) or (getattr(v, "is_finite", True) is False):
            span = n.span
            for div, dspan in n.div_checks:
                dv = div.xreplace({s: self.value(s.name) for s in div.free_symbols})
                if dv == 0:
                    span = dspan
                    break
            who = f"quantity '{n.name}' of '{n.owner}' (plugin '{n.plugin}')" if n.kind == "quantity" else f"'{nid}'"
            self.rep.error("division-by-zero", f"division by zero while evaluating {who}",
                           span or self.decls[n.owner].ast.name_span,
                           "an input it depends on is zero: " + ", ".join(sorted(
                               s.name for s in n.expr.free_symbols if self.value(s.name) == 0)))
            v = None
        elif v.is_number and v.is_real is False:
            self.rep.error("out-of-range", f"'{nid}' is not a real number (it evaluates to {v})",
                           n.span or self.decls[n.owner].ast.name_span,
                           "a square root, fractional power or log of a negative value")
            v = None
        self._values[nid] = v
        if n.kind == "activity":
            self._values[("activity", n.expr)] = v
        return v

    def python_value(self, nid: str):
        """Nominal value as Python: float for numbers (base units), else str/bool/DeclRef.

        A parameter with a spec is validated first (choice, whole number and range, kind of
        the declaration referred to), so a plugin never sees a value outside its contract;
        a bad value is reported at its own span and the plugin is stopped (:class:`Abort`).
        """
        n = self.build(nid)
        if n is None or n.state == 3:
            raise Abort()
        if nid in self.param_specs and nid not in self._validated:
            self._validated.add(nid)
            before = len(self.rep.errors)
            self._check_specs(only=nid)
            if len(self.rep.errors) == before and n.numeric:
                self.check_ranges(only=nid)
            if len(self.rep.errors) > before:
                self._spec_reported.add(nid)
                raise Abort()
        if nid in self._spec_reported:
            raise Abort()
        if n.numeric:
            v = self.value(nid)
            if v is None:
                raise Abort()
            return float(v)
        if isinstance(n.value, ListVal):
            return self.list_value(nid)
        return n.value

    def file_param(self, nid: str) -> Path:
        """Path named by string field ``nid``, relative to the file the assignment is in."""
        n = self.nodes[nid]
        base = Path(n.assign.span.file).parent if n.assign and n.default is None else Path(self.path).resolve().parent
        return (base / n.value).resolve()

    def list_value(self, nid: str) -> tuple:
        """Nominal items of a list field: floats (base units) for numbers, else as written."""
        n = self.build(nid)
        out = []
        for it in n.value.items:
            if isinstance(it, Val):
                v = it.expr.xreplace({s: self.value(s.name) for s in it.expr.free_symbols})
                if not v.is_number:
                    raise Abort()
                out.append(float(v))
            else:
                out.append(it)
        return tuple(out)

    def full_expr(self, nid: str, free: frozenset = frozenset(), keep: frozenset | None = None):
        """Expression of ``nid`` in terms of inputs (and of nodes in ``free``, kept as symbols).

        With ``keep`` given, only nodes in ``keep`` are expanded; others stay as their symbols
        (used to show a readable answer in terms of neighbouring quantities).
        """
        key = (nid, free, keep)
        if key in self._full:
            return self._full[key]
        n = self.nodes[nid]
        if nid in free or n.input or n.expr is None or (keep is not None and nid not in keep):
            r = _S(nid)
        else:
            r = n.expr.xreplace({s: self.full_expr(s.name, free, keep) for s in n.expr.free_symbols})
        self._full[key] = r
        return r

    def nominal_map(self, exclude=()) -> dict:
        return {_S(nid): n.nominal for nid, n in self.nodes.items() if n.input and nid not in exclude}

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

    def headline(self, plan: str) -> list[Node]:
        qs = [n for n in self.nodes.values() if n.owner == plan and n.headline]
        return sorted(qs, key=lambda n: n.order)

    def lookup(self, dotted: str) -> str:
        """Node id for a dotted name given on the command line (``plan.quantity``)."""
        parts = tuple(dotted.split("."))
        span = Span("<command line>", 1, 1, 1, len(dotted) + 1)
        remember_source("<command line>", dotted)
        start = len(self.rep.items)
        try:
            t = self._resolve(parts, None, span)
        except _Fail:
            self._raise_since(start)
        if not isinstance(t, str):
            self.rep.error("type", f"'{dotted}' is a declaration or block, not a quantity", None,
                           "name a field or quantity, e.g. plan.step_time")
            self._raise_since(start)
        return t

    def _raise_since(self, start: int):
        """Raise the diagnostics reported since ``start`` and forget them, so a failed query
        leaves the loaded workspace as it was."""
        new = self.rep.items[start:]
        del self.rep.items[start:]
        raise PlanError(new)

    def eval_expr(self, e, scope=None) -> Val:
        """Build an expression AST in global scope (queries).

        :raises PlanError: with the diagnostics of this expression only.
        """
        start = len(self.rep.items)
        try:
            return self._num(self._eval(e, scope, None), e)
        except _Fail:
            self._raise_since(start)

    def requirement_results(self, plan: str) -> list[dict]:
        out = []
        for r in self.requirements:
            if r.plan != plan:
                continue
            lv, rv = self._subs_value(r.lhs), self._subs_value(r.rhs)
            if lv is None or rv is None:
                continue
            ok = {"<=": lv <= rv, ">=": lv >= rv, "<": lv < rv, ">": lv > rv, "==": lv == rv}[r.op]
            out.append({"name": r.name, "ok": bool(ok), "lhs_si": float(lv), "rhs_si": float(rv), "op": r.op,
                        "unit": r.unit, "doc": r.doc, "plugin": r.plugin})
            if r.span is not None:
                out[-1]["where"] = f"{r.span.file}:{r.span.line}:{r.span.column}"
        return out

    def requirement(self, plan: str, name: str) -> dict | None:
        """One requirement's result (see :meth:`requirement_results`), or None."""
        return next((r for r in self.requirement_results(plan) if r["name"] == name), None)

    def _subs_value(self, expr):
        subs = {}
        for s in expr.free_symbols:
            v = self.value(s.name)
            if v is None:
                return None
            subs[s] = v
        return subs_numbers(expr, subs)

    def critical_path(self, plan: str, timeline: str) -> dict | None:
        """Critical path of a timeline at nominal values: activities with start, finish, slack,
        and the symbolic length of the path (``expr``)."""
        tl = self.timelines.get((plan, timeline))
        if tl is None or tl.schedule is None:
            return None
        sc = tl.schedule
        acts = []
        for i, a in enumerate(sc.ids):
            act = tl.activities[a]
            acts.append({"id": a, "start": sc.start[i], "finish": sc.finish[i],
                         "duration": sc.finish[i] - sc.start[i], "slack": sc.slack[i],
                         "resource": act.resource, "plugin": act.plugin, "doc": act.doc, "kind": act.kind})
        pos = {a: i for i, a in enumerate(sc.ids)}
        acts.sort(key=lambda r: (r["start"], pos[r["id"]]))
        return {"timeline": timeline, "makespan": sc.makespan, "path": list(sc.path),
                "activities": acts, "expr": tl.path_expr(sc)}

    # ------------------------------------------------------------ notebook API (dsl/api.py)
    def __getitem__(self, plan: str):
        """``ws["gpus48"]``: a :class:`dsl.api.Plan` handle (value, expr, report, sweep)."""
        from .api import Plan
        if plan not in self.plans():
            g = did_you_mean(plan, self.plans())
            raise KeyError(f"no plan '{plan}'" + (f"; did you mean '{g}'?" if g else ""))
        return Plan(self, plan)

    def report(self, fmt: str = "html") -> str:
        """The report of the root file's plans (``plan report``) as html, md or text."""
        from .api import workspace_report
        return workspace_report(self, fmt)

    def _repr_html_(self) -> str:
        return self.report("html")

    def memory_profile(self, plan: str, timeline: str, pool: str):
        """:class:`~dsl.timeline.Profile` of memory ``pool`` on a timeline, or None."""
        tl = self.timelines.get((plan, timeline))
        return None if tl is None else tl.profiles.get(pool)

class _Fail(Exception):
    pass


class _Cycle(Exception):
    pass


_HUGE = sp.Integer(10) ** 300


def _as(dim: Dim) -> str:
    return "a plain number" if dim.dimensionless else f"in {format_dim(dim)}"


def _is_number(s: str) -> bool:
    try:
        Fraction(s.replace("_", ""))
        return True
    except ValueError:
        return False


def _display_path(p: Path) -> str:
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def requirement_slug(r: A.Require) -> str:
    """Default name of an unnamed `require`: its text as an identifier
    (`finish_time <= workload.deadline` -> ``finish_time_le_workload_deadline``)."""
    import re

    from .format import format_expr
    op = {"<=": "le", ">=": "ge", "<": "lt", ">": "gt", "==": "eq"}[r.op]
    raw = f"{format_expr(r.lhs)} {op} {format_expr(r.rhs)}"
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9]+", "_", raw)).strip("_")[:60] or "requirement"


def _display_unit(e, dim: Dim) -> str:
    """The unit a user wrote for a value (first literal unit of the same dimension)."""
    stack = [e]
    while stack:
        x = stack.pop(0)
        if isinstance(x, A.Number) and x.unit:
            try:
                if parse_unit(x.unit).dim == dim:
                    return x.unit
            except UnitError:
                pass
        elif isinstance(x, A.BinOp):
            stack += [x.left, x.right]
        elif isinstance(x, A.Neg):
            stack.append(x.operand)
        elif isinstance(x, A.Call):
            stack += list(x.args)
    return default_unit_for(dim)


def load(path: str | Path, **kw) -> Workspace:
    """Load and evaluate a `.plan` file (the notebook API).

    :raises PlanError: with every diagnostic when the file has errors.
    """
    return Workspace(path, **kw)

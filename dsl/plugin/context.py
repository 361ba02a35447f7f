"""The contexts a plugin receives: :class:`PlanContext` (pricing a plan),
:class:`DeclContext` (deriving a declaration's fields), :class:`BlockView` and :class:`DeclView`.

Contexts hold the workspace being built; plugins use only their public methods.
"""
from __future__ import annotations


import sympy as sp

from ..syntax.diagnostics import Span, did_you_mean, display_path
from ..plugin.records import UseSpec
from ..engine.deferred import deferred
from ..engine.timeline import Timeline
from ..engine.units import DIMENSIONLESS, default_unit_for, parse_unit
from ..engine.nodes import Abort, DeclRef, Node, Requirement, as_expr, symbol


# ---------------------------------------------------------------- contexts for plugins
class _ContextBase:
    Abort = Abort

    def __init__(self, ws, owner: str):
        self.ws = ws
        self.name = owner
        self._current_plugin: str | None = None

    def plugin_failed(self, plugin: str, exc: Exception) -> None:
        """Report an exception a plugin raised: a limit, a refused file, a timeout, MemoryError
        or RecursionError is error[limit] (or the file's code); a ValueError or ArithmeticError
        (an extreme input) is error[plugin] with a hint about the inputs; anything else is
        error[plugin] with "internal: this is a bug in plugin X".  After an earlier error in the
        same run the exception is taken as a consequence of it and not reported (no cascade)."""
        from ..engine.safeio import FileRefused
        from ..syntax import limits as L
        ws = self.ws
        info = ws.decls[self.name]
        block = ws.wanted_block(plugin)
        span = info.use_spans.get(block, info.ast.name_span)
        where = f"`use {block}` in {info.kind} '{self.name}'" if block in info.uses else f"{info.kind} '{self.name}'"
        text = str(exc)
        text = text if len(text) <= 300 else text[:299] + "…"
        if isinstance(exc, L.LimitError):
            ws.rep.error("limit", f"{where}: {text}", span, exc.hint)
            return
        if isinstance(exc, FileRefused):
            ws.rep.error(exc.code, f"{where}: {exc.summary}", span, exc.hint)
            return
        if isinstance(exc, TimeoutError):
            ws.rep.error("limit", f"{where}: plugin '{plugin}' {text}", span, L.raise_hint("cpu_seconds"))
            return
        if not isinstance(exc, (MemoryError, RecursionError)):
            # an input outside its declared range (a device's efficiency of 0, a link's
            # bandwidth of 0) is checked after pricing; when it is what made the plugin fail,
            # report it at its own text instead of the plugin's exception
            try:
                ws.check_ranges(inputs_only=True)
            except Exception:   # noqa: BLE001 - the plugin's failure is reported below
                pass
        if ws.rep.errors:
            return
        if isinstance(exc, (MemoryError, RecursionError)):
            ws.rep.error("limit", f"{where} is too large to price: plugin '{plugin}' ran out of "
                         f"{'memory' if isinstance(exc, MemoryError) else 'stack'}", span,
                         "an input (a count, a size or a duration) is extreme; check the values given to it")
        elif isinstance(exc, (ValueError, ArithmeticError)):
            ws.rep.error("plugin", f"plugin '{plugin}' failed while pricing '{self.name}': {type(exc).__name__}: "
                         f"{text}", span, f"a value given to {where} is outside what plugin '{plugin}' handles "
                         "(zero, negative, not a real number, or extreme); check its inputs")
        else:
            ws.rep.error("plugin", f"plugin '{plugin}' failed while pricing '{self.name}': {type(exc).__name__}: "
                         f"{text}", span, f"internal: this is a bug in plugin '{plugin}' ({where}); please report "
                         "it with the .plan file")

    def error(self, summary: str, hint: str = "", span: Span | None = None, code: str = "plugin",
              related: tuple = ()) -> None:
        """Report an error found by the current plugin and stop it (raises :class:`Abort`).

        :param span: where (default: the declaration's name); :meth:`file_span` locates a
            line of a data file the plugin read.
        :param related: ``(label, span)`` pairs shown under the error (where a value was set).

        An input outside its declared range (``gpu_memory_utilization = 0``) is checked after
        pricing, but a plugin reading it as a number may fail on it first: when a literal input
        of this declaration, or of one it refers to (its engine, model, device …), holds such a
        value, that range error is reported at its own text instead of the plugin's error (its
        consequence), as for an exception (:meth:`plugin_failed`).
        """
        ws = self.ws
        if self._inputs_out_of_range():
            raise Abort()
        ws.rep.error(code, summary, span or ws.decls[self.name].ast.name_span, hint, related)
        raise Abort()

    def _inputs_out_of_range(self) -> bool:
        """Report the literal inputs of this declaration and of the declarations its fields
        refer to that are outside their declared range; True when there was one."""
        ws = self.ws
        owners = {self.name}
        for n in ws.nodes.values():
            if n.owner == self.name and isinstance(n.value, DeclRef):
                owners.add(n.value.name)
        before = len(ws.rep.errors)
        for nid in sorted(ws.param_specs):
            n = ws.nodes.get(nid)
            if n is None or not n.input or n.owner not in owners:
                continue
            try:
                ws.check_ranges(only=nid)
            except Abort:
                pass
        return len(ws.rep.errors) > before

    @staticmethod
    def file_span(path, line: int, column: int = 1, end_column: int | None = None) -> Span:
        """A :class:`Span` in a data file the plugin read (a CSV row, a JSON key), for
        :meth:`error`; the path is shown as diagnostics show files."""
        from pathlib import Path
        return Span(display_path(Path(path)), line, column, line, end_column or column + 1)

    def decl(self, name: str) -> "DeclView":
        """Read access to any declaration by name (a model, a device, a published run …)."""
        d = self.ws.decls.get(name)
        if d is None:
            self.error(f"no declaration '{name}'", code="unknown-name")
        return DeclView(self, name, d.ast.name_span)

    def nominal(self, expr, structural: bool = False):
        """The exact nominal value of a sympy expression over quantities (base units), or None
        when one of them has no value.

        ``structural=True`` when the plugin builds the plan from the number (a simulation run
        at nominal values, a discrete choice): every input the expression depends on is then
        marked structural, like a parameter read with ``value``, so a sweep over one of them
        re-evaluates the plan instead of substituting into expressions that ignore it."""
        e = as_expr(expr)
        v = self.ws.subs_value(e)
        if structural and not self.ws.sealed:
            nodes, seen = self.ws.nodes, set()
            todo = [s.name for s in e.free_symbols]
            while todo:
                nid = todo.pop()
                n = nodes.get(nid)
                if n is None or nid in seen:
                    continue
                seen.add(nid)
                d = deferred(n, "expr")        # an exact makespan not built yet: its symbols
                if n.input:
                    self.ws.structural.add(nid)
                elif d is not None or n.expr is not None:
                    todo.extend(s.name for s in (n.expr if d is None else d).free_symbols)
        return v

    def _define(self, node_id: str, name: str, expr, unit: str, doc: str, headline: bool,
                fallback: bool, order: tuple, references: tuple = ()) -> sp.Symbol:
        ws = self.ws
        dim = parse_unit(unit).dim if unit else DIMENSIONLESS
        existing = ws.nodes.get(node_id)
        plugin = self._current_plugin
        std = ws.plugins.vocabulary.get(name) if node_id == f"{self.name}.{name}" else None
        if std is not None and std.role == "quantity" and (parse_unit(std.unit).dim if std.unit else DIMENSIONLESS) != dim:
            ws.rep.error("plugin", f"plugin '{plugin}' defines '{name}' in {unit or 'a plain number'}, but plugin "
                         f"'{std.plugin}' declares the standard quantity '{name}' in {std.unit or 'a plain number'}",
                         ws.decls[self.name].ast.name_span,
                         f"one of the two plugins must change; `plan --disable-plugin {plugin}` works around it")
            return symbol(node_id)
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
                if as_expr(expr) != symbol(node_id):
                    existing.plugin = existing.plugin or f"{plugin} (overridden by the plan)"
                return symbol(node_id)
            if fallback:
                return symbol(node_id)
            if not existing.fallback:
                ws.rep.error("duplicate", f"quantity '{node_id}' is defined by plugins '{existing.plugin}' "
                             f"and '{plugin}'", ws.decls[self.name].ast.name_span,
                             "remove one of the two `use` blocks or block one plugin")
                return symbol(node_id)
        ws.nodes[node_id] = Node(node_id, "quantity", self.name, name, expr=as_expr(expr), dim=dim,
                                 unit=unit, plugin=plugin, doc=doc, headline=headline, order=order,
                                 fallback=fallback, state=2, references=tuple(references))
        return symbol(node_id)


class DeclView:
    """Read access to a declaration's fields from a plugin, with unit expectations."""

    def __init__(self, ctx: _ContextBase, name: str, span: Span | None):
        self._ctx, self.name, self._span = ctx, name, span
        self.kind = ctx.ws.decls[name].kind

    def has(self, field_name: str) -> bool:
        return f"{self.name}.{field_name}" in self._ctx.ws.nodes

    def uses(self, block: str) -> bool:
        """True when this declaration (a plan) has ``use BLOCK`` (written or inherited)."""
        info = self._ctx.ws.decls[self.name]
        return block in getattr(info, "uses", ())

    def q(self, field_name: str, unit: str | None = "", positive: bool = False, nonnegative: bool = False) -> sp.Symbol:
        """Placeholder for numeric field ``field_name``; its dimension must match ``unit``
        (``None``: any dimension — for a plugin that reads the field in whatever unit it has,
        as a fit varying it on a ratio scale does).

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
        if unit is not None:
            ws.expect(nid, parse_unit(unit).dim if unit else DIMENSIONLESS,
                      f"plugin '{self._ctx._current_plugin}'", self._span)
        if positive or nonnegative:
            prev = ws.bounds.get(nid)
            if prev is None or (positive and prev[0] != "positive"):
                ws.bounds[nid] = ("positive" if positive else "nonnegative", f"plugin '{self._ctx._current_plugin}'")
        ws.used.add(nid)
        return symbol(nid)

    def unit(self, field_name: str) -> str:
        """The unit field ``field_name`` is shown in (``"GB/s"``; ``""`` for a plain number)."""
        n = self._ctx.ws.nodes.get(f"{self.name}.{field_name}")
        return "" if n is None else (n.unit or "")

    def value_span(self, field_name: str) -> Span | None:
        """Where field ``field_name``'s value is written (its whole field when it came from a
        config or a parent without a value span), or None when the declaration has no such field:
        for :meth:`_ContextBase.error` and ``related``."""
        n = self._ctx.ws.nodes.get(f"{self.name}.{field_name}")
        if n is None:
            return None
        return n.assign.value.span if n.assign is not None else n.span

    def value(self, field_name: str, default=None):
        """Nominal Python value of a field (str, bool, DeclRef, or float for numbers)."""
        nid = f"{self.name}.{field_name}"
        if nid not in self._ctx.ws.nodes:
            return default
        self._ctx.ws.used.add(nid)
        return self._ctx.ws.python_value(nid)


class DeclContext(_ContextBase):
    """Context of ``plan_declaration_derive`` for one non-plan declaration."""

    def __init__(self, ws, name: str):
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
        return symbol(nid)

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
        self._ctx.error(summary, hint, span=self.value_span(param) or self.span, code=code)

    def warn_at(self, param: str, summary: str, hint: str = "", code: str = "suspicious") -> None:
        """Report a warning at the text of ``param`` (or at the block when it was defaulted); the
        plugin goes on."""
        self._ctx.ws.rep.warning(code, summary, self.value_span(param) or self.span, hint)

    def given(self, param: str) -> bool:
        """True when the user wrote ``param`` (not a default)."""
        a = self._ctx.ws.decls[self._ctx.name].uses.get(self.name, {})
        return param in a

    def value_span(self, param: str) -> Span | None:
        """Where the user wrote ``param``'s value (None when defaulted), for ``related``."""
        n = self._ctx.ws.nodes.get(f"{self._ctx.name}.{self.name}.{param}")
        return n.assign.value.span if n is not None and n.assign is not None and n.default is None else None


class ComputedView:
    """What :meth:`PlanContext.define_computed`'s procedure reads: values, and quantities as
    numeric functions of chosen inputs."""

    def __init__(self, ws, span, plugin):
        self._ws, self._span, self._plugin = ws, span, plugin

    def value(self, sym) -> float | None:
        """The nominal value of quantity ``sym`` in base units (None when it has none or does
        not exist)."""
        if sym.name not in self._ws.nodes:
            return None
        v = self._ws.value(sym.name)
        return None if v is None else float(v)

    def inputs(self, sym) -> frozenset:
        """The names of the input nodes quantity ``sym`` depends on (``h100_sxm.matmul_efficiency`` …)."""
        return frozenset(s.name for s in self._ws.full_expr(sym.name).free_symbols)

    def function(self, sym, inputs: list[str]):
        """Quantity ``sym`` as a function of the named inputs, every other input at its nominal
        value: ``f(*floats) -> float`` (base units).  The inputs it depends on become structural
        (a sweep over one re-evaluates the file).  An input it does not depend on is simply
        ignored by ``f``; :meth:`inputs` tells which.  Raises ``ValueError`` when a value it
        depends on is unknown."""
        from ..engine.piecewise import lambdify

        ws = self._ws
        e = ws.full_expr(sym.name)
        free = sorted(e.free_symbols, key=lambda s: s.name)
        wanted = set(inputs)
        rest, at = [s for s in free if s.name not in wanted], []
        for s in rest:
            v = ws.value(s.name)
            if v is None:
                raise ValueError(f"'{s.name}' has no value")
            at.append(float(v))
        if not ws.sealed:
            ws.structural.update(s.name for s in free)
        by = {s.name: s for s in free}
        args = [by.get(i, sp.Dummy(i)) for i in inputs]
        g = lambdify(args + rest, e, modules="math", cse=True)    # compiled once, called per step of a fit
        return lambda *x: float(g(*x, *at))

    def error(self, summary: str, hint: str = "", span: Span | None = None, code: str = "plugin") -> None:
        """Report an error of the procedure (at ``span``, default the plan's name)."""
        self._ws.rep.error(code, summary, span or self._span, hint)

    def warn(self, summary: str, hint: str = "", code: str = "suspicious") -> None:
        """Report a warning about the procedure's result (at the plan's name)."""
        self._ws.rep.warning(code, summary, self._span, hint)


class PlanContext(_ContextBase):
    """Context of ``plan_quantities_price`` / ``plan_activities_schedule`` for one plan."""

    def __init__(self, ws, name: str):
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
        return symbol(nid)

    def value(self, name: str, default=None):
        nid = f"{self.name}.{name}"
        if nid not in self.ws.nodes:
            return default
        self.ws.used.add(nid)
        return self.ws.python_value(nid)

    def stated(self, name: str) -> bool:
        """True when plan-level parameter ``name`` is written (in the plan or a plan it extends)
        or has a default — without reading its value, so the parameter stays a plain input
        (not structural: a sweep over it needs no re-evaluation)."""
        nid = f"{self.name}.{name}"
        if nid in self.ws.nodes:
            self.ws.used.add(nid)
            return True
        return False

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
        return symbol(nid)

    def define(self, name: str, expr, unit: str = "", doc: str = "", headline: bool = False,
               fallback: bool = False, rank: float | None = None, references: tuple = ()) -> sp.Symbol:
        """Add quantity ``name`` = ``expr`` (sympy, base units) displayed in ``unit``.

        ``fallback=True`` defines it only if no other plugin does (e.g. ``overhead = 0``
        without a checkpoint model).  A user's plan field of the same name overrides it (and
        defining a quantity under the name of a plan field marks that field for reports).
        ``headline`` quantities appear in ``plan eval``, sorted by ``rank`` (then by the
        block's order and definition order).  ``references`` are the sources of the formula,
        each naming the concept and, where the formula has one, its public source (paper,
        report, repository or measurement: "ZeRO communication volume: Rajbhandari et al.
        2020, 'ZeRO: …'"), never a book chapter, section or issue number
        (``tests/test_product_output.py`` checks the standard library); ``plan explain``,
        ``plan report`` and ``plan eval --sources`` show them, default output does not.
        """
        spec = self.ws.plugins.block_of(self._current_plugin)
        order = (rank if rank is not None else 1000 + (spec.order if spec else 100), len(self.ws.nodes))
        return self._define(f"{self.name}.{name}", name, expr, unit, doc, headline, fallback, order,
                            references)

    def define_random(self, name: str, expr, draw, args, unit: str = "", doc: str = "", headline: bool = False,
                      rank: float | None = None, references: tuple = ()) -> sp.Symbol:
        """Add quantity ``name`` that is a random variable of the plan — a realisation of a
        random process the plugin models (failures over a run), not a function of the inputs.

        ``expr`` (sympy, base units) is its expected value: what ``plan eval``, ``solve`` and
        sweeps read.  Sampling (``plan eval --samples``, :mod:`dsl.results.odds`) draws it
        instead: ``draw(rng, n, *arrays)`` returns ``n`` realisations (a float numpy array, base
        units) given ``rng`` (a numpy ``Generator`` seeded from the run's seed and this
        quantity's id) and one array of ``n`` samples of each expression in ``args`` (sympy,
        base units; evaluated at the same samples of the plan's uncertain inputs, so a random
        quantity follows them).  ``args`` must not read another random quantity.
        """
        sym = self.define(name, expr, unit, doc, headline=headline, rank=rank, references=references)
        n = self.ws.nodes.get(f"{self.name}.{name}")
        if n is not None and n.kind == "quantity":
            n.sampler = (draw, tuple(as_expr(a) for a in args))
        return sym

    def define_computed(self, name: str, reads, compute, unit: str = "", doc: str = "", headline: bool = False,
                        rank: float | None = None, references: tuple = ()) -> sp.Symbol:
        """Add quantity ``name`` whose value a numeric procedure of the plugin computes from other
        quantities (a least-squares fit, a root the procedure finds) — the one kind of quantity
        that is not a sympy expression of its inputs.

        :param reads: sympy symbols of the quantities ``compute`` reads (this plan's or other
            plans' — ``symbol("run_a.step_time")``); they are its edges in the dependency graph, so
            a quantity that reads back this one is a cycle.
        :param compute: ``compute(view) -> float`` (base units), called at most once, after every
            quantity in ``reads`` has its value; ``view`` is a :class:`ComputedView`.  It may
            return ``(value, detail)``: the evaluation keeps ``detail`` (any object) for the
            plugin's tables (``Evaluation.computed_detail(node_id)``).  It may call
            ``view.error(…)`` to report a located error; the value is then unknown.
        :returns: the quantity's symbol.

        The value is a constant of the evaluation: ``solve``, sensitivities and explanations see
        a number (its derivative with respect to every input is zero); the inputs its reads
        depend on are marked structural, so a sweep over one of them re-evaluates the file and
        computes it again.  ``unit``, ``doc``, ``headline``, ``rank`` and ``references`` as in
        :meth:`define`."""
        from ..engine.deferred import DeferredExpr, NotReady, defer

        ws, cell = self.ws, {}
        span = self.info.ast.name_span
        plugin = self._current_plugin

        nid = f"{self.name}.{name}"

        plans = {as_expr(r).name.split(".", 1)[0] for r in reads}

        def value(_values=None):
            # the quantities read are final once their plans' timelines are scheduled (before,
            # a makespan is a placeholder): asked earlier (a range check), the value waits
            if not ws.sealed and any(k[0] in plans and k not in ws.timelines_done for k in ws.timelines):
                ws.computed_early = True
                raise NotReady()
            if "v" not in cell:
                v = compute(ComputedView(ws, span, plugin))
                if isinstance(v, tuple):       # (value, detail): the detail for the plugin's tables
                    v, ws.computed_details[nid] = v
                cell["v"] = None if v is None else (sp.Float(float(v), 17) if float(v) != 0 else sp.Integer(0))
            return cell["v"]

        placeholder = sp.Dummy(name)
        out = self.define(name, placeholder, unit, doc, headline, rank=rank, references=references)
        n = ws.nodes.get(f"{self.name}.{name}")
        if n is not None and n.__dict__.get("expr") is placeholder:
            defer(n, "expr", DeferredExpr(lambda: sp.nan if (v := value()) is None else v,
                                          frozenset(as_expr(r) for r in reads), value))
        return out

    def require(self, name: str, lhs, op: str, rhs, unit: str = "", doc: str = "") -> None:
        """Declare requirement ``lhs op rhs`` (op in ``<=``, ``>=``, ``<``, ``>``, ``==``)."""
        self.ws.requirements.append(Requirement(self.name, name, as_expr(lhs), op, as_expr(rhs),
                                                unit, doc, self._current_plugin or ""))

    def required(self, name: str) -> bool:
        """True when this plan already has requirement ``name`` (a plugin that ran earlier
        declared it), so that blocks sharing one check declare it once."""
        return any(r.plan == self.name and r.name == name for r in self.ws.requirements)

    def defined(self, name: str) -> bool:
        """True when plan quantity or field ``name`` already exists (priced by a plugin that ran
        earlier, or written in the plan); prefer :meth:`provided`, which does not depend on order."""
        return f"{self.name}.{name}" in self.ws.nodes

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

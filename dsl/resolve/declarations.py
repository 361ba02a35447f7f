"""Declarations: kinds, `extends` merges, `from "config.json"` imports, plans and their
blocks' defaults and parameter specs; plugins price each plan here.
"""
from __future__ import annotations

import json
from pathlib import Path


from ..syntax import ast as A
from ..syntax.diagnostics import Diagnostic, Span, did_you_mean, display_path, remember_source
from ..syntax.parser import parse_expression
from ..plugin.records import Param
from ..engine.units import describe_dim
from ..plugin.context import DeclContext, PlanContext
from .expr import display_unit, is_number
from ..syntax.format import require_text
from ..engine.nodes import Cycle, DeclInfo, Fail, Node, Requirement


# the one declaration kind the core knows; plugins register the others (model, device …)
CORE_KINDS = {"plan": "a design priced by `use` blocks"}

def requirement_slug(r: A.Require) -> str:
    """Default name of an unnamed `require`: its text as an identifier
    (`finish_time <= workload.deadline` -> ``finish_time_le_workload_deadline``)."""
    import re

    from dsl.syntax.format import format_expr
    op = {"<=": "le", ">=": "ge", "<": "lt", ">": "gt", "==": "eq"}[r.op]
    raw = f"{format_expr(r.lhs)} {op} {format_expr(r.rhs)}"
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9]+", "_", raw)).strip("_")[:60] or "requirement"



class DeclarationsMixin:
    """Declarations, `extends`, config imports and plan pricing."""

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
        # a list where a count is expected is an error at the list, before a plugin reads it
        self.check_written_kinds(n for n, info in self.decls.items() if info.kind != "plan")
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
                               "a declaration cannot extend itself, directly or indirectly"
                               + (f"; `{d.kind} {d.name} extends {d.name}` overrides an entry of another "
                                  "file, so import the file (the catalog) that declares it"
                                  if d.extends == d.name else ""))
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
        from ..engine import safeio
        from .expr import json_depth

        def bad(code, summary, span, hint="", related=()):
            """An error about this declaration's config: reported, and confined to it (other
            declarations and the plans that do not use it still evaluate)."""
            self.contained.append(Diagnostic("error", code, summary, span, hint, tuple(related)))
            self.broken.add(d.name)

        path = self._import_path(Path(d.span.file).resolve().parent, d.source)
        try:
            raw = safeio.read_text(path, what="config file", display=d.source, remember=False)
            if json_depth(raw) > 100:
                raise RecursionError()
            cfg = json.loads(raw)
        except safeio.FileRefused as e:
            if e.kind == "missing":
                bad("missing-import", f"config file '{d.source}' does not exist", d.source_span,
                               f"paths are relative to the .plan file (looked for {path})")
            else:
                bad(e.code if e.kind != "encoding" else "bad-config", e.summary, d.source_span, e.hint)
            return {}
        except json.JSONDecodeError as e:
            bad("bad-config", f"config file '{d.source}' is not valid JSON: {e.msg} "
                           f"(line {e.lineno}, column {e.colno})", d.source_span, "fix the JSON file")
            return {}
        except (RecursionError, ValueError) as e:   # nesting too deep, numbers too long
            bad("bad-config", f"config file '{d.source}' cannot be read as JSON: "
                           f"{'nested too deeply' if isinstance(e, RecursionError) else e}", d.source_span,
                           "a Hugging Face config.json is a flat object of numbers and strings")
            return {}
        if not isinstance(cfg, dict):
            bad("bad-config", f"config file '{d.source}' holds a JSON "
                           f"{type(cfg).__name__ if cfg is not None else 'null'}, not an object", d.source_span,
                           "a Hugging Face config.json is an object {\"key\": value, …}")
            return {}
        try:
            mapped = self.plugins.config_import(d.kind, cfg, str(path))
            if mapped is not None:
                mapped = dict(mapped)
                notes = mapped.pop("__warnings__", ((), None))[0]
        except (ValueError, KeyError, TypeError, ArithmeticError) as e:
            msg = str(e) if isinstance(e, ValueError) else f"missing key {e} in '{d.source}'" \
                if isinstance(e, KeyError) else f"config file '{d.source}' has a value of the wrong type or size: {e}"
            key = getattr(e, "key", None)     # the key a plugin's error is about, located in the file
            at = _key_span(raw, key, display_path(path)) if isinstance(key, str) else None
            bad("bad-config", msg, d.source_span, f"fix the key in {d.source}, or describe the model by its fields"
                if at else "describe the model by its fields instead", ((f"'{key}' is set", at),) if at else ())
            return {}
        if mapped is None:
            bad("bad-config", f"no plugin understands '{d.source}' as a {d.kind}", d.source_span,
                           "supported: Hugging Face config.json of the families in docs/models.md")
            return {}
        for w in notes:
            self.rep.warning("config", str(w), d.source_span,
                             "check the count against the model card; set the field by hand to override")
        out = {}
        sp_ = d.source_span
        for k, (val, unit) in mapped.items():
            if isinstance(val, bool):
                e = A.Bool(val, sp_)
            elif isinstance(val, str) and not is_number(val):
                e = A.String(val, sp_)
            else:
                e = A.Number(str(val), unit or None, sp_)
            out[k] = A.Assign(k, e, sp_, sp_)
        return out

    # ------------------------------------------------------------ plans
    def _drop_users_of_broken(self) -> None:
        """Plans that name a declaration whose config could not be read are not evaluated (an
        error at the plan, confined like the config's); the other plans still are."""
        def refs(x, seen=0):
            if isinstance(x, A.Ref):
                yield x.parts[0]
            elif seen < 60 and hasattr(x, "__dataclass_fields__"):
                for k in x.__dataclass_fields__:
                    yield from refs(getattr(x, k), seen + 1)
            elif seen < 60 and isinstance(x, (tuple, list)):
                for y in x:
                    yield from refs(y, seen + 1)

        dropped: dict = {}                  # plans already dropped, for plans that extend them
        changed = True
        while changed and self.broken:
            changed = False
            for name, info in list(self.decls.items()):
                if name in self.broken:
                    continue
                if info.kind != "plan":
                    if set(info.parents) & self.broken:     # `model b extends a` of a broken a
                        self.broken.add(name)
                        changed = True
                    continue
                assigns = list(info.fields.values()) + [a for ps in info.uses.values() for a in ps.values()]
                bad = sorted({r for a in assigns for r in refs(a.value) if r in self.broken}
                             | ({info.parents[0]} & self.broken if info.parents else set()))
                if not bad:
                    continue
                what = self.decls.get(bad[0]) or dropped[bad[0]]
                if bad[0] in dropped:         # the parent plan (or a plan it names) was dropped first
                    summary = (f"plan '{name}' is not evaluated: it builds on plan '{bad[0]}', which is not "
                               "evaluated either")
                    hint = f"fix what stops '{bad[0]}' (the errors above)"
                else:
                    summary = (f"plan '{name}' is not evaluated: it uses {what.kind} '{bad[0]}', whose config "
                               "could not be read")
                    hint = f"fix the config of '{bad[0]}' (the error at its `from`), or describe it by its fields"
                self.contained.append(Diagnostic("error", "bad-config", summary, info.ast.name_span, hint,
                                                 ((f"'{bad[0]}' is declared here", what.ast.name_span),)))
                self.broken.add(name)
                changed = True
                dropped[name] = info
                del self.decls[name]
                for nid in [n for n, node in self.nodes.items() if node.owner == name]:
                    del self.nodes[nid]

    def _plans(self) -> None:
        self._drop_users_of_broken()
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
        # block and plan parameters of the kind their specs take, before any plugin reads one
        self.check_written_kinds(n for n, info in self.decls.items() if info.kind == "plan")
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

    def _named_solves(self) -> None:
        """The root file's `solve NAME: …` names (unique, not a declaration's name) and its
        file-level `require`s: built in global scope, where a bare solve name stands for that
        solve's answer (a symbol in the target's dimension; its value is known after solving)."""
        from ..engine.nodes import Val, answer_symbol
        mod = self.modules[0] if self.modules else None
        self.solve_names: dict[str, A.Query] = {}
        self.file_requirements: list[Requirement] = []
        self._answer_vals: dict = {}
        if mod is None:
            return
        # plans left out (`plan eval --plan`), and declarations an error already stopped (a config
        # that could not be read, the plans that use it): a query about them is not reported again
        skipped = frozenset(getattr(self, "skipped_plans", frozenset())) | frozenset(self.broken)

        def reads_skipped(x) -> bool:
            return bool(skipped) and any(h in skipped for h in A.ref_heads(x))
        if skipped:   # `plan solve` asks only the queries about plans that were evaluated
            self.queries = tuple(q for q in self.queries if not reads_skipped(q))
        for q in mod.queries:
            if reads_skipped(q):
                continue   # about a plan left out or already stopped by an error
            start = len(self.rep.items)
            try:   # the names a query reads are used (no "unused" warning); a named one must be sound
                lhs = self._num(self._eval(q.lhs, None, None), q.lhs)
                rhs = self._num(self._eval(q.rhs, None, None), q.rhs)
                if lhs.dim != rhs.dim and q.name is not None:
                    self.rep.error("unit-mismatch", f"solve '{q.name}': the two sides are in "
                                   f"{describe_dim(lhs.dim)} and {describe_dim(rhs.dim)}", q.span,
                                   "compare quantities of the same dimension")
            except (Fail, Cycle):
                pass
            if q.name is None:
                self.rep.truncate(start)    # `plan solve` reports an unnamed query's problems
                continue
            if q.name in self.decls:
                self.rep.error("duplicate", f"solve '{q.name}' has the name of a declaration", q.name_span,
                               "give the solve another name", related=(("declared here",
                                                                        self.decls[q.name].ast.name_span),))
                continue
            if q.name in self.solve_names:
                self.rep.error("duplicate", f"solve '{q.name}' is declared twice", q.name_span,
                               "give each named solve its own name",
                               related=(("first declared", self.solve_names[q.name].name_span),))
                continue
            self.solve_names[q.name] = q
            try:
                t = self._resolve(q.target.parts, None, q.target.span)
            except Fail:
                continue
            n = self.build(t) if isinstance(t, str) else None
            if n is not None and n.state != 3 and n.numeric:
                self._answer_vals[q.name] = Val(answer_symbol(q.name), n.dim)
        seen: dict[str, A.Require] = {}
        for r in mod.requires:
            if reads_skipped(r) or any(h in self.solve_name_set and h not in self.solve_names
                                       for h in A.ref_heads(r)):
                continue   # reads a plan left out or stopped, or a solve about one
            name = r.name or requirement_slug(r)
            if name in seen or name in self.solve_names or name in self.decls:
                what = ("another file-level requirement" if name in seen else
                        "a named solve" if name in self.solve_names else "a declaration")
                self.rep.error("duplicate", f"requirement '{name}' has the name of {what}", r.name_span or r.span,
                               "give each `require` its own name: `require NAME: …`")
                continue
            seen[name] = r
            sides = self._requirement_sides(name, r, None)
            if sides is None:
                continue
            lhs, rhs = sides
            answers = tuple(sorted(n for n, v in self._answer_vals.items()
                                   if v.expr in (lhs.expr.free_symbols | rhs.expr.free_symbols)))
            unit = display_unit(r.lhs, lhs.dim)
            if isinstance(r.lhs, A.Ref) and len(r.lhs.parts) == 1 and r.lhs.parts[0] in self._answer_vals:
                t = self._resolve(self.solve_names[r.lhs.parts[0]].target.parts, None, r.lhs.span)
                unit = self.nodes[t].unit or unit
            elif isinstance(r.lhs, A.Ref):
                try:
                    t = self._resolve(r.lhs.parts, None, r.lhs.span)
                    if isinstance(t, str) and self.nodes[t].unit:
                        unit = self.nodes[t].unit
                except Fail:
                    pass
            self.file_requirements.append(Requirement(None, name, lhs.expr, r.op, rhs.expr, unit, require_text(r),
                                                      "file", r.span, require_text(r), answers))

    def _requirement_sides(self, name: str, r, scope):
        """Both sides of `require` ``r`` built in ``scope`` (None: file level), or None after a
        reported error (a failed side, or sides of different dimensions)."""
        try:
            lhs = self._num(self._eval(r.lhs, scope, None), r.lhs)
            rhs = self._num(self._eval(r.rhs, scope, None), r.rhs)
        except (Fail, Cycle):
            return None
        if lhs.dim != rhs.dim:
            self.rep.error("unit-mismatch", f"requirement '{name}' compares {describe_dim(lhs.dim)} with "
                           f"{describe_dim(rhs.dim)}", r.span, "both sides of a requirement need the same dimension")
            return None
        return lhs, rhs

    def _user_requirements(self, info: DeclInfo) -> None:
        """`require [NAME:] LHS op RHS` of a plan (inherited through `extends`): both sides are
        built in the plan's scope (plugin quantities included) and must share a dimension."""
        taken = {r.name for r in self.requirements if r.plan == info.name}
        scope = (info.name, None)
        for name, r in info.requires.items():
            sides = self._requirement_sides(name, r, scope)
            if sides is None:
                continue
            lhs, rhs = sides
            if name in taken:
                self.rep.error("duplicate", f"plan '{info.name}' already has a requirement '{name}' (from a "
                               "plugin)", r.name_span or r.span, "choose another name: `require NAME: …`")
                continue
            unit = display_unit(r.lhs, lhs.dim)
            if isinstance(r.lhs, A.Ref):
                try:
                    t = self._resolve(r.lhs.parts, scope, r.lhs.span)
                    if isinstance(t, str) and self.nodes[t].unit:
                        unit = self.nodes[t].unit
                except Fail:
                    pass
            self.requirements.append(Requirement(info.name, name, lhs.expr, r.op, rhs.expr, unit,
                                                 require_text(r), "plan", r.span, require_text(r)))

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
                prev = plan_params.get(p.name)
                # required wins: a plan parameter is optional only when every block reading it says so
                if prev is None or (prev.optional and prev.default is None and not p.optional):
                    plan_params[p.name] = p
        for pname, p in plan_params.items():
            nid = f"{info.name}.{pname}"
            if pname in info.fields:
                self._register_spec(nid, p)
                continue
            if p.default is None and p.optional:
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


def _key_span(raw: str, key: str, file: str) -> Span | None:
    """Where ``"key":`` is written in the JSON text ``raw`` (shown as ``file``), when it is
    written exactly once (a key repeated in nested objects is not located); the text is then
    remembered, so the diagnostic quotes that line."""
    import itertools
    import re
    hits = list(itertools.islice(re.finditer(r'"' + re.escape(key) + r'"\s*:', raw), 2))
    if len(hits) != 1:
        return None
    start = hits[0].start()
    line = raw.count("\n", 0, start) + 1
    col = start - (raw.rfind("\n", 0, start) + 1) + 1
    remember_source(file, raw)
    return Span(file, line, col, line, col + len(key) + 2)

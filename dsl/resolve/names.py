"""Name resolution: dotted references (`plan.field`, `decl.field`, `plan.block.param`) to node ids.
"""
from __future__ import annotations

from typing import Any


from ..syntax.diagnostics import PlanError, Span, did_you_mean, remember_source
from ..engine.nodes import BlockRef, DeclRef, Fail


class NamesMixin:
    """Resolves dotted names in a scope to node ids, declarations or blocks."""

    def _fail(self, code: str, summary: str, span: Span, hint: str = "", related=()):
        """Report a name that does not resolve, once per place: a field a plan inherits is resolved
        again in every plan that extends it, and the same text at the same place is one mistake
        (the first report names the plan that declares it)."""
        if span is None or not self.rep.has_error_at(code, span):
            self.rep.error(code, summary, span, hint, related)
        raise Fail()

    def _block_failed(self, plan: str, name: str) -> bool:
        """A block plan ``plan`` uses provides ``name``, and an error was already reported inside
        the plan (or at one of its blocks), or inside a plan it extends (whose fields and blocks it
        inherits), or one elsewhere stopped the pricing before the plan was priced: the missing
        name is a consequence of that error, not one of its own."""
        info = self.decls[plan]
        if not any(name in spec.provides and spec.name in info.uses for spec in self.plugins.blocks.values()):
            return False
        spans = [info.ast.span, *info.use_spans.values()]
        for anc in info.parents:
            a = self.decls.get(anc)
            if a is not None:
                spans += [a.ast.span, *a.use_spans.values()]
        if any(e.span is not None and any(e.span.file == s.file and s.line <= e.span.line <= s.end_line
                                          for s in spans) for e in self.rep.errors):
            return True
        # an error elsewhere stopped the pricing before this plan: none of its quantities is a
        # plugin's yet, so a name its blocks provide is missing because of that error
        pre = plan + "."
        return bool(self.rep.errors) and not any(n.startswith(pre) and self.nodes[n].plugin for n in self.nodes)

    def _resolve(self, parts: tuple[str, ...], scope, span: Span):
        if len(parts) >= 2 and parts[0] in getattr(self, "aliases", {}) and parts[0] not in self.decls:
            parts = (f"{parts[0]}.{parts[1]}",) + tuple(parts[2:])   # `hw.b200` names an imported entry
            if parts[0] not in self.decls:
                ns = parts[0].split(".")[0]
                cands = [n[len(ns) + 1:] for n in self.decls if n.startswith(ns + ".")]
                guess = did_you_mean(parts[0][len(ns) + 1:], cands)
                self._fail("unknown-name", f"'{ns}' (an imported file) declares no '{parts[0][len(ns) + 1:]}'", span,
                           f"did you mean '{ns}.{guess}'?" if guess else "declarations: " + ", ".join(sorted(cands)[:12]))
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
            if owner is None and len(parts) == 1 and not guess:
                holders = [n.owner for n in self.nodes.values() if n.name == first and n.id == f"{n.owner}.{first}"
                           and self.decls[n.owner].kind == "plan"]
                if holders:
                    hint = (f"did you mean '{holders[0]}.{first}'? ('{first}' is a quantity of plan"
                            f"{'s' if len(holders) > 1 else ''} {', '.join(holders[:6])}"
                            f"{', …' if len(holders) > 6 else ''}: name it with its plan)")
            if first in getattr(self, "solve_name_set", ()):
                hint = (f"'{first}' is the answer of a named solve: read it in a file-level `require` "
                        "(outside any plan), e.g. `require " + first + " <= …`")
            self._fail("unknown-name", f"unknown name '{first}'{where}", span,
                       hint or (f"did you mean '{guess}'?" if guess else "declare it or import the file that does"))
        for part in parts[1:]:
            if isinstance(target, str):
                node = self.build(target)
                if node is None or node.state == 3:
                    raise Fail()
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
                    cands = [n[len(d) + 1:] for n in self.nodes if n.startswith(d + ".") and "." not in n[len(d) + 1:]]
                    cands += list(self.decls[d].uses)
                    guess = did_you_mean(part, cands)
                    if target.kind == "plan" and self._block_failed(d, part):
                        raise Fail()   # a block of the plan stopped at its own (reported) error: no cascade
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

    def resolve(self, parts: tuple[str, ...], span: Span):
        """Resolve dotted ``parts`` in global scope: a node id (str), a declaration or a block.

        :raises PlanError: with the diagnostics of this name only (the workspace is unchanged).
        """
        start = len(self.rep.items)
        try:
            return self._resolve(parts, None, span)
        except Fail:
            self._raise_since(start)

    def lookup(self, dotted: str) -> str:
        """Node id for a dotted name given on the command line (``plan.quantity``)."""
        parts = tuple(dotted.split("."))
        span = Span("<command line>", 1, 1, 1, len(dotted) + 1)
        remember_source("<command line>", dotted)
        start = len(self.rep.items)
        try:
            t = self._resolve(parts, None, span)
        except Fail:
            self._raise_since(start)
        if not isinstance(t, str):
            self.rep.error("type", f"'{dotted}' is a declaration or block, not a quantity", None,
                           "name a field or quantity, e.g. plan.step_time")
            self._raise_since(start)
        return t

    def _raise_since(self, start: int):
        """Raise the diagnostics reported since ``start`` and forget them, so a failed query
        leaves the loaded workspace as it was."""
        raise PlanError(self.rep.truncate(start))

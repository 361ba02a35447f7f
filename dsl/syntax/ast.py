"""Typed AST of the `.plan` language.

Every node is a frozen dataclass carrying the :class:`~dsl.syntax.diagnostics.Span` it came
from, so every later pass can point at the offending text.
"""
from __future__ import annotations

from dataclasses import dataclass

from dsl.syntax.diagnostics import Span


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Number:
    text: str            # as written, e.g. "165.2" or "100e9"
    unit: str | None     # unit expression as written, e.g. "TFLOP/s"
    span: Span


@dataclass(frozen=True)
class Ref:
    parts: tuple[str, ...]  # `a.b.c` -> ("a", "b", "c")
    span: Span

    @property
    def dotted(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class String:
    value: str
    span: Span


@dataclass(frozen=True)
class Bool:
    value: bool
    span: Span


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * / ^
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True)
class Neg:
    operand: "Expr"
    span: Span


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple["Expr", ...]
    span: Span
    func_span: Span


@dataclass(frozen=True)
class List:
    """`[a, b, c]`: a list of values (layer splits, slot orders, sequence lengths)."""

    items: tuple["Expr", ...]
    span: Span


Expr = Number | Ref | String | Bool | BinOp | Neg | Call | List


# ---------------------------------------------------------------- statements
@dataclass(frozen=True)
class Assign:
    name: str
    value: Expr
    span: Span        # the whole `name = value`
    name_span: Span
    range: tuple["Expr", "Expr"] | None = None   # `in [lo, hi]`
    source: str | None = None                    # `source "Llama 3 report, Table 4"`
    range_span: Span | None = None
    source_span: Span | None = None


@dataclass(frozen=True)
class Require:
    """`require [NAME:] LHS op RHS` inside a declaration body."""

    name: str | None
    lhs: Expr
    op: str
    rhs: Expr
    span: Span
    name_span: Span | None = None


@dataclass(frozen=True)
class UseBlock:
    plugin: str
    assigns: tuple[Assign, ...]
    span: Span
    name_span: Span


@dataclass(frozen=True)
class Decl:
    kind: str
    name: str
    extends: str | None
    source: str | None            # `from "config.json"`
    assigns: tuple[Assign, ...]
    uses: tuple[UseBlock, ...]
    span: Span
    kind_span: Span
    name_span: Span
    extends_span: Span | None = None
    source_span: Span | None = None
    requires: tuple[Require, ...] = ()


@dataclass(frozen=True)
class Import:
    path: str
    span: Span
    alias: str | None = None        # `import "…" as hw`
    alias_span: Span | None = None


@dataclass(frozen=True)
class Query:
    """`solve [NAME:] TARGET for LHS op RHS` (``name`` makes the answer a result)."""

    target: Ref
    lhs: Expr
    op: str
    rhs: Expr
    span: Span
    name: str | None = None
    name_span: Span | None = None


@dataclass(frozen=True)
class Module:
    file: str
    imports: tuple[Import, ...]
    decls: tuple[Decl, ...]
    queries: tuple[Query, ...]
    requires: tuple[Require, ...] = ()   # file-level `require` (gates on named solves)


def ref_heads(node):
    """The first name of every reference inside an AST node (a declaration, a statement, an
    expression, a list of them), in no particular order: the declarations it reads."""
    from dataclasses import fields, is_dataclass
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, Ref):
            yield x.parts[0]
        elif isinstance(x, (tuple, list)):
            stack.extend(x)
        elif is_dataclass(x) and not isinstance(x, type):
            stack.extend(getattr(x, f.name) for f in fields(x) if f.name not in ("span", "name_span"))


def map_refs(node, fn):
    """A copy of AST ``node`` (a module, declaration, statement, expression or a tuple of them)
    with every :class:`Ref` replaced by ``fn(ref)``."""
    from dataclasses import fields, is_dataclass, replace
    if isinstance(node, Ref):
        return fn(node)
    if isinstance(node, tuple):
        return tuple(map_refs(x, fn) for x in node)
    if isinstance(node, list):
        return [map_refs(x, fn) for x in node]
    if is_dataclass(node) and not isinstance(node, type) and not isinstance(node, Span):
        changes = {}
        for f in fields(node):
            v = getattr(node, f.name)
            if isinstance(v, (tuple, list)) or (is_dataclass(v) and not isinstance(v, Span)):
                nv = map_refs(v, fn)
                if nv is not v:
                    changes[f.name] = nv
        return replace(node, **changes) if changes else node
    return node


def namespaced(module: "Module", alias: str) -> "Module":
    """``module`` as imported with ``import "…" as ALIAS``: each declaration named
    ``ALIAS.NAME``, and each reference to one of them (``extends`` included) rewritten, so that the
    file reads its own names as before while the importer writes ``ALIAS.NAME``."""
    from dataclasses import replace
    own = {d.name for d in module.decls}

    def fn(r: Ref) -> Ref:
        return Ref((f"{alias}.{r.parts[0]}",) + r.parts[1:], r.span) if r.parts[0] in own else r
    decls = []
    for d in module.decls:
        d2 = map_refs(d, fn)
        decls.append(replace(d2, name=f"{alias}.{d.name}",
                             extends=f"{alias}.{d.extends}" if d.extends in own else d.extends))
    return replace(module, decls=tuple(decls))

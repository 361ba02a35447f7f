"""Values and nodes of the quantity graph: the data every stage after resolution shares.

A node is a field, a plugin quantity or an activity; its *local* sympy expression has the
ids of the nodes it depends on as free symbols (:func:`symbol`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import sympy as sp

from ..syntax import ast as A
from ..syntax.diagnostics import Span
from .deferred import DeferredAttr, deferred
from .units import Dim


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
    references: tuple = ()       # where a plugin's formula comes from (concept and public source); shown on request
    dist: Any = None             # an uncertain input's distribution (dsl.engine.distributions.Dist), or None
    sampler: Any = None          # a random quantity's (draw, argument expressions): dsl.plugin.context.define_random

    @property
    def numeric(self) -> bool:
        return self.value is None and (deferred(self, "expr") is not None or self.expr is not None)

    def seal(self) -> None:
        """Make the node read-only (it becomes a :class:`SealedNode`).  Nodes are built by the
        hundred thousand on long timelines, so an unsealed node has no ``__setattr__`` of its
        own to slow its construction."""
        self.__dict__["_sealed"] = True
        self.__class__ = SealedNode


# a makespan's exact expression may be left to be built on first read (dsl.engine.deferred)
Node.expr = DeferredAttr("expr")


class SealedNode(Node):
    """A :class:`Node` after evaluation: setting an attribute raises ``AttributeError``."""

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"node '{self.id}' is read-only after evaluation")


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
    answers: tuple = ()          # a file-level `require`: the named solves it reads


def answer_symbol(name: str) -> sp.Symbol:
    """The placeholder of named solve ``name``'s answer inside a file-level requirement (never a
    node id: ``solve:`` cannot start a name of the language)."""
    return symbol("solve:" + name)


class Abort(Exception):
    """Raised inside a plugin context to stop pricing one plugin after an error."""


_SYMBOLS: dict[str, sp.Symbol] = {}   # a pure memo: equal ids give equal (immutable) symbols


def symbol(node_id: str) -> sp.Symbol:
    """The sympy symbol (real) of node ``node_id`` (``plan.quantity``): the free symbols of every
    local expression are these, so a plugin refers to another quantity by ``symbol(id)``."""
    s = _SYMBOLS.get(node_id)
    if s is None:
        s = _SYMBOLS[node_id] = sp.Symbol(node_id, real=True)
    return s


def as_expr(x):
    """A sympy expression from a plugin's value: sympy objects pass, Python numbers become
    exact numbers; anything else (a string in particular) is refused — user text never
    reaches sympy's parser."""
    if isinstance(x, sp.Basic):
        return x
    if isinstance(x, bool) or not isinstance(x, (int, float, Fraction)):
        raise TypeError(f"expected a sympy expression or a number, got {type(x).__name__}")
    return sp.Float(x) if isinstance(x, float) else sp.Rational(x.numerator, x.denominator)


def rational(fr: Fraction) -> sp.Rational:
    return sp.Rational(fr.numerator, fr.denominator)


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

    def __setattr__(self, name: str, value) -> None:
        if self.__dict__.get("_sealed"):
            raise AttributeError(f"declaration '{self.name}' is read-only after evaluation")
        object.__setattr__(self, name, value)


class Fail(Exception):
    pass


class Cycle(Exception):
    pass


HUGE = sp.Integer(10) ** 300

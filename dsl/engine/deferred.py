"""Expressions built on first use: a node's value is known long before anyone reads its form.

The exact max-plus makespan of a small timeline is a ``Max`` over dozens of path sums;
sympy's canonical argument order for it costs far more than the number it stands for.
``plan eval`` needs only the number and the expression's free symbols (the edges of the
dependency graph); ``solve``, sensitivities, ``plan explain`` and reports need the expression
itself.  A :class:`DeferredExpr` carries the free symbols and an exact evaluator now and builds
the expression on the first read of the attribute it stands in (:func:`defer`), so the two
uses see the same object and the same number.
"""
from __future__ import annotations


class NotReady(Exception):
    """Raised by a :class:`DeferredExpr`'s exact evaluator when its value cannot be known yet
    (a computed quantity asked for before the timelines are scheduled): the value is unknown
    for now and must not be cached."""


class DeferredExpr:
    """A sympy expression built on first use.

    :param build: ``() -> sympy expression``, called at most once (:meth:`get`).
    :param free_symbols: the built expression's free symbols (a frozenset of sympy Symbols),
        known without building it.
    :param exact: ``(values) -> sympy Rational | None``: the expression's value at ``values``
        (a dict Symbol -> sympy number covering :attr:`free_symbols`), exactly as
        ``subs_numbers`` would compute it on the built expression, or None when it cannot
        tell cheaply (the caller then builds the expression and evaluates that).
    """

    __slots__ = ("_build", "_expr", "free_symbols", "_exact")

    def __init__(self, build, free_symbols: frozenset, exact=None):
        self._build, self._expr = build, None
        self.free_symbols, self._exact = free_symbols, exact

    def get(self):
        """The expression (built on the first call, the same object afterwards)."""
        if self._build is not None:
            self._expr, self._build = self._build(), None
        return self._expr

    def exact(self, values: dict):
        """Exact value at ``values`` (see the class docstring), or None."""
        return None if self._exact is None else self._exact(values)


class DeferredAttr:
    """A non-data descriptor for a dataclass attribute that :func:`defer` may leave unbuilt.

    An instance's own ``__dict__`` entry wins (the ordinary, eager case costs nothing); a
    deferred instance has no entry, so the first read lands here, builds the expression and
    stores it (also on a sealed, read-only node)."""

    def __init__(self, name: str):
        self.name, self.key = name, "_deferred_" + name

    def __get__(self, obj, cls=None):
        if obj is None:
            return None                     # the dataclass default
        d = obj.__dict__.pop(self.key, None)
        v = None if d is None else d.get()
        obj.__dict__[self.name] = v
        return v


def defer(obj, name: str, d: DeferredExpr) -> None:
    """Make ``obj.name`` (a :class:`DeferredAttr`) the expression ``d`` builds on first read."""
    obj.__dict__.pop(name, None)
    obj.__dict__["_deferred_" + name] = d


def deferred(obj, name: str) -> DeferredExpr | None:
    """The :class:`DeferredExpr` ``obj.name`` still waits for, or None once built (or eager)."""
    return obj.__dict__.get("_deferred_" + name)

"""The answer of a break-even query: the :class:`Solution` record (and its JSON form), and the
readable closed form of a symbolic answer — tidied (factored, collected), judged too long
before sympy builds it, written in terms of the nodes between the target and the equation.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from dsl.results.roots import numer_poly


@dataclass
class Solution:
    query: str
    target: str
    unit: str
    value: float | None          # base units
    nominal: float | None
    method: str                  # symbolic | numeric | none
    symbolic: str | None
    holds: str | None            # for inequalities: "target >= boundary" …
    note: str = ""
    feasible: bool = True        # False when the answer lies outside the target's allowed range
    roots: list = None           # every boundary found (base units), sorted
    intervals: list = None       # for inequalities: [(lo, hi)] where the relation holds (None = unbounded)
    name: str | None = None      # `solve NAME: …`
    whole: float | None = None   # a whole-number target: the whole number that answers (base units)
    whole_only: bool = False     # the target is a whole number: only ``whole`` answers

    @property
    def answer(self) -> float | None:
        """The answer as a result (base units): for a whole-number target the whole number
        (the nearest one past the boundary where the relation and the plan's whole-number
        requirements hold; None when there is none), else the boundary ``value``."""
        return self.whole if self.whole is not None or self.whole_only else self.value

    def to_json(self) -> dict:
        """``value``/``nominal``/``answer`` in ``unit`` (as ``plan eval`` shows), ``*_si`` in base
        units; ``symbolic`` is in base units."""
        from dsl.engine.units import convert
        conv = (lambda v: None if v is None else convert(v, self.unit))
        return {"name": self.name, "answer": conv(self.answer), "answer_si": self.answer,
                "whole": conv(self.whole), "whole_si": self.whole,
                "query": self.query, "target": self.target, "unit": self.unit, "value": conv(self.value),
                "si": self.value, "nominal": conv(self.nominal), "nominal_si": self.nominal,
                "method": self.method, "symbolic": self.symbolic, "holds": self.holds, "note": self.note,
                "feasible": self.feasible, "roots": [conv(r) for r in (self.roots or [])],
                "intervals": [[conv(a), conv(b)] for a, b in (self.intervals or [])]}


TEXT_MAX = 600      # a readable answer longer than this is not shown


def long_closed_form(e, x, limit: int) -> bool:
    """True when the closed-form roots of ``e = 0`` in ``x`` would be too long to show, judged
    before sympy builds them: the numerator is a polynomial of degree n ≥ 2 in ``x`` and n times
    the length of the names its coefficients use exceeds ``limit`` (each of the n roots names
    them; the two roots of the GPU-count quadratic over 16 inputs run to 18,000 characters
    each, and building them takes sympy seconds)."""
    try:
        _, _, p = numer_poly(e, x)
    except sp.PolynomialError:
        return False
    if p.degree() < 2:
        return False
    names = {s.name for c in p.all_coeffs() for s in c.free_symbols}
    return p.degree() * sum(map(len, names)) > limit


_FACTORED: dict = {}     # expression -> sympy.factor(expression): the same sub-sums recur


def _factor(x):
    """``sympy.factor(x)``, remembered (a pure function of ``x``; a readable answer factors the
    same sub-sums again — ``overhead + 1`` in a numerator and a denominator, in every query of
    one plan)."""
    r = _FACTORED.get(x)
    if r is None:
        r = sp.factor(x)
        if len(_FACTORED) > 1024:
            _FACTORED.clear()
        _FACTORED[x] = r
    return r


def tidy(e):
    """Present a rational expression readably: numerator and denominator factored, and each
    sum collected on its most frequent symbol (``steps*(1 + L)*(a + b + c)`` rather than the
    expanded six-term sum)."""
    def t(x):
        y = _factor(x)
        if isinstance(y, sp.Mul):
            # with float coefficients factor() can return 1.0·x: x itself is not factored again
            return sp.Mul(*[a if a.is_number or a == x else t(a) for a in y.args])
        x = y
        if isinstance(x, sp.Add):
            syms = sorted(x.free_symbols, key=lambda s: (-sum(s in a.free_symbols for a in x.args), s.name))
            if syms:
                c = sp.collect(x, syms[0], evaluate=False)
                if len(c) > 1 or next(iter(c)) != 1:
                    return sp.Add(*[k * sp.factor_terms(t(v)) if k != 1 else t(v) for k, v in c.items()])
        return x

    try:
        n, d = sp.fraction(sp.together(e))
        return t(n) / t(d)
    except TimeoutError:  # the CPU-time safety net fired: not this step's failure
        raise
    except Exception:  # presentation only: fall back to the raw form
        return e


def nodes_between(ws, target: str, f) -> frozenset:
    """Nodes on dependency paths from ``target`` to the symbols of ``f`` (to expand)."""
    desc = ws.reachable(target) | {target}
    anc = set()
    for s in f.free_symbols:
        if s.name in ws.nodes:
            anc |= ws.reachable(s.name, up=True) | {s.name}
    return frozenset(desc & anc)

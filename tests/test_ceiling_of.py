"""``dsl.plugin.ceiling_of``: the expression ``sympy.ceiling`` builds, for the ratios of node
symbols it builds directly and for everything it leaves to sympy."""
from __future__ import annotations

import pytest
import sympy as sp

from dsl.plugin import ceiling_of, symbol

g, h, t, s, b = (symbol(n) for n in ("p.gpus", "p.gpus_per_host", "w.tokens", "w.seq_len", "w.global_batch"))
pos = sp.Symbol("n", positive=True)
integer = sp.Symbol("k", integer=True)

DIRECT = [g, g / h, t / (s * b), -g / 3, sp.Rational(7, 2) * g * h, 2 * t / (s * b)]
SYMPY = [sp.Integer(7), sp.Rational(7, 2), sp.Float(2.5), g + 1, g ** 2 / h, pos / g, integer, integer / 2,
         pos, g * pos, sp.Float(0.5) * g, sp.floor(g) / h, g / g]


@pytest.mark.parametrize("x", DIRECT + SYMPY, ids=str)
def test_the_same_expression_as_sympy(x):
    got, want = ceiling_of(x), sp.ceiling(x)
    assert got == want and type(got) is type(want)


def test_the_direct_forms_are_built_without_asking_sympy(monkeypatch):
    """The forms it claims are built unevaluated (sympy's ``eval`` is not consulted), and the
    others still go through sympy."""
    from sympy.core.cache import clear_cache
    clear_cache()              # an evaluated ceiling from the test above would not call eval again
    calls = []
    orig = sp.ceiling.eval.__func__
    monkeypatch.setattr(sp.ceiling, "eval", classmethod(lambda cls, arg: calls.append(arg) or orig(cls, arg)))
    for x in DIRECT:
        ceiling_of(x)
    assert calls == []
    ceiling_of(g + 1)
    assert calls == [g + 1]

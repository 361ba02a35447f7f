"""Arithmetic backends for formulas written once and evaluated three ways: on sympy expressions
(one plan, kept symbolic), on numpy arrays (a whole grid of candidate layouts or deployments at
once) and on Python numbers (a simulator calling a cost once per iteration).

Every formula of :mod:`plugins.hardware.collectives`, :mod:`plugins.training.layout_model` and
the serving step takes ``o`` = :func:`ops` (``"sympy"``, ``"numpy"`` or ``"python"``) for
``max``, ``min`` and ``where``.  On the sympy path the operations are recorded (:class:`Lazy`)
and only the values a caller reads are built, each exactly as the eager text would.
"""
from __future__ import annotations

import functools
import operator
import sys

_REAL = None        # the assumptions of a node's symbol (real, nothing else)


class PythonOps:
    """max/min/where on Python numbers (one value each): the same values as numpy's elementwise
    functions, without their per-call cost (≈1 µs each, and numpy scalars that make every later
    operation slower) — what a simulator calling a step cost once per iteration uses."""

    max, min = staticmethod(max), staticmethod(min)

    @staticmethod
    def where(cond, a, b):
        return a if cond else b


class NumpyOps:
    #: the same operations for Python numbers (:class:`PythonOps`), for callers that evaluate
    #: one point at a time
    scalar = PythonOps()

    def __init__(self):
        import numpy as np
        self.max, self.min, self.where = np.maximum, np.minimum, np.where


def _lattice(cls, args):
    """``cls(*args)`` for ``cls`` = ``sp.Max`` or ``sp.Min``, with the cheap exact reductions
    only: nested ``cls`` flattened, numbers reduced to the extreme one, duplicates dropped,
    absorption (``max(a, min(a, b)) = a``), pairs whose difference is a number decided; what
    remains is left unevaluated.  sympy's own constructor also tries to prove an ordering of
    every pair of symbolic arguments from assumptions (``_find_localzeros``, ``factor_terms``),
    milliseconds per call on the step-time expressions and, for them, almost never
    conclusive.  The result is the same function of the inputs either way; the nominal value
    comes from substituting numbers, which evaluates each ``Max``/``Min`` at once."""
    import sympy as sp
    dual = sp.Min if cls is sp.Max else sp.Max
    flat = []
    for a in args:
        a = a if isinstance(a, sp.Basic) else (sp.Float(a) if isinstance(a, float) else sp.Integer(int(a)))
        flat.extend(a.args if isinstance(a, cls) else (a,))
    nums = [a for a in flat if a.is_number]
    if len(nums) == len(flat) or not all(a.is_comparable for a in nums):
        return cls(*flat)
    rest = list(dict.fromkeys(a for a in flat if not a.is_number))
    if nums:
        rest.insert(0, cls(*nums))
    keep = set(rest)
    rest = [a for a in rest if not (isinstance(a, dual) and (keep.intersection(a.args) or nums and _bounded(
        cls, rest[0], [x for x in a.args if x.is_number and x.is_comparable])))]
    if len(rest) <= 4:                  # pairs whose difference is a number
        out = []
        for a in rest:
            drop = False
            for b in out:
                diff = a - b
                if diff.is_number and diff.is_comparable:
                    if (diff > 0) == (cls is sp.Max):
                        out[out.index(b)] = a
                    drop = True
                    break
            if not drop:
                out.append(a)
        rest = out
    if len(rest) == 1:
        return rest[0]
    return cls(*rest, evaluate=False)


def _bounded(cls, n, inner):
    """True when a ``dual`` argument holding the numbers ``inner`` can never beat the number
    ``n``: max(n, min(m, …)) = n for m ≤ n, min(n, max(m, …)) = n for m ≥ n."""
    import sympy as sp
    if not inner:
        return False
    m = sp.Min(*inner) if cls is sp.Max else sp.Max(*inner)
    return bool(m <= n) if cls is sp.Max else bool(m >= n)


UNBUILT = object()


class Lazy:
    """A sympy value of :func:`evaluate` not built yet: the operation and its operands.

    ``evaluate`` computes every term of every layout — all three recomputation modes of the
    activation bytes, every ZeRO stage's volume, both branches of each ``where`` — and a plan
    reads a dozen of them.  In the sympy path the inputs are wrapped in :class:`Lazy` leaves, so
    the same text records the operations instead of performing them; :meth:`force` performs
    exactly the operations a requested value depends on, with the same operands in the same
    order (``a + b`` is ``operator.add(a, b)``, Python's dispatch included), so the expression
    is the one the eager text builds.  ``where`` with a Python or decided condition keeps only
    the branch taken, unbuilt.  Anything that needs the value itself (``float``, ``bool``, an
    attribute, a sympy function through ``_sympy_``) builds it first.
    """

    __slots__ = ("fn", "args", "val")
    _op_priority = 1000.0        # sympy's binary operators defer to ours (see call_highest_priority)

    def __init__(self, fn, args, val=UNBUILT):
        self.fn, self.args, self.val = fn, args, val

    def force(self):
        v = self.val
        if v is UNBUILT:
            v = self.val = self.fn(*[a.force() if type(a) is Lazy else a for a in self.args])
            self.fn = self.args = None
        return v

    def _sympy_(self):
        return self.force()

    def __getattr__(self, name):
        if name.startswith("__"):          # sympify's ``__sympy__`` probe and the like
            raise AttributeError(name)
        return getattr(self.force(), name)

    def __eq__(self, other):
        return self.force() == (other.force() if type(other) is Lazy else other)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.force())

    def __bool__(self):
        return bool(self.force())

    def __float__(self):
        return float(self.force())

    def __int__(self):
        return int(self.force())

    def __index__(self):
        return operator.index(self.force())

    def __neg__(self):
        return Lazy(operator.neg, (self,))

    def __pos__(self):
        return Lazy(operator.pos, (self,))

    def __abs__(self):
        return Lazy(operator.abs, (self,))

    def __invert__(self):
        return Lazy(operator.invert, (self,))

    def __repr__(self):
        return repr(self.force())


def _div(a, b):
    """``a / b`` of two built values: a division by a Piecewise kept by :func:`_piecewise` is the
    product with its reciprocal (:func:`_reciprocal`), the object sympy's ``a / b`` builds."""
    sp = sys.modules.get("sympy")
    if sp is not None and type(b) is sp.Piecewise:
        return a * _reciprocal(b)
    return a / b


@functools.lru_cache(maxsize=64)
def _reciprocal(pw):
    """``1 / pw`` for a two-branch Piecewise: sympy's ``Pow(pw, -1)`` is ``pw._eval_power(-1)``,
    ``Piecewise((a**-1, cond), (b**-1, True))`` evaluated, which :func:`_kept_piecewise` may show
    to keep its arguments — then it is built unevaluated; else as sympy builds it.  ``x * (1/pw)``
    is what ``x / pw`` builds: ``Mul(x, Pow(pw, -1))`` (``Expr.__truediv__``/``__rtruediv__``)."""
    import sympy as sp
    if len(pw.args) == 2 and pw.args[1].cond is sp.true:
        (a, cond), (b, _) = pw.args
        ia, ib = a ** -1, b ** -1
        if _kept_piecewise(cond, ia, ib):
            return sp.Piecewise((ia, cond), (ib, True), evaluate=False)
    return pw ** -1


def _lazy_ops():
    def pair(op):
        return (lambda a, b: Lazy(op, (a, b))), (lambda a, b: Lazy(op, (b, a)))
    for name, op in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                     ("truediv", _div), ("floordiv", operator.floordiv), ("pow", operator.pow),
                     ("mod", operator.mod),
                     ("and", operator.and_), ("or", operator.or_)):
        f, r = pair(op)
        setattr(Lazy, f"__{name}__", f)
        setattr(Lazy, f"__r{name}__", r)
    for name, op in (("gt", operator.gt), ("ge", operator.ge), ("lt", operator.lt), ("le", operator.le)):
        setattr(Lazy, f"__{name}__", lambda a, b, op=op: Lazy(op, (a, b)))


_lazy_ops()


def _defer(fn, args):
    """``fn(*args)`` now, or a :class:`Lazy` of it when an argument is one."""
    for a in args:
        if type(a) is Lazy:
            return Lazy(fn, args)
    return fn(*args)


def _piecewise(cond, a, b):
    """``Piecewise((a, cond), (b, True))`` — built without sympy's evaluation when it provably
    changes nothing (:func:`_kept_piecewise`), else as sympy evaluates it."""
    import sympy as sp
    if _kept_piecewise(cond, a, b):
        return sp.Piecewise((a, cond), (b, True), evaluate=False)
    return sp.Piecewise((a, cond), (b, True))


def _kept_piecewise(cond, a, b) -> bool:
    """True when sympy's ``Piecewise.eval`` returns ``Piecewise((a, cond), (b, True))`` as
    given, so that the unevaluated constructor builds the same object.

    The case is :func:`group_bandwidth`'s "the group spans hosts", ``x > R`` from :func:`_spans`
    with x a node symbol (real and nothing else) and R = max(1, min(x, q)) for a number q > 1,
    or R a finite number.  ``Piecewise.eval`` (sympy's ``_piecewise_collapse_arguments``) would
    only rewrite ``cond`` by ``_canonical_coeff`` and merge the two pairs if ``a == b``:
    ``cond.canonical`` is ``cond`` (the bare symbol has fewer nodes than R, so the arguments are
    in sympy's order; neither side can extract a minus sign), its coefficient split is x = 0 + 1·x,
    so it rebuilds ``x > R`` evaluated — and that is undecided (x > max(1, min(x, q)) holds for
    x > q and fails for x ≤ 1; x > n for a real x is unknown), which sympy returns as the
    unevaluated relation, equal to ``cond``.  Costs sympy's assumption queries, ≈3 ms a plan.
    Any other condition, or a Piecewise branch, or ``a == b``: False (sympy evaluates)."""
    import sympy as sp
    global _REAL
    if type(cond) is not sp.StrictGreaterThan or isinstance(a, sp.Piecewise) or isinstance(b, sp.Piecewise):
        return False
    x, R = cond.args
    if _REAL is None:
        _REAL = sp.Symbol("k", real=True).assumptions0
    if not (x.is_Symbol and x.assumptions0 == _REAL):
        return False
    if R.is_Rational or R.is_Float:
        pass
    elif type(R) is sp.Max and len(R.args) == 2 and R.args[0] == 1 and type(R.args[1]) is sp.Min:
        inner = R.args[1].args
        q = next((y for y in inner if y is not x), None)
        if len(inner) != 2 or x not in inner or q is None or not (q.is_Rational or q.is_Float) or not q > 1:
            return False
    else:
        return False
    return isinstance(a, sp.Basic) and isinstance(b, sp.Basic) and a != b


class SympyOps:
    def __init__(self):
        import sympy as sp
        mx, mn = (lambda *a: _lattice(sp.Max, a)), (lambda *a: _lattice(sp.Min, a))
        self.max = lambda *a: _defer(mx, a)
        self.min = lambda *a: _defer(mn, a)

    @staticmethod
    def where(cond, a, b):
        import sympy as sp
        if type(cond) is Lazy:
            cond = cond.force()
        if cond is True or cond is False or isinstance(cond, bool):
            return a if cond else b
        if cond in (sp.true, sp.false):
            return a if cond == sp.true else b
        return _defer(_piecewise, (cond, a, b))


def ops(kind: str):
    """``ops("numpy")``, ``ops("python")`` (Python numbers only) or ``ops("sympy")``: the
    max/min/where namespace.  ``ops("numpy").scalar`` is ``ops("python")``."""
    if kind == "python":
        return NumpyOps.scalar
    return NumpyOps() if kind == "numpy" else SympyOps()

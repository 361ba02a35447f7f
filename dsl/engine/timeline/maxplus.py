"""The exact max-plus makespan expression of a small timeline, and each activity's exact start
and finish expressions: the ``Max`` over the Pareto-optimal *path forms* (linear combinations of
the inputs summed along one path), found in one topological pass with integer arithmetic and
valid for every non-negative input value, so ``solve`` can cross from one critical path to
another.  The sympy ``Max`` of the makespan may be left to be built on first read
(:class:`~dsl.engine.deferred.DeferredExpr`).
"""
from __future__ import annotations

import functools

from ..deferred import DeferredExpr

FULL_LIMIT = 200          # activities up to which the makespan is a full max-plus expression
FORM_LIMIT = 64          # non-dominated path forms per activity kept by full_expr
PARETO_ARRAYS = 24        # path forms above which the Pareto filter compares int64 blocks (numpy loaded)
PARETO_IMPORT = 512       # the same when numpy is not loaded yet (its import costs ≈0.1 s: the
                          # pairwise Python filter of a few hundred forms costs less)


def _expanded_terms(e):
    """``sympy.expand(e).as_coefficients_dict().items()``, with each ``Max``/``Min`` expanded once
    per process.

    ``expand`` rebuilds every ``Max`` whose arguments it expands, and each rebuild re-runs
    ``Max``'s pairwise comparison of the arguments (``factor_terms`` of their differences, a
    few ms); a roofline duration holds one ``Max`` per GEMM, and the forward and backward
    durations the same ones.  Where every ``Max``/``Min`` of ``e`` is a plain factor of a term
    (reached through sums and products only), ``expand`` treats it as an opaque factor: its
    result is the expansion of ``e`` with each such factor replaced by a symbol, and the factor
    put back as its own expansion (remembered) — the same terms with the same coefficients.
    Anything else (a ``Max`` under a power or a function, two whose expansions coincide, one
    whose expansion is no longer a ``Max``/``Min``) is expanded as a whole.
    """
    import sympy as sp

    factors: dict = {}
    stack = [(e, True)]
    while stack:
        x, plain = stack.pop()
        if isinstance(x, (sp.Max, sp.Min)):
            if not plain:
                factors = {}
                break
            factors[x] = None
        elif x.args:
            plain = plain and (x.is_Add or x.is_Mul)
            stack.extend((a, plain) for a in x.args)
    if factors:
        masks = {m: sp.Dummy() for m in factors}
        back = {d: _expanded(m) for m, d in masks.items()}
        if all(isinstance(x, (sp.Max, sp.Min)) for x in back.values()) and len(set(back.values())) == len(back):
            return [(t.xreplace(back), c)
                    for t, c in sp.expand(e.xreplace(masks)).as_coefficients_dict().items()]
    return sp.expand(e).as_coefficients_dict().items()


@functools.lru_cache(maxsize=1024)
def _expanded(m):
    """``sympy.expand(m)`` of one ``Max``/``Min`` (remembered: the durations of a timeline, and
    of the plans of a file, share them)."""
    import sympy as sp
    return sp.expand(m)


class MaxPlusMixin:
    """Max-plus expressions of :class:`~dsl.engine.timeline.Timeline` (a mixin of it)."""

    def duration_release(self) -> tuple[list, list]:
        """Each activity's duration and release (None: none) expressions, in activity order,
        read from the columns (no activity object per row)."""
        durs: list = []
        rels: list = []
        for seg in self.activities._segs:
            if seg[0] == "one":
                for k in seg[1]:
                    a = self.activities._single[k]
                    durs.append(a.duration)
                    rels.append(a.release)
            else:
                b = seg[1]
                durs.extend(b.durations[c] for c in b.dcode.tolist())
                rels.extend([None] * b.n)
        return durs, rels

    def finish_exprs(self) -> dict:
        """Exact max-plus finish time of every activity (small timelines): ``{id: expr}``."""
        r = self.full_times(limit=10 ** 9)
        return {} if r is None else dict(zip(r[0], r[2]))

    def _forms(self, limit: int):
        """Max-plus start and finish times of every activity as sets of *path forms*.

        A path form is a linear combination of the inputs (the terms of the expanded durations,
        lags and releases, with rational coefficients) summed along one path.  A form that
        another form of the same set dominates (every coefficient ≥) is dropped — valid because
        durations, lags and releases are non-negative — so each time is the ``Max`` over its
        Pareto-optimal paths, exact for every non-negative input, built in one topological pass
        without sympy's pairwise ``Max`` simplification.

        Forms are held as dense tuples of integers, one per term: every coefficient is scaled
        by the common denominator ``scale`` of all durations, lags and releases (a positive
        factor keeps every dominance relation), so sums and comparisons are exact integer work.

        :return: ``(ids, starts, finishes, pareto, to_expr, terms, scale)`` — ``terms`` the
            inputs in column order, a form's value ``Σ form[k]·terms[k] / scale`` — or None when
            some activity keeps more than ``limit`` forms (the caller then uses critical-path
            lengths).
        """
        import math
        import sys
        from operator import add, ge

        import sympy as sp
        from fractions import Fraction

        ids, preds = self.edges()
        order = self.topo(len(ids), preds)
        durs, rels = self.duration_release()
        terms: dict = {}          # term (symbol or non-linear atom) -> index
        sparse: dict = {}         # expression -> {index: Fraction}

        def vec(e):
            if e is not None and e not in sparse:
                acc: dict = {}
                for t, c in _expanded_terms(e):
                    if c.is_Float:                  # a decimal literal: its exact binary value
                        c = sp.Rational(c)
                    if not c.is_Rational:           # irrational coefficient: the whole term is one input
                        t, c = c * t, sp.Integer(1)
                    k = terms.setdefault(t, len(terms))
                    acc[k] = acc.get(k, 0) + Fraction(int(c.p), int(c.q))
                sparse[e] = acc

        # every expression once, in the order the pass below meets them (term indices as before)
        for i in order:
            vec(rels[i])
            for _, lag, _ in preds[i]:
                vec(lag)
            vec(durs[i])
        n_terms = len(terms)
        scale = math.lcm(1, *{c.denominator for acc in sparse.values() for c in acc.values()})
        dense: dict = {}          # expression -> integer tuple (scaled), None when all zero
        for e, acc in sparse.items():
            row = [0] * n_terms
            for k, c in acc.items():
                row[k] = int(c * scale)
            dense[e] = tuple(row) if any(row) else None
        zero = (0,) * n_terms

        def shift(forms, e):
            d = None if e is None else dense[e]
            if d is None:
                return forms
            return {tuple(map(add, f, d)) for f in forms}

        def pareto(forms):
            # the forms no other form dominates (is ≥ in every coefficient).  Forms are distinct
            # integer rows, so a row is dominated exactly when another row is ≥ it; in
            # decreasing lexicographic order a dominating row comes before every row it dominates
            if len(forms) <= 1:
                return forms
            big = PARETO_ARRAYS if "numpy" in sys.modules else PARETO_IMPORT
            if len(forms) > big and n_terms and max(map(max, forms)) < 2 ** 62 and min(map(min, forms)) > -2 ** 62:
                # as int64 rows, a block at a time: a block's rows that no kept row dominates,
                # less those another row of the block dominates, are kept
                import numpy as np

                rows = list(forms)
                a = np.array(rows, dtype=np.int64)
                order = np.lexsort(a.T[::-1])[::-1]          # decreasing lexicographic order
                kept = a[:0]
                out = set()
                lo = 0
                while lo < len(rows):
                    size = max(16, min(256, (1 << 22) // ((len(kept) + 256) * n_terms)))
                    idx = order[lo:lo + size]
                    lo += size
                    blk = a[idx]
                    if len(kept):
                        alive = ~(kept[None, :, :] >= blk[:, None, :]).all(axis=2).any(axis=1)
                        idx, blk = idx[alive], blk[alive]
                    if len(blk) > 1:       # [i, j]: row j ≥ row i; only itself for an undominated row
                        alive = (blk[None, :, :] >= blk[:, None, :]).all(axis=2).sum(axis=1) == 1
                        idx, blk = idx[alive], blk[alive]
                    kept = np.concatenate([kept, blk])
                    out.update(rows[i] for i in idx.tolist())
                return out
            keep: list = []
            for r in sorted(forms, reverse=True):
                if not any(all(map(ge, g, r)) for g in keep):
                    keep.append(r)
            return set(keep)

        inv = list(terms)
        coef = {}                 # (term index, scaled coefficient) -> sympy term

        def to_expr(forms):
            # no sort here: an unevaluated Max puts its arguments in sympy's canonical order itself
            exprs = []
            for f in forms:
                parts = []
                for k, c in enumerate(f):
                    if c:
                        t = coef.get((k, c))
                        if t is None:
                            t = coef[(k, c)] = sp.Rational(c, scale) * inv[k]
                        parts.append(t)
                exprs.append(sp.Add(*parts))
            if not exprs:
                return sp.Integer(0)
            return exprs[0] if len(exprs) == 1 else sp.Max(*exprs, evaluate=False)

        st: list = [None] * len(ids)
        fin: list = [None] * len(ids)
        for i in order:
            cands: set = set()
            if rels[i] is not None:
                cands |= shift({zero}, rels[i])
            for j, lag, on in preds[i]:
                cands |= shift(fin[j] if on == "finish" else st[j], lag)
            s = pareto(cands) if cands else {zero}
            if len(s) > limit:
                return None
            st[i], fin[i] = s, shift(s, durs[i])
        return ids, st, fin, pareto, to_expr, inv, scale

    def full_times(self, limit: int = FORM_LIMIT):
        """Exact max-plus start and finish expressions of every activity (small timelines).

        :return: ``(ids, starts, finishes)`` — lists of sympy expressions in activity order —
            or None when the path forms exceed ``limit`` (see :meth:`_forms`).
        """
        r = self._forms(limit)
        if r is None:
            return None
        ids, st, fin, _, to_expr, _, _ = r
        return ids, [to_expr(f) for f in st], [to_expr(f) for f in fin]

    def full_expr(self, limit: int = FORM_LIMIT):
        """Exact max-plus makespan expression (small timelines), or None when too many
        non-dominated paths remain (the caller then uses the critical path's length)."""
        d = self.full_expr_deferred(limit)
        return None if d is None else d.get()

    def full_expr_deferred(self, limit: int = FORM_LIMIT) -> DeferredExpr | None:
        """:meth:`full_expr` as a :class:`~dsl.engine.deferred.DeferredExpr`: the Pareto-optimal
        path forms of the makespan are found now, the sympy ``Max`` over them (whose canonical
        argument order is most of its cost) is built on first use.

        When every term is an input symbol (or a constant), the free symbols and the exact value
        at given input values (the largest form, in Python fractions: the number
        ``subs_numbers`` gives for the built ``Max``) are known without building; otherwise the
        evaluator declines and the reader builds the expression.  None when the path forms
        exceed ``limit``.
        """
        import sympy as sp
        from fractions import Fraction

        r = self._forms(limit)
        if r is None:
            return None
        _, _, fin, pareto, to_expr, terms, scale = r
        sinks: set = set()
        for f in fin:
            sinks |= f
        top = pareto(sinks) if sinks else set()
        one = sp.S.One
        if not all(t.is_Symbol or t is one for t in terms):
            e = to_expr(top)
            return DeferredExpr(lambda: e, frozenset(e.free_symbols))
        used = {k for f in top for k, c in enumerate(f) if c}
        free = frozenset(terms[k] for k in used if terms[k] is not one)

        def exact(values):
            xs = []
            for k, t in enumerate(terms):
                if k not in used:
                    xs.append(0)
                    continue
                v = one if t is one else values[t]
                if not v.is_Rational:
                    return None
                xs.append(Fraction(int(v.p), int(v.q)))
            if not top:
                return sp.Integer(0)
            best = Fraction(max(sum(c * x for c, x in zip(f, xs) if c) for f in top)) / scale
            return sp.Integer(best.numerator) if best.denominator == 1 else sp.Rational(best.numerator,
                                                                                        best.denominator)

        return DeferredExpr(lambda: to_expr(top), free, exact)

"""Symbolic times along the nominal schedule: the length of the critical path (the makespan
expression of a timeline too large for the max-plus one) and the start or finish of an
activity along its binding chain — durations, lags and a binding release summed, exact at the
nominal point and wherever that path stays binding.
"""
from __future__ import annotations

from .results import Schedule


class CriticalPathMixin:
    """Critical-path expressions of :class:`~dsl.engine.timeline.Timeline` (a mixin of it)."""

    @staticmethod
    def path_to(sched: Schedule, activity: str) -> list[str]:
        """The binding chain of ``activity`` at nominal values, first to last, ending with it."""
        path, cur, seen = [], activity, set()
        while cur is not None and cur not in seen:
            seen.add(cur)
            path.append(cur)
            b = sched.binding.get(cur)
            cur = b[0] if isinstance(b, tuple) else None
        path.reverse()
        return path

    chain = path_to

    def path_expr(self, sched: Schedule, end: str | None = None, at: str = "finish"):
        """Symbolic length of the nominal critical path (durations, lags and a binding release);
        with ``end``, the symbolic time at which that activity finishes (or starts) along its
        binding chain (:meth:`chain_expr`)."""
        if end is not None:
            return self.chain_expr(sched, end, at)
        import sympy as sp
        from collections import Counter

        if not sched.path:
            return sp.Integer(0)
        if sched._bsrc is not None:
            terms = self._chain_terms(sched, getattr(sched, "_path_idx", None)
                                      or [self.activities.index_of(a) for a in sched.path])
            return sp.Add(*[c * e for e, c in terms.items() if c])
        terms: Counter = Counter()
        first = self.activities[sched.path[0]]
        if sched.binding.get(first.id) == "release" and first.release is not None:
            terms[first.release] += 1
        for a in sched.path:
            act = self.activities[a]
            b = sched.binding.get(a)
            if isinstance(b, tuple):
                pred, lag, on = b
                if lag is not None:
                    terms[lag] += 1
                if on == "start":             # start-to-start: the predecessor's duration does not count
                    terms[self.activities[pred].duration] -= 1
            terms[act.duration] += 1
        return sp.Add(*[c * e for e, c in terms.items() if c])

    def chain_expr(self, sched: Schedule, activity: str, at: str = "finish"):
        """Symbolic start or finish time of ``activity`` along its nominal binding chain
        (durations, lags and a binding release): exact at the nominal point and wherever that
        chain stays binding.  O(length of the chain)."""
        import sympy as sp

        if sched._bsrc is not None:
            g = self.activities.index_of(activity)
            chain = self._chain_idx(sched, g)
            total = sp.Integer(0)
            if sched._bsrc[chain[0]] == -2:
                r = self._exprs_at(chain[0])[1]
                if r is not None:
                    total += r
            for g in chain:
                j = int(sched._bsrc[g])
                if j >= 0:
                    c = int(sched._blag[g])
                    if c >= 0:
                        total += self._lagtab[c]
                    if sched._bstart[g]:
                        total -= self._exprs_at(j)[0]
                if g != chain[-1] or at == "finish":
                    total += self._exprs_at(g)[0]
            return total
        chain = []
        cur, seen = activity, set()
        while cur is not None and cur not in seen:
            seen.add(cur)
            chain.append(cur)
            b = sched.binding.get(cur)
            cur = b[0] if isinstance(b, tuple) else None
        chain.reverse()
        total = sp.Integer(0)
        first = self.activities[chain[0]]
        if sched.binding.get(first.id) == "release" and first.release is not None:
            total += first.release
        for a in chain:
            b = sched.binding.get(a)
            if isinstance(b, tuple):
                pred, lag, on = b
                if lag is not None:
                    total += lag
                if on == "start":
                    total -= self.activities[pred].duration
            if a != activity or at == "finish":
                total += self.activities[a].duration
        return total

    def _exprs_at(self, g: int):
        """(duration, release) expressions of the activity at position ``g``."""
        for seg in self.activities._segs:
            base = seg[2]
            if seg[0] == "one":
                if base <= g < base + len(seg[1]):
                    a = self.activities._single[seg[1][g - base]]
                    return a.duration, a.release
            elif base <= g < base + seg[1].n:
                b = seg[1]
                return b.durations[b.dcode[g - base]], None
        raise IndexError(g)

    def _chain_idx(self, sched: Schedule, g: int) -> list[int]:
        chain, seen = [], set()
        while g >= 0 and g not in seen:
            seen.add(g)
            chain.append(g)
            g = int(sched._bsrc[g])
        chain.reverse()
        return chain

    def _chain_terms(self, sched: Schedule, chain: list[int], last_at: str = "finish"):
        """Counter of the expressions summed along ``chain`` (positions, first to last)."""
        from collections import Counter

        terms: Counter = Counter()
        dur = {}

        def d(g):
            e = dur.get(g)
            if e is None:
                e = dur[g] = self._exprs_at(g)
            return e

        if not chain:
            return terms
        if sched._bsrc[chain[0]] == -2:
            r = d(chain[0])[1]
            if r is not None:
                terms[r] += 1
        for k, g in enumerate(chain):
            j = int(sched._bsrc[g])
            if j >= 0:
                c = int(sched._blag[g])
                if c >= 0:
                    terms[self._lagtab[c]] += 1
                if sched._bstart[g]:
                    terms[d(j)[0]] -= 1
            if k < len(chain) - 1 or last_at == "finish":
                terms[d(g)[0]] += 1
        return terms

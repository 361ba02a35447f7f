"""Small-timeline scheduling: the nominal schedule of a timeline of at most
:data:`~dsl.engine.timeline.structure.SMALL_LIMIT` activities added one by one, in plain Python
on its predecessor lists — the same rules and the same floats as the array engine
(:mod:`dsl.engine.timeline.arrays`), so a plan whose timelines are all small never imports numpy.
"""
from __future__ import annotations

from .results import BindingMap, IdSequence, Schedule


class SmallSchedulingMixin:
    """Small-timeline scheduling of :class:`~dsl.engine.timeline.Timeline` (a mixin of it)."""

    def _compute_small(self, num) -> Schedule | None:
        """:meth:`_compute` for a small timeline (:meth:`_small`), in plain Python on the
        predecessor lists of :meth:`edges`: the same float operations in the same order per
        activity (a start is the largest of its predecessors' ready times ``T[pred] + lag``,
        then a later release; the binding edge the first whose ready time equals the start, a
        release binding on ties; latest starts ``min(span, LS[succ] − lag (+ duration for a
        start-to-start edge)) − duration``; slack kept above ``1e-9·max(1, |span|)``), so the
        same schedule.  Returns None — the caller then takes :meth:`_compute` — when a value is
        not a finite float or is −0.0, where numpy's ``maximum``/``fmax`` and Python's ``max``
        may differ (NaN propagation, the sign of a zero)."""
        import math

        ids, preds = self.edges()
        n = len(ids)
        order = self.topo(n, preds)
        if order is None:
            raise ValueError("cycle")
        # nominal values, in _columns' order: durations and releases by activity, then lags
        cache: dict = {}

        def f(e):
            v = cache.get(e)
            if v is None:
                v = cache[e] = float(num(e))
            return v

        acts = self.activities._single
        dur = [0.0] * n
        rel: list = [None] * n
        for i, a in enumerate(acts.values()):
            dur[i] = f(a.duration)
            if a.release is not None:
                rel[i] = f(a.release)
        lagtab: list = []
        lagpos: dict = {}
        ecode: list = []                          # per activity, its edges' lag codes (-1: none)
        for ps in preds:
            cs = []
            for _, e, _ in ps:
                if e is None:
                    cs.append(-1)
                    continue
                c = lagpos.get(e)
                if c is None:
                    c = lagpos[e] = len(lagtab)
                    lagtab.append(e)
                cs.append(c)
            ecode.append(cs)
        lagv = [f(e) for e in lagtab]
        for v in (*dur, *lagv, *(r for r in rel if r is not None)):
            if not math.isfinite(v) or (v == 0.0 and math.copysign(1.0, v) < 0):
                return None
        self._lagtab = lagtab
        start = [0.0] * n
        finish = [0.0] * n
        bsrc = [-1] * n
        blag = [-1] * n
        bstart = [False] * n
        for i in order:                           # forward pass (predecessors come first)
            best = None
            be = -1
            for k, (j, _, on) in enumerate(preds[i]):
                c = ecode[i][k]
                v = (start[j] if on == "start" else finish[j]) + (0.0 if c < 0 else lagv[c])
                if best is None or v > best:
                    best, be = v, k
            r = rel[i]
            s = (0.0 if r is None else r) if best is None else (best if r is None or r < best else r)
            start[i] = s
            finish[i] = s + dur[i]
            if r is not None and r >= s:          # a release that binds (on ties too)
                bsrc[i] = -2
            elif be >= 0:
                j, _, on = preds[i][be]
                bsrc[i], blag[i], bstart[i] = j, ecode[i][be], on == "start"
        span = max(finish) if n else 0.0
        tol = 1e-9 * max(1.0, abs(span))
        succ: list[list] = [[] for _ in range(n)]
        for i, ps in enumerate(preds):
            for k, (j, _, on) in enumerate(ps):
                c = ecode[i][k]
                succ[j].append((i, 0.0 if c < 0 else lagv[c], on == "start"))
        LS = [0.0] * n
        for i in reversed(order):                 # backward pass (successors come first)
            lf = span
            for k, lag, st in succ[i]:
                v = (LS[k] - lag) + (dur[i] if st else 0.0)
                if v < lf:
                    lf = v
            LS[i] = lf - dur[i]
        slack = []
        for i in range(n):
            d = LS[i] - start[i]
            slack.append(d if d > tol else 0.0)
        path = []
        if n:                                     # from the last-finishing activity back
            cur = max(range(n), key=finish.__getitem__)
            seen = set()
            while cur >= 0 and cur not in seen:
                seen.add(cur)
                path.append(cur)
                cur = bsrc[cur]
            path.reverse()
        sids = IdSequence(self.activities)
        sch = Schedule(sids, start, finish, span, [sids[i] for i in path], slack, None,
                       _bsrc=bsrc, _blag=blag, _bstart=bstart)
        sch.binding = BindingMap(self, sch)
        sch._T = [t for pair in zip(start, finish) for t in pair]
        sch._path_idx = path
        return sch

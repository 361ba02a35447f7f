"""Memory profiles: the holds of each pool (live on [start, end)), a pool's level over the
nominal schedule and its peak (a sort and a cumulative sum on arrays, or an event sweep in
Python for small timelines and zero-length holds), with the holds live at the peak and the
symbolic peak, total and area (∫ bytes dt) expressions.
"""
from __future__ import annotations

from .results import Profile, Schedule
from .store import no_gc


class MemoryMixin:
    """Memory holds and profiles of :class:`~dsl.engine.timeline.Timeline` (a mixin of it)."""

    def holds_in(self, pool: str | None = None):
        """Holds of ``pool`` in the order they were added (all pools: a dict pool -> list)."""
        if self._by_pool is None:
            by: dict = {}
            for h in self.holds.values():
                by.setdefault(h.pool, []).append(h)
            self._by_pool = by
        return self._by_pool if pool is None else self._by_pool.get(pool, [])

    def pool_total(self, pool: str):
        """Symbolic sum of every hold of ``pool`` (equal sizes collected: O(holds) hashing)."""
        import sympy as sp

        if self.holds.blocks:
            import numpy as np
            pools, sizes, pc, _, _, _, _, sc = self._hold_arrays()
            if pool not in pools:
                return sp.Integer(0)
            cnt = np.bincount(sc[pc == pools.index(pool)], minlength=len(sizes))
            terms = [int(c) * sizes[k] for k, c in enumerate(cnt.tolist()) if c]
            return sp.Add(*terms) if terms else sp.Integer(0)
        from collections import Counter

        c = Counter(h.bytes for h in self.holds_in(pool))
        return sp.Add(*[n * e for e, n in c.items()]) if c else sp.Integer(0)

    def pools(self) -> list[str]:
        if self.holds.blocks:
            pools, *_ = self._hold_arrays()
            return sorted(pools)
        return sorted(self.holds_in())

    def _hold_arrays(self):
        """Every hold as columns (cached until the next hold or activity): pool code, anchor
        positions (-1 = timeline start / end) and whether they are finishes, size code."""
        if self._harr is not None:
            return self._harr
        import numpy as np

        pools: dict = {}
        sizes: dict = {}
        parts = []
        idx = self.activities.index_of
        for seg in self.holds._segs:
            if seg[0] == "one":
                rows = []
                for key in seg[1]:
                    h = self.holds._single[key]
                    rows.append((pools.setdefault(h.pool, len(pools)),
                                 -1 if h.start is None else idx(h.start[0]), h.start is not None and h.start[1] == "finish",
                                 -1 if h.end is None else idx(h.end[0]), h.end is not None and h.end[1] == "finish",
                                 sizes.setdefault(h.bytes, len(sizes))))
                a = np.array(rows, dtype=np.int64).reshape(-1, 6)
                parts.append(tuple(a[:, c] for c in range(6)))
            else:
                b = seg[1]
                pc = np.array([pools.setdefault(p, len(pools)) for p in b.pools], dtype=np.int64)
                sc = np.array([sizes.setdefault(e, len(sizes)) for e in b.sizes], dtype=np.int64)
                parts.append((pc[b.pcode], b.s_act, b.s_fin, b.e_act, b.e_fin, sc[b.scode]))
        cols = [np.concatenate([p[c] for p in parts]).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
                for c in range(6)]
        self._harr = (list(pools), list(sizes), *cols)
        return self._harr

    def area_expr(self, pool: str, start_of, finish_of, end):
        """Σ bytes · max(0, t_end − t_start) over the holds of ``pool``; ``start_of(id)`` and
        ``finish_of(id)`` give an activity's symbolic times, ``end`` the makespan."""
        import sympy as sp

        terms = []
        for h in self.holds.values():
            if h.pool != pool:
                continue
            t0 = sp.Integer(0) if h.start is None else (start_of(h.start[0]) if h.start[1] == "start"
                                                         else finish_of(h.start[0]))
            t1 = end if h.end is None else (start_of(h.end[0]) if h.end[1] == "start" else finish_of(h.end[0]))
            terms.append(h.bytes * sp.Max(0, t1 - t0))
        return sp.Add(*terms)

    def profile(self, pool: str, num, sched: Schedule) -> Profile:
        """Memory of ``pool`` over the nominal schedule."""
        with no_gc():
            return self._profile(pool, num, sched)

    def _profile(self, pool: str, num, sched: Schedule) -> Profile:
        T = getattr(sched, "_T", None)
        if T is None or (isinstance(T, list) and not self.holds.blocks):
            # no arrays, or a small timeline's schedule (_compute_small) with holds added one
            # by one: the event sweep in Python (the same events, order, levels and peak rule)
            return self._profile_py(pool, num, sched)
        import numpy as np

        if isinstance(T, list):
            T = np.asarray(T, dtype=float)
        pools, sizes, pc, sa, sf, ea, ef, sc = self._hold_arrays()
        if pool not in pools:
            return Profile(pool, 0.0, 0.0, [], [])
        sel = np.flatnonzero(pc == pools.index(pool))
        codes = sc[sel]
        used = np.flatnonzero(np.bincount(codes, minlength=len(sizes)))
        val = np.zeros(len(sizes))
        for c in used.tolist():
            val[c] = num(sizes[c])
        size = val[codes]
        a_, af, b_, bf = sa[sel], sf[sel], ea[sel], ef[sel]
        span = sched.makespan
        t0 = np.where(a_ < 0, 0.0, T[2 * np.maximum(a_, 0) + af])
        t1 = np.where(b_ < 0, span, T[2 * np.maximum(b_, 0) + bf])
        if (t1 == t0).any():          # zero-length holds: ordered along the dependencies
            return self._profile_py(pool, num, sched)
        ok = np.flatnonzero(t1 > t0)
        m = len(ok)
        times = np.concatenate([t0[ok], t1[ok]])
        typ = np.concatenate([np.ones(m, dtype=np.int8), np.zeros(m, dtype=np.int8)])
        kk = np.concatenate([ok, ok])
        delta = np.concatenate([size[ok], -size[ok]])
        order = np.lexsort((kk, typ, times))
        ts = times[order]
        level = np.cumsum(delta[order])
        peak, t_peak, j_peak = 0.0, 0.0, -1
        if len(level):
            prev = np.maximum.accumulate(np.r_[0.0, level[:-1]])
            for j in np.flatnonzero(level > prev).tolist():      # the peak can only move at a new maximum
                if level[j] > peak * (1 + 1e-12) + 1e-9:
                    peak, t_peak, j_peak = float(level[j]), float(ts[j]), j
        best: list = []
        if j_peak >= 0:
            inv = np.empty(2 * m, dtype=np.int64)
            inv[order] = np.arange(2 * m)
            live = ok[(inv[:m] <= j_peak) & (inv[m:] > j_peak)]
            id_at = self.holds.id_at
            best = sorted(((-float(size[k]), id_at(int(sel[k]))) for k in live.tolist()))
            best = [h for _, h in best]
        keep = np.r_[ts[1:] != ts[:-1], True] if len(ts) else np.zeros(0, dtype=bool)
        return Profile(pool, peak, t_peak, best, (ts[keep], level[keep]))

    def _hold_name(self, g: int) -> str:
        return self.holds.name_of(g)

    def _profile_py(self, pool: str, num, sched: Schedule) -> Profile:
        idx = sched.index()
        holds = self.holds_in(pool)
        cache: dict = {}

        def size(e):
            v = cache.get(e)
            if v is None:
                v = cache[e] = num(e)
            return v

        sizes = [size(h.bytes) for h in holds]
        st, fi, span = sched.start, sched.finish, sched.makespan
        rank = None

        def seq(anchor, default):
            return default if anchor is None else 2 * rank[anchor[0]] + (anchor[1] == "finish")

        # (time, frees (0) before allocations (1) before zero-length holds (2), their order,
        #  hold index, delta, allocation?)
        events = []
        for k, h in enumerate(holds):
            a, b = h.start, h.end
            t0 = 0.0 if a is None else (st if a[1] == "start" else fi)[idx[a[0]]]
            t1 = span if b is None else (st if b[1] == "start" else fi)[idx[b[0]]]
            if t1 < t0:
                continue
            if t1 > t0:
                events.append((t0, 1, 0, k, sizes[k], True))
                events.append((t1, 0, 0, k, -sizes[k], False))
                continue
            # a hold between two events of one instant (zero-duration activities) is live at
            # that instant, after the allocations there; such holds follow each other in the
            # order of their anchors along the dependencies
            if rank is None:
                ids, preds = self.edges()
                rank = {ids[i]: r for r, i in enumerate(self.topo(len(ids), preds) or range(len(ids)))}
            events.append((t0, 2, seq(h.start, 0), k, sizes[k], True))
            events.append((t0, 2, seq(h.end, 2 * len(rank) + 1) + 0.5, k, -sizes[k], False))
        events.sort(key=lambda e: e[:4])
        level, peak, t_peak = 0.0, 0.0, 0.0
        live: set[int] = set()
        best: list[int] = []
        steps: list[tuple[float, float]] = []
        for t, _, _, k, d, alloc in events:
            level += d
            if alloc:
                live.add(k)
            else:
                live.discard(k)
            if steps and steps[-1][0] == t:
                steps[-1] = (t, level)
            else:
                steps.append((t, level))
            if level > peak * (1 + 1e-12) + 1e-9:
                peak, t_peak, best = level, t, sorted(live)
        best.sort(key=lambda k: (-sizes[k], holds[k].id))
        return Profile(pool, peak, t_peak, [holds[k].id for k in best], steps)

    def peak_expr(self, prof: Profile):
        import sympy as sp
        return sp.Add(*[self.holds.bytes_of(h) for h in prof.live]) if prof.live else sp.Integer(0)

"""Array scheduling: the nominal schedule of a timeline on numpy arrays, one vectorised step per
generation of Kahn's algorithm (:meth:`.structure.StructureMixin._generations`) — the forward pass
(earliest starts), the binding predecessor of each activity, the backward pass (latest starts,
for slack) and the critical path — in O(activities + dependencies), no path enumeration.
"""
from __future__ import annotations

from .results import BindingMap, FloatSequence, IdSequence, Schedule

#: activities from which scheduling a timeline draws a progress bar (on a terminal)
LARGE_TIMELINE = 200_000


class ArraySchedulingMixin:
    """Array scheduling of :class:`~dsl.engine.timeline.Timeline` (a mixin of it)."""

    def _columns(self, num):
        """Nominal durations and releases (floats, ``nan`` = no release) and the lag table."""
        import numpy as np

        cache: dict = {}

        def f(e):
            v = cache.get(e)
            if v is None:
                v = cache[e] = num(e)
            return v

        n = len(self.activities)
        dur = np.empty(n)
        rel = np.full(n, np.nan)
        for seg in self.activities._segs:
            if seg[0] == "one":
                base = seg[2]
                for j, key in enumerate(seg[1]):
                    a = self.activities._single[key]
                    dur[base + j] = f(a.duration)
                    if a.release is not None:
                        rel[base + j] = f(a.release)
            else:
                b, base = seg[1], seg[2]
                dv = np.array([f(e) for e in b.durations], dtype=float)
                dur[base:base + b.n] = dv[b.dcode]
        lagv = np.array([f(e) for e in self._lagtab] + [0.0], dtype=float)   # code -1 -> 0
        return dur, rel, lagv

    def _compute(self, num) -> Schedule:
        """Forward pass (earliest starts), then the binding predecessor of every activity, then
        a backward pass (latest starts, for slack), each over the generations of the structure.

        The passes loop over generations, not activities: every step is a handful of numpy
        operations on one generation's activities and edges, with every per-generation index
        (edge ranges, group offsets, positions) computed before the loops.  The binding edge is
        found after the forward pass, from the final times: the first predecessor edge whose
        ready time equals the activity's start (a release binds on ties)."""
        import numpy as np

        n, dst, src, lcode, on_start = self._arrays()
        gens = self._gens() if n else []
        if gens is None:
            raise ValueError("cycle")
        dur, rel, lagv = self._columns(num)
        T = np.zeros(2 * n)                       # T[2i] start, T[2i+1] finish
        bsrc = np.full(n, -1, dtype=np.int32)
        bedge = np.full(n, -1, dtype=np.int32)
        indeg = np.bincount(dst, minlength=n).astype(np.int32)
        eptr = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(indeg, out=eptr[1:])
        any_rel = not np.isnan(rel).all() if n else False
        # activities in generation order; their incoming edges contiguous in that order
        order = np.concatenate(gens) if gens else np.zeros(0, dtype=np.int64)
        cnt_o = indeg[order]
        e_of = np.repeat(eptr[order] - (np.cumsum(cnt_o, dtype=np.int32) - cnt_o), cnt_o)
        e_of += np.arange(len(e_of), dtype=np.int32)
        del eptr, indeg
        pe_g = src[e_of] * np.int32(2)            # the predecessor's start or finish in T
        pe_g += ~on_start[e_of]
        lag_g = lagv[lcode[e_of]]
        gsz = np.array([len(g) for g in gens], dtype=np.int64)
        gofs = np.zeros(len(gens) + 1, dtype=np.int64)
        np.cumsum(gsz, out=gofs[1:])
        ecs = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(cnt_o, out=ecs[1:])
        eloc = ecs[:-1] - np.repeat(ecs[gofs[:-1]], gsz)   # an activity's first edge, within its generation
        T2 = T.reshape(n, 2)                      # T2[i] = (start, finish)
        dur_o = dur[order]
        rel_o = rel[order] if any_rel else None
        G, E = gofs.tolist(), ecs[gofs].tolist()
        if n:                                     # generation 0: at its release, or at 0
            i1 = G[1]
            s0 = np.where(np.isnan(rel_o[:i1]), 0.0, rel_o[:i1]) if any_rel else np.zeros(i1)
            F = order[:i1]
            T2[F, 0] = s0
            T2[F, 1] = s0 + dur_o[:i1]
        from ..progress import progress
        with progress(len(gens) // 1000 if n >= LARGE_TIMELINE else 0, f"scheduling {n:,} activities") as advance:
            for g in range(1, len(gens)):
                i0, i1, a, b = G[g], G[g + 1], E[g], E[g + 1]
                vals = T[pe_g[a:b]]
                vals += lag_g[a:b]
                s = vals if b - a == i1 - i0 else np.maximum.reduceat(vals, eloc[i0:i1])
                if any_rel:                       # a release later than every predecessor binds
                    s = np.fmax(s, rel_o[i0:i1])
                F = order[i0:i1]
                T2[F, 0] = s
                T2[F, 1] = s + dur_o[i0:i1]
                if g % 1000 == 0:
                    advance()
        del eloc
        start, finish = T[0::2], T[1::2]
        # binding predecessors, from the final times
        if len(e_of):
            i0 = G[1]
            vals = T[pe_g]
            del pe_g
            vals += lag_g
            del lag_g
            heads = ecs[i0:-1]
            mx = np.maximum.reduceat(vals, heads)
            eq = vals == np.repeat(mx, cnt_o[i0:])
            del vals
            eq[heads] |= np.isnan(mx)             # no number: the first edge
            hit = np.flatnonzero(eq)
            del eq
            be = e_of[hit[np.searchsorted(hit, heads)]]
            del hit
            if any_rel:
                be = np.where(rel_o[i0:] >= mx, -1, be)
            bedge[order[i0:]] = be
            del be, mx
        del e_of, cnt_o, ecs
        if any_rel:
            bsrc[order[rel_o >= start[order]]] = -2     # a release that binds (on ties too)
        has_e = bedge >= 0
        bsrc[has_e] = src[bedge[has_e]]
        span = float(finish.max()) if n else 0.0
        tol = 1e-9 * max(1.0, abs(span))
        # latest starts (for slack): backward pass over the generations, edges grouped by
        # predecessor in generation order (rank = an activity's place in ``order``)
        LS = np.zeros(n)
        rank = np.empty(n, dtype=np.int32)
        rank[order] = np.arange(n, dtype=np.int32)
        if len(src):
            key = rank[src]
            so = np.argsort(key)
            key = key[so]
            gstart = np.searchsorted(key, gofs)
            b_src, b_dst = src[so], dst[so]
            b_lag = lagv[lcode[so]]
            b_dur = np.where(on_start[so], dur[b_src], 0.0)
            del so
            heads = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
            hg = np.searchsorted(heads, gstart)  # each generation's first group
            hpos = key[heads] - np.repeat(gofs[:-1], np.diff(hg))
            del key
            H = hg.tolist()
            B = gstart.tolist()
        for g in range(len(gens) - 1, -1, -1):
            i0, i1 = G[g], G[g + 1]
            lf = np.full(i1 - i0, span)
            if len(src) and B[g + 1] > B[g]:
                a, b, h0, h1 = B[g], B[g + 1], H[g], H[g + 1]
                vals = LS[b_dst[a:b]] - b_lag[a:b]
                vals += b_dur[a:b]
                m = np.minimum.reduceat(vals, heads[h0:h1] - a)
                pos = hpos[h0:h1]
                lf[pos] = np.minimum(lf[pos], m)
            LS[order[i0:i1]] = lf - dur_o[i0:i1]
        d = LS - start
        slack = np.where(d > tol, d, 0.0)
        # critical path: from the last-finishing activity back through binding predecessors
        path = []
        if n:
            cur = int(np.argmax(finish))
            seen = set()
            while cur >= 0 and cur not in seen:
                seen.add(cur)
                path.append(cur)
                cur = int(bsrc[cur])
            path.reverse()
        ids = IdSequence(self.activities)
        be0 = np.maximum(bedge, 0)
        blag = np.where(has_e, lcode[be0], -1) if len(lcode) else np.full(n, -1, dtype=np.int64)
        bstart = np.where(has_e, on_start[be0], False) if len(lcode) else np.zeros(n, dtype=bool)
        sch = Schedule(ids, FloatSequence(start.copy()), FloatSequence(finish.copy()), span, [ids[i] for i in path],
                       FloatSequence(slack), None,
                       _bsrc=bsrc, _blag=blag, _bstart=bstart)
        sch.binding = BindingMap(self, sch)
        sch._T = T
        sch._path_idx = path
        return sch

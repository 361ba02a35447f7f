"""The dependency structure of a timeline: the predecessors of every activity (``after``,
``before``, the order of work on a resource, splices) as Python lists (:meth:`edges`) and as
integer arrays (:meth:`_arrays`), a topological order of each (:meth:`topo`; Kahn's algorithm by
generations, :meth:`_generations`), and the checks run before scheduling (unknown activities,
cycles, unanchored holds).  A timeline of at most :data:`SMALL_LIMIT` activities added one by
one keeps to the lists (no numpy).
"""
from __future__ import annotations

from .store import no_gc

SMALL_LIMIT = 200         # activities up to which a timeline built one by one is scheduled without numpy


class StructureMixin:
    """Dependency structure of :class:`~dsl.engine.timeline.Timeline` (a mixin of it)."""

    def edges(self):
        """Integer structure: ``(ids, preds)`` where ``preds[i]`` lists ``(j, lag, on)``.

        Raises ``KeyError(name, referrer)`` for a dependency on an unknown activity.  The
        result is cached until the next :meth:`add`.
        """
        if self._edges is not None:
            return self._edges
        with no_gc():
            if self.activities.blocks:
                n, dst, src, lc, st = self._arrays()
                preds: list[list] = [[] for _ in range(n)]
                lag = self._lagtab
                for i, j, c, s in zip(dst.tolist(), src.tolist(), lc.tolist(), st.tolist()):
                    preds[i].append((j, None if c < 0 else lag[c], "start" if s else "finish"))
                self._edges = (list(self.activities), preds)
                return self._edges
            return self._build_edges()

    def _build_edges(self):
        ids = list(self.activities)
        idx = {a: i for i, a in enumerate(ids)}
        preds: list[list] = [[] for _ in ids]
        last_on: dict[str, int] = {}
        single = self.activities._single
        for i, a in enumerate(single.values()):
            for name, lag, on in a.after:
                j = idx.get(name)
                if j is None:
                    raise KeyError((name, a.id))
                preds[i].append((j, lag, on))
            for name in a.before:
                j = idx.get(name)
                if j is None:
                    raise KeyError((name, a.id))
                preds[j].append((i, None, "finish"))
            if a.resource and a.splice is not None and a.splice in single \
                    and single[a.splice].resource == a.resource:
                # an extension of an activity on its own resource takes its place in that
                # resource's order right after it (the splice below puts it before the work
                # that followed), not after whatever was added to the resource since
                continue
            if a.resource:
                prev = last_on.get(a.resource)
                if prev is not None and not any(p[0] == prev for p in preds[i]):
                    preds[i].append((prev, None, "finish"))
                last_on[a.resource] = i
        for i, a in enumerate(self.activities._single.values()):
            if a.splice is None:
                continue
            t = idx.get(a.splice)
            if t is None:
                raise KeyError((a.splice, a.id))
            for k, ps in enumerate(preds):     # whoever waits for the spliced activity waits for this one
                if k != i and any(j == t and on == "finish" for j, _, on in ps) \
                        and not any(j == i for j, _, _ in ps):
                    lag = next(lag for j, lag, on in ps if j == t and on == "finish")
                    ps.append((i, lag, "finish"))
        self._edges = (ids, preds)
        return self._edges

    @staticmethod
    def topo(n: int, preds) -> list[int] | None:
        """Topological order (smallest index first among ready ones), None on a cycle."""
        import heapq

        if all(j < i for i, ps in enumerate(preds) for j, _, _ in ps):
            return list(range(n))        # added in dependency order: the smallest-first order is 0..n-1
        succ: list[list[int]] = [[] for _ in range(n)]
        indeg = [0] * n
        for i, ps in enumerate(preds):
            for j, _, _ in ps:
                succ[j].append(i)
                indeg[i] += 1
        ready = [i for i in range(n) if indeg[i] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for k in succ[i]:
                indeg[k] -= 1
                if indeg[k] == 0:
                    heapq.heappush(ready, k)
        return order if len(order) == n else None

    @staticmethod
    def find_cycle(ids, preds) -> list[str]:
        """One cycle (activity ids) of a graph :meth:`topo` rejected."""
        succ: list[list[int]] = [[] for _ in preds]
        for i, ps in enumerate(preds):
            for j, _, _ in ps:
                succ[j].append(i)
        color = [0] * len(preds)            # 0 new, 1 on the stack, 2 done
        for root in range(len(preds)):
            if color[root]:
                continue
            stack, path = [(root, iter(succ[root]))], [root]
            color[root] = 1
            while stack:
                v, it = stack[-1]
                w = next(it, None)
                if w is None:
                    stack.pop()
                    path.pop()
                    color[v] = 2
                elif color[w] == 1:
                    cyc = path[path.index(w):]
                    return [ids[k] for k in cyc] + [ids[w]]
                elif color[w] == 0:
                    color[w] = 1
                    stack.append((w, iter(succ[w])))
                    path.append(w)
        return []

    # ------------------------------------------------------------ array structure
    def _arrays(self):
        """The dependency structure as numpy arrays (cached until the next :meth:`add`):
        ``(n, dst, src, lag_code, on_start)`` sorted by destination then predecessor order,
        with lag codes into ``self._lagtab`` (-1 = no lag).  Same edges and order as
        :meth:`edges`; raises ``KeyError(name, referrer)`` like it."""
        if self._arr is not None:
            return self._arr
        import numpy as np

        acts = self.activities
        lagtab: list = []
        lagpos: dict = {}

        def lc(e):
            if e is None:
                return -1
            c = lagpos.get(e)
            if c is None:
                c = lagpos[e] = len(lagtab)
                lagtab.append(e)
            return c

        if not acts.blocks or any(a.splice is not None for a in acts._single.values()):
            if acts.blocks:
                raise ValueError("splice_after is not supported on a timeline with activity blocks")
            ids, preds = self.edges()
            dst, src, lag, st = [], [], [], []
            for i, ps in enumerate(preds):
                for j, e, on in ps:
                    dst.append(i)
                    src.append(j)
                    lag.append(lc(e))
                    st.append(on == "start")
            arr = (len(ids), np.array(dst, dtype=np.int32), np.array(src, dtype=np.int32),
                   np.array(lag, dtype=np.int32), np.array(st, dtype=bool))
            self._lagtab, self._arr = lagtab, arr
            return arr
        # blocks (and activities added one by one around them), in the order of addition
        D, S, L, O, Q = [], [], [], [], []      # per segment arrays; Q = order key within a destination
        one_d, one_s, one_l, one_o, one_q = [], [], [], [], []
        seq = 0
        last_on: dict = {}
        into: dict = {}                          # single destination -> predecessor positions so far
        index_of = acts.index_of
        for seg in acts._segs:
            if seg[0] == "one":
                for key in seg[1]:
                    a = acts._single[key]
                    i = index_of(key)
                    mine = into.setdefault(i, [])
                    for name, e, on in a.after:
                        j = index_of(name)
                        if j is None:
                            raise KeyError((name, a.id))
                        one_d.append(i); one_s.append(j); one_l.append(lc(e)); one_o.append(on == "start")
                        one_q.append(seq); seq += 1
                        mine.append(j)
                    for name in a.before:
                        j = index_of(name)
                        if j is None:
                            raise KeyError((name, a.id))
                        one_d.append(j); one_s.append(i); one_l.append(-1); one_o.append(False)
                        one_q.append(seq); seq += 1
                        into.setdefault(j, []).append(i)
                    if a.resource:
                        prev = last_on.get(a.resource)
                        if prev is not None and prev not in mine:
                            one_d.append(i); one_s.append(prev); one_l.append(-1); one_o.append(False)
                            one_q.append(seq); seq += 1
                            mine.append(prev)
                        last_on[a.resource] = i
                continue
            b, off = seg[1], seg[2]
            n = b.n
            cnt = np.diff(b.ptr)
            d = off + np.repeat(np.arange(n, dtype=np.int64), cnt)
            s = off + b.src.astype(np.int64)
            codes = np.array([lc(e) for e in b.lags] + [-1], dtype=np.int64)
            lcode = codes[b.lcode]                 # -1 indexes the trailing "no lag"
            q = seq + np.arange(len(d), dtype=np.int64)
            seq += len(d)
            D.append(d); S.append(s); L.append(lcode); O.append(b.on_start.astype(bool)); Q.append(q)
            # work on one resource runs in the order it was added
            rc = b.rcode
            has = rc >= 0
            if has.any():
                loc = np.flatnonzero(has)
                order = loc[np.argsort(rc[loc], kind="stable")]
                r = rc[order]
                same = np.r_[False, r[1:] == r[:-1]]
                prev = np.where(same, np.r_[-1, order[:-1]] + off, -1)
                firsts = np.flatnonzero(~same)
                for k in firsts:
                    p_ = last_on.get(b.resources[r[k]])
                    if p_ is not None:
                        prev[k] = p_
                lasts = np.r_[firsts[1:] - 1, len(order) - 1]
                for k in lasts:
                    last_on[b.resources[r[k]]] = int(order[k]) + off
                dst_r = order + off
                keep = prev >= 0
                dst_r, prev = dst_r[keep], prev[keep]
                if len(d):                        # not when it is already a declared predecessor
                    prev_of = np.full(n, -1, dtype=np.int64)
                    prev_of[dst_r - off] = prev
                    dup_nodes = d[s == prev_of[d - off]]
                    if len(dup_nodes):
                        dup = np.zeros(n, dtype=bool)
                        dup[dup_nodes - off] = True
                        k_ = ~dup[dst_r - off]
                        dst_r, prev = dst_r[k_], prev[k_]
                D.append(dst_r); S.append(prev); L.append(np.full(len(prev), -1, dtype=np.int64))
                O.append(np.zeros(len(prev), dtype=bool))
                Q.append(seq + np.arange(len(prev), dtype=np.int64))
                seq += len(prev)
        D.append(np.array(one_d, dtype=np.int64)); S.append(np.array(one_s, dtype=np.int64))
        L.append(np.array(one_l, dtype=np.int64)); O.append(np.array(one_o, dtype=bool))
        Q.append(np.array(one_q, dtype=np.int64))
        d, s, l_, o, q = (np.concatenate(x) for x in (D, S, L, O, Q))
        perm = np.lexsort((q, d))
        del q
        i32 = np.int32
        arr = (len(acts), d[perm].astype(i32), s[perm].astype(i32), l_[perm].astype(i32), o[perm])
        self._lagtab, self._arr = lagtab, arr
        return arr

    def structure(self):
        """Check the dependency structure (``KeyError(name, referrer)`` for a dependency on an
        unknown activity) and cache it as arrays."""
        return self._arrays()

    def _small(self) -> bool:
        """A timeline built one activity at a time (no :meth:`add_many` block) of at most
        :data:`SMALL_LIMIT` activities: its structure, cycle check, mirror and schedule are
        computed on the predecessor lists of :meth:`edges` in plain Python (no numpy: its
        import costs more than such a timeline's whole schedule)."""
        return not self.activities.blocks and len(self.activities) <= SMALL_LIMIT

    def check_structure(self) -> None:
        """:meth:`structure`'s check (``KeyError(name, referrer)`` for a dependency on an
        unknown activity) without building the arrays of a small timeline."""
        if self._small():
            self.edges()
        else:
            self._arrays()

    def unanchored(self):
        """``(hold, anchor)`` of the first hold anchored to an unknown activity, or None."""
        acts = self.activities
        for h in self.holds._single.values():
            for anchor in (h.start, h.end):
                if anchor is not None and anchor[0] not in acts:
                    return h, anchor
        n = len(acts)
        for b in self.holds.blocks:
            for col in (b.s_act, b.e_act):
                if len(col) and (col.max() >= n or col.min() < -1):
                    k = int(((col >= n) | (col < -1)).argmax())
                    return b.hold_unchecked(k), ("?", "")
        return None

    def _gens(self):
        """Generations of the structure (cached with it), None on a cycle."""
        arr = self._arrays()
        if getattr(self, "_gen_for", None) is not arr:
            self._gen_for, self._gen_val = arr, self._generations(arr[0], arr[1], arr[2])
        return self._gen_val

    @staticmethod
    def _generations(n, dst, src, partial: bool = False):
        """Kahn's algorithm by generations: a list of sorted index arrays (an activity's
        predecessors are all in earlier generations), or None on a cycle (with ``partial``,
        the generations of the activities that can run)."""
        import numpy as np

        indeg = np.bincount(dst, minlength=n)
        so = np.argsort(src, kind="stable")
        sdst = dst[so]
        sptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=sptr[1:])
        deg = indeg.copy()
        F = np.flatnonzero(deg == 0)
        gens = []
        done = 0
        while F.size:
            gens.append(F)
            done += F.size
            st = sptr[F]
            cnt = sptr[F + 1] - st
            tot = int(cnt.sum())
            if not tot:
                break
            cs = np.cumsum(cnt)
            idx = np.repeat(st - cs + cnt, cnt) + np.arange(tot)
            tg = sdst[idx]
            np.subtract.at(deg, tg, 1)
            F = tg[deg[tg] == 0]
            if len(F) > 1:
                F.sort()
                F = F[np.concatenate(([True], F[1:] != F[:-1]))]
        return gens if done == n or partial else None

    def has_cycle(self) -> bool:
        if self._small():
            ids, preds = self.edges()
            return self.topo(len(ids), preds) is None
        return bool(len(self.activities)) and self._gens() is None

"""Mirroring a timeline into the quantity graph — one activity node per activity and its order
edges, for timelines of at most :data:`MIRROR_LIMIT` activities — and the per-resource views
the graph and the analyses read without a record per activity: the durations charged to each
resource, each resource's symbolic busy time, and its busy time in the nominal schedule.
"""
from __future__ import annotations

from .results import Schedule

MIRROR_LIMIT = 5000       # activities up to which each becomes a node of the quantity graph


class MirrorMixin:
    """Mirror and per-resource views of :class:`~dsl.engine.timeline.Timeline` (a mixin of it)."""

    def charged_durations(self) -> dict:
        """``{resource: distinct duration expressions of the activities charged to it}``
        (:attr:`Activity.charged`; activities added as columns are charged to their resource),
        in a deterministic order."""
        out: dict = {}
        for a in self.activities._single.values():
            r = a.charge or a.resource
            if r:
                out.setdefault(r, {})[a.duration] = None
        for b in self.activities.blocks:
            import numpy as np
            has = b.rcode >= 0
            if has.any():
                nd = len(b.durations)
                pairs = np.unique(b.rcode[has].astype(np.int64) * nd + b.dcode[has])
                for code in pairs.tolist():
                    out.setdefault(b.resources[code // nd], {})[b.durations[code % nd]] = None
        return {r: list(d) for r, d in out.items()}

    def resource_sums(self) -> list:
        """Symbolic busy time of every resource (an activity without one is its own), distinct."""
        import sympy as sp
        from collections import Counter

        by_res: dict = {}
        for a in self.activities._single.values():
            by_res.setdefault(a.resource or a.id, Counter())[a.duration] += 1
        for b in self.activities.blocks:
            import numpy as np
            has = b.rcode >= 0
            nd = len(b.durations)
            if has.any():
                cnt = np.bincount(b.rcode[has] * nd + b.dcode[has], minlength=len(b.resources) * nd)
                cnt = cnt.reshape(len(b.resources), nd)
                for r, row in enumerate(cnt.tolist()):
                    c = by_res.setdefault(b.resources[r], Counter())
                    for k, x in enumerate(row):
                        if x:
                            c[b.durations[k]] += x
            for i in np.flatnonzero(~has).tolist():
                by_res.setdefault(b.names[i], Counter())[b.durations[b.dcode[i]]] += 1
        return list(dict.fromkeys(sp.Add(*[n * e for e, n in v.items()]) for v in by_res.values()))

    def mirror(self):
        """``(rows, edges)`` to mirror the activities into the quantity graph: rows
        ``(id, duration, resource, plugin, doc)`` in order, edges the distinct ``(pred, succ)``
        id pairs sorted (built from the columns, no activity object per row)."""
        rows = []
        for seg in self.activities._segs:
            if seg[0] == "one":
                for k in seg[1]:
                    a = self.activities._single[k]
                    rows.append((a.id, a.duration, a.resource, a.plugin, a.doc))
            else:
                b = seg[1]
                names, durs, res = b.names.all(), b.durations, b.resources
                doc = b.doc
                for i, (dc, rc) in enumerate(zip(b.dcode.tolist(), b.rcode.tolist())):
                    rows.append((names[i], durs[dc], None if rc < 0 else res[rc], b.plugin,
                                 "" if doc is None else doc(i)))
        ids = [r[0] for r in rows]
        if self._small():
            _, preds = self.edges()
            pairs_ = {(j, i) for i, ps in enumerate(preds) for j, _, _ in ps}
            return rows, sorted((ids[u], ids[v]) for u, v in pairs_)
        import numpy as np

        n, dst, src, _, _ = self._arrays()
        pairs = np.sort(src.astype(np.int64) * max(n, 1) + dst)     # np.unique without importing numpy.ma
        if len(pairs) > 1:
            pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]
        edges = sorted((ids[u], ids[v]) for u, v in zip((pairs // max(n, 1)).tolist(), (pairs % max(n, 1)).tolist()))
        return rows, edges

    def resource_codes(self):
        """``(names, codes)``: the resources and each activity's index into them (-1: none)."""
        import numpy as np

        names: dict = {}
        parts = []
        for seg in self.activities._segs:
            if seg[0] == "one":
                parts.append(np.array([-1 if not self.activities._single[k].resource else
                                       names.setdefault(self.activities._single[k].resource, len(names))
                                       for k in seg[1]], dtype=np.int64))
            else:
                b = seg[1]
                m = np.array([names.setdefault(r, len(names)) for r in b.resources] + [-1], dtype=np.int64)
                parts.append(m[b.rcode])
        return list(names), (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))

    def busy_times(self, sched: Schedule) -> dict:
        """Resource -> summed activity durations (s) of the nominal schedule (in activity order)."""
        import numpy as np

        names, codes = self.resource_codes()
        d = np.asarray(sched.finish) - np.asarray(sched.start)
        out: dict = {}
        for c in dict.fromkeys(codes.tolist()):
            if c >= 0:
                out[names[c]] = float(np.cumsum(d[codes == c])[-1])
        return out

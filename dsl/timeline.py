"""Timelines: activities with durations on resources, their dependencies, and memory held
between events — the one event-model engine every plugin shares (training steps, pipeline
schedules, asynchronous checkpoints, RL loops, agent tool chains, bucketed all-reduce).

A plugin builds a :class:`Timeline` in ``plan_activities_schedule``::

    tl = ctx.timeline("step")
    tl.add("F0.s0", t_f, resource="stage0", kind="forward")
    tl.add("F0.s1", t_f, resource="stage1", after=[("F0.s0", t_c)])   # lag = transfer time
    tl.hold("act0.s0", act_bytes, pool="stage0", start="F0.s0", end="B0.s0")
    tl.makespan_quantity("pipeline_time")
    tl.peak_quantity("stage0_peak", pool="stage0")
    tl.event_quantity("first_backward", "B0.s1", at="start")  # when one activity starts/finishes

Semantics
---------
* An activity starts when all its predecessors are done: the activities in ``after`` (each a
  name, ``(name, lag)`` or ``(name, lag, "start")`` for a start-to-start dependency), the
  activities that list it in ``before``, the previous activity added on the same
  ``resource`` (work on one resource runs in the order it was added), and its ``release``
  time (an absolute earliest start, e.g. a snapshot requested at t = 20 s).
* The schedule is computed in one topological pass (Kahn's algorithm on integer indices):
  O(activities + dependencies), no path enumeration.
* A hold of ``bytes`` in ``pool`` is live on the half-open interval [start, end): a buffer
  freed at the instant another is allocated does not overlap it (the region is reused).  A
  hold whose start and end coincide (zero-duration activities) is live at that instant.
  The peak of a pool is the maximum over time of the sum of live holds; the holds live at
  the (first) peak instant are reported with it.

Symbolic results
----------------
Durations, lags, releases and bytes are sympy expressions of the plan's quantities.  For
small timelines (``symbolic="auto"`` and at most :data:`FULL_LIMIT` activities) the makespan is
the exact max-plus expression (``Max`` over every merge point), valid for every input value.
Otherwise it is the symbolic length of the critical path at the nominal point: exact there
and wherever that path stays critical (the solver verifies roots on it).  A pool's peak is the
symbolic sum of the holds live at the nominal peak instant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FULL_LIMIT = 200          # activities up to which the makespan is a full max-plus expression
MIRROR_LIMIT = 5000       # activities up to which each becomes a node of the quantity graph


def _expr(x):
    from .model import _as_expr
    return _as_expr(x)


@dataclass(slots=True)
class Activity:
    id: str
    duration: Any
    resource: str | None
    after: tuple            # ((id, lag expr, "finish"|"start"), ...)
    before: tuple[str, ...]
    doc: str
    plugin: str
    release: Any = None
    kind: str = ""          # forward, backward, dX, dW, update, transfer, … (figures colour by it)
    lane: str | None = None  # row of a Gantt chart (default: the resource)
    label: str = ""         # short text drawn in the bar (e.g. the micro-batch number)
    style: str = ""         # "hatched" for a second chunk / reverse direction


@dataclass(slots=True)
class Hold:
    id: str
    bytes: Any
    pool: str
    start: tuple | None     # (activity, "start"|"finish") or None = timeline start
    end: tuple | None       # (activity, "start"|"finish") or None = timeline end
    doc: str
    plugin: str
    kind: str = ""


@dataclass
class Schedule:
    """Nominal schedule of a timeline (seconds, floats)."""

    ids: list[str]
    start: list[float]
    finish: list[float]
    makespan: float
    path: list[str]                     # critical path, first to last
    slack: list[float]
    binding: dict[str, Any]             # activity -> what set its start: "release" or (pred, lag, on)

    def index(self) -> dict[str, int]:
        return {a: i for i, a in enumerate(self.ids)}


@dataclass
class Profile:
    """Memory of one pool over time."""

    pool: str
    peak: float                         # bytes
    time: float                         # first instant the peak is reached (s)
    live: list[str]                     # hold ids live at that instant, largest first
    steps: list[tuple[float, float]]    # (time, level after the change), a step function


@dataclass
class Timeline:
    """Activities and memory holds of one plan on one timeline (see the module docstring)."""

    plan: str
    name: str
    activities: dict[str, Activity] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)
    makespans: list[tuple] = field(default_factory=list)
    peaks: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    symbolic: str = "auto"              # auto | full | path
    _plugin: str = ""
    graph: Any = None                   # networkx DiGraph of the activities (small timelines)
    schedule: Schedule | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)
    makespan_expr: Any = None

    # ------------------------------------------------------------ building
    def add(self, id: str, duration, resource: str | None = None, after=(), before=(), doc: str = "",
            release=None, kind: str = "", lane: str | None = None, label: str = "", style: str = ""):
        """Add activity ``id`` lasting ``duration`` (sympy, seconds) on ``resource``.

        :param after: predecessors: ``"id"``, ``("id", lag)`` (start ≥ finish + lag) or
            ``("id", lag, "start")`` (start ≥ the predecessor's start + lag).
        :param before: activities that cannot start before this one finishes.
        :param release: absolute earliest start (seconds).
        :param kind, lane, label, style: presentation (Gantt colour, row, text, hatching).
        """
        if id in self.activities:
            raise ValueError(f"activity '{id}' added twice to timeline '{self.name}'")
        deps = []
        for a in after:
            if isinstance(a, str):
                deps.append((a, None, "finish"))
            else:
                name, lag, *on = a
                deps.append((name, None if lag is None else _expr(lag), on[0] if on else "finish"))
        self.activities[id] = Activity(id, _expr(duration), resource, tuple(deps), tuple(before), doc,
                                       self._plugin, None if release is None else _expr(release), kind,
                                       lane, label, style)

    def hold(self, id: str, nbytes, pool: str, start=None, end=None, doc: str = "", kind: str = ""):
        """Hold ``nbytes`` (sympy, bytes) in memory ``pool`` from ``start`` to ``end``.

        ``start``/``end`` are an activity id (its start for ``start``, its finish for
        ``end``), ``(id, "start"|"finish")``, or None for the timeline's start/end.
        """
        def anchor(x, default):
            if x is None:
                return None
            return (x, default) if isinstance(x, str) else (x[0], x[1])
        if id in self.holds:
            raise ValueError(f"hold '{id}' added twice to timeline '{self.name}'")
        self.holds[id] = Hold(id, _expr(nbytes), pool, anchor(start, "start"), anchor(end, "finish"), doc,
                              self._plugin, kind)

    def makespan_quantity(self, name: str, unit: str = "s", doc: str = "", headline: bool = True,
                          rank: float | None = None):
        """Define plan quantity ``name`` as this timeline's makespan (built at finalize)."""
        self.makespans.append((name, unit, doc, headline, self._plugin, rank))

    def event_quantity(self, name: str, activity: str, at: str = "finish", unit: str = "s", doc: str = "",
                       headline: bool = False, rank: float | None = None):
        """Define plan quantity ``name`` as the time at which ``activity`` starts (``at="start"``)
        or finishes (``at="finish"``), measured from the timeline's start (built at finalize,
        like the makespan: exact max-plus on small timelines, the symbolic length of the
        nominal path to the activity otherwise).  The difference of two such quantities is,
        for instance, the steady-state period of a loop modelled over a few iterations."""
        if at not in ("start", "finish"):
            raise ValueError(f"event_quantity: at must be 'start' or 'finish', not {at!r}")
        self.events.append((name, activity, at, unit, doc, headline, self._plugin, rank))

    def peak_quantity(self, name: str, pool: str, unit: str = "GiB", doc: str = "", headline: bool = False,
                      rank: float | None = None):
        """Define plan quantity ``name`` as the peak of memory ``pool`` (bytes)."""
        self.peaks.append((name, pool, unit, doc, headline, self._plugin, rank))

    def pools(self) -> list[str]:
        return sorted({h.pool for h in self.holds.values()})

    # ------------------------------------------------------------ structure
    def edges(self):
        """Integer structure: ``(ids, preds)`` where ``preds[i]`` lists ``(j, lag, on)``.

        Raises ``KeyError(name, referrer)`` for a dependency on an unknown activity.
        """
        ids = list(self.activities)
        idx = {a: i for i, a in enumerate(ids)}
        preds: list[list] = [[] for _ in ids]
        last_on: dict[str, int] = {}
        for i, a in enumerate(self.activities.values()):
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
            if a.resource:
                prev = last_on.get(a.resource)
                if prev is not None and not any(p[0] == prev for p in preds[i]):
                    preds[i].append((prev, None, "finish"))
                last_on[a.resource] = i
        return ids, preds

    @staticmethod
    def topo(n: int, preds) -> list[int] | None:
        """Topological order (smallest index first among ready ones), None on a cycle."""
        import heapq

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
        import networkx as nx

        g = nx.DiGraph()
        for i, ps in enumerate(preds):
            for j, _, _ in ps:
                g.add_edge(ids[j], ids[i])
        cyc = nx.find_cycle(g)
        return [e[0] for e in cyc] + [cyc[0][0]]

    # ------------------------------------------------------------ numeric engine
    def compute(self, num) -> Schedule:
        """Nominal schedule.  ``num(expr)`` evaluates a sympy expression to a float."""
        ids, preds = self.edges()
        order = self.topo(len(ids), preds)
        if order is None:
            raise ValueError("cycle")
        acts = list(self.activities.values())
        cache: dict = {}

        def f(e):
            if e is None:
                return 0.0
            v = cache.get(e)
            if v is None:
                v = cache[e] = num(e)
            return v

        dur = [f(a.duration) for a in acts]
        start = [0.0] * len(ids)
        finish = [0.0] * len(ids)
        bind_of: list = [None] * len(ids)
        for i in order:
            s, b = 0.0, None
            rel = acts[i].release
            if rel is not None:
                s, b = f(rel), "release"
            for j, lag, on in preds[i]:
                t = (finish[j] if on == "finish" else start[j]) + f(lag)
                if b is None or t > s:
                    s, b = t, (j, lag, on)
            start[i], finish[i] = s, s + dur[i]
            bind_of[i] = b
        span = max(finish, default=0.0)
        tol = 1e-9 * max(1.0, abs(span))
        # latest finish (for slack): reverse pass
        succ: list[list] = [[] for _ in ids]
        for i, ps in enumerate(preds):
            for j, lag, on in ps:
                succ[j].append((i, f(lag), on))
        lf = [span] * len(ids)
        ls = [0.0] * len(ids)
        for i in reversed(order):
            m = span
            for k, lag, on in succ[i]:
                t = ls[k] - lag
                if on == "start":      # start_k >= start_i + lag: bounds the latest start of i
                    t = t + dur[i]
                if t < m:
                    m = t
            lf[i] = m
            ls[i] = m - dur[i]
        slack = [max(0.0, ls[i] - start[i]) if ls[i] - start[i] > tol else 0.0 for i in range(len(ids))]
        # critical path: from the last-finishing activity back through binding predecessors
        path = []
        cur = max(range(len(ids)), key=lambda i: (finish[i], -i)) if ids else None
        seen = set()
        while cur is not None and cur not in seen:
            seen.add(cur)
            path.append(cur)
            b = bind_of[cur]
            cur = b[0] if isinstance(b, tuple) else None
        path.reverse()
        binding = {ids[i]: ("release" if b == "release" else (ids[b[0]], b[1], b[2]))
                   for i, b in enumerate(bind_of) if b is not None}
        return Schedule(ids, start, finish, span, [ids[i] for i in path], slack, binding)

    @staticmethod
    def path_to(sched: Schedule, activity: str) -> list[str]:
        """Activities whose finish (or start) set the start of ``activity``, first to last,
        ending with ``activity`` itself (its binding chain at nominal values)."""
        path, cur, seen = [], activity, set()
        while cur is not None and cur not in seen:
            seen.add(cur)
            path.append(cur)
            b = sched.binding.get(cur)
            cur = b[0] if isinstance(b, tuple) else None
        path.reverse()
        return path

    def path_expr(self, sched: Schedule, end: str | None = None, at: str = "finish"):
        """Symbolic length of the nominal critical path (durations, lags and a binding release);
        with ``end``, of the binding chain up to that activity's finish (or start, ``at="start"``)."""
        import sympy as sp
        from collections import Counter

        path = sched.path if end is None else self.path_to(sched, end)
        if not path:
            return sp.Integer(0)
        terms: Counter = Counter()
        first = self.activities[path[0]]
        if sched.binding.get(first.id) == "release" and first.release is not None:
            terms[first.release] += 1
        if end is not None and at == "start":
            terms[self.activities[end].duration] -= 1
        for a in path:
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

    def full_expr(self):
        """Exact max-plus makespan expression (small timelines)."""
        import sympy as sp

        ids, st, fin = self.full_times()
        sinks = [fin[i] for i in range(len(ids))]
        return sp.Max(*sinks) if len(sinks) > 1 else (sinks[0] if sinks else sp.Integer(0))

    def full_times(self):
        """Exact max-plus start and finish expressions of every activity (small timelines).

        :return: ``(ids, starts, finishes)``, lists in the order activities were added.
        """
        import sympy as sp

        ids, preds = self.edges()
        order = self.topo(len(ids), preds)
        acts = list(self.activities.values())
        st: list = [None] * len(ids)
        fin: list = [None] * len(ids)
        for i in order:
            cands = []
            if acts[i].release is not None:
                cands.append(acts[i].release)
            for j, lag, on in sorted(preds[i], key=lambda p: p[0]):
                base = fin[j] if on == "finish" else st[j]
                cands.append(base + lag if lag is not None else base)
            s = sp.Max(*cands) if len(cands) > 1 else (cands[0] if cands else sp.Integer(0))
            st[i], fin[i] = s, s + acts[i].duration
        return ids, st, fin

    def profile(self, pool: str, num, sched: Schedule) -> Profile:
        """Memory of ``pool`` over the nominal schedule."""
        idx = sched.index()

        def at(anchor, default):
            if anchor is None:
                return default
            i = idx[anchor[0]]
            return sched.start[i] if anchor[1] == "start" else sched.finish[i]

        ids, preds = self.edges()
        rank = {ids[i]: r for r, i in enumerate(self.topo(len(ids), preds) or range(len(ids)))}

        def seq(anchor, default):
            return default if anchor is None else 2 * rank[anchor[0]] + (anchor[1] == "finish")

        # (time, frees (0) before allocations (1) before zero-length holds (2), their order,
        #  hold index, delta, allocation?)
        events = []
        holds = [h for h in self.holds.values() if h.pool == pool]
        sizes = [num(h.bytes) for h in holds]
        for k, h in enumerate(holds):
            t0, t1 = at(h.start, 0.0), at(h.end, sched.makespan)
            if t1 < t0:
                continue
            if t1 > t0:
                events.append((t0, 1, 0, k, sizes[k], True))
                events.append((t1, 0, 0, k, -sizes[k], False))
            else:
                # a hold between two events of one instant (zero-duration activities) is live
                # at that instant, after the allocations there; such holds follow each other
                # in the order of their anchors along the dependencies
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
        return sp.Add(*[self.holds[h].bytes for h in prof.live]) if prof.live else sp.Integer(0)

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
    tl.time_quantity("first_arrival", "net0", at="finish")           # when one activity starts/ends
    tl.area_quantity("state_area", pool="kv", unit="GiB*s")           # ∫ held bytes dt (capacity × time)

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
symbolic sum of the holds live at the nominal peak instant.  ``time_quantity`` and
``area_quantity`` use the exact max-plus start/finish expressions of each activity on small
timelines, the activity's nominal binding chain (:meth:`Timeline.chain_expr`) otherwise.  In the
max-plus expressions a predecessor that surely finishes before another predecessor starts is
left out (it cannot bind), which keeps long chains with resource order linear in size.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FULL_LIMIT = 200          # activities up to which the makespan is a full max-plus expression
FORM_LIMIT = 64          # non-dominated path forms per activity kept by full_expr
MIRROR_LIMIT = 5000       # activities up to which each becomes a node of the quantity graph


_BASIC = None


class no_gc:
    """Context manager pausing the cyclic garbage collector while a large timeline is built or
    scheduled: millions of small tuples would otherwise trigger repeated full collections
    although none of them forms a cycle."""

    def __enter__(self):
        import gc
        self._was = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc):
        import gc
        if self._was:
            gc.enable()
        return False


def _expr(x):
    global _BASIC
    if _BASIC is None:
        from sympy import Basic
        _BASIC = Basic
    if isinstance(x, _BASIC):        # the common case: no import, no conversion
        return x
    from dsl.engine.nodes import as_expr
    return as_expr(x)


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
    splice: str | None = None  # spliced after this activity: its finish-dependents also wait for this one


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

    _index: dict | None = field(default=None, repr=False, compare=False)

    def index(self) -> dict[str, int]:
        """Activity id -> position in ``ids`` (built once)."""
        if self._index is None:
            self._index = {a: i for i, a in enumerate(self.ids)}
        return self._index


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
    times: list[tuple] = field(default_factory=list)     # (name, activity, "start"|"finish", unit, …)
    areas: list[tuple] = field(default_factory=list)     # (name, pool, unit, …)
    refs: dict[str, tuple] = field(default_factory=dict)  # quantity name -> references (sources)
    sealed: bool = False                # True after evaluation: no activity or hold can be added
    symbolic: str = "auto"              # auto | full | path
    _plugin: str = ""
    graph: Any = None                   # networkx DiGraph of the activities (small timelines)
    schedule: Schedule | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)
    makespan_expr: Any = None
    _edges: Any = field(default=None, repr=False, compare=False)       # cache of edges()
    _by_pool: Any = field(default=None, repr=False, compare=False)     # cache of holds_in()

    # ------------------------------------------------------------ building
    def add(self, id: str, duration, resource: str | None = None, after=(), before=(), doc: str = "",
            release=None, kind: str = "", lane: str | None = None, label: str = "", style: str = "",
            splice_after: str | None = None):
        """Add activity ``id`` lasting ``duration`` (sympy, seconds) on ``resource``.

        :param after: predecessors: ``"id"``, ``("id", lag)`` (start ≥ finish + lag) or
            ``("id", lag, "start")`` (start ≥ the predecessor's start + lag).
        :param before: activities that cannot start before this one finishes.
        :param release: absolute earliest start (seconds).
        :param kind, lane, label, style: presentation (Gantt colour, row, text, hatching).
        :param splice_after: an activity (possibly scheduled by another plugin, in any order)
            that this one extends: it starts when that activity finishes, and every other
            activity that waits for that activity's finish waits for this one too (e.g. the
            expected straggler delay after ``compute``, before the collectives that follow it).
        """
        if self.sealed:
            raise AttributeError(f"timeline '{self.name}' of '{self.plan}' is read-only after evaluation")
        if id in self.activities:
            raise ValueError(f"activity '{id}' added twice to timeline '{self.name}'")
        self._edges = None
        deps = []
        for a in after:
            if isinstance(a, str):
                deps.append((a, None, "finish"))
            else:
                name, lag, *on = a
                deps.append((name, None if lag is None else _expr(lag), on[0] if on else "finish"))
        if splice_after is not None:
            deps.append((splice_after, None, "finish"))
        self.activities[id] = Activity(id, _expr(duration), resource, tuple(deps), tuple(before), doc,
                                       self._plugin, None if release is None else _expr(release), kind,
                                       lane, label, style, splice_after)

    def hold(self, id: str, nbytes, pool: str, start=None, end=None, doc: str = "", kind: str = ""):
        if self.sealed:
            raise AttributeError(f"timeline '{self.name}' of '{self.plan}' is read-only after evaluation")
        """Hold ``nbytes`` (sympy, bytes) in memory ``pool`` from ``start`` to ``end``.

        ``start``/``end`` are an activity id (its start for ``start``, its finish for
        ``end``), ``(id, "start"|"finish")``, or None for the timeline's start/end.
        """
        if id in self.holds:
            raise ValueError(f"hold '{id}' added twice to timeline '{self.name}'")
        self._by_pool = None
        if start is not None and not (type(start) is tuple and len(start) == 2):
            start = (start, "start") if isinstance(start, str) else (start[0], start[1])
        if end is not None and not (type(end) is tuple and len(end) == 2):
            end = (end, "finish") if isinstance(end, str) else (end[0], end[1])
        self.holds[id] = Hold(id, _expr(nbytes), pool, start, end, doc, self._plugin, kind)

    def makespan_quantity(self, name: str, unit: str = "s", doc: str = "", headline: bool = True,
                          rank: float | None = None, references: tuple = ()):
        """Define plan quantity ``name`` as this timeline's makespan (built at finalize)."""
        self.refs[name] = tuple(references)
        self.makespans.append((name, unit, doc, headline, self._plugin, rank))

    def peak_quantity(self, name: str, pool: str, unit: str = "GiB", doc: str = "", headline: bool = False,
                      rank: float | None = None, references: tuple = ()):
        """Define plan quantity ``name`` as the peak of memory ``pool`` (bytes)."""
        self.refs[name] = tuple(references)
        self.peaks.append((name, pool, unit, doc, headline, self._plugin, rank))

    def event_quantity(self, name: str, activity: str, at: str = "finish", unit: str = "s", doc: str = "",
                       headline: bool = False, rank: float | None = None, references: tuple = ()):
        """:meth:`time_quantity` with ``at="finish"`` by default: the time at which
        ``activity`` finishes (or starts), e.g. two of them give a loop's steady-state period."""
        if at not in ("start", "finish"):
            raise ValueError(f"event_quantity: at must be 'start' or 'finish', not {at!r}")
        self.time_quantity(name, activity, at, unit, doc, headline, rank, references)

    def finish_quantity(self, name: str, activity: str, unit: str = "s", doc: str = "", headline: bool = False,
                        rank: float | None = None, references: tuple = ()):
        """:meth:`time_quantity` of ``activity``'s finish (e.g. when a checkpoint is committed)."""
        self.time_quantity(name, activity, "finish", unit, doc, headline, rank, references)

    def time_quantity(self, name: str, activity: str, at: str = "start", unit: str = "s", doc: str = "",
                      headline: bool = False, rank: float | None = None, references: tuple = ()):
        """Define plan quantity ``name`` as the time ``activity`` starts (``at="start"``) or
        finishes (``at="finish"``), measured from the timeline's origin (built at finalize;
        exact max-plus expression on small timelines, the symbolic length of the activity's
        binding chain otherwise)."""
        if at not in ("start", "finish"):
            raise ValueError(f"at must be 'start' or 'finish', not {at!r}")
        self.refs[name] = tuple(references)
        self.times.append((name, activity, at, unit, doc, headline, self._plugin, rank))

    def area_quantity(self, name: str, pool: str, unit: str = "GiB*s", doc: str = "", headline: bool = False,
                      rank: float | None = None, references: tuple = ()):
        """Define plan quantity ``name`` as the integral over time of the bytes live in ``pool``
        (B·s): A = Σ_holds bytes · max(0, t_end − t_start) — the "capacity × residence time" of
        state held across waits (book ch. 3 §3.1.2, A_M = ∫ M(t) dt)."""
        self.refs[name] = tuple(references)
        self.areas.append((name, pool, unit, doc, headline, self._plugin, rank))

    def pools(self) -> list[str]:
        return sorted(self.holds_in())

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
        from collections import Counter

        c = Counter(h.bytes for h in self.holds_in(pool))
        return sp.Add(*[n * e for e, n in c.items()]) if c else sp.Integer(0)

    # ------------------------------------------------------------ structure
    def edges(self):
        """Integer structure: ``(ids, preds)`` where ``preds[i]`` lists ``(j, lag, on)``.

        Raises ``KeyError(name, referrer)`` for a dependency on an unknown activity.  The
        result is cached until the next :meth:`add`.
        """
        if self._edges is not None:
            return self._edges
        with no_gc():
            return self._build_edges()

    def _build_edges(self):
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
        for i, a in enumerate(self.activities.values()):
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
        with no_gc():
            return self._compute(num)

    def _compute(self, num) -> Schedule:
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

    def finish_exprs(self) -> dict:
        """Exact max-plus finish time of every activity (small timelines): ``{id: expr}``."""
        r = self.full_times(limit=10 ** 9)
        return {} if r is None else dict(zip(r[0], r[2]))

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

    def _forms(self, limit: int):
        """Max-plus start and finish times of every activity as sets of *path forms*.

        A path form is a linear combination of the inputs (the terms of the expanded durations,
        lags and releases, with rational coefficients) summed along one path.  A form that
        another form of the same set dominates (every coefficient ≥) is dropped — valid because
        durations, lags and releases are non-negative — so each time is the ``Max`` over its
        Pareto-optimal paths, exact for every non-negative input, built in one topological pass
        without sympy's pairwise ``Max`` simplification.

        :return: ``(ids, starts, finishes, pareto, to_expr)`` or None when some activity keeps
            more than ``limit`` forms (the caller then uses critical-path lengths).
        """
        import sympy as sp
        from fractions import Fraction

        ids, preds = self.edges()
        order = self.topo(len(ids), preds)
        acts = list(self.activities.values())
        terms: dict = {}          # term (symbol or non-linear atom) -> index
        vec_of: dict = {}         # expression -> ((index, Fraction), ...)

        def vec(e):
            v = vec_of.get(e)
            if v is None:
                acc: dict = {}
                for t, c in sp.expand(e).as_coefficients_dict().items():
                    if c.is_Float:                  # a decimal literal: its exact binary value
                        c = sp.Rational(c)
                    if not c.is_Rational:           # irrational coefficient: the whole term is one input
                        t, c = c * t, sp.Integer(1)
                    k = terms.setdefault(t, len(terms))
                    acc[k] = acc.get(k, 0) + Fraction(int(c.p), int(c.q))
                v = vec_of[e] = tuple(sorted(acc.items()))
            return v

        def shift(forms, e):
            if e is None:
                return forms
            add = vec(e)
            out = set()
            for f in forms:
                d = dict(f)
                for k, c in add:
                    d[k] = d.get(k, 0) + c
                out.add(tuple(sorted((k, c) for k, c in d.items() if c)))
            return out

        def pareto(forms):
            if len(forms) <= 1:
                return forms
            dense = [dict(f) for f in forms]
            keys = sorted({k for d in dense for k in d})
            rows = [(tuple(d.get(k, 0) for k in keys), f) for d, f in zip(dense, forms)]
            rows.sort(key=lambda r: [-x for x in r[0]])
            keep: list = []
            for row, f in rows:
                if not any(all(a >= b for a, b in zip(g, row)) for g, _ in keep):
                    keep.append((row, f))
            return {f for _, f in keep}

        def to_expr(forms):
            inv = list(terms)
            exprs = sorted((sp.Add(*[sp.Rational(c.numerator, c.denominator) * inv[k] for k, c in f])
                            for f in forms), key=sp.default_sort_key)
            if not exprs:
                return sp.Integer(0)
            return exprs[0] if len(exprs) == 1 else sp.Max(*exprs, evaluate=False)

        st: list = [None] * len(ids)
        fin: list = [None] * len(ids)
        for i in order:
            cands: set = set()
            if acts[i].release is not None:
                cands |= shift({()}, acts[i].release)
            for j, lag, on in preds[i]:
                cands |= shift(fin[j] if on == "finish" else st[j], lag)
            s = pareto(cands) if cands else {()}
            if len(s) > limit:
                return None
            st[i], fin[i] = s, shift(s, acts[i].duration)
        return ids, st, fin, pareto, to_expr

    def full_times(self, limit: int = FORM_LIMIT):
        """Exact max-plus start and finish expressions of every activity (small timelines).

        :return: ``(ids, starts, finishes)`` — lists of sympy expressions in activity order —
            or None when the path forms exceed ``limit`` (see :meth:`_forms`).
        """
        r = self._forms(limit)
        if r is None:
            return None
        ids, st, fin, _, to_expr = r
        return ids, [to_expr(f) for f in st], [to_expr(f) for f in fin]

    def full_expr(self, limit: int = FORM_LIMIT):
        """Exact max-plus makespan expression (small timelines), or None when too many
        non-dominated paths remain (the caller then uses the critical path's length)."""
        r = self._forms(limit)
        if r is None:
            return None
        ids, _, fin, pareto, to_expr = r
        sinks: set = set()
        for f in fin:
            sinks |= f
        return to_expr(pareto(sinks) if sinks else {()})

    def chain_expr(self, sched: Schedule, activity: str, at: str = "finish"):
        """Symbolic start or finish time of ``activity`` along its nominal binding chain
        (durations, lags and a binding release): exact at the nominal point and wherever that
        chain stays binding.  O(length of the chain)."""
        import sympy as sp

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
        return sp.Add(*[self.holds[h].bytes for h in prof.live]) if prof.live else sp.Integer(0)

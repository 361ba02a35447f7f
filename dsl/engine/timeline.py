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

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .deferred import DeferredAttr, DeferredExpr

FULL_LIMIT = 200          # activities up to which the makespan is a full max-plus expression
FORM_LIMIT = 64          # non-dominated path forms per activity kept by full_expr
MIRROR_LIMIT = 5000       # activities up to which each becomes a node of the quantity graph
SMALL_LIMIT = 200         # activities up to which a timeline built one by one is scheduled without numpy
PARETO_ARRAYS = 24        # path forms above which the Pareto filter compares int64 blocks (numpy loaded)
PARETO_IMPORT = 512       # the same when numpy is not loaded yet (its import costs ≈0.1 s: the
                          # pairwise Python filter of a few hundred forms costs less)


_BASIC = None


_limits = None      # dsl.syntax.limits, bound on first use (add() and hold() ask for every item)


#: activities from which scheduling a timeline draws a progress bar (on a terminal)
LARGE_TIMELINE = 200_000


def _activity_limit() -> int:
    global _limits
    if _limits is None:
        from ..syntax import limits
        _limits = limits
    return _limits.current().activities


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
    charge: str | None = None  # the resource whose speed sets the duration, if not ``resource`` (attribution)

    @property
    def charged(self) -> str | None:
        """The resource this activity's time is charged to (what-if analyses): ``charge``,
        else the resource it runs on; None for a wait that stands for no resource's work."""
        return self.charge or self.resource


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


# ---------------------------------------------------------------- columnar storage
class _Names:
    """Ids of a block of activities or holds: ``name(i)`` on demand, a list once all are asked for."""

    __slots__ = ("n", "fn", "_list")

    def __init__(self, n: int, names):
        self.n = n
        if callable(names):
            self.fn, self._list = names, None
        else:
            self.fn, self._list = None, list(names)
            if len(self._list) != n:
                raise ValueError(f"{len(self._list)} names for {n} items")

    def __getitem__(self, i: int) -> str:
        return self._list[i] if self._list is not None else self.fn(i)

    def all(self) -> list[str]:
        if self._list is None:
            self._list = [self.fn(i) for i in range(self.n)]
        return self._list


class _ActBlock:
    """Activities added at once by :meth:`Timeline.add_many` (numpy columns)."""

    def __init__(self, offset, names, durations, dcode, resources, rcode, ptr, src, lags, lcode, on_start,
                 kinds, kcode, labels, hatched, plugin, doc):
        self.offset, self.n = offset, len(dcode)
        self.names, self.durations, self.dcode = names, durations, dcode
        self.resources, self.rcode = resources, rcode
        self.ptr, self.src, self.lags, self.lcode, self.on_start = ptr, src, lags, lcode, on_start
        self.kinds, self.kcode, self.labels, self.hatched = kinds, kcode, labels, hatched
        self.plugin, self.doc = plugin, doc
        self._index = None

    def local(self, name: str):
        if self._index is None:
            self._index = {a: i for i, a in enumerate(self.names.all())}
        return self._index.get(name)

    def activity(self, i: int) -> Activity:
        after = tuple((self.names[int(j)], None if self.lcode[e] < 0 else self.lags[self.lcode[e]],
                       "start" if self.on_start[e] else "finish")
                      for e, j in zip(range(self.ptr[i], self.ptr[i + 1]), self.src[self.ptr[i]:self.ptr[i + 1]]))
        r = int(self.rcode[i])
        return Activity(self.names[i], self.durations[self.dcode[i]], None if r < 0 else self.resources[r], after,
                        (), "" if self.doc is None else self.doc(i), self.plugin, None,
                        self.kinds[self.kcode[i]] if self.kinds else "", None,
                        "" if self.labels is None else self.labels[i],
                        "hatched" if self.hatched is not None and self.hatched[i] else "", None)


class _HoldBlock:
    """Holds added at once by :meth:`Timeline.hold_many`."""

    def __init__(self, names, sizes, scode, pools, pcode, s_act, s_fin, e_act, e_fin, kind, plugin):
        self.n = len(scode)
        self.names, self.sizes, self.scode, self.pools, self.pcode = names, sizes, scode, pools, pcode
        self.s_act, self.s_fin, self.e_act, self.e_fin = s_act, s_fin, e_act, e_fin
        self.kind, self.plugin = kind, plugin
        self._index = None
        self._tl = None

    def local(self, name: str):
        if self._index is None:
            self._index = {a: i for i, a in enumerate(self.names.all())}
        return self._index.get(name)

    def hold_unchecked(self, i: int) -> Hold:
        return Hold(self.names[i], self.sizes[self.scode[i]], self.pools[self.pcode[i]], None, None, "",
                    self.plugin, self.kind)

    def hold(self, i: int) -> Hold:
        name = self._tl.activities.name_of
        s = None if self.s_act[i] < 0 else (name(int(self.s_act[i])), "finish" if self.s_fin[i] else "start")
        e = None if self.e_act[i] < 0 else (name(int(self.e_act[i])), "finish" if self.e_fin[i] else "start")
        return Hold(self.names[i], self.sizes[self.scode[i]], self.pools[self.pcode[i]], s, e, "", self.plugin,
                    self.kind)


class _Store(Mapping):
    """Id -> item for items added one by one (a dict) and blocks added at once (columns);
    iteration is in the order of addition, items of a block are built on demand."""

    def __init__(self):
        self._single: dict = {}
        self._segs: list = []          # ("one", [ids]) runs and ("block", block, offset) in order
        self._n = 0
        self._hint: dict = {}          # id -> position of block items already looked up by position

    def at(self, g: int):
        """The item at position ``g`` (order of addition); its id is remembered for lookups."""
        for s in self._segs:
            base = s[2]
            n = len(s[1]) if s[0] == "one" else s[1].n
            if base <= g < base + n:
                if s[0] == "one":
                    return self._single[s[1][g - base]]
                item = self._item(s[1], g - base)
                self._hint[item.id] = g
                return item
        raise IndexError(g)

    def _put(self, key, item):
        self._single[key] = item
        if not self._segs or self._segs[-1][0] != "one":
            self._segs.append(("one", [], self._n))
        self._segs[-1][1].append(key)
        self._n += 1

    def _put_block(self, block):
        self._segs.append(("block", block, self._n))
        self._n += block.n

    @property
    def blocks(self):
        return [s[1] for s in self._segs if s[0] == "block"]

    def __len__(self):
        return self._n

    def __iter__(self):
        for s in self._segs:
            if s[0] == "one":
                yield from s[1]
            else:
                yield from s[1].names.all()

    def __contains__(self, key):
        if key in self._single or key in self._hint:
            return True
        for s in self._segs:
            if s[0] == "block" and s[1].local(key) is not None:
                return True
        return False

    def _item(self, block, i):
        raise NotImplementedError

    def __getitem__(self, key):
        v = self._single.get(key)
        if v is not None:
            return v
        g = self._hint.get(key)
        if g is not None:
            return self.at(g)
        for s in self._segs:
            if s[0] == "block":
                i = s[1].local(key)
                if i is not None:
                    return self._item(s[1], i)
        raise KeyError(key)

    def values(self):
        for s in self._segs:
            if s[0] == "one":
                for k in s[1]:
                    yield self._single[k]
            else:
                for i in range(s[1].n):
                    yield self._item(s[1], i)

    def items(self):
        for v in self.values():
            yield v.id, v

    def name_of(self, g: int) -> str:
        """Id of the item at position ``g`` (order of addition)."""
        for s in self._segs:
            base = s[2]
            n = len(s[1]) if s[0] == "one" else s[1].n
            if base <= g < base + n:
                return s[1][g - base] if s[0] == "one" else s[1].names[g - base]
        raise IndexError(g)

    def id_at(self, g: int) -> str:
        """Id of the item at position ``g``, remembered for lookups by id like :meth:`at`, without
        building the item."""
        name = self.name_of(g)
        if name not in self._single:
            self._hint[name] = g
        return name

    def index_of(self, key):
        """Position of ``key`` in the order of addition (None when absent)."""
        if key in self._single:
            if getattr(self, "_pos", None) is None or len(self._pos) != len(self._single):
                self._pos = {k: s[2] + j for s in self._segs if s[0] == "one" for j, k in enumerate(s[1])}
            return self._pos[key]
        g = self._hint.get(key)
        if g is not None:
            return g
        for s in self._segs:
            if s[0] == "block":
                i = s[1].local(key)
                if i is not None:
                    return s[2] + i
        return None


class _Activities(_Store):
    def _item(self, block, i):
        return block.activity(i)


class _Holds(_Store):
    def _item(self, block, i):
        return block.hold(i)

    def _in_block(self, key):
        """``(block, index)`` of a hold added by ``hold_many`` (found by its position), or None."""
        g = self._hint.get(key)
        if g is not None:
            for s in self._segs:
                if s[0] == "block" and s[2] <= g < s[2] + s[1].n:
                    return s[1], g - s[2]
        return None

    def bytes_of(self, key):
        """Size expression of hold ``key`` (``self[key].bytes`` without building the hold)."""
        h = self._single.get(key)
        if h is not None:
            return h.bytes
        bi = self._in_block(key)
        if bi is not None:
            b, i = bi
            return b.sizes[b.scode[i]]
        return self[key].bytes

    def label_of(self, key) -> str:
        """What hold ``key`` is, for a table row: its doc, else its kind ("activation holds":
        holds added as a block have no doc), without building the hold."""
        h = self._single.get(key)
        if h is None:
            bi = self._in_block(key)
            h = bi[0] if bi is not None else self[key]        # a block carries the kind of its holds
        doc = getattr(h, "doc", "")
        return doc or (f"{h.kind} holds" if h.kind else "holds")


class _Ids(Sequence):
    """Activity ids in schedule order, named on demand."""

    def __init__(self, store: _Store):
        self._store = store
        self._list = None

    def __len__(self):
        return len(self._store)

    def _all(self):
        if self._list is None:
            self._list = list(self._store)
        return self._list

    def __getitem__(self, i):
        if self._list is None and isinstance(i, int):
            if i < 0:
                i += len(self)
            return self._store.name_of(i)
        return self._all()[i]

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other):
        return list(self) == list(other)

    def index(self, x, *a):
        g = self._store.index_of(x)
        if g is None:
            raise ValueError(x)
        return g


class _Floats(Sequence):
    """A read-only sequence of Python floats over a numpy array (a list of floats costs 32
    bytes per item, the array 8)."""

    __slots__ = ("_a",)

    def __init__(self, a):
        self._a = a

    def __len__(self):
        return len(self._a)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._a[i].tolist()
        return float(self._a[i])

    def __iter__(self):
        return iter(self._a.tolist())

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)

    def __eq__(self, other):
        return list(self) == list(other)

    def __repr__(self):
        return repr(self._a.tolist())


class _Binding(Mapping):
    """Activity id -> what set its start ("release" or (pred id, lag, on)), built on demand."""

    def __init__(self, tl, sched):
        self._tl, self._s = tl, sched

    def _at(self, i: int):
        s = self._s
        j = int(s._bsrc[i])
        if j == -1:
            return None
        if j == -2:
            return "release"
        c = int(s._blag[i])
        return (s.ids[j], None if c < 0 else self._tl._lagtab[c], "start" if s._bstart[i] else "finish")

    def __getitem__(self, key):
        i = self._tl.activities.index_of(key)
        b = None if i is None else self._at(i)
        if b is None:
            raise KeyError(key)
        return b

    def __iter__(self):
        for i, a in enumerate(self._s.ids):
            if self._s._bsrc[i] != -1:
                yield a

    def __len__(self):
        b = self._s._bsrc
        if isinstance(b, list):          # a small timeline's schedule (Timeline._compute_small)
            return sum(1 for j in b if j != -1)
        import numpy as np
        return int(np.count_nonzero(b != -1))


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
    _bsrc: Any = field(default=None, repr=False, compare=False)    # binding predecessor (-1 none, -2 release)
    _blag: Any = field(default=None, repr=False, compare=False)    # its lag code
    _bstart: Any = field(default=None, repr=False, compare=False)  # start-to-start?

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
    _steps: Any                         # (time, level after the change), a step function (or arrays)

    @property
    def steps(self) -> list[tuple[float, float]]:
        if not isinstance(self._steps, list):
            t, v = self._steps
            self._steps = list(zip(t.tolist(), v.tolist()))
        return self._steps


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


@dataclass
class Timeline:
    """Activities and memory holds of one plan on one timeline (see the module docstring)."""

    plan: str
    name: str
    activities: _Activities = field(default_factory=_Activities)
    holds: _Holds = field(default_factory=_Holds)
    makespans: list[tuple] = field(default_factory=list)
    peaks: list[tuple] = field(default_factory=list)
    times: list[tuple] = field(default_factory=list)     # (name, activity, "start"|"finish", unit, …)
    areas: list[tuple] = field(default_factory=list)     # (name, pool, unit, …)
    refs: dict[str, tuple] = field(default_factory=dict)  # quantity name -> references (sources)
    title: str = ""                     # what the timeline runs, for titles (e.g. a pipeline's schedule)
    sealed: bool = False                # True after evaluation: no activity or hold can be added
    truncated: bool = False             # True once an add/hold was refused by the activity limit
    symbolic: str = "auto"              # auto | full | path
    _plugin: str = ""
    graph: Any = None                   # activity -> successors, once mirrored into the quantity graph
    schedule: Schedule | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)
    makespan_expr: Any = None
    _edges: Any = field(default=None, repr=False, compare=False)       # cache of edges()
    _by_pool: Any = field(default=None, repr=False, compare=False)     # cache of holds_in()
    _arr: Any = field(default=None, repr=False, compare=False)         # cache of _arrays()
    _harr: Any = field(default=None, repr=False, compare=False)        # cache of _hold_arrays()
    _lagtab: Any = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------ building
    def add(self, id: str, duration, resource: str | None = None, after=(), before=(), doc: str = "",
            release=None, kind: str = "", lane: str | None = None, label: str = "", style: str = "",
            splice_after: str | None = None, charge: str | None = None):
        """Add activity ``id`` lasting ``duration`` (sympy, seconds) on ``resource``.

        :param after: predecessors: ``"id"``, ``("id", lag)`` (start ≥ finish + lag) or
            ``("id", lag, "start")`` (start ≥ the predecessor's start + lag).
        :param before: activities that cannot start before this one finishes.
        :param release: absolute earliest start (seconds).
        :param kind, lane, label, style: presentation (Gantt colour, row, text, hatching).
        :param splice_after: an activity (possibly scheduled by another plugin, in any order)
            that this one extends: it starts when that activity finishes, every other
            activity that waits for that activity's finish waits for this one too (e.g. the
            expected straggler delay after ``compute``, before the collectives that follow it),
            and on the same resource it takes its place right after that activity in the
            resource's order of work, whenever it was added.
        :param charge: the resource whose speed sets the duration when it is not the one the
            activity occupies (e.g. a collective the GPU waits for, charged to the link): what-if
            analyses charge the activity's time to it; scheduling is unchanged.
        """
        if self.sealed:
            raise AttributeError(f"timeline '{self.name}' of '{self.plan}' is read-only after evaluation")
        if id in self.activities:
            raise ValueError(f"activity '{id}' added twice to timeline '{self.name}'")
        if len(self.activities) >= _activity_limit():
            from ..syntax.limits import LimitError
            self.truncated = True
            raise LimitError("activities", f"timeline '{self.name}' would have more than {_activity_limit():,} "
                             "activities")
        self._edges = self._arr = self._harr = None
        deps = []
        for a in after:
            if isinstance(a, str):
                deps.append((a, None, "finish"))
            else:
                name, lag, *on = a
                deps.append((name, None if lag is None else _expr(lag), on[0] if on else "finish"))
        if splice_after is not None:
            deps.append((splice_after, None, "finish"))
        self.activities._put(id, Activity(id, _expr(duration), resource, tuple(deps), tuple(before), doc,
                                       self._plugin, None if release is None else _expr(release), kind,
                                       lane, label, style, splice_after, charge))

    def hold(self, id: str, nbytes, pool: str, start=None, end=None, doc: str = "", kind: str = ""):
        if self.sealed:
            raise AttributeError(f"timeline '{self.name}' of '{self.plan}' is read-only after evaluation")
        """Hold ``nbytes`` (sympy, bytes) in memory ``pool`` from ``start`` to ``end``.

        ``start``/``end`` are an activity id (its start for ``start``, its finish for
        ``end``), ``(id, "start"|"finish")``, or None for the timeline's start/end.
        """
        if id in self.holds:
            raise ValueError(f"hold '{id}' added twice to timeline '{self.name}'")
        if len(self.holds) >= _activity_limit():
            from ..syntax.limits import LimitError
            self.truncated = True
            raise LimitError("activities", f"timeline '{self.name}' would have more than {_activity_limit():,} "
                             "memory holds")
        self._by_pool = self._harr = None
        if start is not None and not (type(start) is tuple and len(start) == 2):
            start = (start, "start") if isinstance(start, str) else (start[0], start[1])
        if end is not None and not (type(end) is tuple and len(end) == 2):
            end = (end, "finish") if isinstance(end, str) else (end[0], end[1])
        self.holds._put(id, Hold(id, _expr(nbytes), pool, start, end, doc, self._plugin, kind))

    def add_many(self, names, durations, dcode, resources, rcode, after_ptr, after_src, lags=(), lag_code=None,
                 after_start=None, kinds=(), kind_code=None, labels=None, hatched=None, doc=None) -> int:
        """Add ``n = len(dcode)`` activities at once, as columns (numpy arrays): the same
        semantics as ``n`` calls of :meth:`add` in this order, at array cost.

        :param names: the ids, a sequence or a function ``i -> id`` (called on demand).
        :param durations, dcode: distinct duration expressions and each activity's index into them.
        :param resources, rcode: resource names and each activity's index (-1: none).
        :param after_ptr, after_src: predecessors in CSR form: those of activity ``i`` are
            ``after_src[after_ptr[i]:after_ptr[i+1]]`` (indices into this block).
        :param lags, lag_code: distinct lag expressions and each predecessor's index (-1: none).
        :param after_start: per predecessor, True for a start-to-start dependency.
        :param kinds, kind_code, labels, hatched, doc: presentation (labels and doc: a
            sequence or ``i -> str``).
        :return: the position of the first activity (for :meth:`hold_many` anchors).
        """
        import numpy as np

        if self.sealed:
            raise AttributeError(f"timeline '{self.name}' of '{self.plan}' is read-only after evaluation")
        n = len(dcode)
        if names is None or len(self.activities._single) and any(
                k in self.activities._single for k in (names if not callable(names) else [names(0)] if n else [])):
            raise ValueError(f"activity added twice to timeline '{self.name}'")
        self._edges = self._arr = self._harr = None
        ne = int(after_ptr[-1]) if n else 0
        lab = None if labels is None else (labels if callable(labels) or not hasattr(labels, "__len__")
                                           else labels)
        i32 = np.int32
        blk = _ActBlock(len(self.activities), _Names(n, names), [_expr(e) for e in durations],
                        np.asarray(dcode, dtype=i32), list(resources), np.asarray(rcode, dtype=i32),
                        np.asarray(after_ptr, dtype=np.int64), np.asarray(after_src, dtype=i32),
                        [_expr(e) for e in lags],
                        np.full(ne, -1, dtype=i32) if lag_code is None else np.asarray(lag_code, dtype=i32),
                        np.zeros(ne, dtype=bool) if after_start is None else np.asarray(after_start, dtype=bool),
                        list(kinds), np.zeros(n, dtype=np.int64) if kind_code is None else np.asarray(kind_code),
                        None if lab is None else (_Names(n, lab)), None if hatched is None else np.asarray(hatched),
                        self._plugin, doc)
        self.activities._put_block(blk)
        return blk.offset

    def drop_last_block(self) -> None:
        """Remove the block of activities added last (a plugin that found it cannot run)."""
        seg = self.activities._segs.pop()
        assert seg[0] == "block"
        self.activities._n -= seg[1].n
        self._edges = self._arr = self._harr = None

    def hold_many(self, names, sizes, size_code, pools, pool_code, start, start_finish, end, end_finish,
                  kind: str = "") -> None:
        """Add holds at once, as columns: ``start``/``end`` are activity positions (from
        :meth:`add_many`'s return value plus the index in its block; -1 = timeline start /
        end), ``start_finish``/``end_finish`` whether the anchor is the activity's finish."""
        import numpy as np

        if self.sealed:
            raise AttributeError(f"timeline '{self.name}' of '{self.plan}' is read-only after evaluation")
        self._by_pool = self._harr = None
        n = len(size_code)
        blk = _HoldBlock(_Names(n, names), [_expr(e) for e in sizes], np.asarray(size_code, dtype=np.int64),
                         list(pools), np.asarray(pool_code, dtype=np.int64), np.asarray(start, dtype=np.int64),
                         np.asarray(start_finish, dtype=bool), np.asarray(end, dtype=np.int64),
                         np.asarray(end_finish, dtype=bool), kind, self._plugin)
        blk._tl = self
        self.holds._put_block(blk)

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

    # ------------------------------------------------------------ structure
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

    def _gens(self):
        """Generations of the structure (cached with it), None on a cycle."""
        arr = self._arrays()
        if getattr(self, "_gen_for", None) is not arr:
            self._gen_for, self._gen_val = arr, self._generations(arr[0], arr[1], arr[2])
        return self._gen_val

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

    # ------------------------------------------------------------ numeric engine
    def compute(self, num) -> Schedule:
        """Nominal schedule.  ``num(expr)`` evaluates a sympy expression to a float."""
        with no_gc():
            if self._small():
                sch = self._compute_small(num)
                if sch is not None:
                    return sch
            return self._compute(num)

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
        from .progress import progress
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
        ids = _Ids(self.activities)
        be0 = np.maximum(bedge, 0)
        blag = np.where(has_e, lcode[be0], -1) if len(lcode) else np.full(n, -1, dtype=np.int64)
        bstart = np.where(has_e, on_start[be0], False) if len(lcode) else np.zeros(n, dtype=bool)
        sch = Schedule(ids, _Floats(start.copy()), _Floats(finish.copy()), span, [ids[i] for i in path],
                       _Floats(slack), None,
                       _bsrc=bsrc, _blag=blag, _bstart=bstart)
        sch.binding = _Binding(self, sch)
        sch._T = T
        sch._path_idx = path
        return sch

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
        sids = _Ids(self.activities)
        sch = Schedule(sids, start, finish, span, [sids[i] for i in path], slack, None,
                       _bsrc=bsrc, _blag=blag, _bstart=bstart)
        sch.binding = _Binding(self, sch)
        sch._T = [t for pair in zip(start, finish) for t in pair]
        sch._path_idx = path
        return sch

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


# the exact makespan expression may be left to be built on first read (full_expr_deferred)
Timeline.makespan_expr = DeferredAttr("makespan_expr")

"""The :class:`Timeline` class: the activities, memory holds and quantity definitions a plugin
adds to one timeline of one plan, and :meth:`Timeline.compute`, which schedules it with the
small-timeline engine when it can and the array engine otherwise.  Its structure, schedules,
symbolic expressions, memory profiles and graph mirror come from the mixins of the sibling
modules (see :mod:`dsl.engine.timeline`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..deferred import DeferredAttr
from .arrays import ArraySchedulingMixin
from .critical_path import CriticalPathMixin
from .maxplus import MaxPlusMixin
from .memory import MemoryMixin
from .mirror import MirrorMixin
from .results import Profile, Schedule
from .small import SmallSchedulingMixin
from .store import Activity, ActivityBlock, ActivityStore, Hold, HoldBlock, HoldStore, Names, no_gc
from .structure import StructureMixin

_BASIC = None
_limits = None      # dsl.syntax.limits, bound on first use (add() and hold() ask for every item)


def _activity_limit() -> int:
    global _limits
    if _limits is None:
        from ...syntax import limits
        _limits = limits
    return _limits.current().activities


def _expr(x):
    global _BASIC
    if _BASIC is None:
        from sympy import Basic
        _BASIC = Basic
    if isinstance(x, _BASIC):        # the common case: no import, no conversion
        return x
    from dsl.engine.nodes import as_expr
    return as_expr(x)


@dataclass
class Timeline(StructureMixin, ArraySchedulingMixin, SmallSchedulingMixin, MaxPlusMixin, CriticalPathMixin,
               MemoryMixin, MirrorMixin):
    """Activities and memory holds of one plan on one timeline (see :mod:`dsl.engine.timeline`)."""

    plan: str
    name: str
    activities: ActivityStore = field(default_factory=ActivityStore)
    holds: HoldStore = field(default_factory=HoldStore)
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
            from ...syntax.limits import LimitError
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
            from ...syntax.limits import LimitError
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
        blk = ActivityBlock(len(self.activities), Names(n, names), [_expr(e) for e in durations],
                            np.asarray(dcode, dtype=i32), list(resources), np.asarray(rcode, dtype=i32),
                            np.asarray(after_ptr, dtype=np.int64), np.asarray(after_src, dtype=i32),
                            [_expr(e) for e in lags],
                            np.full(ne, -1, dtype=i32) if lag_code is None else np.asarray(lag_code, dtype=i32),
                            np.zeros(ne, dtype=bool) if after_start is None else np.asarray(after_start, dtype=bool),
                            list(kinds), np.zeros(n, dtype=np.int64) if kind_code is None else np.asarray(kind_code),
                            None if lab is None else (Names(n, lab)), None if hatched is None else np.asarray(hatched),
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
        blk = HoldBlock(Names(n, names), [_expr(e) for e in sizes], np.asarray(size_code, dtype=np.int64),
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

    # ------------------------------------------------------------ numeric engine
    def compute(self, num) -> Schedule:
        """Nominal schedule.  ``num(expr)`` evaluates a sympy expression to a float."""
        with no_gc():
            if self._small():
                sch = self._compute_small(num)
                if sch is not None:
                    return sch
            return self._compute(num)


# the exact makespan expression may be left to be built on first read (full_expr_deferred)
Timeline.makespan_expr = DeferredAttr("makespan_expr")

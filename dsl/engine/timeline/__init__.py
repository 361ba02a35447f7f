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

Modules
-------
:mod:`.core`
    the :class:`Timeline` class: what a plugin adds (activities, holds, quantities), the
    nominal schedule's entry point (:meth:`Timeline.compute`); the rest of its methods come
    from the mixins below.
:mod:`.store`
    :class:`Activity`, :class:`Hold` and their storage (one by one, or as numpy columns);
    :class:`no_gc`.
:mod:`.results`
    :class:`Schedule` and :class:`Profile`, what scheduling returns.
:mod:`.structure`
    the dependency structure: predecessor lists, integer arrays, Kahn generations, checks.
:mod:`.arrays`
    array scheduling: vectorised forward, binding and backward passes per generation.
:mod:`.small`
    small-timeline scheduling: the same passes on Python lists (no numpy).
:mod:`.maxplus`
    the exact max-plus makespan (and start/finish) expressions of small timelines.
:mod:`.critical_path`
    symbolic lengths of the nominal critical path and binding chains (larger timelines).
:mod:`.memory`
    memory holds by pool: profiles, peaks, areas.
:mod:`.mirror`
    mirroring activities into the quantity graph; per-resource durations and busy times.
"""
from __future__ import annotations

from .arrays import LARGE_TIMELINE
from .core import Timeline
from .maxplus import FORM_LIMIT, FULL_LIMIT, PARETO_ARRAYS, PARETO_IMPORT
from .mirror import MIRROR_LIMIT
from .results import Profile, Schedule
from .store import Activity, Hold, no_gc
from .structure import SMALL_LIMIT

__all__ = ["Activity", "FORM_LIMIT", "FULL_LIMIT", "Hold", "LARGE_TIMELINE", "MIRROR_LIMIT",
           "PARETO_ARRAYS", "PARETO_IMPORT", "Profile", "SMALL_LIMIT", "Schedule", "Timeline", "no_gc"]

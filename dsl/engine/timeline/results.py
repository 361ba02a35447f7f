"""What scheduling a timeline returns: the nominal :class:`Schedule` (starts, finishes, slack,
critical path, binding predecessors) and a memory pool's :class:`Profile`, with the read-only
sequences and mapping that present a schedule's arrays as Python values on demand.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .store import Store


class IdSequence(Sequence):
    """Activity ids in schedule order, named on demand."""

    def __init__(self, store: Store):
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


class FloatSequence(Sequence):
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


class BindingMap(Mapping):
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

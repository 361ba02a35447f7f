"""Activities and memory holds as a timeline stores them: :class:`Activity` and :class:`Hold`
records added one by one, and blocks of them added at once as numpy columns
(:meth:`~dsl.engine.timeline.Timeline.add_many`, ``hold_many``), whose ids and records are made
on demand; an id -> item mapping over both, in the order of addition.  Also :class:`no_gc`,
the garbage-collector pause used while many small objects are built or scheduled.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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
class Names:
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


class ActivityBlock:
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


class HoldBlock:
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


class Store(Mapping):
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


class ActivityStore(Store):
    def _item(self, block, i):
        return block.activity(i)


class HoldStore(Store):
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

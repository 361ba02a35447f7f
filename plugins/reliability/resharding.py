"""Re-sharding a checkpoint by global coordinates (book §10.4.2, figure 10-31, footnote 17).

``use resharding { shape = [12288, 4096]; old_tp = 4; new_tp = 8 }``

A tensor of global ``shape`` is split along dimension ``dim`` into ``old_tp`` contiguous
shards when saved and must be loaded as ``new_tp`` shards.  Part i of n holds the global
indices [⌊i·S/n⌋, ⌊(i+1)·S/n⌋) of that dimension (S its size), so every index has exactly
one owner also when n does not divide S.  New rank r reads the intersection of its range
with every old shard's range (ByteCheckpoint-style: global shape, offset and length of each
fragment).

For ``dim = 0`` of a row-major tensor a range of rows is one contiguous byte range of the
old shard's file: offset = (first row − shard's first row) × row bytes.  For ``dim = 1`` every
row contributes one segment: ``rows`` segments of ``length`` bytes, ``stride`` apart.

The gate projection [12288, 4096] in BF16 (96 MiB) from TP = 4 (3,072 rows, 24 MiB a shard)
to TP = 8 (1,536 rows, 12 MiB): new rank r reads old shard ⌊r/2⌋, the first half for even r
and the second for odd r.  Master weights and both Adam moments follow the same ranges:
with 2 + 4 + 4 + 4 = 14 B per element the matrix's full state is 96 × 7 = 672 MiB.

The table ``resharding`` lists, for every new rank, the old shard, global and local ranges
and the byte range to read.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, Table, TableSpec, UseSpec

SPEC = UseSpec(
    "resharding",
    "re-shard a saved tensor from one tensor-parallel layout to another by global coordinates",
    references=("re-sharding a checkpoint by global coordinates: each new rank reads the byte ranges of the old "
                "shards that overlap its slice (as in Wan et al. 2024, 'ByteCheckpoint: A Unified Checkpointing "
                "System for Large Foundation Model Development')",),
    params=(
        Param("shape", "", None, "global shape of the tensor, e.g. [12288, 4096]", kind="list", min_items=1),
        Param("old_tp", "", None, "shards the checkpoint was saved with", kind="int", min=1),
        Param("new_tp", "", None, "shards it is loaded with", kind="int", min=1),
        Param("dim", "", "0", "dimension the shards split (0: rows)", kind="int", min=0),
        Param("element", "B", "2 B", "bytes of one stored element (BF16: 2 B)", min=0, min_open=True),
        Param("state_element", "B", "14 B", "bytes of training state per element: weights, master, "
              "two Adam moments (2 + 4 + 4 + 4)", min=0, min_open=True),
    ),
    order=42,
    provides=("tensor_bytes", "old_shard_bytes", "new_shard_bytes", "tensor_state_bytes"),
)


@dataclass(frozen=True)
class Piece:
    """One read of new rank ``new`` from old shard ``old``.

    ``lo``/``hi``: global index range along the split dimension; ``local_lo``/``local_hi``:
    the same range inside the old shard; ``offset``: byte offset of the first segment inside
    the old shard (row-major); ``length``: bytes of one segment; ``segments``: how many
    segments (1 when ``dim`` is 0); ``stride``: bytes between segment starts.
    """

    new: int
    old: int
    lo: int
    hi: int
    local_lo: int
    local_hi: int
    offset: int
    length: int
    segments: int
    stride: int

    @property
    def bytes(self) -> int:
        return self.length * self.segments


def bounds(size: int, parts: int, i: int) -> tuple[int, int]:
    """Global range [lo, hi) of part ``i`` of ``parts`` along a dimension of ``size``."""
    return size * i // parts, size * (i + 1) // parts


def reshard(shape: tuple[int, ...], old: int, new: int, dim: int = 0, element: int = 2) -> list[Piece]:
    """Which byte ranges of which old shards each new rank reads.

    :param shape: global shape (row-major), e.g. ``(12288, 4096)``.
    :param old, new: shard counts along ``dim`` before and after.
    :param element: bytes per element.
    :return: pieces ordered by new rank, then old shard.  O(old + new) pieces.
    :raises ValueError: ``dim`` outside the shape, or more shards than indices.
    """
    if not 0 <= dim < len(shape):
        raise ValueError(f"dim {dim} is outside a {len(shape)}-dimensional shape")
    size = shape[dim]
    if max(old, new) > size:
        raise ValueError(f"{max(old, new)} shards of a dimension of size {size}")
    inner = element
    for d in shape[dim + 1:]:
        inner *= d
    outer = 1
    for d in shape[:dim]:
        outer *= d
    out: list[Piece] = []
    i = 0
    for r in range(new):
        lo, hi = bounds(size, new, r)
        while bounds(size, old, i)[1] <= lo:
            i += 1
        j = i
        while j < old:
            olo, ohi = bounds(size, old, j)
            if olo >= hi:
                break
            a, z = max(lo, olo), min(hi, ohi)
            out.append(Piece(r, j, a, z, a - olo, z - olo, (a - olo) * inner, (z - a) * inner, outer,
                             (ohi - olo) * inner))
            j += 1
    return out


@hookimpl
def plan_blocks_register():
    return [SPEC]


def _layout(b):
    shape = tuple(int(round(x)) for x in b.value("shape"))
    return shape, int(b.value("old_tp")), int(b.value("new_tp")), int(b.value("dim"))


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("resharding")
    if b is None:
        return
    shape, old, new, dim = _layout(b)
    if any(abs(x - round(x)) > 1e-9 or x < 1 for x in b.value("shape")):
        b.error_at("shape", "a tensor shape holds positive whole numbers", "e.g. shape = [12288, 4096]")
    if dim >= len(shape):
        b.error_at("dim", f"dim = {dim} is outside the {len(shape)}-dimensional shape {list(shape)}",
                   f"use a dimension from 0 to {len(shape) - 1}")
    for p in ("old_tp", "new_tp"):
        if int(b.value(p)) > shape[dim]:
            b.error_at(p, f"{p} = {int(b.value(p))} shards exceed the {shape[dim]} indices of dimension {dim}",
                       "use at most one shard per index")
    elems = sp.Mul(*b.q_list("shape"))
    t = ctx.define("tensor_bytes", elems * b.q("element"), "MiB", "bytes of the tensor: Π shape × element")
    ctx.define("old_shard_bytes", t / old, "MiB", "bytes of one old shard (even split)")
    ctx.define("new_shard_bytes", t / new, "MiB", "bytes of one new shard (even split)")
    ctx.define("tensor_state_bytes", elems * b.q("state_element"), "MiB",
               "training state of the tensor: weights, master weights, both moments", headline=True,
               references=("re-sharding a checkpoint by global coordinates: each new rank reads the byte ranges of "
                           "the old shards that overlap its slice (as in Wan et al. 2024, 'ByteCheckpoint: A Unified "
                           "Checkpointing System for Large Foundation Model Development')",))


def _table(ws, plan):
    if "resharding" not in ws.decls[plan].uses:
        return None
    v = lambda p: ws.python_value(f"{plan}.resharding.{p}")  # noqa: E731
    shape = tuple(int(round(x)) for x in v("shape"))
    old, new, dim = int(v("old_tp")), int(v("new_tp")), int(v("dim"))
    el = int(round(float(ws.base_value(f"{plan}.resharding.element"))))
    try:
        pieces = reshard(shape, old, new, dim, el)
    except ValueError:
        return None
    rows = []
    for p in pieces:
        span = f"{p.length:,} B" if p.segments == 1 else f"{p.segments:,} × {p.length:,} B, stride {p.stride:,} B"
        rows.append((p.new, p.old, f"[{p.lo}, {p.hi})", f"[{p.local_lo}, {p.local_hi})",
                     f"{p.offset:,}", span, f"{p.bytes / 2 ** 20:g} MiB"))
    what = "rows" if dim == 0 else f"indices of dim {dim}"
    return Table(("new rank", "old shard", f"global {what}", f"{what} in old shard", "byte offset", "read",
                  "bytes"), tuple(rows),
                 (f"{list(shape)} split along dim {dim}: TP {old} → TP {new}; offsets are inside the old "
                  "shard (row-major)",))


@hookimpl
def plan_tables_register():
    return [TableSpec("resharding", "Re-sharding: what each new rank reads (global coordinates)", _table,
                      "old shard, ranges and byte ranges per new rank",
                      references=("re-sharding a checkpoint by global coordinates: each new rank reads the byte "
                                  "ranges of the old shards that overlap its slice (as in Wan et al. 2024, "
                                  "'ByteCheckpoint: A Unified Checkpointing System for Large Foundation Model "
                                  "Development')",))]

"""Slot orders of pipeline-parallel schedules (pure Python, no sympy).

A *slot* is one unit of work of one micro-batch on one rank: ``(kind, mb, chunk)`` with
``kind`` one of ``"F"`` (forward), ``"B"`` (full backward: dX and dW together), ``"X"``
(input gradient dX only) and ``"W"`` (weight gradient dW only); ``chunk`` is the rank's local
model chunk (interleaving) or, for DualPipe, the direction the micro-batch travels in.  A
schedule is one list of slots per rank, in the order the rank executes them; the timing
follows from the data dependencies (see :mod:`plugins.training.pipeline`), not from the generator.

Every generator returns ``list[list[tuple[str, int, int]]]`` of length ``p``.  Sources:

* fill–drain — GPipe (Huang et al., 2019): all forwards, then all backwards;
* 1F1B — PipeDream-Flush (Narayanan et al., 2021) as in Megatron-LM: rank r warms up with
  p−r−1 forwards, then alternates one forward and one backward, then drains backwards;
* interleaved 1F1B — Megatron-LM (Narayanan et al., SC'21): v chunks per rank, rank r warms
  up with (p−r−1)·2 + (v−1)·p virtual micro-batches, chunks visited in groups of p;
* ZB-H1 / ZB-H2 — zero-bubble pipeline parallelism (Qi et al., ICLR 2024), fig. 3: backward
  split into B (dX) and W (dW); ZB-H1 keeps 1F1B's memory, rank r holds back its first r W
  passes and drains the rest last; ZB-H2 warms up with 2(p−r)−1 forwards;
* DualPipe — DeepSeek-V3 technical report §3.2.1 and the reference implementation
  (github.com/deepseek-ai/DualPipe, ``DualPipe.step``): two model stages per rank, one per
  direction, M/2 micro-batches entering from each end; phases per rank as in the reference.
"""
from __future__ import annotations

SCHEDULES = ("fill_drain", "1f1b", "interleaved", "zb_h1", "zb_h2", "dualpipe", "custom")


def fill_drain(p: int, m: int) -> list[list[tuple]]:
    """GPipe: F0..F(m−1) then B0..B(m−1) on every rank."""
    return [[("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)] for _ in range(p)]


def one_f_one_b(p: int, m: int) -> list[list[tuple]]:
    """PipeDream-Flush / Megatron 1F1B: warm-up min(p−r−1, m) forwards, steady 1F1B, cool-down."""
    out = []
    for r in range(p):
        w = min(p - r - 1, m)
        s = [("F", i, 0) for i in range(w)]
        for i in range(m - w):
            s.append(("F", w + i, 0))
            s.append(("B", i, 0))
        s += [("B", i, 0) for i in range(m - w, m)]
        out.append(s)
    return out


#: interleaved 1F1B warm-up rules: Megatron-LM runs every forward first when m = p
#: (``forward_backward_pipelining_with_interleaving``: ``all_warmup_microbatches``);
#: torch.distributed.pipelining (``ScheduleInterleaved1F1B``, ``_get_warmup_ops``, as torchtitan
#: runs it) keeps (v − 1)·p + 2(p − 1 − r) at every m, capped at the step's m·v forwards
WARMUPS = ("megatron", "torch")


def interleaved_warmup(p: int, m: int, v: int, r: int, warmup: str = "megatron") -> int:
    """Forwards rank r runs before its first backward under interleaved 1F1B (:data:`WARMUPS`)."""
    total = m * v
    if warmup == "megatron" and m == p:
        return total
    return min((p - r - 1) * 2 + (v - 1) * p, total)


def interleaved(p: int, m: int, v: int, warmup: str = "megatron") -> list[list[tuple]]:
    """Interleaved 1F1B: Megatron-LM's (``forward_backward_pipelining_with_interleaving``) or,
    with ``warmup = "torch"``, torch.distributed.pipelining's ``ScheduleInterleaved1F1B``
    (:func:`interleaved_warmup`; the slot order is otherwise the same).

    Virtual micro-batch k (0 ≤ k < m·v) of rank r is micro-batch ``(k // (p·v))·p + k % p``
    in local chunk ``(k % (p·v)) // p`` (forward) or ``v − 1 −`` that (backward).  Requires
    ``m % p == 0`` (the groups of p of the reference implementation).
    """
    total = m * v

    def mb_chunk(k, forward):
        g, in_g = divmod(k, p * v)
        c = in_g // p
        return g * p + in_g % p, (c if forward else v - 1 - c)

    out = []
    for r in range(p):
        warm = interleaved_warmup(p, m, v, r, warmup)
        s = [("F", *mb_chunk(k, True)) for k in range(warm)]
        for i in range(total - warm):
            s.append(("F", *mb_chunk(warm + i, True)))
            s.append(("B", *mb_chunk(i, False)))
        s += [("B", *mb_chunk(k, False)) for k in range(total - warm, total)]
        out.append(s)
    return out


def zb_h1(p: int, m: int) -> list[list[tuple]]:
    """ZB-H1: 1F1B with B split into dX (``X``) and dW (``W``); rank r defers its first r W
    passes (each step after that does F, X, W), and the deferred W run last."""
    out = []
    for r in range(p):
        w = min(p - r - 1, m)
        s = [("F", i, 0) for i in range(w)]
        nf, nw = w, 0
        for j in range(m):
            if nf < m:
                s.append(("F", nf, 0))
                nf += 1
            s.append(("X", j, 0))
            if j >= r:
                s.append(("W", nw, 0))
                nw += 1
        s += [("W", i, 0) for i in range(nw, m)]
        out.append(s)
    return out


def zb_h2(p: int, m: int) -> list[list[tuple]]:
    """ZB-H2: more forwards in the warm-up fill the bubble before the first dX — rank r runs
    min(2(p−r)−1, m) forwards first (2p−1 micro-batches live on rank 0, the paper's memory
    bound); then each step is dX, F, dW, rank r holding back its first r dW passes, which
    run last.  Without the paper's optimizer post-validation the stages still end together
    (a trapezoid, not its parallelogram), so the makespan bound (p−1)(T_F+T_B−2T_W) is a
    comparison, not an identity.
    """
    out = []
    for r in range(p):
        w = min(2 * (p - r) - 1, m)
        s = [("F", i, 0) for i in range(w)]
        nf, nw = w, 0
        for j in range(m):
            s.append(("X", j, 0))
            if nf < m:
                s.append(("F", nf, 0))
                nf += 1
            if j >= r:
                s.append(("W", nw, 0))
                nw += 1
        s += [("W", i, 0) for i in range(nw, m)]
        out.append(s)
    return out


def dualpipe(p: int, m: int) -> list[list[tuple]]:
    """DualPipe slot orders after the reference ``DualPipe.step`` (8 phases per rank).

    Direction 0 carries micro-batches 0..m/2−1 from rank 0 to rank p−1 (model stage s on
    rank s); direction 1 carries m/2..m−1 from rank p−1 to rank 0 (model stage s on rank
    p−1−s).  For rank r the *near* direction is the one entering at its end of the pipeline
    (0 on the first half of the ranks, 1 on the second).  Overlapped F&B pairs are written
    as F followed by a full B (no overlap of compute and communication is modelled).
    Requires p even and m ≥ 2p, m even (as the reference does).
    """
    half_p, half_m = p // 2, m // 2
    out = []
    for r in range(p):
        hr = min(r, p - 1 - r)
        near = 0 if r < half_p else 1
        far = 1 - near
        nf = {0: 0, 1: 0}
        nb = {0: 0, 1: 0}
        wq: list[tuple] = []
        s: list[tuple] = []

        def mb(d, k):
            return k + (half_m if d == 1 else 0)

        def F(side):
            d = near if side == 0 else far
            s.append(("F", mb(d, nf[d]), d))
            nf[d] += 1

        def B(side, zb=False):
            d = near if side == 0 else far
            i = mb(d, nb[d])
            nb[d] += 1
            if zb:
                s.append(("X", i, d))
                wq.append(("W", i, d))
            else:
                s.append(("B", i, d))

        def W():
            s.append(wq.pop(0))

        for _ in range((half_p - hr - 1) * 2):      # step 1: nF0
            F(0)
        for _ in range(hr + 1):                     # step 2: nF0F1
            F(0)
            F(1)
        for _ in range(half_p - hr - 1):            # step 3: nB1W1F1 (zero bubble)
            B(1, zb=True)
            W()
            F(1)
        for i in range(half_m - p + hr + 1):        # step 4: nF0B1F1B0
            # i == 0 on a middle rank: F0 and B1 are not overlapped in the reference either;
            # with transfers as lags the two variants give the same slot order
            F(0)
            B(1)
            F(1)
            B(0)
        for _ in range(half_p - hr - 1):            # step 5: nB1F1B0
            B(1)
            F(1)
            B(0)
        zb = False
        steps6 = hr + 1
        for i in range(steps6):                     # step 6: nB1B0, second half zero bubble
            if i == steps6 // 2 and hr % 2 == 1:
                zb = True
            B(1, zb)
            if i == steps6 // 2 and hr % 2 == 0:
                zb = True
            B(0, zb)
        for _ in range(half_p - hr - 1):            # step 7: nWB0
            W()
            B(0, zb=True)
        while wq:                                   # step 8: nW
            W()
        out.append(s)
    return out


def parse_custom(strings, p: int, v: int):
    """Parse a custom order: one string per rank, slots separated by spaces (``"F0 F1 B0 B1"``).

    A slot is a kind letter (``F``, ``B``, ``X`` = dX, ``W`` = dW) and a micro-batch number,
    with ``.c`` for local chunk c when v > 1 (``F3.1``).  Returns the slot lists, or raises
    ``ValueError(message, hint)``.
    """
    if len(strings) != p:
        raise ValueError(f"custom order lists {len(strings)} stage(s) but the pipeline has {p} stages",
                         "write one string per stage: order = [\"F0 F1 B0 B1\", …]")
    out = []
    for r, text in enumerate(strings):
        slots = []
        for tok in text.replace(",", " ").split():
            kind, rest = tok[:1], tok[1:]
            mb, _, ch = rest.partition(".")
            if kind not in "FBXW" or not kind or not mb.isdigit() or (ch and not ch.isdigit()):
                raise ValueError(f"stage {r}: cannot read slot '{tok}'",
                                 "a slot is F, B, X (dX) or W (dW) followed by the micro-batch number, "
                                 "and .CHUNK when virtual > 1: F0, B3, X2, W2, F1.1")
            c = int(ch) if ch else 0
            if c >= v:
                raise ValueError(f"stage {r}: slot '{tok}' names chunk {c} but virtual = {v}",
                                 f"chunks are numbered 0..{v - 1}")
            slots.append((kind, int(mb), c))
        out.append(slots)
    return out


def check_orders(orders, m: int, v: int):
    """Every rank runs F and (B, or X and W) exactly once per micro-batch and chunk.

    Raises ``ValueError(message, hint)`` naming the first stage and slot at fault.
    """
    for r, slots in enumerate(orders):
        seen: dict = {}
        for kind, mb, c in slots:
            if mb >= m:
                raise ValueError(f"stage {r}: slot {kind}{mb} names micro-batch {mb} but microbatches = {m}",
                                 f"micro-batches are numbered 0..{m - 1}")
            key = (kind, mb, c)
            if key in seen:
                raise ValueError(f"stage {r}: slot {_name(key, v)} appears twice", "each slot runs once")
            seen[key] = True
        for mb in range(m):
            for c in range(v):
                has = {k for k in "FBXW" if (k, mb, c) in seen}
                if "F" not in has:
                    raise ValueError(f"stage {r}: no forward slot {_name(('F', mb, c), v)}",
                                     "every micro-batch (and chunk) needs F and either B or both X and W")
                if "B" in has and (has & {"X", "W"}):
                    raise ValueError(f"stage {r}: micro-batch {mb} has both B and X/W",
                                     "B is the whole backward; X and W are its two halves")
                if "B" not in has and has & {"X", "W"} != {"X", "W"}:
                    missing = "B" if not has & {"X", "W"} else ({"X", "W"} - has).pop()
                    raise ValueError(f"stage {r}: no backward slot {_name((missing, mb, c), v)}",
                                     "every micro-batch (and chunk) needs F and either B or both X and W")


def _name(slot, v):
    kind, mb, c = slot
    return f"{kind}{mb}" + (f".{c}" if v > 1 else "")


def orders_for(schedule: str, p: int, m: int, v: int, warmup: str = "megatron"):
    """Slot orders of a named schedule (``custom`` is parsed by :func:`parse_custom`); ``warmup``:
    the interleaved schedule's rule (:data:`WARMUPS`)."""
    if schedule == "fill_drain":
        return fill_drain(p, m)
    if schedule == "1f1b":
        return one_f_one_b(p, m)
    if schedule == "interleaved":
        return interleaved(p, m, v, warmup)
    if schedule == "zb_h1":
        return zb_h1(p, m)
    if schedule == "zb_h2":
        return zb_h2(p, m)
    if schedule == "dualpipe":
        return dualpipe(p, m)
    raise KeyError(schedule)


def interleaved_arrays(p: int, m: int, v: int, warmup: str = "megatron"):
    """:func:`interleaved` as flat numpy arrays, rank-major: ``(kind, mb, chunk, rank)`` with
    kind 0 = F, 1 = B — the same slots in the same order, without a tuple per slot."""
    import numpy as np

    total = m * v
    ks, mbs, cs, rs = [], [], [], []
    for r in range(p):
        warm = interleaved_warmup(p, m, v, r, warmup)
        steady = total - warm
        # virtual index and direction of every slot of rank r, in order
        vk = np.empty(total * 2, dtype=np.int64)
        fw = np.empty(total * 2, dtype=bool)
        vk[:warm] = np.arange(warm)
        fw[:warm] = True
        mid = np.arange(steady)
        vk[warm:warm + 2 * steady:2] = warm + mid
        fw[warm:warm + 2 * steady:2] = True
        vk[warm + 1:warm + 2 * steady:2] = mid
        fw[warm + 1:warm + 2 * steady:2] = False
        vk[warm + 2 * steady:] = np.arange(steady, total)
        fw[warm + 2 * steady:] = False
        g, in_g = np.divmod(vk, p * v)
        c = in_g // p
        ks.append(np.where(fw, 0, 1).astype(np.int8))
        mbs.append(g * p + in_g % p)
        cs.append(np.where(fw, c, v - 1 - c))
        rs.append(np.full(total * 2, r, dtype=np.int64))
    return np.concatenate(ks), np.concatenate(mbs), np.concatenate(cs), np.concatenate(rs)

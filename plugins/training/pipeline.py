"""Pipeline-parallel schedules as event models: fill–drain, 1F1B, interleaved 1F1B, ZB-H1,
ZB-H2, DualPipe and custom slot orders, all on the one shared timeline engine.

``use pipeline { schedule = "1f1b"; stages = 4; microbatches = 8; layers = 9;
forward = 10 ms; backward = 20 ms; transfer = 1 ms; update = 1 ms;
activation = 25.5 MiB; head_activation = 76.1875 MiB; buffer = 2 MiB }``

Book §10.3.2 (figures 10-17 to 10-24, footnotes 4 and 11, exercise 10-4).  A schedule is a
per-rank order of work slots (:mod:`plugins.training.pipeline_schedules`); with the order fixed the
step is a DAG on the ``pipeline`` timeline:

* one activity per slot on the rank's resource ``stage R`` (work on a rank runs in slot
  order): F, B — or B split into dX and dW — of one micro-batch in one model chunk, lasting
  ``forward``, ``backward``, ``backward − weight_grad``, ``weight_grad`` scaled by the chunk's
  share of the stage's layers (``chunk_layers[k] / layers``);
* data edges: F of pipeline position k waits for F of position k−1 plus ``transfer``; the
  backward of position k waits for its own F and for the backward (dX) of position k+1 plus
  ``transfer_back``; dW waits for its dX.  The lag model keeps the forward and backward
  channels independent (messages never queue behind each other);
* one ``update`` per rank after its last slot; the step's makespan is the longest path.

Memory (pool ``stage R``): a micro-batch's activations (``activation`` per layer of the chunk,
plus ``head_activation`` at the last pipeline position) are held from the end of its forward
to the end of its backward — of its dW when the backward is split; each boundary message
holds ``buffer`` bytes on the sender from the end of the producing slot to the start of the
consuming one, and on the receiver from the end of the producing slot to the end of the
consuming one.

Closed forms next to the event model (§10.3.2): T = (m+p−1)(t_f+t_b), u = m/(m+p−1), bubble
fractions (p−1)/m (GPipe, 1F1B) and (1/v)(p−1)/m (Megatron-LM interleaving), zero-bubble
bubbles (p−1)(T_F+T_B−T_W) (ZB-H1) and (p−1)(T_F+T_B−2T_W) (ZB-H2, zero-bubble paper
table 2), DualPipe (PP/2−1)(F&B+B−3W) with F&B = F+B here (DeepSeek-V3 table 2).
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import no_gc
from dsl.plugin import FigureSpec, Param, Table, TableSpec, UseSpec
from plugins.training import pipeline_schedules as S

SPEC = UseSpec(
    "pipeline",
    "pipeline-parallel schedule as an event model: makespan, idle time, per-stage memory peaks",
    references=("pipeline schedules (GPipe, 1F1B, interleaved, zero bubble, DualPipe) as slot orders on one "
                "event-model engine",
                "Huang et al. 2019, 'GPipe'",
                "Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM'",
                "Qi et al. 2024, 'Zero Bubble Pipeline Parallelism' (ICLR)",
                "DualPipe: DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report'"),
    params=(
        Param("schedule", default='"1f1b"', kind="choice", choices=S.SCHEDULES,
              doc="slot order: fill_drain (GPipe), 1f1b, interleaved, zb_h1, zb_h2, dualpipe or custom"),
        Param("stages", "", None, "pipeline stages p (ranks)", kind="int", min=1),
        Param("microbatches", "", None, "micro-batches m per step", kind="int", min=1),
        Param("virtual", "", "1", "model chunks v per rank (interleaved and custom orders)", kind="int", min=1),
        Param("layers", "", "1", "layers per stage (the work `forward` and `backward` time)", kind="int", min=1),
        Param("chunk_layers", "", None, "layers of each of the p·v chunks in pipeline order (chunk k on rank "
              "k mod p); default: `layers / virtual` each", kind="list", optional=True, min_items=1),
        Param("forward", "s", None, "forward time of one micro-batch through one stage (`layers` layers)",
              min=0),
        Param("backward", "s", "2 * forward", "backward time of one micro-batch through one stage (dX + dW)",
              min=0),
        Param("weight_grad", "s", "backward / 2", "dW part of `backward` (split schedules: zb_h1, zb_h2, "
              "dualpipe, X/W slots)", min=0),
        Param("transfer", "s", "0 s", "time of one boundary message on the forward channel", min=0),
        Param("transfer_back", "s", "transfer", "time of one boundary message on the backward channel", min=0),
        Param("update", "s", "0 s", "parameter update on each rank after its last slot", min=0),
        Param("activation", "B", "0 B", "activations saved per layer per micro-batch", min=0),
        Param("head_activation", "B", "0 B", "extra activations saved per micro-batch at the last pipeline "
              "position (LM-head logits)", min=0),
        Param("buffer", "B", "0 B", "send/receive buffer of one boundary message", min=0),
        Param("budget", "B", None, "memory for activations and buffers per stage (requirement fits_budget; "
              "selects the fastest compared schedule that fits)", min=0, optional=True),
        Param("order", kind="list", item="string", optional=True, min_items=1,
              doc="custom slot order: one string per stage, slots separated by spaces "
                  "(\"F0 F1 B0 F2 B1 B2\"; X/W for split backward; F3.1 for chunk 1)"),
        Param("compare", kind="list", item="string", optional=True, min_items=1,
              doc="other schedules priced with the same parameters (own timelines `pipeline NAME`; "
                  "quantities `NAME_time`, `NAME_peak`, 1f1b as one_f_one_b)"),
    ),
    order=35,
    provides=("pipeline_time", "idle_time", "utilization", "forward_messages", "boundary_messages",
              "activation_peak", "ideal_time", "ideal_utilization", "bubble_fraction", "bubble_bound",
              "fastest_in_budget"),
)

KINDS = {"F": "forward", "B": "backward", "X": "dX", "W": "dW"}


@hookimpl
def plan_blocks_register():
    return [SPEC]


class _Setup:
    """Structural values of one block (nominal ints, names) and its symbols."""

    def __init__(self, b):
        self.b = b
        self.p = int(b.value("stages"))
        self.m = int(b.value("microbatches"))
        self.v = int(b.value("virtual"))
        self.layers = int(b.value("layers"))
        self.schedule = b.value("schedule")
        from dsl.plugin import current_limits as current, limit_hint as raise_hint
        cap = current().activities
        if 2 * self.p * self.m * self.v > cap:   # a forward and a backward slot per micro-batch and chunk
            b.error_at("microbatches" if self.m >= max(self.p, self.v) else "stages" if self.p >= self.v else "virtual",
                       f"stages × microbatches × virtual = {self.p} × {self.m} × {self.v} would schedule more than "
                       f"{cap:,} activities", raise_hint("activities"), code="limit")
        cl = b.value("chunk_layers")
        nchunks = self.p * self.v
        if cl is not None:
            if len(cl) != nchunks:
                b.error_at("chunk_layers", f"chunk_layers lists {len(cl)} chunks but stages × virtual = "
                           f"{self.p} × {self.v} = {nchunks}", "give the layers of every chunk in pipeline order")
            if any(x != int(x) or x < 1 for x in cl):
                b.error_at("chunk_layers", "chunk_layers must be whole numbers ≥ 1", "e.g. [5, 5, 5, 5, 4, 4, 4, 4]")
            self.chunk_layers = [int(x) for x in cl]
        else:
            self.chunk_layers = None


def _check(st: _Setup, schedule: str, b):
    p, m, v = st.p, st.m, st.v
    if schedule == "interleaved":
        if v < 2:
            b.error_at("virtual", "the interleaved schedule needs virtual ≥ 2 chunks per stage",
                       "set virtual = 2 (Megatron-LM's virtual pipeline)")
        if m % p:
            b.error_at("microbatches", f"interleaved 1F1B visits chunks in groups of p = {p} micro-batches; "
                       f"microbatches = {m} is not a multiple", f"use a multiple of {p}")
    elif schedule == "dualpipe":
        if p % 2 or m % 2 or m < 2 * p:
            b.error_at("microbatches" if p % 2 == 0 else "stages",
                       f"DualPipe needs an even number of stages and an even number of micro-batches ≥ 2p "
                       f"(stages = {p}, microbatches = {m})", "the reference implementation feeds m/2 from each end")
    elif schedule != "custom" and v != 1:
        b.error_at("virtual", f"schedule '{schedule}' runs one chunk per stage (virtual = {v})",
                   "use schedule = \"interleaved\" or a custom order for several chunks")


_KCODE = {"F": 0, "B": 1, "X": 2, "W": 3}
_KCH = "FBXW"


def _slot_arrays(orders):
    """Per-rank slot orders as flat arrays (rank-major): kind code, micro-batch, chunk, rank."""
    import numpy as np

    n = sum(len(s) for s in orders)
    K = np.empty(n, dtype=np.int8)
    MB = np.empty(n, dtype=np.int64)
    C = np.empty(n, dtype=np.int64)
    R = np.empty(n, dtype=np.int64)
    at = 0
    for r, slots in enumerate(orders):
        if not slots:
            continue
        ks, mbs, cs = zip(*slots)
        e = at + len(slots)
        K[at:e] = [_KCODE[k] for k in ks]
        MB[at:e] = mbs
        C[at:e] = cs
        R[at:e] = r
        at = e
    return K, MB, C, R


def _dag(orders, p: int, m: int, npos: int, dual: bool, multi: bool) -> dict:
    """The dependency structure of a schedule's slots (the one text behind the ``pipeline``
    timeline and :func:`makespans`): per slot (rank-major, in each rank's order) its kind
    ``K``, micro-batch ``MB``, chunk ``C``, rank ``R`` and pipeline position ``POS``; the data
    edges in CSR form (``ptr``, ``src``, ``lag``: 0 the forward message, 1 the backward one);
    ``look`` (kind, micro-batch, position) → slot and ``bk`` the backward kind of each
    (micro-batch, position).  Raises :class:`_Deadlock` when a slot waits on one never scheduled."""
    import numpy as np
    from dsl.plugin import Timeline

    K, MB, C, R = orders if isinstance(orders, tuple) else _slot_arrays(orders)
    i32 = np.int32
    MB, C, R = MB.astype(i32), C.astype(i32), R.astype(i32)
    ns = len(K)
    half = m // 2
    if dual:
        POS = np.where(MB < half, R, p - 1 - R)
    else:
        POS = C * p + R
    # global (block) index of every (kind, micro-batch, position); -1 = not scheduled
    look = np.full((4, m, npos), -1, dtype=np.int32)
    look[K, MB, POS] = np.arange(ns, dtype=np.int32)
    # backward kind of each (micro-batch, position): B, or X when the backward is split
    bk = np.full((m, npos), -1, dtype=np.int8)
    isb = (K == 1) | (K == 2)
    bk[MB[isb], POS[isb]] = K[isb]
    # predecessors (at most two per slot), in the order of the scalar model
    isF, isW = K == 0, K == 3
    isBX = ~isF & ~isW
    d1 = np.full(ns, -1, dtype=np.int32)
    l1 = np.full(ns, -1, dtype=np.int8)
    has1 = np.zeros(ns, dtype=bool)
    f_dep = isF & (POS > 0)
    d1[f_dep] = look[0, MB[f_dep], POS[f_dep] - 1]
    l1[f_dep] = 0                                 # lag code 0: transfer
    has1 |= f_dep
    d1[isW] = look[2, MB[isW], POS[isW]]
    has1 |= isW
    d1[isBX] = look[0, MB[isBX], POS[isBX]]
    has1 |= isBX
    has2 = isBX & (POS < npos - 1)
    nb = np.where(has2, POS + 1, 0)
    kk = bk[MB, nb]
    d2 = np.where(has2 & (kk >= 0), look[np.maximum(kk, 0), MB, nb], -1)
    missing = (has1 & (d1 < 0)) | (has2 & (d2 < 0))
    cnt = has1.astype(np.int64) + has2
    ptr = np.zeros(ns + p + 1, dtype=np.int64)
    np.cumsum(cnt, out=ptr[1:ns + 1])
    ptr[ns + 1:] = ptr[ns]
    ne = int(ptr[ns])
    src = np.empty(ne, dtype=np.int32)
    lag = np.full(ne, -1, dtype=np.int8)
    first = ptr[:ns][has1]
    src[first] = d1[has1]
    lag[first] = l1[has1]
    second = ptr[:ns][has2] + has1[has2]
    src[second] = d2[has2]
    lag[second] = 1                               # lag code 1: transfer_back
    # an order that cannot run (a rank waiting on work queued behind its own) is found and named
    if missing.any():
        chain = np.flatnonzero(R[1:] == R[:-1]) + 1
        sink = ns                                 # a node that never becomes ready
        e_dst = np.concatenate([np.repeat(np.arange(ns), cnt), chain, np.flatnonzero(missing), [sink]])
        e_src = np.concatenate([np.where(src < 0, sink, src), chain - 1, np.full(int(missing.sum()), sink),
                                [sink]])
        raise _Deadlock(_stuck(Timeline._generations(ns + 1, e_dst, e_src, partial=True), ns, p, K, MB, C, R,
                               multi))
    return {"K": K, "MB": MB, "C": C, "R": R, "POS": POS, "look": look, "bk": bk, "ptr": ptr, "src": src,
            "lag": lag, "isF": isF}


def makespans(schedule: str, p: int, m: int, v: int, chunk_layers, forward, backward, transfer,
              first=(0.0, 0.0), last=(0.0, 0.0), warmup: str = "megatron"):
    """Makespans of one schedule's step for many sets of durations at once (numpy): the
    longest path of the DAG :func:`_dag` builds — the one the ``pipeline`` timeline schedules —
    evaluated generation by generation over arrays of candidates (the layout search).

    :param chunk_layers: layers of each of the p·v positions (ints).
    :param forward, backward: arrays (n,) — time of one micro-batch through one layer.
    :param transfer: array (n,) — one boundary message, each way.
    :param first, last: pairs of arrays (n,) — forward and backward time added at the first
        position (embedding) and at the last (LM head and loss).
    :returns: array (n,) of makespans (s); the update is 0.
    """
    import numpy as np
    from dsl.plugin import Timeline

    if schedule not in ("fill_drain", "1f1b", "interleaved"):
        raise ValueError(f"makespans prices fill_drain, 1f1b and interleaved, not {schedule}")
    npos = p * v
    orders = (S.interleaved_arrays(p, m, v, warmup) if schedule == "interleaved"
              else S.orders_for(schedule, p, m, v, warmup))
    g = _dag(orders, p, m, npos, False, v > 1)
    K, R, POS, ptr, src, lag = g["K"], g["R"], g["POS"], g["ptr"], g["src"], g["lag"]
    ns = len(K)
    f, b, c = (np.atleast_1d(np.asarray(x, dtype=float)) for x in (forward, backward, transfer))
    n = max(len(f), len(b), len(c))
    f, b, c = (np.broadcast_to(x, (n,)) for x in (f, b, c))
    lay = np.asarray(chunk_layers, dtype=float)[:, None]
    # durations (kind F/B, position, candidate): the position's layers, plus the ends' extras
    dur = np.stack([lay * f[None, :], lay * b[None, :]]).copy()
    for pos, (ef, eb) in ((0, first), (npos - 1, last)):
        dur[0, pos] += np.broadcast_to(np.asarray(ef, dtype=float), (n,))
        dur[1, pos] += np.broadcast_to(np.asarray(eb, dtype=float), (n,))
    cnt = np.diff(ptr[:ns + 1])
    prev = np.r_[False, R[1:] == R[:-1]]          # a slot waits for the previous one on its rank
    chain = np.flatnonzero(prev)
    e_dst = np.concatenate([np.repeat(np.arange(ns), cnt), chain])
    e_src = np.concatenate([src.astype(np.int64), chain - 1])
    gens = Timeline._generations(ns, e_dst, e_src)
    kind = np.minimum(K, 1).astype(np.int64)     # F → 0; B → 1
    out = np.empty(n)
    step = max(1, 4_000_000 // max(ns, 1))        # candidates per pass: ns × step floats
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        cc = c[lo:hi]
        fin = np.zeros((ns, hi - lo))
        for G in gens:
            st = np.where(prev[G][:, None], fin[np.maximum(G - 1, 0)], 0.0)
            for j in (0, 1):
                has = cnt[G] > j
                if has.any():
                    Gi = G[has]
                    e = ptr[Gi] + j
                    st[has] = np.maximum(st[has], fin[src[e]] + np.where((lag[e] >= 0)[:, None], cc[None, :], 0.0))
            fin[G] = st + dur[kind[G], POS[G], lo:hi]
        out[lo:hi] = fin.max(axis=0)
    return out


def _build(ctx, st: _Setup, schedule: str, tl, orders, extras=None):
    """Activities and holds of one schedule on timeline ``tl``, added as columns (one block of
    activities, one of holds).  Returns per-rank busy sums."""
    import numpy as np
    from dsl.plugin import Timeline

    b = st.b
    p, m = st.p, st.m
    tl.title = schedule           # figures and tables name the schedule from the timeline itself
    dual = schedule == "dualpipe"
    v = 2 if dual else st.v
    npos = p if dual else p * v                  # pipeline positions a micro-batch visits
    if st.chunk_layers is not None:
        lay = st.chunk_layers
    else:
        lay = [sp.Rational(st.layers, v if not dual else 1)] * npos
    t_f, t_b, t_w = b.q("forward"), b.q("backward"), b.q("weight_grad")
    c_f, c_b, upd = b.q("transfer"), b.q("transfer_back"), b.q("update")
    act, head, buf = b.q("activation"), b.q("head_activation"), b.q("buffer")
    with_buf = (b.value("buffer") or 0) > 0
    L = st.layers
    multi = v > 1 and not dual

    # distinct durations: (kind, layers of the position) -> code
    durs: list = []
    dpos: dict = {}
    dtab = np.empty((4, npos), dtype=np.int64)
    for kc, kind in enumerate(_KCH):
        base = {"F": t_f, "B": t_b, "X": t_b - t_w, "W": t_w}[kind]
        for k in range(npos):
            ends = (k == 0, k == npos - 1) if extras is not None else (False, False)
            key = (kind, lay[k], ends)
            c = dpos.get(key)
            if c is None:
                c = dpos[key] = len(durs)
                d = base if lay[k] == L else base * sp.Rational(lay[k]) / L
                for at, (ef, eb) in zip(ends, extras or ()):
                    if at:        # the embedding (first position) or the LM head and loss (last)
                        d = d + {"F": ef, "B": eb, "X": eb / 2, "W": eb / 2}[kind]
                durs.append(d)
            dtab[kc, k] = c
    upd_code = len(durs)
    durs.append(upd)

    g = _dag(orders, p, m, npos, dual, multi)
    K, MB, C, R, POS, look, bk, ptr, src, lag = (g[k] for k in ("K", "MB", "C", "R", "POS", "look", "bk", "ptr",
                                                               "src", "lag"))
    ns, half, isF = len(K), m // 2, K == 0
    dcode = np.concatenate([dtab[K, POS], np.full(p, upd_code)])
    hatched = np.concatenate([(MB >= half) if dual else (C > 0), np.zeros(p, dtype=bool)])
    kcode = np.concatenate([K.astype(np.int64), np.full(p, 4)])
    lanes = [f"stage {r}" for r in range(p)]
    rcode = np.concatenate([R, np.arange(p)])

    cols: list = []

    def slot(i):
        """(kind letter, micro-batch, chunk, stage) of slot ``i`` as Python values: the columns
        become lists on the first name, label or doc asked for (formatting a numpy scalar costs
        ≈10 µs; the text is the same)."""
        if not cols:
            cols.extend(([_KCH[k] for k in K.tolist()], MB.tolist(), C.tolist(), R.tolist()))
        return cols[0][i], cols[1][i], cols[2][i], cols[3][i]

    def name(i):
        if i >= ns:
            return f"U@{i - ns}"
        k, mb, c, r = slot(i)
        return (f"{k}{mb}c{c}@{r}" if multi else f"{k}{mb}@{r}")

    def label(i):
        return "" if i >= ns else str(slot(i)[1])

    def doc(i):
        if i >= ns:
            return f"parameter update on stage {i - ns}"
        k, mb, c, r = slot(i)
        return f"{KINDS[k]} of micro-batch {mb}" + (f", chunk {c}" if multi else "") + f" on stage {r}"

    base = tl.add_many(name, durs, dcode, lanes, rcode, ptr, src, lags=[c_f, c_b], lag_code=lag,
                       kinds=[KINDS[k] for k in _KCH] + ["update"], kind_code=kcode, labels=label,
                       hatched=hatched, doc=doc)
    if tl.has_cycle():      # an order that cannot run (a rank waiting on work queued behind its own)
        n_, dst_, src_, _, _ = tl.structure()
        gens = Timeline._generations(n_, dst_, src_, partial=True)
        tl.drop_last_block()
        raise _Deadlock(_stuck([g[(g >= base) & (g < base + ns)] - base for g in gens], ns, p, K, MB, C, R, multi))
    counts = np.bincount(rcode * len(durs) + dcode, minlength=p * len(durs)).reshape(p, len(durs))
    busy = [sp.Add(*[int(n) * durs[c] for c, n in enumerate(counts[r].tolist()) if n]) for r in range(p)]
    # memory: activations from the end of F to the end of B (or W), buffers around messages
    fs = np.flatnonzero(isF)
    mbf, posf = MB[fs], POS[fs]
    endk = np.where(bk[mbf, posf] == 2, 3, 1)
    ends = look[endk, mbf, posf]
    sizes, spos = [], {}
    scode_pos = np.empty(npos, dtype=np.int64)
    for k in range(npos):
        e = act * lay[k] if lay[k] != 1 else act
        if k == npos - 1:
            e = e + head
        c = spos.get(e)
        if c is None:
            c = spos[e] = len(sizes)
            sizes.append(e)
        scode_pos[k] = c
    nf = len(fs)

    def act_name(j):
        return "act:" + name(int(fs[j]))

    tl.hold_many(act_name, sizes, scode_pos[posf], lanes, R[fs], base + fs, np.ones(nf, dtype=bool),
                 base + ends, np.ones(nf, dtype=bool), kind="activation")
    if with_buf:
        mbs = np.repeat(np.arange(m), npos - 1)
        ks = np.tile(np.arange(npos - 1), m)
        if dual:
            ra = np.where(mbs < half, ks, p - 1 - ks)
            rb = np.where(mbs < half, ks + 1, p - 1 - ks - 1)
        else:
            ra, rb = ks % p, (ks + 1) % p
        fsrc, fdst = look[0, mbs, ks], look[0, mbs, ks + 1]
        bsrc = look[bk[mbs, ks + 1], mbs, ks + 1]
        bdst = look[bk[mbs, ks], mbs, ks]
        # per message pair: send F, recv F, send B, recv B
        S4 = np.stack([fsrc, fsrc, bsrc, bsrc], 1).ravel()
        E4 = np.stack([fdst, fdst, bdst, bdst], 1).ravel()
        P4 = np.stack([ra, rb, rb, ra], 1).ravel()
        EF = np.tile(np.array([False, True, False, True]), len(mbs))

        def buf_name(j):
            q, t = divmod(j, 4)
            return (("send:" + name(int(S4[j]))) if t in (0, 2) else ("recv:" + name(int(E4[j]))))

        nb4 = len(S4)
        tl.hold_many(buf_name, [buf], np.zeros(nb4, dtype=np.int64), lanes, P4, base + S4,
                     np.ones(nb4, dtype=bool), base + E4, EF, kind="buffer")
    return busy, npos


class _Deadlock(Exception):
    pass


def _stuck(gens, ns, p, K, MB, C, R, multi) -> str:
    """Message naming the first slot of each stage that cannot run."""
    import numpy as np

    done = np.zeros(ns + 1, dtype=bool)
    for g in gens:
        done[g] = True
    stuck = []
    for r in range(p):
        left = np.flatnonzero((R == r) & ~done[:ns])
        if len(left):
            i = int(left[0])
            stuck.append(f"stage {r} at {_KCH[K[i]]}{MB[i]}" + (f"c{C[i]}" if multi else ""))
    return ("the slot orders cannot run: every stage waits for work queued behind another "
            "stage's waiting slot (" + ", ".join(stuck[:4]) + ")")


def _orders(st: _Setup, schedule: str, b, warmup: str = "megatron"):
    if schedule == "custom":
        raw = b.value("order")
        if raw is None:
            b.error_at("schedule", "schedule = \"custom\" needs an `order`",
                       "order = [\"F0 F1 B0 B1\", …]: one string of slots per stage", code="missing-parameter")
        try:
            orders = S.parse_custom(raw, st.p, st.v)
            S.check_orders(orders, st.m, st.v)
        except ValueError as e:
            b.error_at("order", e.args[0], e.args[1], code="bad-order")
        return orders
    if schedule == "interleaved":
        return S.interleaved_arrays(st.p, st.m, st.v, warmup)     # the same slots, as arrays
    return S.orders_for(schedule, st.p, st.m, st.v, warmup)


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("pipeline")
    if b is None:
        return
    st = _Setup(b)
    p, m, v = b.q("stages"), b.q("microbatches"), b.q("virtual")
    t_f, t_b, t_w = b.q("forward"), b.q("backward"), b.q("weight_grad")
    sched = st.schedule
    ctx.define("ideal_time", (m + p - 1) * (t_f + t_b), "ms",
               "fill–drain without transfers or update: T = (m+p−1)(t_f+t_b)",
               references=("pipeline bubble (p−1)/(m+p−1): Huang et al. 2019, 'GPipe: Efficient Training of Giant "
                           "Neural Networks using Pipeline Parallelism'; Narayanan et al. 2021, 'Efficient "
                           "Large-Scale Language Model Training on GPU Clusters Using Megatron-LM'",))
    ctx.define("ideal_utilization", m / (m + p - 1), "%", "u = m/(m+p−1)",
               references=("pipeline bubble (p−1)/(m+p−1): Huang et al. 2019, 'GPipe: Efficient Training of Giant "
                           "Neural Networks using Pipeline Parallelism'; Narayanan et al. 2021, 'Efficient "
                           "Large-Scale Language Model Training on GPU Clusters Using Megatron-LM'",))
    frac = (p - 1) / m / (v if sched == "interleaved" else 1)
    ctx.define("bubble_fraction", frac, "%",
               "bubble / ideal time: (p−1)/m, interleaved (1/v)(p−1)/m (Megatron-LM)")
    t_x = t_b - t_w
    bound = {
        "fill_drain": (p - 1) * (t_f + t_b),
        "1f1b": (p - 1) * (t_f + t_b),
        "interleaved": (p - 1) * (t_f + t_b) / v,
        "zb_h1": (p - 1) * (t_f + t_x - t_w),
        "zb_h2": (p - 1) * (t_f + t_x - 2 * t_w),
        "dualpipe": (p / 2 - 1) * ((t_f + t_b) + t_b - 3 * t_w),
    }.get(sched)
    if bound is not None:
        # the bound is a product over the block's parameters, real symbols of no known sign:
        # sympy cannot order it against 0, so its evaluating Max (a sign query through the
        # assumptions, then factor_terms, ≈5 ms a plan) returns this same unevaluated Max
        ctx.define("bubble_bound", sp.Max(bound, 0, evaluate=False), "ms",
                   "closed-form bubble per stage of this schedule (GPipe/1F1B (p−1)(t_f+t_b), interleaved ÷v, "
                   "ZB-H1 (p−1)(T_F+T_B−T_W), ZB-H2 (p−1)(T_F+T_B−2T_W), DualPipe (PP/2−1)(F&B+B−3W))")
    npos = st.p if sched == "dualpipe" else st.p * st.v
    ctx.define("forward_messages", sp.Integer(st.m * (npos - 1)), "",
               "boundary messages of the forward pass per step: m·(p·v − 1)")
    ctx.define("boundary_messages", sp.Integer(2 * st.m * (npos - 1)), "",
               "boundary messages per step, forward and backward")


def _ident(name: str) -> str:
    """Quantity prefix of a compared schedule (names must start with a letter)."""
    return "one_f_one_b" if name == "1f1b" else name


def _compared(b, main):
    names = list(b.value("compare") or ())
    for n in names:
        if n not in S.SCHEDULES or n == "custom":
            b.error_at("compare", f"unknown schedule '{n}' in compare",
                       "choose from: " + ", ".join(s for s in S.SCHEDULES if s != "custom"), code="out-of-range")
    return [n for n in dict.fromkeys(names) if n != main]


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("pipeline")
    if b is None:
        return
    st = _Setup(b)
    main = st.schedule
    _check(st, main, b)
    others = _compared(b, main)
    for n in others:
        if n == "interleaved" and st.v < 2 or n != "interleaved" and st.v > 1:
            b.error_at("compare", f"'{n}' cannot be compared with virtual = {st.v}",
                       "compare schedules that share the chunking (interleaved needs virtual ≥ 2, the others 1)")
        _check(st, n, b)
    budget = b.q("budget") if b.value("budget") is not None else None
    cands = []
    for name in [main] + others:
        orders = _orders(st, name, b)
        tlname = "pipeline" if name == main else f"pipeline {name}"
        tl = ctx.timeline(tlname)
        try:
            with no_gc():
                busy, _ = _build(ctx, st, name, tl, orders)
        except _Deadlock as e:
            b.error_at("order" if name == "custom" else "schedule", str(e),
                       "a stage must not wait for a backward whose forward it has not run, nor for a "
                       "slot another stage only runs after this one", code="bad-order")
        ident = _ident(name)
        prefix = "" if name == main else f"{ident}_"
        tname = "pipeline_time" if name == main else f"{ident}_time"
        tl.makespan_quantity(tname, "ms", f"makespan of one step under {name} (longest path of the event model)",
                             headline=name == main, rank=20 if name == main else None)
        peaks = []
        for r in range(st.p):
            q = f"{prefix}stage{r}_peak"
            tl.peak_quantity(q, f"stage {r}", "MiB", f"peak of live activations and buffers on stage {r} "
                             f"({name})", headline=False)
            peaks.append(ctx.q(q, "B"))
        pk = ctx.define(f"{prefix}activation_peak" if prefix else "activation_peak",
                        sp.Max(*peaks, evaluate=False) if len(peaks) > 1 else peaks[0], "MiB",
                        f"largest per-stage peak of activations and buffers ({name})", headline=name == main)
        T = ctx.q(tname, "s")
        if name == main:
            work = sp.Add(*busy) / st.p
            ctx.define("idle_time", T - work, "ms", "mean per-stage idle time: makespan − busy time",
                       headline=True)
            ctx.define("utilization", work / T, "%", "busy time / makespan, mean over stages", headline=True)
            for r in range(st.p):
                ctx.define(f"stage{r}_idle", T - busy[r], "ms", f"idle time of stage {r}")
            if budget is not None:
                ctx.require("fits_budget", pk, "<=", budget, "MiB",
                            "every stage's activations and buffers fit the memory budget")
        else:
            ctx.define(f"{ident}_peak", pk, "MiB", f"largest per-stage peak ({name})")
        cands.append((name, T, pk))
    if budget is not None and others:
        # one Piecewise per compared schedule over its own makespan and peak symbols: sympy
        # cannot order two of them, so its evaluating Min (pairwise comparisons, factor_terms)
        # returns this same unevaluated Min
        ctx.define("fastest_in_budget",
                   sp.Min(*[sp.Piecewise((T, pk <= budget), (sp.oo, True)) for _, T, pk in cands], evaluate=False),
                   "ms",
                   "makespan of the fastest compared schedule whose largest stage peak fits the budget "
                   "(infeasible peaks are ruled out first, then time is compared)", headline=True,
                   references=("pipeline bubble (p−1)/(m+p−1): Huang et al. 2019, 'GPipe: Efficient Training of "
                               "Giant Neural Networks using Pipeline Parallelism'; Narayanan et al. 2021, 'Efficient "
                               "Large-Scale Language Model Training on GPU Clusters Using Megatron-LM'",))


# ---------------------------------------------------------------- the training step's pipeline
class _Given:
    """A block-like view of values a caller computed (the training step's layout), so the
    schedule code reads them as it reads a `use pipeline` block.  Errors go to ``error_at``
    (the caller's block and parameter)."""

    def __init__(self, values: dict, exprs: dict, error_at):
        self._values, self._exprs, self._error_at = values, exprs, error_at

    def value(self, name):
        return self._values.get(name)

    def q(self, name):
        return self._exprs[name]

    def error_at(self, param, summary, hint="", code="out-of-range"):
        self._error_at(param, summary, hint, code)


def schedule_step(ctx, timeline: str, *, schedule: str, stages: int, microbatches: int, virtual: int,
                  layers: int, chunk_layers, forward, backward, weight_grad, transfer, activation,
                  head_activation, error_at, extras=None, warmup: str = "megatron") -> tuple[str, object, list]:
    """Schedule one training step's pipeline on timeline ``timeline`` with the event engine
    of `use pipeline` (any schedule of :data:`plugins.training.pipeline_schedules.SCHEDULES` except
    custom), and define its makespan and per-stage activation peaks.

    :param stages, microbatches, virtual, layers: p, m, v and the layers of one stage (ints);
        ``chunk_layers`` the layers of each of the p·v chunks in pipeline order, or None for
        an even split.
    :param forward, backward, weight_grad: sympy durations (s) of one micro-batch through one
        stage of ``layers`` layers (a chunk scales them by its share); ``transfer`` one
        boundary message (s) each way; ``activation`` bytes saved per layer and micro-batch,
        ``head_activation`` the extra bytes at the last position (logits).
    :param extras: None, or ``((f0, b0), (fN, bN))``: forward and backward time of one
        micro-batch added at the first pipeline position (the embedding) and at the last (the LM
        head and loss), beyond the position's layers (split schedules give half of the
        backward to dW).
    :param warmup: the interleaved schedule's warm-up rule,
        :data:`plugins.training.pipeline_schedules.WARMUPS` (``"torch"``: torch.distributed.pipelining's).
    :param error_at: ``error_at(param, summary, hint, code)`` reporting at the caller's block.
    :returns: (name of the makespan quantity, the largest stage peak expression (B), the
        per-stage busy time expressions).
    """
    values = {"stages": stages, "microbatches": microbatches, "virtual": virtual, "layers": layers,
              "schedule": schedule, "chunk_layers": chunk_layers, "buffer": 0}
    exprs = {"forward": forward, "backward": backward, "weight_grad": weight_grad, "transfer": transfer,
             "transfer_back": transfer, "update": sp.Integer(0), "activation": activation,
             "head_activation": head_activation, "buffer": sp.Integer(0)}
    g = _Given(values, exprs, error_at)
    st = _Setup(g)
    _check(st, schedule, g)
    tl = ctx.timeline(timeline)
    try:
        with no_gc():
            busy, _ = _build(ctx, st, schedule, tl, _orders(st, schedule, g, warmup), extras)
    except _Deadlock as e:   # pragma: no cover - the built-in schedules always run
        error_at("schedule", str(e), "", "bad-order")
    name = "pipeline_time"
    tl.makespan_quantity(name, "s", f"makespan of the step's pipeline under {schedule} (event model)")
    peaks = []
    for r in range(st.p):
        q = f"stage{r}_peak"
        tl.peak_quantity(q, f"stage {r}", "GiB", f"activations live at the peak on pipeline stage {r}")
        peaks.append(ctx.q(q, "B"))
    return name, (sp.Max(*peaks, evaluate=False) if len(peaks) > 1 else peaks[0]), busy


# ---------------------------------------------------------------- tables and figures
def _pipeline_timelines(ws, plan):
    out = []
    for (p, name), tl in sorted(ws.timelines.items()):
        if p == plan and (name == "pipeline" or name.startswith("pipeline ")) and tl.schedule is not None:
            out.append(tl)
    main = [t for t in out if t.name == "pipeline"]
    return main + [t for t in out if t.name != "pipeline"]


def _sched_name(ws, plan, tl):
    """The schedule a pipeline timeline runs, as its builder recorded it: `use pipeline` or
    the layout's own pipeline (which has no `pipeline` block to read it from)."""
    return tl.title or tl.name.split(" ", 1)[-1]


def _table(ws, plan):
    if f"{plan}.pipeline.schedule" not in ws.nodes or (plan, "pipeline") not in ws.timelines:
        return None
    from dsl.plugin import convert
    tls = _pipeline_timelines(ws, plan)
    if not tls:
        return None
    budget = ws.base_value(f"{plan}.pipeline.budget") if f"{plan}.pipeline.budget" in ws.nodes else None
    rows, fits = [], []
    for tl in tls:
        name = _sched_name(ws, plan, tl)
        sc = tl.schedule
        busy = tl.busy_times(sc)
        idle = [sc.makespan - busy[r] for r in sorted(busy, key=lambda s: int(s.split()[1]))]
        peaks = [(tl.profiles[pl].peak if pl in tl.profiles else 0.0, pl) for pl in sorted(
            busy, key=lambda s: int(s.split()[1]))]
        top, where = max(peaks, key=lambda x: x[0])
        ok = budget is None or top <= float(budget) * (1 + 1e-12)
        if ok:
            fits.append((sc.makespan, name))
        rows.append((name, round(convert(sc.makespan, "ms"), 3), round(convert(max(idle), "ms"), 3),
                     round(convert(peaks[0][0], "MiB"), 1), f"{convert(top, 'MiB'):.1f} ({where})",
                     "yes" if ok else "no"))
    notes = []
    if fits:
        t, n = min(fits)
        notes.append((f"fastest within the budget of {convert(float(budget), 'GB'):.3g} GB: " if budget is not None
                      else "fastest: ") + f"{n} ({convert(t, 'ms'):.6g} ms)")
    elif budget is not None:
        notes.append("no compared schedule fits the budget")
    return Table(("schedule", "time ms", "max idle ms", "stage 0 peak MiB", "max peak MiB", "fits budget"),
                 tuple(rows), tuple(notes))


@hookimpl
def plan_tables_register():
    return [TableSpec("pipeline-schedules", "Pipeline schedules: time, idle, memory peaks", _table,
                      "the plan's schedule and the compared ones; the fastest that fits the budget")]


def _draw_gantt(ws, plan, fig) -> bool:
    from dsl.plugin import gantt
    tls = _pipeline_timelines(ws, plan)
    if not tls:
        return False
    span = max(tl.schedule.makespan for tl in tls) * 1e3
    fig.set_size_inches(10, 1.0 + 1.6 * len(tls) + 0.1 * len(tls) * len(
        {a.resource for a in tls[0].activities.values()}))
    axes = fig.subplots(len(tls), 1, squeeze=False, sharex=True)
    for ax, tl in zip(axes[:, 0], tls):
        name = _sched_name(ws, plan, tl)
        lanes = sorted({a.resource for a in tl.activities.values()}, key=lambda s: int(s.split()[1]))
        gantt(ax, tl, unit="ms", title=f"{plan}: {name}, {tl.schedule.makespan * 1e3:.6g} ms", lanes=lanes,
              labels=len(tl.activities) <= 400)
        ax.set_xlim(0, span * 1.01)
    fig.tight_layout()
    return True


def _draw_memory(ws, plan, fig) -> bool:
    tls = _pipeline_timelines(ws, plan)
    if not tls or not any(tl.profiles for tl in tls):
        return False
    ax = fig.subplots(1, 1)
    pools = sorted({pl for tl in tls for pl in tl.profiles}, key=lambda s: int(s.split()[1]))
    width = 0.8 / len(tls)
    for j, tl in enumerate(tls):
        ys = [tl.profiles[pl].peak / 2 ** 20 if pl in tl.profiles else 0 for pl in pools]
        ax.bar([i + (j - (len(tls) - 1) / 2) * width for i in range(len(pools))], ys, width,
               label=_sched_name(ws, plan, tl), hatch="//" if j % 2 else None)
    ax.set_xticks(range(len(pools)))
    ax.set_xticklabels(pools)
    ax.set_ylabel("peak activations + buffers (MiB)")
    ax.set_title(f"{plan}: per-stage peak memory", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


@hookimpl
def plan_figures_register():
    return [FigureSpec("pipeline-gantt", "Pipeline schedules on one time axis", _draw_gantt,
                       "one Gantt chart per schedule: forward, backward, dX, dW, update; hatched = second "
                       "chunk or reverse direction"),
            FigureSpec("pipeline-memory", "Per-stage peak memory of each schedule", _draw_memory,
                       "peak of live activations and send/receive buffers per stage")]

"""Pipelines as they are built: the layers split over the pp·virtual chunks (even, or balanced
on compute with the embedding on the first stage and the LM head and loss on the last), the
step's pipeline scheduled on the event engine of ``use pipeline`` (:func:`schedule`, for
``use layout``), and the same schedule's makespan over a grid of candidates
(:func:`pipeline_inputs`, for ``plan search``) — one DAG (:func:`plugins.training.pipeline._dag`)
behind both, so a searched layout's step time is the one ``plan eval`` reports.

Sources: Narayanan et al. 2021 (Megatron-LM 1F1B and interleaved schedules); Llama 3 405B
(The Llama 3 Herd of Models, 2024, §3.3.2: one transformer layer fewer on the first and the
last pipeline stage, which hold the embedding and the LM head with the loss).
"""
from __future__ import annotations

import math

BALANCE = ("layers", "compute")


def split_layers(L: int, n: int, balance: str = "layers", first: float = 0.0, last: float = 0.0) -> list:
    """Layers of each of the ``n`` = pp·virtual pipeline chunks (in pipeline order) for a model
    of ``L`` layers, each chunk one layer at least (``n`` ≤ ``L``).

    * ``"layers"``: as even as possible — ⌊L/n⌋ or ⌈L/n⌉ layers each; the lighter chunks go to
      the ends first (the first chunk, the last, the second, the second to last …), where the
      embedding and the LM head sit.
    * ``"compute"``: the largest chunk's work — its layers plus ``first`` (the embedding, in
      layers' time) on the first chunk and ``last`` (the LM head and loss) on the last — as
      small as possible; a surplus layer leaves the busiest chunk, the earliest of equals (the
      first stage holds the most micro-batches in flight).  Llama 3 405B on 16 stages: the head
      is about half a layer, so 126 layers split [7, 8 × 14, 7].
    """
    L, n = int(L), int(n)
    q, r = divmod(L, n)
    if balance == "layers" or (first <= 0 and last <= 0):
        ends = [k // 2 if k % 2 == 0 else n - 1 - k // 2 for k in range(n)]     # 0, n−1, 1, n−2 …
        out = [q + 1] * n
        for k in ends[:n - r]:
            out[k] = q
        return out
    e = [0.0] * n
    e[0] += float(first)
    e[-1] += float(last)
    eps = 1e-9

    def caps(T):
        return [math.floor(T - x + eps) for x in e]
    # the smallest bottleneck T (of the form k + e_i) whose capacities, one layer at least each, hold L
    cands = sorted({k + x for x in set(e) for k in range(1, L + 1)})
    lo, hi = 0, len(cands) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        c = caps(cands[mid])
        if min(c) >= 1 and sum(c) >= L:
            hi = mid
        else:
            lo = mid + 1
    out = caps(cands[lo])
    for _ in range(sum(out) - L):       # the surplus leaves the busiest chunk, the earliest of equals
        i = max(range(n), key=lambda k: (out[k] + e[k] if out[k] > 1 else -math.inf, -k))
        out[i] -= 1
    return out


def pipeline_warmup(framework: str) -> str:
    """The interleaved schedule's warm-up rule of the framework a plan names
    (:data:`plugins.training.pipeline_schedules.WARMUPS`): torchtitan runs
    torch.distributed.pipelining's schedules, every other framework Megatron-LM's."""
    return "torch" if framework == "torchtitan" else "megatron"


def chunk_memory(chunks, p: int, v: int, m: int) -> tuple:
    """(layers × micro-batches in flight at the fullest stage, layers of the last stage) of a
    split: under 1F1B stage i holds min(p − i, m) micro-batches of its l_i layers; interleaved,
    the fullest rank's layers × the in-flight count of
    :func:`plugins.training.layout_model.inflight` (p·(1 + (p−1)/(p·v)), Korthikanti et al. 2022
    §4.2.3, at most the step's m micro-batches)."""
    if v == 1:
        return max(min(p - i, m) * x for i, x in enumerate(chunks)), chunks[-1]
    from plugins.training.layout_model import inflight, ops
    per_rank = [sum(chunks[r::p]) for r in range(p)]
    return max(per_rank) * inflight(p, v, ops("python"), m), per_rank[-1]


def pipeline_ends(r, p):
    """Forward and backward time of one micro-batch of the embedding (first pipeline position)
    and of the LM head and loss (last): ``((f0, b0), (fN, bN))``.  ``r`` holds them per GPU
    and step averaged over the p stages (as ``compute``); one stage runs p times that."""
    return ((r["embedding_forward"] * p / r["m"], r["embedding_backward"] * p / r["m"]),
            (r["head_forward"] * p / r["m"], r["head_backward"] * p / r["m"]))


def layer_times(K, r, comp, rec, L, p):
    """(forward, backward) of one micro-batch through one transformer layer: the compute less
    the head and the embedding, over the L layers; backward with the recomputed forward."""
    ends = (r["head_forward"] + r["head_backward"] + r["embedding_forward"] + r["embedding_backward"])
    if K["mode"] == "roofline":               # the roofline's own forward/backward split
        fwd = (r["forward"] - r["head_forward"] - r["embedding_forward"]) * p / (r["m"] * L)
        bwd = (comp - r["forward"] - r["head_backward"] - r["embedding_backward"] + rec) * p / (r["m"] * L)
    else:
        fwd = (comp - ends) * p / (3 * r["m"] * L)
        bwd = 2 * fwd + rec * p / (r["m"] * L)
    return fwd, bwd


def schedule(ctx, kn, K, X, r, comp, rec, stage_layers):
    """Schedule the step's pipeline with the event engine; return (the largest stage peak (B), the
    layers the last rank holds: its chunks' sum), or None where the structure is rejected."""
    from plugins.training import pipeline as pipe

    p, v = X["p"], X["v"]
    # the schedule's shape (micro-batches, layers per stage) is built from these numbers: a sweep
    # or solve over what they depend on (gpus, global batch, micro-batch) rebuilds the plan
    L = int(ctx.nominal(K["L"], structural=True))
    m = ctx.nominal(r["m"], structural=True)
    sched = kn.value("schedule")
    if v > 1 and not kn.given("schedule"):
        sched = "interleaved"          # virtual stages mean Megatron's interleaved 1F1B
    if sched == "interleaved" and v < 2:
        kn.error_at("schedule", "the interleaved schedule needs virtual ≥ 2 chunks per stage",
                    "set virtual = 2 (Megatron-LM's virtual pipeline)")
    if sched != "interleaved" and v > 1:
        kn.error_at("virtual", f"virtual = {v} chunks per stage need schedule = \"interleaved\"",
                    "set schedule = \"interleaved\"")
    if m != int(m) or m < 1:
        return None           # the micro_batches_whole requirement reports it
    ends = pipeline_ends(r, p)
    if stage_layers is not None:
        if kn.given("balance"):
            kn.lay.warn_at("balance", "balance is not read: stage_layers gives the split",
                           "drop balance, or drop stage_layers to let balance split the layers", code="unused")
        if len(stage_layers) != p * v or any(x != int(x) or x < 1 for x in stage_layers):
            kn.error_at("stage_layers", f"stage_layers must list {p * v} whole layer counts ≥ 1 (pp·virtual chunks)",
                        f"e.g. {split_layers(L, p * v) if L >= p * v else [1] * (p * v)}")
        if sum(stage_layers) != L:
            kn.error_at("stage_layers", f"stage_layers sum to {int(sum(stage_layers))} but the model has {L} layers",
                        "give the layers of every chunk so that they add up to the model's layers")
        chunks = [int(x) for x in stage_layers]
    elif L < p * v:
        return None           # the layers_fill_chunks requirement reports it
    else:
        chunks = None
    # one micro-batch through one layer (the step's compute less the LM head and the embedding,
    # which run on the last and the first stage), and the ends' own work
    f, bwd = layer_times(K, r, comp, rec, L, p)
    if chunks is None:
        chunks = split_for(L, p * v, kn.value("balance"), ends, ctx, (f, bwd))
    _, peak, _ = pipe.schedule_step(
        ctx, "pipeline", schedule=sched, stages=p, microbatches=int(m), virtual=v, layers=1,
        chunk_layers=chunks, forward=f, backward=bwd, weight_grad=bwd / 2, transfer=r["pp_message"],
        activation=r["activation_per_layer"], head_activation=r["logits"],
        error_at=lambda param, summary, hint="", code="out-of-range": kn.error_at(
            {"stages": "pp", "microbatches": "pp", "chunk_layers": "stage_layers"}.get(param, param),
            summary, hint, code),
        extras=ends, warmup=pipeline_warmup(kn.value("framework")))
    return peak, sum(chunks[p - 1::p])


def split_for(L, n, balance, ends, ctx, layer):
    """:func:`plugins.training.layout_model.split_layers` at the plan's nominal values (the
    split is structure: the ends' work in layers' time is read as numbers)."""
    if balance != "compute":
        return split_layers(L, n)
    return split_layers(L, n, "compute", *ends_in_layers(ends, ctx, layer))


def ends_in_layers(ends, ctx, layer=None):
    """The embedding's and the head's forward + backward in layers' time, at nominal values."""
    (f0, b0), (fn, bn) = ends
    lf, lb = layer
    one = float(ctx.nominal(lf + lb))
    return float(ctx.nominal(f0 + b0)) / one, float(ctx.nominal(fn + bn)) / one


def chunks_of(K: dict, p: int, v: int, balance: str, ends=None, layer=None) -> tuple:
    """The layers of each of the p·v chunks of a candidate: the split ``use layout`` makes
    (:func:`plugins.training.layout_model.split_layers`; with ``balance = "compute"`` the
    embedding's and the head's work ``ends`` in units of one layer's ``layer`` time)."""
    L = int(K["L"])
    if balance != "compute":
        return tuple(split_layers(L, p * v))
    (f0, b0), (fn, bn) = ends
    one = layer[0] + layer[1]
    return tuple(split_layers(L, p * v, "compute", (f0 + b0) / one, (fn + bn) / one))


def pipeline_inputs(K: dict, X: dict, out: dict, ok, meta: dict) -> dict:
    """For the candidates with a pipeline (pp > 1) that the rules admit: the makespan of their
    schedule (1F1B, interleaved with virtual > 1) on the chunks ``use layout`` would split the
    layers into, the head on the last stage and the embedding on the first, priced by
    :func:`plugins.training.pipeline.makespans` on the DAG the plan's timeline schedules — so a
    candidate's step time is the one ``plan eval`` of its layout reports; and the chunks'
    activation memory (:func:`plugins.training.layout_model.chunk_memory`).  ``X["pipe"]`` is NaN
    for the others (the closed form prices them).  Returns {} when no candidate has a pipeline."""
    import numpy as np
    from plugins.training.pipeline import makespans

    n = len(X["t"])
    p_, v_ = X["p"].astype(np.int64), X["v"].astype(np.int64)
    m_ = np.broadcast_to(np.asarray(out["m"], dtype=float), (n,))
    whole = (np.abs(m_ - np.round(m_)) <= 1e-9 * np.maximum(1, m_)) & (m_ >= 1 - 1e-9)
    mi = np.where(whole, np.round(m_), 0).astype(np.int64)
    use = ok & (p_ > 1) & whole & ((v_ == 1) | (mi % np.maximum(p_, 1) == 0)) & (p_ * v_ <= K["L"])
    if not use.any():
        return {"chunks": None}
    col = {k: np.broadcast_to(np.asarray(out[k], dtype=float), (n,))
           for k in ("compute", "recompute", "forward", "m", "pp_message", "head_forward", "head_backward",
                     "embedding_forward", "embedding_backward")}
    L = float(K["L"])
    f, b = layer_times(K, col, col["compute"], col["recompute"], L, p_.astype(float))
    (f0, b0), (fn, bn) = pipeline_ends(col, p_.astype(float))
    balance = meta.get("balance", "layers")
    pipe = np.full(n, np.nan)
    split = np.full(n, None, dtype=object)
    stage_in = np.full(n, np.nan)
    stage_last = np.full(n, np.nan)
    groups: dict = {}
    for i in np.flatnonzero(use).tolist():
        p, v = int(p_[i]), int(v_[i])
        ch = chunks_of(K, p, v, balance, ((f0[i], b0[i]), (fn[i], bn[i])), (f[i], b[i]))
        groups.setdefault((p, v, int(mi[i]), ch), []).append(i)
    warmup = pipeline_warmup(meta.get("framework", "none"))
    for (p, v, m, ch), idx in groups.items():
        idx = np.asarray(idx)
        pipe[idx] = makespans("interleaved" if v > 1 else "1f1b", p, m, v, ch, f[idx], b[idx],
                              col["pp_message"][idx], (f0[idx], b0[idx]), (fn[idx], bn[idx]),
                              warmup=warmup)
        stage_in[idx], stage_last[idx] = chunk_memory(list(ch), p, v, m)
        for i in idx.tolist():
            split[i] = ch
    # memory of the candidates left to the closed form: the even formulas
    even = ~use
    from plugins.training.layout_model import inflight, ops
    stage_in = np.where(even, (K["L"] / X["p"]) * inflight(X["p"], X["v"], ops("numpy"), m_), stage_in)
    stage_last = np.where(even, K["L"] / X["p"], stage_last)
    return {"pipe": pipe, "stage_in": stage_in, "stage_last": stage_last, "chunks": split}

"""ZeRO / FSDP: sharded persistent state, collective volume, link time and exposed wait.

``use zero { stage = 3; group = gpus; link = pcie4_x16; nic = nic_200g; nics_per_host = 8;
prefetch = true }`` — without ``link`` only the memory side is priced (``use zero { stage = 3;
group = 8 }`` in a plan without ``use compute``; with ``use compute`` a link is required).

Persistent state per GPU over a data-parallel group of d GPUs (book §10.2.1), with W, G, M, O
the weights, grads, master and optimizer state of the whole model (from ``use memory``):

* stage 0: W + G + M + O                   (16N for BF16/Adam)
* stage 1: W + G + (M + O)/d                (4N + 12N/d)
* stage 2: W + (G + M + O)/d                (2N + 14N/d)
* stage 3: (W + G + M + O)/d                (16N/d)

``weights_per_gpu``, ``grads_per_gpu``, ``master_per_gpu``, ``optimizer_per_gpu`` are each state's
per-GPU share (replicated: whole; sharded: whole / d).  Figure ``memory-shards`` draws
``memory_per_gpu`` over d against the usable memory (book fig. 10-16, :func:`memory_curve`).

Per-step link volume per GPU, m micro-batches per GPU (§10.3.3).  Every ring collective moves
(d−1)/d of its buffer in and out of each GPU:

* stage 3: per micro-batch an AllGather of W before forward, another before backward and a
  ReduceScatter of G: V = m·(d−1)/d·(2W + G) — with BF16 grads 3m·(d−1)/d·2N;
* stage 2: a ReduceScatter of G per micro-batch and one AllGather of W per step;
* stages 0–1: one all-reduce (stage 0, 2(d−1)/d·G) or ReduceScatter + AllGather (stage 1) per step.

Link bandwidth: the GPU's own link (PCIe without P2P carries every byte, §10.3.3); with more
than one host the ring also crosses the hosts' NICs, ``nics_per_host`` × NIC bandwidth per host
cut (§10.6.2), so the effective bandwidth is the smaller of the two.

Exposure (MegaScale, §10.3.3), as activities on the ``step`` timeline:

* stage 3 with prefetch: only the first AllGather and the last ReduceScatter of the step —
  both of the word embedding, the first module of forward and the last of backward — stay
  unhidden (``allgather_first``, ``reducescatter_last``); the rest (``transfer``) runs on the
  link in parallel with compute and shows up only if it outlasts it;
* stages 1–2: the AllGather of the updated weights overlaps the forward pass of the step
  (``allgather_first`` of the embedding, then ``param_gather``); gradients are reduced while the
  backward passes that produce them run — the last micro-batch's backward (≈ 2/3 of its
  compute) for stage 1, every micro-batch's backward for stage 2 (``grad_reduce`` may start
  ``backward_lag`` after compute starts); the embedding's gradient collective is last;
* stage 0: the all-reduce of the accumulated gradients overlaps the last micro-batch's
  backward; its last bucket (``allreduce_last``) is exposed;
* without prefetch every collective follows compute.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

SPEC = UseSpec(
    "zero",
    "ZeRO/FSDP sharding of the training state and its communication on the GPU's link",
    references=("Book ch. 10 §10.2.1 (ZeRO stages: state per GPU)", "Book ch. 10 §10.3.3 (ZeRO communication volume)",
                "Book ch. 10 §10.6.2 (bandwidth across the host cut)",
                "Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations Toward Training Trillion Parameter Models'",
                "Jiang et al. 2024, 'MegaScale' (exposed communication)"),
    params=(
        Param("stage", "", "3", "ZeRO stage: 0 plain DP, 1 optimizer, 2 +grads, 3 +weights", kind="int",
              min=0, max=3),
        Param("group", "", "gpus", "GPUs in the sharding (data-parallel) group", min=1, whole=True),
        Param("link", kind="ref", ref_kind="link", optional=True,
              doc="the link each GPU's collective traffic crosses (omit to price memory only)"),
        Param("nic", kind="ref", ref_kind="link", optional=True,
              doc="the NIC that carries inter-host traffic (omit on one host)"),
        Param("nics_per_host", "", "gpus_per_host", "NICs per host that share the ring's host cut", min=1, whole=True),
        Param("prefetch", default="true", kind="bool",
              doc="parameters are prefetched and gradients reduced while compute runs"),
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the model trained"),
        Param("gpus", "", "1", "number of GPUs (required by `use compute`)", min=1, whole=True),
        Param("gpus_per_host", "", "8", "GPUs in one host", min=1, whole=True),
    ),
    order=30,
    provides=("persistent_memory", "weights_per_gpu", "grads_per_gpu", "master_per_gpu", "optimizer_per_gpu",
              "transfer_volume", "link_bandwidth", "transfer_time", "transfer_per_microbatch",
              "comm_head", "comm_tail", "gather_time"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("zero")
    if b is None:
        return
    stage = int(b.value("stage"))
    d = b.q("group")
    W, G, M, O = (ctx.q(f"{k}_memory", "B") for k in ("weights", "grads", "master", "optimizer"))
    sharded = {0: (), 1: (M, O), 2: (G, M, O), 3: (W, G, M, O)}[stage]
    full = [x for x in (W, G, M, O) if x not in sharded]
    ctx.define("persistent_memory", sum(full) + sum(sharded) / d, "GiB",
               f"persistent state per GPU under ZeRO-{stage}", headline=True,
               references=("Book ch. 10 §10.2.1 (ZeRO stages: state per GPU)",))
    for k, x in zip(("weights", "grads", "master", "optimizer"), (W, G, M, O)):
        ctx.define(f"{k}_per_gpu", x / d if x in sharded else x, "GiB",
                   f"{k} state held by one GPU under ZeRO-{stage} ({'sharded' if x in sharded else 'replicated'})")
    if b.value("link") is None:
        if ctx.block("compute") is not None:
            # a priced training step must price its collectives too
            b.error_at("link", f"`use zero` in '{ctx.name}' needs 'link' (the link each GPU's collective traffic "
                       "crosses) when the plan prices a step with `use compute`",
                       "add `link = …` naming a link (e.g. pcie4_x16), or drop `use compute` to price memory only",
                       code="missing-parameter")
        return          # memory only: no collective is priced

    m = ctx.q("micro_batches", "")
    frac = (d - 1) / d
    volume = {
        0: 2 * frac * G,
        1: frac * (G + W),
        2: m * frac * G + frac * W,
        3: m * frac * (2 * W + G),
    }[stage]
    ctx.define("transfer_volume", volume, "GB", "bytes each GPU sends (and receives) per step",
               headline=True, references=("Book ch. 10 §10.3.3 (ZeRO communication volume)",))

    bw = b.ref("link").q("bandwidth", "B/s", positive=True)
    nic = b.ref("nic")
    if nic is not None:
        # the ring crosses the hosts' NICs only when the group spans more than one host
        bw = sp.Piecewise((bw, ctx.param("gpus") <= ctx.param("gpus_per_host")),
                          (sp.Min(bw, b.q("nics_per_host") * nic.q("bandwidth", "B/s", positive=True)), True))
    bw = ctx.define("link_bandwidth", bw, "GB/s", "bandwidth of the narrowest cut the ring crosses")
    t = ctx.define("transfer_time", ctx.q("transfer_volume", "B") / bw, "s",
                   "link time of the step's collectives", headline=True, rank=7)
    ctx.define("transfer_per_microbatch", t / m, "s", "link time of one micro-batch's collectives")

    N = ctx.ref("model").q("params", "param")
    emb = ctx.ref("model").q("embedding_params", "param")
    if stage == 3:
        head = frac * W * emb / N / bw       # first AllGather of the embedding
        tail = frac * G * emb / N / bw       # last ReduceScatter of its gradient
    else:
        head = sp.Integer(0)
        tail = (2 if stage == 0 else 1) * frac * G * emb / N / bw
    if stage in (1, 2):
        head = frac * W * emb / N / bw       # AllGather of the updated embedding, first in forward
    ctx.define("comm_head", head, "s", "unhidden collective before the first compute")
    ctx.define("comm_tail", tail, "s", "unhidden collective after the last compute")
    gather = {0: 0, 1: frac * W, 2: frac * W, 3: 0}[stage] / bw
    ctx.define("gather_time", gather, "s", "link time of the per-step AllGather of updated weights (stages 1–2)")


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("zero")
    if b is None:
        return
    if b.value("link") is None:
        return
    tl = ctx.timeline("step")
    stage, prefetch = int(b.value("stage")), bool(b.value("prefetch"))
    head, tail, t = ctx.q("comm_head"), ctx.q("comm_tail"), ctx.q("transfer_time")
    last = "allreduce_last" if stage == 0 else "reducescatter_last"
    if stage > 0:
        tl.add("allgather_first", head, "link", after=["input_wait"], before=["compute"],
               doc="first AllGather (word embedding), nothing to hide it behind", kind="comm")
    start = "allgather_first" if stage > 0 else "input_wait"
    if not prefetch:
        tl.add("transfer", t - head - tail, "link", after=["compute"], doc="collectives after compute (no prefetch)", kind="comm")
        tl.add(last, tail, "link", after=["transfer"], doc="last collective (word embedding gradient)", kind="comm")
        return
    if stage == 3:
        tl.add("transfer", t - head - tail, "link", after=[start], doc="collectives overlapped with compute", kind="comm")
        tl.add(last, tail, "link", after=["compute", "transfer"], doc="last ReduceScatter (word embedding gradient)", kind="comm")
        return
    gather = ctx.q("gather_time")
    if stage in (1, 2):
        tl.add("param_gather", gather - head, "link", after=[start],
               doc="AllGather of the updated weights, overlapped with forward", kind="comm")
    # gradients exist only once the backward passes that produce them run
    window = (2 * ctx.q("compute_time") / 3 if stage == 2
              else 2 * ctx.q("compute_per_microbatch") / 3)
    tl.add("backward_lag", ctx.q("compute_time") - window, None, after=[start],
           doc="compute before the gradients being reduced start to appear", kind="wait")
    tl.add("grad_reduce", t - gather - tail, "link", after=["backward_lag"],
           doc="gradient reduction overlapped with the backward passes", kind="comm")
    tl.add(last, tail, "link", after=["compute", "grad_reduce"], doc="last collective (word embedding gradient)", kind="comm")


# ---------------------------------------------------------------- figure 10-16
def memory_curve(ws, plan: str, ds) -> list[float] | None:
    """``memory_per_gpu`` of ``plan`` (bytes) at each sharding degree d in ``ds``.

    The plan's own expression is evaluated with ``zero.group`` free and every other input at
    its nominal value (stage 3 with BF16/Adam: 16N/d + transient, book fig. 10-16).
    """
    import sympy as sp

    target, mem = f"{plan}.zero.group", f"{plan}.memory_per_gpu"
    if target not in ws.nodes or mem not in ws.nodes or ws.value(mem) is None:
        return None
    free = frozenset({target})
    x = sp.Dummy("d")
    e = ws.full_expr(mem, free).xreplace(ws.nominal_map(exclude={target}))
    e = e.xreplace({s: x for s in e.free_symbols if s.name == target})
    f = sp.lambdify(x, e, modules=["mpmath"])
    return [float(f(d)) for d in ds]


def _draw_shards(ws, plan, fig) -> bool:
    if "zero" not in ws.decls[plan].uses or "memory" not in ws.decls[plan].uses:
        return False
    d0 = int(round(float(ws.value(f"{plan}.zero.group"))))
    ds = list(range(1, max(32, 2 * d0) + 1))
    ys = memory_curve(ws, plan, ds)
    if ys is None:
        return False
    gib = 2.0 ** 30
    usable = float(ws.value(f"{plan}.usable_memory")) / gib
    stage = int(ws.python_value(f"{plan}.zero.stage"))
    ax = fig.subplots()
    fig.set_size_inches(7, 4)
    ys_g = [y / gib for y in ys]
    ax.plot(ds, ys_g, "o-", ms=3, label=f"memory per GPU, ZeRO-{stage}")
    ax.axhline(usable, color="#C44E52", lw=1, label=f"usable {usable:.3g} GiB")
    fits = [d for d, y in zip(ds, ys_g) if y <= usable]
    if fits:
        ax.axvline(fits[0], color="#55A868", lw=0.8, ls="--", label=f"smallest d that fits: {fits[0]}")
    ax.plot([d0], [ys_g[d0 - 1]], "s", color="black", ms=5, label=f"this plan: d = {d0}")
    ax.set_xlabel("sharding degree d (GPUs)")
    ax.set_ylabel("GiB per GPU")
    ax.set_ylim(0, min(max(ys_g), 4 * usable) * 1.05)
    ax.set_title(f"{plan}: memory per GPU against the budget", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


@hookimpl
def plan_figures_register():
    from dsl.plugin import FigureSpec
    return [FigureSpec("memory-shards", "Memory per GPU over the sharding degree", _draw_shards,
                       "memory_per_gpu as a function of zero.group against usable memory",
                       references=("Book ch. 10 §10.2.1, fig. 10-16",))]

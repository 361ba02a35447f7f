"""Asynchronous checkpoints as an event model (book §10.4.3, figures 10-32 to 10-34).

``use async_checkpoint { interval = 20 s; snapshots = 2; size = 112 GB; copy = 0.5 s;
upload_bw = 7 GB/s; failure_at = 50 s }``

Snapshot k (k = 1 … ``snapshots``) is requested at t_k = k·interval.  On the ``checkpoint``
timeline each one is four activities::

    capture_k (gpu, release t_k) → copy_k (gpu: training pauses) → upload_k (storage)
                                                                  → commit_k (metadata)

Work on one resource runs in order, so when uploads take longer than the interval they queue
on ``storage`` and every later commit slips — the ever-growing write queue of §10.4.3.  A
snapshot is recoverable only once its commit has finished: ``commit_time_k`` is the exact
(max-plus) finish time of ``commit_k`` from the engine, and a failure at ``failure_at``
recovers the latest snapshot committed by then::

    recovery_point = interval · #{k : commit_time_k ≤ failure_at}   (commits land in order)
    rework         = failure_at − recovery_point

112 GB at 7 GB/s: commits at 36.5 s and 56.5 s, a failure at 50 s redoes 30 s; at 20 GB/s:
26.1 s and 46.1 s, it redoes 10 s; training pauses 2 × 0.5 s = 1 s in both.

Write-queue stability: ``write_demand`` = size/interval must not exceed ``upload_bw``
(requirement ``write_queue_stable``); the shortest stable interval is
``solve P.async_checkpoint.interval for P.write_demand == P.async_checkpoint.upload_bw``
(16 s for 112 GB at 7 GB/s).  ``save_return`` (the save call returns: capture + copy) and
``commit_latency`` (request → commit of the first snapshot) are the two separately observable
events of footnote 19 (≈7 ms and ≈48 ms on CPU).
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import FigureSpec, Param, UseSpec

MAX_SNAPSHOTS = 200

SPEC = UseSpec(
    "async_checkpoint",
    "asynchronous checkpoints: capture, copy to a buffer, background upload, commit (event model)",
    references=("asynchronous checkpoints: a snapshot copied to a buffer and written in the background while "
                "training continues (Mohan et al. 2021, 'CheckFreq: Frequent, Fine-Grained DNN Checkpointing')",),
    params=(
        Param("interval", "s", None, "time between two snapshot requests", min=0, min_open=True),
        Param("snapshots", "", "2", "snapshots requested (at interval, 2·interval, …)", kind="int", min=1,
              max=MAX_SNAPSHOTS),
        Param("size", "B", None, "bytes of one snapshot (default: checkpoint_size of `use checkpoint`)",
              min=0, min_open=True, optional=True),
        Param("capture", "s", "0 s", "reaching a consistent state (training paused)", min=0),
        Param("copy", "s", None, "copy of the state to the host buffer (training paused)", min=0),
        Param("upload_bw", "B/s", None, "bandwidth of the background upload to storage", min=0, min_open=True),
        Param("upload", "s", None, "duration of one upload (default: size / upload_bw)", min=0, optional=True),
        Param("commit", "s", "0 s", "metadata commit after the upload (makes the snapshot recoverable)", min=0),
        Param("failure_at", "s", None, "time of a failure, for the recovery point and the rework",
              min=0, optional=True),
    ),
    order=41,
    provides=("upload_time", "write_demand", "training_pause", "save_return", "commit_latency", "queue_delay",
              "recovery_point", "rework"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


def _upload(ctx, b):
    if b.given("upload"):
        return b.q("upload")
    size = b.q("size") if b.given("size") else ctx.q("checkpoint_size", "B")
    return size / b.q("upload_bw")


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("async_checkpoint")
    if b is None:
        return
    n = int(b.value("snapshots"))
    tau = b.q("interval")
    size = b.q("size") if b.given("size") else ctx.q("checkpoint_size", "B")
    up = ctx.define("upload_time", _upload(ctx, b), "s", "background upload of one snapshot")
    demand = ctx.define("write_demand", size / tau, "GB/s", "bytes to upload per second: size / interval")
    ctx.require("write_queue_stable", demand, "<=", b.q("upload_bw"), "GB/s",
                "uploads keep up with snapshots (otherwise the write queue grows without bound)")
    pause = b.q("capture") + b.q("copy")
    ctx.define("training_pause", n * pause, "s", "training paused for capture and copy, all snapshots",
               headline=True)
    ctx.define("save_return", pause, "s", "the save call returns: capture + copy (training resumes)")
    c1 = ctx.q("commit_time_1", "s")
    ctx.define("commit_latency", c1 - tau, "s", "request → commit of the first snapshot")
    cn = ctx.q(f"commit_time_{n}", "s")
    ctx.define("queue_delay", cn - (n * tau + pause + up + b.q("commit")), "s",
               "time the last snapshot waited for earlier uploads (grows with every snapshot when unstable)")
    if b.given("failure_at"):
        tf = b.q("failure_at")
        # commits finish in request order (each follows its upload; uploads run in order), so the
        # latest committed snapshot is the m-th, m = number of commits by the failure
        m = sp.Add(*[sp.Piecewise((1, ctx.q(f"commit_time_{k}", "s") <= tf), (0, True)) for k in range(1, n + 1)])
        rp = ctx.define("recovery_point", m * tau, "s",
                        "training time of the latest snapshot committed before the failure", headline=True)
        ctx.define("rework", tf - rp, "s", "work redone after the failure: failure_at − recovery_point",
                   headline=True)


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("async_checkpoint")
    if b is None:
        return
    n = int(b.value("snapshots"))
    tau = b.q("interval")
    up = ctx.q("upload_time", "s")
    tl = ctx.timeline("checkpoint")
    for k in range(1, n + 1):
        tl.add(f"capture_{k}", b.q("capture"), "gpu", release=k * tau, kind="save", lane="gpu (paused)",
               label=f"{k}", doc=f"snapshot {k}: consistent state")
        tl.add(f"copy_{k}", b.q("copy"), "gpu", after=[f"capture_{k}"], kind="io", lane="gpu (paused)",
               label=f"{k}", doc=f"snapshot {k}: copy to the host buffer")
        tl.add(f"upload_{k}", up, "storage", after=[f"copy_{k}"], kind="transfer", lane="storage",
               label=f"{k}", doc=f"snapshot {k}: background upload")
        tl.add(f"commit_{k}", b.q("commit"), None, after=[f"upload_{k}"], kind="save", lane="commit",
               label=f"{k}", doc=f"snapshot {k}: metadata commit (recoverable from here)")
        tl.finish_quantity(f"commit_time_{k}", f"commit_{k}", "s", f"snapshot {k} is committed (recoverable)",
                           headline=k <= 2)
    tl.makespan_quantity("last_commit", "s", "all snapshots committed", headline=False)


def _draw(ws, plan, fig) -> bool:
    """Figures 10-33/10-34: copies, uploads and commits; the failure as a dashed line."""
    from dsl.plugin import gantt

    tl = ws.timelines.get((plan, "checkpoint"))
    if tl is None or tl.schedule is None or "async_checkpoint" not in ws.decls[plan].uses:
        return False
    fig.set_size_inches(8, 2.6)
    ax = fig.subplots()
    gantt(ax, tl, unit="s", title=f"{plan}: asynchronous checkpoints", lanes=["gpu (paused)", "storage", "commit"])
    sc, idx = tl.schedule, tl.schedule.index()
    rows = ["gpu (paused)", "storage", "commit"]
    for a in tl.activities:
        if a.startswith("commit_"):
            ax.plot([sc.finish[idx[a]]], [rows.index("commit")], marker="o", mfc="white", mec="black", ms=6,
                    zorder=5)
    nid = f"{plan}.async_checkpoint.failure_at"
    if nid in ws.nodes and ws.base_value(nid) is not None:
        tf = float(ws.base_value(nid))
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, max(hi, 1.05 * tf))
        ax.axvline(tf, color="#C44E52", ls="--", lw=1)
        rp = float(ws.base_value(f"{plan}.recovery_point"))
        ax.text(tf, 0.98, f" failure at {tf:g} s: back to {rp:g} s, redo {tf - rp:g} s", fontsize=8,
                color="#C44E52", va="top", ha="right",
                transform=ax.get_xaxis_transform())
    fig.tight_layout()
    return True


@hookimpl
def plan_figures_register():
    return [FigureSpec("checkpoint-async", "Asynchronous checkpoints: copy, upload, commit",
                       _draw, "background uploads queue on the storage; a snapshot counts only once committed",
                       references=("asynchronous checkpoints: snapshot, write queue and commit times",))]

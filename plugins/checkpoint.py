"""Checkpoints and failures: the first-order overhead model of synchronous saves.

``use checkpoint { interval = 1800 s; write_bw = 7 GB/s; restart = 120 s;
device_mtbf = 1024 * 7.9 h }``

Book §10.4.4.  A save takes c = size / write bandwidth; between saves τ seconds of useful
training run; the job fails at rate λ = p / MTBF_device (any GPU's failure stops the job) and
a restart costs r.  Overhead per unit of useful training time::

    L(τ) = c/τ + λτ/2 + λr,       τ* = sqrt(2c/λ)

The checkpoint holds what resuming needs (§10.4.2): weights, master weights and optimizer
moments — 2 + 4 + 8 = 14 B/param for BF16/FP32/Adam, 114.67 GB for Qwen3-8B — taken from the
``memory`` block's formats (gradients are not saved).  ``size`` overrides it.
Qwen3-8B at 7 GB/s: c ≈ 16.4 s; 1,024 GPUs failing every 7.9 h give τ* ≈ 965 s; at
τ = 1800 s, 32 GPUs → L ≈ 1.02 %, 48 GPUs → L ≈ 1.08 %.
"""
from __future__ import annotations

import sympy as sp

from dsl.hookspecs import hookimpl
from dsl.plugins import Param, UseSpec

SPEC = UseSpec(
    "checkpoint",
    "synchronous checkpoints, failures and restarts: overhead per unit of training time",
    params=(
        Param("interval", "s", None, "useful training time between two saves", min=0, min_open=True),
        Param("write_bw", "B/s", None, "bandwidth of the checkpoint write", min=0, min_open=True),
        Param("restart", "s", "0 s", "time to detect a failure, restart and reload", min=0),
        Param("device_mtbf", "s", None, "mean time between failures of one GPU", min=0, min_open=True),
        Param("size", "B", None, "checkpoint size (default: weights + master + optimizer state)",
              min=0, optional=True),
    ),
    plan_params=(Param("gpus", "", doc="number of GPUs", min=1, whole=True),),
    order=40,
    provides=("checkpoint_size", "save_time", "failure_rate", "job_mtbf", "save_overhead", "rework_overhead",
              "restart_overhead", "overhead", "optimal_interval"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("checkpoint")
    if b is None:
        return
    if b.given("size"):
        size = b.q("size")
    else:
        size = sum(ctx.q(f"{k}_memory", "B") for k in ("weights", "master", "optimizer"))
    size = ctx.define("checkpoint_size", size, "GB", "bytes of one resumable checkpoint (§10.4.2)",
                      headline=True)
    c = ctx.define("save_time", size / b.q("write_bw"), "s", "duration of one synchronous save c")
    lam = ctx.define("failure_rate", ctx.param("gpus") / b.q("device_mtbf"), "s^-1",
                     "job interruptions per second λ = p / MTBF_device")
    ctx.define("job_mtbf", 1 / lam, "h", "mean time between job interruptions", headline=True)
    tau, r = b.q("interval"), b.q("restart")
    parts = [ctx.define("save_overhead", c / tau, "%", "c/τ: time spent saving"),
             ctx.define("rework_overhead", lam * tau / 2, "%", "λτ/2: work redone after failures"),
             ctx.define("restart_overhead", lam * r, "%", "λr: time spent restarting")]
    ctx.define("overhead", sum(parts), "%", "L(τ) = c/τ + λτ/2 + λr per unit of training time (§10.4.4)",
               headline=True, rank=11)
    ctx.define("optimal_interval", sp.sqrt(2 * c / lam), "s", "τ* = sqrt(2c/λ)")

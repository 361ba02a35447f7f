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

Other job-wide rollbacks (§10.4.5), ``use rollbacks { spike_interval = 7 day }``: a loss spike
every ``spike_interval`` and an outage every ``outage_interval`` are handled like a failure, so with Λ = λ_hw + λ_spike + λ_outage::

    L(τ) = c/τ + Λ(τ/2 + r),      τ* = sqrt(2c/Λ)

(48 GPUs, a rollback every 7 days: τ* 4,458 → 3,150 s; at τ = 1800 s L 1.08 % → 1.25 %).
``overhead_slope`` = dL/dτ; ``solve P.checkpoint.interval for P.overhead_slope == 0`` gives τ*.

Poisson retry model (footnote 20): a segment of τ + c seconds is retried until it runs
without a failure, each failure costing r; its expected wall time is (1/Λ + r)(e^{Λ(τ+c)} − 1),
so ``retry_overhead`` = (1/Λ + r)(e^{Λ(τ+c)} − 1)/τ − 1.  Setting its derivative to zero gives
(1 − Λτ)e^{Λτ} = e^{−Λc}, solved exactly by the Lambert W function::

    retry_optimal_interval = (1 + W₀(−e^{−(1+Λc)})) / Λ       (≈954.40 s for 1,024 GPUs)

(for small Λc it tends to sqrt(2c/Λ)).  It is a closed form rather than a ``solve`` query:
sympy's ``solve`` does not return on this mixed exponential-polynomial equation.

Write stream (§10.4.1, exercise 10-5): ``checkpoint_stream`` = size/τ (≈64 MB/s at 1,800 s)
must not exceed ``write_bw`` (``use async_checkpoint`` has the requirement); the shortest interval
without a write queue is ``solve P.checkpoint.interval for P.checkpoint_stream == P.checkpoint.write_bw``.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

SPEC = UseSpec(
    "checkpoint",
    "synchronous checkpoints, failures and restarts: overhead per unit of training time",
    references=("checkpoint interval and overhead: c/τ + Λ(τ/2 + r), optimum τ* = sqrt(2c/Λ)",
                "Young 1974, 'A first order approximation to the optimum checkpoint interval'"),
    params=(
        Param("interval", "s", None, "useful training time between two saves", min=0, min_open=True),
        Param("write_bw", "B/s", None, "bandwidth of the checkpoint write", min=0, min_open=True),
        Param("restart", "s", "0 s", "time to detect a failure, restart and reload", min=0),
        Param("device_mtbf", "s", None, "mean time between failures of one GPU", min=0, min_open=True),
        Param("size", "B", None, "checkpoint size (default: weights + master + optimizer state)",
              min=0, optional=True),
        Param("failures", kind="choice", choices=("expected", "sampled"), default='"expected"',
              doc="the overhead at its expected value (first order), or sampled as events over the whole run "
              "by `plan eval --samples` (its expected value the Poisson retry model's; needs a training step)"),
    ),
    plan_params=(Param("gpus", "", doc="number of GPUs", min=1, whole=True),),
    order=40,
    provides=("checkpoint_size", "save_time", "failure_rate", "interruption_rate",
              "job_mtbf", "save_overhead", "rework_overhead", "restart_overhead", "overhead", "optimal_interval",
              "overhead_slope", "retry_overhead", "retry_optimal_interval", "rollback_cost", "checkpoint_stream"),
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
    size = ctx.define("checkpoint_size", size, "GB", "bytes of one resumable checkpoint",
                      headline=True, references=("what a checkpoint holds: weights, master weights and optimizer "
                                                 "state",))
    c = ctx.define("save_time", size / b.q("write_bw"), "s", "duration of one synchronous save c")
    lam_hw = ctx.define("failure_rate", ctx.param("gpus") / b.q("device_mtbf"), "s^-1",
                        "device failures per second λ_hw = p / MTBF_device")
    lam = lam_hw
    if ctx.provided("rollback_rate"):           # use rollbacks: loss spikes, outages (§10.4.5)
        lam = lam + ctx.q("rollback_rate", "s^-1")
    lam = ctx.define("interruption_rate", lam, "s^-1",
                     "Λ = λ_hw + λ_spike + λ_outage: all rollbacks per second (λ_hw without `use rollbacks`)")
    ctx.define("job_mtbf", 1 / lam, "h", "mean time between job interruptions", headline=True)
    tau, r = b.q("interval"), b.q("restart")
    parts = [ctx.define("save_overhead", c / tau, "%", "c/τ: time spent saving"),
             ctx.define("rework_overhead", lam * tau / 2, "%", "Λτ/2: work redone after failures and rollbacks"),
             ctx.define("restart_overhead", lam * r, "%", "Λr: time spent restarting")]
    if b.value("failures") == "sampled":
        _sampled_overhead(ctx, b, c, tau, r, lam)
    else:
        ctx.define("overhead", sum(parts), "%", "L(τ) = c/τ + Λ(τ/2 + r) per unit of training time",
                   headline=True, rank=11,
                   references=("checkpoint overhead per unit of training time: c/τ + Λ(τ/2 + r)",
                               "other job-wide rollbacks: loss spikes and outages add to the failure rate"))
    ctx.define("overhead_slope", -c / tau**2 + lam / 2, "s^-1", "dL/dτ = −c/τ² + Λ/2 (zero at τ*)")
    ctx.define("optimal_interval", sp.sqrt(2 * c / lam), "s", "τ* = sqrt(2c/Λ)",
               references=("Young 1974, 'A first order approximation to the optimum checkpoint interval'",))
    retry = (1 / lam + r) * (sp.exp(lam * (tau + c)) - 1) / tau - 1
    ctx.define("retry_overhead", retry, "%",
               "Poisson retry model: (1/Λ + r)(e^{Λ(τ+c)} − 1)/τ − 1, failures during saves included",
               references=("Poisson retry model: failures during saves and restarts included, (1/Λ + r)(e^{Λ(τ+c)} − "
                           "1)/τ − 1",))
    # d/dτ of (e^{Λ(τ+c)} − 1)/τ = 0  ⇔  (1 − Λτ)e^{Λτ} = e^{−Λc}  ⇔  τ = (1 + W₀(−e^{−(1+Λc)}))/Λ
    ctx.define("retry_optimal_interval", (1 + sp.LambertW(-sp.exp(-(1 + lam * c)))) / lam, "s",
               "optimum of the Poisson retry model: (1 + W₀(−e^{−(1+Λc)}))/Λ",
               references=("Poisson retry model: failures during saves and restarts included, (1/Λ + r)(e^{Λ(τ+c)} − "
                           "1)/τ − 1",))
    ctx.define("rollback_cost", tau / 2 + r, "s", "expected cost of one rollback: τ/2 lost work + r restart")
    ctx.define("checkpoint_stream", size / tau, "MB/s",
               "average write stream size/τ; a write queue grows when it exceeds write_bw",
               references=("checkpoint write stream: checkpoint size / interval",))


def _sampled_overhead(ctx, b, c, tau, r, lam) -> None:
    """``overhead`` as a random quantity: the interruptions of the whole run as events
    (:mod:`plugins.reliability.failure_events`), its expected value K[(1/Λ + r)(e^{Λ(τ+c)} − 1) −
    τ]/W over the run's useful time W = steps × step time, K = ⌈W/τ⌉ intervals."""
    from dsl.plugin import ceiling_of
    from plugins.reliability.failure_events import sample_overhead
    if not (ctx.provided("steps") and ctx.provided("step_time")):
        b.error_at("failures", f"failures = \"sampled\" needs the run's length, but plan '{ctx.name}' prices no "
                   "training step (steps and step_time)", "give the plan a model, a workload with tokens and a "
                   "layout, or keep failures = \"expected\"", code="missing-parameter")
        return
    W = ctx.q("steps", "") * ctx.q("step_time", "s")
    K = ceiling_of(W / tau)
    expected = K * ((1 / lam + r) * (sp.exp(lam * (tau + c)) - 1) - tau) / W
    refs = ("Poisson retry model: failures during saves and restarts included, (1/Λ + r)(e^{Λ(τ+c)} − 1)/τ − 1",
            "Daly 2006, 'A higher order estimate of the optimum checkpoint interval for restart dumps'")
    ctx.define_random("overhead", expected, sample_overhead, (W, tau, c, r, lam), "%",
                      "lost time over useful time, the interruptions of the whole run as events: expected "
                      "K[(1/Λ + r)(e^{Λ(τ+c)} − 1) − τ]/W, sampled by `plan eval --samples`",
                      headline=True, rank=11, references=refs)


def _draw_cost(ws, plan, fig) -> bool:
    """Book figure 10-35: save share c/τ, rework share Λτ/2 and the total L(τ) (with the
    restart share Λr) against the interval τ; τ* and the plan's interval marked."""
    if "checkpoint" not in ws.decls[plan].uses:
        return False
    import math

    def val(name):
        v = ws.base_value(f"{plan}.{name}")
        return None if v is None else float(v)

    c, tau0 = val("save_time"), val("checkpoint.interval")
    lam = val("interruption_rate") if f"{plan}.interruption_rate" in ws.nodes else val("failure_rate")
    r = val("checkpoint.restart")
    if None in (c, tau0, lam, r) or lam <= 0:
        return False
    star = math.sqrt(2 * c / lam)
    hi = max(4 * star, 1.2 * tau0)
    taus = [hi * (i + 1) / 400 for i in range(400)]
    taus = [t for t in taus if t >= star / 8]
    ax = fig.subplots()
    fig.set_size_inches(7, 3.6)
    ax.plot(taus, [100 * c / t for t in taus], label="save c/τ", color="#4C72B0")
    ax.plot(taus, [100 * lam * t / 2 for t in taus], label="rework Λτ/2", color="#DD8452")
    ax.plot(taus, [100 * (c / t + lam * t / 2 + lam * r) for t in taus], label="total L(τ) (+ restart Λr)",
            color="#55A868", lw=2)
    top = 100 * (c / star + lam * star / 2 + lam * r)
    ax.axvline(star, color="grey", ls=":", lw=1)
    ax.annotate(f"τ* = {star:,.0f} s, L = {top:.2f} %", (star, top), xytext=(6, 12), textcoords="offset points",
                fontsize=8)
    ax.plot([tau0], [100 * (c / tau0 + lam * tau0 / 2 + lam * r)], marker="o", color="black", ms=4)
    ax.set_ylim(0, 3 * top)
    ax.set_xlim(0, hi)
    ax.set_xlabel("interval between saves τ (s)")
    ax.set_ylabel("overhead (% of training time)")
    ax.set_title(f"{plan}: checkpoint cost terms (first-order model)", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


@hookimpl
def plan_figures_register():
    from dsl.plugin import FigureSpec
    return [FigureSpec("checkpoint-cost", "Checkpoint cost terms against the interval", _draw_cost,
                       "c/τ, Λτ/2 and L(τ); τ* and the plan's interval marked",
                       references=("checkpoint overhead against the interval: save share c/τ, rework share Λτ/2 and "
                                   "their sum",))]

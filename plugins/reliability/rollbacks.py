"""Job-wide rollbacks besides device failures (book §10.1.2, §10.4.5, exercise 10-6).

``use rollbacks { spike_interval = 7 day; outage_interval = 1 day }``

A loss spike does not break hardware but is handled like a failure: the current parameters
are dropped and training resumes from the last checkpoint.  Treated as a whole-job event every
1/λ_spike on average (and an outage every 1/λ_outage), it adds to the device failure rate of
``use checkpoint``::

    rollback_rate = λ_spike + λ_outage
    L(τ) = c/τ + (λ_hw + λ_spike + λ_outage)(τ/2 + r),   τ* = sqrt(2c/(λ_hw + λ_spike + λ_outage))

48 GPUs with a rollback every 7 days: τ* 4,458 → 3,150 s; at τ = 600 s L 2.80 % → 2.87 %.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

SPEC = UseSpec(
    "rollbacks",
    "job-wide rollbacks besides device failures (loss spikes, outages), added to the checkpoint failure rate",
    references=("loss spikes and other job-wide rollbacks: each rolls back to the last checkpoint like a failure",
                "outages: job-wide interruptions added to the rollback rate"),
    params=(
        Param("spike_interval", "s", None, "mean time between loss-spike rollbacks of the whole job",
              min=0, min_open=True, optional=True),
        Param("outage_interval", "s", None, "mean time between job-wide outages (besides device failures)",
              min=0, min_open=True, optional=True),
    ),
    order=40,
    provides=("spike_rate", "outage_rate", "rollback_rate"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("rollbacks")
    if b is None:
        return
    if not ctx.provided("overhead_slope"):
        ctx.warn("`use rollbacks` has no effect without `use checkpoint`",
                 "add `use checkpoint { … }`, whose failure rate the rollbacks join")
    rates = []
    for p, name, doc in (("spike_interval", "spike_rate", "loss-spike rollbacks per second λ_spike"),
                         ("outage_interval", "outage_rate", "job-wide outages per second")):
        rates.append(ctx.define(name, 1 / b.q(p) if b.given(p) else sp.Integer(0), "s^-1", doc))
    ctx.define("rollback_rate", sum(rates), "s^-1", "λ_spike + λ_outage: rollbacks besides device failures")

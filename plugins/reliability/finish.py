"""Finish time against the deadline.

``use finish {}`` — reads the workload's ``deadline`` and ``reserved`` (planned stops).

First-order model (book §10.6.1)::

    T_finish = T_0 + ceil(D / b) · t_s · (1 + L)

with T_0 the reserved time, ceil(D/b) the steps, t_s the step time (compute, exposed
communication and input wait — and, with ``use stragglers``, the expected wait for the
slowest device, which that block splices into the step timeline) and L the checkpoint/failure
overhead of ``use checkpoint`` (0 without it), L(τ) = c/τ + Λ(τ/2 + r), where Λ includes
loss-spike rollbacks and outages declared with ``use rollbacks`` (§10.4.4-10.4.5).  The per-step bound that still meets the deadline (§10.6.2)::

    t_s ≤ (deadline − T_0) / (steps · (1 + L))

A plan whose ``use bands { error = "sampled" }`` models the tool's own error multiplies the
training time by ``step_time_error`` (measured / predicted step time, a random quantity of
validated runs)::

    train_time = steps · t_s · E,     T_finish = T_0 + train_time · (1 + L)

with E at its expected value in deterministic outputs and drawn per sample by ``plan eval
--samples``; with ``error = "none"`` E is 1, and without ``use bands`` it is absent: the times
are the prediction.  The step budget
stays a bound on the step time itself (E not applied).

Requirement ``deadline``: finish_time ≤ deadline.
"""
from __future__ import annotations

from dsl.plugin import hookimpl
from dsl.plugin import KindSpec, Param, UseSpec

SPEC = UseSpec(
    "finish",
    "finish time of a training job against its deadline",
    references=("first-order finish time: reserved time + steps × step time × (1 + overhead)",
                "step budget: the longest step that still meets the deadline"),
    params=(),
    plan_params=(Param("workload", kind="ref", ref_kind="workload", doc="the training workload"),),
    order=50,
    provides=("train_time", "finish_time", "deadline", "step_budget", "deadline_slack"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl
def plan_kinds_register():
    return [KindSpec("workload", "the work to do", (
        Param("deadline", "s", doc="wall-clock time available from start to finish", optional=True),
        Param("reserved", "s", doc="time reserved for launch, evaluation and planned stops", optional=True),
    ))]


def require_time_to_train(ctx, wl):
    """Requirement ``reserved_before_deadline`` (reserved < deadline) of a plan whose workload
    reserves at least its whole deadline: time reserved for launch, evaluation and planned stops
    at or beyond the deadline leaves nothing to train in, and the step budget
    (deadline − T_0)/(steps·(1 + L)) turns negative.  A failing verdict naming both numbers
    rather than an error, so that ``solve`` and sweeps over the deadline or the reserved time
    still answer (``meets_deadline`` already implies it, so, like the layout's rules for knobs at
    1, it is emitted only when it is the cause: when it fails at the nominal values).  Declared
    once per plan (several blocks read the two fields).

    :param wl: the plan's workload (:class:`DeclView`).
    """
    if not (wl.has("reserved") and wl.has("deadline")):
        return
    reserved, deadline = ctx.nominal(wl.q("reserved", "s")), ctx.nominal(wl.q("deadline", "s"))
    if reserved is None or deadline is None or reserved < deadline:
        return
    if ctx.required("reserved_before_deadline"):
        return
    ctx.require("reserved_before_deadline", wl.q("reserved", "s"), "<", wl.q("deadline", "s"), "day",
                "the reserved time (launch, evaluation, planned stops) leaves time to train before the deadline")


@hookimpl
def plan_quantities_price(ctx):
    if ctx.block("finish") is None:
        return
    wl = ctx.ref("workload")
    deadline = wl.q("deadline", "s", positive=True)
    reserved = wl.q("reserved", "s", nonnegative=True) if wl.has("reserved") else 0
    require_time_to_train(ctx, wl)
    steps, t_s = ctx.q("steps", ""), ctx.q("step_time", "s")
    L = ctx.define("overhead", 0, "%", "no checkpoint model: no overhead", fallback=True)
    train, how = steps * t_s, "steps × step time"
    if ctx.provided("step_time_error"):         # use bands: the step time's measured / predicted ratio
        train = train * ctx.define("step_time_error", 1, "", "no error model: the prediction", fallback=True)
        how = "steps × step time × step_time_error"
    base = ctx.define("train_time", train, "day", how, headline=True, rank=12,
                      references=("first-order finish time: reserved time + steps × step time × (1 + overhead)",))
    fin = ctx.define("finish_time", reserved + base * (1 + L), "day",
                     "T_0 + steps · t_s · (1 + L)", headline=True, rank=13,
                     references=("first-order finish time: reserved time + steps × step time × (1 + overhead)",))
    ctx.define("deadline", deadline, "day", "the workload's deadline")
    ctx.define("step_budget", (deadline - reserved) / (steps * (1 + L)), "s",
               "longest step that still meets the deadline", headline=True,
               references=("step budget: the longest step that still meets the deadline",))
    ctx.define("deadline_slack", deadline - fin, "day", "deadline − finish time", headline=True)
    ctx.require("meets_deadline", fin, "<=", deadline, "day", "the job finishes by the deadline")

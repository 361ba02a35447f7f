"""``use demo { gpu_hour = … }`` — the rental cost of a plan's GPUs until it finishes.

Registered through the ``plan.plugins`` entry point ``demo`` (see ../pyproject.toml),
exactly like the built-in plugins, and written against the public plugin surface only
(``dsl.plugin``).  Reads the plan's ``gpus`` and the standard ``finish_time`` of the training
step — priced by ``use finish`` on a ZeRO plan and by ``use layout`` on a layout plan — and
defines ``gpu_hours`` (GPU time rented) and ``gpu_cost`` (in the currency of ``gpu_hour``,
a core unit)::

    gpu_hours = gpus · finish_time
    gpu_cost  = gpu_hours · gpu_hour
"""
from __future__ import annotations

from dsl.plugin import Param, UseSpec, hookimpl

SPEC = UseSpec(
    "demo",
    "rental cost of the plan's GPUs until it finishes (external demo plugin)",
    params=(Param("gpu_hour", "USD/h", None, "price of one GPU for one hour", min=0),),
    plan_params=(Param("gpus", "", doc="number of GPUs", min=1),),
    order=90,
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl
def plan_quantities_price(ctx):
    block = ctx.block("demo")
    if block is None:
        return
    gpus = ctx.param("gpus")
    finish = ctx.q("finish_time", "s")
    hours = ctx.define("gpu_hours", gpus * finish, "h", "GPU time rented: gpus × finish time", headline=True)
    ctx.define("gpu_cost", hours * block.q("gpu_hour"), "USD", "gpu_hours × price of a GPU-hour", headline=True)

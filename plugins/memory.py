"""Training-state memory by format and the per-GPU memory budget.

``use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam";
moments = "fp32"; transient = 10 GiB; usable = 22 GiB }``

Bytes per parameter (book ch. 10 §10.1.2, ch. 3 example 3-3): BF16 weights 2, BF16 grads 2,
FP32 master 4, Adam moments 4 + 4 → 16 B (Qwen3-8B: 131.1 GB = 122.1 GiB); FP32 grads → 18 B
(147.433 GB).  SGD with momentum keeps one moment, plain SGD none.

Per-state quantities ``weights_memory``, ``grads_memory``, ``master_memory``,
``optimizer_memory`` (whole model, bytes) feed ``persistent_memory`` — unsharded here
(a fallback), divided by the ``zero`` block when one is used.  ``memory_per_gpu`` adds the
``transient`` budget (activations, gathered parameters, workspace that are live together,
§10.2.4); ``memory_margin`` = usable − memory_per_gpu; requirement ``fits_memory``.
"""
from __future__ import annotations

from dsl.hookspecs import hookimpl
from dsl.plugins import Param, UseSpec

FORMAT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "none": 0}
OPTIMIZER_MOMENTS = {"adam": 2, "adamw": 2, "sgd_momentum": 1, "sgd": 0}

SPEC = UseSpec(
    "memory",
    "training state per parameter by format, and the per-GPU memory budget",
    params=(
        Param("weights", default='"bf16"', kind="choice", choices=("fp32", "bf16", "fp16", "fp8"),
              doc="format of the weights used by matmuls"),
        Param("grads", default='"bf16"', kind="choice", choices=("fp32", "bf16", "fp16"),
              doc="format in which gradients are accumulated"),
        Param("master", default='"fp32"', kind="choice", choices=("fp32", "none"),
              doc="format of the master weights kept by the optimizer"),
        Param("optimizer", default='"adam"', kind="choice", choices=tuple(OPTIMIZER_MOMENTS),
              doc="optimizer family (number of moments kept)"),
        Param("moments", default='"fp32"', kind="choice", choices=("fp32", "bf16"),
              doc="format of the optimizer moments"),
        Param("transient", "B", "0 GiB", "activations, gathered parameters and workspace live together "
              "at the peak, per GPU", min=0),
        Param("usable", "B", "device.memory", "memory a GPU can give to training", min=0, min_open=True),
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the model trained"),
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
    ),
    order=10,
    provides=("weights_memory", "grads_memory", "master_memory", "optimizer_memory", "bytes_per_param",
              "state_memory", "persistent_memory", "memory_per_gpu", "usable_memory", "memory_margin"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


def bytes_per_param(block) -> dict[str, int]:
    """Bytes per parameter of each state for a ``memory`` block's formats."""
    return {
        "weights": FORMAT_BYTES[block.value("weights")],
        "grads": FORMAT_BYTES[block.value("grads")],
        "master": FORMAT_BYTES[block.value("master")],
        "optimizer": OPTIMIZER_MOMENTS[block.value("optimizer")] * FORMAT_BYTES[block.value("moments")],
    }


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("memory")
    if b is None:
        return
    N = ctx.ref("model").q("params", "param")
    bpp = bytes_per_param(b)
    parts = {k: ctx.define(f"{k}_memory", v * N, "GB", f"{k} state of the whole model ({v} B/param)")
             for k, v in bpp.items()}
    ctx.define("bytes_per_param", sum(bpp.values()), "B/param", "persistent training state per parameter")
    total = ctx.define("state_memory", sum(parts.values()), "GB",
                       "persistent training state of the whole model (§10.1.2)")
    ctx.define("persistent_memory", total, "GiB", "persistent state per GPU (no sharding)", fallback=True,
               headline=True)
    per_gpu = ctx.define("memory_per_gpu", ctx.q("persistent_memory", "B") + b.q("transient"), "GiB",
                         "peak per GPU: persistent state + transient budget (§10.2.4)", headline=True, rank=3)
    ctx.define("usable_memory", b.q("usable"), "GiB", "memory a GPU gives to training", headline=True, rank=4)
    ctx.define("memory_margin", b.q("usable") - per_gpu, "GiB", "usable − peak per GPU", headline=True, rank=5)
    ctx.require("fits_memory", per_gpu, "<=", b.q("usable"), "GiB", "the peak fits in usable memory")

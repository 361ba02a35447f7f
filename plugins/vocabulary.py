"""The standard vocabulary of ML-systems plans: declaration kinds, plan-level parameters,
the standard quantity names of each concern, and the training step's slot.

The core knows no ML word; this plugin declares them once, with their units, so that every
block (built-in or third-party) reads and writes the same names:

* kinds ``model``, ``device``, ``link``, ``storage``, ``workload`` (their fields are documented
  by the plugins that read them);
* plan parameters ``model``, ``device``, ``workload`` (declarations), ``gpus``,
  ``gpus_per_host``, ``cards`` (counts), ``mfu`` (a fraction), ``micro_batch`` (seq),
  ``input_wait`` (s);
* the training step's quantities (``step_time``, ``compute_time``, ``memory_per_gpu``,
  ``usable_memory``, ``memory_margin``, ``steps``, ``train_time``, ``overhead``,
  ``finish_time``) and requirements (``fits_memory``, ``meets_deadline``);
* the energy quantities every plan on a device with a ``power`` field gets (``power_per_gpu``,
  ``energy_per_step``, ``gpu_hours``, ``energy``, ``energy_per_token``, ``carbon``,
  ``energy_cost``, ``gpu_cost``; plugins/hardware/energy.py);
* the ``training_step`` slot: its timeline ``step`` and the anchors other plugins order
  against — ``input_wait`` (waiting for the next batch) and ``compute`` (forward, backward and
  update of every micro-batch) — implemented by the training step of ``use layout`` (and its
  aliases ``use compute`` / ``use zero``, plugins/training/layout.py).

A plugin that reads ``gpus`` as seconds, or defines ``step_time`` in bytes, is an error naming
it and this plugin.
"""
from __future__ import annotations

from dsl.plugin import KindSpec, QuantitySpec, SlotSpec, hookimpl

KINDS = (
    KindSpec("model", "a neural network architecture (fields such as layers, hidden, heads)", fixed=True),
    KindSpec("device", "an accelerator (peak_flops, memory, mem_bw …)"),
    KindSpec("link", "an interconnect (bandwidth per direction)"),
    KindSpec("storage", "a storage tier (bandwidth)"),
    KindSpec("workload", "the work to do (tokens, seq_len, global_batch, deadline …)"),
)

PARAMETERS = (
    QuantitySpec("model", doc="the model trained or served", role="parameter", kind="ref", ref_kind="model"),
    QuantitySpec("device", doc="the accelerator", role="parameter", kind="ref", ref_kind="device"),
    QuantitySpec("workload", doc="the work to do", role="parameter", kind="ref", ref_kind="workload"),
    QuantitySpec("gpus", "", "number of GPUs the plan uses", role="parameter"),
    QuantitySpec("gpus_per_host", "", "GPUs in one host (one NVLink/PCIe domain)", role="parameter"),
    QuantitySpec("cards", "", "accelerator cards serving the model", role="parameter"),
    QuantitySpec("mfu", "", "model FLOP utilisation: useful FLOP/s over peak FLOP/s", role="parameter"),
    QuantitySpec("micro_batch", "seq", "sequences per micro-batch", role="parameter"),
    QuantitySpec("input_wait", "s", "exposed wait for input data per step", role="parameter"),
)

STEP = "training_step"
STEP_QUANTITIES = (
    QuantitySpec("step_time", "s", "one optimizer step, end to end", concern=STEP),
    QuantitySpec("compute_time", "s", "forward, backward and update of one step at the plan's efficiency",
                 concern=STEP),
    QuantitySpec("memory_per_gpu", "GiB", "memory one GPU needs at the peak", concern=STEP),
    QuantitySpec("usable_memory", "GiB", "memory a GPU can give to training", concern=STEP),
    QuantitySpec("memory_margin", "GiB", "usable memory minus memory per GPU", concern=STEP),
    QuantitySpec("steps", "", "optimizer steps to process the workload's tokens", concern=STEP),
    QuantitySpec("train_time", "day", "steps × step time", concern=STEP),
    QuantitySpec("overhead", "%", "checkpoint, restart and rework time per unit of training time", concern=STEP),
    QuantitySpec("finish_time", "day", "calendar time until the run finishes", concern=STEP),
    QuantitySpec("fits_memory", doc="memory per GPU within usable memory", role="requirement", concern=STEP),
    QuantitySpec("meets_deadline", doc="finish time within the workload's deadline", role="requirement",
                 concern=STEP),
)

ENERGY_QUANTITIES = (
    QuantitySpec("power_per_gpu", "W", "facility power one GPU draws: board power, host share and PUE",
                 concern="energy"),
    QuantitySpec("energy_per_step", "kWh", "energy of one training step on every GPU", concern="energy"),
    QuantitySpec("gpu_hours", "h", "GPU-hours of the run, summed over GPUs", concern="energy"),
    QuantitySpec("energy", "MWh", "energy of the run: GPU-hours at the facility power per GPU", concern="energy"),
    QuantitySpec("energy_per_token", "J/token", "energy per trained or decoded token", concern="energy"),
    QuantitySpec("carbon", "t", "operational CO2-equivalent emissions of the run (location-based)",
                 concern="energy"),
    QuantitySpec("energy_cost", "USD", "electricity cost of the run", concern="energy"),
    QuantitySpec("gpu_cost", "USD", "GPU rental cost of the run", concern="energy"),
)

SLOTS = (
    SlotSpec(STEP, "one training step of a plan: its time, memory and the finish time it implies",
             quantities=tuple(q.name for q in STEP_QUANTITIES), timeline="step", anchors=("input_wait", "compute"),
             critical_path_of="step_time", implementations=("compute", "layout")),
)


@hookimpl
def plan_kinds_register():
    return list(KINDS)


@hookimpl
def plan_vocabulary_register():
    return list(PARAMETERS + STEP_QUANTITIES + ENERGY_QUANTITIES + SLOTS)

"""Hardware declarations: the documented fields of ``device``, ``link`` and ``storage``.

This plugin prices nothing; it documents the fields the other plugins (and the catalog) use, so
that a typo such as ``memroy = 94 GB`` gets an ``unknown-field`` warning with a did-you-mean
instead of being ignored.

======== ===================== ========= ========================================================================
kind     field                 unit      meaning
======== ===================== ========= ========================================================================
device   peak_flops            FLOP/s    dense BF16 tensor peak
device   memory                B         nominal memory capacity
device   mem_bw                B/s       peak memory bandwidth
device   matmul_efficiency               fraction of peak large GEMMs reach (roofline)
device   matmul_half_flops     FLOP      GEMM size at which η is half of matmul_efficiency
device   mem_efficiency                  fraction of mem_bw streaming kernels reach
device   sustained_efficiency            fraction of the GEMM curve whole training steps sustain
device   fp8_flops             FLOP/s    dense FP8 tensor peak (parts with FP8 tensor cores)
device   fp4_flops             FLOP/s    dense FP4 (NVFP4) tensor peak (parts with FP4)
device   fp8_matmul_efficiency           fraction of fp8_flops large FP8 GEMMs reach (default: matmul_efficiency)
device   fp4_matmul_efficiency           fraction of fp4_flops large FP4 GEMMs reach (default: matmul_efficiency)
device   fp8_sustained_efficiency        sustained_efficiency of the FP8 curve (default: sustained_efficiency)
device   flash2_attention_efficiency     fraction of peak_flops FlashAttention-2's causal kernel reaches (training)
device   flash3_attention_efficiency     fraction of peak_flops FlashAttention-3's causal kernel reaches (training)
device   cudnn_attention_efficiency      fraction of peak_flops cuDNN's fused causal attention reaches (training)
device   attention_backward_rate         fused attention's backward FLOP rate over its forward's (training)
device   fp4_sustained_efficiency        sustained_efficiency of the FP4 curve (default: sustained_efficiency)
device   tp_overlap_efficiency           share of 1 − 1/tp a decomposed TP overlap hides (training; default 100 %)
device   power                 W         board power at load (TDP/TBP of the datasheet): the energy quantities
device   idle_power            W         board power when idle (optional; no energy quantity reads it yet)
link     bandwidth             B/s       per direction
storage  bandwidth             B/s       sustained write (checkpoint) bandwidth
======== ===================== ========= ========================================================================
"""
from __future__ import annotations

from dsl.plugin import hookimpl
from dsl.plugin import KindSpec, Param


@hookimpl
def plan_kinds_register():
    return [
        KindSpec("device", "an accelerator", (
            Param("peak_flops", "FLOP/s", doc="dense BF16 tensor peak", optional=True, min=0, min_open=True),
            Param("memory", "B", doc="nominal memory capacity", optional=True),
            Param("mem_bw", "B/s", doc="peak memory bandwidth", optional=True, min=0, min_open=True),
            Param("matmul_efficiency", "", doc="fraction of peak_flops large matrix products reach (η_max of the "
                  "roofline step model)", optional=True, min=0, min_open=True, max=1),
            Param("matmul_half_flops", "FLOP", doc="matrix-product size F = 2·M·N·K at which the efficiency is half "
                  "of matmul_efficiency (0: every product at matmul_efficiency)", optional=True, min=0),
            Param("mem_efficiency", "", doc="fraction of mem_bw streaming (memory-bound) kernels reach",
                  optional=True, min=0, min_open=True, max=1),
            Param("sustained_efficiency", "", doc="fraction of the matrix-product rate (matmul_efficiency's curve) "
                  "the device sustains over whole training steps: clock and power limits under long GEMM streams, "
                  "kernels the step model does not list (training step only; default 100 %)",
                  optional=True, min=0, min_open=True, max=1),
            # low-precision tensor peaks: `use layout { matmul_precision = "fp8" }` runs the linear layers'
            # matrix products at fp8_flops (an error on a device that states none, such as an A100)
            Param("fp8_flops", "FLOP/s", doc="dense FP8 tensor peak (no sparsity), read by matmul_precision = "
                  "\"fp8\"; absent on parts without FP8 tensor cores", optional=True, min=0, min_open=True),
            Param("fp4_flops", "FLOP/s", doc="dense FP4 (NVFP4) tensor peak (no sparsity), read by matmul_precision = "
                  "\"fp4\"; absent on parts without FP4 tensor cores", optional=True, min=0, min_open=True),
            Param("fp8_matmul_efficiency", "", doc="fraction of fp8_flops large FP8 matrix products reach (roofline; "
                  "default: matmul_efficiency)", optional=True, min=0, min_open=True, max=1),
            Param("fp4_matmul_efficiency", "", doc="fraction of fp4_flops large FP4 matrix products reach (roofline; "
                  "default: matmul_efficiency)", optional=True, min=0, min_open=True, max=1),
            Param("fp8_sustained_efficiency", "", doc="fraction of the FP8 GEMM curve the device sustains over whole "
                  "training steps whose linear layers run in FP8 (training step only; default: "
                  "sustained_efficiency)", optional=True, min=0, min_open=True, max=1),
            Param("fp4_sustained_efficiency", "", doc="fraction of the FP4 GEMM curve the device sustains over whole "
                  "training steps whose linear layers run in FP4 (training step only; default: "
                  "sustained_efficiency)", optional=True, min=0, min_open=True, max=1),
            *(Param(f"{k}_attention_efficiency", "", doc=f"fraction of peak_flops {name}'s fused causal attention "
                    "forward reaches on long sequences (its backward: attention_backward_rate of that; training "
                    "step, roofline; default: the GEMM curve)", optional=True, min=0, min_open=True, max=1)
              for k, name in (("flash2", "FlashAttention-2"), ("flash3", "FlashAttention-3"), ("cudnn", "cuDNN"))),
            Param("attention_backward_rate", "", doc="the fused attention kernels' backward FLOP rate as a fraction "
                  "of their forward's (training step, roofline; default: 1, the forward's rate)",
                  optional=True, min=0, min_open=True, max=2),
            Param("tp_overlap_efficiency", "", doc="share of the ideal 1 − 1/tp of the TP collectives that a "
                  "decomposed TP overlap (use layout { tp_comm_overlap = \"on\" }, or a framework that turns it on) "
                  "hides on this device: the split GEMMs run below the whole one's rate and the collectives take "
                  "SMs (training step; default: 100 %)", optional=True, min=0, max=1),
            Param("weight_read_efficiency", "", doc="fraction of mem_bw a matrix product reaches when reading its "
                  "weights is the bound (serving decode; default: mem_efficiency)",
                  optional=True, min=0, min_open=True, max=1),
            Param("expert_read_efficiency", "", doc="fraction of mem_bw the fused MoE kernel reads the weights of "
                  "the experts a step hits at (serving step; default: weight_read_efficiency)",
                  optional=True, min=0, min_open=True, max=1),
            Param("max_matmul_efficiency", "", doc="measured maximum achievable matrix-product throughput as a "
                  "fraction of peak_flops (MAMF); the serving step's GEMMs reach at most this (default: "
                  "matmul_efficiency)", optional=True, min=0, min_open=True, max=1),
            Param("kv_read_efficiency", "", doc="fraction of mem_bw the serving step's decode attention reads the "
                  "KV cache at (default: mem_efficiency)", optional=True, min=0, min_open=True, max=1),
            Param("power", "W", doc="board power at load: the datasheet's thermal design (or total board) power, "
                  "which the energy quantities charge for every GPU-hour (an upper bound on the average draw)",
                  optional=True, min=0, min_open=True),
            Param("idle_power", "W", doc="board power when idle (where the vendor or a measurement states it; "
                  "documents the part, no energy quantity reads it)", optional=True, min=0),
            Param("decode_attention_call_time", "s", doc="fixed time of one layer's decode-attention call beyond "
                  "its KV read (serving step; default: 0 s)", optional=True, min=0),
        )),
        KindSpec("link", "an interconnect, bandwidth per direction", (
            Param("bandwidth", "B/s", doc="bandwidth per direction", optional=True, min=0, min_open=True),
        )),
        KindSpec("storage", "a storage tier", (
            Param("bandwidth", "B/s", doc="sustained write bandwidth", optional=True),
        )),
    ]


@hookimpl
def plan_commands_register():
    """``plan init``: a commented starter plan for a model, a catalog device and a GPU count."""
    from dsl.plugin import CommandSpec

    from plugins import starter
    return [CommandSpec("init", starter.INIT_HELP, starter.add_arguments, starter.run_command,
                        starter.INIT_DESCRIPTION)]

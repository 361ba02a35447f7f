"""Selective activation recomputation (book ch. 10 §10.2.2, exercise 10-4).

``use recompute { tokens = 128 token; activations = "fp32"; layers = 9; in_flight = 4;
policy = "selective" }``

The backward pass of Y = XW needs X for dW = XᵀdY, so every GEMM input is saved from forward
until its backward (§10.2.2).  For one micro-batch of T tokens, b bytes per element, hidden h,
FFN width f, n_q query heads and n_kv key/value heads of width d_h, the saved GEMM inputs of
one decoder layer are

    gemm_inputs_per_layer = T·b·(h + (n_q + 2·n_kv)·d_h + n_q·d_h + h + f)
        (input-norm output → q/k/v projections; Q, K, V → attention; attention output →
         o_proj; post-attention-norm output → gate/up; h = a⊙u → down projection)

Selective recomputation keeps a, u and the normalised (unweighted) inputs and rebuilds the two
weighted norm outputs [T, h] and the MLP product h = a⊙u [T, f] just before their backward:

    recomputable_per_layer = T·b·(2h + f)          Qwen3-8B, T = 128, FP32: 2 + 2 + 6 = 10 MiB
    saved_per_layer        = gemm_inputs − recomputable   (15 → 5 MiB)
    saved_per_microbatch   = layers · saved_per_layer     (9-layer stage: 135 → 45 MiB)
    recompute_saving       = in_flight · layers · recomputable   (4 micro-batches: 360 MiB)
    recompute_workspace    = T·b·max(f, h)          (6 MiB, reused layer after layer)
    recompute_multiplies   = T·(f + 2h) per layer   (the product alone: T·f ≈ 1.57 M)
    recompute_flops        = layers · recompute_multiplies   (one FLOP per multiply)

Timeline ``recompute`` (pool ``gpu``): the forward passes of ``in_flight`` micro-batches, then
their backward passes layer by layer (time axis: 1 ms per layer forward, 2 ms per layer
backward — the order of operations).  Saved inputs are held from a micro-batch's forward to the
backward of their layer; with ``selective`` the workspace lives only during one layer's
backward, so consecutive layers reuse it.  ``activation_peak`` is the pool's peak.

In a plan that prices a training step the extra FLOPs go back into the step:
``recompute_time`` = micro_batches · recompute_flops / (peak_flops · mfu), which the step
(plugins/training/layout.py) schedules as the activity ``recompute`` after ``compute``.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

from plugins.model.decoder import architecture
from plugins.training.memory import FORMAT_BYTES

TIMELINE, POOL = "recompute", "gpu"
MS = sp.Rational(1, 1000)

SPEC = UseSpec(
    "recompute",
    "selective activation recomputation: saved GEMM inputs, memory removed and extra FLOPs",
    references=("selective activation recomputation: Korthikanti et al. 2022, 'Reducing Activation Recomputation in "
                "Large Transformer Models'",
                "Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models'"),
    params=(
        Param("tokens", "token", doc="tokens in one micro-batch", min=0, min_open=True),
        Param("activations", default='"bf16"', kind="choice", choices=("fp32", "bf16", "fp16"),
              doc="format of the saved activations"),
        Param("layers", "", "model.layers", "decoder layers on this GPU (a pipeline stage)", kind="int", min=1),
        Param("in_flight", "", "1", "micro-batches whose backward has not run yet", kind="int", min=1),
        Param("policy", default='"selective"', kind="choice", choices=("none", "selective"),
              doc="none: save every GEMM input; selective: rebuild the norm outputs and the MLP product"),
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the model trained"),
    ),
    order=14,
    provides=("gemm_inputs_per_layer", "recomputable_per_layer", "saved_per_layer", "saved_per_microbatch",
              "recompute_saving", "recompute_workspace", "recompute_multiplies", "recompute_flops",
              "activation_peak", "recompute_time"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


def _widths(ctx):
    a = architecture(ctx.ref("model"))
    if any(a[k] is None for k in ("h", "f", "nq")):
        ctx.error(f"model '{ctx.ref('model').name}' lacks hidden/ffn/heads needed by `use recompute`",
                  "describe the architecture or use `model NAME from \"config.json\"`")
    return a


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("recompute")
    if b is None:
        return
    a = _widths(ctx)
    h, f, nq, nkv, dh = a["h"], a["f"], a["nq"], a["nkv"], a["dh"]
    T, bpe = b.q("tokens"), FORMAT_BYTES[b.value("activations")]
    L, m = b.q("layers"), b.q("in_flight")
    selective = b.value("policy") == "selective"
    gemm = ctx.define("gemm_inputs_per_layer", T * bpe * (h + (nq + 2 * nkv) * dh + nq * dh + h + f), "MiB",
                      "GEMM inputs saved for backward per layer and micro-batch",
                      references=("activations saved for backward: the inputs of each GEMM until its backward",))
    rec = ctx.define("recomputable_per_layer", T * bpe * (2 * h + f), "MiB",
                     "the two weighted norm outputs and the MLP product h = a⊙u, per layer")
    saved = ctx.define("saved_per_layer", gemm - rec if selective else gemm, "MiB",
                       "activations kept from forward to backward per layer and micro-batch")
    ctx.define("saved_per_microbatch", L * saved, "MiB", "activations kept per micro-batch on this GPU",
               headline=True)
    ctx.define("recompute_saving", m * L * rec if selective else sp.Integer(0), "MiB",
               "long-lived activations removed for the micro-batches waiting for backward", headline=True)
    ctx.define("recompute_workspace", T * bpe * sp.Max(f, h) if selective else sp.Integer(0), "MiB",
               "largest rebuilt tensor, live only during one layer's backward")
    mult = ctx.define("recompute_multiplies", T * (f + 2 * h) if selective else sp.Integer(0), "",
                      "multiplies to rebuild one layer's recomputed tensors for one micro-batch")
    ctx.define("recompute_flops", L * mult, "MFLOP", "extra FLOPs per micro-batch on this GPU (1 per multiply)",
               headline=True)
    if ctx.provided("step_time"):
        peak = ctx.ref("device").q("peak_flops", "FLOP/s", positive=True)
        ctx.define("recompute_time", ctx.q("micro_batches", "") * ctx.q("recompute_flops", "FLOP")
                   / (peak * ctx.param("mfu")), "s", "extra compute of the recomputation per step")


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("recompute")
    if b is None:
        return
    L, m = int(b.value("layers")), int(b.value("in_flight"))
    selective = b.value("policy") == "selective"
    from dsl.plugin import current_limits as current, limit_hint as raise_hint
    cap = current().activities
    if m * (1 + L) > cap:   # a forward per micro-batch and a backward per layer and micro-batch
        b.error_at("layers" if L >= m else "in_flight", f"in_flight × (layers + 1) = {m:,} × {L + 1:,} would "
                   f"schedule more than {cap:,} activities", raise_hint("activities"), code="limit")
        return
    saved, ws = ctx.q("saved_per_layer"), ctx.q("recompute_workspace")
    tl = ctx.timeline(TIMELINE)
    for k in range(m):
        tl.add(f"F{k}", L * MS, "gpu", kind="forward", label=f"F{k}", doc=f"forward of micro-batch {k}")
    for k in range(m):
        for layer in reversed(range(L)):
            tl.add(f"B{k}_L{layer}", 2 * MS, "gpu", kind="backward", label=f"{k}",
                   doc=f"backward of layer {layer}, micro-batch {k}")
            tl.hold(f"saved_mb{k}_L{layer}", saved, POOL, start=(f"F{k}", "start"),
                    end=(f"B{k}_L{layer}", "finish"), doc="saved GEMM inputs", kind="activation")
            if selective:
                tl.hold(f"workspace_mb{k}_L{layer}", ws, POOL, start=(f"B{k}_L{layer}", "start"),
                        end=(f"B{k}_L{layer}", "finish"), doc="rebuilt norm outputs and MLP product",
                        kind="workspace")
    tl.peak_quantity("activation_peak", POOL, "MiB", "peak of saved activations and recompute workspace",
                     headline=True)

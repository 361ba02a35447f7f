"""Training FLOPs: matrix-by-matrix FLOPs of a decoder (``use compute``), which also prices
the training step with the plan's layout — ``use compute {}`` alone is plain data
parallelism over all GPUs, the same model as ``use layout {}`` (plugins/training/layout.py).

``use compute { label_tokens = … }`` — plan-level parameters ``model``, ``workload``,
``device``, ``gpus``, ``mfu``, ``micro_batch``, ``input_wait``.

Formulas (book ch. 3 §3.4.1, §3.4.3).  One multiply-add is 2 FLOPs; a matrix product
[m,k]·[k,n] costs 2mkn forward and the same again for each of dX and dW, so backward =
2 × forward.  For one sequence of s tokens, label (LM-head) tokens s_l:

* projections: 2·s·h·(2·n_q·d_h + 2·n_kv·d_h) per layer (q, o, k, v);
* FFN: 2·s·h·f·ffn_matrices per layer;
* causal attention QKᵀ and AV over s(s+1)/2 query–key pairs: 2·2·n_q·d_h·s(s+1)/2 per layer;
* LM head: 2·h·V·s_l.

Qwen3-8B at s = 8,192: forward 143.789, backward 287.579, total 431.368 TFLOPs, of which
attention 59.381; 6·N·s = 402.591; LM head on 4,096 label tokens only: 416.074.

Mixture-of-experts and MLA models are counted the same way with the active experts (router,
k routed and k_s shared) and MLA's projections; QKᵀ over d_qk and AV over d_v per head.
``label_tokens`` changes these FLOP counts; the step time is priced with every token through
the LM head.  The formulas live in :mod:`plugins.model.flops`.

Counting conventions: ``flops = "exact"`` (the default, the count above) | ``"6nd"`` |
``"palm"`` | ``"hardware"`` | ``"megatron"`` | ``"torchtitan"`` | ``"verl"`` sets what
``flops_per_token``, ``flops_per_step``, ``flops_total`` and ``mfu_measured`` count (see
:mod:`plugins.model.flops` for each formula and its source); ``model_flops_per_token`` (exact) and
``hardware_flops_per_token`` (exact + recomputation under the layout's ``recompute``) are
always given.  ``measured_tokens_per_s`` or ``measured_step_time`` (a measured throughput)
gives ``mfu_measured`` (under the convention) and ``hfu_measured`` (hardware FLOPs).  The
step time is priced from the exact count at the plan's ``mfu`` whatever the convention.

Book provenance of the per-GPU compute time: ch. 10 §10.1.3.
"""
from __future__ import annotations

from dsl.plugin import hookimpl
from dsl.plugin import KindSpec, Param, UseSpec

from plugins.model import flops as F
from plugins.model.decoder import architecture, moe_architecture
from plugins.training.layout import STEP_PROVIDES, STEP_PROVIDES_WHEN, Knobs

SPEC = UseSpec(
    "compute",
    "training FLOPs of a decoder, and the training step under the plan's layout (plain DP by default)",
    references=("matrix-by-matrix FLOPs: 2·m·k·n per product, backward twice the forward",
                "per-GPU compute time F / (peak · MFU); model FLOPs utilization as defined by Chowdhery et al. 2022, "
                "'PaLM: Scaling Language Modeling with Pathways', Appendix B"),
    params=(
        Param("label_tokens", "token", "workload.seq_len",
              "tokens per sequence that go through the LM head (vocabulary projection)", min=0),
        Param("flops", default='"exact"', kind="choice", choices=F.CONVENTIONS,
              doc="FLOP counting convention of flops_per_token, flops_per_step, flops_total and mfu_measured"),
        Param("measured_tokens_per_s", "token/s", None, "measured training throughput of all GPUs",
              min=0, min_open=True, optional=True),
        Param("measured_step_time", "s", None, "measured time of one optimizer step", min=0, min_open=True,
              optional=True),
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the model trained"),
        Param("workload", kind="ref", ref_kind="workload", doc="the training workload"),
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
        Param("gpus", "", doc="number of GPUs", min=1, whole=True),
        Param("mfu", "", doc="single-GPU compute efficiency (fraction of peak)", min=0, min_open=True, max=1),
        Param("micro_batch", "seq", "1 seq", "sequences per micro-batch", min=0, min_open=True, whole=True),
        Param("input_wait", "s", "0 s", "exposed wait for input data per step", min=0),
        Param("gpus_per_host", "", "8", "GPUs in one host", min=1, whole=True),
    ),
    order=20,
    provides=("flops_forward", "flops_backward", "flops_per_seq", "flops_attention", "flops_6nd",
              "flops_per_token", "flops_per_step", "flops_total", "model_flops_per_token",
              "hardware_flops_per_token", "measured_throughput", "mfu_measured", "hfu_measured") + STEP_PROVIDES,
    provides_when=STEP_PROVIDES_WHEN,
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl
def plan_kinds_register():
    return [KindSpec("workload", "the work to do", (
        Param("tokens", "token", doc="useful tokens to train on", optional=True),
        Param("seq_len", "token", doc="tokens per sequence", optional=True),
        Param("global_batch", "seq", doc="sequences per optimizer step", optional=True),
    ))]


def training_flops(a, s, s_label, m=None):
    """Forward FLOPs and attention FLOPs of one sequence (sympy), from ``architecture(view)``
    (and ``moe_architecture(view)`` for MoE/MLA models): :func:`plugins.model.flops.sequence_forward`.

    :return: (forward, attention_forward) in FLOP.
    """
    return F.sequence_forward(a, s, s_label, m)


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("compute")
    if b is None:
        return
    model, wl = ctx.ref("model"), ctx.ref("workload")
    a = architecture(model)
    m = moe_architecture(model)
    moe = m["moe"] or m["mla"]
    if any(a[k] is None for k in ("L", "h", "nq", "V") + (() if moe else ("f",))):
        ctx.error(f"model '{model.name}' lacks layers/hidden/ffn/heads/vocab needed by `use compute`",
                  "describe the architecture or use `model NAME from \"config.json\"`")
    s = wl.q("seq_len", "token", positive=True)
    batch = wl.q("global_batch", "seq", positive=True)
    tokens = wl.q("tokens", "token", positive=True)
    N = model.q("params", "param")
    conv = b.value("flops")
    fwd, attn = training_flops(a, s, b.q("label_tokens"), m)

    ctx.define("flops_forward", fwd, "TFLOP", "forward matrix FLOPs of one sequence (exact count)",
               references=("forward FLOPs of a decoder: every matrix product plus causal attention, counted matrix "
                           "by matrix",))
    ctx.define("flops_backward", 2 * fwd, "TFLOP", "backward matrix FLOPs of one sequence: dX and dW (exact count)")
    per_seq = ctx.define("flops_per_seq", 3 * fwd, "TFLOP", "training matrix FLOPs of one sequence (exact count)")
    ctx.define("flops_attention", 3 * attn, "TFLOP", "causal attention QKᵀ and AV, forward + backward")
    ctx.define("flops_6nd", 6 * N * s, "TFLOP", "the 6·N·D estimate for one sequence")
    model_tok = ctx.define("model_flops_per_token", per_seq / s, "GFLOP/token",
                           "training FLOPs per token, exact count (" + F.DESCRIPTIONS["exact"] + ")",
                           references=F.REFERENCES["exact"])
    recompute = Knobs(ctx).value("recompute")
    hw_tok = ctx.define("hardware_flops_per_token", model_tok + F.recompute_forward_per_token(a, m, s, recompute),
                        "GFLOP/token", f"training FLOPs per token the GPUs execute: exact count plus "
                        f"recomputation ({recompute})", references=F.REFERENCES["hardware"])
    if conv == "exact":
        expr = model_tok
    elif conv == "hardware":
        expr = hw_tok
    else:
        expr = F.per_token(conv, a, m, s, active_params=model.q("active_params", "param"),
                           embedding_params=model.q("embedding_params", "param"))
    label = f'convention "{conv}": {F.DESCRIPTIONS[conv]}'
    per_tok = ctx.define("flops_per_token", expr, "GFLOP/token", f"training FLOPs per token, {label}",
                         references=F.REFERENCES[conv])
    step_flops = ctx.define("flops_per_step", per_tok * s * batch, "FLOP", f"training FLOPs of one step, {label}",
                            references=F.REFERENCES[conv])
    ctx.define("flops_total", step_flops * tokens / (s * batch), "FLOP", f"training FLOPs of all tokens, {label}",
               references=F.REFERENCES[conv])
    if b.given("measured_tokens_per_s") and b.given("measured_step_time"):
        b.error_at("measured_step_time", "a measured throughput is given twice: measured_tokens_per_s and "
                   "measured_step_time", "keep one of the two", code="conflict")
    if b.given("measured_tokens_per_s") or b.given("measured_step_time"):
        rate = (b.q("measured_tokens_per_s") if b.given("measured_tokens_per_s")
                else s * batch / b.q("measured_step_time"))
        rate = ctx.define("measured_throughput", rate, "token/s", "measured training throughput of all GPUs")
        dev = ctx.ref("device")
        peak, gpus = dev.q("peak_flops", "FLOP/s", positive=True), ctx.param("gpus")
        ctx.define("mfu_measured", F.utilization(per_tok, rate, gpus, peak), "%",
                   f"measured FLOP/s over the peak of all GPUs, {label}", headline=True,
                   references=F.REFERENCES[conv])
        ctx.define("hfu_measured", F.utilization(hw_tok, rate, gpus, peak), "%",
                   f"measured hardware FLOP/s (exact count + recomputation, {recompute}) over the peak of all GPUs",
                   headline=True, references=F.REFERENCES["hardware"])

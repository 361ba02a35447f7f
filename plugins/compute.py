"""Training compute: matrix-by-matrix FLOPs of a dense decoder, per-GPU compute time, and the
training step timeline.

``use compute { label_tokens = … }`` — plan-level parameters ``model``, ``workload``,
``device``, ``gpus``, ``mfu``, ``micro_batch``, ``input_wait``.

Formulas (book ch. 3 §3.4.1, §3.4.3; ch. 10 §10.1.3).  One multiply-add is 2 FLOPs; a
matrix product [m,k]·[k,n] costs 2mkn forward and the same again for each of dX and dW,
so backward = 2 × forward.  For one sequence of s tokens, label (LM-head) tokens s_l:

* projections: 2·s·h·(2·n_q·d_h + 2·n_kv·d_h) per layer (q, o, k, v);
* FFN: 2·s·h·f·ffn_matrices per layer;
* causal attention QKᵀ and AV over s(s+1)/2 query–key pairs: 2·2·n_q·d_h·s(s+1)/2 per layer;
* LM head: 2·h·V·s_l.

Qwen3-8B at s = 8,192: forward 143.789, backward 287.579, total 431.368 TFLOPs, of which
attention 59.381; 6·N·s = 402.591; LM head on 4,096 label tokens only: 416.074.

Per-GPU compute time per step (§10.1.3): t = F_step / (p · P · η) with F_step the step's
FLOPs, p GPUs, P peak FLOP/s and η the single-GPU efficiency (``mfu``).

Requirements: ``micro_batches_at_least_one`` (m ≥ 1) and ``micro_batches_whole`` (m is a whole
number: the global batch divides evenly over GPUs × micro-batch).

Timeline ``step``: ``input_wait`` then ``compute``; ``step_time`` is its makespan (other
plugins insert communication).  ``comm_wait`` = step_time − compute_time − input_wait.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import KindSpec, Param, UseSpec

from .decoder import architecture

SPEC = UseSpec(
    "compute",
    "training FLOPs of a dense decoder and per-GPU compute time of a step",
    references=("Book ch. 3 §3.4.1, §3.4.3 (matrix-by-matrix FLOPs)", "Book ch. 10 §10.1.3 (per-GPU compute time)"),
    params=(
        Param("label_tokens", "token", "workload.seq_len",
              "tokens per sequence that go through the LM head (vocabulary projection)", min=0),
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
    provides=("hosts", "tokens_per_step", "steps", "flops_forward", "flops_backward", "flops_per_seq",
              "flops_attention", "flops_6nd", "flops_per_token", "flops_per_step", "flops_total", "micro_batches",
              "compute_time", "compute_per_microbatch", "comm_wait", "step_time"),
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


def training_flops(a, s, s_label):
    """Forward FLOPs and attention FLOPs of one sequence (sympy), from ``architecture(view)``.

    :return: (forward, attention_forward) in FLOP.
    """
    L, h, f, nq, nkv, dh, V, mats = (a[k] for k in ("L", "h", "f", "nq", "nkv", "dh", "V", "mats"))
    proj = 2 * s * h * (2 * nq * dh + 2 * nkv * dh)
    ffn = 2 * s * h * f * mats
    attn = 2 * 2 * nq * dh * s * (s + 1) / 2
    head = 2 * h * V * s_label
    return L * (proj + ffn + attn) + head, L * attn


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("compute")
    if b is None:
        return
    model, wl, dev = ctx.ref("model"), ctx.ref("workload"), ctx.ref("device")
    a = architecture(model)
    if any(a[k] is None for k in ("L", "h", "f", "nq", "V")):
        ctx.error(f"model '{model.name}' lacks layers/hidden/ffn/heads/vocab needed by `use compute`",
                  "describe the architecture or use `model NAME from \"config.json\"`")
    if model.has("experts") or model.has("kv_lora_rank"):
        ctx.error(f"`use compute` counts the FLOPs of dense GQA decoders; model '{model.name}' has "
                  "mixture-of-experts or MLA layers",
                  "its per-token FLOPs are the model fields flops_per_token_forward and expert_flops_per_token",
                  code="unsupported")
    s = wl.q("seq_len", "token", positive=True)
    batch = wl.q("global_batch", "seq", positive=True)
    tokens = wl.q("tokens", "token", positive=True)
    gpus, mfu = ctx.param("gpus"), ctx.param("mfu")
    peak = dev.q("peak_flops", "FLOP/s", positive=True)
    fwd, attn = training_flops(a, s, b.q("label_tokens"))
    N = model.q("params", "param")

    # Rows of the book's summary table (§10.6.1) come first in reports, in its order.
    ctx.define("hosts", sp.ceiling(gpus / ctx.param("gpus_per_host")), "", "hosts of gpus_per_host GPUs",
               headline=True, rank=1)
    ctx.define("tokens_per_step", s * batch, "token", "useful tokens per optimizer step")
    ctx.define("steps", sp.ceiling(tokens / (s * batch)), "",
                       "optimizer steps: ceil(tokens / tokens per step)", headline=True,
               references=("Book ch. 10 §10.1.1 (steps of a run)",))
    ctx.define("flops_forward", fwd, "TFLOP", "forward matrix FLOPs of one sequence",
               references=("Book ch. 3 §3.4.3 (forward FLOPs of a decoder)",))
    ctx.define("flops_backward", 2 * fwd, "TFLOP", "backward matrix FLOPs of one sequence: dX and dW")
    per_seq = ctx.define("flops_per_seq", 3 * fwd, "TFLOP", "training matrix FLOPs of one sequence")
    ctx.define("flops_attention", 3 * attn, "TFLOP", "causal attention QKᵀ and AV, forward + backward")
    ctx.define("flops_6nd", 6 * N * s, "TFLOP", "the 6·N·D estimate for one sequence")
    ctx.define("flops_per_token", per_seq / s, "GFLOP/token", "training FLOPs per useful token")
    step_flops = ctx.define("flops_per_step", per_seq * batch, "FLOP", "training FLOPs of one step")
    ctx.define("flops_total", step_flops * tokens / (s * batch), "FLOP", "training FLOPs of all tokens")
    m = ctx.define("micro_batches", batch / (gpus * ctx.param("micro_batch")), "",
                   "micro-batches accumulated per GPU per step (data parallel over all GPUs)", headline=True, rank=2)
    if ctx.value("gpus") > 1 and not ctx.provided("transfer_time"):
        ctx.warn(f"plan '{ctx.name}' trains on several GPUs but no block prices their communication: "
                 "gradient synchronisation costs nothing in this plan",
                 "add a communication block such as `use zero { link = … }`")
    if wl.has("deadline") and not ctx.provided("finish_time"):
        ctx.warn(f"workload '{wl.name}' has a deadline but plan '{ctx.name}' does not check it",
                 "add `use finish {}`")
    ctx.require("micro_batches_at_least_one", m, ">=", 1, "", "every GPU gets at least one micro-batch per step")
    ctx.require("micro_batches_whole", m, "==", sp.floor(m), "",
                "the global batch splits into whole micro-batches on every GPU")
    t = ctx.define("compute_time", step_flops / (gpus * peak * mfu), "s",
                   "per-GPU compute time of one step: F_step / (p·P·η)", headline=True, rank=6,
                   references=("Book ch. 10 §10.1.3 (per-GPU compute time)",))
    ctx.define("compute_per_microbatch", t / m, "s", "per-GPU compute time of one micro-batch")
    ctx.define("comm_wait", ctx.q("step_time", "s") - t - ctx.param("input_wait"), "s",
               "exposed communication per step: step time − compute − input wait", headline=True, rank=8)
    ctx.define("input_wait", ctx.param("input_wait"), "s", "exposed wait for input data per step",
               headline=True, rank=9)


@hookimpl
def plan_activities_schedule(ctx):
    if ctx.block("compute") is None:
        return
    tl = ctx.timeline("step")
    tl.add("input_wait", ctx.param("input_wait"), "input", doc="waiting for the next batch",
           kind="wait")
    tl.add("compute", ctx.q("compute_time"), "gpu", after=["input_wait"],
           doc="forward and backward of all micro-batches, optimizer update", kind="compute")
    tl.makespan_quantity("step_time", "s", "one training step: longest path of the step timeline", rank=10)

"""Training FLOPs: matrix-by-matrix FLOPs of a decoder (``use compute``), which also prices
the training step with the plan's layout — ``use compute {}`` alone is plain data
parallelism over all GPUs, the same model as ``use layout {}`` (plugins/layout.py).

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

For mixture-of-experts and MLA models the per-matrix split is not listed; ``flops_per_token``
and ``flops_per_step`` come from the model's ``flops_per_token_forward`` (active experts)
plus causal attention.  ``label_tokens`` changes these FLOP counts; the step time is priced
with every token through the LM head.
"""
from __future__ import annotations


from dsl.plugin import hookimpl
from dsl.plugin import KindSpec, Param, UseSpec

from .decoder import architecture
from .layout import STEP_PROVIDES

SPEC = UseSpec(
    "compute",
    "training FLOPs of a decoder, and the training step under the plan's layout (plain DP by default)",
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
    provides=("flops_forward", "flops_backward", "flops_per_seq", "flops_attention", "flops_6nd",
              "flops_per_token", "flops_per_step", "flops_total") + STEP_PROVIDES,
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
    model, wl = ctx.ref("model"), ctx.ref("workload")
    a = architecture(model)
    moe = model.has("experts") or model.has("kv_lora_rank")
    if any(a[k] is None for k in ("L", "h", "nq", "V") + (() if moe else ("f",))):
        ctx.error(f"model '{model.name}' lacks layers/hidden/ffn/heads/vocab needed by `use compute`",
                  "describe the architecture or use `model NAME from \"config.json\"`")
    s = wl.q("seq_len", "token", positive=True)
    batch = wl.q("global_batch", "seq", positive=True)
    tokens = wl.q("tokens", "token", positive=True)
    N = model.q("params", "param")
    if moe:
        attn = 2 * 2 * a["nq"] * a["dh"] * (s + 1) / 2 * a["L"]       # per token, forward
        per_tok = ctx.define("flops_per_token", 3 * (model.q("flops_per_token_forward", "FLOP/token") + attn),
                             "GFLOP/token", "training FLOPs per token: 3 × (active matrix FLOPs + causal attention)")
        step_flops = ctx.define("flops_per_step", per_tok * s * batch, "FLOP", "training FLOPs of one step")
        ctx.define("flops_total", step_flops * tokens / (s * batch), "FLOP", "training FLOPs of all tokens")
        return
    fwd, attn = training_flops(a, s, b.q("label_tokens"))

    ctx.define("flops_forward", fwd, "TFLOP", "forward matrix FLOPs of one sequence",
               references=("Book ch. 3 §3.4.3 (forward FLOPs of a decoder)",))
    ctx.define("flops_backward", 2 * fwd, "TFLOP", "backward matrix FLOPs of one sequence: dX and dW")
    per_seq = ctx.define("flops_per_seq", 3 * fwd, "TFLOP", "training matrix FLOPs of one sequence")
    ctx.define("flops_attention", 3 * attn, "TFLOP", "causal attention QKᵀ and AV, forward + backward")
    ctx.define("flops_6nd", 6 * N * s, "TFLOP", "the 6·N·D estimate for one sequence")
    ctx.define("flops_per_token", per_seq / s, "GFLOP/token", "training FLOPs per useful token")
    step_flops = ctx.define("flops_per_step", per_seq * batch, "FLOP", "training FLOPs of one step")
    ctx.define("flops_total", step_flops * tokens / (s * batch), "FLOP", "training FLOPs of all tokens")

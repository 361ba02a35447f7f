"""Matrix FLOPs of one RL cycle: rollout (prefill + decode), reference and teacher forwards,
policy update — for generated vs kept samples — and published GPU-hour budgets against it.

``use rl_cycle { kept; keep_ratio; prompt_len; gen_len; reference; teacher_forwards; teacher }``
(plan-level ``model``: the policy).

Method (book ch. 3 §3.5.3, example 3-4, with the matrix-by-matrix count of §3.4.1/§3.4.3 used
by ``use compute``; one multiply-add = 2 FLOPs).  Per token and layer the projections cost
2·h·(2·n_q·d_h + 2·n_kv·d_h) and the FFN 2·h·f·ffn_matrices; a query attending to c keys costs
2·2·n_q·d_h·c per layer (QKᵀ and AV); the LM head 2·h·V per position whose logits are needed.
With prompt length P, G generated tokens per response, every response of equal length, no
early stop and no shared prefixes:

* **rollout prefill** (per response): a forward over the P prompt tokens, causal attention
  over P(P+1)/2 pairs, LM head on the last position only (it samples the first token);
* **rollout decode** (per response): G − 1 steps of one token each (the G-th token comes out
  of the last step); the token at position P + j attends to the P + j + 1 keys in the KV
  cache, so attention covers Σ_{j=0}^{G−2} (P + j + 1) = (G−1)·P + G(G−1)/2 pairs; LM head on
  each step's token.  Prefill + decode equal one teacher-forced forward over P + G − 1 tokens
  with G LM-head positions — the KV cache removes recomputation, not work;
* **reference forward** (per generated response, when ``reference``): the trajectory is known,
  so it runs teacher-forced over P + G − 1 = 1,279 tokens, LM head on every position;
* **teacher forwards**: ``teacher_forwards`` such forwards of the ``teacher`` model per response;
* **policy update** (per kept sample): forward + backward = 3 × the teacher-forced forward
  (backward = dX + dW = 2 × forward, §3.4.1).

Qwen3-8B, 16 kept, keep ratio 1/2 (32 generated = 8 prompts × 4), P = 1,024, G = 256:
prefill 465.143, decode 129.056, reference 634.944, teacher 0, update 952.416, total
2,181.559 TFLOPs (136.347 per kept sample).  Keep ratio 1/4 (64 generated): 3,410.701
(+56.3 %, 213.169 per kept sample).  The cycle is linear in the generated count n::

    F_cycle(n) = n·(f_g + f_r + f_t) + F_u         (flops_per_generated, update_flops)

``use rl_budget { gpu_hours; compare }`` (plan-level ``device``, ``mfu``): a published
GPU-hour budget (e.g. Qwen3 technical report, table 21: RL 17,920 vs on-policy distillation
1,800 GPU-hours for an 8B model, book §3.6) as GPU-seconds of compute at peak·mfu, and how
many modelled cycles it pays for.

Book provenance of the kept and generated samples: ch. 3 §3.5.2.
"""
from __future__ import annotations

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

from plugins.training.compute import training_flops
from plugins.model.decoder import architecture, moe_architecture

CYCLE = UseSpec(
    "rl_cycle",
    "matrix FLOPs of one RL cycle: rollout, reference/teacher forwards and the policy update",
    references=("FLOPs of an RL cycle: generation, reference and policy passes counted matrix by matrix",
                "matrix-by-matrix FLOPs: 2·m·k·n per product, backward twice the forward"),
    params=(
        Param("kept", "sample", doc="samples kept for one policy update (n_keep)", min=0, min_open=True),
        Param("keep_ratio", "", "1", "fraction of generated samples kept (a): n_generate = n_keep / a",
              min=0, min_open=True, max=1),
        Param("prompt_len", "token", doc="prompt tokens P per response", min=1),
        Param("gen_len", "token", doc="generated tokens G per response", min=1),
        Param("reference", default="true", kind="bool",
              doc="a reference model of the policy's architecture runs one forward per response"),
        Param("teacher_forwards", "", "0", "teacher forwards per generated response (on-policy distillation)",
              min=0),
        Param("teacher", kind="ref", ref_kind="model", optional=True,
              doc="the teacher model (default: the policy's architecture)"),
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the policy model"),
    ),
    order=63,
    provides=("generated", "flops_prefill_each", "flops_decode_each", "flops_reference_each",
              "flops_teacher_each", "flops_update_each", "rollout_prefill_flops", "rollout_decode_flops",
              "reference_flops", "teacher_flops", "update_flops", "flops_per_generated", "cycle_flops",
              "flops_per_kept", "update_input_tokens", "update_label_tokens"),
)

BUDGET = UseSpec(
    "rl_budget",
    "a published GPU-hour budget against the modelled RL cycle",
    references=("Qwen Team 2025, 'Qwen3 Technical Report', table 21 (RL GPU-hours)",),
    params=(
        Param("gpu_hours", "h", doc="published GPU-hours (GPU count × wall time) of the run", min=0, min_open=True),
        Param("compare", "h", doc="GPU-hours of an alternative run (e.g. on-policy distillation)", optional=True,
              min=0, min_open=True),
    ),
    plan_params=(
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
        Param("mfu", "", doc="single-GPU compute efficiency (fraction of peak)", min=0, min_open=True, max=1),
    ),
    order=64,
    provides=("cycle_gpu_time", "budget_flops", "budget_cycles", "budget_kept", "budget_ratio"),
)


@hookimpl
def plan_blocks_register():
    return [CYCLE, BUDGET]


def decode_flops(a, P, G, m=None):
    """FLOPs of the G − 1 decode steps of one response after a P-token prefill (sympy).

    Each step feeds one token: projections, FFN (the active experts of an MoE model, with
    ``m`` = :func:`plugins.model.decoder.moe_architecture`) and LM head once; the token at position
    P + j attends to P + j + 1 cached keys (j = 0 … G − 2): :func:`plugins.model.flops.decode`.
    """
    from plugins.model.flops import decode
    return decode(a, P, G, m)


def _arch(ctx, view, who):
    """(architecture, MoE/MLA architecture) of a model, with a located error when it lacks the
    fields the FLOP formulas need (an all-MoE model needs no dense ``ffn``)."""
    a, m = architecture(view), moe_architecture(view)
    need = ("L", "h", "nq", "V") + (() if m["moe"] else ("f",))
    if any(a[k] is None for k in need):
        ctx.error(f"model '{view.name}' lacks layers/hidden/ffn/heads/vocab needed by `use {who}`",
                  "describe the architecture or use `model NAME from \"config.json\"`", code="missing-field")
    return a, m


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("rl_cycle")
    if b is not None:
        _price_cycle(ctx, b)
    b = ctx.block("rl_budget")
    if b is not None:
        _price_budget(ctx, b)


def _price_cycle(ctx, b):
    pol, pol_m = _arch(ctx, ctx.ref("model"), "rl_cycle")
    teacher = b.ref("teacher")
    tea, tea_m = _arch(ctx, teacher, "rl_cycle") if teacher is not None else (pol, pol_m)
    P, G = b.q("prompt_len"), b.q("gen_len")
    S = P + G - 1                                            # teacher-forced input length
    kept = b.q("kept")
    n = ctx.define("generated", kept / b.q("keep_ratio"), "sample",
                   "responses generated per update: n_keep / keep_ratio", headline=True, rank=80,
                   references=("kept and generated samples: n_generate = n_keep / keep ratio",))
    pre = ctx.define("flops_prefill_each", training_flops(pol, P, 1, pol_m)[0], "TFLOP/sample",
                     "prefill of one prompt, LM head on its last position")
    dec = ctx.define("flops_decode_each", decode_flops(pol, P, G, pol_m), "TFLOP/sample",
                     "G − 1 decode steps of one response, attention over the growing KV cache")
    full = training_flops(pol, S, S, pol_m)[0]
    ref = ctx.define("flops_reference_each", full if b.value("reference") else 0, "TFLOP/sample",
                     "reference forward of one response, teacher-forced over P + G − 1 tokens")
    tf = ctx.define("flops_teacher_each", b.q("teacher_forwards") * training_flops(tea, S, S, tea_m)[0], "TFLOP/sample",
                    "teacher forwards of one response")
    upd = ctx.define("flops_update_each", 3 * full, "TFLOP/sample",
                     "forward + backward of one kept sample (3 × forward)",
                     references=("backward = 2 × forward (input and weight gradients): Kaplan et al. 2020, 'Scaling "
                                 "Laws for Neural Language Models'",))
    ctx.define("rollout_prefill_flops", n * pre, "TFLOP", "rollout prefill of all generated responses",
               headline=True, rank=81)
    ctx.define("rollout_decode_flops", n * dec, "TFLOP", "rollout decode of all generated responses",
               headline=True, rank=82)
    ctx.define("reference_flops", n * ref, "TFLOP", "reference forwards of all generated responses",
               headline=True, rank=83)
    ctx.define("teacher_flops", n * tf, "TFLOP", "teacher forwards of all generated responses",
               headline=True, rank=84)
    fu = ctx.define("update_flops", kept * upd, "TFLOP", "policy update on the kept samples (F_u)",
                    headline=True, rank=85)
    per = ctx.define("flops_per_generated", pre + dec + ref + tf, "TFLOP/sample",
                     "FLOPs each generated response costs before the update: f_g + f_r (+ f_t)")
    cyc = ctx.define("cycle_flops", n * per + fu, "TFLOP",
                     "one cycle: F(n) = n·(f_g + f_r + f_t) + F_u", headline=True, rank=86,
                     references=("FLOPs of an RL cycle: generation, reference and policy passes counted matrix by "
                                 "matrix",))
    ctx.define("flops_per_kept", cyc / kept, "TFLOP/sample", "cycle FLOPs per kept sample", headline=True, rank=87)
    ctx.define("update_input_tokens", kept * S, "token", "input tokens of one update: n_keep·(P + G − 1)")
    ctx.define("update_label_tokens", kept * G, "token", "supervised output tokens of one update: n_keep·G")


def _price_budget(ctx, b):
    kept = _kept(ctx)
    dev = ctx.ref("device")
    rate = dev.q("peak_flops", "FLOP/s", positive=True) * ctx.param("mfu")
    t = ctx.define("cycle_gpu_time", ctx.q("cycle_flops", "FLOP") / rate, "s",
                   "GPU-seconds of one modelled cycle at peak·mfu", headline=True, rank=90)
    hours = b.q("gpu_hours")
    ctx.define("budget_flops", hours * rate, "EFLOP", "compute the published GPU-hours deliver at peak·mfu")
    cycles = ctx.define("budget_cycles", hours / t, "", "modelled cycles the published GPU-hours pay for",
                        headline=True, rank=91)
    ctx.define("budget_kept", cycles * kept, "sample", "kept samples those cycles train on", headline=True, rank=92)
    if b.value("compare") is not None:
        ctx.define("budget_ratio", hours / b.q("compare"), "", "published GPU-hours relative to the alternative",
                   headline=True, rank=93)


def _kept(ctx):
    """Symbol of the rl_cycle block's ``kept`` parameter (the budget block needs `use rl_cycle`)."""
    c = ctx.block("rl_cycle")
    if c is None:
        ctx.error("`use rl_budget` compares a budget with the modelled cycle: it needs `use rl_cycle`",
                  "add `use rl_cycle { kept = …; prompt_len = …; gen_len = … }` to the plan",
                  code="missing-quantity")
    return c.q("kept")

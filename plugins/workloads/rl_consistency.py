"""Training–inference consistency in RL: importance ratios from recorded vs recomputed
log-probabilities, loss normalisation across answers and micro-batches, and interrupted
long trajectories (survival and the KV cache needed to resume).

``use rl_ratio { policy_logprob; old_logprob; behaviour_logprob; recomputed_logprob }``
    Book ch. 10 §10.5.3: for one token and prefix, π_θ/μ = (π_θ/π_old)·(π_old/μ).  From
    log-probabilities: ``optimisation_ratio`` = exp(log π_θ − log π_old), ``staleness_ratio`` =
    exp(log π_old − log μ), ``importance_ratio`` = exp(log π_θ − log μ).  Using a log μ
    recomputed by the trainer instead of the one recorded at sampling time gives
    ``recomputed_ratio`` = exp(log π_θ − log μ'); ``weight_inflation`` is its ratio to the true
    one: −3.25 instead of −3 inflates the sample's weight by e^0.25 ≈ 1.28.

``use rl_loss_norm { answer_tokens; token_grads; micro_batch }``
    Book ch. 10 §10.3.1 (and §3.5.2): answer i has n_i loss tokens, each contributing dℓ/dθ =
    g_i.  Token mean over the batch: Σ n_i·g_i / Σ n_i; mean of per-answer means: Σ g_i / N;
    "double division" (token mean divided again by the N answers): token mean / N; mean of
    per-micro-batch token means when answers are grouped ``micro_batch`` at a time in order.
    Four answers of 2 tokens at g = 0.2 and four of 3 tokens at g = 0.4: 0.32, 0.30, 0.04.

``use rl_resume { tokens; bytes_per_value; interrupt_rate; trajectory_time; reload_bw;
rebuild_rate }`` (plan-level ``model``)
    Book ch. 10 §10.5.3: with interruptions at rate λ a trajectory lasting t completes with
    probability e^(−λt) (``survival``).  Resuming with the same weights needs the prefix's KV:
    2 (K and V) · layers · n_kv · d_h · tokens · bytes_per_value — 1.125 GiB for Qwen3-8B at 8K
    tokens in BF16 — reloaded at ``reload_bw`` or rebuilt by a prefill (``rebuild_flops``, the
    forward of ``tokens`` with the LM head on the last position) at ``rebuild_rate``.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

from plugins.training.compute import training_flops
from plugins.model.decoder import architecture, moe_architecture

RATIO = UseSpec(
    "rl_ratio",
    "importance ratio π_θ/μ of one token from log-probabilities, recorded vs recomputed",
    references=("importance ratio of recorded and recomputed log-probabilities: π_θ/μ = (π_θ/π_old)·(π_old/μ)",),
    params=(
        Param("policy_logprob", "", doc="log π_θ of the token under the policy being optimised", max=0),
        Param("old_logprob", "", "policy_logprob", "log π_old at the start of this optimisation", max=0),
        Param("behaviour_logprob", "", doc="log μ recorded when the token was sampled", max=0),
        Param("recomputed_logprob", "", doc="log μ recomputed by the trainer (what a mistake would use)",
              optional=True, max=0),
    ),
    order=66,
    provides=("optimisation_ratio", "staleness_ratio", "importance_ratio", "recomputed_ratio", "weight_inflation"),
)

NORM = UseSpec(
    "rl_loss_norm",
    "gradient of token-mean, sample-mean and doubly divided losses over answers of different lengths",
    references=("loss normalisation over answers: per-answer mean versus token-level mean (Yu et al. 2025, 'DAPO: An "
                "Open-Source LLM Reinforcement Learning System at Scale')",),
    params=(
        Param("answer_tokens", "", kind="list", min_items=1, doc="loss tokens of each answer"),
        Param("token_grads", "", kind="list", min_items=1, doc="dℓ/dθ of each token of each answer"),
        Param("micro_batch", "", doc="answers per micro-batch, taken in order", kind="int", optional=True, min=1),
    ),
    order=67,
    provides=("answers", "loss_tokens", "token_mean_grad", "sample_mean_grad", "double_division_grad",
              "microbatch_mean_grad"),
)

RESUME = UseSpec(
    "rl_resume",
    "interrupted long trajectories: survival e^(−λt) and the KV cache needed to resume",
    references=("interrupted trajectories: a trajectory lasting t completes with probability e^{−λt}",),
    params=(
        Param("tokens", "token", doc="tokens of the trajectory prefix to resume", min=1),
        Param("bytes_per_value", "B", "2 B", "bytes per cached K or V value (2 for BF16)", min=0, min_open=True),
        Param("interrupt_rate", "s^-1", doc="interruptions per second during generation (λ)", optional=True, min=0),
        Param("trajectory_time", "s", doc="generation time of one trajectory (t)", optional=True, min=0),
        Param("reload_bw", "B/s", doc="bandwidth to reload a saved KV cache", optional=True, min=0, min_open=True),
        Param("rebuild_rate", "FLOP/s", doc="effective FLOP/s of a prefill that rebuilds the KV", optional=True,
              min=0, min_open=True),
    ),
    plan_params=(Param("model", kind="ref", ref_kind="model", doc="the policy model"),),
    order=68,
    provides=("survival", "resume_kv_bytes", "reload_time", "rebuild_flops", "rebuild_time"),
)


@hookimpl
def plan_blocks_register():
    return [RATIO, NORM, RESUME]


@hookimpl
def plan_quantities_price(ctx):
    _ratio(ctx)
    _norm(ctx)
    _resume(ctx)


def _ratio(ctx):
    b = ctx.block("rl_ratio")
    if b is None:
        return
    th, old, mu = b.q("policy_logprob"), b.q("old_logprob"), b.q("behaviour_logprob")
    ctx.define("optimisation_ratio", sp.exp(th - old), "", "π_θ/π_old: change made by this optimisation")
    ctx.define("staleness_ratio", sp.exp(old - mu), "", "π_old/μ: policy lag, sampling settings, engine differences")
    true = ctx.define("importance_ratio", sp.exp(th - mu), "", "π_θ/μ with the recorded behaviour log-probability",
                      headline=True, rank=110)
    if b.value("recomputed_logprob") is not None:
        wrong = ctx.define("recomputed_ratio", sp.exp(th - b.q("recomputed_logprob")), "",
                           "π_θ/μ' with a recomputed behaviour log-probability", headline=True, rank=111)
        ctx.define("weight_inflation", wrong / true, "", "factor by which the recomputed μ' reweights the sample",
                   headline=True, rank=112)


def _norm(ctx):
    b = ctx.block("rl_loss_norm")
    if b is None:
        return
    n, g = b.q_list("answer_tokens"), b.q_list("token_grads")
    if len(n) != len(g):
        b.error_at("token_grads", f"`token_grads` has {len(g)} items but `answer_tokens` {len(n)}",
                   "give one per-token gradient per answer")
    if any(v <= 0 for v in b.value("answer_tokens")):
        b.error_at("answer_tokens", "every answer needs at least one loss token", "drop empty answers")
    count = len(n)
    ctx.define("answers", count, "", "answers in the batch")
    tokens = ctx.define("loss_tokens", sp.Add(*n), "", "loss tokens in the batch (the token-mean denominator)")
    tm = ctx.define("token_mean_grad", sp.Add(*[a * c for a, c in zip(n, g)]) / tokens, "",
                    "dL/dθ of the token mean over the whole batch", headline=True, rank=113)
    ctx.define("sample_mean_grad", sp.Add(*g) / count, "", "dL/dθ of the mean of per-answer means",
               headline=True, rank=114)
    ctx.define("double_division_grad", tm / count, "", "token mean divided again by the number of answers",
               headline=True, rank=115)
    m = b.value("micro_batch")
    if m is not None:
        m = int(m)
        groups = [range(i, min(i + m, count)) for i in range(0, count, m)]
        means = [sp.Add(*[n[i] * g[i] for i in r]) / sp.Add(*[n[i] for i in r]) for r in groups]
        ctx.define("microbatch_mean_grad", sp.Add(*means) / len(means), "",
                   "mean of per-micro-batch token means", headline=True, rank=116)


def _resume(ctx):
    b = ctx.block("rl_resume")
    if b is None:
        return
    model = ctx.ref("model")
    a = architecture(model)
    if any(a[k] is None for k in ("L", "h", "f", "nq", "V")):
        ctx.error(f"model '{model.name}' lacks layers/hidden/ffn/heads/vocab needed by `use rl_resume`",
                  "describe the architecture or use `model NAME from \"config.json\"`", code="missing-field")
    rate, t = b.value("interrupt_rate"), b.value("trajectory_time")
    if (rate is None) != (t is None):
        b.error_at("interrupt_rate" if rate is None else "trajectory_time",
                   "survival needs both `interrupt_rate` and `trajectory_time`", "give both, or neither",
                   code="missing-parameter")
    if rate is not None:
        ctx.define("survival", sp.exp(-b.q("interrupt_rate") * b.q("trajectory_time")), "%",
                   "probability a trajectory completes without interruption: e^(−λt)", headline=True, rank=117)
    s = b.q("tokens")
    from plugins.model.llmstate import kv_bytes_per_sequence
    kv = ctx.define("resume_kv_bytes", kv_bytes_per_sequence(model, b.q("bytes_per_value"), s), "GiB",
                    "KV cache of the prefix: 2·L·n_kv·d_h·tokens·bytes", headline=True, rank=118)
    if b.value("reload_bw") is not None:
        ctx.define("reload_time", kv / b.q("reload_bw"), "s", "time to reload the saved KV", headline=True, rank=119)
    f = ctx.define("rebuild_flops", training_flops(a, s, 1, moe_architecture(model))[0], "TFLOP",
                   "prefill that rebuilds the KV: forward of the prefix, LM head on its last position")
    if b.value("rebuild_rate") is not None:
        ctx.define("rebuild_time", f / b.q("rebuild_rate"), "s", "time of that prefill", headline=True, rank=120)

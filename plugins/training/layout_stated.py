"""A stated throughput: the training step priced from a measured end-to-end rate instead of the
device (``use layout { stated_tflops = 163 TFLOP/s }`` or ``{ stated_tokens_per_s = … }``,
``efficiency = "stated"``).

A published or measured throughput already holds everything a step spends — pipeline bubbles,
exposed collectives, recomputation, the optimizer step, waits — so the step is that rate's time
and nothing of the layout is added to it a second time:

* ``stated_tokens_per_s`` R (all GPUs): step time = tokens per step / R = s·B / R;
* ``stated_tflops`` F (per GPU, as Narayanan et al. 2021 report "achieved teraFLOP/s per GPU"):
  step time = FLOPs per step / (gpus · F), the FLOPs per step counted under ``stated_flops``, one
  of the conventions of :mod:`plugins.model.flops` as the source counts them: ``"exact"`` (the
  default: 3·(forward matrix FLOPs + causal attention) per token), ``"hardware"`` (plus the
  forward the layout's recomputation repeats — Narayanan et al.'s count, which also takes all s²
  attention pairs: 1–3 % more at their sequence lengths), ``"megatron"`` (Megatron-LM's and
  NeMo's logged TFLOP/s/GPU), ``"torchtitan"``, ``"palm"``, ``"6nd"``, ``"verl"``.

The step is then one activity, ``compute``: ``compute_time`` = the stated step; recomputation,
bubble, TP/CP/EP/DP communication, imbalance, casts and the optimizer step are 0 (they are inside
the stated rate); ``steps``, ``train_time`` and ``finish_time`` follow from it as from any step.
Memory is still priced from the layout (a pipeline's activations by the closed form of the
stages' in-flight micro-batches: the schedule's event model prices time, which is stated here).

Errors: both rates stated (``conflict``), ``efficiency = "stated"`` with neither
(``missing-parameter``); a rate with ``efficiency = "mfu"`` or ``"roofline"`` is a conflict too.
"""
from __future__ import annotations

import sympy as sp

from plugins.model import flops as F
from plugins.model.decoder import architecture, moe_architecture

#: the stated rates: knob -> its unit
RATES = {"stated_tokens_per_s": "token/s", "stated_tflops": "FLOP/s"}
#: the step's time terms a stated rate already holds (set to 0 beside the stated compute)
HELD = ("cast", "recompute", "bubble", "pp", "tp", "cp", "ep", "imbalance", "optimizer", "offload")


def default_mode(efficiency, has_rate: bool, has_mfu: bool) -> str:
    """The step's compute mode: the stated ``efficiency``, else "stated" with a stated rate,
    "mfu" when the plan states `mfu`, else "roofline" — the one rule ``use layout`` and the
    prediction bands read."""
    return efficiency if efficiency is not None else "stated" if has_rate else "mfu" if has_mfu else "roofline"


def given(kn) -> list:
    """The stated-rate knobs the plan gives."""
    return [k for k in RATES if kn.value(k) is not None]


def check(ctx, kn, mode: str) -> None:
    """Located errors for a stated rate that contradicts ``efficiency`` or is given twice."""
    g = given(kn)
    if len(g) > 1:
        kn.error_at(g[1], f"plan '{ctx.name}' states its throughput twice: {g[0]} and {g[1]}",
                    "keep one of the two", code="conflict")
    if mode == "stated" and not g:
        kn.error_at("efficiency", f"efficiency = \"stated\" prices the step of '{ctx.name}' from a stated "
                    "throughput, which the plan does not give",
                    "add stated_tokens_per_s = … (all GPUs) or stated_tflops = … (per GPU) to `use layout`",
                    code="missing-parameter")
    if kn.lay is not None and kn.given("stated_flops") and kn.value("stated_tflops") is None:
        kn.lay.warn_at("stated_flops", "stated_flops counts the FLOPs of stated_tflops, which the plan does not give",
                       "drop stated_flops, or state the per-GPU rate with stated_tflops", code="unused")
    if kn.value("stated_tflops") is not None:
        dev = ctx.ref("device")
        peaks = [dev.q(f, "FLOP/s", positive=True) for f in ("peak_flops", "fp8_flops", "fp4_flops") if dev.has(f)]
        rate = ctx.nominal(kn.q("stated_tflops"))
        top = max(float(ctx.nominal(x)) for x in peaks) if peaks else None
        if top is not None and rate is not None and float(rate) > top:
            kn.lay.warn_at("stated_tflops", f"stated_tflops = {float(rate) / 1e12:g} TFLOP/s is above the dense peak of "
                           f"one '{dev.name}' ({top / 1e12:g} TFLOP/s): the step would be faster than the GPU can "
                           "compute", "state the rate of one GPU (a cluster's TFLOP/s divided by its GPUs)",
                           code="out-of-range")
    if mode != "stated" and g:
        kn.error_at(g[0], f"{g[0]} states the throughput of '{ctx.name}', but efficiency = \"{mode}\" prices "
                    "its step from the device", 'set efficiency = "stated" (or leave efficiency out), or drop '
                    f"{g[0]}", code="conflict")


def step_time(ctx, kn, K, tokens_per_step, exact_flops_per_step):
    """The stated step time (s, sympy): tokens per step / tokens/s, or FLOPs per step / (gpus ·
    TFLOP/s per GPU) with the FLOPs counted under ``stated_flops`` (see the module docstring)."""
    if kn.value("stated_tokens_per_s") is not None:
        return tokens_per_step / kn.q("stated_tokens_per_s")
    conv = kn.value("stated_flops")
    if conv == "exact":
        flops = exact_flops_per_step
    else:
        model = ctx.ref("model")
        per_tok = F.per_token(conv, architecture(model), moe_architecture(model), K["s"],
                              active_params=model.q("active_params", "param"),
                              embedding_params=model.q("embedding_params", "param"), recompute=kn.value("recompute"))
        flops = per_tok * tokens_per_step
    return flops / (K["gpus"] * kn.q("stated_tflops"))


def apply(r: dict, step) -> dict:
    """The step terms of :func:`plugins.training.layout_model.evaluate` with the stated ``step``
    as the compute and every term it already holds at 0 (memory terms unchanged)."""
    out = type(r)(r)             # the same mapping (values still built on first read)
    out["compute"] = step
    for k in HELD:
        if k in out:
            out[k] = sp.Integer(0)
    return out

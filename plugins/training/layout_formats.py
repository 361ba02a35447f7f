"""The device's curves and number formats of a training step's matrix products: the roofline keys
of the step's constants ``K`` (:func:`device_curve`) and, under ``use layout { matmul_precision }``,
the FP8/FP4 keys read from the device, the recipe and ``use memory`` (:func:`lowp_constants`).
Split from :mod:`plugins.training.layout` (the block) so each stays readable."""
from __future__ import annotations

import sympy as sp

from plugins.training import layout_model as lm

LOWP_FIELDS = lm.LOWP_FIELDS
FP8_OPERANDS = lm.FP8_OPERANDS


def lowp_constants(ctx, kn, dev, model, K) -> bool:
    """``matmul_precision`` = "fp8" or "fp4": the format's keys into ``K`` — its dense peak
    (the device's ``fp8_flops`` / ``fp4_flops``, a located error when the device states none),
    its large-GEMM efficiency (``fp8_matmul_efficiency`` / ``fp4_matmul_efficiency``, default the
    device's ``matmul_efficiency``), the recipe's cast constants
    (:func:`plugins.training.layout_model.cast_constants`) and the dense linear parameters whose
    weights are cast (``N_lin``).  The FP8 copy agrees with ``use memory``: its ``operand``, when
    it names an FP8 format, sets the copy's bytes; an ``operand`` of another format is refused;
    stored ``weights`` in FP8 are the copy (no weight cast, no extra copy).  Returns False (and
    sets nothing) for "bf16"."""
    fmt = kn.value("matmul_precision")
    mem = ctx.block("memory")
    if fmt == "bf16":
        if kn.given("fp8_recipe"):
            kn.lay.warn_at("fp8_recipe", "fp8_recipe is not read: the matrix products run in bf16",
                           'set matmul_precision = "fp8" to price them in FP8, or drop fp8_recipe', code="unused")
        if mem is not None and mem.value("operand") in FP8_OPERANDS:
            mem.warn_at("operand", f"`use memory` feeds the matmuls an FP8 operand copy, but `use layout` runs "
                        "them in bf16: the step prices 16-bit products and holds no FP8 copy",
                        'add matmul_precision = "fp8" to `use layout` to price them as FP8 products', code="conflict")
        return False
    peak_field, eta_field, name = LOWP_FIELDS[fmt]
    if not dev.has(peak_field):
        kn.error_at("matmul_precision", f"matmul_precision = \"{fmt}\" needs the {name} peak of device "
                    f"'{dev.name}', which states no `{peak_field}`",
                    f"add `{peak_field} = …` (its dense {name} tensor peak, e.g. from the datasheet) to the device, "
                    "or keep matmul_precision = \"bf16\"", code="missing-parameter")
    recipe = kn.value("fp8_recipe")
    if fmt == "fp4" and kn.given("fp8_recipe"):
        kn.lay.warn_at("fp8_recipe", "fp8_recipe is not read: FP4 products run NVFP4 scaling",
                       "drop fp8_recipe", code="unused")
    K.update(lm.cast_constants(fmt, recipe, num=sp.Rational))
    K["peak_lp"] = dev.q(peak_field, "FLOP/s", positive=True)
    if K["mode"] == "roofline":
        # the low-precision curve, sustained over whole steps at the format's own sustained share
        # (default the 16-bit one, which K["eta_mm"] already carries)
        own = lm.LOWP_SUSTAINED[fmt]
        sus = next((dev.q(f, "", positive=True) for f in (own, lm.SUSTAINED_FIELD) if dev.has(f)), 1)
        base = next((dev.q(f, "", positive=True) for f in (eta_field, "matmul_efficiency") if dev.has(f)),
                    sp.Rational(str(lm.GENERIC_DEVICE["matmul_efficiency"])))
        K["eta_lp"] = base * sus
    K["N_lin"] = (model.q("params", "param") - K["N_exp"] - model.q("embedding_params", "param")
                  - model.q("lm_head_params", "param"))
    if mem is not None:
        op, stored = mem.value("operand"), mem.value("weights")
        if op not in ("same",) + FP8_OPERANDS and fmt == "fp8":
            mem.error_at("operand", f"`use memory` feeds the matmuls a {op} weight copy, but `use layout` runs them "
                         "in FP8 (matmul_precision = \"fp8\")", 'drop operand (the layout holds the FP8 copy), or '
                         'write operand = "fp8_e4m3"', code="conflict")
        if fmt == "fp8" and op in FP8_OPERANDS:
            K["lp_bytes"] = sp.Integer(1)           # the copy as `use memory` states it: 1 + 4/scale_block²
            K["lp_w_scale"] = ctx.q("operand_bytes_per_param", "B/param") - 1
        if fmt == "fp8" and stored in FP8_OPERANDS:
            K["lp_wcast"] = sp.Integer(0)           # the stored weights are the FP8 copy
    return True


def device_curve(dev) -> dict:
    """The roofline keys of ``K`` from a device declaration: its `matmul_efficiency`,
    `matmul_half_flops` and `mem_efficiency` when it states them, else the generic defaults
    of :data:`plugins.training.layout_model.GENERIC_DEVICE`, η_max times the device's
    `sustained_efficiency` when it states one; and its `mem_bw`."""
    out = {}
    for field, (key, unit) in lm.DEVICE_CURVE.items():
        out[key] = (dev.q(field, unit, positive=True) if dev.has(field)
                    else sp.Rational(str(lm.GENERIC_DEVICE[field])))
    if dev.has(lm.SUSTAINED_FIELD):     # what whole training steps sustain of that curve
        out["eta_mm"] = out["eta_mm"] * dev.q(lm.SUSTAINED_FIELD, "", positive=True)
    out["mem_bw"] = dev.q("mem_bw", "B/s", positive=True)
    return out


def attention_constants(dev, field: str | None) -> dict:
    """``K["eta_attn"]``: the fused attention kernel's efficiency — the device's ``field`` (e.g.
    ``cudnn_attention_efficiency``) times its ``sustained_efficiency`` as the GEMM curve is —
    or {} (the GEMM curve) when ``field`` is None or the device states no such field; and
    ``K["attn_bwd_rate"]``, the kernel's backward rate over its forward's (the device's
    ``attention_backward_rate``), when the device states it."""
    if field is None or not dev.has(field):
        return {}
    eta = dev.q(field, "", positive=True)
    if dev.has(lm.SUSTAINED_FIELD):
        eta = eta * dev.q(lm.SUSTAINED_FIELD, "", positive=True)
    out = {"eta_attn": eta}
    if dev.has(lm.ATTENTION_BACKWARD_FIELD):
        out["attn_bwd_rate"] = dev.q(lm.ATTENTION_BACKWARD_FIELD, "", positive=True)
    return out

"""``use serving_step``: the TTFT floor, the decode step time, TPOT and tokens per second per GPU
of a plan's model on its device, from the engine step model of
:mod:`plugins.serving.serving_step_core` (the terms of a step and the sources of its generic
values are described there); and :func:`step_constants`, that model's constants for a plan —
read from a ``PlanContext`` while pricing (``use batching`` prices its simulated iterations
with them) or from an evaluated workspace (tests, benchmarks).

The step model's public names are imported here too (``serving_step.step_time``,
``serving_step.ScalarStep``, …), as the tests, benchmarks and other plugins read them.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import Param, UseSpec, hookimpl

from plugins.training.layout_model import ops
from plugins.serving.serving_engine import GPUS_PER_HOST
from plugins.serving.serving_spec import SPEC_PARAMS, draft_time, spec_settings, verify_time
from plugins.serving.serving_step_core import (  # noqa: F401  (the step model, read through this module too)
    ACT_BYTES, DEVICE_FIELDS, FORMAT_BYTES, GENERIC, REFERENCES, ScalarStep, all_reduce_time, bound, constants,
    crossover_batch, decode_attention_of, distinct_experts, expert_inclusion, expert_top_share, experts_hit,
    experts_hit_rate, gemm_time, kernels_per_step, kv_window_of, matmul_efficiency, min_, ring_all_reduce,
    roofline, skew_for_top_share, static_batch, step_parts, step_time)

SPEC_QUANTITIES = ("accepted_tokens_per_step", "draft_step_time", "verify_step_time", "spec_step_time",
                   "plain_tpot", "plain_decode_tokens_per_s", "spec_speedup", "draft_kv_per_token")
KNOBS = ("attention_efficiency", "expert_efficiency", "expert_skew", "kernel_overhead", "host_overhead")


# ---------------------------------------------------------------- views over plain numbers
class _EvalView:
    """A declaration of an evaluated workspace read as numbers (``has``/``q``/``value`` like a
    ``DeclView``), so :func:`plugins.model.decoder.architecture` builds a dict of floats."""

    def __init__(self, ev, name: str):
        self.ev, self.name = ev, name

    def _id(self, f):
        return f"{self.name}.{f}"

    def has(self, f):
        return self.ev.has(self._id(f))

    def q(self, f, unit="", positive=False, nonnegative=False):
        return _num(self.ev.base_value(self._id(f)))

    def value(self, f, default=None):
        if not self.has(f):
            return default
        return self.ev.python_value(self._id(f))


def _num(x):
    """A node's nominal value (a sympy number, or already a Python number) as int or float."""
    if isinstance(x, sp.Basic):
        return int(x) if x.is_Integer else float(x)
    return x if isinstance(x, int) and not isinstance(x, bool) else float(x)


def _decl_name(ref):
    return getattr(ref, "name", ref)


def step_constants(src, plan=None, *, tp=None, link=None, weights=None, kv=None, numeric=True, knobs=None,
                   model=None):
    """The constants of :func:`step_time` for a plan.

    :param src: a ``PlanContext`` (inside a plugin's pricing; ``plan`` ignored) or an evaluated
        workspace (``dsl.load(...)``, an ``Evaluation``) with ``plan`` the plan's name.
    :param tp, link, weights, kv, knobs: override what the plan's ``use serving_step`` (or
        ``use engine``) states.  ``link`` is a dict {bandwidth, latency, efficiency, launch}.
    :param numeric: floats (the default) or, from a ``PlanContext``, sympy expressions of the
        plan's inputs (``numeric=False``).
    :param model: price another model on the plan's device, link and formats (the draft of
        speculative decoding): a declaration view from a ``PlanContext``, or the name of a
        model declaration of an evaluated workspace.
    """
    from plugins.model.decoder import architecture, moe_architecture
    from plugins.model.llmstate import kv_bytes_per_token

    if hasattr(src, "ref") and hasattr(src, "nominal"):
        ctx = src
        model, dev = (model if model is not None else ctx.ref("model")), ctx.ref("device")
        blk = ctx.block("serving_step")
        eng = ctx.block("engine")
        conv = (lambda x: _num(ctx.nominal(x))) if numeric else (lambda x: x)
        number = lambda x: _num(ctx.nominal(x))           # noqa: E731
        tp_v = tp if tp is not None else _block_tp(blk, eng)
        if link is None:
            src_link = blk if blk is not None and blk.given("link") else \
                eng if eng is not None and eng.given("link") else None
            if src_link is not None:
                link = _link_fields(src_link.ref("link"), conv)
        weights = weights or _format(blk, eng, "weights")
        kv = kv or _format(blk, eng, "kv")
        kn = dict(knobs or {})
        if blk is not None:
            # the routing skew selects the experts' inclusion probabilities: its number, also
            # when the other knobs stay expressions
            kn.setdefault("expert_skew", _num(ctx.nominal(blk.q("expert_skew"))))
            for key in KNOBS:
                kn.setdefault(key, conv(blk.q(key)))
    else:
        ev = src
        mname = _decl_name(model) if model is not None else _decl_name(ev.python_value(f"{plan}.model"))
        dname = _decl_name(ev.python_value(f"{plan}.device"))
        model, dev = _EvalView(ev, mname), _EvalView(ev, dname)
        conv = number = _num
        kn = dict(knobs or {})
        pre = f"{plan}.serving_step."
        blk_tp = ev.base_value(pre + "tp") if ev.has(pre + "tp") else 1
        eng_tp = f"{plan}.engine.tp"
        tp_v = tp if tp is not None else int(ev.base_value(eng_tp) if ev.has(eng_tp) else blk_tp)
        given = ev.uses(plan).get("serving_step", {})
        fmt = {}
        for name in ("weights", "kv"):
            for nid in ((pre + name) if name in given else None, f"{plan}.engine.{name}", pre + name):
                if nid is not None and ev.has(nid):
                    fmt[name] = ev.python_value(nid)
                    break
        weights, kv = weights or fmt.get("weights"), kv or fmt.get("kv")
        if ev.has(pre + "weights"):
            for key in KNOBS:
                kn.setdefault(key, _num(ev.base_value(pre + key)))
            if link is None and ev.has(pre + "link"):
                link = _link_fields(_EvalView(ev, _decl_name(ev.python_value(pre + "link"))), _num)
        if link is None and ev.has(f"{plan}.engine.link"):
            link = _link_fields(_EvalView(ev, _decl_name(ev.python_value(f"{plan}.engine.link"))), _num)
        weights, kv = weights or "bf16", kv or "bf16"
    a, m = architecture(model), moe_architecture(model)
    if kn.get("expert_skew") and m is not None and m.get("moe"):
        # a skewed router's inclusion probabilities need the expert counts as numbers
        kn["expert_counts"] = (int(number(m["E"])), int(number(m["k"])))
    a = {key: (conv(v) if isinstance(v, sp.Basic) else v) for key, v in a.items()}
    m = {key: (conv(v) if isinstance(v, sp.Basic) else v) for key, v in m.items()}
    d = {"peak_flops": conv(dev.q("peak_flops", "FLOP/s", positive=True)),
         "mem_bw": conv(dev.q("mem_bw", "B/s", positive=True))}
    for f, unit in DEVICE_FIELDS:
        if dev.has(f):
            d[f] = conv(dev.q(f, unit))
    kvb = FORMAT_BYTES[kv]
    kv_bytes = conv(kv_bytes_per_token(model, kvb if isinstance(kvb, sp.Basic) else sp.Integer(kvb)))
    return constants(a, m, d, kv_bytes=kv_bytes, tp=tp_v, link=link, weights=weights, knobs=kn,
                     kv_window=kv_window_of(model, conv))


def _format(blk, eng, name):
    """The format ``name`` (weights / kv) stated by `use serving_step`, else by `use engine`."""
    if blk is not None and (blk.given(name) or eng is None):
        return blk.value(name)
    if eng is not None:
        return eng.value(name)
    return "bf16"


def _block_tp(blk, eng):
    if eng is not None:
        return int(eng.value("tp"))          # a structural whole number (kind int)
    if blk is not None:
        return int(blk.value("tp"))
    return 1


def _link_fields(view, conv):
    out = {"bandwidth": conv(view.q("bandwidth", "B/s", positive=True))}
    for f, unit in (("latency", "s"), ("efficiency", ""), ("launch", "s")):
        if view.has(f):
            out[f] = conv(view.q(f, unit))
    return out


# ---------------------------------------------------------------- the block
_FORMATS = tuple(FORMAT_BYTES)

SERVING_STEP = UseSpec(
    "serving_step",
    "step time of an inference engine from the device roofline: TTFT floor, TPOT, tokens/s per GPU",
    references=REFERENCES,
    params=(
        Param("batch", "seq", "32 seq", "sequences decoding together (for tpot and decode_tokens_per_s)", min=0,
              min_open=True),
        Param("context", "token", "2048 token", "cached tokens each decoding sequence reads", min=0),
        Param("prefill", "token", "2048 token", "tokens of the one prefill that sets ttft_floor", min=0,
              min_open=True),
        Param("tp", "", "1", "tensor-parallel GPUs per replica (`use engine` gives it when present)", kind="int",
              min=1),
        Param("link", kind="ref", ref_kind="link", optional=True,
              doc="the link of the tensor-parallel group (required when tp > 1)"),
        Param("weights", kind="choice", default='"bf16"', choices=_FORMATS, doc="format of the weights read"),
        Param("kv", kind="choice", default='"bf16"', choices=_FORMATS, doc="format of the KV cache"),
        Param("attention_efficiency", "", "37 %", "fraction of peak_flops attention kernels reach "
              "(FlashAttention-2 forward on H100)", min=0, min_open=True, max=1),
        Param("expert_efficiency", "", "50 %", "fraction of peak_flops the grouped expert GEMMs of an MoE layer "
              "reach (fused MoE kernel)", min=0, min_open=True, max=1),
        Param("expert_skew", "", "0", "Zipf exponent s of the routed experts' popularity (0: uniform "
              "routing; 0.91 puts 65 % of a 128-expert top-8 router's tokens on its top 20 % of experts)",
              min=0, max=20),
        Param("kernel_overhead", "s", "2 us", "fixed time of each kernel of a step (launch from a CUDA graph, "
              "first and last wave)", min=0),
        Param("host_overhead", "s", "0 s", "host time per step not hidden behind the GPU (scheduler)", min=0),
        *SPEC_PARAMS,
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the model served"),
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
        GPUS_PER_HOST,
    ),
    order=66,
    provides=("ttft_floor", "decode_step_time", "tpot", "prefill_tokens_per_s", "decode_tokens_per_s",
              "step_crossover_batch", "weights_read_per_gpu"),
    provides_when=tuple((q, "`speculative` is \"draft\" or \"mtp\"") for q in SPEC_QUANTITIES),
)


@hookimpl
def plan_blocks_register():
    return [SERVING_STEP]


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("serving_step")
    if b is None:
        return
    eng = ctx.block("engine")
    tp_num = int(eng.value("tp")) if eng is not None else int(b.value("tp"))
    from plugins.model.decoder import moe_architecture
    model = ctx.ref("model")
    if not moe_architecture(model)["moe"]:
        for k in ("expert_skew", "expert_efficiency"):
            if b.given(k):
                b.warn_at(k, f"'{k}' has no effect: model '{model.name}' is dense (no routed experts)",
                          "remove it, or serve a mixture-of-experts model", code="unused")
    if eng is None:               # `use engine` checks its own tp (the same rules)
        from plugins.serving.serving_engine import check_tp, warn_tp_across_hosts
        check_tp(b, ctx.ref("model"), tp_num)
        warn_tp_across_hosts(ctx, b, tp_num)
    if tp_num > 1 and not b.given("link") and not (eng is not None and eng.given("link")):
        where = "use engine" if eng is not None else "use serving_step"
        (eng if eng is not None else b).error_at(
            "tp", f"`use serving_step` with tp = {tp_num} needs the link its all-reduces cross",
            f"add `link = nvlink4` (the GPUs' link inside the host: nvlink4 for H100/H200, nvlink5 for B200, "
            f"pcie4_x16 for consumer cards) to `{where}`", code="missing-parameter")
    cs = step_constants(ctx, numeric=False, tp=tp_num)
    cn = step_constants(ctx, numeric=True, tp=tp_num)
    o = ops("sympy")
    B, S, P = b.q("batch"), b.q("context"), b.q("prefill")
    ttft = step_time(cs, P, 0, 0, o)
    dec = step_time(cs, 0, B, B * S, o)
    Pn, Bn, Sn = (float(ctx.nominal(x)) for x in (P, B, S))
    pb, pc, pm = bound(cn, Pn, 0, 0)
    db, dc, dm = bound(cn, 0, Bn, Bn * Sn)
    ctx.define("ttft_floor", ttft, "s",
               f"one prefill of `prefill` tokens alone: {pb}-bound (FLOP time {pc * 1e3:.4g} ms, "
               f"memory time {pm * 1e3:.4g} ms) plus all-reduces and fixed kernel time", headline=True)
    t = ctx.define("decode_step_time", dec, "ms",
                   f"one decode step of `batch` sequences at `context`: {db}-bound (FLOP time {dc * 1e3:.4g} ms, "
                   f"memory time {dm * 1e3:.4g} ms — weights once, KV of every context) plus fixed kernel time",
                   headline=True)
    ctx.define("prefill_tokens_per_s", P / ttft / tp_num, "token/s",
               f"prefill tokens per second per GPU ({pb}-bound)", headline=True)
    spec = spec_settings(ctx, b)
    if spec is None:
        ctx.define("tpot", t, "ms", "time per output token of each sequence: one decode step", headline=True)
        ctx.define("decode_tokens_per_s", B / t / tp_num, "token/s",
                   f"decode tokens per second per GPU at `batch` ({db}-bound)", headline=True)
    else:
        _price_speculative(ctx, b, cs, t, tp_num, B, S, spec)
    ctx.define("step_crossover_batch", crossover_batch(cs), "seq",
               "decode batch where the dense matrices' FLOP time reaches their weight read (large-GEMM η)")
    ctx.define("weights_read_per_gpu", cs["weights_per_gpu"], "GiB", "weights one GPU reads per step (TP split; "
               "the embedding table is not read whole, so this is below `use engine`'s weights_per_gpu)")


def _price_speculative(ctx, b, cs, plain, tp_num, B, S, spec):
    """The quantities of speculative decoding (:mod:`plugins.serving.serving_spec`)."""
    from plugins.model.llmstate import kv_bytes_per_token
    _, draft, k, E, how = spec
    o = ops("sympy")
    cd = step_constants(ctx, numeric=False, tp=tp_num, model=draft)
    td = ctx.define("draft_step_time", draft_time(cd, B, k, S, o), "ms",
                    f"{k} decode steps of the draft '{draft.name}' for `batch` sequences at `context` (its weights "
                    "and its own KV)")
    tv = ctx.define("verify_step_time", verify_time(cs, B, k, S, o), "ms",
                    f"one step of the target verifying {k + 1} tokens of each sequence (chunks after the cached "
                    "context; weights read once, logits at every position)")
    ts = ctx.define("spec_step_time", td + tv, "ms", "draft steps plus the verification step")
    e = ctx.define("accepted_tokens_per_step", E, "",
                   f"expected tokens each sequence gains per speculative step: {how}")
    ctx.define("plain_tpot", plain, "ms", "time per output token without speculation: one decode step")
    tp_ = ctx.define("tpot", ts / e, "ms", "time per output token of each sequence: the speculative step "
                     "over the tokens it yields on average", headline=True)
    ctx.define("decode_tokens_per_s", B * e / ts / tp_num, "token/s",
               "decode tokens per second per GPU at `batch`: batch × accepted_tokens_per_step per speculative "
               "step", headline=True)
    ctx.define("plain_decode_tokens_per_s", B / plain / tp_num, "token/s",
               "decode tokens per second per GPU at `batch` without speculation")
    ctx.define("spec_speedup", plain / tp_, "", "plain_tpot over tpot: above 1 speculation pays at this batch; "
               "`solve p.serving_step.batch for p.tpot == p.plain_tpot` finds the batch where it stops paying",
               headline=True)
    kvb = FORMAT_BYTES[_format(b, ctx.block("engine"), "kv")]
    ctx.define("draft_kv_per_token", kv_bytes_per_token(draft, kvb if isinstance(kvb, sp.Basic) else sp.Integer(kvb)),
               "KiB", "KV-cache bytes the draft keeps per token (all its layers), beside the target's")

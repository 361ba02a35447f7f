"""Training-state memory by format, the per-GPU memory budget, and the memory tables.

``use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam";
moments = "fp32"; operand = "fp8_e4m3"; scale_block = 128; transient = 10 GiB; usable = 22 GiB }``

Bytes per parameter (book ch. 10 §10.1.2, ch. 3 example 3-3): BF16 weights 2, BF16 grads 2,
FP32 master 4, Adam moments 4 + 4 → 16 B (Qwen3-8B: 131.1 GB = 122.1 GiB); FP32 grads → 18 B
(147.433 GB).  SGD with momentum keeps one moment, plain SGD none.

Block-scaled formats (FP8 E4M3/E5M2, §10.1.2 after DeepSeek-V3 §3.3): one FP32 scale per
``scale_block`` × ``scale_block`` block of a weight matrix, so a copy costs
1 + 4/scale_block² B/param (1 + 4/16384 ≈ 1.0002 at 128).  ``operand`` is the format of the
copy of the weights fed to the matmuls; by default (``"same"``) it is the stored ``weights``.
An FP8 operand copy halves the weights the matmuls read (Qwen3-8B 16.4 → ≈8.2 GB,
``matmul_weights_memory``) while the persistent state (``bytes_per_param``) keeps its
16 B/param; writing ``weights = "fp8_e4m3"`` instead stores the weights themselves in FP8.

The format the matrix products *run* in is ``use layout { matmul_precision }``: with "fp8" (or
"fp4") the layout prices the linear layers' products at the device's FP8 (FP4) peak and holds
the low-precision copy of their weights per GPU (``matmul_copy_per_gpu``).  The two agree: an
FP8 ``operand`` here sets that copy's bytes (1 + 4/scale_block²); ``operand = "same"`` with an
FP8 layout reads the layout's copy (the recipe's bytes and scales) as
``operand_bytes_per_param``; FP8 stored ``weights`` are the copy (nothing extra); an FP8
``operand`` under a BF16 layout is warned of, a 16/32-bit ``operand`` under an FP8 layout refused.

Per-state quantities ``weights_memory``, ``grads_memory``, ``master_memory``,
``optimizer_memory`` (whole model, bytes) feed ``persistent_memory`` — unsharded here
(a fallback), divided by the ``zero`` block when one is used; ``X_per_gpu`` are the per-GPU
shares (fallbacks the ``zero`` block replaces).  ``memory_per_gpu`` adds the ``transient``
memory (activations, gathered parameters, workspace that are live together, §10.2.4; by
default the transient peak of ``use buffers`` when that block is used, else 0);
``memory_margin`` = usable − memory_per_gpu; requirement ``fits_memory``.

Tables: ``memory-formats`` (the book's format table for this plan's model), ``memory-states``
(per state: format, bytes, replicated or sharded, per-GPU share), ``memory-peaks`` (each
memory pool's peak on each timeline with the holds live at it) and ``memory-methods`` (the
§10.2.4 comparison of sharding, recomputation and offload, filled from the plan).

Book provenance of the ``memory-shards`` table: ch. 10 §10.2.1 (ZeRO sharding of the training state).
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, Table, TableSpec, UseSpec

from plugins.training import layout_model as lm

# Bytes per element of each format; block-scaled formats add one FP32 scale per block.
FORMAT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1, "none": 0}
BLOCK_SCALED = {"fp8_e4m3", "fp8_e5m2", "fp8"}
SCALE_BYTES = 4                       # one FP32 scale per block
OPTIMIZER_MOMENTS = {"adam": 2, "adamw": 2, "sgd_momentum": 1, "sgd": 0}
STATES = ("weights", "grads", "master", "optimizer")

# The book's format table (§10.1.2): scaling control and main numerical risk per operand format.
FORMAT_NOTES = {
    "fp32": ("FP32", "not needed", "memory and bandwidth: 4 B per element"),
    "tf32": ("TF32", "not needed", "10-bit mantissa inside matmuls"),
    "fp16": ("FP16", "global loss scaling", "gradient underflow; overflow when scaling"),
    "bf16": ("BF16", "not needed", "short mantissa, compensated by FP32 accumulation"),
    "fp8_e4m3": ("FP8 E4M3 operand copy", "block scaling and periodic high-precision accumulation",
                 "rounding inside a block; stale scales"),
    "fp8_e5m2": ("FP8 E5M2 operand copy", "block scaling and periodic high-precision accumulation",
                 "2-bit mantissa; stale scales"),
}
FORMAT_NOTES["fp8"] = FORMAT_NOTES["fp8_e4m3"]
WEIGHT_FORMATS = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8")

SPEC = UseSpec(
    "memory",
    "training state per parameter by format, and the per-GPU memory budget",
    references=("bytes per parameter by format: Micikevicius et al. 2018, 'Mixed Precision Training'; 16 B/param for "
                "mixed-precision Adam: Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations Toward Training Trillion "
                "Parameter Models'",
                "FP32 gradients in mixed-precision Adam: 18 B/param",
                "FP8 block scaling: DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report'",
                "transient memory: activations, gathered parameters and workspace live together on top of the "
                "persistent state"),
    params=(
        Param("weights", default='"bf16"', kind="choice", choices=WEIGHT_FORMATS,
              doc="format of the stored weights (fp8_* are block-scaled; fp8 = fp8_e4m3)"),
        Param("grads", default='"bf16"', kind="choice", choices=("fp32", "bf16", "fp16"),
              doc="format in which gradients are accumulated"),
        Param("master", default='"fp32"', kind="choice", choices=("fp32", "none"),
              doc="format of the master weights kept by the optimizer"),
        Param("optimizer", default='"adam"', kind="choice", choices=tuple(OPTIMIZER_MOMENTS),
              doc="optimizer family (number of moments kept)"),
        Param("moments", default='"fp32"', kind="choice", choices=("fp32", "bf16"),
              doc="format of the optimizer moments"),
        Param("operand", default='"same"', kind="choice", choices=("same",) + WEIGHT_FORMATS,
              doc="format of the weight copy fed to the matmuls (same: the stored weights)"),
        Param("scale_block", "", "128", "edge of the square block that shares one FP32 scale "
              "(block-scaled formats)", kind="int", min=1),
        Param("transient", "B", "0 GiB", "activations, gathered parameters and workspace live together at "
              "the peak, per GPU (when not written and `use buffers` is used: its transient peak)", min=0),
        Param("usable", "B", "device.memory", "memory a GPU can give to training (default: the device's "
              "nominal memory, e.g. 80 GB = 74.5 GiB on an H100; `usable = device.cuda_memory` budgets against "
              "what the CUDA driver reports, 79.22 GiB there)", min=0, min_open=True),
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the model trained"),
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
    ),
    order=10,
    provides=("weights_memory", "grads_memory", "master_memory", "optimizer_memory", "bytes_per_param",
              "operand_bytes_per_param", "matmul_weights_memory", "state_memory", "persistent_memory",
              "weights_per_gpu", "grads_per_gpu", "master_per_gpu", "optimizer_per_gpu", "transient_memory",
              "memory_per_gpu", "usable_memory", "memory_margin"),
)


def device_capacity(memory):
    """The most memory a plan's ``usable`` may claim on a device of nominal ``memory`` (bytes):
    the nominal figure read as GiB, memory · 2^30 / 10^9 — an "80 GB" GPU carries 80 GiB of HBM,
    of which the CUDA driver reports about 79.2 GiB (vLLM PR #12126's H100 log, the catalog's
    ``cuda_memory``).  A ``usable`` above it is warned of here and fails ``fits_memory`` in the
    layout search.  Returns bytes (a sympy number for a sympy ``memory``, else a float)."""
    return memory * (sp.Rational(2**30, 10**9) if isinstance(memory, sp.Basic) else 2**30 / 10**9)


@hookimpl
def plan_blocks_register():
    return [SPEC]


def format_bytes(fmt: str, scale_block: int = 128):
    """Bytes per element of format ``fmt`` (sympy Rational).

    Block-scaled formats (fp8_*) add one FP32 scale per ``scale_block``² elements:
    1 + 4/scale_block² (§10.1.2; 1 + 4/16384 ≈ 1.0002 for 128 × 128 blocks).
    """
    b = sp.Integer(FORMAT_BYTES[fmt])
    if fmt in BLOCK_SCALED:
        b += sp.Rational(SCALE_BYTES, scale_block ** 2)
    return b


def bytes_per_param(block) -> dict[str, sp.Rational]:
    """Bytes per parameter of each state for a ``memory`` block's formats."""
    blk = int(block.value("scale_block"))
    return {
        "weights": format_bytes(block.value("weights"), blk),
        "grads": format_bytes(block.value("grads"), blk),
        "master": format_bytes(block.value("master"), blk),
        "optimizer": OPTIMIZER_MOMENTS[block.value("optimizer")] * format_bytes(block.value("moments"), blk),
    }


@lru_cache(maxsize=256)
def nsimplify_float(v: float):
    """``sympy.nsimplify`` of a float (a value as the exact rational it stands for), once per
    value and process: a sympy number is immutable, and the same few values recur — every plan's
    bytes per parameter of its training state, the serving step model's knobs — at ≈0.5–3 ms a
    call."""
    return sp.nsimplify(v)


def _fmt_bpp(v) -> str:
    """Bytes per parameter as printed: a whole number as it is, else four decimals.  An exact
    number (int, Fraction, sympy Rational) is printed directly; a float is first rationalised."""
    if isinstance(v, (int, Fraction)) or getattr(v, "is_Rational", False):
        f = Fraction(int(v.p), int(v.q)) if hasattr(v, "p") else Fraction(v)
        return str(f.numerator) if f.denominator == 1 else f"{float(f):.4f}"
    v = sp.nsimplify(v)
    return str(v) if v.is_Integer else f"{float(v):.4f}"


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("memory")
    if b is None:
        return
    N = ctx.ref("model").q("params", "param")
    bpp = bytes_per_param(b)
    parts = {k: ctx.define(f"{k}_memory", v * N, "GB", f"{k} state of the whole model ({_fmt_bpp(v)} B/param)")
             for k, v in bpp.items()}
    ctx.define("bytes_per_param", sum(bpp.values()), "B/param", "persistent training state per parameter")
    op = b.value("operand")
    op_bytes = bpp["weights"] if op == "same" else format_bytes(op, int(b.value("scale_block")))
    lay = ctx.block("layout")
    lowp = lay.value("matmul_precision") if lay is not None else "bf16"
    if op == "same" and lowp != "bf16" and b.value("weights") not in lm.FP8_OPERANDS:
        # the layout runs the linear layers' products in FP8/FP4: they read its low-precision copy
        op_bytes = lm.copy_bytes_per_param(lm.cast_constants(lowp, lay.value("fp8_recipe"), num=sp.Rational))
    ctx.define("operand_bytes_per_param", op_bytes, "B/param",
               "bytes per parameter of the weight copy the matmuls read, scales included",
               references=("bytes per parameter by format: Micikevicius et al. 2018, 'Mixed Precision Training'; 16 "
                           "B/param for mixed-precision Adam: Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations "
                           "Toward Training Trillion Parameter Models'",))
    ctx.define("matmul_weights_memory", op_bytes * N, "GB", "weights the matmuls read per pass",
               references=("bytes per parameter by format: Micikevicius et al. 2018, 'Mixed Precision Training'; 16 "
                           "B/param for mixed-precision Adam: Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations "
                           "Toward Training Trillion Parameter Models'",))
    total = ctx.define("state_memory", sum(parts.values()), "GB",
                       "persistent training state of the whole model",
                       references=("bytes per parameter by format: Micikevicius et al. 2018, 'Mixed Precision "
                                   "Training'; 16 B/param for mixed-precision Adam: Rajbhandari et al. 2020, 'ZeRO: "
                                   "Memory Optimizations Toward Training Trillion Parameter Models'",))
    ctx.define("persistent_memory", total, "GiB", "persistent state per GPU (no sharding)", fallback=True,
               headline=True)
    for k in STATES:
        ctx.define(f"{k}_per_gpu", parts[k], "GiB", f"{k} state held by one GPU (no sharding)", fallback=True)
    if b.given("transient"):
        transient, how = b.q("transient"), "declared"
    elif ctx.block("buffers") is not None:
        transient, how = ctx.q("transient_peak", "B"), "the buffers' transient peak"
    else:
        transient, how = sp.Integer(0), None
    ctx.define("transient_memory", transient, "GiB",
               "activations, gathered parameters and workspace live together at the peak"
               + (f" ({how})" if how else " (none declared)"))
    usable = ctx.define("usable_memory", b.q("usable"), "GiB", "memory a GPU gives to training", headline=True,
                        rank=4)
    dev = ctx.ref("device")
    if b.given("usable") and dev is not None and dev.has("memory"):
        # more than the device has even when its nominal "80 GB" is read as GiB: a typo or a wrong device
        u0, m0 = ctx.nominal(b.q("usable")), ctx.nominal(dev.q("memory", "B"))
        if u0 is not None and m0 is not None and u0 > device_capacity(m0):
            b.warn_at("usable", f"usable memory {float(u0) / 2**30:.4g} GiB is more than the device has "
                      f"({dev.name}.memory = {float(m0) / 1e9:.4g} GB, {float(m0) / 2**30:.4g} GiB)",
                      "usable is the part of the device's memory training may take, e.g. 0.9 * device.memory")
    if how is None and not ctx.provided("step_time"):
        # no budget and no training step to derive activations from (a plan of state alone)
        ctx.warn(f"memory_per_gpu of plan '{ctx.name}' counts the persistent training state only: no activation "
                 "memory is declared or derived",
                 "declare `transient = …` in `use memory`, or price a training step (`use layout { … }` with a "
                 "workload) to derive activations from the model")
    if ctx.provided("activation_memory"):
        return        # the training step (or the ZeRO alias) prices memory_per_gpu with its activations
    per_gpu = ctx.define("memory_per_gpu", ctx.q("persistent_memory", "B") + transient, "GiB",
                         "peak per GPU: persistent state + transient memory", headline=True,
                         rank=3, references=("bytes per parameter by format: Micikevicius et al. 2018, 'Mixed "
                                             "Precision Training'; 16 B/param for mixed-precision Adam: Rajbhandari "
                                             "et al. 2020, 'ZeRO: Memory Optimizations Toward Training Trillion "
                                             "Parameter Models'",
                                             "transient memory: activations, gathered parameters and workspace live "
                                             "together on top of the persistent state"))
    ctx.define("memory_margin", usable - per_gpu, "GiB", "usable − peak per GPU", headline=True, rank=5)
    ctx.require("fits_memory", per_gpu, "<=", usable, "GiB", "the peak fits in usable memory")


# ---------------------------------------------------------------- tables
def _v(ws, nid):
    """Nominal float of ``nid`` (base units) or None when the plan has no such quantity."""
    if nid not in ws.nodes:
        return None
    v = ws.base_value(nid)
    return None if v is None else float(v)


def _uses(ws, plan, block) -> bool:
    return block in ws.decls[plan].uses


def _conv(x, unit):
    from dsl.plugin import convert
    return None if x is None else convert(x, unit)


def _formats_table(ws, plan):
    if not _uses(ws, plan, "memory"):
        return None
    model = ws.python_value(f"{plan}.model").name
    N = _v(ws, f"{model}.params")
    blk = int(ws.python_value(f"{plan}.memory.scale_block"))
    op = ws.python_value(f"{plan}.memory.operand")
    chosen = ws.python_value(f"{plan}.memory.weights") if op == "same" else op
    shown = ["fp16", "bf16", "fp8_e4m3"]
    if chosen not in shown and chosen in FORMAT_NOTES:
        shown.append(chosen)
    rows = []
    for f in shown:
        name, control, risk = FORMAT_NOTES[f]
        bpp = format_bytes(f, blk)
        rows.append(((name + " *") if f == chosen or (chosen == "fp8" and f == "fp8_e4m3") else name,
                     _fmt_bpp(bpp), round(_conv(float(bpp) * N, "GB"), 1), control, risk))
    bpp_state = _v(ws, f"{plan}.bytes_per_param")
    notes = (f"* the plan's matmul operand format; block-scaled formats carry one FP32 scale per "
             f"{blk}×{blk} block (1 + 4/{blk * blk} B/param)",
             f"the persistent training state stays {_fmt_bpp(nsimplify_float(bpp_state))} B/param: master weights, "
             "gradients and optimizer moments keep their own formats")
    return Table(("format", "B/param with scales", f"matmul weights of {model} (GB)", "scaling control",
                  "main risk"), tuple(rows), notes)


def _states_table(ws, plan):
    if not _uses(ws, plan, "memory"):
        return None
    if _uses(ws, plan, "layout"):
        stage = int(ws.python_value(f"{plan}.layout.zero"))
    elif _uses(ws, plan, "zero"):
        stage = int(ws.python_value(f"{plan}.zero.stage"))
    else:
        stage = 0
    sharded = {0: (), 1: ("master", "optimizer"), 2: ("grads", "master", "optimizer"), 3: STATES}[stage]
    d = _v(ws, f"{plan}.dp") or (_v(ws, f"{plan}.zero.group") if _uses(ws, plan, "zero") else 1.0)
    cp = int(ws.python_value(f"{plan}.layout.cp")) if _uses(ws, plan, "layout") else 1
    d = d * cp               # the context-parallel ranks share the ZeRO group (dp·cp)
    rows = []
    for k in STATES:
        fmt = (ws.python_value(f"{plan}.memory.optimizer") + " × " + ws.python_value(f"{plan}.memory.moments")
               if k == "optimizer" else ws.python_value(f"{plan}.memory.{k}"))
        whole = _v(ws, f"{plan}.{k}_memory")
        rows.append((k, fmt, round(_conv(whole, "GB"), 2), f"sharded over {d:g}" if k in sharded else "replicated",
                     round(_conv(_v(ws, f"{plan}.{k}_per_gpu"), "GiB"), 2)))
    copy = _v(ws, f"{plan}.matmul_copy_per_gpu")
    if copy is not None:         # `use layout { matmul_precision = "fp8" }`: the low-precision weight copy
        fmt = ws.python_value(f"{plan}.layout.matmul_precision")
        rows.append((f"{fmt} weight copy", fmt, "", "as weights",
                     round(_conv(copy + (_v(ws, f"{plan}.scaling_state_per_gpu") or 0), "GiB"), 2)))
    rows.append(("total", "", round(_conv(_v(ws, f"{plan}.state_memory"), "GB"), 2), f"ZeRO-{stage}",
                 round(_conv(_v(ws, f"{plan}.persistent_memory"), "GiB"), 2)))
    note = ("per GPU = whole / d for sharded states, whole for replicated ones"
            + (f" (d = dp·cp = {d:g})" if cp > 1 else ""))
    if _uses(ws, plan, "layout"):
        tp, pp, ep = (int(ws.python_value(f"{plan}.layout.{k}")) for k in ("tp", "pp", "ep"))
        if tp * pp > 1 or ep > 1:
            # the states are first split over the model-parallel ranks (tp·pp; routed experts over
            # ep·etp·pp, data-parallel over their own expert-data-parallel group)
            mp = "tp·pp" + ("; routed experts ÷ ep·etp·pp, sharded over their expert-data-parallel group"
                            if ep > 1 else "")
            note = (f"per GPU = the model-parallel shard (whole ÷ {mp}) / d for sharded states, "
                    "the shard for replicated ones")
    return Table(("state", "format", "whole model (GB)", "ZeRO split", "per GPU (GiB)"), tuple(rows), (note,))


def _peaks_table(ws, plan):
    from dsl.plugin import convert, format_number

    rows = []
    for (p, name), tl in sorted(ws.timelines.items()):
        if p != plan or not tl.profiles:
            continue
        for pool, prof in sorted(tl.profiles.items()):
            unit = "GiB" if prof.peak >= 2 ** 30 else "MiB"
            rows.append((name, pool, "PEAK", round(convert(prof.peak, unit), 3), unit, ""))
            groups: dict = {}          # many holds of one kind (per layer, per micro-batch) -> one row
            sizes: dict = {}           # size expression -> bytes (holds of a kind share one)
            for hid in prof.live:
                e = tl.holds.bytes_of(hid)
                size = sizes.get(e)
                if size is None:
                    size = sizes[e] = float(e.xreplace({s: ws.base_value(s.name) for s in e.free_symbols}))
                key = (tl.holds.label_of(hid), size) if len(prof.live) > 8 else (hid, size)
                groups.setdefault(key, []).append(hid)
            for (_, size), hs in groups.items():
                h = tl.holds[hs[0]]

                def anchor(a, edge):
                    return edge if a is None else f"{a[1]} of {a[0]}"
                label = h.id if len(hs) == 1 else \
                    f"{tl.holds.label_of(hs[0])}: {len(hs)} × {format_number(convert(size, unit))} {unit}"
                rows.append((name, pool, label, round(convert(size * len(hs), unit), 3), unit,
                             f"{anchor(h.start, 'timeline start')} → {anchor(h.end, 'timeline end')}"
                             + (" (first of them)" if len(hs) > 1 else "")))
    if not rows:
        return None
    return Table(("timeline", "pool", "hold live at the peak", "size", "unit", "live from → to"), tuple(rows),
                 ("peak = max over time of the holds live together; a hold is live on [start, end), so a "
                  "buffer freed when another is allocated shares its region",))


def _methods_table(ws, plan):
    rows = []
    zero_stage = (int(ws.python_value(f"{plan}.layout.zero")) if _uses(ws, plan, "layout")
                  else int(ws.python_value(f"{plan}.zero.stage")) if _uses(ws, plan, "zero") else 0)
    if zero_stage > 0 and _uses(ws, plan, "memory"):
        removed = _v(ws, f"{plan}.state_memory") - _v(ws, f"{plan}.persistent_memory")
        vol = _v(ws, f"{plan}.transfer_volume")
        extra = ("AllGather of weights, ReduceScatter of gradients" if vol is None else
                 f"AllGather + ReduceScatter: {_conv(vol, 'GB'):.1f} GB per GPU per step")
        wait = _v(ws, f"{plan}.comm_wait")
        cond = "the gather finishes before its module runs" + (
            "" if wait is None else f" (exposed communication {wait:.3g} s per step)")
        rows.append(("sharding (ZeRO/FSDP)", "replicated weights, gradients or optimizer state",
                     round(_conv(removed, "GiB"), 2), "GiB", extra, cond))
    if _uses(ws, plan, "recompute") and ws.python_value(f"{plan}.recompute.policy") != "none":
        removed = _v(ws, f"{plan}.recompute_saving")
        fl = _v(ws, f"{plan}.recompute_flops")
        rows.append(("recomputation", "activations saved between forward and backward",
                     round(_conv(removed, "MiB"), 2), "MiB",
                     f"rebuild forward values: {fl / 1e6:.4g} M multiplies per micro-batch on this GPU",
                     "the rebuild does not delay a backward pass on the critical path" + (
                         "" if _v(ws, f"{plan}.recompute_time") is None else
                         f" (it adds {_v(ws, f'{plan}.recompute_time'):.3g} s of GPU work per step)")))
    if _uses(ws, plan, "offload"):
        removed = _v(ws, f"{plan}.offload_removed")
        wait = _v(ws, f"{plan}.offload_wait")
        vol = _v(ws, f"{plan}.offload_volume")
        rows.append(("offload", "state not needed on the accelerator for a while",
                     round(_conv(removed, "MiB"), 2), "MiB",
                     f"host↔device transfer of {_conv(vol, 'MiB'):.0f} MiB",
                     f"the data is back before use: T_wait = max(0, V/B − W) = {wait * 1e3:.3g} ms"))
    if not rows:
        return None
    return Table(("method", "memory it removes", "removed", "unit", "extra work", "timing condition that decides"),
                 tuple(rows), ("sharding, recomputation and offload change storage, compute and transfer respectively",))


@hookimpl
def plan_tables_register():
    # A format or method comparison answers "what fits", not "when does it finish": in a
    # finish-time evaluation it is shown on request only (`plan eval --tables all`).
    finish = ("finish_time", "layout_finish_time")
    return [TableSpec("memory-formats", "Matmul weight formats", _formats_table,
                      "bytes per parameter with block scales, weights read by matmuls, scaling, risk",
                      references=("numeric formats: bytes, scaling control and main risk per format (Micikevicius et "
                                  "al. 2018, 'Mixed Precision Training'; Micikevicius et al. 2022, 'FP8 Formats for "
                                  "Deep Learning')",),
                      per_plan=False, hidden_with=finish),
            TableSpec("memory-states", "Training state per GPU", _states_table,
                      "format, whole-model bytes, replicated or sharded, per-GPU share of each state",
                      references=("ZeRO sharding of the training state: Rajbhandari et al. 2020, 'ZeRO: Memory "
                                  "Optimizations Toward Training Trillion Parameter Models'",), per_plan=False),
            TableSpec("memory-peaks", "Memory peaks and the holds live at them", _peaks_table,
                      "each pool's peak on each timeline with the tensors and buffers that make it",
                      references=("peak memory from tensor lifetimes: max over time of persistent + activation + "
                                  "temporary bytes",), per_plan=False),
            TableSpec("memory-methods", "Memory-saving methods in use", _methods_table,
                      "memory removed, extra work and deciding timing condition per method in use",
                      references=("sharding, recomputation and offload compared: memory removed, extra work and when "
                                  "it is paid",),
                      hidden_with=finish)]

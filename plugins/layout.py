"""Parallel layouts: ``use layout`` prices one TP × PP × DP/ZeRO × EP × CP layout on a host
topology; ``use layout_search`` lists the knob values ``plan search`` tries.

``use layout { tp = 2; pp = 1; cp = 1; ep = 1; zero = 3; recompute = "full";
sequence_parallel = true; virtual = 1; activations = "formula"; link = pcie4_x16;
nic = nic_200g; nics_per_host = 8; latency = 10 us; overlap = 0 % }`` on a plan with
``model``, ``workload``, ``device``, ``gpus``, ``gpus_per_host``, ``mfu``, ``micro_batch``
and ``use memory`` (bytes per parameter, usable memory and — for
``activations = "transient"`` — the declared transient budget).

The closed forms live in :mod:`plugins.layout_model` (one text for this block's sympy
quantities and the search's numpy grid): Korthikanti et al. 2022 activation bytes, ring
collectives with per-call latency on the link each group crosses (groups placed innermost
first: TP, CP, DP with EP inside it, PP), ZeRO volumes of ``plugins/zero.py`` (book
§10.3.3), the pipeline bubble (p−1)/(v·m) of the ideal time and p micro-batches in flight on
the first stage under 1F1B (book §10.3; Narayanan et al. 2021).

Quantities (all prefixed ``layout_``): ``dp``, ``micro_batches``, one per step-time term
(``compute``, ``recompute``, ``bubble``, ``tp_comm``, ``cp_comm``, ``ep_comm``, ``pp_comm``,
``dp_comm``), ``step_time``, ``persistent``, ``activation_per_layer``, ``activations``,
``memory_per_gpu``, ``tp_bandwidth``, ``dp_bandwidth``, ``dp_volume``, ``steps``,
``train_time``, ``finish_time``.  Requirements ``layout_<rule>`` for each validity rule
(:func:`plugins.layout_model.rules`), ``layout_fits_memory`` and, with a workload deadline,
``layout_meets_deadline``.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import CommandSpec, Param, TableSpec, UseSpec

from . import layout_model as lm

LAYOUT = UseSpec(
    "layout",
    "one parallel layout (TP × PP × DP/ZeRO × EP × CP) on hosts of GPUs: step time and memory per GPU",
    references=("Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models'",
                "Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM'",
                "Book ch. 10 §10.2.4 (combined parallelism)", "Book ch. 10 §10.3 (overlap, pipeline bubbles)"),
    params=(
        Param("tp", "", "1", "tensor-parallel degree", kind="int", min=1),
        Param("pp", "", "1", "pipeline-parallel degree (stages)", kind="int", min=1),
        Param("dp", "", None, "data-parallel degree (default gpus / (tp·pp·cp))", kind="int", min=1, optional=True),
        Param("cp", "", "1", "context-parallel degree (sequence split)", kind="int", min=1),
        Param("ep", "", "1", "expert-parallel degree (inside the data-parallel group)", kind="int", min=1),
        Param("virtual", "", "1", "interleaved virtual stages per pipeline rank", kind="int", min=1),
        Param("zero", "", "0", "ZeRO stage of the data-parallel group (0 plain DP … 3 weights sharded)",
              kind="int", min=0, max=3),
        Param("recompute", default='"none"', kind="choice", choices=lm.RECOMPUTE,
              doc="activation recomputation: none, selective (attention core) or full (extra forward)"),
        Param("sequence_parallel", default="false", kind="bool",
              doc="Megatron sequence parallelism (reduce-scatter + all-gather instead of all-reduce)"),
        Param("activations", default='"formula"', kind="choice", choices=("formula", "transient"),
              doc="activation memory: Korthikanti formulas, or the `use memory` transient budget"),
        Param("link", kind="ref", ref_kind="link", doc="each GPU's own link inside a host"),
        Param("nic", kind="ref", ref_kind="link", optional=True, doc="the NIC between hosts"),
        Param("nics_per_host", "", "gpus_per_host", "NICs per host sharing the host cut", min=1, whole=True),
        Param("latency", "s", "0 s", "per-call latency of one ring step", min=0),
        Param("overlap", "", "0 %", "share of TP/CP/EP collectives hidden behind compute", min=0, max=1),
        Param("cross_host_tp", default="false", kind="bool", doc="allow a TP group to span hosts"),
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the model trained"),
        Param("workload", kind="ref", ref_kind="workload", doc="the training workload"),
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
        Param("gpus", "", doc="number of GPUs", min=1, whole=True),
        Param("gpus_per_host", "", "8", "GPUs in one host", min=1, whole=True),
        Param("mfu", "", doc="single-GPU compute efficiency (fraction of peak)", min=0, min_open=True, max=1),
        Param("micro_batch", "seq", "1 seq", "sequences per micro-batch", min=0, min_open=True, whole=True),
        Param("input_wait", "s", "0 s", "exposed wait for input data per step", min=0),
    ),
    order=35,
    provides=tuple("layout_" + k for k in (
        "dp", "micro_batches", "compute", "recompute", "bubble", "tp_comm", "cp_comm", "ep_comm", "pp_comm",
        "dp_comm", "step_time", "persistent", "activation_per_layer", "activations", "memory_per_gpu",
        "tp_bandwidth", "dp_bandwidth", "dp_volume", "steps", "train_time", "finish_time")) + ("persistent_memory",),
)

SEARCH = UseSpec(
    "layout_search",
    "the knob values `plan search` tries around the plan's `use layout` (dp = gpus / (tp·pp·cp))",
    params=(
        Param("tp", "", "[1, 2, 4, 8]", "tensor-parallel degrees", kind="list"),
        Param("pp", "", "[1]", "pipeline-parallel degrees", kind="list"),
        Param("cp", "", "[1]", "context-parallel degrees", kind="list"),
        Param("ep", "", "[1]", "expert-parallel degrees", kind="list"),
        Param("virtual", "", "[1]", "interleaved virtual stages", kind="list"),
        Param("micro_batch", "seq", "[1 seq]", "micro-batch sizes", kind="list"),
        Param("zero", "", "[0, 1, 2, 3]", "ZeRO stages", kind="list"),
        Param("recompute", default='["none", "selective", "full"]', kind="list", item="string",
              doc="recomputation modes (none, selective, full)"),
        Param("sequence_parallel", default='["off", "on"]', kind="list", item="string",
              doc="sequence parallelism settings (off, on)"),
    ),
    order=36,
)

# step-time terms -> quantity names
TERM_Q = {"compute": "compute", "recompute": "recompute", "bubble": "bubble", "tp": "tp_comm", "cp": "cp_comm",
          "ep": "ep_comm", "pp": "pp_comm", "dp": "dp_comm", "input": None}


@hookimpl
def plan_blocks_register():
    return [LAYOUT, SEARCH]


def symbolic_constants(ctx, b):
    """The constants ``K`` of :func:`plugins.layout_model.evaluate` as sympy symbols of the
    plan (model fields, workload, device, links, memory bytes per parameter)."""
    from .decoder import architecture, moe_architecture

    model, wl, dev = ctx.ref("model"), ctx.ref("workload"), ctx.ref("device")
    a = architecture(model)
    mo = moe_architecture(model)
    if any(a[k] is None for k in ("L", "h", "nq", "V")):
        ctx.error(f"model '{model.name}' lacks layers/hidden/heads/vocab needed by `use layout`",
                  "describe the architecture or use `model NAME from \"config.json\"`", code="unsupported")
    if ctx.block("memory") is None:
        ctx.error(f"`use layout` in '{ctx.name}' needs `use memory` (bytes per parameter and usable memory)",
                  'add `use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }`',
                  code="missing-parameter")
    N = model.q("params", "param")
    nic = b.ref("nic")
    link = b.ref("link").q("bandwidth", "B/s", positive=True)
    K = {"L": a["L"], "h": a["h"], "a": a["nq"], "kv": a["nkv"], "dh": a["dh"], "V": a["V"], "N": N,
         "N_emb": model.q("embedding_params", "param"),
         "N_exp": model.q("expert_params", "param") if mo["moe"] else sp.Integer(0),
         "E": mo["E"] if mo["moe"] else sp.Integer(0), "topk": mo["k"] if mo["moe"] else sp.Integer(0),
         "L_moe": (a["L"] - mo["Ld"]) if mo["moe"] else sp.Integer(0),
         "fwd_tok": model.q("flops_per_token_forward", "FLOP/token"),
         "s": wl.q("seq_len", "token", positive=True), "B": wl.q("global_batch", "seq", positive=True),
         "peak": dev.q("peak_flops", "FLOP/s", positive=True), "mfu": ctx.param("mfu"),
         "gpus": ctx.param("gpus"), "gph": int(ctx.value("gpus_per_host")),
         "link": link, "nic": nic.q("bandwidth", "B/s", positive=True) if nic is not None else link,
         "nics": b.q("nics_per_host"), "latency": b.q("latency"), "overlap": b.q("overlap"),
         "input": ctx.param("input_wait"),
         # the declared `use memory { transient = … }` budget (memory_per_gpu − persistent_memory)
         "transient": ctx.q("memory_per_gpu", "B") - ctx.q("persistent_memory", "B")}
    for k, state in (("bytes_W", "weights"), ("bytes_G", "grads"), ("bytes_M", "master"), ("bytes_O", "optimizer")):
        K[k] = ctx.q(f"{state}_memory", "B") / N
    return K, mo["moe"]


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("layout")
    if b is None:
        return
    if ctx.block("zero") is not None or ctx.block("compute") is not None:
        ctx.error(f"plan '{ctx.name}' uses `use layout` together with `use compute`/`use zero`",
                  "`use layout` prices compute and the DP/ZeRO collectives itself (zero = …): drop the other blocks",
                  code="conflict")
    K, moe = symbolic_constants(ctx, b)
    t, p, c, e, v = (int(b.value(k)) for k in ("tp", "pp", "cp", "ep", "virtual"))
    gpus = int(ctx.value("gpus"))
    dp = b.value("dp")
    d = int(dp) if dp is not None else max(1, gpus // (t * p * c))
    X = {"t": t, "p": p, "d": d, "c": c, "e": e, "v": v, "b": ctx.param("micro_batch"),
         "z": int(b.value("zero")), "r": lm.RECOMPUTE.index(b.value("recompute")),
         "sp": int(bool(b.value("sequence_parallel")))}
    mode = b.value("activations")
    o = lm.ops("sympy")
    for name, reason, lhs, op, rhs in lm.rules(moe, bool(b.value("cross_host_tp")), dp is not None):
        ctx.require(f"layout_{name}", lhs(K, X), op, rhs(K, X), "", f"rejected when: {reason}")
    r = lm.evaluate(K, X, o, mode, moe)
    ctx.define("layout_dp", sp.Integer(d), "", "data-parallel degree", headline=True, rank=1)
    ctx.define("layout_micro_batches", r["m"], "", "micro-batches per pipeline per step: B / (dp·b)", headline=True,
               rank=2)
    docs = {k: lm.TERM_NAMES[k] for k in lm.TERMS}
    for k, qn in TERM_Q.items():
        if qn:
            ctx.define(f"layout_{qn}", r[k], "s", f"step-time term: {docs[k]}", headline=k in ("compute", "tp", "dp"),
                       rank=3)
    step = ctx.define("layout_step_time", r["step"], "s", "step time: sum of the layout's critical-path terms",
                      headline=True, rank=4)
    # the standard names of the training step (plugins/vocabulary.py), for blocks that read them
    ctx.define("step_time", step, "s", "one training step under the layout (= layout_step_time)", fallback=True)
    ctx.define("layout_persistent", r["persistent"], "GiB", "persistent state per GPU (shards ÷ tp·pp, ZeRO ÷ dp)")
    ctx.define("persistent_memory", r["persistent"], "GiB", "persistent state per GPU under the layout")
    ctx.define("layout_activation_per_layer",
               lm.activation_per_layer(K["s"] / c, X["b"], K["h"], K["a"], t, X["sp"], X["r"], o), "GiB",
               "activation bytes of one layer and micro-batch (Korthikanti et al. 2022)")
    ctx.define("layout_activations", r["activation"], "GiB",
               "activation memory per GPU" + (" (declared transient budget)" if mode == "transient"
                                              else ": stage layers × in-flight micro-batches, or + logits on the last stage"))
    mem = ctx.define("layout_memory_per_gpu", r["memory"], "GiB", "persistent + activations per GPU",
                     headline=True, rank=5)
    ctx.define("layout_tp_bandwidth", r["tp_bw"], "GB/s", "bandwidth of the link the TP ring crosses")
    ctx.define("layout_dp_bandwidth", r["dp_bw"], "GB/s", "bandwidth of the narrowest cut the DP ring crosses")
    ctx.define("layout_dp_volume", r["dp_volume"], "GB", "bytes each GPU sends per step in its DP group")
    usable = ctx.q("usable_memory", "B")
    ctx.require("layout_fits_memory", mem, "<=", usable, "GiB", "memory per GPU within the usable memory")
    wl = ctx.ref("workload")
    if wl.has("tokens"):
        steps = ctx.define("layout_steps", sp.ceiling(wl.q("tokens", "token") / (K["s"] * K["B"])), "",
                           "optimizer steps")
        L_ck = ctx.q("overhead", "") if ctx.block("checkpoint") is not None else 0
        train = ctx.define("layout_train_time", steps * step, "day", "steps × step time")
        ctx.define("steps", steps, "", "optimizer steps (= layout_steps)", fallback=True)
        ctx.define("train_time", train, "day", "steps × step time (= layout_train_time)", fallback=True)
        if wl.has("deadline"):
            reserved = wl.q("reserved", "s") if wl.has("reserved") else 0
            fin = ctx.define("layout_finish_time", reserved + train * (1 + L_ck), "day",
                             "T_0 + steps · t_s · (1 + L)", headline=True, rank=6,
                             references=("Book ch. 10 §10.6.1 (first-order finish time)",))
            ctx.require("layout_meets_deadline", fin, "<=", wl.q("deadline", "s"), "day",
                        "the job finishes by the deadline")
            ctx.define("finish_time", fin, "day", "calendar time to finish (= layout_finish_time)", fallback=True)


# kind of each term's activity on the `layout` timeline (Gantt colours)
TERM_KIND = {"input": "wait", "compute": "compute", "recompute": "forward", "bubble": "wait", "tp": "comm",
             "cp": "comm", "ep": "comm", "pp": "transfer", "dp": "comm"}


@hookimpl
def plan_activities_schedule(ctx):
    """Timeline ``layout_step``: the step's critical path as a chain of its non-zero terms on the
    GPU (input wait, compute, recomputation, bubble, exposed TP/CP/EP, pipeline fill/drain
    sends, exposed DP/ZeRO); its makespan equals ``layout_step_time``."""
    b = ctx.block("layout")
    if b is None:
        return
    tl = ctx.timeline("layout_step")
    prev = None
    for k in ("input",) + tuple(t for t in lm.TERMS if t != "input"):
        q = ctx.param("input_wait") if k == "input" else ctx.q(f"layout_{TERM_Q[k]}")
        if k != "input" and ctx.nominal(q) == 0:
            continue
        tl.add(k, q, "gpu", after=[prev] if prev else [], doc=lm.TERM_NAMES[k], kind=TERM_KIND[k],
               label=k, style="hatched" if k in ("bubble", "input") else "")
        prev = k


def _search_table(ws, plan):
    if "layout_search" not in ws.decls[plan].uses:
        return None
    from plugins import layout_search as search
    res = search.run(ws, plan)
    return search.table(res)


def _draw_search(ws, plan, fig) -> bool:
    """Step time against memory per GPU of every valid layout, coloured by tp, the Pareto
    front joined, the best layout marked, usable memory and the deadline's step budget."""
    if "layout_search" not in ws.decls[plan].uses:
        return False
    from plugins import layout_search as search
    res = search.run(ws, plan)
    c = res.columns
    valid = c["valid"]
    if not valid.any():
        return False
    gib = 2.0 ** 30
    ax = fig.subplots()
    fig.set_size_inches(7, 4.2)
    for t in sorted(set(c["t"][valid].tolist())):
        sel = valid & (c["t"] == t)
        ax.plot(c["memory"][sel] / gib, c["step"][sel], "o", ms=3.5, alpha=0.75, label=f"tp = {t}")
    front = res.pareto
    ax.plot(c["memory"][front] / gib, c["step"][front], "-", color="black", lw=0.8, label="Pareto front")
    ax.plot([c["memory"][res.best] / gib], [c["step"][res.best]], "*", color="black", ms=11, label="best")
    ax.axvline(res.meta["usable"] / gib, color="#C44E52", lw=1, label="usable memory")
    m = res.meta
    if m["deadline"] and m["steps"]:
        budget = (m["deadline"] - m["reserved"]) / (m["steps"] * (1 + m["overhead"]))
        ax.axhline(budget, color="#8172B2", lw=1, ls="--", label=f"step budget {budget:.3g} s")
    ax.set_xlabel("memory per GPU (GiB)")
    ax.set_ylabel("step time (s)")
    ax.set_title(f"{plan}: {int(valid.sum())} valid of {len(res)} layouts ({m['activations']} activations)",
                 fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


@hookimpl
def plan_figures_register():
    from dsl.plugin import FigureSpec
    return [FigureSpec("layout-search", "Step time vs memory per GPU of the valid layouts, Pareto front",
                       _draw_search, "every valid layout of `use layout_search`, the front and the best")]


@hookimpl
def plan_tables_register():
    return [TableSpec("layout-search", "Layout search: the best valid layouts, the Pareto front and the rejections",
                      _search_table)]


@hookimpl
def plan_commands_register():
    from . import layout_search as search
    return [CommandSpec("search", search.SEARCH_HELP, search.add_arguments, search.run_command,
                        search.SEARCH_DESCRIPTION)]

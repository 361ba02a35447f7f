"""The training step: one model of a plan's step time and memory per GPU under its parallel
layout (TP × PP × DP/ZeRO × EP × CP) on a host topology.  ``use layout_search`` lists the
knob values ``plan search`` tries.

``use layout { tp = 2; pp = 4; cp = 1; ep = 1; zero = 3; schedule = "1f1b";
stage_layers = [10, 10, 10, 6]; recompute = "full"; sequence_parallel = true;
attention = "flash"; activation_precision = "bf16"; link = nvlink4; nic = nic_400g;
nics_per_host = 8; latency = 10 us; overlap = 0 %; prefetch = true }`` on a plan with
``model``, ``workload``, ``device``, ``gpus``, ``gpus_per_host``, ``mfu``, ``micro_batch``,
``input_wait`` and ``use memory`` (bytes per parameter and usable memory).  Every knob has a
default: ``use layout {}`` is plain data parallelism over all GPUs (tp = pp = cp = ep = 1,
ZeRO-0).  The older spellings are thin aliases of the same model: ``use compute {}`` prices
the step with the default layout, and ``use zero { stage; group; link; nic; nics_per_host;
prefetch }`` sets ``zero``, ``dp``, ``link``, ``nic``, ``nics_per_host`` and ``prefetch``.

Compute is priced one of two ways (``efficiency``): ``"mfu"`` — every FLOP at the plan's
``mfu`` (the default when the plan states it) — or ``"roofline"`` — each matrix product and
memory-bound operation of a layer on the device's curves (``matmul_efficiency``,
``matmul_half_flops``, ``mem_efficiency``, ``mem_bw``; :func:`plugins.training.layout_model.roofline`),
the default when the plan states no ``mfu``.  ``mfu_achieved`` reports the step's model FLOP
utilisation in both modes.

The closed forms live in :mod:`plugins.training.layout_model` (one text for this block's sympy
quantities and the search's numpy grid): Korthikanti et al. 2022 activation bytes
generalised per tensor (FlashAttention keeps no s×s scores; activation precision), ring
collectives with per-call latency on the link each group crosses (groups placed innermost
first: TP, CP, DP with EP inside it, PP), ZeRO volumes and their exposure (book §10.3.3;
MegaScale).  With pp > 1 the pipeline is scheduled by the event engine of ``use pipeline``
(any of its schedules, uneven ``stage_layers``): its makespan replaces the closed-form
bubble (p−1)/(v·m), which the search keeps for speed, and the per-stage activation peaks
of the schedule set the activation memory.

Standard quantities (plugins/vocabulary.py): ``step_time`` (makespan of the ``step``
timeline), ``compute_time``, ``memory_per_gpu`` (persistent state + activations, always),
``memory_margin``, ``steps``, ``train_time``, ``finish_time`` (fallbacks ``use finish``
refines), requirement ``fits_memory``; and ``dp``, ``micro_batches``, ``recompute_time``,
``bubble_time``, ``tp_comm``, ``cp_comm``, ``ep_comm``, ``dp_comm``, ``comm_wait``,
``transfer_volume``, ``transfer_time``, ``link_bandwidth``, ``tp_bandwidth``,
``persistent_memory``, ``weights_per_gpu`` … ``optimizer_per_gpu``,
``activation_per_layer``, ``activation_memory``.  Validity rules are requirements named
after the rule (:func:`plugins.training.layout_model.rules`), emitted when the knob they test is
not trivially 1.

Book provenance of the quantities' references: ch. 10 §10.1.1 (steps of a run), §10.1.2 (bytes per
parameter by format), §10.1.3 (per-GPU compute time), §10.2.1 (ZeRO stages), §10.2.4 (combined
parallelism, transient memory), §10.3.4 (expert capacity and imbalance), §10.6.1 (first-order
finish time).

The tables and the figure this block registers (the layout search, parameters per pipeline
stage) are built in :mod:`plugins.training.layout_reports`.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import CommandSpec, Param, TableSpec, UseSpec, ceiling_of

from plugins.model import flops
from plugins.reliability.finish import require_time_to_train
from plugins.training import layout_model as lm
from plugins.training.layout_formats import attention_constants, device_curve, lowp_constants
from plugins.training import layout_pipeline, layout_stated, layout_reports
from plugins.training.layout_reports import stage_params  # noqa: F401 (callers import it from here)

SCHEDULES = ("1f1b", "interleaved", "fill_drain", "zb_h1", "zb_h2", "dualpipe")

KNOB_PARAMS = (
    Param("tp", "", "1", "tensor-parallel degree", kind="int", min=1),
    Param("pp", "", "1", "pipeline-parallel degree (stages)", kind="int", min=1),
    Param("dp", "", None, "data-parallel degree (default gpus / (tp·pp·cp))", kind="int", min=1, optional=True),
    Param("cp", "", "1", "context-parallel degree (sequence split)", kind="int", min=1),
    Param("ep", "", "1", "expert-parallel degree (inside the data-parallel group)", kind="int", min=1),
    Param("etp", "", None, "expert tensor-parallel degree of the MoE layers' experts (Megatron's ETP; default tp)",
          kind="int", min=1, optional=True),
    Param("routing_imbalance", "", "1", "dispatches of the most loaded expert-parallel rank over the mean (default: "
          "from `use moe_routing` when the plan has it, else balanced)", min=1),
    Param("ep_nodes_per_token", "", None, "node-limited routing: a token's experts lie on at most this many hosts "
          "and the dispatch sends one copy per host, forwarded inside it (DeepSeek-V3: 4 with DeepEP; default: "
          "unlimited, the pairwise all-to-all)", kind="int", min=1, optional=True),
    Param("virtual", "", "1", "interleaved virtual stages per pipeline rank", kind="int", min=1),
    Param("schedule", default='"1f1b"', kind="choice", choices=SCHEDULES,
          doc="pipeline schedule when pp > 1 (interleaved needs virtual ≥ 2)"),
    Param("stage_layers", "", None, "layers of each of the pp·virtual pipeline chunks in order (default: the "
          "split `balance` chooses)", kind="list", optional=True, min_items=1),
    Param("balance", default='"layers"', kind="choice", choices=layout_pipeline.BALANCE,
          doc="how the layers are split over the pp·virtual chunks when stage_layers is not given: layers (as "
              "even as possible, the lighter chunks at the ends) or compute (the busiest chunk's layers plus the "
              "embedding on the first and the LM head and loss on the last as small as possible)"),
    Param("zero", "", "0", "ZeRO stage of the data-parallel group (0 plain DP … 3 weights sharded)",
          kind="int", min=0, max=3),
    Param("prefetch", default="true", kind="bool",
          doc="DP/ZeRO collectives overlap compute (parameters prefetched, gradients reduced in backward)"),
    Param("reshard_after_forward", default="true", kind="bool",
          doc="ZeRO-3/FSDP frees each layer's gathered parameters after its forward and gathers them again "
              "for its backward (FSDP2's default); false keeps them gathered from forward to backward: one "
              "all-gather fewer per micro-batch, the stage's unsharded parameters held.  With pp > 1 a stage's "
              "parameters are gathered once per step either way"),
    Param("recompute", default='"none"', kind="choice", choices=lm.RECOMPUTE,
          doc="activation recomputation: none, selective (attention core) or full (extra forward)"),
    Param("sequence_parallel", default="false", kind="bool",
          doc="Megatron sequence parallelism (reduce-scatter + all-gather instead of all-reduce)"),
    Param("activations", default='"auto"', kind="choice", choices=("auto", "formula", "transient"),
          doc="activation memory: auto (the `use memory` transient budget when one is declared, else the "
              "formulas), formula, or transient"),
    Param("attention", default='"flash"', kind="choice", choices=lm.ATTENTION,
          doc="flash: fused attention keeps no s×s scores (modern stacks); eager: scores and softmax kept"),
    Param("attention_kernel", default='"auto"', kind="choice", choices=tuple(lm.ATTENTION_KERNELS),
          doc="the fused attention kernel and so the device efficiency it runs at: flash2, flash3, cudnn "
              "(the device's <kernel>_attention_efficiency), gemm (the GEMM curve); auto: the framework's"),
    Param("dropout", default="false", kind="bool", doc="dropout layers keep one-byte masks"),
    Param("activation_precision", default='"bf16"', kind="choice", choices=tuple(lm.PRECISION_BYTES),
          doc="format of the saved activations"),
    Param("matmul_precision", default='"bf16"', kind="choice", choices=lm.MATMUL_PRECISIONS,
          doc="format of the linear layers' matrix products (QKV, output projection, MLP, experts; forward, dgrad "
              "and wgrad): fp8 and fp4 run at the device's fp8_flops / fp4_flops with their casts priced as "
              "memory traffic and the low-precision weight copy held; attention and the LM head stay bf16"),
    Param("fp8_recipe", default='"delayed"', kind="choice", choices=lm.FP8_RECIPES,
          doc="FP8 scaling: delayed (per-tensor, amax history), current (per-tensor, an amax pass before each "
              "cast), blockwise (1x128 and 128x128 FP32 scales), mxfp8 (one 8-bit scale per 32 elements); "
              "fp4 runs NVFP4 scaling"),
    Param("lm_head", default="true", kind="bool",
          doc="the last stage keeps the LM-head logits (FP32) for the loss; false for a classifier head"),
    Param("loss", default='"fp32"', kind="choice", choices=lm.LOSSES,
          doc="how the runtime computes the cross-entropy: fp32 (the logits cast to FP32 and an unfused "
              "log-softmax: 14 bytes per logit live at its backward, in runtime_memory), compiled (the same under "
              "torch.compile: the 16-bit logits and their gradient, 4 bytes per logit) or fused (a fused or "
              "chunked loss that never materialises the whole vocabulary)"),
    Param("cublas_workspace", "B", "32 MiB", "cuBLAS workspace the runtime allocates through its caching "
          "allocator (cuBLAS's recommended size on Hopper and later; 4 MiB before)", min=0),
    Param("allocator_reserve", "", "0 %", "what the caching allocator reserves beyond the bytes allocated at the "
          "peak (fragmentation), as a share of them: no default is claimed; read it from a measured run as "
          "max_memory_reserved / max_memory_allocated − 1", min=0),
    Param("link", kind="ref", ref_kind="link", optional=True, doc="each GPU's own link inside a host"),
    Param("nic", kind="ref", ref_kind="link", optional=True, doc="the NIC between hosts"),
    Param("nics_per_host", "", "gpus_per_host", "NICs per host sharing the host cut", min=1, whole=True),
    Param("latency", "s", "0 s", "per-call latency of one ring step", min=0),
    *lm.OVERLAP_PARAMS,
    Param("cross_host_tp", default="false", kind="bool", doc="allow a TP group to span hosts"),
    Param("efficiency", kind="choice", choices=lm.EFFICIENCY, optional=True,
          doc="how compute is priced: mfu (every FLOP at the plan's `mfu`), roofline (each matrix product on "
              "the device's efficiency curve, memory-bound work at its bandwidth) or stated (the whole step from "
              "a stated throughput); default stated when the plan states one, mfu when it states `mfu`, else "
              "roofline"),
    Param("stated_tokens_per_s", "token/s", None, "a measured end-to-end throughput of all GPUs: the step is "
          "tokens per step / it, nothing of the layout added (efficiency = \"stated\")", min=0, min_open=True,
          optional=True),
    Param("stated_tflops", "TFLOP/s", None, "a measured end-to-end throughput per GPU, its FLOPs counted as "
          "stated_flops says: the step is FLOPs per step / (gpus · it) "
          "(efficiency = \"stated\")", min=0, min_open=True, optional=True),
    Param("stated_flops", default='"exact"', kind="choice", choices=flops.CONVENTIONS,
          doc="how the source of stated_tflops counts FLOPs (\"hardware\": recomputation included, as Narayanan "
              "et al. 2021; \"megatron\": Megatron-LM/NeMo's logged TFLOP/s/GPU)"),
    Param("offload", default='"none"', kind="choice", choices=("none", "optimizer"),
          doc="optimizer: ZeRO-Offload keeps master weights and optimizer states in host memory and runs the "
              "optimizer step on the CPU"),
    Param("host_link", kind="ref", ref_kind="link", optional=True,
          doc="the GPU's link to host memory for the offloaded optimizer (default: link)"),
    Param("host_bandwidth", "GB/s", None, "host memory bandwidth one GPU's CPU optimizer step streams at "
          "(needed with offload)", min=0, min_open=True, optional=True),
)

PLAN_PARAMS = (
    Param("model", kind="ref", ref_kind="model", doc="the model trained"),
    Param("workload", kind="ref", ref_kind="workload", doc="the training workload"),
    Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
    Param("gpus", "", doc="number of GPUs", min=1, whole=True),
    Param("gpus_per_host", "", "8", "GPUs in one host", min=1, whole=True),
    Param("mfu", "", doc="single-GPU compute efficiency (fraction of peak); optional with efficiency = "
          "\"roofline\"", min=0, min_open=True, max=1, optional=True),
    Param("micro_batch", "seq", "1 seq", "sequences per micro-batch", min=0, min_open=True, whole=True),
    Param("input_wait", "s", "0 s", "exposed wait for input data per step", min=0),
)

STEP_PROVIDES = ("hosts", "tokens_per_step", "flops_per_token", "flops_per_step", "flops_total", "imbalance_time", "dp", "micro_batches", "compute_time", "compute_per_microbatch",
                 "recompute_time", "bubble_time", "pipeline_time", "tp_comm", "cp_comm", "ep_comm", "dp_comm",
                 "comm_wait", "input_wait", "step_time", "transfer_volume", "transfer_time",
                 "transfer_per_microbatch", "link_bandwidth", "tp_bandwidth", "comm_head", "comm_tail",
                 "gather_time", "persistent_memory", "weights_per_gpu", "grads_per_gpu", "master_per_gpu",
                 "optimizer_per_gpu", "activation_per_layer", "activation_memory", "memory_per_gpu",
                 "memory_margin", "steps", "train_time", "finish_time",
                 # the runtime's memory; with `offload = "optimizer"` (ZeRO-Offload); achieved utilisation
                 # (and with efficiency = "roofline" the optimizer step on the GPU); with matmul_precision =
                 # "fp8" or "fp4": the casts and the low-precision weight copy
                 "loss_memory", "recompute_memory", "gathered_memory", "workspace_memory", "pipeline_memory",
                 "allocator_memory",
                 "runtime_memory", "runtime_margin", "optimizer_offload_time", "optimizer_host_traffic",
                 "optimizer_cpu_time", "host_memory_per_gpu", "mfu_achieved", "compute_mfu", "optimizer_time",
                 "cast_time", "matmul_copy_per_gpu", "scaling_state_per_gpu")
# the quantities the step defines only under a condition, with the field that enables each
STEP_PROVIDES_WHEN = (
    ("cast_time", 'matmul_precision = "fp8" or "fp4" in `use layout` with efficiency = "roofline"'),
    ("matmul_copy_per_gpu", 'matmul_precision = "fp8" or "fp4" in `use layout`, with `use memory`'),
    ("scaling_state_per_gpu", 'matmul_precision = "fp8" or "fp4" in `use layout`, with `use memory`'),
    ("steps", "the plan's workload has `tokens`"),
    ("train_time", "the plan's workload has `tokens` (e.g. `tokens = 100e9 token`)"),
    ("finish_time", "the plan's workload has `tokens` (e.g. `tokens = 100e9 token`)"),
    ("tp_comm", "tp > 1"), ("cp_comm", "cp > 1"), ("ep_comm", "ep > 1"),
    ("loss_memory", "`use memory`, lm_head = true and activations from the formulas (not a declared transient)"),
    ("gathered_memory", "`use memory` and activations from the formulas (a declared transient holds it)"),
    ("pipeline_memory", 'pp > 1 with framework = "torchtitan" (torch.distributed.pipelining), `use memory`'),
    ("workspace_memory", "`use memory` and activations from the formulas (a declared transient holds it)"),
)

LAYOUT = UseSpec(
    "layout",
    "the training step under a parallel layout (TP × PP × DP/ZeRO × EP × CP): step time and memory per GPU",
    references=("Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models'",
                "Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM'",
                "Dao et al. 2022, 'FlashAttention'",
                "combined parallelism: per-GPU memory and per-link traffic of TP × PP × DP",
                "communication overlap and pipeline bubbles (p−1)/(v·m)",
                "ZeRO communication volume: Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations Toward Training "
                "Trillion Parameter Models'",
                "Jiang et al. 2024, 'MegaScale' (exposed communication)"),
    params=KNOB_PARAMS,
    plan_params=PLAN_PARAMS,
    order=35,
    provides=STEP_PROVIDES,
    provides_when=STEP_PROVIDES_WHEN,
)

#: largest degree or micro-batch a search list may hold (a product of three stays within int64)
SEARCH_MAX = 1_000_000

SEARCH = UseSpec(
    "layout_search",
    "the knob values `plan search` tries around the plan's `use layout` (dp = gpus / (tp·pp·cp))",
    params=(
        Param("tp", "", "[1, 2, 4, 8]", "tensor-parallel degrees", kind="list", min=1, max=SEARCH_MAX, min_items=1),
        Param("pp", "", "[1]", "pipeline-parallel degrees", kind="list", min=1, max=SEARCH_MAX, min_items=1),
        Param("cp", "", "[1]", "context-parallel degrees", kind="list", min=1, max=SEARCH_MAX, min_items=1),
        Param("ep", "", "[1]", "expert-parallel degrees", kind="list", min=1, max=SEARCH_MAX, min_items=1),
        Param("virtual", "", "[1]", "interleaved virtual stages", kind="list", min=1, max=SEARCH_MAX, min_items=1),
        Param("micro_batch", "seq", "[1 seq]", "micro-batch sizes", kind="list", min=1, max=SEARCH_MAX, min_items=1),
        Param("zero", "", "[0, 1, 2, 3]", "ZeRO stages", kind="list", min=0, max=3, min_items=1),
        Param("recompute", default='["none", "selective", "full"]', kind="list", item="string", min_items=1,
              doc="recomputation modes (none, selective, full)"),
        Param("sequence_parallel", default='["off", "on"]', kind="list", item="string", min_items=1,
              doc="sequence parallelism settings (off, on)"),
        Param("offload", default='["none"]', kind="list", item="string", min_items=1,
              doc="optimizer offload settings (none, optimizer; optimizer needs host_bandwidth in `use layout`)"),
        Param("batch_tolerance", "", "0 %", "a layout whose dp·micro-batch does not divide the global batch "
              "trains the nearest batch that does, within ± this share (0: the batch is exact)", min=0, max=1),
    ),
    order=36,
)

# `use zero` parameter -> layout knob (the alias)
ZERO_ALIAS = {"zero": "stage", "dp": "group", "link": "link", "nic": "nic", "nics_per_host": "nics_per_host",
              "prefetch": "prefetch", "reshard_after_forward": "reshard_after_forward"}
DEFAULTS = {"tp": 1, "pp": 1, "dp": None, "cp": 1, "ep": 1, "etp": None, "routing_imbalance": 1,
            "ep_nodes_per_token": None, "tp_overlap": None, "cp_overlap": None, "ep_overlap": None, "framework": "none",
            "tp_comm_overlap": "auto",
            "stated_tokens_per_s": None, "stated_tflops": None, "stated_flops": "exact", "attention_kernel": "auto", "virtual": 1, "schedule": "1f1b", "stage_layers": None, "balance": "layers",
            "zero": 0, "prefetch": True, "recompute": "none", "sequence_parallel": False, "activations": "auto",
            "attention": "flash", "dropout": False, "activation_precision": "bf16", "matmul_precision": "bf16",
            "fp8_recipe": "delayed", "lm_head": True, "link": None, "nic": None, "nics_per_host": None, "latency": 0,
            "overlap": 0, "cross_host_tp": False, "offload": "none", "host_link": None, "host_bandwidth": None,
            "efficiency": None, "reshard_after_forward": True, "loss": "fp32", "cublas_workspace": lm.CUBLAS_WORKSPACE,
            "allocator_reserve": 0}


@hookimpl
def plan_blocks_register():
    return [LAYOUT, SEARCH]


def has_step(ctx) -> bool:
    """True when the plan prices a training step (``use layout`` or its alias ``use compute``)."""
    return ctx.block("layout") is not None or ctx.block("compute") is not None


class Knobs:
    """The layout's knobs, read from ``use layout`` or from its aliases (``use zero``, and the
    defaults of plain data parallelism for ``use compute``)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.lay, self.zero = ctx.block("layout"), ctx.block("zero")
        if self.lay is not None and self.zero is not None:
            ctx.error(f"plan '{ctx.name}' states its ZeRO sharding twice: `use layout` and `use zero`",
                      "write it once: `use layout { zero = 3; link = … }` (`use zero` is the same knob)",
                      code="conflict")

    def _src(self, name):
        if self.lay is not None:
            return self.lay, name
        alias = ZERO_ALIAS.get(name)
        if self.zero is not None and alias is not None:
            return self.zero, alias
        return None, name

    def value(self, name):
        b, key = self._src(name)
        if name == "dp" and b is self.zero and b is not None and not b.given(key):
            return None        # `use zero { group }` defaults to all the plan's GPUs
        if b is None:
            v = DEFAULTS[name]
            return int(self.ctx.value("gpus_per_host")) if name == "nics_per_host" else v
        return b.value(key)

    def q(self, name):
        b, key = self._src(name)
        if b is None:
            if name == "nics_per_host":
                return self.ctx.param("gpus_per_host")
            return sp.Integer(DEFAULTS[name])
        return b.q(key)

    def ref(self, name):
        b, key = self._src(name)
        return None if b is None else b.ref(key)

    def given(self, name):
        b, key = self._src(name)
        return b is not None and b.given(key)

    def error_at(self, name, summary, hint="", code="out-of-range"):
        b, key = self._src(name)
        if b is None:
            self.ctx.error(summary, hint, code=code)
        b.error_at(key, summary, hint, code)


def _mlp_width(a, mo):
    """MLP width per token averaged over layers: the dense FFN, or the active experts' width
    (routed top-k plus shared) on MoE layers."""
    if not mo["moe"]:
        return a["f"]
    moe_w = mo["fe"] * (mo["k"] + mo["ks"])
    Ld = mo["Ld"]
    dense = a["f"] if a["f"] is not None else moe_w
    return (Ld * dense + (a["L"] - Ld) * moe_w) / a["L"]


def efficiency_mode(ctx, kn: Knobs) -> str:
    """The compute mode of the plan's step (:func:`plugins.training.layout_stated.default_mode`),
    with its located errors and warnings."""
    given = kn.value("efficiency")
    stated = ctx.stated("mfu")
    mode = layout_stated.default_mode(given, bool(layout_stated.given(kn)), stated)
    layout_stated.check(ctx, kn, mode)
    if mode == "mfu" and not stated:
        kn.error_at("efficiency", f"efficiency = \"mfu\" prices compute at the plan's `mfu`, which plan "
                    f"'{ctx.name}' does not state", "add `mfu = 40 %` to the plan, or set efficiency = \"roofline\"",
                    code="missing-parameter")
    own = any(getattr(a, "name", None) == "mfu" for a in ctx.info.ast.assigns)   # written here, not inherited
    if mode == "roofline" and own and given is not None:
        ctx.warn(f"plan '{ctx.name}' states `mfu`, but efficiency = \"roofline\" prices its training step from "
                 "the device's curves: the step does not read that mfu", "drop `mfu` (blocks that read it, such as "
                 "`use recompute`, still do), or set efficiency = \"mfu\" to price the step at it",
                 code="unused")
    return mode


def symbolic_constants(ctx, kn: Knobs, link, nic):
    """The constants ``K`` of :func:`plugins.training.layout_model.evaluate` as sympy symbols of the
    plan (model fields, workload, device, links, memory bytes per parameter)."""
    from plugins.model.decoder import architecture, attention_pairs, attention_params, moe_architecture, score_keys

    model, wl, dev = ctx.ref("model"), ctx.ref("workload"), ctx.ref("device")
    a = architecture(model)
    mo = moe_architecture(model)
    if any(a[k] is None for k in ("L", "h", "nq", "V")):
        ctx.error(f"model '{model.name}' lacks layers/hidden/heads/vocab needed by the training step",
                  "describe the architecture or use `model NAME from \"config.json\"`", code="unsupported")
    N = model.q("params", "param")
    mem = ctx.block("memory")
    K = {"L": a["L"], "h": a["h"], "a": a["nq"], "kv": a["nkv"], "dh": a["dh"], "V": a["V"], "N": N,
         "f": _mlp_width(a, mo), "mats": a["mats"],
         "N_emb": model.q("embedding_params", "param"),
         "N_exp": model.q("expert_params", "param") if mo["moe"] else sp.Integer(0),
         "E": mo["E"] if mo["moe"] else sp.Integer(0), "topk": mo["k"] if mo["moe"] else sp.Integer(0),
         "L_moe": (a["L"] - mo["Ld"]) if mo["moe"] else sp.Integer(0),
         # forward matrix FLOPs per token: the model's field, priced by plugins.model.flops
         "fwd_tok": model.q("flops_per_token_forward", "FLOP/token"), "head_tok": flops.lm_head_forward_per_token(a),
         "dv": flops.head_widths(a, mo)[1],
         # query–key pairs per token over all layers: sliding-window layers and encoders
         # (causal full layers only: None, the closed form's L·(s+1)/2)
         "attn_pairs": (attention_pairs(a, wl.q("seq_len", "token")) / wl.q("seq_len", "token")
                        if a.get("window") is not None or not a.get("causal", True) else None),
         "s": wl.q("seq_len", "token", positive=True), "B": wl.q("global_batch", "seq", positive=True),
         # keys per query of eager attention's saved scores: min(s, window) on sliding-window layers
         "score_keys": score_keys(a, wl.q("seq_len", "token", positive=True)),
         "peak": dev.q("peak_flops", "FLOP/s", positive=True),
         "gpus": ctx.param("gpus"), "gph": int(ctx.value("gpus_per_host")),
         "link": link if link is not None else sp.oo, "nic": nic if nic is not None else (link if link is not None
                                                                                          else sp.oo),
         "nics": kn.q("nics_per_host"), "latency": kn.q("latency"), "overlap": kn.q("overlap"),
         **lm.collective_overlaps({c: kn.q(f"{c}_overlap") if kn.value(f"{c}_overlap") is not None else None
                                  for c in ("tp", "cp", "ep")}, kn.q("overlap"), kn.value("schedule"),
                                 kn.value("framework"), kn.value("tp_comm_overlap")),
         "input": ctx.param("input_wait"), "prefetch": int(bool(kn.value("prefetch"))),
         "act_bytes": sp.Integer(lm.PRECISION_BYTES[kn.value("activation_precision")]),
         "flash": int(kn.value("attention") == "flash"), "dropout": int(bool(kn.value("dropout"))),
         "logits": int(bool(kn.value("lm_head"))), "loss": sp.Integer(lm.LOSS_BYTES[kn.value("loss")]),
         "cublas_ws": kn.q("cublas_workspace"), "reserve": kn.q("allocator_reserve"),
         "raf": int(bool(kn.value("reshard_after_forward"))),
         **lm.framework_memory_constants(kn.value("framework"), kn.value("matmul_precision"), kn.value("loss")),
         # routed experts' training FLOPs per token (the shared experts run on every rank)
         "exp_tok": (model.q("expert_flops_per_token", "FLOP/token") * mo["k"] / (mo["k"] + mo["ks"])
                     if mo["moe"] else sp.Integer(0)),
         "imb": (ctx.q("max_device_rows", "token") / ctx.q("mean_device_rows", "token")
                 if mo["moe"] and ctx.provided("max_device_rows") and not kn.given("routing_imbalance")
                 else kn.q("routing_imbalance")),
         "transient": ctx.q("transient_memory", "B") if mem is not None else sp.Integer(0)}
    if dev.has(lm.TP_OVERLAP_FIELD):     # the decomposed TP overlap's share of its ideal (absent: all of it)
        K["ring_eff_tp"] = dev.q(lm.TP_OVERLAP_FIELD, "")
    if kn.value("ep_nodes_per_token") is not None:      # node-limited routing (the dispatch's NIC bytes)
        if not mo["moe"]:
            kn.lay.warn_at("ep_nodes_per_token", f"model '{model.name}' has no experts: ep_nodes_per_token is "
                           "not read", "drop it", code="unused")
        K["ep_nodes"] = kn.q("ep_nodes_per_token")
    K["mode"] = efficiency_mode(ctx, kn)
    if K["mode"] == "mfu":
        K["mfu"] = ctx.param("mfu")
    elif K["mode"] == "stated":
        K["mfu"] = sp.Integer(1)        # not read: the stated step replaces the compute (layout_stated)
    else:
        K.update(device_curve(dev))
        K.update(attention_constants(dev, lm.attention_field(kn.value("attention_kernel"), kn.value("framework"))))
    lowp = lowp_constants(ctx, kn, dev, model, K)
    if K["mode"] == "roofline" or lowp:
        # no shared experts: a structural zero, so that the layer table has no empty GEMM
        mo_s = dict(mo, ks=sp.Integer(0)) if mo["moe"] and ctx.nominal(mo["ks"]) == 0 else mo
        K.update(lm.shape_constants(a, mo_s, attention_params(a, mo, matrices_only=True)))
    if mem is not None:
        for k, state in (("bytes_W", "weights"), ("bytes_G", "grads"), ("bytes_M", "master"),
                         ("bytes_O", "optimizer")):
            K[k] = ctx.q(f"{state}_memory", "B") / N
    else:
        for k in ("bytes_W", "bytes_G", "bytes_M", "bytes_O"):
            K[k] = sp.Integer(0)
    return K, mo["moe"]


def _link_constants(link_ref, nic_ref) -> dict:
    """The collective fields (``latency``, ``launch``, ``efficiency``, ``nvls`` …) of the link
    and of the NIC (default: the link) as the ``K`` keys of :func:`plugins.training.layout_model.link_dicts`;
    the step reads them in roofline mode only."""
    from plugins.hardware.collectives import link_fields
    out = {}
    for prefix, ref in (("link", link_ref), ("nic", nic_ref if nic_ref is not None else link_ref)):
        if ref is None:
            continue
        f = link_fields(ref)
        out[prefix + "_nvls"] = f["nvls"]
        for key, suffix in lm.LINK_KEYS:
            if key in f:
                out[prefix + suffix] = f[key]
    return out


def _offload_knobs(ctx, kn, K, X, link):
    """`offload = "optimizer"` (ZeRO-Offload): the host link and host bandwidth into ``K``."""
    X["off"] = int(kn.value("offload") == "optimizer")
    if not X["off"]:
        return
    host = kn.ref("host_link")
    K["host_link"] = host.q("bandwidth", "B/s", positive=True) if host is not None else link
    if K["host_link"] is None:
        kn.error_at("offload", "the offloaded optimizer needs the GPU's link to host memory",
                    "add `host_link = …` (or `link = …`) to `use layout`", code="missing-parameter")
    if not kn.given("host_bandwidth"):
        kn.error_at("offload", "the CPU optimizer step needs the host memory bandwidth it streams at",
                    "add `host_bandwidth = …` (e.g. 50 GB/s per GPU) to `use layout`", code="missing-parameter")
    K["host_bw"] = kn.q("host_bandwidth")


def _activation_mode(ctx, kn):
    mode = kn.value("activations")
    if mode != "auto":
        return mode
    mem = ctx.block("memory")
    declared = mem is not None and mem.given("transient") or ctx.block("buffers") is not None
    return "transient" if declared else "formula"


def _memory_only(ctx):
    """`use zero` without a training step: the persistent state per GPU and activations."""
    kn = Knobs(ctx)
    if ctx.block("memory") is None:
        return
    z = int(kn.value("zero"))
    d = kn.q("dp") if kn.value("dp") is not None else sp.Integer(1)
    W, G, M, O = (ctx.q(f"{k}_memory", "B") for k in ("weights", "grads", "master", "optimizer"))
    sharded = {"weights": z >= 3, "grads": z >= 2, "master": z >= 1, "optimizer": z >= 1}
    per = {}
    for k, x in zip(("weights", "grads", "master", "optimizer"), (W, G, M, O)):
        per[k] = ctx.define(f"{k}_per_gpu", x / d if sharded[k] else x, "GiB",
                            f"{k} state held by one GPU under ZeRO-{z} ({'sharded' if sharded[k] else 'replicated'})")
    persistent = ctx.define("persistent_memory", sum(per.values()), "GiB", f"persistent state per GPU under ZeRO-{z}",
                            headline=True, references=("ZeRO stages, training state per GPU: Rajbhandari et al. "
                                                       "2020, 'ZeRO: Memory Optimizations Toward Training Trillion "
                                                       "Parameter Models'",))
    _memory_total(ctx, persistent, ctx.q("transient_memory", "B"), "declared transient budget")



def _runtime_memory(ctx, K, r, act, pipe_peak, mode, last_layers=None):
    """The runtime's terms beside the model's states (quantities), and their sum: what the
    caching allocator reserves at the step's peak (``runtime_memory``)."""
    if mode == "transient":
        act_rt, loss = act, sp.Integer(0)
    elif pipe_peak is not None:   # the larger of the event engine's stage peak (with the re-materialised
        # layer) and the last rank's one micro-batch through its layers with the loss's buffers
        last = r["activation_per_layer"] * last_layers + r["last_rank_rest"]
        loss, act_rt = r["loss_runtime"], sp.Max(act + r["activation_redo"] + r["pipeline_buffers"], last)
    else:
        loss, act_rt = r["loss_runtime"], r["activation_runtime"]
    if K["logits"] and mode != "transient":
        ctx.define("loss_memory", loss, "GiB",
                   "the LM head's logits as the loss holds them at its backward (loss = \"fp32\": 16-bit logits "
                   "cached, FP32 log-softmax output, its gradient and the input gradient, 14 B per logit; "
                   "18 B under DTensor's vocabulary-parallel loss at TP > 1 (torchtitan); fused: none), in "
                   "place of the one FP32 copy activation_memory counts; with the head's input gathered over TP "
                   "where the framework's sequence parallelism keeps it (torchtitan)",
                   references=("PyTorch, torch.nn.functional.cross_entropy (log_softmax + nll_loss; the "
                               "log-softmax output is saved for backward)",
                               "PyTorch, torch/distributed/tensor/parallel/loss.py (loss_parallel: "
                               "_nll_loss_and_log_softmax_backward)",
                               "Wijmans et al. 2024, 'Cut Your Losses in Large-Vocabulary Language Models' "
                               "(the logits' memory and a loss that never materialises them)"))
    if mode == "transient":   # a declared transient budget already holds the gathered parameters, the workspace
        gathered = ws = sp.Integer(0)
    else:
        gathered = ctx.define("gathered_memory", r["gathered"], "GiB",
                              "unsharded parameters and gradients ZeRO-3/FSDP holds beside the shards (the "
                              "unit computed and the one prefetched; all of them without reshard_after_forward; "
                              "a pipeline stage's for the whole step)", references=lm.RUNTIME_REFS[3:4])
        ws = ctx.define("workspace_memory", r["workspace"], "GiB",
                        "cuBLAS workspace and fused attention's backward FP32 dQ accumulator of one layer",
                        references=lm.RUNTIME_REFS[1:3])
        # one layer of one micro-batch, as without recomputation, less what the mode keeps
        if r["pipeline_buffers"] != 0:   # torch.distributed.pipelining's, pp > 1 (plugins.training.layout_memory)
            ctx.define("pipeline_memory", r["pipeline_buffers"], "GiB", "what torch.distributed.pipelining holds "
                       "on the first pipeline rank beyond the layers' checkpoints (in runtime_memory): a gradient-"
                       "receive buffer per micro-batch and chunk, and each in-flight forward's output (the last "
                       "rank's receive buffers and earlier micro-batches' logits count in its own peak)",
                       references=lm.RUNTIME_REFS[5:])
        ctx.define("recompute_memory", r["activation_redo"], "GiB", "the layer a recomputing backward "
                   "re-materialises beside the checkpoints (in runtime_memory), with the TP-gathered inputs "
                   "where the framework's sequence parallelism keeps them (torchtitan)", references=lm.RUNTIME_REFS[4:5])
    allocated = ctx.q("persistent_memory", "B") + act_rt + gathered + ws
    reserve = ctx.define("allocator_memory", allocated * K["reserve"], "GiB",
                         "what the caching allocator reserves beyond the allocated peak (allocator_reserve × "
                         "allocated; fragmentation)", references=lm.RUNTIME_REFS[:1])
    return ctx.define("runtime_memory", allocated + reserve, "GiB",
                      "what the runtime reserves per GPU at the peak (torch.cuda.max_memory_reserved): persistent "
                      "state + activations with the loss's logits as the framework holds them and the one layer "
                      "a recomputing backward re-materialises + gathered parameters + workspaces + allocator "
                      "reserve; fits_memory compares it with usable_memory",
                      headline=mode != "transient", rank=3.1, references=lm.RUNTIME_REFS[:4])


def _memory_total(ctx, persistent, activation, how, runtime=None):
    act = ctx.define("activation_memory", activation, "GiB", f"activation memory per GPU ({how})", headline=True,
                     rank=4.5, references=("activation memory per layer: Korthikanti et al. 2022, 'Reducing "
                                           "Activation Recomputation in Large Transformer Models'",))
    if ctx.block("memory") is None:
        return
    usable = ctx.q("usable_memory", "B")
    per_gpu = ctx.define("memory_per_gpu", persistent + act, "GiB", "peak per GPU: persistent state + activations",
                         headline=True, rank=3, references=("bytes per parameter by format: Micikevicius et al. "
                                                            "2018, 'Mixed Precision Training'; 16 B/param for "
                                                            "mixed-precision Adam: Rajbhandari et al. 2020, 'ZeRO: "
                                                            "Memory Optimizations Toward Training Trillion Parameter "
                                                            "Models'",
                                                            "transient memory: activations, gathered parameters and "
                                                            "workspace live together on top of the persistent state"))
    ctx.define("memory_margin", usable - per_gpu, "GiB", "usable − peak per GPU", headline=True, rank=5)
    if runtime is None:
        ctx.require("fits_memory", per_gpu, "<=", usable, "GiB", "the peak fits in usable memory")
        return
    ctx.define("runtime_margin", usable - runtime, "GiB", "usable − what the runtime reserves per GPU",
               headline=how != "the declared transient budget", rank=5.1)
    ctx.require("fits_memory", runtime, "<=", usable, "GiB",
                "what the runtime reserves at the peak fits in usable memory")


def _trivial(name, X, explicit_dp):
    t, p, c, e, v, spn = X["t"], X["p"], X["c"], X["e"], X["v"], X["sp"]
    return {"tp_divides_heads": t == 1, "tp_divides_kv_heads": t == 1, "tp_within_host": t == 1,
            "layers_fill_chunks": p * v == 1, "cp_divides_sequence": c == 1,
            "gpus_product": not explicit_dp and t * p * c == 1, "ep_divides_experts": e == 1,
            "ep_needs_experts": e == 1, "ep_divides_dp": e == 1, "interleave_microbatches": v == 1,
            "sp_needs_tp": not spn, "virtual_needs_pp": v == 1}.get(name, False)


def _check_expert_parallel(ctx, kn, moe, K, X, nominal_d):
    """Refuse an expert-parallel degree no layout can have, as a located error at ``ep`` (like
    tp·pp·cp that does not divide the GPUs): ep > 1 on a dense model, ep that does not divide
    the routed experts E (each rank holds E/ep whole experts), or ep·etp that does not divide
    the dp·tp·cp ranks of a pipeline stage (the expert-parallel × expert-TP groups tile them;
    Megatron-Core's parallel-state rule).  The same rules stay requirements
    (``ep_needs_experts``, ``ep_divides_experts``, ``ep_divides_dp``) for ``solve`` and the
    layout search.

    :param X: the layout's knobs (``e``, ``et``, ``t``, ``c``); :param nominal_d: dp at the
        plan's nominal values (a whole number here: tp·pp·cp divides the GPUs).
    """
    e, et, t, c = X["e"], X["et"], X["t"], X["c"]
    model = ctx.ref("model").name
    if not moe:
        kn.error_at("ep", f"ep = {e}, but model '{model}' has no routed experts to split",
                    "expert parallelism splits the experts of a mixture-of-experts model; remove ep or use an MoE "
                    "model")
    n_e = ctx.nominal(K["E"])
    if n_e is not None and int(n_e) % e:
        n_e = int(n_e)
        kn.error_at("ep", f"ep = {e} {'exceeds' if e > n_e else 'does not divide'} the {n_e} routed experts of "
                    f"model '{model}'", f"each expert-parallel rank holds whole experts: choose an ep that divides "
                    f"{n_e}")
    ranks = int(nominal_d) * t * c
    if nominal_d == int(nominal_d) and ranks % (e * et):
        what = f"ep·etp = {e}·{et} = {e * et}" if et > 1 else f"ep = {e}"
        kn.error_at("ep", f"{what} does not divide the {ranks} data-, tensor- and context-parallel ranks "
                    f"of a pipeline stage (dp·tp·cp = {int(nominal_d)}·{t}·{c})",
                    "the expert-parallel groups tile those ranks: choose ep" + ("·etp" if et > 1 else "") +
                    f" dividing {ranks}, or train on more GPUs")


@hookimpl
def plan_quantities_price(ctx):
    if not has_step(ctx):
        if ctx.block("zero") is not None:
            _memory_only(ctx)
        return
    kn = Knobs(ctx)
    if ctx.block("recompute") is not None and kn.value("recompute") != "none":
        kn.error_at("recompute", f"plan '{ctx.name}' prices recomputation twice: `use recompute` and "
                    f"recompute = \"{kn.value('recompute')}\"", "keep one of the two", code="conflict")
    link_ref, nic_ref = kn.ref("link"), kn.ref("nic")
    link = link_ref.q("bandwidth", "B/s", positive=True) if link_ref is not None else None
    nic = nic_ref.q("bandwidth", "B/s", positive=True) if nic_ref is not None else None
    K, moe = symbolic_constants(ctx, kn, link, nic)
    K.update(_link_constants(link_ref, nic_ref))        # collectives in roofline mode
    t, p, c, e, v = (int(kn.value(k)) for k in ("tp", "pp", "cp", "ep", "virtual"))
    gpus = ctx.param("gpus")
    explicit_dp = kn.value("dp") is not None
    d = kn.q("dp") if explicit_dp else gpus / (t * p * c)
    if explicit_dp and kn.value("dp") != int(kn.value("dp")):
        kn.error_at("dp", "the data-parallel degree must be a whole number", "e.g. dp = 8", code="out-of-range")
    et = int(kn.value("etp")) if kn.value("etp") is not None else t
    X = {"t": t, "p": p, "d": d, "c": c, "e": e, "et": et, "v": v, "b": ctx.param("micro_batch"),
         "z": int(kn.value("zero")), "r": lm.RECOMPUTE.index(kn.value("recompute")),
         "sp": int(bool(kn.value("sequence_parallel"))), "raf": int(bool(kn.value("reshard_after_forward")))}
    stage_layers = kn.value("stage_layers")
    _offload_knobs(ctx, kn, K, X, link)
    nominal_d = ctx.nominal(d)
    if not explicit_dp and t * p * c > 1 and nominal_d != int(nominal_d):
        g = ctx.value("gpus")
        kn.error_at("tp", f"tp·pp·cp = {t * p * c} does not divide the {g:g} GPU{'' if g == 1 else 's'}",
                    "choose degrees whose product divides gpus, or give dp", code="out-of-range")
    if e > 1:
        _check_expert_parallel(ctx, kn, moe, K, X, nominal_d)
    mode = _activation_mode(ctx, kn)
    o = lm.ops("sympy")
    for name, reason, lhs, op, rhs in lm.rules(moe, bool(kn.value("cross_host_tp")), explicit_dp,
                                               stage_layers is not None):
        if _trivial(name, X, explicit_dp):
            continue
        ctx.require(name, lhs(K, X), op, rhs(K, X), "", f"rejected when: {reason}")
    r = lm.evaluate(K, X, o, mode, moe)
    if K["mode"] == "stated":
        exact = 3 * (K["fwd_tok"] + lm.attention_per_token(K)) * K["s"] * K["B"]
        r = layout_stated.apply(r, layout_stated.step_time(ctx, kn, K, K["s"] * K["B"], exact))
    m = r["m"]
    ctx.require("micro_batches_at_least_one", m, ">=", 1, "", "every GPU gets at least one micro-batch per step")
    if link is None and kn.zero is not None:
        kn.zero.error_at("link", f"`use zero` in '{ctx.name}' needs 'link' (the link each GPU's collective traffic "
                         "crosses) when the plan prices a training step",
                         "add `link = …` naming a link (e.g. pcie4_x16), or drop `use compute` to price memory only",
                         code="missing-parameter")
    if link is None and ctx.nominal(d) > 1:
        ctx.warn(f"plan '{ctx.name}' trains on several GPUs but names no link: gradient synchronisation "
                 "costs nothing in this plan", "add `link = …` to `use layout` (e.g. link = pcie4_x16)")
    if link is not None and ctx.block("memory") is None:
        ctx.error(f"the training step of '{ctx.name}' needs `use memory` (bytes per parameter the collectives move)",
                  'add `use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }`',
                  code="missing-parameter")

    wl = ctx.ref("workload")
    ctx.define("hosts", ceiling_of(gpus / ctx.param("gpus_per_host")), "", "hosts of gpus_per_host GPUs",
               headline=True, rank=1)
    ctx.define("tokens_per_step", K["s"] * K["B"], "token", "useful tokens per optimizer step")
    # the step's FLOPs (fallbacks: `use compute` lists them matrix by matrix)
    attn_tok = lm.attention_per_token(K)
    per_tok = ctx.define("flops_per_token", 3 * (K["fwd_tok"] + attn_tok), "GFLOP/token",
                         "training FLOPs per token: 3 × (forward matrix FLOPs + causal attention)", fallback=True)
    step_flops = ctx.define("flops_per_step", per_tok * K["s"] * K["B"], "FLOP", "training FLOPs of one step",
                            fallback=True)
    if wl.has("tokens"):
        ctx.define("flops_total", step_flops * wl.q("tokens", "token") / (K["s"] * K["B"]), "FLOP",
                   "training FLOPs of all tokens", fallback=True)
    ctx.define("dp", d, "", "data-parallel degree", headline=True, rank=1.5)
    m = ctx.define("micro_batches", m, "", "micro-batches per pipeline per step: B / (dp·b)", headline=True, rank=2)
    roof = K["mode"] == "roofline"
    if roof:
        comp = ctx.define("compute_time", r["compute"], "s",
                          "per-GPU compute of one step, efficiency = roofline: each matrix product at "
                          "max(F/(peak·η(F)), bytes/(mem_bw·η_mem)), η(F) = matmul_efficiency·F/(F + "
                          "matmul_half_flops), norms, activations, softmax, residual adds at mem_efficiency·mem_bw",
                          headline=True, rank=6,
                          references=("Williams et al. 2009, 'Roofline: an insightful visual performance model'",
                                      "NVIDIA, 'Matrix Multiplication Background User's Guide' (GEMM efficiency by size)",
                                      "Isaev et al. 2023, 'Calculon' (per-layer matrix and vector work on efficiency "
                                      "curves)"))
    elif K["mode"] == "stated":
        comp = ctx.define("compute_time", r["compute"], "s", "the whole step at the stated throughput (bubbles, "
                          "communication and waits inside it)", headline=True, rank=6,
                          references=("a measured end-to-end training throughput (e.g. Narayanan et al. 2021, "
                                      "'Efficient Large-Scale Language Model Training on GPU Clusters Using "
                                      "Megatron-LM', Table 1: achieved teraFLOP/s per GPU)",))
    else:
        comp = ctx.define("compute_time", r["compute"], "s",
                          "per-GPU compute of one step at the stated MFU: F_step / (p·P·η)", headline=True, rank=6,
                          references=("per-GPU compute time F / (peak · MFU); model FLOPs utilization as defined by "
                                      "Chowdhery et al. 2022, 'PaLM: Scaling Language Modeling with Pathways', "
                                      "Appendix B",))
    ctx.define("compute_per_microbatch", comp / m, "s", "per-GPU compute time of one micro-batch")
    if K.get("lp") is not None and roof:
        recipe = lm.recipe_of(K["lp"], kn.value("fp8_recipe"))
        ctx.define("cast_time", r["cast"], "s",
                   f"per-GPU {K['lp'].upper()} casts of one step (in compute_time; recipe {recipe}): the inputs and "
                   "weights of the linear layers' GEMMs forward, their output gradients backward, each read in 16 bit "
                   "and written in the low-precision format with its scales, at mem_efficiency·mem_bw",
                   headline=True, rank=6.1,
                   references=("Micikevicius et al. 2022, 'FP8 Formats for Deep Learning'",
                               "NVIDIA Transformer Engine documentation, 'Using FP8 with Transformer Engine' "
                               "(delayed and current scaling, MXFP8, NVFP4 recipes)",
                               "DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', 'Fine-Grained Quantization' (1x128 activation tiles, 128x128 weight blocks)"))
    if ctx.block("recompute") is not None:
        rec = ctx.q("recompute_time", "s")
    else:
        rec = ctx.define("recompute_time", r["recompute"], "s", "recomputation: the extra forward work per step",
                         headline=X["r"] > 0)
    # pipeline: the event engine for this plan (the closed form stays in the search)
    per_layer = r["activation_per_layer"]
    ctx.define("activation_per_layer", per_layer, "GiB",
               "activation bytes of one layer and micro-batch (Korthikanti et al. 2022, per tensor)")
    pipe_peak = last_layers = None
    if p > 1 and ctx.block("pipeline") is not None:
        kn.error_at("pp", f"plan '{ctx.name}' schedules its pipeline twice: `use layout {{ pp = {p} }}` and "
                    "`use pipeline`", "the layout's pipeline uses the same event engine: set `schedule` and "
                    "`stage_layers` in `use layout`, or price the schedule alone with `use pipeline` in another plan",
                    code="conflict")
    if p > 1:
        # a stated step holds its pipeline's time already: the closed form's terms, 0
        scheduled = layout_pipeline.schedule(ctx, kn, K, X, r, comp, rec, stage_layers) \
            if K["mode"] != "stated" else None
        if scheduled is not None:
            pipe_peak, last_layers = scheduled
            bubble = ctx.define("bubble_time", ctx.q("pipeline_time", "s") - comp - rec, "s",
                                "pipeline idle, stage imbalance and boundary sends on the critical path "
                                "(event model)", headline=True, rank=6.5)
        else:                 # a structure the rules reject: the closed form, for the report
            bubble = ctx.define("bubble_time", r["bubble"] + r["pp"], "s",
                                "pipeline bubble (p−1)/(v·m) and boundary sends (closed form)", headline=True,
                                rank=6.5)
    else:
        bubble = sp.Integer(0)
    for k, qn, deg in (("tp", "tp_comm", max(t, et if moe else 1)), ("cp", "cp_comm", c), ("ep", "ep_comm", e)):
        if deg > 1:
            ctx.define(qn, r[k], "s", f"exposed step-time term: {lm.TERM_NAMES[k]}", headline=True, rank=7)
    if moe and (e > 1 or kn.given("routing_imbalance") or ctx.provided("max_device_rows")):
        imb_t = ctx.define("imbalance_time", r["imbalance"], "s", lm.TERM_NAMES["imbalance"], headline=True,
                           rank=6.2, references=("Fedus et al. 2021, 'Switch Transformers'",
                                                 "expert capacity and device imbalance: dispatches beyond "
                                                 "⌊c·tokens·k/E⌋ dropped, the busiest device sets the pace"))
    else:
        imb_t = None
    if t > 1 and link is not None:          # no link named: the TP ring is not priced
        ctx.define("tp_bandwidth", r["tp_bw"], "GB/s", "bandwidth of the link the TP ring crosses")
    # r["tp"], r["cp"], r["ep"] are the exposed parts already (each collective's overlap taken off)
    chain = comp + (imb_t if imb_t is not None else 0) + rec + bubble + sum(
        r[k] for k, deg in (("tp", max(t, et if moe else 1)), ("cp", c), ("ep", e)) if deg > 1)
    # ---- DP / ZeRO collectives (priced when a link is named)
    if link is not None:
        vol = ctx.define("transfer_volume", r["dp_volume"], "GB", "bytes each GPU sends (and receives) per step "
                         "in its data-parallel group", headline=True,
                         references=("ZeRO communication volume: Rajbhandari et al. 2020, 'ZeRO: Memory "
                                     "Optimizations Toward Training Trillion Parameter Models'",))
        bw = ctx.define("link_bandwidth", r["dp_bw"], "GB/s", "bandwidth of the narrowest cut the DP ring crosses")
        tt = ctx.define("transfer_time", vol / bw, "s", "link time of the step's DP/ZeRO collectives",
                        headline=True, rank=7)
        ctx.define("transfer_per_microbatch", tt / m, "s", "link time of one micro-batch's collectives")
        ctx.define("comm_head", r["dp_head"], "s", "unhidden collective before the first compute")
        ctx.define("comm_tail", r["dp_tail"], "s", "unhidden collective after the last compute")
        ctx.define("gather_time", r["dp_gather"], "s",
                   "link time of the per-step AllGather of updated weights (stages 1–2)")
        ctx.define("dp_comm", ctx.q("step_time", "s") - chain - ctx.param("input_wait")
                   - (ctx.q("optimizer_offload_time", "s") if X["off"] else 0)
                   - (r["optimizer"] if roof and not X["off"] else 0)
                   - (ctx.q("straggler_delay", "s") if ctx.provided("straggler_delay") else 0), "s",
                   "exposed DP/ZeRO collectives per step", headline=X["t"] * p * c > 1, rank=7)
    opt_t = None
    if roof and not X["off"]:
        opt_t = ctx.define("optimizer_time", r["optimizer"], "s", "optimizer step on the GPU after the last gradient "
                           "reduction: gradients read, master weights and moments read and written, 16-bit weights "
                           "written for this GPU's ZeRO shard, at mem_efficiency·mem_bw", headline=True, rank=7.6)
    ctx.define("comm_wait", ctx.q("step_time", "s") - comp - (imb_t if imb_t is not None else 0) - rec - bubble
               - ctx.param("input_wait") - (opt_t if opt_t is not None else 0), "s",
               "exposed communication and waits per step: step time − compute − recomputation − bubble − input wait",
               headline=True, rank=8)
    ctx.define("input_wait", ctx.param("input_wait"), "s", "exposed wait for input data per step",
               headline=True, rank=9)
    if X["off"]:
        ctx.define("optimizer_offload_time", r["offload"], "s", lm.TERM_NAMES["offload"] + ", exposed", headline=True,
                   rank=7.5,
                   references=("Ren et al. 2021, 'ZeRO-Offload: Democratizing Billion-Scale Model Training'",))
        ctx.define("optimizer_host_traffic", r["offload_volume"], "GB",
                   "gradients to the host and weights back per step")
        ctx.define("optimizer_cpu_time", r["offload_cpu"], "s", "CPU optimizer step (memory-bound)")
        ctx.define("host_memory_per_gpu", r["offload_host_bytes"], "GiB",
                   "master weights and optimizer states held in host memory for one GPU")
    # ---- achieved utilisation: the model's FLOPs (exact count) over the step at every GPU's peak
    step_flops_exact = 3 * (K["fwd_tok"] + attn_tok) * K["s"] * K["B"]
    ctx.define("mfu_achieved", step_flops_exact / (ctx.q("step_time", "s") * gpus * K["peak"]), "%",
               f"model FLOP utilisation of the step (efficiency = {K['mode']}): training FLOPs, exact count, over "
               "step time × gpus × peak", headline=roof or K["mode"] == "stated", rank=9.5,
               references=("Chowdhery et al. 2022, 'PaLM', appendix B (model FLOPs utilization)",))
    ctx.define("compute_mfu", step_flops_exact / (comp * gpus * K["peak"]), "%",
               "utilisation of the compute alone (no bubble, communication or waits)"
               + (": the single MFU the roofline implies" if roof else ": the stated mfu"), headline=False)
    # ---- memory per GPU
    if ctx.block("memory") is not None:
        states = {"weights": "bytes_W", "grads": "bytes_G", "master": "bytes_M", "optimizer": "bytes_O"}
        z = X["z"]
        sharded = {"weights": z >= 3, "grads": z >= 2, "master": z >= 1, "optimizer": z >= 1}
        tot = 0
        for k, kb in states.items():
            # dense shard over dp, routed experts' shard over the expert-data-parallel group
            x = K[kb] * (r["P_dense"] * (1 / r["dz"] if sharded[k] else 1)
                         + r["P_exp"] * (1 / r["d_exp"] if sharded[k] else 1))
            if X["off"] and k in ("master", "optimizer"):
                x = 0 * x          # on the host (ZeRO-Offload)
            tot += ctx.define(f"{k}_per_gpu", x, "GiB", f"{k} state held by one GPU under ZeRO-{z}, "
                              f"tp·pp = {t * p} ({'sharded' if sharded[k] else 'replicated'} over dp"
                              f"{'·cp' if c > 1 else ''})")
        if K.get("lp") is not None:
            lp = K["lp"].upper()
            tot += ctx.define("matmul_copy_per_gpu", r["lowp_copy"], "GiB",
                              f"{lp} copy of the linear layers' weights one GPU holds for its {lp} matrix products "
                              f"({'none: the stored weights are the copy' if K.get('lp_wcast') == 0 else 'scales included'})")
            tot += ctx.define("scaling_state_per_gpu", r["lowp_scales"], "GiB",
                              f"{lp} scaling state one GPU keeps: FP32 amax histories of delayed scaling (input, weight "
                              "and output gradient of each low-precision GEMM); block scales of the weights are in "
                              "the copy", references=("NVIDIA Transformer Engine, DelayedScaling recipe "
                                                      "(amax_history_len = 1024 by default)",))
        persistent = ctx.define("persistent_memory", tot, "GiB", "persistent state per GPU under the layout",
                                headline=True, references=("ZeRO stages, training state per GPU: Rajbhandari et al. "
                                                           "2020, 'ZeRO: Memory Optimizations Toward Training "
                                                           "Trillion Parameter Models'",))
        if mode == "transient":
            act, how = K["transient"], "the declared transient budget"
        elif pipe_peak is not None:
            act, how = pipe_peak, "the pipeline schedule's largest stage peak"
        else:
            act, how = r["activation"], ("one micro-batch in flight"
                                         + (", plus the LM-head logits" if K["logits"] else ""))
        _memory_total(ctx, persistent, act, how,
                      runtime=_runtime_memory(ctx, K, r, act, pipe_peak, mode, last_layers))
    # ---- steps and finish time (fallbacks `use finish` refines): a finish time needs tokens to
    # train on, not a deadline; the deadline adds the requirement (and makes the finish time a
    # headline, the answer the plan asks for)
    if wl.has("tokens"):
        steps = ctx.define("steps", ceiling_of(wl.q("tokens", "token") / (K["s"] * K["B"])), "",
                           "optimizer steps: ceil(tokens / tokens per step)", headline=True,
                           references=("steps of a run: training tokens / tokens per step",))
        if not ctx.provided("step_budget"):   # `use finish` prices both against the deadline
            deadline = wl.has("deadline")
            L_ck = ctx.q("overhead", "") if ctx.block("checkpoint") is not None else 0
            train = ctx.define("train_time", steps * ctx.q("step_time", "s"), "day", "steps × step time",
                               fallback=True)
            reserved = wl.q("reserved", "s") if wl.has("reserved") else 0
            fin = ctx.define("finish_time", reserved + train * (1 + L_ck), "day", "T_0 + steps · t_s · (1 + L)",
                             headline=deadline, rank=13, fallback=True,
                             references=("first-order finish time: reserved time + steps × step time × (1 + overhead)",))
            if deadline:
                require_time_to_train(ctx, wl)
                ctx.require("meets_deadline", fin, "<=", wl.q("deadline", "s"), "day",
                            "the job finishes by the deadline")


TERM_KIND = {"imbalance": "wait", "recompute": "forward", "bubble": "wait", "tp": "comm", "cp": "comm",
             "ep": "comm"}   # kind of each term's activity on the `step` timeline (Gantt colours)


@hookimpl
def plan_activities_schedule(ctx):
    """Timeline ``step``: input wait; on the GPU the chain compute → recomputation → pipeline
    bubble → exposed TP/CP/EP (the GPU waits for them: their time is charged to the link in
    what-if analyses); on the link the DP/ZeRO collectives beside it (MegaScale
    exposure: stage 3 prefetches all but the embedding's first AllGather and last
    ReduceScatter; stages 1–2 gather the updated weights during forward and reduce gradients
    while the backward passes that produce them run; stage 0 all-reduces during the last
    micro-batch's backward; without prefetch every collective follows compute).  Its makespan
    is ``step_time``; ``use stragglers`` splices its delay after ``compute``."""
    if not has_step(ctx):
        return
    kn = Knobs(ctx)
    tl = ctx.timeline("step")
    tl.add("input_wait", ctx.param("input_wait"), "input", doc="waiting for the next batch", kind="wait")
    z, prefetch = int(kn.value("zero")), bool(kn.value("prefetch"))
    # a stated throughput holds the DP/ZeRO collectives already: none on the link beside it
    priced = kn.ref("link") is not None and not layout_stated.given(kn)
    if priced and z > 0:
        tl.add("allgather_first", ctx.q("comm_head"), "link", after=["input_wait"], before=["compute"],
               doc="first AllGather (word embedding), nothing to hide it behind", kind="comm")
    tl.add("compute", ctx.q("compute_time"), "gpu", after=["input_wait"],
           doc="forward and backward of all micro-batches at the stated MFU", kind="compute")
    prev, chain = "compute", [ctx.q("compute_time")]
    t, p, c, e = (int(kn.value(k)) for k in ("tp", "pp", "cp", "ep"))
    extra = []
    if ctx.defined("imbalance_time"):
        extra.append(("imbalance", ctx.q("imbalance_time"), lm.TERM_NAMES["imbalance"]))
    if kn.value("recompute") != "none" or ctx.block("recompute") is not None:
        extra.append(("recompute", ctx.q("recompute_time"), "forward values rebuilt during backward"))
    if p > 1:
        extra.append(("bubble", ctx.q("bubble_time"), "pipeline idle and boundary sends (event model)"))
    for k, qn in (("tp", "tp_comm"), ("cp", "cp_comm"), ("ep", "ep_comm")):
        if ctx.defined(qn):                 # already the exposed part (its overlap taken off)
            extra.append((k, ctx.q(qn), lm.TERM_NAMES[k]))
    for k, dur, doc in extra:
        # the GPU waits for exposed collectives: the interconnect's speed sets their time
        tl.add(k, dur, "gpu", after=[prev], doc=doc, kind=TERM_KIND[k], label=k,
               style="hatched" if k == "bubble" else "", charge="link" if TERM_KIND[k] == "comm" else None)
        prev = k
        chain.append(dur)
    if not priced:
        if ctx.defined("optimizer_time"):
            tl.add("optimizer_step", ctx.q("optimizer_time"), "gpu", after=[prev],
                   doc="optimizer step (memory-bound, roofline)", kind="compute")
        if ctx.defined("optimizer_offload_time"):
            tl.add("optimizer_offload", ctx.q("optimizer_offload_time"), "host", after=[prev],
                   doc="offloaded optimizer: gradients down (beyond the last backward), CPU Adam, weights up",
                   kind="comm")
        tl.makespan_quantity("step_time", "s", "one training step: longest path of the step timeline", rank=10)
        return
    head, tail, tt = ctx.q("comm_head"), ctx.q("comm_tail"), ctx.q("transfer_time")
    last = "allreduce_last" if z == 0 else "reducescatter_last"
    start = "allgather_first" if z > 0 else "input_wait"
    if not prefetch:
        tl.add("transfer", tt - head - tail, "link", after=[prev], doc="collectives after compute (no prefetch)",
               kind="comm")
        tl.add(last, tail, "link", after=["transfer"], doc="last collective (word embedding gradient)", kind="comm")
    elif z == 3:
        tl.add("transfer", tt - head - tail, "link", after=[start], doc="collectives overlapped with compute",
               kind="comm")
        tl.add(last, tail, "link", after=[prev, "transfer"], doc="last ReduceScatter (word embedding gradient)",
               kind="comm")
    else:
        gather = ctx.q("gather_time")
        if z in (1, 2):
            tl.add("param_gather", gather - head, "link", after=[start],
                   doc="AllGather of the updated weights, overlapped with forward", kind="comm")
        comp_rec = ctx.q("compute_time") + (ctx.q("recompute_time") if any(k == "recompute" for k, _, _ in extra)
                                            else 0)
        window = 2 * comp_rec / 3 if z == 2 else 2 * comp_rec / (3 * ctx.q("micro_batches"))
        tl.add("backward_lag", sp.Add(*chain) - window, None, after=[start],
               doc="compute before the gradients being reduced start to appear", kind="wait")
        tl.add("grad_reduce", tt - gather - tail, "link", after=["backward_lag"],
               doc="gradient reduction overlapped with the backward passes", kind="comm")
        tl.add(last, tail, "link", after=[prev, "grad_reduce"], doc="last collective (word embedding gradient)",
               kind="comm")
    if ctx.defined("optimizer_time"):
        tl.add("optimizer_step", ctx.q("optimizer_time"), "gpu", after=[prev, last],
               doc="optimizer step after the last gradient reduction (memory-bound, roofline)", kind="compute")
    if ctx.defined("optimizer_offload_time"):
        tl.add("optimizer_offload", ctx.q("optimizer_offload_time"), "host", after=[prev, last],
               doc="offloaded optimizer: gradients down (beyond the last backward), CPU Adam, weights up",
               kind="comm")
    tl.makespan_quantity("step_time", "s", "one training step: longest path of the step timeline", rank=10)


@hookimpl
def plan_figures_register():
    from dsl.plugin import FigureSpec
    return [FigureSpec("layout-search", "Step time vs memory per GPU of the valid layouts, Pareto front",
                       layout_reports.draw_search, "every valid layout of `use layout_search`, the front and the best")]


@hookimpl
def plan_tables_register():
    return [TableSpec("layout-search", "Layout search: the best valid layouts, the Pareto front and the rejections",
                      layout_reports.search_table),
            TableSpec("parameters-per-stage", "Parameters per pipeline stage", layout_reports.stage_table,
                      "parameters and persistent state one GPU of each stage holds (embedding first, head last)",
                      references=("Narayanan et al. 2021 (Megatron-LM pipeline stages)",))]


@hookimpl
def plan_commands_register():
    from plugins.training import layout_search as search
    return [CommandSpec("search", search.SEARCH_HELP, search.add_arguments, search.run_command,
                        search.SEARCH_DESCRIPTION)]

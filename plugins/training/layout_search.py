"""Layout search: every TP × PP × DP/ZeRO × EP × CP layout of a plan's ``use layout_search``
lists, evaluated at once with numpy (``plan search FILE``).

The constants of the plan (model, workload, device, links, bytes per parameter, usable
memory, checkpoint overhead) are read at their nominal values; the candidate grid (the
product of the knob lists; dp = gpus / (tp·pp·cp)) is a set of integer numpy arrays, and
:func:`plugins.training.layout_model.evaluate` — the same closed forms ``use layout`` prices
symbolically — runs once over all of them.  Each candidate is either rejected with the
first validity rule it breaks (:func:`plugins.training.layout_model.rules`, then memory: a layout fits
only when its runtime memory per GPU is a number no larger than the usable memory and the device's own
memory) or kept
with its step time, runtime memory per GPU, finish time and binding constraint.  The result holds
the Pareto front (step time vs runtime memory) and the best layout with the terms by which the
runner-up (and the best layout of every other tp) loses.  Under ``efficiency = "roofline"``
every candidate's compute comes from the same per-layer operation table as the plan's
(:func:`plugins.training.layout_model.layer_ops`), vectorised over the grid.

Engines (:class:`dsl.plugin.Executor`): in one process (``serial``, or ``processes`` with one
worker, the default) the grid is evaluated in one numpy call; ``processes`` with several
workers and ``dask`` split it into ``chunks`` contiguous slices run as tasks (local processes,
a Dask cluster at ``--scheduler`` or a process-based ``LocalCluster``) and concatenate them in
order — elementwise numpy on the same values, so the results are identical.  numpy is
needed; dask (``dist`` extra) only for ``dask``.
"""
from __future__ import annotations

import math

import itertools
from dataclasses import dataclass, field

from dsl.plugin import (Diagnostic, Executor, ExecutorError, MissingEngine, PlanError, add_engine_arguments,
                        current_executor)

KNOBS = ("t", "p", "d", "c", "e", "b", "v", "z", "r", "sp", "off")
KNOB_NAMES = {"t": "tp", "p": "pp", "d": "dp", "c": "cp", "e": "ep", "b": "micro_batch", "v": "virtual",
              "z": "zero", "r": "recompute", "sp": "sequence_parallel", "off": "offload"}
OFFLOAD = ("none", "optimizer")
GRID_ORDER = ("t", "p", "c", "e", "v", "b", "z", "r", "sp", "off")
MEMORY_REASON = "runtime memory per GPU exceeds the usable memory"   # usable: capped at the device memory


def _chunks_of(*a):
    from plugins.training.layout_pipeline import chunks_of
    return chunks_of(*a)


class SearchError(Exception):
    """The search cannot run (numpy or dask missing, no cluster)."""


class MissingDependency(SearchError):
    """numpy or dask is not installed (``plan search`` exits 3)."""


def _np():
    try:
        import numpy
    except ImportError as e:
        raise MissingDependency('plan search needs numpy (a dependency of plan-dsl): pip install numpy') from e
    return numpy


@dataclass
class SearchResult:
    """Columns over all candidates (numpy arrays): the knobs, ``valid``, ``reason`` (empty
    when valid), each step-time term and ``step`` (s), ``memory`` (B), ``finish`` (s),
    ``meets_deadline``, ``binding``; plus ``pareto`` (indices), ``best``/``runner_up``
    (indices or None), ``explanations`` and ``meta`` (constants and settings)."""

    plan: str
    columns: dict = field(default_factory=dict)
    pareto: list = field(default_factory=list)
    best: int | None = None
    runner_up: int | None = None
    explanations: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    _inputs: tuple | None = field(default=None, repr=False)

    def diagnose(self) -> dict | None:
        """When no layout is valid: :func:`diagnose` (computed on first call, kept in
        ``meta["diagnosis"]``); None when some layout is valid."""
        if self.best is not None or self._inputs is None:
            return None
        if "diagnosis" not in self.meta:
            K, X, names, fail = self._inputs
            self.meta["diagnosis"] = diagnose(K, X, self.meta, names, fail)
        return self.meta["diagnosis"]

    def __len__(self):
        return len(self.columns["t"])

    def layout(self, i: int) -> dict:
        """Knobs of candidate ``i`` as a dict of display values."""
        from plugins.training.layout_model import RECOMPUTE
        c = self.columns
        out = {KNOB_NAMES[k]: int(c[k][i]) for k in KNOBS}
        out["recompute"] = RECOMPUTE[out["recompute"]]
        out["sequence_parallel"] = bool(out["sequence_parallel"])
        out["offload"] = OFFLOAD[out["offload"]]
        out["global_batch"] = int(round(float(c["B"][i]))) if "B" in c else int(self.meta["global_batch"])
        out["batch_adjusted"] = out["global_batch"] != int(self.meta["global_batch"])
        return out

    def row(self, i: int) -> dict:
        """Candidate ``i``: knobs, validity and reason, terms (s), step (s), runtime memory (GiB),
        finish (day), binding constraint."""
        from plugins.training.layout_model import TERMS
        c = self.columns
        r = self.layout(i)
        r.update(valid=bool(c["valid"][i]), reason=str(c["reason"][i]),
                 step_s=float(c["step"][i]), memory_gib=float(c["memory"][i]) / 2 ** 30,
                 finish_day=float(c["finish"][i]) / 86400 if self.meta.get("deadline") else None,
                 meets_deadline=bool(c["meets_deadline"][i]), binding=str(c["binding"][i]))
        r["terms_s"] = {k: float(c[k][i]) for k in TERMS}
        r["stage_layers"] = self.stage_layers(i)
        return r

    def stage_layers(self, i: int):  # noqa: D401
        """Layers of each pipeline chunk of candidate ``i`` (the split its pricing used), or None
        without a pipeline."""
        c = self.columns
        p, v = int(c["p"][i]), int(c["v"][i])
        if p * v == 1:
            return None
        K = self.meta.get("constants", {})
        if "L" not in K or p * v > K["L"]:
            return None
        return list(c["chunks"][i]) if "chunks" in c and c["chunks"][i] is not None else \
            list(_chunks_of(K, p, v, "layers"))

    def to_json(self) -> dict:
        valid = [int(i) for i in self.columns["valid"].nonzero()[0]]
        rej = [int(i) for i in (~self.columns["valid"]).nonzero()[0]]
        return {"plan": self.plan, "meta": self.meta, "candidates": len(self), "valid": len(valid),
                "best": self.row(self.best) if self.best is not None else None,
                "runner_up": self.row(self.runner_up) if self.runner_up is not None else None,
                "explanations": self.explanations,
                "pareto": [self.row(i) for i in self.pareto],
                "layouts": [self.row(i) for i in valid], "rejected": [self.row(i) for i in rej],
                "rejections": self.meta.get("rejections", {}), "diagnosis": self.diagnose()}


# ---------------------------------------------------------------- constants and grid
def constants(ws, plan: str) -> tuple[dict, dict]:
    """Nominal constants ``K`` of ``plan`` (floats, base units) for
    :func:`plugins.training.layout_model.evaluate`, and settings (activation mode, MoE, the layout
    block's own knobs, usable memory, deadline, reserved time, steps, checkpoint overhead).

    :raises PlanError: ``error[search]`` when the plan has no ``use layout``.
    """
    import sympy as sp
    from plugins.training.memory import device_capacity

    if plan not in ws.decls or "layout" not in ws.decls[plan].uses:
        raise PlanError([Diagnostic("error", "search", f"plan '{plan}' has no `use layout` block", None,
                                    "add `use layout { link = … }` and `use layout_search { tp = [1, 2, 4, 8] }`")])

    def val(nid):
        return float(ws.base_value(nid))

    model = ws.python_value(f"{plan}.model").name
    wl = ws.python_value(f"{plan}.workload").name
    dev = ws.python_value(f"{plan}.device").name
    pre = f"{plan}.layout."

    def knob(name, default):
        """A `use layout` setting as the plan states it, else ``default``."""
        return ws.python_value(pre + name) if pre + name in ws.nodes else default
    framework = knob("framework", "none")
    link_ref = knob("link", None)
    link = link_ref.name if link_ref is not None else None
    nic_ref = knob("nic", None)
    has = lambda nid: nid in ws.nodes and ws.base_value(nid) is not None   # noqa: E731
    N = val(f"{model}.params")
    moe = has(f"{model}.experts")
    L = val(f"{model}.layers")
    h, a = val(f"{model}.hidden"), val(f"{model}.heads")
    K = {"L": L, "h": h, "a": a, "kv": val(f"{model}.kv_heads") if has(f"{model}.kv_heads") else a,
         "dh": val(f"{model}.head_dim") if has(f"{model}.head_dim") else h / a, "V": val(f"{model}.vocab"),
         "N": N, "N_emb": val(f"{model}.embedding_params"),
         "N_exp": val(f"{model}.expert_params") if moe else 0.0,
         "E": val(f"{model}.experts") if moe else 0.0,
         "topk": val(f"{model}.experts_per_token") if moe else 0.0,
         "L_moe": L - (val(f"{model}.dense_layers") if has(f"{model}.dense_layers") else 0.0) if moe else 0.0,
         "fwd_tok": val(f"{model}.flops_per_token_forward"),
         "s": val(f"{wl}.seq_len"), "B": val(f"{wl}.global_batch"),
         "peak": val(f"{dev}.peak_flops"), "gpus": val(f"{plan}.gpus"),
         "gph": val(f"{plan}.gpus_per_host"), "link": val(f"{link}.bandwidth") if link else None,
         "nic": (val(f"{nic_ref.name}.bandwidth") if nic_ref is not None else val(f"{link}.bandwidth") if link
                 else None),
         "nics": val(pre + "nics_per_host"), "latency": val(pre + "latency"), "overlap": val(pre + "overlap"),
         "input": val(f"{plan}.input_wait"),
         "transient": val(f"{plan}.transient_memory") if has(f"{plan}.transient_memory") else 0.0}
    # each collective's overlap as `use layout` reads it
    from plugins.training.layout_model import TP_OVERLAP_FIELD, collective_overlaps
    K.update(collective_overlaps({c: val(pre + f"{c}_overlap") if has(pre + f"{c}_overlap") else None
                                  for c in ("tp", "cp", "ep")}, K["overlap"],
                                 knob("schedule", "1f1b"), framework, knob("tp_comm_overlap", "auto")))
    if has(f"{dev}.{TP_OVERLAP_FIELD}"):       # absent: the whole ideal share (exposed_shares)
        K["ring_eff_tp"] = val(f"{dev}.{TP_OVERLAP_FIELD}")
    K["dv"] = val(f"{model}.v_head_dim") if has(f"{model}.v_head_dim") else K["dh"]   # MLA value width
    # collective fields of the link and the NIC (roofline mode, plugins.hardware.collectives)
    from plugins.training.layout_model import LINK_KEYS
    for prefix, ref in (("link", link), ("nic", nic_ref.name if nic_ref is not None else link)):
        if ref is None:
            continue
        K[prefix + "_nvls"] = bool(ws.python_value(f"{ref}.nvls")) if f"{ref}.nvls" in ws.nodes else False
        for key, suffix in LINK_KEYS:
            if has(f"{ref}.{key}"):
                K[prefix + suffix] = val(f"{ref}.{key}")
    # sliding-window layers and encoders: the same pair count as the plan (plugins.model.decoder)
    window = val(f"{model}.sliding_window") if has(f"{model}.sliding_window") else None
    bidir = f"{model}.attention" in ws.nodes and ws.python_value(f"{model}.attention") == "bidirectional"
    if window is not None or bidir:
        from plugins.model.decoder import attention_pairs
        arch = {"L": L, "window": window, "bidirectional": bidir,
                "local": val(f"{model}.local_layers") if has(f"{model}.local_layers") else L}
        K["attn_pairs"] = float(attention_pairs(arch, K["s"])) / K["s"]
        if window is not None:
            from plugins.model.decoder import score_keys
            K["score_keys"] = float(score_keys(arch, K["s"]))
    f = val(f"{model}.ffn") if has(f"{model}.ffn") else None
    if moe:
        k_act = val(f"{model}.experts_per_token") + (val(f"{model}.shared_experts")
                                                     if has(f"{model}.shared_experts") else 0.0)
        moe_w = val(f"{model}.expert_ffn") * k_act
        Ld = val(f"{model}.dense_layers") if has(f"{model}.dense_layers") else 0.0
        f = (Ld * (f if f is not None else moe_w) + (L - Ld) * moe_w) / L
    if moe:   # routed experts' FLOPs per token and the routing imbalance, as `use layout` reads them
        ks = val(f"{model}.shared_experts") if has(f"{model}.shared_experts") else 0.0
        K["exp_tok"] = val(f"{model}.expert_flops_per_token") * K["topk"] / (K["topk"] + ks)
        if has(f"{plan}.max_device_rows") and "routing_imbalance" not in ws.decls[plan].uses["layout"]:
            K["imb"] = val(f"{plan}.max_device_rows") / val(f"{plan}.mean_device_rows")
        else:
            K["imb"] = val(pre + "routing_imbalance")
    from plugins.training.layout_model import PRECISION_BYTES
    K.update(f=f, mats=val(f"{model}.ffn_matrices") if has(f"{model}.ffn_matrices") else 3.0,
             head_tok=2 * h * K["V"], prefetch=float(bool(ws.python_value(pre + "prefetch"))),
             act_bytes=float(PRECISION_BYTES[ws.python_value(pre + "activation_precision")]),
             flash=float(ws.python_value(pre + "attention") == "flash"),
             dropout=float(bool(ws.python_value(pre + "dropout"))), logits=float(bool(ws.python_value(pre + "lm_head"))))
    # the runtime's memory terms (runtime_memory): the layout's loss, workspace, allocator reserve, resharding
    from plugins.training.layout_model import CUBLAS_WORKSPACE, LOSS_BYTES, framework_memory_constants

    K.update(framework_memory_constants(framework, knob("matmul_precision", "bf16"), knob("loss", "fp32")))
    K.update(loss=float(LOSS_BYTES[knob("loss", "fp32")]), raf=float(bool(knob("reshard_after_forward", True))),
             cublas_ws=val(pre + "cublas_workspace") if pre + "cublas_workspace" in ws.nodes else CUBLAS_WORKSPACE,
             reserve=val(pre + "allocator_reserve") if pre + "allocator_reserve" in ws.nodes else 0.0)
    host_ref = ws.python_value(pre + "host_link") if pre + "host_link" in ws.nodes else None
    K["host_link"] = val(f"{host_ref.name}.bandwidth") if host_ref is not None else K["link"]
    if pre + "host_bandwidth" in ws.nodes and ws.base_value(pre + "host_bandwidth") is not None:
        K["host_bw"] = val(pre + "host_bandwidth")
    stated = [k for k in ("stated_tokens_per_s", "stated_tflops")
              if pre + k in ws.nodes and ws.base_value(pre + k) is not None]
    if stated or (pre + "efficiency" in ws.nodes and ws.python_value(pre + "efficiency") == "stated"):
        what = ", ".join(stated) or 'efficiency = "stated"'
        raise PlanError([Diagnostic("error", "search", f"plan '{plan}' states its throughput "
                                    f"({what}): a measured rate belongs "
                                    "to the one layout it was measured on, and the search compares layouts",
                                    ws.nodes[pre + (stated[0] if stated else "efficiency")].span,
                                    "search a plan that prices its step from the device (efficiency = \"roofline\" "
                                    "or `mfu`), then state the measured rate on the layout it picks")])
    if K["link"] is None:
        raise PlanError([Diagnostic("error", "search", f"plan '{plan}' names no link in `use layout`", None,
                                    "add `link = …` (the GPU's own link inside a host) to `use layout`")])
    for k, state in (("bytes_W", "weights"), ("bytes_G", "grads"), ("bytes_M", "master"), ("bytes_O", "optimizer")):
        K[k] = val(f"{plan}.{state}_memory") / N
    K.update(_efficiency_constants(ws, plan, model, dev, h, a, K, framework))
    deadline = val(f"{wl}.deadline") if has(f"{wl}.deadline") else None
    mode = ws.python_value(pre + "activations")
    if mode == "auto":
        declared = ("memory" in ws.decls[plan].uses and "transient" in ws.decls[plan].uses["memory"]) or \
            "buffers" in ws.decls[plan].uses
        mode = "transient" if declared else "formula"
    meta = {"activations": mode, "moe": moe, "efficiency": K["mode"],
            "stage_layers": pre + "stage_layers" in ws.nodes and ws.python_value(pre + "stage_layers") is not None,
            "schedule": knob("schedule", "1f1b"), "balance": knob("balance", "layers"),
            "framework": framework,
            "cross_host_tp": bool(ws.python_value(pre + "cross_host_tp")),
            "usable": val(f"{plan}.usable_memory"), "deadline": deadline,
            # what a GPU can hold: the usable memory, never more than the device has (its nominal
            # memory read as GiB, the bound use memory warns at: the two agree on a plan's verdict)
            "capacity": min(val(f"{plan}.usable_memory"),
                            device_capacity(val(f"{dev}.memory")) if has(f"{dev}.memory") else float("inf")),
            "reserved": val(f"{wl}.reserved") if has(f"{wl}.reserved") else 0.0,
            "steps": float(sp.ceiling(sp.Rational(ws.base_value(f"{wl}.tokens")) /
                                      (sp.Rational(ws.base_value(f"{wl}.seq_len")) *
                                       sp.Rational(ws.base_value(f"{wl}.global_batch"))))) if has(f"{wl}.tokens") else None,
            "overhead": val(f"{plan}.overhead") if has(f"{plan}.overhead") else 0.0,
            "model": model, "device": dev, "link": link, "nic": nic_ref.name if nic_ref is not None else None,
            "tokens": val(f"{wl}.tokens") if has(f"{wl}.tokens") else None, "global_batch": K["B"],
            "workload": wl,
            "batch_tolerance": val(f"{plan}.layout_search.batch_tolerance")
            if f"{plan}.layout_search.batch_tolerance" in ws.nodes else 0.0}
    return K, meta


def _efficiency_constants(ws, plan, model, dev, h, a, K, framework: str) -> dict:
    """``K["mode"]`` and, in roofline mode, the device curve (the device's fields or the
    generic defaults) and the matrix shapes — as ``use layout`` reads them."""
    from plugins.model.decoder import attention_params
    from plugins.training.layout_model import DEVICE_CURVE
    from plugins.training.layout_model import (ATTENTION_BACKWARD_FIELD, GENERIC_DEVICE, LOWP_SUSTAINED,
                                               SUSTAINED_FIELD, attention_field, shape_constants)
    from plugins.training.layout_stated import default_mode

    has = lambda nid: nid in ws.nodes and ws.base_value(nid) is not None   # noqa: E731
    node = f"{plan}.layout.efficiency"
    given = ws.python_value(node) if node in ws.nodes else None
    mode = default_mode(given, False, has(f"{plan}.mfu"))  # a stated rate is refused before (constants)
    lowp = _lowp_constants(ws, plan, model, dev, K)
    if mode == "mfu":
        out = {"mode": mode, "mfu": float(ws.base_value(f"{plan}.mfu"))}
        if not lowp:
            return out
        out.update(lowp)
    else:
        out = {"mode": mode, "mem_bw": float(ws.base_value(f"{dev}.mem_bw"))}
        for field, (key, _) in DEVICE_CURVE.items():
            out[key] = float(ws.base_value(f"{dev}.{field}")) if has(f"{dev}.{field}") else GENERIC_DEVICE[field]
        if lowp:
            out.update(lowp)
            if "eta_lp" not in out:            # the 16-bit curve's, before either sustained share
                out["eta_lp"] = out["eta_mm"]
        # the fused attention kernel's own efficiency (use layout { attention_kernel; framework })
        pre = f"{plan}.layout."
        afield = attention_field(ws.python_value(pre + "attention_kernel") if pre + "attention_kernel" in ws.nodes
                                 else "auto", framework)
        if afield is not None and has(f"{dev}.{afield}"):
            out["eta_attn"] = float(ws.base_value(f"{dev}.{afield}"))
            if has(f"{dev}.{ATTENTION_BACKWARD_FIELD}"):
                out["attn_bwd_rate"] = float(ws.base_value(f"{dev}.{ATTENTION_BACKWARD_FIELD}"))
        if has(f"{dev}.{SUSTAINED_FIELD}"):     # what whole training steps sustain of the 16-bit curve
            s = float(ws.base_value(f"{dev}.{SUSTAINED_FIELD}"))
            out["eta_mm"] *= s
            if "eta_attn" in out:
                out["eta_attn"] *= s
        if lowp:                                # and of the format's own (default: the 16-bit share)
            fmt = ws.python_value(f"{plan}.layout.matmul_precision")
            own = next((f for f in (LOWP_SUSTAINED[fmt], SUSTAINED_FIELD) if has(f"{dev}.{f}")), None)
            if own is not None:
                out["eta_lp"] *= float(ws.base_value(f"{dev}.{own}"))

    def opt(name, default=None):
        return float(ws.base_value(f"{model}.{name}")) if has(f"{model}.{name}") else default
    arch = {"h": h, "nq": a, "nkv": K["kv"], "dh": K["dh"], "f": opt("ffn")}
    mo = {"moe": has(f"{model}.experts"), "mla": has(f"{model}.kv_lora_rank"), "rkv": opt("kv_lora_rank"),
          "rq": opt("q_lora_rank"), "dr": opt("qk_rope_dim", 0.0), "dv": opt("v_head_dim"),
          "fe": opt("expert_ffn"), "ks": opt("shared_experts", 0.0)}
    out.update(shape_constants(arch, mo, attention_params(arch, mo, matrices_only=True)))
    return out


def _lowp_constants(ws, plan, model, dev, K) -> dict:
    """``use layout { matmul_precision }`` as the plan reads it
    (:func:`plugins.training.layout.lowp_constants`): the format's peak, efficiency, cast
    constants and the dense linear parameters, as floats; {} for bf16."""
    from plugins.training.layout_model import FP8_OPERANDS, LOWP_FIELDS, cast_constants

    pre = f"{plan}.layout."
    fmt = ws.python_value(pre + "matmul_precision") if pre + "matmul_precision" in ws.nodes else "bf16"
    if fmt == "bf16":
        return {}
    has = lambda nid: nid in ws.nodes and ws.base_value(nid) is not None   # noqa: E731
    peak_field, eta_field, _ = LOWP_FIELDS[fmt]
    out = cast_constants(fmt, ws.python_value(pre + "fp8_recipe"))
    out["peak_lp"] = float(ws.base_value(f"{dev}.{peak_field}"))
    if has(f"{dev}.{eta_field}"):
        out["eta_lp"] = float(ws.base_value(f"{dev}.{eta_field}"))
    out["N_lin"] = (K["N"] - K["N_exp"] - float(ws.base_value(f"{model}.embedding_params"))
                    - float(ws.base_value(f"{model}.lm_head_params")))
    mem = f"{plan}.memory."
    if fmt == "fp8" and mem + "operand" in ws.nodes:
        if ws.python_value(mem + "operand") in FP8_OPERANDS:
            out["lp_bytes"] = 1.0
            out["lp_w_scale"] = float(ws.base_value(f"{plan}.operand_bytes_per_param")) - 1.0
        if ws.python_value(mem + "weights") in FP8_OPERANDS:
            out["lp_wcast"] = 0.0
    return out


def knob_lists(ws, plan: str) -> dict:
    """The knob values to try: the ``use layout_search`` lists, else the ``use layout``
    block's single values.  Keys as in :data:`KNOBS` (without ``d``)."""
    from plugins.training.layout_model import RECOMPUTE

    pre, base = f"{plan}.layout_search.", f"{plan}.layout."
    searching = "layout_search" in ws.decls[plan].uses

    def whole(name, values):
        for x in values:
            if x != int(x):
                raise PlanError([Diagnostic("error", "search", f"'{name}' in `use layout_search` lists {x:g}, "
                                            "not a whole number", ws.nodes[pre + name].span,
                                            "list whole numbers, e.g. [1, 2, 4, 8]")])
        return sorted({int(x) for x in values})

    def ints(name, single):
        if searching:
            return whole(name, ws.python_value(pre + name))
        return [int(ws.python_value(base + single))]

    out = {"t": ints("tp", "tp"), "p": ints("pp", "pp"), "c": ints("cp", "cp"), "e": ints("ep", "ep"),
           "v": ints("virtual", "virtual"), "z": ints("zero", "zero")}
    if searching:
        out["b"] = whole("micro_batch", ws.python_value(pre + "micro_batch"))
        rc = ws.python_value(pre + "recompute")
        sq = ws.python_value(pre + "sequence_parallel")
    else:
        out["b"] = [int(round(float(ws.base_value(f"{plan}.micro_batch"))))]
        rc = (ws.python_value(base + "recompute"),)
        sq = ("on" if ws.python_value(base + "sequence_parallel") else "off",)
    for x in rc:
        if x not in RECOMPUTE:
            raise PlanError([Diagnostic("error", "search", f"unknown recompute mode '{x}' in `use layout_search`",
                                        ws.nodes[pre + "recompute"].span, "valid: " + ", ".join(RECOMPUTE))])
    for x in sq:
        if x not in ("off", "on"):
            raise PlanError([Diagnostic("error", "search", f"unknown sequence_parallel setting '{x}'",
                                        ws.nodes[pre + "sequence_parallel"].span, "valid: off, on")])
    out["r"] = sorted({RECOMPUTE.index(x) for x in rc})
    out["sp"] = sorted({1 if x == "on" else 0 for x in sq})
    off = ws.python_value(pre + "offload") if searching else (ws.python_value(base + "offload"),)
    for x in off:
        if x not in OFFLOAD:
            raise PlanError([Diagnostic("error", "search", f"unknown offload setting '{x}' in `use layout_search`",
                                        ws.nodes[pre + "offload"].span, "valid: none, optimizer")])
    if "optimizer" in off and (f"{base}host_bandwidth" not in ws.nodes or ws.base_value(f"{base}host_bandwidth") is None):
        node = ws.nodes.get(pre + "offload") if searching else ws.nodes.get(base + "offload")
        raise PlanError([Diagnostic("error", "search", "offload = \"optimizer\" needs the host memory bandwidth "
                                    "of the CPU optimizer step", node.span if node is not None else None,
                                    "add `host_bandwidth = …` (e.g. 50 GB/s per GPU) to `use layout`")])
    out["off"] = sorted({OFFLOAD.index(x) for x in off})
    from dsl.plugin import current_limits, limit_hint
    n, cap = math.prod(len(v) for v in out.values()), current_limits().points
    if n > cap:
        node = ws.nodes.get(pre + "tp") if searching else None
        span = ws.decls[plan].use_spans.get("layout_search") if searching else None
        raise PlanError([Diagnostic("error", "limit", f"`use layout_search` in '{plan}' spans {n:,} layouts, "
                                    f"above the limit of {cap:,} points", span or (node.span if node else None),
                                    "list fewer values per knob, or " + limit_hint("points"))])
    return out


def grid(lists: dict, gpus: int) -> dict:
    """Candidate arrays (int64): the product of the knob lists in the order
    tp, pp, cp, ep, virtual, micro_batch, zero, recompute, sequence_parallel, offload, and
    dp = gpus // (tp·pp·cp) (at least 1; the ``gpus_product`` rule rejects a remainder)."""
    np = _np()
    order = GRID_ORDER
    mesh = np.meshgrid(*[np.asarray(lists[k], dtype=np.int64) for k in order], indexing="ij")
    X = {k: m.ravel() for k, m in zip(order, mesh)}
    X["d"] = np.maximum(1, gpus // (X["t"] * X["p"] * X["c"]))
    return X


# ---------------------------------------------------------------- evaluation
def evaluate_chunk(K: dict, X: dict, meta: dict) -> dict:
    """Evaluate candidates ``X`` (arrays): the layout's terms, memory and the index of the
    first validity rule each breaks (-1 if none; ``len(rules)`` for memory).  A pure
    function of its arguments: the unit of work of both engines."""
    np = _np()
    from plugins.training import layout_model as lm

    o = lm.ops("numpy")
    Xf = {k: v.astype(float) for k, v in X.items()}
    K = dict(K)
    if "B" in Xf:            # a global batch per candidate (batch tolerance)
        K["B"] = Xf["B"]
    if "G" in Xf:            # a GPU count per candidate (neighbouring GPU counts)
        K["gpus"] = Xf["G"]
    skip = meta.get("skip_rules", ())
    with np.errstate(all="ignore"):
        out = lm.evaluate(K, Xf, o, meta["activations"], meta["moe"])
        R = lm.rules(meta["moe"], meta["cross_host_tp"])
        fail = np.full(len(X["t"]), -1, dtype=np.int64)
        for i, (name, _, lhs, op, rhs) in enumerate(R):
            if name in skip:
                continue
            lv = np.broadcast_to(np.asarray(lhs(K, Xf), dtype=float), fail.shape)
            rv = np.broadcast_to(np.asarray(rhs(K, Xf), dtype=float), fail.shape)
            ok = {"==": np.abs(lv - rv) <= 1e-9 * np.maximum(1, np.abs(rv)), "<=": lv <= rv}[op]
            fail = np.where((fail < 0) & ~ok, i, fail)
        from plugins.training.layout_pipeline import pipeline_inputs
        piped = pipeline_inputs(K, Xf, out, fail < 0, meta)
        chunks = piped.pop("chunks", None)
        if piped:                      # the pipelines' own makespans and chunk memory: price again
            Xf.update(piped)
            out = lm.evaluate(K, Xf, o, meta["activations"], meta["moe"])
        # a layout fits only when its memory is a number no larger than the usable memory and the
        # device's capacity (a NaN or a usable budget stated above the device never passes)
        limit = meta.get("capacity", meta["usable"])
        # (what the runtime reserves, runtime_memory, as the plan's fits_memory compares)
        fits = np.asarray(out["runtime"], dtype=float) <= limit
        fail = np.where((fail < 0) & ~fits, len(R), fail)
    cols = {k: np.broadcast_to(np.asarray(v, dtype=float), fail.shape).copy()
            for k, v in out.items() if k in lm.TERMS or k in ("step", "persistent", "activation", "m")}
    # the memory column is what decides the fit: the runtime memory (runtime_memory), not the
    # model's state and activations (memory_per_gpu)
    cols["memory"] = np.broadcast_to(np.asarray(out["runtime"], dtype=float), fail.shape).copy()
    cols["fail"] = fail
    cols["chunks"] = chunks if chunks is not None else np.full(len(fail), None, dtype=object)
    return cols


def _evaluate(args):
    """:func:`evaluate_chunk` on one ``(K, X, meta)`` (the executor's task)."""
    return evaluate_chunk(*args)


def _engine(K, X, meta, chunks, progress, executor):
    """The grid's columns: one numpy call in this process, or ``chunks`` contiguous slices run as
    tasks on ``executor`` (:class:`dsl.plugin.Executor`) and concatenated in order — elementwise
    numpy on the same values, so the columns are identical bit for bit."""
    np = _np()
    if not executor.parallel:
        return evaluate_chunk(K, X, meta)
    n = len(X["t"])
    bounds = np.linspace(0, n, max(1, min(chunks, n)) + 1).astype(int)
    tasks = [(K, {k: v[lo:hi] for k, v in X.items()}, meta) for lo, hi in zip(bounds[:-1], bounds[1:])]
    try:
        parts = executor.map(_evaluate, tasks, progress=progress)
    except MissingEngine as e:
        raise MissingDependency(f"plan search {e}") from None
    except ExecutorError as e:
        raise SearchError(str(e)) from None
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def run(ws, plan: str, engine: str = "serial", scheduler: str | None = None, chunks: int = 8,
        progress=None, client=None, workers: int = 1, executor=None) -> SearchResult:
    """Search the layouts of ``plan`` (see the module docstring).

    :param executor: the :class:`dsl.plugin.Executor` to run on; else one made of ``engine``
        (``serial``/``local``: one numpy call; ``processes``; ``dask``), ``workers``,
        ``scheduler`` and ``client`` (an existing ``distributed.Client``), closed afterwards.
        A parallel engine runs ``chunks`` tasks; the result is the same.
    :param progress: ``progress(done, total)`` after each finished chunk (parallel engines).
    :raises SearchError: numpy/dask missing or the scheduler unreachable.
    :raises PlanError: the plan has no ``use layout`` or a bad list value.
    """
    if executor is None:
        try:
            with Executor(engine, workers, scheduler, client=client) as ex:
                return run(ws, plan, chunks=chunks, progress=progress, executor=ex)
        except MissingEngine as e:
            raise MissingDependency(f"plan search {e}") from None
        except ExecutorError as e:
            raise SearchError(str(e)) from None
    np = _np()
    from plugins.training import layout_model as lm

    K, meta = constants(ws, plan)
    X = grid(knob_lists(ws, plan), int(K["gpus"]))
    etp = ws.python_value(f"{plan}.layout.etp") if f"{plan}.layout.etp" in ws.nodes else None
    if meta["moe"] and etp is not None:     # the layout's expert-TP degree (default: each candidate's tp)
        X["et"] = np.full_like(X["t"], int(etp))
    if meta["batch_tolerance"] > 0:
        X["B"] = nearest_batch(K["B"], X, meta["batch_tolerance"])
    cols = _engine(K, X, meta, chunks, progress, executor)
    R = lm.rules(meta["moe"], meta["cross_host_tp"])
    names = [r[0] for r in R] + ["fits_memory"]
    reasons = np.array([r[1] for r in R] + [MEMORY_REASON] + [""], dtype=object)
    res = SearchResult(plan, meta=meta)
    c = res.columns
    c.update(X)
    c.update({k: v for k, v in cols.items() if k != "fail"})
    fail = cols["fail"]
    c["valid"] = fail < 0
    c["reason"] = reasons[np.where(fail < 0, len(reasons) - 1, fail)]
    steps = meta["steps"] or 0.0
    if "B" in X and meta["tokens"]:          # an adjusted batch trains the same tokens in other steps
        tok, per = meta["tokens"], K["s"] * X["B"]
        if tok == int(tok) and K["s"] == int(K["s"]):     # whole tokens: exact integer ceiling
            per = (X["B"] * int(K["s"])).astype(np.int64)
            steps = ((int(tok) + per - 1) // per).astype(float)
        else:
            steps = np.ceil(tok / per)
    c["finish"] = meta["reserved"] + steps * c["step"] * (1 + meta["overhead"])
    dl = meta["deadline"]
    c["meets_deadline"] = c["finish"] <= dl if dl else np.ones(len(fail), dtype=bool)
    mem_u = c["memory"] / meta["usable"]
    time_u = c["finish"] / dl if dl else np.zeros(len(fail))
    c["binding"] = np.where(time_u >= mem_u, "deadline", "memory").astype(object)
    meta["rejections"] = {names[i]: int((fail == i).sum()) for i in range(len(names)) if (fail == i).any()}
    meta["constants"] = {k: float(v) for k, v in K.items() if not isinstance(v, str)}
    _rank(res)
    res._inputs = (K, X, names, fail)
    return res


def nearest_batch(B: float, X: dict, tolerance: float):
    """Per candidate, the global batch nearest to ``B`` that dp·micro-batch divides (and, with
    interleaving, that gives a multiple of pp micro-batches), when it lies within ± ``tolerance``·B;
    otherwise ``B`` itself (the ``micro_batches_whole`` rule then rejects the layout).  Ties go
    to the smaller batch."""
    np = _np()
    unit = X["d"] * X["b"] * np.where(X["v"] > 1, X["p"], 1)
    lo = np.maximum(1, np.floor(B / unit)) * unit
    hi = np.maximum(1, np.ceil(B / unit)) * unit
    near = np.where(np.abs(hi - B) < np.abs(B - lo), hi, lo)
    return np.where(np.abs(near - B) <= tolerance * B * (1 + 1e-12), near, B).astype(np.int64)


def _display(X: dict, i: int) -> dict:
    from plugins.training.layout_model import RECOMPUTE
    out = {KNOB_NAMES[k]: int(X[k][i]) for k in KNOBS}
    out["recompute"] = RECOMPUTE[out["recompute"]]
    out["sequence_parallel"] = bool(out["sequence_parallel"])
    out["offload"] = OFFLOAD[out["offload"]]
    return out


BATCH_RULES = ("micro_batches_whole", "interleave_microbatches")


def diagnose(K: dict, X: dict, meta: dict, names: list, fail) -> dict:
    """Why no layout is valid and what would admit one: the rule that rejects the most
    candidates, the nearest global batch some layout accepts at this GPU count (every
    other rule and memory still hold; batch-only rules are the ones a batch can fix), and
    the nearest GPU count (whole hosts first) at which some layout is valid with this batch."""
    np = _np()
    counts = np.bincount(fail[fail >= 0], minlength=len(names))
    top = int(np.argmax(counts))
    out = {"most_common": names[top], "rejected_by_it": int(counts[top]), "candidates": int(len(fail))}
    # nearest batch: candidates valid but for the batch rules, the nearest multiple of their unit
    m2 = dict(meta, skip_rules=BATCH_RULES)
    Xb = {k: v for k, v in X.items() if k != "B"}
    ok = evaluate_chunk(K, Xb, m2)["fail"] < 0
    B = meta["global_batch"]
    if ok.any():
        unit = (Xb["d"] * Xb["b"] * np.where(Xb["v"] > 1, Xb["p"], 1))[ok]
        lo = np.maximum(1, np.floor(B / unit)) * unit
        hi = np.maximum(1, np.ceil(B / unit)) * unit
        cand = np.concatenate([lo, hi])
        j = int(np.lexsort((cand, np.abs(cand - B)))[0])
        out["nearest_batch"] = int(cand[j])
        idx = np.nonzero(ok)[0][j % ok.sum()]
        out["nearest_batch_layout"] = _display(Xb, idx)
    # nearest GPU count: whole hosts around the count, nearest first, a few at a time
    gpus, gph = int(K["gpus"]), int(K["gph"])
    step = gph if gpus >= gph and gpus % gph == 0 else 1
    reach = max(1, min(64, gpus // (4 * step)))
    base = {k: v for k, v in X.items() if k not in ("d", "G")}
    n = len(base["t"])
    for lo_k in range(1, reach + 1, 8):
        ks = [k for d in range(lo_k, min(reach, lo_k + 7) + 1) for k in (-d, d) if gpus + k * step >= 1]
        if not ks:
            break
        G = np.repeat(np.array([gpus + k * step for k in ks], dtype=np.int64), n)
        Xg = {k: np.tile(v, len(ks)) for k, v in base.items()}
        Xg["G"] = G
        Xg["d"] = np.maximum(1, G // (Xg["t"] * Xg["p"] * Xg["c"]))
        if meta["batch_tolerance"] > 0:
            Xg["B"] = nearest_batch(B, Xg, meta["batch_tolerance"])
        good = np.nonzero(evaluate_chunk(K, Xg, meta)["fail"] < 0)[0]
        if good.size:
            i = int(good[np.lexsort((G[good], np.abs(G[good] - gpus)))[0]])
            out["nearest_gpus"] = int(G[i])
            out["nearest_gpus_layout"] = _display(Xg, i)
            break
    else:
        out["gpus_searched"] = [max(1, gpus - reach * step), gpus + reach * step]
    return out


def _rank(res: SearchResult) -> None:
    """Pareto front (step time vs memory, valid layouts), best and runner-up (fastest valid,
    preferring those that meet the deadline; ties broken by memory, then candidate order)
    and the explanations."""
    np = _np()
    c = res.columns
    idx = np.nonzero(c["valid"])[0]
    if idx.size == 0:
        return
    key = np.lexsort((idx, np.round(c["memory"][idx], 3), np.round(c["step"][idx], 9), ~c["meets_deadline"][idx]))
    order = idx[key]
    res.best = int(order[0])
    # the runner-up is the next layout that differs from the best in step time or memory;
    # layouts equal in both (e.g. micro-batch sizes under a declared transient budget) tie
    same = (np.isclose(c["step"][order], c["step"][res.best], rtol=1e-12, atol=0)
            & np.isclose(c["memory"][order], c["memory"][res.best], rtol=1e-12, atol=0))
    res.meta["ties"] = [res.layout(int(i)) for i in order[1:][same[1:]]]
    rest = order[~same]
    res.runner_up = int(rest[0]) if rest.size else None
    by_time = idx[np.lexsort((idx, c["memory"][idx], c["step"][idx]))]
    front, best_mem = [], np.inf
    for i in by_time:
        if c["memory"][i] < best_mem:
            front.append(int(i))
            best_mem = c["memory"][i]
    res.pareto = front
    if res.runner_up is not None:
        res.explanations.append(explain(res, res.best, res.runner_up, "runner-up"))
    # the best layout of every other tp and pp value: why it loses
    for knob in ("t", "p"):
        for val in sorted(set(c[knob][idx].tolist())):
            if val == c[knob][res.best]:
                continue
            cand = [i for i in order if c[knob][i] == val]
            if cand and int(cand[0]) != res.runner_up:
                res.explanations.append(explain(res, res.best, int(cand[0]), f"best with {KNOB_NAMES[knob]} = {val}"))


def explain(res: SearchResult, best: int, other: int, label: str) -> dict:
    """Why layout ``other`` loses to ``best``: step-time difference and each critical-path
    term's difference (s), largest first; memory difference (GiB)."""
    from plugins.training.layout_model import TERMS, term_name
    c = res.columns
    diffs = sorted(((float(c[k][other] - c[k][best]), k) for k in TERMS), key=lambda x: -x[0])
    main = [d for d in diffs if d[0] > 1e-12]
    reason = (f"{term_name(main[0][1], res.meta.get('efficiency', 'mfu'))} +{main[0][0]:.3g} s" if main
              else "no slower term")
    if not res.columns["meets_deadline"][other] and res.columns["meets_deadline"][best]:
        reason += "; misses the deadline"
    return {"label": label, "layout": res.layout(other), "step_delta_s": float(c["step"][other] - c["step"][best]),
            "memory_delta_gib": float(c["memory"][other] - c["memory"][best]) / 2 ** 30,
            "terms_delta_s": {k: d for d, k in diffs if abs(d) > 1e-12}, "loses_on": main[0][1] if main else None,
            "reason": reason}


# ---------------------------------------------------------------- display
def _short(lay: dict) -> str:
    return (f"tp={lay['tp']} pp={lay['pp']} dp={lay['dp']} cp={lay['cp']} ep={lay['ep']} "
            f"mb={lay['micro_batch']} v={lay['virtual']} zero={lay['zero']} rc={lay['recompute']} "
            f"sp={'on' if lay['sequence_parallel'] else 'off'}"
            + (f" offload={lay['offload']}" if lay.get("offload", "none") != "none" else "")
            + (f" batch={lay['global_batch']}" if lay.get("batch_adjusted") else ""))


def table(res: SearchResult, top: int = 10):
    """A :class:`dsl.plugin.manager.Table` of the best ``top`` valid layouts (for ``plan eval``)."""
    from dsl.plugin import Table
    np = _np()
    c = res.columns
    idx = np.nonzero(c["valid"])[0]
    order = idx[np.lexsort((idx, c["memory"][idx], c["step"][idx], ~c["meets_deadline"][idx]))][:top]
    rows = []
    for i in order:
        r = res.row(int(i))
        rows.append((_short(r), round(r["step_s"], 3), round(r["memory_gib"], 2),
                     round(r["finish_day"], 2) if r["finish_day"] is not None else "", r["binding"],
                     "yes" if int(i) in res.pareto else ""))
    notes = [f"{len(res)} candidates, {int(idx.size)} valid; activations: {res.meta['activations']}"
             + ("; compute: efficiency = roofline" if res.meta.get("efficiency") == "roofline" else "")]
    notes += [f"{e['label']} ({_short(e['layout'])}) loses by {e['step_delta_s']:.3g} s: {e['reason']}"
              for e in res.explanations]
    notes += [f"rejected by {k}: {n}" for k, n in res.meta["rejections"].items()]
    return Table(("layout", "step (s)", "runtime memory (GiB)", "finish (day)", "binding", "Pareto"), tuple(rows),
                 tuple(notes))


def format_text(res: SearchResult, top: int = 10, show_all: bool = False) -> str:
    """The search as text: summary, best layout and its terms, why the others lose, the
    Pareto front, the top valid layouts and the rejected ones with their reasons."""
    from plugins.training.layout_model import TERMS, term_name
    np = _np()
    c, m = res.columns, res.meta
    n_valid = int(c["valid"].sum())
    act = ("declared transient budget " + f"{m['constants']['transient'] / 2 ** 30:.4g} GiB"
           if m["activations"] == "transient" else "Korthikanti formulas (per recompute mode)")
    lines = [f"layout search: plan {res.plan} — {int(m['constants']['gpus'])} GPUs, "
             f"{int(m['constants']['gph'])} per host, link {m['link']}" + (f", NIC {m['nic']}" if m["nic"] else ""),
             f"activations: {act}",
             *([f"compute: efficiency = roofline (matrix products on {m['device']}'s efficiency curve, "
                "memory-bound work at its bandwidth)"] if m.get("efficiency") == "roofline" else []),
             *([f"pipelines: priced as 1F1B (interleaved when virtual > 1) on the layers split by balance = "
                f"\"{m.get('balance', 'layers')}\", not the plan's "
                f"{'own stage_layers' if m.get('stage_layers') else m['schedule'] + ' schedule'}; --emit writes "
                "the schedule and split priced"] if m.get("stage_layers") or m.get("schedule") not in ("1f1b", "interleaved")
               else []),
             f"candidates {len(res)}, valid {n_valid}, rejected {len(res) - n_valid}"]
    for k, n in m["rejections"].items():
        lines.append(f"  rejected by {k}: {n}")
    if res.best is None:
        lines.append("no valid layout")
        lines += _diagnosis_lines(res)
        return "\n".join(lines)
    b = res.row(res.best)
    lines.append("")
    fin = f", finish {b['finish_day']:.4g} day" if b["finish_day"] is not None else ""
    lines.append(f"best: {_short(b)}")
    if b["stage_layers"] is not None and len(set(b["stage_layers"])) > 1:
        lines.append(f"  uneven stage_layers = {list(b['stage_layers'])} (balance = \"{m.get('balance', 'layers')}\")")
    verdict = (f"{'meets' if b['meets_deadline'] else 'MISSES'} the deadline, binding: {b['binding']}"
               if m.get("deadline") else "no deadline stated (the workload's `deadline`)")
    lines.append(f"  step {b['step_s']:.4g} s, memory {b['memory_gib']:.4g} GiB{fin}, {verdict}")
    for k in TERMS:
        if b["terms_s"][k]:
            lines.append(f"    {term_name(k, m.get('efficiency', 'mfu')):<48} {b['terms_s'][k]:10.4g} s")
    if m.get("ties"):
        lines.append(f"  {len(m['ties'])} other layout(s) tie with it in step time and memory: "
                     + "; ".join(_short(t) for t in m["ties"][:3]) + (" …" if len(m["ties"]) > 3 else ""))
    for e in res.explanations:
        lines.append(f"{e['label']}: {_short(e['layout'])}")
        lines.append(f"  loses by {e['step_delta_s']:.4g} s ({e['reason']}); memory {e['memory_delta_gib']:+.3g} GiB")
    lines.append("")
    lines.append("Pareto front (step time vs runtime memory per GPU):")
    for i in res.pareto:
        r = res.row(i)
        lines.append(f"  {r['step_s']:10.4g} s  {r['memory_gib']:8.4g} GiB  {_short(r)}")
    idx = np.nonzero(c["valid"])[0]
    order = idx[np.lexsort((idx, c["memory"][idx], c["step"][idx], ~c["meets_deadline"][idx]))]
    shown = order if show_all else order[:top]
    lines.append("")
    lines.append(f"valid layouts ({len(shown)} of {idx.size}, fastest first):")
    for i in shown:
        r = res.row(int(i))
        due = f"{'ok ' if r['meets_deadline'] else 'late'}  {r['binding']:<8}  " if m.get("deadline") else ""
        lines.append(f"  {r['step_s']:10.4g} s  {r['memory_gib']:8.4g} GiB  {due}{_short(r)}")
    rej = np.nonzero(~c["valid"])[0]
    shown = rej if show_all else rej[:top]
    if rej.size:
        lines.append("")
        lines.append(f"rejected layouts ({len(shown)} of {rej.size}):")
        for i in shown:
            lines.append(f"  {_short(res.layout(int(i)))}: {c['reason'][i]}")
    return "\n".join(lines)


def _diagnosis_lines(res: SearchResult) -> list:
    d = res.diagnose()
    if not d:
        return []
    from plugins.training.layout_model import rules
    reason = {r[0]: r[1] for r in rules(res.meta["moe"], res.meta["cross_host_tp"])}.get(
        d["most_common"], MEMORY_REASON)
    lines = [f"  why: most candidates ({d['rejected_by_it']} of {d['candidates']}) break {d['most_common']} "
             f"({reason})"]
    B = int(res.meta["global_batch"])
    if "nearest_batch" in d:
        lay = d["nearest_batch_layout"]
        lines.append(f"  nearest feasible global batch at {int(res.meta['constants']['gpus'])} GPUs: "
                     f"{d['nearest_batch']} seq (instead of {B}), e.g. tp={lay['tp']} pp={lay['pp']} "
                     f"dp={lay['dp']} mb={lay['micro_batch']}")
    else:
        lines.append(f"  no global batch helps at {int(res.meta['constants']['gpus'])} GPUs: every layout breaks "
                     "another rule or memory")
    if "nearest_gpus" in d:
        lay = d["nearest_gpus_layout"]
        lines.append(f"  nearest feasible GPU count with batch {B}: {d['nearest_gpus']} GPUs, e.g. "
                     f"tp={lay['tp']} pp={lay['pp']} dp={lay['dp']} mb={lay['micro_batch']} zero={lay['zero']}")
    else:
        lo, hi = d["gpus_searched"]
        lines.append(f"  no GPU count from {lo} to {hi} admits a layout with batch {B}")
    return lines


def iter_candidates(lists: dict):
    """Candidates one by one, in :func:`grid` order (for tests of the vectorised path)."""
    order = GRID_ORDER
    for vals in itertools.product(*[lists[k] for k in order]):
        yield dict(zip(order, vals))


# ---------------------------------------------------------------- writing the chosen layout back
def emit_plan(results: list, source, target) -> str:
    """A `.plan` text that imports ``source`` and, for each searched plan, declares
    ``PLAN_best extends PLAN`` with the best layout's knobs in ``use layout`` (every knob the
    search varies, dp and the schedule the closed form prices written out, so that the base
    plan's own values do not leak in) — `plan eval` of it reports the search row's step time,
    memory per GPU and finish time.  An adjusted global batch (``batch_tolerance``) becomes a
    workload ``WORKLOAD_PLAN`` extending the plan's.  Plans without a valid layout are
    skipped with a comment.  ``source`` and ``target`` are paths; the import is relative to
    ``target``'s directory."""
    import os
    from pathlib import Path
    src, tgt = Path(source).resolve(), Path(target).resolve()
    rel = os.path.relpath(src, tgt.parent).replace(os.sep, "/")
    out = [f"# The layouts `plan search` chose for the plans of {src.name}, written back as plans:",
           f"# `plan eval {tgt.name}` prices each with the same model.", "", f'import "{rel}"', ""]
    for res in results:
        if res.best is None:
            out += [f"# plan {res.plan}: no valid layout", ""]
            continue
        r = res.row(res.best)
        fin = f", finish {r['finish_day']:.4g} day" if r["finish_day"] is not None else ""
        out.append(f"# best of {len(res)} candidates: step {r['step_s']:.4g} s, memory {r['memory_gib']:.4g} GiB{fin}")
        wl = None
        if r["batch_adjusted"]:
            wl = f"{res.meta['workload']}_{res.plan}"
            out.append(f"workload {wl} extends {res.meta['workload']} {{ global_batch = {r['global_batch']} seq }}")
        lay = [f"tp = {r['tp']}; pp = {r['pp']}; dp = {r['dp']}; cp = {r['cp']}; ep = {r['ep']}",
               f"virtual = {r['virtual']}; schedule = \"{'interleaved' if r['virtual'] > 1 else '1f1b'}\"",
               f"zero = {r['zero']}; recompute = \"{r['recompute']}\"; "
               f"sequence_parallel = {'true' if r['sequence_parallel'] else 'false'}; offload = \"{r['offload']}\""]
        split = r["stage_layers"]
        if split is not None and (res.meta.get("stage_layers")
                                  or (len(set(split)) > 1 and res.meta.get("balance") != "compute")):
            # the split priced (the base's own stage_layers would not fit another pp)
            lay.append("stage_layers = [" + ", ".join(str(x) for x in split) + "]")
        elif split is not None and len(set(split)) > 1:
            lay.append(f"# balance = \"compute\" splits the layers {split}")
        out.append(f"plan {res.plan}_best extends {res.plan} {{")
        if wl:
            out.append(f"  workload = {wl}")
        out.append(f"  micro_batch = {r['micro_batch']} seq")
        out.append("  use layout {")
        out += [f"    {x}" for x in lay]
        out += ["  }", "}", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- the `plan search` command
SEARCH_HELP = "search the parallel layouts of a plan (TP × PP × DP/ZeRO × EP × CP)"
SEARCH_DESCRIPTION = ("Evaluate every layout of a plan's `use layout_search` lists (around its `use layout`) with "
                      "numpy: valid layouts with step time, memory per GPU and binding constraint, rejected ones "
                      "with their reason, the Pareto front and why the runner-up loses.  --workers N runs it as "
                      "--chunks tasks on N local processes, --engine dask as Dask tasks (pip install "
                      "\"plan-dsl[dist]\"), with the same result; see docs/plugins/layout.md.")


def add_arguments(se) -> None:
    """The arguments of ``plan search`` (an argparse parser)."""
    se.add_argument("file", metavar="FILE")
    se.add_argument("--plan", action="append", metavar="NAME", help="plan to search (default: every plan with "
                                                                      "`use layout_search`)")
    add_engine_arguments(se)
    se.add_argument("--chunks", type=int, default=8, metavar="N",
                    help="tasks per search on several workers or Dask (default 8)")
    se.add_argument("--top", type=int, default=10, metavar="N", help="layouts listed (default 10)")
    se.add_argument("--all", action="store_true", help="list every valid and rejected layout")
    se.add_argument("--format", choices=("text", "json"), default="text")
    se.add_argument("--emit", metavar="OUT.plan", help="write the best layout of each plan back as a .plan that "
                                                        "imports FILE and extends the plan (PLAN_best)")


def run_command(args, cli) -> int:
    """``plan search``: ``cli`` is the CLI's command context (load, select_plans, exit codes)."""
    import json
    import sys

    try:
        _np()
    except SearchError as e:
        print(f"plan: error[missing-dependency]: {e}", file=sys.stderr)
        return getattr(cli, "EXIT_MISSING", 3)
    ws = cli.load(args.file)
    if args.plan:
        plans = cli.select_plans(ws, args.file, args.plan)
    else:
        plans = [p for p in ws.plans(own=True) if "layout_search" in ws.uses(p)]
    if not plans:
        with_layout = [p for p in ws.plans(own=True) if "layout" in ws.uses(p)]
        where = (f"add `use layout_search {{ tp = [1, 2, 4, 8]; zero = [1, 3] }}` (the knob values to try) to "
                 + (f"plan '{with_layout[0]}', which has `use layout`" if with_layout else
                    "a plan with `use layout { … }` (the layout the candidates vary)")
                 + ", or name a plan with --plan; docs/plugins/layout.md lists the knobs")
        print(f"plan: error[search]: no plan in {args.file} has `use layout_search`, so there is nothing to search\n"
              f"  hint: {where}", file=sys.stderr)
        return cli.EXIT_USAGE

    def progress(done, total):
        print(f"search: {done}/{total} chunks done", file=sys.stderr)

    out = {}
    try:
        ex = current_executor()            # the run's (--engine, --workers, --scheduler)
        for p in plans:
            out[p] = run(ws, p, chunks=args.chunks, progress=progress if ex.parallel else None, executor=ex)
    except (SearchError, ExecutorError) as e:
        missing = isinstance(e, (MissingDependency, MissingEngine))
        hint = f"\n  hint: {e.hint}" if getattr(e, "hint", "") else ""
        print(f"plan: error[{'missing-dependency' if missing else 'search'}]: {e}{hint}", file=sys.stderr)
        return getattr(cli, "EXIT_MISSING", 3) if missing else cli.EXIT_USAGE
    if args.emit:
        from pathlib import Path
        target = Path(args.emit)
        if target.suffix != ".plan":
            print(f"plan: error[search]: --emit writes a .plan file, not '{args.emit}'", file=sys.stderr)
            return cli.EXIT_USAGE
        try:
            target.write_text(emit_plan(list(out.values()), args.file, target), encoding="utf-8")
        except OSError as e:
            print(f"plan: error[search]: cannot write {args.emit}: {e.strerror}", file=sys.stderr)
            return cli.EXIT_USAGE
        print(f"search: wrote {args.emit} (" + ", ".join(f"{p}_best" for p, r in out.items() if r.best is not None)
              + ")", file=sys.stderr)
    if args.format == "json":
        print(json.dumps({p: r.to_json() for p, r in out.items()}, indent=2, sort_keys=True))
        return cli.EXIT_OK
    print("\n\n".join(format_text(r, top=args.top, show_all=args.all) for r in out.values()))
    return cli.EXIT_OK

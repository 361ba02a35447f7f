"""ZeRO / FSDP sharding of the training state — a thin alias of the training step's ``zero``
knob (plugins/training/layout.py), kept for plans written as ``use compute {}`` + ``use zero {…}``.

``use zero { stage = 3; group = gpus; link = pcie4_x16; nic = nic_200g; nics_per_host = 8;
prefetch = true }`` is the same as ``use layout { zero = 3; dp = …; link = pcie4_x16;
nic = nic_200g; nics_per_host = 8; prefetch = true }``: one model prices both.  Without a
training step (no ``use layout``/``use compute``) only the memory side is priced:

Persistent state per GPU over a data-parallel group of d GPUs (book §10.2.1), with W, G, M, O
the weights, grads, master and optimizer state of the whole model (from ``use memory``):

* stage 0: W + G + M + O                   (16N for BF16/Adam)
* stage 1: W + G + (M + O)/d                (4N + 12N/d)
* stage 2: W + (G + M + O)/d                (2N + 14N/d)
* stage 3: (W + G + M + O)/d                (16N/d)

The communication volumes and their exposure are documented in plugins/training/layout.py and
plugins/training/layout_model.py.  Figure ``memory-shards`` draws ``memory_per_gpu`` over d against
the usable memory (book fig. 10-16, :func:`memory_curve`).

Book provenance of the references: ch. 10 §10.2.1 (state per GPU), §10.3.3 (ZeRO communication
volume), §10.6.2 (bandwidth across the host cut).
"""
from __future__ import annotations

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

SPEC = UseSpec(
    "zero",
    "ZeRO/FSDP sharding of the training state and its communication on the GPU's link",
    references=("ZeRO stages, training state per GPU, and their communication volume: Rajbhandari et al. 2020, "
                "'ZeRO: Memory Optimizations Toward Training Trillion Parameter Models'",
                "bandwidth across the host cut: min(GPU link, NICs per host × NIC bandwidth)",
                "Jiang et al. 2024, 'MegaScale' (exposed communication)"),
    params=(
        Param("stage", "", "3", "ZeRO stage: 0 plain DP, 1 optimizer, 2 +grads, 3 +weights", kind="int",
              min=0, max=3),
        Param("group", "", "gpus", "GPUs in the sharding (data-parallel) group", min=1, whole=True),
        Param("link", kind="ref", ref_kind="link", optional=True,
              doc="the link each GPU's collective traffic crosses (omit to price memory only)"),
        Param("nic", kind="ref", ref_kind="link", optional=True,
              doc="the NIC that carries inter-host traffic (omit on one host)"),
        Param("nics_per_host", "", "gpus_per_host", "NICs per host that share the ring's host cut", min=1, whole=True),
        Param("prefetch", default="true", kind="bool",
              doc="parameters are prefetched and gradients reduced while compute runs"),
        Param("reshard_after_forward", default="true", kind="bool",
              doc="stage 3: free each layer's gathered parameters after its forward and gather them again for its "
                  "backward (FSDP2's default); false keeps them gathered from forward to backward"),
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the model trained"),
        Param("gpus", "", "1", "number of GPUs (required by `use compute`)", min=1, whole=True),
        Param("gpus_per_host", "", "8", "GPUs in one host", min=1, whole=True),
    ),
    order=30,
    provides=("persistent_memory", "weights_per_gpu", "grads_per_gpu", "master_per_gpu", "optimizer_per_gpu",
              "activation_memory", "memory_per_gpu", "memory_margin",
              "transfer_volume", "link_bandwidth", "transfer_time", "transfer_per_microbatch",
              "comm_head", "comm_tail", "gather_time", "gathered_memory", "workspace_memory", "allocator_memory",
              "runtime_memory", "runtime_margin", "loss_memory"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


# ---------------------------------------------------------------- figure 10-16
def memory_curve(ws, plan: str, ds) -> list[float] | None:
    """``memory_per_gpu`` of ``plan`` (bytes) at each sharding degree d in ``ds``.

    The plan's own expression is evaluated with ``zero.group`` free and every other input at
    its nominal value (stage 3 with BF16/Adam: 16N/d + transient, book fig. 10-16).
    """
    import sympy as sp

    target, mem = f"{plan}.zero.group", f"{plan}.memory_per_gpu"
    if target not in ws.nodes or mem not in ws.nodes or ws.base_value(mem) is None:
        return None
    free = frozenset({target})
    x = sp.Dummy("d")
    e = ws.full_expr(mem, free).xreplace(ws.nominal_map(exclude={target}))
    e = e.xreplace({s: x for s in e.free_symbols if s.name == target})
    f = sp.lambdify(x, e, modules=["mpmath"])
    return [float(f(d)) for d in ds]


def _draw_shards(ws, plan, fig) -> bool:
    if "zero" not in ws.decls[plan].uses or "memory" not in ws.decls[plan].uses:
        return False
    d0 = int(round(float(ws.base_value(f"{plan}.zero.group"))))
    ds = list(range(1, max(32, 2 * d0) + 1))
    ys = memory_curve(ws, plan, ds)
    if ys is None:
        return False
    gib = 2.0 ** 30
    usable = float(ws.base_value(f"{plan}.usable_memory")) / gib
    stage = int(ws.python_value(f"{plan}.zero.stage"))
    ax = fig.subplots()
    fig.set_size_inches(7, 4)
    ys_g = [y / gib for y in ys]
    ax.plot(ds, ys_g, "o-", ms=3, label=f"memory per GPU, ZeRO-{stage}")
    ax.axhline(usable, color="#C44E52", lw=1, label=f"usable {usable:.3g} GiB")
    fits = [d for d, y in zip(ds, ys_g) if y <= usable]
    if fits:
        ax.axvline(fits[0], color="#55A868", lw=0.8, ls="--", label=f"smallest d that fits: {fits[0]}")
    ax.plot([d0], [ys_g[d0 - 1]], "s", color="black", ms=5, label=f"this plan: d = {d0}")
    ax.set_xlabel("sharding degree d (GPUs)")
    ax.set_ylabel("GiB per GPU")
    ax.set_ylim(0, min(max(ys_g), 4 * usable) * 1.05)
    ax.set_title(f"{plan}: memory per GPU against the budget", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


@hookimpl
def plan_figures_register():
    from dsl.plugin import FigureSpec
    return [FigureSpec("memory-shards", "Memory per GPU over the sharding degree", _draw_shards,
                       "memory_per_gpu as a function of zero.group against usable memory",
                       references=("memory per GPU against the sharding degree: Rajbhandari et al. 2020, 'ZeRO: "
                                   "Memory Optimizations Toward Training Trillion Parameter Models'",))]

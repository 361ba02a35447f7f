"""What the framework a plan names (``use layout { framework }``) does by default, and how much of
each collective of the training step the runtime hides behind compute: the per-collective overlap
shares of ``use layout`` (``tp_overlap``, ``cp_overlap``, ``ep_overlap``, ``overlap``), the
framework's defaults for them and its fused attention kernel (:data:`FRAMEWORK_ATTENTION`), read alike by
``use layout`` (plugins/training/layout.py) and ``plan search`` (plugins/training/layout_search.py)
through :func:`collective_overlaps`, and applied per layout by :func:`exposed_shares`."""
from __future__ import annotations

from dsl.plugin import Param

#: the overlap each training framework's own implementation gives a collective when the plan names
#: it (``use layout { framework }``): "ring" — the collective is split into its ring's steps and each
#: step's transfer runs under the computation of the step before, so all but one of the degree's
#: steps are hidden: hidden share 1 − 1/degree (Wang et al. 2023, "Overlap Communication with
#: Dependent Computation via Decomposition in Large Deep Learning Models", ASPLOS; the same
#: decomposition as Transformer Engine's userbuffers TP overlap and its P2P context parallelism).
#: Per framework: Megatron-LM (flags' defaults): ``--tp-comm-overlap`` off, context parallelism
#: through Transformer Engine's P2P ring (``cp_comm_type = "p2p"``) overlapped with attention;
#: NeMo / Megatron-Bridge performance recipes: TP overlap on through userbuffers wherever tp > 1
#: (e.g. Megatron-Bridge ``perf_recipes/llama/h100/llama3.py`` and ``llama31.py``: the 70B and
#: 405B recipes set ``tp_comm_overlap_cfg``), the same P2P ring for CP; torchtitan (defaults):
#: async TP off (``enable_async_tensor_parallel = false``), context parallelism through PyTorch's
#: ring attention with the all-gather rotation (K/V gathered before attention); DeepSpeed: no TP
#: overlap, Ulysses all-to-all not overlapped.  A collective a framework does not list here takes
#: the plan's ``overlap``; the expert all-to-all is overlapped by the schedule (DualPipe), not by
#: a framework default.  A decomposed TP overlap hides less than the ring's 1 − 1/degree: the
#: split GEMMs run below the whole one's rate and the collectives take SMs from them, so the hidden
#: share is the device's ``tp_overlap_efficiency`` times 1 − 1/degree (fitted on a published on/off
#: comparison, specs/data/validation/README.md; 100 % where the device states none).
FRAMEWORK_OVERLAPS = {"none": {}, "megatron": {"cp": "ring"}, "nemo": {"tp": "ring", "cp": "ring"},
                      "torchtitan": {"tp": 0, "cp": 0}, "deepspeed": {"tp": 0, "cp": 0}}
FRAMEWORKS = tuple(FRAMEWORK_OVERLAPS)
#: the fused attention kernel each framework runs by default (``use layout { attention_kernel =
#: "auto" }``): NeMo, Megatron-Bridge and Megatron-LM through Transformer Engine's fused attention
#: (cuDNN's flash attention on Hopper); torchtitan and DeepSpeed through PyTorch's
#: ``scaled_dot_product_attention``, whose flash backend is FlashAttention-2 (PyTorch 2.2 release
#: notes); "none": the device's GEMM curve, as any matrix product
FRAMEWORK_ATTENTION = {"none": "gemm", "megatron": "cudnn", "nemo": "cudnn", "torchtitan": "flash2",
                       "deepspeed": "flash2"}
#: ``attention_kernel`` choices -> the device field of that kernel's efficiency ("gemm": none)
ATTENTION_KERNELS = {"auto": None, "gemm": None, "flash2": "flash2_attention_efficiency",
                     "flash3": "flash3_attention_efficiency", "cudnn": "cudnn_attention_efficiency"}


def attention_field(kernel: str, framework: str) -> str | None:
    """The device field whose efficiency the fused attention runs at, or None (the GEMM curve):
    the stated ``attention_kernel``, or with "auto" the framework's (:data:`FRAMEWORK_ATTENTION`)."""
    return ATTENTION_KERNELS[FRAMEWORK_ATTENTION[framework] if kernel == "auto" else kernel]


#: ``use layout { tp_comm_overlap }`` choices: "auto" (the framework's default), "on" (the TP
#: all-gathers and reduce-scatters decomposed under the GEMMs they feed: Megatron's
#: ``--tp-comm-overlap``, torchtitan's ``enable_async_tensor_parallel``), "off" (exposed)
TP_COMM_OVERLAP = ("auto", "on", "off")


#: the ``use layout`` parameters of this module's concern: each collective's hidden share, the TP
#: decomposition switch and the framework whose defaults they follow
OVERLAP_PARAMS = (
    Param("overlap", "", "0 %", "share of TP/CP/EP collectives hidden behind compute (the default of the three "
          "below)", min=0, max=1),
    Param("tp_overlap", "", None, "share of the TP collectives hidden behind the GEMMs they feed (Megatron/TE "
          "userbuffers, torchtitan's async TP; default: the framework's, else overlap)", min=0, max=1, optional=True),
    Param("tp_comm_overlap", default='"auto"', kind="choice", choices=TP_COMM_OVERLAP,
          doc="the TP all-gathers and reduce-scatters decomposed into the ring's steps under the GEMMs they feed "
              "(Megatron's --tp-comm-overlap through Transformer Engine's userbuffers, torchtitan's async TP): "
              "\"on\" hides the device's tp_overlap_efficiency times 1 − 1/tp of them, \"off\" none, \"auto\" the "
              "framework's default; a stated tp_overlap wins"),
    Param("cp_overlap", "", None, "share of the CP ring's K/V exchange hidden behind the attention of the block in "
          "hand (ring attention; default: the framework's, else overlap)", min=0, max=1, optional=True),
    Param("ep_overlap", "", None, "share of the EP dispatch/combine all-to-all hidden behind another micro-batch's "
          "compute (DualPipe; default: 100 % with schedule = \"dualpipe\", else overlap)", min=0, max=1,
          optional=True),
    Param("framework", default='"none"', kind="choice", choices=FRAMEWORKS,
          doc="the training framework whose defaults the step follows: its collective overlap (\"nemo\": the TP "
              "ring decomposed under its GEMMs and the CP ring; \"megatron\": the CP ring; \"torchtitan\", "
              "\"deepspeed\": TP and CP exposed; \"none\": every collective at `overlap`), its fused attention "
              "kernel (attention_kernel = auto) and, for \"torchtitan\", the runtime memory of DTensor's TP "
              "(gathered SP inputs, the vocabulary-parallel loss) and of torch.distributed.pipelining"),
)


def collective_overlaps(stated: dict, overlap, schedule: str, framework: str = "none",
                        tp_comm: str = "auto") -> dict:
    """``K["ov_tp"|"ov_cp"|"ov_ep"]``: each collective's hidden share, and ``K["ring_tp"|…]`` = 1
    where that share is the ring decomposition's (:data:`FRAMEWORK_OVERLAPS`; the degree is known
    only per layout, :func:`exposed_shares` applies it).  The share is ``stated[c]``, else for TP
    the ``tp_comm`` switch (:data:`TP_COMM_OVERLAP`: "on" the decomposition, "off" none), else the
    default of the plan's ``framework``, else 100 % for EP under DualPipe (DeepSeek-V3 Technical
    Report: the all-to-all overlapped with the other chunk's computation), else the plan's
    ``overlap``."""
    fw = dict(FRAMEWORK_OVERLAPS[framework])
    if tp_comm != "auto":
        fw["tp"] = "ring" if tp_comm == "on" else 0
    out = {}
    for c in ("tp", "cp", "ep"):
        ring = 0
        if stated.get(c) is not None:
            share = stated[c]
        elif c in fw:
            ring, share = (1, 0) if fw[c] == "ring" else (0, fw[c])
        elif c == "ep" and schedule == "dualpipe":
            share = 1
        else:
            share = overlap
        out[f"ov_{c}"], out[f"ring_{c}"] = share, ring
    return out


def exposed_shares(K: dict, X: dict, times=None, compute=None, o=None) -> tuple:
    """``(x_tp, x_cp, x_ep)``: the exposed share of each collective under the layout ``X`` — 1 −
    its hidden share (:func:`collective_overlaps`); where it is the ring decomposition's, 1 −
    η·(1 − 1/degree), η = ``K["ring_eff_tp"]`` for TP (the device's ``tp_overlap_efficiency``;
    absent: 1) and 1 for the CP ring.

    With the collectives' raw ``times`` (tp, cp, ep: seconds per step) and the ``compute`` they
    hide behind (seconds per step, ``o`` the numpy or sympy ops), the hidden parts together are at
    most that compute — a collective overlaps a kernel, it cannot hide behind time the GPU does not
    compute: every hidden part is scaled by compute / max(Σ hidden, compute), and what is not
    hidden is exposed."""
    one = 1 + 0 * K["overlap"]          # exact 1 for the plan (sympy), 1.0 for the search (numpy)
    out = []
    for c, deg in (("tp", X["t"]), ("cp", X["c"]), ("ep", X["e"])):
        eta = K.get(f"ring_eff_{c}")     # None: the whole 1 − 1/degree (exact)
        if not K.get(f"ring_{c}", 0):
            out.append(1 - K.get(f"ov_{c}", K["overlap"]))
        else:
            out.append(one / deg if eta is None else 1 - eta * (one - one / deg))
    if times is None:
        return tuple(out)
    hidden = sum(t * (1 - x) for t, x in zip(times, out))
    scale = compute / o.max(hidden, compute)
    return tuple(1 - (1 - x) * scale for x in out)

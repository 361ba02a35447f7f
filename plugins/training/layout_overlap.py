"""What the framework a plan names (``use layout { framework }``) does by default, and how much of
each collective of the training step the runtime hides behind compute: the per-collective overlap
shares of ``use layout`` (``tp_overlap``, ``cp_overlap``, ``ep_overlap``, ``overlap``), the
framework's defaults for them and its fused attention kernel (:data:`FRAMEWORK_ATTENTION`), read alike by
``use layout`` (plugins/training/layout.py) and ``plan search`` (plugins/training/layout_search.py)
through :func:`collective_overlaps`, and applied per layout by :func:`exposed_shares`."""
from __future__ import annotations

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
#: a framework default.
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


def collective_overlaps(stated: dict, overlap, schedule: str, framework: str = "none") -> dict:
    """``K["ov_tp"|"ov_cp"|"ov_ep"]``: each collective's hidden share, and ``K["ring_tp"|…]`` = 1
    where that share is the ring decomposition's 1 − 1/degree (:data:`FRAMEWORK_OVERLAPS`; the
    degree is known only per layout, :func:`exposed_shares` applies it).  The share is
    ``stated[c]``, else the default of the plan's ``framework``, else 100 % for EP under DualPipe
    (DeepSeek-V3 Technical Report: the all-to-all overlapped with the other chunk's
    computation), else the plan's ``overlap``."""
    fw = FRAMEWORK_OVERLAPS[framework]
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
    its hidden share (:func:`collective_overlaps`), 1/degree where it is the ring decomposition's.

    With the collectives' raw ``times`` (tp, cp, ep: seconds per step) and the ``compute`` they
    hide behind (seconds per step, ``o`` the numpy or sympy ops), the hidden parts together are at
    most that compute — a collective overlaps a kernel, it cannot hide behind time the GPU does not
    compute: every hidden part is scaled by compute / max(Σ hidden, compute), and what is not
    hidden is exposed."""
    one = 1 + 0 * K["overlap"]          # exact 1 for the plan (sympy), 1.0 for the search (numpy)
    out = []
    for c, deg in (("tp", X["t"]), ("cp", X["c"]), ("ep", X["e"])):
        out.append(one / deg if K.get(f"ring_{c}", 0) else 1 - K.get(f"ov_{c}", K["overlap"]))
    if times is None:
        return tuple(out)
    hidden = sum(t * (1 - x) for t, x in zip(times, out))
    scale = compute / o.max(hidden, compute)
    return tuple(1 - (1 - x) * scale for x in out)

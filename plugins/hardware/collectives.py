"""Collective communication costs: the one home of the α–β formulas of all-reduce,
reduce-scatter, all-gather, all-to-all and point-to-point send, per algorithm (ring, double
binary tree, NVLS / in-network reduction), inside one host and across hosts, plus the
algorithm and bus bandwidths nccl-tests reports.  ``use collective { … }`` asks one question
directly; ``plugins/training/layout_model.py`` prices the training step's collectives with the same
functions when the step is priced from the hardware ("roofline" mode).

Conventions (every function below):

* ``size`` S is the nccl-tests size of the operation in bytes: the buffer being all-reduced,
  the *total* array of a reduce-scatter (input) or all-gather (output) — k times the per-rank
  count —, a rank's whole send buffer of an all-to-all, the message of a send
  (nccl-tests ``src/*.cu``, ``*GetBw``; doc/PERFORMANCE.md).
* ``k`` ranks; ``link`` a dict in base units: ``bandwidth`` B (B/s per direction),
  ``latency`` α (s per algorithm step / hop), ``launch`` λ (s per call), ``efficiency`` η
  (fraction of B the protocol reaches), ``nvls`` (bool: the switch reduces in-network),
  ``nvls_efficiency`` η_nvls (default η), ``nvls_latency`` Λ (s, the whole fixed cost of an NVLS
  call; default λ + 2α).  Missing keys take those defaults (λ = α = 0, η = 1, no NVLS).
* Every function takes ``o`` = :func:`plugins.hardware.ops.ops` (``"numpy"`` or ``"sympy"``):
  ``k``, ``size`` and the link's numbers may be Python numbers, sympy expressions or numpy
  arrays (broadcast together); ``nvls`` and the algorithm names are Python constants.

Time of one call, B_e = B·η (Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), §4: ring / pairwise-exchange α–β costs;
Patarasuk & Yuan 2009 for the bandwidth-optimal ring all-reduce; Sanders, Speck & Träff 2009,
"Two-tree algorithms for full bandwidth broadcast, reduction and scan", and NCCL 2.4's double
binary trees for the tree; NVIDIA NCCL ``src/graph/tuning.cc`` ``ncclTopoTuneModel`` for the
step counts, the tree's 2·S bytes per rank (bus-to-algorithm ratio ½) and its 0.92 bandwidth
factor, and the NVLS latency):

====================  ==========  =====================================================
op                    algorithm   time
====================  ==========  =====================================================
all_reduce            ring        λ + 2(k−1)·α + 2(k−1)/k · S/B_e
all_reduce            tree        λ + 2⌈log₂k⌉·α + 2·S/(0.92·B_e)
all_reduce            nvls        Λ + S/(B·η_nvls)      (only where the link has ``nvls``)
reduce_scatter,       ring        λ + (k−1)·α + (k−1)/k · S/B_e
all_gather
all_to_all            direct      λ + (k−1)·α + (k−1)/k · S/B_e   (pairwise exchange)
send                  direct      λ + α + S/B_e
====================  ==========  =====================================================

One rank (k = 1) costs nothing.  ``"auto"`` takes the fastest available algorithm for the
message, as NCCL's tuner does (it minimises latency + size / bandwidth over algorithms;
``tuning.cc`` ``ncclTopoGetAlgoTime``).  NVLS is offered for all-reduce only: for the other
operations NVLink SHARP gives no gain over the ring's ~370 GB/s on H100 (NCCL maintainers,
github.com/NVIDIA/nccl-tests/issues/212, github.com/NVIDIA/nccl/issues/1442).

Groups spanning hosts (:func:`spanning_time`): ``k_intra`` ranks on each of ``k_inter``
hosts, ``intra`` the GPU's own link, ``inter`` the NIC *as one GPU's share of the host's NICs*
(``bandwidth`` = nics_per_host · nic / gpus_per_host).  Candidates: the flat ring across the
hosts (2(k_inter−1) of its steps pay the NIC's α, the others the link's; it runs at the
narrowest cut min(B_e,intra, k_intra·B_e,inter), NCCL ``tuning.cc``), NCCL's tree (a chain in
each host, a double binary tree across hosts: 2((k_intra−1)·α_intra + ⌈log₂k_inter⌉·α_inter),
2·S through each chain and 2·S — S with two hosts — through a host's NICs, at 0.92 of the
bandwidth) and
:func:`hierarchical_time` (intra-host reduce-scatter, inter-host all-reduce of S/k_intra
over the NICs, intra-host all-gather).
"""
from __future__ import annotations

import math
import sys

from dsl.plugin import hookimpl
from dsl.plugin import KindSpec, Param, UseSpec

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send")
ALGORITHMS = ("auto", "ring", "tree", "nvls", "direct", "hierarchical")
# algorithms of one link (k ranks on one host or one fabric); NVLS where the link declares it
_ONE_LINK = {"all_reduce": ("ring", "tree", "nvls"), "reduce_scatter": ("ring",), "all_gather": ("ring",),
             "all_to_all": ("direct",), "send": ("direct",)}
_SPANNING = {"all_reduce": ("ring", "tree", "hierarchical"), "reduce_scatter": ("ring", "hierarchical"),
             "all_gather": ("ring", "hierarchical"), "all_to_all": ("direct",), "send": ("direct",)}
# NCCL's tuner scales the tree all-reduce's bandwidth by 0.92 (src/graph/tuning.cc,
# ncclTopoTuneModel: "if (a == NCCL_ALGO_TREE && coll == ncclFuncAllReduce) busBw = min(busBw*.92, …)")
TREE_EFFICIENCY = 0.92
# nccl-tests bus-bandwidth factors (doc/PERFORMANCE.md "Summary"; sendrecv.cu: factor 1)
_BUS = {"all_reduce": lambda k: 2 * (k - 1) / k, "reduce_scatter": lambda k: (k - 1) / k,
        "all_gather": lambda k: (k - 1) / k, "all_to_all": lambda k: (k - 1) / k, "send": lambda k: 1}

REFERENCES = (
    "NVIDIA nccl-tests, doc/PERFORMANCE.md (algorithm and bus bandwidth)",
    "Thakur, Rabenseifner & Gropp 2005, 'Optimization of Collective Communication Operations in MPICH'",
    "Patarasuk & Yuan 2009, 'Bandwidth optimal all-reduce algorithms for clusters of workstations'",
    "Sanders, Speck & Träff 2009, 'Two-tree algorithms for full bandwidth broadcast, reduction and scan'",
    "NVIDIA NCCL, src/graph/tuning.cc (the tuner's latency and bandwidth model)",
)


# ---------------------------------------------------------------- helpers
def _get(link: dict, key: str):
    v = link.get(key)
    if v is not None:
        return v
    if key == "nvls_efficiency":
        return _get(link, "efficiency")
    if key == "nvls_latency":
        return _get(link, "launch") + 2 * _get(link, "latency")
    return {"latency": 0, "launch": 0, "efficiency": 1, "nvls": False}[key]


def _log2_ceil(k):
    """⌈log₂ k⌉ for numbers, sympy expressions and numpy arrays (k ≥ 1)."""
    np = sys.modules.get("numpy")     # an array exists only once numpy is imported
    if np is not None and isinstance(k, np.ndarray):
        return np.ceil(np.log2(np.maximum(k, 1)))
    if isinstance(k, (int, float)):
        return math.ceil(math.log2(k)) if k >= 1 else 0
    import sympy as sp
    return sp.ceiling(sp.log(k, 2))


def _min_all(values, o):
    out = values[0]
    for v in values[1:]:
        out = o.min(out, v)
    return out


def _check(op: str, algorithm: str, avail: tuple):
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r} (one of {', '.join(OPS)})")
    if algorithm != "auto" and algorithm not in avail:
        raise ValueError(f"{op} has no {algorithm!r} algorithm here (available: {', '.join(avail)})")


def available(op: str, link: dict) -> tuple:
    """Algorithms of ``op`` on one link (NVLS only where ``link["nvls"]``)."""
    return tuple(a for a in _ONE_LINK[op] if a != "nvls" or bool(_get(link, "nvls")))


def available_spanning(op: str, intra: dict, inter: dict) -> tuple:
    """Algorithms of ``op`` for a group spanning hosts."""
    return _SPANNING[op]


# ---------------------------------------------------------------- one link
def candidates(op: str, k, size, link: dict, o) -> dict:
    """Time (s) of one call of ``op`` among ``k`` ranks on ``link``, per available algorithm:
    {algorithm: time}.  Formulas in the module docstring (Thakur et al. 2005 §4; NCCL
    ``tuning.cc``); ``size`` in bytes (nccl-tests convention), ``link`` in base units."""
    B = link["bandwidth"] * _get(link, "efficiency")
    a, lam = _get(link, "latency"), _get(link, "launch")
    S = size
    out = {}
    if op == "all_reduce":
        out["ring"] = lam + 2 * (k - 1) * a + 2 * (k - 1) / k * S / B
        out["tree"] = lam + 2 * _log2_ceil(k) * a + 2 * S / (B * TREE_EFFICIENCY)
        if _get(link, "nvls"):
            out["nvls"] = _get(link, "nvls_latency") + S / (link["bandwidth"] * _get(link, "nvls_efficiency"))
    elif op in ("reduce_scatter", "all_gather"):
        out["ring"] = lam + (k - 1) * a + (k - 1) / k * S / B
    elif op == "all_to_all":
        out["direct"] = lam + (k - 1) * a + (k - 1) / k * S / B
    elif op == "send":
        out["direct"] = lam + a + S / B
    else:
        raise ValueError(f"unknown collective {op!r} (one of {', '.join(OPS)})")
    return {name: o.where(k > 1, t, 0 * t) for name, t in out.items()}


def collective_time(op: str, k, size, link: dict, o, algorithm: str = "auto"):
    """Time (s) of one ``op`` among ``k`` ranks over ``link`` with ``algorithm`` ("auto": the
    fastest available, as NCCL's tuner picks).  ``size`` in bytes as nccl-tests counts it;
    shapes broadcast (numpy) or stay symbolic (sympy).

    :raises ValueError: an unknown op, or an algorithm the op/link does not have.
    """
    _check(op, algorithm, available(op, link))
    c = candidates(op, k, size, link, o)
    if algorithm == "auto":
        return _min_all(list(c.values()), o)
    return c[algorithm]


# ---------------------------------------------------------------- across hosts
def hierarchical_time(op: str, k_intra, k_inter, size, intra: dict, inter: dict, o):
    """Hierarchical collective (s) over ``k_intra`` ranks on each of ``k_inter`` hosts:
    all-reduce = intra-host reduce-scatter of S + inter-host all-reduce of S/k_intra over the
    NICs (fastest inter-host algorithm) + intra-host all-gather of S; reduce-scatter = intra
    then inter (S/k_intra); all-gather = inter (S/k_intra) then intra; all-to-all and send as
    :func:`spanning_time` (they have no hierarchical form here).  ``inter["bandwidth"]`` is one
    GPU's share of the host's NICs: every GPU of a host runs the inter-host phase on its shard
    at once (Thakur et al. 2005 composition; the "2D"/hierarchical all-reduce of Jia et al.
    2018, "Highly Scalable Deep Learning Training System with Mixed-Precision")."""
    if op == "all_reduce":
        return (collective_time("reduce_scatter", k_intra, size, intra, o)
                + collective_time("all_reduce", k_inter, size / k_intra, inter, o)
                + collective_time("all_gather", k_intra, size, intra, o))
    if op == "reduce_scatter":
        return (collective_time("reduce_scatter", k_intra, size, intra, o)
                + collective_time("reduce_scatter", k_inter, size / k_intra, inter, o))
    if op == "all_gather":
        return (collective_time("all_gather", k_inter, size / k_intra, inter, o)
                + collective_time("all_gather", k_intra, size, intra, o))
    return spanning_time(op, k_intra, k_inter, size, intra, inter, o)


def spanning_candidates(op: str, k_intra, k_inter, size, intra: dict, inter: dict, o, remote_size=None) -> dict:
    """{algorithm: time (s)} of ``op`` over ``k_intra`` ranks on each of ``k_inter`` hosts
    (module docstring): the flat ring across hosts, NCCL's tree (all-reduce), the
    hierarchical form; all-to-all runs every pair at once (intra-host pairs on the link,
    the others on the GPU's NIC share; the slower side sets the time); a send crosses one NIC.

    ``remote_size`` (all-to-all only): the bytes a rank sends across hosts when that is not the
    pairwise share (k − k_intra)/k · size — a dispatch that sends one copy per destination host
    and forwards it inside the host (DeepEP's node-limited dispatch: IB to the host, NVLink on)."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r} (one of {', '.join(OPS)})")
    k = k_intra * k_inter
    S = size
    Bi = intra["bandwidth"] * _get(intra, "efficiency")
    Bn = inter["bandwidth"] * _get(inter, "efficiency")
    ai, an = _get(intra, "latency"), _get(inter, "latency")
    lam = o.max(_get(intra, "launch"), _get(inter, "launch"))
    cut = o.min(Bi, k_intra * Bn)          # a host's NIC share of this group vs the GPU's link
    out = {}
    if op in ("all_reduce", "reduce_scatter", "all_gather"):
        steps = 2 * (k - 1) if op == "all_reduce" else k - 1
        inter_steps = 2 * (k_inter - 1) if op == "all_reduce" else k_inter - 1
        out["ring"] = lam + (steps - inter_steps) * ai + inter_steps * an + steps / k * S / cut
    if op == "all_reduce":
        chain = o.where(k_intra > 1, 2 * S / Bi, 0 * S)
        net = o.where(k_inter > 2, 2 * S, S) / (k_intra * Bn)
        out["tree"] = lam + 2 * ((k_intra - 1) * ai + _log2_ceil(k_inter) * an) + o.max(chain, net) / TREE_EFFICIENCY
    if op in ("all_reduce", "reduce_scatter", "all_gather"):
        out["hierarchical"] = hierarchical_time(op, k_intra, k_inter, S, intra, inter, o)
    if op == "all_to_all":
        local = (k_intra - 1) * ai + (k_intra - 1) / k * S / Bi
        remote = (k_inter - 1) * an + ((k - k_intra) / k * S if remote_size is None else remote_size) / Bn
        out["direct"] = lam + o.max(local, remote)
    if op == "send":
        out["direct"] = collective_time("send", 2, S, inter, o)
    return {name: o.where(k > 1, t, 0 * t) for name, t in out.items()}


def spanning_time(op: str, k_intra, k_inter, size, intra: dict, inter: dict, o, algorithm: str = "auto",
                  remote_size=None):
    """Time (s) of ``op`` for a group of ``k_intra`` ranks on each of ``k_inter`` hosts
    (``algorithm``: "auto" = the fastest of :func:`spanning_candidates`; ``remote_size`` as there)."""
    _check(op, algorithm, available_spanning(op, intra, inter))
    c = spanning_candidates(op, k_intra, k_inter, size, intra, inter, o, remote_size)
    if algorithm == "auto":
        return _min_all(list(c.values()), o)
    return c[algorithm]


# ---------------------------------------------------------------- nccl-tests bandwidths
def algorithm_bandwidth(size, time):
    """nccl-tests' algorithm bandwidth algbw = S / t (B/s; doc/PERFORMANCE.md)."""
    return size / time


def bus_factor(op: str, k):
    """nccl-tests' bus-bandwidth correction: all-reduce 2(k−1)/k; reduce-scatter, all-gather,
    all-to-all (k−1)/k; send 1 (doc/PERFORMANCE.md "Summary"; src/sendrecv.cu)."""
    if op not in _BUS:
        raise ValueError(f"unknown collective {op!r} (one of {', '.join(OPS)})")
    return _BUS[op](k)


def bus_bandwidth(op: str, k, size, time):
    """nccl-tests' bus bandwidth busbw = algbw · factor(op, k) (B/s), comparable with the
    hardware's per-direction peak whatever k (doc/PERFORMANCE.md)."""
    return algorithm_bandwidth(size, time) * bus_factor(op, k)


# ---------------------------------------------------------------- plugin: link fields and `use collective`
LINK_FIELDS = (
    Param("latency", "s", doc="α: latency of one algorithm step (hop) of a collective", optional=True, min=0),
    Param("launch", "s", doc="λ: fixed overhead of one collective call", optional=True, min=0),
    Param("efficiency", "", doc="fraction of the bandwidth a collective's protocol reaches", optional=True,
          min=0, min_open=True, max=1),
    Param("nvls", kind="bool", doc="the switch reduces in-network (NVLink SHARP / InfiniBand SHARP)",
          optional=True),
    Param("nvls_efficiency", "", doc="NVLS all-reduce: algorithm bandwidth as a fraction of the bandwidth",
          optional=True, min=0, min_open=True, max=1),
    Param("nvls_latency", "s", doc="NVLS all-reduce: whole fixed time of one call", optional=True, min=0),
)

SPEC = UseSpec(
    "collective",
    "one collective operation (all-reduce, reduce-scatter, all-gather, all-to-all, send) priced per algorithm",
    references=REFERENCES,
    params=(
        Param("op", default='"all_reduce"', kind="choice", choices=OPS, doc="the collective"),
        Param("size", "B", doc="bytes of the operation as nccl-tests counts them (all-reduce: the buffer; "
              "reduce-scatter/all-gather: the whole array; all-to-all: one rank's send buffer)", min=0,
              min_open=True),
        Param("group", "", doc="ranks taking part", kind="int", min=1),
        Param("link", kind="ref", ref_kind="link", doc="each GPU's link inside a host"),
        Param("algorithm", default='"auto"', kind="choice", choices=ALGORITHMS,
              doc="auto (the fastest available), ring, tree, nvls, direct (all-to-all, send) or hierarchical"),
        Param("gpus_per_host", "", None, "GPUs of the group on one host (default: the whole group)", kind="int",
              min=1, optional=True),
        Param("nic", kind="ref", ref_kind="link", optional=True, doc="the NIC between hosts (a group spanning hosts)"),
        Param("nics_per_host", "", None, "NICs per host (default gpus_per_host)", kind="int", min=1,
              optional=True),
    ),
    order=60,
    provides=("collective_time", "algorithm_bandwidth", "bus_bandwidth"),
)


@hookimpl
def plan_kinds_register():
    return [KindSpec("link", "an interconnect, bandwidth per direction", LINK_FIELDS, references=REFERENCES)]


@hookimpl
def plan_blocks_register():
    return [SPEC]


def link_fields(ref) -> dict:
    """The collective fields of a link declaration (``DeclView``) as sympy symbols of the plan,
    for :func:`collective_time`; absent fields are left out (their defaults apply)."""
    d = {"bandwidth": ref.q("bandwidth", "B/s", positive=True), "nvls": bool(ref.value("nvls", False))}
    for key, unit in (("latency", "s"), ("launch", "s"), ("efficiency", ""), ("nvls_efficiency", ""),
                      ("nvls_latency", "s")):
        if ref.has(key):
            d[key] = ref.q(key, unit)
    return d


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("collective")
    if b is None:
        return
    from plugins.hardware.ops import ops
    o = ops("sympy")
    op, algo = b.value("op"), b.value("algorithm")
    k = int(b.value("group"))
    S = b.q("size")
    intra = link_fields(b.ref("link"))
    gph = b.value("gpus_per_host")
    spans = gph is not None and k > int(gph)
    if spans:
        gph = int(gph)
        if k % gph:
            b.error_at("group", f"a group of {k} spanning hosts of {gph} GPUs must fill whole hosts",
                       f"choose a multiple of {gph}, or gpus_per_host = {k} for one host")
        nic_ref = b.ref("nic")
        if nic_ref is None:
            b.error_at("gpus_per_host", f"a group of {k} on hosts of {gph} GPUs crosses hosts but names no NIC",
                       "add `nic = …` (e.g. nic = ib_ndr_400g)", code="missing-parameter")
        inter = link_fields(nic_ref)
        nics = b.q("nics_per_host") if b.value("nics_per_host") is not None else gph
        inter["bandwidth"] = inter["bandwidth"] * nics / gph
        avail = available_spanning(op, intra, inter)
        cands = spanning_candidates(op, gph, k // gph, S, intra, inter, o)
        where = f"{k // gph} hosts × {gph} GPUs"
    else:
        if b.value("nic") is not None or b.value("nics_per_host") is not None:
            ctx.warn(f"`use collective` in '{ctx.name}' names a NIC but its group of {k} fits one host",
                     "give gpus_per_host (GPUs of the group per host) to price a group spanning hosts")
        avail = available(op, intra)
        cands = candidates(op, k, S, intra, o)
        where = f"{k} GPUs on one link"
    if algo != "auto" and algo not in avail:
        hint = f"{op} {'across hosts' if spans else 'on this link'} has: {', '.join(('auto',) + avail)}"
        if algo == "nvls" and not spans:
            hint += "; nvls needs a link that declares `nvls = true`"
        b.error_at("algorithm", f"{op} has no '{algo}' algorithm for {where}", hint)
    if k == 1:
        ctx.warn(f"`use collective` in '{ctx.name}' has a group of one rank: nothing is communicated",
                 "set group to the number of ranks taking part")
    nominal = {a: float(ctx.nominal(t)) for a, t in cands.items()}
    if algo == "auto":
        chosen = min(nominal, key=lambda a: (nominal[a], avail.index(a)))
        t = _min_all(list(cands.values()), o)
        others = ", ".join(f"{a} {nominal[a] * 1e6:.4g} us" for a in avail if a != chosen)
        how = f"auto chose {chosen}" + (f" (also: {others})" if others else "")
    else:
        t, how = cands[algo], f"algorithm {algo}"
    tq = ctx.define("collective_time", t, "us", f"one {op} among {where}: {how}", headline=True, rank=1,
                    references=REFERENCES)
    if k > 1:
        ab = ctx.define("algorithm_bandwidth", S / tq, "GB/s", "algbw = size / time (nccl-tests)", headline=True,
                        rank=2, references=REFERENCES[:1])
        ctx.define("bus_bandwidth", ab * bus_factor(op, k), "GB/s",
                   f"busbw = algbw × {_factor_text(op)} (nccl-tests)", headline=True, rank=3,
                   references=REFERENCES[:1])


def _factor_text(op):
    return {"all_reduce": "2(k−1)/k", "send": "1"}.get(op, "(k−1)/k")

"""Offload between GPU and host: exposed transfer wait and where to convert (book ch. 10 §10.2.3).

``use offload { tensor = 96 MiB; link = pcie4_x16; cpu_bw = 307.2 GB/s; gpu_bw = device.mem_bw;
source = "bf16"; target = "fp32"; convert = "cpu"; window = 0 s }``

A transfer of V bytes over a link of bandwidth B that may start W seconds before its consumer
needs the data leaves the consumer waiting (§10.2.3)

    T_wait = max(0, V/B − W)                                        (offload_wait)

Where to convert a gradient of G bytes from ``source`` to ``target`` (r = target/source bytes,
2 for BF16 → FP32) before a host optimizer (CPUAdam) uses it: the conversion reads G and
writes r·G, bound by the memory bandwidth C of the side that does it.  Each path is an event
model on its own timeline (``offload_cpu``, ``offload_gpu``) whose makespan is its time:

    CPU path:  send G over the link, then convert on the host:   T_c = G/B + (1+r)·G/C_c
    GPU path:  convert on the GPU, then send r·G:                T_g = (1+r)·G/C_g + r·G/B

(book: T_c = G/B + 3G/C_c, T_g = 3G/C_g + 2G/B).  Setting T_c = T_g gives the break-even
link bandwidth B* = 1/(3(1/C_c − 1/C_g)) ≈ 147 GB/s for C_c = 307.2 GB/s (8-channel DDR5-4800)
and C_g = 1,008 GB/s (RTX 4090) — ask the solver: ``solve P.host_bandwidth for
P.cpu_path_time == P.gpu_path_time``.  Memory holds on the ``gpu`` pool: the CPU path keeps only
the G being sent (96 MiB); the GPU path holds the input and the converted output together
(G + r·G = 288 MiB) — ``cpu_path_peak``, ``gpu_path_peak``.

Quantities: ``host_bandwidth``, ``cpu_path_time``, ``gpu_path_time``, ``cpu_path_peak``,
``gpu_path_peak``; for the path ``convert`` chooses: ``offload_volume`` (bytes on the link),
``offload_time``, ``offload_wait``, ``offload_removed`` (the converted r·G the host keeps instead
of the GPU).
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

from plugins.training.memory import FORMAT_BYTES

SPEC = UseSpec(
    "offload",
    "offload to the host: exposed transfer wait, CPU- or GPU-side format conversion and its GPU memory",
    references=("offload between GPU and host: exposed transfer time and where to convert (optimizer on the host as "
                "in Ren et al. 2021, 'ZeRO-Offload: Democratizing Billion-Scale Model Training')",),
    params=(
        Param("tensor", "B", doc="bytes of the tensor offloaded, in the source format (G)", min=0, min_open=True),
        Param("link", kind="ref", ref_kind="link", doc="the GPU–host link (B is its bandwidth)"),
        Param("cpu_bw", "B/s", doc="host memory bandwidth available to the conversion (C_c)", min=0, min_open=True),
        Param("gpu_bw", "B/s", "device.mem_bw", "GPU memory bandwidth available to the conversion (C_g)",
              min=0, min_open=True),
        Param("source", default='"bf16"', kind="choice", choices=("bf16", "fp16", "fp32"),
              doc="format of the tensor on the GPU"),
        Param("target", default='"fp32"', kind="choice", choices=("fp32", "bf16", "fp16"),
              doc="format the host optimizer needs"),
        Param("convert", default='"cpu"', kind="choice", choices=("cpu", "gpu"),
              doc="where this plan converts: after the transfer on the host, or before it on the GPU"),
        Param("window", "s", "0 s", "time between the moment the transfer can start and the moment its "
              "consumer needs the data (W)", min=0),
    ),
    plan_params=(
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
    ),
    order=16,
    provides=("host_bandwidth", "cpu_path_time", "gpu_path_time", "cpu_path_peak", "gpu_path_peak",
              "offload_volume", "offload_time", "offload_wait", "offload_removed"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


def _ratio(b):
    return sp.Rational(FORMAT_BYTES[b.value("target")], FORMAT_BYTES[b.value("source")])


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("offload")
    if b is None:
        return
    G, r = b.q("tensor"), _ratio(b)
    B = ctx.define("host_bandwidth", b.ref("link").q("bandwidth", "B/s", positive=True), "GB/s",
                   "bandwidth of the GPU–host link (B)")
    on_gpu = b.value("convert") == "gpu"
    V = ctx.define("offload_volume", r * G if on_gpu else G, "MiB", "bytes the chosen path sends over the link")
    ctx.define("offload_time", ctx.q("gpu_path_time" if on_gpu else "cpu_path_time", "s"), "ms",
               "time of the chosen path", headline=True)
    ctx.define("offload_wait", sp.Max(0, V / B - b.q("window")), "ms",
               "exposed transfer wait: max(0, V/B − W)", headline=True,
               references=("offload between GPU and host: exposed transfer time and where to convert (optimizer on "
                           "the host as in Ren et al. 2021, 'ZeRO-Offload: Democratizing Billion-Scale Model "
                           "Training')",))
    ctx.define("offload_removed", r * G, "MiB", "the converted tensor the host keeps instead of the GPU")


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("offload")
    if b is None:
        return
    G, r = b.q("tensor"), _ratio(b)
    B = ctx.q("host_bandwidth")
    Cc, Cg = b.q("cpu_bw"), b.q("gpu_bw")
    src, dst = b.value("source").upper(), b.value("target").upper()

    tc = ctx.timeline("offload_cpu")
    tc.add("send_source", G / B, "link", kind="transfer", doc=f"send the {src} tensor to the host")
    tc.add("convert_on_cpu", (1 + r) * G / Cc, "cpu", after=["send_source"], kind="compute",
           doc=f"read {src}, write {dst} in host memory")
    tc.hold("source_on_gpu", G, "gpu", end="send_source", doc=f"{src} tensor until it has left the GPU")
    tc.hold("source_on_host", G, "host", start="send_source", end="convert_on_cpu", doc=f"{src} copy on the host")
    tc.hold("target_on_host", r * G, "host", start="convert_on_cpu", doc=f"{dst} tensor for the host optimizer")
    tc.makespan_quantity("cpu_path_time", "ms", "transfer then convert on the host: G/B + (1+r)G/C_c",
                          references=("offload between GPU and host: exposed transfer time and where to convert "
                                      "(optimizer on the host as in Ren et al. 2021, 'ZeRO-Offload: Democratizing "
                                      "Billion-Scale Model Training')",))
    tc.peak_quantity("cpu_path_peak", "gpu", "MiB", "GPU memory of the CPU path", headline=True)

    tg = ctx.timeline("offload_gpu")
    tg.add("convert_on_gpu", (1 + r) * G / Cg, "gpu", kind="compute", doc=f"read {src}, write {dst} on the GPU")
    tg.add("send_target", r * G / B, "link", after=["convert_on_gpu"], kind="transfer",
           doc=f"send the {dst} tensor to the host")
    tg.hold("source_on_gpu", G, "gpu", end="convert_on_gpu", doc=f"{src} tensor, input of the conversion")
    tg.hold("target_on_gpu", r * G, "gpu", start="convert_on_gpu", end="send_target",
            doc=f"{dst} tensor until it has left the GPU")
    tg.hold("target_on_host", r * G, "host", start="send_target", doc=f"{dst} tensor for the host optimizer")
    tg.makespan_quantity("gpu_path_time", "ms", "convert on the GPU then transfer: (1+r)G/C_g + rG/B",
                          references=("offload between GPU and host: exposed transfer time and where to convert "
                                      "(optimizer on the host as in Ren et al. 2021, 'ZeRO-Offload: Democratizing "
                                      "Billion-Scale Model Training')",))
    tg.peak_quantity("gpu_path_peak", "gpu", "MiB", "GPU memory of the GPU path", headline=True)

"""Real-time audio as an event model: chunks captured, run through the model, sent, carried by
the network, buffered and played (book ch. 3 §3.3.3, figs. 3-19 and 3-20, exercise 3-5).

``use audio_stream`` schedules, on the shared event engine (:mod:`dsl.engine.timeline`), for each
chunk k = 0 … n−1:

* ``capture_k`` — ``chunk`` long on the microphone (chunks follow each other);
* ``model_k`` (``model_time``) on the model, ``send_k`` (``send``) on the uplink;
* ``net_k`` — propagation ``network`` (or ``delays[k]``); its end is the arrival;
* ``play_k`` — ``chunk`` long on the speaker, no earlier than the arrival, than its slot
  (slot_k = start of play_0 + k·chunk, a start-to-start lag) and than the end of ``play_{k-1}``;
  ``play_0`` starts ``jitter_buffer`` after the first arrival.

Chunk bytes = sample_rate · chunk · channels · sample_bytes (24 kHz, mono, 16 bit, 20 ms → 960 B).
With 12 ms model, 1 ms send, 5 ms network the first chunk arrives at 38 ms; a 40 ms buffer starts
playback at 78 ms, and a third chunk delayed by 50 ms (arrival 123 ms, slot 118 ms) stalls 5 ms;
a 60 ms buffer starts at 98 ms and does not stall.  Stall = end of playback − (start + n·chunk).

Interrupt (optional, fig. 3-20): a command at ``interrupt_at`` reaches the device after
``control_delay``; the device acts at its next poll (every ``poll`` from t = 0), so it mutes at
poll·⌈(t + control_delay)/poll⌉: 123 ms + 5 ms → 130 ms, 7 ms after the command.

Drain (optional): arriving audio worth ``arrival_ratio`` seconds per second of playback with
``banked`` seconds buffered runs dry after banked / (1 − arrival_ratio) (0.9 and 0.3 s → 3 s).
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import FigureSpec, Param, UseSpec

SPEC = UseSpec(
    "audio_stream",
    "real-time audio chunks through model, uplink, network, jitter buffer and speaker (event model)",
    references=("real-time audio: chunks generated, sent over the network, buffered and played",),
    params=(
        Param("sample_rate", "s^-1", "24000 s^-1", "samples per second", min=0, min_open=True),
        Param("channels", "", "1", "audio channels", min=1),
        Param("sample_bytes", "B", "2 B", "bytes per sample", min=0, min_open=True),
        Param("chunk", "s", "20 ms", "audio duration of one chunk", min=0, min_open=True),
        Param("chunks", doc="chunks scheduled", kind="int", default="8", min=1, max=500),
        Param("model_time", "s", "12 ms", "model time per chunk after its capture", min=0),
        Param("send", "s", "1 ms", "time to send one chunk", min=0),
        Param("network", "s", "5 ms", "network propagation of a chunk", min=0),
        Param("delays", "s", None, "propagation of each chunk (overrides `network`; one item per chunk)",
              kind="list", optional=True),
        Param("jitter_buffer", "s", "40 ms", "audio held after the first arrival before playback starts", min=0),
        Param("interrupt_at", "s", None, "time the user issues an interrupt (optional)", min=0, optional=True),
        Param("control_delay", "s", "5 ms", "delay of the interrupt command to the playback device", min=0),
        Param("poll", "s", "10 ms", "period at which the device executes control commands", min=0,
              min_open=True),
        Param("arrival_ratio", "", None, "seconds of audio arriving per second of playback (optional)", min=0,
              optional=True),
        Param("banked", "s", "0 s", "audio buffered when the drain starts", min=0),
    ),
    order=70,
    provides=("chunk_bytes", "first_arrival", "playback_start", "playback_end", "stall_time", "mute_time",
              "interrupt_latency", "dry_after"),
)


@hookimpl
def plan_blocks_register():
    return [SPEC]


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("audio_stream")
    if b is None:
        return
    ctx.define("chunk_bytes", b.q("sample_rate") * b.q("chunk") * b.q("channels") * b.q("sample_bytes"), "B",
               "sample_rate · chunk · channels · sample_bytes", headline=True,
               references=("real-time audio chunks: generation, sending and network delay per chunk",))
    n = int(b.value("chunks"))
    d = b.value("delays")
    if d is not None and len(d) != n:
        b.error_at("delays", f"`delays` has {len(d)} items but chunks = {n}", "give one delay per chunk")
    ctx.define("stall_time", ctx.q("playback_end", "s") - ctx.q("playback_start", "s") - n * b.q("chunk"), "ms",
               "playback paused waiting for late chunks: end − start − n·chunk", headline=True, rank=23)
    if b.value("interrupt_at") is not None:
        ctx.define("interrupt_latency", ctx.q("mute_time", "s") - b.q("interrupt_at"), "ms",
                   "command to mute: what the user hears as the interrupt delay", headline=True, rank=25)
    if b.value("arrival_ratio") is not None:
        r = b.value("arrival_ratio")
        if r >= 1:
            ctx.warn(f"arrival_ratio = {r:g}: audio arrives at least as fast as it plays, the buffer never runs dry",
                     "dry_after is defined only for arrival_ratio < 1", code="incomplete")
        else:
            ctx.define("dry_after", b.q("banked") / (1 - b.q("arrival_ratio")), "s",
                       "B(t) = banked − (1 − arrival_ratio)·t reaches 0",
                       headline=True, rank=26,
                       references=("jitter buffer: playback starts late enough that every chunk arrives before it is "
                                   "played",))


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("audio_stream")
    if b is None:
        return
    n = int(b.value("chunks"))
    chunk = b.q("chunk")
    delays = b.q_list("delays") if b.value("delays") is not None else [b.q("network")] * n
    tl = ctx.timeline("audio")
    for k in range(n):
        tl.add(f"capture{k}", chunk, "mic", kind="capture", lane="capture", label=str(k + 1),
               doc=f"chunk {k + 1} recorded")
        tl.add(f"model{k}", b.q("model_time"), "model", after=[f"capture{k}"], kind="model", lane="model",
               label=str(k + 1), doc=f"model work on chunk {k + 1}")
        tl.add(f"send{k}", b.q("send"), "uplink", after=[f"model{k}"], kind="transfer", lane="send",
               doc=f"chunk {k + 1} sent")
        tl.add(f"net{k}", delays[k], None, after=[f"send{k}"], kind="network", lane="network",
               label=str(k + 1), style="hatched", doc=f"chunk {k + 1} in the network; its end is the arrival")
        after = [f"net{k}"] if k == 0 else [f"net{k}", (f"play0", k * chunk, "start")]
        if k == 0:
            after = [(f"net{k}", b.q("jitter_buffer"))]
        tl.add(f"play{k}", chunk, "speaker", after=after, kind="play", lane="playback", label=str(k + 1),
               doc=f"chunk {k + 1} played")
    tl.time_quantity("first_arrival", "net0", "finish", "ms", "arrival of the first chunk", headline=True, rank=20)
    tl.time_quantity("playback_start", "play0", "start", "ms", "first chunk starts playing", headline=True,
                     rank=21)
    tl.makespan_quantity("playback_end", "ms", "last chunk finishes playing", rank=22)
    if b.value("interrupt_at") is not None:
        at, poll = b.q("interrupt_at"), b.q("poll")
        tl.add("interrupt", 0, None, release=at, kind="control", lane="control", doc="user issues an interrupt")
        tl.add("control", b.q("control_delay"), None, after=["interrupt"], kind="control", lane="control",
               doc="command travels to the device")
        tl.add("mute", 0, None, after=["control"], release=poll * sp.ceiling((at + b.q("control_delay")) / poll),
               kind="control", lane="device", doc="device mutes at its next poll")
        tl.time_quantity("mute_time", "mute", "start", "ms", "playback muted", headline=True, rank=24)


def _draw(ws, plan, fig) -> bool:
    from dsl.plugin import gantt

    tl = ws.timelines.get((plan, "audio"))
    if tl is None or tl.schedule is None:
        return False
    sc, idx = tl.schedule, tl.schedule.index()
    fig.set_size_inches(9, 3.6)
    ax = fig.subplots()
    gantt(ax, tl, unit="ms")
    ax.set_title(f"{plan}: audio chunks (dots: arrivals, ticks: playback slots, dashed: mute)", fontsize=9,
                 loc="left", pad=22)
    rows = [t.get_text() for t in ax.get_yticklabels()]
    y = rows.index("playback") if "playback" in rows else len(rows) - 1
    ms = 1e3
    n = sum(1 for a in tl.activities if a.startswith("play"))
    t0 = sc.start[idx["play0"]]
    chunk = sc.finish[idx["play0"]] - t0
    ax.plot([sc.finish[idx[f"net{k}"]] * ms for k in range(n)], [y - 0.55] * n, "o", color="black", ms=3)
    ax.vlines([(t0 + k * chunk) * ms for k in range(n)], y + 0.45, y + 0.6, color="black", lw=1)
    if "mute" in idx:
        ax.axvline(sc.start[idx["mute"]] * ms, color="#C44E52", lw=1, ls="--")
    fig.tight_layout()
    return True


@hookimpl
def plan_figures_register():
    return [FigureSpec("audio", "Audio chunks: arrival, jitter buffer and playback", _draw,
                       "capture, model, send, network and playback per chunk; dots mark arrivals, ticks slots",
                       references=("real-time audio: chunk arrivals against playback deadlines",))]

"""Side by side: the engine step time of plugins/serving/serving_step.py against NVIDIA AIConfigurator.

AIConfigurator (PyPI ``aiconfigurator``, 0.12; not a dependency of this project) prices a
serving configuration from per-operation latencies measured on real GPUs (its bundled
database: H100/H200/B200/A100 … × TensorRT-LLM, vLLM, SGLang).  Install it in a private venv
and run offline::

    pip install aiconfigurator==0.12
    HF_HUB_OFFLINE=1 python benchmarks/aiconfigurator_compare.py            # the default grid
    HF_HUB_OFFLINE=1 python benchmarks/aiconfigurator_compare.py --csv out.csv --models qwen3_8b \
        --systems h100_sxm --batches 1,8,64 --tps 1,2
    python benchmarks/aiconfigurator_compare.py --stored   # against specs/data/serving/, no install

Two ways AIConfigurator states TTFT and TPOT, both compared:

``static``  (``aiconfigurator cli estimate --estimate-mode static``) — one batch of b requests:
    TTFT is the prefill of the b prompts of ``isl`` tokens in one step, TPOT the mean of the
    osl − 1 decode steps of the b sequences as their context grows from isl to isl + osl − 1.
    Both are sums of its measured per-operation times, so this is the step-time comparison:
    ours is ``step_time(c, b·isl, 0, 0, prefill_seqs=b)`` and the mean of
    ``step_time(c, 0, b, b·(isl + j))`` over j = 1 … osl − 1.
``agg``  (``--estimate-mode agg``, continuous batching, vLLM backend) — a mean-field schedule
    (aiconfigurator_core/sdk/backends/base_backend.py ``run_agg`` and vllm_backend.py):
    b requests in flight, each step of the first ⌈isl·b/ctx⌉ steps mixes one prompt's
    ``ctx`` = isl tokens with b − 1 decodes, the remaining osl − that many steps decode b;
    TPOT is the step-weighted mean of the two steps; TTFT = (mixed step·⌈isl/ctx⌉ + 0.8 ms ×
    layers) × (1 + log2(b)/8) — a per-request dispatch overhead and a queueing factor its
    vLLM backend calibrates on measured serving runs.  Ours applies the same schedule to our
    step times, with those two schedule terms taken from its source (they describe the
    queue, which the continuous-batching simulator models itself, not the step), so the
    ratio isolates the step.
``disagg``  (``--estimate-mode disagg``: one prefill worker and one decode worker, each of ``tp``
    GPUs; aiconfigurator/sdk/inference_session.py ``run_disagg`` and sdk/picking.py) — the
    prefill worker runs one prompt per step (prefill batch 1) and the decode worker b
    sequences: TTFT = static prefill of one prompt × 1.1 (its prefill latency correction) × 1.8
    (its TTFT queueing correction), TPOT = static decode of b sequences × 1.08 (its decode
    latency correction); requests/s = min(0.9 / prefill step, 0.92 · b / (TPOT·(osl − 1)))
    (its rate-matching degradations).  Ours applies those four schedule factors, taken from
    its source, to our static step times; it does not price the KV transfer (neither does its
    TTFT), so this compares the two pools' steps at prefill batch 1 and decode batch b.

tokens/s/GPU: AIConfigurator's ``tokens/s/gpu``; ours b·osl / (TTFT + (osl − 1)·TPOT) / tp for
static (its definition: b requests of osl tokens per request latency) and b·(osl − 1) / Σ step
times / tp for agg.

Routing (MoE): AIConfigurator times Qwen3 MoE layers under synthetic power-law routing of
exponent 1.2 (aiconfigurator_core/sdk/models/moe.py ``_power_law_alpha = 1.2``).  Its collector
draws the workload of a step of T tokens (ai-dynamo/aiconfigurator collector/helper.py
``_generate_power_law_distribution``): E expert loads iid from a power law of exponent α on
[0.01, 2] when T·k ≤ E and on [1, 0.8·T] when T·k > E, scaled to T·k tokens, rounded, capped at
T, the capped excess and the tokens rounding left out added one at a time to the least-loaded
expert and a rounding surplus taken one at a time from the most-loaded one.  The
number of distinct experts such a step reads therefore jumps where T·k passes E (about 59 of 128
at 16 tokens, 107 at 32 for Qwen3-30B-A3B's top-8): no fixed expert popularity has that shape.
Ours prices the same workload (``--routing aic``, the default): :func:`aic_experts_hit` is the
expected number of distinct experts of that draw (Monte Carlo, 4,000 draws, fixed seed), and a
step of T tokens is priced at the ``expert_skew`` whose expected distinct experts equal it
(:func:`skew_for_experts_hit`; uniform routing when the draw hits as many experts as uniform
routing or more).  ``--routing top20`` prices one fixed Zipf popularity instead, the one at which
the top 20 % of experts take 65 % of the routed tokens (the collector's documentation,
"Power-Law Distribution in MoE Workload Simulation", says of exponent 1.2 "top 20 % of experts
handle ~65 % of the workload"; ``skew_for_top_share(E, k, 0.65)`` = 0.91); ``--routing uniform``
prices uniform routing (the step model's default).  Only the routing — the workload AIConfigurator
measured under — is taken from its source; the kernel times are our device model's.

Device constants: the catalog's peak_flops and mem_bw with the efficiency fields of the
device (generic defaults of plugins/serving/serving_step.py when the catalog has none); the TP link is
the catalog's NVLink of the host (nvlink4, 450 GB/s per direction; A100 NVLink 3, 300 GB/s).
Nothing here is fitted to AIConfigurator's numbers.
"""
from __future__ import annotations

import argparse
import csv
import functools
import logging
import math
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {"qwen3_8b": "Qwen/Qwen3-8B", "qwen3_30b_a3b": "Qwen/Qwen3-30B-A3B"}
SYSTEMS = {"h100_sxm": ("h100_sxm", "nvlink4"), "h200_sxm": ("h200", "nvlink4"),
           "a100_sxm": ("a100_sxm_80gb", "nvlink3")}
VLLM_DISPATCH_MS_PER_LAYER = 0.8      # aiconfigurator_core vllm_backend._prefill_dispatch_overhead_ms
# aiconfigurator cli/api.py DEFAULT_PREFILL/DECODE_LATENCY_CORRECTION_SCALE, sdk/picking.py
# _AUTOSCALE_TTFT_CORRECTION_FACTOR and _RATE_MATCHING_PREFILL/DECODE_DEGRADATION_FACTOR
DISAGG_PREFILL_SCALE, DISAGG_DECODE_SCALE, DISAGG_TTFT_QUEUE = 1.1, 1.08, 1.8
DISAGG_PREFILL_DEGRADE, DISAGG_DECODE_DEGRADE = 0.9, 0.92
DATA = ROOT / "specs" / "data" / "serving"

PLAN = """
import "@catalog/hardware.plan"
import "@catalog/models.plan"
# A100 SXM NVLink 3: 600 GB/s per GPU both directions, 300 GB/s each (NVIDIA A100 datasheet)
link nvlink3 {{ bandwidth = 300 GB/s }}
{plans}
"""


def load_constants(points):
    """(workspace, {(model, device): plan name}): one plan per model and device."""
    import dsl

    pairs = sorted({(m, SYSTEMS[s][0]) for m, s in points})
    names = {pr: f"p{i}" for i, pr in enumerate(pairs)}
    text = PLAN.format(plans="\n".join(f"plan {n} {{ model = {m}; device = {d} }}" for (m, d), n in names.items()))
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "aic.plan"
        f.write_text(text, encoding="utf-8")
        ws = dsl.load(str(f))
    return ws, names


def link_fields(ws, name):
    return {"bandwidth": float(ws.base_value(f"{name}.bandwidth"))}


#: AIConfigurator's MoE workload: the share of routed tokens its power-law routing of exponent
#: 1.2 puts on the top 20 % of experts, as its collector's documentation states it
AIC_TOP20_SHARE = 0.65
#: the exponent of AIConfigurator's power-law routing for Qwen3 MoE (sdk/models/moe.py)
AIC_ALPHA = 1.2
ROUTINGS = ("aic", "top20", "uniform")


@functools.lru_cache(maxsize=None)
def aic_experts_hit(T, E, k, alpha=AIC_ALPHA, draws=4000, seed=0):
    """Expected distinct experts (of ``E``, top-``k``) a step of ``T`` tokens reads under
    AIConfigurator's synthetic routing (module docstring; ai-dynamo/aiconfigurator
    collector/helper.py ``_generate_power_law_distribution``, expert parallelism 1): loads x_i
    drawn from the power law p(x) ∝ x^−α on [0.01, 2] (T·k ≤ E) or [1, 0.8·T] (T·k > E) by the
    inverse CDF, counts round(x_i·T·k / Σx), capped at T; the capped excess and the tokens rounding
    left out go one at a time to the least-loaded expert — empty experts first, so each of them
    adds one expert hit — and a rounding surplus is taken one at a time from the most-loaded
    expert, which empties experts only once every count is down to 1 (then the hits are T·k).
    Mean over ``draws`` draws of one numpy generator seeded ``seed`` (numpy rounds halves to
    even, as torch.round).  Exact at the ends: k at T = 1 (every count capped at one token), E
    once the smallest load still rounds to a token.  Returns experts (float)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lo, hi = (1.0, 0.8 * T) if T * k > E else (0.01, 2.0)
    u = rng.random((draws, E))
    a = 1.0 - alpha
    x = ((hi ** a - lo ** a) * u + lo ** a) ** (1.0 / a)
    n = np.round(x / x.sum(axis=1, keepdims=True) * (T * k))
    excess = np.clip(n - T, 0, None).sum(axis=1)
    n = np.minimum(n, T)
    hit = np.minimum(E, (n >= 1).sum(axis=1) + excess)       # the excess fills empty experts first
    delta = T * k - n.sum(axis=1) - excess                   # tokens still missing (< 0: surplus)
    hit = np.where(delta >= 0, np.minimum(E, hit + delta), np.minimum(hit, T * k))
    return float(hit.mean())


@functools.lru_cache(maxsize=None)
def skew_for_experts_hit(E, k, T, hit):
    """The ``expert_skew`` s ≥ 0 at which a step of ``T`` tokens hits ``hit`` distinct experts in
    expectation (:func:`plugins.serving.serving_step.distinct_experts`, decreasing in s): 0 when ``hit`` is
    at least the uniform count, else bisection to 1e-9 on [0, 64]."""
    from plugins.serving.serving_step import distinct_experts

    f = lambda s: float(distinct_experts(E, k, T, s)) - hit   # noqa: E731
    if f(0.0) <= 0:
        return 0.0
    lo, hi = 0.0, 64.0
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


def routing_knobs(ws, model, routing="top20"):
    """Step knobs for ``model``'s routing: {} for a dense model or ``routing`` = "uniform" (or
    "aic", whose skew depends on the step: :func:`routed`); for "top20", ``expert_skew`` at which
    the top 20 % of experts take :data:`AIC_TOP20_SHARE` of the routed tokens
    (:func:`plugins.serving.serving_step.skew_for_top_share`)."""
    from plugins.serving.serving_step import skew_for_top_share

    if routing != "top20" or not ws.has(f"{model}.experts"):
        return {}
    E, k = int(ws.base_value(f"{model}.experts")), int(ws.base_value(f"{model}.experts_per_token"))
    return {"expert_skew": skew_for_top_share(E, k, AIC_TOP20_SHARE)}


def routed(ws, model, c, routing="aic"):
    """The step constants of a step of T tokens, as a function of T: ``c`` itself, except for a
    mixture of experts under ``routing`` = "aic", where ``expert_skew`` reproduces
    AIConfigurator's expected distinct experts at T (:func:`aic_experts_hit`,
    :func:`skew_for_experts_hit`)."""
    if routing != "aic" or not ws.has(f"{model}.experts"):
        return lambda T: c
    E, k = int(ws.base_value(f"{model}.experts")), int(ws.base_value(f"{model}.experts_per_token"))

    def at(T):
        s = skew_for_experts_hit(E, k, int(T), aic_experts_hit(int(T), E, k))
        return c if s == 0.0 else {**c, "expert_skew": s, "expert_counts": (E, k)}
    return at


def ours_static(cT, b, isl, osl):
    """(TTFT, TPOT, tokens/s/GPU) of a static batch; ``cT``: step constants by tokens in the step
    (:func:`routed`)."""
    from plugins.serving.serving_step import static_batch

    c = cT(b * isl)
    ttft = static_batch(c, b, isl, osl)[0]
    tpot = static_batch(cT(b), b, isl, osl)[1]
    return ttft, tpot, b * osl / (ttft + (osl - 1) * tpot) / c["tp"]


def ours_agg(cT, b, isl, osl, layers):
    from plugins.serving.serving_step import step_time

    ctx = isl
    fill = math.ceil(isl * b / ctx)
    mid = isl + osl / 2                                   # mean context of a decoding sequence
    if b == 1:
        mix = float(step_time(cT(ctx), ctx, 0, 0))
        gen = float(step_time(cT(1), 0, 1, mid))
        n_mix, n_gen, n_mix_tpot = 1, osl - 1, 0
    else:
        mix = float(step_time(cT(ctx + b - 1), ctx, b - 1, (b - 1) * mid))
        gen = float(step_time(cT(b), 0, b, b * mid))
        n_mix = fill
        n_gen = max(osl - fill, 0)
        n_mix_tpot = n_mix
    qf = 1.0 if b <= 1 else min(1 + math.log2(b) / 8, 2.0)
    ttft = (mix * math.ceil(isl / ctx) + VLLM_DISPATCH_MS_PER_LAYER * 1e-3 * layers) * qf
    steps = n_mix_tpot + n_gen
    tpot = (mix * n_mix_tpot + gen * n_gen) / steps
    total = n_mix * mix + n_gen * gen
    thr = b * (osl - 1) / total
    thr = min(thr, b * (osl - 1) / (ttft + tpot * (osl - 1))) / cT(b)["tp"]
    return ttft, tpot, thr


def ours_disagg(cT, b, isl, osl):
    """(TTFT, TPOT, tokens/s/GPU) of one prefill worker (one prompt a step) and one decode
    worker of b sequences, each of c["tp"] GPUs, with AIConfigurator's schedule factors."""
    from plugins.serving.serving_step import static_batch

    prefill, _ = static_batch(cT(isl), 1, isl, osl)
    _, decode = static_batch(cT(b), b, isl, osl)
    p_step, tpot = prefill * DISAGG_PREFILL_SCALE, decode * DISAGG_DECODE_SCALE
    seq_s = min(DISAGG_PREFILL_DEGRADE / p_step, DISAGG_DECODE_DEGRADE * b / (tpot * (osl - 1)))
    return p_step * DISAGG_TTFT_QUEUE, tpot, seq_s * osl / (2 * cT(b)["tp"])


def ours(mode, c, b, isl, osl, layers):
    """Our (TTFT, TPOT, tokens/s/GPU) in s and token/s for one grid point of ``mode``; ``c``: the
    step constants, or a function of the tokens in a step giving them (:func:`routed`)."""
    cT = c if callable(c) else (lambda T: c)
    if mode == "static":
        return ours_static(cT, b, isl, osl)
    if mode == "agg":
        return ours_agg(cT, b, isl, osl, layers)
    return ours_disagg(cT, b, isl, osl)


def stored_rows():
    """The AIConfigurator figures stored in specs/data/serving/aiconfigurator-0.12-*.csv:
    {(mode, model key, system, tp, batch): row}."""
    keys = {v: k for k, v in MODELS.items()}
    out = {}
    for f in sorted(DATA.glob("aiconfigurator-0.12-*.csv")):
        with open(f, newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                out[(r["mode"], keys[r["model"]], r["system"], int(r["tp"]), int(r["batch"]))] = r
    return out


def aic(model, system, mode, b, tp, isl, osl, backend):
    from aiconfigurator.cli.api import cli_estimate

    kw = {}
    if "A3B" in model:
        kw = {"moe_tp_size": tp, "moe_ep_size": 1}
    if mode == "disagg":
        r = cli_estimate(model, system, mode=mode, backend_name=backend, isl=isl, osl=osl,
                         prefill_tp_size=tp, decode_tp_size=tp, prefill_batch_size=1, decode_batch_size=b,
                         prefill_num_workers=1, decode_num_workers=1,
                         **{f"{ph}_{k}": v for ph in ("prefill", "decode") for k, v in kw.items()})
        return r.ttft / 1e3, r.tpot / 1e3, r.tokens_per_second_per_gpu, r
    r = cli_estimate(model, system, mode=mode, backend_name=backend, isl=isl, osl=osl, batch_size=b,
                     tp_size=tp, **kw)
    return r.ttft / 1e3, r.tpot / 1e3, r.tokens_per_second_per_gpu, r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen3_8b,qwen3_30b_a3b")
    ap.add_argument("--systems", default="h100_sxm,h200_sxm,a100_sxm")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64")
    ap.add_argument("--tps", default="1,2")
    ap.add_argument("--modes", default="static,agg,disagg")
    ap.add_argument("--isl", type=int, default=2048)
    ap.add_argument("--osl", type=int, default=256)
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--routing", choices=ROUTINGS, default="aic",
                    help="MoE routing priced: AIConfigurator's power-law workload step by step (default), "
                         "one Zipf popularity with 65 %% of the tokens on the top 20 %% of experts, or uniform")
    ap.add_argument("--csv", help="write the AIConfigurator figures and ours to this CSV")
    ap.add_argument("--stored", action="store_true", help="compare against the AIConfigurator figures stored "
                    "in specs/data/serving/ instead of running AIConfigurator (no install needed)")
    ap.add_argument("--store", help="write only the AIConfigurator figures to this CSV (the form of "
                    "specs/data/serving/aiconfigurator-*.csv)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    stored = stored_rows() if args.stored else None
    if stored is None:
        try:
            import aiconfigurator  # noqa: F401
        except ImportError:
            print("aiconfigurator is not installed: pip install aiconfigurator==0.12 (in a private venv), "
                  "or --stored to compare against the figures stored in specs/data/serving/")
            return 0
        from aiconfigurator import __version__ as aic_version  # type: ignore[attr-defined]
    else:
        aic_version = "0.12.0 (stored figures)"
    from plugins.serving.serving_step import step_constants

    models, systems = args.models.split(","), args.systems.split(",")
    points = [(m, s) for m in models for s in systems]
    ws, names = load_constants(points)
    rows = []
    hdr = (f"{'mode':6} {'model':14} {'system':9} {'tp':>2} {'b':>3} | {'TTFT aic':>9} {'ours':>9} {'ratio':>6} | "
           f"{'TPOT aic':>8} {'ours':>8} {'ratio':>6} | {'tok/s/GPU aic':>13} {'ours':>9} {'ratio':>6}")
    print(f"AIConfigurator {aic_version}, backend {args.backend}, ISL {args.isl}, OSL {args.osl}; times in ms")
    for m in models:
        if not ws.has(f"{m}.experts"):
            continue
        if args.routing == "aic":
            print(f"{m}: routing priced as AIConfigurator's power-law workload (exponent {AIC_ALPHA}), "
                  "its expected distinct experts per step")
        elif args.routing == "top20":
            print(f"{m}: routing priced with expert_skew {routing_knobs(ws, m, 'top20')['expert_skew']:.4f} "
                  f"(top 20 % of experts take {AIC_TOP20_SHARE:.0%} of the routed tokens)")
        else:
            print(f"{m}: routing priced uniform")
    print(hdr)
    print("-" * len(hdr))
    worst, groups = {}, {}
    for m in models:
        for s in systems:
            dev, link = SYSTEMS[s]
            plan = names[(m, dev)]
            layers = int(ws.base_value(f"{m}.layers"))
            for tp in map(int, args.tps.split(",")):
                c = routed(ws, m, step_constants(ws, plan, tp=tp, link=link_fields(ws, link) if tp > 1 else None,
                                                 knobs=routing_knobs(ws, m, args.routing)), args.routing)
                for mode in args.modes.split(","):
                    for b in map(int, args.batches.split(",")):
                        if stored is not None:
                            row = stored.get((mode, m, s, tp, b))
                            if row is None:
                                continue
                            at, ap_ = float(row["aic_ttft_ms"]) / 1e3, float(row["aic_tpot_ms"]) / 1e3
                            athr, version = float(row["aic_tokens_per_s_per_gpu"]), row["backend_version"]
                        else:
                            try:
                                at, ap_, athr, res = aic(MODELS[m], s, mode, b, tp, args.isl, args.osl, args.backend)
                            except Exception as e:     # an unsupported point: say so, go on
                                print(f"{mode:6} {m:14} {s:9} {tp:>2} {b:>3} | AIConfigurator: {type(e).__name__}: "
                                      f"{str(e)[:80]}")
                                continue
                            version = res.raw.get("backend_version", res.raw.get("version", res.raw.get("(d)version", "")))
                        ot, op, othr = ours(mode, c, b, args.isl, args.osl, layers)
                        rt, rp, rthr = ot / at, op / ap_, othr / athr
                        for key, r in (("ttft", rt), ("tpot", rp)):
                            w = worst.setdefault((mode, key), [math.inf, -math.inf])
                            w[0], w[1] = min(w[0], r), max(w[1], r)
                        g = groups.setdefault((m, s, mode), [0, 0, math.inf, -math.inf, math.inf, -math.inf])
                        g[0] += 1
                        g[1] += not (abs(rt - 1) <= 0.15 and abs(rp - 1) <= 0.15)
                        g[2:] = [min(g[2], rt), max(g[3], rt), min(g[4], rp), max(g[5], rp)]
                        print(f"{mode:6} {m:14} {s:9} {tp:>2} {b:>3} | {at * 1e3:9.3f} {ot * 1e3:9.3f} {rt:6.3f} | "
                              f"{ap_ * 1e3:8.3f} {op * 1e3:8.3f} {rp:6.3f} | {athr:13.1f} {othr:9.1f} {rthr:6.3f}"
                              + ("" if abs(rt - 1) <= 0.15 and abs(rp - 1) <= 0.15 else "  <- outside 15 %"))
                        rows.append({"mode": mode, "model": MODELS[m], "system": s, "backend": args.backend,
                                     "backend_version": version,
                                     "tp": tp, "batch": b, "isl": args.isl, "osl": args.osl,
                                     "aic_ttft_ms": f"{at * 1e3:.3f}", "aic_tpot_ms": f"{ap_ * 1e3:.3f}",
                                     "aic_tokens_per_s_per_gpu": f"{athr:.2f}",
                                     "ours_ttft_ms": f"{ot * 1e3:.3f}", "ours_tpot_ms": f"{op * 1e3:.3f}",
                                     "ours_tokens_per_s_per_gpu": f"{othr:.2f}"})
    print()
    print(f"{'model':14} {'system':9} {'mode':6} {'points':>6} {'outside':>7} | {'TTFT ratio':>13} | {'TPOT ratio':>13}")
    for (m, s, mode), (n, out, tlo, thi, plo, phi) in groups.items():
        print(f"{m:14} {s:9} {mode:6} {n:6} {out:7} | {tlo:5.3f} … {thi:5.3f} | {plo:5.3f} … {phi:5.3f}")
    print()
    for (mode, key), (lo, hi) in sorted(worst.items()):
        print(f"{mode:6} {key}: ours / AIConfigurator {lo:.3f} … {hi:.3f}")
    print(f"points outside 15 %: {sum(g[1] for g in groups.values())} of {sum(g[0] for g in groups.values())}")
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if args.store:
        keep = [k for k in rows[0] if not k.startswith("ours_")]
        with open(args.store, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=keep, extrasaction="ignore", lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

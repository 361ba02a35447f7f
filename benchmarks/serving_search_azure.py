"""The SLO search of `use serving_search` over ≥ 1,000 serving configurations on the
19,366-request Azure conversation trace.

Run:  python benchmarks/serving_search_azure.py [--simulate 4] [--load 4]

Target (issue: serving on engine terms): a search over ≥ 1,000 serving configurations in
≤ 10 s on one core.

Method (plugins/serving_search.py): every configuration is *screened* by a steady-state
estimate vectorised in numpy — KV capacity from the engine's memory formulas (one sympy sizing
per device × tp × pp, then numpy over max_num_seqs and chunk), the step time of the engine's
roofline at the concurrency the busiest minute's arrival rate implies (a fixed point t =
step(λ·P̄·t prefill tokens, λ·Ḡ·t decodes), an M/G/1 queue for a disaggregated prefill pool) —
and only the few the screen ranks first are *simulated* on the whole trace with the
continuous-batching simulator (plugins/serving_sim.py) for their p95 TTFT and TPOT.  The
screen's cost grows with the configurations, the simulations' with ``simulate``.

The grid: Qwen3-8B on H100 SXM, H200 and A100 SXM 80 GB; tp 1, 2, 4, 8; pp 1, 2; replicas
1–8; max_num_seqs 64, 128, 256; chunk 2,048, 4,096, 8,192; and disaggregated 1–4 prefill × 1–4
decode engines — 3 × 4 × (2 × 8 + 16) × 3 × 3 = 3,456 configurations.
Printed: the time to load the plan and size the layouts, to screen, and to simulate; the
chosen configuration.  Results go in benchmarks/RESULTS.md by hand; no unit test asserts a timing.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAN = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"

plan bench {{
  model = qwen3_8b
  use serving_search {{
    engine = vllm; max_model_len = 16384 token
    trace = "{trace}"; load = {load}
    devices = [h100_sxm, h200, a100_sxm_80gb]; links = [nvlink4]; gpu_hour = [3 USD/h, 4 USD/h, 2 USD/h]
    tp = [1, 2, 4, 8]; pp = [1, 2]; replicas = [1, 2, 3, 4, 5, 6, 7, 8]
    max_num_seqs = [64 seq, 128 seq, 256 seq]; max_num_batched_tokens = [2048 token, 4096 token, 8192 token]
    prefill_replicas = [1, 2, 3, 4]; decode_replicas = [1, 2, 3, 4]; kv_link = nic_400g
    slo_ttft = 2 s; slo_tpot = 100 ms; objective = "gpus"; simulate = {simulate}
  }}
}}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--simulate", type=int, default=4, help="configurations simulated after the screen")
    ap.add_argument("--load", type=float, default=4.0, help="the trace's load multiple")
    args = ap.parse_args()
    import dsl
    from plugins import serving_search as ss

    trace = ROOT / "specs" / "data" / "traces" / "azure-llm-2023-conv.csv"
    with tempfile.TemporaryDirectory(dir=ROOT / "benchmarks") as tmp:
        p = Path(tmp) / "bench.plan"
        p.write_text(PLAN.format(trace=trace, load=args.load, simulate=args.simulate), encoding="utf-8")
        t0 = time.perf_counter()
        ws = dsl.load(p)
        total = time.perf_counter() - t0
        res = ss.result_of(ws, "bench")
    m = res.meta
    print(f"configurations: {m['candidates']:,} ({m['valid']:,} fit, {m['stable']:,} keep up in the screen, "
          f"{m['passing']:,} within the margin)")
    print(f"screen:   {m['seconds']['screen']:.3f} s  ({m['seconds']['screen'] / m['candidates'] * 1e6:.0f} µs per "
          "configuration)")
    print(f"simulate: {m['seconds']['simulate']:.3f} s  ({m['simulated']} configurations on the whole trace)")
    print(f"total (load, size, screen, simulate): {total:.3f} s")
    if res.chosen is not None:
        r = res.row(res.chosen)
        gpus = f"{r['gpus']} GPU" + ("s" if r["gpus"] > 1 else "")
        print(f"chosen: {ss.describe(r)}, max_num_seqs {r['max_num_seqs']}, max_num_batched_tokens {r['max_num_batched_tokens']}: {gpus}, "
              f"TTFT p95 {r['ttft_p95']:.3f} s, TPOT p95 {r['tpot_p95'] * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

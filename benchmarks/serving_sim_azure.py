"""Continuous batching of the 19,366-request Azure conversation trace (the `use batching` block).

Run:  python benchmarks/serving_sim_azure.py [--repeat 5] [--reference] [--engine-step]

Target: the whole trace simulated in ≤ 2 s on one core.

Method (plugins/serving/serving_sim.py :func:`simulate`).  A per-iteration loop would run ~400,000
engine iterations in Python (``--reference`` times it).  The simulator is event driven instead:

* decoding sequences are implicit — a global decode counter D and, per sequence, key =
  computed − D; the context the decodes read is Σkey + n·D, the KV blocks an iteration
  allocates are the sequences with (key + D) % block_size = 0 (a histogram of key % block_size),
  and the finishes are a heap of the counter values at which each sequence ends;
* between events (an arrival that can be admitted, a prefill chunk, a finish, the iteration
  whose allocation would fail and preempt) every iteration decodes the same n sequences, so a
  *run* of k iterations is advanced at once: the iteration where the pool runs out follows from
  the histogram in closed form (n blocks per block_size iterations), the step times are
  α + β·(Σkey + n·(D + j)), j = 0 … k−1, when the step cost is affine in the context (checked
  per n at five contexts across the pool; both the affine test cost and the engine's roofline
  step are), else one vectorised call of the step cost over the k contexts; their running sum
  (started at the current time, so the additions are the reference's) gives each iteration's
  end, and the first iteration starting at or after the next arrival ends the run;
* the remaining iterations (~18,000 here: admissions, chunks, preemptions) follow the
  scheduler's rules one at a time.

The schedule equals the per-iteration reference's (tests/test_serving_sim.py checks it on
random traces).  Timed: :func:`simulate` and the metrics summary (percentiles by nearest rank).
The step cost is affine with the constants below (Qwen3-8B BF16 on one H100 SXM: 16.4 GB of
weights at 3.35 TB/s·0.8 ≈ 6 ms per iteration, 2·8.2 GFLOP per token at 989 TFLOP/s·0.5 ≈ 33 µs,
144 KiB of KV per context token at 2.7 TB/s ≈ 55 ns); ``--engine-step`` uses the engine's step
model (plugins/serving/serving_step.py) for the same model and device when it is installed.
Results go in benchmarks/RESULTS.md by hand; no unit test asserts a timing.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from plugins.serving import serving_sim as S  # noqa: E402
from plugins.serving import serving_trace as st  # noqa: E402

TRACE = ROOT / "specs" / "data" / "traces" / "azure-llm-2023-conv.csv"
AFFINE = {"overhead": 6e-3, "token": 33e-6, "context": 55e-9}
ENGINE = S.Engine(kv_tokens=400_000, block_size=16, max_num_seqs=256, max_num_batched_tokens=2048)
SLO = (2.0, 0.05)


def _stats(ts: list[float]) -> str:
    return f"median {statistics.median(ts):.3f} s  min {min(ts):.3f} s  max {max(ts):.3f} s"


def _engine_step():
    """(step_time, c, o) of the engine's step model for Qwen3-8B on an H100 SXM, or None."""
    try:
        from plugins.serving import serving_step
    except ImportError:
        return None
    import tempfile

    import dsl
    from plugins.training.layout_model import ops
    text = ('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'
            "plan p { model = qwen3_8b; device = h100_sxm; use serving_step { } }\n")
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "p.plan"
        f.write_text(text, encoding="utf-8")
        ev = dsl.load(f)
        return serving_step.step_time, serving_step.step_constants(ev, "p"), ops("numpy")


def _time(fn, repeat):
    wall, cpu, out = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--reference", action="store_true", help="also time the per-iteration reference")
    ap.add_argument("--engine-step", action="store_true", help="also run with the engine's step model")
    a = ap.parse_args()
    tr = st.read_trace(TRACE)
    A, P, G = np.asarray(tr.arrived), np.asarray(tr.prefill), np.asarray(tr.decode)
    costs = [("affine step cost", S.linear_step, AFFINE, None)]
    if a.engine_step:
        es = _engine_step()
        if es is None:
            print("engine step model: plugins/serving/serving_step.py is not installed")
        else:
            costs.append(("engine step model (Qwen3-8B, H100 SXM)", *es))
    for name, f, c, o in costs:
        def run():
            r = S.simulate(A, P, G, ENGINE, f, c, o)
            return r, r.summary(*SLO)
        wall, cpu, (r, s) = _time(run, a.repeat)
        print(f"{name}: {len(A):,} requests, {r.iterations:,} iterations, {len(r.series_t):,} events")
        print(f"  simulate + summary  wall {_stats(wall)}")
        print(f"                      cpu  {_stats(cpu)}")
        print(f"  ttft p50/p95/p99 {s['ttft_p50']:.4f} / {s['ttft_p95']:.4f} / {s['ttft_p99']:.4f} s   "
              f"tpot p95 {1e3 * s['tpot_p95']:.2f} ms   throughput {s['throughput']:,.0f} token/s   "
              f"goodput {s['goodput']:.3f} request/s   preemptions {int(s['preemptions'])}")
        if a.reference:
            wall, cpu, ref = _time(lambda: S.simulate_reference(A, P, G, ENGINE, f, c, o), 1)
            same = np.allclose(ref.first, r.first, rtol=1e-9) and np.allclose(ref.last, r.last, rtol=1e-9)
            print(f"  per-iteration reference  wall {wall[0]:.3f} s  cpu {cpu[0]:.3f} s  "
                  f"same schedule: {same and ref.iterations == r.iterations}")


if __name__ == "__main__":
    main()

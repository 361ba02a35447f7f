"""Cost per candidate of the roofline step model in the layout search, beside Calculon's.

Run:  python benchmarks/bench_roofline.py [--repeat 7] [--calculon PATH] [--calculon-python PY]

Method.  This project: specs/cases/layout-mt-nlg-530b.plan is loaded once; then
``plugins.training.layout_search.run`` (constants, the 7,680-candidate grid, the closed forms of
``plugins/training/layout_model.py`` vectorised with numpy, the validity and memory rules, ranking,
Pareto front, explanations) is timed in-process for plan ``published`` (efficiency = "mfu")
and ``published_roofline`` (efficiency = "roofline": every GEMM and memory-bound op of the
layer table on the device curves), and ``evaluate_chunk`` alone (the model and the rules);
wall time best and median of ``--repeat`` runs, divided by the candidate count.

Calculon (only with ``--calculon PATH``, a source tree of calculon-ai/calculon, run by
``--calculon-python``, an interpreter that has its dependency pandas; nothing is installed
or copied here): in that interpreter, ``Llm(app).compile(system, execution)`` + ``run(system)``
— one evaluation of one layout, what its ``llm-optimal-execution`` search repeats for every
candidate — for Turing-530B (its models/turing-530B.json) on systems/a100_80g.json at tp 8 ·
pp 7 · dp 80 (4,480 GPUs, batch 1,920, micro-batch 1, sequence parallelism, attention-only
recomputation), timed over ``--calculon-evals`` evaluations after one warm-up; wall time per
evaluation.  Without it the comparison uses the stated target figure of ≈2.7 ms per Calculon
evaluation, taken as given (its derivation is not reproduced here; Calculon's README says only
that ``llm-optimal-execution`` of Turing-530B on 5,128 A100s takes "~1 min") — run with
``--calculon`` to measure it on the same machine instead.

Prints per-candidate costs and the ratio Calculon / this project.  Nothing is asserted;
results go to benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "specs" / "cases" / "layout-mt-nlg-530b.plan"
CITED_CALCULON_S = 2.7e-3

CALCULON_SNIPPET = r"""
import json, sys, time, logging
sys.path.insert(0, sys.argv[1])
from calculon.llm import Llm
from calculon.system import System
import calculon.io
root, n = sys.argv[1], int(sys.argv[2])
app = Llm.Application(calculon.io.read_json_file(root + "/models/turing-530B.json"))
syst = System(calculon.io.read_json_file(root + "/systems/a100_80g.json"))
exe_json = {"num_procs": 4480, "tensor_par": 8, "pipeline_par": 7, "data_par": 80, "tensor_par_net": 0,
            "pipeline_par_net": 1, "data_par_net": 1, "batch_size": 1920, "microbatch_size": 1,
            "datatype": "float16", "fused_activation": True, "attention_type": "multihead",
            "activation_recompute": "attn_only", "pipeline_interleaving": 1, "optimizer_sharding": True,
            "tensor_par_comm_type": "rs_ag", "tensor_par_overlap": "none", "seq_par_ag_redo": False,
            "data_par_overlap": False, "weight_offload": False, "activations_offload": False,
            "optimizer_offload": False, "training": True}
log = logging.getLogger("bench"); log.setLevel(logging.ERROR)
def once():
    m = Llm(app, log)
    m.compile(syst, Llm.Execution.from_json(exe_json))
    m.run(syst)
    return m
once()
t = time.perf_counter()
for _ in range(n):
    m = once()
dt = (time.perf_counter() - t) / n
print(json.dumps({"per_eval_s": dt, "step_s": m.get_total_time()}))
"""


def bench_plan(repeat: int):
    import dsl
    from plugins.training import layout_search as search

    ws = dsl.load(CASE)
    out = {}
    for plan in ("published", "published_roofline"):
        walls = []
        for _ in range(repeat):
            t = time.perf_counter()
            res = search.run(ws, plan)
            walls.append(time.perf_counter() - t)
        K, meta = search.constants(ws, plan)
        X = search.grid(search.knob_lists(ws, plan), int(K["gpus"]))
        chunk = []
        for _ in range(repeat):
            t = time.perf_counter()
            search.evaluate_chunk(K, X, meta)
            chunk.append(time.perf_counter() - t)
        n = len(res)
        b = res.row(res.best)
        out[plan] = (n, min(walls), statistics.median(walls), min(chunk), b)
        print(f"{plan} (efficiency = {meta['efficiency']}): {n} candidates; search wall best {min(walls) * 1e3:.1f} ms, "
              f"median {statistics.median(walls) * 1e3:.1f} ms -> {min(walls) / n * 1e6:.2f} µs per candidate; "
              f"model + rules alone {min(chunk) * 1e3:.1f} ms -> {min(chunk) / n * 1e6:.2f} µs per candidate")
        print(f"  best: tp {b['tp']} · pp {b['pp']} · dp {b['dp']} · v {b['virtual']} · mb {b['micro_batch']} · "
              f"zero {b['zero']} · {b['recompute']}: step {b['step_s']:.4g} s, memory {b['memory_gib']:.4g} GiB")
    return out


def bench_calculon(path: Path, python: str, evals: int):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CALCULON_SNIPPET)
        script = f.name
    try:
        p = subprocess.run([python, script, str(path), str(evals)], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(path)))
    finally:
        os.unlink(script)
    if p.returncode != 0:
        print("Calculon did not run:", p.stderr.strip()[-400:])
        return None
    r = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"Calculon (measured here): {r['per_eval_s'] * 1e3:.2f} ms per evaluation (tp 8 · pp 7 · dp 80, "
          f"its step {r['step_s']:.4g} s), mean of {evals} after one warm-up")
    return r["per_eval_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--calculon", type=Path, help="path to a Calculon source tree (skipped without it)")
    ap.add_argument("--calculon-python", default=sys.executable, help="interpreter with pandas for Calculon")
    ap.add_argument("--calculon-evals", type=int, default=50)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    out = bench_plan(a.repeat)
    calc = bench_calculon(a.calculon, a.calculon_python, a.calculon_evals) if a.calculon else None
    ref = calc if calc is not None else CITED_CALCULON_S
    how = "measured here" if calc is not None else "stated target, not measured"
    n, best, _, chunk, _ = out["published_roofline"]
    print(f"roofline search per candidate {best / n * 1e6:.2f} µs: {ref / (best / n):,.0f}× faster than Calculon's "
          f"{ref * 1e3:.2f} ms per evaluation ({how}); the model + rules alone {ref / (chunk / n):,.0f}×")


if __name__ == "__main__":
    main()

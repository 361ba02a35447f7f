"""This project side by side with other LLM-system estimators, on the same question, in one run.

Run:  python benchmarks/peers.py [--repeat 5] [--calculon PATH]

Method: every measurement is a *cold process* (a new Python interpreter per run, imports
included), timed as the child's CPU time (user + system, ``os.times``; stable on a shared
machine) and wall time; the median of ``--repeat`` runs is reported, with the machine's load
average.  Ratios are CPU(peer) / CPU(plan): above 1 means this project answered faster.
Each command runs once untimed first, and every child may read and write bytecode (its own
``PYTHONPYCACHEPREFIX``; ``PYTHONDONTWRITEBYTECODE`` removed): both tools are timed as an
installed program's second run — from compiled modules, this project with its parser cache
filled (dsl/syntax/parser.py) — not as a first run that compiles every module.

* **llm-analysis** (``pip install llm-analysis``, PyPI; skipped when not importable by this
  interpreter or by ``--llm-analysis-python``): the design case's training question — Qwen3-8B
  (its Hugging Face config from ``specs/catalog/hf/Qwen3-8B.json``), 48 RTX 4090 (peak BF16,
  memory and bandwidth from ``specs/catalog/hardware.plan``, PCIe between GPUs), ZeRO-3, BF16
  weights with FP32 master and Adam, MFU 40 %, 100e9 tokens of 8,192-token sequences in
  global batches of 384: memory per GPU and total training time.  This project answers it
  with ``plan eval specs/cases/cpt-qwen3-8b-4090.plan``, which also prices checkpoints and
  failures for two plans (48 and 32 GPUs): the question is the same, the answer is richer;
  both answers are printed.
* **Calculon** (only with ``--calculon PATH`` to a Calculon source tree, run with its own
  ``bin/calculon`` from that tree; never installed or copied here): Calculon's
  ``llm-optimal-execution`` search for Megatron-Turing NLG 530B on the system file given by
  ``--calculon-system`` (default: its ``systems/a100_80g.json``) against ``plan search`` of
  ``specs/cases/layout-mt-nlg-530b.plan`` (7,680 candidate layouts of the same model).  The
  two searches do not cover the same space (Calculon enumerates more options per layout), so
  the ratio is printed per run and per candidate with both candidate counts.

Nothing here is asserted by the tests; results go to benchmarks/RESULTS.md by hand.
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
CASE = ROOT / "specs" / "cases" / "cpt-qwen3-8b-4090.plan"
LAYOUT = ROOT / "specs" / "cases" / "layout-mt-nlg-530b.plan"
HF = ROOT / "specs" / "catalog" / "hf" / "Qwen3-8B.json"


def child_env(env=None) -> dict:
    """The children's environment: bytecode allowed (``PYTHONDONTWRITEBYTECODE`` removed), this
    checkout's under its own ``PYTHONPYCACHEPREFIX`` — as an installed program runs (see the
    module docstring)."""
    env = dict(os.environ if env is None else env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "plan-bench-pyc" / f"peers-{ROOT.name}")
    return env


def timed(cmd: list[str], repeat: int, cwd: Path = ROOT, env=None) -> tuple[float, float, str]:
    """Median child CPU and wall time of ``cmd`` over ``repeat`` cold runs (after one untimed
    warm-up run), and its last output."""
    env = child_env(env)
    subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)      # warm-up (bytecode, caches)
    cpu, wall, out = [], [], ""
    for _ in range(repeat):
        before = os.times()
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
        wall.append(time.perf_counter() - t)
        after = os.times()
        cpu.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:4])} … failed ({p.returncode}): {p.stderr.strip()[-400:]}")
        out = p.stdout
    return statistics.median(cpu), statistics.median(wall), out


def design_inputs() -> dict:
    """The design case's inputs, read from this project's own files (no numbers typed here)."""
    import dsl

    ws = dsl.load(CASE)

    def v(name):
        return float(ws.base_value(ws.lookup(name)))

    return {"peak_flops": v("rtx4090.peak_flops"), "memory": v("rtx4090.memory"), "mem_bw": v("rtx4090.mem_bw"),
            "pcie": v("pcie4_x16.bandwidth"), "nic": v("nic_200g.bandwidth"), "gpus": int(v("gpus48.gpus")),
            "per_host": int(v("gpus48.gpus_per_host")), "mfu": v("gpus48.mfu"), "tokens": int(v("cpt.tokens")),
            "seq": int(v("cpt.seq_len")), "batch": int(v("cpt.global_batch")),
            "micro": int(v("gpus48.micro_batch")),
            "answer": {"state memory per GPU (GiB)": v("gpus48.persistent_memory") / 2 ** 30,
                       "step time (s)": v("gpus48.step_time"),
                       "training time (day)": v("gpus48.train_time") / 86400 if "gpus48.train_time" in ws.nodes
                       else None}}


LLM_ANALYSIS = r'''
import json, sys
from llm_analysis import config
from llm_analysis.analysis import train
q = json.loads(sys.argv[1])
hf = json.load(open(q["hf"]))
model = config.ModelConfig(name="qwen3-8b", num_layers=hf["num_hidden_layers"], n_head=hf["num_attention_heads"],
                           hidden_dim=hf["hidden_size"], vocab_size=hf["vocab_size"],
                           max_seq_len=hf["max_position_embeddings"], num_key_value_heads=hf["num_key_value_heads"],
                           ffn_embed_dim=hf["intermediate_size"], model_type="llama")
config.model_configs[model.name] = model
config.gpu_configs["rtx4090"] = config.GPUConfig(
    name="rtx4090", mem_per_GPU_in_GB=q["memory"] / 1e9, hbm_bandwidth_in_GB_per_sec=q["mem_bw"] / 1e9,
    intra_node_bandwidth_in_GB_per_sec=q["pcie"] / 1e9, intra_node_min_message_latency=8e-06,
    peak_fp16_TFLOPS=q["peak_flops"] / 1e12, inter_node_bandwidth_in_GB_per_sec=q["nic"] / 1e9)
r = train(model_name="qwen3-8b", gpu_name="rtx4090", dtype_name="w16a16e16", log_level="ERROR",
          seq_len=q["seq"], global_batch_size=q["batch"], batch_size_per_gpu=q["micro"],
          total_num_tokens=q["tokens"], ds_zero=3, total_num_gpus=q["gpus"], num_gpus_per_node=q["per_host"],
          flops_efficiency=q["mfu"], mlp_gated_linear_units=True, output_dir=None)
out = {}
if isinstance(r, dict):
    if "(weight+op_state+grad)_memory_per_gpu" in r:
        out["state memory per GPU (GiB)"] = r["(weight+op_state+grad)_memory_per_gpu"] / 2 ** 30
    if "latency_per_iter" in r:
        out["step time (s)"] = r["latency_per_iter"]
    if "total_training_latency" in r:
        out["training time (day)"] = r["total_training_latency"] / 86400
print(json.dumps(out))
'''


def run_llm_analysis(py: str, repeat: int, plan_cpu: float) -> None:
    try:
        subprocess.run([py, "-c", "import llm_analysis"], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("llm-analysis: not importable by", py, "— skipped (pip install llm-analysis, or --llm-analysis-python)")
        return
    q = design_inputs()
    answer = q.pop("answer")
    q["hf"] = str(HF)
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "la.py"
        script.write_text(LLM_ANALYSIS, encoding="utf-8")
        cpu, wall, out = timed([py, str(script), json.dumps(q)], repeat, cwd=Path(d))
    res = json.loads(out.strip().splitlines()[-1] or "{}")
    print(f"llm-analysis train (cold)           cpu median {cpu:.3f} s  wall {wall:.3f} s")
    print(f"  ratio llm-analysis / plan (CPU):   {cpu / plan_cpu:.2f}×")
    print("  answers: llm-analysis", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()})
    print("           plan        ", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in answer.items()})


def run_calculon(path: Path, system: str | None, repeat: int) -> None:
    exe = path / "bin" / "calculon"
    if not exe.exists():
        print(f"Calculon: no bin/calculon under {path} — skipped")
        return
    model = path / "models" / "megatron-1T.json"
    for name in ("turing-530B.json", "megatron-530B.json", "mt-nlg-530B.json"):
        if (path / "models" / name).exists():
            model = path / "models" / name
            break
    sysfile = Path(system) if system else path / "systems" / "a100_80g.json"
    env = dict(os.environ, PYTHONPATH=str(path))
    with tempfile.TemporaryDirectory() as d:
        outj = Path(d) / "out.json"
        cmd = [sys.executable, str(exe), "llm-optimal-execution", str(model), "5128", "2520", "float16",
               str(sysfile), str(outj)]
        try:
            c_cpu, c_wall, _ = timed(cmd, 1, cwd=path, env=env)
        except RuntimeError as e:
            print("Calculon:", e)
            return
    p_cpu, p_wall, _ = timed([sys.executable, "-m", "dsl.cli", "search", str(LAYOUT), "--plan", "mtnlg"], repeat)
    print(f"Calculon llm-optimal-execution      cpu {c_cpu:.2f} s  wall {c_wall:.2f} s  ({model.name}, "
          f"{sysfile.name})")
    print(f"plan search mtnlg (cold)            cpu median {p_cpu:.3f} s  wall {p_wall:.3f} s  (7,680 candidates)")
    print(f"  ratio Calculon / plan (CPU, cold): {c_cpu / p_cpu:.1f}× — different search spaces, see the docstring")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--llm-analysis-python", default=sys.executable,
                    help="interpreter that has llm-analysis installed (default: this one)")
    ap.add_argument("--calculon", type=Path, help="path to a Calculon source tree (skipped without it)")
    ap.add_argument("--calculon-system", help="Calculon system JSON (default: systems/a100_80g.json of the tree)")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; cold processes, median of {a.repeat}")
    cpu, wall, _ = timed([sys.executable, "-m", "dsl.cli", "eval", str(CASE)], a.repeat)
    print(f"plan eval cpt-qwen3-8b-4090 (cold)  cpu median {cpu:.3f} s  wall {wall:.3f} s")
    run_llm_analysis(a.llm_analysis_python, a.repeat, cpu)
    if a.calculon:
        run_calculon(a.calculon, a.calculon_system, a.repeat)
    else:
        print("Calculon: no --calculon PATH given — skipped")


if __name__ == "__main__":
    main()

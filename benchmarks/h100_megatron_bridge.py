"""The training step on H100 against NVIDIA's Megatron-Bridge performance summary.

Run:  python benchmarks/h100_megatron_bridge.py            # the table, one row per published run
      python benchmarks/h100_megatron_bridge.py --terms    # and the step's terms per run

Reads specs/data/calibration/megatron-bridge-h100.csv (every DGX-H100 pre-training row of the
dense Llama models in the Megatron-Bridge "Performance Summary" and its archive; the README
beside it cites the page and commit), builds each row as a plan in the roofline mode and prints
the predicted tokens/s/GPU and MFU beside the published ones, with their ratio.

**Every published H100 Llama row is FP8** (FP8-CS / FP8; the 25.09 section prints no precision
column, but its rows have the 25.11 FP8-CS rows' layouts and throughputs within 3 %, and its
8B row's 725 model TFLOP/s is 73 % of the 989.4 TFLOP/s dense BF16 peak).  The training step
prices matrix products at the device's BF16 peak and matmul-efficiency curve only (there is no
FP8 matmul rate in the device catalog), so the prediction is that of the *same run in BF16*.
The bridge between the two is NVIDIA's own statement in Megatron-Bridge docs/performance-guide.md
("Expected speedup of FP8 training compared to BF16 training"): FP8 is applied to the linear
layers only, "typically achieving a speedup of 1.2–1.5X".  So for a BF16 prediction that is
right, predicted / published lies in [1/1.5, 1/1.2] = [0.667, 0.833]; ``band`` in the output
says where each ratio falls.  This brackets the model within ±11 % of the band's middle — it is
a bound, not a like-for-like validation (there is no published BF16 H100 Llama row).

MFU columns: published = model TFLOP/s/GPU (Megatron-Bridge's own FLOP count) / 989.4 TFLOP/s
(the BF16 dense peak of the catalog's ``h100_sxm``); predicted = ``mfu_achieved`` (the exact
matrix count with causal attention over s(s+1)/2 pairs, plugins/flops.py) — the two FLOP
counts differ by a few per cent, so compare tokens/s first.

Assumptions, per row (each a reading of the recipes in
src/megatron/bridge/perf_recipes/llama/h100/{llama3,llama31}.py and perf_recipes/_common.py of
github.com/NVIDIA-NeMo/Megatron-Bridge, read at commit 067f987df03b8355b03192d88d70f1709fedf51a;
the recipe at that commit may differ from the container a row was measured with):

* hardware: ``h100_sxm`` (catalog), 8 GPUs per host on ``nvlink4``, between hosts the catalog's
  ``ib_ndr_400g`` with 8 NICs per host (DGX-H100: eight 400 Gb/s ConnectX-7 InfiniBand ports);
* model: Llama 3 8B / 70B and Llama 3.1 405B from their Hugging Face configs
  (specs/catalog/hf/Llama-3.1-{8B,70B,405B}.json; Llama 3 and 3.1 share the architecture at
  these sizes — the 3.1 configs differ in RoPE scaling only); vocabulary 128,256 as the
  recipes set it (``should_pad_vocab`` pads it to a multiple of 128·tp, 128,256 already is);
* the layout as printed (GBS, MBS, sequence length, TP, PP, CP, VP) — with pp > 1 the
  interleaved schedule with VP chunks per rank, layers split evenly over the pp·VP chunks (the
  26.xx 70B recipe's ``pipeline_model_parallel_layout`` puts 1–3 layers per chunk around the
  embedding and the head; not modelled);
* ``sequence_parallel = true`` when tp > 1 (every H100 Llama recipe with tp > 1 sets it);
* the distributed optimizer (ZeRO-1) for FSDP = 0 rows — Megatron-Bridge recipes use
  Megatron's distributed optimizer; Megatron-FSDP (FSDP = 8, the 8B rows) as ZeRO-3;
  gradients reduced in BF16 (``_benchmark_common`` sets ``grad_reduce_in_fp32 = False``);
  DP collectives overlap the backward (``overlap_grad_reduce``/``overlap_param_gather``,
  ``prefetch = true``);
* activation recomputation: none for the 70B and 405B rows (their recipes set none); the 8B
  FP8 recipe recomputes 5 of 32 layers in full (``recompute_method = "block"``,
  ``recompute_num_layers = 5``), which ``recompute`` (none / selective / full, all layers)
  cannot state: priced as none, so its prediction leaves out ≈ 5/32 of a forward pass;
* TP collectives exposed (``overlap = 0 %``): the recipes overlap them with user-buffer GEMM
  overlap (``tp_comm_overlap``), for which no measured hidden share is cited here; ``--terms``
  shows how large the exposed TP term is, an upper bound on what the overlap can win;
* optimizer: Adam, BF16 weights and gradients, FP32 master weights and moments
  (16 B/param), ``usable = 80 GB``; no input wait.
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CSV = ROOT / "specs" / "data" / "calibration" / "megatron-bridge-h100.csv"
# a plan file that is never written: the text is evaluated as if it lived beside the cases
PLAN_PATH = ROOT / "specs" / "cases" / "h100-megatron-bridge.plan"
H100_BF16_PEAK_TFLOPS = 989.4          # specs/catalog/hardware.plan h100_sxm.peak_flops
FP8_SPEEDUP = (1.2, 1.5)               # Megatron-Bridge docs/performance-guide.md, FP8 vs BF16
HF = {"LLAMA3_8B": "Llama-3.1-8B.json", "LLAMA3_70B": "Llama-3.1-70B.json",
      "LLAMA3.1_405B": "Llama-3.1-405B.json"}
TERMS = ("compute_time", "recompute_time", "bubble_time", "tp_comm", "cp_comm", "dp_comm", "optimizer_time",
         "step_time")


@dataclass(frozen=True)
class Row:
    """One published run: the CSV's columns as printed, parsed where the plan needs them."""
    release: str
    model: str
    gpus: int
    precision: str
    gbs: int
    mbs: int
    seq: int
    fsdp: str
    tp: int
    pp: int
    cp: int
    vp: int
    tokens_per_gpu: float
    tflops_per_gpu: float

    @property
    def name(self) -> str:
        """The plan's name: model and release, e.g. ``llama3_70b_26_04_01``."""
        return (self.model.lower().replace(".", "") + "_" + self.release.replace(".", "_"))

    @property
    def published_mfu(self) -> float:
        """Published model TFLOP/s/GPU over the BF16 dense peak (fraction)."""
        return self.tflops_per_gpu / H100_BF16_PEAK_TFLOPS


def read_rows(path: Path = CSV) -> list[Row]:
    """The CSV's rows (``n/a`` VP is 1: no interleaving)."""
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for d in csv.DictReader(f):
            rows.append(Row(d["release"], d["model"], int(d["gpus"]), d["precision"], int(d["gbs"]), int(d["mbs"]),
                            int(d["seq_length"]), d["fsdp"], int(d["tp"]), int(d["pp"]), int(d["cp"]),
                            1 if d["vp"] == "n/a" else int(d["vp"]), float(d["tokens_per_sec_per_gpu"]),
                            float(d["model_tflops_per_gpu"])))
    return rows


def plan_text(rows: list[Row], overlap: str = "0 %") -> str:
    """One `.plan` text with a workload and a plan per row (the assumptions of the docstring)."""
    out = ['import "../catalog/hardware.plan"', ""]
    for m, f in HF.items():
        out.append(f'model {m.lower().replace(".", "")} from "../catalog/hf/{f}"')
    out.append("")
    for r in rows:
        zero = 3 if r.fsdp not in ("", "0") else 1
        schedule = '; schedule = "interleaved"' if r.vp > 1 else ""
        sp = "true" if r.tp > 1 else "false"
        out += [f"workload w_{r.name} {{ tokens = 1e12 token; seq_len = {r.seq} token; global_batch = {r.gbs} seq }}",
                f"plan {r.name} {{",
                f"  model = {r.model.lower().replace('.', '')}; workload = w_{r.name}; device = h100_sxm",
                f"  gpus = {r.gpus}; gpus_per_host = 8; micro_batch = {r.mbs} seq",
                '  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; '
                'usable = 80 GB }',
                f"  use layout {{ tp = {r.tp}; pp = {r.pp}; cp = {r.cp}; virtual = {r.vp}{schedule}; zero = {zero}",
                f"    sequence_parallel = {sp}; recompute = \"none\"; efficiency = \"roofline\"; overlap = {overlap}",
                "    link = nvlink4; nic = ib_ndr_400g; nics_per_host = 8 }",
                "}", ""]
    return "\n".join(out)


def predict(rows: list[Row], overlap: str = "0 %") -> dict[str, dict[str, float]]:
    """Each row's predicted tokens/s/GPU, MFU, memory fit and step terms (seconds)."""
    import dsl
    res = dsl.load(PLAN_PATH, text=plan_text(rows, overlap))
    out = {}
    for r in rows:
        p = res[r.name]
        step = float(p.value("step_time", "s"))
        d = {"tokens_per_gpu": r.gbs * r.seq / (step * r.gpus), "mfu": float(p.value("mfu_achieved", "")),
             "compute_mfu": float(p.value("compute_mfu", "")), "fits": bool(p.requirements.get("fits_memory", True)),
             "memory_gib": float(p.value("memory_per_gpu", "GiB"))}
        for t in TERMS:
            try:
                d[t] = float(p.value(t, "s"))
            except Exception:      # a term the layout does not define (cp_comm at cp = 1, …)
                d[t] = 0.0
        out[r.name] = d
    return out


def band(ratio: float) -> str:
    """Where predicted(BF16) / published(FP8) falls against NVIDIA's 1.2–1.5× FP8 speedup."""
    lo, hi = 1 / FP8_SPEEDUP[1], 1 / FP8_SPEEDUP[0]
    return "below" if ratio < lo else "above" if ratio > hi else "in"


def table(rows: list[Row], pred: dict, terms: bool = False) -> str:
    """The markdown comparison table (and the step's terms with ``terms``)."""
    lines = ["| release | model | GPUs | TP·PP·CP·VP | published tok/s/GPU | predicted (BF16) | ratio | band "
             "| published MFU | predicted MFU | compute MFU | fits |",
             "|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        d = pred[r.name]
        ratio = d["tokens_per_gpu"] / r.tokens_per_gpu
        lines.append(f"| {r.release} | {r.model} | {r.gpus} | {r.tp}·{r.pp}·{r.cp}·{r.vp} | {r.tokens_per_gpu:.0f} "
                     f"| {d['tokens_per_gpu']:.0f} | {ratio:.3f} | {band(ratio)} | {100 * r.published_mfu:.1f} % "
                     f"| {100 * d['mfu']:.1f} % | {100 * d['compute_mfu']:.1f} % | {'yes' if d['fits'] else 'NO'} |")
    lines += ["", f"ratio = predicted / published; band: in [1/{FP8_SPEEDUP[1]}, 1/{FP8_SPEEDUP[0]}] = "
              f"[{1 / FP8_SPEEDUP[1]:.3f}, {1 / FP8_SPEEDUP[0]:.3f}] when the BF16 prediction agrees with NVIDIA's "
              "1.2–1.5× FP8 speedup over BF16."]
    if terms:
        lines += ["", "| run | " + " | ".join(TERMS) + " |", "|---|" + "---:|" * len(TERMS)]
        for r in rows:
            d = pred[r.name]
            lines.append(f"| {r.name} | " + " | ".join(f"{d[t]:.3f}" for t in TERMS) + " |")
        lines.append("")
        lines.append("seconds per step; tp_comm / cp_comm are the exposed collectives (overlap = 0 %).")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--terms", action="store_true", help="also print each step's terms")
    ap.add_argument("--overlap", default="0 %", help="share of TP/CP collectives hidden (default 0 %%)")
    args = ap.parse_args(argv)
    rows = read_rows()
    print(table(rows, predict(rows, args.overlap), args.terms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

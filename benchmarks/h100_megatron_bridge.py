"""The training step on H100 against NVIDIA's published Megatron training runs of Llama 3 / 3.1.

Run:  python benchmarks/h100_megatron_bridge.py              # both tables
      python benchmarks/h100_megatron_bridge.py --terms      # and each step's terms
      python benchmarks/h100_megatron_bridge.py --overlap "100 %"   # TP/CP collectives hidden

Two published sets (specs/data/calibration/, whose README cites pages, commits and columns):

``megatron-bridge-h100.csv`` — every DGX-H100 pre-training row of the dense Llama models in the
Megatron-Bridge "Performance Summary" and its archive (containers 25.09 – 26.06).  **All of
them are FP8** (the 25.09 section prints no precision; its rows have the 25.11 FP8-CS rows'
layouts and throughputs within 3 %).  The training step prices matrix products at BF16 only,
so the prediction is the same run in BF16, read against NVIDIA's statement in Megatron-Bridge
docs/performance-guide.md that FP8 "typically achiev[es] a speedup of 1.2–1.5X" over BF16:
a right BF16 prediction is 1/1.5 … 1/1.2 = 0.667 … 0.833 of the published FP8 throughput
(``band``).  A bound, not a like-for-like check.

``dgxc-benchmarking-llama31-h100.csv`` — NVIDIA DGX Cloud Benchmarking (github.com/NVIDIA/
dgxc-benchmarking, llama3.1/README_{8b,70b,405b}.md): Llama 3.1 8B / 70B / 405B pre-training on
H100 with NeMo 24.09 (Megatron-Core), **BF16 and FP8 on the same layouts**, step time per
scale.  The BF16 rows are the like-for-like check of the step; the FP8 rows measure the FP8
speedup on the same layout, 1.31–1.55× (the band above; the 405B's 1.53–1.55 lies just past it).

For each row the script builds a plan in the roofline mode on the catalog's ``h100_sxm`` on its
GEMM curve as measured (``sustained_efficiency = 100 %``: the catalog's fitted default is left out,
so that the comparison shows what the isolated-GEMM figure gives a training step) and prints predicted vs published tokens/s/GPU and MFU with their ratio.  ``--fit`` also fits the
device's ``matmul_efficiency`` (the ceiling of its matrix-product curve; every other field
kept) to the one BF16 run without tensor or pipeline parallelism — 8B on 8 GPUs, whose step is
compute, a context-parallel ring inside one host and an overlapped data-parallel reduction, so
the fit sees the device and not the layout, as the A100 validation fits its 1.7 B run — and
predicts every other BF16 run on that fitted device.

MFU columns: published = the page's model TFLOP/s/GPU (Megatron-Bridge) or the printed MFU
(DGX Cloud Benchmarking, whose FLOP count has no causal halving and whose FP8 MFU is over the
FP8 peak) — as printed; predicted = ``mfu_achieved`` (the exact matrix count with causal
attention over s(s+1)/2 pairs over 989.4 TFLOP/s).  Compare tokens/s first.

Assumptions, per row (each a reading of the recipes: Megatron-Bridge
src/megatron/bridge/perf_recipes/llama/h100/{llama3,llama31}.py and perf_recipes/_common.py at
commit 067f987df03b8355b03192d88d70f1709fedf51a; DGX Cloud Benchmarking llama3.1/configure.sh
at commit 143b90dd91f9be958fed4773ae95d941a3356a82 with NeMo-Framework-Launcher
launcher_scripts/conf/training/llama/llama3_1_70b.yaml; a past container's recipe may differ):

* hardware: ``h100_sxm`` (catalog), 8 GPUs per host on ``nvlink4``, between hosts the catalog's
  ``ib_ndr_400g`` with 8 NICs per host (DGX-H100: eight 400 Gb/s ConnectX-7 InfiniBand ports);
* model: Llama 3 8B / 70B and Llama 3.1 405B from their Hugging Face configs
  (specs/catalog/hf/Llama-3.1-{8B,70B,405B}.json; Llama 3 and 3.1 share the architecture at
  these sizes — the 3.1 configs differ in RoPE scaling only), vocabulary 128,256 — except the
  DGX Cloud 405B runs, which use the GPT-2 BPE tokenizer as a proxy (its README), 50,257 tokens
  padded to a multiple of 128·tp = 1,024: 51,200;
* the layout as printed (GBS, MBS, sequence length, TP, PP, CP, VP) — with pp > 1 the
  interleaved schedule with VP chunks per rank, layers split evenly over the pp·VP chunks (the
  26.xx 70B recipe's ``pipeline_model_parallel_layout`` puts 1–3 layers per chunk around the
  embedding and the head; not modelled);
* ``sequence_parallel = true`` when tp > 1 (every recipe with tp > 1 sets it);
* the distributed optimizer (ZeRO-1) for FSDP = 0 rows (Megatron-Bridge's distributed
  optimizer, NeMo's ``distributed_fused_adam``); Megatron-FSDP (the Megatron-Bridge 8B rows,
  FSDP = 8) as ZeRO-3; DP collectives overlap the backward (``prefetch = true``);
* activation recomputation: none (the 70B / 405B recipes and the NeMo launcher configs set
  none); the Megatron-Bridge 8B FP8 recipe recomputes 5 of 32 layers in full, which
  ``recompute`` (none / selective / full, all layers) cannot state: priced as none;
* TP and CP collectives exposed (``overlap = 0 %``): the recipes overlap TP with user-buffer
  GEMM overlap and CP's ring with attention, for which no measured hidden share is cited here;
  ``--terms`` shows the exposed terms, and ``--overlap`` prices them hidden;
* optimizer: Adam, BF16 weights and gradients, FP32 master weights and moments
  (16 B/param), ``usable = 80 GB``; no input wait.
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "specs" / "data" / "calibration"
MBRIDGE_CSV = DATA / "megatron-bridge-h100.csv"
DGXC_CSV = DATA / "dgxc-benchmarking-llama31-h100.csv"
# a plan file that is never written: the text is evaluated as if it lived beside the cases
PLAN_PATH = ROOT / "specs" / "cases" / "h100-megatron-bridge.plan"
FP8_SPEEDUP = (1.2, 1.5)               # Megatron-Bridge docs/performance-guide.md, FP8 vs BF16
HF = {"llama3_8b": "Llama-3.1-8B.json", "llama3_70b": "Llama-3.1-70B.json", "llama31_405b": "Llama-3.1-405B.json"}
GPT2_VOCAB_PADDED = 51200              # 50,257 GPT-2 BPE tokens padded to a multiple of 128·8
TERMS = ("compute_time", "bubble_time", "tp_comm", "cp_comm", "dp_comm", "optimizer_time", "step_time")
FIT_ROW = "dgxc_llama3_8b_bf16_8"      # the one BF16 run with tp = pp = 1


@dataclass(frozen=True)
class Row:
    """One published run, parsed where the plan needs it (``vp`` 1 for ``n/a``)."""
    source: str            # "mbridge" or "dgxc"
    release: str           # container
    model: str             # llama3_8b, llama3_70b, llama31_405b
    precision: str         # as printed ("" where the release prints none)
    gpus: int
    gbs: int
    mbs: int
    seq: int
    tp: int
    pp: int
    cp: int
    vp: int
    zero: int
    tokens_per_gpu: float  # published
    mfu_printed: str       # published MFU or model TFLOP/s/GPU, as printed
    vocab: int | None = None

    @property
    def name(self) -> str:
        """The plan's name, unique in the two sets."""
        if self.source == "dgxc":
            return f"dgxc_{self.model}_{self.precision.lower()}_{self.gpus}"
        return f"mbridge_{self.model}_{self.release.replace('.', '_')}"

    @property
    def layout(self) -> tuple:
        """What the plan of this run depends on (not its precision, release or results)."""
        return (self.model, self.vocab, self.gpus, self.gbs, self.mbs, self.seq, self.tp, self.pp, self.cp,
                self.vp, self.zero)

    @property
    def fp8(self) -> bool:
        """FP8 run (the 25.09 Megatron-Bridge rows, which print no precision, are FP8 too)."""
        return self.precision != "BF16"


def _model_key(printed: str) -> str:
    return {"LLAMA3_8B": "llama3_8b", "LLAMA3_70B": "llama3_70b", "LLAMA3.1_405B": "llama31_405b",
            "Llama 3.1 8b": "llama3_8b", "Llama 3.1 70b": "llama3_70b", "Llama 3.1 405b": "llama31_405b"}[printed]


def read_rows() -> list[Row]:
    """Both CSVs' rows: Megatron-Bridge first (its page order), then DGX Cloud Benchmarking."""
    rows = []
    with open(MBRIDGE_CSV, newline="", encoding="utf-8") as f:
        for d in csv.DictReader(f):
            rows.append(Row("mbridge", d["release"], _model_key(d["model"]), d["precision"], int(d["gpus"]),
                            int(d["gbs"]), int(d["mbs"]), int(d["seq_length"]), int(d["tp"]), int(d["pp"]),
                            int(d["cp"]), 1 if d["vp"] == "n/a" else int(d["vp"]),
                            3 if d["fsdp"] not in ("", "0") else 1,
                            float(d["tokens_per_sec_per_gpu"]), d["model_tflops_per_gpu"] + " TFLOP/s"))
    with open(DGXC_CSV, newline="", encoding="utf-8") as f:
        for d in csv.DictReader(f):
            model = _model_key(d["model"])
            rows.append(Row("dgxc", d["container"], model, d["precision"], int(d["gpus"]), int(d["gbs"]),
                            int(d["mbs"]), int(d["seq_length"]), int(d["tp"]), int(d["pp"]), int(d["cp"]),
                            1 if d["vp"] == "n/a" else int(d["vp"]), 1,
                            float(d["tokens_per_sec"]) / int(d["gpus"]), d["mfu_printed"],
                            GPT2_VOCAB_PADDED if model == "llama31_405b" else None))
    return rows


def plan_text(rows: list[Row], overlap: str = "0 %", matmul_efficiency: Fraction | None = None) -> str:
    """One `.plan` text with a workload and a plan per row (the assumptions of the docstring);
    with ``matmul_efficiency`` the plans run on ``h100_fit``, the catalog device with that
    ceiling of its matrix-product curve."""
    out = ['import "../catalog/hardware.plan"', ""]
    for m, f in HF.items():
        out.append(f'model {m} from "../catalog/hf/{f}"')
    out.append(f"model llama31_405b_gpt2 extends llama31_405b {{ vocab = {GPT2_VOCAB_PADDED} }}")
    # the catalog H100 on its GEMM curve as measured: this analysis asks what that curve gives a
    # training step (the catalog's sustained_efficiency is the default fitted on the validation
    # corpus's fit set, benchmarks/fit_defaults.py, which this comparison is not part of)
    out.append("device h100_gemm extends h100_sxm { sustained_efficiency = 100 % }")
    device = "h100_gemm"
    if matmul_efficiency is not None:
        device = "h100_fit"
        pct = matmul_efficiency * 100            # a multiple of 0.01 %: printed exactly
        out.append(f"device h100_fit extends h100_gemm {{ matmul_efficiency = {float(pct):.2f} % }}")
    out.append("")
    for r in rows:
        model = r.model + ("_gpt2" if r.vocab else "")
        schedule = '; schedule = "interleaved"' if r.vp > 1 else ""
        sp = "true" if r.tp > 1 else "false"
        out += [f"workload w_{r.name} {{ tokens = 1e12 token; seq_len = {r.seq} token; global_batch = {r.gbs} seq }}",
                f"plan {r.name} {{",
                f"  model = {model}; workload = w_{r.name}; device = {device}",
                f"  gpus = {r.gpus}; gpus_per_host = 8; micro_batch = {r.mbs} seq",
                '  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; '
                'usable = 80 GB }',
                f"  use layout {{ tp = {r.tp}; pp = {r.pp}; cp = {r.cp}; virtual = {r.vp}{schedule}; zero = {r.zero}",
                f"    sequence_parallel = {sp}; recompute = \"none\"; efficiency = \"roofline\"; overlap = {overlap}",
                "    link = nvlink4; nic = ib_ndr_400g; nics_per_host = 8 }",
                "}", ""]
    return "\n".join(out)


def predict(rows: list[Row], overlap: str = "0 %", matmul_efficiency: Fraction | None = None) -> dict:
    """Each row's predicted tokens/s/GPU, MFU (fractions), memory fit, memory (GiB) and step
    terms (s), by plan name."""
    import dsl
    # one plan per distinct layout: runs that differ only in precision or release share it
    first = {}
    for r in rows:
        first.setdefault(r.layout, r)
    res = dsl.load(PLAN_PATH, text=plan_text(list(first.values()), overlap, matmul_efficiency))
    out = {}
    for r in rows:
        p = res[first[r.layout].name]
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


def fit_matmul_efficiency(rows: list[Row], overlap: str = "0 %", tol: float = 1e-4) -> Fraction:
    """The ``matmul_efficiency`` at which the plan of ``FIT_ROW`` predicts its published
    throughput: the secant method on the relative residual (a few plan evaluations), returned
    rounded to 0.01 %."""
    row = next(r for r in rows if r.name == FIT_ROW)

    def resid(eta: Fraction) -> float:
        return predict([row], overlap, eta)[row.name]["tokens_per_gpu"] / row.tokens_per_gpu - 1

    a, b = Fraction(812, 1000), Fraction(6, 10)
    fa, fb = resid(a), resid(b)
    for _ in range(20):
        if abs(fb) < tol or fb == fa:
            break
        c = b - Fraction(fb) * (b - a) / Fraction(fb - fa)
        c = Fraction(round(c * 10000), 10000)
        a, fa, b, fb = b, fb, c, resid(c)
    return b


def band(ratio: float) -> str:
    """Where predicted(BF16) / published(FP8) falls against NVIDIA's 1.2–1.5× FP8 speedup."""
    lo, hi = 1 / FP8_SPEEDUP[1], 1 / FP8_SPEEDUP[0]
    return "below" if ratio < lo else "above" if ratio > hi else "in"


def table(rows: list[Row], pred: dict, fitted: dict | None = None, terms: bool = False) -> str:
    """The markdown comparison table (predicted on the catalog device, and on the fitted one
    when given; the step's terms with ``terms``)."""
    head = ("| set | container | model | precision | GPUs | TP·PP·CP·VP | published tok/s/GPU | predicted (BF16) "
            "| ratio | reading | published MFU | predicted MFU |")
    lines = [head + (" fitted device | ratio |" if fitted else ""),
             "|---|---|---|---|---:|---|---:|---:|---:|---|---:|---:|" + ("---:|---:|" if fitted else "")]
    for r in rows:
        d = pred[r.name]
        ratio = d["tokens_per_gpu"] / r.tokens_per_gpu
        reading = f"FP8 band: {band(ratio)}" if r.fp8 else "BF16 vs BF16"
        line = (f"| {r.source} | {r.release} | {r.model} | {r.precision or '(none printed)'} | {r.gpus} "
                f"| {r.tp}·{r.pp}·{r.cp}·{r.vp} | {r.tokens_per_gpu:.0f} | {d['tokens_per_gpu']:.0f} | {ratio:.3f} "
                f"| {reading} | {r.mfu_printed} | {100 * d['mfu']:.1f} % |")
        if fitted:
            f = fitted.get(r.name)
            line += (f" {f['tokens_per_gpu']:.0f} | {f['tokens_per_gpu'] / r.tokens_per_gpu:.3f} |" if f else " | |")
        lines.append(line)
    lines += ["", f"ratio = predicted / published.  FP8 rows: in the band [1/{FP8_SPEEDUP[1]}, 1/{FP8_SPEEDUP[0]}] = "
              f"[{1 / FP8_SPEEDUP[1]:.3f}, {1 / FP8_SPEEDUP[0]:.3f}] when the BF16 prediction agrees with NVIDIA's "
              "1.2–1.5× FP8 speedup over BF16.  BF16 rows: 1 is exact."]
    if terms:
        lines += ["", "| run | " + " | ".join(TERMS) + " |", "|---|" + "---:|" * len(TERMS)]
        for r in rows:
            d = pred[r.name]
            lines.append(f"| {r.name} | " + " | ".join(f"{d[t]:.3f}" for t in TERMS) + " |")
        lines += ["", "seconds per step on the catalog device; tp_comm / cp_comm are the exposed collectives."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--terms", action="store_true", help="also print each step's terms")
    ap.add_argument("--overlap", default="0 %", help="share of TP/CP collectives hidden (default 0 %%)")
    ap.add_argument("--fit", action="store_true",
                    help=f"fit matmul_efficiency to {FIT_ROW} and predict the other BF16 runs with it")
    args = ap.parse_args(argv)
    rows = read_rows()
    pred = predict(rows, args.overlap)
    fitted = None
    if args.fit:
        eta = fit_matmul_efficiency(rows, args.overlap)
        bf16 = [r for r in rows if not r.fp8]
        fitted = predict(bf16, args.overlap, eta)
        print(f"matmul_efficiency fitted to {FIT_ROW}: {float(eta) * 100:.2f} % (catalog h100_sxm: 81.2 %)\n")
    print(table(rows, pred, fitted, args.terms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

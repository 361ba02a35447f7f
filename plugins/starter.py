"""`plan init`: a commented starter plan for a model, a device and a GPU count.

``plan init --model config.json --device h100_sxm --gpus 64 [--serve] [-o PLAN]`` writes a
training plan (a workload, memory formats, ZeRO-3 data parallelism, a named solve for the
efficiency the deadline needs and a gate on it) or, with ``--serve``, a decode-bound serving
plan; the file is evaluated before the command returns, so a starter that does not evaluate is
never left behind (a misspelt device is reported at its line, with the catalog name it
probably means).  The numbers in it are placeholders to edit, each commented.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

INIT_HELP = "write a commented starter plan for a model, a device and a GPU count"
INIT_DESCRIPTION = ("Write a starter .plan file: the model (a Hugging Face config.json, or a catalog model name "
                    "such as qwen3_8b), a catalog device and a GPU count; a training plan with a workload, "
                    "memory formats, ZeRO-3 and a named solve for the efficiency the deadline needs, or with "
                    "--serve a serving plan. The file is evaluated before the command returns.")

# the GPU-to-GPU link inside a host for the catalog's devices (others: PCIe 4.0, to edit)
_LINKS = {"h100_sxm": "nvlink4", "h200": "nvlink4", "b200": "nvlink4", "h800": "nvlink4",
          "rtx_pro_6000_bw": "pcie5_x16", "rtx4090": "pcie4_x16"}


def add_arguments(p) -> None:
    """The arguments of ``plan init``."""
    p.add_argument("--model", required=True, metavar="CONFIG|NAME",
                   help="a Hugging Face config.json (read relative to the new file) or a catalog model (qwen3_8b)")
    p.add_argument("--device", required=True, metavar="NAME", help="a catalog device, e.g. h100_sxm, rtx4090")
    p.add_argument("--gpus", required=True, type=int, metavar="N", help="GPUs (training) or cards (--serve)")
    p.add_argument("--serve", action="store_true", help="a serving plan (decode bound) instead of training")
    p.add_argument("-o", "--out", default="plan.plan", metavar="PLAN", help="file to write (default plan.plan)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")


def _model_lines(model: str, out: Path) -> tuple[list[str], str]:
    if model.endswith(".json"):
        cfg = Path(model)
        rel = os.path.relpath(cfg.resolve(), out.resolve().parent) if cfg.exists() else model
        return [f'# the model, from its Hugging Face config (path relative to this file)',
                f'model my_model from "{Path(rel).as_posix()}"', ""], "my_model"
    return [], model


def starter_text(model: str, device: str, gpus: int, serve: bool, out: Path) -> str:
    """The text of the starter plan (see the module docstring)."""
    mlines, mname = _model_lines(model, out)
    head = ["# Starter plan written by `plan init`: edit the numbers marked below, then",
            f"#   plan eval {out.name}        (every quantity, requirement and named solve)",
            f"#   plan check {out.name} --strict   (the CI gate)",
            'import "@catalog/hardware.plan"  # devices, links, storage tiers',
            'import "@catalog/models.plan"  # catalog models', ""] + mlines
    if serve:
        body = [
            "plan serve {",
            f"  model = {mname}; device = {device}",
            f"  cards = {gpus}  # cards serving the model",
            "  # decode is memory-bound: the weights and each sequence's KV cache are read per step",
            "  use decode_bound { batch = 64 seq; context = 4096 token }  # running batch, context per sequence",
            "}",
            "",
            "# the cards a demand of 20,000 generated tokens/s needs (edit the demand)",
            "solve cards_needed: serve.cards for serve.decode_capacity >= 20000 token/s",
        ]
        return "\n".join(head + body) + "\n"
    per_host = min(8, gpus)
    batch = max(1, math.ceil(512 / gpus)) * gpus          # a multiple of the GPU count near 512
    link = _LINKS.get(device, "pcie4_x16")
    body = [
        "workload train {",
        "  tokens = 100e9 token  # tokens to train on",
        "  seq_len = 4096 token",
        f"  global_batch = {batch} seq  # sequences per optimizer step (a multiple of the GPU count)",
        "  deadline = 30 day",
        "}",
        "",
        "plan start {",
        f"  model = {mname}; workload = train; device = {device}",
        f"  gpus = {gpus}; gpus_per_host = {per_host}",
        "  mfu = 40 % in [30 %, 50 %]  # single-GPU efficiency: measure yours",
        "  micro_batch = 1 seq",
        "  use memory {",
        '    weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"',
        "    usable = 0.9 * device.memory  # leave room for the framework and fragmentation",
        "  }",
        "  use layout {",
        "    zero = 3  # ZeRO-3 data parallelism over every GPU",
        f"    link = {link}  # the GPU-to-GPU link inside a host",
        f"    nic = nic_400g; nics_per_host = {per_host}  # one 400 Gbit/s NIC per GPU",
        "  }",
        "}",
        "",
        "# the efficiency at which the deadline is met exactly, and a CI gate on it",
        "solve mfu_needed: start.mfu for start.finish_time == train.deadline",
        "require mfu_reachable: mfu_needed <= 50 %",
    ]
    return "\n".join(head + body) + "\n"


def run_command(args, cli) -> int:
    """``plan init``: write the starter, then load it (a load error removes it again)."""
    import sys

    out = Path(args.out)
    if args.gpus < 1:
        raise cli.UsageError("usage", f"--gpus must be at least 1, got {args.gpus}", "e.g. --gpus 64")
    if out.exists() and not args.force:
        raise cli.UsageError("output", f"'{out}' exists", "pass --force to overwrite it, or -o another file")
    text = starter_text(args.model, args.device, args.gpus, args.serve, out)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as e:
        raise cli.UsageError("output", f"cannot write '{out}': {e.strerror or e}",
                             "check that the directory exists and is writable") from None
    try:
        cli.load(str(out))
    except Exception:
        out.unlink(missing_ok=True)     # never leave a starter that does not evaluate
        raise
    print(f"wrote {out} ({'serving' if args.serve else 'training'} plan for {args.gpus} × {args.device}); "
          f"next: plan eval {out}", file=sys.stderr)
    return cli.EXIT_OK

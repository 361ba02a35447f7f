"""`plan init`: a commented starter plan for a model, a device and a GPU count.

``plan init --model config.json --device h100_sxm --gpus 64 [--serve] [-o PLAN]`` writes a
training plan (a workload, memory formats, ZeRO-3 data parallelism, a named solve for the
efficiency the deadline needs and a gate on it) or, with ``--serve``, a serving plan on the
engine model: ``use engine`` (a vLLM preset, at the smallest tensor-parallel degree at which the
KV cache holds the step model's decode batch — 64 sequences of 2,048 cached tokens — and one
request of max_model_len, found by evaluating each candidate), ``use serving_step`` and ``use
batching`` on Poisson arrivals, with TTFT/TPOT p95 targets as requirements and the replicas they
need as a named solve; the file is evaluated before the command returns, so a starter that does not evaluate is
never left behind.  An unknown model or device, or (``--serve``) weights larger than the GPUs'
memory, is refused before anything is written, with the catalog's names or the GPU count needed.  The numbers in it are placeholders to edit, each commented.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

INIT_HELP = "write a commented starter plan for a model, a device and a GPU count"
INIT_DESCRIPTION = ("Write a starter .plan file: the model (a Hugging Face config.json, or a catalog model name "
                    "such as qwen3_8b), a catalog device and a GPU count; a training plan with a workload, "
                    "memory formats, ZeRO-3 and a named solve for the efficiency the deadline needs, or with "
                    "--serve a serving plan (vLLM engine, step time, continuous batching of Poisson arrivals, TTFT/TPOT "
                    "targets). The file is evaluated before the command returns.")

# the GPU-to-GPU link inside a host for the catalog's devices (others: PCIe 4.0, to edit)
# the decode batch the starter's `use serving_step` prices, and the context each sequence holds:
# the tensor-parallel degree is the smallest at which the KV cache holds this batch
_BATCH, _CONTEXT = 64, 2048
# the starter's SLO at the 95th percentile: (quantity, limit, unit), written as its requirements
_TARGETS = (("ttft_p95", 2, "s"), ("tpot_p95", 50, "ms"))

_LINKS = {"h100_sxm": "nvlink4", "h200": "nvlink4", "b200": "nvlink4", "h800": "nvlink4",
          "rtx_pro_6000_bw": "pcie5_x16", "rtx4090": "pcie4_x16"}


def add_arguments(p) -> None:
    """The arguments of ``plan init``."""
    p.add_argument("--model", required=True, metavar="CONFIG|NAME",
                   help="a Hugging Face config.json (read relative to the new file; one outside its directory is copied next to it) or a catalog model (qwen3_8b)")
    p.add_argument("--device", required=True, metavar="NAME", help="a catalog device, e.g. h100_sxm, rtx4090")
    p.add_argument("--gpus", required=True, type=int, metavar="N", help="GPUs (training, or serving: tp × replicas)")
    p.add_argument("--serve", action="store_true", help="a serving plan (engine, step time, continuous batching, TTFT/TPOT targets) instead of training")
    p.add_argument("-o", "--out", default="plan.plan", metavar="PLAN", help="file to write (default plan.plan)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")


def _model_lines(model: str, out: Path) -> tuple[list[str], str]:
    if model.endswith(".json"):
        cfg = Path(model)
        rel = os.path.relpath(cfg.resolve(), out.resolve().parent) if cfg.exists() else model
        return [f'# the model, from its Hugging Face config (path relative to this file)',
                f'model my_model from "{Path(rel).as_posix()}"', ""], "my_model"
    return [], model


def _serve_body(mname: str, device: str, gpus: int, tp: int, holds: bool = True) -> list[str]:
    """The serving plan: `use engine` (the KV cache on the engine's terms), `use serving_step`
    (one step's time) and `use batching` (continuous batching of Poisson arrivals), with the
    SLO as requirements and the replicas it needs as a named solve."""
    replicas = max(1, gpus // tp)
    link = _LINKS.get(device, "pcie4_x16")
    if tp > 1:
        why = ([f"    # tp GPUs hold one copy of the weights, sharded ({tp} is the smallest tp at which the",
                f"    # KV cache holds {_BATCH} sequences of {_CONTEXT:,} tokens, the step's batch);"] if holds else
               [f"    # tp GPUs hold one copy of the weights, sharded; at no tp up to {tp} does the KV cache hold",
                f"    # {_BATCH} sequences of {_CONTEXT:,} tokens (the step's batch): more GPUs, FP8 weights",
                '    # (weights = "fp8") or a smaller batch;'])
        tp_line = [*why,
                   "    # replicas copies serve the traffic",
                   f"    tp = {tp}; replicas = {replicas}  # {tp * replicas} GPUs"
                   + (f" (of {gpus}: tp × replicas)" if tp * replicas != gpus else ""),
                   f"    link = {link}  # the GPUs' link inside the host (the tensor-parallel all-reduces)"]
    else:
        tp_line = ([] if holds else
                   [f"    # the KV cache does not hold {_BATCH} sequences of {_CONTEXT:,} tokens (the step's batch)",
                    '    # on one GPU: more GPUs (--gpus), FP8 weights (weights = "fp8") or a smaller batch'])
        tp_line += ["    # one copy of the model per GPU; a model too large for one GPU needs tp > 1 (dividing its",
                   f"    # heads) and the link of those GPUs: `tp = 2; link = {link}`",
                   f"    tp = 1; replicas = {replicas}  # {replicas} GPUs"]
    rate = 2 * replicas          # 2 request/s per copy of the model: a placeholder demand
    ttft, tpot = _TARGETS
    return [
        "plan serve {",
        f"  model = {mname}; device = {device}",
        "  # the KV cache the engine leaves after the weights, activations and runtime buffers",
        "  use engine {",
        "    engine = vllm  # a preset of specs/catalog/engines.plan (sglang, trtllm, or your own)",
        *tp_line,
        "    max_model_len = 8192 token  # longest request (prompt + output) the engine accepts",
        "  }",
        "  # one step's time from the device's roofline: a prefill alone, a decode of `batch` sequences",
        f"  use serving_step {{ batch = {_BATCH} seq; context = {_CONTEXT} token; prefill = 2048 token }}",
        "  # continuous batching of the traffic: TTFT / TPOT / ITL / end-to-end percentiles",
        "  use batching {",
        f"    arrivals = \"poisson\"; rate = {rate} request/s; requests = 1000; seed = 0  # the demand: edit it",
        "    input = 2048 token; output = 256 token  # tokens in and out per request",
        "    # or a CSV trace (arrived_at, num_prefill_tokens, num_decode_tokens): trace = \"requests.csv\"",
        f"    slo_ttft = {ttft[1]:g} {ttft[2]}; slo_tpot = {tpot[1]:g} {tpot[2]}  # the latency targets goodput counts",
        "  }",
        "}",
        "",
        "# the service-level objective at the 95th percentile (the CI gate: plan check --strict)",
        *(f"require {q.split('_')[0]}_target: serve.{q} <= {limit:g} {unit}" for q, limit, unit in _TARGETS),
        "# the fewest replicas meeting the first-token target (GPUs = tp × replicas)",
        f"solve replicas_needed: serve.engine.replicas for serve.{ttft[0]} <= {ttft[1]:g} {ttft[2]}",
    ]


def starter_text(model: str, device: str, gpus: int, serve: bool, out: Path, tp: int = 1,
                 recompute: str = "none", holds: bool = True) -> str:
    """The text of the starter plan (see the module docstring); ``recompute`` is the training
    layout's activation recomputation (none, selective, full); ``holds`` whether the serving
    starter's KV cache holds the step's batch at ``tp`` (the comment says so, or what to change)."""
    mlines, mname = _model_lines(model, out)
    head = ["# Starter plan written by `plan init`: edit the numbers marked below, then",
            f"#   plan eval {out.name}        (every quantity, requirement and named solve)",
            f"#   plan check {out.name} --strict   (the CI gate)",
            'import "@catalog/hardware.plan"  # devices, links, storage tiers',
            'import "@catalog/models.plan"  # catalog models']
    if serve:
        head.append('import "@catalog/engines.plan"  # serving-engine presets: vllm, sglang, trtllm')
    head += [""] + mlines
    if serve:
        return "\n".join(head + _serve_body(mname, device, gpus, tp, holds)) + "\n"
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
        (f'    recompute = "{recompute}"  # the least recomputation at which the activations fit'
         if recompute != "none" else
         '    # recompute = "selective"  # or "full": recompute activations when they do not fit'),
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


def _write(out: Path, text: str, cli) -> None:
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as e:
        raise cli.cannot_write(out, e) from None


def _fitting_tp(args, out: Path, cli) -> tuple[int, bool]:
    """The smallest tensor-parallel degree (1, 2, 4, … up to --gpus) at which the
    model's weights leave the engine a KV cache of at least the step model's decode batch
    (``_BATCH`` sequences of ``_CONTEXT`` tokens) and one max_model_len request — a cache that
    barely holds one request would queue almost every request of the starter's traffic: each
    candidate's engine block alone is written to ``out`` and evaluated (quietly).  Returns
    (tp, True); when none holds the batch, (the largest, False): the starter's comment and a
    warning say so, and a model that does not fit at all is reported by the final evaluation,
    with what would fit."""
    import contextlib
    import io

    cands = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= args.gpus]
    for tp in cands:
        lines = starter_text(args.model, args.device, args.gpus, True, out, tp).splitlines()
        engine_end = lines.index("  }")                 # the engine block's closing brace
        _write(out, "\n".join(lines[:engine_end + 1] + ["}"]) + "\n", cli)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                ev = cli.load(str(out), strict=True)
            need = max(ev.get("serve.max_model_len", "token"), _BATCH * _CONTEXT)
            if ev.get("serve.kv_tokens", "token") >= need:
                return tp, True
        except Exception:       # noqa: BLE001 - does not fit at this tp (or another error the final load reports)
            pass
        finally:
            out.unlink(missing_ok=True)
    return cands[-1], False


def _fitting_recompute(args, out: Path, cli) -> str:
    """The least activation recomputation (none, selective, full) at which the training starter
    fits in memory: each candidate is written to ``out`` and evaluated (quietly).  When none
    fits, "none": the final evaluation then shows the memory requirement failing, with its
    margin, for the user to change the layout."""
    import contextlib
    import io

    for rc in ("none", "selective", "full"):
        _write(out, starter_text(args.model, args.device, args.gpus, False, out, 1, rc), cli)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                ev = cli.load(str(out), strict=True)
            r = ev.requirement("start", "fits_memory")
            if r is None or r["ok"]:
                return rc
        except Exception:       # noqa: BLE001 - the final load reports any error
            return "none"
        finally:
            out.unlink(missing_ok=True)
    return "none"


def _copy_config(args, out: Path, cli):
    """A config outside the new file's directory tree is copied next to it (imports outside a
    plan's project root are refused, see docs/security.md), so the starter evaluates where it is
    written and can be committed with its config.  Returns the copy's path, or None."""
    import shutil

    args.model_given = args.model
    if not args.model.endswith(".json"):
        return None
    cfg = Path(args.model)
    if not cfg.is_file():
        return None
    root = out.resolve().parent
    src = cfg.resolve()
    if src.is_relative_to(root):
        return None
    dst = root / cfg.name
    if dst.exists():
        if dst.read_bytes() != src.read_bytes():
            raise cli.UsageError("output", f"'{dst}' exists and differs from '{cfg}'",
                                 f"copy the config under {root} yourself and pass that path to --model")
        args.model = str(dst)
        return None
    shutil.copyfile(src, dst)
    args.model = str(dst)
    return dst


def _names_hint(what: str, names, given: str) -> str:
    """``did you mean 'x'? catalog WHAT: a, b, …`` for a hint."""
    from dsl.plugin import did_you_mean
    close = did_you_mean(given, names)
    return (f"did you mean '{close}'? " if close else "") + f"catalog {what}: " + ", ".join(names)


def _check_arguments(args, out: Path, cli) -> None:
    """Refuse, before any file is written, what no starter can be built from: a model that is
    neither a config.json that exists nor a catalog model, a device not in the catalog (each
    with the catalog's names), and for ``--serve`` a model whose weights alone (bf16, the
    engine's default format: 2 B a parameter) exceed the memory of all ``--gpus`` devices.
    The catalog is read by evaluating a two-import file at ``out`` (removed again); a config
    that does not load is left to the starter's own evaluation, which reports it at its key.

    :raises UsageError: exit 2, naming the argument and the catalog's choices."""
    import contextlib
    import io

    if args.model.endswith(".json") and not Path(args.model).is_file():
        raise cli.UsageError("missing-file", f"--model {args.model}: no such config file",
                             "give the path of a Hugging Face config.json, or a catalog model name such as qwen3_8b")
    mlines, mname = _model_lines(args.model, out)
    _write(out, 'import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n\n' + "\n".join(mlines) + "\n",
           cli)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ev = cli.load(str(out), strict=True)
    except Exception:           # noqa: BLE001 - a bad config: the starter's evaluation reports it
        return
    finally:
        out.unlink(missing_ok=True)
    kinds = {}
    for name, d in ev.decls.items():
        kinds.setdefault(d.kind, []).append(name)
    models, devices = sorted(kinds.get("model", [])), sorted(kinds.get("device", []))
    if mname not in models:
        raise cli.UsageError("unknown-name", f"--model {args.model}: not a catalog model (nor a config.json)",
                             _names_hint("models", models, args.model) + "; or the path of a Hugging Face "
                             "config.json")
    if args.device not in devices:
        raise cli.UsageError("unknown-name", f"--device {args.device}: not a catalog device",
                             _names_hint("devices", devices, args.device))
    if args.serve:
        weights = 2 * ev.get(f"{mname}.params", "param")                 # bytes, bf16
        memory = ev.get(f"{args.device}.memory", "B")
        if weights > args.gpus * memory:
            need = math.ceil(weights / memory)
            raise cli.UsageError(
                "does-not-fit", f"model '{mname}' has {weights / 2 / 1e9:,.0f} B parameters, {weights / 2**30:,.0f} GiB "
                f"of bf16 weights: more than the {args.gpus * memory / 2**30:,.0f} GiB of {args.gpus} × {args.device}",
                f"the weights alone need at least {need} × {args.device}: pass --gpus {need} or more, a device with "
                "more memory, or a smaller model")


def run_command(args, cli) -> int:
    """``plan init``: check the arguments, write the starter, then load it (a load error, one
    confined to the model's config included, removes it again and is printed)."""
    import sys

    out = Path(args.out)
    if args.gpus < 1:
        raise cli.UsageError("usage", f"--gpus must be at least 1, got {args.gpus}", "e.g. --gpus 64")
    if out.exists() and not args.force:
        raise cli.UsageError("output", f"'{out}' exists", "pass --force to overwrite it, or -o another file")
    copied = _copy_config(args, out, cli)
    try:
        _check_arguments(args, out, cli)
        tp, holds = _fitting_tp(args, out, cli) if args.serve else (1, True)
        recompute = "none" if args.serve else _fitting_recompute(args, out, cli)
        text = starter_text(args.model, args.device, args.gpus, args.serve, out, tp, recompute, holds)
        _write(out, text, cli)
        try:
            ws = cli.load(str(out), strict=True)   # an error confined to the model's config fails it too
        except Exception as e:
            out.unlink(missing_ok=True)     # never leave a starter that does not evaluate
            n = sum(d.severity == "error" for d in getattr(e, "diagnostics", ()))
            print(f"plan: the starter {out} does not evaluate and was not kept; "
                  f"{'its errors follow' if n > 1 else 'its error follows'}", file=sys.stderr)
            raise
    except BaseException:
        if copied is not None:
            copied.unlink(missing_ok=True)
        raise
    if copied is not None:
        print(f"copied {args.model_given} to {copied} (a plan reads configs inside its own directory tree)",
              file=sys.stderr)
    print(f"wrote {out} ({'serving' if args.serve else 'training'} plan for {args.gpus} × {args.device}); "
          f"next: plan eval {out}", file=sys.stderr)
    if args.serve:
        _warn_serving(ws, out, holds, sys.stderr)
    return cli.EXIT_OK


def _warn_serving(ws, out: Path, holds: bool, err) -> None:
    """Warnings after a serving starter is written: the KV cache does not hold the step's batch,
    or the placeholder demand (2 request/s per replica) misses the starter's own SLO targets
    (``_TARGETS``) on this device — the numbers to edit are the rate, the replicas or the device."""
    if not holds:
        kv = ws.get("serve.kv_tokens", "token")
        print(f"plan: warning: the KV cache holds {kv:,.0f} tokens, {kv / _CONTEXT:.3g} sequences of {_CONTEXT:,}: "
              f"fewer than the step's batch of {_BATCH} (see the comment in {out})", file=err)
    failed = [f"serve.{q} <= {limit:g} {unit} fails at {ws.get('serve.' + q, unit):.4g} {unit}"
              for q, limit, unit in _TARGETS if ws.get("serve." + q, unit) > limit]
    if failed:
        print(f"plan: warning: the placeholder demand misses the starter's SLO on this device: {', '.join(failed)}; "
              f"lower the `rate` of `use batching`, or `plan solve {out} replicas_needed` for the replicas it needs",
              file=err)

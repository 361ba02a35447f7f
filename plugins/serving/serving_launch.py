"""``plan launch FILE [--plan NAME] --engine vllm|sglang``: the serving deployment a plan states,
written as the engine's own command lines, so that a plan goes to a run without retyping.

The deployment is read from the evaluated plan, never recomputed:

* ``use serving_search`` — the chosen configuration: ``search_tp``, ``search_pp``,
  ``search_replicas`` (aggregated) or ``search_prefill_replicas`` / ``search_decode_replicas``
  (disaggregated), ``search_max_num_seqs``, ``search_max_num_batched_tokens``; the block's
  ``max_model_len``, ``kv`` and ``weights``; the engine preset's ``gpu_memory_utilization`` (at the
  chosen tp, where the preset lowers it at larger tp), ``block_size`` and ``enable_chunked_prefill``; the
  device of the chosen row (a comment);
* ``use engine`` — ``serving_tp``, ``serving_pp``, ``max_num_seqs``, ``max_num_batched_tokens``,
  ``max_model_len``, ``block_size``, ``gpu_memory_utilization`` (quantities), the block's ``replicas``,
  ``kv``, ``weights``, and ``enable_chunked_prefill`` as the block writes it or the preset gives it;
* speculative decoding and prefix caching, where the plan prices them: the search's choice of
  drafted tokens (``search_spec_tokens``, with the block's ``speculative``), or the
  ``speculative`` / ``spec_tokens`` of the ``use batching`` that schedules a ``use engine``
  deployment; ``enable_prefix_caching`` where the block writes it (either value).

Each flag below was checked against the engine's own argument parser or documentation:

* vLLM (``vllm serve MODEL``, the model positional as in docs/features/nixl_connector_usage.md):
  ``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--gpu-memory-utilization``,
  ``--block-size``, ``--max-num-seqs``, ``--max-num-batched-tokens``,
  ``--enable-chunked-prefill``, ``--kv-cache-dtype`` and ``--kv-transfer-config`` in
  ``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args`` (vllm-project/vllm main branch);
  ``--max-model-len`` and the ``--kv-cache-dtype`` choice ``fp8`` in docs.vllm.ai "Engine
  Arguments" (v0.8.1, v0.8.5); the ``--kv-transfer-config`` JSON (``kv_connector``,
  ``kv_role`` ``kv_producer`` | ``kv_consumer``) in docs/features/nixl_connector_usage.md
  ("Multiple Prefiller Instances", "Multiple Decoder Instances"); ``--speculative-config`` with
  ``{"method": "draft_model", "model": …, "num_speculative_tokens": k}`` (a separate draft:
  docs/features/speculative_decoding/draft_model.md) or ``{"method": "mtp",
  "num_speculative_tokens": k}`` (the target's own MTP heads: …/mtp.md);
  ``--enable-prefix-caching`` / ``--no-enable-prefix-caching`` (a boolean flag of
  ``EngineArgs``).
* SGLang (``python -m sglang.launch_server``): ``--model-path``, ``--context-length``,
  ``--mem-fraction-static``, ``--max-running-requests``, ``--chunked-prefill-size`` (``-1``
  turns chunking off), ``--max-prefill-tokens``, ``--page-size``, ``--tp-size``, ``--pp-size``
  and ``--kv-cache-dtype`` (choice ``fp8_e4m3``) in docs/advanced_features/server_arguments.md
  (sgl-project/sglang main branch); ``--disaggregation-mode prefill|decode`` and the router's
  ``--pd-disaggregation`` in docs/advanced_features/pd_disaggregation.md (the same flags in
  SGLang 0.5.9's ``launch_server --help``); ``--speculative-algorithm STANDALONE`` with
  ``--speculative-draft-model-path`` (a separate draft) or ``EAGLE`` without it (a model's MTP
  heads), ``--speculative-num-steps k``, ``--speculative-eagle-topk 1`` and
  ``--speculative-num-draft-tokens k + 1`` (one chain of k drafted tokens, as the plan prices it)
  in docs/advanced_features/speculative_decoding.md; ``--disable-radix-cache`` (prefix caching
  off; on by default) and ``--enable-mixed-chunk`` (prefill chunks in the decodes' iterations, as a
  plan with ``mixed_batches = true`` prices it; off by default) in server_args.py.

Replicas: each replica the plan prices is an independent engine (its own KV cache, its own
scheduler), so a role prints one command line to run once per replica, each on its own
GPUs and port, behind a load balancer (aggregated) or the engine's prefill/decode proxy
(disaggregated).  The engines' data-parallel flags are not used: vLLM's
``--data-parallel-size`` couples the expert layers of a mixture of experts across ranks
(docs/serving/data_parallel_deployment.md), a deployment the plan does not price.

Not written, because no plan determines them: speculative decoding and prefix caching where the
plan does not price them, ports, hosts, the KV connector's transport (vLLM needs one named:
``NixlConnector``, the connector its multi-instance guide documents; SGLang's default transfer
backend is kept), the weights' quantization (the checkpoint named as MODEL carries it). MODEL
itself is the one value the user supplies (``--model``): the catalog's model declarations name
no Hugging Face repository, and a config's ``_name_or_path`` may name another model (a
fine-tune's base), so a missing id is a marked placeholder and a warning, never a guess; so is a
separate draft model's (``--draft-model``).
"""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass

import sympy as sp

from dsl.plugin import CommandSpec, Diagnostic, PlanError, hookimpl

from plugins.serving.serving_engine import fraction_at

ENGINES = ("vllm", "sglang")
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
PLACEHOLDER = "<hf-model-id>"
DRAFT_PLACEHOLDER = "<hf-draft-model-id>"
BLOCKS = ("serving_search", "engine")          # the blocks that state a deployment, in order of preference
VLLM_CONNECTOR = "NixlConnector"
KV_DTYPE = {"vllm": {"fp8": "fp8"}, "sglang": {"fp8": "fp8_e4m3"}}
SAME_AS_MODEL = ("bf16", "fp16")                # the engines' "auto" KV dtype for a 16-bit checkpoint

LAUNCH_HELP = "print the vLLM or SGLang command lines of a plan's serving deployment"
LAUNCH_DESCRIPTION = (
    "Write the serving deployment of a plan — the chosen configuration of `use serving_search`, or the "
    "deployment `use engine` states — as the engine's own command lines: tensor and pipeline parallelism, "
    "memory fraction, KV block size, max sequences, the step's token budget (chunked prefill), context "
    "length and KV format, speculative decoding and prefix caching where the plan prices them, one command "
    "per role (aggregated, or prefill and decode) to run once per replica.  Every value comes from the "
    "evaluated plan; settings no plan determines (ports, hosts) are left to the engine's defaults.  "
    "Serving only: training launches are not written.  See docs/plugins/launch.md.")


class Refused(Exception):
    """Nothing to launch: ``diagnostic`` says why; ``code`` is the exit status."""

    def __init__(self, diagnostic: Diagnostic, code: int):
        super().__init__(diagnostic.summary)
        self.diagnostic, self.code = diagnostic, code


@dataclass(frozen=True)
class Deployment:
    """What a plan states about its serving deployment (the numbers as the plan evaluated them)."""

    plan: str
    block: str                  # "serving_search" or "engine"
    preset: str                 # the engine declaration the plan prices
    family: str | None          # "vllm" / "sglang" (the catalog preset it is or extends), or None
    model: str
    device: str
    tp: int
    pp: int
    roles: tuple                # ((role, replicas), …): ("serve", R) or ("prefill", x), ("decode", y)
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked: bool
    memory_fraction: object     # exact sympy number
    block_size: int
    kv: str
    weights: str
    gpus_per_host: int
    speculative: str | None = None      # "draft" / "mtp" when the deployment speculates
    spec_tokens: int = 0                # drafted tokens k per step
    draft: str | None = None            # the draft model's declaration
    prefix_caching: bool | None = None  # as the plan writes it (None: not written)
    mixed: bool = False                 # prefill chunks share iterations with decodes (SGLang's mixed chunks)


# ---------------------------------------------------------------- reading the plan
def serving_plans(ev) -> list[str]:
    """The root file's plans with a block that states a deployment, in declaration order."""
    return [p for p in ev.plans(own=True) if any(b in ev.uses(p) for b in BLOCKS)]


def _int(ev, nid: str, unit: str = "") -> int:
    return int(ev.value(nid, unit, exact=True))


def _exact(ev, nid: str):
    return ev.value(nid, "", exact=True)


def _name(ev, nid: str) -> str:
    v = ev.python_value(nid)
    return getattr(v, "name", str(v))


def family_of(ev, preset: str) -> str | None:
    """``vllm`` or ``sglang`` when engine ``preset`` is, or extends (at any depth), a
    declaration of that name; else None (TensorRT-LLM, or an engine of one's own)."""
    seen, name = set(), preset
    while name and name not in seen:
        if name in ENGINES:
            return name
        seen.add(name)
        d = ev.decls.get(name)
        name = d.parents[0] if d is not None and d.parents else None
    return None


def _plan_span(ev, plan):
    ast = ev.decls[plan].ast
    return getattr(ast, "name_span", None) or getattr(ast, "span", None)


def _preset_fraction(ev, preset: str, tp: int):
    """The preset's memory fraction at ``tp`` (exact): its ``gpu_memory_utilization``, or the entry of its
    ``gpu_memory_utilization_by_tp`` for the largest degree of ``gpu_memory_utilization_tp`` not above ``tp``
    (SGLang lowers its static fraction at larger tp) — the fraction the plan's search sized the cache with."""
    base = _exact(ev, f"{preset}.gpu_memory_utilization")
    degrees, fractions = f"{preset}.gpu_memory_utilization_tp", f"{preset}.gpu_memory_utilization_by_tp"
    if not (ev.has(degrees) and ev.has(fractions)):
        return base
    table = tuple((int(d), sp.nsimplify(f)) for d, f in zip(ev.list_value(degrees), ev.list_value(fractions)))
    return fraction_at(table, tp, base)


def _preset_field(ev, preset: str, field: str):
    nid = f"{preset}.{field}"
    return nid if ev.has(nid) else None


def _given(ev, nid: str) -> bool:
    """The user wrote ``nid`` (not a plugin's default)."""
    n = ev.nodes.get(nid)
    return n is not None and n.default is None


def _speculation(ev, plan: str, block: str, k: int | None = None) -> dict:
    """The speculation and prefix caching a block of ``plan`` prices (``block`` ``serving_search``
    with its chosen k, or ``batching`` with its ``spec_tokens``)."""
    out = {}
    base = f"{plan}.{block}"
    if ev.has(f"{base}.enable_prefix_caching") and _given(ev, f"{base}.enable_prefix_caching"):
        out["prefix_caching"] = bool(ev.python_value(f"{base}.enable_prefix_caching"))
    mode = ev.python_value(f"{base}.speculative") if ev.has(f"{base}.speculative") else "none"
    if mode in ("draft", "mtp"):
        k = int(ev.python_value(f"{base}.spec_tokens")) if k is None else k
        if k > 0:
            out.update(speculative=mode, spec_tokens=k, draft=_name(ev, f"{base}.draft_model"))
    return out


def deployment(ev, plan: str) -> Deployment:
    """The deployment of ``plan`` (raises :class:`Refused` when it states none, or none was chosen)."""
    uses = ev.uses(plan)
    block = next((b for b in BLOCKS if b in uses), None)
    if block is None:
        with_one = serving_plans(ev)
        raise Refused(Diagnostic(
            "error", "launch", f"plan '{plan}' states no serving deployment: it has neither `use serving_search` "
            "nor `use engine`", _plan_span(ev, plan),
            (f"plans with one: {', '.join(with_one)}" if with_one else
             "add `use engine { engine = vllm; tp = 1; max_model_len = 8192 token }` (with `model` and `device`), "
             "or a `use serving_search { … }` whose chosen configuration is launched")), 2)
    preset = _name(ev, f"{plan}.{block}.engine")
    common = dict(plan=plan, block=block, preset=preset, family=family_of(ev, preset),
                  model=_name(ev, f"{plan}.model"), kv=str(ev.python_value(f"{plan}.{block}.kv")),
                  weights=str(ev.python_value(f"{plan}.{block}.weights")),
                  gpus_per_host=_int(ev, f"{plan}.gpus_per_host"))
    if block == "serving_search":
        if not ev.has(f"{plan}.search_tp"):
            raise Refused(Diagnostic(
                "error", "launch", f"the serving search of plan '{plan}' chose no configuration: none of those it "
                "simulated meets both latency targets (or none can run)", ev.decls[plan].use_spans.get(block),
                "`plan eval` lists the simulated configurations and why the others were left out; relax slo_ttft or "
                "slo_tpot, or add devices, larger tp or more replicas"), 1)
        from plugins.serving.serving_search import result_of
        res = result_of(ev, plan)
        device = res.row(res.chosen)["device"] if res is not None and res.chosen is not None else "?"
        if ev.has(f"{plan}.search_prefill_replicas"):
            roles = (("prefill", _int(ev, f"{plan}.search_prefill_replicas")),
                     ("decode", _int(ev, f"{plan}.search_decode_replicas")))
        else:
            roles = (("serve", _int(ev, f"{plan}.search_replicas")),)
        chunk = _preset_field(ev, preset, "enable_chunked_prefill")
        tp = _int(ev, f"{plan}.search_tp")
        k = _int(ev, f"{plan}.search_spec_tokens") if ev.has(f"{plan}.search_spec_tokens") else 0
        common.update(_speculation(ev, plan, block, k))
        return Deployment(
            **common, device=device, tp=tp, pp=_int(ev, f"{plan}.search_pp"), roles=roles,
            max_model_len=_int(ev, f"{plan}.serving_search.max_model_len", "token"),
            max_num_seqs=_int(ev, f"{plan}.search_max_num_seqs", "seq"),
            max_num_batched_tokens=_int(ev, f"{plan}.search_max_num_batched_tokens", "token"),
            chunked=bool(ev.python_value(chunk)) if chunk else False,
            memory_fraction=_preset_fraction(ev, preset, tp),
            block_size=_int(ev, f"{preset}.block_size", "token"))
    if "batching" in uses:
        common.update(_speculation(ev, plan, "batching"))
    chunk = f"{plan}.engine.enable_chunked_prefill"
    chunk = chunk if ev.has(chunk) else _preset_field(ev, preset, "enable_chunked_prefill")
    mixed = f"{plan}.engine.mixed_batches"
    mixed = mixed if ev.has(mixed) else _preset_field(ev, preset, "mixed_batches")
    common["mixed"] = bool(ev.python_value(mixed)) if mixed else False
    return Deployment(
        **common, device=_name(ev, f"{plan}.device"), tp=_int(ev, f"{plan}.serving_tp"),
        pp=_int(ev, f"{plan}.serving_pp"), roles=(("serve", _int(ev, f"{plan}.engine.replicas")),),
        max_model_len=_int(ev, f"{plan}.max_model_len", "token"), max_num_seqs=_int(ev, f"{plan}.max_num_seqs", "seq"),
        max_num_batched_tokens=_int(ev, f"{plan}.max_num_batched_tokens", "token"),
        chunked=bool(ev.python_value(chunk)) if chunk else False,
        memory_fraction=_exact(ev, f"{plan}.gpu_memory_utilization"),     # the block's, else the engine's at this tp
        block_size=_int(ev, f"{plan}.block_size", "token"))


def check_engine(ev, dep: Deployment, engine: str) -> None:
    """Refuse an engine other than the one the plan prices: the memory fraction, the block
    size and the budgets are that engine's (vLLM's fraction covers the activations, SGLang's
    does not), so another engine's command would run a deployment the plan never sized."""
    span = ev.nodes[f"{dep.plan}.{dep.block}.engine"].span
    if dep.family == engine:
        return
    if dep.family is None:
        raise Refused(Diagnostic(
            "error", "launch", f"plan '{dep.plan}' prices engine '{dep.preset}', which is not a vLLM or SGLang preset "
            "(nor extends one): its command line cannot be written", span,
            f"price the plan with `engine = {engine}` (or `engine my_{engine} extends {engine} {{ … }}`), "
            "then launch it"), 2)
    raise Refused(Diagnostic(
        "error", "launch", f"plan '{dep.plan}' prices engine '{dep.preset}' ({ENGINE_NAMES[dep.family]}), not "
        f"{ENGINE_NAMES[engine]}: its memory fraction, block size and budgets are {ENGINE_NAMES[dep.family]}'s", span,
        f"pass --engine {dep.family}, or price the plan with `engine = {engine}` and launch that"), 2)


# ---------------------------------------------------------------- command lines
def number(v) -> str:
    """A value as the command line writes it: a whole number without a point, else the
    shortest decimal (0.9, 0.88)."""
    if getattr(v, "is_integer", False) or isinstance(v, int):
        return str(int(v))
    return f"{float(v):.6g}"


def options(dep: Deployment, engine: str, role: str, model: str,
            draft: str = DRAFT_PLACEHOLDER) -> tuple[list[str], list[tuple]]:
    """The program with the model, and the options as (flag, value or None) of one engine of
    ``role`` ("serve", "prefill", "decode"); ``draft``: the separate draft model's id."""
    T = str(dep.max_num_batched_tokens)
    kv = KV_DTYPE[engine].get(dep.kv)
    spec = dep.speculative is not None and role != "prefill"      # a prefill engine emits one token
    if engine == "vllm":
        head = ["vllm", "serve", model]
        opts = [("--tensor-parallel-size", str(dep.tp)), ("--pipeline-parallel-size", str(dep.pp)),
                ("--max-model-len", str(dep.max_model_len)),
                ("--gpu-memory-utilization", number(dep.memory_fraction)), ("--block-size", str(dep.block_size)),
                ("--max-num-seqs", str(dep.max_num_seqs)), ("--max-num-batched-tokens", T)]
        if dep.chunked:
            opts.append(("--enable-chunked-prefill", None))
        if kv:
            opts.append(("--kv-cache-dtype", kv))
        if role != "serve":
            cfg = {"kv_connector": VLLM_CONNECTOR, "kv_role": "kv_producer" if role == "prefill" else "kv_consumer"}
            opts.append(("--kv-transfer-config", json.dumps(cfg, separators=(",", ":"))))
        if spec:
            cfg = ({"method": "draft_model", "model": draft} if dep.speculative == "draft" else {"method": "mtp"})
            cfg["num_speculative_tokens"] = dep.spec_tokens
            opts.append(("--speculative-config", json.dumps(cfg, separators=(",", ":"))))
        if dep.prefix_caching is not None:
            opts.append(("--enable-prefix-caching" if dep.prefix_caching else "--no-enable-prefix-caching", None))
        return head, opts
    head = ["python", "-m", "sglang.launch_server", "--model-path", model]
    opts = [("--tp-size", str(dep.tp)), ("--pp-size", str(dep.pp)), ("--context-length", str(dep.max_model_len)),
            ("--mem-fraction-static", number(dep.memory_fraction)), ("--page-size", str(dep.block_size)),
            ("--max-running-requests", str(dep.max_num_seqs))]
    if dep.chunked:
        opts.append(("--chunked-prefill-size", T))
    else:                       # one prefill batch of at most T tokens, prompts whole
        opts += [("--chunked-prefill-size", "-1"), ("--max-prefill-tokens", T)]
    if kv:
        opts.append(("--kv-cache-dtype", kv))
    if role != "serve":
        opts.append(("--disaggregation-mode", role))
    if spec:
        opts.append(("--speculative-algorithm", "STANDALONE" if dep.speculative == "draft" else "EAGLE"))
        if dep.speculative == "draft":
            opts.append(("--speculative-draft-model-path", draft))
        opts += [("--speculative-num-steps", str(dep.spec_tokens)), ("--speculative-eagle-topk", "1"),
                 ("--speculative-num-draft-tokens", str(dep.spec_tokens + 1))]
    if dep.prefix_caching is False:
        opts.append(("--disable-radix-cache", None))
    if dep.mixed and dep.chunked:
        opts.append(("--enable-mixed-chunk", None))
    return head, opts


def argv(dep: Deployment, engine: str, role: str, model: str, draft: str = DRAFT_PLACEHOLDER) -> list[str]:
    """The command line of one engine of ``role`` as an argument list."""
    head, opts = options(dep, engine, role, model, draft)
    return head + [x for flag, value in opts for x in ((flag,) if value is None else (flag, value))]


def commands(dep: Deployment, engine: str, model: str, draft: str = DRAFT_PLACEHOLDER) -> list[dict]:
    """``[{role, replicas, argv}]``: one command line per role, to run once per replica."""
    return [{"role": role, "replicas": n, "argv": argv(dep, engine, role, model, draft)} for role, n in dep.roles]


def notes(dep: Deployment, engine: str) -> list[str]:
    """What the command lines leave to the user, and why (comments of the text form)."""
    per = dep.tp * dep.pp
    gpus = sum(n for _, n in dep.roles) * per
    what = ("the serving search's chosen configuration" if dep.block == "serving_search"
            else "the deployment of `use engine`")
    pools = " + ".join(f"{n} {r}" for r, n in dep.roles) if len(dep.roles) > 1 else \
        f"{dep.roles[0][1]} replica{'s' if dep.roles[0][1] != 1 else ''}"
    out = [f"plan {dep.plan}: {what}, engine preset {dep.preset} ({ENGINE_NAMES[engine]})",
           f"{gpus} × {dep.device}: tp {dep.tp} × pp {dep.pp} = {per} GPU{'s' if per != 1 else ''} per engine, "
           f"{pools}"]
    if gpus > per:
        out.append("each replica is an independent engine: run its command once per replica, each on its own GPUs "
                   "(CUDA_VISIBLE_DEVICES) and --port")
    if per > dep.gpus_per_host:
        out.append(f"one engine spans {-(-per // dep.gpus_per_host)} hosts of {dep.gpus_per_host} GPUs "
                   f"(gpus_per_host): start it with {ENGINE_NAMES[engine]}'s multi-node options")
    if len(dep.roles) > 1:
        if engine == "vllm":
            out.append(f"prefill and decode engines exchange KV through {VLLM_CONNECTOR} (pip install nixl); route "
                       "requests through a proxy that sends each prompt to a prefill engine, then to a decode engine")
        else:
            out.append("route requests with: python -m sglang_router.launch_router --pd-disaggregation "
                       "--prefill http://HOST:PORT --decode http://HOST:PORT (one --prefill or --decode per engine)")
    if not dep.chunked:
        out.append("chunked prefill off, as the plan prices it: a step holds whole prompts")
    if dep.speculative is not None:
        what = (f"the draft model '{dep.draft}'" if dep.speculative == "draft" else
                f"the model's MTP heads (the plan prices them as '{dep.draft}'; EAGLE heads in a checkpoint of "
                "their own take method eagle / eagle3 and their model instead)")
        out.append(f"speculative decoding: {dep.spec_tokens} tokens drafted per step by {what}"
                   + (", on the decode engines" if len(dep.roles) > 1 else ""))
    if dep.prefix_caching is not None:
        out.append(f"prefix caching {'on' if dep.prefix_caching else 'off'}, as the plan prices it")
    if dep.weights not in SAME_AS_MODEL:
        out.append(f"weights = \"{dep.weights}\": name a checkpoint in that format as the model")
    return out


def kv_warning(dep: Deployment, engine: str) -> str | None:
    if dep.kv in SAME_AS_MODEL or dep.kv in KV_DTYPE[engine]:
        return None
    return (f"plan '{dep.plan}' sizes its KV cache as kv = \"{dep.kv}\", which {ENGINE_NAMES[engine]} has no "
            "--kv-cache-dtype for: the command keeps the engine's KV format, and its cache holds a different number "
            "of tokens than the plan's")


def shell_line(dep: Deployment, engine: str, role: str, model: str, draft: str = DRAFT_PLACEHOLDER) -> str:
    """One engine's command line for a shell: one option per line, values quoted where a shell
    needs it (the placeholders stay visible as written)."""
    head, opts = options(dep, engine, role, model, draft)
    words = [x if x == PLACEHOLDER else shlex.quote(x) for x in head]
    parts = [" ".join(words)] + [flag if value is None else
                                 f"{flag} {value if value == DRAFT_PLACEHOLDER else shlex.quote(value)}"
                                 for flag, value in opts]
    return " \\\n    ".join(parts)


def format_text(dep: Deployment, engine: str, model: str, draft: str = DRAFT_PLACEHOLDER) -> str:
    """The command lines as a shell script: comments, then each role's command."""
    lines = [f"# {n}" for n in notes(dep, engine)]
    for role, n in dep.roles:
        who = {"serve": "engine", "prefill": "prefill engine", "decode": "decode engine"}[role]
        if len(dep.roles) > 1 or n > 1:
            lines.append(f"# {role}: {n} {who}{'s' if n != 1 else ''}, this command once per {who}")
        lines.append(shell_line(dep, engine, role, model, draft))
    return "\n".join(lines)


# ---------------------------------------------------------------- the command
def add_arguments(p) -> None:
    """The arguments of ``plan launch`` (an argparse parser)."""
    p.add_argument("file", metavar="FILE")
    p.add_argument("--plan", metavar="NAME", help="the plan to launch (default: the file's only plan with "
                   "`use serving_search` or `use engine`)")
    p.add_argument("--engine", required=True, choices=ENGINES, help="the engine whose command lines are written; "
                   "it must be the engine the plan prices")
    p.add_argument("--model", metavar="ID", help="the model argument: a Hugging Face repository id or a local path "
                   f"(default: the placeholder {PLACEHOLDER}, with a warning)")
    p.add_argument("--draft-model", metavar="ID", help="the separate draft model of a plan that speculates with "
                   f"one (`speculative = \"draft\"`): its Hugging Face repository id or a local path (default: the "
                   f"placeholder {DRAFT_PLACEHOLDER}, with a warning)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: a shell script with comments; json: a list of {role, replicas, argv}")


def _refuse(args, cli, r: Refused) -> int:
    """Print the refusal as every command prints a diagnostic (JSON too, with --format json)."""
    if args.format == "json":
        print(json.dumps({"diagnostics": [r.diagnostic.to_json()]}, indent=2, sort_keys=True))
    print(str(PlanError([r.diagnostic])), file=sys.stderr)
    print("1 error", file=sys.stderr)
    return cli.EXIT_USAGE if r.code == 2 else cli.EXIT_PLAN


def _warn(d: Diagnostic) -> None:
    print(str(PlanError([d])), file=sys.stderr)


def run_command(args, cli) -> int:
    """``plan launch``: ``cli`` is the CLI's command context (load, select_plans, exit codes)."""
    ev = cli.load(args.file)
    try:
        if args.plan:
            plan = cli.select_plans(ev, args.file, [args.plan])[0]
        else:
            found = serving_plans(ev)
            if not found:
                raise Refused(Diagnostic(
                    "error", "launch", f"no plan in {args.file} states a serving deployment (`use serving_search` or "
                    "`use engine`), so there is nothing to launch", None,
                    "add `use engine { engine = vllm; tp = 1; max_model_len = 8192 token }` to a plan with `model` "
                    "and `device`, or a `use serving_search { … }`; docs/plugins/launch.md"), 2)
            if len(found) > 1:
                raise Refused(Diagnostic(
                    "error", "launch", f"{args.file} has {len(found)} plans with a serving deployment: "
                    f"{', '.join(found)}", None, f"name one with --plan, e.g. --plan {found[0]}"), 2)
            plan = found[0]
        dep = deployment(ev, plan)
        check_engine(ev, dep, args.engine)
    except Refused as r:
        return _refuse(args, cli, r)
    def placeholder(decl: str, what: str, where: str, mark: str, flag: str, id_text: str) -> None:
        d = ev.decls.get(decl)
        _warn(Diagnostic("warning", "launch-model", f"{what} '{decl}' names no Hugging Face repository: the "
                         f"command line says {mark} where the {where} goes", getattr(getattr(d, "ast", None), "span", None),
                         f"replace it, or pass {flag} ID ({id_text}, or a local path)"))

    model = args.model or PLACEHOLDER
    if not args.model:
        placeholder(dep.model, "model", "model", PLACEHOLDER, "--model",
                    "the model's Hugging Face repository id, ORGANISATION/NAME")
    draft = args.draft_model or DRAFT_PLACEHOLDER
    if dep.speculative == "draft" and not args.draft_model:
        placeholder(dep.draft, "draft model", "draft", DRAFT_PLACEHOLDER, "--draft-model",
                    "the draft's Hugging Face repository id")
    kvw = kv_warning(dep, args.engine)
    if kvw:
        _warn(Diagnostic("warning", "launch-kv", kvw, ev.nodes[f"{dep.plan}.{dep.block}.kv"].span,
                         'price the plan with kv = "bf16" or "fp8" to launch what it sizes'))
    if dep.block == "engine":
        req = ev.requirement(dep.plan, "holds_max_model_len")
        if req is not None and not req["ok"]:
            _warn(Diagnostic("warning", "launch-fit", f"plan '{dep.plan}' fails holds_max_model_len: its KV cache "
                             f"holds fewer tokens than max_model_len = {dep.max_model_len:,}: the engine refuses to "
                             "start with this command line", ev.nodes[f"{dep.plan}.engine.max_model_len"].span,
                             "lower max_model_len, raise tp, or use a device with more memory"))
    if args.format == "json":
        print(json.dumps(commands(dep, args.engine, model, draft), indent=2))
    else:
        print(format_text(dep, args.engine, model, draft))
    return cli.EXIT_OK


@hookimpl
def plan_commands_register():
    return [CommandSpec("launch", LAUNCH_HELP, add_arguments, run_command, LAUNCH_DESCRIPTION)]

"""Serving memory on a real engine's terms: weights sharded by tensor and pipeline parallelism,
a paged KV cache, and the budget an engine (vLLM, SGLang, TensorRT-LLM) leaves for it.

Kind ``engine`` (presets in ``specs/catalog/engines.plan``: ``vllm``, ``vllm_v0``, ``sglang``,
``trtllm``; every field there names its source)::

    engine vllm { gpu_memory_utilization = 0.9; memory_fraction_of = "total"; block_size = 16; … }

Block (in a ``plan`` with ``model`` and ``device``)::

    use engine { engine = vllm; tp = 2; pp = 1; replicas = 1; max_model_len = 32768 token }

Knobs follow vLLM's names; each knob the block does not write comes from the engine preset.

Per GPU, on the largest pipeline stage (``ceil(L/pp)`` of the L layers):

* **weights** ``W`` = bytes(weights) · [blocks·⌈L/pp⌉/L/tp + K/V projections replicated when
  tp > kv_heads + vocabulary-parallel embedding and LM head]: the transformer blocks'
  parameters (``params − embedding_params − lm_head_params``) split over TP; the embedding and
  the LM head split over TP along the vocabulary, padded to a multiple of 64 rows (vLLM
  ``VocabParallelEmbedding`` / ``ParallelLMHead``, ``DEFAULT_VOCAB_PADDING_SIZE = 64``); with
  pp > 1 the first stage holds the embedding and the last the head (a tied head is a copy).
  Per-layer norm vectors are counted as split (≤ 0.01 % of a block), and so are latent
  attention's small down-projections, which vLLM replicates.
* **KV per token** = bytes(kv) · ⌈L/pp⌉/L · s · (``kv_cache_width_global`` +
  ``kv_cache_width_local``), the share s = 1/tp of the KV heads when tp ≤ kv_heads, 1/kv_heads
  (one head, replicated) when tp > kv_heads; latent attention (MLA) caches its compressed
  latent whole on every TP rank (s = 1).  Paged in blocks of ``block_size`` tokens.
* **activation reserve** ``A`` (engines that profile it): the dummy forward vLLM runs before
  sizing the cache (``profile_run``) of T = ``max_num_batched_tokens`` tokens (default: with
  chunked prefill the engine's ``chunked_batched_tokens``, without it max(``max_model_len``,
  ``min_batched_tokens``)) in S = min(``max_num_seqs``, T) sequences:
  A = max(T · bytes(act) · (w_ffn + 3h), S · V · ``sampler_bytes``): the larger of the
  forward's peak — w_ffn the FFN's intermediate width per GPU (``ffn_matrices``·f/tp for a
  dense FFN: the gate-up output and the activation; k·(``ffn_matrices``·f_e/tp + h) for routed
  experts, plus ``ffn_matrices``·f_e/tp per shared expert), 3h the residual, the normed
  input and the FFN output — and the sampler's pass over the [S × V] logits, which runs
  after the forward's activations are freed and is not split by TP (gathered on the first
  rank).  On Llama-3.1-8B the forward term is 110,592 B per token:
  vLLM's profiled peak in issue #10517 grows 0.92 GiB from max_model_len 20,000 to 29,000
  (2.07 → 2.99 GiB, 110 KB per token); at 8,192 tokens the sampler term dominates and vLLM
  logs the same 1.26 GiB peak at TP 1 and TP 2 (PR #10511).
* **runtime overheads** ``R`` = ``non_torch_memory`` + ``tp_comm_memory`` (tp > 1) +
  ``cuda_graph_memory`` + ``cuda_context`` — what the engine charges to the budget besides
  PyTorch's allocations (each an engine field with its source, overridable in the block); per
  version: vLLM V1 0.13 + 0.41 GiB (H100, vLLM 0.11), vLLM 0.6 0.35 + 1.79 GiB.  The
  communication buffers are one figure for every tp > 1: NCCL's buffers per channel connection
  (SIMPLE 4 MiB, LL128 4,915,200 B, LL 512 KiB) and vLLM's custom all-reduce buffers (about
  8 MiB each) do not grow with the group.
* **memory fraction** ``u``: the block's ``gpu_memory_utilization``, else the engine's
  ``gpu_memory_utilization_by_tp`` entry for the largest degree of ``gpu_memory_utilization_tp``
  not above tp (SGLang 0.3 – 0.4: 0.88, 0.87, 0.85, 0.81, 0.79 at tp 1, ≥ 2, ≥ 4, ≥ 8, ≥ 16),
  else its ``gpu_memory_utilization``.

Budget: ``memory_fraction_of = "total"`` (vLLM, SGLang) KV = u·M − W − A − R (A only when
``reserve_activations``); ``"free"`` (TensorRT-LLM) KV = u·(M − W − A − R); M is the device's
``memory`` — or its ``cuda_memory`` field, or the block's ``device_memory``: what
``torch.cuda.mem_get_info`` reports, a little below the nominal capacity.
Blocks = ⌊KV / (block_size · KV per token)⌋, tokens = blocks · block_size, sequences at a
context c = blocks / ⌈c / block_size⌉ (with sliding-window layers, weighted by the global and
windowed widths).

A model that does not fit — a budget ≤ 0, tp not dividing the query heads (or neither
dividing nor a multiple of the KV heads), pp above the layer count — is a located error with
the numbers and a hint (a larger tp, a shorter max_model_len, lower-precision weights).
When the cache holds fewer than ``max_model_len`` tokens vLLM refuses to start; the
requirement ``holds_max_model_len`` says so.

Standard names (read by the step-time and batching blocks): ``weights_per_gpu``,
``kv_bytes_per_token``, ``kv_budget``, ``kv_blocks``, ``kv_tokens``, ``kv_sequences``,
``serving_gpus`` (tp·pp·replicas), ``block_size``, ``max_num_seqs``, ``max_num_batched_tokens``,
``max_model_len``, ``serving_tp``, ``serving_pp``, ``gpu_memory_utilization``.

References: vLLM ``vllm/worker/worker.py`` ``determine_num_available_blocks`` and
``model_runner.profile_run``; vLLM PR #4454 (KV blocks on an RTX A6000) and issue #10517 (RTX
3090 logs); SGLang ``server_args.py`` / ``model_runner.profile_max_num_token``; TensorRT-LLM
``KvCacheConfig`` docs.
"""
from __future__ import annotations

import sympy as sp

from dsl.plugin import KindSpec, Param, QuantitySpec, UseSpec, hookimpl

from plugins.model.decoder import architecture, moe_architecture
from plugins.training.layout_model import ops
from plugins.model.llmstate import kv_bytes_per_token
from plugins.serving.serving import FORMAT_BYTES

_FORMATS = tuple(FORMAT_BYTES)
GIB = 2 ** 30
VOCAB_PADDING = 64      # vLLM DEFAULT_VOCAB_PADDING_SIZE (vocab_parallel_embedding.py)

ENGINE_FIELDS = (
    Param("gpu_memory_utilization", "", doc="fraction of device memory (total or free, see memory_fraction_of) "
          "the engine may use", min=0, max=1, min_open=True, optional=True),
    Param("gpu_memory_utilization_tp", kind="list", min=2, min_items=1, optional=True,
          doc="tensor-parallel degrees (increasing) from which the matching gpu_memory_utilization_by_tp "
          "replaces gpu_memory_utilization (SGLang: [2, 4, 8, 16])"),
    Param("gpu_memory_utilization_by_tp", kind="list", min=0, max=1, min_open=True, min_items=1, optional=True,
          doc="the memory fraction from each degree of gpu_memory_utilization_tp on (SGLang: [0.87, 0.85, 0.81, "
          "0.79])"),
    Param("memory_fraction_of", kind="choice", choices=("total", "free"), default='"total"',
          doc="the fraction applies to the total memory (vLLM, SGLang) or to the memory free after weights, "
          "activations and runtime buffers (TensorRT-LLM)"),
    Param("reserve_activations", kind="bool", default="true",
          doc="the activation peak of the largest scheduled batch is charged to the budget"),
    Param("block_size", "token", doc="tokens per KV block (page)", min=1, optional=True),
    Param("max_num_seqs", "seq", doc="sequences scheduled at once", min=1, optional=True),
    Param("enable_chunked_prefill", kind="bool", default="false",
          doc="prefills are chunked to the token budget (the profiled batch is chunked_batched_tokens)"),
    Param("chunked_batched_tokens", "token", doc="token budget per step with chunked prefill", min=1,
          optional=True),
    Param("min_batched_tokens", "token", doc="without chunked prefill: the token budget is max(max_model_len, "
          "this)", min=1, optional=True),
    Param("non_torch_memory", "B", doc="memory outside PyTorch's allocator charged to the budget (cuBLAS, "
          "NCCL, allocator slack)", min=0, optional=True),
    Param("tp_comm_memory", "B", doc="extra communication buffers per GPU when tp > 1", min=0, optional=True),
    Param("cuda_graph_memory", "B", doc="CUDA-graph memory charged to the budget", min=0, optional=True),
    Param("cuda_context", "B", doc="CUDA context memory charged to the budget", min=0, optional=True),
    Param("sampler_bytes", "B", doc="bytes per logit of the sampler pass in the profiled batch", min=0,
          optional=True),
    Param("large_gpu_memory", "B", doc="device memory (as CUDA reports it) from which the engine's large-GPU "
          "defaults replace max_num_seqs and chunked_batched_tokens", min=0, optional=True),
    Param("large_gpu_max_num_seqs", "seq", doc="max_num_seqs on a large GPU", min=1, optional=True),
    Param("large_gpu_batched_tokens", "token", doc="chunked_batched_tokens on a large GPU", min=1, optional=True),
    Param("large_gpu_excludes", kind="string", optional=True,
          doc="devices whose catalog name contains this text keep the other defaults (vLLM: \"a100\")"),
    Param("mixed_batches", kind="bool", default="true",
          doc="an iteration mixes prefill chunks with the running decodes (false: an iteration that prefills "
          "runs no decode, as vLLM 0.x without chunked prefill and SGLang without mixed chunks)"),
    Param("num_scheduler_steps", doc="forward steps a decode batch runs per scheduler call, its tokens handed out "
          "when they end (vLLM 0.5 – 0.6 --num-scheduler-steps)", kind="int", min=1, optional=True),
    Param("scheduler_overhead", "s", doc="host time per scheduler call that the GPU waits for (scheduling, input "
          "preparation and output processing between forward passes)", min=0, optional=True),
)

#: the plan parameter the serving blocks share: one host's GPUs, one NVLink domain (training's
#: layout declares its own, with the same default)
GPUS_PER_HOST = Param("gpus_per_host", "", "8", "GPUs in one host, one NVLink domain: a tensor-parallel group "
                      "above it spans hosts (use engine and use serving_step warn; use serving_search leaves "
                      "such tp out)", min=1, whole=True)


ENGINE = UseSpec(
    "engine",
    "serving memory on an engine's terms: TP/PP-sharded weights, paged KV cache, the engine's budget",
    references=("vLLM vllm/worker/worker.py determine_num_available_blocks, model_runner.profile_run",
                "vLLM PR #4454 (GPU blocks of 7B models on an RTX A6000)",
                "vLLM KV capacity against max_model_len on an RTX 3090 (github.com/vllm-project/vllm/issues/10517)",
                "SGLang server_args.py, model_runner.profile_max_num_token",
                "SGLang 0.3 - 0.4 server_args.py ServerArgs.__post_init__: mem_fraction_static by tp_size",
                "vLLM V1 memory profile on H100 80GB at TP 1 and 2 (github.com/llm-d/llm-d-benchmark, "
                "config_explorer/empirical-vllm-memory-results.md)",
                "NCCL src/init.cc: DEFAULT_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, DEFAULT_LL_BUFFSIZE (buffers per "
                "channel connection)",
                "TensorRT-LLM KvCacheConfig (free_gpu_memory_fraction, tokens_per_block)"),
    params=(
        Param("engine", kind="ref", ref_kind="engine", doc="the engine preset (vllm, sglang, trtllm …)"),
        Param("tp", "", "1", "tensor-parallel degree", kind="int", min=1),
        Param("pp", "", "1", "pipeline-parallel degree", kind="int", min=1),
        Param("link", kind="ref", ref_kind="link", optional=True,
              doc="the link of the tensor-parallel group (its all-reduces; read by `use serving_step` and "
              "`use batching`); needed when tp > 1 and the step time is priced"),
        Param("replicas", "", "1", "independent copies (data parallel)", min=1, whole=True),
        Param("max_model_len", "token", None, "longest request (prompt + output) the engine accepts", min=1),
        Param("context", "token", None, "context length the concurrency is counted at (default max_model_len)",
              min=1, optional=True),
        Param("gpu_memory_utilization", "", None, "fraction of memory the engine uses (default: the engine's)",
              min=0, max=1, min_open=True, optional=True),
        Param("block_size", "token", None, "tokens per KV block (default: the engine's)", min=1, optional=True),
        Param("max_num_batched_tokens", "token", None, "token budget of one scheduler step (default: the "
              "engine's rule)", min=1, optional=True),
        Param("max_num_seqs", "seq", None, "sequences scheduled at once (default: the engine's)", min=1,
              optional=True),
        Param("enable_chunked_prefill", kind="bool", default=None, optional=True,
              doc="chunked prefill: the profiled batch is the chunk budget (default: the engine's)"),
        Param("mixed_batches", kind="bool", default=None, optional=True,
              doc="prefill chunks share iterations with decodes (default: the engine's)"),
        Param("num_scheduler_steps", "", None, "forward steps a decode batch runs per scheduler call (default: the "
              "engine's, else 1)", kind="int", min=1, optional=True),
        Param("scheduler_overhead", "s", None, "host time per scheduler call (default: the engine's, else 0)", min=0,
              optional=True),
        Param("weights", kind="choice", default='"bf16"', choices=_FORMATS, doc="format of the weights"),
        Param("kv", kind="choice", default='"bf16"', choices=_FORMATS, doc="format of the KV cache"),
        Param("activations", kind="choice", default='"bf16"', choices=_FORMATS,
              doc="format of the activations in the profiled forward"),
        Param("device_memory", "B", None, "device memory as CUDA reports it (default: the device's memory)",
              min=0, min_open=True, optional=True),
        Param("non_torch_memory", "B", None, "override the engine's non-PyTorch memory", min=0, optional=True),
        Param("tp_comm_memory", "B", None, "override the engine's TP communication buffers", min=0,
              optional=True),
        Param("cuda_graph_memory", "B", None, "override the engine's CUDA-graph memory", min=0, optional=True),
        Param("cuda_context", "B", None, "override the engine's CUDA-context charge", min=0, optional=True),
    ),
    plan_params=(
        Param("model", kind="ref", ref_kind="model", doc="the model served"),
        Param("device", kind="ref", ref_kind="device", doc="the accelerator"),
        GPUS_PER_HOST,
    ),
    order=58,
    provides=("weights_per_gpu", "kv_bytes_per_token", "kv_block_bytes", "activation_reserve", "runtime_overhead",
              "kv_budget", "kv_blocks", "kv_tokens", "kv_sequences", "serving_gpus", "block_size", "max_num_seqs",
              "max_num_batched_tokens", "max_model_len", "serving_tp", "serving_pp", "gpu_memory_utilization"),
)

REFERENCES = {
    "total": ("vLLM vllm/worker/worker.py determine_num_available_blocks: (total × gpu_memory_utilization − "
              "peak) // block bytes, the peak profiled by model_runner.profile_run",
              "SGLang model_runner.profile_max_num_token: available − total × (1 − mem_fraction_static)"),
    "free": ("TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction: the fraction of the memory free after the "
             "weights and buffers",),
}

CONCERN = "serving_engine"
STANDARD = (
    QuantitySpec("weights_per_gpu", "GiB", "weights one GPU holds", concern=CONCERN),
    QuantitySpec("kv_bytes_per_token", "KiB/token", "KV cache one token occupies (per GPU under TP/PP)",
                 concern=CONCERN),
    QuantitySpec("kv_budget", "GiB", "memory the engine gives the KV cache on one GPU", concern=CONCERN),
    QuantitySpec("kv_blocks", "", "whole KV blocks in the budget", concern=CONCERN),
    QuantitySpec("kv_tokens", "token", "tokens the KV cache holds", concern=CONCERN),
    QuantitySpec("kv_sequences", "seq", "sequences the KV cache holds at the context length", concern=CONCERN),
    QuantitySpec("serving_gpus", "", "GPUs of the deployment: tp·pp·replicas", concern=CONCERN),
)


DEVICE_FIELDS = (
    Param("cuda_memory", "B", doc="total memory as the CUDA driver reports it (torch.cuda.mem_get_info), a little "
          "below the nominal capacity; `use engine` sizes the budget from it when given", min=0, min_open=True,
          optional=True),
)


@hookimpl
def plan_kinds_register():
    return [KindSpec("engine", "a serving engine's memory and scheduling defaults (vLLM, SGLang, TensorRT-LLM)",
                     ENGINE_FIELDS),
            KindSpec("device", "an accelerator", DEVICE_FIELDS)]


@hookimpl
def plan_blocks_register():
    return [ENGINE]


@hookimpl
def plan_vocabulary_register():
    return list(STANDARD)


# ---------------------------------------------------------------- helpers
def _num(ctx, expr) -> float:
    v = ctx.nominal(expr)
    return float(v) if v is not None else float("nan")


def _gib(x: float) -> str:
    return f"{x / GIB:,.2f} GiB"


def _knob(b, eng, name, unit=""):
    """The block's knob when written, else the engine's field (symbolic either way)."""
    if b.given(name):
        return b.q(name)
    if not eng.has(name):
        b.error_at(name, f"engine '{eng.name}' has no '{name}' and `use engine` does not give it",
                   f"add `{name} = …` to `use engine` or to engine {eng.name}", code="missing-parameter")
    return eng.q(name, unit)


def utilization_table(ctx, eng) -> tuple:
    """The engine's ``(tp degree, memory fraction)`` pairs from ``gpu_memory_utilization_tp`` and
    ``gpu_memory_utilization_by_tp`` (empty when it states neither), checked: both lists or
    neither, equal lengths, degrees whole and increasing — each a located error at the engine's
    field.  SGLang 0.3 – 0.4 lowers its static fraction from 0.88 to 0.87, 0.85, 0.81, 0.79 at
    tp ≥ 2, 4, 8, 16 (server_args.py).  ``use engine`` and ``use serving_search`` share it."""
    has_tp, has_by = eng.has("gpu_memory_utilization_tp"), eng.has("gpu_memory_utilization_by_tp")
    if not (has_tp or has_by):
        return ()
    if has_tp != has_by:
        given, missing = ("gpu_memory_utilization_tp", "gpu_memory_utilization_by_tp") if has_tp else \
            ("gpu_memory_utilization_by_tp", "gpu_memory_utilization_tp")
        ctx.error(f"engine '{eng.name}' has {given} but no {missing}: the two lists go together",
                  f"add `{missing} = [ … ]` to engine {eng.name}, one entry per entry of {given}",
                  span=eng.value_span(given), code="missing-field")
    degrees, fractions = eng.value("gpu_memory_utilization_tp"), eng.value("gpu_memory_utilization_by_tp")
    if len(degrees) != len(fractions):
        ctx.error(f"engine '{eng.name}': gpu_memory_utilization_tp has {len(degrees)} degrees but "
                  f"gpu_memory_utilization_by_tp has {len(fractions)} fractions",
                  "give one fraction per tensor-parallel degree", span=eng.value_span("gpu_memory_utilization_by_tp"),
                  code="out-of-range")
    for i, d in enumerate(degrees):
        if d != int(d) or (i and d <= degrees[i - 1]):
            ctx.error(f"engine '{eng.name}': gpu_memory_utilization_tp must list whole, increasing "
                      f"tensor-parallel degrees; item {i + 1} is {d:g}",
                      "write the degrees in increasing order, e.g. [2, 4, 8, 16]",
                      span=eng.value_span("gpu_memory_utilization_tp"), code="out-of-range")
    return tuple((int(d), sp.nsimplify(f)) for d, f in zip(degrees, fractions))


def fraction_at(table: tuple, tp: int, base):
    """The memory fraction at tensor-parallel degree ``tp``: the entry of ``table``
    (:func:`utilization_table`) for the largest degree not above ``tp``, else ``base``."""
    u = base
    for d, f in table:
        if tp >= d:
            u = f
    return u


def _utilization(ctx, b, eng):
    """``util_at(tp)``: the memory fraction in force at ``tp`` — the block's
    ``gpu_memory_utilization`` when written, else :func:`fraction_at` of the engine's table and
    its ``gpu_memory_utilization``."""
    if b.given("gpu_memory_utilization"):
        written = b.q("gpu_memory_utilization")
        return lambda tp: written
    base = _knob(b, eng, "gpu_memory_utilization")
    table = utilization_table(ctx, eng)
    return lambda tp: fraction_at(table, tp, base)


def _sizes(m, a, mo, tp: int, pp: int, wb, kvb):
    """(weights bytes per GPU, KV bytes per token per GPU, layers on the largest stage) at (tp, pp).

    Plain sympy of the model's fields; ``tp``/``pp`` are Python ints (structural)."""
    L = a["L"]
    stage = sp.ceiling(L / pp) if pp > 1 else L
    params, emb, head = m.q("params", "param"), m.q("embedding_params", "param"), m.q("lm_head_params", "param")
    blocks = params - emb - head
    V, h = a["V"], a["h"]
    Vpad = sp.ceiling(V / VOCAB_PADDING) * VOCAB_PADDING
    emb_gpu = (emb + (Vpad - V) * h) / tp
    tied = a["tied_embeddings"]
    head_gpu = emb_gpu if tied else (head + (Vpad - V) * h) / tp
    w = blocks * stage / L / tp
    # K/V projections replicated when tp > kv_heads: each rank holds one whole KV head
    nkv = a["nkv"]
    if not mo["mla"] and tp > 1:
        nkv_v = int(m.value("kv_heads", m.value("heads")))
        if tp > nkv_v:
            w += stage * 2 * h * a["dh"] * (1 - sp.Rational(nkv_v, tp))
    if pp == 1:
        w += emb_gpu + (0 if tied else head_gpu)
    else:
        w += sp.Max(emb_gpu, head_gpu)
    if mo["mla"]:
        share = sp.Integer(1)
    else:
        nkv_v = int(m.value("kv_heads", m.value("heads")))
        share = sp.Rational(1, tp) if tp <= nkv_v else 1 / nkv
    kv = kv_bytes_per_token(m, kvb) * stage / L * share
    return wb * w, kv, stage


def _activation_per_token(a, mo, tp: int, actb):
    """Bytes per token of the profiled forward's peak on one GPU: the FFN intermediate width
    per GPU plus 3·h (residual, normed input, FFN output)."""
    h, mats = a["h"], a["mats"]
    dense = mats * a["f"] / tp
    if mo["moe"]:
        moe = mo["k"] * (mats * mo["fe"] / tp + h) + mo["ks"] * mats * mo["fe"] / tp
        width = ops("sympy").max(dense, moe) if _has_dense(mo) else moe
    else:
        width = dense
    return actb * (width + 3 * h)


def _has_dense(mo):
    d = mo["Ld"]
    return d is not None and d != 0


def per_gpu_sizes(m, tp: int, pp: int = 1, weights: str = "bf16", kv: str = "bf16", activations: str = "bf16"):
    """(weights bytes per GPU, KV bytes per token per GPU, activation bytes per profiled token)
    of model ``m`` (a ``DeclView``) at structural ``tp``/``pp``: the formulas of ``use engine``
    (module docstring) as sympy expressions of the model's fields, for callers that size many
    layouts at once (``use serving_search``)."""
    a, mo = architecture(m), moe_architecture(m)
    w, kvt, _ = _sizes(m, a, mo, int(tp), int(pp), sp.nsimplify(FORMAT_BYTES[weights]),
                       sp.nsimplify(FORMAT_BYTES[kv]))
    return w, kvt, _activation_per_token(a, mo, int(tp), sp.nsimplify(FORMAT_BYTES[activations]))


def _device_memory(b, dev):
    """M: the block's ``device_memory``, else the device's ``cuda_memory``, else its ``memory``."""
    if b.given("device_memory"):
        return b.q("device_memory")
    if dev.has("cuda_memory"):
        return dev.q("cuda_memory", "B", positive=True)
    return dev.q("memory", "B", positive=True)


def _large_gpu(ctx, eng, dev, M) -> bool:
    """Whether the engine's large-GPU defaults apply: the engine states ``large_gpu_memory``
    (and both large values), the device memory M (as CUDA reports it) is at least that, and the
    device's catalog name does not contain ``large_gpu_excludes``.  vLLM's server takes
    max_num_batched_tokens 8,192 and max_num_seqs 1,024 when the device's total memory is at
    least 70 GiB and its name does not contain "a100" (vllm/engine/arg_utils.py,
    EngineArgs.get_batch_defaults; the A100 exclusion from vLLM PR #17885), 2,048 and 256
    otherwise.  M is read at its nominal value and marked structural (a sweep over it rebuilds)."""
    if not all(eng.has(f) for f in ("large_gpu_memory", "large_gpu_max_num_seqs", "large_gpu_batched_tokens")):
        return False
    excl = str(eng.value("large_gpu_excludes", "") or "").lower()
    if excl and excl in dev.name.lower():
        return False
    m0 = ctx.nominal(M, structural=True)
    t0 = ctx.nominal(eng.q("large_gpu_memory", "B"), structural=True)
    return m0 is not None and t0 is not None and m0 >= t0


def tp_split_problem(m, tp: int) -> tuple[str, str] | None:
    """Why an engine cannot split model ``m`` (a ``DeclView``) over ``tp`` tensor-parallel
    ranks, as ``(summary, hint)``, or None when it can: every rank holds whole query heads
    (tp divides the query heads), and whole KV heads — split (tp divides the KV heads) or
    replicated (tp a multiple of them); latent attention (MLA) caches one latent per token,
    replicated, so only the query heads count.  The rule of vLLM's attention layers
    (``QKVParallelLinear``: ``num_heads % tp_size == 0``, KV heads divided or replicated).
    ``use engine``, ``use serving_step`` and ``use serving_search`` share it."""
    heads = int(m.value("heads"))
    nkv = int(m.value("kv_heads", heads))
    if heads % tp != 0:
        some = ", ".join(str(t) for t in (1, 2, 4, 8, 16) if heads % t == 0)
        return (f"tp = {tp} does not divide the {heads} query heads of model '{m.name}'",
                f"the engine splits whole heads over the TP ranks: use a tp dividing {heads} (e.g. {some})")
    if not moe_architecture(m)["mla"] and nkv % tp != 0 and tp % nkv != 0:
        return (f"tp = {tp} neither divides nor is a multiple of the {nkv} KV heads of model '{m.name}'",
                f"the engine splits or replicates whole KV heads: use a tp that divides {nkv} or is a multiple of it")
    return None


def warn_tp_across_hosts(ctx, b, tp: int, link_block=None) -> None:
    """A warning at ``tp`` of block ``b`` when the tensor-parallel group is larger than one host:
    ``tp`` above the plan's ``gpus_per_host`` (default 8) — the serving form of training's rule
    ``tp_within_host`` ("tp exceeds the GPUs of one host").  The step model prices every TP
    all-reduce on the group's link (``link`` of ``link_block``, default ``b``), an intra-host
    link such as NVLink, which a group spanning hosts does not have.  A warning, not an error:
    a plan may state a larger NVLink domain (an NVL72 rack: ``gpus_per_host = 72``)."""
    gph = int(ctx.value("gpus_per_host"))
    if tp <= gph:
        return
    lb = link_block if link_block is not None else b
    link = lb.ref("link").name if lb.given("link") else None
    on = f" at the speed of link '{link}'" if link else ""
    b.warn_at("tp", f"tp = {tp} exceeds the {gph} GPUs of one host (gpus_per_host): the tensor-parallel group "
              f"spans hosts, but its all-reduces are priced{on} as inside one host",
              f"use tp ≤ {gph} (more replicas, or pp, for more GPUs), or set `gpus_per_host = {tp}` in the plan "
              f"when one NVLink domain holds {tp} GPUs (an NVL72 rack: 72)", code="tp-across-hosts")


def check_tp(b, m, tp: int, param: str = "tp") -> None:
    """A located error at ``param`` of block ``b`` when ``tp`` cannot split model ``m``
    (:func:`tp_split_problem`)."""
    for f in ("heads", "layers"):     # read as numbers: a model without them is located here
        m.q(f)
    bad = tp_split_problem(m, tp)
    if bad is not None:
        b.error_at(param, *bad)


# ---------------------------------------------------------------- pricing
def _price(ctx, b):
    for other in ("decode_bound", "call_chain"):
        if ctx.block(other) is not None:
            ctx.error(f"`use engine` and `use {other}` both define kv_bytes_per_token in plan '{ctx.name}': per GPU "
                      f"after the TP/PP split here, for one full copy of the model there",
                      f"price them in two plans: move `use {other}` to a plan of its own with the same model and "
                      "device", span=b.span, code="duplicate")
    eng = b.ref("engine")
    m, dev = ctx.ref("model"), ctx.ref("device")
    a, mo = architecture(m), moe_architecture(m)
    tp, pp = int(b.value("tp")), int(b.value("pp"))
    check_tp(b, m, tp)
    warn_tp_across_hosts(ctx, b, tp)
    layers = int(m.value("layers"))
    if pp > layers:
        b.error_at("pp", f"pp = {pp} is more than the {layers} layers of model '{m.name}'",
                   f"use pp ≤ {layers}")

    wb = sp.nsimplify(FORMAT_BYTES[b.value("weights")])
    kvb = sp.nsimplify(FORMAT_BYTES[b.value("kv")])
    actb = sp.nsimplify(FORMAT_BYTES[b.value("activations")])

    util_at = _utilization(ctx, b, eng)
    util = util_at(tp)
    bs = _knob(b, eng, "block_size", "token")
    max_len = b.q("max_model_len")
    M = _device_memory(b, dev)
    large = _large_gpu(ctx, eng, dev, M)
    seqs = eng.q("large_gpu_max_num_seqs", "seq") if large and not b.given("max_num_seqs") \
        else _knob(b, eng, "max_num_seqs", "seq")
    chunked = bool(b.value("enable_chunked_prefill")) if b.given("enable_chunked_prefill") \
        else bool(eng.value("enable_chunked_prefill", False))
    if b.given("max_num_batched_tokens"):
        T = b.q("max_num_batched_tokens")
    elif chunked:
        T = eng.q("large_gpu_batched_tokens", "token") if large else _knob(b, eng, "chunked_batched_tokens", "token")
    else:
        T = sp.Max(max_len, _knob(b, eng, "min_batched_tokens", "token"))

    def over(name):
        return b.q(name) if b.given(name) else (eng.q(name, "B") if eng.has(name) else sp.Integer(0))

    frac_of = eng.value("memory_fraction_of", "total")
    reserve = bool(eng.value("reserve_activations", True))
    sampler = eng.q("sampler_bytes", "B") if eng.has("sampler_bytes") else sp.Integer(0)

    so = ops("sympy")     # Max/Min without sympy's pairwise assumption queries (the same function)

    def budget_at(t: int, w_fmt=wb):
        w, kv, _ = _sizes(m, a, mo, t, pp, w_fmt, kvb)
        act = so.max(T * _activation_per_token(a, mo, t, actb), so.min(seqs, T) * a["V"] * sampler) \
            if reserve else sp.Integer(0)
        rt = over("non_torch_memory") + (over("tp_comm_memory") if t > 1 else 0) + over("cuda_graph_memory") \
            + over("cuda_context")
        u = util_at(t)
        if frac_of == "free":
            kvmem = u * (M - w - act - rt)
        else:
            kvmem = u * M - w - act - rt
        return kvmem, w, kv, act, rt

    kvmem, w, kv, act, rt = budget_at(tp)
    util = ctx.define("gpu_memory_utilization", util, "", "per GPU: the memory fraction in force: the block's "
                      "gpu_memory_utilization, else the engine's for this tp (SGLang lowers it at tp ≥ 2, 4, 8, 16)")
    w = ctx.define("weights_per_gpu", w, "GiB", "weights on one GPU: blocks split over TP (and the largest PP "
                   "stage), vocabulary-parallel embedding and LM head", headline=True)
    kv = ctx.define("kv_bytes_per_token", kv, "KiB/token",
                    "KV cache of one token on one GPU: its KV-head share of every layer on the stage",
                    headline=True)
    block_bytes = ctx.define("kv_block_bytes", bs * kv, "MiB", "one KV block: block_size tokens")
    act_q = ctx.define("activation_reserve", act, "GiB", references=(
                           "vLLM model_runner.profile_run: a dummy batch of max_num_batched_tokens tokens in "
                           "max_num_seqs sequences, sampled",
                           "vLLM profiled peak against max_model_len (github.com/vllm-project/vllm/issues/10517) "
                           "and the same peak at TP 1 and TP 2 (vLLM PR #10511)"),
                       doc="per GPU: profiled peak of the largest scheduled batch: the larger of the forward, "
                       "tokens · (FFN width per GPU + 3h) · bytes, and the sampler's pass over max_num_seqs × vocab "
                       "logits",
                       headline=True)
    rt_q = ctx.define("runtime_overhead", rt, "GiB", "per GPU: non-PyTorch memory, TP communication buffers, "
                      "CUDA graphs and context charged to the budget", headline=True)
    if frac_of == "free":
        expr = util * (M - w - act_q - rt_q)
        how = "gpu_memory_utilization × (device memory − weights − activations − runtime)"
    else:
        expr = util * M - w - (act_q if reserve else 0) - rt_q
        how = "gpu_memory_utilization × device memory − weights − activations − runtime"
    nominal = _num(ctx, kvmem)
    if not nominal > 0:
        _not_fit(ctx, b, eng, m, dev, tp, pp, budget_at, nominal, wb, util_at)
    budget = ctx.define("kv_budget", expr, "GiB", f"per GPU: memory for the KV cache: {how}",
                        headline=True,
                        references=REFERENCES[frac_of])
    if _num(ctx, sp.floor(kvmem / (bs * kv))) < 1:
        b.error_at("block_size" if b.given("block_size") else "engine",
                   f"one KV block of block_size = {_num(ctx, bs):,.0f} tokens takes {_gib(_num(ctx, bs * kv))} per GPU, "
                   f"more than the KV budget of {_gib(nominal)}: the cache holds no block",
                   "use a block size of a few tokens (vLLM's default is 16)")
    blocks = ctx.define("kv_blocks", sp.floor(budget / block_bytes), "", "per engine replica: whole KV blocks "
                        "in the budget (each block spans the replica's tp · pp GPUs)", headline=True)
    tokens = ctx.define("kv_tokens", blocks * bs, "token", "per engine replica: tokens its KV cache holds: "
                        "blocks × block_size (vLLM's 'GPU KV cache size')", headline=True)
    c = b.q("context") if b.given("context") else max_len
    if b.given("context") and _num(ctx, c) > _num(ctx, max_len):
        b.warn_at("context", f"context = {_num(ctx, c):,.0f} tokens is longer than max_model_len = "
                  f"{_num(ctx, max_len):,.0f}: the engine refuses such a request, and kv_sequences counts "
                  "sequences it never holds", f"use a context ≤ {_num(ctx, max_len):,.0f} tokens, or raise "
                  "max_model_len", code="suspicious")
    g, l = m.q("kv_cache_width_global"), m.q("kv_cache_width_local")
    per_seq = sp.ceiling(c / bs)
    if m.has("attention_window") and _num(ctx, l) > 0:
        win = sp.ceiling(sp.Min(c, m.q("attention_window")) / bs)
        seqs_held = blocks * (g + l) / (g * per_seq + l * win)
    else:
        seqs_held = blocks / per_seq
    ctx.define("kv_sequences", seqs_held, "seq", "per engine replica: sequences whose KV fits at the context "
               "length: blocks / ⌈context / block_size⌉, a fraction as vLLM logs its 'maximum concurrency'",
               headline=True)
    ctx.define("serving_gpus", tp * pp * b.q("replicas"), "", "whole deployment: GPUs of the deployment: "
               "tp · pp · replicas", headline=True)
    ctx.define("serving_tp", sp.Integer(tp), "", "tensor-parallel degree of the serving engine")
    ctx.define("serving_pp", sp.Integer(pp), "", "pipeline-parallel degree of the serving engine")
    ctx.define("block_size", bs, "token", "tokens per KV block")
    ctx.define("max_num_seqs", seqs, "seq", "sequences the scheduler runs at once")
    ctx.define("max_num_batched_tokens", T, "token", "token budget of one scheduler step (the profiled batch)")
    ctx.define("max_model_len", max_len, "token", "longest request the engine accepts")
    ctx.require("holds_max_model_len", tokens, ">=", max_len, "token",
                "the KV cache holds one request of max_model_len tokens (the engine refuses to start otherwise)")


def _not_fit(ctx, b, eng, m, dev, tp, pp, budget_at, nominal, wb, util_at):
    kvmem, w, kv, act, rt = budget_at(tp)
    util = _num(ctx, util_at(tp))
    M = _num(ctx, _device_memory(b, dev))
    parts = (f"{util:g} × {_gib(M)} of {dev.name}, weights {_gib(_num(ctx, w))} per GPU, activations "
             f"{_gib(_num(ctx, act))}, runtime {_gib(_num(ctx, rt))}")
    hints = []
    heads = int(m.value("heads"))
    for t in (2, 4, 8, 16, 32, 64):
        if t > tp and heads % t == 0:
            if _num(ctx, budget_at(t)[0]) > 0:
                hints.append(f"tp = {t} leaves {_gib(_num(ctx, budget_at(t)[0]))} for the KV cache per GPU")
                break
    for fmt in ("fp8", "int4"):
        if FORMAT_BYTES[fmt] < FORMAT_BYTES[b.value("weights")] and _num(ctx, budget_at(tp, sp.nsimplify(
                FORMAT_BYTES[fmt]))[0]) > 0:
            hints.append(f'weights = "{fmt}" fits at tp = {tp}')
            break
    hints.append("a smaller max_model_len or max_num_batched_tokens shrinks the activation reserve")
    gpus = f"{tp * pp} × {dev.name} (tp {tp} × pp {pp})" if pp > 1 else f"{tp} × {dev.name}"
    ctx.error(f"model '{m.name}' does not fit {gpus} under engine '{eng.name}': KV budget "
              f"{_gib(nominal)} per GPU ({parts})", "; ".join(hints), span=b.span, code="does-not-fit")


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("engine")
    if b is None:
        return
    _price(ctx, b)

"""Activation, loss and gathered-parameter bytes of the training step (per GPU), the memory
terms of :func:`plugins.training.layout_model.evaluate`, which re-exports them: split from that
module so each stays readable.  Sources in each function's docstring."""
from __future__ import annotations


#: the sources of runtime_memory and its terms (plugins.training.layout quotes them by position)
RUNTIME_REFS = (
    "PyTorch documentation, 'CUDA semantics: memory management' (the caching allocator; "
    "torch.cuda.max_memory_reserved counts what it reserves, the CUDA context lies outside it)",
    "cuBLAS documentation, cublasSetWorkspace() (recommended workspace 32 MiB on Hopper, 4 MiB before)",
    "Dao 2023, 'FlashAttention-2' (backward: FP32 dQ accumulator, scores recomputed, none stored)",
    "Zhao et al. 2023, 'PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel' (unsharded "
    "parameters of the unit computed and the one prefetched; reshard after forward)",
    "Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models' (activations per layer)",
    "PyTorch, torch/distributed/pipelining/stage.py (PipelineStage: receive buffers for every micro-batch, "
    "fwd_cache, output_chunks)")


def activation_per_layer(K, X, o):
    """Activation bytes one transformer layer keeps from forward to backward for one
    micro-batch on one GPU.

    Korthikanti et al. 2022 §4.1 count, for a GPT layer at 16-bit with dropout and eager
    attention, 34·s·b·h + 5·a·s²·b bytes: attention 11sbh + 5as²b (QKV input 2, Q and K 4,
    V 2, scores/softmax/dropout 5as²b, o-projection input 2, dropout mask 1), MLP 19sbh
    (input 2, GeLU input 8, GeLU output 8, dropout mask 1; f = 4h), two layer-norm inputs
    4sbh.  The same terms, kept per tensor, for any decoder (T = s·b tokens, e bytes per
    element of ``activation_precision``, one byte per dropout-mask element):

    * replicated across TP ranks (÷ t only with sequence parallelism): two norm inputs,
      QKV-projection input and MLP input, 4·T·h·e, and the two dropout masks 2·T·h (dropout);
    * split by TP: Q, K, V T·(n_q + 2·n_kv)·d_h·e, o-projection input T·n_q·d_h·e, the MLP's
      intermediate tensors (gate, up and their product for a 3-matrix SwiGLU/GeGLU MLP,
      input and output of the activation for a 2-matrix GeLU MLP) mats·T·f·e, and — eager
      attention only — the scores and softmax output 2·n_q·s·T·e plus the dropout mask
      n_q·s·T (with dropout) — s keys per query, min(s, w) on a sliding-window layer (``K["score_keys"]``,
      averaged over the layers: :func:`plugins.model.decoder.score_keys`); FlashAttention-style fused attention keeps none of the s×s
      tensors, only the per-head log-sum-exp T·n_q·4 bytes.

    For GPT-3 (n_q·d_h = h, n_kv = n_q, f = 4h, 2 matrices, e = 2, dropout, eager) this is
    exactly 34·s·b·h + 5·a·s²·b.  Sequence parallelism as Megatron builds it keeps the shards of
    the QKV and MLP inputs and gathers them again in backward (Korthikanti et al. §4.2.2); as
    DTensor builds it (``K["sp_gather"]``, :data:`FRAMEWORK_SP_GATHER`) those two inputs are
    all-gathered at the module's entry and autograd keeps the gathered copies, 2·T·h at
    :func:`sp_gather_bytes` each, not ÷ t.  Selective recomputation drops the s×s tensors; full
    recomputation keeps only the layer input T·h·e (÷ t with SP).  CP splits the tokens.

    ``K`` constants: h a (heads) kv dh f (MLP width per token: the dense FFN, or the active
    experts' width for MoE layers) mats act_bytes flash dropout s; ``X`` knobs: b t c sp r.
    Works on numbers, sympy expressions or numpy arrays (``o`` = :func:`ops`).
    """
    h, a, kv, dh, e = K["h"], K["a"], K["kv"], K["dh"], K["act_bytes"]
    t, sp_on, r = X["t"], X["sp"], X["r"]
    s_loc = K["s"] / X["c"]
    T = s_loc * X["b"]
    drop = K["dropout"]
    rep = T * (4 * h * e + 2 * h * drop)
    split = T * ((a + 2 * kv) * dh * e + a * dh * e + K["mats"] * K["f"] * e)
    scores = o.where(K["flash"] == 1, T * a * 4, T * a * K.get("score_keys", K["s"]) * (2 * e + drop))
    rep_sp = rep / t
    if K.get("sp_gather"):      # DTensor SP keeps the gathered QKV and MLP inputs (sp_gather_bytes)
        rep_sp = (rep - 2 * T * h * e) / t + 2 * T * h * sp_gather_bytes(K, e)
    rep_t = o.where(sp_on == 1, rep_sp, rep)
    none = rep_t + (split + scores) / t
    sel = rep_t + (split + o.where(K["flash"] == 1, T * a * 4, 0 * T)) / t
    full = o.where(sp_on == 1, T * h * e / t, T * h * e)
    # op-level selective checkpointing (torchtitan): the layer input, the outputs of every other
    # matmul in forward order (QKV as three: q and v; a 3-matrix MLP: gate and down, a 2-matrix
    # one: up) and the fused attention's output and log-sum-exp; the rest is recomputed
    mm_saved = (a + kv) * dh * e / t + K["f"] * e / t + (K["mats"] - 2) * h * e
    op = o.where(sp_on == 1, T * h * e / t, T * h * e) + T * (mm_saved + a * dh * e / t) \
        + o.where(K["flash"] == 1, T * a * 4 / t, 0 * T)
    return o.where(r == 3, op, o.where(r == 2, full, o.where(r == 1, sel, none)))


#: frameworks whose sequence parallelism is DTensor's: torchtitan's TP plan all-gathers a block's
#: attention and MLP inputs (``PrepareModuleInput``: Shard(1) -> Replicate) and the LM head's
#: (``ColwiseParallel(input_layouts=Shard(1))``), and autograd saves the gathered tensors for the
#: weight gradients (torchtitan torchtitan/parallelisms/parallelize_llama.py ``apply_tp`` @ 9dec370)
FRAMEWORK_SP_GATHER = frozenset({"torchtitan"})


#: bytes per logit DTensor's vocabulary-parallel cross-entropy holds beyond :data:`LOSS_BYTES` ``fp32``
#: when TP > 1 (``torch.distributed.tensor.parallel.loss_parallel``, which torchtitan enables with TP):
#: its fused nll-loss and log-softmax backward (``_nll_loss_and_log_softmax_backward`` in
#: torch/distributed/tensor/parallel/loss.py) computes ``(grad_input + exp(x)) * grad_output`` from
#: a zero-filled FP32 ``grad_input``, so the saved log-softmax output, the zeros, their sum with
#: exp(x) (with exp(x) before it, or the product after it) and the result are four FP32 tensors
#: live at once — 4 · 4 B, where the unfused kernel's backward holds three (output, incoming
#: gradient, input gradient)
LOSS_PARALLEL_EXTRA = 4


def framework_memory_constants(framework: str, matmul_precision: str, loss: str = "fp32") -> dict:
    """The ``K`` constants of a framework's runtime memory for a plan's ``framework``,
    ``matmul_precision`` and ``loss``:

    * ``sp_gather`` 1 where the framework's sequence parallelism is DTensor's and keeps gathered
      inputs (:data:`FRAMEWORK_SP_GATHER`), and ``sp_gather_fp8`` 1 where its FP8 products gather
      the input already cast to FP8 (torchao's ``PrepareFloat8ModuleInput`` /
      ``Float8ColwiseParallel``, which torchtitan's ``apply_tp`` uses with Float8 linears), so the
      kept copy is 1 byte per element;
    * ``pp_buffers`` 1 where the framework pipelines with ``torch.distributed.pipelining``
      (torchtitan), whose stages keep receive buffers and outputs across the step
      (:func:`pipeline_buffer_bytes`);
    * ``loss_parallel`` the bytes per logit DTensor's vocabulary-parallel cross-entropy holds
      beyond the unfused loss's (:data:`LOSS_PARALLEL_EXTRA`, where TP > 1: :func:`loss_bytes`)
      for the same frameworks with ``loss = "fp32"`` (torchtitan enables ``loss_parallel`` with TP
      unless ``training.disable_loss_parallel``: torchtitan train.py and
      parallelisms/parallelize_llama.py ``apply_tp`` @ 9dec370); 0 otherwise."""
    on = framework in FRAMEWORK_SP_GATHER
    return {"sp_gather": int(on), "sp_gather_fp8": int(on and matmul_precision == "fp8"),
            "loss_parallel": LOSS_PARALLEL_EXTRA if on and loss == "fp32" else 0,
            "pp_buffers": int(on)}


def sp_gather_bytes(K, e):
    """Bytes per element of a gathered projection input DTensor SP keeps: 1 under Float8 TP
    (``K["sp_gather_fp8"]``), else the activation format's ``e``."""
    return 1 if K.get("sp_gather_fp8") else e


def head_input_bytes(K, X, o):
    """The LM head's input as DTensor sequence parallelism keeps it for the head's weight gradient,
    per GPU on the last stage: the final norm's output all-gathered over TP, T·h·e (the head stays
    16-bit under FP8 training: torchtitan converts every linear but ``output``, torchtitan
    float8.py @ 9dec370), where ``K["sp_gather"]`` and sequence parallelism hold; else 0 (Megatron
    keeps the shard, counted with the loss's other small tensors as nothing)."""
    T = K["s"] / X["c"] * X["b"]
    on = K.get("sp_gather", 0) * K["logits"]
    return o.where((X["sp"] == 1) & (X["t"] > 1), on * T * K["h"] * K["act_bytes"], 0 * T)


def pipeline_buffer_bytes(K, X, o, m, chunks_in_flight):
    """What ``torch.distributed.pipelining`` (torchtitan's pipeline) holds on a rank beyond the
    layers' checkpoints, per GPU (bytes), as ``(first, last)``: the first rank's and the last
    rank's, 0 unless ``K["pp_buffers"]`` and p > 1.

    A stage boundary carries one tensor per micro-batch, B = b·s/c·h·e (÷ t with sequence
    parallelism, which keeps the hidden state sharded between blocks).  ``PipelineStage``
    allocates, once per step configuration, a gradient-receive buffer for every micro-batch of
    every stage but the last and an activation-receive buffer for every micro-batch of every
    stage but the first (``_prepare_backward_infra`` / ``_prepare_forward_infra``, torch
    torch/distributed/pipelining/stage.py), and keeps each forward's output (``fwd_cache``) until
    its backward; the last stage keeps every micro-batch's output — the 16-bit logits
    b·s/c·V/t·e — until the step returns them merged (``output_chunks``).  So:

    * first rank (every chunk it hosts precedes the last): m·v gradient buffers and the outputs
      of its ``chunks_in_flight`` forwards — B·(m·v + chunks_in_flight) (the receive buffers of
      its later chunks hold those chunks' first checkpoints, already counted);
    * last rank: the m·v − 1 activation-receive buffers beyond the in-flight micro-batch's input,
      the m·(v − 1) gradient-receive buffers of its chunks before the last, and the
      m − 1 earlier micro-batches' logits (the current one's are in :func:`loss_bytes`; none with
      ``loss = "fused"``, whose last stage returns the loss, not logits).

    Megatron-LM allocates each receive when it happens and frees a sent output's data
    (``deallocate_output_tensor``), so it holds none of these.  ``m`` micro-batches per step,
    ``chunks_in_flight`` the first rank's chunk forwards in flight (:func:`inflight` × v)."""
    T = K["s"] / X["c"] * X["b"]
    on = K.get("pp_buffers", 0)
    e = K["act_bytes"]
    B = o.where(X["sp"] == 1, T * K["h"] * e / X["t"], T * K["h"] * e)
    v = X["v"]
    first = B * (m * v + chunks_in_flight)
    held = 1 if K.get("loss", LOSS_BYTES["fp32"]) else 0    # a fused loss's stage returns no logits
    last = B * (m * v - 1 + m * (v - 1)) + (m - 1) * T * K["V"] / X["t"] * e * K["logits"] * held
    held_here = (X["p"] > 1) & (on == 1)
    return o.where(held_here, first, 0 * T), o.where(held_here, last, 0 * T)


def logits_bytes(K, X):
    """LM-head logits kept for the cross-entropy backward on the last stage: T·V FP32
    (4 bytes) split over TP (vocabulary-parallel), 0 for a classifier head."""
    return 4 * K["s"] / X["c"] * X["b"] * K["V"] / X["t"] * K["logits"]


#: ``use layout { loss }`` -> bytes per logit the cross-entropy holds at its backward (see :func:`loss_bytes`)
LOSS_BYTES = {"fp32": 2 + 3 * 4, "fused": 0, "compiled": 2 + 2}
LOSSES = tuple(LOSS_BYTES)


def loss_bytes(K, X, o):
    """The LM head's logits as the cross-entropy holds them at its backward, per GPU
    (vocabulary-parallel over TP), ``K["loss"]`` bytes per logit (:data:`LOSS_BYTES`), T·V/t logits:

    * ``fp32`` (an unfused FP32 cross-entropy, ``cross_entropy(logits.float(), labels)`` in eager
      PyTorch): the 16-bit logits' block (2 B, freed after the FP32 cast but kept cached by the
      allocator, too small for the FP32 tensors that follow), the saved log-softmax output, its
      incoming gradient and the input gradient (3 × 4 B) — 14 B;
    * ``compiled`` (the same loss under ``torch.compile``, as torchtitan compiles it with
      ``training.compile``: torchtitan components/loss.py @ e7c0cae): the cast and log-softmax fuse
      into one kernel and the backward keeps only the 16-bit logits (with one log-sum-exp per row)
      and writes their 16-bit gradient — 2 + 2 B;
    * ``fused`` (a fused or chunked loss that never materialises the whole vocabulary): 0.

    With TP > 1 where the framework's loss is DTensor's ``loss_parallel`` (``K["loss_parallel"]``,
    :func:`framework_memory_constants`) its backward holds ``K["loss_parallel"]`` more bytes per
    logit (:data:`LOSS_PARALLEL_EXTRA`: 18 B with ``fp32``).  0 without an LM head."""
    per_logit = K.get("loss", LOSS_BYTES["fp32"]) + o.where(X["t"] > 1, K.get("loss_parallel", 0), 0 * X["t"])
    return per_logit * K["s"] / X["c"] * X["b"] * K["V"] / X["t"] * K["logits"]


def gathered_bytes(K, X, o, P_mp, dz):
    """Unsharded parameters and gradients ZeRO-3/FSDP holds beside the shards, per GPU (bytes).

    One unit is a layer's share of the stage's parameters, ``P_unit`` = P_mp·p/L.  Without a
    pipeline (p = 1) and ``reshard_after_forward`` (FSDP2's default) the unit computed and the one
    prefetched are gathered (W each) and one unit's gradients wait for their reduce-scatter (G);
    with ``reshard_after_forward`` = false every unit stays gathered from its forward to its
    backward: P_mp·W + P_unit·G.  With a pipeline (p > 1) the stage's parameters are gathered once
    per step and kept across its micro-batches, and its gradients accumulated unsharded until the
    last micro-batch's reduce-scatter: P_mp·(W + G).  0 below ZeRO-3 or with one rank."""
    W, G = K["bytes_W"], K["bytes_G"]
    P_unit = P_mp * X["p"] / K["L"]
    raf = X.get("raf", K.get("raf", 1))
    one = o.where(raf == 1, P_unit * (2 * W + G), P_mp * W + P_unit * G)
    held = o.where(X["p"] > 1, P_mp * (W + G), one)
    return o.where((X["z"] >= 3) & (dz > 1), held, 0 * P_mp)

"""Runtime memory as the runtimes report it (``runtime_memory``), op-level checkpointing, and
FSDP as runtimes do it (reshard_after_forward, a pipeline stage's parameters gathered once,
ZeRO over dp·cp).

Every expected number is a hand computation written here from the sources' shapes and
defaults, never a value read back from the code: Llama 3.1 8B (config.json: hidden 4096,
32 layers, 32 heads, 8 KV heads, head 128, MLP 14336, vocabulary 128,256), torchtitan's
published run (benchmarks/llama3_h100_202412_torchtitan.md, Table 1: FSDP 8, local batch 2,
sequence 8192, 82.4 GiB peak memory), cuBLAS's recommended Hopper workspace (32 MiB).
"""
from __future__ import annotations

import pytest

from conftest import qval
from dsl.testing import evaluate_snippet

GiB = 2 ** 30
MiB = 2 ** 20
# Llama 3.1 8B shapes (config.json)
H, L, A, KV, DH, F, V = 4096, 32, 32, 8, 128, 14336, 128_256
B, S = 2, 8192                     # torchtitan's local batch 2 × 8192 tokens
T = B * S                          # 16,384 tokens per GPU


def _plan(name="p", gpus=8, layout="", extra="", gb=None):
    gb = gb or 2 * gpus
    return f"""
        import "@catalog/hardware.plan"
        model llama8 from "@catalog/hf/Llama-3.1-8B.json"
        device h100_96 extends h100_sxm {{ memory = 96 GB; mem_bw = 2400 GB/s }}
        workload w {{ tokens = 1e12 token; seq_len = 8192 token; global_batch = {gb} seq }}
        plan {name} {{
          model = llama8; workload = w; device = h100_96
          gpus = {gpus}; gpus_per_host = 8; micro_batch = 2 seq
          use memory {{ weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }}
          use layout {{ zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g; {layout} }}
        }}
        {extra}
    """


@pytest.fixture(scope="module")
def tt8():
    """torchtitan's 8B FSDP run on 8 GPUs as the corpus prices it, with op-level and with
    Korthikanti-selective recomputation, and without resharding after forward."""
    text = _plan("op", layout='recompute = "op"', extra="""
        plan sel extends op { use layout { zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g
                                           recompute = "selective" } }
        plan nonrec extends op { use layout { zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g
                                             recompute = "none" } }
        plan kept extends op { use layout { zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g
                                            recompute = "op"; reshard_after_forward = false } }
        plan fused extends op { use layout { zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g
                                             recompute = "op"; loss = "fused" } }
        plan compiled extends op { use layout { zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g
                                                recompute = "op"; loss = "compiled" } }
    """)
    return evaluate_snippet(text)


def test_loss_memory_is_fourteen_bytes_per_logit(tt8):
    # 16-bit logits (2 B, cached) + FP32 log-softmax output, its gradient, the input gradient (3 × 4 B)
    # = 14 B × 2 × 8192 × 128,256 logits = 29,418,848,256 B (27.40 GiB)
    assert qval(tt8, "op.loss_memory") == pytest.approx(14 * 2 * 8192 * 128_256, rel=1e-12)
    assert 14 * 2 * 8192 * 128_256 == 29_418_848_256


def test_fused_loss_drops_the_logits(tt8):
    # runtime(fp32) − runtime(fused) = the whole 14 B per logit; memory_per_gpu keeps its one FP32 copy
    d = qval(tt8, "op.runtime_memory") - qval(tt8, "fused.runtime_memory")
    assert d == pytest.approx(29_418_848_256, rel=1e-12)
    assert qval(tt8, "op.memory_per_gpu") == pytest.approx(qval(tt8, "fused.memory_per_gpu"), rel=1e-12)


def test_compiled_loss_keeps_the_16_bit_logits_and_their_gradient(tt8):
    # torch.compile fuses the FP32 cast and the log-softmax: the backward holds the 16-bit logits
    # and writes their 16-bit gradient, 2 + 2 B × 2 × 8192 × 128,256 = 8,405,385,216 B (7.83 GiB);
    # the rest of the step's memory is the fp32 loss's
    assert qval(tt8, "compiled.loss_memory") == pytest.approx(4 * 2 * 8192 * 128_256, rel=1e-12)
    assert 4 * 2 * 8192 * 128_256 == 8_405_385_216
    d = qval(tt8, "op.runtime_memory") - qval(tt8, "compiled.runtime_memory")
    assert d == pytest.approx(10 * 2 * 8192 * 128_256, rel=1e-12)


def test_op_level_checkpointing_bytes_per_layer(tt8):
    # layer input 4096·2 + q 4096·2 + v 1024·2 + attention output 4096·2 + log-sum-exp 32·4
    # + gate (w1) 14336·2 + down (w2) 4096·2 = 8192 + 8192 + 2048 + 8192 + 128 + 28672 + 8192
    per_token = 8192 + 8192 + 2048 + 8192 + 128 + 28672 + 8192
    assert per_token == 63_616
    assert qval(tt8, "op.activation_per_layer") == pytest.approx(per_token * T, rel=1e-12)


def test_selective_with_flash_saves_nothing(tt8):
    # flash attention stores no s×s scores: selective recomputation (Korthikanti et al. 2022) has
    # nothing to drop.  Without recomputation a layer keeps, per token: two norm inputs and the QKV
    # and MLP inputs 4·4096·2 = 32,768; q, k, v (32 + 2·8)·128·2 = 12,288; the output projection's
    # input 32·128·2 = 8,192; the SwiGLU tensors 3·14336·2 = 86,016; the log-sum-exp 32·4 = 128
    none = 4 * 4096 * 2 + ((32 + 2 * 8) * 128 * 2 + 32 * 128 * 2 + 3 * 14336 * 2) + 32 * 4
    assert none == 139_392
    assert qval(tt8, "sel.activation_per_layer") == pytest.approx(none * T, rel=1e-12)
    assert qval(tt8, "nonrec.activation_per_layer") == pytest.approx(none * T, rel=1e-12)


def test_workspace(tt8):
    # cuBLAS's 32 MiB (Hopper) + FlashAttention-2's FP32 dQ accumulator: 4 B × 16384 × 32 × 128
    assert qval(tt8, "op.workspace_memory") == pytest.approx(32 * MiB + 4 * T * A * DH, rel=1e-12)


def test_reshard_after_forward_false_adds_the_gathered_parameters(tt8):
    # With resharding: 2 units' BF16 weights (computed + prefetched) and 1 unit's BF16 gradients,
    # a unit = N/32; without: all N weights stay gathered (+ the unit's gradients).
    # Difference = 2 B × (N − 2·N/32) = 2 B × N × 30/32.
    N = qval(tt8, "op.weights_memory") / 2          # BF16 weights: 2 B per parameter
    d = qval(tt8, "kept.gathered_memory") - qval(tt8, "op.gathered_memory")
    assert d == pytest.approx(2 * N * 30 / 32, rel=1e-12)
    assert qval(tt8, "kept.runtime_memory") - qval(tt8, "op.runtime_memory") == pytest.approx(d, rel=1e-12)
    # the book's memory_per_gpu does not move; one all-gather of the weights fewer per micro-batch:
    # volume(true) − volume(false) = (7/8) × 2 B × N (one micro-batch)
    assert qval(tt8, "kept.memory_per_gpu") == pytest.approx(qval(tt8, "op.memory_per_gpu"), rel=1e-12)
    dv = qval(tt8, "op.transfer_volume") - qval(tt8, "kept.transfer_volume")
    assert dv == pytest.approx(7 / 8 * 2 * N, rel=1e-12)


def test_torchtitan_8b_on_8_gpus_fits(tt8):
    # it ran (82.4 GiB max reserved on a 96 GB H100): never declared not to fit
    assert tt8.requirement("op", "fits_memory")["ok"]
    # runtime_memory is closer to the measurement than the Korthikanti-selective activations were
    assert abs(qval(tt8, "op.runtime_memory", "GiB") - 82.4) < abs(qval(tt8, "sel.memory_per_gpu", "GiB") - 82.4)


def test_runtime_is_the_sum_of_its_terms(tt8):
    # persistent + layers' activations + the layer the backward re-materialises + loss buffers +
    # gathered + workspace (allocator reserve 0): the layers: 32 × 63,616 B × 16,384 tokens; the
    # re-materialised layer, as without recomputation (norm inputs and the QKV/MLP inputs 4·h·2 B,
    # Q, K, V (32 + 2·8)·128·2 B, the o-projection input 32·128·2 B, the SwiGLU's three
    # intermediates 3·14,336·2 B, the log-sum-exp 32·4 B: 139,392 B per token) less what op-level
    # checkpointing keeps (63,616 B): 75,776 B × 16,384 tokens
    layers = 32 * 63_616 * T
    redo = (4 * 4096 * 2 + (32 + 16) * 128 * 2 + 32 * 128 * 2 + 3 * 14336 * 2 + 32 * 4 - 63_616) * T
    assert redo == 75_776 * T
    assert qval(tt8, "op.recompute_memory") == pytest.approx(redo, rel=1e-12)
    want = (qval(tt8, "op.persistent_memory") + layers + redo + 29_418_848_256 + qval(tt8, "op.gathered_memory")
            + 32 * MiB + 4 * T * A * DH)
    assert qval(tt8, "op.runtime_memory") == pytest.approx(want, rel=1e-12)


def test_allocator_reserve_is_a_share_of_the_allocated_peak():
    ws = evaluate_snippet(_plan("r", layout='recompute = "op"; allocator_reserve = 10 %'))
    base = evaluate_snippet(_plan("r", layout='recompute = "op"'))
    assert qval(ws, "r.runtime_memory") == pytest.approx(1.1 * qval(base, "r.runtime_memory"), rel=1e-12)


def test_zero_shards_over_dp_times_cp():
    # 8 GPUs, cp = 2 → dp = 4, ZeRO-1 over dp·cp = 8: W + G + (M + O)/8 = 2N + 2N + 12N/8
    ws = evaluate_snippet(_plan("c", layout='cp = 2; recompute = "op"').replace("zero = 3;", "zero = 1;"))
    N = qval(ws, "c.weights_memory") / 2
    assert qval(ws, "c.persistent_memory") == pytest.approx((4 + 12 / 8) * N, rel=1e-12)


def test_pipeline_stage_gathers_once_per_step():
    # 16 GPUs, pp = 2 → dp = 8, global batch 64 → m = 64 / (8·2) = 4 micro-batches.  ZeRO-3
    # volume: the stage's weights gathered once and its gradients reduce-scattered once per step:
    # (7/8)·(2 B + 2 B)·N/2 — not 4 × (7/8)·(2·2 B + 2 B)·N/2 per micro-batch
    ws = evaluate_snippet(_plan("pp", gpus=16, gb=64, layout='pp = 2; recompute = "op"'))
    N = qval(ws, "pp.weights_memory") / 2
    assert qval(ws, "pp.micro_batches") == 4
    assert qval(ws, "pp.transfer_volume") == pytest.approx(7 / 8 * 4 * N / 2, rel=1e-12)
    # and holds the stage's unsharded weights and gradients for the step: (2 + 2) B × N/2
    assert qval(ws, "pp.gathered_memory") == pytest.approx(4 * N / 2, rel=1e-12)


@pytest.fixture(scope="module")
def sp8():
    """The 8B at TP 8 with sequence parallelism and full recomputation, as Megatron builds SP
    (shards kept) and as torchtitan's DTensor plan builds it (gathered inputs kept), in BF16 and FP8."""
    tp = 'tp = 8; sequence_parallel = true; recompute = "full"'
    text = _plan("mega", layout=f'{tp}; framework = "megatron"', extra=f"""
        plan titan extends mega {{ use layout {{ zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g
                                                {tp}; framework = "torchtitan" }} }}
        plan mega8 extends mega {{ use layout {{ zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g
                                                {tp}; framework = "megatron"; matmul_precision = "fp8" }} }}
        plan titan8 extends mega {{ use layout {{ zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g
                                                 {tp}; framework = "torchtitan"; matmul_precision = "fp8" }} }}
        plan titan_none extends mega {{ use layout {{ zero = 3; efficiency = "roofline"; link = nvlink4
                                                     nic = roce_400g; tp = 8; sequence_parallel = true
                                                     recompute = "none"; framework = "torchtitan" }} }}
        plan mega_none extends mega {{ use layout {{ zero = 3; efficiency = "roofline"; link = nvlink4
                                                    nic = roce_400g; tp = 8; sequence_parallel = true
                                                    recompute = "none"; framework = "megatron" }} }}
    """)
    return evaluate_snippet(text)


def test_dtensor_sp_keeps_the_gathered_inputs_of_the_recomputed_layer_and_the_head(sp8):
    # torchtitan's TP plan all-gathers the attention and MLP inputs (PrepareModuleInput Shard(1) ->
    # Replicate) and the LM head's (ColwiseParallel(input_layouts=Shard(1))); autograd keeps the
    # gathered copies.  Megatron keeps the shards (T·h·2/8 each).  BF16, T = 2 × 8192:
    # re-materialised layer 2·T·h·(2 − 2/8) = 3.5·T·h, head input T·h·2 → 5.5·T·h more at the peak
    # (and the vocabulary-parallel loss's 4 B more per logit: test_dtensor_loss_parallel_...)
    d = qval(sp8, "titan.runtime_memory") - qval(sp8, "mega.runtime_memory")
    assert d == pytest.approx(5.5 * T * H + 4 * T * V / 8, rel=1e-12)
    # Float8 TP casts before the gather: the kept copies are 1 B (2·T·h·(1 − 2/8) = 1.5·T·h); the
    # head stays BF16 (torchtitan converts every linear but `output`): 2·T·h → 3.5·T·h
    d8 = qval(sp8, "titan8.runtime_memory") - qval(sp8, "mega8.runtime_memory")
    assert d8 == pytest.approx(3.5 * T * H + 4 * T * V / 8, rel=1e-12)


def test_dtensor_loss_parallel_holds_eighteen_bytes_per_logit(sp8):
    # DTensor's loss_parallel (torchtitan at TP > 1) fuses the nll-loss and log-softmax backward as
    # (grad_input + exp(x)) * grad_output from a zero-filled FP32 grad_input: saved output, zeros,
    # their sum with exp(x) and the product, 4 × 4 B, + the cached 16-bit logits 2 B = 18 B per logit
    # over T·V/8 logits, + the head's gathered BF16 input T·h·2; Megatron's unfused count is 14 B
    assert qval(sp8, "titan.loss_memory") == pytest.approx(18 * T * V / 8 + 2 * T * H, rel=1e-12)
    assert qval(sp8, "mega.loss_memory") == pytest.approx(14 * T * V / 8, rel=1e-12)
    assert 18 * T * V // 8 == 4_728_029_184


def _pp_plans(loss):
    """The 8B on 16 GPUs, pp = 2 → dp = 8, 1F1B, global batch 64 → m = 64 / (8·2) = 4 micro-batches
    of 2 × 8192 tokens, op-level checkpointing; as torch.distributed.pipelining (torchtitan) and as
    Megatron-LM run it."""
    lay = f'pp = 2; schedule = "1f1b"; recompute = "op"; loss = "{loss}"'
    return evaluate_snippet(_plan("mega", gpus=16, gb=64, layout=f'{lay}; framework = "megatron"', extra=f"""
        plan titan extends mega {{ use layout {{ zero = 3; efficiency = "roofline"; link = nvlink4; nic = roce_400g
                                                {lay}; framework = "torchtitan" }} }}"""))


def test_torch_pipelining_keeps_receive_buffers_and_outputs_on_the_first_rank():
    # a stage boundary carries T·h·2 = 16,384 × 4096 × 2 = 134,217,728 B (no SP at tp = 1); the first
    # rank holds a gradient-receive buffer per micro-batch (m = 4) and the outputs of its forwards in
    # flight (min(p, m) = 2): 6 × 134,217,728 B.  With a fused loss the last rank keeps no logits and
    # the first rank's peak (2 micro-batches × 16 layers of op-level checkpoints) is the step's, so
    # the runtime grows by exactly that; Megatron allocates each receive and frees sent outputs
    ws = _pp_plans("fused")
    Bio = T * H * 2
    assert Bio == 134_217_728
    assert qval(ws, "titan.pipeline_memory") == pytest.approx(6 * Bio, rel=1e-12)
    assert not ws.has("mega.pipeline_memory")
    d = qval(ws, "titan.runtime_memory") - qval(ws, "mega.runtime_memory")
    assert d == pytest.approx(6 * Bio, rel=1e-12)


def test_torch_pipelining_last_rank_keeps_every_micro_batchs_logits():
    # with the FP32 loss the last rank's peak (one micro-batch's 16 layers, the loss's 14 B per logit)
    # is the step's in both; torch.distributed.pipelining adds there the m − 1 = 3 receive buffers
    # beyond the in-flight input, 3 × 134,217,728 B, and the 3 earlier micro-batches' 16-bit logits
    # it keeps until the step returns them, 3 × 16,384 × 128,256 × 2 = 12,608,077,824 B
    ws = _pp_plans("fp32")
    d = qval(ws, "titan.runtime_memory") - qval(ws, "mega.runtime_memory")
    assert 3 * T * V * 2 == 12_608_077_824
    assert d == pytest.approx(3 * T * H * 2 + 12_608_077_824, rel=1e-12)


def test_dtensor_sp_without_recomputation_keeps_them_in_every_layer(sp8):
    # no recomputation: each of the 32 layers keeps its two gathered inputs, 3.5·T·h more per layer
    d = qval(sp8, "titan_none.activation_memory") - qval(sp8, "mega_none.activation_memory")
    assert d == pytest.approx(L * 3.5 * T * H, rel=1e-12)

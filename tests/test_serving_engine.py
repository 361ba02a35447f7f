"""Serving memory on an engine's terms (`use engine`, engine presets in specs/catalog/engines.plan).

Validation: the KV-cache sizes vLLM printed at start-up in public logs
(specs/data/serving/vllm-kv-blocks.csv; each row's thread in its README) are matched within 5 %
by the plans of specs/data/serving/vllm-kv-blocks.plan.  Hand computations below repeat the
budget u·M − W − A − R from the models' published shapes.
"""
from __future__ import annotations

import csv
import math

import pytest

import dsl
from conftest import REPO_ROOT, qval, run_cli
from dsl.syntax.diagnostics import PlanError

DATA = REPO_ROOT / "specs" / "data" / "serving"
GIB = 2 ** 30
H100 = 79.22 * GIB          # an H100 80GB as CUDA reports it: vLLM PR #12126 "total_gpu_memory (79.22GiB)"
ROWS = list(csv.DictReader((DATA / "vllm-kv-blocks.csv").open(encoding="utf-8")))

HEAD = '''import "@catalog/hardware.plan"
import "@catalog/models.plan"
import "@catalog/engines.plan"
'''


@pytest.fixture(scope="module")
def logs():
    return dsl.load(DATA / "vllm-kv-blocks.plan")


def _ids(rows):
    return [r["row"] for r in rows]


@pytest.mark.parametrize("row", [r for r in ROWS if r["logged_gpu_blocks"]],
                         ids=_ids(r for r in ROWS if r["logged_gpu_blocks"]))
def test_logged_gpu_blocks_within_5_percent(logs, row):
    logged = int(row["logged_gpu_blocks"])
    got = qval(logs, f"{row['row']}.kv_blocks")
    assert got == pytest.approx(logged, rel=0.05), (
        f"{row['source']}: {row['model']} on {row['gpu']} (vLLM {row['vllm']}, max_model_len "
        f"{row['max_model_len']}) logged '# GPU blocks: {logged}', the model gives {got:.0f}")


@pytest.mark.parametrize("row", [r for r in ROWS if r["logged_kv_cache_gib"]],
                         ids=_ids(r for r in ROWS if r["logged_kv_cache_gib"]))
def test_logged_kv_cache_size_within_5_percent(logs, row):
    logged = float(row["logged_kv_cache_gib"])
    got = qval(logs, f"{row['row']}.kv_budget", "GiB")
    assert got == pytest.approx(logged, rel=0.05), f"{row['source']}: logged {logged} GiB of KV cache, got {got:.3f}"


def test_rows_run_under_the_logged_settings(logs):
    for r in ROWS:
        p = r["row"]
        assert logs.python_value(f"{p}.engine.engine").name == r["engine"], p
        assert qval(logs, f"{p}.max_model_len", "token") == int(r["max_model_len"]), p
        assert qval(logs, f"{p}.serving_tp") == int(r["tp"]), p
        assert qval(logs, f"{p}.gpu_memory_utilization") == float(r["gpu_memory_utilization"]), p
        assert qval(logs, f"{p}.block_size", "token") == int(r["block_size"]), p
        assert qval(logs, f"{p}.max_num_seqs", "seq") == int(r["max_num_seqs"]), p
        assert qval(logs, f"{p}.runtime_overhead", "GiB") == pytest.approx(float(r["non_torch_memory_gib"]),
                                                                            abs=1e-9), p


@pytest.mark.parametrize("row", [r for r in ROWS if r["logged_activation_gib"]],
                         ids=_ids(r for r in ROWS if r["logged_activation_gib"]))
def test_logged_activation_peak_within_5_percent(logs, row):
    """The profiled peak ("PyTorch activation peak memory" / "Peak activation memory"): at
    8,192 tokens (vLLM 0.6.5, 256 sequences) and on the V1 engine's 1,024 sequences of an H100
    the sampler's pass over max_num_seqs × vocabulary logits dominates, 40 B per logit."""
    logged = float(row["logged_activation_gib"])
    got = qval(logs, f"{row['row']}.activation_reserve", "GiB")
    assert got == pytest.approx(logged, rel=0.05), f"{row['source']}: logged {logged} GiB, got {got:.3f}"


def test_logged_weights_per_gpu(logs):
    # PR #10511 prints 14.96 GiB at TP 1 and 7.48 GiB at TP 2 (the last digit printed: ±0.005)
    assert qval(logs, "pr10511_llama3_8b_tp1.weights_per_gpu", "GiB") == pytest.approx(14.96, abs=0.005)
    assert qval(logs, "pr10511_llama3_8b_tp2.weights_per_gpu", "GiB") == pytest.approx(7.48, abs=0.005)
    # issue #10517 prints 14.9888 (GiB): the parameters plus vLLM's rotary cos/sin table, which is
    # not a weight here — Llama-3.1's 131,072 positions × 128 × 2 B (to the last printed digit)
    rotary = 131072 * 128 * 2
    got = (qval(logs, "i10517_llama31_8b_20k.weights_per_gpu") + rotary) / GIB
    assert got == pytest.approx(14.9888, abs=5e-5)


def test_capacity_falls_with_max_model_len_and_29k_does_not_start(logs):
    """Issue #10517: at 29,000 tokens vLLM stops with 'the maximum number of tokens that can be
    stored in KV cache (23648)'; concurrency 1.56x at 20,000 and 0.82x at 29,000."""
    t20, t29 = qval(logs, "i10517_llama31_8b_20k.kv_tokens"), qval(logs, "i10517_llama31_8b_29k.kv_tokens")
    assert t29 < t20
    assert t29 == pytest.approx(23648, rel=0.05)
    assert qval(logs, "i10517_llama31_8b_20k.kv_sequences", "seq") == pytest.approx(1.56, rel=0.05)
    assert qval(logs, "i10517_llama31_8b_29k.kv_sequences", "seq") == pytest.approx(0.82, rel=0.05)
    assert logs["i10517_llama31_8b_20k"].requirements["holds_max_model_len"] is True
    assert logs["i10517_llama31_8b_29k"].requirements["holds_max_model_len"] is False


def test_the_forward_term_is_the_logged_slope(logs):
    # issue #10517: peak_torch_memory 17.06 → 17.98 GiB from 20,000 to 29,000 tokens, i.e.
    # 0.92 GiB / 9,000 tokens; Llama-3.1-8B: 2 B · (3·14,336 + 3·4,096) = 110,592 B per token
    slope = (qval(logs, "i10517_llama31_8b_29k.activation_reserve") -
             qval(logs, "i10517_llama31_8b_20k.activation_reserve")) / 9000
    assert slope == 2 * (3 * 14336 + 3 * 4096)
    assert slope * 9000 / GIB == pytest.approx(17.98 - 17.06, abs=0.01)


def _eval(write_plan, body):
    return dsl.load(write_plan(HEAD + body))


def test_hand_computed_budget_qwen3_8b_h100(write_plan):
    ws = _eval(write_plan, '''plan a {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; max_model_len = 32768 token }
}''')
    params, V, h = 8_190_735_360, 151_936, 4096           # Qwen3-8B (V is a multiple of 64)
    W = 2 * params
    kv = 36 * 2 * 8 * 128 * 2                              # 147,456 B per token
    T, S = 8192, 1024                                      # vLLM server defaults on a GPU of >= 70 GiB (not A100)
    A = max(T * 2 * (3 * 12288 + 3 * h), S * V * 40)       # the sampler pass dominates
    M = H100
    budget = 0.9 * M - W - A - 0.13 * GIB                  # the V1 preset's non-PyTorch memory
    blocks = math.floor(budget / (16 * kv))
    assert qval(ws, "a.weights_per_gpu") == W
    assert qval(ws, "a.kv_bytes_per_token") == kv
    assert qval(ws, "a.activation_reserve") == A
    assert qval(ws, "a.kv_budget") == pytest.approx(budget, rel=1e-12)
    assert qval(ws, "a.kv_blocks") == blocks
    assert qval(ws, "a.kv_tokens") == blocks * 16
    assert qval(ws, "a.kv_sequences", "seq") == pytest.approx(blocks / (32768 / 16), rel=1e-12)
    assert qval(ws, "a.serving_gpus") == 1


def test_tensor_parallel_shards_a_70b_model(write_plan):
    ws = _eval(write_plan, '''plan four {
  model = llama31_70b; device = a100_sxm_80gb
  use engine { engine = vllm; tp = 4; replicas = 2; max_model_len = 8192 token }
}''')
    params, V, h = 70_553_706_496, 128_256, 8192           # Llama-3.1-70B
    W = 2 * params / 4                                     # blocks, embedding and head split 4 ways
    kv = 80 * 2 * (8 // 4) * 128 * 2                       # two of the 8 KV heads per GPU: 81,920 B
    A = max(2048 * 2 * (3 * 28672 / 4 + 3 * h), 256 * V * 40)
    budget = 0.9 * 80e9 - W - A - (0.13 + 0.41) * GIB      # the V1 preset's non-PyTorch memory + TP buffers
    assert qval(ws, "four.weights_per_gpu") == pytest.approx(W, rel=1e-12)
    assert qval(ws, "four.weights_per_gpu", "GiB") == pytest.approx(32.85, abs=0.005)
    assert qval(ws, "four.kv_bytes_per_token") == kv
    assert qval(ws, "four.kv_budget") == pytest.approx(budget, rel=1e-12)
    assert qval(ws, "four.kv_blocks") == math.floor(budget / (16 * kv))
    assert qval(ws, "four.serving_gpus") == 8


def test_70b_on_one_a100_is_a_located_error(write_plan):
    f = write_plan(HEAD + '''plan one {
  model = llama31_70b; device = a100_sxm_80gb
  use engine { engine = vllm; max_model_len = 8192 token }
}''')
    code, out, err = run_cli("eval", f)
    assert code == 1 and "Traceback" not in err
    first = err.splitlines()[0]
    assert f"{f.name}:6:7: error[does-not-fit]: model 'llama31_70b' does not fit 1 × a100_sxm_80gb" in first
    # the numbers: 2 B × 70.55 B params = 131.42 GiB of weights against 0.9 × 80 GB = 67.06 GiB
    assert "131.42 GiB" in err and "0.9 × 74.51 GiB" in err and "KV budget -" in err
    assert "hint:" in err and "tp = 4" in err and 'weights = "int4"' in err
    with pytest.raises(PlanError):
        dsl.load(f)


def test_the_does_not_fit_error_counts_every_gpu_of_a_pipeline(write_plan):
    # tp 1 × pp 2: half of Llama 3.1 70B's 131.42 GiB per GPU (65.7 GiB) leaves no KV budget in
    # 0.9 × 74.51 GiB once the activations and runtime are reserved; the engine spans 2 GPUs
    f = write_plan(HEAD + '''plan two {
  model = llama31_70b; device = a100_sxm_80gb
  use engine { engine = vllm; tp = 1; pp = 2; max_model_len = 8192 token }
}''')
    code, out, err = run_cli("eval", f)
    assert code == 1 and "Traceback" not in err
    assert "does not fit 2 × a100_sxm_80gb (tp 1 × pp 2) under engine 'vllm'" in err.splitlines()[0], err


def test_kv_heads_replicate_when_tp_exceeds_them(write_plan):
    ws = _eval(write_plan, '''plan t16 {
  model = llama31_70b; device = h100_sxm
  use engine { engine = vllm; tp = 16; max_model_len = 8192 token }
}''')
    # 8 KV heads over 16 ranks: each rank caches one whole head (vLLM replicates them)
    assert qval(ws, "t16.kv_bytes_per_token") == 80 * 2 * 1 * 128 * 2
    # and holds its K and V projections: 2·h·d_h per layer beyond the 1/16 share
    split = 2 * 70_553_706_496 / 16
    extra = 2 * 80 * 2 * 8192 * 128 * (1 - 8 / 16)
    assert qval(ws, "t16.weights_per_gpu") == pytest.approx(split + extra, rel=1e-12)


def test_pipeline_parallel_splits_layers(write_plan):
    ws = _eval(write_plan, '''plan p2 {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; pp = 2; max_model_len = 8192 token }
}''')
    params, emb = 8_190_735_360, 151_936 * 4096
    blocks = params - 2 * emb
    assert qval(ws, "p2.weights_per_gpu") == pytest.approx(2 * (blocks / 2 + emb), rel=1e-12)
    assert qval(ws, "p2.kv_bytes_per_token") == 18 * 2 * 8 * 128 * 2
    assert qval(ws, "p2.serving_gpus") == 2


def test_latent_attention_caches_the_latent_on_every_rank(write_plan):
    ws = _eval(write_plan, '''plan ds {
  model = deepseek_v3; device = h200
  use engine { engine = vllm; tp = 8; max_model_len = 8192 token; weights = "fp8"; kv = "fp8" }
}''')
    # DeepSeek-V3: 61 layers of r_kv + d_r = 512 + 64 cached elements, not split over TP
    assert qval(ws, "ds.kv_bytes_per_token") == 61 * (512 + 64) * 1


def test_sliding_window_layers_hold_only_the_window(write_plan):
    ws = _eval(write_plan, '''model swa { layers = 4; hidden = 1024; ffn = 4096; heads = 8; kv_heads = 8; vocab = 32000
  sliding_window = 1024; local_layers = 2 }
plan w {
  model = swa; device = h100_sxm
  use engine { engine = vllm; max_model_len = 8192 token }
}''')
    blocks = qval(ws, "w.kv_blocks")
    # two full layers hold 8,192 tokens (512 blocks' worth), two windowed ones 1,024 (64)
    assert qval(ws, "w.kv_sequences", "seq") == pytest.approx(blocks * 4 / (2 * 512 + 2 * 64), rel=1e-12)


def test_sglang_and_trtllm_budgets(write_plan):
    ws = _eval(write_plan, '''plan s {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = sglang; max_model_len = 32768 token }
}
plan t {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = trtllm; max_model_len = 8192 token }
}''')
    W = 2 * 8_190_735_360
    # SGLang: mem_fraction_static covers weights and KV; activations live in the rest
    assert qval(ws, "s.kv_budget") == pytest.approx(0.88 * H100 - W, rel=1e-12)
    assert qval(ws, "s.kv_tokens") == math.floor((0.88 * H100 - W) / (36 * 2 * 8 * 128 * 2))   # page of 1
    # TensorRT-LLM: 90 % of what is free after the weights and the 8,192-token activations
    A = 8192 * 2 * (3 * 12288 + 3 * 4096)
    assert qval(ws, "t.kv_budget") == pytest.approx(0.9 * (H100 - W - A), rel=1e-12)
    assert qval(ws, "t.block_size", "token") == 32


def test_block_knobs_override_the_preset(write_plan):
    ws = _eval(write_plan, '''plan a {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; max_model_len = 8192 token; gpu_memory_utilization = 0.95; block_size = 32 token
               max_num_seqs = 64 seq; max_num_batched_tokens = 16384 token }
}''')
    A = max(16384 * 2 * (3 * 12288 + 3 * 4096), 64 * 151_936 * 40)
    assert qval(ws, "a.activation_reserve") == A
    assert qval(ws, "a.kv_budget") == pytest.approx(0.95 * H100 - 2 * 8_190_735_360 - A - 0.13 * GIB, rel=1e-12)
    assert qval(ws, "a.kv_tokens") % 32 == 0 and qval(ws, "a.max_num_seqs", "seq") == 64


@pytest.mark.parametrize("tp,needle", [(3, "does not divide the 32 query heads"),
                                       (16, "neither divides nor is a multiple of the 8 KV heads")])
def test_tp_must_split_whole_heads(write_plan, tp, needle):
    body = '''model odd { layers = 2; hidden = 1024; ffn = 2048; heads = 32; kv_heads = 12; vocab = 1000 }
plan a {
  model = MODEL; device = h100_sxm
  use engine { engine = vllm; tp = TP; max_model_len = 4096 token }
}'''
    model = "qwen3_8b" if tp == 3 else "odd"
    if tp == 16:
        needle = "neither divides nor is a multiple of the 12 KV heads"
    f = write_plan(HEAD + body.replace("MODEL", model).replace("TP", str(tp)))
    code, out, err = run_cli("eval", f)
    assert code == 1 and "error[out-of-range]" in err and needle in err and "Traceback" not in err


@pytest.mark.parametrize("where,value", [("block", "0"), ("block", "-0.1"), ("engine", "0"), ("engine", "-0.1")])
def test_memory_utilization_at_or_below_zero_is_out_of_range(write_plan, where, value):
    # (0, 1] as 1.5 is: reported at its own text, not as the budget it leaves (does-not-fit, with a hint
    # about max_model_len)
    body = '''engine mine extends vllm { gpu_memory_utilization = ENG }
plan a {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = mine; max_model_len = 8192 token BLK }
}'''
    body = body.replace("ENG", value if where == "engine" else "0.9")
    body = body.replace("BLK", f"; gpu_memory_utilization = {value}" if where == "block" else "")
    code, out, err = run_cli("eval", write_plan(HEAD + body))
    assert code == 1 and "Traceback" not in err
    assert f"gpu_memory_utilization' = {value} is outside (0, 1]" in err and "does-not-fit" not in err
    assert err.count("error[") == 1


def _eval_engine(write_plan, fields):
    """`plan eval` of one plan serving qwen3_8b on an H100 SXM under `use engine { engine = vllm; FIELDS }`
    (the block on line 6 of the file): (exit code, stdout, stderr)."""
    return run_cli("eval", write_plan(HEAD + "plan a {\n  model = qwen3_8b; device = h100_sxm\n"
                                      f"  use engine {{ engine = vllm; {fields} }}\n}}"))


def test_tp_beyond_one_host_warns(write_plan):
    code, out, err = _eval_engine(write_plan, "tp = 16; link = nvlink4; max_model_len = 8192 token")
    assert code == 0 and "warning[tp-across-hosts]: tp = 16 exceeds the 8 GPUs of one host" in err


def test_block_larger_than_the_budget_is_located_at_block_size(write_plan):
    # one block of 10^12 tokens at 144 KiB per token (qwen3_8b, bf16) is ~1.4e8 GiB: the cache holds no block
    code, out, err = _eval_engine(write_plan, "max_model_len = 8192 token; block_size = 1e12 token")
    assert code == 1 and "Traceback" not in err
    assert "error[out-of-range]: one KV block of block_size = 1,000,000,000,000 tokens" in err
    assert "the cache holds no block" in err and "default is 16" in err and "t.plan:6:72:" in err   # block_size


def test_negative_memory_is_shown_in_its_written_unit(write_plan):
    code, out, err = _eval_engine(write_plan, "max_model_len = 8192 token; non_torch_memory = -100 GiB")
    assert code == 1 and "'non_torch_memory' = -100 GiB is outside [0, inf)" in err and "e+11" not in err


def test_context_longer_than_max_model_len_warns(write_plan):
    code, out, err = _eval_engine(write_plan, "max_model_len = 8192 token; context = 32768 token")
    assert code == 0 and "warning[suspicious]: context = 32,768 tokens is longer than max_model_len = 8,192" in err


def test_standard_names_for_the_other_serving_blocks(write_plan):
    ws = _eval(write_plan, '''plan a {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; tp = 2; max_model_len = 8192 token }
}''')
    for name in ("weights_per_gpu", "kv_bytes_per_token", "kv_budget", "kv_blocks", "kv_tokens", "kv_sequences",
                 "serving_gpus", "block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
                 "serving_tp", "serving_pp"):
        assert f"a.{name}" in ws.nodes, name
    assert qval(ws, "a.max_num_batched_tokens", "token") == 8192 and qval(ws, "a.serving_tp") == 2   # an H100


@pytest.mark.parametrize("device,seqs,tokens", [("h100_sxm", 1024, 8192), ("h200", 1024, 8192), ("b200", 1024, 8192),
                                                ("a100_sxm_80gb", 256, 2048), ("l40s", 256, 2048),
                                                ("rtx4090", 256, 2048)])
def test_vllm_server_defaults_follow_the_gpu(write_plan, device, seqs, tokens):
    """vLLM's server takes max_num_seqs 1,024 and 8,192 batched tokens on a GPU whose total memory
    is at least 70 GiB and whose name does not contain "a100" (vllm/engine/arg_utils.py,
    get_batch_defaults), 256 and 2,048 otherwise; a value in the block overrides either, and the
    pre-V1 preset keeps 256 on every GPU."""
    ws = _eval(write_plan, f'''plan a {{
  model = qwen3_8b; device = {device}
  use engine {{ engine = vllm; max_model_len = 8192 token }}
}}
plan b extends a {{ use engine {{ max_num_seqs = 64 seq; max_num_batched_tokens = 4096 token }} }}
plan c extends a {{ use engine {{ engine = vllm_v0 }} }}''')
    assert qval(ws, "a.max_num_seqs", "seq") == seqs and qval(ws, "a.max_num_batched_tokens", "token") == tokens
    assert qval(ws, "b.max_num_seqs", "seq") == 64 and qval(ws, "b.max_num_batched_tokens", "token") == 4096
    assert qval(ws, "c.max_num_seqs", "seq") == 256 and qval(ws, "c.max_num_batched_tokens", "token") == 8192


def test_worked_case_qwen3_8b():
    ws = dsl.load(REPO_ROOT / "specs" / "cases" / "serving-engine-qwen3-8b.plan")
    W = 2 * 8_190_735_360
    assert qval(ws, "h100_tp1.weights_per_gpu") == W and qval(ws, "h100_tp2.weights_per_gpu") == W / 2
    assert qval(ws, "h100_tp2.kv_bytes_per_token") == qval(ws, "h100_tp1.kv_bytes_per_token") / 2 == 73_728
    # TP 2 holds more than twice the tokens of one GPU: the freed weights go to the cache
    assert qval(ws, "h100_tp2.kv_tokens") > 2 * qval(ws, "h100_tp1.kv_tokens")
    assert qval(ws, "h100_2x.serving_gpus") == qval(ws, "h100_tp2.serving_gpus") == 2
    # FP8 on an L40S: 0.9 × 48 GB − 8.19 GB of weights − max(2,048 tokens' forward, 256 × V × 40 B) − 0.13 GiB
    A = max(2048 * 2 * (3 * 12288 + 3 * 4096), 256 * 151_936 * 40)
    assert qval(ws, "l40s_fp8.kv_budget") == pytest.approx(0.9 * 48e9 - W / 2 - A - 0.13 * GIB, rel=1e-12)
    # Qwen3-30B-A3B: 30,532,122,624 parameters (vocabulary 151,936, a multiple of 64), 48 layers
    # of 4 KV heads × 128; TP 2 halves both
    assert qval(ws, "moe_h100_tp2.weights_per_gpu") == 30_532_122_624
    assert qval(ws, "moe_h100_tp1.kv_bytes_per_token") == 48 * 2 * 4 * 128 * 2
    assert qval(ws, "moe_h100_tp2.kv_bytes_per_token") == 48 * 2 * 2 * 128 * 2
    assert ws["on_4090"].requirements["holds_max_model_len"] is False
    assert ws["h100_sglang"].requirements["holds_max_model_len"] is True


def test_decode_bound_simple_mode_without_room_is_a_located_error(write_plan):
    """`use decode_bound` keeps its simple pool (device memory − all weights, one full copy per
    card); a model whose weights exceed the card is an error there, not a negative pool."""
    f = write_plan(HEAD + '''plan p {
  model = llama31_70b; device = a100_sxm_80gb
  use decode_bound { batch = 8 seq; context = 2048 token }
}''')
    code, out, err = run_cli("eval", f)
    assert code == 1 and f"{f.name}:6:7: error[does-not-fit]:" in err and "Traceback" not in err
    # 2 B × 70,553,706,496 = 131.42 GiB of weights in 80 GB = 74.51 GiB
    assert "131.42 GiB of weights in 74.51 GiB" in err and "use engine" in err


def test_every_preset_field_and_serving_gpu_names_its_source(tmp_path):
    f = tmp_path / "c.plan"
    f.write_text(HEAD + "plan p { x = 1 s }\n", encoding="utf-8")
    cat = dsl.load(f)
    fields = [n for n, node in cat.nodes.items()
              if n.split(".")[0] in ("vllm", "vllm_v0", "sglang", "trtllm") and n.count(".") == 1
              and node.kind == "field" and node.span is not None and "engines.plan" in str(node.span.file)]
    assert len(fields) >= 40
    for n in fields:
        assert cat.nodes[n].source, n
    for dev in ("rtx_a6000", "rtx3090", "a100_sxm_40gb", "a100_pcie_80gb"):
        for fld in ("peak_flops", "memory", "mem_bw"):
            assert cat.nodes[f"{dev}.{fld}"].source, (dev, fld)
    # the totals CUDA reports, as the cited logs print them
    assert qval(cat, "rtx3090.cuda_memory", "GiB") == 23.58 and qval(cat, "rtx_a6000.cuda_memory", "GiB") == 47.54


def test_engine_and_decode_bound_in_one_plan_is_a_located_error(write_plan):
    f = write_plan(HEAD + '''plan p {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = vllm; max_model_len = 8192 token }
  use decode_bound { batch = 8 seq; context = 2048 token }
}''')
    code, out, err = run_cli("eval", f)
    assert code == 1 and f"{f.name}:6:7: error[duplicate]:" in err and "a plan of its own" in err
    assert err.count("error[") == 1


def test_weights_held_and_read_per_gpu_in_gib():
    """`use engine`'s `weights_per_gpu` is what one GPU holds; `use serving_step`'s
    `weights_read_per_gpu` what it reads per step (the LM head, not the embedding table), both in
    GiB.  Qwen3-8B (untied, vocabulary 151,936 × hidden 4,096 = 0.622 B per table) at tp 2:
    held ≈ params·2 B/2, read ≈ (params − one table)·2 B/2 (within 1 %: vocabulary padding)."""
    head = ('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\nimport "@catalog/engines.plan"\n')
    ws = dsl.load("t.plan", text=head + 'plan p { model = qwen3_8b; device = h100_sxm\n'
                  '  use engine { engine = vllm; tp = 2; max_model_len = 8192 token; link = nvlink4 }\n'
                  '  use serving_step { batch = 8 seq } }\n')
    params = qval(ws, "qwen3_8b.params", "param")
    table = 151936 * 4096
    assert qval(ws, "p.weights_per_gpu", "GiB") == pytest.approx(params * 2 / 2 / 2 ** 30, rel=0.01)
    assert qval(ws, "p.weights_read_per_gpu", "GiB") == pytest.approx((params - table) * 2 / 2 / 2 ** 30, rel=0.01)


def test_worked_case_engine_memory_tp():
    """specs/cases/serving-engine-memory-tp.plan: Llama 3.1 70B over 4 and 8 H100s under vLLM V1,
    vLLM 0.4 – 0.6 and SGLang, each number repeated by hand from the model's shape and the
    presets' cited constants (the case file's comment shows the arithmetic)."""
    ws = dsl.load(REPO_ROOT / "specs" / "cases" / "serving-engine-memory-tp.plan")
    params, V, h, f = 70_553_706_496, 128_256, 8192, 28672     # Llama-3.1-70B (V = 2,004 × 64)
    M = 79.22 * GIB                                            # h100_sxm.cuda_memory
    for tp in (4, 8):
        W = 2 * params / tp                                    # everything split tp ways
        kv = 80 * 2 * (8 // tp) * 128 * 2                      # 81,920 B at TP 4, 40,960 B at TP 8
        forward = 8192 * 2 * (3 * f / tp + 3 * h)              # 8,192 tokens through the FFN and residual
        for plan, seqs, runtime in ((f"vllm_tp{tp}", 1024, 0.13 + 0.41), (f"v0_tp{tp}", 256, 0.35 + 1.79)):
            A = max(forward, seqs * V * 40)                    # the sampler's pass dominates
            budget = 0.9 * M - W - A - runtime * GIB
            assert qval(ws, f"{plan}.weights_per_gpu") == pytest.approx(W, rel=1e-12), plan
            assert qval(ws, f"{plan}.kv_bytes_per_token") == kv, plan
            assert qval(ws, f"{plan}.activation_reserve") == A, plan
            assert qval(ws, f"{plan}.runtime_overhead", "GiB") == pytest.approx(runtime, rel=1e-12), plan
            assert qval(ws, f"{plan}.kv_budget") == pytest.approx(budget, rel=1e-12), plan
            assert qval(ws, f"{plan}.kv_blocks") == math.floor(budget / (16 * kv)), plan
        u = {4: 0.85, 8: 0.81}[tp]                             # SGLang's static fraction at this tp
        assert qval(ws, f"sglang_tp{tp}.gpu_memory_utilization") == u
        assert qval(ws, f"sglang_tp{tp}.kv_tokens") == math.floor((u * M - W) / kv)
    # the figures the case file's comment prints
    assert qval(ws, "vllm_tp4.kv_blocks") == 27_042 and qval(ws, "vllm_tp8.kv_blocks") == 80_999
    assert qval(ws, "v0_tp4.kv_blocks") == 28_738 and qval(ws, "v0_tp8.kv_blocks") == 84_390
    assert qval(ws, "sglang_tp4.kv_tokens") == 451_973 and qval(ws, "sglang_tp8.kv_tokens") == 1_251_505


@pytest.mark.parametrize("tp,fraction", [(1, 0.88), (2, 0.87), (3, 0.87), (4, 0.85), (6, 0.85), (8, 0.81),
                                         (16, 0.79)])
def test_sglang_fraction_follows_the_tp_table(write_plan, tp, fraction):
    """SGLang 0.3 – 0.4 server_args.py: mem_fraction_static 0.88, then 0.87, 0.85, 0.81, 0.79 from
    tp_size 2, 4, 8, 16 on; a fraction written in the block replaces the table."""
    model = "odd" if tp in (1, 3, 6) else "llama31_70b"
    odd = "model odd { layers = 2; hidden = 768; ffn = 2048; heads = 12; kv_heads = 12; vocab = 1000 }"
    ws = _eval(write_plan, odd + f'''
plan a {{
  model = {model}; device = h100_sxm; gpus_per_host = 16
  use engine {{ engine = sglang; tp = {tp}; max_model_len = 4096 token }}
}}
plan b extends a {{ use engine {{ gpu_memory_utilization = 0.9 }} }}''')
    assert qval(ws, "a.gpu_memory_utilization") == fraction
    assert qval(ws, "a.kv_budget") == pytest.approx(fraction * H100 - qval(ws, "a.weights_per_gpu"), rel=1e-12)
    assert qval(ws, "b.gpu_memory_utilization") == 0.9


@pytest.mark.parametrize("fields,needle", [
    ("gpu_memory_utilization_tp = [2, 4]", "has gpu_memory_utilization_tp but no gpu_memory_utilization_by_tp"),
    ("gpu_memory_utilization_tp = [2, 4]; gpu_memory_utilization_by_tp = [0.8]", "has 2 degrees but"),
    ("gpu_memory_utilization_tp = [4, 2]; gpu_memory_utilization_by_tp = [0.8, 0.7]", "whole, increasing"),
    ("gpu_memory_utilization_tp = [2.5]; gpu_memory_utilization_by_tp = [0.8]", "item 1 is 2.5"),
])
def test_a_bad_tp_fraction_table_is_a_located_error(write_plan, fields, needle):
    f = write_plan(HEAD + f'''engine mine extends vllm {{ {fields} }}
plan a {{
  model = qwen3_8b; device = h100_sxm
  use engine {{ engine = mine; tp = 2; max_model_len = 8192 token }}
}}''')
    code, out, err = run_cli("eval", f)
    assert code == 1 and "Traceback" not in err and needle in err, err
    assert f"{f.name}:4:" in err.splitlines()[0], err       # at the engine's field

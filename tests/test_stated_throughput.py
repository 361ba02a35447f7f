"""A stated throughput (``use layout { stated_tokens_per_s | stated_tflops; stated_flops }``):
the step is the measured rate's time, and the layout adds no bubble or communication to it.

Every expected number is worked out by hand in the comments:

* 64 sequences of 8,192 tokens at 20,000 tokens/s: 524,288 / 20,000 = 26.2144 s per step.
* Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM", §5.1): GPT-3 175B (96 layers, h = 12,288, s = 2,048, V = 51,200) on 1,024 A100s at
  140 TFLOP/s per GPU, batch 1,536, 300B tokens: "about 34 days" (their estimate 8·T·P/(n·X)).
  Counted as they count (recomputation included, ``stated_flops = "hardware"``), per token:
  4 forward passes of the blocks, 4·96·(24·h² + 2·h·(s + 1)) (QKV 6h², output 2h², MLP 16h², causal
  attention 2·h·(s+1)), plus 3 passes of the LM head, 3·2·h·V
  = 4·96·(3,623,878,656 + 50,356,224) + 3·1,258,291,200 = 1,414,681,067,520 FLOP/token;
  step = 1,536·2,048·1,414,681,067,520 / (1,024·140e12) = 31.042144567296 s;
  steps = ceil(300e9 / 3,145,728) = 95,368; train time 95,368·31.042144567296 s = 34.2642 days.
"""
from __future__ import annotations

import pytest

import dsl
from dsl.syntax.diagnostics import PlanError

from conftest import qval, run_cli

BASE = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e11 token; seq_len = 8192 token; global_batch = 64 seq }
plan base { model = llama31_70b; workload = w; device = h100_sxm
  gpus = 32; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 8; pp = 2; zero = 1; recompute = "full"; sequence_parallel = true
               link = nvlink4; nic = ib_ndr_400g }
}
plan tok extends base { use layout { stated_tokens_per_s = 20000 token/s } }
"""

GPT3 = """import "@catalog/hardware.plan"
model gpt3 { layers = 96; hidden = 12288; ffn = 49152; heads = 96; vocab = 51200; ffn_matrices = 2
  tied_embeddings = true; norm = "layernorm"; position_embeddings = 2048 }
workload w { tokens = 300e9 token; seq_len = 2048 token; global_batch = 1536 seq }
plan g { model = gpt3; workload = w; device = a100_sxm_80gb; gpus = 1024; micro_batch = 1 seq
  use memory { weights = "fp16"; grads = "fp16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 8; pp = 8; link = nvlink4; nic = nic_200g; recompute = "full"
               stated_tflops = 140 TFLOP/s; stated_flops = "hardware" }
}
"""


def _load(tmp_path, text, name="p.plan"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return dsl.load(p), p


def test_tokens_per_second_is_the_step_and_nothing_is_added(tmp_path):
    ev, _ = _load(tmp_path, BASE)
    assert qval(ev, "tok.step_time", "s") == pytest.approx(26.2144, rel=1e-12)
    assert qval(ev, "tok.compute_time", "s") == pytest.approx(26.2144, rel=1e-12)
    for q in ("bubble_time", "tp_comm", "comm_wait", "recompute_time", "dp_comm"):
        assert qval(ev, f"tok.{q}", "s") == 0
    # the layout still prices memory: the same as the device-priced plan of the same layout
    assert qval(ev, "tok.persistent_memory", "GiB") == qval(ev, "base.persistent_memory", "GiB")
    # steps and the training time follow from the stated step: ceil(1e11 / 524,288) = 190,735
    assert qval(ev, "tok.steps") == 190_735
    assert qval(ev, "tok.train_time", "s") == pytest.approx(190_735 * 26.2144, rel=1e-12)


def test_narayanan_gpt3_175b_in_34_days(tmp_path):
    ev, _ = _load(tmp_path, GPT3)
    assert qval(ev, "g.step_time", "s") == pytest.approx(31.042144567296, rel=1e-12)
    days = qval(ev, "g.train_time", "day")
    assert days == pytest.approx(95_368 * 31.042144567296 / 86_400, rel=1e-12)
    assert abs(days - 34) < 0.5                 # the paper's "about 34 days"


def test_a_stated_step_carries_no_prediction_band(tmp_path):
    _, p = _load(tmp_path, BASE)
    rc, out, err = run_cli("eval", p)
    assert rc == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("step_time"))
    assert line.split()[-1] == "26.21"           # tok's column, no "(−x % / +y %)" after it
    assert "'tok'" not in err                    # no unvalidated-band warning for it


@pytest.mark.parametrize("layout,code,where", [
    ("stated_tokens_per_s = 20000 token/s; stated_tflops = 400 TFLOP/s", "conflict", "stated_tflops"),
    ('efficiency = "roofline"; stated_tflops = 400 TFLOP/s', "conflict", "stated_tflops"),
    ('efficiency = "stated"', "missing-parameter", "efficiency"),
])
def test_contradictions_are_located_errors(tmp_path, layout, code, where):
    text = BASE.replace("stated_tokens_per_s = 20000 token/s", layout)
    p = tmp_path / "bad.plan"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(PlanError) as e:
        dsl.load(p)
    msg = str(e.value)
    assert f"error[{code}]" in msg and "bad.plan:10:" in msg and where in msg


def test_the_search_refuses_a_stated_throughput(tmp_path):
    _, p = _load(tmp_path, BASE + "plan s extends tok { use layout_search { tp = [4, 8] } }\n")
    rc, out, err = run_cli("search", p, "--plan", "s")
    assert rc != 0
    assert "error[search]" in err and "stated_tokens_per_s" in err and "Traceback" not in err
    assert "p.plan:10:" in err                  # located at the stated rate


def test_a_rate_above_the_device_peak_is_warned_of(tmp_path):
    # 4,000 TFLOP/s per GPU is above the H100's densest peak (FP8, 1,978.9 TFLOP/s): most likely a
    # cluster's rate typed as one GPU's
    text = BASE.replace("stated_tokens_per_s = 20000 token/s", "stated_tflops = 4000 TFLOP/s")
    _, p = _load(tmp_path, text)
    rc, out, err = run_cli("eval", p)
    assert rc == 0
    assert "warning[out-of-range]" in err and "1978.9 TFLOP/s" in err and "p.plan:10:" in err


def test_stated_flops_without_a_tflops_rate_is_unused(tmp_path):
    text = BASE.replace("stated_tokens_per_s = 20000 token/s", 'stated_tokens_per_s = 20000 token/s; stated_flops = "hardware"')
    _, p = _load(tmp_path, text)
    rc, out, err = run_cli("eval", p)
    assert rc == 0 and "warning[unused]" in err and "stated_flops" in err

"""Pipelines as they are built: layers that pp·virtual does not divide are split as evenly as
possible (no rejection), the LM head and loss run on the last stage, the embedding on the
first, ``balance = "compute"`` takes layers off the ends as Llama 3 405B did, and the layout
search prices every pipeline on the same schedule ``plan eval`` does.

Expected numbers are hand computations (in the comments) or the Llama 3 paper's layout
(The Llama 3 Herd of Models, 2024, §3.3.2: 126 layers on 16 pipeline stages, one layer
fewer on the first and the last stage) — never the code's own output."""
from __future__ import annotations

import pytest

import dsl
from conftest import run_cli
from plugins.training import layout_search as search
from plugins.training.layout_pipeline import split_layers


def _write(tmp_path, text, name="u.plan"):
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "a" / "b").mkdir(parents=True, exist_ok=True)
    f = tmp_path / "a" / "b" / name
    f.write_text(text.replace("@HW", str(root / "specs/catalog/hardware.plan"))
                 .replace("@HF", str(root / "specs/catalog/hf/Llama-3.1-405B.json")), encoding="utf-8")
    return f


# ---------------------------------------------------------------- the split
def test_even_as_possible_split_puts_the_light_chunks_at_the_ends():
    # 30 = 4·7 + 2: two chunks of 8, two of 7; the light ones at the ends (first, last)
    assert split_layers(30, 4) == [7, 8, 8, 7]
    # 126 = 16·7 + 14: fourteen chunks of 8, two of 7 — first and last
    assert split_layers(126, 16) == [7] + [8] * 14 + [7]
    # 33 = 4·8 + 1: one chunk of 9, in the middle after the ends and the second chunk took 8
    assert split_layers(33, 4) == [8, 8, 9, 8]
    assert split_layers(32, 4) == [8, 8, 8, 8]


def test_compute_balance_takes_layers_off_the_head():
    # head = 0.6 layer: 32 layers on 4 chunks stay [8, 8, 8, 8] (max 8.6); [8, 8, 9, 7] would be 9
    assert split_layers(32, 4, "compute", 0.0, 0.6) == [8, 8, 8, 8]
    # head = 1.2 layers: 30 layers; bottleneck 8 fits 8 + 8 + 8 + ⌊8 − 1.2⌋ = 30 → [8, 8, 8, 6]
    assert split_layers(30, 4, "compute", 0.0, 1.2) == [8, 8, 8, 6]
    # Llama 3 405B: head ≈ half a layer; bottleneck 8 holds 8·15 + 7 = 127 ≥ 126, the surplus
    # leaves the first stage (the earliest of the busiest): first and last hold 7, the 14 others 8
    assert split_layers(126, 16, "compute", 0.0, 0.5) == [7] + [8] * 14 + [7]


# ---------------------------------------------------------------- search = eval on an uneven split
PLAN30 = """
import "@HW"
model m30 { layers = 30; hidden = 4096; ffn = 16384; heads = 32; vocab = 50000; ffn_matrices = 2 }
link nvl { bandwidth = 300 GB/s }
workload w { tokens = 1e9 token; seq_len = 2048 token; global_batch = 64 seq }
plan u {
  model = m30; workload = w; device = a100_sxm_80gb; gpus = 32; gpus_per_host = 8; mfu = 40 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = 76 GiB }
  use layout { tp = 2; pp = 4; link = nvl; nic = nic_200g; nics_per_host = 8; latency = 10 us }
  use layout_search { tp = [2]; pp = [2, 4]; zero = [1, 3]; recompute = ["none", "full"]; sequence_parallel = ["off"] }
}
"""


def test_search_prices_30_layers_on_4_stages_and_agrees_with_eval(tmp_path):
    src = _write(tmp_path, PLAN30)
    ws = dsl.load(src)
    res = search.run(ws, "u")
    assert "pp_divides_layers" not in res.meta["rejections"]
    c = res.columns
    pp4 = [i for i in range(len(res)) if c["p"][i] == 4]
    assert pp4 and all(c["valid"][i] for i in pp4)
    assert all(res.row(i)["stage_layers"] == [7, 8, 8, 7] for i in pp4)
    # every pp = 4 candidate written back as a plan: the same step time and memory
    for i in pp4:
        res.best = i
        out = tmp_path / "a" / "b" / f"best{i}.plan"
        out.write_text(search.emit_plan([res], src, out), encoding="utf-8")
        assert "stage_layers = [7, 8, 8, 7]" in out.read_text()
        ev = dsl.load(out)
        row = res.row(i)
        assert float(ev.base_value("u_best.step_time")) == pytest.approx(row["step_s"], rel=1e-9)
        assert float(ev.base_value("u_best.runtime_memory")) == pytest.approx(row["memory_gib"] * 2 ** 30, rel=1e-9)


def test_search_text_says_the_split_is_uneven(tmp_path):
    src = _write(tmp_path, PLAN30.replace("pp = [2, 4]", "pp = [4]"))
    code, out, err = run_cli("search", src)
    assert code == 0, err
    assert "uneven stage_layers = [7, 8, 8, 7]" in out


# ---------------------------------------------------------------- the head on the last stage
PLAN_HEAD = """
import "@HW"
model small { layers = 6; hidden = 1024; ffn = 4096; heads = 8; vocab = 32000; ffn_matrices = 2 }
link nvl { bandwidth = 100 GB/s }
workload w { seq_len = 1024 token; global_batch = 2 seq }
plan h {
  model = small; workload = w; device = a100_sxm_80gb; gpus = 8; gpus_per_host = 8; mfu = 50 %
  micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 4; pp = 2; sequence_parallel = true; link = nvl }
}
"""


def test_last_stage_carries_the_lm_head_and_sends_are_priced_per_boundary(tmp_path):
    ev = dsl.load(_write(tmp_path, PLAN_HEAD))
    peak, mfu, t, p, m = float(ev.base_value("a100_sxm_80gb.peak_flops")), 0.5, 4, 2, 2
    s, b, h, V, L = 1024, 1, 1024, 32000, 6
    comp = float(ev.base_value("h.compute_time"))
    # the head's forward on one GPU of the last stage, one micro-batch: 2·h·V FLOP per token over tp
    head_f = 2 * h * V * s * b / (t * peak * mfu)
    # one layer's forward: the stage-average forward work less the head's share, over the layers
    # (compute_time = m·(L·(f+b) + head's f+b)/p per GPU, backward = 2 × forward)
    f_L = (comp * p / (3 * m) - head_f) / L
    # boundary message with sequence parallelism: b·s·h·2 B / tp over the 100 GB/s link, no latency
    c = b * s * h * 2 / t / 100e9
    # 1F1B, p = 2, m = 2, 3 layers per stage; the last stage is the slower (its layers + the head):
    # F0@0, c, then stage 1 runs F0 B0 F1 B1 back to back, c, B1@0
    stage0 = 3 * 3 * f_L                      # one micro-batch, forward + backward
    stage1 = 3 * 3 * f_L + 3 * head_f         # its layers' time + the head's time
    assert float(ev.base_value("h.pipeline_time")) == pytest.approx(
        3 * f_L + c + 2 * stage1 + c + 2 * 3 * f_L, rel=1e-9)
    assert stage1 - stage0 == pytest.approx(3 * head_f)


# ---------------------------------------------------------------- Llama 3 405B, TP8·PP16
PLAN405 = """
import "@HW"
model llama3_405b from "@HF"
workload pre { tokens = 15.6e12 token; seq_len = 8192 token; global_batch = 2048 seq }
plan meta {
  model = llama3_405b; workload = pre; device = h100_sxm; gpus = 16384; gpus_per_host = 8; mfu = 40 %
  use memory { weights = "bf16"; grads = "fp32"; master = "fp32"; optimizer = "adam"; usable = 76 GiB }
  use layout { tp = 8; pp = 16; zero = 1; sequence_parallel = true; recompute = "full"; balance = "compute"
               link = nvlink4; nic = nic_400g; nics_per_host = 8; latency = 10 us }
  use layout_search { tp = [8]; pp = [16]; zero = [1]; recompute = ["full"]; sequence_parallel = ["on"] }
}
"""


def test_llama3_405b_tp8_pp16_prices_with_one_layer_fewer_at_the_ends(tmp_path):
    src = _write(tmp_path, PLAN405)
    ev = dsl.load(src)
    assert float(ev.base_value("meta.step_time")) > 0
    res = search.run(dsl.load(src), "meta")
    assert res.meta["rejections"].get("pp_divides_layers", 0) == 0
    row = res.row(res.best)
    # 126 layers on 16 stages: the first and the last stage one layer fewer (7), the others 8
    assert row["stage_layers"] == [7] + [8] * 14 + [7]
    assert float(ev.base_value("meta.step_time")) == pytest.approx(row["step_s"], rel=1e-9)


# ---------------------------------------------------------------- bad stage_layers: a located error
def test_bad_stage_layers_is_a_located_error(tmp_path):
    src = _write(tmp_path, PLAN30.replace("pp = 4;", "pp = 4; stage_layers = [8, 8, 8, 8];"))
    code, out, err = run_cli("eval", src)
    assert code != 0
    assert "error[" in err and "stage_layers" in err and "Traceback" not in err
    assert "u.plan:" in err

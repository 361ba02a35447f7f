"""One training step: every route a user can take to the same design gives one answer.

Routes: ``use layout { zero = 3; link … }`` (the training step), ``use compute {}`` +
``use zero { … }`` (the older spelling, a thin alias of the same knobs), and either with
``use finish {}``.  Expected figures are independent hand computations written in the case
files' comments (specs/cases/cpt-qwen3-8b-4090.plan, specs/cases/training-llama70b-h100.plan).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from dsl.testing import evaluate_snippet
from tests.conftest import qval

ROOT = Path(__file__).resolve().parent.parent
CATALOG = f'import "{ROOT}/specs/catalog/hardware.plan"\nimport "{ROOT}/specs/catalog/models.plan"\n'

DESIGN_BASE = CATALOG + """
workload cpt { tokens = 100e9 token; seq_len = 8192 token; global_batch = 384 seq; deadline = 30 day; reserved = 5 day }
plan p {
  model = qwen3_8b; workload = cpt; device = rtx4090
  gpus = 48; gpus_per_host = 8; mfu = 40 %%; micro_batch = 1 seq; input_wait = 0.5 s
  use memory { transient = 10 GiB; usable = 22 GiB }
  use checkpoint { interval = 1800 s; write_bw = storage_7.bandwidth; restart = 120 s; device_mtbf = 1024 * 7.9 h }
  %s
}
"""
LINKS = "link = pcie4_x16; nic = nic_200g; nics_per_host = 8"
DESIGN_ROUTES = {
    "layout": f"use layout {{ zero = 3; {LINKS} }}",
    "layout+finish": f"use layout {{ zero = 3; {LINKS} }}\n use finish {{}}",
    "layout+compute+finish": f"use compute {{}}\n use layout {{ zero = 3; {LINKS} }}\n use finish {{}}",
    "compute+zero+finish": f"use compute {{}}\n use zero {{ stage = 3; {LINKS} }}\n use finish {{}}",
    "compute+zero": f"use compute {{}}\n use zero {{ stage = 3; {LINKS} }}",
}


@pytest.mark.parametrize("route", sorted(DESIGN_ROUTES))
def test_design_case_has_one_answer_on_every_route(route):
    ws = evaluate_snippet(DESIGN_BASE % DESIGN_ROUTES[route])
    # the design case's figures: step 52.8 s, finish 24.64 days, memory 2.54 + 10 GiB
    assert qval(ws, "p.step_time", "s") == pytest.approx(52.8, abs=0.05)
    assert qval(ws, "p.finish_time", "day") == pytest.approx(24.64, abs=0.005)
    assert qval(ws, "p.memory_per_gpu", "GiB") == pytest.approx(12.54, abs=0.005)
    assert [r["name"] for r in ws.requirement_results("p")].count("fits_memory") == 1


def test_zero_twice_is_one_clear_error():
    with pytest.raises(Exception) as e:
        evaluate_snippet(DESIGN_BASE % (f"use layout {{ zero = 3; {LINKS} }}\n use zero {{ stage = 3 }}"))
    assert "states its ZeRO sharding twice" in str(e.value)


L70 = CATALOG + """
workload w { tokens = 100e9 token; seq_len = 8192 token; global_batch = 512 seq; deadline = 30 day }
plan p {
  model = llama31_70b; workload = w; device = h100_sxm; gpus = 64; gpus_per_host = 8; mfu = 40 %%
  use memory { usable = 80 GB }
  %s
}
"""
L70_LINKS = "link = nvlink4; nic = nic_400g; nics_per_host = 8"


@pytest.mark.parametrize("route", ["layout", "compute+zero", "compute+zero+finish"])
def test_llama70b_zero3_has_one_answer_on_every_route(route):
    body = {"layout": f"use layout {{ zero = 3; {L70_LINKS} }}",
            "compute+zero": f"use compute {{}}\n use zero {{ stage = 3; {L70_LINKS} }}",
            "compute+zero+finish": f"use compute {{}}\n use zero {{ stage = 3; {L70_LINKS} }}\n use finish {{}}"}[route]
    ws = evaluate_snippet(L70 % body)
    # hand computations in specs/cases/training-llama70b-h100.plan
    assert qval(ws, "llama31_70b.params", "param") == 70_553_706_496
    assert qval(ws, "p.persistent_memory", "B") == pytest.approx(17_638_426_624, abs=1)
    assert qval(ws, "p.compute_time", "s") == pytest.approx(74.39, abs=0.005)
    assert qval(ws, "p.activation_per_layer", "B") == pytest.approx(2_250_244_096, abs=1)
    assert qval(ws, "p.activation_memory", "GiB") == pytest.approx(171.6, abs=0.05)
    assert qval(ws, "p.transfer_volume", "B") == pytest.approx(3_333_662_631_936, rel=1e-12)
    assert qval(ws, "p.step_time", "s") == pytest.approx(74.40, abs=0.005)
    assert qval(ws, "p.finish_time", "day") == pytest.approx(20.53, abs=0.005)
    assert ws.requirement("p", "fits_memory")["ok"] is False      # 188 GiB > 74.51 GiB


def test_llama70b_full_recompute_fits():
    ws = evaluate_snippet(L70 % f"use layout {{ zero = 3; recompute = \"full\"; {L70_LINKS} }}")
    assert qval(ws, "p.activation_memory", "B") == pytest.approx(10_737_418_240 + 4_202_692_608, abs=1)
    assert qval(ws, "p.memory_per_gpu", "GiB") == pytest.approx(30.34, abs=0.005)
    assert qval(ws, "p.step_time", "s") == pytest.approx(98.85, abs=0.005)


def test_activation_memory_is_never_silently_zero():
    """Without a declared budget the step derives activations; a plan that prices no step and
    declares none is warned that memory_per_gpu holds the state only."""
    ws = evaluate_snippet(L70 % f"use layout {{ zero = 3; {L70_LINKS} }}")
    assert qval(ws, "p.activation_memory", "GiB") > 100
    ws = evaluate_snippet(CATALOG + "plan q { model = qwen3_8b; device = rtx4090\n use memory {}\n use zero { stage = 3; group = 8 } }")
    assert any("counts the persistent training state only" in d.summary for d in ws.warnings)


PIPE = CATALOG + """
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 32 seq }
plan p {
  model = qwen3_8b; workload = w; device = h100_sxm; gpus = 4; gpus_per_host = 8; mfu = 40 %%
  use memory { usable = 80 GB }
  use layout { pp = 4; %s }
}
"""


def _stage_times(ws):
    """(u, eta): one stage's forward + backward of one micro-batch (9 of Qwen3-8B's 36 layers) and
    the LM head's on the last stage, from the step's compute: compute_time = m·(p·u + eta)/p per
    GPU; the head's forward is 2·h·V FLOP a token (h = 4,096, V = 151,936), backward twice that,
    at mfu 40 % of the H100's 989.4 TFLOP/s, 4,096 tokens a micro-batch."""
    p, m = 4, 32
    eta = 3 * 2 * 4096 * 151936 * 4096 / (989.4e12 * 0.4)
    comp = qval(ws, "p.compute_time", "s")
    return (comp * p / m - eta) / p, eta


def test_pipeline_term_comes_from_the_schedule_engine_and_agrees_with_the_closed_form():
    """1F1B, 9 layers a stage, no boundary cost: the last stage, which also runs the LM head, is
    the bottleneck and runs without a gap once the first forward reaches it, so
    T = (p − 1)·u + m·(u + eta) — with eta = 0 the even split's (m + p − 1)·u, whose bubble is
    (p − 1)/m of the compute (Narayanan et al. 2021)."""
    ws = evaluate_snippet(PIPE % 'schedule = "1f1b"')
    u, eta = _stage_times(ws)
    T = 3 * u + 32 * (u + eta)
    assert qval(ws, "p.pipeline_time", "s") == pytest.approx(T, rel=1e-9)
    assert qval(ws, "p.step_time", "s") == pytest.approx(T, rel=1e-9)
    assert qval(ws, "p.bubble_time", "s") == pytest.approx(T - qval(ws, "p.compute_time", "s"), rel=1e-9)
    # the first stage holds p = 4 micro-batches of its 9 layers; the last one 1 and the logits
    per_layer = qval(ws, "p.activation_per_layer", "B")
    logits = 4096 * 151936 * 4
    assert qval(ws, "p.activation_memory", "B") == pytest.approx(max(4 * 9 * per_layer, 9 * per_layer + logits),
                                                                 abs=1)


def test_uneven_stages_are_scheduled():
    """stage_layers = [10, 10, 10, 6]: the busiest stage (10 layers, v = u/9 per layer and
    micro-batch) bounds the makespan from below by its own work m·10v and from above by the
    even-split formula at the busiest stage, (m + p − 1)·10v; the last stage (6 layers and the
    head, 6v + eta < 10v) is not the bottleneck."""
    ws = evaluate_snippet(PIPE % "stage_layers = [10, 10, 10, 6]")
    u, eta = _stage_times(ws)
    v = u / 9
    assert 6 * v + eta < 10 * v
    T = qval(ws, "p.pipeline_time", "s")
    assert 32 * 10 * v < T <= 35 * 10 * v * (1 + 1e-9)


def test_stage_layers_must_add_up():
    with pytest.raises(Exception) as e:
        evaluate_snippet(PIPE % "stage_layers = [10, 10, 10, 10]")
    assert "sum to 40 but the model has 36 layers" in str(e.value)


@pytest.mark.parametrize("schedule", ["zb_h1", "fill_drain"])
def test_every_schedule_prices_the_step(schedule):
    ws = evaluate_snippet(PIPE % f'schedule = "{schedule}"')
    comp = qval(ws, "p.compute_time", "s")
    u, eta = _stage_times(ws)
    # zero-bubble H1 removes part of the 1F1B bubble; fill-drain keeps it (1F1B's makespan)
    T = qval(ws, "p.pipeline_time", "s")
    assert comp < T <= (3 * u + 32 * (u + eta)) * (1 + 1e-9)


MOE = CATALOG + """
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq }
plan p {
  model = qwen3_30b_a3b; workload = w; device = h100_sxm; gpus = 16; gpus_per_host = 8; mfu = 40 %%
  use memory { usable = 80 GB }
  use layout { ep = 8; zero = 1; link = nvlink4; nic = nic_400g; nics_per_host = 8; %s }
}
"""


def test_moe_expert_parallel_step_hand_computed():
    """Qwen3-30B-A3B (config.json: 48 layers, hidden 2,048, 128 experts of 768, top-8, no shared
    expert) on 16 H100, ep = 8, ZeRO-1, BF16/Adam.  Hand computations:

    * routed experts 48·128·3·2048·768 = 28,991,029,248 params, dense rest 1,541,093,376;
      experts split over ep = 8 and data-parallel over d·tp·cp/ep = 2, dense over d = 16:
      1,541,093,376·(4 + 12/16) + 28,991,029,248/8·(4 + 12/2) = 43,558,980,096 B;
    * all-to-all: 4 per MoE layer and micro-batch (dispatch, combine; forward, backward),
      m = 64/16 = 4, each sending 7/8 of 8 copies of b·s·h·2 = 16,777,216 B inside a host on
      NVLink 4 (450 GB/s): 768 · 1.5 · 7·16,777,216/450e9 = 0.30065 s with a 1.5 imbalance;
    * imbalance: 0.5 × routed expert FLOPs 18·48·2048·768·8 per token × 262,144 tokens
      / (16 · 989.4e12 · 0.4) = 0.22504 s.
    """
    ws = evaluate_snippet(MOE % "routing_imbalance = 1.5")
    assert qval(ws, "qwen3_30b_a3b.expert_params", "param") == 28_991_029_248
    assert qval(ws, "p.persistent_memory", "B") == pytest.approx(43_558_980_096, abs=1)
    assert qval(ws, "p.ep_comm", "s") == pytest.approx(0.30065, abs=5e-6)
    assert qval(ws, "p.imbalance_time", "s") == pytest.approx(0.22504, abs=5e-6)
    balanced = evaluate_snippet(MOE % "routing_imbalance = 1")
    assert qval(ws, "p.step_time", "s") - qval(balanced, "p.step_time", "s") == pytest.approx(
        0.22504 + 0.30065 / 3, abs=1e-5)       # imbalance + the all-to-all's extra half


def test_moe_imbalance_comes_from_the_routing_block():
    """With `use moe_routing` the step's imbalance is its most loaded device over the mean."""
    ws = evaluate_snippet(MOE.replace("%s }\n}", "%s }\n  use moe_routing { tokens = 8192 token; routing = \"hot_cold\"; devices = 8 }\n}")
                          % "")
    imb = qval(ws, "p.max_device_rows", "token") / qval(ws, "p.mean_device_rows", "token")
    assert imb > 1
    bal = evaluate_snippet(MOE % "")
    assert qval(ws, "p.imbalance_time", "s") == pytest.approx((imb - 1) * 0.45007, rel=1e-4)
    assert qval(ws, "p.ep_comm", "s") == pytest.approx(imb * qval(bal, "p.ep_comm", "s"), rel=1e-12)


def test_activation_precision_and_classifier_head():
    """Per-tensor bytes scale with the activation format; a classifier head keeps no logits.
    Llama-3.1-70B, T = 8,192: BF16 2,250,244,096 B per layer (hand, case file) of which the
    log-sum-exp 2,097,152 B is FP32 whatever the format; FP8 halves the rest."""
    ws = evaluate_snippet(L70 % f'use layout {{ zero = 3; activation_precision = "fp8"; {L70_LINKS} }}')
    assert qval(ws, "p.activation_per_layer", "B") == pytest.approx(2_248_146_944 / 2 + 2_097_152, abs=1)
    ws = evaluate_snippet(L70 % f'use layout {{ zero = 3; recompute = "full"; lm_head = false; {L70_LINKS} }}')
    assert qval(ws, "p.activation_memory", "B") == pytest.approx(10_737_418_240, abs=1)


def test_layout_pipeline_and_use_pipeline_together_is_a_conflict():
    with pytest.raises(Exception) as e:
        evaluate_snippet(PIPE.replace("  use layout", "  use pipeline { stages = 4; microbatches = 8; forward = 1 ms }\n"
                                      "  use layout") % 'schedule = "1f1b"')
    assert "schedules its pipeline twice" in str(e.value)


def test_parameters_per_pipeline_stage():
    """Llama-3.1-70B, tp 8 × pp 4 (hand): one block 855,654,400 params ÷ 8 = 106,956,800 per GPU,
    20 blocks per stage = 2,139,136,000; the first stage adds the embedding 1,050,673,152 ÷ 8 =
    131,334,144, the last the LM head (the same) and the final norm 8,192."""
    from plugins.training.layout import stage_params
    ws = evaluate_snippet(L70.replace("gpus = 64", "gpus = 32") % f"use layout {{ tp = 8; pp = 4; {L70_LINKS} }}")
    rows = stage_params(ws, "p")
    assert [r["layers"] for r in rows] == [20, 20, 20, 20]
    assert [r["params"] for r in rows] == [2_270_470_144, 2_139_136_000, 2_139_136_000, 2_270_478_336]
    # the stages together hold a tensor-parallel rank's share: every matrix ÷ 8, the final norm whole
    assert sum(r["params"] for r in rows) == (70_553_706_496 - 8_192) / 8 + 8_192


WINDOW = CATALOG + """
model mistral_like { layers = 32; hidden = 4096; ffn = 14336; heads = 32; kv_heads = 8; vocab = 32000
                     sliding_window = 4096 }
workload w { tokens = 1e9 token; seq_len = 8192 token; global_batch = 16 seq }
plan p {
  model = mistral_like; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %%
  use memory { usable = 80 GB }
  use compute {}
  use layout { link = nvlink4; %s }
}
"""


def test_sliding_window_attention_in_the_step_flops():
    """A 4,096-token window at s = 8,192: each layer scores m(2s − m + 1)/2 = 4096·12289/2 =
    25,167,872 query–key pairs (not 8192·8193/2 = 33,558,528); QKᵀ and AV cost 2·n_q·(d_h + d_h)
    = 16,384 FLOPs per pair (hand computation)."""
    ws = evaluate_snippet(WINDOW % "")
    attn_seq = 16_384 * 32 * 25_167_872
    assert qval(ws, "p.flops_attention", "FLOP") == pytest.approx(3 * attn_seq, rel=1e-12)
    fwd_tok = qval(ws, "mistral_like.flops_per_token_forward", "FLOP/token")
    assert qval(ws, "p.compute_time", "s") == pytest.approx(
        3 * (fwd_tok * 8192 + attn_seq) * 16 / (8 * 989.4e12 * 0.4), rel=1e-12)


def test_search_prices_the_window_like_the_plan():
    """The search's constants count the same windowed pairs: its one candidate's step time is
    the plan's (the candidate does not fit in memory; the step is compared all the same)."""
    from plugins.training import layout_search as search
    text = (WINDOW % "").replace("  use compute {}\n", "")
    text = text.rstrip().removesuffix("}") + (
        '  use layout_search { tp = [1]; zero = [0]; recompute = ["none"]; sequence_parallel = ["off"] }\n}\n')
    ws = evaluate_snippet(text)
    res = search.run(ws, "p")
    assert len(res) == 1
    assert res.row(0)["step_s"] == pytest.approx(qval(ws, "p.step_time", "s"), rel=1e-9)

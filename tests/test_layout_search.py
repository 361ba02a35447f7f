"""The book's design case as a layout search (specs/cases/layout-qwen3-8b-4090.plan):
Qwen3-8B on 32/48 RTX 4090, PCIe 4.0 x16 only, 8 GPUs per host, one 200 Gbit/s NIC per GPU."""
from __future__ import annotations

import json
import math

import pytest

import dsl
from dsl.syntax.diagnostics import PlanError
from conftest import CASES, qval, run_cli

np = pytest.importorskip("numpy")
from plugins.training import layout_search as search  # noqa: E402

CASE = CASES / "layout-qwen3-8b-4090.plan"
N = 8_190_735_360                     # Qwen3-8B parameters (catalog)
N_EMB = 151_936 * 4096                # word embedding V·h
FWD_SEQ = 143.789331054592e12         # forward FLOPs of one 8,192-token sequence (book §3.4.3: 143.789 TFLOPs)
PCIE = 32e9


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


@pytest.fixture(scope="module")
def res48(ws):
    return search.run(ws, "gpus48")


def _compute(gpus):
    return 3 * FWD_SEQ * 384 / (gpus * 165.2e12 * 0.40)      # F_step / (p·P·η), §10.1.3


def test_zero3_tp1_pp1_is_best_and_feasible(res48):
    best = res48.row(res48.best)
    assert (best["tp"], best["pp"], best["dp"], best["zero"]) == (1, 1, 48, 3)
    assert best["valid"] and best["meets_deadline"]
    # compute 52.22 s + the unhidden embedding AllGather and ReduceScatter + 0.5 s input wait
    head_tail = 2 * (47 / 48) * 2 * N_EMB / PCIE
    assert best["step_s"] == pytest.approx(_compute(48) + head_tail + 0.5, abs=5e-4)


def test_why_tp2_loses_on_pcie(res48):
    # the best tp = 2 layout is the runner-up since the pipeline carries the LM head on its last
    # stage (pp = 2 loses more than tp = 2 on Qwen3's 151,936-token vocabulary)
    e = next(x for x in res48.explanations if x["label"] in ("best with tp = 2", "runner-up")
             and x["layout"]["tp"] == 2)
    assert e["loses_on"] == "tp"
    # 4 all-reduces per layer and micro-batch, 36 layers, m = 384/(24·2) = 8; each a ring of 2
    # over PCIe: 2·(1/2)·(b·s·h·2 B)/32 GB/s + 2 × 10 µs latency
    per_call = (2 * 8192 * 4096 * 2) / PCIE + 2 * 10e-6
    assert e["terms_delta_s"]["tp"] == pytest.approx(4 * 36 * 8 * per_call, abs=5e-4)
    for t in (4, 8):
        assert next(x for x in res48.explanations if x["label"] == f"best with tp = {t}")["loses_on"] == "tp"


def test_32_gpus_miss_the_deadline(ws):
    res = search.run(ws, "gpus32")
    assert not any(res.columns["meets_deadline"][res.columns["valid"]])
    assert qval(ws, "gpus32.finish_time", "day") > 30


def test_formula_activations_with_full_recompute_miss_at_48(ws):
    # TP = PP = 1 under the formula model needs full recomputation; its extra forward of the
    # layers (≈ 8ND: a third of the compute less the LM head's 2·h·V·s of the forward FLOPs)
    # makes 48 GPUs miss the deadline
    step = qval(ws, "gpus48_formula.step_time", "s")
    head_tail = 2 * (47 / 48) * 2 * N_EMB / PCIE
    head_share = 2 * N_EMB * 8192 / FWD_SEQ
    assert step == pytest.approx(_compute(48) * (1 + (1 - head_share) / 3) + head_tail + 0.5, abs=5e-4)
    assert not ws.requirement("gpus48_formula", "meets_deadline")["ok"]
    res = search.run(ws, "gpus48_formula")
    c = res.columns
    sel = (c["t"] == 1) & (c["p"] == 1) & (c["z"] == 3) & (c["r"] == 1) & (c["b"] == 1)
    assert not c["valid"][sel].any()
    assert set(c["reason"][sel]) == {"runtime memory per GPU exceeds the usable memory", 
                                     "sequence parallelism without tensor parallelism"}


def test_rejected_layouts_carry_their_reason(res48):
    c = res48.columns
    assert all(c["reason"][~c["valid"]])
    assert not any(c["reason"][c["valid"]])
    # plain DP replicates 16 B/param: 131 GB per GPU
    i = int(np.nonzero((c["t"] == 1) & (c["p"] == 1) & (c["z"] == 0) & (c["sp"] == 0) & (c["b"] == 1))[0][0])
    assert c["reason"][i] == "runtime memory per GPU exceeds the usable memory"
    assert res48.row(i)["memory_gib"] == pytest.approx((16 * N + 10 * 2 ** 30) / 2 ** 30, abs=0.01)
    # tp·pp = 32 does not divide 48 GPUs
    i = int(np.nonzero((c["t"] == 8) & (c["p"] == 4))[0][0])
    assert c["reason"][i] == "tp·pp·cp does not divide the GPU count"


def test_search_matches_the_symbolic_layout(ws, res48):
    # the same closed forms: `use layout { tp = 2 }` priced symbolically equals its search row
    c = res48.columns
    i = int(np.nonzero((c["t"] == 2) & (c["p"] == 1) & (c["z"] == 3) & (c["b"] == 1) & (c["sp"] == 0))[0][0])
    assert c["step"][i] == pytest.approx(qval(ws, "gpus48_tp2.step_time", "s"), rel=1e-12)
    assert c["memory"][i] == pytest.approx(qval(ws, "gpus48_tp2.runtime_memory", "B"), rel=1e-12)
    assert c["tp"][i] == pytest.approx(qval(ws, "gpus48_tp2.tp_comm", "s"), rel=1e-12)


def test_pareto_front(ws):
    res = search.run(ws, "gpus48_formula")
    c = res.columns
    valid = np.nonzero(c["valid"])[0]
    front = set(res.pareto)
    assert len(front) >= 3
    for i in front:   # nothing valid is at least as fast and strictly smaller, or vice versa
        dom = (c["step"][valid] <= c["step"][i]) & (c["memory"][valid] <= c["memory"][i]) & (
            (c["step"][valid] < c["step"][i]) | (c["memory"][valid] < c["memory"][i]))
        assert not dom.any()
    for i in set(valid.tolist()) - front:
        assert any(c["step"][j] <= c["step"][i] and c["memory"][j] <= c["memory"][i] for j in front)


def test_binding_constraint(res48):
    best = res48.row(res48.best)
    # 24.6 of 30 days against 12.5 of 22 GiB: the deadline is the tighter constraint
    assert best["binding"] == "deadline"


def test_cli_search_text_and_json():
    code, out, err = run_cli("search", CASE, "--plan", "gpus48")
    assert code == 0, err
    assert "best: tp=1 pp=1 dp=48" in out and "exposed TP all-reduces" in out and "Pareto front" in out
    code, out, err = run_cli("search", CASE, "--plan", "gpus48", "--format", "json")
    assert code == 0, err
    d = json.loads(out)["gpus48"]
    assert d["best"]["tp"] == 1 and d["best"]["zero"] == 3
    assert d["valid"] + len(d["rejected"]) == d["candidates"]
    assert all(r["reason"] for r in d["rejected"])


def test_eval_shows_search_table():
    code, out, err = run_cli("eval", CASE)
    assert code in (0, 1), err
    assert "Layout search" in out and "loses by" in out


def test_solve_mfu_for_deadline(ws):
    from dsl.results.solver import solve_query
    q = ws.queries[0]          # solve gpus48.mfu for gpus48.finish_time == cpt.deadline
    r = solve_query(ws, q)
    # finish = 5 d + steps·t_s·(1 + L) = 30 d with t_s = 3·F·B/(48·P·η) + 0.0762 s + 0.5 s
    steps = math.ceil(100e9 / (8192 * 384))
    L = qval(ws, "gpus48.overhead")
    t_s = 25 * 86400 / (steps * (1 + L))
    head_tail = 2 * (47 / 48) * 2 * N_EMB / PCIE
    eta = 3 * FWD_SEQ * 384 / (48 * 165.2e12 * (t_s - head_tail - 0.5))
    assert float(r.value) == pytest.approx(eta, abs=1e-4)


def test_step_timeline_is_the_sum_of_terms(ws):
    # the `step` timeline chains the GPU's terms beside the link's collectives: ZeRO-3 exposes
    # the embedding's first AllGather and last ReduceScatter around the GPU chain
    for plan in ("gpus48", "gpus48_formula", "gpus48_tp2"):
        gpu = sum(qval(ws, f"{plan}.{q}", "s") for q in ("compute_time", "recompute_time", "tp_comm")
                  if ws.has(f"{plan}.{q}"))
        ends = qval(ws, f"{plan}.comm_head", "s") + qval(ws, f"{plan}.comm_tail", "s") + 0.5
        assert qval(ws, f"{plan}.step_time", "s") == pytest.approx(gpu + ends, rel=1e-12)
    assert ws.critical_path("gpus48_tp2", "step")["path"] == ["input_wait", "allgather_first", "compute", "tp",
                                                             "reducescatter_last"]


def test_step_budget_in_the_figure_matches_the_book(ws):
    # the book's longest affordable step at 48 GPUs is 67.2 s (§10.6.2)
    res = search.run(ws, "gpus48")
    m = res.meta
    assert (m["deadline"] - m["reserved"]) / (m["steps"] * (1 + m["overhead"])) == pytest.approx(67.2, abs=0.05)


def test_figure_layout_search(tmp_path):
    pytest.importorskip("matplotlib")
    code, out, err = run_cli("figure", CASE, "-o", tmp_path, "--name", "layout-search")
    assert code == 0, err
    assert (tmp_path / "gpus48-layout-search.svg").exists()


# ---------------------------------------------------------------- search = the same model
MTNLG = CASES / "layout-mt-nlg-530b.plan"


def _emit_and_eval(tmp_path, case, plans, **kw):
    """Search ``plans`` of ``case``, write the best layouts back as a plan and evaluate it."""
    ws = dsl.load(case)
    results = [search.run(ws, p, **kw) for p in plans]
    out = tmp_path / "best.plan"
    out.write_text(search.emit_plan(results, case, out), encoding="utf-8")
    return results, dsl.load(out)


def _compare(res, ev, rel):
    row = res.row(res.best)
    name = f"{res.plan}_best"
    assert qval(ev, f"{name}.step_time", "s") == pytest.approx(row["step_s"], rel=rel)
    assert qval(ev, f"{name}.runtime_memory", "GiB") == pytest.approx(row["memory_gib"], rel=rel)
    if row["finish_day"] is not None:
        assert qval(ev, f"{name}.finish_time", "day") == pytest.approx(row["finish_day"], rel=rel)
    else:     # no deadline: the search shows no finish, the plan still has one (the search's column)
        assert qval(ev, f"{name}.finish_time", "s") == pytest.approx(float(res.columns["finish"][res.best]), rel=rel)
        assert qval(ev, f"{name}.steps") * qval(ev, f"{name}.step_time", "s") == pytest.approx(
            float(res.columns["finish"][res.best]), rel=rel)
    for q in ("fits_memory", "micro_batches_whole"):
        assert ev.requirement(name, q)["ok"]


def test_best_layouts_evaluate_as_plans_to_the_search_rows(tmp_path):
    """The best layout of the design case (both activation models) written as a plan and
    priced by `plan eval`: the same step time, memory per GPU and finish time.  gpus48 is
    ZeRO-3 over 48 GPUs (pp = 1: the closed form is the plan's own formula); gpus48_formula's
    best is TP 4 without a pipeline since the LM head runs on the last stage and the unfused FP32
    loss's logits count in runtime_memory (a pipelined best layout against its plan, uneven
    split included: tests/test_uneven_pipelines.py)."""
    results, ev = _emit_and_eval(tmp_path, CASE, ["gpus48", "gpus48_formula"])
    for res in results:
        _compare(res, ev, 1e-9)


def test_mt_nlg_best_layout_evaluates_to_its_search_row(tmp_path):
    """MT-NLG 530B on 4,480 GPUs: the best layout has pp = 7 under 1F1B (the published plan
    states dp = 16 for pp = 35; the emitted plan writes its own dp)."""
    (res,), ev = _emit_and_eval(tmp_path, MTNLG, ["published"])
    row = res.row(res.best)
    assert row["pp"] > 1 and row["virtual"] == 1
    _compare(res, ev, 1e-9)


def test_pipeline_sends_on_the_critical_path_match_the_event_engine():
    """1F1B with a boundary message τ: the engine's makespan is (m+p−1)(f+b) plus τ times
    2(p−1) + 2(m−2−⌊(m−2)/p⌋).  By hand for p = 2, m = 4 (f, b per stage, order F1 F2 B1 F3 B2
    F4 B3 B4 on stage 0, F1 B1 F2 B2 … on stage 1): the fill and drain cost 2τ and each of the
    steady-state micro-batches 3 and 4 waits one τ for the other stage: 4τ.  Interleaved
    (v = 2): 2(pv−1) sends, the fill and drain through every chunk boundary."""
    from dsl.testing import evaluate_snippet
    from plugins.training.layout_model import ops, pp_crossings
    o = ops("numpy")
    assert pp_crossings(2, 1, np.array([4.0]), o)[0] == 4
    for p, m, v in ((2, 4, 1), (3, 7, 1), (4, 9, 1), (7, 24, 1), (4, 8, 2), (3, 6, 3)):
        t = {}
        for tau in (0, 1):
            ws = evaluate_snippet(f'plan x {{ use pipeline {{ schedule = "{"interleaved" if v > 1 else "1f1b"}"; '
                                  f'stages = {p}; microbatches = {m}; layers = {p * v}; virtual = {v}; '
                                  f'forward = 10 ms; backward = 20 ms; transfer = {tau} ms }} }}')
            t[tau] = qval(ws, "x.pipeline_time", "ms")
        assert t[0] == pytest.approx((m + (p - 1) / v) * 30, rel=1e-12)     # bubble (p−1)/(v·m)
        assert t[1] - t[0] == pytest.approx(float(pp_crossings(p, v, np.array([float(m)]), o)[0]), rel=1e-9)


def test_single_layouts_search_to_their_plan_values():
    """Every plan of the layout cases searched as its own single candidate (no search
    lists): the search's numpy closed forms give the plan's step time and memory."""
    for case, plans in (("layout-activations-gpt3.plan", ("tp8", "tp8_full", "tp8_pp8", "tp8_pp8_v2", "tp8_cp2")),
                        ("training-llama70b-h100.plan", ("zero3", "zero3_recompute")),
                        ("cpt-variants.plan", ("gpus48_noprefetch", "gpus48_onenic"))):
        ws = dsl.load(CASES / case)
        for p in plans:
            res = search.run(ws, p)
            assert len(res) == 1
            assert res.columns["step"][0] == pytest.approx(qval(ws, f"{p}.step_time", "s"), rel=1e-9), p
            assert res.columns["memory"][0] == pytest.approx(qval(ws, f"{p}.runtime_memory", "B"), rel=1e-9), p


MOE = """
import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq }
plan p {
  model = qwen3_30b_a3b; workload = w; device = h100_sxm; gpus = 16; gpus_per_host = 8; mfu = 40 %%
  use memory { usable = 80 GB }
  use layout { ep = 8; zero = 1; link = nvlink4; nic = nic_400g; nics_per_host = 8; %s }
}
"""


ROUTED = ' }\n  use moe_routing { tokens = 8192 token; routing = "hot_cold"; devices = 8'


@pytest.mark.parametrize("knobs", ["routing_imbalance = 1.5", "etp = 1", "tp = 2; etp = 1", ROUTED])
def test_moe_layout_searches_to_its_plan_value(write_plan, knobs):
    """MoE: the routed experts' imbalance (stated, or from `use moe_routing`) and expert TP."""
    ws = dsl.load(write_plan(MOE % knobs))
    res = search.run(ws, "p")
    assert res.columns["step"][0] == pytest.approx(qval(ws, "p.step_time", "s"), rel=1e-9)
    assert res.columns["memory"][0] == pytest.approx(qval(ws, "p.runtime_memory", "B"), rel=1e-9)


def test_cli_emit_then_eval(tmp_path):
    out = tmp_path / "chosen.plan"
    code, _, err = run_cli("search", CASE, "--plan", "gpus48_formula", "--emit", out)
    assert code == 0, err
    assert "wrote" in err and out.exists()
    code, text, err = run_cli("eval", out, "--format", "json")
    assert code in (0, 1), err
    ev = dsl.load(out)
    res = search.run(dsl.load(CASE), "gpus48_formula")
    _compare(res, ev, 1e-9)
    code, _, err = run_cli("search", CASE, "--plan", "gpus48", "--emit", tmp_path / "x.txt")
    assert code == 2 and "error[search]" in err


def test_batch_tolerance_trains_the_nearest_batch(tmp_path):
    """40 GPUs do not divide the batch of 384 under pure DP (384/40 = 9.6); with ± 5 % the
    search trains the nearest batch dp·micro-batch divides: 400 (40·10; 360 is 24 away, 400
    16, 16/384 = 4.2 %) in ceil(100e9/(8192·400)) = 30,518 steps, and the emitted plan (a
    workload with global_batch = 400) evaluates to the same row."""
    src = tmp_path / "b.plan"
    src.write_text(f'import "{CASE}"\nplan g40 extends gpus48 {{ gpus = 40\n'
                   '  use layout_search { tp = [1]; pp = [1]; zero = [3]; batch_tolerance = 5 % } }\n'
                   'plan g40_strict extends g40 { use layout_search { batch_tolerance = 0 % } }\n', encoding="utf-8")
    ws = dsl.load(src)
    strict = search.run(ws, "g40_strict")
    assert strict.best is None
    (res,), ev = _emit_and_eval(tmp_path, src, ["g40"])
    row = res.row(res.best)
    assert row["global_batch"] == 400 and row["batch_adjusted"]
    assert qval(ev, "g40_best.steps") == math.ceil(100e9 / (8192 * 400)) == 30_518
    _compare(res, ev, 1e-9)


def test_no_layout_says_why_and_what_is_nearest():
    """5,128 = 8 × 641 GPUs: pp must be 1 (every listed pp > 1 is odd and does not divide 2³·641),
    so dp ∈ {5128, 2564, 1282, 641} and no dp·micro-batch divides 1,920.  The nearest batch a
    layout takes is 3 × 641 = 1,923 (tp = 8, dp = 641); one host fewer, 5,120 GPUs, gives
    tp = 8 × dp = 640 and 1,920/640 = 3 micro-batches (5,136 = 2⁴·3·107 admits no dp dividing
    1,920)."""
    ws = dsl.load(MTNLG)
    res = search.run(ws, "mtnlg")
    assert res.best is None
    d = res.diagnose()
    assert d["most_common"] == max(res.meta["rejections"], key=res.meta["rejections"].get)
    assert d["nearest_batch"] == 1923 and d["nearest_batch_layout"]["dp"] == 641
    assert d["nearest_gpus"] == 5120 and d["nearest_gpus_layout"]["dp"] * d["nearest_gpus_layout"]["tp"] == 5120
    code, out, err = run_cli("search", MTNLG, "--plan", "mtnlg")
    assert code == 0, err
    assert "no valid layout" in out and "why: most candidates" in out
    assert "nearest feasible global batch at 5128 GPUs: 1923 seq" in out
    assert "nearest feasible GPU count with batch 1920: 5120 GPUs" in out


def test_optimizer_offload_in_the_plan_and_the_search(tmp_path):
    """ZeRO-Offload (Ren et al. 2021) of Qwen3-8B on 8 RTX 4090, ZeRO-2, full recomputation:
    the optimizer partition is N/8 = 1,023,841,920 parameters; master (4 B) and Adam (8 B)
    states leave the GPU: 12·1,023,841,920 B = 11.44 GiB; per step 2 B of gradients go down
    (hidden behind the last micro-batch's backward, ≈ 5.7 s) and 2 B of weights come back over
    PCIe 4.0 (32 GB/s): 0.0640 s; CPU Adam streams (2 + 2·4 + 2·8 + 2) = 28 B per parameter at
    20 GB/s: 1.4334 s.  The search (offload = ["none", "optimizer"]) prices the same."""
    M = N / 8
    src = tmp_path / "o.plan"
    src.write_text(f'import "{CASE}"\nplan off extends gpus48_formula {{ gpus = 8\n'
                   '  use layout { zero = 2; recompute = "full"; offload = "optimizer"; host_bandwidth = 20 GB/s }\n'
                   '  use layout_search { tp = [1, 2]; zero = [2, 3]; pp = [1]; micro_batch = [1 seq]\n'
                   '                      recompute = ["full"]; offload = ["none", "optimizer"] } }\n'
                   'plan on_gpu extends off { use layout { offload = "none" } }\n', encoding="utf-8")
    ws = dsl.load(src)
    assert qval(ws, "on_gpu.persistent_memory", "B") - qval(ws, "off.persistent_memory", "B") == pytest.approx(
        12 * M, rel=1e-12)
    assert qval(ws, "off.host_memory_per_gpu", "B") == pytest.approx(12 * M, rel=1e-12)
    assert qval(ws, "off.optimizer_cpu_time", "s") == pytest.approx(28 * M / 20e9, rel=1e-12)
    assert qval(ws, "off.optimizer_offload_time", "s") == pytest.approx(28 * M / 20e9 + 2 * M / PCIE, rel=1e-12)
    assert qval(ws, "off.step_time", "s") - qval(ws, "on_gpu.step_time", "s") == pytest.approx(
        28 * M / 20e9 + 2 * M / PCIE, rel=1e-9)
    res = search.run(ws, "off")
    c = res.columns
    i = int(np.nonzero((c["t"] == 1) & (c["z"] == 2) & (c["off"] == 1))[0][0])
    assert c["step"][i] == pytest.approx(qval(ws, "off.step_time", "s"), rel=1e-9)
    assert c["memory"][i] == pytest.approx(qval(ws, "off.runtime_memory", "B"), rel=1e-9)
    assert c["offload"][i] == pytest.approx(qval(ws, "off.optimizer_offload_time", "s"), rel=1e-9)
    (res,), ev = _emit_and_eval(tmp_path, src, ["off"])
    assert res.row(res.best)["offload"] == "optimizer"
    _compare(res, ev, 1e-9)


def test_offload_needs_the_host_bandwidth(write_plan):
    path = write_plan(f'import "{CASE}"\nplan p extends gpus48 {{ use layout {{ offload = "optimizer" }} }}\n')
    code, _, err = run_cli("eval", path)
    assert code == 1 and "error[missing-parameter]" in err and "host_bandwidth" in err


def test_empty_search_list_is_a_located_error(tmp_path):
    # as `use serving_search`'s lists (an empty list said "most candidates (0 of 0) break tp_divides_heads")
    (tmp_path / "l.plan").write_text('''import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq; deadline = 30 day }
plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %
  use memory {}
  use layout { link = nvlink4 }
  use layout_search { tp = [] } }
''', encoding="utf-8")
    with pytest.raises(PlanError) as e:
        dsl.load(tmp_path / "l.plan")
    d = e.value.diagnostics[0]
    assert d.code == "out-of-range" and "'tp' needs at least 1 item, got 0" in d.summary and d.span.line == 7


EVAL_AND_SEARCH = """
import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload pt { tokens = 15e12 token; seq_len = 8192 token; global_batch = 2048 seq; deadline = 60 day }
plan p {
  model = llama31_70b; workload = pt; device = h100_sxm; gpus = 1024; gpus_per_host = 8
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = USABLE }
  use layout { tp = 4; pp = 2; zero = 1; sequence_parallel = true; efficiency = "roofline"
               link = nvlink4; nic = nic_400g; nics_per_host = 8 }
  use layout_search { tp = [4]; pp = [2]; zero = [1]; micro_batch = [1 seq]; recompute = ["none"];
                      sequence_parallel = ["on"] }
}
"""


@pytest.mark.parametrize("usable", ["79 GiB", "74 GiB", "81 GiB"])
def test_eval_and_search_agree_on_fitting_memory(tmp_path, usable):
    # An H100 "80 GB" carries 80 GiB of HBM (CUDA reports 79.22 GiB): `use memory` warns of a usable above
    # 80e9 · 2^30 / 10^9 B = 80 GiB, and the search caps a GPU's memory at the same bound -- so this layout
    # of ~75.5 GiB per GPU fits at usable = 79 GiB in both (the search used to cap at 74.5 GiB, the "80 GB"
    # read in decimal, and rejected it while eval said ok), fails at 74 GiB in both, and at 81 GiB fits in
    # both (the search's cap, 80 GiB, is above it) while eval warns that usable is more than the device has
    from plugins.training.memory import device_capacity
    assert device_capacity(80e9) == pytest.approx(80 * 2**30, rel=1e-15)
    f = tmp_path / "p.plan"
    f.write_text(EVAL_AND_SEARCH.replace("USABLE", usable), encoding="utf-8")
    ws = dsl.load(f)
    mem = qval(ws, "p.memory_per_gpu", "GiB")
    assert 74.6 < mem < 79
    valid = bool(search.run(ws, "p").columns["valid"][0])
    assert valid == ws.requirement("p", "fits_memory")["ok"] == (usable != "74 GiB")
    assert any("more than the device has" in d.summary for d in ws.diagnostics) == (usable == "81 GiB")


FRAMEWORK = """
import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e9 token; seq_len = 8192 token; global_batch = 64 seq }
plan p {
  model = llama31_70b; workload = w; device = h100_sxm; gpus = 64; gpus_per_host = 8
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 4; pp = 2; cp = 2; zero = 1; sequence_parallel = true; link = nvlink4; nic = ib_ndr_400g
               efficiency = "roofline"; %s }
}
"""


@pytest.mark.parametrize("knobs", ['framework = "nemo"', 'framework = "torchtitan"; matmul_precision = "fp8"',
                                   'framework = "megatron"; attention_kernel = "flash3"; tp_overlap = 30 %'])
def test_framework_defaults_search_to_their_plan_value(write_plan, knobs):
    """The framework's overlaps and attention kernel, and the FP8 curve's own sustained share,
    read alike by the plan and the search."""
    ws = dsl.load(write_plan(FRAMEWORK % knobs))
    res = search.run(ws, "p")
    assert res.columns["step"][0] == pytest.approx(qval(ws, "p.step_time", "s"), rel=1e-9)
    assert res.columns["memory"][0] == pytest.approx(qval(ws, "p.runtime_memory", "B"), rel=1e-9)


def test_search_reads_the_gathered_inputs_torchtitan_keeps_as_eval_does(write_plan):
    """runtime_memory with DTensor sequence parallelism (torchtitan keeps the TP-gathered inputs,
    FP8 under Float8 TP, and the LM head's): the search's fit test sees the plan's own value —
    a usable memory a hair above it fits in both, a hair below it fails in both."""
    knobs = 'framework = "torchtitan"; matmul_precision = "fp8"; recompute = "full"'
    text = FRAMEWORK % knobs
    ws = dsl.load(write_plan(text))
    rt = qval(ws, "p.runtime_memory", "GiB")
    for scale, fits in ((1 + 1e-6, True), (1 - 1e-6, False)):
        usable = f"use memory {{ usable = {rt * scale:.12g} GiB;"
        w2 = dsl.load(write_plan(text.replace("use memory {", usable)))
        assert w2.requirement("p", "fits_memory")["ok"] is fits
        assert bool(search.run(w2, "p").columns["valid"][0]) is fits

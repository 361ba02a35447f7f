"""The book's design case as a layout search (specs/cases/layout-qwen3-8b-4090.plan):
Qwen3-8B on 32/48 RTX 4090, PCIe 4.0 x16 only, 8 GPUs per host, one 200 Gbit/s NIC per GPU."""
from __future__ import annotations

import json
import math

import pytest

import dsl
from conftest import CASES, qval, run_cli

np = pytest.importorskip("numpy")
from plugins import layout_search as search  # noqa: E402

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
    e = next(x for x in res48.explanations if x["label"] == "best with tp = 2")
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
    assert set(c["reason"][sel]) == {"memory per GPU exceeds the usable memory", 
                                     "sequence parallelism without tensor parallelism"}


def test_rejected_layouts_carry_their_reason(res48):
    c = res48.columns
    assert all(c["reason"][~c["valid"]])
    assert not any(c["reason"][c["valid"]])
    # plain DP replicates 16 B/param: 131 GB per GPU
    i = int(np.nonzero((c["t"] == 1) & (c["p"] == 1) & (c["z"] == 0) & (c["sp"] == 0) & (c["b"] == 1))[0][0])
    assert c["reason"][i] == "memory per GPU exceeds the usable memory"
    assert res48.row(i)["memory_gib"] == pytest.approx((16 * N + 10 * 2 ** 30) / 2 ** 30, abs=0.01)
    # tp·pp = 32 does not divide 48 GPUs
    i = int(np.nonzero((c["t"] == 8) & (c["p"] == 4))[0][0])
    assert c["reason"][i] == "tp·pp·cp does not divide the GPU count"


def test_search_matches_the_symbolic_layout(ws, res48):
    # the same closed forms: `use layout { tp = 2 }` priced symbolically equals its search row
    c = res48.columns
    i = int(np.nonzero((c["t"] == 2) & (c["p"] == 1) & (c["z"] == 3) & (c["b"] == 1) & (c["sp"] == 0))[0][0])
    assert c["step"][i] == pytest.approx(qval(ws, "gpus48_tp2.step_time", "s"), rel=1e-12)
    assert c["memory"][i] == pytest.approx(qval(ws, "gpus48_tp2.memory_per_gpu", "B"), rel=1e-12)
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

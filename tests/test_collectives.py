"""Collectives with algorithms (plugins/hardware/collectives.py): nccl-tests' bandwidth definitions,
published nccl-tests measurements per algorithm, the algorithm choice, groups spanning hosts,
the numpy and sympy paths, `use collective`, and the training step's roofline mode.

Measurements: specs/data/nccl-tests/busbw.csv (each row's source in its README).  Link
values: the catalog (specs/catalog/hardware.plan), each with its source.  Hand computations
below restate the formulas with the catalog's numbers typed in, not read from the code.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import dsl
from dsl.syntax.diagnostics import PlanError
from plugins.hardware import collectives as coll
from plugins.training import layout_model as lm

ROOT = Path(__file__).resolve().parents[1]
ROWS = {r["id"]: r for r in csv.DictReader((ROOT / "specs/data/nccl-tests/busbw.csv").open(encoding="utf-8"))}
NUM, SYM = lm.ops("numpy"), lm.ops("sympy")
GiB, MiB = 2 ** 30, 2 ** 20
G = 1e9


@pytest.fixture(scope="module")
def cat(tmp_path_factory):
    f = tmp_path_factory.mktemp("cat") / "c.plan"
    f.write_text('import "@catalog/hardware.plan"\nplan p { x = 1 s }\n', encoding="utf-8")
    return dsl.load(f)


def link(cat, name: str) -> dict:
    d = {"bandwidth": float(cat.base_value(f"{name}.bandwidth"))}
    for k in ("latency", "launch", "efficiency", "nvls_efficiency", "nvls_latency"):
        if f"{name}.{k}" in cat.nodes:
            d[k] = float(cat.base_value(f"{name}.{k}"))
    d["nvls"] = f"{name}.nvls" in cat.nodes and bool(cat.python_value(f"{name}.nvls"))
    return d


def share(nic: dict, nics: int, gph: int) -> dict:
    """One GPU's share of its host's NICs (the ``inter`` link of a spanning group)."""
    return dict(nic, bandwidth=nic["bandwidth"] * nics / gph)


def busbw(op, k, S, t):
    return coll.bus_bandwidth(op, k, S, t) / G


# ---------------------------------------------------------------- nccl-tests definitions
def test_bus_factors_are_nccl_tests_definitions():
    # doc/PERFORMANCE.md "Summary": AllReduce 2(n-1)/n, ReduceScatter/AllGather/AlltoAll (n-1)/n;
    # src/sendrecv.cu: factor 1
    assert coll.bus_factor("all_reduce", 8) == pytest.approx(14 / 8)
    assert coll.bus_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert coll.bus_factor("all_gather", 16) == pytest.approx(15 / 16)
    assert coll.bus_factor("all_to_all", 4) == pytest.approx(3 / 4)
    assert coll.bus_factor("send", 2) == 1
    # algbw = S / t; busbw = algbw × factor: 1 GB in 5 ms among 8 ranks
    assert coll.algorithm_bandwidth(1e9, 5e-3) == pytest.approx(200e9)
    assert coll.bus_bandwidth("all_reduce", 8, 1e9, 5e-3) == pytest.approx(350e9)
    assert coll.bus_factor("all_reduce", sp.Symbol("k")) == 2 * (sp.Symbol("k") - 1) / sp.Symbol("k")
    with pytest.raises(ValueError):
        coll.bus_factor("broadcast", 8)


def test_ring_formula_by_hand():
    # λ + 2(k−1)α + 2(k−1)/k · S/(B·η): 4 ranks, 1 us, 10 us, 100 GB/s at 50 %, 1 GB
    L = {"bandwidth": 100e9, "latency": 1e-6, "launch": 10e-6, "efficiency": 0.5}
    t = coll.collective_time("all_reduce", 4, 1e9, L, SYM, algorithm="ring")
    assert float(t) == pytest.approx(10e-6 + 6e-6 + 1.5 * 1e9 / 50e9)
    t = coll.collective_time("all_gather", 4, 1e9, L, SYM)
    assert float(t) == pytest.approx(10e-6 + 3e-6 + 0.75 * 1e9 / 50e9)
    t = coll.collective_time("all_reduce", 4, 1e9, L, SYM, algorithm="tree")   # 2⌈log2 4⌉ = 4 steps, 2·S
    assert float(t) == pytest.approx(10e-6 + 4e-6 + 2 * 1e9 / (50e9 * 0.92))   # at NCCL's 0.92
    assert float(coll.collective_time("all_reduce", 1, 1e9, L, SYM)) == 0   # one rank sends nothing
    with pytest.raises(ValueError):
        coll.collective_time("all_reduce", 4, 1e9, L, SYM, algorithm="nvls")  # the link has no NVLS
    with pytest.raises(ValueError):
        coll.collective_time("all_gather", 4, 1e9, L, SYM, algorithm="tree")


# ---------------------------------------------------------------- published measurements
def test_h100_ring_reaches_the_measured_bus_bandwidth(cat):
    # 8×H100 SXM, NCCL_ALGO=RING, 2–4 GB: busbw 365–370 GB/s for 2 to 8 GPUs (nccl issue 1455)
    nv = link(cat, "nvlink4")
    for rid in ("h100-ring-8", "h100-ring-2"):
        r = ROWS[rid]
        k, S = int(r["gpus"]), int(r["size_bytes"])
        t = coll.collective_time("all_reduce", k, S, nv, NUM, algorithm="ring")
        assert float(r["busbw_low_gbs"]) <= busbw("all_reduce", k, S, t) <= float(r["busbw_high_gbs"]), rid


def test_h100_ring_all_gather_is_the_effective_nvlink_bandwidth(cat):
    # NVIDIA: "an effective NVLink bandwidth of 370GB/s, which you can observe as BusBw when running
    # non-allreduce operations" (nccl-tests issue 212); 4 GiB, 8 GPUs
    nv, r = link(cat, "nvlink4"), ROWS["h100-ring-8-effective"]
    t = coll.collective_time("all_gather", 8, 4 * GiB, nv, NUM)
    assert busbw("all_gather", 8, 4 * GiB, t) == pytest.approx(float(r["busbw_gbs"]), abs=1)


def test_h100_all_reduce_of_256_mb_among_8(cat):
    """The ring's 256 MB all-reduce: ≈ 211 GB/s algorithm bandwidth is the large-message bus
    bandwidth 370 GB/s / (2·7/8); the per-call latency NCCL's tuner charges (8.4 us + 14 ring
    steps × 3.4 us, Simple protocol) costs 4 % at this size, so the priced algbw lies within 5 %
    below 211 GB/s.  Hand computation with the catalog's published constants:"""
    nv = link(cat, "nvlink4")
    S = 256 * MiB
    t = coll.collective_time("all_reduce", 8, S, nv, NUM, algorithm="ring")
    hand = 8.4e-6 + 14 * 3.4e-6 + 14 / 8 * S / (450e9 * 0.824)
    assert t == pytest.approx(hand, rel=1e-12)
    algbw = coll.algorithm_bandwidth(S, t) / G
    assert 0.95 * 211 < algbw < 370.8 / 1.75
    # and NVLS, NCCL's default all-reduce on H100 (NVIDIA, nccl-tests issue 212), is what auto takes
    c = coll.candidates("all_reduce", 8, S, nv, NUM)
    assert min(c, key=c.get) == "nvls"
    assert coll.collective_time("all_reduce", 8, S, nv, NUM) == pytest.approx(c["nvls"])


def test_h100_nvls_peak_matches_the_published_figures(cat):
    # 8 GPUs: algbw "about 273" (nccl issue 1455), "~275" (NVIDIA, nccl-tests issue 212);
    # busbw 480 (both), 476 (nccl-tests issue 290), 475 on H200 (nccl-tests issue 272)
    nv = link(cat, "nvlink4")
    for S in (2 * GiB, 4 * GiB):
        t = coll.collective_time("all_reduce", 8, S, nv, NUM, algorithm="nvls")
        algbw = coll.algorithm_bandwidth(S, t) / G
        assert float(ROWS["h100-nvls-8"]["algbw_gbs"]) <= algbw <= float(ROWS["h100-nvls-8-peak"]["algbw_gbs"])
        peaks = [float(ROWS[r]["busbw_gbs"]) for r in ("h100-nvls-8", "h100-nvls-8-476", "h200-nvls-8")]
        assert min(peaks) - 1 <= busbw("all_reduce", 8, S, t) <= max(peaks) + 1


def test_b200_nvls(cat):
    # 8×B200: "830+" GB/s all-reduce busbw (nccl issue 1807); within the figure's 3 digits
    nv5 = link(cat, "nvlink5")
    S = 8 * GiB
    t = coll.collective_time("all_reduce", 8, S, nv5, NUM)
    assert busbw("all_reduce", 8, S, t) == pytest.approx(float(ROWS["b200-nvls-8"]["busbw_gbs"]), rel=0.005)


def test_nic_efficiencies_are_the_published_per_nic_rates(cat):
    # NDR 400G: 46–48 GB/s per NIC (nccl-tests issue 290); HDR 200G: ~24 GB/s (issue 252)
    for name in ("nic_400g", "ib_ndr_400g"):
        d = link(cat, name)
        assert 46 <= d["bandwidth"] * d["efficiency"] / G <= 48, name
    d = link(cat, "nic_200g")
    assert d["bandwidth"] * d["efficiency"] / G == pytest.approx(24, abs=0.5)


def test_two_hosts_ring_over_ndr(cat):
    # 2 hosts × 8 H100, 8 NDR NICs each, NCCL_ALGO=RING: the host cut (8 × 47 GB/s) is wider than
    # the GPU's 370.8 GB/s, so the ring runs at the NVLink's rate; within the NIC's stated range
    nv, nic = link(cat, "nvlink4"), link(cat, "ib_ndr_400g")
    r = ROWS["h100-ndr-2x8-ring"]
    S = 16 * GiB
    t = coll.spanning_time("all_reduce", 8, 2, S, nv, share(nic, 8, 8), NUM, algorithm="ring")
    assert float(r["busbw_low_gbs"]) - 1 <= busbw("all_reduce", 16, S, t) <= float(r["busbw_high_gbs"])


def test_four_hdr_nics_ring(cat):
    # ring all-reduce over hosts with 4 HDR NICs each, 512 MB–8 GB: busbw 93.46–97.54 (issue 252)
    nv, nic = link(cat, "nvlink4"), link(cat, "nic_200g")
    r = ROWS["hdr-4nic-ring"]
    for S in (512e6, 8e9):
        t = coll.spanning_time("all_reduce", 8, 2, S, nv, share(nic, 4, 8), NUM, algorithm="ring")
        assert float(r["busbw_low_gbs"]) <= busbw("all_reduce", 16, S, t) <= float(r["busbw_high_gbs"])


# ---------------------------------------------------------------- which algorithm wins
def test_tree_beats_ring_for_small_messages_at_scale_ring_for_large(cat):
    """NCCL's tuner prices the tree's latency logarithmically and its bandwidth at 0.92 × ½ of the
    bus bandwidth (tuning.cc); with the same constants, 64 hosts of one GPU over NDR: the tree
    wins 1 MB, the ring wins 4 GB — as NCCL auto uses tree at small and medium sizes."""
    nv, nic = link(cat, "nvlink4"), link(cat, "ib_ndr_400g")
    small = coll.spanning_candidates("all_reduce", 1, 64, 1e6, nv, share(nic, 8, 8), NUM)
    large = coll.spanning_candidates("all_reduce", 1, 64, 4e9, nv, share(nic, 8, 8), NUM)
    assert small["tree"] < small["ring"] / 5
    assert large["ring"] < large["tree"]
    # inside one host too: 8 GPUs without NVLS, 1 MB vs 1 GB
    plain = dict(nv, nvls=False)
    a = coll.candidates("all_reduce", 8, 1e6, plain, NUM)
    b = coll.candidates("all_reduce", 8, 1e9, plain, NUM)
    assert a["tree"] < a["ring"] and b["ring"] < b["tree"]
    # the crossover by hand: tree − ring = (6 − 14)·α + (2/0.92 − 1.75)·S/B_e = 0
    S_x = 8 * 3.4e-6 * 450e9 * 0.824 / (2 / 0.92 - 1.75)
    c = coll.candidates("all_reduce", 8, np.array([0.99 * S_x, 1.01 * S_x]), plain, NUM)
    assert c["tree"][0] < c["ring"][0] and c["ring"][1] < c["tree"][1]


def test_hierarchical_for_groups_spanning_hosts(cat):
    nv, nic = link(cat, "nvlink4"), link(cat, "nic_200g")
    inter = share(nic, 1, 8)            # one 200G NIC for 8 GPUs: 1/8 of 24 GB/s each
    S = 1e9
    h = coll.hierarchical_time("all_reduce", 8, 2, S, nv, inter, NUM)
    # by hand: intra RS of S (7 steps), inter AR of S/8 between 2 hosts (auto: ring = tree for 2),
    # intra AG of S
    rs = 8.4e-6 + 7 * 3.4e-6 + 7 / 8 * S / (450e9 * 0.824)
    Bn = 25e9 * 0.96 / 8
    ar = min(8.4e-6 + 2 * 14e-6 + 1.0 * (S / 8) / Bn, 8.4e-6 + 2 * 14e-6 + 2 * (S / 8) / (Bn * 0.92))
    assert h == pytest.approx(rs + ar + rs, rel=1e-12)
    c = coll.spanning_candidates("all_reduce", 8, 2, S, nv, inter, NUM)
    assert set(c) == {"ring", "tree", "hierarchical"}
    # the flat ring crosses the host cut (24 GB/s) 2·15/16 of S; hierarchical sends 1/8 of S over it
    assert c["hierarchical"] < c["ring"]
    assert coll.spanning_time("all_reduce", 8, 2, S, nv, inter, NUM) == pytest.approx(min(c.values()))
    # two hosts: the tree's (and the hierarchy's) busbw exceeds the network's bandwidth, as NCCL's
    # tree does on two nodes (NVIDIA, nccl-tests issue 196)
    assert busbw("all_reduce", 16, S, c["tree"]) > 25 * 0.96
    assert busbw("all_reduce", 16, S, c["ring"]) <= 25 * 0.96
    # reduce-scatter / all-gather compose the same way
    rs2 = coll.hierarchical_time("reduce_scatter", 8, 2, S, nv, inter, NUM)
    assert rs2 == pytest.approx(rs + 8.4e-6 + 14e-6 + 0.5 * (S / 8) / Bn, rel=1e-12)
    ag2 = coll.hierarchical_time("all_gather", 8, 2, S, nv, inter, NUM)
    assert ag2 == pytest.approx(rs2, rel=1e-12)


def test_all_to_all_and_send(cat):
    nv, nic = link(cat, "nvlink4"), link(cat, "ib_ndr_400g")
    S = 64e6
    a2a = coll.collective_time("all_to_all", 8, S, nv, NUM)
    assert a2a == pytest.approx(8.4e-6 + 7 * 3.4e-6 + 7 / 8 * S / (450e9 * 0.824))
    send = coll.collective_time("send", 2, S, nic, NUM)
    assert send == pytest.approx(8.4e-6 + 14e-6 + S / (50e9 * 0.94))
    # across 2 hosts of 8: 7/16 of the buffer on NVLink, 8/16 on the GPU's NIC — the NIC side sets it
    span = coll.spanning_time("all_to_all", 8, 2, S, nv, share(nic, 8, 8), NUM)
    assert span == pytest.approx(8.4e-6 + max(7 * 3.4e-6 + 7 / 16 * S / 370.8e9, 14e-6 + 8 / 16 * S / 47e9))


# ---------------------------------------------------------------- numpy and sympy agree
def test_numpy_and_sympy_paths_agree(cat):
    nv, nic = link(cat, "nvlink4"), link(cat, "ib_ndr_400g")
    inter = share(nic, 8, 8)
    k = np.array([1, 2, 4, 8, 8, 8])
    S = np.array([1e3, 1e6, 3e7, 1e8, 1e9, 4e9])
    ks, Ss = sp.symbols("k S", positive=True)
    for op in coll.OPS:
        num = coll.collective_time(op, k, S, nv, NUM)
        sym = coll.collective_time(op, ks, Ss, nv, SYM)
        for i in range(len(k)):
            assert float(sym.xreplace({ks: sp.Integer(int(k[i])), Ss: sp.Float(S[i])})) == \
                pytest.approx(num[i], rel=1e-12), (op, i)
        hosts = np.array([1, 2, 3, 4, 16, 64])
        num = coll.spanning_time(op, 8, hosts, S, nv, inter, NUM)
        hs = sp.Symbol("h", positive=True)
        sym = coll.spanning_time(op, 8, hs, Ss, nv, inter, SYM)
        for i in range(len(hosts)):
            assert float(sym.xreplace({hs: sp.Integer(int(hosts[i])), Ss: sp.Float(S[i])})) == \
                pytest.approx(num[i], rel=1e-12), (op, i)


# ---------------------------------------------------------------- `use collective`
def _load(tmp_path, body):
    f = tmp_path / "c.plan"
    f.write_text('import "@catalog/hardware.plan"\n' + body, encoding="utf-8")
    return dsl.load(f)


def test_use_collective_block(tmp_path):
    r = _load(tmp_path, 'plan q {\n  use collective { op = "all_reduce"; size = 256 MB; group = 8; '
                        'link = nvlink4; algorithm = "ring" }\n}\n'
                        'plan a extends q { use collective { algorithm = "auto" } }\n'
                        'plan h extends q { use collective { group = 16; gpus_per_host = 8; nic = ib_ndr_400g; '
                        'algorithm = "hierarchical" } }\n')
    assert not r.errors
    S = 256e6
    hand = 8.4e-6 + 14 * 3.4e-6 + 1.75 * S / (450e9 * 0.824)
    assert float(r.base_value("q.collective_time")) == pytest.approx(hand, rel=1e-12)
    assert float(r.base_value("q.algorithm_bandwidth")) == pytest.approx(S / hand, rel=1e-12)
    assert float(r.base_value("q.bus_bandwidth")) == pytest.approx(1.75 * S / hand, rel=1e-12)
    nvls = 25e-6 + S / (450e9 * 0.611)
    assert float(r.base_value("a.collective_time")) == pytest.approx(nvls, rel=1e-12)
    assert "auto chose nvls" in r.nodes["a.collective_time"].doc
    rs = 8.4e-6 + 7 * 3.4e-6 + 7 / 8 * S / (450e9 * 0.824)
    ar = 8.4e-6 + 2 * 14e-6 + 1.0 * (S / 8) / (50e9 * 0.94)      # 2 hosts: the ring (the tree moves 2·S)
    assert float(r.base_value("h.collective_time")) == pytest.approx(2 * rs + ar, rel=1e-12)
    assert float(r.base_value("h.bus_bandwidth")) == pytest.approx(2 * 15 / 16 * S / (2 * rs + ar), rel=1e-12)


@pytest.mark.parametrize("body,code", [
    ('use collective { size = 1 GB; group = 8; link = pcie4_x16; algorithm = "nvls" }', "out-of-range"),
    ('use collective { op = "all_gather"; size = 1 GB; group = 8; link = nvlink4; algorithm = "tree" }',
     "out-of-range"),
    ('use collective { size = 1 GB; group = 16; gpus_per_host = 8; link = nvlink4 }', "missing-parameter"),
    ('use collective { size = 1 GB; group = 12; gpus_per_host = 8; link = nvlink4; nic = nic_400g }',
     "out-of-range"),
])
def test_use_collective_errors(tmp_path, body, code):
    with pytest.raises(PlanError) as exc:
        _load(tmp_path, "plan q {\n  " + body + "\n}\n")
    assert code in {d.code for d in exc.value.diagnostics}


def test_cli_prints_the_answer(tmp_path):
    from conftest import run_main
    f = tmp_path / "c.plan"
    f.write_text('import "@catalog/hardware.plan"\nplan q { use collective { size = 256 MB; group = 8; '
                 'link = nvlink4; algorithm = "ring" } }\n', encoding="utf-8")
    rc, out, err = run_main("eval", str(f))
    assert rc == 0, err
    assert "bus_bandwidth" in out and "algorithm_bandwidth" in out
    rc, out, err = run_main("eval", str(f).replace("c.plan", "missing.plan"))
    assert rc == 1


# ---------------------------------------------------------------- the training step
@pytest.fixture(scope="module")
def search_case():
    from dsl.results.evaluation import evaluate_file
    from plugins.training import layout_search as ls
    case = ROOT / "specs/cases/layout-qwen3-8b-4090.plan"
    ws = evaluate_file(case)
    plan = next(p for p, d in ws.decls.items() if "layout_search" in d.uses)
    K, meta = ls.constants(ws, plan)
    X = ls.grid(ls.knob_lists(ws, plan), int(K["gpus"]))
    # the same case priced in roofline mode (the device curve and the matrix shapes in K)
    text = case.read_text(encoding="utf-8").replace("  use layout {", '  use layout { efficiency = "roofline"', 1)
    wr = evaluate_file(case, text=text)
    R, _ = ls.constants(wr, plan)
    assert R["mode"] == "roofline"
    return K, meta, X, R


def test_mfu_mode_is_unchanged(search_case):
    K, meta, X, _ = search_case
    a = lm.evaluate(K, X, NUM, meta["activations"], meta["moe"])
    b = lm.evaluate(dict(K, mode="mfu"), X, NUM, meta["activations"], meta["moe"])
    # mfu mode: the ring at the link's bandwidth and the layout's latency knob, whatever the link's
    # collective fields say
    c = lm.evaluate({k: v for k, v in K.items() if not k.startswith(("link_", "nic_"))}, X, NUM,
                    meta["activations"], meta["moe"])
    for term in lm.TERMS + ("step", "memory"):
        assert np.array_equal(a[term], b[term], equal_nan=True), term
        assert np.array_equal(a[term], c[term], equal_nan=True), term


def test_roofline_mode_prices_collectives_with_the_algorithm_model(search_case):
    K, meta, X, R = search_case
    r = lm.evaluate(R, X, NUM, meta["activations"], meta["moe"])
    intra, inter = lm.link_dicts(R)
    assert intra == {"bandwidth": 32e9, "latency": 5.7e-6, "launch": 8.4e-6, "efficiency": 0.75, "nvls": False}
    assert inter["bandwidth"] == pytest.approx(25e9 * 8 / 8) and inter["efficiency"] == 0.96
    # TP: 4 all-reduces per layer and micro-batch of b·s·h·2 bytes on the host's PCIe (no SP, no recompute)
    i = next(j for j in range(len(X["t"])) if X["t"][j] == 2 and X["sp"][j] == 0 and X["r"][j] == 0
             and X["c"][j] == 1)
    act = X["b"][i] * K["s"] * K["h"] * 2
    ring = 8.4e-6 + 2 * 5.7e-6 + 1.0 * act / (32e9 * 0.75)
    tree = 8.4e-6 + 2 * 5.7e-6 + 2 * act / (32e9 * 0.75 * 0.92)
    m = K["B"] / (X["d"][i] * X["b"][i])
    assert r["tp"][i] == pytest.approx(4 * K["L"] / X["p"][i] * m * min(ring, tree), rel=1e-12)
    # the sympy path (one candidate at a time) agrees with the numpy grid
    for j in range(0, len(X["t"]), max(1, len(X["t"]) // 25)):
        Xj = {k: (float(v[j]) if k == "b" else int(v[j])) for k, v in X.items()}
        s = lm.evaluate(R, Xj, SYM, meta["activations"], meta["moe"])
        for term in ("tp", "cp", "pp", "dp", "step"):
            assert float(s[term]) == pytest.approx(float(r[term][j]), rel=1e-9, abs=1e-12), (term, j)


def test_roofline_dp_bandwidth_is_the_collectives_bus_bandwidth(search_case):
    K, meta, X, R = search_case
    r = lm.evaluate(R, X, NUM, meta["activations"], meta["moe"])
    j = next(j for j in range(len(X["t"])) if X["z"][j] == 0 and X["t"][j] == 1 and X["p"][j] == 1)
    d = int(X["d"][j])
    g_call = K["bytes_G"] * K["N"] / K["L"]                 # one layer's gradient (tp = pp = 1)
    gph = int(K["gph"])
    intra, inter = lm.link_dicts(R)
    if d > gph:
        t = coll.spanning_time("all_reduce", gph, d // gph, g_call, intra, inter, NUM)
    else:
        t = coll.collective_time("all_reduce", d, g_call, intra, NUM)
    assert r["dp_bw"][j] == pytest.approx(2 * (d - 1) / d * g_call / t, rel=1e-9)


def test_roofline_pipeline_send_is_scattered_over_the_tp_ranks(search_case):
    """Megatron's scatter/gather (Narayanan et al. 2021 §4.1): a stage boundary sends 1/t of the
    b·s·h·2-byte activation per TP rank and the next stage all-gathers the t pieces on its TP link
    (no gather with sequence parallelism, whose activation is already split t ways)."""
    K, meta, X, R = search_case
    r = lm.evaluate(R, X, NUM, meta["activations"], meta["moe"])
    intra, _ = lm.link_dicts(R)
    picked = 0
    for i in range(len(X["t"])):
        t, p, c, d, sp_on = (int(X[k][i]) for k in ("t", "p", "c", "d", "sp"))
        if p == 1 or t == 1 or c != 1:
            continue
        act = X["b"][i] * K["s"] * K["h"] * 2
        send = lm.comm_time("send", p, t * c * d, act / t, R, NUM)
        gather = 0.0 if sp_on else coll.collective_time("all_gather", t, act, intra, NUM)
        assert r["pp_message"][i] == pytest.approx(send + gather, rel=1e-12)
        picked += 1
    assert picked > 0

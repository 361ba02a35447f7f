"""Offload and where to convert gradients (book ch. 10 §10.2.3).

Spec: ``specs/cases/memory-offload.plan``: G = 96 MiB BF16 gate-projection gradient,
C_g = 1,008 GB/s, C_c = 307.2 GB/s; PCIe 4.0 x16 (32 GB/s) and NVLink-C2C (450 GB/s).
"""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval, run_cli
from dsl.results.solver import solve_query

OFF = CASES / "memory-offload.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(OFF)


@pytest.mark.parametrize("name,book,tol", [
    ("pcie4.cpu_path_time", 4.13, 0.005),
    ("pcie4.gpu_path_time", 6.59, 0.005),
    ("c2c.cpu_path_time", 1.21, 0.005),
    ("c2c.gpu_path_time", 0.75, 0.005),
])
def test_path_times(ws, name, book, tol):
    assert qval(ws, name, "ms") == pytest.approx(book, abs=tol)


def test_path_components(ws):
    # book: CPU path ≈ 3.15 + 0.98 ms, GPU path ≈ 0.30 + 6.29 ms on PCIe 4.0
    tl = ws.timelines[("pcie4", "offload_cpu")].schedule
    i = tl.index()
    assert (tl.finish[i["send_source"]] - tl.start[i["send_source"]]) * 1e3 == pytest.approx(3.15, abs=0.005)
    assert (tl.finish[i["convert_on_cpu"]] - tl.start[i["convert_on_cpu"]]) * 1e3 == pytest.approx(0.98, abs=0.005)
    tg = ws.timelines[("pcie4", "offload_gpu")].schedule
    j = tg.index()
    assert (tg.finish[j["convert_on_gpu"]] - tg.start[j["convert_on_gpu"]]) * 1e3 == pytest.approx(0.30, abs=0.005)
    assert (tg.finish[j["send_target"]] - tg.start[j["send_target"]]) * 1e3 == pytest.approx(6.29, abs=0.005)


def test_winner_flips(ws):
    assert qval(ws, "pcie4.cpu_path_time") < qval(ws, "pcie4.gpu_path_time")
    assert qval(ws, "c2c.gpu_path_time") < qval(ws, "c2c.cpu_path_time")


def test_break_even_is_solved_symbolically(ws):
    sol = solve_query(ws, ws.queries[0])
    assert float(sol.value) / 1e9 == pytest.approx(147, abs=0.5)            # book: ≈147 GB/s
    Cc, Cg = 307.2e9, 1008e9
    assert float(sol.value) == pytest.approx(1 / (3 * (1 / Cc - 1 / Cg)), rel=1e-9)
    assert sol.method == "symbolic"


def test_gpu_peaks_from_holds(ws):
    # GPU path: 96 MiB input and 192 MiB output live together -> 288 MiB; CPU path: 96 MiB
    assert qval(ws, "pcie4.gpu_path_peak", "MiB") == 288
    assert qval(ws, "pcie4.cpu_path_peak", "MiB") == 96
    assert set(ws.timelines[("pcie4", "offload_gpu")].profiles["gpu"].live) == {"source_on_gpu", "target_on_gpu"}


def test_exposed_wait(ws):
    # T_wait = max(0, V/B − W): 96 MiB over 32 GB/s with a 2 ms window (hand computation)
    G = 96 * 2 ** 20
    assert qval(ws, "pcie4.offload_wait", "ms") == pytest.approx(G / 32e9 * 1e3, rel=1e-12)
    assert qval(ws, "pcie4_window.offload_wait", "ms") == pytest.approx(G / 32e9 * 1e3 - 2, rel=1e-12)
    assert qval(ws, "c2c.offload_volume", "MiB") == 192          # the GPU path sends FP32


def test_cli_solve_shows_formula():
    code, out, err = run_cli("solve", OFF)
    assert code == 0, err
    assert "147.3 GB/s" in out and "symbolic" in out
    assert "pcie4.offload.cpu_bw" in out and "pcie4.offload.gpu_bw" in out

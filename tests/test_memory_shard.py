"""Shard or recompute? (book ch. 10 §10.2.4, fig. 10-16).

Spec: ``specs/cases/memory-shard-or-recompute.plan``.  The smallest fitting d and the affordable
transient memory are `solve` answers of the plan, not formulas typed here.
"""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval, run_cli
from dsl.results.solver import solve_query

SHARD = CASES / "memory-shard-or-recompute.plan"
N = 8_190_735_360
GiB = 2 ** 30


@pytest.fixture(scope="module")
def ws():
    return dsl.load(SHARD)


@pytest.mark.parametrize("name,book", [
    ("zero3_d8.persistent_memory", 15.3),
    ("zero3_d8.memory_per_gpu", 25.3),      # 3.3 GiB over 22 GiB
    ("zero3_d8.memory_margin", -3.3),
    ("zero3_d16.persistent_memory", 7.6),
    ("zero3_d16.memory_per_gpu", 17.6),
])
def test_book_values(ws, name, book):
    assert qval(ws, name, "GiB") == pytest.approx(book, abs=0.05)


def test_fits(ws):
    assert ws.requirement("zero3_d8", "fits_memory")["ok"] is False
    assert ws.requirement("zero3_d16", "fits_memory")["ok"] is True


def test_smallest_d_is_solved(ws):
    q = ws.queries[0]
    sol = solve_query(ws, q)
    # 16N/d + 10 GiB = 22 GiB  ->  d = 16N / 12 GiB (hand computation), whole: the next integer
    assert float(sol.value) == pytest.approx(16 * N / (12 * GiB), rel=1e-9)
    assert sol.method == "symbolic"
    assert "zero3_d8.zero.group >= 11" in sol.note


def test_affordable_transient_is_solved(ws):
    sol = solve_query(ws, ws.queries[1])
    # book: "about 6.7 GiB left for the other tensors and buffers"
    assert float(sol.value) / GiB == pytest.approx(6.7, abs=0.05)


def test_curve_matches_16n_over_d(ws):
    from plugins.training.zero import memory_curve
    ds = [1, 4, 8, 11, 16, 32]
    ys = memory_curve(ws, "zero3_d8", ds)
    for d, y in zip(ds, ys):
        assert y == pytest.approx(16 * N / d + 10 * GiB, rel=1e-12)


def test_cli_solve_and_figure(tmp_path):
    code, out, err = run_cli("solve", SHARD)
    assert code == 0, err
    assert "as a whole number: zero3_d8.zero.group >= 11" in out
    code, out, err = run_cli("figure", SHARD, "--plan", "zero3_d8", "--name", "memory-shards", "-o", tmp_path)
    assert code == 0, err
    svg = (tmp_path / "zero3_d8-memory-shards.svg").read_text()
    assert "smallest d that fits: 11" in svg

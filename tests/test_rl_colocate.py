"""Colocated switching between training and generation (book ch. 10 §10.5.2, Figs. 10-38/10-39):
``specs/cases/rl-colocate.plan``.  Book: H100 SXM 80 GB ≈ 74.5 GiB; training 44 GiB and
generation ≈43.3 GiB alone; load everything then free ≈83.3 GiB (does not fit); load weights →
free training state → allocate KV ≈59.3 GiB; the difference is one KV pool (24 GiB)."""
from __future__ import annotations

import itertools
import random

import pytest

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query
from plugins.workloads.rl_colocate import best_order

CASE = CASES / "rl-colocate.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_usable_and_phases(ws):
    assert qval(ws, "naive.switch_usable", "GiB") == pytest.approx(74.5, abs=0.05)
    assert qval(ws, "naive.memory_before", "GiB") == 44
    assert qval(ws, "naive.memory_after", "GiB") == pytest.approx(43.3, abs=0.05)


def test_peaks_of_the_two_orders(ws):
    assert qval(ws, "naive.switch_peak", "GiB") == pytest.approx(83.3, abs=0.05)
    assert qval(ws, "reordered.switch_peak", "GiB") == pytest.approx(59.3, abs=0.05)
    assert qval(ws, "naive.switch_saving", "GiB") == pytest.approx(24, abs=1e-9)   # one KV pool
    assert ws.requirement("naive", "switch_fits")["ok"] is False
    assert ws.requirement("reordered", "switch_fits")["ok"] is True


def test_peak_is_the_engine_profile(ws):
    prof = ws.timelines[("naive", "switch")].profiles["gpu"]
    assert set(prof.live) == {"training_state", "generation_weights", "kv_pool", "shared"}


def test_search_finds_the_books_order(ws):
    tl = ws.timelines[("naive", "switch_best")]
    assert [tl.activities[a].label for a in tl.schedule.ids] == [
        "load generation_weights", "free training_state", "allocate kv_pool"]
    assert qval(ws, "naive.best_switch_peak", "GiB") == pytest.approx(59.3, abs=0.05)
    assert ws.requirement("naive", "best_switch_fits")["ok"] is True


def test_without_the_constraint_freeing_first_wins(write_plan):
    # hand: free the training state first -> 4, +15.3, +24 = 43.3; the peak is the 44 GiB before
    p = write_plan('plan p { device = d\n use rl_colocate { buffers = ["t", "w", "kv", "s"]; '
                   'sizes = [40 GiB, 15.3 GiB, 24 GiB, 4 GiB]; resident = ["t", "s"]; '
                   'steps = ["load w", "allocate kv", "free t"] } }\ndevice d { memory = 80 GB }')
    ws = dsl.load(p)
    tl = ws.timelines[("p", "switch_best")]
    assert [tl.activities[a].label for a in tl.schedule.ids][0] == "free t"
    assert qval(ws, "p.best_switch_peak", "GiB") == pytest.approx(44, abs=1e-9)


def test_least_memory_for_the_naive_order_is_a_solve(ws):
    s = solve_query(ws, ws.queries[0])
    assert s.value / 2 ** 30 == pytest.approx(83.3, abs=0.05)


def _brute(base, deltas, prec):
    best = None
    for order in itertools.permutations(range(len(deltas))):
        if any(order.index(i) > order.index(j) for i, j in prec):
            continue
        lv = pk = base
        for i in order:
            lv += deltas[i]
            pk = max(pk, lv)
        best = pk if best is None else min(best, pk)
    return best


def test_dynamic_programme_matches_permutations():
    rng = random.Random(7)
    for _ in range(40):
        k = rng.randint(1, 6)
        deltas = [rng.choice([-1, 1]) * rng.randint(1, 50) for _ in range(k)]
        prec = [(i, j) for i in range(k) for j in range(i + 1, k) if rng.random() < 0.2]
        peak, order = best_order(100.0, deltas, prec, list(range(k)))
        assert peak == _brute(100.0, deltas, prec)
        assert sorted(order) == list(range(k)) and all(order.index(i) < order.index(j) for i, j in prec)


def test_cycle_of_constraints_has_no_order():
    assert best_order(0.0, [1, 1], [(0, 1), (1, 0)], [0, 1]) is None

"""The Dask engine runs the same search as tasks and agrees exactly with the local engine."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, run_cli

np = pytest.importorskip("numpy")
distributed = pytest.importorskip("distributed")
from plugins.training import layout_search as search  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.mark.parametrize("plan", ["gpus48", "gpus48_formula"])
def test_dask_equals_local(client, plan):
    ws = dsl.load(CASES / "layout-qwen3-8b-4090.plan")
    local = search.run(ws, plan)
    seen = []
    dist = search.run(ws, plan, engine="dask", client=client, chunks=5, progress=lambda d, n: seen.append((d, n)))
    assert seen[-1] == (5, 5)
    assert local.columns.keys() == dist.columns.keys()
    for k, col in local.columns.items():
        assert np.array_equal(col, dist.columns[k]), k          # bit for bit
    assert (local.best, local.runner_up, local.pareto) == (dist.best, dist.runner_up, dist.pareto)
    assert local.explanations == dist.explanations


def test_cli_dask_engine_local_cluster():
    case = CASES / "layout-qwen3-8b-4090.plan"
    code, out_dask, err = run_cli("search", case, "--plan", "gpus48", "--engine", "dask", "--chunks", "3",
                                  "--format", "json")
    assert code == 0, err
    assert "search: 3/3 chunks done" in err
    code, out_local, _ = run_cli("search", case, "--plan", "gpus48", "--format", "json")
    assert out_dask == out_local


def test_unreachable_scheduler_is_an_error():
    code, out, err = run_cli("search", CASES / "layout-qwen3-8b-4090.plan", "--plan", "gpus48", "--engine", "dask",
                             "--scheduler", "tcp://127.0.0.1:1")
    assert code == 2
    assert "error[search]" in err and "cannot reach the Dask scheduler" in err and "Traceback" not in err

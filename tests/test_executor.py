"""One executor for heavy work (dsl/engine/executor.py): results in input order and the same
output byte for byte whatever runs them — this process, two local processes, or a real
multi-process Dask cluster — for the layout search, a structural sweep and `plan check`/`plan
eval` over a folder of plans.  The tests that start workers are marked ``executor`` (each a few
seconds; one Dask cluster of two worker processes is shared by the module)."""
from __future__ import annotations

import functools
import operator
import sys

import pytest

from conftest import CASES, run_cli
from dsl.engine.executor import Executor, ExecutorError, MissingEngine, groups

LAYOUT = CASES / "layout-qwen3-8b-4090.plan"
pytestmark = pytest.mark.xdist_group("executor")     # one module, one test worker: one cluster at a time


@pytest.fixture(scope="module")
def scheduler():
    """The address of a real Dask cluster: two worker processes (processes=True)."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    yield cluster.scheduler_address
    cluster.close()


def engines(scheduler):
    return [("--engine", "serial"), ("--engine", "processes", "--workers", "2"),
            ("--engine", "dask", "--scheduler", scheduler)]


# ---------------------------------------------------------------- the interface
def test_groups_are_contiguous_and_fixed():
    assert groups(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert groups(list(range(2)), 5) == [[0], [1]]
    assert groups([1, 2], None) == [[1], [2]] and groups([], 3) == []


def test_one_worker_runs_in_this_process():
    ex = Executor("processes", workers=1)
    assert not ex.parallel and ex.slots == 1
    assert ex.map(lambda x: x * 2, [3, 1, 2]) == [6, 2, 4]     # a lambda: nothing is pickled


@pytest.mark.executor
def test_map_keeps_input_order_on_every_engine(scheduler):
    fn = functools.partial(operator.mul, 3)
    with Executor("processes", workers=2) as a, Executor("dask", scheduler=scheduler) as b:
        for ex in (a, b):
            assert ex.parallel
            seen = []
            assert ex.map(fn, range(10), chunks=3, progress=lambda d, n: seen.append((d, n))) == list(range(0, 30, 3))
            assert seen[-1] == (3, 3)


def test_bad_engines_are_located_errors():
    with pytest.raises(ExecutorError, match="unknown engine 'spark'"):
        Executor("spark")
    with pytest.raises(ExecutorError, match="whole number >= 1"):
        Executor("processes", workers=0)
    with pytest.raises(ExecutorError, match="--scheduler") as e:
        Executor("processes", scheduler="tcp://127.0.0.1:1")
    assert "--engine dask" in e.value.hint


def test_dask_missing_is_exit_3_with_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(MissingEngine, match=r"plan-dsl\[dist\]"):
        Executor("dask").map(abs, [1])
    (tmp_path / "a.plan").write_text("plan p { x = 1 s }\n", encoding="utf-8")
    (tmp_path / "b.plan").write_text("plan q { x = 2 s }\n", encoding="utf-8")
    code, out, err = run_cli("check", tmp_path, "--engine", "dask")
    assert code == 3 and "error[missing-dependency]" in err and "plan-dsl[dist]" in err and "Traceback" not in err


def test_unreachable_scheduler_is_exit_2(tmp_path):
    (tmp_path / "a.plan").write_text("plan p { x = 1 s }\n", encoding="utf-8")
    code, out, err = run_cli("check", tmp_path, "--engine", "dask", "--scheduler", "tcp://127.0.0.1:1")
    assert code == 2 and "error[engine]: cannot reach the Dask scheduler" in err and "hint:" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------- the same output on every engine
@pytest.mark.executor
def test_layout_search_is_identical_on_every_engine(scheduler):
    outs = []
    for e in engines(scheduler):
        code, out, err = run_cli("search", LAYOUT, "--plan", "gpus48", "--chunks", "3", "--format", "json", *e)
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.executor
def test_structural_sweep_is_identical_on_every_engine(scheduler, tmp_path):
    outs = []
    for k, e in enumerate(engines(scheduler)):
        csv = tmp_path / f"s{k}.csv"
        code, out, err = run_cli("sweep", LAYOUT, "--plan", "gpus48", "--vary", "gpus48.layout.tp=[2, 4, 5]",
                                 "--vary", "gpus48.mfu=30%:50%:3", "--out", str(csv), *e)
        assert code == 0, err
        assert "not built at gpus48.layout.tp = 5" in out
        outs.append((out, csv.read_bytes()))
    assert outs[0] == outs[1] == outs[2]


def _folder(tmp_path):
    d = tmp_path / "plans"
    (d / "sub").mkdir(parents=True)
    (d / ".hidden").mkdir()
    (d / "b.plan").write_text("plan b { t = 2 s; n = 3 }\n", encoding="utf-8")
    (d / "a.plan").write_text("plan a { t = 1 s + 1 GiB }\n", encoding="utf-8")      # a unit mismatch
    (d / "sub" / "c.plan").write_text("plan c { t = 4 s * 2 }\n", encoding="utf-8")
    (d / ".hidden" / "x.plan").write_text("not a plan\n", encoding="utf-8")
    return d


@pytest.mark.executor
@pytest.mark.parametrize("cmd", ["check", "eval"])
def test_a_folder_is_identical_on_every_engine(scheduler, tmp_path, cmd):
    d = _folder(tmp_path)
    runs = [run_cli(cmd, "plans", *e, cwd=tmp_path) for e in engines(scheduler)]
    assert runs[0] == runs[1] == runs[2]
    code, out, err = runs[0]
    assert code == 1                                   # one file fails: the run fails
    assert [x for x in out.splitlines() if x.startswith("== ")] == [
        "== plans/a.plan ==", "== plans/b.plan ==", "== plans/sub/c.plan =="]      # sorted; hidden folders skipped
    assert "error[unit-mismatch]" in err and err.rstrip().endswith("3 files: 2 passed, 1 failed (plans/a.plan)")


def test_several_files_and_json(tmp_path):
    d = _folder(tmp_path)
    code, out, err = run_cli("check", d / "sub" / "c.plan", d / "b.plan", "--format", "json")
    assert code == 0, err
    import json
    files = json.loads(out)["files"]
    assert [f["file"] for f in files] == [str(d / "b.plan"), str(d / "sub" / "c.plan")]
    assert all(f["exit"] == 0 and f["output"]["ok"] for f in files)


def test_one_file_is_the_command_as_always(tmp_path):
    d = _folder(tmp_path)
    code, out, err = run_cli("check", d / "b.plan")
    assert code == 0 and "==" not in out and "files:" not in err


def test_an_empty_folder_is_a_usage_error(tmp_path):
    code, out, err = run_cli("check", tmp_path)
    assert code == 2 and "no .plan file under" in err


@pytest.mark.executor
def test_serving_search_simulations_are_identical_on_every_engine(scheduler):
    """The simulations run ahead in batches on several workers; the rules read them in order."""
    runs = [run_cli("eval", CASES / "serving-slo-azure.plan", "--format", "json", *e) for e in engines(scheduler)]
    assert runs[0][0] == 0, runs[0][2]
    assert runs[0][1] == runs[1][1] == runs[2][1]

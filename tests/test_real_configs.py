"""Regression tests built from defects found on real configurations (Hugging Face configs of
Llama 3.1 8B/70B from the catalog, H100 SXM): the reproductions are the `.plan` files of
tests/data/real_configs/ (their models read `@catalog/hf/…`, so the repository stands alone).

Expected numbers come from hand computations over the plans' own printed quantities or from
cited tables, never from the output of the code under test.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import dsl
from conftest import REPO_ROOT, qval, run_cli

DATA = REPO_ROOT / "tests" / "data" / "real_configs"


# ---------------------------------------------------------------- stragglers with tp > 1
# E[max of 16 standard normals] = 1.76599 (Harter 1961, "Expected values of normal order
# statistics", Biometrika 48, table for n = 16, largest order statistic).
E16 = 1.76599


@pytest.fixture(scope="module")
def strag():
    return dsl.load(DATA / "strag.plan")


@pytest.fixture(scope="module")
def strag_without(tmp_path_factory):
    """The same plans without the stragglers block: the step the delay is added to."""
    text = (DATA / "strag.plan").read_text(encoding="utf-8")
    p = tmp_path_factory.mktemp("strag") / "strag.plan"
    p.write_text(text.replace("\n  use stragglers { jitter = 2 % } }", " }"), encoding="utf-8")
    return dsl.load(p)


def test_stragglers_with_tensor_parallelism_evaluate():
    code, out, err = run_cli("eval", str(DATA / "strag.plan"))
    assert code == 0, err
    assert "cycle" not in out + err


@pytest.mark.parametrize("plan", ["a", "b"])      # tp = 2, tp = 1
def test_straggler_delay_extends_compute(strag, strag_without, plan):
    """e_16·σ with σ = 2 % of the compute time, added once to the step: the delay follows
    compute and comes before the exposed TP all-reduces that followed it."""
    assert "use stragglers" not in Path(strag_without.path).read_text(encoding="utf-8")
    mu = qval(strag, f"{plan}.compute_time", "s")
    delay = qval(strag, f"{plan}.straggler_delay", "s")
    assert delay == pytest.approx(E16 * 0.02 * mu, rel=1e-5)
    base = qval(strag_without, f"{plan}.step_time", "s")
    assert qval(strag, f"{plan}.step_time", "s") == pytest.approx(base + delay, rel=1e-12)
    path = strag.critical_path(plan, "step")["path"]
    i = path.index("compute")
    assert path[i + 1] == "straggler_delay"
    if plan == "a":
        assert path[i + 2] == "tp"

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


# ---------------------------------------------------------------- pipeline figures of the layout's pipeline
@pytest.fixture(scope="module")
def pp70b():
    # Llama-3.1-70B, TP8·PP8 with m = 64 micro-batches (1F1B), and the same interleaved with
    # virtual = 5 (2 × 8 × 64 × 5 = 5,120 forward and backward slots)
    return dsl.load(DATA / "pp70b.plan", plans=["f1b", "il"])


def test_pipeline_figures_list_for_the_layouts_pipeline():
    """The layout builds its pipeline without a `use pipeline` block: the figures named the
    schedule from that block's parameter, which does not exist there (an internal error)."""
    pytest.importorskip("matplotlib")
    code, out, err = run_cli("figure", str(DATA / "pp70b.plan"), "--plan", "f1b", "--list")
    assert code == 0, err
    assert "internal error" not in err
    names = {ln.split()[0]: ln for ln in out.splitlines() if "plans:" in ln}
    assert "f1b" in names["pipeline-gantt"] and "f1b" in names["pipeline-memory"]


@pytest.mark.parametrize("plan,schedule", [("f1b", "1f1b"), ("il", "interleaved")])
def test_pipeline_gantt_names_the_layouts_schedule(pp70b, plan, schedule):
    pytest.importorskip("matplotlib")
    from dsl.present.figures import new_figure
    specs = pp70b.plugins.figures
    fig = new_figure()
    assert specs["pipeline-gantt"].draw(pp70b, plan, fig)
    assert fig.axes[0].get_title().startswith(f"{plan}: {schedule}, ")
    fig = new_figure()
    assert specs["pipeline-memory"].draw(pp70b, plan, fig)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [schedule]
    # one bar per slot: 2·p·m·v forward and backward slots on p = 8 stages
    v = 5 if plan == "il" else 1
    tl = pp70b.timeline(plan, "pipeline")
    assert sum(1 for a in tl.activities.values() if a.kind in ("forward", "backward")) == 2 * 8 * 64 * v


def test_report_draws_the_pipeline_figures():
    pytest.importorskip("matplotlib")
    code, out, err = run_cli("report", str(DATA / "pp70b.plan"), "--plan", "il", "--format", "html")
    assert code == 0, err
    for title in ("Pipeline schedules on one time axis", "Per-stage peak memory of each schedule"):
        assert f"{title} [plugin pipeline]</figcaption>" in out
    assert "(failed:" not in out

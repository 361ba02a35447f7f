"""The tool's own error as a distribution (`use bands { error = "sampled" }`, plugins/training/bands.py).

Expectations are hand computations from the corpus's ratios — measured / predicted step time of
the test-set runs of the plan's device and regime, recomputed here from training-runs.csv and
predictions.csv (not from bands.csv) — with Monte Carlo tolerances of a few standard errors.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

import dsl
from conftest import run_cli
from dsl.results.odds import sample_plan
from test_bands import HEAD, _corpus_ratios

REPO = Path(__file__).resolve().parent.parent
N = 40_000

BASE = HEAD.replace("deadline = 30 day", "deadline = 20 day") + """
plan fp8 {
  model = llama31_70b; workload = cpt; device = h100_sxm
  gpus = 64; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 8; pp = 4; zero = 1; sequence_parallel = true; recompute = "full"
               matmul_precision = "fp8"; link = nvlink4; nic = ib_ndr_400g }
  use finish {}
}
plan held extends fp8 { use bands {} }
plan sampled extends fp8 { use bands { error = "sampled" } }
"""
RATIOS = _corpus_ratios("h100_sxm", "dense", True, True)


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    f = tmp_path_factory.mktemp("bands") / "sampled.plan"
    f.write_text(BASE, encoding="utf-8")
    return dsl.load(f)


def test_opting_out_changes_nothing(res):
    """error = "none" (the default): train and finish times are the prediction, exactly."""
    for q in ("step_time", "train_time", "finish_time", "step_budget", "deadline_slack"):
        assert res.value(f"held.{q}") == res.value(f"fp8.{q}"), q
    assert res.value("held.step_time_error") == 1


def test_expected_value_is_the_runs_mean_ratio(res):
    """Deterministic outputs: step_time_error = mean of the group's ratios; train time = steps ×
    step time × that mean; the finish time likewise (no reserved time, no overhead here)."""
    mean = sum(RATIOS) / len(RATIOS)
    assert res.value("sampled.step_time_error") == pytest.approx(mean, rel=1e-3)   # bands.csv keeps 4 digits
    pred = res.value("fp8.steps") * res.value("fp8.step_time", "s") / 86400
    assert res.value("fp8.train_time", "day") == pytest.approx(pred, rel=1e-12)
    assert res.value("sampled.train_time", "day") == pytest.approx(pred * mean, rel=1e-3)
    assert res.value("sampled.finish_time", "day") == pytest.approx(pred * mean, rel=1e-3)
    assert res.value("sampled.step_time") == res.value("fp8.step_time")     # the step itself is the prediction
    # the band's ends stay on the prediction: steps × step time × the band's low / high ratio
    lo = res.value("sampled.train_time_low", "day") / pred
    assert lo == pytest.approx(res.value("sampled.step_time_low") / res.value("sampled.step_time"), rel=1e-9)


def test_sampled_ratio_resamples_the_runs(res):
    """Each run equally likely: the sampled mean is the runs' mean (within 4 standard errors) and
    every draw is one of the runs' ratios."""
    o = sample_plan(res, "sampled", N, seed=3)
    x = o.values["sampled.step_time_error"]
    mean = sum(RATIOS) / len(RATIOS)
    sd = math.sqrt(sum((r - mean) ** 2 for r in RATIOS) / len(RATIOS))
    assert float(x.mean()) == pytest.approx(mean, abs=4 * sd / math.sqrt(N) + 1e-3)
    assert {round(float(v), 3) for v in x} <= {round(r, 3) for r in RATIOS}


def test_probability_of_the_deadline_by_hand(res):
    """P(meets_deadline) = the share of runs whose ratio r keeps steps × step time × r within
    20 days, within 4 standard errors."""
    pred = res.value("fp8.train_time", "day")
    hand = sum(r <= 20 / pred for r in RATIOS) / len(RATIOS)
    # a ratio within 4 digits of the cut would make the count depend on bands.csv's rounding
    assert all(abs(r - 20 / pred) > 2e-3 for r in RATIOS)
    o = sample_plan(res, "sampled", N, seed=5)
    assert 0 < hand < 1
    assert o.probability("meets_deadline") == pytest.approx(hand, abs=4 * math.sqrt(hand * (1 - hand) / N))
    # without the error model the deadline is a certainty either way
    assert sample_plan(res, "held", 100, seed=5).probability("meets_deadline") in (0.0, 1.0)


def test_same_seed_same_bytes(tmp_path):
    f = tmp_path / "p.plan"
    f.write_text(BASE, encoding="utf-8")
    outs = [run_cli("eval", str(f), "--plan", "sampled", "--samples", "2000", "--seed", "7", "--format", "json")
            for _ in range(2)]
    assert outs[0][0] == 0 and outs[0][1] == outs[1][1]


def test_no_band_is_a_located_error(tmp_path):
    f = tmp_path / "p.plan"
    f.write_text(BASE + 'plan on_h200 extends sampled { device = h200 }\n', encoding="utf-8")
    code, out, err = run_cli("eval", str(f), "--plan", "on_h200")
    assert code != 0 and "Traceback" not in err
    assert "error[unvalidated]" in err and 'error = "sampled"' in err and "use calibrate" in err
    # at the value the plan inherits: the `error = "sampled"` of plan sampled
    line = next(i for i, t in enumerate(BASE.splitlines(), 1) if 'error = "sampled"' in t)
    assert f"p.plan:{line}:" in err

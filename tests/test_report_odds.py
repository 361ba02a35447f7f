"""The report's odds section: a plan with uncertain inputs or random quantities gets the
percentiles of what varies, each requirement's probability and the histogram of the quantity a
requirement bounds against its bound; a plan without any gets none.

The probability asserted is a hand computation: in specs/cases/deadline-odds.plan the finish time
of gpus48 is reserved + steps·t_s·(1 + L) with the step inversely proportional to the MFU, so it
meets the 30-day deadline exactly when MFU ≥ m*, the break-even MFU (31.34 %: `plan solve
specs/cases/cpt-qwen3-8b-4090.plan --query "gpus48.mfu for gpus48.finish_time == cpt.deadline"`);
MFU ~ normal(40 %, 5 %) gives P = 1 − Φ((31.34 − 40)/5) = Φ(1.732) = 0.9584, and 10,000 samples
carry a standard error of 0.002 (tolerance: 4 of them; the failure rate, also uncertain there,
moves the checkpoint overhead by hundredths of a percent, far below it).
"""
from __future__ import annotations

import math

from conftest import REPO_ROOT, run_main

CASES = REPO_ROOT / "specs" / "cases"


def test_report_of_an_uncertain_plan_has_odds_and_the_deadline_histogram():
    rc, out, err = run_main("report", str(CASES / "deadline-odds.plan"), "--format", "html", "--plan", "gpus48")
    assert rc == 0, err
    assert "<h3>Odds</h3>" in out and "10,000 samples (seed 0)" in out
    i = out.index("meets_deadline: P = ")
    p = float(out[i + len("meets_deadline: P = "):].split("<")[0])
    hand = 0.5 * (1 + math.erf(((40 - 31.34) / 5) / math.sqrt(2)))
    assert abs(p - hand) <= 4 * math.sqrt(hand * (1 - hand) / 10_000)
    assert "Distribution of finish_time over the samples against meets_deadline" in out


def test_report_text_lists_only_what_varies():
    rc, out, _ = run_main("report", str(CASES / "deadline-odds.plan"), "--format", "text", "--plan", "gpus48")
    assert rc == 0
    sec = out[out.index("odds over 10,000 samples"):]
    sec = sec[:sec.index("requirements")]
    assert "finish_time" in sec and "memory_per_gpu" not in sec      # memory does not depend on the MFU


def test_report_of_a_certain_plan_has_no_odds():
    rc, out, _ = run_main("report", str(CASES / "cpt-qwen3-8b-4090.plan"), "--format", "html", "--plan", "gpus48")
    assert rc == 0 and "<h3>Odds</h3>" not in out


"""Review: memory held across zero-duration activities.  A hold whose start and end fall at
the same instant used to be dropped (`durations = [0 s, 0 s]` gave a peak of 0 GiB for a
1 GiB tensor); it is live at that instant, and such holds follow the dependency order."""
from __future__ import annotations

import pytest

from conftest import run_cli


def _peak(tmp_path, body: str) -> str:
    f = tmp_path / "b.plan"
    f.write_text("plan p {\n  use buffers {\n    " + body + "\n  }\n}\n")
    code, out, err = run_cli("eval", f)
    assert code == 0, err
    return next(line.split()[-1] for line in out.splitlines() if line.startswith("peak_memory"))


@pytest.mark.parametrize("first, last, durations, peak", [
    ('["f", "b"]', '["b", "b"]', "[0 s, 0 s]", "3"),        # a lives through b: 1 + 2 GiB
    ('["f", "b"]', '["f", "b"]', "[0 s, 0 s]", "2"),        # a freed after f, before c at b
    ('["f", "b"]', '["f", "b"]', "[1 s, 1 s]", "2"),        # unchanged with durations
    ('["f", "f"]', '["f", "b"]', "[0 s, 1 s]", "3"),        # both live during the instant f
])
def test_zero_duration_holds(tmp_path, first, last, durations, peak):
    body = (f'ops = ["f", "b"]; names = ["a", "c"]; sizes = [1 GiB, 2 GiB]; first = {first}; last = {last}; '
            f"durations = {durations}")
    assert _peak(tmp_path, body) == peak


def test_engine_instant_hold_is_live():
    from dsl.engine.timeline import Timeline
    tl = Timeline("p", "t")
    tl.add("x", 0, resource="r")
    tl.add("y", 0, resource="r")
    tl.hold("h", 5, pool="m", start="x", end="y")
    sched = tl.compute(float)
    prof = tl.profile("m", float, sched)
    assert prof.peak == 5 and prof.live == ["h"]

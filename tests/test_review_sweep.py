"""Review: a sweep whose bounds leave a parameter's allowed range is an error, not a table of
inf/NaN (`--vary gpus48.mfu=0%:50%` divided by zero at the first point)."""
from __future__ import annotations

import pytest

from conftest import CASE, run_cli

pytest.importorskip("numpy")


@pytest.mark.parametrize("vary", ["gpus48.mfu=0%:50%:3", "gpus48.mfu=30%:150%:3", "gpus48.gpus=0:4:3",
                                  "cpt.tokens=-1token:5token:3"])
def test_sweep_outside_allowed_range(vary):
    code, out, err = run_cli("sweep", CASE, "--vary", vary)
    assert code == 2, out       # the --vary range is the command line
    assert "error[out-of-range]" in err and "allowed range" in err
    assert "inf" not in out and "nan" not in out


def test_sweep_inside_range_still_works():
    code, out, err = run_cli("sweep", CASE, "--vary", "gpus48.mfu=30%:50%:3", "--vary", "cpt.tokens=1e9token:5e9token:2")
    assert code == 0, err
    assert "nan" not in out and "inf" not in out

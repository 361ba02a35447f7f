"""Review: unwritable output paths and bad numeric arguments are usage errors (exit 2) with
a clear message, never an "internal error"."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CASE, run_cli, run_main


@pytest.mark.parametrize("args", [
    ("report", CASE, "-o", "{missing}/r.md"),
    ("graph", CASE, "-o", "{missing}/g.dot"),
    ("figure", CASE, "--name", "timeline", "-o", "{file}"),
])
def test_unwritable_output_is_a_usage_error(tmp_path, args):
    if args[0] == "figure":
        pytest.importorskip("matplotlib")
    f = tmp_path / "afile"
    f.write_text("x")
    args = [str(a).format(missing=tmp_path / "no" / "such", file=f) for a in args]
    code, out, err = run_cli(*args)
    assert code == 2, err
    assert "internal error" not in err and "Traceback" not in err
    assert "error[output]: cannot write" in err


def test_an_unwritable_output_names_its_real_cause(tmp_path):
    """`-o` naming a directory, a missing directory or a full device: the hint names that cause
    (it said "check that the directory exists" for all three)."""
    code, _, err = run_cli("report", CASE, "-o", tmp_path)
    assert code == 2 and "it is a directory" in err and "name a file inside it" in err, err
    code, _, err = run_cli("report", CASE, "-o", tmp_path / "no" / "r.md")
    assert code == 2 and f"the directory '{tmp_path / 'no'}' does not exist" in err and "create it" in err
    if Path("/dev/full").exists():
        code, _, err = run_cli("report", CASE, "-o", "/dev/full")
        assert code == 2 and "no space left on the device" in err and "free space" in err, err
    assert "check that the directory exists" not in err


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_report_refuses_a_directory_taking_no_files_before_building(tmp_path, monkeypatch):
    """`plan report -o /proc/x.html` as root: the permission bits (os.access) let root write
    anywhere, so the path was refused only after the whole report was built (30 s for the
    Azure trace).  The path is now tried first; the plan is never loaded, and nothing is left
    behind where the probe succeeds."""
    import os

    import dsl.cli
    import dsl.cli.output

    def no_load(*a, **k):
        raise AssertionError("the report was built before its output path was checked")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: True)   # as for root
    monkeypatch.setattr(dsl.cli.output, "load", no_load)   # where `plan report` finds it
    code, _, err = run_main("report", CASE, "-o", "/proc/nope.html")     # in process: the patches apply
    assert code == 2 and "error[output]: cannot write '/proc/nope.html'" in err, err
    assert "the directory '/proc' takes no new files" in err and "Traceback" not in err
    monkeypatch.setattr(os, "access", real_access)
    assert dsl.cli.cannot_write(tmp_path / "r.html") is None and list(tmp_path.iterdir()) == []


def test_sweep_out_unwritable(tmp_path):
    pytest.importorskip("numpy")
    code, _, err = run_cli("sweep", CASE, "--vary", "gpus48.mfu=30%:50%:3", "--out", tmp_path / "no" / "x.csv")
    assert code == 2 and "error[output]" in err and "internal error" not in err


@pytest.mark.parametrize("args", [
    ("sweep", CASE, "--vary", "gpus48.mfu=30%:50%:3", "--random", "-2"),
    ("sweep", CASE, "--vary", "gpus48.mfu=30%:50%:3", "--random", "0"),
    ("timeline", CASE, "--width", "0"),
    ("timeline", CASE, "--width", "-5"),
    ("explain", CASE, "gpus48.finish_time", "--depth", "-1"),
])
def test_bad_counts_are_usage_errors(args):
    code, _, err = run_cli(*args)
    assert code == 2, err
    assert "expected a whole number" in err and "internal error" not in err


def test_timeline_in_unit_of_wrong_dimension():
    code, out, err = run_cli("timeline", CASE, "--in", "GB")
    assert code == 2 and "error[unit-mismatch]" in err and out == ""

"""Review: data files and list inputs of plugins at their edges — a byte-order mark, a
division by zero or non-UTF-8 bytes in a CSV, a directory instead of a file, and negative or
zero items in lists of lengths/sizes/factors.  Each is a located diagnostic, never a plugin
crash or a silently wrong number."""
from __future__ import annotations

import pytest

from conftest import run_cli

MODELS = 'import "@catalog/models.plan"\n'


def _long_context(tmp_path, lengths: str):
    f = tmp_path / "t.plan"
    f.write_text(MODELS + f'plan p {{ model = qwen3_8b; use long_context {{ lengths = "{lengths}"; devices = 4 }} }}\n')
    return run_cli("eval", f)


def test_csv_with_byte_order_mark_and_crlf_is_read(tmp_path):
    (tmp_path / "h.csv").write_bytes(b"\xef\xbb\xbflength,count\r\n4096,2\r\n")
    code, out, err = _long_context(tmp_path, "h.csv")
    assert code == 0, err
    assert "16,781,312" in out            # 2 x 4096*4097/2


@pytest.mark.parametrize("body, message", [
    (b"length,count\n4096,1/0\n", "row 2 is not two numbers"),
    (b"length,count\n\xff\xfe,2\n", "is not UTF-8 text"),
    (b"length,count\n-4096,2\n", "lengths must be positive"),
    (b"length,count\n0,2\n", "lengths must be positive"),
])
def test_bad_csv_rows_are_bad_file(tmp_path, body, message):
    (tmp_path / "h.csv").write_bytes(body)
    code, out, err = _long_context(tmp_path, "h.csv")
    assert code == 1
    assert "error[bad-file]" in err and message in err, err
    assert "error[plugin]" not in err and "internal error" not in err
    assert "t.plan:2:" in err


def test_directory_is_not_reported_as_missing(tmp_path):
    (tmp_path / "adir").mkdir()
    code, _, err = _long_context(tmp_path, "adir")
    assert code == 1 and "is a directory, not a file" in err


def test_scaling_fit_reads_csv_with_byte_order_mark(tmp_path, repo_root=None):
    from conftest import REPO_ROOT
    data = (REPO_ROOT / "specs" / "data" / "scaling-synthetic.csv").read_bytes()
    (tmp_path / "d.csv").write_bytes(b"\xef\xbb\xbf" + data)
    case = (REPO_ROOT / "specs" / "cases" / "scaling-fit.plan").read_text()
    f = tmp_path / "sf.plan"
    f.write_text(case.replace("../data/scaling-synthetic.csv", "d.csv"))
    pytest.importorskip("scipy")
    code, out, err = run_cli("eval", f)
    assert code == 0, err


@pytest.mark.parametrize("items, bad", [("[0 token]", "0 token"), ("[4096 token, -5 token]", "-5 token")])
@pytest.mark.parametrize("cmd", ["eval", "check"])
def test_list_items_outside_the_parameter_range(tmp_path, items, bad, cmd):
    f = tmp_path / "t.plan"
    f.write_text(MODELS + f"plan p {{ model = qwen3_8b; use long_context {{ seq_lens = {items} }} }}\n")
    code, out, err = run_cli(cmd, f)
    assert code == 1
    assert "error[out-of-range]" in err and f"= {bad} is outside (0, inf)" in err, err
    assert "division-by-zero" not in err

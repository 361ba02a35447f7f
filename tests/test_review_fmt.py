"""Review: `plan fmt` on a file (or standard input) that is not UTF-8 reports error[encoding]
like `plan eval` does, instead of an internal error; a read-only file is error[output]."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, run_cli


def test_fmt_file_not_utf8(tmp_path):
    f = tmp_path / "bad.plan"
    f.write_bytes(b"\xff\xfe workload w { a = 1 }\n")
    for args in (("fmt", f), ("fmt", "--check", f)):
        code, _, err = run_cli(*args)
        assert code == 1 and "error[encoding]" in err and "internal error" not in err


def test_fmt_stdin_not_utf8_and_crlf():
    p = subprocess.run([sys.executable, "-m", "dsl.cli", "fmt", "-"], input=b"\xff\xfe\n", capture_output=True,
                       cwd=REPO_ROOT)
    assert p.returncode == 1 and b"error[encoding]" in p.stderr
    p = subprocess.run([sys.executable, "-m", "dsl.cli", "fmt", "-"], input=b"workload w {\r\n a = 1 }\r\n",
                       capture_output=True, cwd=REPO_ROOT)
    assert p.returncode == 0 and p.stdout == b"workload w {\n  a = 1\n}\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write read-only files")
def test_fmt_read_only_file(tmp_path):
    f = tmp_path / "ro.plan"
    f.write_text("workload   w { a = 1 }\n")
    f.chmod(0o444)
    code, _, err = run_cli("fmt", f)
    assert code == 2 and "error[output]" in err

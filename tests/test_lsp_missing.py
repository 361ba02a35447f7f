"""``plan lsp`` without pygls: a located message with the install hint and exit 3 (a missing
optional package), no traceback; and the core never imports pygls on its own."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_lsp_without_pygls_says_how_to_install_it(monkeypatch, capsys):
    from dsl.cli import main
    monkeypatch.setitem(sys.modules, "pygls", None)      # `import pygls` raises ImportError
    assert main(["lsp"]) == 3
    err = capsys.readouterr().err
    assert "error[missing-dependency]" in err and 'pip install "plan-dsl[lsp]"' in err
    assert "Traceback" not in err


def test_the_core_and_the_cli_do_not_import_pygls():
    code = ("import sys, dsl, dsl.cli, dsl.cli.lsp, dsl.cli.lsp_features; "
            "dsl.load('specs/cases/cpt-qwen3-8b-4090.plan'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pygls', 'lsprotocol')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert out.strip() == "[]"

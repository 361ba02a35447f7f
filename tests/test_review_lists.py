"""Review: `plan get` and `plan explain` of a list field print the list (`[1 s, 120 s]`),
not the Python repr of the internal ListVal/Val/Span objects."""
from __future__ import annotations

from conftest import run_cli


def test_get_and_explain_list_fields(tmp_path):
    f = tmp_path / "g.plan"
    f.write_text('workload w { a = [1 s, 2 min, x]; x = 3 s; d = ["p", "q"]; c = true }\n')
    assert run_cli("get", f, "w.a")[1] == "[1 s, 120 s, 3 s]\n"
    assert run_cli("get", f, "w.d")[1] == '["p", "q"]\n'
    assert run_cli("get", f, "w.c")[1] == "true\n"
    code, out, err = run_cli("explain", f, "w.a")
    assert code == 0 and "w.a = [1 s, 120 s, 3 s]" in out
    assert "ListVal" not in out and "Span(" not in out

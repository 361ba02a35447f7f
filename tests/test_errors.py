"""Every error class of the language, run through the CLI as a user would.

Each test writes a small `.plan` file to ``tmp_path``, runs the CLI from the repository root
(in this process; ``python -m dsl.cli`` in a new interpreter for the tests marked so below and
for all of them under ``PLAN_TEST_CLI_PROCESS=1``) and checks the diagnostic contract: exit code 1 (2 for usage errors),
``file:line:column: error[code]: summary`` on stderr, the offending source line quoted with a
caret under the offending text, a ``hint:`` and never a Python traceback.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

WORKLOAD = """\
workload cpt {
  tokens       = 100e9 token
  seq_len      = 8192 token
  global_batch = 384 seq
  deadline     = 30 day
  reserved     = 5 day
}
"""

# A small but complete training plan on the catalog hardware; tests replace parts of it.
PLAN = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"

""" + WORKLOAD + """
plan p {
  model = qwen3_8b;  workload = cpt;  device = rtx4090
  gpus = 48;  gpus_per_host = 8
  mfu = 40 %
  use memory { usable = 22 GiB; transient = 10 GiB }
  use compute {}
  use zero { stage = 3; link = pcie4_x16 }
  use finish {}
}
"""


# ---------------------------------------------------------------- helpers
def run(*args: str, cwd: Path = ROOT, process: bool | None = None) -> subprocess.CompletedProcess:
    """The CLI on ``args``: in this process (``conftest.run_cli``, the same ``dsl.cli.main``
    without ≈1 s of interpreter start-up per call) unless ``process=True`` or
    ``PLAN_TEST_CLI_PROCESS=1``; then ``python -m dsl.cli`` in a new interpreter."""
    from conftest import run_cli

    if process is None:
        process = bool(os.environ.get("PLAN_TEST_CLI_PROCESS"))
    if not process:
        rc, out, err = run_cli(*args, cwd=cwd, process=False)
        return subprocess.CompletedProcess(["plan", *args], rc, out, err)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "dsl.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def write(tmp_path: Path, text: str, name: str = "t.plan") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def variant(old: str, new: str) -> str:
    assert PLAN.count(old) == 1, old
    return PLAN.replace(old, new)


def line_col(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """1-based line and column of the ``nth`` occurrence of ``needle`` in ``text``."""
    i = -1
    for _ in range(nth + 1):
        i = text.index(needle, i + 1)
    line = text.count("\n", 0, i) + 1
    col = i - (text.rfind("\n", 0, i) + 1) + 1
    return line, col


def assert_diag(r: subprocess.CompletedProcess, code: str, *, file: str | Path | None = None,
                at: tuple[int, int] | None = None, quoted: str | None = None, hint: str | None = "",
                exit_code: int = 1, summary: str | None = None) -> str:
    """Check one diagnostic of ``r`` and return its rendered block.

    ``at`` is (line, column); ``quoted`` is the text the caret must underline exactly (it is
    found at ``at`` in the quoted source line); ``hint`` a substring the hint must contain
    (``""``: a hint must exist; ``None``: no check).
    """
    err = r.stderr
    assert "Traceback" not in err and "Traceback" not in r.stdout, err
    assert "internal error" not in err, err
    assert r.returncode == exit_code, (r.returncode, r.stdout, err)
    pat = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error\[" + re.escape(code) + r"\]: (?P<summary>.*)$",
                     re.M)
    heads = list(pat.finditer(err))
    assert heads, f"no error[{code}] with file:line:col in:\n{err}"
    m = heads[0]
    if file is not None:
        assert m["file"] == str(file), (m["file"], str(file))
    line, col = int(m["line"]), int(m["col"])
    if at is not None:
        assert (line, col) == at, ((line, col), at, err)
    if summary is not None:
        assert summary in m["summary"], (summary, m["summary"])
    # the block of this diagnostic: up to the next diagnostic head or the error count
    rest = err[m.end():]
    nxt = re.search(r"^(\S.*?:\d+:\d+: (error|warning)\[|\d+ errors?$)", rest, re.M)
    block = m.group(0) + (rest[: nxt.start()] if nxt else rest)
    lines = block.splitlines()
    # the quoted source line and its caret line
    gutter = f"{line:>4} | "
    qi = next((i for i, ln in enumerate(lines) if ln.startswith(gutter)), None)
    assert qi is not None, f"source line {line} not quoted:\n{block}"
    src, caret = lines[qi][len(gutter):], lines[qi + 1]
    assert set(caret.strip()) == {"^"}, caret
    start = caret.index("^") - len(gutter)
    width = len(caret.strip())
    assert start == col - 1, (caret, col)
    if quoted is not None:
        assert src[start:start + width] == quoted, (src[start:start + width], quoted)
    if hint is not None:
        hints = [ln.strip()[len("hint: "):] for ln in lines if ln.strip().startswith("hint: ")]
        assert hints and hints[0].strip(), f"no hint:\n{block}"
        assert hint in hints[0], (hint, hints[0])
    return block


# ---------------------------------------------------------------- syntax
def test_syntax_error_lists_expected_tokens(tmp_path):
    text = "device d {\n  memory = 24 GB\n  mem_bw 1008 GB/s\n}\n"
    p = write(tmp_path, text)
    r = run("check", str(p), process=True)     # as a user runs it: a new interpreter
    assert_diag(r, "syntax", file=p, at=line_col(text, "1008"), quoted="1008",
                        hint="name = value", summary="unexpected '1008'; expected '='")


def test_syntax_error_thousands_separator(tmp_path):
    text = "device d { x = 1,000 GB }\n"
    p = write(tmp_path, text)
    r = run("eval", str(p))
    assert_diag(r, "syntax", file=p, at=line_col(text, ","), quoted=",", hint="thousands separators",
                summary="expected")


def test_syntax_error_unclosed_brace_at_end_of_file(tmp_path):
    text = "device d {\n  x = 5 GB\n"
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert_diag(r, "syntax", file=p, hint="'{' is not closed", summary="unexpected end of file; expected")


def test_syntax_error_single_quoted_string(tmp_path):
    text = "device d { x = 'a' }\n"
    p = write(tmp_path, text)
    assert_diag(run("check", str(p)), "syntax", file=p, at=line_col(text, "'"), hint="double quotes")


# ---------------------------------------------------------------- names
def test_unknown_name_did_you_mean(tmp_path):
    text = 'import "@catalog/hardware.plan"\ndevice d { a = rtx4090.memroy }\n'
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert_diag(r, "unknown-name", file=p, at=line_col(text, "rtx4090.memroy"), quoted="rtx4090.memroy",
                hint="did you mean 'memory'?", summary="has no field 'memroy'")


def test_unknown_local_name_did_you_mean(tmp_path):
    text = "device d { bandwidth = 5 GB/s; x = 2 * bandwith }\n"
    p = write(tmp_path, text)
    assert_diag(run("check", str(p)), "unknown-name", file=p, at=line_col(text, "bandwith"),
                quoted="bandwith", hint="did you mean 'bandwidth'?")


# ---------------------------------------------------------------- units
def test_unit_mismatch(tmp_path):
    text = "device d {\n  x = 5 GB + 3 s\n}\n"
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert_diag(r, "unit-mismatch", file=p, at=line_col(text, "5 GB"), quoted="5 GB + 3 s",
                hint="same dimension", summary="cannot add B and s")


def test_unknown_unit_hint(tmp_path):
    text = "device d { memory = 5 KB }\n"
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert_diag(r, "unknown-unit", file=p, at=line_col(text, "KB"), quoted="KB",
                hint="kB for 1000 bytes or KiB for 1024 bytes", summary="unknown unit 'KB'")


def test_unknown_unit_did_you_mean(tmp_path):
    text = "device d { memory = 5 GIB }\n"
    p = write(tmp_path, text)
    assert_diag(run("check", str(p)), "unknown-unit", file=p, quoted="GIB", hint="did you mean")


# ---------------------------------------------------------------- cycles
def test_cyclic_definition_names_the_cycle(tmp_path):
    text = "device d {\n  a = b + 1 GB\n  b = a\n}\n"
    p = write(tmp_path, text)
    r = run("check", str(p))
    block = assert_diag(r, "cycle", file=p, hint="break the cycle")
    assert "d.a -> d.b -> d.a" in block or "d.b -> d.a -> d.b" in block, block


def test_extends_cycle(tmp_path):
    text = "device a extends b { x = 1 }\ndevice b extends a { y = 2 }\n"
    p = write(tmp_path, text)
    r = run("check", str(p))
    block = assert_diag(r, "cycle", file=p, hint="cannot extend itself")
    assert re.search(r"a -> b -> a|b -> a -> b", block), block


def test_extends_itself(tmp_path):
    text = "device a extends a { x = 1 }\n"
    p = write(tmp_path, text)
    block = assert_diag(run("check", str(p)), "cycle", file=p, at=line_col(text, "a {"), quoted="a")
    assert "a -> a" in block, block


# ---------------------------------------------------------------- files and declarations
def test_missing_import(tmp_path):
    text = 'import "@catalog/hardware.plan"\nimport "nope.plan"\ndevice d { x = 1 }\n'
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert_diag(r, "missing-import", file=p, at=(2, 1), quoted='import "nope.plan"', hint="relative to the importing file")


def test_files_that_import_each_other_are_loaded_once(tmp_path):
    """An import cycle is no error (README, docs/language.md): each file is loaded once, and
    either file as the root sees both files' declarations."""
    (tmp_path / "a.plan").write_text('import "b.plan"\ndevice da { memory = 1 GB }\nplan pa { y = db.memory * 2 }\n',
                                     encoding="utf-8")
    (tmp_path / "b.plan").write_text('import "a.plan"\ndevice db { memory = 3 GB }\nplan pb { y = da.memory * 2 }\n',
                                     encoding="utf-8")
    for root, plan, want in (("a.plan", "pa", "6"), ("b.plan", "pb", "2")):
        r = run("check", str(tmp_path / root))
        assert r.returncode == 0 and r.stderr == "", r.stderr
        r = run("get", str(tmp_path / root), f"{plan}.y")
        assert r.returncode == 0 and r.stdout.strip() == want, r.stderr


def test_missing_catalog_import(tmp_path):
    text = 'import "@catalog/hardwar.plan"\n'
    p = write(tmp_path, text)
    assert_diag(run("check", str(p)), "missing-import", file=p, at=(1, 1), hint="@catalog/hardware.plan")


def test_duplicate_declaration_same_file(tmp_path):
    text = "device d { x = 1 }\ndevice d { x = 2 }\n"
    p = write(tmp_path, text)
    block = assert_diag(run("check", str(p)), "duplicate", file=p, at=(2, 8), quoted="d", hint="rename one")
    assert "first declared at" in block


def test_duplicate_declaration_across_files(tmp_path):
    write(tmp_path, "device rtx4090 { memory = 1 GB }\n", "mine.plan")
    text = 'import "@catalog/hardware.plan"\nimport "mine.plan"\n'
    p = write(tmp_path, text)
    r = run("check", str(p))
    block = assert_diag(r, "duplicate", quoted="rtx4090", hint="global across imported files",
                        summary="'rtx4090' is declared twice")
    assert "first declared at" in block and "hardware.plan" in block, block


def test_duplicate_field(tmp_path):
    text = "device d {\n  memory = 24 GB\n  memory = 48 GB\n}\n"
    p = write(tmp_path, text)
    block = assert_diag(run("check", str(p)), "duplicate", file=p, at=(3, 3), quoted="memory",
                        hint="one assignment per name", summary="assigned twice")
    assert "first assigned at" in block


def test_duplicate_block_parameter(tmp_path):
    text = variant("use compute {}", "use compute { label_tokens = 1 token; label_tokens = 2 token }")
    p = write(tmp_path, text)
    assert_diag(run("eval", str(p)), "duplicate", file=p, at=line_col(text, "label_tokens", 1),
                quoted="label_tokens", hint="one assignment")


def test_unknown_declaration_kind(tmp_path):
    text = "devise d { memory = 24 GB }\n"
    p = write(tmp_path, text)
    assert_diag(run("check", str(p)), "unknown-kind", file=p, at=(1, 1), quoted="devise",
                hint="did you mean 'device'?")


def test_not_utf8(tmp_path):
    p = tmp_path / "t.plan"
    p.write_bytes(b"device d { x = 1 }\n# caf\xe9\n")
    assert_diag(run("check", str(p)), "encoding", file=p, at=(2, 6), hint="UTF-8")


# ---------------------------------------------------------------- values
def test_division_by_zero_literal(tmp_path):
    text = "device d {\n  x = 1 GB / (2 s - 2 s)\n}\n"
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert_diag(r, "division-by-zero", file=p, at=line_col(text, "2 s - 2 s"), quoted="2 s - 2 s",
                hint="zero")


def test_division_by_zero_through_a_reference(tmp_path):
    text = "device d {\n  t = 0 s\n  x = 1 GB / t\n}\n"
    p = write(tmp_path, text)
    assert_diag(run("eval", str(p)), "division-by-zero", file=p, hint="d.t")


def test_zero_gpus_is_out_of_range_not_a_division_by_zero(tmp_path):
    text = variant("gpus = 48", "gpus = 0")
    p = write(tmp_path, text)
    r = run("eval", str(p))
    assert_diag(r, "out-of-range", file=p, at=line_col(text, "0;"), quoted="0", hint="number of GPUs",
                summary="'gpus' = 0 is outside [1, inf)")
    assert "division-by-zero" not in r.stderr, r.stderr


def test_out_of_range_mfu(tmp_path):
    text = variant("mfu = 40 %", "mfu = 150 %")
    p = write(tmp_path, text)
    assert_diag(run("eval", str(p)), "out-of-range", file=p, at=line_col(text, "150 %"), quoted="150 %",
                hint="efficiency", summary="outside (0, 1]")


def test_square_root_of_negative_is_an_error(tmp_path):
    text = "device d { x = sqrt(0 GB^2 - 4 GB^2) }\n"
    p = write(tmp_path, text)
    r = run("get", str(p), "d.x")
    assert_diag(r, "out-of-range", file=p, hint="negative", summary="not a real number")


def test_type_error_string_in_arithmetic(tmp_path):
    text = 'device d { x = "fast" * 2 }\n'
    p = write(tmp_path, text)
    assert_diag(run("check", str(p)), "type", file=p, at=line_col(text, '"fast"'), quoted='"fast"',
                hint="numbers")


def test_unknown_function(tmp_path):
    text = "device d { x = sqr(4) }\n"
    p = write(tmp_path, text)
    assert_diag(run("check", str(p)), "unknown-name", file=p, quoted="sqr", hint="did you mean 'sqrt'?")


# ---------------------------------------------------------------- use blocks
def test_unknown_use_block_did_you_mean(tmp_path):
    text = variant("use finish {}", "use finsh {}")
    p = write(tmp_path, text)
    assert_diag(run("eval", str(p)), "unknown-plugin", file=p, at=line_col(text, "finsh"), quoted="finsh",
                hint="did you mean 'finish'?")


def test_unknown_block_parameter(tmp_path):
    text = variant("use compute {}", "use compute { label_tokns = 5 token }")
    p = write(tmp_path, text)
    assert_diag(run("eval", str(p)), "unknown-name", file=p, at=line_col(text, "label_tokns"),
                quoted="label_tokns", hint="did you mean 'label_tokens'?")


def test_missing_required_parameter(tmp_path):
    text = variant("use zero { stage = 3; link = pcie4_x16 }", "use zero { stage = 3 }")
    p = write(tmp_path, text)
    assert_diag(run("eval", str(p)), "missing-parameter", file=p, at=line_col(text, "zero"), quoted="zero",
                hint="link = ", summary="needs 'link'")


def test_missing_plan_parameter(tmp_path):
    text = variant("  mfu = 40 %\n", "")
    p = write(tmp_path, text)
    assert_diag(run("eval", str(p)), "missing-parameter", file=p, at=line_col(text, "p {"), quoted="p",
                hint="mfu = ", summary="needs 'mfu'")


def test_bad_choice(tmp_path):
    text = variant("use memory { usable", 'use memory { optimizer = "adma"; usable')
    p = write(tmp_path, text)
    assert_diag(run("eval", str(p)), "out-of-range", file=p, at=line_col(text, '"adma"'), quoted='"adma"',
                hint='did you mean "adam"?')


# ---------------------------------------------------------------- results, not errors
def test_not_fitting_in_memory_is_a_result(tmp_path):
    p = write(tmp_path, variant("usable = 22 GiB", "usable = 10 GiB"))
    r = run("eval", str(p))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert re.search(r"FAIL\s+p\.fits_memory", r.stdout), r.stdout
    strict = run("eval", "--strict", str(p))
    assert strict.returncode == 1, strict.stderr
    assert "Traceback" not in strict.stderr
    assert re.search(r"FAIL\s+p\.fits_memory", strict.stdout)
    js = run("eval", "--format", "json", str(p))
    assert js.returncode == 0
    reqs = {q["name"]: q["ok"] for q in json.loads(js.stdout)["plans"]["p"]["requirements"]}
    assert reqs["fits_memory"] is False


def test_reserved_time_beyond_the_deadline_is_a_failing_verdict_naming_both(tmp_path):
    """reserved >= deadline leaves no time to train (the step budget turns negative): a
    failing requirement with both numbers, not a silent negative budget; it is absent when
    time is left (the base plan reserves 5 of 30 days)."""
    p = write(tmp_path, variant("reserved     = 5 day", "reserved     = 1e9 day"))
    r = run("eval", str(p))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert re.search(r"FAIL\s+p\.reserved_before_deadline: cpt\.reserved < cpt\.deadline: "
                     r"1,000,000,000 < 30 day", r.stdout), r.stdout
    assert run("eval", "--strict", str(p)).returncode == 1
    p = write(tmp_path, variant("reserved     = 5 day", "reserved     = 30 day"))   # equal: none left either
    assert "FAIL p.reserved_before_deadline" in run("eval", str(p)).stdout
    assert "reserved_before_deadline" not in run("eval", str(write(tmp_path, PLAN))).stdout


def test_fitting_plan_strict_is_ok(tmp_path):
    p = write(tmp_path, PLAN)
    r = run("eval", "--strict", str(p))
    assert r.returncode == 0, r.stderr
    assert "FAIL" not in r.stdout


# ---------------------------------------------------------------- command line
def test_get_unknown_name(tmp_path):
    p = write(tmp_path, PLAN)
    r = run("get", str(p), "p.finish_tme")
    # a name the file does not have is a bad command line: exit 2 (the plan itself is fine)
    assert_diag(r, "unknown-name", file="<command line>", at=(1, 1), quoted="p.finish_tme",
                hint="did you mean 'finish_time'?", exit_code=2)
    assert r.stdout == ""


def test_get_unknown_declaration(tmp_path):
    p = write(tmp_path, PLAN)
    assert_diag(run("get", str(p), "pp.finish_time"), "unknown-name", file="<command line>",
                quoted="pp.finish_time", hint="did you mean 'p'?", exit_code=2)


def test_solve_query_syntax_error(tmp_path):
    p = write(tmp_path, PLAN)
    r = run("solve", str(p), "--query", "p.mfu for p.finish_time = cpt.deadline")
    q = "p.mfu for p.finish_time = cpt.deadline"
    assert_diag(r, "syntax", file="<query>", at=(1, q.index("=") + 1), quoted="=", hint="==", exit_code=2)


def test_solve_query_unknown_name(tmp_path):
    p = write(tmp_path, PLAN)
    r = run("solve", str(p), "--query", "p.mfo for p.finish_time == cpt.deadline")
    assert_diag(r, "unknown-name", file="<query>", quoted="p.mfo", hint="did you mean 'mfu'?", exit_code=2)


def test_solve_query_with_a_string(tmp_path):
    p = write(tmp_path, PLAN)
    r = run("solve", str(p), "--query", 'p.mfu for p.finish_time == "soon"')
    assert_diag(r, "type", file="<query>", quoted='"soon"', exit_code=2)


def test_solve_statement_unknown_target_in_file(tmp_path):
    text = PLAN + "solve p.mfo for p.finish_time == cpt.deadline\n"
    p = write(tmp_path, text)
    assert_diag(run("solve", str(p)), "unknown-name", file=p, at=line_col(text, "p.mfo"), quoted="p.mfo",
                hint="did you mean 'mfu'?")


def test_missing_root_file(tmp_path):
    r = run("check", str(tmp_path / "none.plan"), process=True)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "error[missing-file]" in r.stderr and "hint:" in r.stderr


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["eval"], ["get", "x.plan"], ["eval", "--format", "xml", "x.plan"]])
def test_usage_errors_exit_2(argv):
    r = run(*argv)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert "usage: plan" in (r.stderr + r.stdout)


# ---------------------------------------------------------------- JSON diagnostics
@pytest.mark.parametrize("cmd", ["check", "eval", "solve"])
def test_json_diagnostics(tmp_path, cmd):
    text = "device d {\n  x = 5 GB + 3 s\n}\n"
    p = write(tmp_path, text)
    r = run(cmd, "--format", "json", str(p))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    data = json.loads(r.stdout)
    (d,) = [d for d in data["diagnostics"] if d["severity"] == "error"]
    assert d["code"] == "unit-mismatch"
    assert (d["file"], d["line"], d["column"]) == (str(p), 2, 7)
    assert d["hint"]


def test_json_diagnostics_syntax(tmp_path):
    p = write(tmp_path, "device d {\n  mem_bw 1008 GB/s\n}\n")
    r = run("check", "--format", "json", str(p))
    assert r.returncode == 1
    (d,) = json.loads(r.stdout)["diagnostics"]
    assert (d["code"], d["file"], d["line"], d["column"]) == ("syntax", str(p), 2, 10)
    assert isinstance(d["related"], list)


def test_json_diagnostics_related_spans(tmp_path):
    p = write(tmp_path, "device d { x = 1 }\ndevice d { x = 2 }\n")
    (d,) = json.loads(run("check", "--format", "json", str(p)).stdout)["diagnostics"]
    assert d["code"] == "duplicate"
    assert d["related"] == [{"note": "first declared", "file": str(p), "line": 1, "column": 8}]


def test_all_errors_are_reported(tmp_path):
    text = "device d {\n  x = 5 GB + 3 s\n  y = nope\n  z = 5 KB\n}\n"
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert r.returncode == 1
    for code in ("unit-mismatch", "unknown-name", "unknown-unit"):
        assert f"error[{code}]" in r.stderr, r.stderr
    assert "3 errors" in r.stderr


def test_parameter_of_a_block_without_parameters(tmp_path):
    text = variant("use finish {}", "use finish { deadline = 3 day }")
    p = write(tmp_path, text)
    assert_diag(run("eval", str(p)), "unknown-name", file=p, at=line_col(text, "deadline = 3"), quoted="deadline",
                hint="`use finish` takes no parameters")


def test_unclosed_brace_points_at_the_open_brace(tmp_path):
    text = "plan p {\n  x = 1\n\nplan q { y = 2 }\n"
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{p}:4:6: error[syntax]" in r.stderr
    assert "the '{' opened at line 1 may be missing its '}'" in r.stderr


def test_expression_cut_by_a_newline_has_a_hint(tmp_path):
    p = write(tmp_path, "plan p {\n  x = 1 +\n}\n")
    r = run("check", str(p))
    assert r.returncode == 1 and "must end on the line it starts" in r.stderr


def test_a_typo_in_one_plan_is_one_error_not_a_cascade(tmp_path, run_cli):
    """A misspelt parameter in the first plan stops the pricing; a solve over a second,
    untouched plan's priced quantity must not add "has no field" for it."""
    f = tmp_path / "two.plan"
    f.write_text('''import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e12 token; seq_len = 8192 token; global_batch = 512 seq; deadline = 20 day }
plan a {
  model = qwen3_8b; workload = w; device = h100_sxm; gpus = 256; gpus_per_host = 8; mfu = 40 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = 80 GB }
  use layout { zer = 1; link = nvlink4; nic = nic_400g; nics_per_host = 8 }
  use finish {}
}
plan b {
  model = qwen3_8b; workload = w; device = h100_sxm; gpus = 512; gpus_per_host = 8; mfu = 40 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = 80 GB }
  use layout { zero = 1; link = nvlink4; nic = nic_400g; nics_per_host = 8 }
  use finish {}
}
solve need: b.gpus for b.finish_time <= w.deadline
''', encoding="utf-8")
    code, _, err = run_cli("eval", f)
    assert code == 1 and "did you mean 'zero'?" in err and "1 error" in err, err
    assert "has no field" not in err


def test_target_per_token_suggests_the_plain_time(write_plan, run_cli):
    # slo_tpot is a time per output token by definition: `50 ms/token` is refused, and the hint writes it for you
    code, out, err = run_cli("eval", write_plan('plan p { use batching { arrivals = "poisson"; rate = 1 request/s; '
                                                'requests = 5; input = 10 token; output = 4 token; kv_tokens = '
                                                '1000 token; step_overhead = 1 ms; slo_tpot = 50 ms/token } }\n'))
    assert code == 1 and "'slo_tpot' must be in s, got s/token" in err
    assert "hint: the value is per token, the parameter is not: write `50 ms`" in err


def test_no_follow_on_error_for_a_plan_extending_a_failed_one(tmp_path):
    # the layout error is reported once, at the parent plan's `use layout`; a child plan inherits that
    # block, so the solve's reference to its finish_time is a consequence, not a second error (it said
    # "plan 'roof' has no field 'finish_time'" with a hint about tokens and a deadline, which it has)
    p = write(tmp_path, """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload pt { tokens = 15e12 token; seq_len = 8192 token; global_batch = 2048 seq; deadline = 60 day }
plan mega {
  model = llama31_70b; workload = pt; device = h100_sxm; gpus = 1000; mfu = 40 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 8; pp = 4; zero = 1; link = nvlink4; nic = nic_400g }
}
plan roof extends mega { use layout { efficiency = "roofline" } }
solve need: roof.gpus for roof.finish_time == pt.deadline
""")
    r = run("check", str(p))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "tp·pp·cp = 32 does not divide the 1000 GPUs" in r.stderr
    assert "has no field" not in r.stderr and r.stderr.count("error[") == 1


def test_a_misspelt_name_in_an_inherited_field_is_one_error(tmp_path):
    # plans b and c extend a and inherit its misspelt model: the one mistake is reported once, at its text
    p = write(tmp_path, """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload pt { tokens = 15e12 token; seq_len = 8192 token; global_batch = 2048 seq; deadline = 60 day }
plan a { model = llama31_70bb; workload = pt; device = h100_sxm; gpus = 1024; mfu = 40 %
  use layout { tp = 8; pp = 4 } }
plan b extends a { gpus = 512 }
plan c extends b { gpus = 256 }
""")
    r = run("check", str(p))
    assert r.returncode == 1 and r.stderr.count("error[") == 1
    assert "t.plan:4:18: error[unknown-name]: unknown name 'llama31_70bb' in 'a'" in r.stderr
    assert "did you mean 'llama31_70b'?" in r.stderr


def test_reporter_knows_the_errors_at_a_place_until_they_are_cut():
    from dsl.syntax.diagnostics import Reporter, Span
    rep, here, there = Reporter(), Span("a.plan", 4, 18, 4, 30), Span("a.plan", 5, 1, 5, 2)
    rep.warning("unknown-name", "a warning is not an error", here)
    assert not rep.has_error_at("unknown-name", here)
    rep.error("unknown-name", "unknown name 'x' in 'a'", here)
    assert rep.has_error_at("unknown-name", here)
    assert not rep.has_error_at("unknown-name", there) and not rep.has_error_at("range", here)
    rep.truncate(1)                  # a failed query's errors are cut: the place is free again
    assert not rep.has_error_at("unknown-name", here)

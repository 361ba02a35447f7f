"""The command line behaves the same across commands: one exit code per kind of failure, help
texts that can be pasted, suggestions that find what was meant, readable values, and commands
that say what to do when a file has nothing for them."""
from __future__ import annotations

import json
import sys

import pytest

from conftest import CASE, CASES, REPO_ROOT, run_main
from dsl.syntax.diagnostics import did_you_mean

SCALING = CASES / "scaling-deadline.plan"


# ---------------------------------------------------------------- exit codes
@pytest.mark.parametrize("args", [
    ("get", CASE, "gpus48.nope"),                                   # a name the file does not have
    ("get", CASE, "finish_time"),
    ("eval", CASE, "--plan", "nope"),
    ("report", CASE, "--plan", "nope"),
    ("timeline", CASE, "--plan", "nope"),
    ("explain", CASE, "gpus48.finish_tme"),
    ("graph", CASE, "--quantity", "gpus48.nope"),
    ("figure", CASE, "--name", "nope"),
    ("diff", f"{CASE}#gpus48", f"{CASE}#nope"),
    ("solve", CASE, "--query", "gpus48.mfu for gpus48.finish_time = cpt.deadline"),   # malformed
    ("solve", CASE, "--query", "gpus48.mfo for gpus48.finish_time == cpt.deadline"),
    ("sweep", CASE, "--vary", "gpus48.mfu=abc"),
    ("sweep", CASE, "--vary", "gpus48.nope=1:2:3"),
    ("eval", CASE, "--in", "parsecs"),
    ("get", CASE, "gpus48.finish_time", "--in", "GiB"),
    ("eval", CASE, "--limit", "nope=3"),
])
def test_a_bad_command_line_exits_2(args):
    rc, _, err = run_main(*args)
    assert rc == 2, (args, err)
    assert "Traceback" not in err and "internal error" not in err


def test_a_problem_in_the_plan_exits_1(tmp_path):
    bad = tmp_path / "bad.plan"
    bad.write_text("plan p { x = 1 s + 1 GiB }\n", encoding="utf-8")
    for cmd in ("eval", "check", "get", "report", "solve"):
        args = (cmd, bad, "p.x") if cmd == "get" else (cmd, bad)
        rc, _, err = run_main(*args)
        assert rc == 1 and "error[unit-mismatch]" in err, (cmd, err)


def test_a_missing_optional_package_exits_3(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)
    rc, _, err = run_main("sweep", CASE, "--vary", "gpus48.mfu")
    assert rc == 3 and "error[missing-dependency]" in err
    rc, _, err = run_main("search", CASE)
    assert rc == 3 and "error[missing-dependency]" in err


def test_missing_matplotlib_exits_3(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc, _, err = run_main("figure", CASE, "--list")
    assert rc == 3 and "matplotlib" in err


def test_graph_svg_without_matplotlib_exits_3(monkeypatch):
    """`plan graph --format svg` draws with matplotlib: without it, the missing package is named
    (exit 3, as for `plan figure`), not an internal error; dot and Mermaid still work."""
    plan = REPO_ROOT / "tests" / "data" / "graph-svg-no-matplotlib" / "a.plan"
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc, out, err = run_main("graph", plan, "--format", "svg")
    assert rc == 3 and "error[missing-dependency]: figures need matplotlib" in err, err
    assert "internal error" not in err and "--format dot" in err and out == ""
    rc, out, err = run_main("graph", plan, "--format", "dot")
    assert rc == 0 and "digraph" in out, err


# ---------------------------------------------------------------- help that can be pasted
def test_help_texts_show_single_percent_signs():
    for cmd in ("eval", "get", "sweep", "solve", "check", "figure", "explain", "search"):
        rc, out, _ = run_main(cmd, "--help")
        assert rc == 0 and "%%" not in out, cmd
    out = run_main("sweep", "--help")[1]
    assert "gpus48.mfu=30%:50%:21" in out.replace("\n", " ").replace("  ", " ") or "30%:50%:21" in out


# ---------------------------------------------------------------- suggestions
def test_did_you_mean_takes_prefixes_parts_and_typos():
    devices = ["h100_sxm", "h200", "a100_sxm_80gb", "b200", "rtx4090"]
    assert did_you_mean("h100", devices) == "h100_sxm"
    assert did_you_mean("a100", devices) == "a100_sxm_80gb"
    assert did_you_mean("H200", devices) == "h200"
    assert did_you_mean("rtx4080", devices) == "rtx4090"
    assert did_you_mean("zzz", devices) is None


def test_unknown_device_suggests_the_catalog_entry(tmp_path):
    f = tmp_path / "d.plan"
    f.write_text('import "@catalog/hardware.plan"\nplan p { x = h100.peak_flops }\n', encoding="utf-8")
    rc, _, err = run_main("check", f)
    assert rc == 1 and "did you mean 'h100_sxm'?" in err


def test_a_bare_quantity_name_suggests_its_plans():
    rc, _, err = run_main("get", CASE, "finish_time")
    assert rc == 2 and "did you mean 'gpus48.finish_time'?" in err and "gpus32" in err


# ---------------------------------------------------------------- readable output
def test_diff_prints_list_values(tmp_path):
    a, b = tmp_path / "a.plan", tmp_path / "b.plan"
    a.write_text('plan p { x = 1 s; z = [1 s, 3 s]; names = ["a", "b"] }\n', encoding="utf-8")
    b.write_text('plan p { x = 1 s; z = [1 s, 2 s]; names = ["a", "c"] }\n', encoding="utf-8")
    rc, out, _ = run_main("diff", a, b)
    assert rc == 0
    assert "z: [1 s, 3 s] -> [1 s, 2 s]" in out and 'names: ["a", "b"] -> ["a", "c"]' in out
    assert "ListVal" not in out and "Val(" not in out


def test_search_without_a_search_block_says_what_to_add():
    rc, _, err = run_main("search", CASE)
    assert rc == 2 and "has `use layout_search`" in err and "add `use layout_search {" in err


def test_figure_list_lists_the_files_figures():
    pytest.importorskip("matplotlib")
    rc, out, _ = run_main("figure", CASE, "--list")
    assert rc == 0
    names = [ln.split()[0] for ln in out.splitlines() if "plans:" in ln]
    # the design case checkpoints and has a step timeline but no pipeline: those figures only
    assert "checkpoint-cost" in names and "timeline" in names
    assert "pipeline-gantt" not in names and "pipeline-memory" not in names
    assert "other figure" in out


def test_eval_plan_prices_only_that_plan_and_its_dependencies():
    # frontier_b200 depends on no other plan: the other plans' warnings never appear
    rc, out, err = run_main("eval", SCALING, "--plan", "frontier_b200", "--format", "json")
    assert rc == 0 and list(json.loads(out)["plans"]) == ["frontier_b200"]
    assert "h100_bound" not in err
    # `ranking` compares five other plans: they are priced (its table needs them)
    rc, out, err = run_main("eval", SCALING, "--plan", "ranking", "--format", "json")
    assert rc == 0 and list(json.loads(out)["plans"]) == ["ranking"]


def test_explain_takes_a_requirement():
    rc, out, _ = run_main("explain", CASE, "gpus32.meets_deadline", "--depth", "0")
    assert rc == 0
    assert out.startswith("gpus32.meets_deadline: 34.33 day <= 30 day  FAIL")
    assert "left side: finish_time" in out and "right side: cpt.deadline" in out
    rc, out, _ = run_main("explain", CASE, "gpus32.meets_deadline", "--format", "json")
    doc = json.loads(out)
    assert doc["ok"] is False and doc["sides"]["rhs"]["trees"][0]["id"] == "cpt.deadline"


def test_an_empty_file_says_so(tmp_path):
    for text, words in (("", "is empty"), ("# nothing yet\n", "is empty"),
                        ('import "@catalog/hardware.plan"\n', "only imports"),
                        ("device d { peak_flops = 1 TFLOP/s }\n", "declares no plan")):
        f = tmp_path / "e.plan"
        f.write_text(text, encoding="utf-8")
        rc, out, _ = run_main("eval", f)
        assert rc == 0 and words in out and "quantity" not in out, (text, out)


def test_derived_plan_fields_are_shown_and_not_unused(tmp_path):
    f = tmp_path / "d.plan"
    f.write_text("plan a { x = 2 s; y = x * 3; w = 5 s }\nplan cmp { gap = a.y - a.x; ratio = a.y / a.x }\n",
                 encoding="utf-8")
    rc, out, err = run_main("eval", f)
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines()[3:] if ln.strip()}
    # y = 3·2 s = 6 s; gap = 6 s − 2 s = 4 s; ratio = 6 / 2 = 3
    assert rows["y"] == ["s", "6", "—"] and rows["gap"] == ["s", "—", "4"] and rows["ratio"] == ["—", "3"]
    assert "field 'w'" in err                     # a literal nothing reads is still flagged
    assert "'gap'" not in err and "'ratio'" not in err and "'y'" not in err


def test_an_unused_block_parameter_names_the_blocks_that_read_it(tmp_path):
    """A plan field that is a block's plan-level parameter but read by none of the plan's blocks
    is flagged with the blocks that would read it — never with itself as the "did you mean"."""
    f = tmp_path / "u.plan"
    f.write_text('import "@catalog/hardware.plan"\nplan a { device = h100_sxm }\n', encoding="utf-8")
    rc, out, err = run_main("eval", f)
    assert rc == 0
    assert "field 'device' of plan 'a' is not used by any block" in err
    assert "did you mean 'device'" not in err and "'device' is read by `use " in err


def test_report_units_never_say_per_one():
    rc, out, _ = run_main("report", CASE, "--plan", "gpus48", "--format", "text")
    assert rc == 0 and "/1 " not in out and "day/1" not in out and "()" not in out
    assert "day/%" in out and "day/(TFLOP/s)" in out


# ---------------------------------------------------------------- units on the command line
def test_get_prints_the_unit_on_request_and_counts_in_1():
    rc, out, _ = run_main("get", CASE, "cpt.deadline", "--with-unit")
    assert (rc, out) == (0, "30 day\n")                          # the case's deadline: 30 days
    doc = json.loads(run_main("get", CASE, "cpt.deadline", "--in", "h", "--format", "json")[1])
    assert doc == {"name": "cpt.deadline", "value": 720.0, "unit": "h"}   # 30 × 24 h
    # a count that carries a noun prints as a plain number with --in 1 (384 sequences per step)
    assert run_main("get", CASE, "cpt.global_batch", "--in", "1")[:2] == (0, "384\n")
    assert run_main("get", CASE, "cpt.tokens", "--in", "1")[1] == "100000000000\n"
    rc, _, err = run_main("get", CASE, "cpt.deadline", "--in", "1")   # a time is not a count
    assert rc == 2 and "plain number" in err


# ---------------------------------------------------------------- the program's fast exit
def test_the_collector_is_paused_only_for_the_programs_imports():
    """``console_main`` turns the cyclic GC off for the import floor; ``main`` turns it back on
    (imported objects frozen) once the plugins are loaded, whatever the command; a library
    caller of ``main`` keeps its collector as it was, nothing frozen."""
    import subprocess
    code = ("import gc, sys, dsl.cli.program as c\n"
            "c._GC_PAUSED = True; gc.disable()\n"
            "rc = c.main(['plugins'])\n"
            "print(rc, gc.isenabled(), c._GC_PAUSED, gc.get_freeze_count() > 1000, file=sys.stderr)\n"
            "gc.unfreeze(); gc.disable()\n"
            "c.main(['plugins'])\n"
            "print(gc.isenabled(), gc.get_freeze_count(), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.splitlines()[-2:] == ["0 True False True", "False 0"]


def test_the_program_exits_with_mains_code_and_everything_written(tmp_path):
    """``plan`` (``dsl.cli:console_main``) leaves with ``os._exit`` after ``main``: the exit
    code is main's, stdout is complete when it is a pipe, and the atexit handlers ran (the
    parser's cache of plugin defaults is written there)."""
    import os
    import subprocess
    env = dict(os.environ, PLAN_CACHE_DIR=str(tmp_path / "cache"))
    prog = [sys.executable, "-m", "dsl.cli"]
    ok = subprocess.run(prog + ["get", str(CASE), "gpus48.finish_time", "--in", "day"],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    assert float(ok.stdout) == pytest.approx(24.64, abs=0.005)      # the book's figure, days
    from dsl.syntax.parser import _ast_key
    defaults = _ast_key("defaults", "", "")[0]      # the entry written by an atexit handler
    assert (tmp_path / "cache" / "ast" / defaults).is_file(), "atexit handlers did not run"
    full = subprocess.run(prog + ["eval", str(CASE), "--format", "json"], capture_output=True,
                          text=True, env=env)
    assert full.returncode == 0 and json.loads(full.stdout)        # a complete document
    bad = tmp_path / "bad.plan"
    bad.write_text("plan p { x = }\n")
    r = subprocess.run(prog + ["check", str(bad)], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "bad.plan:1:" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(prog + ["bogus"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "invalid choice" in r.stderr      # argparse's SystemExit(2)


def test_a_closed_stdout_ends_quietly_on_the_error_path_too(tmp_path):
    """`plan eval bad.plan --format json | head -c 10`: the reader has gone before the JSON of the
    diagnostics is written.  Like the success path, no traceback: the diagnostics still reach
    stderr and the exit code still says the plan failed (it used to end in "Traceback …
    BrokenPipeError")."""
    import os
    import subprocess
    bad = tmp_path / "bad.plan"
    bad.write_text("plan p { x = 1 s + 1 GiB }\n", encoding="utf-8")
    good = tmp_path / "good.plan"
    good.write_text("plan p { x = 1 s + 2 s }\n", encoding="utf-8")
    for path, code in ((bad, 1), (good, 0)):
        r, w = os.pipe()
        os.close(r)                   # nobody reads: every write to stdout fails with EPIPE
        try:
            p = subprocess.run([sys.executable, "-m", "dsl.cli", "eval", str(path), "--format", "json"],
                               stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(w)
        assert p.returncode == code, p.stderr
        assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr
        assert ("error[unit-mismatch]" in p.stderr) == (code == 1)

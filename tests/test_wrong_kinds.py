"""Values of the wrong kind for a parameter (a list where a number is expected, a string where a
declaration is) are error[type] at the offending text, with a hint, before any plugin reads
them: never "bug in plugin" with a Python exception.

The files in ``tests/data/wrong_kinds`` are the reproductions (a GPU count written as a list
without `use layout`, in a base plan that `use layout` plans extend, a model's `layers` as a
list of names, `nics_per_host` of `use calibrate` as a list)."""
from __future__ import annotations

from pathlib import Path

import pytest

from dsl.syntax.diagnostics import PlanError
from dsl.results.evaluation import evaluate_file
from test_errors import ROOT, assert_diag, line_col, run, write

DATA = Path("tests") / "data" / "wrong_kinds"


def _no_plugin_failure(r) -> None:
    assert "error[plugin]" not in r.stderr and "bug in plugin" not in r.stderr, r.stderr


@pytest.mark.parametrize("name,needle,summary,hint", [
    ("list-gpus.plan", "[1, 2]", "'gpus' must be a number, got a list",
     "number of GPUs: give it one value; to evaluate several, vary it: `plan sweep FILE --vary 'p.gpus=[…]'`"),
    ("list-gpus-extends.plan", "[1 s, 2 GB]", "'gpus' must be a number, got a list",
     "vary it: `plan sweep FILE --vary 'gpus48.gpus=[…]'`"),
    ("list-layers.plan", '["F0", "B0"]', "'m.layers' must be a number, got a list",
     "transformer blocks: give it one value"),
    ("calibrate-list-nics.plan", "[1, 2]", "'nics_per_host' must be a number, got a list",
     "NICs per host sharing the host cut: give it one value"),
])
@pytest.mark.parametrize("command", ["check", "eval"])
def test_list_for_a_number_is_a_type_error_at_the_list(name, needle, summary, hint, command):
    path = DATA / name
    text = (ROOT / path).read_text(encoding="utf-8")
    r = run(command, str(path))
    _no_plugin_failure(r)
    assert_diag(r, "type", file=path, at=line_col(text, needle), quoted=needle, summary=summary,
                        hint=hint)
    assert r.stderr.rstrip().endswith("1 error"), r.stderr   # one report, also for the plans that extend it


def test_inherited_list_is_reported_once_in_the_plan_that_writes_it():
    path = DATA / "list-gpus-extends.plan"
    r = run("check", str(path))
    assert r.stderr.count("error[type]") == 1 and "'gpus48.gpus=[…]'" in r.stderr, r.stderr


BASE = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"
link nv { bandwidth = 300 GB/s }
workload w { tokens = 1e9 token; seq_len = 8192 token; global_batch = 64 seq; deadline = 30 day }
plan p {
  model = qwen3_8b; workload = w; device = rtx4090; gpus = 8; mfu = 40 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { link = nv }
}
"""


@pytest.mark.parametrize("old,new,needle,summary,hint", [
    ("mfu = 40 %", 'mfu = "40 %"', '"40 %"', "'mfu' must be a number, got a string", "without quotes"),
    ("gpus = 8", "gpus = w", "gpus = w", "'gpus' must be a number, got workload 'w'", "`w.FIELD`"),
    ("gpus = 8", "gpus = true", "gpus = true", "'gpus' must be a number, got true/false", "write a number"),
    ("device = rtx4090", 'device = "rtx4090"', '"rtx4090"', "'device' must name a device, got a string",
     "write the name of a device without quotes"),
    ("device = rtx4090", "device = nv", "device = nv", "'device' must name a device, got link 'nv'", "name a device ("),
    ("link = nv", "link = [nv]", "link = [nv]", "'link' must name a link, got a list", "name a link ("),
    ("link = nv", "link = rtx4090", "link = rtx4090", "'link' must name a link, got device 'rtx4090'", "name a link"),
    ("bandwidth = 300 GB/s", "bandwidth = [300 GB/s]", "[300 GB/s]",
     "'nv.bandwidth' must be a number in B/s, got a list", "give it one value"),
    ("tokens = 1e9 token", 'tokens = "1e9"', '"1e9"', "'w.tokens' must be a number in token, got a string",
     "without quotes, in token"),
    # a field that overrides a quantity a block prices (a standard quantity of the vocabulary)
    ("gpus = 8;", "gpus = 8; step_time = [1 s, 2 s];", "[1 s, 2 s]",
     "'step_time' must be a number in s, got a list", "one optimizer step, end to end: give it one value"),
    # through a field that names a list
    ("gpus = 8;", "counts = [8, 16]; gpus = counts;", "gpus = counts", "'gpus' must be a number, got a list",
     "give it one value"),
])
def test_wrong_kinds_of_plan_and_block_parameters(tmp_path, old, new, needle, summary, hint):
    """``needle`` is the offending value, or `NAME = VALUE` where the value alone is ambiguous."""
    assert BASE.count(old) == 1, old
    text = BASE.replace(old, new)
    p = write(tmp_path, text)
    r = run("check", str(p))
    _no_plugin_failure(r)
    line, col = line_col(text, needle)
    value = needle.split(" = ", 1)[1] if " = " in needle else needle
    assert_diag(r, "type", file=p, at=(line, col + len(needle) - len(value)), quoted=value, summary=summary,
                hint=hint)


def test_list_items_of_the_wrong_kind_are_reported_at_the_item(tmp_path):
    text = BASE.replace("use layout { link = nv }",
                        'use layout { link = nv }\n  use layout_search { tp = [1, "2"] }')
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert_diag(r, "type", file=p, at=line_col(text, '"2"'), quoted='"2"', summary="item 2 of 'tp' must be a number",
                hint="")


def test_lists_where_the_spec_takes_a_list_are_accepted(tmp_path):
    text = BASE.replace("use layout { link = nv }",
                        "use layout { link = nv }\n  use layout_search { tp = [1, 2]; pp = [1]; zero = [0, 3] }")
    p = write(tmp_path, text)
    r = run("check", str(p))
    assert r.returncode == 0, r.stderr


def test_the_api_raises_the_same_located_error():
    with pytest.raises(PlanError) as exc:
        evaluate_file(ROOT / DATA / "list-gpus.plan")
    errors = [d for d in exc.value.diagnostics if d.severity == "error"]
    assert [d.code for d in errors] == ["type"]
    assert (errors[0].span.line, errors[0].span.column) == (4, 67)

"""Named solves are results: `solve NAME: TARGET for LHS op RHS` is read by `plan get`, `plan eval`
(text and JSON), `plan check --strict` (a file-level `require` on the answer) and `plan diff`;
a whole-number answer honours the plan's whole-number requirements.

Numbers: the toy plan's answers are hand computations (y = 3·x, so y = 12 s needs x = 4 s);
the design case's are its published ones (32 GPUs need about 47 % MFU to meet the 30-day
deadline — the case file's comment) and whole-number arithmetic (384 = 2^7·3).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CASE, run_main
from dsl.syntax.diagnostics import PlanError
from dsl.syntax.format import format_source
from dsl.syntax.parser import parse

TOY = """\
plan p {
  x = 2 s
  y = x * 3
}

# y = 3 x: y = 12 s needs x = 4 s
solve need: p.x for p.y == 12 s
solve p.x for p.y == 6 s
require roomy: need <= 5 s
require tight: need <= 3 s
"""


def _toy(tmp_path, text: str = TOY, name: str = "toy.plan") -> Path:
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return f


def _case_variant(tmp_path, extra: str, name: str = "variant.plan") -> Path:
    text = Path(CASE).read_text(encoding="utf-8").replace('import "../catalog/', 'import "@catalog/')
    f = tmp_path / name
    f.write_text(text + "\n" + extra + "\n", encoding="utf-8")
    return f


def test_grammar_named_solve_and_file_requirement_round_trip():
    m = parse(TOY, "toy.plan")
    assert [q.name for q in m.queries] == ["need", None]
    assert [r.name for r in m.requires] == ["roomy", "tight"]
    out = format_source(TOY)
    assert "solve need: p.x for p.y == 12 s" in out and "require tight: need <= 3 s" in out
    assert format_source(out) == out
    again = parse(out, "toy.plan")
    assert [q.name for q in again.queries] == ["need", None] and len(again.requires) == 2


def test_get_prints_the_answer_in_the_target_unit_or_in(tmp_path):
    f = _toy(tmp_path)
    assert run_main("get", f, "need")[:2] == (0, "4\n")
    assert run_main("get", f, "need", "--in", "ms")[:2] == (0, "4000\n")
    assert run_main("get", f, "need", "--expr")[1] == "p.x = 4\n"
    rc, _, err = run_main("get", f, "need", "--in", "GiB")
    assert rc == 2 and "GiB" in err
    # a file-level requirement prints true/false like a plan's
    assert run_main("get", f, "roomy")[1] == "true\n"
    assert run_main("get", f, "tight")[1] == "false\n"


def test_eval_json_and_text_show_solves_and_file_requirements(tmp_path):
    f = _toy(tmp_path)
    rc, out, _ = run_main("eval", f, "--format", "json")
    doc = json.loads(out)
    assert rc == 0
    need = doc["solves"]["need"]
    assert need["answer"] == 4 and need["unit"] == "s" and need["query"] == "p.x for p.y == 12 s"
    assert list(doc["solves"]) == ["need"]          # unnamed solves stay with `plan solve`
    reqs = {r["name"]: r for r in doc["requirements"]}
    assert reqs["roomy"]["ok"] and not reqs["tight"]["ok"]
    assert (reqs["tight"]["lhs"], reqs["tight"]["rhs"], reqs["tight"]["unit"]) == (4, 3, "s")
    rc, out, _ = run_main("eval", f)
    assert "FAIL tight: 4 <= 3 s  <- violated" in out and "ok   roomy: 4 <= 5 s" in out
    assert "solves" in out and "need  4 s   (p.x for p.y == 12 s)" in out
    assert run_main("eval", f, "--strict")[0] == 1
    # the field the solve reads is used: no "unused" warning
    assert "unused" not in run_main("eval", f)[2]


def test_check_strict_gates_on_a_solve_answer(tmp_path):
    f = _toy(tmp_path)
    rc, out, err = run_main("check", f, "--strict")
    assert rc == 1
    assert "error[requirement]: requirement 'tight' fails: 4 s <= 3 s does not hold (margin -1 s" in err
    assert "need is the answer of `solve need: p.x for p.y == 12 s`" in err
    assert "1 of 2 requirements fail" in err
    rc, out, _ = run_main("check", f, "--strict", "--format", "json")
    doc = json.loads(out)
    assert rc == 1 and doc["requirements_checked"] == 2 and [x["name"] for x in doc["failed"]] == ["tight"]
    assert doc["failed"][0]["answers"]["need"]["answer"] == 4
    ok = _toy(tmp_path, TOY.replace("need <= 3 s", "need <= 4 s"), "ok.plan")
    rc, out, _ = run_main("check", ok, "--strict")
    assert rc == 0 and "2 requirements hold" in out


def test_named_solve_errors_are_diagnostics(tmp_path):
    cases = {
        "solve p: p.x for p.y == 12 s": ("duplicate", "has the name of a declaration"),
        "solve a: p.x for p.y == 12 s\nsolve a: p.x for p.y == 6 s": ("duplicate", "declared twice"),
        "solve a: p.x for p.y == 12 GiB": ("unit-mismatch", "solve 'a'"),
        "solve a: p.x for p.y == 12 s\nrequire a <= 3 GiB": ("unit-mismatch", "compares"),
        "solve a: p.x for p.y == 12 s\nrequire bb <= 3 s": ("unknown-name", "'bb'"),
        "solve a: p.x for p.y == 12 s\nrequire a: a <= 3 s": ("duplicate", "named solve"),
    }
    for i, (extra, (code, words)) in enumerate(cases.items()):
        f = _toy(tmp_path, "plan p {\n  x = 2 s\n  y = x * 3\n}\n" + extra + "\n", f"e{i}.plan")
        rc, _, err = run_main("check", f)
        assert rc == 1 and f"error[{code}]" in err and words in err, (extra, err)
        assert "Traceback" not in err
    # a plan body cannot read an answer (it is computed from the plans): the hint says where it goes
    f = _toy(tmp_path, "plan p {\n  x = 2 s\n  y = x * 3\n  require r: need <= 1 s\n}\n"
                       "solve need: p.x for p.y == 12 s\n", "body.plan")
    rc, _, err = run_main("check", f)
    assert rc == 1 and "file-level `require`" in err


def test_diff_reads_named_solves_and_file_requirements(tmp_path):
    a = _toy(tmp_path, TOY.replace("x = 2 s", "x = 2 s\n  z = [1 s, 3 s]"), "a.plan")
    b = _toy(tmp_path, TOY.replace("x = 2 s", "x = 2 s\n  z = [1 s, 2 s]").replace("== 12 s", "== 15 s"), "b.plan")
    rc, out, _ = run_main("diff", a, b)
    assert rc == 0
    assert "z: [1 s, 3 s] -> [1 s, 2 s]" in out          # list values, never a Python repr
    assert "ListVal" not in out and "Val(" not in out
    # 3 x = 15 s: x = 5 s, one second more (+25 %), and `roomy` (need <= 5 s) still holds
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("need "))
    assert row.split() == ["need", "s", "4", "5", "+1", "+25.0", "%"]
    doc = json.loads(run_main("diff", a, b, "--format", "json")[1])
    assert doc["solves"][0]["name"] == "need" and (doc["solves"][0]["old"], doc["solves"][0]["new"]) == (4, 5)
    c = _toy(tmp_path, TOY.replace("== 12 s", "== 18 s"), "c.plan")   # x = 6 s > 5 s: roomy fails
    rc, out, _ = run_main("diff", a, c)
    assert "file requirements that flipped" in out and "roomy: ok -> FAIL" in out


def test_ci_gate_on_the_mfu_the_smaller_design_needs(tmp_path):
    # 32 GPUs meet the 30-day deadline at about 47 % single-GPU efficiency (the case's figure)
    gate = ("solve min_mfu: gpus32.mfu for gpus32.finish_time == cpt.deadline\n"
            "require mfu_reachable: min_mfu <= 50 %\n")
    f = _case_variant(tmp_path, gate)
    rc, out, _ = run_main("get", f, "min_mfu")
    assert rc == 0 and 46.5 <= float(out) <= 47.5
    rc, out, _ = run_main("check", f, "--strict", "--plan", "gpus48")
    assert rc == 0                                    # gpus48's own requirements; the gate is gpus32's
    rc, _, err = run_main("check", f, "--strict")
    assert rc == 1 and "mfu_reachable" not in err     # gpus32 misses the deadline, the gate holds
    strict = _case_variant(tmp_path, gate.replace("50 %", "45 %"), "strict.plan")
    rc, _, err = run_main("check", strict, "--strict")
    assert rc == 1 and "requirement 'mfu_reachable' fails" in err and "min_mfu is the answer of" in err


def test_whole_number_answer_skips_counts_that_break_the_batch_split(tmp_path):
    # 32 GPUs miss the deadline; the boundary is ~37.6 GPUs, but 384 sequences split into whole
    # micro-batches only on a divisor of 384 = 2^7 * 3, and the first one from 38 on is 48
    f = _case_variant(tmp_path, "solve gpus_needed: gpus32.gpus for gpus32.finish_time <= cpt.deadline")
    # (its symbolic form takes sympy ~10 s on an idle machine: a generous budget under load)
    rc, out, _ = run_main("eval", f, "--format", "json", "--plan", "gpus32", )
    s = json.loads(out)["solves"]["gpus_needed"]
    assert rc == 0 and s["answer"] == 48 and s["whole"] == 48 and 37 < s["value"] < 38
    assert "micro_batches_whole" in s["note"] and "38 … 47" in s["note"]


@pytest.mark.parametrize("text", [TOY])
def test_api_solutions(tmp_path, text):
    import dsl
    from dsl.results.solver import file_requirement_results, named_solutions
    ev = dsl.load(_toy(tmp_path, text))
    assert named_solutions(ev)["need"].answer == 4.0
    assert {r["name"]: r["ok"] for r in file_requirement_results(ev)} == {"roomy": True, "tight": False}
    with pytest.raises(PlanError):
        dsl.load(_toy(tmp_path, text + "solve need: p.x for p.y == 1 s\n", "dup.plan"))

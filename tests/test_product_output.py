"""What a user sees by default speaks like a product: no book chapter, section, figure,
exercise or example numbers and no issue numbers in `plan eval` output, `--help` texts,
`plan plugins` or figure titles.  The sources stay, as references shown on request
(``plan eval --sources``, ``plan report``, ``plan explain``); those name the concept and its
public source (paper, report, repository), never a book, chapter, section or issue number —
the book pointers are kept in the plugins' docstrings.  Tables repeated identically for
several plans print once; tables about another question print only with ``--tables all``.
"""
from __future__ import annotations

import json
import re

import pytest

import dsl.api
from conftest import CASES, REPO_ROOT, run_main
from dsl.plugin import hookimpl

# Words that cite the book or the tracker.  References use them freely; default output never.
FORBIDDEN = re.compile(r"§|\b[Bb]ook\b|[Ee]xercises?\b|\b[Ff]ig(ure)?s?\.? ?\d+[-–]\d+|\b[Ee]xamples? \d+[-–]\d+"
                       r"|\b[Ii]ssues? #?\d+|\bfn\. ?\d|[Ff]ootnotes?\b")
CASE = "specs/cases/cpt-qwen3-8b-4090.plan"
# What shown references and sources (`plan explain`, `plan report`, `plan eval --sources`) may not
# say: a book, its chapters and sections, an issue number.  A source names the concept and, where
# the formula has one, its public source (e.g. "ZeRO communication volume: Rajbhandari et al. 2020,
# 'ZeRO: …'"); an issue of another project is cited by its address (github.com/…/issues/N).
CITATION = re.compile(r"\bbook\b|\bch\.\s*\d|§|\bchapter\b|\bissue\s*#?\d", re.I)


def _forbidden(text: str) -> list[str]:
    return [text[max(0, m.start() - 60):m.end() + 30].replace("\n", " | ") for m in FORBIDDEN.finditer(text)]


def test_the_pattern_catches_what_it_should():
    for bad in ("(§10.6.1)", "book ch. 3", "the book's table", "exercise 10-5", "fig. 10-16", "figs 3-30",
                "example 3-5", "issue 12", "fn. 20", "footnote 6"):
        assert FORBIDDEN.search(bad), bad
    for ok in ("finish_time", "examples of plans", "a configuration figure of merit", "notebook"):
        assert not FORBIDDEN.search(ok), ok


@pytest.mark.parametrize("case", [pytest.param(c.name, marks=pytest.mark.xdist_group(c.stem))   # with its goldens
                                  for c in sorted(CASES.glob("*.plan"))])
def test_default_eval_output_has_no_citations(case):
    rc, out, err = run_main("eval", f"specs/cases/{case}")
    assert rc == 0, err
    hits = _forbidden(out + err)
    assert not hits, f"`plan eval specs/cases/{case}` cites sources by default:\n" + "\n".join(hits)


def _subcommands() -> list[str]:
    rc, out, _ = run_main("--help")
    assert rc == 0
    names = re.findall(r"^    ([a-z][a-z-]*)  ", out, re.M)
    assert "eval" in names and "plugins" in names, out
    return names


def test_help_texts_have_no_citations():
    texts = {"plan --help": run_main("--help")[1]}
    for cmd in _subcommands():
        rc, out, err = run_main(cmd, "--help")
        assert rc == 0, (cmd, err)
        texts[f"plan {cmd} --help"] = out
    hits = {k: _forbidden(v) for k, v in texts.items() if _forbidden(v)}
    assert not hits, hits


def test_plugins_listing_and_figure_titles_have_no_citations():
    for args in (("plugins",), ("figure", CASE, "--list")):
        rc, out, err = run_main(*args)
        assert rc == 0, err
        assert not _forbidden(out), (args, _forbidden(out))
    rc, out, _ = run_main("plugins", "--format", "json")
    data = json.loads(out)
    shown = [b["doc"] for b in data["blocks"]] + [p["doc"] for b in data["blocks"]
                                                 for p in b["params"] + b["plan_params"]]
    shown += [t["title"] for t in data["tables"]] + [f["title"] for f in data["figures"]]
    assert not [s for s in shown if FORBIDDEN.search(s)]
    # the sources moved to the references fields instead of disappearing
    blocks = {b["name"]: b for b in data["blocks"]}
    assert any("Young 1974" in r for r in blocks["checkpoint"]["references"])
    assert any("Micikevicius et al. 2018" in r for r in {t["name"]: t for t in data["tables"]}["memory-formats"]["references"])


def test_eval_sources_text_lists_the_reference_of_a_quantity():
    rc, out, err = run_main("eval", CASE, "--sources")
    assert rc == 0, err
    _, _, sources = out.partition("\nsources\n")
    assert sources, out
    # finish_time = T_0 + steps · t_s · (1 + L) is the first-order finish time (the book's §10.6.1)
    assert re.search(r"^  finish_time\n    first-order finish time: ", sources, re.M), sources
    # τ* = sqrt(2c/Λ) of `use checkpoint` is Young's first-order optimum
    assert re.search(r"^  use checkpoint\n(    .*\n)*    Young 1974, ", sources, re.M), sources
    rc, plain, _ = run_main("eval", CASE)
    assert "\nsources\n" not in plain and not _forbidden(plain)


def test_eval_sources_json():
    rc, out, err = run_main("eval", CASE, "--format", "json", "--sources")
    assert rc == 0, err
    src = json.loads(out)["plans"]["gpus48"]["sources"]
    assert any(r.startswith("first-order finish time: ") for r in src["quantities"]["finish_time"])
    assert any("Young 1974" in r for r in src["blocks"]["checkpoint"])
    rc, out, _ = run_main("eval", CASE, "--format", "json")
    assert "sources" not in json.loads(out)["plans"]["gpus48"]          # additive: only on request


def test_report_has_a_sources_section():
    rc, out, err = run_main("report", CASE, "--plan", "gpus48", "--format", "md")
    assert rc == 0, err
    _, _, sources = out.partition("### Sources")
    assert "`finish_time` | first-order finish time: " in sources and "Young 1974" in sources


def test_a_table_shared_by_every_plan_prints_once(write_plan):
    # two plans with the same model and formats on different devices: their format and
    # training-state tables are identical, so each prints once for the file
    p = write_plan('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'
                   "plan a { model = qwen3_8b; device = h100_sxm; use memory {} }\n"
                   "plan b extends a { device = h200 }\n")
    rc, out, err = run_main("eval", p)
    assert rc == 0, err
    assert out.count("\nMatmul weight formats") == 1 and "\nMatmul weight formats (all plans)\n" in out
    assert out.count("\nTraining state per GPU") == 1 and "\nTraining state per GPU (all plans)\n" in out
    # JSON keeps one copy per plan (the schema is unchanged)
    rc, out, _ = run_main("eval", p, "--format", "json")
    plans = json.loads(out)["plans"]
    assert all("memory-formats" in plans[x]["tables"] and not plans[x]["tables"]["memory-formats"]["per_plan"]
               for x in ("a", "b"))


def test_a_shared_table_with_different_contents_prints_once_per_content(write_plan):
    p = write_plan('import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'
                   "plan a { model = qwen3_8b; device = h100_sxm; use memory {} }\n"
                   "plan b extends a { device = h200 }\n"
                   'plan c extends a { use memory { optimizer = "sgd" } }\n')
    rc, out, err = run_main("eval", p)
    assert rc == 0, err
    assert "\nTraining state per GPU (a, b)\n" in out and "\nTraining state per GPU (c)\n" in out
    assert out.count("\nTraining state per GPU") == 2


def test_a_table_about_another_question_only_on_request():
    # a finish-time evaluation: the format and method comparisons answer "what fits"
    rc, default, err = run_main("eval", CASE)
    assert rc == 0, err
    assert "Matmul weight formats" not in default and "Memory-saving methods in use" not in default
    assert "not shown: tables memory-formats, memory-methods (`--tables all` shows them)" in default
    assert "Training state per GPU (gpus48)" in default                # relevant tables stay
    rc, every, _ = run_main("eval", CASE, "--tables", "all")
    assert "Matmul weight formats (all plans)" in every and "Memory-saving methods in use (gpus48)" in every
    assert "not shown:" not in every
    rc, none, _ = run_main("eval", CASE, "--tables", "none")
    assert "Training state per GPU" not in none and "not shown:" not in none
    # JSON lists every table (with how text shows it) unless --tables is given
    rc, out, _ = run_main("eval", CASE, "--format", "json")
    t = json.loads(out)["plans"]["gpus48"]["tables"]
    assert t["memory-formats"]["shown_by_default"] is False and t["memory-states"]["shown_by_default"] is True
    rc, out, _ = run_main("eval", CASE, "--format", "json", "--tables", "default")
    assert "memory-formats" not in json.loads(out)["plans"]["gpus48"]["tables"]


def test_a_format_table_shows_by_default_when_formats_are_the_question():
    # memory-formats.plan compares formats and computes no finish time
    rc, out, err = run_main("eval", "specs/cases/memory-formats.plan")
    assert rc == 0, err
    assert "\nMatmul weight formats (" in out and "not shown:" not in out


def test_bad_tables_choice_is_a_usage_error():
    rc, _, err = run_main("eval", CASE, "--tables", "some")
    assert rc == 2 and "invalid choice" in err


class _OnRequestTable:
    """A third-party plugin with a table shown only on request (``TableSpec(default=False)``)
    and one shared by every plan (``per_plan=False``)."""

    @staticmethod
    def _rows(ws, plan):
        from dsl.plugin import Table
        return Table(("x",), ((1,),), ("a note",), ("Someone 2020, 'A paper'",))

    @hookimpl
    def plan_tables_register(self):
        from dsl.plugin import TableSpec
        return [TableSpec("zz-on-request", "On request", self._rows, default=False),
                TableSpec("zz-shared", "Shared", self._rows, per_plan=False, references=("Spec 2021",))]


def test_table_spec_flags_of_a_third_party_table():
    from dsl.cli import plugin_tables, render_plugin_tables
    from dsl.testing import evaluate_snippet

    ev = evaluate_snippet("plan a { }\nplan b { }\n", plugins=[_OnRequestTable()])
    rep = {p: {"tables": plugin_tables(ev, p)} for p in ("a", "b")}
    t = rep["a"]["tables"]
    assert t["zz-on-request"]["shown_by_default"] is False and t["zz-shared"]["per_plan"] is False
    assert t["zz-shared"]["references"] == ["Spec 2021", "Someone 2020, 'A paper'"]
    text = "\n".join(render_plugin_tables(rep, ["a", "b"], "default"))
    assert "On request" not in text and "not shown: table zz-on-request (`--tables all` shows it)" in text
    assert text.count("Shared (all plans)") == 1
    every = "\n".join(render_plugin_tables(rep, ["a", "b"], "all"))
    assert "On request (a)" in every and "On request (b)" in every and "not shown" not in every


def test_the_citation_pattern_catches_what_it_should():
    for bad in ("Book ch. 10 §10.1.3 (per-GPU compute time)", "Llama 3 report (book §10.1.3)", "ch. 3, exercise 3-5",
                "DeepSeek-V3 Technical Report, §3.3", "chapter 10", "vLLM issue #10517", "pytorch/pytorch issue 100850"):
        assert CITATION.search(bad), bad
    for ok in ("ZeRO communication volume: Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations Toward Training "
               "Trillion Parameter Models'", "Llama Team 2024, 'The Llama 3 Herd of Models', Table 4", "notebook",
               "github.com/vllm-project/vllm/issues/10517", "Facebook", "the batch (b) each"):
        assert not CITATION.search(ok), ok


def _cited(where: str, texts) -> list[str]:
    return [f"{where}: {s!r}" for s in texts if s and CITATION.search(s)]


def _node_texts(ev) -> list[str]:
    """Every reference, source and doc `plan explain` can show for the nodes of ``ev``, the
    diagnostics' texts and the requirements' docs."""
    hits = []
    for nid, n in sorted(ev.nodes.items()):
        hits += _cited(nid, (*n.references, n.source, n.doc))
    for d in ev.diagnostics:
        hits += _cited(f"{d.severity}[{d.code}]", (d.summary, d.hint))
    for r in ev.requirements:
        hits += _cited(f"{r.plan}.{r.name}", (r.doc,))
    return hits


@pytest.mark.parametrize("case", [pytest.param(c.name, marks=pytest.mark.xdist_group(c.stem))   # with its goldens
                                  for c in sorted(CASES.glob("*.plan"))])
def test_references_and_sources_of_a_case_name_no_book_or_issue(case, monkeypatch):
    """Every quantity's references, every input's `source`, every doc `plan explain` prints, and
    every block's, table's and figure's references `plan eval --sources --tables all` and `plan
    report` list (tables built for the plan included)."""
    monkeypatch.chdir(REPO_ROOT)          # the file as `plan eval` below names it: one cached evaluation
    ev = dsl.api.load(f"specs/cases/{case}")
    hits = _node_texts(ev)
    rc, out, err = run_main("eval", f"specs/cases/{case}", "--sources", "--tables", "all", "--format", "json")
    assert rc == 0, err
    for plan, rep in json.loads(out)["plans"].items():
        for what, entries in rep.get("sources", {}).items():
            for name, refs in entries.items():
                hits += _cited(f"{plan} {what} {name}", refs)
        for name, table in rep.get("tables", {}).items():
            hits += _cited(f"{plan} table {name}", (*table.get("references", ()), *table.get("notes", ())))
    assert not hits, f"`specs/cases/{case}` shows citations of a book or an issue:\n" + "\n".join(hits)


def test_every_registered_reference_names_no_book_or_issue():
    """The references of every kind, block, table and figure the installed plugins register, and
    the docs of every block parameter."""
    reg = dsl.api.load(CASES / "cpt-qwen3-8b-4090.plan").plugins
    hits = []
    for what in ("kinds", "blocks", "tables", "figures"):
        for name, spec in sorted(getattr(reg, what).items()):
            hits += _cited(f"{what} {name}", (*spec.references, getattr(spec, "doc", ""), getattr(spec, "title", "")))
            for prm in (*getattr(spec, "params", ()), *getattr(spec, "plan_params", ())):
                hits += _cited(f"{what} {name}.{prm.name}", (prm.doc,))
    assert len(reg.blocks) > 40 and len(reg.tables) > 10       # the walk saw the standard library
    assert not hits, "registered references cite a book or an issue:\n" + "\n".join(hits)


@pytest.mark.parametrize("catalog", sorted(p.name for p in (REPO_ROOT / "specs" / "catalog").glob("*.plan")))
def test_catalog_sources_name_no_book_or_issue(catalog):
    ev = dsl.api.load(REPO_ROOT / "specs" / "catalog" / catalog)
    assert any(n.source for n in ev.nodes.values()) or catalog in ("models.plan", "runs.plan"), catalog
    hits = _node_texts(ev)
    assert not hits, f"@catalog/{catalog} shows citations of a book or an issue:\n" + "\n".join(hits)

"""The documentation is executable: every ```plan block in docs/language.md, docs/models.md and README.md
evaluates, every ```plan-error block fails, and the plugin reference covers every parameter."""
from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from dsl.syntax.diagnostics import PlanError
from dsl.results.evaluation import evaluate_file as Workspace
from dsl.plugin.manager import get_plugins

ROOT = Path(__file__).resolve().parents[1]
LANGUAGE = ROOT / "docs" / "language.md"
PLUGIN_DOCS = sorted((ROOT / "docs" / "plugins").glob("*.md"))
DOCS = [LANGUAGE, ROOT / "README.md", ROOT / "docs" / "models.md"] + PLUGIN_DOCS
HF = ROOT / "specs" / "catalog" / "hf"

_FENCE = re.compile(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def blocks(path: Path) -> list[tuple[str, str, int]]:
    """(tag, text, line) of every fenced block tagged plan or plan-error in ``path``."""
    if not path.exists():
        return []
    src = path.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(src):
        if m.group(1) in ("plan", "plan-error"):
            out.append((m.group(1), m.group(2), src.count("\n", 0, m.start()) + 1))
    return out


EXAMPLES = [pytest.param(tag, text, id=f"{p.name}:{line}:{tag}")
            for p in DOCS for tag, text, line in blocks(p)]


def _write(tmp_path: Path, text: str) -> Path:
    shutil.copytree(HF, tmp_path / "hf")   # for `model NAME from "hf/…json"` examples
    f = tmp_path / "example.plan"
    f.write_text(text, encoding="utf-8")
    return f


def test_language_doc_has_examples():
    tags = [t for t, _, _ in blocks(LANGUAGE)]
    assert tags.count("plan") >= 10 and tags.count("plan-error") >= 10


@pytest.mark.parametrize("tag,text", EXAMPLES)
def test_example(tmp_path, tag, text):
    f = _write(tmp_path, text)
    if tag == "plan":
        ws = Workspace(f)
        assert not ws.errors
        for q in ws.queries:          # `solve` lines must be answerable too
            from dsl.results.solver import solve_query
            assert solve_query(ws, q).value is not None, q
        if ws.queries:                # and a solve example is a complete plan: no warning that it is not
            assert not [d for d in ws.warnings if d.code == "incomplete"], ws.warnings
        return
    with pytest.raises(PlanError) as exc:
        ws = Workspace(f)
        from dsl.results.solver import solve_query
        for q in ws.queries:
            solve_query(ws, q)
    codes = {d.code for d in exc.value.diagnostics}
    for want in re.findall(r"#\s*expect:\s*([\w-]+)", text):
        assert want in codes, (want, exc.value.diagnostics)


def _section(doc: str, block: str) -> str:
    # a block may be documented in docs/language.md and extended in docs/plugins/NAME.md
    ms = list(re.finditer(rf"^## `use {block}`\n(.*?)(?=^## |\Z)", doc, re.M | re.S))
    assert ms, f"docs/language.md and docs/plugins/*.md have no section '## `use {block}`'"
    return "\n".join(m.group(1) for m in ms)


def _reference() -> str:
    """The plugin reference: docs/language.md plus one page per plugin in docs/plugins/."""
    return "\n".join(p.read_text(encoding="utf-8") for p in [LANGUAGE] + PLUGIN_DOCS)


def _unit_cell(p) -> str:
    if p.kind == "quantity":
        return f"`{p.unit or '1'}`"
    if p.kind == "list":
        return {"string": "list of strings", "ref": f"list of {p.ref_kind or 'ref'}"}.get(
            p.item, f"list of `{p.unit or '1'}`")
    return p.kind


def _default_cell(p) -> str:
    if p.default is not None:
        return f"`{p.default}`"
    return "optional" if p.optional else "required"


def _params():
    for spec in sorted(get_plugins().blocks.values(), key=lambda s: s.name):
        for p in spec.params + spec.plan_params:
            yield pytest.param(spec.name, p, id=f"{spec.name}.{p.name}")


@pytest.mark.parametrize("block,param", list(_params()))
def test_every_param_documented(block, param):
    section = _section(_reference(), block)
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith(f"| `{param.name}` |")]
    assert rows, f"`use {block}` parameter '{param.name}' is not in its table"
    assert any(r[1] == _unit_cell(param) and r[2] == _default_cell(param) for r in rows), \
        (f"`use {block}` {param.name}: expected unit {_unit_cell(param)} and default "
         f"{_default_cell(param)}, got {rows}")


def test_hooks_have_docstrings():
    tree = ast.parse((ROOT / "dsl" / "plugin" / "hookspecs.py").read_text(encoding="utf-8"))
    hooks = [n for n in tree.body if isinstance(n, ast.FunctionDef)
             and any(getattr(d, "id", None) == "hookspec" or getattr(getattr(d, "func", None), "id", None) == "hookspec"
                     for d in n.decorator_list)]
    assert len(hooks) >= 7
    missing = [h.name for h in hooks if not (ast.get_docstring(h) or "").strip()]
    assert not missing, f"hooks without a docstring: {missing}"


def test_every_hook_is_a_hookspec():
    from dsl.plugin import hookspecs
    import pluggy
    pm = pluggy.PluginManager("plan")
    pm.add_hookspecs(hookspecs)
    names = {n for n in dir(pm.hook) if n.startswith("plan_")}
    for n in names:
        assert getattr(hookspecs, n).__doc__, n


# ---------------------------------------------------------------- docs/plugins.md covers the contract
PLUGIN_DOC = ROOT / "docs" / "plugins.md"
TIMELINE_BUILDING = ("add", "hold", "pools", "holds_in", "makespan_quantity", "peak_quantity", "time_quantity",
                     "event_quantity", "finish_quantity", "area_quantity")


def _public(cls) -> list[str]:
    import inspect
    return sorted(n for n, v in inspect.getmembers(cls) if not n.startswith("_")
                  and (callable(v) or isinstance(v, property)) and n != "Abort")


def test_plugins_doc_covers_every_hook():
    from dsl.plugin import hookspecs
    text = PLUGIN_DOC.read_text(encoding="utf-8")
    hooks = [n for n in dir(hookspecs) if n.startswith("plan_")]
    missing = [h for h in hooks if f"`{h}(" not in text]
    assert not missing, f"docs/plugins.md does not document hooks {missing}"


@pytest.mark.parametrize("cls_name,var", [("PlanContext", "ctx"), ("DeclContext", "ctx"), ("BlockView", "b"),
                                          ("DeclView", "view"), ("Evaluation", "ev")])
def test_plugins_doc_covers_every_context_method(cls_name, var):
    import dsl.plugin
    from dsl.results.evaluation import Evaluation
    cls = Evaluation if cls_name == "Evaluation" else getattr(dsl.plugin, cls_name)
    text = PLUGIN_DOC.read_text(encoding="utf-8")
    missing = [m for m in _public(cls) if f"{var}.{m}" not in text]
    assert not missing, f"docs/plugins.md does not document {cls_name} methods {missing}"


def test_plugins_doc_covers_the_timeline_building_methods():
    text = PLUGIN_DOC.read_text(encoding="utf-8")
    missing = [m for m in TIMELINE_BUILDING if f"tl.{m}(" not in text]
    assert not missing, f"docs/plugins.md does not document Timeline methods {missing}"


def test_plugins_doc_covers_every_record():
    import dsl.plugin
    text = PLUGIN_DOC.read_text(encoding="utf-8")
    records = ["Param", "UseSpec", "KindSpec", "TableSpec", "FigureSpec", "Table", "QuantitySpec", "SlotSpec",
               "CommandSpec"]
    assert all(hasattr(dsl.plugin, r) for r in records)
    missing = [r for r in records if f"`{r}(" not in text]
    assert not missing, f"docs/plugins.md does not document records {missing}"


_PRINTED = re.compile(r"`plan eval` prints \(the `([\w-]+)` table\):\n\n```text\n(.*?)^```", re.M | re.S)


def _printed_tables():
    """(doc, table name, the plan block before it, the printed lines) of every "`plan eval`
    prints (the `NAME` table):" followed by a text block in the plugin docs."""
    out = []
    for p in PLUGIN_DOCS:
        src = p.read_text(encoding="utf-8")
        for m in _PRINTED.finditer(src):
            plan = [b.group(2) for b in _FENCE.finditer(src, 0, m.start()) if b.group(1) == "plan"][-1]
            out.append(pytest.param(plan, m.group(1), m.group(2).splitlines(), id=f"{p.name}:{m.group(1)}"))
    return out


@pytest.mark.parametrize("plan,name,lines", _printed_tables())
def test_printed_tables_are_what_plan_eval_prints(tmp_path, plan, name, lines):
    """A table a plugin doc shows as printed is, line for line, in `plan eval`'s output of the
    example above it (a line the doc cuts with "…" matches by its start)."""
    from conftest import run_cli
    code, out, err = run_cli("eval", _write(tmp_path, plan))
    assert code == 0, err
    got = [line.rstrip() for line in out.splitlines()]
    want = [line.rstrip() for line in lines]
    start = got.index(want[0])
    for g, w in zip(got[start:], want):
        assert g.startswith(w[:-1].rstrip()) if w.endswith("…") else g == w, (name, w, g)


def test_readme_sample_output_is_what_plan_eval_prints():
    """The README's "What it prints" block is the head of `plan eval` on the design case: its
    quantity rows are the output's first rows, in order (the sample stops at "...")."""
    from conftest import run_cli
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sample = re.search(r"## What it prints\n\n```\n(.*?)^\.\.\.$", readme, re.M | re.S).group(1)
    code, out, err = run_cli("eval", ROOT / "specs" / "cases" / "cpt-qwen3-8b-4090.plan")
    assert code == 0, err
    got = [line.rstrip() for line in out.splitlines()]
    want = [line.rstrip() for line in sample.splitlines()]
    start = got.index(want[0])
    assert got[start:start + len(want)] == want


def test_readme_cli_reference_lists_every_option():
    """Each row of README.md's CLI reference names every option its command's --help offers
    (the options every command shares, --limit and --allow-outside-root, are described once)."""
    import argparse
    from dsl import cli
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## CLI reference", 1)[1].split("\n\n", 2)[1]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `plan (?:--disable-plugin NAME )?([a-z]+).*$", table, re.M)}
    parser = cli.build_parser(cli.plugin_commands(()))
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    shared = {"-h", "--help", "--limit", "--allow-outside-root"}
    missing = {}
    for name, p in sub.choices.items():
        assert name in rows, f"README's CLI reference has no row for `plan {name}`"
        gone = sorted(a.option_strings[-1] for a in p._actions
                      if a.option_strings and not shared & set(a.option_strings)
                      and not any(re.search(re.escape(o) + r"(?![\w-])", rows[name]) for o in a.option_strings))
        if gone:
            missing[name] = gone
    assert not missing, missing
    for opt in ("--limit", "--allow-outside-root"):
        assert opt in readme


def test_language_doc_lists_every_catalog_declaration():
    """docs/language.md's paragraph on imports names every device, link, storage, model and
    engine the packaged catalog declares (and nothing it does not)."""
    import re
    catalog = ROOT / "specs" / "catalog"
    declared = set()
    for f in ("hardware.plan", "models.plan", "engines.plan"):
        declared |= set(re.findall(r"^(?:device|link|storage|model|engine)\s+(\w+)", (catalog / f).read_text(),
                                   re.M))
    text = (ROOT / "docs" / "language.md").read_text()
    para = text[text.index("`@catalog/hardware.plan` (devices"):text.index("A file imported twice")]
    listed = set(re.findall(r"`(\w+)`", para))
    assert declared <= listed, sorted(declared - listed)
    assert not (listed - declared - {"source"}), sorted(listed - declared)

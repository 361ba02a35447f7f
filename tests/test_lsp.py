"""``plan lsp`` as an editor uses it: pytest-lsp starts ``python -m dsl.cli lsp`` as a
subprocess and speaks the protocol to it over stdio (one server for the module)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types as T  # noqa: E402
from pygls.uris import from_fs_path  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CPT = ROOT / "specs" / "cases" / "cpt-qwen3-8b-4090.plan"
TOY = "plan p {\n  x = 2 s\n  y = x * 3\n  require fast: y <= 5 s\n}\nsolve need: p.x for p.y == 12 s\n"

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(
    server_command=[sys.executable, "-m", "dsl.cli", "lsp"], server_env=None))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(T.InitializeParams(capabilities=T.ClientCapabilities(),
                                                           root_uri=from_fs_path(str(ROOT))))
    yield
    await lsp_client.shutdown_session()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lsp")


def _file(d: Path, name: str, text: str) -> tuple[Path, str]:
    p = d / name
    p.write_text(text, encoding="utf-8")
    return p, from_fs_path(str(p))


async def _open(client, uri: str, text: str):
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        text_document=T.TextDocumentItem(uri=uri, language_id="plan", version=1, text=text)))
    await client.wait_for_notification(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return client.diagnostics[uri]


async def test_diagnostics_on_open_and_change_from_the_unsaved_text(client: LanguageClient, scratch):
    path, uri = _file(scratch, "toy.plan", TOY)
    diags = await _open(client, uri, TOY)
    # the requirement that fails is a warning at its `require`
    assert [(d.code, d.severity, d.range.start.line) for d in diags] == [
        ("requirement", T.DiagnosticSeverity.Warning, 3)]
    assert "p.fast" in diags[0].message
    # an unknown name typed but not saved: an error at the name, with the hint
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[T.TextDocumentContentChangeWholeDocument(text=TOY.replace("x * 3", "x * 3 + z"))]))
    await client.wait_for_notification(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    (d,) = client.diagnostics[uri]
    assert (d.code, d.severity) == ("unknown-name", T.DiagnosticSeverity.Error)
    assert (d.range.start.line, d.range.start.character, d.range.end.character) == (2, 14, 15)
    assert "unknown name 'z'" in d.message and "hint:" in d.message
    assert path.read_text(encoding="utf-8") == TOY          # nothing was written


async def test_a_broken_file_gives_diagnostics_and_the_server_stays_up(client: LanguageClient, scratch):
    _, uri = _file(scratch, "broken.plan", "plan p {\n  x = = 2\n")
    diags = await _open(client, uri, "plan p {\n  x = = 2\n")
    assert diags and diags[0].code == "syntax" and diags[0].severity == T.DiagnosticSeverity.Error
    # still answering: hover over nothing, the outline of a file that does not parse
    assert await client.text_document_hover_async(T.HoverParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=1, character=2))) is None
    assert await client.text_document_document_symbol_async(T.DocumentSymbolParams(
        text_document=T.TextDocumentIdentifier(uri=uri))) == []


async def test_hover_shows_value_formula_and_who_defines_it(client: LanguageClient, scratch):
    uri = from_fs_path(str(CPT))
    text = CPT.read_text(encoding="utf-8")
    diags = await _open(client, uri, text)
    assert all(d.severity != T.DiagnosticSeverity.Error for d in diags)
    lines = text.split("\n")
    line = next(i for i, s in enumerate(lines) if s.strip().startswith("mfu = 40 %"))
    h = await client.text_document_hover_async(T.HoverParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=line, character=3)))
    assert h is not None and "**gpus48.mfu** = 40 %" in h.contents.value
    assert "range 30 % .. 50 %" in h.contents.value and "source:" in h.contents.value
    # a computed quantity named in full: its value, formula and plugin
    text2 = text.replace('"../catalog/', '"@catalog/') + \
        "\nsolve probe: gpus48.mfu for gpus48.finish_time == cpt.deadline\n"
    _, turi = _file(scratch, "hover.plan", text2)
    await _open(client, turi, text2)
    last = len(text2.split("\n")) - 2
    col = text2.split("\n")[last].index("finish_time") + 2
    h = await client.text_document_hover_async(T.HoverParams(
        text_document=T.TextDocumentIdentifier(uri=turi), position=T.Position(line=last, character=col)))
    assert h is not None
    v = h.contents.value
    assert v.startswith("**gpus48.finish_time** = ") and " day" in v.split("\n")[0]
    assert "[plugin " in v and "\n│  = " in v        # who defines it, and its formula


async def test_definition_across_imports_and_the_catalog(client: LanguageClient, scratch):
    uri = from_fs_path(str(CPT))
    text = CPT.read_text(encoding="utf-8")
    await _open(client, uri, text)
    lines = text.split("\n")
    line = next(i for i, s in enumerate(lines) if "device = rtx4090" in s)
    col = lines[line].index("rtx4090") + 1
    loc = await client.text_document_definition_async(T.DefinitionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=line, character=col)))
    assert loc is not None and loc.uri.endswith("specs/catalog/hardware.plan")
    cat = (ROOT / "specs" / "catalog" / "hardware.plan").read_text(encoding="utf-8").split("\n")
    assert "rtx4090" in cat[loc.range.start.line]


async def test_document_symbols_and_formatting(client: LanguageClient, scratch):
    _, uri = _file(scratch, "outline.plan", TOY)
    await _open(client, uri, TOY)
    syms = await client.text_document_document_symbol_async(T.DocumentSymbolParams(
        text_document=T.TextDocumentIdentifier(uri=uri)))
    assert [(s.name, s.kind) for s in syms] == [("p", T.SymbolKind.Class), ("need", T.SymbolKind.Function)]
    assert [c.name for c in syms[0].children] == ["x", "y", "fast"]
    messy = "plan p {x=2 s;   y = x*3}\n"
    _, muri = _file(scratch, "messy.plan", messy)
    await _open(client, muri, messy)
    edits = await client.text_document_formatting_async(T.DocumentFormattingParams(
        text_document=T.TextDocumentIdentifier(uri=muri), options=T.FormattingOptions(tab_size=2, insert_spaces=True)))
    from dsl.syntax.format import format_source
    assert len(edits) == 1 and edits[0].new_text == format_source(messy) != messy
    assert edits[0].range.start == T.Position(line=0, character=0)


async def test_completion_of_blocks_and_their_parameters(client: LanguageClient, scratch):
    text = "plan p {\n  use \n}\n"
    _, uri = _file(scratch, "complete.plan", text)
    await _open(client, uri, text)
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=1, character=6)))
    labels = {i.label for i in res.items}
    assert {"memory", "checkpoint", "layout"} <= labels
    text = "plan p {\n  use memory {\n    \n  }\n}\n"
    _, uri = _file(scratch, "complete2.plan", text)
    await _open(client, uri, text)
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=2, character=4)))
    by = {i.label: i for i in res.items}
    assert "usable" in by and by["usable"].documentation


async def test_code_action_applies_the_did_you_mean(client: LanguageClient, scratch):
    text = "plan p {\n  x = 2 s\n  y = xx * 3\n}\n"
    _, uri = _file(scratch, "dym.plan", text)
    (d,) = await _open(client, uri, text)
    assert d.code == "unknown-name"
    acts = await client.text_document_code_action_async(T.CodeActionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), range=d.range,
        context=T.CodeActionContext(diagnostics=[d])))
    (a,) = acts
    assert a.title == "replace with 'x'"
    (e,) = a.edit.changes[uri]
    assert e.new_text == "x" and (e.range.start.line, e.range.start.character, e.range.end.character) == (2, 6, 8)


def _change(client, uri: str, version: int, text: str):
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[T.TextDocumentContentChangeWholeDocument(text=text)]))


async def test_rapid_changes_publish_only_the_latest_text_and_requests_still_answer(client: LanguageClient, scratch):
    _, uri = _file(scratch, "rapid.plan", TOY)
    await _open(client, uri, TOY)
    # three changes faster than the pause in typing: only the last one is evaluated
    _change(client, uri, 2, TOY.replace("x * 3", "x * 3 + a"))
    _change(client, uri, 3, TOY.replace("x * 3", "x * 3 + b"))
    _change(client, uri, 4, TOY.replace("x * 3", "x * 2"))
    await client.wait_for_notification(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert list(client.diagnostics[uri]) == []    # y = 4 s: the requirement holds, no stale error
    h = await client.text_document_hover_async(T.HoverParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=2, character=2)))
    assert h is not None and h.contents.value.startswith("**p.y** = 4 s")


async def test_references_across_the_file_and_its_imports(client: LanguageClient, scratch):
    uri = from_fs_path(str(CPT))
    text = CPT.read_text(encoding="utf-8")
    await _open(client, uri, text)
    lines = text.split("\n")
    line = next(i for i, s in enumerate(lines) if s.strip().startswith("mfu = 40 %"))
    refs = await client.text_document_references_async(T.ReferenceParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=line, character=3),
        context=T.ReferenceContext(include_declaration=True)))
    got = [(r.uri == uri, r.range.start.line) for r in refs]
    assert got[0] == (True, line) and len(got) >= 2    # the assignment, then where it is read
    for r in refs[1:]:
        assert "mfu" in lines[r.range.start.line][r.range.start.character:r.range.end.character]
    # a catalog device: its declaration in the catalog and its use here
    line = next(i for i, s in enumerate(lines) if "device = rtx4090" in s)
    refs = await client.text_document_references_async(T.ReferenceParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=line, character=lines[line].index("rtx4090")),
        context=T.ReferenceContext(include_declaration=True)))
    assert any(r.uri.endswith("specs/catalog/hardware.plan") for r in refs)
    assert any(r.uri == uri and r.range.start.line == line for r in refs)


async def test_completion_of_units_and_catalog_entries(client: LanguageClient, scratch):
    text = CPT.read_text(encoding="utf-8").replace('"../catalog/', '"@catalog/')
    _, uri = _file(scratch, "units.plan", text)
    await _open(client, uri, text)
    lines = text.split("\n")
    line = next(i for i, s in enumerate(lines) if "device = rtx4090" in s)
    col = lines[line].index("rtx4090")
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=line, character=col)))
    by = {i.label: i for i in res.items}
    assert {"rtx4090", "h100_sxm"} <= set(by) and "qwen3_8b" not in by     # devices only
    assert by["rtx4090"].detail.startswith("device")
    line = next(i for i, s in enumerate(lines) if "input_wait = 0.5 s" in s)
    col = lines[line].index("0.5 s") + 4
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=line, character=col)))
    labels = {i.label for i in res.items}
    assert {"s", "ms", "GB", "GiB", "TFLOP/s"} & labels >= {"s", "ms", "GB", "GiB"}
    assert "trajectory" in labels          # a unit a plugin registers (the RL plugin's)
    assert all(i.kind == T.CompletionItemKind.Unit for i in res.items)


async def test_positions_count_utf16_code_units(client: LanguageClient, scratch):
    # '😀' is one code point but two UTF-16 code units (the LSP default): what follows it on the
    # line is one unit further right than the tool's column, both ways
    text = 'plan p {\n  x = 2 s\n  a = 1 source "é😀"; y = x * 3 + xx\n}\n'
    _, uri = _file(scratch, "utf16.plan", text)
    (d,) = await _open(client, uri, text)
    line = text.split("\n")[2]
    assert d.code == "unknown-name"
    assert (d.range.start.character, d.range.end.character) == (line.index("xx") + 1, line.index("xx") + 3)
    (a,) = await client.text_document_code_action_async(T.CodeActionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), range=d.range, context=T.CodeActionContext(diagnostics=[d])))
    fix = a.edit.changes[uri][0].range
    assert (fix.start.character, fix.end.character) == (d.range.start.character, d.range.end.character)
    fixed = text.replace("+ xx", "+ x")
    _change(client, uri, 2, fixed)
    await client.wait_for_notification(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    col16 = line.index("x * 3") + 1           # the `x` of `x * 3`, in UTF-16 units
    h = await client.text_document_hover_async(T.HoverParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=2, character=col16)))
    assert h is not None and h.contents.value.startswith("**p.x** = 2 s")


async def test_inlay_hints_show_evaluated_values(client: LanguageClient, scratch):
    _, uri = _file(scratch, "hints.plan", TOY)
    await _open(client, uri, TOY)
    hints = await client.text_document_inlay_hint_async(T.InlayHintParams(
        text_document=T.TextDocumentIdentifier(uri=uri),
        range=T.Range(start=T.Position(line=0, character=0), end=T.Position(line=6, character=0))))
    # `y = x * 3` gets its value; `x = 2 s`, a plain number, none
    assert [(h.position.line, h.position.character, h.label) for h in hints] == [(2, 11, "= 6 s")]


async def test_hover_while_the_text_has_an_error_answers_from_the_last_evaluation(client: LanguageClient, scratch):
    """An unknown name typed (not saved) stops the evaluation; hover still answers, from the last
    text that evaluated (y = 2 s × 3 = 6 s), and says so."""
    _, uri = _file(scratch, "stale.plan", TOY)
    await _open(client, uri, TOY)
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[T.TextDocumentContentChangeWholeDocument(text=TOY.replace("x * 3", "x * 3 + zz"))]))
    await client.wait_for_notification(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert any(d.severity == T.DiagnosticSeverity.Error for d in client.diagnostics[uri])
    h = await client.text_document_hover_async(T.HoverParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=2, character=2)))
    assert h is not None
    first, rest = h.contents.value.split("\n\n", 1)
    assert "last version of this file that evaluated" in first
    assert rest.startswith("**p.y** = 6 s")

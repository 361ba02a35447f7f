"""``plan lsp``: a language server over standard input and output, on pygls (the optional extra
``lsp``; this is the only module that imports it).  Diagnostics on open, change and save (those
of ``plan check``, failed requirements as warnings), hover, go to definition, find references,
document symbols, formatting (``plan fmt``), did-you-mean quick fixes, completion and inlay
hints; what each answers is in :mod:`dsl.cli.lsp_features`.

A document is evaluated from its text in the editor at its own path, never on the event loop:
a worker thread (one, so evaluations never compete for the two cores of a laptop build) runs
them, the latest text wins (a change made while another waits supersedes it; a result for a
text that is no longer the document's is not published).  After a short pause in typing
(:data:`DEBOUNCE_S`) the cheap pass (parse and resolve: syntax, name and unit errors) is
published at once when it finds errors; the evaluated diagnostics follow when the evaluation is
done, replacing them.  Requests (hover, definition …) wait, without blocking the loop, for the
evaluation of the current text.  Imported files are parsed once per content (the parser's
AST cache), so an edit of the open file does not parse the catalog again.

Positions: LSP columns count UTF-16 code units unless the client negotiates another encoding;
the tool counts code points.  Every position in and out goes through pygls's position codec.
"""
from __future__ import annotations

import asyncio
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import dsl.cli.lsp_features as F

DEBOUNCE_S = 0.25


def _uri_path(uri: str) -> str:
    from pygls.uris import to_fs_path
    return to_fs_path(uri) or uri


def build_server():
    """The pygls server with every feature registered."""
    from lsprotocol import types as T
    from pygls.lsp.server import LanguageServer
    from pygls.uris import from_fs_path

    from dsl.api import disabled_plugins
    from dsl.cli.common import disabled

    server = LanguageServer("plan", "0.1.0")
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plan-eval")
    disable = disabled_plugins(disabled())
    cache: dict[str, F.Analysis] = {}                      # uri -> the last evaluation
    inflight: dict[str, tuple[str, asyncio.Future]] = {}   # uri -> (text, its evaluation)
    pending: dict[str, int] = {}                           # uri -> the latest change's number
    sent: dict[str, tuple] = {}                            # uri -> (text, diagnostics) last published

    def codec():
        return server.workspace.position_codec

    def source(uri: str) -> str:
        return server.workspace.get_text_document(uri).source

    def lines_of(path: str) -> list[str]:
        uri = from_fs_path(os.path.abspath(path))
        doc = server.workspace.text_documents.get(uri)
        if doc is not None:
            return doc.lines
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().splitlines(True)
        except (OSError, UnicodeDecodeError):
            return []

    def out_range(lines, r) -> "T.Range":
        """A 0-based code-point (line, col, end line, end col) as the client counts it."""
        return codec().range_to_client_units(lines, T.Range(start=T.Position(line=r[0], character=r[1]),
                                                            end=T.Position(line=r[2], character=r[3])))

    def span_range(span) -> "T.Range":
        r = (max(0, span.line - 1), max(0, span.column - 1), max(0, span.end_line - 1), max(0, span.end_column - 1))
        return out_range(lines_of(span.file), r)

    def at(uri: str, pos) -> tuple[int, int]:
        doc = server.workspace.get_text_document(uri)
        p = codec().position_from_client_units(doc.lines, pos)
        return p.line, p.character

    async def current(uri: str) -> F.Analysis:
        """The evaluation of the document's current text, run on the worker (shared with a
        request or change that already asked for it)."""
        text = source(uri)
        an = cache.get(uri)
        if an is not None and an.text == text:
            return an
        job = inflight.get(uri)
        if job is None or job[0] != text:
            loop = asyncio.get_running_loop()
            fut = loop.run_in_executor(worker, F.analyze, _uri_path(uri), text, disable, cache.get(uri))
            job = inflight[uri] = (text, fut)
        an = await asyncio.shield(job[1])
        if inflight.get(uri, (None,))[0] == text:
            inflight.pop(uri, None)
        if source(uri) == text:                   # still the document's text: keep it
            cache[uri] = an
        return an

    severity = {"error": T.DiagnosticSeverity.Error, "warning": T.DiagnosticSeverity.Warning}

    def send(uri: str, an: F.Analysis) -> None:
        lines = server.workspace.get_text_document(uri).lines
        diags = [T.Diagnostic(range=out_range(lines, r), message=F.message(d),
                              severity=severity.get(d.severity, T.DiagnosticSeverity.Information),
                              code=d.code, source="plan")
                 for r, d in F.located(an)]
        if sent.get(uri) == (an.text, diags):     # the cheap pass already said exactly this
            return
        sent[uri] = (an.text, diags)
        server.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=diags))

    async def publish(uri: str, n: int | None = None) -> None:
        """Diagnostics of the current text: the cheap pass's errors first (when it has any),
        then the evaluation's; nothing when a newer change (``n`` no longer the latest) came."""
        latest = lambda: n is None or pending.get(uri) == n   # noqa: E731
        text = source(uri)
        an = cache.get(uri)
        if an is None or an.text != text:
            loop = asyncio.get_running_loop()
            q = await loop.run_in_executor(worker, F.quick, _uri_path(uri), text, disable)
            if not latest() or source(uri) != text:
                return
            if q.diagnostics:
                send(uri, q)
        an = await current(uri)
        if latest() and source(uri) == an.text:
            send(uri, an)

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls, params: T.DidOpenTextDocumentParams):
        sent.pop(params.text_document.uri, None)
        await publish(params.text_document.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls, params: T.DidSaveTextDocumentParams):
        sent.pop(params.text_document.uri, None)
        await publish(params.text_document.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls, params: T.DidChangeTextDocumentParams):
        uri = params.text_document.uri
        n = pending[uri] = pending.get(uri, 0) + 1
        await asyncio.sleep(DEBOUNCE_S)
        if pending.get(uri) == n:                 # no newer change while we waited
            await publish(uri, n)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls, params: T.DidCloseTextDocumentParams):
        uri = params.text_document.uri
        cache.pop(uri, None)
        inflight.pop(uri, None)
        sent.pop(uri, None)
        pending[uri] = pending.get(uri, 0) + 1
        server.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(T.SHUTDOWN)
    def shutdown(ls, params):
        worker.shutdown(wait=False, cancel_futures=True)

    @server.feature(T.TEXT_DOCUMENT_HOVER)
    async def hover(ls, params: T.HoverParams):
        uri = params.text_document.uri
        text = F.hover(await current(uri), *at(uri, params.position))
        if text is None:
            return None
        return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=text))

    @server.feature(T.TEXT_DOCUMENT_DEFINITION)
    async def definition(ls, params: T.DefinitionParams):
        uri = params.text_document.uri
        span = F.definition(await current(uri), *at(uri, params.position))
        if span is None or not span.file:
            return None
        return T.Location(uri=from_fs_path(os.path.abspath(span.file)), range=span_range(span))

    @server.feature(T.TEXT_DOCUMENT_REFERENCES)
    async def references(ls, params: T.ReferenceParams):
        uri = params.text_document.uri
        spans = F.references(await current(uri), *at(uri, params.position),
                             include_declaration=params.context.include_declaration)
        return [T.Location(uri=from_fs_path(os.path.abspath(s.file)), range=span_range(s)) for s in spans if s.file]

    @server.feature(T.TEXT_DOCUMENT_CODE_ACTION,
                    T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.QuickFix]))
    async def code_action(ls, params: T.CodeActionParams):
        uri = params.text_document.uri
        lines = server.workspace.get_text_document(uri).lines
        out = []
        for title, r, new in F.fixes(await current(uri), params.range.start.line, params.range.end.line):
            out.append(T.CodeAction(title=title, kind=T.CodeActionKind.QuickFix, is_preferred=True,
                                    edit=T.WorkspaceEdit(changes={uri: [T.TextEdit(range=out_range(lines, r),
                                                                                   new_text=new)]})))
        return out

    kinds = {"plan": T.SymbolKind.Class, "declaration": T.SymbolKind.Struct, "field": T.SymbolKind.Field,
             "block": T.SymbolKind.Module, "requirement": T.SymbolKind.Boolean, "solve": T.SymbolKind.Function}

    def symbol(s: dict):
        return T.DocumentSymbol(name=s["name"], kind=kinds[s["kind"]], detail=s["detail"] or None,
                                range=span_range(s["span"]), selection_range=span_range(s["selection"]),
                                children=[symbol(c) for c in s["children"]])

    @server.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    async def document_symbol(ls, params: T.DocumentSymbolParams):
        return [symbol(s) for s in F.symbols((await current(params.text_document.uri)).module)]

    @server.feature(T.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls, params: T.DocumentFormattingParams):
        doc = server.workspace.get_text_document(params.text_document.uri)
        out = F.formatted(doc.source, _uri_path(params.text_document.uri))
        if out is None:
            return []
        n = len(doc.lines)
        return [T.TextEdit(range=T.Range(start=T.Position(line=0, character=0), end=T.Position(line=n + 1, character=0)),
                           new_text=out)]

    ckinds = {"block": T.CompletionItemKind.Module, "param": T.CompletionItemKind.Property,
              "declaration": T.CompletionItemKind.Class, "field": T.CompletionItemKind.Field,
              "unit": T.CompletionItemKind.Unit, "catalog": T.CompletionItemKind.Reference}

    @server.feature(T.TEXT_DOCUMENT_COMPLETION, T.CompletionOptions(trigger_characters=[" ", "."]))
    async def completion(ls, params: T.CompletionParams):
        from dsl.plugin.manager import get_plugins
        uri = params.text_document.uri
        an = await current(uri)
        items = F.completions(an, *at(uri, params.position), get_plugins(blocked=disable))
        return T.CompletionList(is_incomplete=False, items=[
            T.CompletionItem(label=c["label"], kind=ckinds.get(c["kind"]), detail=c["detail"] or None,
                             documentation=c["doc"] or None) for c in items])

    @server.feature(T.TEXT_DOCUMENT_INLAY_HINT)
    async def inlay_hint(ls, params: T.InlayHintParams):
        uri = params.text_document.uri
        lines = server.workspace.get_text_document(uri).lines
        out = []
        for line, col, label in F.inlay_hints(await current(uri), params.range.start.line, params.range.end.line):
            pos = codec().position_to_client_units(lines, T.Position(line=line, character=col))
            out.append(T.InlayHint(position=pos, label=label, padding_left=True))
        return out

    return server


def cmd_lsp(args) -> int:
    """Serve the language server protocol on stdin/stdout until the client exits."""
    from dsl.cli.common import EXIT_MISSING, EXIT_OK
    try:
        import pygls  # noqa: F401
    except ImportError:
        from dsl.syntax.diagnostics import install_hint
        print(f"plan: error[missing-dependency]: `plan lsp` needs pygls\n  hint: {install_hint('lsp')}",
              file=sys.stderr)
        return EXIT_MISSING
    server = build_server()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr        # nothing printed by accident may corrupt the protocol
    server.start_io(stdin, stdout)
    return EXIT_OK

"""``plan lsp``: a language server over standard input and output, on pygls (the optional extra
``lsp``; this is the only module that imports it).  Diagnostics on open, change and save (those
of ``plan check``, failed requirements as warnings), hover, go to definition, document symbols,
formatting (``plan fmt``), did-you-mean quick fixes and completion; what each answers is in :mod:`dsl.cli.lsp_features`.

A document is evaluated from its text in the editor at its own path.  Changes are evaluated
after a short pause in typing (:data:`DEBOUNCE_S`), the latest text only; hover and the other
requests reuse the last evaluation of the text they are asked about.
"""
from __future__ import annotations

import asyncio
import sys

import dsl.cli.lsp_features as F

DEBOUNCE_S = 0.25


def _uri_path(uri: str) -> str:
    from pygls.uris import to_fs_path
    return to_fs_path(uri) or uri


def _range(T, span):
    return T.Range(start=T.Position(line=max(0, span.line - 1), character=max(0, span.column - 1)),
                   end=T.Position(line=max(0, span.end_line - 1), character=max(0, span.end_column - 1)))


def build_server():
    """The pygls server with every feature registered."""
    from lsprotocol import types as T
    from pygls.lsp.server import LanguageServer
    from pygls.uris import from_fs_path

    from dsl.api import disabled_plugins
    from dsl.cli.common import disabled

    server = LanguageServer("plan", "0.1.0")
    cache: dict[str, F.Analysis] = {}            # uri -> the last evaluation
    pending: dict[str, int] = {}                  # uri -> the latest change's number

    def analysis(uri: str) -> F.Analysis:
        doc = server.workspace.get_text_document(uri)
        an = cache.get(uri)
        if an is None or an.text != doc.source:
            an = cache[uri] = F.analyze(_uri_path(uri), doc.source, disabled_plugins(disabled()))
        return an

    def publish(uri: str) -> None:
        an = analysis(uri)
        severity = {"error": T.DiagnosticSeverity.Error, "warning": T.DiagnosticSeverity.Warning}
        diags = [T.Diagnostic(range=T.Range(start=T.Position(line=r[0], character=r[1]),
                                            end=T.Position(line=r[2], character=r[3])),
                              message=F.message(d), severity=severity.get(d.severity, T.DiagnosticSeverity.Information),
                              code=d.code, source="plan")
                 for r, d in F.located(an)]
        server.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=diags))

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: T.DidOpenTextDocumentParams):
        publish(params.text_document.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls, params: T.DidSaveTextDocumentParams):
        publish(params.text_document.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls, params: T.DidChangeTextDocumentParams):
        uri = params.text_document.uri
        n = pending[uri] = pending.get(uri, 0) + 1
        await asyncio.sleep(DEBOUNCE_S)
        if pending.get(uri) == n:                 # no newer change while we waited
            publish(uri)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls, params: T.DidCloseTextDocumentParams):
        uri = params.text_document.uri
        cache.pop(uri, None)
        server.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(T.TEXT_DOCUMENT_HOVER)
    def hover(ls, params: T.HoverParams):
        text = F.hover(analysis(params.text_document.uri), params.position.line, params.position.character)
        if text is None:
            return None
        return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=text))

    @server.feature(T.TEXT_DOCUMENT_DEFINITION)
    def definition(ls, params: T.DefinitionParams):
        span = F.definition(analysis(params.text_document.uri), params.position.line, params.position.character)
        if span is None or not span.file:
            return None
        import os
        return T.Location(uri=from_fs_path(os.path.abspath(span.file)), range=_range(T, span))

    @server.feature(T.TEXT_DOCUMENT_CODE_ACTION,
                    T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.QuickFix]))
    def code_action(ls, params: T.CodeActionParams):
        uri = params.text_document.uri
        out = []
        for title, r, new in F.fixes(analysis(uri), params.range.start.line, params.range.end.line):
            rng = T.Range(start=T.Position(line=r[0], character=r[1]), end=T.Position(line=r[2], character=r[3]))
            out.append(T.CodeAction(title=title, kind=T.CodeActionKind.QuickFix, is_preferred=True,
                                    edit=T.WorkspaceEdit(changes={uri: [T.TextEdit(range=rng, new_text=new)]})))
        return out

    kinds = {"plan": T.SymbolKind.Class, "declaration": T.SymbolKind.Struct, "field": T.SymbolKind.Field,
             "block": T.SymbolKind.Module, "requirement": T.SymbolKind.Boolean, "solve": T.SymbolKind.Function}

    def symbol(s: dict):
        return T.DocumentSymbol(name=s["name"], kind=kinds[s["kind"]], detail=s["detail"] or None,
                                range=_range(T, s["span"]), selection_range=_range(T, s["selection"]),
                                children=[symbol(c) for c in s["children"]])

    @server.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def document_symbol(ls, params: T.DocumentSymbolParams):
        return [symbol(s) for s in F.symbols(analysis(params.text_document.uri).module)]

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
              "declaration": T.CompletionItemKind.Class, "field": T.CompletionItemKind.Field}

    @server.feature(T.TEXT_DOCUMENT_COMPLETION, T.CompletionOptions(trigger_characters=[" ", "."]))
    def completion(ls, params: T.CompletionParams):
        from dsl.plugin.manager import get_plugins
        an = analysis(params.text_document.uri)
        items = F.completions(an, params.position.line, params.position.character,
                              get_plugins(blocked=disabled_plugins(disabled())))
        return T.CompletionList(is_incomplete=False, items=[
            T.CompletionItem(label=c["label"], kind=ckinds.get(c["kind"]), detail=c["detail"] or None,
                             documentation=c["doc"] or None) for c in items])

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

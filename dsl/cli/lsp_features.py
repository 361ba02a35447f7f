"""What ``plan lsp`` answers, without the protocol: a document's diagnostics, the hover text and
definition of a name, its outline, its formatting and completions.  Everything here works on
plain values (0-based ``(line, character)`` positions, :class:`~dsl.syntax.diagnostics.Diagnostic`
lists, dicts of text); :mod:`dsl.cli.lsp` turns them into LSP messages with pygls, which only
that module imports.

A document is evaluated from its text in the editor (unsaved changes included) at its own path,
so its imports resolve, and the project root rules apply, exactly as ``plan check`` on the saved
file would.  Nothing here raises: a broken document gives diagnostics, never an exception.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from dsl.syntax.diagnostics import Diagnostic, PlanError

_WORD = re.compile(r"[A-Za-z0-9_.]")


@dataclass
class Analysis:
    """One evaluation of a document: the results (None when nothing could be evaluated), every
    diagnostic (errors, warnings, failed requirements as warnings) and the parsed module of the
    document itself (None on a syntax error)."""

    path: str
    text: str
    results: object = None
    diagnostics: list = field(default_factory=list)
    module: object = None
    stale: object = None      # the last results that evaluated, while this text does not




def same_file(a: str | None, b: str) -> bool:
    """Whether span file ``a`` names the document at ``b``."""
    if not a:
        return False
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def analyze(path: str, text: str, disable: tuple = (), previous: Analysis | None = None) -> Analysis:
    """Evaluate ``text`` as the file at ``path``: results, diagnostics and module.  When it does
    not evaluate, ``stale`` keeps ``previous``'s results (for completion while typing)."""
    from dsl.api import load
    from dsl.syntax.parser import parse
    an = Analysis(path, text)
    try:
        an.module = parse(text, path)
    except PlanError:
        an.module = None
    except Exception:   # a parser failure is reported by the evaluation below
        an.module = None
    try:
        an.results = load(path, text=text, disable=disable)
        an.diagnostics = list(an.results.warnings) + failed_requirements(an.results)
    except PlanError as e:
        an.diagnostics = list(e.diagnostics)
        an.results = getattr(e, "partial", None)
    except RecursionError:
        an.diagnostics = [Diagnostic("error", "internal", "the file nests too deeply to evaluate")]
    except Exception as e:   # never crash the server: say what happened where the user looks
        an.diagnostics = [Diagnostic("error", "internal", f"plan could not evaluate this file: "
                                     f"{type(e).__name__}: {e}", None,
                                     "run `plan check` on the saved file; please report this")]
    if an.results is None and previous is not None:
        an.stale = previous.results if previous.results is not None else previous.stale
    return an


def failed_requirements(ws) -> list[Diagnostic]:
    """Each requirement of the root file's plans that does not hold, as a warning at the
    ``require`` (or at its plan's name)."""
    out = []
    try:
        plans = ws.plans(own=True)
    except Exception:
        return out
    for p in plans:
        try:
            results = {r["name"]: r for r in ws.requirement_results(p)}
        except Exception:
            continue
        for req in [r for r in ws.requirements if r.plan == p]:
            res = results.get(req.name)
            if res is None or res["ok"]:
                continue
            span = req.span or ws.decls[p].ast.name_span
            want = req.text or req.doc or req.name
            out.append(Diagnostic("warning", "requirement", f"requirement '{p}.{req.name}' fails: {want}", span,
                                  f"`plan check --strict` names the inputs that drive it; "
                                  f"`plan explain FILE {p}.{req.name}` shows both sides"))
    return out


def located(an: Analysis) -> list[tuple[tuple[int, int, int, int], Diagnostic]]:
    """The diagnostics with the 0-based range they take in the document: a diagnostic in another
    file (an import) or without a place is shown on the document's first line, its place named."""
    out = []
    for d in an.diagnostics:
        s = d.span
        if s is not None and same_file(s.file, an.path):
            rng = (s.line - 1, s.column - 1, s.end_line - 1, s.end_column - 1)
            if rng[2:] <= rng[:2]:
                rng = (rng[0], rng[1], rng[0], rng[1] + 1)
        else:
            if s is not None:
                d = Diagnostic(d.severity, d.code, f"{d.summary} (at {s})", s, d.hint, d.related)
            rng = (0, 0, 0, 0)
        out.append((tuple(max(0, x) for x in rng), d))
    return out


def message(d: Diagnostic) -> str:
    """The text an editor shows: the summary, then the hint."""
    return d.summary + (f"\nhint: {d.hint}" if d.hint else "")


def fixes(an: Analysis, first: int, last: int) -> list[tuple[str, tuple[int, int, int, int], str]]:
    """The did-you-mean fixes of the diagnostics on 0-based lines ``first``..``last``: (title,
    range, replacement) for each hint ``did you mean 'NAME'?`` on a one-line span."""
    out = []
    for rng, d in located(an):
        m = re.search(r"did you mean '([^']+)'\?", d.hint or "")
        s = d.span
        if not m or s is None or not same_file(s.file, an.path) or s.line != s.end_line:
            continue
        if rng[0] > last or rng[2] < first:
            continue
        out.append((f"replace with '{m.group(1)}'", rng, m.group(1)))
    return out


def word_at(text: str, line: int, character: int) -> str:
    """The dotted name under 0-based (line, character), or ``""``."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        return ""
    s = lines[line]
    if not s:
        return ""
    i = min(character, len(s))
    if i == len(s) or not _WORD.match(s[i]):
        if i > 0 and _WORD.match(s[i - 1]):
            i -= 1
        else:
            return ""
    a = b = i
    while a > 0 and _WORD.match(s[a - 1]):
        a -= 1
    while b < len(s) and _WORD.match(s[b]):
        b += 1
    return s[a:b].strip(".")


def _inside(span, line: int) -> bool:
    return span is not None and span.line - 1 <= line <= span.end_line - 1


def scope_at(module, line: int) -> tuple[str | None, str | None]:
    """(declaration, block) enclosing 0-based ``line`` of ``module``, either None."""
    if module is None:
        return None, None
    for d in module.decls:
        if _inside(d.span, line):
            for u in d.uses:
                if _inside(u.span, line):
                    return d.name, u.plugin
            return d.name, None
    return None, None


def _candidates(name: str, decl: str | None, block: str | None) -> list[str]:
    """The ids ``name`` may mean, written inside ``block`` of declaration ``decl``, nearest
    scope first: ``decl.block.name``, ``decl.name``, ``name``."""
    return ([f"{decl}.{block}.{name}"] if decl and block else []) + ([f"{decl}.{name}"] if decl else []) + [name]


def resolve(an: Analysis, line: int, character: int, ws=None) -> tuple[str, str] | None:
    """What the name under the position is: ("node", id), ("decl", name), ("requirement",
    "plan.name") or None — in the document's results, or in ``ws`` when given."""
    ws = an.results if ws is None else ws
    w = word_at(an.text, line, character)
    if ws is None or not w:
        return None
    decl, block = scope_at(an.module, line)
    for c in _candidates(w, decl, block):
        if c in ws.nodes:
            return "node", c
        if c in ws.decls:
            return "decl", c
        plan, _, req = c.rpartition(".")
        if plan and any(r.plan == plan and r.name == req for r in ws.requirements):
            return "requirement", c
    return None


#: the first line of a hover answered from the last version of the document that evaluated
STALE_NOTE = ("*from the last version of this file that evaluated: the text as it is now has an error "
              "(see the diagnostics)*\n\n")


def hover(an: Analysis, line: int, character: int) -> str | None:
    """Markdown for the name under the position: its value in its unit, its formula and
    derivation (as ``plan explain`` shows it, one level deep), who defines it and its
    references; for a declaration its kind and place.  While the text does not evaluate, the
    last results that did (``an.stale``) answer, under :data:`STALE_NOTE`."""
    ws, note = an.results, ""
    if ws is None and an.stale is not None:
        ws, note = an.stale, STALE_NOTE
    what = resolve(an, line, character, ws)
    if what is None:
        return None
    text = _hover_text(ws, what)
    return None if text is None else note + text


def _hover_text(ws, what: tuple[str, str]) -> str | None:
    """The hover of a resolved name in results ``ws``."""
    kind, name = what
    try:
        if kind == "node":
            from dsl.present import explain
            n = ws.nodes[name]
            t = explain.tree(ws, name, max_depth=1)
            head = f"**{name}** = {t['value']}"
            body = explain.render(t, n.owner)
            return f"{head}\n\n```\n{body}\n```"
        if kind == "decl":
            d = ws.decls[name]
            where = d.ast.name_span
            ext = f" extends {d.parents[0]}" if d.parents else ""
            doc = f"**{d.kind} {name}**{ext}\n\ndeclared at {where}"
            return doc
        plan, _, req = name.rpartition(".")
        res = {r["name"]: r for r in ws.requirement_results(plan)}.get(req)
        r = next(r for r in ws.requirements if r.plan == plan and r.name == req)
        verdict = "holds" if res and res["ok"] else "fails"
        return f"**requirement {name}** {verdict}\n\n{r.text or r.doc}"
    except Exception:   # a value that cannot be shown is no reason to fail the request
        return None


def definition(an: Analysis, line: int, character: int):
    """The span where the name under the position is defined (a declaration's name, the
    assignment of a field or input), across imports and the catalog; None for a quantity a
    plugin computes."""
    what = resolve(an, line, character)
    if what is None:
        return None
    ws, (kind, name) = an.results, what
    if kind == "decl":
        return ws.decls[name].ast.name_span
    if kind == "node":
        n = ws.nodes[name]
        return n.assign.name_span if n.assign is not None else n.span
    plan, _, req = name.rpartition(".")
    return next((r.span for r in ws.requirements if r.plan == plan and r.name == req), None)


def symbols(module) -> list[dict]:
    """The outline of a module: declarations (with their fields, blocks and requirements),
    solves and file-level requirements, each ``{"name", "kind", "detail", "span",
    "selection", "children"}`` (``kind``: a word the server maps to an LSP symbol kind)."""
    if module is None:
        return []
    out = []
    for d in module.decls:
        kids = [{"name": a.name, "kind": "field", "detail": "", "span": a.span, "selection": a.name_span,
                 "children": []} for a in d.assigns]
        for u in d.uses:
            kids.append({"name": f"use {u.plugin}", "kind": "block", "detail": "", "span": u.span,
                         "selection": u.name_span,
                         "children": [{"name": a.name, "kind": "field", "detail": "", "span": a.span,
                                       "selection": a.name_span, "children": []} for a in u.assigns]})
        for r in d.requires:
            kids.append({"name": r.name or "require", "kind": "requirement", "detail": "require", "span": r.span,
                         "selection": r.name_span or r.span, "children": []})
        out.append({"name": d.name, "kind": "plan" if d.kind == "plan" else "declaration", "detail": d.kind,
                    "span": d.span, "selection": d.name_span, "children": kids})
    for q in module.queries:
        out.append({"name": q.name or "solve", "kind": "solve", "detail": "solve", "span": q.span,
                    "selection": q.name_span or q.span, "children": []})
    for r in module.requires:
        out.append({"name": r.name or "require", "kind": "requirement", "detail": "require", "span": r.span,
                    "selection": r.name_span or r.span, "children": []})
    return out


def formatted(text: str, path: str) -> str | None:
    """``text`` as ``plan fmt`` writes it, or None when it does not parse (or is formatted)."""
    from dsl.syntax.format import format_source
    try:
        out = format_source(text, path)
    except PlanError:
        return None
    except Exception:
        return None
    return None if out == text else out


def completions(an: Analysis, line: int, character: int, plugins) -> list[dict]:
    """Completions at the position, each ``{"label", "kind", "detail", "doc"}``: after ``use``,
    the block names; after a number, the units; after ``device =`` (``link``, ``nic``, ``model``,
    ``engine``, ``workload``, ``storage``), the declarations of that kind in the file and its
    imports (the catalog's devices, links, models …); inside a ``use`` block, that block's
    parameters (unit, default, meaning); elsewhere the declarations in scope and the fields of the enclosing declaration."""
    lines = an.text.split("\n")
    before = lines[line][:character] if 0 <= line < len(lines) else ""
    if re.search(r"\buse\s+[A-Za-z0-9_]*$", before):
        return [{"label": b.name, "kind": "block", "detail": f"plugin {b.plugin}", "doc": b.doc}
                for b in sorted(plugins.blocks.values(), key=lambda b: b.name)]
    units = unit_completions(before, getattr(plugins, "units", None))
    if units is not None:
        return units
    m = re.search(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*=\s*[A-Za-z0-9_]*$", before)
    ws = an.results if an.results is not None else an.stale
    if m and m.group(1) in _FIELD_KINDS and ws is not None:
        want = _FIELD_KINDS[m.group(1)]
        return [c for c in catalog_completions(ws) if c["detail"].split(" ")[0] == want]
    decl, block = scope_at(an.module, line)
    if block and block in plugins.blocks:
        b = plugins.blocks[block]
        return [{"label": p.name, "kind": "param", "detail": p.unit or p.kind,
                 "doc": p.doc + (f" (default {p.default})" if p.default is not None else "")}
                for p in b.params]
    out = []
    if ws is not None:
        out += [{"label": n, "kind": "declaration", "detail": d.kind, "doc": ""} for n, d in sorted(ws.decls.items())]
        if decl:
            pre = decl + "."
            out += [{"label": k[len(pre):], "kind": "field", "detail": n.unit, "doc": n.doc}
                    for k, n in sorted(ws.nodes.items()) if k.startswith(pre) and "." not in k[len(pre):]]
    return out


def quick(path: str, text: str, disable: tuple = ()) -> Analysis:
    """The cheap first pass after an edit: parse and resolve names and units without evaluating
    (``load(evaluate=False)``); its diagnostics are the syntax and name errors, or none."""
    from dsl.api import load
    an = Analysis(path, text)
    try:
        load(path, text=text, evaluate=False, disable=disable)
    except PlanError as e:
        an.diagnostics = list(e.diagnostics)
    except Exception:   # whatever it is, the full evaluation reports it
        pass
    return an


def _refs(node, scope: tuple, out: list) -> None:
    """Every ``Ref`` under an AST node with the (declaration, block) it is written in."""
    from dataclasses import fields, is_dataclass
    from dsl.syntax import ast as A
    if isinstance(node, (list, tuple)):
        for x in node:
            _refs(x, scope, out)
        return
    if not is_dataclass(node):
        return
    if isinstance(node, A.Ref):
        out.append((node, scope))
        return
    if isinstance(node, A.Decl):
        scope = (node.name, None)
    elif isinstance(node, A.UseBlock):
        scope = (scope[0], node.plugin)
    for f in fields(node):
        if f.name != "span" and not f.name.endswith("_span"):
            _refs(getattr(node, f.name), scope, out)


def _meaning(ws, parts: str, decl: str | None, block: str | None) -> tuple[str, str] | None:
    for c in _candidates(parts, decl, block):
        if c in ws.nodes:
            return "node", c
        if c in ws.decls:
            return "decl", c
    return None


def references(an: Analysis, line: int, character: int, include_declaration: bool = True) -> list:
    """The spans, in the document and its imports, that name what is under the position: its
    definition (when asked) and every reference to it (a dotted name ``a.b`` counts for ``a.b``
    and, on its first part, for the declaration ``a``)."""
    what = resolve(an, line, character)
    if what is None:
        return []
    ws, (kind, name) = an.results, what
    out = []
    if include_declaration:
        d = definition(an, line, character)
        if d is not None:
            out.append(d)
    found: list = []
    for mod in getattr(ws, "modules", ()) or ():
        _refs(mod.decls, (None, None), found)
        _refs(mod.queries, (None, None), found)
        _refs(mod.requires, (None, None), found)
    for ref, (decl, block) in found:
        parts = ref.parts
        full = ".".join(parts)
        m = _meaning(ws, full, decl, block)
        if m == (kind, name):
            out.append(ref.span)
        elif kind == "decl" and len(parts) > 1 and _meaning(ws, parts[0], decl, block) == ("decl", name):
            s = ref.span
            out.append(type(s)(file=s.file, line=s.line, column=s.column, end_line=s.line,
                               end_column=s.column + len(parts[0])))
    seen, uniq = set(), []
    for s in out:
        k = (os.path.realpath(s.file) if s.file else "", s.line, s.column, s.end_line, s.end_column)
        if k not in seen:
            seen.add(k)
            uniq.append(s)
    return sorted(uniq, key=lambda s: (s.file != an.path, s.file or "", s.line, s.column))


_FIELD_KINDS = {"device": "device", "link": "link", "nic": "link", "model": "model", "engine": "engine",
                "workload": "workload", "storage": "storage", "run": "run"}


def unit_completions(before: str, table=None) -> list[dict] | None:
    """After a number (``12 `` or ``12 G``): the units of ``table`` — the plugins' unit table, the
    core units and those the plugins register (``plan_units_register``: ``trajectory`` …); the
    current table when None — else None."""
    if not re.search(r"(?<![A-Za-z_.])\d[\d_.eE+-]*\s*[A-Za-zµ%]*$", before):
        return None
    if table is None:
        from dsl.engine.units import active_units
        table = active_units()
    return [{"label": u, "kind": "unit", "detail": "unit", "doc": ""} for u in sorted(table.units)]


def catalog_completions(ws) -> list[dict]:
    """The declarations of imported files (devices, links, models … of the catalog), with their
    kind and file."""
    out = []
    for n, d in sorted(ws.decls.items()):
        span = getattr(d.ast, "name_span", None)
        where = os.path.basename(span.file) if span is not None and span.file else ""
        out.append({"label": n, "kind": "catalog", "detail": f"{d.kind} ({where})" if where else d.kind, "doc": ""})
    return out


def inlay_hints(an: Analysis, first: int, last: int) -> list[tuple[int, int, str]]:
    """The evaluated value after each field assigned by an expression (not a plain number) on
    0-based lines ``first``..``last``: (line, character after the value, ``"= VALUE"``)."""
    from dsl.syntax import ast as A
    ws, mod = an.results, an.module
    if ws is None or mod is None:
        return []
    todo = []
    for d in mod.decls:
        todo += [(f"{d.name}.{a.name}", a) for a in d.assigns]
        for u in d.uses:
            todo += [(f"{d.name}.{u.plugin}.{a.name}", a) for a in u.assigns]
    out = []
    for name, a in todo:
        end = getattr(a.value, "span", None)
        if end is None or isinstance(a.value, (A.Number, A.String, A.Bool)) or name not in ws.nodes:
            continue
        if not (first <= end.end_line - 1 <= last) or not same_file(end.file, an.path):
            continue
        try:
            from dsl.present import explain
            value = explain.tree(ws, name, max_depth=0)["value"]
        except Exception:   # a value that cannot be shown gets no hint
            continue
        if value and not (isinstance(a.value, A.Ref) and value == ".".join(a.value.parts)):
            out.append((end.end_line - 1, end.end_column - 1, f"= {value}"))
    return sorted(out)

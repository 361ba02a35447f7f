"""Loading: the root file and its imports (relative paths and the packaged catalog).
"""
from __future__ import annotations

import os
from pathlib import Path


from ..syntax import ast as A
from ..syntax.diagnostics import PlanError, Span, display_path, remember_source
from ..syntax.parser import parse
from ..engine.nodes import DeclInfo


CATALOG_PREFIX = "@catalog/"


def catalog_dir() -> Path:
    """The packaged catalog (``dsl/catalog`` in a wheel) or ``specs/catalog`` in a checkout."""
    here = Path(__file__).resolve().parents[1]   # the dsl package
    packaged = here / "catalog"
    return packaged if packaged.is_dir() else here.parent / "specs" / "catalog"



def _is_catalog(file: str) -> bool:
    """Whether a displayed file name is in the packaged catalog."""
    try:
        return Path(os.path.abspath(file)).resolve().is_relative_to(catalog_dir().resolve())
    except (OSError, ValueError):
        return False


class LoaderMixin:
    """Reads the root file and its imports into modules and declarations."""

    # ------------------------------------------------------------ loading
    def _load(self, root: Path, text: str | None) -> None:
        from ..engine import safeio
        from ..syntax import limits as L

        seen: dict[Path, A.Module] = {}
        alias_of: dict[Path, str | None] = {}
        self.aliases: dict[str, Span] = {}       # `import "…" as NAME` -> where
        self.root = safeio.project_root(root)
        safeio.set_root(self.root, always=(catalog_dir(),))
        lim = L.current()
        # depth-first, in the order imports are written (an explicit stack: no recursion limit)
        todo: list = [(root, text, None, 0, None)]
        while todo:
            p, src, from_span, depth, imp = todo.pop()
            alias = imp.alias if imp is not None else None
            try:
                rp = Path(os.path.abspath(p)).resolve() if "\0" not in str(p) else p
            except (OSError, RuntimeError):
                rp = p
            if rp in seen:
                if alias_of.get(rp) != alias and imp is not None:
                    self.rep.error("duplicate", f"'{imp.path}' is imported " + (f"as '{alias}'" if alias else
                                   "without a name") + " here and " + (f"as '{alias_of[rp]}'" if alias_of[rp]
                                                                        else "without a name") + " elsewhere",
                                   imp.alias_span or imp.span, "import a file under one name only")
                continue
            if from_span is not None and len(seen) >= lim.imports:
                self.rep.error("limit", f"more than {lim.imports} files are imported", from_span,
                               L.raise_hint("imports"))
                break
            if depth > lim.import_depth:
                self.rep.error("limit", f"imports are nested more than {lim.import_depth} deep", from_span,
                               L.raise_hint("import_depth"))
                continue
            file = str(p) if from_span is None else display_path(rp)
            if src is None:
                try:
                    src = safeio.read_text(p, what="root file" if from_span is None else "imported file",
                                           display=file)
                except safeio.FileRefused as e:
                    if e.kind == "encoding":
                        remember_source(file, e.text)
                        self.rep.error("encoding", e.summary, Span(file, e.line, e.column, e.line, e.column + 1),
                                       e.hint)
                    elif from_span is None:
                        self.rep.error(e.code, e.summary, None, e.hint)
                    elif e.kind == "missing" and "\0" not in str(p):
                        self.rep.error("missing-import", f"imported file '{p}' does not exist", from_span,
                                       "import paths are relative to the importing file; "
                                       f"the catalog is imported as \"{CATALOG_PREFIX}hardware.plan\"")
                    else:
                        self.rep.error(e.code if e.kind != "missing" else "missing-import", e.summary, from_span,
                                       e.hint)
                    continue
            try:
                mod = parse(src, file)
            except PlanError as e:
                self.rep.extend(e.diagnostics)
                continue
            if alias is not None:
                if alias in self.aliases:
                    self.rep.error("duplicate", f"two imports are named '{alias}'", imp.alias_span,
                                   "give each imported file its own name",
                                   related=(("first named here", self.aliases[alias]),))
                    continue
                self.aliases[alias] = imp.alias_span
                for d in mod.decls:
                    if d.kind == "plan":
                        self.rep.error("syntax", f"'{file}' declares plan '{d.name}' and is imported with a name",
                                       d.name_span, "import a file of plans without `as` (its plans keep their "
                                       "names); `as` is for catalogs of devices, links, models")
                mod = A.namespaced(mod, alias)
            seen[rp] = mod
            alias_of[rp] = alias
            self.modules.append(mod)
            for sub_imp in reversed(mod.imports):
                todo.append((self._import_path(rp.parent, sub_imp.path), None, sub_imp.span, depth + 1, sub_imp))
        self._files = {m.file: Path(m.file) for m in self.modules}
        for mod in self.modules:
            for d in mod.decls:
                if d.name in self.decls and self._override(d):
                    continue
                if d.name in self.decls:
                    first = self.decls[d.name].ast
                    mine, other, note = d, first, "first declared"
                    if _is_catalog(d.name_span.file) and not _is_catalog(first.name_span.file):
                        # point at the user's line, not into the catalog
                        mine, other, note = first, d, "also declared in the catalog"
                    hint = "names of declarations are global across imported files; rename one"
                    if d.extends == d.name and first.extends in (d.name, f"original.{d.name}"):   # overridden twice
                        hint = (f"an entry is overridden once: put both changes in one `{d.kind} {d.name} extends "
                                f"{d.name} {{ … }}`, or extend it under a new name")
                    elif _is_catalog(other.name_span.file):
                        hint += (f", or import the catalog with a name (import \"{CATALOG_PREFIX}…\" as hw) and "
                                 f"write hw.{d.name} for its entry")
                    self.rep.error("duplicate", f"'{d.name}' is declared twice", mine.name_span, hint,
                                   related=((note, other.name_span),))
                    continue
                self.decls[d.name] = DeclInfo(d.name, d.kind, d)

    def _override(self, d) -> bool:
        """``device h100_sxm extends h100_sxm { … }`` in one file and ``h100_sxm`` in another
        (a catalog): the first is an override.  The overridden entry stays as
        ``original.NAME``; the override extends it and takes its name, so every reference —
        the catalog's own included — reads the override.  True when ``d`` was such a pair."""
        from dataclasses import replace
        first = self.decls[d.name].ast
        if (d.extends == d.name) == (first.extends == first.name) or d.kind != first.kind \
                or d.name_span.file == first.name_span.file:
            return False
        over, base = (d, first) if d.extends == d.name else (first, d)
        hidden = f"original.{d.name}"
        if hidden in self.decls:
            return False
        self.decls[hidden] = DeclInfo(hidden, base.kind, replace(base, name=hidden))
        self.decls[d.name] = DeclInfo(d.name, over.kind, replace(over, extends=hidden))
        return True

    @staticmethod
    def _import_path(base: Path, path: str) -> Path:
        if path.startswith(CATALOG_PREFIX):
            return catalog_dir() / path[len(CATALOG_PREFIX):]
        return base / path

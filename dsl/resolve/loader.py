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



class LoaderMixin:
    """Reads the root file and its imports into modules and declarations."""

    # ------------------------------------------------------------ loading
    def _load(self, root: Path, text: str | None) -> None:
        from ..engine import safeio
        from ..syntax import limits as L

        seen: dict[Path, A.Module] = {}
        self.root = safeio.project_root(root)
        safeio.set_root(self.root, always=(catalog_dir(),))
        lim = L.current()
        # depth-first, in the order imports are written (an explicit stack: no recursion limit)
        todo: list[tuple[Path, str | None, Span | None, int]] = [(root, text, None, 0)]
        while todo:
            p, src, from_span, depth = todo.pop()
            try:
                rp = Path(os.path.abspath(p)).resolve() if "\0" not in str(p) else p
            except (OSError, RuntimeError):
                rp = p
            if rp in seen:
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
                self.rep.items.extend(e.diagnostics)
                continue
            seen[rp] = mod
            self.modules.append(mod)
            for imp in reversed(mod.imports):
                todo.append((self._import_path(rp.parent, imp.path), None, imp.span, depth + 1))
        self._files = {m.file: Path(m.file) for m in self.modules}
        for mod in self.modules:
            for d in mod.decls:
                if d.name in self.decls:
                    first = self.decls[d.name].ast
                    self.rep.error("duplicate", f"'{d.name}' is declared twice", d.name_span,
                                   "names of declarations are global across imported files; rename one",
                                   related=(("first declared", first.name_span),))
                    continue
                self.decls[d.name] = DeclInfo(d.name, d.kind, d)

    @staticmethod
    def _import_path(base: Path, path: str) -> Path:
        if path.startswith(CATALOG_PREFIX):
            return catalog_dir() / path[len(CATALOG_PREFIX):]
        return base / path

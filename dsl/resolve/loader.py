"""Loading: the root file and its imports (relative paths and the packaged catalog).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import sympy as sp

from ..syntax import ast as A
from ..syntax.diagnostics import Diagnostic, PlanError, Reporter, Span, did_you_mean, display_path, remember_source
from ..syntax.parser import parse, parse_expression
from ..plugin.records import Param, UseSpec
from ..engine.timeline import FORM_LIMIT, FULL_LIMIT, MIRROR_LIMIT, Activity, Timeline
from ..engine.units import DIMENSIONLESS, Dim, UnitError, default_unit_for, describe_dim, format_dim, parse_unit
from ..engine.nodes import (HUGE, Abort, BlockRef, Cycle, DeclInfo, DeclRef, Fail, ListVal, Node, Requirement,
                            Val, as_expr, rational, symbol)


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
        seen: dict[Path, A.Module] = {}

        def load(p: Path, src: str | None, from_span: Span | None):
            rp = p.resolve()
            if rp in seen:
                return
            if src is None:
                try:
                    src = rp.read_text(encoding="utf-8")
                except OSError as e:
                    if from_span is None:
                        self.rep.error("missing-file", f"cannot read '{p}': {e.strerror}", None,
                                       "check the path")
                    else:
                        self.rep.error("missing-import", f"imported file '{p}' does not exist", from_span,
                                       "import paths are relative to the importing file; "
                                       f"the catalog is imported as \"{CATALOG_PREFIX}hardware.plan\"")
                    return
                except UnicodeDecodeError as e:
                    raw, file = e.object[: e.start], str(p) if from_span is None else display_path(rp)
                    line, col = raw.count(b"\n") + 1, len(raw) - (raw.rfind(b"\n") + 1) + 1
                    remember_source(file, e.object.decode("utf-8", "replace"))
                    self.rep.error("encoding", f"'{p}' is not UTF-8 text (byte 0x{e.object[e.start]:02x})",
                                   Span(file, line, col, line, col + 1), "save the file as UTF-8")
                    return
            try:
                mod = parse(src, str(p) if from_span is None else display_path(rp))
            except PlanError as e:
                self.rep.items.extend(e.diagnostics)
                return
            seen[rp] = mod
            self.modules.append(mod)
            for imp in mod.imports:
                load(self._import_path(rp.parent, imp.path), None, imp.span)

        load(root, text, None)
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

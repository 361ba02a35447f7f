"""Validation: parameter specs, declared ranges, bounds, unit expectations and unused fields.
"""
from __future__ import annotations

from fractions import Fraction

import sympy as sp

from ..syntax.diagnostics import did_you_mean, display_path
from ..engine.units import DIMENSIONLESS, Dim, describe_dim, format_dim, parse_unit
from ..engine.deferred import deferred
from ..engine.nodes import Abort, DeclRef, ListVal, Node, Val, rational
from ..resolve.shapes import mismatch, shape_of_value


def _as(dim: Dim) -> str:
    return "a plain number" if dim.dimensionless else f"in {format_dim(dim)}"



def _per_count_hint(expr, want: Dim) -> str | None:
    """For a literal written per a count (``50 ms/token``) where the parameter wants the plain
    quantity (s): the literal without the ``/token`` as a hint, else None."""
    from ..syntax import ast as A
    sign = ""
    while isinstance(expr, A.Neg):
        expr, sign = expr.operand, "-" if not sign else ""
    if not isinstance(expr, A.Number) or not expr.unit or "/" not in expr.unit:
        return None
    base, _, per = expr.unit.rpartition("/")
    try:
        if not base or parse_unit(base).dim != want:
            return None
    except Exception:  # noqa: BLE001 - a unit that does not parse alone: no suggestion
        return None
    return f"the value is per {per.strip()}, the parameter is not: write `{sign}{expr.text} {base.strip()}`"


def _written_unit(expr) -> str | None:
    """The unit a literal value was written in (``-100 GiB`` → ``GiB``), None for an expression."""
    from ..syntax import ast as A
    while isinstance(expr, A.Neg):
        expr = expr.operand
    return expr.unit if isinstance(expr, A.Number) else None


class ValidateMixin:
    """Checks parameters against their specs and ranges, and units against expectations."""

    def _check_specs(self, only: str | None = None) -> None:
        items = [(only, self.param_specs[only])] if only else sorted(self.param_specs.items())
        for nid, p in items:
            n = self.nodes.get(nid)
            if n is None or n.state != 2 or (only is None and nid in self._spec_reported):
                continue
            if n.default is not None and self.rep.errors:
                continue  # a default is only wrong because of an error already reported
            span = n.assign.value.span if n.assign else n.span
            if p.kind in ("quantity", "int"):
                if not n.numeric:
                    self._kind_error(n, p, span)
                    continue
                want = parse_unit(p.unit).dim if p.unit else DIMENSIONLESS
                if n.dim != want:
                    self._spec_reported.add(nid)
                    self.rep.error("unit-mismatch", f"'{n.name}' must be {_as(want)}, got {describe_dim(n.dim)}",
                                   span, _per_count_hint(n.assign.value if n.assign else None, want)
                                   or (f"write it in a unit like {p.unit}" if p.unit else "drop the unit"))
                    continue
                if p.unit and n.unit == "":
                    n.unit = p.unit
            elif p.kind == "choice":
                if not isinstance(n.value, str) or n.value not in p.choices:
                    guess = did_you_mean(str(n.value), p.choices) if isinstance(n.value, str) else None
                    self.rep.error("out-of-range", f"'{n.name}' must be one of " + ", ".join(f'"{c}"' for c in p.choices),
                                   span, f'did you mean "{guess}"?' if guess else p.doc)
            elif p.kind == "ref":
                if not isinstance(n.value, DeclRef) or (p.ref_kind and n.value.kind != p.ref_kind):
                    self._kind_error(n, p, span)
            elif p.kind == "bool":
                if not isinstance(n.value, bool):
                    self._kind_error(n, p, span)
            elif p.kind in ("string", "file"):
                if not isinstance(n.value, str):
                    self._kind_error(n, p, span)
                elif p.kind == "file":
                    from ..engine import safeio
                    f = self.file_param(nid)
                    try:
                        safeio.approve(safeio.check(f, root=self.root, what="data file"))
                    except safeio.FileRefused as e:
                        if "\0" not in str(f) and f.is_dir():
                            self.rep.error("missing-file", f"'{n.value}' is a directory, not a file "
                                           f"({display_path(f)})", span, "name a file inside it")
                        elif e.kind == "missing":
                            self.rep.error("missing-file", f"file '{n.value}' not found (looked for "
                                           f"{display_path(f)})", span,
                                           "paths are relative to the .plan file that names them")
                        else:
                            self.rep.error(e.code, e.summary, span, e.hint)
            elif p.kind == "list":
                if not isinstance(n.value, ListVal):
                    self._kind_error(n, p, span)
                    continue
                want = parse_unit(p.unit).dim if p.unit else DIMENSIONLESS
                for i, (it, isp) in enumerate(zip(n.value.items, n.value.spans or [span] * len(n.value))):
                    if p.item == "ref":
                        if not isinstance(it, DeclRef) or (p.ref_kind and it.kind != p.ref_kind):
                            self._kind_error(n, p, isp, it, i)
                            break
                    elif p.item == "string":
                        if not isinstance(it, str):
                            self._kind_error(n, p, isp, it, i)
                            break
                    elif not isinstance(it, Val):
                        self._kind_error(n, p, isp, it, i)
                        break
                    elif it.dim != want:
                        self.rep.error("unit-mismatch", f"item {i + 1} of '{n.name}' must be {_as(want)}, got "
                                       f"{describe_dim(it.dim)}", isp,
                                       f"write it in a unit like {p.unit}" if p.unit else "drop the unit")
                        break
                if p.min_items is not None and len(n.value) < p.min_items:
                    self.rep.error("out-of-range", f"'{n.name}' needs at least {p.min_items} item"
                                   f"{'s' if p.min_items != 1 else ''}, got {len(n.value)}", span, p.doc)

    def _kind_error(self, n: Node, p, span, value=None, item: int | None = None) -> None:
        """error[type]: node ``n`` (or item ``item`` of it, whose value is ``value``) is not of the
        kind its spec ``p`` takes; worded as the check before pricing words it
        (:func:`~dsl.resolve.shapes.mismatch`)."""
        info = self.decls.get(n.owner)
        who = n.id if info is not None and info.kind != "plan" else n.name
        got = shape_of_value(n.value if item is None else value)
        summary, hint = mismatch(who, p, got, n.id, {k: d.kind for k, d in self.decls.items()}, item)
        self.rep.error("type", summary, span, hint)

    def check_ranges(self, only: str | None = None, inputs_only: bool = False) -> None:
        """Report parameters outside their declared range (exact comparisons), then the sign
        constraints plugins put on declaration fields.  ``inputs_only`` limits the check to
        literal values (nothing derived is evaluated)."""
        items = [(only, self.param_specs[only])] if only else sorted(self.param_specs.items())
        for nid, p in items:
            n = self.nodes.get(nid)
            if p.kind == "list" and n is not None and isinstance(n.value, ListVal) and p.item == "quantity" \
                    and (p.min is not None or p.max is not None) and nid not in self._spec_reported:
                if not inputs_only or not any(isinstance(it, Val) and it.expr.free_symbols for it in n.value.items):
                    self._check_list_items(n, p)
                continue
            if inputs_only and (n is None or not n.input):
                continue
            if n is None or not n.numeric or (p.min is None and p.max is None and p.kind != "int" and not p.whole):
                continue
            if only is None and nid in self._spec_reported:
                continue
            v = self.value(nid)
            if v is None:
                continue
            # exact comparisons: the nominal value is a sympy number, the bounds are rationals
            scale = rational(parse_unit(p.unit).scale) if p.unit else sp.Integer(1)
            xe = v / scale
            x = float(xe)
            span = n.assign.value.span if n.assign else n.span
            if (p.kind == "int" or p.whole) and not (xe.is_Rational and xe.q == 1):
                self.rep.error("out-of-range", f"'{n.name}' must be a whole number, got {float(xe):.12g}", span, p.doc)
                continue
            lo = rational(Fraction(str(p.min))) if p.min is not None else None
            hi = rational(Fraction(str(p.max))) if p.max is not None else None
            lo_bad = lo is not None and bool(xe <= lo if p.min_open else xe < lo)
            hi_bad = hi is not None and bool(xe > hi)
            if lo_bad or hi_bad:
                rng = (f"{'(' if p.min_open else '['}{p.min:g}" if p.min is not None else "(-inf") + ", " + \
                      (f"{p.max:g}]" if p.max is not None else "inf)")
                shown = f"{x:g}" if x != 0 or xe == 0 else f"{sp.N(xe, 6)}"
                shown_unit = p.unit
                written = _written_unit(n.assign.value if n.assign else None)
                if written and p.unit and written != p.unit:
                    try:               # in the unit the value was written in (-100 GiB, not -1.07374e+11 B)
                        if parse_unit(written).dim == parse_unit(p.unit).dim:
                            from ..engine.units import format_quantity
                            shown = format_quantity(float(v), written, 6).removesuffix(" " + written)
                            shown_unit = written
                    except Exception:  # noqa: BLE001 - a unit that does not parse alone: the declared unit
                        pass
                hint = p.doc
                if not p.unit and p.max == 1 and x > 1:
                    hint = _fraction_hint(p.doc, x, n.assign.value if n.assign else None)
                # a declaration's field is named with its declaration (dd.peak_flops); a block's by itself
                info = self.decls.get(n.owner)
                who = n.id if info is not None and info.kind != "plan" and n.scope and n.scope[1] is None else n.name
                unit = (' ' + shown_unit) if shown_unit else ''
                if p.min == 0 and p.min_open and p.max is None:
                    self.rep.error("out-of-range", f"'{who}' must be positive, got {shown}{unit}", span, hint)
                else:
                    self.rep.error("out-of-range", f"'{who}' = {shown}{unit} is outside {rng}", span, hint)
        if only is None:
            self._check_bounds(inputs_only)

    def _check_list_items(self, n: Node, p) -> None:
        """Each number of a list parameter inside the parameter's ``min``/``max`` (a negative
        sequence length or buffer size is as wrong in a list as in a scalar)."""
        try:
            items = self.list_value(n.id)
        except Abort:
            return
        scale = float(parse_unit(p.unit).scale) if p.unit else 1.0
        spans = n.value.spans or [n.assign.value.span if n.assign else n.span] * len(items)
        for i, (v, sp_) in enumerate(zip(items, spans)):
            if not isinstance(v, float):
                continue
            x = v / scale
            if (p.min is not None and (x <= p.min if p.min_open else x < p.min)) or (p.max is not None and x > p.max):
                rng = (f"{'(' if p.min_open else '['}{p.min:g}" if p.min is not None else "(-inf") + ", " + \
                      (f"{p.max:g}]" if p.max is not None else "inf)")
                self._spec_reported.add(n.id)
                self.rep.error("out-of-range", f"item {i + 1} of '{n.name}' = {x:g}{(' ' + p.unit) if p.unit else ''}"
                               f" is outside {rng}", sp_, p.doc)
                return

    def _check_bounds(self, inputs_only: bool = False) -> None:
        """Sign constraints plugins put on fields of declarations they read (``positive``)."""
        for nid, (kind, who) in sorted(self.bounds.items()):
            n = self.nodes.get(nid)
            if n is None or not n.numeric or nid in self._spec_reported or (inputs_only and not n.input):
                continue
            v = self.value(nid)
            if v is None:
                continue
            bad = bool(v <= 0) if kind == "positive" else bool(v < 0)
            if bad:
                self._spec_reported.add(nid)
                from dsl.engine.units import format_quantity
                self.rep.error("out-of-range", f"'{nid}' must be {'positive' if kind == 'positive' else 'non-negative'}"
                               f" for {who}, got {format_quantity(float(v), n.unit)}",
                               n.assign.value.span if n.assign else n.span,
                               "a count, a size, a rate or a duration cannot be negative")

    def _check_expectations(self) -> None:
        done = set()
        for nid, dim, who, span in self.expectations:
            if (nid, dim) in done:
                continue
            done.add((nid, dim))
            n = self.nodes.get(nid)
            if nid in self._spec_reported:
                continue
            if n is None or n.state != 2 or n.dim is None:
                if n is not None and n.state == 2 and n.value is not None:
                    got = {"list": ", got a list", "string": ", got a string", "bool": ", got true/false"}.get(
                        (shape_of_value(n.value) or ("",))[0], "")
                    self.rep.error("type", f"'{nid}' must be a number ({describe_dim(dim)}) for {who}{got}",
                                   n.assign.value.span if n.assign else n.span,
                                   f"{who} reads it as one number {_as(dim)}: give it one value")
                continue
            if n.dim != dim:
                self._spec_reported.add(nid)
                self.rep.error("unit-mismatch", f"'{nid}' is {_as(n.dim)} but {who} needs "
                               + ("a plain number" if dim.dimensionless else f"it {_as(dim)}"),
                               n.span if n.kind == "field" else span,
                               f"give it a value {_as(dim)}")

    def _warn_unused(self) -> None:
        cached = getattr(self, "_referenced", None)     # collected while the graph was built
        if cached is not None and cached[0] == len(self.nodes):
            referenced = cached[1]
        else:
            referenced = {s.name for m in self.nodes.values()
                          for e in [deferred(m, "expr") or m.expr] if e is not None for s in e.free_symbols}
        known = [p.name for s in self.plugins.blocks.values() for p in s.plan_params]
        for nid in sorted(self.nodes):
            n = self.nodes[nid]
            if n.kind != "field" or nid in self.used or nid in self.param_specs or not n.assign:
                continue
            if self.decls[n.owner].kind != "plan" or n.scope[1] is not None:
                continue
            if nid in referenced or (not n.input and n.state == 2 and n.numeric):
                continue   # read by something, or a derived field (a result: `plan eval` shows it)
            guess = did_you_mean(n.name, [k for k in known if k != n.name])
            blocks = sorted(s.name for s in self.plugins.blocks.values() if n.name in {p.name for p in s.plan_params})
            hint = (f"did you mean '{guess}'?" if guess else
                    f"'{n.name}' is read by `use {'`, `use '.join(blocks[:4])}`{', …' if len(blocks) > 4 else ''}; "
                    "add the block that needs it, or drop the field" if blocks else "")
            self.rep.warning("unused", f"field '{n.name}' of plan '{n.owner}' is not used by any block",
                             n.assign.name_span, hint)


def _fraction_hint(doc: str, x: float, written) -> str:
    """The hint of a fraction in (0, 1] given above 1: a bare number up to 100 (``mfu = 40``)
    was probably meant as a percentage, so the hint gives it as one (``40 %``); a value written
    with a unit (``140 %``) already is one, and is beyond 100 %."""
    from ..syntax.ast import Number
    if isinstance(written, Number) and written.unit is None and x <= 100:
        return f"{doc}: write {x:g} % for a percentage"
    if isinstance(written, Number) and written.unit is not None:
        return f"{doc}: {written.text} {written.unit} is {x:g}, above 100 %"
    return f"{doc}: at most 1 (100 %)"

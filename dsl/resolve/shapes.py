"""Kinds of values read from the text, checked before any plugin runs.

A parameter's spec (a block's :class:`~dsl.plugin.records.Param`, a plan parameter, a documented
field of a declaration kind, a standard name of the vocabulary) says which kind of value it
takes: a number, a list, a string, true or false, or a declaration.  What a value is written as
(``gpus = [1, 2]`` is a list, ``mfu = "40 %"`` a string, ``device = rtx4090`` a declaration) is
known from its text and from the text of the fields it names, without evaluating anything; so a
list where a number is expected is reported at the list, with a hint, before a plugin reads it
as a number.  Values whose kind depends on what a plugin defines (a field naming a plugin's
quantity) are left to the checks after pricing (:mod:`dsl.evaluate.validate`).

:func:`mismatch` words the error; the checks after evaluation use it too, so a wrong kind reads
the same wherever it is found.
"""
from __future__ import annotations

from ..syntax import ast as A
from ..plugin.records import Param
from ..engine.nodes import DeclRef, ListVal, Val

#: what a value is, read from its text: (``number`` | ``list`` | ``string`` | ``bool`` |
#: ``declaration``, the declaration's name or None)
Shape = tuple

NUMBER, LIST, STRING, BOOL, DECL = ("number",), ("list",), ("string",), ("bool",), "declaration"

# how deep a field may name a field naming a field … before its kind is left to later checks
_DEPTH = 64


def shape_of_value(v) -> Shape | None:
    """The shape of a built value (:class:`Val`, :class:`ListVal`, str, bool, :class:`DeclRef`)."""
    if isinstance(v, Val):
        return NUMBER
    if isinstance(v, ListVal):
        return LIST
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, str):
        return STRING
    if isinstance(v, DeclRef):
        return (DECL, v.name)
    return None


def wanted_shape(kind: str) -> str:
    """The shape a spec of ``kind`` (``Param.kind``, or ``Param.item`` of a list) takes."""
    return {"quantity": "number", "int": "number", "list": "list", "string": "string", "file": "string",
            "choice": "string", "bool": "bool", "ref": DECL}.get(kind, "number")


def _got(got: Shape | None, decl_kinds: dict) -> str:
    """", got a list" for a mismatch's summary ("" when the shape is unknown)."""
    if got is None:
        return ""
    if got[0] == DECL:
        return f", got {decl_kinds.get(got[1], 'declaration')} '{got[1]}'"
    return ", got " + {"number": "a number", "list": "a list", "string": "a string",
                       "bool": "true/false"}[got[0]]


def mismatch(who: str, p: Param, got: Shape | None, nid: str, decl_kinds: dict,
             item: int | None = None) -> tuple[str, str]:
    """Summary and hint of a value of shape ``got`` given to ``who`` (node ``nid``), whose spec is
    ``p``; ``item`` (0-based) for an item of a list parameter.  ``decl_kinds`` maps declaration
    names to their kinds (for the declaration a value names, and the ones a hint suggests)."""
    kind = p.item if item is not None else p.kind
    name = f"item {item + 1} of '{who}'" if item is not None else f"'{who}'"
    unit = f" in {p.unit}" if p.unit and kind in ("quantity", "int") else ""
    want = wanted_shape(kind)
    if want == "number":
        summary = f"{name} must be a number{unit}"
        if got == LIST:
            action = (f"give it one value; to evaluate several, vary it: `plan sweep FILE --vary '{nid}=[…]'`"
                      if item is None else "a list cannot hold a list: flatten it, [a, b, c]")
        elif got == STRING:
            action = "write the number without quotes" + (f", {unit.strip()}" if unit else "")
        elif got is not None and got[0] == DECL:
            action = f"name one of its fields, e.g. `{got[1]}.FIELD`"
        else:
            action = f"write a number{unit}"
    elif want == "list":
        summary = f"{name} must be a list like [a, b, c]"
        action = "put the values in brackets, `[a, b, c]` (one value: `[a]`)"
    elif want == DECL:
        what = p.ref_kind or "declaration"
        summary = f"{name} must name a {what}"
        known = sorted(n for n, k in decl_kinds.items() if p.ref_kind is None or k == p.ref_kind)
        action = (f"write the name of a {what} without quotes" if got == STRING else f"name a {what}") + \
            (f" ({', '.join(known[:6])}{', …' if len(known) > 6 else ''})" if known else "")
    elif want == "bool":
        summary = f"{name} must be true or false"
        action = "write true or false, without quotes"
    elif kind == "choice":
        options = ", ".join(f'"{c}"' for c in p.choices)
        summary = f"{name} must be one of {options}"
        action = f"write one of {options}, in double quotes"
    else:
        summary = f"{name} must be {'a file path' if kind == 'file' else 'a string'} in double quotes"
        action = "put the text in double quotes"
    return summary + _got(got, decl_kinds), (f"{p.doc}: {action}" if p.doc else action)


class ShapesMixin:
    """Checks the kind of every parameter's written value against its spec, before pricing."""

    def written_shape(self, e, scope, depth: int = 0) -> Shape | None:
        """What expression ``e`` (in ``scope``) is written as, or None when only evaluation can
        tell (a name a plugin defines, a chain deeper than the check follows).  Nothing is built
        and nothing is reported."""
        while depth < _DEPTH:
            depth += 1
            if isinstance(e, (A.Number, A.BinOp, A.Neg, A.Call)):
                return NUMBER    # arithmetic on anything but numbers is reported where it is built
            if isinstance(e, A.List):
                return LIST
            if isinstance(e, A.String):
                return STRING
            if isinstance(e, A.Bool):
                return BOOL
            if not isinstance(e, A.Ref):
                return None
            t = self._written_target(e.parts, scope, depth)
            if isinstance(t, DeclRef):
                return (DECL, t.name)
            n = self.nodes.get(t) if isinstance(t, str) else None
            if n is None:
                return None
            if n.state == 2:     # built already (a field a declaration's plugin read)
                return shape_of_value(n.value) if n.value is not None else NUMBER if n.numeric else None
            if n.kind != "field" or n.assign is None:
                return NUMBER if n.kind == "quantity" else None
            e, scope = n.assign.value, n.scope
        return None

    def _written_target(self, parts: tuple, scope, depth: int):
        """The node id or :class:`DeclRef` dotted ``parts`` name in ``scope`` as
        :meth:`_resolve` finds it, or None (a block, an unknown name: reported when it is
        built) — without building or reporting anything."""
        if len(parts) >= 2 and parts[0] in getattr(self, "aliases", {}) and parts[0] not in self.decls:
            parts = (f"{parts[0]}.{parts[1]}",) + tuple(parts[2:])
        owner, block = scope if scope else (None, None)
        first, target = parts[0], None
        if owner:
            if block and f"{owner}.{block}.{first}" in self.nodes:
                target = f"{owner}.{block}.{first}"
            elif f"{owner}.{first}" in self.nodes:
                target = f"{owner}.{first}"
            elif first in self.decls[owner].uses:
                return None
        if target is None and first in self.decls:
            target = DeclRef(first, self.decls[first].kind)
        for part in parts[1:]:
            if isinstance(target, str):
                n = self.nodes[target]
                s = self.written_shape(n.assign.value, n.scope, depth + 1) \
                    if n.kind == "field" and n.assign is not None and n.state != 2 else \
                    shape_of_value(n.value) if n.state == 2 else None
                target = DeclRef(s[1], self.decls[s[1]].kind) if s and s[0] == DECL and s[1] in self.decls \
                    else None
            if not isinstance(target, DeclRef):
                return None
            nid = f"{target.name}.{part}"
            target = nid if nid in self.nodes else None
        return target

    def _spec_of_name(self, nid: str) -> Param | None:
        """The spec of node ``nid``: its registered one, else for a field of a plan, the kind the
        vocabulary gives its name (a standard parameter such as ``gpus``, or a standard quantity)
        or a number for a quantity a block of the plan provides (the field overrides it)."""
        p = self.param_specs.get(nid)
        if p is not None:
            return p
        n = self.nodes[nid]
        info = self.decls.get(n.owner)
        if info is None or info.kind != "plan" or nid != f"{n.owner}.{n.name}":
            return None
        v = self.plugins.vocabulary.get(n.name)
        if v is not None and v.role in ("parameter", "quantity"):
            kind = v.kind if v.role == "parameter" else "quantity"
            return Param(n.name, v.unit, doc=v.doc, kind=kind, ref_kind=v.ref_kind)
        blocks = self.plugins.blocks
        if any(n.name in blocks[b].provides for b in info.uses if b in blocks):
            return Param(n.name)     # the field overrides a quantity a block prices: a number
        return None

    def check_written_kinds(self, owners) -> None:
        """Report every parameter of the declarations named in ``owners`` whose value is written
        as another kind than its spec takes (a list for a GPU count, a string for a declaration):
        error[type] at the value (or at the list item), once per place of the text."""
        owners = set(owners)
        decl_kinds = {name: d.kind for name, d in self.decls.items()}

        def inherited(n) -> bool:     # written in a declaration this one extends
            s, d = n.assign.value.span, self.decls[n.owner].ast.span
            return s is None or d is None or s.file != d.file or not d.line <= s.line <= d.end_line

        fields = [n for n in self.nodes.values() if n.owner in owners and n.kind == "field"
                  and n.assign is not None and n.default is None]     # a plugin's default is its own
        for n in sorted(fields, key=lambda n: (inherited(n), n.id)):
            nid = n.id
            if nid in self._spec_reported:
                continue
            p = self._spec_of_name(nid)
            if p is None:
                continue
            value = n.assign.value
            got = self.written_shape(value, n.scope)
            info = self.decls[n.owner]
            who = nid if info.kind != "plan" else n.name
            want = wanted_shape(p.kind)
            bad = None
            if got is not None and got[0] != want:
                bad = (None, value.span, got)
            elif got is not None and want == DECL and p.ref_kind and got[1] in decl_kinds \
                    and decl_kinds[got[1]] != p.ref_kind:
                bad = (None, value.span, got)
            elif got == LIST and isinstance(value, A.List):
                item_want = wanted_shape(p.item)
                for i, it in enumerate(value.items):
                    s = self.written_shape(it, n.scope)
                    if s is not None and (s[0] != item_want or (item_want == DECL and p.ref_kind and s[1] in
                                                                decl_kinds and decl_kinds[s[1]] != p.ref_kind)):
                        bad = (i, it.span, s)
                        break
            if bad is None:
                continue
            item, span, got = bad
            self._spec_reported.add(nid)
            if self.rep.has_error_at("type", span):
                continue      # a field a plan inherits: one report at its text
            summary, hint = mismatch(who, p, got, nid, decl_kinds, item)
            self.rep.error("type", summary, span, hint)

"""`plan explain FILE PLAN.QUANTITY`: the derivation tree of a quantity.

Each node shows its value in its display unit, who defined it (a plugin, the plan, a
declaration), its local formula over the quantities directly below it (names shortened
within the plan), its documentation, its references (the concept and the papers, reports and measurements the formula comes from) and, for an
input, its declared range and source.  A node met a second time is printed once with
``(see above)``, so the tree stays linear in the size of the graph.
"""
from __future__ import annotations

import sympy as sp

from dsl.engine.units import format_quantity
from dsl.syntax.diagnostics import printable


def show_value(ws, nid: str) -> str:
    """A string, boolean, declaration or list value as text: ``[1 s, 2 s]``, ``"bf16"``."""
    from dsl.engine.nodes import ListVal, Val
    from dsl.engine.units import default_unit_for, format_quantity

    v = ws.nodes[nid].value
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, ListVal):
        try:
            items = ws.list_value(nid)
        except TimeoutError:  # the CPU-time safety net fired: not this step's failure
            raise
        except Exception:    # an item that has no value: show the list as written
            items = v.items
        out = []
        for it, raw in zip(items, v.items):
            if isinstance(it, float) and isinstance(raw, Val):
                u = default_unit_for(raw.dim)
                out.append(format_quantity(it, u if u != "1" else ""))
            else:
                out.append(getattr(it, "name", None) or (f'"{it}"' if isinstance(it, str) else str(it)))
        return "[" + ", ".join(out) + "]"
    return getattr(v, "name", None) or str(v)


def _short(nid: str, plan: str) -> str:
    return nid[len(plan) + 1:] if nid.startswith(plan + ".") else nid


def _who(ws, n) -> str:
    if n.kind == "activity":
        return f"activity, plugin {n.plugin}"
    if n.plugin:
        return f"plugin {n.plugin}"
    d = ws.decls.get(n.owner)
    kind = d.kind if d else "field"
    if n.default is not None:
        return f"default of {kind} {n.owner}: {n.default}"
    return f"{'input' if n.input else 'field'} of {kind} {n.owner}"


def tree(ws, nid: str, max_depth: int | None = None) -> dict:
    """The derivation tree of node ``nid`` as nested dicts: ``id``, ``value`` (display
    text), ``unit``, ``who``, ``formula``, ``doc``, ``range``, ``source``, ``references``, ``children`` and
    ``repeated`` (already shown above)."""
    plan = ws.nodes[nid].owner
    seen: set[str] = set()

    def node(i: str, depth: int) -> dict:
        n = ws.nodes[i]
        v = ws.base_value(i) if n.numeric else None
        shown = format_quantity(float(v), n.unit) if v is not None else (
            show_value(ws, i))
        d = {"id": i, "value": shown, "unit": n.unit, "who": _who(ws, n), "doc": n.doc, "formula": "",
             "range": None, "source": n.source or "", "references": list(n.references),
             "children": [], "repeated": i in seen}
        if n.range is not None:
            d["range"] = [format_quantity(float(b), n.unit) for b in n.range]
        if d["repeated"]:
            return d
        seen.add(i)
        # a number computed outside sympy (a simulated percentile) has no formula over other
        # nodes: its value line says it all (not 4426532444553999/50000000000000000 in base units)
        if n.expr is not None and not n.input and not n.expr.is_number:
            syms = sorted((s for s in n.expr.free_symbols if s.name in ws.nodes), key=lambda s: s.name)
            txt = sp.sstr(n.expr)
            for s in sorted(syms, key=lambda s: -len(s.name)):
                txt = txt.replace(s.name, _short(s.name, plan))
            d["formula"] = txt
            if max_depth is None or depth < max_depth:
                d["children"] = [node(s.name, depth + 1) for s in syms]
        return d

    return node(nid, 0)


def render(t: dict, plan: str) -> str:
    """The tree as text with box-drawing branches."""
    lines: list[str] = []

    def walk(d: dict, prefix: str, last: bool, root: bool) -> None:
        branch = "" if root else ("└─ " if last else "├─ ")
        cont = "" if root else ("   " if last else "│  ")
        name = d["id"] if root else _short(d["id"], plan)
        head = f"{prefix}{branch}{name} = {d['value']}   [{d['who']}]"
        if d["repeated"]:
            lines.append(head + "  (see above)")
            return
        lines.append(head)
        sub = prefix + cont + ("│  " if d["children"] else "   ")
        if d["formula"]:
            lines.append(f"{sub}= {d['formula']}")
        if d["doc"]:
            lines.append(f"{sub}{d['doc']}")
        if d["range"]:
            lines.append(f"{sub}range {d['range'][0]} .. {d['range'][1]}")
        if d["source"]:
            lines.append(f"{sub}source: {d['source']}")
        for r in d.get("references", ()):
            lines.append(f"{sub}reference: {r}")
        for i, c in enumerate(d["children"]):
            walk(c, prefix + cont, i == len(d["children"]) - 1, False)

    walk(t, "", True, True)
    return printable("\n".join(lines), lines=True)    # a source or doc string may hold anything


def requirement_tree(ws, plan: str, name: str, max_depth: int | None = None) -> dict | None:
    """A requirement of ``plan`` explained: its condition, result at the nominal point, doc and
    plugin, and the derivation tree of each quantity its two sides read (``lhs``/``rhs``: lists of
    :func:`tree` dicts); None when ``plan`` has no requirement ``name``."""
    req = next((r for r in ws.requirements if r.plan == plan and r.name == name), None)
    res = ws.requirement(plan, name)
    if req is None or res is None:
        return None
    shown = _shown_sides(req, res)
    return {"requirement": f"{plan}.{name}", "ok": res["ok"], "op": req.op, "unit": req.unit,
            "lhs": shown["lhs"], "rhs": shown["rhs"], "doc": req.doc, "plugin": req.plugin, "text": req.text,
            "sides": _sides(ws, req, plan, shown, max_depth)}


def _shown_sides(req, res) -> dict:
    """Both sides' values at the nominal point in the requirement's unit ("no value" without one)."""
    return {k: ("no value" if res.get(f"{k}_si") is None else format_quantity(res[f"{k}_si"], req.unit))
            for k in ("lhs", "rhs")}


def _sides(ws, req, plan: str, shown: dict, max_depth: int | None) -> dict:
    """Each side of a requirement: its formula (names short within ``plan``; a constant side as
    its value in the requirement's unit, not its base-unit number) and the tree of each
    quantity it reads."""
    sides = {}
    for key, e in (("lhs", req.lhs), ("rhs", req.rhs)):
        syms = sorted(x.name for x in getattr(e, "free_symbols", ()) if x.name in ws.nodes)
        if getattr(e, "free_symbols", None):
            txt = sp.sstr(e)
            for x in sorted(syms, key=lambda x: -len(x)):
                txt = txt.replace(x, _short(x, plan))
        else:
            txt = shown[key]
        sides[key] = {"formula": txt, "trees": [tree(ws, x, max_depth) for x in syms]}
    return sides


def file_requirement_tree(ws, name: str, max_depth: int | None = None) -> dict | None:
    """A file-level ``require NAME: …`` explained as :func:`requirement_tree` explains a plan's:
    its result at the nominal point (named solves it reads at their answers), and the
    derivation tree of each quantity its sides read; None when the file has no such
    requirement."""
    req = next((r for r in getattr(ws, "file_requirements", ()) if r.name == name), None)
    if req is None:
        return None
    from ..results.solver import file_requirement_results
    res = next((r for r in file_requirement_results(ws) if r["name"] == name), None)
    if res is None:
        return None
    shown = _shown_sides(req, res)
    return {"requirement": name, "ok": res["ok"], "op": req.op, "unit": req.unit, "lhs": shown["lhs"],
            "rhs": shown["rhs"], "doc": req.doc, "plugin": "file", "text": req.text,
            "sides": _sides(ws, req, "", shown, max_depth),
            "answers": list(req.answers), "note": res.get("note"), "where": res["where"]}


def render_requirement(t: dict, plan: str) -> str:
    """:func:`requirement_tree` as text: the verdict, then each side's formula and trees."""
    who = {"plan": f"requirement of plan {plan}", "file": f"file-level requirement, {t.get('where')}"}.get(
        t["plugin"], f"plugin {t['plugin']}")
    lines = [f"{t['requirement']}: {t['lhs']} {t['op']} {t['rhs']}  {'ok' if t['ok'] else 'FAIL'}   [{who}]"]
    if t.get("answers"):
        lines.append(f"   at the answers of {', '.join(t['answers'])}" + (f": {t['note']}" if t.get("note") else ""))
    if t["doc"] and t["doc"] != t["text"]:
        lines.append(f"   {t['doc']}")
    for key, label in (("lhs", "left side"), ("rhs", "right side")):
        side = t["sides"][key]
        lines.append(f"{label}: {side['formula']}")
        for tr in side["trees"]:
            lines.extend("   " + ln for ln in render(tr, plan).splitlines())
    return printable("\n".join(lines), lines=True)

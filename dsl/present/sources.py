"""Where the numbers come from: the references of a plan's shown quantities, of the blocks
it uses and of the tables shown (``plan eval --sources``, ``plan report``).

References are short citations (the concept and its paper, report, repository or
measurement) that plugins attach to the quantities they define (``ctx.define(…,
references=(…))``), to their blocks, kinds, tables and figures; an input's own ``source "…"`` counts as the reference of that input.  Default
output never shows them: a product's numbers are read without the bibliography.
"""
from __future__ import annotations

from dsl.syntax.diagnostics import printable


def plan_sources(ws, plan: str, quantities=None, tables=()) -> dict:
    """The references behind ``plan``'s output.

    :param quantities: the nodes shown (default: the plan's headline quantities).
    :param tables: the plugin tables shown: names (their specs' references) or a mapping
        name -> references (a built table's own references included).
    :returns: ``{"quantities": {name: [ref, …]}, "blocks": {name: […]}, "tables": {name: […]}}``
        holding only entries that have references, in display order (quantities as shown,
        blocks in report order, tables by name).
    """
    nodes = ws.headline(plan) if quantities is None else quantities
    out: dict = {"quantities": {}, "blocks": {}, "tables": {}}
    for n in nodes:
        refs = list(n.references) + ([n.source] if n.source and n.source not in n.references else [])
        if refs:
            out["quantities"][n.name] = refs
    blocks = ws.plugins.blocks
    info = ws.decls.get(plan)
    used = [b for b in (info.uses if info is not None else ()) if b in blocks]
    for b in sorted(used, key=lambda b: (blocks[b].order, b)):
        if blocks[b].references:
            out["blocks"][b] = list(blocks[b].references)
    for t in sorted(tables):
        spec = ws.plugins.tables.get(t)
        refs = list(tables[t]) if isinstance(tables, dict) else list(spec.references if spec else ())
        if refs:
            out["tables"][t] = refs
    return out


def render_text(per_plan: dict, plans: list[str]) -> list[str]:
    """Lines of a ``sources`` section for ``per_plan`` ({plan: :func:`plan_sources`}).

    An entry with the same references in every plan is printed once; otherwise each
    variant names the plans it belongs to."""
    groups: dict = {}
    for p in plans:
        src = per_plan.get(p) or {}
        for what, label in (("quantities", "{}"), ("blocks", "use {}"), ("tables", "table {}")):
            for name, refs in src.get(what, {}).items():
                groups.setdefault((label.format(name), tuple(refs)), []).append(p)
    lines = ["sources"]
    if not groups:
        lines.append("  (no references for what is shown)")
        return lines
    for (label, refs), ps in groups.items():
        lines.append(f"  {label}" + ("" if len(ps) == len(plans) else f"  ({', '.join(ps)})"))
        lines.extend(printable(f"    {r}") for r in refs)   # an input's `source "…"` may hold anything
    return lines

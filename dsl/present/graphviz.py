"""`plan graph FILE [--format dot|mermaid|svg]`: the quantity and activity graph of a plan
.

The workspace's networkx DiGraph (``ws.graph``) holds every field, plugin quantity and
timeline activity; edges are formula dependencies, plus ``kind="order"`` edges between
activities (declared dependencies and the order of work on a resource).  For one plan the
exported subgraph is its own nodes and the nodes of other declarations they read (model,
device, workload fields); with ``--quantity`` only the ancestors of that quantity.

Formats: Graphviz ``dot`` (quantities as boxes, activities as ellipses, inputs shaded, order
edges dashed), Mermaid ``flowchart LR`` (renders in GitHub Markdown), and ``svg`` drawn with
matplotlib in layers by longest distance from the inputs (no Graphviz needed).
"""
from __future__ import annotations

import re

from dsl.engine.units import format_quantity


def subgraph(ws, plan: str, quantity: str | None = None):
    """The nodes of ``plan`` (or the ancestors of ``quantity``) and the nodes they read."""
    import networkx as nx

    g = ws.graph
    if quantity is not None:
        keep = nx.ancestors(g, quantity) | {quantity}
    else:
        own = {n for n in g if ws.nodes[n].owner == plan}
        keep = set(own)
        for n in own:
            keep.update(g.predecessors(n))
    return g.subgraph(sorted(keep)).copy()


def _label(ws, nid: str, plan: str) -> str:
    n = ws.nodes[nid]
    name = nid[len(plan) + 1:] if nid.startswith(plan + ".") else nid
    v = ws.base_value(nid) if n.numeric else None
    if v is not None:
        return f"{name}\n{format_quantity(float(v), n.unit)}"
    if n.value is not None:
        return f"{name}\n{getattr(n.value, 'name', n.value)}"
    return name


def to_dot(ws, g, plan: str) -> str:
    """Graphviz text of subgraph ``g``; deterministic (sorted nodes and edges)."""
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    out = [f"digraph {q(plan)} {{", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    for nid in sorted(g):
        n = ws.nodes[nid]
        shape = "ellipse" if n.kind == "activity" else "box"
        style = ', style=filled, fillcolor="#eeeeee"' if n.input else ""
        tip = f", tooltip={q(n.doc)}" if n.doc else ""
        out.append(f"  {q(nid)} [label={q(_label(ws, nid, plan))}, shape={shape}{style}{tip}];")
    for u, v, d in sorted(g.edges(data=True), key=lambda e: (e[0], e[1])):
        out.append(f"  {q(u)} -> {q(v)}" + (" [style=dashed];" if d.get("kind") == "order" else ";"))
    out.append("}")
    return "\n".join(out) + "\n"


def to_mermaid(ws, g, plan: str) -> str:
    """Mermaid ``flowchart LR`` text of subgraph ``g`` (ids made safe, labels quoted)."""
    ids = {nid: "n" + re.sub(r"[^A-Za-z0-9_]", "_", nid) for nid in g}
    out = ["flowchart LR"]
    for nid in sorted(g):
        n = ws.nodes[nid]
        label = _label(ws, nid, plan).replace('"', "'").replace("\n", "<br/>")
        out.append(f'  {ids[nid]}(["{label}"])' if n.kind == "activity" else f'  {ids[nid]}["{label}"]')
    for u, v, d in sorted(g.edges(data=True), key=lambda e: (e[0], e[1])):
        out.append(f"  {ids[u]} {'-.->' if d.get('kind') == 'order' else '-->'} {ids[v]}")
    return "\n".join(out) + "\n"


def to_svg(ws, g, plan: str) -> str:
    """SVG text: nodes in columns by longest distance from the inputs, edges as lines."""
    import io

    import networkx as nx

    from dsl.plugin.figures import new_figure

    layer: dict[str, int] = {}
    for nid in nx.lexicographical_topological_sort(g):
        layer[nid] = max((layer[p] + 1 for p in g.predecessors(nid)), default=0)
    cols: dict[int, list[str]] = {}
    for nid in sorted(g):
        cols.setdefault(layer[nid], []).append(nid)
    height = max((len(v) for v in cols.values()), default=1)
    pos = {nid: (x, -(i - (len(v) - 1) / 2)) for x, v in cols.items() for i, nid in enumerate(v)}
    fig = new_figure(max(6.0, 2.6 * len(cols)), max(3.0, 0.55 * height))
    ax = fig.add_subplot(111)
    ax.set_axis_off()
    for u, v, d in sorted(g.edges(data=True), key=lambda e: (e[0], e[1])):   # not hash order
        (x0, y0), (x1, y1) = pos[u], pos[v]
        ax.annotate("", xy=(x1 - 0.35, y1), xytext=(x0 + 0.35, y0),
                    arrowprops={"arrowstyle": "->", "color": "#999999", "lw": 0.6,
                                "linestyle": "--" if d.get("kind") == "order" else "-"})
    for nid, (x, y) in pos.items():
        n = ws.nodes[nid]
        ax.text(x, y, _label(ws, nid, plan), ha="center", va="center", fontsize=6, parse_math=False,
                bbox={"boxstyle": "round" if n.kind == "activity" else "square", "fc": "#eeeeee" if n.input
                      else "white", "ec": "#555555", "lw": 0.5})
    ax.set_xlim(-0.6, max(cols, default=0) + 0.6)
    ax.set_ylim(-height / 2 - 0.5, height / 2 + 0.5)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "plan"}, bbox_inches="tight")
    return buf.getvalue()

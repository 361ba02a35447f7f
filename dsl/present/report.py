"""Sensitivity reports: `plan report FILE [--format html|md|text] [-o PATH]`.

Per plan:

* headline values with units;
* each headline's formula in terms of its neighbouring quantities — MathML (sympy's
  presentation printer) in HTML, LaTeX in Markdown (``$$ … $$``, rendered by GitHub in PR
  comments), plain text in the terminal;
* the inputs the headlines depend on, with value, unit, declared range and source;
* partial derivatives and elasticities at the nominal point of each *key quantity* (a
  quantity a requirement compares: finish time, memory per GPU …) and a tornado chart over
  the declared ranges;
* a break-even table: for every requirement and every input it depends on, the input value
  at which it flips, or "never";
* the critical path of each timeline with per-activity slack;
* every plugin table (``ws.plugins.tables``) and figure (``ws.plugins.figures``), so a new
  plugin's output appears without a change here;
* the sources: references of the headline quantities, of the blocks used and of the tables
  (:mod:`dsl.sources`).

:func:`build` computes the data once (plain dicts, base units converted to display units);
:func:`render_html`, :func:`render_markdown` and :func:`render_text` present it.  The HTML is
one self-contained file: inline SVG, inline CSS, MathML, no script and no network access.
"""
from __future__ import annotations

import html
import io
import math
import re

import sympy as sp

from dsl.engine.units import convert, format_number, format_quantity


# ---------------------------------------------------------------- data

def per_unit(y: str, x: str) -> str:
    """The unit of ∂y/∂x as people write it: ``day/%``, ``day`` for a plain-number x (never
    ``day/1``), ``1/GiB``, ``day/(GB/s)`` for a compound x.

    >>> per_unit("day", ""), per_unit("day", "1"), per_unit("day", "GB/s"), per_unit("", "GiB")
    ('day', 'day', 'day/(GB/s)', '1/GiB')
    """
    y = "" if y == "1" else y
    x = "" if x == "1" else x
    if not x:
        return y or "1"
    return f"{y or '1'}/" + (f"({x})" if any(c in x for c in "/*·") else x)

def _short(nid: str, plan: str) -> str:
    return nid[len(plan) + 1:] if nid.startswith(plan + ".") else nid


def _alpha_names(n: int) -> list[str]:
    """n placeholder symbol names made of letters only (sympy's printers turn trailing
    digits and underscores into subscripts, so real names are substituted back afterwards)."""
    out, i = [], 0
    while len(out) < n:
        k, s = i, ""
        while True:
            s = chr(ord("a") + k % 26) + s
            k = k // 26 - 1
            if k < 0:
                break
        out.append("zq" + s)
        i += 1
    return out


def formula(ws, nid: str, plan: str) -> dict:
    """The local formula of ``nid`` (one level: over the quantities it is built from) as
    ``text``, ``latex`` and ``mathml`` (presentation), names shortened within ``plan``.
    Numbers are in base units (s, B, FLOP …)."""
    n = ws.nodes[nid]
    e = n.expr
    if e is None:
        return {"text": "", "latex": "", "mathml": ""}
    if e.is_Rational and e.q > 1000:
        # a number computed outside sympy (a simulation's percentile) is exact in base units:
        # 6102198163282847/125000000000000000 reads as its decimal
        e = sp.Float(f"{float(e):.7g}")
    from dsl.engine.piecewise import rename      # not xreplace: it rebuilds each Max/Min evaluated

    syms = sorted(e.free_symbols, key=lambda s: s.name)
    names = {s: _short(s.name, plan) for s in syms}
    text = sp.sstr(rename(e, {s: sp.Symbol(names[s]) for s in syms}))
    for s in syms:
        text = text.replace(s.name, names[s])
    latex = sp.latex(e, symbol_names={s: r"\mathrm{" + names[s].replace("_", r"\_") + "}" for s in syms})
    ph = dict(zip(syms, _alpha_names(len(syms))))

    def math(x) -> str:
        mm = sp.mathml(rename(x, {s: sp.Symbol(ph[s]) for s in syms}), printer="presentation", mul_symbol="dot")
        for s in syms:
            mm = mm.replace(f"<mi>{ph[s]}</mi>", f"<mi>{html.escape(names[s])}</mi>")
        return (f'<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">'
                f'<mstyle displaystyle="true">{mm}</mstyle></math>')
    return {"text": text, "latex": latex, "mathml": _wrapping_mathml(e, math)}


def _wrapping_mathml(e, math) -> str:
    """MathML of ``e`` that a browser can wrap: a sum is one ``<math>`` element per term
    joined by + / − (line breaks fall between terms), a Max/Min one per argument; anything
    else is one element.  (Browsers do not break lines inside a MathML formula.)"""
    if isinstance(e, sp.Add) and len(e.args) > 1:
        terms = sp.Add.make_args(e)
        out = [math(terms[0])]
        for t in terms[1:]:
            neg = t.could_extract_minus_sign()
            out.append(('<span class="op"> − </span>' if neg else '<span class="op"> + </span>') + math(-t if neg else t))
        return " ".join(out)
    if isinstance(e, (sp.Max, sp.Min)) and len(e.args) > 1:
        name = "max" if isinstance(e, sp.Max) else "min"
        parts = [math(a) for a in sorted(e.args, key=sp.default_sort_key)]
        return f'<span class="op">{name}(</span>' + '<span class="op">, </span> '.join(parts) + '<span class="op">)</span>'
    return math(e)


def _fmt(ws, nid: str, v_si: float) -> str:
    return format_quantity(v_si, ws.nodes[nid].unit)


def key_quantities(ws, plan: str) -> list[str]:
    """Quantities a requirement of ``plan`` compares (a side that is one node), in order."""
    out = []
    for r in ws.requirements:
        if r.plan != plan:
            continue
        for side in (r.lhs, r.rhs):
            if isinstance(side, sp.Symbol) and side.name in ws.nodes and not ws.nodes[side.name].input \
                    and side.name not in out:
                out.append(side.name)
    return out


def _fast_sides(ws, req, inputs: list[str]):
    """The two sides of a requirement as one float function of all ``inputs``."""
    from dsl.results.sensitivity import full_expression
    syms = [sp.Symbol(i, real=True) for i in inputs]
    return [sp.lambdify(syms, full_expression(ws, e), modules="math") for e in (req.lhs, req.rhs)]


def requirement_inputs(ws, req) -> list[str]:
    """Ids of the numeric inputs requirement ``req`` depends on, sorted: the inputs of
    ``lhs − rhs`` expanded to the declared inputs.  Expanded by :func:`~dsl.engine.piecewise.substitute`
    (as ``ws.full_expr`` is), which rebuilds a ``Max``/``Min`` of symbolic arguments unevaluated:
    sympy's constructor would compare its arguments pairwise (≈1 s for the 59 windows of a trace's
    ``keeps_up``) only to find what the expression already says."""
    from dsl.engine.piecewise import substitute
    from dsl.results.sensitivity import inputs_of
    e = req.lhs - req.rhs
    return inputs_of(ws, substitute(e, {s: ws.full_expr(s.name) for s in e.free_symbols if s.name in ws.nodes}))


def tunable(ws, nid: str) -> bool:
    """Whether input ``nid`` is something a user can change to meet a requirement: not a
    field of a declaration whose kind describes a fixed artefact (``KindSpec.fixed``: a
    model's architecture — "heads ≤ 63.9" is no design answer)."""
    kind = ws.kind(ws.nodes[nid].owner)
    spec = ws.plugins.kinds.get(kind) if kind else None
    return not (spec is not None and spec.fixed)


def break_even_table(ws, plan: str) -> list[dict]:
    """For every requirement of ``plan`` and every input it depends on that a user can
    change (:func:`tunable`): the value at which it flips (others nominal), or None
    ("never").  Rows: requirement, input, nominal, value, holds (side), display unit."""
    from dsl.results.sensitivity import break_even
    rows = []
    for r in ws.requirements:
        if r.plan != plan:
            continue
        deps = [nid for nid in requirement_inputs(ws, r) if tunable(ws, nid)]
        for nid in deps:
            be = break_even(ws, r, nid)
            rows.append({"requirement": r.name, "input": nid, "nominal": _fmt(ws, nid, be["nominal"]),
                         "value": None if be["value"] is None else _fmt(ws, nid, be["value"]),
                         "holds": be["holds"], "op": r.op})
    return rows


def _margin(res: dict) -> tuple[str, str]:
    """How far a requirement is from flipping, in its unit and relative to its bound:
    bound − value for ``<=``/``<``, value − bound for ``>=``/``>``, |difference| for ``==``
    (positive: room left; negative: by how much it fails)."""
    lv, rv = res["lhs_si"], res["rhs_si"]
    m = {"<=": rv - lv, "<": rv - lv, ">=": lv - rv, ">": lv - rv}.get(res["op"], -abs(lv - rv))
    if m == 0:
        return format_quantity(0.0, res["unit"]), ""
    rel = f"{100 * m / abs(rv):+.1f} %".replace("-", "−") if rv and math.isfinite(m) else ""
    return format_quantity(m, res["unit"]), rel


def verdict(ws, plans: list[str]) -> list[dict]:
    """One row per plan: its requirements met/failed and, for each, the margin (value and
    relative to the bound) — the summary a report opens with."""
    rows = []
    for p in plans:
        reqs = []
        for res in ws.requirement_results(p):
            m, rel = _margin(res)
            reqs.append({"name": res["name"], "ok": res["ok"], "margin": m, "relative": rel,
                         "lhs": format_quantity(res["lhs_si"], res["unit"]), "op": res["op"],
                         "rhs": format_quantity(res["rhs_si"], res["unit"])})
        rows.append({"plan": p, "ok": all(r["ok"] for r in reqs), "met": sum(r["ok"] for r in reqs),
                     "total": len(reqs), "requirements": reqs})
    return rows


def compare(ws, plans: list[str]) -> dict:
    """The plans' headline values side by side: ``columns`` (plans) and ``rows`` of
    [quantity, unit, value per plan] (— where a plan has no such quantity), in the order the
    headlines first appear."""
    order, cells = [], {}
    for p in plans:
        for n in ws.headline(p):
            key = (n.name, n.unit)
            if key not in cells:
                order.append(key)
                cells[key] = {}
            v = ws.base_value(n.id)
            cells[key][p] = "—" if v is None else format_number(convert(float(v), n.unit))
    return {"columns": list(plans),
            "rows": [[name, unit] + [cells[(name, unit)].get(p, "—") for p in plans] for name, unit in order]}


def build(ws, plans: list[str], figures: bool = True) -> dict:
    """Everything a report shows, per plan (see the module docstring).

    :returns: ``{"file", "plans": {plan: {...}}}`` with display strings and numbers in
        display units; figures as SVG text (``svg``), empty when matplotlib is missing.
    """
    from dsl.syntax import limits as L

    out = {"file": ws.path, "plans": {}, "verdict": verdict(ws, plans), "compare": compare(ws, plans)}
    for p in plans:
        try:
            with L.time_budget():
                out["plans"][p] = _build_plan(ws, p, figures)
        except TimeoutError as e:
            raise L.LimitError("cpu_seconds", f"the report of plan '{p}' was {e}") from None
    return out


def _build_plan(ws, p: str, figures: bool) -> dict:
    from dsl.results.sensitivity import elasticities, inputs_of, tornado
    from dsl.present.sources import plan_sources
    from dsl.present.tables import quantity_band

    if True:
        heads = ws.headline(p)
        results = {r["name"]: r for r in ws.requirement_results(p)}
        rep: dict = {"headline": [], "requirements": [], "inputs": [], "sensitivity": [], "break_even": [],
                     "critical_paths": [], "tables": [], "figures": []}
        deps: set[str] = set()
        for n in heads:
            v = ws.base_value(n.id)
            band = quantity_band(ws, p, n.name)
            rep["headline"].append({"name": n.name, "id": n.id, "value": None if v is None else
                                    convert(float(v), n.unit), "unit": n.unit, "doc": n.doc,
                                    "plugin": n.plugin or "", "formula": formula(ws, n.id, p),
                                    "band": None if band is None else band["text"] + " " + band["basis"]})
            deps.update(inputs_of(ws, ws.full_expr(n.id)))
        for r in ws.requirements:
            if r.plan != p or r.name not in results:
                continue
            res = results[r.name]
            deps.update(requirement_inputs(ws, r))
            rep["requirements"].append({"name": r.name, "ok": res["ok"], "text": r.text or r.doc,
                                        "lhs": format_quantity(res["lhs_si"], r.unit),
                                        "rhs": format_quantity(res["rhs_si"], r.unit), "op": r.op,
                                        "plugin": r.plugin})
        for nid in sorted(deps):
            n = ws.nodes[nid]
            rep["inputs"].append({"id": nid, "name": _short(nid, p), "value": _fmt(ws, nid, float(n.nominal)),
                                  "unit": n.unit, "range": None if n.range is None else
                                  [_fmt(ws, nid, float(b)) for b in n.range], "source": n.source or "",
                                  "doc": n.doc})
        for q in key_quantities(ws, p):
            n = ws.nodes[q]
            sym = sp.Symbol(q, real=True)
            rows = []
            for el in elasticities(ws, sym):
                xi = ws.nodes[el["input"]]
                d = el["derivative"]
                # ∂y/∂x in display units: (y unit) per (x unit)
                dy = convert(d, n.unit) / convert(1.0, xi.unit) if d == d else d
                rows.append({"input": el["input"], "value": _fmt(ws, el["input"], el["value"]),
                             "derivative": dy, "per": per_unit(n.unit, xi.unit),
                             "elasticity": el["elasticity"]})
            tor = [{"input": t["input"], "lo": _fmt(ws, t["input"], t["lo"]), "hi": _fmt(ws, t["input"], t["hi"]),
                    "y_lo": convert(t["y_lo"], n.unit), "y_hi": convert(t["y_hi"], n.unit),
                    "y0": convert(t["y0"], n.unit)} for t in tornado(ws, sym)]
            rep["sensitivity"].append({"quantity": n.name, "id": q, "unit": n.unit, "rows": rows,
                                       "tornado": tor, "svg": _tornado_svg(n.name, n.unit, tor) if figures else ""})
        rep["odds"] = _odds(ws, p, figures)
        rep["break_even"] = break_even_table(ws, p)
        for (plan, tl_name) in sorted(k for k in ws.timelines if k[0] == p):
            cp = ws.critical_path(p, tl_name)
            if cp is None:
                continue
            rep["critical_paths"].append({
                "timeline": tl_name, "makespan": format_quantity(cp["makespan"], "s"),
                "activities": [{"id": a["id"], "resource": a["resource"] or "", "kind": a["kind"] or "",
                                "start": a["start"], "duration": a["duration"], "slack": a["slack"],
                                "critical": a["id"] in cp["path"], "plugin": a["plugin"] or ""}
                               for a in cp["activities"]]})
        for name, spec in sorted(ws.plugins.tables.items()):
            try:
                t = spec.build(ws, p)
            except TimeoutError:  # the CPU-time safety net fired: not this step's failure
                raise
            except Exception as e:  # one plugin's bug does not hide the rest of the report
                rep["tables"].append({"name": name, "title": spec.title, "plugin": spec.plugin, "columns": [],
                                      "rows": [], "notes": [f"this table failed: {type(e).__name__}: {e}"]})
                continue
            if t is not None:
                rep["tables"].append({"name": name, "title": spec.title, "plugin": spec.plugin,
                                      "columns": [str(c) for c in t.columns],
                                      "rows": [[_cell(c) for c in r] for r in t.rows], "notes": list(t.notes),
                                      "references": list(spec.references) + [
                                          r for r in getattr(t, "references", ()) if r not in spec.references]})
        if figures:
            rep["figures"] = _plugin_figures(ws, p)
        rep["sources"] = plan_sources(ws, p, heads, {t["name"]: t.get("references", []) for t in rep["tables"]})
        return rep


#: samples a report draws for a plan with uncertain inputs or random quantities (seed 0: the same
#: report every time; `plan eval --samples N --seed S` asks for others)
REPORT_SAMPLES = 10_000


def _odds(ws, p: str, figures: bool) -> dict | None:
    """The plan's answers with odds (:mod:`dsl.results.odds`), None when nothing in it is
    uncertain: each headline's p5/p50/p95, each requirement's probability, and for each
    requirement that bounds one quantity by a fixed value (finish time ≤ deadline) the samples'
    histogram against that bound."""
    from dsl.results.odds import random_quantities, sample_plan, uncertain_inputs
    if not (uncertain_inputs(ws) or random_quantities(ws)):
        return None
    o = sample_plan(ws, p, REPORT_SAMPLES, 0)
    if not o.uncertain:
        return None
    out = {"samples": o.samples, "seed": o.seed, "uncertain": list(o.uncertain), "quantiles": [],
           "requirements": [{"name": n, "probability": o.probability(n), "stderr": o.stderr(n)} for n in o.holds],
           "figures": []}
    for nid, unit in o.units.items():
        if float(o.values[nid].min()) == float(o.values[nid].max()):
            continue                     # the same at every sample: nothing uncertain about it
        out["quantiles"].append({"name": nid.removeprefix(p + "."), "unit": unit,
                                 **{k: convert(o.quantile(nid, q), unit) for k, q in
                                    (("p5", 0.05), ("p50", 0.5), ("p95", 0.95))}})
    if figures:
        for r in ws.requirements:
            if r.plan != p or r.name not in o.holds or not isinstance(r.lhs, sp.Symbol) or r.lhs.name not in o.values:
                continue
            bound = ws.subs_value(r.rhs)
            if bound is None or r.rhs.free_symbols & {sp.Symbol(i, real=True) for i in o.uncertain}:
                continue
            n = ws.nodes[r.lhs.name]
            xs = [convert(float(v), n.unit) for v in o.values[r.lhs.name]]
            out["figures"].append({"requirement": r.name, "quantity": n.name, "unit": n.unit,
                                   "svg": _histogram_svg(n.name, n.unit, xs, convert(float(bound), n.unit), r.name,
                                                         o.probability(r.name))})
    return out


def _histogram_svg(name: str, unit: str, xs: list, bound: float, req: str, prob: float) -> str:
    """Inline SVG: a 40-bin histogram of the samples ``xs`` with the requirement's bound as a line."""
    import numpy as np
    x = np.asarray(xs, dtype=float)
    lo, hi = float(min(x.min(), bound)), float(max(x.max(), bound))
    hi = hi if hi > lo else lo + 1.0
    counts, edges = np.histogram(x, bins=40, range=(lo, hi))
    W, H, L, B = 560.0, 220.0, 40.0, 30.0
    top = float(counts.max()) or 1.0

    def X(v):
        return L + (v - lo) / (hi - lo) * (W - L - 10)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W:.0f}" height="{H:.0f}" role="img">'
           f'<title>{html.escape(name)}: distribution over the samples against {html.escape(req)}</title>']
    for c, a, b in zip(counts, edges[:-1], edges[1:]):
        h = (H - B - 10) * c / top
        out.append(f'<rect x="{X(a):.1f}" y="{H - B - h:.1f}" width="{max(X(b) - X(a) - 1, 0.5):.1f}" '
                   f'height="{h:.1f}" fill="#4878a8"/>')
    xb = X(bound)
    out.append(f'<line x1="{xb:.1f}" y1="5" x2="{xb:.1f}" y2="{H - B:.1f}" stroke="#c0392b" stroke-width="2"/>')
    out.append(f'<text x="{xb + 4:.1f}" y="16" font-size="11" fill="#c0392b">{html.escape(req)}: '
               f'P = {prob:.3f}</text>')
    for v in _nice_ticks(lo, hi, 6):
        out.append(f'<text x="{X(v):.1f}" y="{H - 10:.0f}" font-size="10" text-anchor="middle">{_num(v)}</text>')
    out.append(f'<text x="{W / 2:.0f}" y="{H:.0f}" font-size="11" text-anchor="middle">{html.escape(name)}'
               + (f" ({html.escape(unit)})" if unit not in ("", "1") else "") + "</text></svg>\n")
    return "".join(out)


def _odds_rows(od: dict) -> tuple[list, list]:
    q = [[x["name"], x["unit"], _num(x["p5"]), _num(x["p50"]), _num(x["p95"])] for x in od["quantiles"]]
    r = [[x["name"], f"{x['probability']:.4f}", f"{x['stderr']:.4f}"] for x in od["requirements"]]
    return q, r


def _cell(c) -> str:
    if isinstance(c, float):
        return format_number(c)
    return "—" if c is None else str(c)


# ---------------------------------------------------------------- figures (inline SVG)
def _svg_text(fig) -> str:
    meta = {"Date": None, "Creator": "plan"}
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata=meta, bbox_inches="tight")
    s = buf.getvalue()
    s = s[s.index("<svg"):]          # drop the XML declaration and DOCTYPE: inline SVG
    return s


def _plugin_figures(ws, plan: str) -> list[dict]:
    try:
        from dsl.plugin.figures import FigureError, LazyFigure
    except ImportError:  # pragma: no cover
        return []
    out = []
    for name, spec in sorted(ws.plugins.figures.items()):
        try:
            fig = LazyFigure()     # matplotlib only for a plugin that draws something
            if spec.draw(ws, plan, fig):
                out.append({"name": name, "title": spec.title, "plugin": spec.plugin, "svg": _svg_text(fig)})
        except FigureError:
            return []
        except TimeoutError:  # the CPU-time safety net fired: not this step's failure
            raise
        except Exception as e:  # one plugin's bug does not hide the rest of the report
            out.append({"name": name, "title": f"{spec.title} (failed: {type(e).__name__}: {e})",
                        "plugin": spec.plugin, "svg": ""})
    return out


def _nice_ticks(lo: float, hi: float, most: int = 8) -> list[float]:
    """Tick positions 1, 2, 2.5 or 5 × 10^k apart covering [lo, hi] (at most ``most`` + 1)."""
    span = hi - lo
    if not (span > 0 and math.isfinite(span)):
        return [lo]
    raw = span / most
    k = math.floor(math.log10(raw))
    step = next(m * 10.0 ** k for m in (1, 2, 2.5, 5, 10) if m * 10.0 ** k >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [i * step for i in range(first, math.floor(hi / step + 1e-9) + 1)]


def _tick_text(v: float, step: float) -> str:
    """A tick label with as many decimals as the step needs (−0 shown as 0)."""
    if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-4):
        return f"{v:.4g}".replace("-", "−")
    k = math.floor(math.log10(step) + 1e-9)
    dec = max(0, -k + (1 if round(step / 10.0 ** k, 6) == 2.5 else 0))
    s = f"{v:.{dec}f}"
    return ("0" if float(s) == 0 else s).replace("-", "−")


def _tornado_svg(name: str, unit: str, rows: list[dict]) -> str:
    """Horizontal bars from y at the low end to y at the high end of each input's range
    (blue: low end, orange: high end; the high bar drawn over the low one), a line at the
    nominal y: an inline SVG written directly (text as text, no plotting library; the same
    input gives the same bytes)."""
    ok = [v for r in rows for v in (r["y_lo"], r["y_hi"]) if math.isfinite(v)]
    if not rows or not ok or not math.isfinite(rows[0]["y0"]):
        return ""
    fs, row_h, char_w = 11, 26, 0.6            # font size (px), row pitch (px), glyph width / size
    left = max(len(r["input"]) for r in rows) * char_w * (fs - 1) + 16   # x of the plot area
    width = 520.0
    top = 34.0
    height = row_h * len(rows)
    title = f"{name}: each input over its declared range (blue: low end, orange: high end)"
    total_w = max(left + width + 16, len(title) * char_w * (fs + 1) + 16)
    total_h = top + height + 46
    y0 = rows[0]["y0"]
    lo, hi = min(ok), max(ok)
    pad = (hi - lo) * 0.25 or abs(y0) * 0.05 or 1.0
    a, b = lo - pad, hi + pad

    def X(v: float) -> str:
        return f"{left + (v - a) / (b - a) * width:.2f}"

    def T(x, y, s, anchor="start", size=fs):
        return (f'<text x="{x}" y="{y:.2f}" font-size="{size}" text-anchor="{anchor}">'
                f"{html.escape(str(s))}</text>")

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
           f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="DejaVu Sans, Arial, sans-serif" '
           f'role="img"><title>{html.escape(name)}: tornado chart</title>',
           f'<rect width="{total_w:.0f}" height="{total_h:.0f}" fill="white"/>',
           T(f"{total_w / 2:.2f}", 18, title, "middle", fs + 1)]
    ticks = _nice_ticks(a, b)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    for t in ticks:     # grid-less axis: ticks and labels below the plot
        out.append(f'<line x1="{X(t)}" y1="{top + height:.2f}" x2="{X(t)}" y2="{top + height + 4:.2f}" '
                   'stroke="black" stroke-width="0.8"/>')
        out.append(T(X(t), top + height + 16, _tick_text(t, step), "middle", fs - 1))
    out.append(f'<rect x="{left:.2f}" y="{top:.2f}" width="{width:.2f}" height="{height:.2f}" fill="none" '
               'stroke="black" stroke-width="0.8"/>')
    for end, color in (("y_lo", "#4C72B0"), ("y_hi", "#DD8452")):
        for i, r in enumerate(rows):
            if not math.isfinite(r[end]):
                continue
            x1, x2 = sorted((r[end], y0))
            out.append(f'<rect x="{X(x1)}" y="{top + i * row_h + row_h * 0.2:.2f}" '
                       f'width="{float(X(x2)) - float(X(x1)):.2f}" height="{row_h * 0.6:.2f}" fill="{color}"/>')
    for i, r in enumerate(rows):
        yc = top + (i + 0.5) * row_h + fs * 0.35
        out.append(T(f"{left - 6:.2f}", yc, r["input"], "end", fs - 1))
        # each end's input value beside its own bar: the smaller y on the left
        ends = sorted((e for e in ((r["y_lo"], r["lo"]), (r["y_hi"], r["hi"])) if math.isfinite(e[0])),
                      key=lambda e: e[0])
        for k, (yv, txt) in enumerate(ends):    # the left one leftwards, the right one rightwards
            left_side = k == 0 and (len(ends) == 2 or yv < y0)
            out.append(T(f"{float(X(yv)) + (-3 if left_side else 3):.2f}", yc, txt,
                         "end" if left_side else "start", fs - 2))
    out.append(f'<line x1="{X(y0)}" y1="{top:.2f}" x2="{X(y0)}" y2="{top + height:.2f}" stroke="black" '
               'stroke-width="1"/>')
    out.append(T(f"{left + width / 2:.2f}", top + height + 36, f"{name} ({unit})" if unit else name, "middle"))
    out.append("</svg>\n")
    return "".join(out)


# ---------------------------------------------------------------- renderers
def _num(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and math.isnan(x):
        return "—"
    return format_number(x) if isinstance(x, (int, float)) else str(x)


def _be_text(r: dict) -> str:
    if r["value"] is None:
        return "never"
    return f"{r['holds'] or 'at'} {r['value']}" if r["holds"] else r["value"]


def _verdict_rows(data: dict) -> tuple[list[str], list[list]]:
    """The verdict as a table: one row per requirement name, one column per plan; a cell is
    (ok, "margin (relative)") or None when the plan has no such requirement."""
    plans = [v["plan"] for v in data.get("verdict", [])]
    names: list[str] = []
    cell: dict = {}
    for v in data.get("verdict", []):
        for r in v["requirements"]:
            if r["name"] not in names:
                names.append(r["name"])
            cell[(r["name"], v["plan"])] = (r["ok"], r["margin"] + (f" ({r['relative']})" if r["relative"] else ""))
    return plans, [[n] + [cell.get((n, p)) for p in plans] for n in names]


def _verdict_summary(v: dict) -> str:
    if not v["total"]:
        return "no requirements"
    if v["ok"]:
        return f"meets all {v['total']} requirements"
    failed = ", ".join(r["name"] for r in v["requirements"] if not r["ok"])
    return f"fails {v['total'] - v['met']} of {v['total']}: {failed}"


def _verdict_text(data: dict) -> list[str]:
    from dsl.present.tables import render_table
    if not data.get("verdict"):
        return []
    lines = render_table("verdict", ["plan", "requirements"],
                         [[v["plan"], _verdict_summary(v)] for v in data["verdict"]])
    plans, rows = _verdict_rows(data)
    if rows:
        lines.append("")
        lines += render_table("margins (room left before a requirement flips; negative: by how much it fails)",
                               ["requirement"] + plans,
                               [[r[0]] + ["—" if c is None else ("ok " if c[0] else "FAIL ") + c[1] for c in r[1:]]
                                for r in rows])
    comp = data.get("compare") or {}
    if len(comp.get("columns", [])) > 1:
        lines.append("")
        lines += render_table("plans side by side", ["quantity", "unit"] + comp["columns"], comp["rows"])
    return lines


def _with_band(h: dict) -> str:
    """A headline value with its prediction band when it has one ("25.54 (−25 % / +36 % from 14
    validated h100_sxm runs …)")."""
    return _num(h["value"]) + (f" ({h['band']})" if h.get("band") else "")


def render_text(data: dict) -> str:
    """The report for a terminal: formulas as plain text, tables as aligned columns."""
    from dsl.present.tables import render_table

    lines = [f"report: {data['file']}", ""] + _verdict_text(data)
    for p, rep in data["plans"].items():
        lines += ["", f"== plan {p} =="]
        lines += render_table("headline", ["quantity", "value", "unit", "formula"],
                               [[h["name"], _with_band(h), h["unit"], h["formula"]["text"]]
                                for h in rep["headline"]])
        lines.append("")
        lines += render_table("requirements", ["requirement", "", "lhs", "op", "rhs"],
                               [[r["name"], "ok" if r["ok"] else "FAIL", r["lhs"], r["op"], r["rhs"]]
                                for r in rep["requirements"]])
        lines.append("")
        lines += render_table("inputs", ["input", "value", "range", "source"],
                               [[i["id"], i["value"], " .. ".join(i["range"]) if i["range"] else "", i["source"]]
                                for i in rep["inputs"]])
        if rep.get("odds"):
            od = rep["odds"]
            q, rr = _odds_rows(od)
            lines += ["", f"odds over {od['samples']:,} samples (seed {od['seed']}; uncertain: "
                      f"{', '.join(od['uncertain'])})"]
            lines += render_table("percentiles", ["quantity", "unit", "p5", "p50", "p95"], q)
            lines += render_table("requirements", ["requirement", "P(holds)", "± (std. error)"], rr)
        for s in rep["sensitivity"]:
            lines.append("")
            lines += render_table(f"sensitivity of {s['quantity']}" + (f" ({s['unit']})" if s['unit'] not in ("", "1") else ""),
                                   ["input", "value", "d/dx", "per", "elasticity"],
                                   [[r["input"], r["value"], _num(r["derivative"]), r["per"],
                                     f"{r['elasticity']:+.3f}"] for r in s["rows"] if r["elasticity"]])
            if s["tornado"]:
                lines += render_table(f"  over declared ranges ({s['unit']})", ["input", "low", "high",
                                                                                 f"{s['quantity']} low",
                                                                                 f"{s['quantity']} high"],
                                       [[t["input"], t["lo"], t["hi"], _num(t["y_lo"]), _num(t["y_hi"])]
                                        for t in s["tornado"]])
        lines.append("")
        lines += render_table("break-even: the input value at which each requirement flips (others nominal)",
                               ["requirement", "input", "nominal", "flips at"],
                               [[b["requirement"], b["input"], b["nominal"], _be_text(b)] for b in rep["break_even"]])
        for cp in rep["critical_paths"]:
            lines.append("")
            lines += render_table(f"timeline {cp['timeline']} (makespan {cp['makespan']})",
                                   ["activity", "resource", "start s", "duration s", "slack s", "critical"],
                                   [[a["id"], a["resource"], a["start"], a["duration"], a["slack"],
                                     "yes" if a["critical"] else ""] for a in cp["activities"]])
        for t in rep["tables"]:
            lines.append("")
            lines += render_table(f"{t['title']} [plugin {t['plugin']}]", t["columns"], t["rows"], t["notes"])
        if rep["figures"]:
            lines += ["", "figures (see the HTML report or `plan figure`): "
                      + ", ".join(f["name"] for f in rep["figures"])]
        if _source_rows(rep):
            lines.append("")
            lines += render_table("sources", ["of", "reference"], _source_rows(rep))
    return "\n".join(lines)


def _md_text(c) -> str:
    """User text for Markdown: HTML and link syntax escaped (not every renderer sanitises)."""
    s = str(c)
    if len(s) >= 2 and s[0] == "`" and s[-1] == "`" and "`" not in s[1:-1]:
        return s   # a code span (identifiers): shown literally by every renderer
    s = s.replace("&", "&amp;").replace("<", "&lt;")   # no tag, no entity
    for ch in "[]`":   # no link, image or code span
        s = s.replace(ch, "\\" + ch)
    return s


def _source_rows(rep: dict) -> list[list[str]]:
    """[what, reference] rows of a plan's sources: quantities, `use` blocks, tables."""
    src = rep.get("sources") or {}
    return [[label.format(name), r]
            for what, label in (("quantities", "{}"), ("blocks", "use {}"), ("tables", "table {}"))
            for name, refs in src.get(what, {}).items() for r in refs]


def _md_table(cols: list[str], rows: list[list]) -> list[str]:
    def esc(c):
        return _md_text(c).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(esc(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return out


def render_markdown(data: dict) -> str:
    """The report as GitHub Markdown (for PR comments): formulas as ``$$ LaTeX $$``; figures
    are not embedded (use the HTML report)."""
    L = [f"# plan report: `{str(data['file']).replace('`', chr(39))}`"]
    if data.get("verdict"):
        L += ["", "## Verdict", ""]
        L += _md_table(["plan", "requirements"], [[f"`{v['plan']}`", ("✅ " if v["ok"] else "❌ ") + _verdict_summary(v)]
                                                 for v in data["verdict"]])
        plans, rows = _verdict_rows(data)
        if rows:
            L += ["", "Margins (room left before a requirement flips; negative: by how much it fails):", ""]
            L += _md_table(["requirement"] + [f"`{p}`" for p in plans],
                           [[f"`{r[0]}`"] + ["—" if c is None else ("✅ " if c[0] else "❌ ") + c[1] for c in r[1:]]
                            for r in rows])
        comp = data.get("compare") or {}
        if len(comp.get("columns", [])) > 1:
            L += ["", "## Plans side by side", ""]
            L += _md_table(["quantity", "unit"] + [f"`{p}`" for p in comp["columns"]],
                           [[f"`{r[0]}`", r[1]] + r[2:] for r in comp["rows"]])
    for p, rep in data["plans"].items():
        L += ["", f"## plan `{p}`", "", "### Headline values", ""]
        L += _md_table(["quantity", "value", "unit", "meaning"],
                       [[f"`{h['name']}`", _with_band(h), h["unit"], h["doc"]] for h in rep["headline"]])
        L += ["", "### Requirements", ""]
        L += _md_table(["requirement", "", "lhs", "op", "rhs"],
                       [[f"`{r['name']}`", "✅ ok" if r["ok"] else "❌ FAIL", r["lhs"], f"`{r['op']}`", r["rhs"]]
                        for r in rep["requirements"]])
        L += ["", "### Formulas", ""]
        for h in rep["headline"]:
            if h["formula"]["latex"]:
                L += [f"`{h['name']}` =", "", "$$" + h["formula"]["latex"] + "$$", ""]
        L += ["### Inputs", ""]
        L += _md_table(["input", "value", "range", "source"],
                       [[f"`{i['id']}`", i["value"], " … ".join(i["range"]) if i["range"] else "", i["source"]]
                        for i in rep["inputs"]])
        if rep.get("odds"):
            od = rep["odds"]
            q, rr = _odds_rows(od)
            L += ["", f"### Odds ({od['samples']:,} samples, seed {od['seed']}; uncertain: "
                  + ", ".join(f"`{u}`" for u in od["uncertain"]) + ")", ""]
            L += _md_table(["quantity", "unit", "p5", "p50", "p95"], q)
            L += [""] + _md_table(["requirement", "P(holds)", "± (std. error)"], rr)
        for s in rep["sensitivity"]:
            L += ["", f"### Sensitivity of `{s['quantity']}`" + (f" ({s['unit']})" if s['unit'] not in ("", "1")
                                                                  else ""), ""]
            L += _md_table(["input", "value", "∂y/∂x", "unit", "elasticity"],
                           [[f"`{r['input']}`", r["value"], _num(r["derivative"]), r["per"],
                             f"{r['elasticity']:+.3f}"] for r in s["rows"] if r["elasticity"]])
            if s["tornado"]:
                L += ["", "Over the declared ranges:", ""]
                L += _md_table(["input", "low", "high", f"{s['quantity']} at low", f"{s['quantity']} at high"],
                               [[f"`{t['input']}`", t["lo"], t["hi"], _num(t["y_lo"]), _num(t["y_hi"])]
                                for t in s["tornado"]])
        L += ["", "### Break-even values", "", "The value of each input at which a requirement flips, "
              "every other input nominal.", ""]
        L += _md_table(["requirement", "input", "nominal", "flips at"],
                       [[f"`{b['requirement']}`", f"`{b['input']}`", b["nominal"], _be_text(b)]
                        for b in rep["break_even"]])
        for cp in rep["critical_paths"]:
            L += ["", f"### Timeline `{cp['timeline']}` (makespan {cp['makespan']})", ""]
            L += _md_table(["activity", "resource", "start (s)", "duration (s)", "slack (s)", "critical"],
                           [[a["id"], a["resource"], _num(a["start"]), _num(a["duration"]), _num(a["slack"]),
                             "●" if a["critical"] else ""] for a in cp["activities"]])
        for t in rep["tables"]:
            L += ["", f"### {_md_text(t['title'])}", ""]
            L += _md_table(t["columns"], t["rows"])
            L += [""] + [f"_{_md_text(n)}_" for n in t["notes"]] if t["notes"] else []
        if _source_rows(rep):
            L += ["", "### Sources", ""]
            L += _md_table(["of", "reference"], [[f"`{a}`", b] for a, b in _source_rows(rep)])
    return "\n".join(L) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;padding:0 1em;max-width:72em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.2em .6em;font-size:.9em}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:bold}.fail{color:#cf222e;font-weight:bold}
code{background:#f6f8fa;padding:0 .2em}.formula{margin:.4em 0 .8em 1.5em;overflow-wrap:anywhere}math{font-size:1.1em}
.formula math{display:inline-block;max-width:100%;overflow-x:auto;vertical-align:middle}
td{overflow-wrap:break-word}td.n,.verdict td.ok,.verdict td.fail{white-space:nowrap}
figure{margin:1em 0}figcaption{font-size:.85em;color:#555}svg{max-width:100%;height:auto}
"""


def _h(x) -> str:
    return html.escape(str(x))


def _html_table(cols: list[str], rows: list[list], numeric: set[int] = frozenset()) -> str:
    out = ["<table><thead><tr>" + "".join(f"<th>{_h(c)}</th>" for c in cols) + "</tr></thead><tbody>"]
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            if isinstance(c, tuple):        # (html, css class): pre-rendered cell
                cells.append(f'<td class="{c[1]}">{c[0]}</td>')
            else:
                cells.append(f'<td class="n">{_h(c)}</td>' if i in numeric else f"<td>{_h(c)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def render_html(data: dict) -> str:
    """The report as one self-contained HTML5 file (inline CSS, SVG and MathML; no script)."""
    B = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         f"<title>plan report: {_h(data['file'])}</title>", f"<style>{_CSS}</style></head><body>",
         f"<h1>plan report: <code>{_h(data['file'])}</code></h1>"]
    if data.get("verdict"):
        B.append('<section id="verdict" class="verdict"><h2>Verdict</h2>')
        B.append(_html_table(["plan", "requirements"],
                             [[(f'<a href="#plan-{_h(v["plan"])}"><code>{_h(v["plan"])}</code></a>', "plan"),
                               (_h(_verdict_summary(v)), "ok" if v["ok"] else "fail")] for v in data["verdict"]]))
        plans, rows = _verdict_rows(data)
        if rows:
            B.append("<p>Margins: the room left before each requirement flips (negative: by how much it fails).</p>")
            B.append(_html_table(["requirement"] + plans,
                                 [[r[0]] + [("—", "n") if c is None else (_h(c[1]), "ok" if c[0] else "fail")
                                            for c in r[1:]] for r in rows]))
        comp = data.get("compare") or {}
        if len(comp.get("columns", [])) > 1:
            B.append("<h2>Plans side by side</h2>")
            B.append(_html_table(["quantity", "unit"] + comp["columns"], comp["rows"],
                                 set(range(2, 2 + len(comp["columns"])))))
        B.append("</section>")
    for p, rep in data["plans"].items():
        B.append(f'<section id="plan-{_h(p)}"><h2>plan <code>{_h(p)}</code></h2>')
        B.append("<h3>Headline values</h3>")
        B.append(_html_table(["quantity", "value", "unit", "meaning", "plugin"],
                             [[h["name"], _with_band(h), h["unit"], h["doc"], h["plugin"]] for h in rep["headline"]],
                             {1}))
        B.append("<h3>Requirements</h3>")
        B.append(_html_table(["requirement", "", "lhs", "op", "rhs", "meaning"],
                             [[r["name"], ("ok", "ok") if r["ok"] else ("FAIL", "fail"), r["lhs"], r["op"], r["rhs"],
                               r["text"]] for r in rep["requirements"]], {2, 4}))
        B.append("<h3>Formulas</h3><p>Each headline in terms of the quantities it is built from "
                 "(numbers in base units: s, B, FLOP, token).</p>")
        for h in rep["headline"]:
            if h["formula"]["mathml"]:
                B.append(f'<div class="formula" data-quantity="{_h(h["name"])}"><code>{_h(h["name"])}</code> = '
                         f'{h["formula"]["mathml"]}</div>')
        B.append("<h3>Inputs</h3>")
        B.append(_html_table(["input", "value", "range", "source", "meaning"],
                             [[i["id"], i["value"], " … ".join(i["range"]) if i["range"] else "", i["source"], i["doc"]]
                              for i in rep["inputs"]], {1}))
        if rep.get("odds"):
            od = rep["odds"]
            q, rr = _odds_rows(od)
            B.append(f"<h3>Odds</h3><p>{od['samples']:,} samples (seed {od['seed']}) of the uncertain inputs "
                     f"and random quantities: {_h(', '.join(od['uncertain']))}.</p>")
            B.append(_html_table(["quantity", "unit", "p5", "p50", "p95"], q, {2, 3, 4}))
            B.append(_html_table(["requirement", "P(holds)", "± (std. error)"], rr, {1, 2}))
            for f in od["figures"]:
                B.append(f'<figure class="odds">{f["svg"]}<figcaption>Distribution of {_h(f["quantity"])} over '
                         f'the samples against {_h(f["requirement"])}</figcaption></figure>')
        for s in rep["sensitivity"]:
            B.append(f"<h3>Sensitivity of <code>{_h(s['quantity'])}</code>"
                     + (f" ({_h(s['unit'])})" if s['unit'] not in ("", "1") else "") + "</h3>")
            B.append("<p>Partial derivatives and elasticities (∂ln y/∂ln x) at the nominal point.</p>")
            B.append(_html_table(["input", "value", "∂y/∂x", "unit", "elasticity"],
                                 [[r["input"], r["value"], _num(r["derivative"]), r["per"], f"{r['elasticity']:+.3f}"]
                                  for r in s["rows"] if r["elasticity"]], {1, 2, 4}))
            if s["svg"]:
                B.append(f'<figure class="tornado">{s["svg"]}<figcaption>Tornado chart of {_h(s["quantity"])} '
                         "over the declared input ranges</figcaption></figure>")
        B.append("<h3>Break-even values</h3><p>The value of each input at which a requirement flips, every "
                 "other input nominal (“never”: no value in the input's allowed range flips it).</p>")
        B.append(_html_table(["requirement", "input", "nominal", "flips at"],
                             [[b["requirement"], b["input"], b["nominal"], _be_text(b)] for b in rep["break_even"]],
                             {2}))
        for cp in rep["critical_paths"]:
            B.append(f"<h3>Timeline <code>{_h(cp['timeline'])}</code>: critical path and slack "
                     f"(makespan {_h(cp['makespan'])})</h3>")
            B.append(_html_table(["activity", "resource", "kind", "start (s)", "duration (s)", "slack (s)", "critical"],
                                 [[a["id"], a["resource"], a["kind"], _num(a["start"]), _num(a["duration"]),
                                   _num(a["slack"]), "●" if a["critical"] else ""] for a in cp["activities"]],
                                 {3, 4, 5}))
        for t in rep["tables"]:
            B.append(f'<h3 class="plugin-table" data-table="{_h(t["name"])}">{_h(t["title"])} '
                     f'<small>[plugin {_h(t["plugin"])}]</small></h3>')
            B.append(_html_table(t["columns"], t["rows"]))
            B.extend(f"<p><small>{_h(n)}</small></p>" for n in t["notes"])
        for f in rep["figures"]:
            B.append(f'<figure class="plugin-figure" data-figure="{_h(f["name"])}">{f["svg"]}'
                     f'<figcaption>{_h(f["title"])} [plugin {_h(f["plugin"])}]</figcaption></figure>')
        if _source_rows(rep):
            B.append('<h3 class="sources">Sources</h3><p>Where the formulas behind these numbers come from.</p>')
            B.append(_html_table(["of", "reference"], _source_rows(rep)))
        B.append("</section>")
    B.append("</body></html>")
    return re.sub(r"[ \t]+\n", "\n", "\n".join(B)) + "\n"


def render(data: dict, fmt: str) -> str:
    """Render ``data`` (from :func:`build`) as ``html``, ``md`` or ``text``."""
    return {"html": render_html, "md": render_markdown, "text": render_text}[fmt](data)

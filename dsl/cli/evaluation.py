"""The commands that evaluate FILE and read its values: ``plan eval`` (headline quantities,
requirements, named solves, plugin tables, critical paths), ``plan get`` (one value, for
scripts), ``plan check`` (``--strict``: the requirements as a CI gate) and ``plan explain`` (a
value's derivation tree down to the inputs)."""
from __future__ import annotations

import json
import sys

from dsl.cli.common import CONFINED, EXIT_OK, EXIT_PLAN, EXIT_USAGE, UsageError, cmdline, load, select_plans, warn
from dsl.present.tables import render_table


def parse_rate(text: str):
    """A command-line exchange rate such as ``0.92 EUR/USD`` (or ``0.92EUR/USD``): (value in
    base units, dimension).  Parsed as a number and a unit of the unit table — never
    evaluated as an expression.

    :raises UnitError: not a positive number followed by a unit of one currency per another.
    """
    import re
    from dsl.engine.units import CURRENCIES, UnitError, parse_unit
    from dsl.syntax.limits import current as current_limits

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z][A-Za-z0-9/^*·]*)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise UnitError(f"--rate '{text}' is not an exchange rate", "write a positive number and a unit of one "
                        "currency per another, e.g. --rate '0.92 EUR/USD'", code="usage")
    x, top = float(m.group(1)), current_limits().exponent
    if not (10.0 ** -top <= x <= 10.0 ** top):   # 1e400 reads as inf
        raise UnitError(f"--rate '{text}' is beyond what a plan can hold (magnitudes from 1e-{top} to 1e{top})",
                        "write the exchange rate as a plain number, e.g. --rate '0.92 EUR/USD'", code="usage")
    u = parse_unit(m.group(2))
    exps = dict(u.dim.exps)
    if len(exps) != 2 or sorted(exps.values()) != [-1, 1] or not set(exps) <= set(CURRENCIES):
        raise UnitError(f"--rate '{text}' is not in one currency per another", "e.g. --rate '0.92 EUR/USD'",
                        code="usage")
    return float(m.group(1)) * float(u.scale), u.dim


def _display(ws, nid: str, unit: str | None = None, rates=()) -> tuple[float | None, str]:
    """Value of ``nid`` in ``unit`` (default its own); ``rates`` (``--rate '0.92 EUR/USD'``)
    convert between currencies: the value is multiplied by the rate (or divided by it, for
    the inverse direction) that makes its dimension the requested unit's."""
    n = ws.nodes[nid]
    v = ws.base_value(nid)
    if v is None:
        return None, n.unit if unit is None else unit
    shown, u = display_conversion(ws, nid, unit, rates)
    return shown(float(v)), u


def display_conversion(ws, nid: str, unit: str | None = None, rates=()):
    """How ``plan get`` shows a value of ``nid`` (its nominal value, or a quantile of it):
    (``shown``, unit) where ``shown(v)`` is a value ``v`` in base units written in ``unit``
    (default the node's own), after the exchange ``rates`` (``--rate '0.92 EUR/USD'``) that
    make its dimension the unit's: ``v`` is multiplied by such a rate (or divided by it, for
    the inverse direction).

    :raises UnitError: ``unit`` is not of the value's dimension, even with the rates.
    """
    from dsl.engine.units import CURRENCIES, UnitError, check_unit_for, convert, parse_unit

    n = ws.nodes[nid]
    u = n.unit if unit is None else unit
    dim, steps = n.dim, []        # (rate, multiply?) in the order they apply
    if rates and u and u != "1":
        want = parse_unit(u).dim
        for text in rates:
            r, rdim = parse_rate(text)
            if dim != want and dim * rdim == want:
                dim = dim * rdim
                steps.append((r, True))
            elif dim != want and dim / rdim == want:
                dim = dim / rdim
                steps.append((r, False))
    try:
        check_unit_for(dim, u)
    except UnitError as e:
        money = [b for b, _ in dim.exps if b in CURRENCIES]
        other = [b for b, _ in parse_unit(u).dim.exps if b in CURRENCIES] if u and u != "1" else []
        if money and other and money != other:
            raise UnitError(str(e), f"pass the exchange rate, e.g. --rate 'R {other[0]}/{money[0]}'") from None
        raise

    def shown(v: float) -> float:
        for r, times in steps:
            v = v * r if times else v / r
        return convert(v, u)
    return shown, u


def _report(ws, plans: list[str], units: list[str] = (), sources: bool = False, tables: str = "default") -> dict:
    """Headline quantities (``value`` in ``unit``, ``si`` in base units), requirements
    (``lhs``/``rhs`` in ``unit``, ``lhs_si``/``rhs_si`` in base units), critical paths,
    plugin tables and, with ``sources``, the references behind the quantities, the blocks
    and the tables shown under ``--tables tables``."""
    from dsl.engine.units import convert, format_number, parse_unit
    from dsl.present.tables import quantity_band

    by_dim = {}
    for u in units:
        by_dim.setdefault(parse_unit(u).dim, u)
    out = {}
    for p in plans:
        qs = {}
        for n in ws.headline(p):
            val, u = _display(ws, n.id, by_dim.get(n.dim))
            qs[n.name] = {"value": val, "unit": u, "si": float(ws.base_value(n.id)), "doc": n.doc,
                          "plugin": n.plugin, "text": format_number(val) if val is not None else None}
            band = quantity_band(ws, p, n.name)
            if band is not None:
                lo, hi = (convert(band[k], u) for k in ("low_si", "high_si"))
                qs[n.name]["band"] = dict(band, low=lo, high=hi)
        cp = None
        for slot in ws.plugins.slots.values():     # the critical path behind a slot's quantity
            st = ws.nodes.get(f"{p}.{slot.critical_path_of}") if slot.critical_path_of else None
            # a plan that sets the quantity itself has no timeline behind that number
            if st is not None and st.kind == "quantity" and (p, slot.timeline) in ws.timelines:
                cp = dict(ws.critical_path(p, slot.timeline), slot=slot.name)
                break
        if cp is not None:
            import sympy as sp
            cp = dict(cp, expr=sp.sstr(cp["expr"]))
        reqs = ws.requirement_results(p)
        for r in reqs:
            u = by_dim.get(parse_unit(r["unit"]).dim if r["unit"] else None) or r["unit"]
            r["unit"] = u
            r["lhs"], r["rhs"] = convert(r["lhs_si"], u), convert(r["rhs_si"], u)
        out[p] = {"quantities": qs, "requirements": reqs, "critical_path": cp,
                  "tables": plugin_tables(ws, p, set(qs))}
        if sources:
            from dsl.present.sources import plan_sources
            out[p]["sources"] = plan_sources(ws, p, tables={n: t["references"] for n, t in out[p]["tables"].items()
                                                            if _shown(t, tables)})
    return out


def plugin_tables(ws, plan: str, headline: set = frozenset()) -> dict:
    """Tables the plugins compute for ``plan`` (name -> title, columns, rows, notes, and how
    ``plan eval`` shows them: ``per_plan``, ``shown_by_default``, ``references``).  A table
    is shown by default unless its spec says ``default=False`` or the plan's ``headline``
    has one of the spec's ``hidden_with`` quantities."""
    out = {}
    for name, spec in sorted(ws.plugins.tables.items()):
        from dsl.syntax.diagnostics import PlanError
        try:
            t = spec.build(ws, plan)
        except TimeoutError:  # the CPU-time safety net fired: not this step's failure
            raise
        except PlanError:     # a problem in the plan's input to the table (e.g. a bad layout_search list)
            raise
        except Exception as e:  # a table that cannot be built must not hide the plan's values
            print(f"plan: warning[plugin]: table '{name}' (plugin '{spec.plugin}') of plan '{plan}' "
                  f"was not built: {e}", file=sys.stderr)
            continue
        if t is None:
            continue
        out[name] = {"title": spec.title, "plugin": spec.plugin, "columns": list(t.columns),
                     "rows": [[c if isinstance(c, (int, float, str)) or c is None else str(c) for c in r]
                              for r in t.rows], "notes": list(t.notes),
                     "per_plan": bool(getattr(spec, "per_plan", True)),
                     "shown_by_default": bool(getattr(spec, "default", True))
                     and not set(getattr(spec, "hidden_with", ())) & set(headline),
                     "references": list(getattr(spec, "references", ()))
                     + [r for r in getattr(t, "references", ()) if r not in getattr(spec, "references", ())]}
    return out


def cmd_eval(args) -> int:
    ws = load(args.file, plans=args.plan)
    warn(ws)
    plans = select_plans(ws, args.file, args.plan)
    from dsl.engine.units import UnitError, parse_unit
    for u in args.units:
        try:
            parse_unit(u)
        except UnitError as err:
            print(f"plan: error[unknown-unit]: {err}\n  hint: {err.hint}", file=sys.stderr)
            return EXIT_USAGE
    if not plans and not ws.solve_names and not ws.file_requirements and args.format == "text":
        n = len([d for d in ws.decls.values() if d.ast.span.file == ws.modules[0].file]) if ws.modules else 0
        declared = bool(ws.modules) and any(d.kind == "plan" for d in ws.modules[0].decls)
        if declared:   # its plans were stopped by the errors printed above
            print(f"{args.file}: no plan evaluated (the errors above stopped them)", file=sys.stderr)
            return EXIT_PLAN
        what = ("is empty" if not ws.modules or not (ws.modules[0].decls or ws.modules[0].imports)
                else f"declares no plan ({n} other declaration{'s' if n != 1 else ''})" if n
                else "declares nothing of its own (only imports)")
        print(f"{args.file} {what}: nothing to evaluate; declare a plan with `plan NAME {{ … }}` "
              "(`plan plugins` lists the blocks it can use)")
        return EXIT_OK
    if not plans:
        print(f"{args.file}: no plans to evaluate (declare one with `plan NAME {{ … }}`)", file=sys.stderr)
    rep = _report(ws, plans, args.units, sources=args.sources,
                  tables=args.tables or ("all" if args.format == "json" else "default"))
    solves, freqs = _file_results(ws, plans if args.plan else None, args.units)
    violated = any(not r["ok"] for p in rep.values() for r in p["requirements"]) or \
        any(not r["ok"] for r in freqs)
    odds = None
    if getattr(args, "samples", None):
        from dsl.cli.odds import eval_odds
        odds = eval_odds(ws, plans, args)
        if args.format == "json":
            for p, j in odds.items():
                rep[p]["odds"] = j
    elif getattr(args, "sobol", None):
        raise UsageError("usage", "--sobol needs --samples", "add --samples 100000")
    if args.format == "json":
        if args.tables is not None:         # JSON lists every table unless asked otherwise
            for r in rep.values():
                r["tables"] = {n: t for n, t in r["tables"].items() if _shown(t, args.tables)}
        print(json.dumps({"file": args.file, "plans": rep, "solves": solves, "requirements": freqs,
                          "diagnostics": [d.to_json() for d in ws.diagnostics]}, indent=2, sort_keys=True))
        return EXIT_PLAN if (violated and args.strict) else EXIT_OK
    print(_render_eval(args.file, rep, plans, args.units, tables=args.tables or "default",
                       sources=args.sources, solves=solves, file_requirements=freqs))
    if odds:
        from dsl.cli.odds import parse_quantiles, render_odds
        print("\n" + render_odds(odds, parse_quantiles(args.quantiles)))
    return EXIT_PLAN if (violated and args.strict) else EXIT_OK


def _file_scope(ws, plans) -> tuple[set, set]:
    """The named solves and file-level requirements that concern only ``plans`` (all of them
    when ``plans`` is None): a solve whose target is in one of them, a requirement whose
    solves are among those and whose other names belong to them or to non-plan declarations."""
    def owner_ok(nid: str) -> bool:
        n = ws.nodes.get(nid)
        return n is None or ws.decls[n.owner].kind != "plan" or n.owner in plans
    if plans is None:
        return set(ws.solve_names), {r.name for r in ws.file_requirements}
    sv = {n for n, q in ws.solve_names.items() if q.target.parts[0] in plans}
    rq = set()
    for r in ws.file_requirements:
        syms = {x.name for e in (r.lhs, r.rhs) for x in e.free_symbols if not x.name.startswith("solve:")}
        if set(r.answers) <= sv and all(owner_ok(x) for x in syms):
            rq.add(r.name)
    return sv, rq


def _file_results(ws, plans=None, units=()) -> tuple[dict, list]:
    """Named solves (name -> the solution's JSON, ``answer`` in ``unit``) and the file-level
    requirements (``lhs``/``rhs`` in ``unit``) of the root file, limited to ``plans``."""
    from dsl.engine.units import convert, parse_unit
    from dsl.results.solver import file_requirement_results, named_solutions

    sv, rq = _file_scope(ws, plans)
    if not sv and not rq:
        return {}, []
    by_dim = {}
    for u in units:
        by_dim.setdefault(parse_unit(u).dim, u)
    sols = named_solutions(ws, sv)
    out = {}
    for name, sol in sols.items():
        u = by_dim.get(ws.nodes[sol.target].dim)
        if u:
            sol.unit = u
        out[name] = sol.to_json()
    reqs = []
    for r in file_requirement_results(ws):
        if r["name"] not in rq:
            continue
        u = by_dim.get(parse_unit(r["unit"]).dim if r["unit"] else None) or r["unit"]
        r["unit"] = u
        r["lhs"] = None if r["lhs_si"] is None else convert(r["lhs_si"], u)
        r["rhs"] = None if r["rhs_si"] is None else convert(r["rhs_si"], u)
        reqs.append(r)
    return out, reqs


def _shown(t: dict, mode: str) -> bool:
    """Whether table ``t`` (an entry of :func:`plugin_tables`) is shown under ``--tables mode``."""
    return mode == "all" or (mode == "default" and t.get("shown_by_default", True))


def render_plugin_tables(rep: dict, plans: list[str], mode: str) -> list[str]:
    """The plugin tables of `plan eval` text: a per-plan table once per plan, titled with the
    plan; a shared one (``per_plan=False``) once per distinct content, titled with the plans
    it stands for; then which tables ``--tables all`` would add."""
    lines: list[str] = []
    done: set[str] = set()
    hidden: list[str] = []
    for p in plans:
        for name, t in rep[p].get("tables", {}).items():
            if not _shown(t, mode):
                if mode == "default" and name not in hidden:
                    hidden.append(name)
                continue
            if t.get("per_plan", True):
                lines.append("")
                lines.extend(render_table(f"{t['title']} ({p})", t["columns"], t["rows"], t["notes"]))
                continue
            if name in done:
                continue
            done.add(name)
            groups: dict = {}
            for q in plans:
                u = rep[q].get("tables", {}).get(name)
                if u is not None and _shown(u, mode):
                    key = json.dumps([u["title"], u["columns"], u["rows"], u["notes"]], sort_keys=True, default=str)
                    groups.setdefault(key, (u, []))[1].append(q)
            for u, ps in groups.values():
                who = "all plans" if len(ps) == len(plans) > 1 else ", ".join(ps)
                lines.append("")
                lines.extend(render_table(f"{u['title']} ({who})", u["columns"], u["rows"], u["notes"]))
    if hidden:
        lines.append("")
        lines.append(f"not shown: table{'s' if len(hidden) > 1 else ''} {', '.join(hidden)} "
                     f"(`--tables all` shows {'them' if len(hidden) > 1 else 'it'})")
    return lines


def _render_eval(file: str, rep: dict, plans: list[str], units: list[str], tables: str = "default",
                 sources: bool = False, solves: dict | None = None, file_requirements=()) -> str:
    """The text of `plan eval`: a quantity × plan table, requirements, plugin tables (see
    :func:`render_plugin_tables`), critical paths and, with ``sources``, the references."""
    from dsl.engine.units import convert, format_number, parse_unit

    rows: list[tuple[str, str]] = []
    for p in plans:
        for name, q in rep[p]["quantities"].items():
            if (name, q["unit"]) not in rows:
                rows.append((name, q["unit"]))
    header = ["quantity", "unit"] + plans
    table = [header]
    for name, unit in rows:
        cells = [name, unit]
        for p in plans:
            q = rep[p]["quantities"].get(name)
            cells.append((q["text"] + (f" ({q['band']['text']})" if q.get("band") else ""))
                         if q and q["unit"] == unit and q["text"] is not None else "—")
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = [f"{file}", ""]
    for i, r in enumerate(table):
        lines.append("  ".join(c.ljust(widths[j]) if j < 2 else c.rjust(widths[j]) for j, c in enumerate(r)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if any(rep[p]["requirements"] for p in plans) or file_requirements:
        lines.append("")
        lines.append("requirements")
    for p in plans:
        for r in rep[p]["requirements"]:
            mark = "ok  " if r["ok"] else "FAIL"
            vals = f"{format_number(r['lhs'])} {r['op']} {format_number(r['rhs'])} {r['unit']}".rstrip()
            expr = r.get("expr", "")
            head = vals if not expr or expr.replace(" ", "") == vals.replace(" ", "") else f"{expr}: {vals}"
            ins = "; ".join(f"{k} = {format_number(v)} {u}".rstrip() for k, (v, u) in r.get("inputs", {}).items())
            lines.append(f"  {mark} {p}.{r['name']}: {head}" + (f"  ({ins})" if ins else "")
                         + ("" if r["ok"] else "  <- violated"))
    for r in file_requirements:
        mark = "ok  " if r["ok"] else "FAIL"
        if r["lhs"] is None:
            lines.append(f"  FAIL {r['name']}: {r['text']}  <- {r['note']}")
            continue
        lines.append(f"  {mark} {r['name']}: {format_number(r['lhs'])} {r['op']} "
                     f"{format_number(r['rhs'])} {r['unit']}".rstrip() + ("" if r["ok"] else "  <- violated"))
    if solves:
        lines.append("")
        lines.append("solves")
        w = max(len(n) for n in solves)
        for name, s in solves.items():
            u = "" if s["unit"] == "1" else s["unit"]
            shown = (f"{format_number(s['answer'])} {u}".rstrip() if s["answer"] is not None else "no answer")
            lines.append(f"  {name.ljust(w)}  {shown}   ({s['query']})")
    lines.extend(render_plugin_tables(rep, plans, tables))
    cps = [(p, rep[p]["critical_path"]) for p in plans if rep[p]["critical_path"]]
    if cps:
        lines.append("")
        lines.append("critical path of one " + cps[0][1]["slot"].replace("_", " "))
        for p, cp in cps:
            tu = next((u for u in units if parse_unit(u).dim == parse_unit("s").dim), "s")
            path = [a["id"] for a in cp["activities"] if a["id"] in cp["path"] and a["duration"] > 0]
            lines.append(f"  {p}: " + " -> ".join(path) + f"  ({format_number(convert(cp['makespan'], tu))} {tu})")
    if sources:
        from dsl.present.sources import render_text
        lines.append("")
        lines.extend(render_text({p: rep[p].get("sources") for p in plans}, plans))
    return "\n".join(lines)


def _emit(args, value, unit: str | None = None) -> int:
    """Print one result of `plan get`: bare, with its unit (``--with-unit``) or as JSON."""
    if isinstance(value, float):
        shown = str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    elif isinstance(value, bool):
        shown = "true" if value else "false"
    else:
        shown = str(value)
    u = None if unit in (None, "", "1") else unit
    if getattr(args, "format", "text") == "json":
        print(json.dumps({"name": args.name, "value": value, "unit": u}, sort_keys=True))
    else:
        print(shown + (f" {u}" if u and getattr(args, "with_unit", False) else ""))
    return EXIT_OK


def cmd_get(args) -> int:
    from dsl.engine.units import UnitError

    ws = load(args.file)
    if getattr(args, "quantile", None) is not None or getattr(args, "probability", False):
        from dsl.cli.odds import get_odds
        try:
            return get_odds(ws, args, _emit, display_conversion)
        except UnitError as e:
            print(f"plan: error[{e.code}]: {e}\n  hint: {e.hint}", file=sys.stderr)
            return EXIT_USAGE
    if args.name in ws.solve_names:
        return _get_answer(ws, args)
    if "." not in args.name and any(r.name == args.name for r in ws.file_requirements):
        from dsl.results.solver import file_requirement_results
        r = next(r for r in file_requirement_results(ws) if r["name"] == args.name)
        return _emit(args, bool(r["ok"]))
    plan, _, rest = args.name.partition(".")
    if plan in ws.decls and ws.decls[plan].kind == "plan" and rest and f"{plan}.{rest}" not in ws.nodes:
        req = ws.requirement(plan, rest)
        if req is not None:
            return _emit(args, bool(req["ok"]))
    nid = cmdline(ws.lookup, args.name)
    n = ws.nodes[nid]
    if not n.numeric:
        from dsl.present.explain import show_value
        return _emit(args, n.value if isinstance(n.value, (str, bool)) else show_value(ws, nid))
    try:
        val, shown_unit = _display(ws, nid, args.unit, getattr(args, "rates", ()))
    except UnitError as e:
        print(f"plan: error[{e.code}]: {e}\n  hint: {e.hint}", file=sys.stderr)
        return EXIT_USAGE
    if val is None:
        print(f"plan: error: '{args.name}' has no value", file=sys.stderr)
        return EXIT_PLAN
    if args.expr:
        import sympy as sp
        print(sp.sstr(ws.full_expr(nid)))
        return EXIT_OK
    return _emit(args, float(val), shown_unit)


def _get_answer(ws, args) -> int:
    """`plan get FILE NAME` for a named solve: its answer (the whole number for a whole-number
    target), in the target's unit or ``--in``; ``--expr`` prints its symbolic form."""
    from dsl.engine.units import UnitError, check_unit_for, convert
    from dsl.results.solver import named_solutions
    from dsl.syntax.diagnostics import Diagnostic, render

    sol = named_solutions(ws, {args.name})[args.name]
    span = ws.solve_names[args.name].span     # errors point at the solve
    if sol.answer is None:
        print(render(Diagnostic("error", "solve", f"'{args.name}' has no answer: {sol.note}", span,
                                f"`plan solve {args.file}` shows the query and what was scanned")), file=sys.stderr)
        return EXIT_PLAN
    if args.expr:
        if sol.symbolic is None:
            print(render(Diagnostic("error", "solve", f"'{args.name}' has no symbolic form ({sol.method} answer)",
                                    span, "drop --expr to print the number")), file=sys.stderr)
            return EXIT_PLAN
        print(sol.symbolic)
        return EXIT_OK
    unit = args.unit or sol.unit
    try:
        check_unit_for(ws.nodes[sol.target].dim, unit)
    except UnitError as e:
        print(f"plan: error[{e.code}]: {e}\n  hint: {e.hint}", file=sys.stderr)
        return EXIT_USAGE
    return _emit(args, float(convert(sol.answer, unit)), unit)


def cmd_check(args) -> int:
    ws = load(args.file, evaluate=args.strict)
    warn(ws)
    if args.strict:
        return _check_strict(ws, args)
    if args.format == "json":
        print(json.dumps({"file": args.file, "ok": not CONFINED, "declarations": len(ws.decls),
                          "diagnostics": [d.to_json() for d in ws.diagnostics]}, indent=2, sort_keys=True))
    elif not CONFINED:
        nd, nf = len(ws.decls), len(ws.modules)
        print(f"{args.file}: ok ({nd} declaration{'s' if nd != 1 else ''} in {nf} file{'s' if nf != 1 else ''})")
    return EXIT_OK


def _check_strict(ws, args) -> int:
    """`plan check --strict`: every requirement of the selected plans; each failing one is an
    ``error[requirement]`` with its margin and its drivers (largest elasticities of lhs/rhs),
    each with the value at which the requirement would hold again."""
    from dsl.syntax.diagnostics import Diagnostic, render
    from dsl.results.sensitivity import requirement_report
    from dsl.engine.units import format_quantity

    plans = select_plans(ws, args.file, args.plan)
    failed, checked = [], 0
    for p in plans:
        results = {r["name"]: r for r in ws.requirement_results(p)}
        for req in [r for r in ws.requirements if r.plan == p]:
            res = results.get(req.name)
            if res is None:
                continue
            checked += 1
            if res["ok"]:
                continue
            rr = requirement_report(ws, req, top=5)
            u = req.unit
            side = req.text or req.doc or req.name
            summary = (f"requirement '{p}.{req.name}' fails: {format_quantity(rr['lhs'], u)} {req.op} "
                       f"{format_quantity(rr['rhs'], u)} does not hold (margin {format_quantity(rr['margin'], u)}"
                       + (f", {rr['relative'] * 100:+.1f} %)" if rr['relative'] == rr['relative'] else ")"))
            drivers = []
            for d in rr["drivers"]:
                n = ws.nodes[d["input"]]
                be = d["break_even"]
                flip = ("holds when " + d["input"] + f" {be['holds']} " + format_quantity(be["value"], n.unit)
                        if be["value"] is not None and be["holds"] else "no single change of it fixes this")
                drivers.append(f"{d['input']} = {format_quantity(d['value'], n.unit)} "
                               f"(elasticity {d['elasticity']:+.3g}; {flip})")
            hint = (f"wanted: {side}; the inputs that drive it (the plan's own first, largest elasticities "
                    "of lhs/rhs first):\n"
                    + "\n".join(f"    - {x}" for x in drivers)) if drivers else side
            span = req.span or ws.decls[p].ast.name_span
            diag = Diagnostic("error", "requirement", summary, span, hint)
            failed.append((diag, rr))
    _, rq = _file_scope(ws, plans if args.plan else None)
    if rq:
        from dsl.results.solver import file_requirement_results, named_solutions
        for res in file_requirement_results(ws):
            if res["name"] not in rq:
                continue
            checked += 1
            if res["ok"]:
                continue
            req = next(r for r in ws.file_requirements if r.name == res["name"])
            sols = named_solutions(ws, set(req.answers))
            where = "; ".join(f"{n} is the answer of `solve {n}: {s.query}`"
                              + (f" ({s.note})" if s.note else "") for n, s in sols.items())
            u = req.unit
            if res["lhs_si"] is None:
                summary = f"requirement '{req.name}' fails: {res['note']}"
                rr = {"name": req.name, "text": req.text, "unit": u, "lhs": None, "rhs": None, "margin": None,
                      "relative": None, "drivers": [], "note": res["note"]}
            else:
                margin = (res["rhs_si"] - res["lhs_si"]) if req.op in ("<=", "<") else res["lhs_si"] - res["rhs_si"]
                if req.op == "==":
                    margin = -abs(res["lhs_si"] - res["rhs_si"])
                rel = margin / abs(res["rhs_si"]) if res["rhs_si"] else 0.0
                summary = (f"requirement '{req.name}' fails: {format_quantity(res['lhs_si'], u)} {req.op} "
                           f"{format_quantity(res['rhs_si'], u)} does not hold (margin {format_quantity(margin, u)}, "
                           f"{rel * 100:+.1f} %)")
                rr = {"name": req.name, "text": req.text, "unit": u, "lhs": res["lhs_si"], "rhs": res["rhs_si"],
                      "margin": margin, "relative": rel, "drivers": []}
            rr["answers"] = {n: s.to_json() for n, s in sols.items()}
            failed.append((Diagnostic("error", "requirement", summary, req.span,
                                      f"{req.text}; {where}" if where else req.text), rr))
    if args.format == "json":
        print(json.dumps({"file": args.file, "ok": not failed, "requirements_checked": checked,
                          "failed": [dict(_in_units(ws, rr), where=str(d.span)) for d, rr in failed]},
                         indent=2, sort_keys=True, default=str))
    else:
        for d, _ in failed:
            print(render(d), file=sys.stderr)
        if failed:
            print(f"{len(failed)} of {checked} requirements fail", file=sys.stderr)
        else:
            print(f"{args.file}: ok ({checked} requirement{'s' if checked != 1 else ''} hold"
                  f"{'' if checked != 1 else 's'})")
    return EXIT_PLAN if failed else EXIT_OK


def _in_units(ws, rr: dict) -> dict:
    """A requirement report for JSON: ``lhs``, ``rhs``, ``margin`` in the requirement's ``unit``
    (``*_si`` in base units); each driver's ``value`` and break-even in the input's ``unit``."""
    from dsl.engine.units import convert

    u = rr["unit"]
    out = dict(rr, **{k: None if rr[k] is None else convert(rr[k], u) for k in ("lhs", "rhs", "margin")},
               **{f"{k}_si": rr[k] for k in ("lhs", "rhs", "margin")})
    drivers = []
    for d in rr["drivers"]:
        du = ws.nodes[d["input"]].unit
        be = dict(d["break_even"])
        for k in ("value", "nominal"):
            if be.get(k) is not None:
                be[f"{k}_si"], be[k] = be[k], convert(be[k], du)
        drivers.append(dict(d, unit=du, value=convert(d["value"], du), value_si=d["value"], break_even=be))
    out["drivers"] = drivers
    return out


def cmd_explain(args) -> int:
    from dsl.present import explain

    ws = load(args.file)
    warn(ws)
    plan, _, rest = args.name.partition(".")
    if plan in ws.decls and ws.decls[plan].kind == "plan" and rest and f"{plan}.{rest}" not in ws.nodes:
        rt = explain.requirement_tree(ws, plan, rest, args.depth)
        if rt is not None:
            if args.format == "json":
                print(json.dumps(rt, indent=2, sort_keys=True))
            else:
                print(explain.render_requirement(rt, plan))
            return EXIT_OK
    if "." not in args.name and args.name not in ws.nodes:
        rt = explain.file_requirement_tree(ws, args.name, args.depth)
        if rt is not None:
            if args.format == "json":
                print(json.dumps(rt, indent=2, sort_keys=True))
            else:
                print(explain.render_requirement(rt, ""))
            return EXIT_OK
    nid = cmdline(ws.lookup, args.name)
    t = explain.tree(ws, nid, args.depth)
    if args.format == "json":
        print(json.dumps(t, indent=2, sort_keys=True))
    else:
        print(explain.render(t, ws.nodes[nid].owner))
    return EXIT_OK

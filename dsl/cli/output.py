"""The commands that show an evaluated plan in other forms: ``plan report`` (the sensitivity
report: text, Markdown or HTML), ``plan figure`` (the plugins' figures as files), ``plan
timeline`` (text Gantt charts), ``plan graph`` (the dependency graph: dot, Mermaid or SVG) and
``plan diff`` (two plans, or one at two git revisions, compared)."""
from __future__ import annotations

import json
import sys

from dsl.cli.common import (EXIT_MISSING, EXIT_OK, EXIT_PLAN, EXIT_USAGE, CommandLineError, cannot_write,
                            cmdline, load, select_plans, warn, write_output)
from dsl.syntax.diagnostics import PlanError


def cmd_report(args) -> int:
    from pathlib import Path

    from dsl.present import report

    fmt = args.format
    if fmt is None:
        suffix = Path(args.out).suffix.lower() if args.out else ""
        fmt = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}.get(suffix, "text")
    if args.out:   # find out that the path cannot be written before building the report
        problem = cannot_write(args.out)
        if problem is not None:
            raise problem
    ws = load(args.file)
    warn(ws)
    plans = select_plans(ws, args.file, args.plan)
    text = report.render(report.build(ws, plans, figures=fmt == "html"), fmt)
    if args.out:
        write_output(Path(args.out), lambda f: f.write_text(text, encoding="utf-8"))
        print(args.out)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def cmd_figure(args) -> int:
    from pathlib import Path

    from dsl.plugin.figures import FigureError, new_figure, save

    ws = load(args.file)
    warn(ws)
    specs = ws.plugins.figures
    if args.list:
        return _list_figures(ws, args, specs)
    unknown = [n for n in (args.name or []) if n not in specs]
    if unknown:
        from dsl.syntax.diagnostics import did_you_mean
        g = did_you_mean(unknown[0], specs)
        print(f"plan: error[unknown-name]: no figure '{unknown[0]}'\n  hint: "
              + (f"did you mean '{g}'? " if g else "") + "figures: " + ", ".join(sorted(specs)), file=sys.stderr)
        return EXIT_USAGE
    plans = select_plans(ws, args.file, args.plan)
    out = Path(args.out)
    write_output(out, lambda d: d.mkdir(parents=True, exist_ok=True))
    written = 0
    try:
        for p in plans:
            for name, spec in sorted(specs.items()):
                if args.name and name not in args.name:
                    continue
                fig = new_figure()
                if spec.draw(ws, p, fig):
                    write_output(out / f"{p}-{name}.{args.format}", lambda f: save(fig, f))
                    print(out / f"{p}-{name}.{args.format}")
                    written += 1
    except FigureError as e:
        from dsl.plugin.figures import MissingPackage
        missing = isinstance(e, MissingPackage)
        print(f"plan: error[{'missing-dependency' if missing else 'figure'}]: {e}", file=sys.stderr)
        return EXIT_MISSING if missing else EXIT_PLAN
    if not written:
        print(f"{args.file}: no figure applies to these plans", file=sys.stderr)
    return EXIT_OK


def _list_figures(ws, args, specs) -> int:
    """`plan figure FILE --list`: the figures that apply to FILE's plans (each drawn once, off
    screen, to find out), with the plans they apply to; the others are counted."""
    from dsl.plugin.figures import FigureError, MissingPackage, new_figure

    plans = select_plans(ws, args.file, args.plan)
    rows, others = [], 0
    for name, spec in sorted(specs.items()):
        if args.name and name not in args.name:
            continue
        hit = []
        for p in plans:
            try:
                if spec.draw(ws, p, new_figure()):
                    hit.append(p)
            except MissingPackage as e:
                print(f"plan: error[missing-dependency]: {e}", file=sys.stderr)
                return EXIT_MISSING
            except FigureError:
                continue
        if hit:
            rows.append((name, spec, hit))
        else:
            others += 1
    if not rows:
        print(f"{args.file}: no figure applies to its plans ({', '.join(plans) or 'none'})", file=sys.stderr)
    for name, spec, hit in rows:
        print(f"{name:24s} {spec.title}  [plugin {spec.plugin}]  plans: {', '.join(hit)}")
    if others:
        print(f"({others} other figure{'s' if others != 1 else ''} apply to none of these plans; "
              "`plan plugins` lists every figure)")
    return EXIT_OK


def cmd_timeline(args) -> int:
    from dsl.plugin.figures import text_timeline
    from dsl.engine.units import UnitError, check_unit_for, format_number, parse_unit

    ws = load(args.file)
    warn(ws)
    if args.unit:
        try:
            parse_unit(args.unit)
        except UnitError as err:
            print(f"plan: error[unknown-unit]: {err}\n  hint: {err.hint}", file=sys.stderr)
            return EXIT_USAGE
        try:
            check_unit_for(parse_unit("s").dim, args.unit)
        except UnitError as err:
            print(f"plan: error[unit-mismatch]: {err}\n  hint: {err.hint}", file=sys.stderr)
            return EXIT_USAGE
    plans = select_plans(ws, args.file, args.plan)
    shown = 0
    for (p, name), tl in sorted(ws.timelines.items(), key=lambda kv: (plans.index(kv[0][0])
                                                                       if kv[0][0] in plans else 0, kv[0][1])):
        if p not in plans or (args.timeline and name != args.timeline) or tl.schedule is None:
            continue
        unit = args.unit or ("ms" if tl.schedule.makespan < 10 else "s")
        print(text_timeline(tl, max(20, args.width), unit))
        path = tl.schedule.path
        scale = float(parse_unit(unit).scale)
        if path:
            shown_path = path if len(path) <= 12 else path[:5] + ["…"] + path[-5:]
            print(f"  critical path ({len(path)} activities): " + " → ".join(shown_path))
        for pool, prof in sorted(tl.profiles.items()):
            print(f"  peak of {pool}: {format_number(prof.peak / 2 ** 20)} MiB at "
                  f"{format_number(prof.time / scale)} {unit} (live: {', '.join(prof.live[:8])}"
                  + (", …" if len(prof.live) > 8 else "") + ")")
        print()
        shown += 1
    if not shown:
        which = f"timeline '{args.timeline}'" if args.timeline else "timeline"
        print(f"{args.file}: no {which} in these plans", file=sys.stderr)
        return EXIT_PLAN if args.timeline else EXIT_OK
    return EXIT_OK


def _lookup_in(ws, name: str, plan: str | None) -> str:
    """Node id of a command-line ``name`` read relative to ``plan`` (``--plan base --quantity
    step_time`` is ``base.step_time``); a name whose first part is a declaration (``base.…``,
    ``h100_sxm.peak_flops``) or no plan: as written.  :raises PlanError: unknown name."""
    if plan is None or name.split(".")[0] in ws.decls:
        return ws.lookup(name)
    return ws.lookup(f"{plan}.{name}")


def cmd_graph(args) -> int:
    from pathlib import Path

    from dsl.present import graphviz

    ws = load(args.file)
    warn(ws)
    plan = select_plans(ws, args.file, [args.plan])[0] if args.plan else None
    q = cmdline(_lookup_in, ws, args.quantity, plan) if args.quantity else None
    if plan is None:
        plan = ws.nodes[q].owner if q else (ws.plans(own=True) or [None])[0]
    if plan is None:
        print(f"{args.file}: no plan to draw", file=sys.stderr)
        return EXIT_PLAN
    g = graphviz.subgraph(ws, plan, q)
    from dsl.plugin.figures import MissingPackage
    try:
        text = {"dot": graphviz.to_dot, "mermaid": graphviz.to_mermaid, "svg": graphviz.to_svg}[args.format](ws, g, plan)
    except MissingPackage as e:     # SVG is drawn with matplotlib, an optional package (as for `plan figure`)
        print(f"plan: error[missing-dependency]: {e}\n  hint: --format dot and --format mermaid need no "
              "optional package", file=sys.stderr)
        return EXIT_MISSING
    if args.out:
        write_output(Path(args.out), lambda f: f.write_text(text, encoding="utf-8"))
        print(args.out)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_diff(args) -> int:
    import tempfile
    from pathlib import Path

    from dsl.present import diff

    with tempfile.TemporaryDirectory(prefix="plan-diff-") as tmp:
        old = diff.load_side(args.old, Path(tmp))
        new = diff.load_side(args.new, Path(tmp))
        try:
            res = diff.compare(old, new)
        except PlanError as e:   # `#PLAN` naming no plan of the file is a bad command line
            if all(d.code == "unknown-name" and d.span is None for d in e.diagnostics):
                raise CommandLineError(e.diagnostics) from None
            raise
    if args.format == "json":
        print(json.dumps(res, indent=2, sort_keys=True, default=str))
    elif args.format == "md":
        sys.stdout.write(diff.render_markdown(res))
    else:
        print(diff.render_text(res))
    return EXIT_OK

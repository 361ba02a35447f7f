"""The commands that ask what the inputs would have to be: ``plan solve`` (break-even queries,
the file's or ``--query``) and ``plan sweep`` (the plan over a grid or random samples of its
inputs).  ``plan search`` (the layout search) is a plugin's command
(plugins/training/layout_search.py)."""
from __future__ import annotations

import json
import sys

from dsl.cli.common import (EXIT_MISSING, EXIT_OK, EXIT_PLAN, EXIT_USAGE, UsageError, cmdline, load,
                            select_plans, warn, write_output)


def cmd_solve(args) -> int:
    from dsl.syntax.format import query_text
    from dsl.syntax.parser import parse_query
    from dsl.results.solver import solve_query
    from dsl.engine.units import convert, format_number

    if args.query is not None and not args.query.strip():
        raise UsageError("usage", "--query is empty", "write --query \"TARGET for LHS == RHS\"")
    ws = load(args.file)
    warn(ws)
    if getattr(args, "probability", None):
        from dsl.cli.odds import solve_probability
        return solve_probability(ws, args)
    queries = [cmdline(parse_query, args.query)] if args.query else list(ws.queries)
    if not queries:
        if ws.modules and ws.modules[0].queries:   # every query is about a plan an error stopped
            print(f"{args.file}: no `solve` query asked: each is about a plan the errors above stopped",
                  file=sys.stderr)
            return EXIT_PLAN
        print(f"{args.file}: no `solve` queries (give one with --query)", file=sys.stderr)
        return EXIT_OK
    from dsl.syntax.diagnostics import PlanError, render
    sols, failed = [], []
    from dsl.syntax import limits as L
    for q in queries:
        try:
            with L.time_budget():
                sols.append(solve_query(ws, q))
        except TimeoutError as e:
            from dsl.syntax.diagnostics import Diagnostic
            from dsl.syntax.format import query_text
            failed.append((q, PlanError([Diagnostic("error", "limit", f"solving '{query_text(q)}' {e}", q.span,
                                                    L.raise_hint("cpu_seconds"))])))
            for d in failed[-1][1].diagnostics:
                print(render(d), file=sys.stderr)
        except PlanError as e:  # one bad query does not hide the others' answers
            failed.append((q, e))
            for d in e.diagnostics:
                print(render(d), file=sys.stderr)
    rc = (EXIT_USAGE if args.query else EXIT_PLAN) if failed else EXIT_OK   # --query is the command line
    if args.unit:
        from dsl.engine.units import UnitError, check_unit_for
        for s in sols:
            try:
                check_unit_for(ws.nodes[s.target].dim, args.unit)
            except UnitError as err:
                print(f"plan: error[{err.code}]: {err}\n  hint: {err.hint}", file=sys.stderr)
                return EXIT_USAGE
            s.unit = args.unit
    if args.format == "json":
        print(json.dumps({"file": args.file, "solutions": [s.to_json() for s in sols],
                          "diagnostics": [d.to_json() for _, e in failed for d in e.diagnostics]},
                         indent=2, sort_keys=True))
        return rc
    lines = []
    for s in sols:
        lines.append(f"solve {s.name + ': ' if s.name else ''}{s.query}")
        if s.value is None:
            lines.append(f"  {s.note}")
        else:
            u = "" if s.unit == "1" else s.unit
            shown = f"{format_number(convert(s.value, s.unit))} {u}".rstrip()
            nominal = f"{format_number(convert(s.nominal, s.unit))} {u}".rstrip() if s.nominal is not None else "?"
            if s.whole_only and s.whole != s.value:
                # a whole-number target: the whole number first, the continuous root beside it
                answer = (": no whole number answers" if s.whole is None else
                          f" = {format_number(convert(s.whole, s.unit))} {u}".rstrip())
                lines.append(f"  {s.target}{answer}   (nominal {nominal}; {s.method}; continuous root {shown})")
            else:
                lines.append(f"  {s.target} = {shown}   (nominal {nominal}; {s.method})")
            if s.holds:
                lines.append(f"  the relation holds for {s.holds.replace('boundary', shown)}")
            elif s.intervals:
                le = "<" if s.query and (" < " in s.query or " > " in s.query) else "<="

                def fmt(v):
                    return f"{format_number(convert(v, s.unit))} {u}".rstrip()
                parts = []
                for lo, hi in s.intervals:
                    if lo is None and hi is None:
                        parts.append("every value")
                    elif lo is None:
                        parts.append(f"{s.target} {le} {fmt(hi)}")
                    elif hi is None:
                        parts.append(f"{s.target} {'>' if le == '<' else '>='} {fmt(lo)}")
                    else:
                        parts.append(f"{fmt(lo)} {le} {s.target} {le} {fmt(hi)}")
                lines.append("  the relation holds for " + (" or ".join(parts) if parts else "no value"))
            for n in (s.note.split("; ") if s.note else []):
                lines.append(f"  note: {n}")
            if s.symbolic:
                lines.append(f"  where {s.symbolic}")
        lines.append("")
    if lines:
        print("\n".join(lines).rstrip())
    if failed:
        print(f"{len(failed)} of {len(queries)} queries failed", file=sys.stderr)
    return rc


def cmd_sweep(args) -> int:
    from dsl.results import sweep
    from dsl.engine.units import format_number

    try:
        sweep._numpy()
    except sweep.SweepError as e:
        print(f"plan: error[missing-dependency]: {e}", file=sys.stderr)
        return EXIT_MISSING
    ws = load(args.file)
    warn(ws)
    varies = [cmdline(sweep.parse_vary, ws, v) for v in args.vary]
    if not args.random:   # the grid the command line asks for, refused like --random (exit 2)
        from dsl.syntax import limits as L
        import math
        grid = math.prod(v.n for v in varies)
        if grid > L.current().points:
            raise UsageError("limit", f"the --vary grid has {grid:,} points, above the limit of "
                             f"{L.current().points:,}", L.raise_hint("points"))
    if args.plan:
        plans = select_plans(ws, args.file, args.plan)
    else:
        plans = [p for p in ws.plans() if any(v.id.startswith(p + ".") for v in varies)] or ws.plans(own=True)
    out = {}
    from dsl.engine.executor import current
    for p in plans:
        out[p] = sweep.run(ws, p, varies, random=args.random, seed=args.seed, executor=current())
    for p, res in out.items():
        if args.out:
            path = args.out if len(plans) == 1 else args.out.replace(".csv", "") + f"-{p}.csv"
            write_output(path, res.write_csv)
            print(path, file=sys.stderr)
    if args.format == "json":
        print(json.dumps({p: r.summary() for p, r in out.items()}, indent=2, sort_keys=True))
        return EXIT_OK
    for p, res in out.items():
        s = res.summary()
        print(f"plan {p}: {s['points']:,} points ({'random' if args.random else 'grid'}), "
              f"{s['feasible']:,} feasible ({s['share'] * 100:.1f} %)")
        for v in res.varied:
            u = res.units[v]
            rng = s["ranges"][v]
            shown = "none" if rng is None else f"{format_number(rng[0])} .. {format_number(rng[1])} {u}".rstrip()
            print(f"  {v}: feasible {shown}")
        for r, share in s["failing"].items():
            print(f"  requirement {r}: fails at {share * 100:.1f} % of points")
        for at, why in res.not_built:
            shown = ", ".join(f"{v} = {format_number(x)} {res.units[v]}".rstrip() for v, x in at.items())
            print(f"  not built at {shown}: {why}")
        for name, col in res.columns.items():
            if name in res.varied or col.dtype == bool or col.dtype.kind == "O":
                continue
            u = res.units.get(name, "")
            ok = col[col == col]                  # the points where it has a value (not NaN)
            if not len(ok):
                print(f"  {name}: no value at any point")
                continue
            missing = len(col) - len(ok)
            print(f"  {name}: {format_number(float(ok.min()))} .. {format_number(float(ok.max()))} {u}".rstrip()
                  + (f" (no value at {missing:,} point{'s' if missing != 1 else ''})" if missing else ""))
    return EXIT_OK

"""Answers with odds on the command line: `plan eval --samples`, `plan get --quantile` /
`--probability` and `plan solve --probability` (the numbers: :mod:`dsl.results.odds`)."""
from __future__ import annotations

import re
import sys

from dsl.cli.common import EXIT_OK, EXIT_PLAN, UsageError


def parse_quantiles(text: str) -> tuple:
    """``"5,50,95"`` -> (0.05, 0.5, 0.95); each a percentile in (0, 100)."""
    out = []
    for part in text.split(","):
        try:
            v = float(part.strip())
        except ValueError:
            raise UsageError("usage", f"--quantiles: '{part.strip()}' is not a number", "write e.g. 5,50,95") from None
        if not 0 < v < 100:
            raise UsageError("usage", f"--quantiles: {v:g} is not a percentile between 0 and 100", "write e.g. 5,50,95")
        out.append(v / 100)
    return tuple(out)


def _fmt(v: float) -> str:
    from dsl.engine.units import format_number
    return format_number(v)


def eval_odds(ws, plans: list[str], args) -> dict:
    """{plan: odds JSON} for `plan eval --samples` (with Sobol indices under ``sobol``)."""
    from dsl.results.odds import sample_plan, sobol
    qs = parse_quantiles(args.quantiles)
    out = {}
    for p in plans:
        o = sample_plan(ws, p, args.samples, args.seed)
        j = o.to_json(qs)
        if args.sobol:
            from dsl.cli.common import cmdline
            nid = cmdline(ws.lookup, args.sobol if "." in args.sobol else f"{p}.{args.sobol}")
            j["sobol"] = {"quantity": nid, "indices": sobol(ws, p, nid, seed=args.seed)}
        out[p] = j
    return out


def render_odds(odds: dict, qs: tuple) -> str:
    """The text section of `plan eval --samples`: per plan, the percentiles of each headline
    that varies, then each requirement's probability."""
    from dsl.results.odds import label
    lines = []
    for p, j in odds.items():
        lines.append(f"odds of {p} ({j['samples']:,} samples, seed {j['seed']}; uncertain: "
                     + (", ".join(u.removeprefix(p + ".") for u in j["uncertain"]) or "none") + ")")
        cols = [label(q) for q in qs]
        rows = [(n, v["unit"] or "", [v[c] for c in cols]) for n, v in j["quantiles"].items()
                if max(v[c] for c in cols) - min(v[c] for c in cols) > 1e-9 * max(abs(v[c]) for c in cols)]
        if rows:
            w = max(len(r[0]) for r in rows)
            uw = max(len(r[1]) for r in rows)
            lines.append(f"  {'quantity':<{w}}  {'unit':<{uw}}  " + "  ".join(f"{c:>9}" for c in cols))
            for n, u, vals in rows:
                lines.append(f"  {n:<{w}}  {u:<{uw}}  " + "  ".join(f"{_fmt(v):>9}" for v in vals))
        for n, r in j["requirements"].items():
            lines.append(f"  P({n}) = {r['probability']:.4f} ± {r['stderr']:.4f}")
        if "sobol" in j:
            lines.append(f"  Sobol indices of {j['sobol']['quantity'].removeprefix(p + '.')} (first, total):")
            for i, s in j["sobol"]["indices"].items():
                lines.append(f"    {i.removeprefix(p + '.'):<28} {s['first']:.3f}  {s['total']:.3f}")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def get_odds(ws, args, emit, display_conversion) -> int:
    """`plan get FILE NAME --quantile Q` / `plan get FILE PLAN.REQUIREMENT --probability`;
    ``emit`` prints the answer and ``display_conversion`` (that of plain `plan get`) writes a
    quantile in ``--in`` UNIT, across currencies with ``--rate``."""
    from dsl.cli.common import cmdline
    from dsl.results.odds import sample_plan
    if args.probability:
        plan, _, req = args.name.partition(".")
        if ws.kind(plan) != "plan" or ws.requirement(plan, req) is None:
            raise UsageError("usage", f"'{args.name}' is not a requirement of a plan",
                             "--probability reads PLAN.REQUIREMENT, e.g. gpus48.meets_deadline")
        o = sample_plan(ws, plan, args.samples, args.seed, outputs=[])
        return emit(args, o.probability(req))
    if not 0 < args.quantile < 1:
        raise UsageError("usage", f"--quantile {args.quantile:g} is not between 0 and 1", "e.g. --quantile 0.95")
    nid = cmdline(ws.lookup, args.name)
    n = ws.nodes[nid]
    plan = n.owner if ws.kind(n.owner) == "plan" else None
    if plan is None or not n.numeric:
        raise UsageError("usage", f"'{args.name}' is not a number of a plan", "e.g. gpus48.finish_time")
    shown, unit = display_conversion(ws, nid, args.unit or None, getattr(args, "rates", ()))   # as plain `plan get`
    o = sample_plan(ws, plan, args.samples, args.seed, outputs=[nid])
    return emit(args, float(shown(o.quantile(nid, args.quantile))), unit)


_QUERY = re.compile(r"\s*([A-Za-z_][\w.]*)\s+for\s+([A-Za-z_][\w.]*)\s*>=\s*([0-9.]+)\s*(%?)\s*")


def solve_probability(ws, args) -> int:
    """`plan solve FILE --probability "gpus48.gpus for meets_deadline >= 90 %"`."""
    import json

    from dsl.cli.common import cmdline
    from dsl.results.odds import fewest_for_probability
    m = _QUERY.fullmatch(args.probability)
    if not m:
        raise UsageError("usage", f"--probability: cannot read '{args.probability[:60]}'",
                         "write \"TARGET for REQUIREMENT >= P\", e.g. \"gpus48.gpus for meets_deadline >= 90 %\"")
    target = cmdline(ws.lookup, m.group(1))
    req = m.group(2).rpartition(".")[2]
    p = float(m.group(3)) / (100 if m.group(4) else 1)
    if not 0 < p < 1:
        raise UsageError("usage", f"--probability: {m.group(3)}{m.group(4)} is not a probability strictly "
                         "between 0 and 1", "write e.g. 90 % or 0.9")
    r = fewest_for_probability(ws, target, req, p, args.samples, args.seed)
    if args.format == "json":
        print(json.dumps(r, indent=2, sort_keys=True))
    else:
        print(f"{r['target']} for P({r['requirement']}) >= {p:g}  ({args.samples:,} samples, seed {args.seed})")
        for t in r["tried"]:
            what = (f"P = {t['probability']:.4f} ± {t['stderr']:.4f}" if "probability" in t
                    else f"left out: {t['skipped']}")
            print(f"  {r['target'].rpartition('.')[2]} = {t['value']}: {what}")
        if r["answer"] is None:
            print("  no candidate value reaches the probability", file=sys.stderr)
        else:
            print(f"  answer: {r['target']} = {r['answer']} (P = {r['probability']:.4f})")
    return EXIT_OK if r["answer"] is not None else EXIT_PLAN

"""The commands about the project's files and installation rather than a plan's numbers: ``plan
fmt`` (the canonical layout of .plan files) and ``plan plugins`` (the installed plugins, their
blocks, tables and figures).  ``plan init`` (a starter project) is a plugin's command
(plugins/starter.py)."""
from __future__ import annotations

import json
import sys

from dsl.cli.common import EXIT_OK, EXIT_PLAN, disabled, write_output


def cmd_fmt(args) -> int:
    from pathlib import Path

    from dsl.syntax.diagnostics import PlanError, render
    from dsl.syntax.format import format_source

    unformatted, errors = [], 0
    for f in args.files:
        if f == "-":
            try:
                text = sys.stdin.buffer.read().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            except UnicodeDecodeError as e:
                print(f"plan: error[encoding]: standard input is not UTF-8 text (byte {e.object[e.start]:#04x})\n"
                      "  hint: save the file as UTF-8", file=sys.stderr)
                errors += 1
                continue
            try:
                out = format_source(text, "<stdin>")
            except PlanError as e:
                for d in e.diagnostics:
                    print(render(d), file=sys.stderr)
                errors += 1
                continue
            if args.check:
                if out != text:
                    unformatted.append("<stdin>")
            else:
                sys.stdout.write(out)
            continue
        try:
            text = Path(f).read_text(encoding="utf-8")
        except OSError as e:
            print(f"plan: error[missing-file]: cannot read '{f}': {e.strerror}", file=sys.stderr)
            errors += 1
            continue
        except UnicodeDecodeError as e:
            print(f"plan: error[encoding]: '{f}' is not UTF-8 text (byte {e.object[e.start]:#04x})\n"
                  "  hint: save the file as UTF-8", file=sys.stderr)
            errors += 1
            continue
        try:
            out = format_source(text, f)
        except PlanError as e:
            for d in e.diagnostics:
                print(render(d), file=sys.stderr)
            errors += 1
            continue
        if out != text:
            unformatted.append(f)
            if not args.check:
                write_output(Path(f), lambda p: p.write_text(out, encoding="utf-8"))
                print(f"formatted {f}", file=sys.stderr)
    if args.check and unformatted:
        for f in unformatted:
            print(f"would reformat {f}", file=sys.stderr)
    if errors:
        return EXIT_PLAN
    return EXIT_PLAN if (args.check and unformatted) else EXIT_OK


def cmd_plugins(args) -> int:
    from dsl.plugin.manager import get_plugins

    pl = get_plugins(blocked=disabled())
    for w in pl.warnings:
        print(f"warning: {w}", file=sys.stderr)
    blocks = sorted(pl.blocks.values(), key=lambda s: (s.order, s.name))
    if args.format == "json":
        print(json.dumps({"plugins": pl.names, "blocks": [
            {"name": b.name, "plugin": b.plugin, "doc": b.doc,
             "params": [vars(p) | {"choices": list(p.choices)} for p in b.params],
             "plan_params": [vars(p) | {"choices": list(p.choices)} for p in b.plan_params],
             "provides": list(b.provides), "references": list(b.references)} for b in blocks],
            "tables": [{"name": n, "title": t.title, "plugin": t.plugin, "references": list(t.references),
                        "per_plan": t.per_plan, "default": t.default, "hidden_with": list(t.hidden_with)}
                       for n, t in sorted(pl.tables.items())],
            "figures": [{"name": n, "title": f.title, "plugin": f.plugin, "references": list(f.references)}
                        for n, f in sorted(pl.figures.items())]},
            indent=2, sort_keys=True, default=str))
        return EXIT_OK
    lines = ["plugins: " + ", ".join(pl.names), ""]
    for b in blocks:
        lines.append(f"use {b.name} {{ … }}  — {b.doc}  [plugin {b.plugin}]")
        rows = [("parameter", "unit", "default", "meaning")]
        for where, params in (("", b.params), ("plan.", b.plan_params)):
            for p in params:
                unit = {"choice": "choice", "ref": p.ref_kind or "ref", "bool": "bool", "string": "string",
                        "file": "file"}.get(p.kind) or (
                    ({"string": "list of strings", "ref": f"list of {p.ref_kind or 'ref'}"}.get(
                        p.item, f"list of {p.unit or '1'}")) if p.kind == "list"
                    else p.unit or {"int": "int"}.get(p.kind, "1"))
                default = "required" if p.default is None and not p.optional else (p.default or "optional")
                meaning = p.doc + (f" ({', '.join(p.choices)})" if p.choices else "")
                rows.append((where + p.name, unit, default, meaning))
        w = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            lines.append("    " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r[:3])) + "  " + r[3])
        if b.provides:
            lines.append("    provides: " + ", ".join(b.provides))
        lines.append("")
    for what, specs in (("tables", pl.tables), ("figures", pl.figures)):
        if specs:
            lines.append(f"{what} (shown by " + ("`plan eval` and `plan report`" if what == "tables" else
                                                 "`plan report` and `plan figure`") + "):")
            lines.extend(f"    {n}  — {s.title}  [plugin {s.plugin}]" for n, s in sorted(specs.items()))
            lines.append("")
    lines.append("`plan.NAME` rows are fields of the plan itself, shared by the blocks that read them.")
    print("\n".join(lines).rstrip())
    return EXIT_OK

"""The ``plan`` command line's grammar: the argparse parser of the core commands, the commands
plugins add (:class:`dsl.plugin.CommandSpec`) and the options every command accepts.  Nothing
here runs a command (:mod:`dsl.cli.program` dispatches)."""
from __future__ import annotations

import argparse

from dsl.engine.executor import add_arguments as add_engine_arguments

MANY = ("FILE may be a folder, or several files: each .plan file under it is a separate task (in "
        "sorted order, the same output whatever --engine and --workers run them; the exit code is "
        "the worst file's).")


def _count(least: int):
    """argparse type: a whole number >= ``least`` (a bad one is a usage error, exit 2)."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = None
        if n is None or n < least:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {text!r}")
        return n
    parse.__name__ = "count"
    return parse


def build_parser(commands: dict | None = None) -> argparse.ArgumentParser:
    """The argument parser: core commands plus ``commands`` (name -> CommandSpec) from plugins."""
    p = argparse.ArgumentParser(
        prog="plan",
        description="Evaluate .plan files: will this training design fit, and will it finish in time?",
        epilog="Exit codes: 0 ok, 1 a problem in the plan (or, with --strict, a failed requirement), 2 a bad "
               "command line, 3 a missing optional package.  See docs/language.md.")
    p.add_argument("--version", action="version", version="plan 0.1.0")
    p.add_argument("--disable-plugin", dest="disable_plugin", action="append", default=[], metavar="NAME",
                   help="do not load plugin NAME (repeatable; also PLAN_DISABLE_PLUGINS=a,b); "
                        "`plan plugins` lists the names")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    e = sub.add_parser("eval", help="evaluate every plan: headline quantities, requirements, critical path",
                       description="Evaluate the plans declared in FILE (imported plans only when named with "
                                   "--plan, or when FILE declares none) and print their headline quantities "
                                   "with units, requirements (memory fits, deadline met), the answers of "
                                   "named solves (`solve NAME: …`) and the step's critical path.  " + MANY)
    e.add_argument("file", metavar="FILE", nargs="+", help="a .plan file, or folders and files (see above)")
    add_engine_arguments(e)
    e.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    e.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable)")
    e.add_argument("--in", dest="units", action="append", metavar="UNIT", default=[],
                   help="show every quantity of UNIT's dimension in UNIT (repeatable: --in day --in GB)")
    e.add_argument("--strict", action="store_true",
                   help="exit 1 when a requirement is violated (deadline missed, memory exceeded)")
    e.add_argument("--tables", choices=("default", "all", "none"), default=None,
                   help="plugin tables to show: default (those that answer the plans' question; a table "
                        "shared by several plans once), all, or none.  JSON lists every table unless "
                        "this is given")
    e.add_argument("--sources", action="store_true",
                   help="also show the references (papers, chapters, measurements) behind the shown "
                        "quantities, the blocks the plans use and the tables shown")

    e.add_argument("--samples", type=_count(2), metavar="N",
                   help="also sample the uncertain inputs (those written as distributions) N times: "
                        "percentiles of every headline and the probability each requirement holds")
    e.add_argument("--seed", type=int, default=0, help="random seed of --samples (default 0; the same seed "
                                                       "gives byte-identical output)")
    e.add_argument("--quantiles", metavar="LIST", default="5,50,95",
                   help="percentiles --samples reports, e.g. 5,50,95 (default) or 10,90")
    e.add_argument("--sobol", metavar="NAME",
                   help="with --samples: first-order and total Sobol indices of quantity NAME (e.g. "
                        "finish_time) over the uncertain inputs (needs scipy >= 1.11)")

    g = sub.add_parser("get", help="print one quantity as a bare number (for scripts and CI)",
                       description="Print the nominal value of NAME (plan.quantity, plan.block.param or "
                                   "declaration.field) as a bare number, in the unit `plan eval` shows for it "
                                   "(GiB, day, % …) unless --in UNIT is given; scripts should pass --in. "
                                   "A named solve (`solve min_mfu: …`) prints its answer; a requirement "
                                   "(plan.meets_deadline, or a file-level `require` by its name) prints true or false.")
    g.add_argument("file", metavar="FILE")
    g.add_argument("name", metavar="NAME", help="e.g. gpus48.finish_time, qwen3_8b.params, a named solve such as "
                                                "min_mfu, or a requirement such as gpus48.meets_deadline "
                                                "(prints true/false)")
    g.add_argument("--in", dest="unit", metavar="UNIT", help="unit to print in, e.g. day, GiB, s, %%")
    g.add_argument("--rate", dest="rates", action="append", default=[], metavar="RATE",
                   help="an exchange rate for --in across currencies, e.g. --in EUR --rate '0.92 EUR/USD' "
                        "(a value in USD, or in USD/h, is multiplied by it); repeatable")
    g.add_argument("--expr", action="store_true",
                   help="print the symbolic expression of NAME in terms of the declared inputs (base units)")
    g.add_argument("--quantile", type=float, metavar="Q",
                   help="the Q quantile (0..1, e.g. 0.95) of NAME over the uncertain inputs, by sampling")
    g.add_argument("--probability", action="store_true",
                   help="for a requirement (PLAN.REQUIREMENT): the probability that it holds, by sampling")
    g.add_argument("--samples", type=_count(2), default=100_000, metavar="N",
                   help="samples of --quantile/--probability (default 100000)")
    g.add_argument("--seed", type=int, default=0, help="random seed of --quantile/--probability (default 0)")
    g.add_argument("--with-unit", action="store_true",
                   help="print the unit after the number (24.64 day); scripts that read the number alone omit it")
    g.add_argument("--format", choices=("text", "json"), default="text",
                   help="json prints {\"name\", \"value\", \"unit\"} (a requirement: value true/false, unit null)")

    c = sub.add_parser("check", help="parse, resolve names, build the graph and check units; compute no value",
                       description="Parse FILE and its imports, resolve names, extends and imports, build "
                                   "the plugins' graph and check every unit and reference; no value is computed.  "
                                   + MANY)
    c.add_argument("file", metavar="FILE", nargs="+", help="a .plan file, or folders and files (see above)")
    add_engine_arguments(c)
    c.add_argument("--format", choices=("text", "json"), default="text")
    c.add_argument("--strict", action="store_true",
                   help="also evaluate, and exit 1 when a requirement fails (a plan's, or a file-level "
                        "`require` on a named solve's answer), naming it, its margin and the inputs that "
                        "drive it (a CI gate)")
    c.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable; with --strict)")

    s = sub.add_parser("solve", help="answer break-even queries (`solve X for LHS == RHS`)",
                       description="Answer the file's `solve` queries, or QUERY given on the command line "
                                   "as 'TARGET for LHS == RHS' (also <=, >=, <, >).")
    s.add_argument("file", metavar="FILE")
    s.add_argument("--query", metavar="QUERY", help="e.g. \"gpus32.mfu for gpus32.finish_time == cpt.deadline\"")
    s.add_argument("--in", dest="unit", metavar="UNIT", help="unit of the answers (default: the target's unit)")
    s.add_argument("--probability", metavar="QUERY",
                   help="the least whole value of TARGET at which a requirement holds with at least a "
                        "probability over the uncertain inputs: \"gpus48.gpus for meets_deadline >= 90 %%\"")
    s.add_argument("--samples", type=_count(2), default=100_000, metavar="N",
                   help="samples per candidate of --probability (default 100000)")
    s.add_argument("--seed", type=int, default=0, help="random seed of --probability (default 0)")
    s.add_argument("--format", choices=("text", "json"), default="text")

    f = sub.add_parser("figure", help="draw the plugins' figures (Gantt charts, memory, curves) to files",
                       description="Draw every figure the plugins offer for the plans in FILE (or only --name) "
                                   "into DIR as PLAN-NAME.FORMAT.  Needs matplotlib "
                                   "(pip install \"plan-dsl[plot]\").")
    f.add_argument("file", metavar="FILE")
    f.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable)")
    f.add_argument("--name", action="append", metavar="FIGURE", help="only this figure (repeatable); see --list")
    f.add_argument("-o", "--out", metavar="DIR", default=".", help="output directory (default: current)")
    f.add_argument("--format", choices=("svg", "png", "pdf"), default="svg")
    f.add_argument("--list", action="store_true", help="list the figures that apply to FILE's plans (with the "
                                                         "plans) and exit")

    t = sub.add_parser("timeline", help="print a plan's timeline as a compact text Gantt chart",
                       description="Print each timeline of the plans in FILE (a training step, a pipeline "
                                   "schedule, a checkpoint stream …) as one row per resource, one letter per "
                                   "kind of work, with the makespan and the critical path.")
    t.add_argument("file", metavar="FILE")
    t.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable)")
    t.add_argument("--timeline", metavar="NAME", help="only this timeline (default: all)")
    t.add_argument("--width", type=_count(1), default=100, help="columns of the chart (default 100)")
    t.add_argument("--in", dest="unit", metavar="UNIT", default=None, help="time unit (default: ms or s)")

    r = sub.add_parser("report", help="sensitivity report: formulas, inputs, elasticities, break-evens, figures",
                       description="Per plan: headline values and formulas, inputs with ranges and sources, "
                                   "partial derivatives and elasticities, a tornado chart over the declared ranges, "
                                   "the value of every input at which each requirement flips, the critical path "
                                   "with slack, and every plugin table and figure.  HTML is one self-contained "
                                   "file (inline SVG and MathML); Markdown suits PR comments.")
    r.add_argument("file", metavar="FILE")
    r.add_argument("--format", choices=("html", "md", "text"), default=None,
                   help="default: from the suffix of -o (.html, .md), else text")
    r.add_argument("-o", "--out", metavar="PATH", help="write to PATH instead of standard output")
    r.add_argument("--plan", action="append", metavar="NAME", help="only this plan (repeatable)")

    d = sub.add_parser("diff", help="what changed between two plans: inputs, outputs, flipped requirements",
                       description="Compare OLD and NEW, each [REV:]PATH[#PLAN]: a .plan file, the file as of "
                                   "git revision REV (its imports as of the same revision), and optionally one "
                                   "plan of it (x.plan#gpus48 x.plan#gpus32).  Shows changed inputs, changed "
                                   "headline outputs with absolute and relative deltas, and the requirements "
                                   "that flipped.")
    d.add_argument("old", metavar="OLD")
    d.add_argument("new", metavar="NEW")
    d.add_argument("--format", choices=("text", "md", "json"), default="text")

    w = sub.add_parser("sweep", help="evaluate a plan over a grid or random samples of inputs (numpy)",
                       description="Vary inputs (NAME=START:STOP:N, values with units, e.g. gpus48.mfu=30%:50%:21; "
                                   "NAME=[V1, V2, …] for listed values, e.g. 'p.layout.tp=[1, 2, 4, 8]'; "
                                   "NAME alone uses its declared range) and evaluate the plan's headline quantities "
                                   "and requirements at every point, compiled once with lambdify and vectorised "
                                   "with numpy.  A value that shapes the plan (a tp degree) re-evaluates it; where "
                                   "the plan cannot be built at a value, those points are infeasible and the "
                                   "summary gives the reason; those evaluations run on --engine/--workers, with the "
                                   "same result.  Prints a feasibility summary; --out writes every point as CSV.")
    w.add_argument("file", metavar="FILE")
    w.add_argument("--vary", action="append", metavar="NAME=START:STOP:N", required=True,
                   help="a varied input, START:STOP:N or a list [V1, V2, …] (repeatable: the grid is the product)")
    w.add_argument("--plan", action="append", metavar="NAME", help="plan to evaluate (default: the plan of "
                                                                     "the varied names, else the file's plans)")
    w.add_argument("--random", type=_count(1), metavar="COUNT", help="COUNT uniform random samples instead of a grid")
    w.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    w.add_argument("--out", metavar="CSV", help="write every point to CSV")
    w.add_argument("--format", choices=("text", "json"), default="text")
    add_engine_arguments(w)     # the evaluations of structural values are its tasks

    fm = sub.add_parser("fmt", help="format .plan files canonically (comments kept)",
                        description="Rewrite each FILE in the canonical layout: one member group per line, "
                                    "two-space indents, single spaces around operators, minimal parentheses, "
                                    "blank-line runs collapsed, comments kept.  Idempotent.  '-' reads standard "
                                    "input and writes standard output.")
    fm.add_argument("files", nargs="+", metavar="FILE")
    fm.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 listing the files that are not formatted (for CI)")

    x = sub.add_parser("explain", help="the derivation tree of a quantity down to the inputs",
                       description="Print how NAME (plan.quantity) is derived: at each node its value, the "
                                   "plugin or declaration that defines it, its formula over the nodes below, its "
                                   "documentation and references and, for inputs, range and source; for a requirement "
                                   "(plan.requirement, or a file-level require by its name) its verdict and both sides' trees.")
    x.add_argument("file", metavar="FILE")
    x.add_argument("name", metavar="NAME", help="e.g. gpus48.finish_time, or a requirement such as "
                                                "gpus48.meets_deadline (both of its sides explained)")
    x.add_argument("--depth", type=_count(0), metavar="N", help="stop N levels below NAME")
    x.add_argument("--format", choices=("text", "json"), default="text")

    gr = sub.add_parser("graph", help="the quantity and activity graph of a plan (dot, mermaid, svg)",
                        description="Export the dependency graph of a plan's quantities and activities: "
                                    "Graphviz dot, Mermaid (renders in GitHub Markdown) or SVG (matplotlib).  "
                                    "--quantity keeps only what one quantity depends on.")
    gr.add_argument("file", metavar="FILE")
    gr.add_argument("--plan", metavar="NAME", help="the plan (default: the file's first plan)")
    gr.add_argument("--quantity", metavar="NAME", help="only the ancestors of this quantity (plan.quantity, or "
                                                         "quantity of the --plan)")
    gr.add_argument("--format", choices=("dot", "mermaid", "svg"), default="dot")
    gr.add_argument("-o", "--out", metavar="PATH", help="write to PATH instead of standard output")

    ls = sub.add_parser("lsp", help="a language server for editors (diagnostics, hover, outline, formatting)",
                        description="Serve the Language Server Protocol on standard input and output: the "
                                    "diagnostics of `plan check` as you type, hover (value, formula, plugin), go to "
                                    "definition, document symbols, formatting (`plan fmt`) and completion.  Needs "
                                    "pygls (pip install \"plan-dsl[lsp]\").  See docs/editors.md.")
    ls.add_argument("--stdio", action="store_true", help="accepted for editors that pass it (stdio is the default)")
    pl = sub.add_parser("plugins", help="list installed plugins and the `use` blocks they provide",
                        description="List plugins, their `use` blocks and each parameter's unit and default.")
    pl.add_argument("--format", choices=("text", "json"), default="text")
    for name, spec in sorted((commands or {}).items()):
        if name in sub.choices:     # a plugin command cannot replace a core command
            continue
        c = sub.add_parser(name, help=spec.help, description=spec.description or spec.help,
                           epilog=f"This command comes from plugin '{spec.plugin}'.")
        spec.add_arguments(c)
    # global options, accepted before or after the command
    for parser, default in [(p, None)] + [(sp_, argparse.SUPPRESS) for sp_ in sub.choices.values()]:
        parser.add_argument("--limit", action="append", metavar="NAME=VALUE",
                            default=[] if default is None else default,
                            help="raise a limit for this run, e.g. --limit imports=5000 (repeatable; "
                                 "see docs/security.md; also the PLAN_LIMITS environment variable)")
        parser.add_argument("--allow-outside-root", action="store_true",
                            default=False if default is None else default,
                            help="read imports, configs and data files outside the project root, "
                                 "and symbolic links")
    return p

"""`plan diff OLD NEW`: what a change to a plan changes.

Each side is ``[REV:]PATH[#PLAN]``:

* ``PATH`` — a `.plan` file in the working tree;
* ``REV:PATH`` — the file as of git revision ``REV`` (``HEAD:specs/cases/x.plan``,
  ``main~1:x.plan``); the revision's whole tree is exported to a temporary directory with
  ``git archive`` so that its imports are read as of the same revision; ``PATH`` is relative
  to the current directory, as in ``git show REV:./PATH``;
* ``#PLAN`` — compare this one plan (``x.plan#gpus48 x.plan#gpus32`` compares two plans of
  one file); without it, plans are paired by name.

Reported per pair of plans: changed inputs (literal fields of the plan and of the
declarations it uses, with `use` block parameters), changed headline outputs with absolute
and relative deltas, and requirements that flipped (ok → FAIL or back).  Values are compared
exactly (sympy rationals), shown in the new side's display units.
"""
from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dsl.syntax.diagnostics import Diagnostic, PlanError
from dsl.engine.units import convert, format_number, format_quantity


@dataclass
class Side:
    label: str
    ws: object
    plan: str | None


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=str(cwd), capture_output=True, timeout=60)


def load_side(spec: str, tmp: Path) -> Side:
    """Load one side of a diff (see the module docstring).

    :raises PlanError: ``error[diff]`` when the file or revision does not exist.
    """
    from dsl.results.evaluation import evaluate_file as Workspace

    path, _, plan = spec.partition("#")
    plan = plan or None
    if Path(path).exists():
        return Side(spec, Workspace(path), plan)
    rev, sep, rel = path.partition(":")
    if not sep or not rev or not rel:
        raise PlanError([Diagnostic("error", "diff", f"'{path}' does not exist",
                                    None, "give a .plan file or REV:PATH (a file as of a git revision)")])
    if rev.startswith("-") or any(c in rev for c in "\0\n"):   # never an option to git
        raise PlanError([Diagnostic("error", "diff", f"'{rev}' is not a revision", None,
                                    "a revision is a commit, branch or tag name (HEAD, main, v1.2, HEAD~3)")])
    cwd = Path.cwd()
    top = _git(["rev-parse", "--show-toplevel"], cwd)
    if top.returncode != 0:
        raise PlanError([Diagnostic("error", "diff", f"'{spec}': not inside a git repository", None,
                                    "REV:PATH reads a file from git; run plan diff inside the repository")])
    root = Path(top.stdout.decode().strip())
    try:
        relpath = (cwd / rel).resolve().relative_to(root.resolve())   # cwd / an absolute rel is rel
    except ValueError:
        raise PlanError([Diagnostic("error", "diff", f"'{rel}' in '{spec}' is outside the git repository "
                                    f"{root}", None, "REV:PATH names a file of the repository you run "
                                    "plan diff in (PATH relative to the current directory)")]) from None
    if _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], root).returncode != 0:
        raise PlanError([Diagnostic("error", "diff", f"'{rev}' in '{spec}' is not a revision of the repository {root}",
                                    None, "a revision is a commit, branch or tag (`git log --oneline` lists them); "
                                    "HEAD~N counts N commits back")])
    show = _git(["cat-file", "-e", f"{rev}:{relpath.as_posix()}"], root)
    if show.returncode != 0:
        raise PlanError([Diagnostic("error", "diff", f"'{relpath.as_posix()}' does not exist at revision "
                                    f"'{rev}'", None, "check the revision (git log) and the path")])
    arch = _git(["archive", "--format=tar", "--end-of-options", rev], root)
    if arch.returncode != 0:  # pragma: no cover - cat-file succeeded, so the revision exists
        raise PlanError([Diagnostic("error", "diff", arch.stderr.decode().strip(), None, "")])
    dest = Path(tempfile.mkdtemp(prefix="rev-", dir=tmp))
    with tarfile.open(fileobj=io.BytesIO(arch.stdout)) as tf:
        tf.extractall(dest, filter="data")
    return Side(spec, Workspace(dest / relpath), plan)


def _inputs(ws, plan: str) -> dict[str, str]:
    """Literal fields a plan depends on, as display text: the plan's own fields and block
    parameters (keyed without the plan prefix) and the fields of the declarations its
    quantities read (keyed by their full name)."""
    out: dict[str, str] = {}
    deps: set[str] = set()
    for n in ws.nodes.values():
        if n.owner == plan and n.expr is not None:
            deps.update(s.name for s in ws.full_expr(n.id).free_symbols)
    for nid, n in ws.nodes.items():
        if n.kind != "field":
            continue
        if n.owner == plan:
            key = nid[len(plan) + 1:]
        elif nid in deps:
            key = nid
        else:
            continue
        if n.numeric:
            if not n.input:
                continue
            out[key] = format_quantity(float(n.nominal), n.unit)
        elif n.value is not None:
            from dsl.present.explain import show_value
            out[key] = show_value(ws, nid)      # lists as `[1 s, 2 s]`, never a Python repr
    return out


def _outputs(ws, plan: str) -> dict[str, tuple]:
    out = {}
    for n in ws.headline(plan):
        v = ws.base_value(n.id)
        if v is not None:
            out[n.name] = (v, n.unit)
    return out


def compare(old: Side, new: Side) -> dict:
    """The differences between two loaded sides: ``{"old", "new", "pairs": [...], "added",
    "removed", "solves", "file_requirements"}``; each pair has ``inputs`` (name, old, new), ``outputs`` (name, unit, old, new,
    delta, relative) and ``requirements`` (name, old_ok, new_ok, flipped, text)."""
    if old.plan or new.plan:
        pa = old.plan or new.plan
        pb = new.plan or old.plan
        for side, p in ((old, pa), (new, pb)):
            if p not in side.ws.plans():
                raise PlanError([Diagnostic("error", "unknown-name", f"no plan '{p}' in {side.label}", None,
                                            "plans: " + ", ".join(side.ws.plans()))])
        pairs = [(pa, pb)]
        added, removed = [], []
    else:
        a, b = old.ws.plans(own=True), new.ws.plans(own=True)
        pairs = [(p, p) for p in a if p in b]
        added, removed = [p for p in b if p not in a], [p for p in a if p not in b]
    res = {"old": old.label, "new": new.label, "pairs": [], "added": added, "removed": removed}
    for pa, pb in pairs:
        ia, ib = _inputs(old.ws, pa), _inputs(new.ws, pb)
        inputs = [{"name": k, "old": ia.get(k), "new": ib.get(k)} for k in sorted(set(ia) | set(ib))
                  if ia.get(k) != ib.get(k)]
        oa, ob = _outputs(old.ws, pa), _outputs(new.ws, pb)
        outputs = []
        for k in list(ob) + [k for k in oa if k not in ob]:
            va, vb = oa.get(k, (None, None))[0], ob.get(k, (None, None))[0]
            if va is not None and vb is not None and va == vb:
                continue
            unit = (ob.get(k) or oa.get(k))[1]
            row = {"name": k, "unit": unit, "old": None if va is None else convert(float(va), unit),
                   "new": None if vb is None else convert(float(vb), unit), "delta": None, "relative": None}
            if va is not None and vb is not None:
                row["delta"] = convert(float(vb - va), unit) if unit not in ("%",) else row["new"] - row["old"]
                row["relative"] = float((vb - va) / abs(va)) if va != 0 else None
            outputs.append(row)
        ra = {r["name"]: r for r in old.ws.requirement_results(pa)}
        rb = {r["name"]: r for r in new.ws.requirement_results(pb)}
        reqs = []
        for k in list(rb) + [k for k in ra if k not in rb]:
            x, y = ra.get(k), rb.get(k)
            r = y or x
            reqs.append({"name": k, "old_ok": None if x is None else x["ok"], "new_ok": None if y is None else y["ok"],
                         "flipped": x is not None and y is not None and x["ok"] != y["ok"],
                         "old": None if x is None else f"{format_quantity(x['lhs_si'], x['unit'])} {x['op']} "
                                                         f"{format_quantity(x['rhs_si'], x['unit'])}",
                         "new": None if y is None else f"{format_quantity(y['lhs_si'], y['unit'])} {y['op']} "
                                                         f"{format_quantity(y['rhs_si'], y['unit'])}",
                         "doc": r["doc"]})
        res["pairs"].append({"old_plan": pa, "new_plan": pb, "inputs": inputs, "outputs": outputs,
                             "requirements": reqs})
    if not (old.plan or new.plan):
        res["solves"], res["file_requirements"] = _file_results(old.ws, new.ws)
    else:
        res["solves"], res["file_requirements"] = [], []
    return res


def _file_results(a, b) -> tuple[list, list]:
    """Named solves whose answer changed (name, query, unit, old, new, delta, relative; answers in
    the new side's unit) and file-level requirements of either side (as for plans)."""
    from dsl.results.solver import file_requirement_results, named_solutions

    sa, sb = named_solutions(a), named_solutions(b)
    solves = []
    for k in list(sb) + [k for k in sa if k not in sb]:
        x, y = sa.get(k), sb.get(k)
        va, vb = (x.answer if x else None), (y.answer if y else None)
        if x is not None and y is not None and va == vb:
            continue
        unit = (y or x).unit
        row = {"name": k, "query": (y or x).query, "unit": unit,
               "old": None if va is None else convert(va, unit), "new": None if vb is None else convert(vb, unit),
               "delta": None, "relative": None}
        if va is not None and vb is not None:
            row["delta"] = row["new"] - row["old"]
            row["relative"] = (vb - va) / abs(va) if va != 0 else None
        solves.append(row)
    ra = {r["name"]: r for r in file_requirement_results(a)}
    rb = {r["name"]: r for r in file_requirement_results(b)}
    reqs = []

    def shown(r):
        if r is None:
            return None
        if r["lhs_si"] is None:
            return r["note"]
        return f"{format_quantity(r['lhs_si'], r['unit'])} {r['op']} {format_quantity(r['rhs_si'], r['unit'])}"
    for k in list(rb) + [k for k in ra if k not in rb]:
        x, y = ra.get(k), rb.get(k)
        reqs.append({"name": k, "old_ok": None if x is None else x["ok"], "new_ok": None if y is None else y["ok"],
                     "flipped": x is not None and y is not None and x["ok"] != y["ok"],
                     "old": shown(x), "new": shown(y), "doc": (y or x)["doc"]})
    return solves, reqs


def _ok(v) -> str:
    return "—" if v is None else ("ok" if v else "FAIL")


def _rel(r) -> str:
    return "—" if r is None else f"{r * 100:+.1f} %"


def _delta(d) -> str:
    return "—" if d is None else ("+" if d > 0 else "") + format_number(d)


def render_text(res: dict) -> str:
    """Terminal text of :func:`compare`'s result."""
    from dsl.present.tables import render_table
    L = [f"plan diff {res['old']} -> {res['new']}"]
    for p in res["pairs"]:
        title = p["new_plan"] if p["old_plan"] == p["new_plan"] else f"{p['old_plan']} -> {p['new_plan']}"
        L += ["", f"plan {title}"]
        if not (p["inputs"] or p["outputs"] or any(r["flipped"] for r in p["requirements"])):
            L.append("  no change")
            continue
        if p["inputs"]:
            L += ["  inputs"] + [f"    {i['name']}: {i['old'] or '(none)'} -> {i['new'] or '(none)'}"
                                 for i in p["inputs"]]
        if p["outputs"]:
            L += ["  " + ln for ln in render_table("outputs", ["quantity", "unit", "old", "new", "delta", "relative"],
                                                    [[o["name"], o["unit"], o["old"], o["new"], _delta(o["delta"]),
                                                      _rel(o["relative"])] for o in p["outputs"]])]
        flips = [r for r in p["requirements"] if r["flipped"] or r["old_ok"] is None or r["new_ok"] is None]
        if flips:
            L.append("  requirements that flipped")
            for r in flips:
                L.append(f"    {r['name']}: {_ok(r['old_ok'])} -> {_ok(r['new_ok'])}   ({r['new'] or r['old']})")
        else:
            L.append("  requirements: none flipped")
    if res.get("solves"):
        from dsl.present.tables import render_table as _rt
        L += [""] + _rt("named solves", ["solve", "unit", "old", "new", "delta", "relative"],
                        [[o["name"], "" if o["unit"] == "1" else o["unit"], o["old"], o["new"], _delta(o["delta"]),
                          _rel(o["relative"])] for o in res["solves"]])
    fl = [r for r in res.get("file_requirements", ()) if r["flipped"] or r["old_ok"] is None or r["new_ok"] is None]
    if fl:
        L += ["", "file requirements that flipped"]
        L += [f"  {r['name']}: {_ok(r['old_ok'])} -> {_ok(r['new_ok'])}   ({r['new'] or r['old']})" for r in fl]
    for p in res["added"]:
        L += ["", f"plan {p}: added"]
    for p in res["removed"]:
        L += ["", f"plan {p}: removed"]
    return "\n".join(L)


def render_markdown(res: dict) -> str:
    """GitHub Markdown of :func:`compare`'s result (for a PR comment)."""
    L = [f"### plan diff `{res['old']}` → `{res['new']}`"]
    for p in res["pairs"]:
        title = p["new_plan"] if p["old_plan"] == p["new_plan"] else f"{p['old_plan']} → {p['new_plan']}"
        L += ["", f"#### plan `{title}`", ""]
        if p["inputs"]:
            L += ["| input | old | new |", "|---|---|---|"]
            L += [f"| `{i['name']}` | {i['old'] or '—'} | {i['new'] or '—'} |" for i in p["inputs"]]
            L.append("")
        if p["outputs"]:
            L += ["| quantity | unit | old | new | Δ | Δ % |", "|---|---|---:|---:|---:|---:|"]
            L += [f"| `{o['name']}` | {o['unit']} | {format_number(o['old']) if o['old'] is not None else '—'} | "
                  f"{format_number(o['new']) if o['new'] is not None else '—'} | {_delta(o['delta'])} | "
                  f"{_rel(o['relative'])} |" for o in p["outputs"]]
            L.append("")
        flips = [r for r in p["requirements"] if r["flipped"]]
        for r in flips:
            icon = "❌" if not r["new_ok"] else "✅"
            L.append(f"- {icon} requirement `{r['name']}` flipped: {_ok(r['old_ok'])} → {_ok(r['new_ok'])} "
                     f"({r['new']})")
        if not flips:
            L.append("- no requirement flipped")
    if res.get("solves"):
        L += ["", "| solve | unit | old | new | Δ | Δ % |", "|---|---|---:|---:|---:|---:|"]
        L += [f"| `{o['name']}` | {'' if o['unit'] == '1' else o['unit']} | "
              f"{format_number(o['old']) if o['old'] is not None else '—'} | "
              f"{format_number(o['new']) if o['new'] is not None else '—'} | {_delta(o['delta'])} | "
              f"{_rel(o['relative'])} |" for o in res["solves"]]
    for r in res.get("file_requirements", ()):
        if r["flipped"]:
            L.append(f"- {'❌' if not r['new_ok'] else '✅'} requirement `{r['name']}` flipped: "
                     f"{_ok(r['old_ok'])} → {_ok(r['new_ok'])} ({r['new']})")
    for p in res["added"]:
        L += ["", f"- plan `{p}` added"]
    for p in res["removed"]:
        L += ["", f"- plan `{p}` removed"]
    return "\n".join(L) + "\n"

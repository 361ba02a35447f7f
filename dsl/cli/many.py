"""``plan eval`` and ``plan check`` over many files (``plan check specs/``, ``plan eval a.plan
b.plan``, as CI does): each ``.plan`` file is a separate task of the executor
(:class:`dsl.engine.executor.Executor`: ``--engine``, ``--workers``, ``--scheduler``), run
exactly as the command on that one file; the outputs are printed in the files' sorted order,
so they are the same whatever runs them and in whatever order the tasks finish.

Text output: each file's standard output under a ``== FILE ==`` line, its diagnostics on
standard error, then a last line on standard error counting the files that failed.  JSON: one
object ``{"files": [{"file", "exit", "output"}]}`` (``output``: the command's JSON for that
file, or null when it printed none).  The exit code is the largest of the files' (0 when all
pass; 1 when a plan has a problem; 2, 3 as for one file).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dsl.cli.common import UsageError


def many_files(paths: list[str]) -> list[str] | None:
    """The ``.plan`` files the command's FILE arguments name, sorted — a folder stands for every
    ``.plan`` file under it (hidden folders left out) — or None when there is one argument
    and it is not a folder (the command on one file, as always)."""
    if len(paths) == 1 and not Path(paths[0]).is_dir():
        return None
    found = set()
    for p in paths:
        path = Path(p)
        if path.is_dir():
            hits = [f for f in path.rglob("*.plan") if f.is_file()
                    and not any(part.startswith(".") for part in f.relative_to(path).parts)]
            if not hits:
                raise UsageError("usage", f"no .plan file under '{p}'", "name a folder that holds .plan files")
            found.update(str(f) for f in hits)
        else:
            found.add(str(path))
    return sorted(found)


def run_many(args, files: list[str], task) -> int:
    """Run ``task(args for one file)`` -> (exit code, stdout, stderr) for each of ``files`` on
    the run's executor (:func:`dsl.engine.executor.current`); print the outputs in order (module docstring); the largest exit
    code."""
    from dsl.engine.executor import current
    import os
    jobs = [argparse.Namespace(**{**vars(args), "file": f, "cwd": os.getcwd()}) for f in files]
    results = current().map(task, jobs)
    fmt = getattr(args, "format", "text")
    records = []
    for f, (rc, out, err) in zip(files, results):
        if fmt == "json":
            try:
                parsed = json.loads(out) if out.strip() else None
            except ValueError:
                parsed = out
            records.append({"file": f, "exit": rc, "output": parsed})
        else:
            sys.stdout.write(f"== {f} ==\n{out}")
            sys.stdout.flush()
        if err:
            sys.stderr.write(err)
    if fmt == "json":
        print(json.dumps({"files": records}, indent=2, sort_keys=True))
    failed = [f for f, (rc, _, _) in zip(files, results) if rc]
    n = len(files)
    print(f"{n} file{'s' if n != 1 else ''}: {n - len(failed)} passed, {len(failed)} failed"
          + (" (" + ", ".join(failed) + ")" if failed else ""), file=sys.stderr)
    return max((rc for rc, _, _ in results), default=0)

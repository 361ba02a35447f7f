"""Fuzzing harness shared by ``tests/test_fuzz.py`` (bounded, in CI) and
``benchmarks/fuzz_long.py`` (10^4–10^5 inputs in worker processes).

* :func:`plan_files` / :func:`gen_plan` — `.plan` files built from the grammar by a seeded
  generator (cheap to draw, so the budget goes into running the CLI): imports
  (catalog, hostile paths), declarations of every kind with `extends` and `from`, fields with
  expressions (extreme numbers, units with exponents, calls, lists, strings, deep nesting),
  `use` blocks with the installed plugins' parameter names, requirements and `solve` queries.
* :func:`mutated_cases` / :func:`mutate_case` — the case files under mutation: tokens replaced by hostile
  ones, lines deleted, duplicated or swapped, characters inserted, a span cut out.
* :func:`run_one` — one input through the real CLI entry (``dsl.cli.main``, output captured)
  under a wall-clock alarm; :func:`verdict` says whether it broke the promise (an exit code
  outside {0, 1, 2}, "internal error" or a traceback in the output, or no answer in time).

Inputs are written under a scratch copy of ``specs/`` (catalog and data) with a
``pyproject.toml``, so relative imports of the case files resolve inside the project root.
"""
from __future__ import annotations

import contextlib
import io
import shutil
import signal
import tempfile
from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
#: the files mutated: the case files, then seeds for blocks no case uses yet (tests/fuzz_seeds/README.md)
CASES = (sorted((REPO / "specs" / "cases").glob("*.plan"))
         + sorted((REPO / "tests" / "fuzz_seeds").glob("*.plan")))


@lru_cache(maxsize=None)
def scratch(slot: int = 0) -> Path:
    """A project root holding a copy of specs/catalog and specs/data; inputs go in cases/.
    Runs that go on at the same time use different ``slot``s (one root each)."""
    root = Path(tempfile.mkdtemp(prefix=f"plan-fuzz-root{slot}-"))
    (root / "pyproject.toml").write_text("", encoding="utf-8")
    shutil.copytree(REPO / "specs" / "catalog", root / "catalog")
    shutil.copytree(REPO / "specs" / "data", root / "data")
    shutil.copytree(REPO / "specs" / "cases", root / "cases")   # siblings some cases import
    return root


class Hang(BaseException):
    """The per-input alarm: a BaseException, so that the CLI's own catch-all does not report a slow
    input as "internal error: Hang" (it is a hang, or a machine too loaded for the budget)."""


_PARSERS: dict = {}   # id(commands) -> (commands, the argparse parser built for them)


def _reused_parser(build):
    """``dsl.cli.arguments.build_parser`` built once per set of plugin commands and then reused: ``main`` builds
    its argparse parser (≈40 sub-commands and options, ≈5 ms) on every call, a quarter of the CPU
    time of a fuzz input, and parsing never changes a parser.  Inputs are what is fuzzed here, not
    the command line (tests/test_cli_consistency.py and the others run ``main`` unchanged)."""
    def parser(commands=None):
        hit = _PARSERS.get(id(commands))
        if hit is None or hit[0] is not commands:
            hit = _PARSERS[id(commands)] = (commands, build(commands))
        return hit[1]
    return parser


def run_one(text: str, argv: list[str], seconds: float = 20.0, name: str = "fuzz.plan", clock: str = "cpu",
            slot: int = 0):
    """Write ``text`` as cases/NAME (under :func:`scratch` ``slot``) and run ``plan ARGV...``
    with ``{file}`` replaced by its path; return (exit code or "hang", stdout, stderr).

    The alarm counts ``seconds`` of the process's CPU time (``clock="cpu"``, the default: a
    process starved by others on a loaded machine is not a hang), or of wall-clock time
    (``clock="real"``).
    The command line is parsed by a parser built once (:func:`_reused_parser`), for this call only."""
    import dsl.cli.arguments
    from dsl.syntax import limits
    from dsl.cli import main

    timer, sig = (signal.ITIMER_PROF, signal.SIGPROF) if clock == "cpu" else (signal.ITIMER_REAL, signal.SIGALRM)
    path = scratch(slot) / "cases" / name
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    args = [str(path) if a == "{file}" else a for a in argv]
    out, err = io.StringIO(), io.StringIO()

    def expired(signum, frame):
        raise Hang()
    old = signal.signal(sig, expired)
    build = dsl.cli.arguments.build_parser     # the one name main reads it by
    dsl.cli.arguments.build_parser = _reused_parser(build)
    signal.setitimer(timer, seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(args)
            except SystemExit as e:
                rc = e.code
    except Hang:
        rc = "hang"
    finally:
        signal.setitimer(timer, 0)
        signal.signal(sig, old)
        dsl.cli.arguments.build_parser = build
        limits.set_limits(None)
    return rc, out.getvalue(), err.getvalue()


def verdict(rc, out: str, err: str) -> str | None:
    """None when the run kept the promise, else the kind of failure."""
    if rc == "hang":
        return "hang"
    if rc not in (0, 1, 2):
        return f"exit {rc}"
    for text in (out, err):
        if "internal error" in text:
            return "internal error"
        if "this is a bug in plugin" in text:      # a plugin's own exception, shown as a plugin bug
            return "plugin bug"
        if "Traceback (most recent call last)" in text:
            return "traceback"
    return None


# ---------------------------------------------------------------- vocabulary
@lru_cache(maxsize=None)
def _blocks() -> tuple:
    from dsl.plugin.manager import get_plugins
    p = get_plugins()
    return tuple((name, tuple(x.name for x in spec.params)) for name, spec in sorted(p.blocks.items()))


@lru_cache(maxsize=None)
def _kinds() -> tuple:
    from dsl.resolve.declarations import CORE_KINDS
    from dsl.plugin.manager import get_plugins
    return tuple(sorted(set(CORE_KINDS) | set(get_plugins().kinds)))


UNITS = ["s", "ms", "h", "day", "GB", "GiB", "MiB", "B", "GB/s", "TFLOP/s", "FLOP", "token", "%", "USD/h",
         "s^-1", "GB^2", "GB^99", "s^999999", "nope", "B/param", "W", "param"]
NUMBERS = ["0", "1", "2", "10", "0.5", "1e300", "1e-300", "1e309", "123456789012345678901234567890",
           "1_024", ".5", "7e3", "4294967297", "1000000000", "3.0e12", "1e999999999"]
NAMES = ["a", "b", "c", "x", "gpus", "mfu", "model", "device", "tokens", "layers", "p", "q", "tru",
         "__import__", "eval", "oo", "zoo", "I", "qwen3_8b", "rtx4090", "h100"]
FUNCS = ["min", "max", "ceil", "floor", "sqrt", "log", "exp", "abs", "nope"]
PATHS = ["@catalog/hardware.plan", "@catalog/models.plan", "../catalog/hardware.plan", "/etc/passwd",
         "../../../../etc/hostname", "@catalog/../../../../etc/hostname", "/dev/zero", "/dev/urandom",
         "missing.plan", "a\\0.plan", "fuzz.plan", "/proc/self/environ"]
STRINGS = ["", "x", "1f1b", "fp32", "bf16", "selective", "none", "$x^$", "<script>alert(1)</script>",
           "../data/traces/azure-llm-2023-conv.csv", "/etc/passwd", "../catalog/hf/Qwen3-8B.json",
           "a.b", "🙂", "\\n", "\\\""]
HOSTILE = ["^", "^ ^", "1e309", "0", "-1", "tru", "(", ")", "[", "]", "{", "}", '"', "\\", "sqrt(-1)",
           "log(0)", "1e300 ^ 1e300", "10 ^ 10 ^ 10", "GB^99999999999", "1 s^99999999999", "-" * 300,
           "(" * 300, "1 / 0", "max(1, sqrt(-1))", "1000000000", "1.2e29", '"/etc/passwd"', "\0", "\ufeff",
           "४२", "÷", ";", "\n", "use", "require", "import", "extends", "from", "solve", "in [0, 1]",
           'source "x"', "== ", "<=", "x.y.z", "@catalog/", "nan", "inf", "_", "1_", "1e", ".", "%"]


def gen_expr(r, depth: int = 0) -> str:
    """A random expression of the grammar (``r`` is a :class:`random.Random`)."""
    if r.random() < 0.01:
        return r.choice(HOSTILE)
    k = r.randrange(9) if depth < 5 else r.randrange(4)
    if k == 0:
        return r.choice(NUMBERS) + (" " + r.choice(UNITS) if r.random() < 0.5 else "")
    if k == 1:
        return ".".join(r.choice(NAMES) for _ in range(r.randint(1, 3)))
    if k == 2:
        return f'"{r.choice(STRINGS)}"'
    if k == 3:
        return r.choice(["true", "false", r.choice(NUMBERS)])
    if k <= 5:
        return f"{gen_expr(r, depth + 1)} {r.choice('+-*/^')} {gen_expr(r, depth + 1)}"
    if k == 6:
        if r.random() < 0.5:
            return "(" + gen_expr(r, depth + 1) + (")" if r.random() < 0.99 else "")
        return r.choice(["-", "+"]) + gen_expr(r, depth + 1)
    if k == 7:
        return f"{r.choice(FUNCS)}(" + ", ".join(gen_expr(r, depth + 1) for _ in range(r.randint(0, 3))) + ")"
    return "[" + ", ".join(gen_expr(r, depth + 1) for _ in range(r.randint(0, 4))) + "]"


def gen_decl(r) -> str:
    kind = r.choice(_kinds())
    head = f"{kind} {r.choice(NAMES[:10] + ['m', 'd', 'w', 'l'])}"
    if r.random() < 0.25:
        head += f" extends {r.choice(NAMES[:10])}"
    if kind == "model" and r.random() < 0.25:
        head += f' from "{r.choice(["../catalog/hf/Qwen3-8B.json", "x.json", "/etc/passwd", "/dev/zero"])}"'
    members = []
    for _ in range(r.randint(0, 6)):
        what = r.randrange(10)
        if what <= 5:
            line = f"{r.choice(NAMES + ['model', 'device', 'workload'])} = {gen_expr(r)}"
            if r.random() < 0.15:
                line += f" in [{gen_expr(r, 4)}, {gen_expr(r, 4)}]"
            if r.random() < 0.15:
                line += f' source "{r.choice(STRINGS)}"'
            members.append(line)
        elif what <= 8 and kind == "plan":
            block, params = r.choice(_blocks())
            ps = r.sample(params, min(len(params), r.randint(0, 5))) if params else []
            members.append(f"use {block} {{ " + "; ".join(f"{p} = {gen_expr(r, 2)}" for p in ps) + " }")
        else:
            members.append(f"require {gen_expr(r, 3)} {r.choice(['<=', '>=', '==', '<', '>'])} {gen_expr(r, 3)}")
    if not members and r.random() < 0.5:
        return head
    sep = r.choice(["\n  ", "; "])
    return head + " {" + sep + sep.join(members) + ("\n" if sep != "; " else " ") + "}"


def gen_plan(seed: int) -> str:
    """The `.plan` file of ``seed`` (deterministic): imports, declarations, a query."""
    import random
    r = random.Random(seed)
    parts = [f'import "{r.choice(PATHS)}"' for _ in range(r.randint(0, 2))]
    parts += [gen_decl(r) for _ in range(r.randint(1, 4))]
    if r.random() < 0.2:
        parts.append(f"solve {r.choice(NAMES)}.{r.choice(NAMES)} for {gen_expr(r, 3)} == {gen_expr(r, 3)}")
    return "\n".join(parts) + "\n"


def plan_files():
    """Strategy: `.plan` files from the grammar (see the module docstring), by seed."""
    return st.integers(0, 2**32 - 1).map(gen_plan)


@lru_cache(maxsize=None)
def _case_texts() -> tuple:
    return tuple((p.name, p.read_text(encoding="utf-8")) for p in CASES)


@lru_cache(maxsize=None)
def _tokens(i: int) -> tuple:
    import re
    return tuple(m.span() for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9_.eE]*|\S", _case_texts()[i][1]))


def mutate_case(seed: int) -> tuple[str, str]:
    """(case name, mutated text) for ``seed`` (deterministic)."""
    import random
    r = random.Random(seed)
    i = r.randrange(len(_case_texts()))
    name, text = _case_texts()[i]
    for n in range(r.randint(1, 4)):
        lines = text.split("\n")
        op = r.randrange(6)
        if op == 0 and n == 0:                             # replace a token by a hostile one
            a, b = r.choice(_tokens(i))
            text = text[:a] + r.choice(HOSTILE) + text[b:]
        elif op == 1 and len(lines) > 1:                   # delete a line
            k = r.randrange(len(lines))
            text = "\n".join(lines[:k] + lines[k + 1:])
        elif op == 2:                                      # duplicate a line
            k = r.randrange(len(lines))
            text = "\n".join(lines[:k + 1] + lines[k:])
        elif op == 3 and len(lines) > 1:                   # swap two lines
            a, b = r.randrange(len(lines)), r.randrange(len(lines))
            lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
        elif op == 4:                                      # insert a character or a hostile token
            k = r.randint(0, len(text))
            text = text[:k] + r.choice(list("{}()[]\"=;,.^-+*/#\\\n\t") + ["\0", "é"] + HOSTILE) + text[k:]
        elif len(text) > 2:                                # cut a span
            k = r.randrange(len(text))
            text = text[:k] + text[r.randint(k, min(len(text), k + 80)):]
    return name, text


def mutated_cases():
    """Strategy: (case name, mutated text) of the case files, by seed."""
    return st.integers(0, 2**32 - 1).map(mutate_case)


COMMANDS = {
    "check": ["check", "{file}"],
    "eval": ["eval", "{file}"],
    "eval-json": ["eval", "{file}", "--format", "json"],
    "fmt": ["fmt", "--check", "{file}"],
    "solve": ["solve", "{file}"],
    "timeline": ["timeline", "{file}", "--width", "60"],
}

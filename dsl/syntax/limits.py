"""Limits on the work one run may do: every bound that keeps a hostile or mistaken file from
hanging the tool or exhausting memory, in one place.

Each limit has a documented default (``docs/security.md`` lists them) and can be raised:

* with the environment variable ``PLAN_LIMITS="imports=200,file_mb=64"``;
* with the global command-line option ``--limit NAME=VALUE`` (repeatable; it wins over the
  environment), and ``--allow-outside-root`` for :attr:`Limits.allow_outside_root`;
* from Python, ``with limits.override(imports=200): ...`` or :func:`set_limits`.

A limit that is hit is a located ``error[limit]`` diagnostic naming the limit and how to
raise it; it is never an internal error.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """The bounds of one run (see the module docstring for how to change them)."""

    #: largest file read (a .plan file, a config.json, a data file), in MiB (parsing runs at
    #: about 100 KB per CPU second for dense formulas and 700 KB for catalog-like text,
    #: benchmarks/bench_parse.py, so 2 MiB of .plan text is 3–20 s of work).  Measured by
    #: benchmarks/bench_large_inputs.py (2026-12-06, 2 cores at load ≈9): a text refused by a
    #: limit of the pre-scan, or a file of repeated ';', costs ≤ 0.4 s per MB beyond the ≈0.6 s
    #: start-up; a well-formed file is parsed and evaluated at its own rate, linear in its size
    #: — plans of dense formulas (`f7 = 7 s * (1 + 7/3) - 2 s / (7+1)`) 20–25 s and ≈600 MiB
    #: per MB for `plan check`, so 2 MiB of them is about 45 s and 1.2 GB, well above the
    #: 1 s/MB a refusal costs.  Kept at 2 MiB: the largest .plan file of the repository is
    #: 21 KB, the cost per MB is the parser's (Lark, ≈10 µs a token) and no lower limit would
    #: change it, and the same limit caps data files (the Azure trace is 0.4 MB) read far faster
    file_mb: float = 2
    #: files a plan may import, counting the imports of imports
    imports: int = 1000
    #: length of the longest chain of imports (a imports b imports c …)
    import_depth: int = 100
    #: nesting of one expression: operators, calls, lists and parentheses inside each other
    expr_depth: int = 200
    #: terms (numbers, names, operators) in one expression
    expr_size: int = 100_000
    #: items of one list value
    list_items: int = 100_000
    #: magnitude of a number's base-10 exponent (1e-300 … 1e300), for literals, powers and values
    exponent: int = 300
    #: magnitude of a unit's exponent (`s^-2`) and of the power a quantity with units is raised to
    unit_exponent: int = 64
    #: fields (and `use` parameters, and requirements) of one declaration
    fields: int = 20_000
    #: length of a chain of fields each defined from the next (`a2 = a1 + 1 s`, `a1 = a0 + 1 s` …)
    chain: int = 2_000
    #: activities on one timeline (pipeline steps, checkpoints, trace requests …)
    activities: int = 1_000_000
    #: output tokens one serving simulation (`use batching`) follows; it keeps each token's
    #: inter-token latency (up to ~70 bytes a token when every iteration decodes a large batch);
    #: with prefix caching, also the KV blocks its prompts and answers are keyed by
    sim_tokens: int = 10_000_000
    #: scheduler iterations one serving simulation computes one at a time (a prefill chunk, a
    #: preemption; a run of identical decode iterations counts once): about 2 µs and 150 bytes each
    sim_iterations: int = 2_000_000
    #: requests one serving search (`use serving_search`) simulates in all: each configuration
    #: simulated counts its requests (a disaggregated one its prefill and its decode pool), so
    #: about six simulations of the 19,366-request Azure conversation trace (≈0.2 s each)
    search_requests: int = 120_000
    #: measured runs one `use calibrate` reads: each is priced at every step of the fit
    #: (about 15 ms a run for a two-field fit)
    calibration_runs: int = 200
    #: points of one `plan sweep` grid or random sample, or one layout search space
    points: int = 1_000_000
    #: Monte Carlo samples of one plan (`plan eval --samples`, `plan get --quantile`, each
    #: candidate of `plan solve --probability`; Sobol indices count n·(inputs + 2)): about
    #: 0.1 µs of numpy work per sample and compiled quantity
    samples: int = 10_000_000
    #: columns or rows asked for on the command line (`plan timeline --width`)
    width: int = 10_000
    #: full evaluations of the file one `plan sweep` may make for the values of a structural
    #: input (a count a plugin reads to build the plan: each value rebuilds and re-prices the plan)
    sweep_evaluations: int = 64
    #: operations of one numeric analysis pass (a sensitivity table, a tornado, an explanation,
    #: a break-even): each node of an expression evaluated or differentiated at one point counts one
    analysis_ops: int = 5_000_000
    #: last-resort safety net, not a budget: CPU seconds (the process's own CPU time, which other
    #: programs on the machine do not consume) one step — a plugin pricing a plan, a `solve`, a
    #: report — may use before it is stopped.  Every bound above counts work and is reached
    #: first; this one catches only a computation no budget covers (a symbolic simplification
    #: in a third-party plugin), and its message says so
    cpu_seconds: float = 600.0
    #: evaluations of the whole plan one `solve` may make when its target is a whole number a
    #: plugin reads to build the plan (a replica count, a TP degree): it is answered by
    #: re-evaluating the plan at candidate values
    solve_evaluations: int = 40
    #: read imports, configs and data files outside the root file's project (and symlinks)
    allow_outside_root: bool = False


DEFAULTS = Limits()
#: limits of earlier versions that counted wall-clock seconds, and what replaced them
RENAMED = {"seconds": "cpu_seconds", "sweep_seconds": "sweep_evaluations"}
NAMES = tuple(f.name for f in dataclasses.fields(Limits))
ENV = "PLAN_LIMITS"


class LimitError(Exception):
    """A limit was hit (``name`` is the limit).  Anything that catches it reports a located
    ``error[limit]``; :func:`message` gives the standard wording."""

    def __init__(self, name: str, summary: str):
        super().__init__(summary)
        self.name = name

    @property
    def hint(self) -> str:
        return raise_hint(self.name)


def raise_hint(name: str) -> str:
    """How to raise limit ``name``: the text every limit error ends with."""
    if name == "allow_outside_root":
        return "pass --allow-outside-root (or PLAN_LIMITS=allow_outside_root=1) to allow it"
    return f"raise the limit with --limit {name}=N or PLAN_LIMITS={name}=N (default {getattr(DEFAULTS, name):g})"


def _convert(name: str, text: str):
    f = next(f for f in dataclasses.fields(Limits) if f.name == name)
    t = text.strip()
    if f.type in ("bool", bool):
        if t.lower() in ("1", "true", "yes", "on"):
            return True
        if t.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"limit '{name}' is true or false, got {text!r}")
    try:
        v = float(t.replace("_", ""))
    except ValueError:
        raise ValueError(f"limit '{name}' needs a number, got {text!r}") from None
    if not (v > 0) or v != v or v == float("inf"):
        raise ValueError(f"limit '{name}' must be a positive number, got {text!r}")
    if f.type in ("int", int):
        if v != int(v):
            raise ValueError(f"limit '{name}' must be a whole number, got {text!r}")
        return int(v)
    return v


def parse_settings(text: str) -> dict:
    """``"imports=200,file_mb=64"`` -> ``{"imports": 200, "file_mb": 64.0}``.

    :raises ValueError: for an unknown name or a bad value (the message names it)."""
    out: dict = {}
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        name, eq, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if name in RENAMED:
            raise ValueError(f"limit '{name}' counted wall-clock seconds and was replaced by work budgets "
                             f"(see docs/language.md, Limits); the nearest is '{RENAMED[name]}'")
        if name not in NAMES:
            raise ValueError(f"unknown limit '{name}'; limits: {', '.join(NAMES)}")
        if not eq:
            if name == "allow_outside_root":
                value = "1"
            else:
                raise ValueError(f"limit '{name}' needs a value: {name}=N")
        out[name] = _convert(name, value)
    return out


_current: Limits | None = None


def current() -> Limits:
    """The limits in force: :func:`set_limits`'s, else the defaults updated by ``PLAN_LIMITS``
    (a bad ``PLAN_LIMITS`` is ignored here; the command line reports it)."""
    global _current
    if _current is None:
        try:
            _current = dataclasses.replace(DEFAULTS, **parse_settings(os.environ.get(ENV, "")))
        except ValueError:
            _current = DEFAULTS
    return _current


def set_limits(limits: Limits | None) -> None:
    """Install ``limits`` for the rest of the run (None: back to the defaults and ``PLAN_LIMITS``)."""
    global _current
    _current = limits


@contextlib.contextmanager
def override(**changes):
    """``with override(imports=10): ...`` — limits changed inside the block only."""
    global _current
    before = current()
    _current = dataclasses.replace(before, **changes)
    try:
        yield _current
    finally:
        _current = before


def from_cli(settings: list[str], allow_outside_root: bool = False) -> Limits:
    """Limits from ``PLAN_LIMITS`` then the ``--limit`` options (each ``NAME=VALUE``).

    :raises ValueError: for a bad setting (a usage error)."""
    base = dataclasses.replace(DEFAULTS, **parse_settings(os.environ.get(ENV, "")))
    for s in settings or ():
        base = dataclasses.replace(base, **parse_settings(s))
    if allow_outside_root:
        base = dataclasses.replace(base, allow_outside_root=True)
    return base


def max_bytes() -> int:
    return int(current().file_mb * 1024 * 1024)


def check_exponent_digits(text: str) -> bool:
    """True when the digit string of an exponent is small enough to turn into an int cheaply."""
    return len(text.lstrip("+-0")) <= 12


class SafetyNet(TimeoutError):
    """The :attr:`Limits.cpu_seconds` safety net stopped a step (see :func:`time_budget`)."""


def safety_net_message(seconds: float) -> str:
    """The standard wording of a step stopped by the CPU-time safety net."""
    return (f"stopped by the safety net after {seconds:g} s of CPU time: no work budget bounds this "
            "computation (please report the file)")


@contextlib.contextmanager
def time_budget(seconds: float | None = None):
    """Run the body under the CPU-time safety net (:attr:`Limits.cpu_seconds`, or ``seconds``);
    on expiry raise :class:`SafetyNet` (a :class:`TimeoutError`) inside it.  Main thread of a
    Unix process only; elsewhere the body runs unbounded.

    The timer counts the process's own CPU time (``ITIMER_PROF``), not wall-clock time: a busy
    machine slows the run but does not bring the limit nearer, so the same input gives the same
    answer at any load.  It is a last resort: every bound on work (:class:`Limits`) is reached
    long before it on any input a budget covers.

    Nested budgets keep the tighter one.  Once expired, the alarm repeats every 0.25 s of CPU
    time until the body has left, so an exception that lands where Python drops exceptions (a
    finalizer, a garbage-collector callback) is raised again in the body.  An alarm can land
    anywhere, also inside the ``__exit__`` of a block that paused the garbage collector
    (:class:`dsl.engine.timeline.no_gc`) before it re-enabled it: after an expiry the
    collector is switched back on if it was on when the budget started.
    """
    import signal
    import threading

    secs = current().cpu_seconds if seconds is None else seconds
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    timer = signal.ITIMER_PROF
    prev_left, _ = signal.getitimer(timer)
    if prev_left and prev_left <= secs:
        yield    # an outer, tighter budget is running
        return

    fired = []

    def expired(signum, frame):
        # fire again soon: an exception raised inside a finalizer or a garbage-collector
        # callback is printed and dropped by Python, and the body must not then run unbounded
        fired.append(True)
        signal.setitimer(timer, 0.25)
        raise SafetyNet(safety_net_message(secs))
    import gc
    import time
    gc_on = gc.isenabled()
    t0 = time.process_time()
    old = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(timer, secs)
    try:
        yield
    finally:
        signal.setitimer(timer, 0)
        signal.signal(signal.SIGPROF, old)
        if fired and gc_on and not gc.isenabled():
            gc.enable()     # the alarm interrupted a block before it switched the collector back on
        if prev_left:     # the outer budget, less the CPU time spent in this one (it fires at once if spent)
            signal.setitimer(timer, max(prev_left - (time.process_time() - t0), 1e-3))


class Meter:
    """A count of work against one limit: ``meter.spend(n)`` adds ``n`` and raises
    :class:`LimitError` naming the limit once the total passes it.  Deterministic: the same
    input spends the same count on any machine at any load."""

    __slots__ = ("name", "cap", "used", "what")

    def __init__(self, name: str, what: str):
        self.name, self.what, self.used = name, what, 0
        self.cap = getattr(current(), name)

    def spend(self, n: int = 1) -> None:
        self.used += n
        if self.used > self.cap:
            raise LimitError(self.name, f"{self.what} needs more than {self.cap:,} operations (limit '{self.name}')")


def ensure_recursion(chain: int) -> None:
    """Let Python recurse deep enough for a chain of ``chain`` fields (each level of a chain is
    a few frames of building and evaluating); the main thread's stack is grown to match."""
    import sys
    need = 40 * chain + 5000
    if sys.getrecursionlimit() < need:
        try:
            import resource
            soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
            want = min(hard if hard != resource.RLIM_INFINITY else 1 << 40, max(soft, need * 2048))
            if soft != resource.RLIM_INFINITY and want > soft:
                resource.setrlimit(resource.RLIMIT_STACK, (want, hard))
        except (ImportError, ValueError, OSError):
            pass
        sys.setrecursionlimit(need)


ensure_recursion(DEFAULTS.chain)

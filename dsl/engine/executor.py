"""One executor for heavy work: structural sweeps, the layout search, the serving search's
simulations, ``plan eval``/``plan check`` over many files.

:class:`Executor` maps a function over items and returns the results **in input order**,
whatever runs them:

* ``serial`` — in this process, one item after another;
* ``processes`` (the default) — a :class:`concurrent.futures.ProcessPoolExecutor` of
  ``workers`` local processes (``forkserver`` start method: each worker is a fresh
  interpreter forked from a server that imported the task's module once).  With one worker
  (``--workers 1``, the default) nothing is started: the items run in this process, exactly as
  ``serial``;
* ``dask`` — tasks on a Dask cluster: ``distributed.Client(scheduler)`` when a scheduler
  address is given (``--scheduler tcp://host:8786``; the cluster's own workers run them),
  otherwise a process-based ``LocalCluster(n_workers=workers, processes=True,
  threads_per_worker=1)`` started for the run and closed after it.  dask is imported only
  here, only when asked for (the ``dist`` extra).

Results never depend on the engine or the worker count: a task is a pure function of its
item, the items are cut into ``chunks`` contiguous groups in a fixed way (not by timing), and
the results are put back in input order before anyone reads them.  Each task runs under the
limits of the caller (:func:`dsl.syntax.limits.current` is shipped with it and installed in the
worker), so a limit reached in a worker is reached the same way as in this process.  Limits
count work, never seconds.

Usage (plugins import it from :mod:`dsl.plugin`)::

    with Executor("processes", workers=4) as ex:
        parts = ex.map(evaluate_chunk, chunks_of_the_grid)        # in input order

``fn`` and the items travel to the workers by pickling (cloudpickle under Dask): ``fn`` is a
module-level function (or a :func:`functools.partial` of one), the items plain data (numbers,
strings, numpy arrays, dicts).  A worker process imports the installed plugins through their
entry points; plugins registered only in the calling process (``dsl.testing.fresh_plugins``'s
extras) are not there, so a caller holding such plugins should use ``serial``.

A task's exception is raised again here (a PlanError a task meant to report is better
returned as data: its text travels, its spans need not).  Errors of the executor itself are
:class:`ExecutorError` (an unreachable scheduler, a worker process that died; located, with a
hint) and :class:`MissingEngine` (dask not installed: the ``dist`` extra's install hint).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

ENGINES = ("serial", "processes", "dask")
#: old names still accepted (``plan search --engine local``: one process)
ALIASES = {"local": "serial"}
DEFAULT_ENGINE = "processes"
_REDIRECT = threading.Lock()     # see :func:`captured`: one redirected task per process at a time
_CURRENT: "Executor | None" = None   # the run's executor (:func:`install`); None: in this process


class ExecutorError(Exception):
    """The executor cannot run the work (a bad engine or worker count, an unreachable
    scheduler, a worker process that died); ``hint`` says what to do."""

    def __init__(self, summary: str, hint: str = ""):
        super().__init__(summary)
        self.hint = hint


class MissingEngine(ExecutorError):
    """The engine's package is not installed (dask for ``--engine dask``): exit 3."""


def _run_group(fn: Callable, group: list, limits) -> list:
    """The unit of work a worker runs: ``fn`` on each item of one contiguous group, under the
    caller's ``limits`` (restored afterwards, for workers that run several tasks)."""
    from ..syntax import limits as L
    before = L.current(), _CURRENT
    L.set_limits(limits)
    install(None)                # a task's own heavy work runs in its worker: no pools in pools
    try:
        return [fn(x) for x in group]
    finally:
        L.set_limits(before[0])
        install(before[1])


def install(executor: "Executor | None") -> None:
    """Make ``executor`` the run's executor (the CLI installs the one of ``--engine``,
    ``--workers``, ``--scheduler``); None: back to this process."""
    global _CURRENT
    _CURRENT = executor


def current() -> "Executor":
    """The run's executor (:func:`install`), else one that runs in this process.  Heavy work
    that is not handed an executor (the serving search's simulations, `plan search`'s layout
    search) reads it here, as it reads the limits."""
    return _CURRENT if _CURRENT is not None else Executor("serial")


def groups(items: list, chunks: int | None) -> list[list]:
    """``items`` cut into ``chunks`` contiguous groups of sizes differing by at most one (the
    first ones larger); ``None``: one group per item.  A pure function of ``len(items)`` and
    ``chunks``, so the work is split the same way on every machine."""
    n = len(items)
    k = n if chunks is None else max(1, min(int(chunks), n))
    if n == 0:
        return []
    size, extra = divmod(n, k)
    out, lo = [], 0
    for i in range(k):
        hi = lo + size + (1 if i < extra else 0)
        out.append(items[lo:hi])
        lo = hi
    return out


class Executor:
    """Runs ``fn`` over items on one engine (module docstring); a context manager that closes
    the pool or cluster it started.  ``client``: an existing ``distributed.Client`` to use
    (tests, notebooks; it is not closed here)."""

    def __init__(self, engine: str = DEFAULT_ENGINE, workers: int = 1, scheduler: str | None = None,
                 client: Any = None):
        engine = ALIASES.get(engine, engine)
        if engine not in ENGINES:
            raise ExecutorError(f"unknown engine '{engine}'", "valid engines: " + ", ".join(ENGINES))
        if not isinstance(workers, int) or workers < 1:
            raise ExecutorError(f"the worker count must be a whole number >= 1, not {workers!r}",
                                "write --workers N with N >= 1")
        if scheduler and engine != "dask":
            raise ExecutorError(f"--scheduler names a Dask scheduler, but the engine is '{engine}'",
                                "add --engine dask, or leave out --scheduler")
        self.engine, self.workers, self.scheduler = engine, workers, scheduler
        self._client, self._own, self._pool = client, [], None

    def __repr__(self) -> str:
        at = f", scheduler={self.scheduler!r}" if self.scheduler else ""
        return f"Executor({self.engine!r}, workers={self.workers}{at})"

    @property
    def parallel(self) -> bool:
        """Whether tasks leave this process (``processes`` with several workers, or ``dask``)."""
        return self.engine == "dask" or (self.engine == "processes" and self.workers > 1)

    @property
    def slots(self) -> int:
        """How many tasks run at once (1 in this process; the worker count otherwise, or the
        cluster's threads for a Dask scheduler): a speculative caller's batch size.  It may
        change how much work is done, never what is returned."""
        if not self.parallel:
            return 1
        if self.engine == "dask" and (self.scheduler or self._client is not None):
            try:
                return max(1, sum(self._dask().nthreads().values()))
            except Exception:          # pragma: no cover  (a scheduler that does not answer)
                return self.workers
        return self.workers

    # ------------------------------------------------------------ the one operation
    def map(self, fn: Callable, items: Iterable, chunks: int | None = None,
            progress: Callable[[int, int], None] | None = None) -> list:
        """``[fn(x) for x in items]``, computed on this executor's engine.

        :param chunks: tasks to cut the items into (contiguous groups, :func:`groups`); default
            one task per item.  In this process the grouping changes nothing.
        :param progress: ``progress(done, total)`` after each finished task (in completion
            order; the results are still returned in input order); in this process, after
            each item.
        :raises ExecutorError: the engine cannot run (see the class docstring).
        """
        items = list(items)
        if not self.parallel:
            out = []
            for i, x in enumerate(items, 1):
                out.append(fn(x))
                if progress:
                    progress(i, len(items))
            return out
        from ..syntax.limits import current
        parts = groups(items, chunks)
        limits = current()
        if self.engine == "processes":
            done = self._map_processes(fn, parts, limits, progress)
        else:
            done = self._map_dask(fn, parts, limits, progress)
        return [r for part in done for r in part]

    def _map_processes(self, fn, parts, limits, progress) -> list:
        from concurrent.futures import as_completed
        from concurrent.futures.process import BrokenProcessPool
        pool = self._processes(fn)
        try:
            futs = [pool.submit(_run_group, fn, part, limits) for part in parts]
            index = {f: i for i, f in enumerate(futs)}
            out = [None] * len(futs)
            for n, f in enumerate(as_completed(futs), 1):
                out[index[f]] = f.result()
                if progress:
                    progress(n, len(futs))
            return out
        except BrokenProcessPool as e:
            raise ExecutorError(f"a worker process ended unexpectedly ({e})",
                                "it may have run out of memory: try fewer --workers") from None

    def _map_dask(self, fn, parts, limits, progress) -> list:
        client = self._dask()
        from distributed import as_completed
        futs = [client.submit(_run_group, fn, part, limits, pure=False) for part in parts]
        index = {f.key: i for i, f in enumerate(futs)}
        out = [None] * len(futs)
        for n, f in enumerate(as_completed(futs), 1):
            out[index[f.key]] = f.result()
            if progress:
                progress(n, len(futs))
        return out

    # ------------------------------------------------------------ pools and clusters
    def _processes(self, fn):
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor
            ctx = multiprocessing.get_context("forkserver")
            mod = getattr(getattr(fn, "func", fn), "__module__", None)
            # the server imports these once; each worker is forked from it (no re-import)
            ctx.set_forkserver_preload([m for m in ("dsl.engine.executor", mod) if m and m != "__main__"])
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)
        return self._pool

    def _dask(self):
        if self._client is not None:
            return self._client
        try:
            from distributed import Client, LocalCluster
        except ImportError as e:
            from ..syntax.diagnostics import install_hint
            raise MissingEngine(f"--engine dask needs dask: {install_hint('dist')}",
                                "or use --engine processes (local processes, no extra package)") from e
        if self.scheduler:
            try:
                self._client = Client(self.scheduler, timeout="5s")
            except (OSError, ValueError, TypeError) as e:
                raise ExecutorError(f"cannot reach the Dask scheduler at {self.scheduler}: {e}",
                                    "start one (`dask scheduler`, and `dask worker ADDRESS` on each machine) "
                                    "or leave out --scheduler for a local cluster") from None
            self._own.append(self._client)
            return self._client
        import logging
        logging.getLogger("distributed").setLevel(logging.ERROR)    # no cluster chatter on stderr
        cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        self._client = Client(cluster)
        self._own += [self._client, cluster]
        return self._client

    def close(self) -> None:
        """Close the pool, client and cluster this executor started (not a given client)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for thing in self._own:
            try:
                thing.close()
            except Exception:          # pragma: no cover  (closing must not hide the answer)
                pass
        if self._own:
            self._client = None
        self._own = []

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def captured(fn: Callable, *args) -> tuple[Any, str, str]:
    """``fn(*args)`` with its standard output and error captured: (result, stdout, stderr).
    Python's streams are per process, so one captured call runs at a time in a process (a
    worker with several threads serialises them; the work is CPU-bound Python anyway)."""
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with _REDIRECT, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        result = fn(*args)
    return result, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------- the command line
ENGINE_HELP = ("where heavy work runs: processes (default: local processes, --workers of them; one "
               "runs in this process), serial (this process) or dask (a Dask cluster: --scheduler, "
               "else a local cluster of --workers processes).  The output is the same whatever runs it")


def add_arguments(parser) -> None:
    """The options every command with heavy work shares (an argparse parser): ``--engine``
    (attribute ``exec_engine``: a plugin command's own ``--engine`` keeps its name),
    ``--workers``, ``--scheduler``."""
    parser.add_argument("--engine", dest="exec_engine", choices=ENGINES + tuple(ALIASES), default=DEFAULT_ENGINE,
                        help=ENGINE_HELP)
    parser.add_argument("--workers", type=_workers, default=1, metavar="N",
                        help="processes (or local Dask workers) to run on (default 1: this process)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="the Dask scheduler to send the work to (with --engine dask; default: a "
                             "local cluster of --workers processes)")


def _workers(text: str) -> int:
    """argparse type of ``--workers``: a whole number >= 1."""
    import argparse
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def from_args(args) -> Executor:
    """The :class:`Executor` of a command's ``--engine``/``--workers``/``--scheduler``."""
    return Executor(getattr(args, "exec_engine", DEFAULT_ENGINE) or DEFAULT_ENGINE, getattr(args, "workers", 1) or 1,
                    getattr(args, "scheduler", None))

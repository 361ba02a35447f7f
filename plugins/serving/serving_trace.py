"""Request traces for serving plans: reading a CSV, windows of arrivals, latency metrics.

Pure Python (the ``csv`` module, no pandas, no sympy), so a trace of tens of thousands of
requests is read in a few tens of milliseconds (``benchmarks/bench_trace.py``).

A trace has one request per row and a header naming its columns:

==================  =======  ===========================================================
column              unit     meaning
==================  =======  ===========================================================
``arrived_at``      s        arrival time t_a (seconds from the start of the trace)
``num_prefill_tokens`` token  input tokens P of the request
``num_decode_tokens``  token  output tokens G (the first one is produced by the prefill)
``first_token_at``  s        optional, measured: time t_1 the first output token was returned
``last_token_at``   s        optional, measured: time t_G the last output token was returned
``hash_ids``        —        optional: ids of the prompt's blocks of fixed size (space- or
                             semicolon-separated integers ≥ 0; empty for none), for prefix caching
==================  =======  ===========================================================

``hash_ids`` is the field of Mooncake's public traces (``kvcache-ai/Mooncake``,
``mooncake_trace.jsonl`` and the FAST'25 traces: ``timestamp`` in ms, ``input_length``,
``output_length``, ``hash_ids`` of 512-token blocks, chained so a shared id is a shared
prefix); a JSON-lines trace converts to this CSV row by row (``timestamp``/1000 → arrived_at),
and :func:`read_mooncake` reads one as it is published.

The three first columns are the Azure LLM inference traces' (Splitwise/Vidur processing,
``specs/data/traces/``).  Book ch. 3 §3.1.2 defines the metrics computed from the measured
columns::

    TTFT = t_1 − t_a,   request latency = t_G − t_a,   mean inter-token time = (t_G − t_1)/(G − 1)  (G > 1)

and p95 by nearest rank: sort the n observations and take the ⌈0.95·n⌉-th (4 requests → the
maximum, 480 → the 456th).
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from dsl.plugin import CsvError, cell_span, open_csv

REQUIRED = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
TOKENS_MAX = 2 ** 53          # the largest token count a trace holds (the simulators count exactly in 64 bits)
MEASURED = ("first_token_at", "last_token_at")


class TraceError(CsvError):
    """A malformed trace (see :class:`dsl.plugin.CsvError`: ``row``, ``column``, ``index``)."""


@dataclass
class Trace:
    """A parsed request trace (rows in file order).

    ``arrived``, ``first``, ``last`` in seconds; ``prefill``, ``decode`` in tokens.  ``first``
    and ``last`` are empty when the trace has no measured columns.
    """

    path: Path
    arrived: list[float]
    prefill: list[int]
    decode: list[int]
    first: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)
    hashes: list[list[int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.arrived)

    @property
    def measured(self) -> tuple[str, ...]:
        """The measured columns present (``first_token_at``, ``last_token_at``)."""
        return tuple(c for c, v in zip(MEASURED, (self.first, self.last)) if v)


def read_trace(path: str | Path) -> Trace:
    """Read a request trace CSV (columns: see the module docstring; extra columns are ignored).

    :raises TraceError: naming the file, the 1-based row and the column, for an unreadable
        file, a missing header column, a row with a missing or non-numeric cell, a negative
        arrival time or token count, a fractional token count, or measured times out of order
        (t_1 < t_a or t_G < t_1), a token count above 2^53.
    """
    path = Path(path)
    rows, header, pos = open_csv(path, "trace", TraceError, ",".join(REQUIRED))
    for c in REQUIRED:
        if c not in pos:
            raise TraceError(path, 1, c, f"the header has no column '{c}'", None,
                             "a trace needs the columns " + ", ".join(REQUIRED) +
                             f"; the header has {', '.join(header) or 'none'}")
    ia, ip, idd = pos["arrived_at"], pos["num_prefill_tokens"], pos["num_decode_tokens"]
    i1, iG, ih = pos.get("first_token_at"), pos.get("last_token_at"), pos.get("hash_ids")
    need = max(i for i in (ia, ip, idd, i1, iG) if i is not None)
    arrived, prefill, decode, first, last, hashes = [], [], [], [], [], []
    line = 1
    try:
        for line, r in enumerate(rows, start=2):
            if len(r) <= need:
                if not r or (len(r) == 1 and not r[0].strip()):
                    raise TraceError(path, line, None, "empty row", hint="remove blank lines from the trace")
                miss = min(i for i in (ia, ip, idd, i1, iG) if i is not None and i >= len(r))
                raise TraceError(path, line, header[miss], f"the row has {len(r)} cells and no value for "
                                 f"'{header[miss]}'", miss)
            try:
                t = float(r[ia])
            except ValueError:
                raise TraceError(path, line, "arrived_at", f"'{r[ia]}' is not a number", ia) from None
            if not (t >= 0 and math.isfinite(t)):
                raise TraceError(path, line, "arrived_at", f"arrival time {r[ia]} is not a finite time ≥ 0", ia)
            arrived.append(t)
            for i, out in ((ip, prefill), (idd, decode)):
                s = r[i]
                try:
                    v = int(s)
                except ValueError:
                    try:
                        x = float(s)
                    except ValueError:
                        raise TraceError(path, line, header[i], f"'{s}' is not a token count", i) from None
                    if not x.is_integer():
                        raise TraceError(path, line, header[i], f"'{s}' is not a whole number of tokens", i)
                    v = int(x)
                if v < 0:
                    raise TraceError(path, line, header[i], f"negative token count {s}", i)
                if v > TOKENS_MAX:
                    raise TraceError(path, line, header[i], f"token count {s} is beyond what a trace counts "
                                     "(at most 2^53)", i, "check the row: a request's token counts are far below 2^53")
                out.append(v)
            for i, out in ((i1, first), (iG, last)):
                if i is None:
                    continue
                try:
                    x = float(r[i])
                except ValueError:
                    raise TraceError(path, line, header[i], f"'{r[i]}' is not a time", i) from None
                if not math.isfinite(x):
                    raise TraceError(path, line, header[i], f"'{r[i]}' is not a finite time", i)
                out.append(x)
            if i1 is not None and first[-1] < t:
                raise TraceError(path, line, "first_token_at", f"the first token ({r[i1]}) is returned before "
                                 f"the request arrives ({r[ia]})", i1)
            if iG is not None and last[-1] < (first[-1] if i1 is not None else t):
                raise TraceError(path, line, "last_token_at", f"the last token ({r[iG]}) is returned before "
                                 f"the {'first token' if i1 is not None else 'request arrives'}", iG)
            if ih is not None:
                hashes.append(_hash_ids(path, line, r[ih] if ih < len(r) else "", ih))
    except csv.Error as e:
        raise TraceError(path, max(line, rows.line_num), None, f"not valid CSV: {e}") from None
    if not arrived:
        raise TraceError(path, 2, None, "the trace has a header but no requests")
    return Trace(path, arrived, prefill, decode, first, last, hashes)


def _hash_ids(path: Path, line: int, cell: str, col: int) -> list[int]:
    """The block ids of one ``hash_ids`` cell: integers ≥ 0 separated by spaces or semicolons
    (brackets and commas of a pasted JSON list are accepted too)."""
    out = []
    for tok in cell.replace(";", " ").replace(",", " ").strip().strip("[]").split():
        try:
            v = int(tok)
        except ValueError:
            raise TraceError(path, line, "hash_ids", f"'{tok}' is not a block id", col,
                             "hash_ids lists whole numbers ≥ 0 separated by spaces or semicolons, e.g. "
                             "\"0 1 2\"") from None
        if v < 0:
            raise TraceError(path, line, "hash_ids", f"negative block id {tok}", col,
                             "hash_ids lists whole numbers ≥ 0")
        out.append(v)
    return out


MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def read_mooncake(path: str | Path) -> Trace:
    """Read a trace in the JSON-lines format of Mooncake's public traces (``kvcache-ai/Mooncake``,
    ``FAST25-release``): one object per line with ``timestamp`` (ms from the start of the
    trace), ``input_length``, ``output_length`` (tokens) and ``hash_ids`` (the ids of the
    prompt's 512-token blocks, chained: equal ids mean an equal prefix).  A name ending in
    ``.xz`` or ``.gz`` is decompressed first.  Returns a :class:`Trace` (``timestamp``/1000 →
    ``arrived``); ``row`` in errors is the 1-based line.

    :raises TraceError: an unreadable file, a line that is not a JSON object, a missing field,
        a negative or fractional count, a negative timestamp, an id that is not a whole number ≥ 0."""
    import json
    path = Path(path)
    try:
        if path.name.endswith(".xz"):
            import lzma
            text = lzma.decompress(path.read_bytes()).decode("utf-8")
        elif path.name.endswith(".gz"):
            import gzip
            text = gzip.decompress(path.read_bytes()).decode("utf-8")
        else:
            text = path.read_text(encoding="utf-8")
    except (OSError, EOFError, ValueError) as e:
        raise TraceError(path, 0, None, f"cannot read the trace: {e}",
                         hint="give a JSON-lines file (optionally .xz or .gz)") from None
    arrived, prefill, decode, hashes = [], [], [], []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError as e:
            raise TraceError(path, line, None, f"not a JSON object: {e}") from None
        if not isinstance(rec, dict):
            raise TraceError(path, line, None, "not a JSON object", hint="one {…} object per line")
        for k in MOONCAKE_FIELDS:
            if k not in rec:
                raise TraceError(path, line, k, f"the line has no '{k}'",
                                 hint="each line has " + ", ".join(MOONCAKE_FIELDS))
        t = rec["timestamp"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t >= 0):
            raise TraceError(path, line, "timestamp", f"{t!r} is not a time ≥ 0 in milliseconds")
        for k, out in (("input_length", prefill), ("output_length", decode)):
            v = rec[k]
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= TOKENS_MAX:
                raise TraceError(path, line, k, f"{v!r} is not a whole number of tokens ≥ 0")
            out.append(v)
        ids = rec["hash_ids"]
        if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in ids):
            raise TraceError(path, line, "hash_ids", "not a list of whole numbers ≥ 0")
        arrived.append(t / 1000)
        hashes.append(ids)
    if not arrived:
        raise TraceError(path, 1, None, "the trace has no requests")
    return Trace(path, arrived, prefill, decode, hashes=hashes)


def require_tokens(trace: Trace, columns=("num_prefill_tokens", "num_decode_tokens")) -> None:
    """Every request of ``trace`` has at least one token in each of ``columns`` (an engine
    prefills one prompt token at least and returns one output token at least).

    :raises TraceError: at the first row (and column) with 0 tokens."""
    pos = {"num_prefill_tokens": 1, "num_decode_tokens": 2}
    for col in columns:
        vals = trace.prefill if col == "num_prefill_tokens" else trace.decode
        for i, v in enumerate(vals):
            if v < 1:
                raise TraceError(trace.path, i + 2, col, f"request {i + 1} has {trace.prefill[i]} input and "
                                 f"{trace.decode[i]} output tokens; the engine needs at least one of each",
                                 _column_index(trace.path, col, pos[col]),
                                 "remove the row, or give every request its lengths in the block "
                                 "(`input = …`, `output = …`)")


def _column_index(path: Path, col: str, default: int) -> int:
    """0-based position of column ``col`` in the trace's header (for the caret)."""
    try:
        _, _, pos = open_csv(path, "trace")
    except TraceError:
        return default
    return pos.get(col, default)


_CACHE: dict[tuple, Trace] = {}


def load_trace(path: str | Path) -> Trace:
    """:func:`read_trace` cached by (path, size, modification time): plans that extend one
    another read a trace once."""
    path = Path(path)
    st = os.stat(path)
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    t = _CACHE.get(key)
    if t is None:
        t = _CACHE[key] = read_trace(path)
    return t


def trace_error(ctx, b, e: TraceError, param: str = "trace"):
    """Report a malformed trace and stop the plugin: error[bad-trace] at the offending cell of
    the file (file:row:column), the block's ``param`` that names the file shown beside it; a
    file that cannot be read at all (no row) at ``param`` itself.  Shared by every block that
    reads a trace (``use batching``, ``use serving_search``, ``use trace_windows`` …)."""
    where = b.value_span(param)
    if e.row <= 0:
        b.error_at(param, f"cannot read trace '{e.path.name}': {e.message}", code="bad-trace")
    line, col, end = cell_span(e)
    related = ((f"trace named by `use {b.name}` in '{ctx.name}'", where),) if where is not None else ()
    ctx.error(f"malformed trace: {e}", e.hint or "fix the row or remove it; columns: arrived_at (s), "
              "num_prefill_tokens, num_decode_tokens [, first_token_at, last_token_at]",
              span=ctx.file_span(e.path, line, col, end), code="bad-trace", related=related)


@dataclass(frozen=True)
class Window:
    """Arrivals in [start, start + length): request count, input tokens and decode steps
    (output tokens minus the first, which the prefill produces; book §3.1.3)."""

    index: int
    requests: int
    input_tokens: int
    decode_steps: int


def windows(trace: Trace, length: float) -> list[Window]:
    """Bucket the requests of ``trace`` by arrival into windows of ``length`` seconds (window
    k holds arrivals with k·length ≤ t_a < (k+1)·length); empty windows are kept.  O(n)."""
    if length <= 0:
        raise ValueError("window length must be positive")
    k_max = int(max(trace.arrived) // length)
    req = [0] * (k_max + 1)
    inp = [0] * (k_max + 1)
    dec = [0] * (k_max + 1)
    for t, p, g in zip(trace.arrived, trace.prefill, trace.decode):
        k = int(t // length)
        req[k] += 1
        inp[k] += p
        if g > 1:
            dec[k] += g - 1
    return [Window(k, req[k], inp[k], dec[k]) for k in range(k_max + 1)]


def decode_context_sums(trace: Trace) -> tuple[Fraction, int]:
    """(Σ over decode steps of the context each step reads, number of decode steps).

    Decode j of a request (j = 0 … G−2) reads P + j context tokens (book §3.1.1, S = 0), so
    a request contributes (G−1)·P + (G−1)(G−2)/2; the ratio is the decode-weighted mean
    context."""
    twice, steps = 0, 0            # integers: 2·Σ context, exact and fast
    for p, g in zip(trace.prefill, trace.decode):
        n = g - 1
        if n > 0:
            twice += 2 * n * p + n * (n - 1)
            steps += n
    return Fraction(twice, 2), steps


def nearest_rank(values, q: Fraction | float = Fraction(95, 100)):
    """The q-quantile by nearest rank: the ⌈q·n⌉-th smallest of n values (book §3.1.2).

    ``nearest_rank([a, b, c, d])`` is the maximum; of 480 values it is the 456th.
    :raises ValueError: for no values or q outside (0, 1].
    """
    vals = sorted(values)
    n = len(vals)
    if n == 0:
        raise ValueError("no observations")
    q = q if isinstance(q, Fraction) else Fraction(str(q))    # 0.95 as 19/20, not the nearest double
    if not 0 < q <= 1:
        raise ValueError("quantile must be in (0, 1]")
    rank = math.ceil(q * n)        # exact: Fraction arithmetic, no 0.95·480 = 455.99… slip
    return vals[rank - 1]


def latency_metrics(trace: Trace) -> dict[str, float]:
    """Metrics the measured columns allow (empty without them), in seconds:

    ``ttft_mean``, ``ttft_p95`` (needs ``first_token_at``); ``latency_mean``, ``latency_p95``
    (needs ``last_token_at``); ``inter_token_mean`` — the mean over requests with G > 1 of
    (t_G − t_1)/(G − 1) — and ``inter_token_p95`` (need both)."""
    out: dict[str, float] = {}
    if trace.first:
        ttft = [b - a for a, b in zip(trace.arrived, trace.first)]
        out["ttft_mean"] = sum(ttft) / len(ttft)
        out["ttft_p95"] = nearest_rank(ttft)
    if trace.last:
        lat = [b - a for a, b in zip(trace.arrived, trace.last)]
        out["latency_mean"] = sum(lat) / len(lat)
        out["latency_p95"] = nearest_rank(lat)
    if trace.first and trace.last:
        itl = [(b - a) / (g - 1) for a, b, g in zip(trace.first, trace.last, trace.decode) if g > 1]
        if itl:
            out["inter_token_mean"] = sum(itl) / len(itl)
            out["inter_token_p95"] = nearest_rank(itl)
    return out

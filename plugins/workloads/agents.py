"""Agent workloads: task graphs of model and tool calls, measured trajectories, shared-prefix
state, cost per successful task, hand-off to a larger model, and prefill-only decision requests.

Blocks (book ch. 3 §3.1.2, §3.2.1–3.2.4):

* ``use task_dag`` — declare your own activity graph (names, durations, ``"a>b"`` dependencies,
  optional resources, kinds and state held between two activities).  Scheduled on the shared
  event engine (:mod:`dsl.engine.timeline`); the task time is its critical path; state held while
  waiting is an engine hold and its GiB·s the hold's integral (A_M = ∫ M(t) dt, §3.1.2).
  Model 2 s → tools 6 s and 10 s → model 3 s: 21 s when the tools depend on each other,
  15 s when they are independent (tool work 16 s either way); 1 GiB held during the tool
  wait → 16 and 10 GiB·s (exercise 3-4).
* ``use shared_prefix`` — branches that share a prefix: c_KV·(H₀ + Σ h_i), the prefix counted
  once (§3.2.4, fig. 3-13).
* ``use trajectory`` — a measured trajectory log (CSV: one row per round with model time,
  tool time, input, cached and output tokens) on the event engine: task time, the Amdahl
  effect of speeding up one round or all tools (example 3-2, exercise 3-4), prefix reuse
  P_i = I_i − K_i and prefill FLOPs with and without cache hits (§3.2.1).
* ``use success_cost`` — C = c/p for two methods; the new one pays iff p₂/p₁ > c₂/c₁ (§3.2.2).
* ``use batch_cost`` — a batch of attempts: total cost, failures, and cost per success only
  when something succeeded (§3.1.2: no division by zero).
* ``use handoff`` — a decision model that hands a share e of requests to an LLM:
  c_dec + e·c_LLM (§3.2.4, exercise 3-3).
* ``use decision_request`` — prefill-only requests answering several questions in one
  forward pass versus generating tokens (§3.2.4, fig. 3-15).

Costs are plain numbers in any one currency (the book uses US dollars).
"""
from __future__ import annotations

import re
from fractions import Fraction

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, Table, TableSpec, UseSpec
from plugins.model.llmstate import kv_bytes_per_token, kv_tokens, prefill_flops

# ---------------------------------------------------------------- specs
TASK_DAG = UseSpec(
    "task_dag",
    "your own activity graph (model calls, tool calls, …) on the shared event engine: task time = critical path",
    references=("agent task graphs: model and tool calls as a dependency graph",
                "state held while waiting: A_M = ∫ M(t) dt",
                "dependent versus independent tool calls: a chain adds, parallel calls take the longest"),
    params=(
        Param("activities", doc="activity names, in the order work on a shared resource runs", kind="list",
              item="string", min_items=1),
        Param("durations", "s", None, "duration of each activity (same order as `activities`)", kind="list",
              min_items=1),
        Param("after", "", "[]", "dependencies \"a>b\": b starts when a has finished", kind="list",
              item="string"),
        Param("kinds", "", None, "kind of each activity (model, tool, …): colours, `KIND_work` sums",
              kind="list", item="string", optional=True),
        Param("resources", "", None, "resource of each activity; activities on one resource run one at a "
              "time, in list order (default: each its own)", kind="list", item="string", optional=True),
        Param("state", "B", "0 GiB", "state (context, KV cache) held between the activities named in `hold`",
              min=0),
        Param("hold", "", "[]", "intervals \"a>b\" during which `state` is held: from a's finish to b's start",
              kind="list", item="string"),
    ),
    order=60,
    provides=("task_time", "work_time", "state_area", "state_peak"),
)

SHARED_PREFIX = UseSpec(
    "shared_prefix",
    "branches generated from one shared prefix: KV state with the prefix counted once",
    references=("shared prefix: branches generated from one prefix share its KV state",),
    params=(
        Param("prefix", "token", None, "length H₀ of the shared prefix", min=0),
        Param("branches", "token", None, "tokens h_i each branch appends", kind="list", min_items=1),
        Param("kv_bytes", "B", "2 B", "bytes of one K or V element (2 for BF16)", min=0, min_open=True),
    ),
    plan_params=(Param("model", kind="ref", ref_kind="model", doc="the model generating the branches"),),
    order=61,
    provides=("kv_per_token", "shared_state", "unshared_state", "sharing_saving"),
)

TRAJECTORY = UseSpec(
    "trajectory",
    "a measured agent trajectory (CSV log of rounds) on the event engine: task time, speed-ups, prefix reuse",
    references=("prefix reuse: only the uncached part P_i = I_i − K_i of a prompt is prefilled",
                "Amdahl speed-ups of a task: Amdahl 1967, 'Validity of the single processor approach to achieving "
                "large scale computing capabilities'"),
    params=(
        Param("log", doc="CSV with columns round, model_s, tool_s, input_tokens, cached_tokens, output_tokens "
              "(optional other_s: control and transfer time after the round)", kind="file"),
        Param("speedup_round", doc="round whose model time is divided by `model_speedup` (0: every round)",
              kind="int", default="1", min=0),
        Param("model_speedup", "", "1", "speed-up of the model call(s) of `speedup_round`", min=0, min_open=True),
        Param("tool_speedup", "", "1", "speed-up of every tool call", min=0, min_open=True),
        Param("model", "", None, "model of the calls (for KV state and prefill FLOPs)", kind="ref",
              ref_kind="model", optional=True),
        Param("kv_bytes", "B", "2 B", "bytes of one K or V element", min=0, min_open=True),
    ),
    order=62,
    provides=("rounds", "model_time", "tool_time", "other_time", "baseline_time", "task_time", "speedup",
              "time_saving", "time_saved", "input_tokens", "cached_tokens", "uncached_tokens", "output_tokens",
              "cache_hit_rate", "prefill_flops_nocache", "prefill_flops_cached", "wait_state_area"),
)

SUCCESS_COST = UseSpec(
    "success_cost",
    "cost per successful task C = c/p of an old and a new method; the new one pays iff p₂/p₁ > c₂/c₁",
    references=("cost per success C = c/p: a new method pays when p₂/p₁ > c₂/c₁",),
    params=(
        Param("attempt_cost", "", None, "average cost c₁ of one attempt of the old method (any currency)",
              min=0, min_open=True),
        Param("success_rate", "", None, "success probability p₁ of the old method", min=0, max=1,
              min_open=True),
        Param("new_attempt_cost", "", None, "average cost c₂ of one attempt of the new method", min=0,
              min_open=True),
        Param("new_success_rate", "", None, "success probability p₂ of the new method", min=0, max=1,
              min_open=True),
    ),
    order=63,
    provides=("cost_per_success", "new_cost_per_success", "cost_ratio", "attempt_cost_ratio",
              "success_ratio"),
)

BATCH_COST = UseSpec(
    "batch_cost",
    "a batch of attempts: total cost, failures, and cost per success when at least one succeeded",
    references=("cost per success of a batch: the cost of all attempts divided by the successes",),
    params=(
        Param("attempts", doc="attempts in the batch", kind="int", min=1),
        Param("successes", doc="attempts that passed the checks", kind="int", min=0),
        Param("attempt_cost", "", None, "cost of one attempt (generation, checks, environment)", min=0),
    ),
    order=64,
    provides=("batch_total_cost", "batch_failures", "batch_success_rate", "batch_cost_per_success"),
)

HANDOFF = UseSpec(
    "handoff",
    "a decision model handing a share e of requests to an LLM: cost c_dec + e·c_LLM per request",
    references=("hand-off to a larger model: c_dec + e·c_LLM per request",),
    params=(
        Param("decision_cost", "", None, "cost of one request on the decision model", min=0, min_open=True),
        Param("llm_cost", "", None, "cost of one request handed to the LLM", min=0),
        Param("handoff_rate", "", None, "share e of requests handed to the LLM", min=0, max=1),
        Param("success_ratio", "", "1", "p₂/p₁: success probability with hand-off over without", min=0,
              min_open=True),
    ),
    order=65,
    provides=("cost_per_request", "handoff_cost", "handoff_cost_ratio", "cost_per_success_ratio"),
)

DECISION = UseSpec(
    "decision_request",
    "a prefill-only request answering several questions in one forward pass, versus generating tokens",
    references=("prefill-only decision requests: answers read at the last position of one forward pass instead of "
                "generated",),
    params=(
        Param("input_tokens", "token", None, "tokens of the request (state and all questions)", min=0,
              min_open=True),
        Param("questions", doc="questions read at their last positions (LM-head rows)", kind="int", min=1,
              default="1"),
        Param("mfu", "", "40 %", "compute efficiency of the prefill", min=0, max=1, min_open=True),
        Param("decode_tokens", "token", "64 token", "tokens an LLM would generate instead", min=0),
        Param("decode_step", "s", None, "time of one memory-bound decode step (default: BF16 weights / "
              "(mem_bw · bw_efficiency))", min=0, min_open=True, optional=True),
        Param("bw_efficiency", "", "50 %", "share of the memory bandwidth a decode step achieves", min=0, max=1,
              min_open=True),
        Param("decode_batch", "", "1", "sequences sharing each decode step (GPU time is split among them)",
              min=1),
        Param("gpu_hour", "", "2", "price of one GPU-hour (any currency)", min=0),
    ),
    plan_params=(Param("model", kind="ref", ref_kind="model", doc="the model serving the request"),
                 Param("device", kind="ref", ref_kind="device", doc="the accelerator")),
    order=66,
    provides=("prefill_flops", "prefill_time", "decode_time", "llm_latency", "latency_ratio",
              "decode_gpu_time", "gpu_time_increase", "prefill_cost_per_mtok"),
)

SPECS = (TASK_DAG, SHARED_PREFIX, TRAJECTORY, SUCCESS_COST, BATCH_COST, HANDOFF, DECISION)


@hookimpl
def plan_blocks_register():
    return list(SPECS)


# ---------------------------------------------------------------- helpers
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*$")


def _pairs(b, param: str, names) -> list[tuple[str, str]]:
    """Parse a list of ``"a>b"`` strings; errors name the item and list the valid names."""
    out = []
    for k, item in enumerate(b.value(param) or ()):
        parts = [p.strip() for p in item.split(">")]
        if len(parts) != 2 or not all(parts):
            b.error_at(param, f"item {k + 1} of `{param}` is \"{item}\"; write \"a>b\" (b after a)",
                       "each dependency names two activities separated by '>'")
        for p in parts:
            if p not in names:
                b.error_at(param, f"item {k + 1} of `{param}` names '{p}', which is not in `activities`",
                           "activities: " + ", ".join(names), code="unknown-name")
        out.append((parts[0], parts[1]))
    return out


def _same_length(b, param: str, n: int, what: str = "activities"):
    vals = b.value(param)
    if vals is not None and len(vals) != n:
        b.error_at(param, f"`{param}` has {len(vals)} items but `{what}` has {n}",
                   f"give one item per entry of `{what}`")
    return vals


# ---------------------------------------------------------------- task_dag
def _price_task_dag(ctx, b):
    names = list(b.value("activities"))
    seen = set()
    for nm in names:
        if not _NAME.match(nm):
            b.error_at("activities", f"activity name \"{nm}\" is not a plain name",
                       "use letters, digits, '_', '.', '-' (starting with a letter)")
        if nm in seen:
            b.error_at("activities", f"activity '{nm}' is listed twice", "give every activity its own name",
                       code="duplicate")
        seen.add(nm)
    durs = b.q_list("durations")
    if len(durs) != len(names):
        b.error_at("durations", f"`durations` has {len(durs)} items but `activities` has {len(names)}",
                   "give one duration per activity")
    for k, v in enumerate(b.value("durations")):
        if v < 0:
            b.error_at("durations", f"duration {k + 1} (activity '{names[k]}') is negative", "durations are ≥ 0 s")
    kinds = _same_length(b, "kinds", len(names)) or ("task",) * len(names)
    for k in kinds:
        if not re.match(r"[A-Za-z_][A-Za-z0-9_]*$", k):
            b.error_at("kinds", f"kind \"{k}\" is not a plain name", "use letters, digits and '_'")
    _same_length(b, "resources", len(names))
    _pairs(b, "after", names)
    _pairs(b, "hold", names)
    ctx.define("work_time", sp.Add(*durs), "s", "sum of all activity durations (work, not elapsed time)")
    for kind in sorted(set(kinds)):
        ctx.define(f"{kind}_work", sp.Add(*[d for d, k in zip(durs, kinds) if k == kind]), "s",
                   f"sum of the durations of the '{kind}' activities")


def _schedule_task_dag(ctx, b):
    names = list(b.value("activities"))
    durs = b.q_list("durations")
    kinds = b.value("kinds") or ("task",) * len(names)
    res = b.value("resources") or tuple(names)
    deps: dict[str, list] = {n: [] for n in names}
    for a, c in _pairs(b, "after", names):
        deps[c].append(a)
    tl = ctx.timeline("task")
    for n, d, k, r in zip(names, durs, kinds, res):
        tl.add(n, d, r, after=deps[n], kind=k, lane=r, label=n, doc=f"{k} '{n}' (use task_dag)")
    state = b.q("state")
    for i, (a, c) in enumerate(_pairs(b, "hold", names)):
        tl.hold(f"state{i + 1}:{a}>{c}", state, "state", start=(a, "finish"), end=(c, "start"),
                doc="state held while waiting")
    tl.makespan_quantity("task_time", doc="critical path of the task graph", rank=5,
                         references=("agent task time: the longest path through the task graph",))
    if b.value("hold"):
        tl.area_quantity("state_area", "state", "GiB*s", "∫ held state dt over the task (A_M)",
                         headline=True, rank=6, references=("state held while waiting: A_M = ∫ M(t) dt",))
        tl.peak_quantity("state_peak", "state", "GiB", "largest state held at once")


# ---------------------------------------------------------------- shared_prefix
def _price_shared_prefix(ctx, b):
    m = ctx.ref("model")
    c_kv = ctx.define("kv_per_token", kv_bytes_per_token(m, b.q("kv_bytes")), "KiB/token",
                      "KV bytes per token c_KV = 2·n_L·n_kv·d_h·bytes")
    h0, hs = b.q("prefix"), b.q_list("branches")
    # tokens held at full width; a sliding-window layer keeps at most its window of each segment
    def tok(n):
        return kv_tokens(m, n)
    shared = ctx.define("shared_state", c_kv * (tok(h0) + sp.Add(*[tok(h) for h in hs])), "MiB",
                        "c_KV·(H₀ + Σ h_i): the prefix stored once", headline=True,
                        references=("shared prefix: branches generated from one prefix share its KV state",))
    unshared = ctx.define("unshared_state", c_kv * sp.Add(*[tok(h0 + h) for h in hs]), "MiB",
                          "c_KV·Σ (H₀ + h_i): every branch with its own copy of the prefix")
    ctx.define("sharing_saving", unshared - shared, "MiB", "state saved by sharing the prefix")


# ---------------------------------------------------------------- trajectory
_REQUIRED_COLS = ("round", "model_s", "tool_s", "input_tokens", "cached_tokens", "output_tokens")
_OPTIONAL_COLS = ("other_s", "tool")


def read_trajectory(path) -> list[dict]:
    """Read a trajectory log (CSV, ``#`` comment lines allowed).

    Columns: ``round`` (1, 2, … in order), ``model_s``, ``tool_s`` (seconds), ``input_tokens``,
    ``cached_tokens`` (≤ input), ``output_tokens`` (whole numbers); optional ``other_s``
    (control and transfer time after the round, s) and ``tool`` (a label).  Numbers are kept
    exact (:class:`fractions.Fraction`).

    :raises ValueError: ``(row, column, message)`` for the first malformed cell; ``row`` is
        the line number in the file (header = its own line), ``column`` a column name or None.
    """
    import csv

    import dsl.plugin as safeio
    text = safeio.read_text(path, what="trajectory log")
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ValueError((1, None, "the log is empty"))
    rows = list(csv.reader([ln for _, ln in lines]))
    header = [h.strip() for h in rows[0]]
    missing = [c for c in _REQUIRED_COLS if c not in header]
    if missing:
        raise ValueError((lines[0][0], missing[0], f"the header lacks column '{missing[0]}' "
                          f"(needs {', '.join(_REQUIRED_COLS)})"))
    unknown = [c for c in header if c not in _REQUIRED_COLS + _OPTIONAL_COLS]
    if unknown:
        raise ValueError((lines[0][0], unknown[0], f"unknown column '{unknown[0]}'"))
    out = []
    for (lineno, _), cells in zip(lines[1:], rows[1:]):
        if len(cells) != len(header):
            raise ValueError((lineno, None, f"has {len(cells)} cells, the header has {len(header)}"))
        rec: dict = {}
        for col, cell in zip(header, cells):
            cell = cell.strip()
            if col == "tool":
                rec[col] = cell
                continue
            try:
                v = Fraction(cell)
            except (ValueError, ZeroDivisionError):
                raise ValueError((lineno, col, f"'{cell}' is not a number")) from None
            if v < 0:
                raise ValueError((lineno, col, f"{cell} is negative"))
            if col in ("round", "input_tokens", "cached_tokens", "output_tokens") and v.denominator != 1:
                raise ValueError((lineno, col, f"{cell} is not a whole number"))
            rec[col] = v
        if rec["cached_tokens"] > rec["input_tokens"]:
            raise ValueError((lineno, "cached_tokens", f"{rec['cached_tokens']} cached tokens exceed the "
                              f"{rec['input_tokens']} input tokens"))
        if rec["round"] != len(out) + 1:
            raise ValueError((lineno, "round", f"round {rec['round']} where {len(out) + 1} was expected"))
        rec.setdefault("other_s", Fraction(0))
        rec["line"] = lineno
        out.append(rec)
    if not out:
        raise ValueError((lines[0][0], None, "the log has a header but no rounds"))
    return out


def _trajectory(ctx, b):
    path = b.path("log")
    try:
        return read_trajectory(path)
    except ValueError as e:
        row, col, msg = e.args[0]
        where = f"{path.name}, line {row}" + (f", column '{col}'" if col else "")
        b.error_at("log", f"malformed trajectory log: {where}: {msg}",
                   "columns: " + ", ".join(_REQUIRED_COLS) + " (optional other_s, tool); one row per round",
                   code="bad-data")


def _R(x: Fraction):
    return sp.Rational(x.numerator, x.denominator)


def _price_trajectory(ctx, b):
    rows = _trajectory(ctx, b)
    n = len(rows)
    r_sel = b.value("speedup_round")
    if r_sel > n:
        b.error_at("speedup_round", f"speedup_round = {r_sel} but the log has {n} rounds",
                   f"choose 1 … {n}, or 0 for every round")
    tot = {c: sp.Add(*[_R(r[c]) for r in rows]) for c in ("model_s", "tool_s", "other_s", "input_tokens",
                                                           "cached_tokens", "output_tokens")}
    ctx.define("rounds", sp.Integer(n), "", "rounds (model calls) in the log")
    ctx.define("model_time", tot["model_s"], "s", "measured model time, all rounds")
    ctx.define("tool_time", tot["tool_s"], "s", "measured tool time, all rounds")
    ctx.define("other_time", tot["other_s"], "s", "control and transfer time, all rounds")
    ctx.define("baseline_time", tot["model_s"] + tot["tool_s"] + tot["other_s"], "s",
               "measured task time: the sum of all stages in order of execution", headline=True, rank=4)
    ctx.define("input_tokens", tot["input_tokens"], "token", "input tokens I = Σ I_i")
    ctx.define("cached_tokens", tot["cached_tokens"], "token", "reused prefix tokens K = Σ K_i")
    ctx.define("uncached_tokens", tot["input_tokens"] - tot["cached_tokens"], "token",
               "tokens prefilled anew P = Σ (I_i − K_i)",
               references=("prefix reuse: only the uncached part P = I − K of a prompt is prefilled",))
    ctx.define("output_tokens", tot["output_tokens"], "token", "output tokens, all rounds")
    ctx.define("cache_hit_rate", tot["cached_tokens"] / tot["input_tokens"], "%", "K / I")
    task = ctx.q("task_time", "s")
    base = ctx.q("baseline_time", "s")
    ctx.define("speedup", base / task, "", "baseline time / task time with the speed-ups (Amdahl)",
               headline=True, rank=7)
    ctx.define("time_saving", 1 - task / base, "%", "share of the baseline time saved", headline=True, rank=8)
    ctx.define("time_saved", base - task, "s", "baseline time − task time")
    if b.value("model") is not None:
        view = b.ref("model")
        c_kv = ctx.define("kv_per_token", kv_bytes_per_token(view, b.q("kv_bytes")), "KiB/token",
                          "KV bytes per token c_KV = 2·n_L·n_kv·d_h·bytes")
        full = [prefill_flops(view, _R(r["input_tokens"]), 0) for r in rows]
        part = [prefill_flops(view, _R(r["input_tokens"] - r["cached_tokens"]), _R(r["cached_tokens"]))
                for r in rows]
        ctx.define("prefill_flops_nocache", sp.Add(*full), "TFLOP",
                   "prefill matrix FLOPs when every round recomputes its whole input", headline=True, rank=9)
        ctx.define("prefill_flops_cached", sp.Add(*part), "TFLOP",
                   "prefill matrix FLOPs when each round reuses its cached prefix K_i", headline=True, rank=10)
        del c_kv


def _schedule_trajectory(ctx, b):
    rows = _trajectory(ctx, b)
    r_sel = b.value("speedup_round")
    ms, ts = b.q("model_speedup"), b.q("tool_speedup")
    tl = ctx.timeline("trajectory")
    prev = []
    c_kv = ctx.q("kv_per_token", "B/token") if b.value("model") is not None else None
    for r in rows:
        k = int(r["round"])
        m = _R(r["model_s"])
        if r_sel in (0, k):
            m = m / ms
        tl.add(f"model{k}", m, "model", after=prev, kind="model", lane="model", label=str(k),
               doc=f"model call of round {k} ({r['line']} of the log)")
        prev = [f"model{k}"]
        if r["tool_s"] > 0 or r.get("tool"):
            tl.add(f"tool{k}", _R(r["tool_s"]) / ts, "tools", after=prev, kind="tool", lane="tools",
                   label=r.get("tool") or str(k), doc=f"tool call of round {k}")
            if c_kv is not None:
                tl.hold(f"context{k}", c_kv * kv_tokens(b.ref("model"), _R(r["input_tokens"] + r["output_tokens"])), "kv",
                        start=(f"tool{k}", "start"), end=(f"tool{k}", "finish"),
                        doc=f"context of round {k} kept while its tool runs")
            prev = [f"tool{k}"]
        if r["other_s"] > 0:
            tl.add(f"other{k}", _R(r["other_s"]), "control", after=prev, kind="wait", lane="control",
                   doc=f"control and transfer after round {k}")
            prev = [f"other{k}"]
    tl.makespan_quantity("task_time", doc="task time with the speed-ups (critical path of the trajectory)",
                         rank=5)
    if c_kv is not None and any(h.pool == "kv" for h in tl.holds.values()):
        tl.area_quantity("wait_state_area", "kv", "GiB*s", "context KV held during tool calls, ∫ M dt")


def _trajectory_table(ws, plan):
    info = ws.decls.get(plan)
    if info is None or "trajectory" not in info.uses:
        return None
    from dsl.plugin import PlanContext
    ctx = PlanContext(ws, plan)
    b = ctx.block("trajectory")
    try:
        rows = read_trajectory(b.path("log"))
    except ValueError:
        return None
    out = []
    for r in rows:
        out.append((int(r["round"]), f"{float(r['model_s']):.3f}", f"{float(r['tool_s']):.3f}",
                    int(r["input_tokens"]), int(r["cached_tokens"]), int(r["input_tokens"] - r["cached_tokens"]),
                    int(r["output_tokens"])))
    return Table(("round", "model s", "tool s", "input I_i", "cached K_i", "prefilled P_i", "output"),
                 tuple(out), ("P_i = I_i − K_i; S_i = K_i tokens are read from the cache.",))


# ---------------------------------------------------------------- costs
def _price_success_cost(ctx, b):
    c1, p1, c2, p2 = (b.q(x) for x in ("attempt_cost", "success_rate", "new_attempt_cost", "new_success_rate"))
    C1 = ctx.define("cost_per_success", c1 / p1, "", "C₁ = c₁/p₁", headline=True,
                    references=("cost per success C = c/p: a new method pays when p₂/p₁ > c₂/c₁",))
    C2 = ctx.define("new_cost_per_success", c2 / p2, "", "C₂ = c₂/p₂", headline=True)
    ctx.define("cost_ratio", C2 / C1, "", "C₂/C₁ = (c₂/c₁)/(p₂/p₁)", headline=True)
    cr = ctx.define("attempt_cost_ratio", c2 / c1, "", "c₂/c₁")
    sr = ctx.define("success_ratio", p2 / p1, "", "p₂/p₁")
    ctx.require("new_method_pays", sr, ">", cr, "", "the new method lowers the cost per success: p₂/p₁ > c₂/c₁")


def _price_batch_cost(ctx, b):
    n, s = int(b.value("attempts")), int(b.value("successes"))
    if s > n:
        b.error_at("successes", f"successes = {s} exceed attempts = {n}", "a batch cannot succeed more often "
                   "than it tries")
    total = ctx.define("batch_total_cost", b.q("attempts") * b.q("attempt_cost"), "",
                       "cost of every attempt: generation, checks, environment, failures", headline=True)
    ctx.define("batch_failures", b.q("attempts") - b.q("successes"), "", "attempts that failed", headline=True)
    ctx.define("batch_success_rate", b.q("successes") / b.q("attempts"), "%", "successes / attempts")
    if s == 0:
        ctx.warn(f"the batch of {n} attempts has no success: cost per success is undefined; report the total "
                 "cost and the failures", "batch_total_cost and batch_failures are defined",
                 code="no-success")
        return
    ctx.define("batch_cost_per_success", total / b.q("successes"), "",
               "total cost of all attempts / successes", headline=True,
               references=("cost per success of a batch: the cost of all attempts divided by the successes",))


def _price_handoff(ctx, b):
    cd, cl, e = b.q("decision_cost"), b.q("llm_cost"), b.q("handoff_rate")
    ho = ctx.define("handoff_cost", e * cl, "", "e·c_LLM: hand-off cost per request")
    per = ctx.define("cost_per_request", cd + ho, "", "c_dec + e·c_LLM", headline=True,
                     references=("hand-off cost: c_dec + e·c_LLM per request",))
    ctx.define("handoff_cost_ratio", per / cd, "", "cost per request over the decision model alone: the "
               "smallest p₂/p₁ for which hand-off lowers the cost per success", headline=True)
    ctx.define("cost_per_success_ratio", (per / cd) / b.q("success_ratio"), "",
               "cost per success with hand-off over without: (c₂/c₁)/(p₂/p₁)", headline=True)


def _price_decision(ctx, b):
    view = ctx.ref("model")
    dev = ctx.ref("device")
    n = b.q("input_tokens")
    f = ctx.define("prefill_flops", prefill_flops(view, n, 0, b.q("questions")), "TFLOP",
                   "one forward pass over the request: matmuls, causal attention, LM head at each question",
                   headline=True)
    rate = dev.q("peak_flops", "FLOP/s") * b.q("mfu")
    t_p = ctx.define("prefill_time", f / rate, "ms", "prefill FLOPs / (peak · MFU)", headline=True)
    if b.given("decode_step"):
        step = b.q("decode_step")
    else:
        weights = 2 * view.q("params", "param")       # BF16 weights read once per step
        step = weights / (dev.q("mem_bw", "B/s") * b.q("bw_efficiency"))
    step = ctx.define("decode_step_time", step, "ms", "one memory-bound decode step")
    t_d = ctx.define("decode_time", b.q("decode_tokens") * step, "s", "decode_tokens sequential steps")
    lat = ctx.define("llm_latency", t_p + t_d, "s", "prefill then decode: latency of the generating LLM",
                     headline=True)
    ctx.define("latency_ratio", lat / t_p, "", "LLM latency over the decision request's", headline=True)
    gd = ctx.define("decode_gpu_time", t_d / b.q("decode_batch"), "ms",
                    "GPU time of the decode per request when decode_batch sequences share each step")
    ctx.define("gpu_time_increase", gd / t_p, "%", "extra GPU time of generating over prefill only")
    ctx.define("prefill_cost_per_mtok", b.q("gpu_hour") / 3600 * t_p / n * 10 ** 6, "",
               "GPU cost of prefilling a million input tokens at the GPU-hour price", headline=True)


# ---------------------------------------------------------------- hooks
@hookimpl
def plan_quantities_price(ctx):
    for name, fn in (("task_dag", _price_task_dag), ("shared_prefix", _price_shared_prefix),
                     ("trajectory", _price_trajectory), ("success_cost", _price_success_cost),
                     ("batch_cost", _price_batch_cost), ("handoff", _price_handoff),
                     ("decision_request", _price_decision)):
        b = ctx.block(name)
        if b is not None:
            fn(ctx, b)


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("task_dag")
    if b is not None:
        _schedule_task_dag(ctx, b)
    b = ctx.block("trajectory")
    if b is not None:
        _schedule_trajectory(ctx, b)


@hookimpl
def plan_tables_register():
    return [TableSpec("trajectory-rounds", "Trajectory rounds: time and prefix reuse", _trajectory_table,
                      "one row per round of the log",
                      references=("prefix reuse: only the uncached part P = I − K of a prompt is prefilled",
                                  "agent trajectories: measured rounds of model calls and tool calls"))]

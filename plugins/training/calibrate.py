"""Calibration of a device's efficiency parameters from measured training runs.

Runs are either plans of the file (``use calibrate { plans = [...] }``: any model and layout the
training step prices, each run's own ``step_time`` the prediction; see
:mod:`plugins.training.calibrate_plans`) or the rows of a CSV of GPT runs, described here.

``use calibrate { runs = "runs.csv"; fit = ["matmul_efficiency"]; rows = ["1.7B"] }`` on a plan
with ``device`` (and ``gpus_per_host``) reads a CSV of measured runs — one GPT model, layout and
measured throughput per row — prices each run with the training step's closed forms
(:func:`plugins.training.layout_model.evaluate`, the same text ``use layout`` and ``plan search`` use) on
the plan's device and links, and fits the named device fields by bounded least squares on
relative step-time residuals over the selected rows (one field: Gauss–Newton with numpy, see
:func:`fit`; several: ``scipy.optimize.least_squares``).  The fitted values are quantities of the plan (``fit.matmul_efficiency`` for a plan named
``fit``), so another plan uses the fitted device with
``device a100_fit extends a100_sxm_80gb { matmul_efficiency = fit.matmul_efficiency }``.
The ``calibration`` table lists every run: measured and predicted step time and throughput,
the error, and whether the run was fitted.

What a measured throughput means
--------------------------------
Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC'21, §5.1) count the FLOPs of one iteration of a GPT model (l layers, hidden h,
sequence s, vocabulary V, batch B) with activation recomputation as

    F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))

(four passes of the blocks' matrices — forward, recomputed forward, two backward — at
24·h² FLOPs per token and layer, the attention scores and values over all s² pairs, and the
logits 6·B·s·h·V in three passes); without recomputation the blocks run three passes,
72·B·s·l·h²·(1 + s/(6h)) + 6·B·s·h·V.  Their "achieved teraFLOP/s per GPU" is F over
(GPUs × iteration time), measured end to end: it already contains the pipeline bubble, the
communication, the optimizer step and data loading.  So a run's measured step time is
F / (GPUs × achieved), and the fit compares it with the model's *whole* step time (compute,
recomputation, bubble, exposed TP/PP/DP communication) — nothing is charged twice, and the
model's own FLOP count (causal attention over s(s+1)/2 pairs) never enters the measured side.
``plugins.model.flops``'s ``megatron`` convention is today's ``num_floating_point_operations`` of
Megatron-LM (three passes, causal attention over s²/2 pairs); it is *not* this formula.

CSV columns (a header row, one run per row; extra columns are ignored)
----------------------------------------------------------------------
==================  ========  ====================================================================
column              required  meaning
==================  ========  ====================================================================
``run``             yes       a name for the run (``rows`` selects runs by it)
``heads``           yes       attention heads a (head width h/a, as many KV heads)
``hidden``          yes       hidden size h
``layers``          yes       transformer layers l
``seq_len``         yes       sequence length s (tokens)
``vocab``           yes       vocabulary V
``tp`` ``pp``       yes       tensor- and pipeline-parallel degrees
``gpus``            yes       GPUs of the run (dp = gpus / (tp·pp))
``batch``           yes       global batch B (sequences)
``micro_batch``     yes       micro-batch b (sequences)
``virtual``         no        interleaved virtual stages per pipeline rank (default 1)
``recompute``       no        ``none``, ``selective`` or ``full`` (default ``none``)
``dp_overlap``      no        ``true`` when the data-parallel all-reduce overlaps the backward
                              (default ``true``)
``ffn``             no        MLP width (default 4·h; 2-matrix GeLU MLP)
``achieved_tflops`` one of    measured TFLOP/s per GPU, counted as ``flop_count`` says
``step_time``       the two   measured seconds per iteration (used as is)
==================  ========  ====================================================================

The architecture is Megatron's GPT: learned position embeddings, LayerNorm, a 2-matrix GeLU
MLP of width 4h, the LM head tied to the word embedding; 16-bit activations, dropout, eager
(unfused) attention as in 2021.  Parameters: V·h + s·h + l·(12h² + 13h) + 2h.

Fitted names are device fields (``matmul_efficiency``, ``matmul_half_flops``,
``mem_efficiency``: the roofline mode's curves) or ``mfu`` (the simple mode: one efficiency
for every matrix product).  Fitting ``mfu`` prices the runs in the simple mode; any other name
prices them in the roofline mode.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, Table, TableSpec, UseSpec, current_limits, install_hint, limit_hint

from plugins.training import layout_model as lm
from plugins.training.fitting import least_squares_bounded
from dsl.plugin import CsvError, cell_span, open_csv

REFERENCES = (
    "FLOPs per iteration and the weak-scaling runs: Narayanan et al. 2021, 'Efficient Large-Scale Language "
    "Model Training on GPU Clusters Using Megatron-LM' (SC'21), the FLOP count of its evaluation and Table 1",
    "NVIDIA/Megatron-LM examples/academic_paper_scripts/sc21/run_table_1.sh (the runs' layouts)",
    "bounded least squares: one field by Gauss-Newton with SciPy's 2-point derivative and xtol/ftol 1e-12 "
    "(numpy); several by SciPy scipy.optimize.least_squares (trust-region reflective)",
)

# fittable names: K key of plugins.training.layout_model.evaluate, unit, bounds (base units), scale
FIELDS = {
    "mfu": ("mfu", "", (1e-3, 1.0), "lin"),
    "matmul_efficiency": ("eta_mm", "", (1e-3, 1.0), "lin"),
    "mem_efficiency": ("eta_mem", "", (1e-3, 1.0), "lin"),
    "matmul_half_flops": ("F_half", "FLOP", (1e3, 1e16), "log"),
}
FIELD_DOCS = {
    "mfu": "single-GPU efficiency (fraction of peak) fitted to the measured runs",
    "matmul_efficiency": "η_max of large matrix products (fraction of peak) fitted to the measured runs",
    "mem_efficiency": "fraction of memory bandwidth streaming kernels reach, fitted to the measured runs",
    "matmul_half_flops": "matrix-product size at which η is half of η_max, fitted to the measured runs",
}
FLOP_COUNTS = ("narayanan2021", "model")
# collective fields of a link declaration (plugins/hardware/collectives.py), passed to the step when present
LINK_FIELDS = (("latency", "s"), ("launch", "s"), ("efficiency", ""), ("nvls_efficiency", ""), ("nvls_latency", "s"))

INT_COLUMNS = ("heads", "hidden", "layers", "seq_len", "vocab", "tp", "pp", "gpus", "batch", "micro_batch")
REQUIRED = ("run",) + INT_COLUMNS
MEASURED = ("achieved_tflops", "step_time")
RECOMPUTE = lm.RECOMPUTE


class RunsError(CsvError):
    """A malformed runs CSV: ``row`` the 1-based line (the header is line 1), ``column`` the
    column's name, ``index`` its 0-based position (None when the column is missing)."""


@dataclass(frozen=True)
class Run:
    """One measured run (a row of the CSV), in base units (tokens, sequences, seconds)."""

    name: str
    line: int
    heads: int
    hidden: int
    layers: int
    seq_len: int
    vocab: int
    tp: int
    pp: int
    gpus: int
    batch: int
    micro_batch: int
    virtual: int = 1
    recompute: str = "none"
    dp_overlap: bool = True
    ffn: int | None = None
    achieved_tflops: float | None = None
    step_time: float | None = None

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    @property
    def params(self) -> int:
        """GPT parameters: V·h + s·h + l·(12h² + 13h) + 2h (4h MLP; general f: 4h² + 2hf + 9h + f)."""
        h, f = self.hidden, self.ffn_width
        layer = 4 * h * h + 2 * h * f + 4 * h + f + h + 4 * h     # QKV+o and their biases, MLP and biases, 2 LayerNorms
        return self.vocab * h + self.seq_len * h + self.layers * layer + 2 * h

    @property
    def ffn_width(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden


def read_runs(path: str | Path) -> list[Run]:
    """Read a runs CSV (columns: the module docstring).

    :raises RunsError: naming the file, the 1-based row and the column of an unreadable file,
        a missing column, a missing, non-numeric, non-whole or non-positive cell, an unknown
        recomputation mode, a layout whose tp·pp does not divide the GPUs or whose dp·b does not
        divide the batch, or a duplicate run name.
    """
    import csv

    path = Path(path)
    rows, header, pos = open_csv(path, "runs file", RunsError, ",".join(REQUIRED) + ",achieved_tflops")
    for c in REQUIRED:
        if c not in pos:
            raise RunsError(path, 1, c, f"the header has no column '{c}'", None,
                            "a runs file needs the columns " + ", ".join(REQUIRED) +
                            " and achieved_tflops or step_time; the header has " + (", ".join(header) or "none"))
    if not any(c in pos for c in MEASURED):
        raise RunsError(path, 1, None, "the header has neither 'achieved_tflops' nor 'step_time'", None,
                        "add the measured throughput per GPU (TFLOP/s) or the measured seconds per iteration")
    runs: list[Run] = []
    seen: dict[str, int] = {}
    line = 1
    try:
        for line, r in enumerate(rows, start=2):
            if not r or (len(r) == 1 and not r[0].strip()):
                raise RunsError(path, line, None, "empty row", hint="remove blank lines from the file")
            runs.append(_row(path, line, r, header, pos, seen))
    except csv.Error as e:
        raise RunsError(path, max(line, rows.line_num), None, f"not valid CSV: {e}") from None
    if not runs:
        raise RunsError(path, 2, None, "the file has a header but no runs")
    return runs


def _row(path, line, r, header, pos, seen) -> Run:
    def cell(c):
        i = pos.get(c)
        if i is None:
            return None, None
        if i >= len(r):
            raise RunsError(path, line, c, f"the row has {len(r)} cells and no value for '{c}'", i)
        return r[i].strip(), i

    def whole(c):
        s, i = cell(c)
        if s is None:
            return None
        try:
            x = float(s)
        except ValueError:
            raise RunsError(path, line, c, f"'{s}' is not a number" if s else "empty cell", i) from None
        if not (math.isfinite(x) and x.is_integer() and x >= 1):
            raise RunsError(path, line, c, f"'{s}' is not a whole number ≥ 1", i)
        return int(x)

    def positive(c):
        s, i = cell(c)
        if s is None or s == "":
            return None
        try:
            x = float(s)
        except ValueError:
            raise RunsError(path, line, c, f"'{s}' is not a number", i) from None
        if not (math.isfinite(x) and x > 0):
            raise RunsError(path, line, c, f"'{s}' is not a positive number", i)
        return x

    name, i_name = cell("run")
    if not name:
        raise RunsError(path, line, "run", "empty run name", i_name)
    if name in seen:
        raise RunsError(path, line, "run", f"run '{name}' appears twice (first on row {seen[name]})", i_name)
    seen[name] = line
    v = {c: whole(c) for c in INT_COLUMNS}
    virtual = whole("virtual") if "virtual" in pos and cell("virtual")[0] != "" else 1
    ffn = whole("ffn") if "ffn" in pos and cell("ffn")[0] != "" else None
    rec, i_rec = cell("recompute")
    rec = (rec or "none").lower()
    if rec not in RECOMPUTE:
        raise RunsError(path, line, "recompute", f"'{rec}' is not a recomputation mode", i_rec,
                        "recompute is one of " + ", ".join(RECOMPUTE))
    ov, i_ov = cell("dp_overlap")
    ov = (ov or "true").lower()
    if ov not in ("true", "false", "yes", "no", "1", "0"):
        raise RunsError(path, line, "dp_overlap", f"'{ov}' is not true or false", i_ov)
    achieved, step = positive("achieved_tflops"), positive("step_time")
    if achieved is None and step is None:
        c = "achieved_tflops" if "achieved_tflops" in pos else "step_time"
        raise RunsError(path, line, c, "no measured value (achieved_tflops or step_time)", pos[c])
    if v["hidden"] % v["heads"]:
        raise RunsError(path, line, "heads", f"{v['heads']} heads do not divide the hidden size {v['hidden']}",
                        pos["heads"])
    if v["gpus"] % (v["tp"] * v["pp"]):
        raise RunsError(path, line, "gpus", f"tp·pp = {v['tp'] * v['pp']} does not divide {v['gpus']} GPUs",
                        pos["gpus"])
    dp = v["gpus"] // (v["tp"] * v["pp"])
    if v["batch"] % (dp * v["micro_batch"]):
        raise RunsError(path, line, "batch", f"dp·micro_batch = {dp * v['micro_batch']} does not divide the "
                        f"batch {v['batch']}", pos["batch"])
    if v["layers"] % (v["pp"] * virtual):
        raise RunsError(path, line, "layers", f"pp·virtual = {v['pp'] * virtual} does not divide "
                        f"{v['layers']} layers", pos["layers"])
    return Run(name, line, **v, virtual=virtual, recompute=rec, dp_overlap=ov in ("true", "yes", "1"), ffn=ffn,
               achieved_tflops=achieved, step_time=step)


# ---------------------------------------------------------------- what a measurement means
def narayanan_flops(run: Run) -> float:
    """FLOPs of one iteration as Narayanan et al. 2021 §5.1 count them:
    passes·24·B·s·l·h²·(1 + s/(6h)) + 6·B·s·h·V with 4 passes under full recomputation
    (= 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))) and 3 otherwise (their 72·B·s·l·h²·…)."""
    B, s, l, h, V = run.batch, run.seq_len, run.layers, run.hidden, run.vocab
    passes = 4 if run.recompute == "full" else 3
    return passes * 24 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V


def model_flops(run: Run) -> float:
    """FLOPs of one iteration as the training step counts them: 3 × (forward matrices
    2·(l·(4h² + 2hf) + hV) + causal attention 2·l·h·(s+1)) per token, plus the recomputed
    forward of the blocks under full recomputation (the attention core under selective)."""
    K, _ = gpt_constants(run, _NO_HW)
    attn = lm.attention_per_token(K)
    fwd = K["fwd_tok"] + attn
    extra = {"full": fwd - K["head_tok"], "selective": attn, "none": 0.0}[run.recompute]
    return (3 * fwd + extra) * run.seq_len * run.batch


def measured_step(run: Run, flop_count: str = "narayanan2021") -> float:
    """Measured seconds per iteration: the ``step_time`` cell, else F / (GPUs × achieved) with F
    counted as ``flop_count`` says (``narayanan2021``: :func:`narayanan_flops`; ``model``:
    :func:`model_flops`)."""
    if run.step_time is not None:
        return run.step_time
    F = narayanan_flops(run) if flop_count == "narayanan2021" else model_flops(run)
    return F / (run.gpus * run.achieved_tflops * 1e12)


# ---------------------------------------------------------------- the runs as layouts
_NO_HW = {"peak": 1.0, "mem_bw": 1.0, "gph": 8, "link": math.inf, "nic": math.inf, "nics": 8, "latency": 0.0,
          "values": {}}


def gpt_constants(run: Run, hw: dict, mode: str = "mfu") -> tuple[dict, dict]:
    """``(K, X)`` of :func:`plugins.training.layout_model.evaluate` for one run (plain floats, base units).

    ``hw``: ``peak`` (FLOP/s), ``mem_bw`` (B/s), ``gph`` (GPUs per host), ``link``, ``nic`` (B/s per
    direction), ``nics`` (NICs per host), ``latency`` (s per ring step) and ``values``: the
    device fields and ``mfu`` by name (:data:`FIELDS`), the fitted ones included.
    Memory bytes per parameter: 16-bit weights and gradients, FP32 master, Adam (2, 2, 4, 8).
    """
    h, a, L, s, V = run.hidden, run.heads, run.layers, run.seq_len, run.vocab
    f = run.ffn_width
    block = L * (4 * h * h + 2 * h * f)                       # QKV + o projections, 2-matrix MLP
    N = run.params
    K = {"L": L, "h": h, "a": a, "kv": a, "dh": h / a, "V": V, "N": N, "f": f, "mats": 2,
         "N_emb": V * h + s * h, "N_exp": 0, "E": 0, "topk": 0, "L_moe": 0,
         "fwd_tok": 2 * block + 2 * h * V, "head_tok": 2 * h * V, "dv": h / a, "attn_pairs": None,
         "s": s, "B": run.batch, "peak": hw["peak"], "mem_bw": hw["mem_bw"], "gpus": run.gpus, "gph": hw["gph"],
         "link": hw["link"], "nic": hw["nic"], "nics": hw["nics"], "latency": hw["latency"], "overlap": 0.0,
         "input": 0.0, "prefetch": int(run.dp_overlap), "act_bytes": 2, "flash": 0, "dropout": 1, "logits": 1,
         "exp_tok": 0, "imb": 1, "transient": 0.0, "bytes_W": 2.0, "bytes_G": 2.0, "bytes_M": 4.0, "bytes_O": 8.0,
         "mode": mode,
         # matrix shapes of the roofline mode: fused QKV 3h wide, output projection h, the MLP
         "qkv_w": 3 * h, "o_w": h, "f_dense": f, "fe": 0, "ks": 0}
    # a device field neither stated nor fitted takes the roofline module's generic value
    generic = getattr(lm, "GENERIC_DEVICE", {})
    for name, (key, _unit, _b, _s) in FIELDS.items():
        v = hw["values"].get(name, generic.get(name))
        if v is not None:
            K[key] = v
    K.setdefault("mfu", 1.0)
    if "eta_mm" in K and hw.get("sustained") is not None:     # as use layout reads the device
        K["eta_mm"] = K["eta_mm"] * hw["sustained"]
    # the links' collective fields under the step's K keys (K["link_alpha"], K["nic_eff"] …)
    for prefix, fields in hw.get("links", {}).items():
        K[prefix + "_nvls"] = bool(fields.get("nvls", False))
        for key, suffix in getattr(lm, "LINK_KEYS", ()):
            if key in fields:
                K[prefix + suffix] = fields[key]
    X = {"t": run.tp, "p": run.pp, "d": run.dp, "c": 1, "e": 1, "et": run.tp, "v": run.virtual,
         "b": run.micro_batch, "z": 0, "r": RECOMPUTE.index(run.recompute), "sp": 0}
    return K, X


def predict(runs: list[Run], hw: dict, mode: str = "mfu") -> list[dict]:
    """The model's step time (and its terms) of each run: :func:`plugins.training.layout_model.evaluate`."""
    o = lm.ops("numpy")
    out = []
    for run in runs:
        K, X = gpt_constants(run, hw, mode)
        r = lm.evaluate(K, X, o)
        out.append({k: float(r[k]) for k in ("step",) + lm.TERMS})
    return out


def fit(runs: list[Run], hw: dict, names: list[str], selected: list[Run], flop_count: str = "narayanan2021",
        start: dict | None = None, path=None) -> dict:
    """Least squares over the ``selected`` runs of the relative step-time residuals
    (predicted − measured) / measured, in the fields ``names`` (bounded by :data:`FIELDS`;
    ``*_flops`` fields fitted on a log scale).  Starts from ``start`` (default: the values in
    ``hw``, else the middle of the bounds).

    One field: :func:`plugins.training.fitting._least_squares_1d` (bounded Gauss–Newton, numpy only), which ends at a
    float whose neighbours have no smaller sum of squares.  Several fields:
    ``scipy.optimize.least_squares`` (trust-region reflective, bounded).

    :returns: ``{"values": {name: float}, "cost": float, "status": int, "nfev": int}`` — cost
        ½·Σ residual², status > 0 when converged (0: the evaluation limit was reached), nfev the
        residual evaluations.
    :raises RunsError: a selected run whose relative error is not finite at the start.
    """
    import numpy as np

    mode = "mfu" if "mfu" in names else "roofline"
    measured = np.array([measured_step(r, flop_count) for r in selected])
    lo, hi, x0 = [], [], []
    for n in names:
        _key, _unit, (a, b), scale = FIELDS[n]
        v0 = (start or {}).get(n, hw["values"].get(n))
        if scale == "log":
            a, b = math.log10(a), math.log10(b)
            v0 = math.log10(v0) if v0 else (a + b) / 2
        else:
            v0 = v0 if v0 else (a + b) / 2
        lo.append(a)
        hi.append(b)
        x0.append(min(max(v0, a + 1e-9 * (b - a)), b - 1e-9 * (b - a)))

    def values(x):
        vals = dict(hw["values"])
        for n, xi in zip(names, x):
            vals[n] = 10 ** xi if FIELDS[n][3] == "log" else float(xi)
        return vals

    def residuals(x):
        h2 = dict(hw, values=values(x))
        pred = np.array([p["step"] for p in predict(selected, h2, mode)])
        return pred / measured - 1

    with np.errstate(all="ignore"):
        r0 = residuals(np.array(x0))
    bad = np.flatnonzero(~(np.isfinite(r0) & (np.abs(r0) < 1e100)))
    if bad.size:      # a measurement no field value can match (a step of 0 s, 1e300 TFLOP/s per GPU)
        run = selected[int(bad[0])]
        col = "step_time" if run.step_time is not None else "achieved_tflops"
        raise RunsError(path, run.line, col, f"run '{run.name}' measures a step of {measured[int(bad[0])]:.3g} s, "
                        "which no value of the fitted fields can match (its relative error is not finite)", None,
                        f"check the run's {col} cell (TFLOP/s per GPU, or seconds per iteration)")
    x, cost, status, nfev = least_squares_bounded(residuals, x0, lo, hi)
    vals = values(x)
    return {"values": {n: vals[n] for n in names}, "cost": cost, "status": status, "nfev": nfev}


def _clean(x: float) -> float:
    """x, with rounding noise below 1e-9 shown as 0 (a fitted run's error prints +0.0, not -0.0)."""
    return 0.0 if abs(x) < 1e-9 else x


def table_rows(runs, hw, selected_names, flop_count, mode):
    """One dict per run: measured and predicted step time and TFLOP/s per GPU, error %, fitted."""
    preds = predict(runs, hw, mode)
    out = []
    for run, p in zip(runs, preds):
        meas = measured_step(run, flop_count)
        F = narayanan_flops(run) if flop_count == "narayanan2021" or run.step_time is not None else model_flops(run)
        out.append({"run": run.name, "measured_step": meas, "predicted_step": p["step"],
                    "measured_tflops": F / (run.gpus * meas) / 1e12,
                    "predicted_tflops": F / (run.gpus * p["step"]) / 1e12,
                    "error": _clean((meas / p["step"] - 1) * 100), "fitted": run.name in selected_names, "terms": p})
    return out


# ---------------------------------------------------------------- the block
CALIBRATE = UseSpec(
    "calibrate",
    "fit a device's efficiency fields to measured training runs (CSV) and report the error per run",
    references=REFERENCES,
    params=(
        Param("plans", kind="list", item="ref", ref_kind="plan", optional=True, min_items=1,
              doc="the measured runs written as plans (any model and layout `use layout` prices), each stating "
                  "measured_step_time or measured_throughput; their own step_time is the prediction"),
        Param("runs", kind="file", optional=True,
              doc="or a CSV of GPT runs: run, heads, hidden, layers, seq_len, vocab, tp, pp, "
              "gpus, batch, micro_batch [, virtual, recompute, dp_overlap, ffn], achieved_tflops or step_time"),
        Param("fit", kind="list", item="string", min_items=1,
              doc="the fields fitted: device fields (matmul_efficiency, matmul_half_flops, mem_efficiency), "
                  "with `plans` also any positive field as 'DECLARATION.field' (\"ib_ndr_400g.efficiency\"); "
                  "or mfu (CSV runs)"),
        Param("rows", kind="list", item="string", optional=True, min_items=1,
              doc="the runs (plan names, or the CSV's `run` cells) the fit uses; the others are predicted "
                  "(default: every run)"),
        Param("flop_count", default='"narayanan2021"', kind="choice", choices=FLOP_COUNTS,
              doc="how achieved_tflops counts FLOPs: narayanan2021 (96·B·s·l·h²·(1 + s/6h + V/16lh) with full "
                  "recomputation) or model (the training step's own count)"),
        Param("link", kind="ref", ref_kind="link", optional=True,
              doc="CSV runs: each GPU's own link inside a host (plan-written runs name their own)"),
        Param("nic", kind="ref", ref_kind="link", optional=True, doc="the NIC between hosts (default: link)"),
        Param("nics_per_host", "", "gpus_per_host", "NICs per host sharing the host cut", min=1, whole=True),
        Param("latency", "s", "0 s", "per-call latency of one ring step", min=0),
    ),
    plan_params=(
        Param("device", kind="ref", ref_kind="device", doc="the accelerator of the measured runs"),
        Param("gpus_per_host", "", "8", "GPUs in one host", min=1, whole=True),
    ),
    order=37,
    provides=tuple(FIELDS) + ("fit_rms_error", "max_prediction_error"),
)


@hookimpl
def plan_blocks_register():
    return [CALIBRATE]


def _names(b, ctx, plans: bool = False):
    names = [str(n) for n in b.value("fit")]
    for n in names:
        if plans and n == "mfu":
            b.error_at("fit", "runs written as plans are priced by their own step model: fit device or link "
                       "fields, not mfu", "fit matmul_efficiency (and mem_efficiency, matmul_half_flops), or "
                       "'LINK.efficiency'", code="unknown-name")
        if plans:          # any field the device (or a named declaration) states
            continue
        if n not in FIELDS:
            b.error_at("fit", f"'{n}' is not a field calibration can fit",
                       "fit one or more of: " + ", ".join(FIELDS), code="unknown-name")
    if len(set(names)) != len(names):
        b.error_at("fit", "a field is named twice in `fit`", "name each field once", code="duplicate")
    if "mfu" in names and len(names) > 1:
        b.error_at("fit", "mfu (the simple mode) is fitted alone",
                   "fit either mfu or the roofline fields (matmul_efficiency, matmul_half_flops, mem_efficiency)")
    return names


def _runs_error(ctx, b, e: RunsError):
    line, col, end = cell_span(e)
    where = b.value_span("runs")
    related = ((f"runs named by `use calibrate` in '{ctx.name}'", where),) if where is not None else ()
    if e.row <= 0:
        b.error_at("runs", f"cannot read runs '{e.path.name}': {e.message}", e.hint, code="bad-data")
    ctx.error(f"malformed runs file: {e}", e.hint or "fix the cell or remove the row; columns: " +
              ", ".join(REQUIRED) + ", achieved_tflops or step_time",
              span=ctx.file_span(e.path, line, col, end), code="bad-data", related=related)


def _hw_from_ctx(ctx, b, names):
    dev = ctx.ref("device")
    num = lambda x: float(ctx.nominal(x))  # noqa: E731
    link = b.ref("link")
    nic = b.ref("nic")
    link_bw = num(link.q("bandwidth", "B/s", positive=True))
    values = {}
    for n, (_k, unit, _b, _s) in FIELDS.items():
        if n != "mfu" and n not in names and dev.has(n):
            values[n] = num(dev.q(n, unit))
    links = {}
    for prefix, ref in (("link", link), ("nic", nic if nic is not None else link)):
        d = {f: num(ref.q(f, unit)) for f, unit in LINK_FIELDS if ref.has(f)}
        d["nvls"] = bool(ref.value("nvls", False))
        links[prefix] = d
    return {"sustained": num(dev.q(lm.SUSTAINED_FIELD, "")) if dev.has(lm.SUSTAINED_FIELD) else None,
            "peak": num(dev.q("peak_flops", "FLOP/s", positive=True)),
            "mem_bw": num(dev.q("mem_bw", "B/s", positive=True)) if dev.has("mem_bw") else math.inf,
            "gph": int(ctx.value("gpus_per_host")), "link": link_bw,
            "nic": num(nic.q("bandwidth", "B/s", positive=True)) if nic is not None else link_bw,
            "nics": num(b.q("nics_per_host")), "latency": num(b.q("latency")), "values": values, "links": links}


def _selected(b, runs):
    wanted = b.value("rows")
    if wanted is None:
        return runs
    by = {r.name: r for r in runs}
    out = []
    for w in (str(x) for x in wanted):
        if w not in by:
            from difflib import get_close_matches
            guess = get_close_matches(w, list(by), 1)
            b.error_at("rows", f"no run '{w}' in the runs file",
                       (f"did you mean '{guess[0]}'? " if guess else "") + "runs: " + ", ".join(by),
                       code="unknown-name")
        out.append(by[w])
    return out


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("calibrate")
    if b is None:
        return
    if b.given("plans") == b.given("runs"):
        b.error_at("plans" if b.given("plans") else "fit",
                   "`use calibrate` needs exactly one of `plans` (measured runs written as plans) and `runs` "
                   "(a CSV of GPT runs)", "e.g. plans = [run_a, run_b], each plan stating measured_step_time",
                   code="missing-parameter")
    if b.given("plans"):
        from plugins.training import calibrate_plans
        names = _names(b, ctx, plans=True)
        calibrate_plans.price(ctx, b, names, FIELDS, _warn_bound(ctx), FIELD_DOCS,
                              REFERENCES[:1] + REFERENCES[2:])
        return
    if not b.given("link"):
        b.error_at("runs", "CSV runs need `link` (each GPU's own link inside a host)",
                   "add e.g. `link = nvlink3`", code="missing-parameter")
    names = _names(b, ctx)
    try:
        runs = read_runs(b.path("runs"))
    except RunsError as e:
        _runs_error(ctx, b, e)
    cap = current_limits().calibration_runs
    if len(runs) > cap:     # each run is priced at every step of the fit: bounded work up front
        b.error_at("runs", f"the runs file '{Path(b.path('runs')).name}' has {len(runs):,} runs, more than a "
                   f"calibration prices ({cap:,}: each run is priced at every step of the fit)",
                   "keep the runs that describe the device (a few dozen suffice), or "
                   + limit_hint("calibration_runs"), code="limit")
    selected = _selected(b, runs)
    if len(selected) < len(names):
        b.error_at("rows", f"{len(selected)} run(s) cannot fit {len(names)} fields",
                   "select at least as many runs as fitted fields")
    hw = _hw_from_ctx(ctx, b, names)
    flop_count = b.value("flop_count")
    try:
        got = fit(runs, hw, names, selected, flop_count, path=b.path("runs"))
    except RunsError as e:
        _runs_error(ctx, b, e)
    except ImportError:
        ctx.error("calibration needs numpy and scipy", install_hint("numeric"), code="missing-dependency")
    mode = "mfu" if "mfu" in names else "roofline"
    for n in names:
        lo, hi = FIELDS[n][2]
        v = got["values"][n]
        if min(abs(v - lo) / lo, abs(hi - v) / hi) < 1e-6:
            ctx.warn(f"the fitted {n} of '{ctx.name}' sits at its bound ({v:.6g}): the model cannot match the "
                     "selected runs within the allowed range",
                     "check the runs' layouts and measured values, or fit other fields (see the calibration table)")
    for n in names:
        unit = FIELDS[n][1]
        ctx.define(n, sp.Float(got["values"][n], 15), "%" if unit == "" else "GFLOP", FIELD_DOCS[n], headline=True,
                   rank=1, references=REFERENCES[:1] + REFERENCES[2:])
    hw = dict(hw, values=dict(hw["values"], **got["values"]))
    rows = table_rows(runs, hw, {r.name for r in selected}, flop_count, mode)
    fitted = [r["error"] for r in rows if r["fitted"]]
    held = [abs(r["error"]) for r in rows if not r["fitted"]]
    rms = round(math.sqrt(sum(e * e for e in fitted) / len(fitted)), 6)      # % (below 1e-6 %: rounding noise)
    ctx.define("fit_rms_error", sp.Float(rms, 15) / 100, "%",
               "RMS error of the predicted throughput on the fitted runs", headline=True, rank=2)
    if held:
        ctx.define("max_prediction_error", sp.Float(max(held), 15) / 100, "%",
                   "largest |error| of the predicted throughput on the runs left out of the fit", headline=True,
                   rank=2)


def _warn_bound(ctx):
    def warn(view, name, v):
        view.warn(f"the fitted {name} of '{ctx.name}' sits at its bound ({v:.6g}): the model cannot match the "
                  "selected runs within the allowed range",
                  "check the runs' layouts and measured values, or fit other fields (see the calibration table)")
    return warn


# ---------------------------------------------------------------- the table
def _hw_from_ws(ws, plan, names):
    def num(nid):
        return float(ws.base_value(nid))
    dev = ws.python_value(f"{plan}.device").name
    link = ws.python_value(f"{plan}.calibrate.link").name
    nic_ref = ws.python_value(f"{plan}.calibrate.nic") if f"{plan}.calibrate.nic" in ws.nodes else None
    values = {n: num(f"{dev}.{n}") for n in FIELDS if n != "mfu" and n not in names and f"{dev}.{n}" in ws.nodes}
    values.update({n: num(f"{plan}.{n}") for n in names})
    link_bw = num(f"{link}.bandwidth")
    links = {}
    for prefix, name in (("link", link), ("nic", nic_ref.name if nic_ref is not None else link)):
        d = {f: num(f"{name}.{f}") for f, _u in LINK_FIELDS if f"{name}.{f}" in ws.nodes}
        d["nvls"] = bool(ws.python_value(f"{name}.nvls")) if f"{name}.nvls" in ws.nodes else False
        links[prefix] = d
    return {"links": links, "peak": num(f"{dev}.peak_flops"),
            "sustained": num(f"{dev}.{lm.SUSTAINED_FIELD}") if f"{dev}.{lm.SUSTAINED_FIELD}" in ws.nodes else None,
            "mem_bw": num(f"{dev}.mem_bw") if f"{dev}.mem_bw" in ws.nodes else math.inf,
            "gph": int(num(f"{plan}.gpus_per_host")), "link": link_bw,
            "nic": num(f"{nic_ref.name}.bandwidth") if nic_ref is not None else link_bw,
            "nics": num(f"{plan}.calibrate.nics_per_host"), "latency": num(f"{plan}.calibrate.latency"),
            "values": values}


def _plans_table(ws, plan):
    names = [str(n) for n in ws.python_value(f"{plan}.calibrate.fit")]
    from plugins.training.calibrate_plans import fitted_name
    got = ws.computed_detail(f"{plan}.{fitted_name(names[0])}")
    if got is None:
        return None
    rows = tuple((r["run"], f"{r['measured_step']:.4g}", f"{r['predicted_step']:.4g}", f"{r['error']:+.1f}",
                  "fit" if r["fitted"] else "predicted") for r in got["rows"])
    fitted = ", ".join(f"{n} = {v:.4g}" for n, v in got["values"].items())
    return Table(("run", "measured s", "predicted s", "error %", "used"), rows,
                 (f"fitted: {fitted}",
                  "predicted step = each run plan's own step_time with the fitted values (every other input as "
                  "stated); measured step = measured_step_time, or tokens_per_step / measured_throughput",
                  "error = predicted / measured throughput − 1 (= measured / predicted step − 1)"))


def _table(ws, plan):
    if "calibrate" not in ws.decls[plan].uses:
        return None
    if f"{plan}.calibrate.plans" in ws.nodes:
        try:
            return _plans_table(ws, plan)
        except (KeyError, ValueError, TypeError, AttributeError):
            return None
    try:
        names = [str(n) for n in ws.python_value(f"{plan}.calibrate.fit")]
        runs = read_runs(ws.file_param(f"{plan}.calibrate.runs"))
        wanted = (ws.python_value(f"{plan}.calibrate.rows") if f"{plan}.calibrate.rows" in ws.nodes else None)
        hw = _hw_from_ws(ws, plan, names)
        flop_count = ws.python_value(f"{plan}.calibrate.flop_count")
    except (KeyError, ValueError, TypeError, AttributeError):
        return None
    selected = {r.name for r in runs} if wanted is None else {str(w) for w in wanted}
    mode = "mfu" if "mfu" in names else "roofline"
    rows = []
    for r in table_rows(runs, hw, selected, flop_count, mode):
        rows.append((r["run"], f"{r['measured_step']:.4g}", f"{r['predicted_step']:.4g}",
                     f"{r['measured_tflops']:.4g}", f"{r['predicted_tflops']:.4g}", f"{r['error']:+.1f}",
                     "fit" if r["fitted"] else "predicted"))
    fitted = ", ".join(f"{n} = {hw['values'][n]:.4g}" + (" FLOP" if n == "matmul_half_flops" else "") for n in names)
    notes = (f"fitted ({mode} mode): {fitted}",
             "measured step = FLOPs / (GPUs × achieved TFLOP/s), FLOPs counted as "
             + ("Narayanan et al. 2021 count them (96·B·s·l·h²·(1 + s/6h + V/16lh) with full recomputation, 72·B·s·l·h²·(1 + s/6h) + 6·B·s·h·V without)"
                if flop_count == "narayanan2021" else "the training step counts them")
             + "; predicted step = the training step's whole time (compute, recomputation, bubble, exposed "
               "communication)",
             "error = predicted / measured TFLOP/s − 1")
    return Table(("run", "measured s", "predicted s", "measured TFLOP/s", "predicted TFLOP/s", "error %", "used"),
                 tuple(rows), notes)


@hookimpl
def plan_tables_register():
    return [TableSpec("calibration", "Calibration: measured and predicted runs", _table,
                      "every measured run with the model's prediction and its error", references=REFERENCES)]

"""Training budgets, scaling laws and lifecycle cost (book ch. 3 §3.4.1–3.4.3, §3.6.1–3.6.3;
ch. 10 §10.6.4).

Blocks
------
``use batch``        tokens per parameter update (§3.4.2)::

    input tokens per update  = a · B_μ · P
    label tokens per update  = a · B_μ · P_label      (the loss is normalised by this count)

``use linear``       matrix FLOPs of one linear layer Y = XW, X [m, k], W [k, n] (§3.4.1)::

    forward 2mkn,  input gradient dX = dY·Wᵀ 2mkn,  weight gradient dW = Xᵀ·dY 2mkn  (6mkn)

    a frozen layer skips dW but keeps dX while an earlier layer still trains.

``use scaling_law``  L(N, D) = E + A/N^α + B/D^β under the budget C = 6ND (§3.6.1).  The
    compute-optimal split is the stationary point dL/dN = 0 after eliminating D = C/(6N)
    (derived in :func:`optimal_split`; Hoffmann et al. 2022, eq. 4), not typed into the plan:
    N_opt = (αA/(βB))^(1/(α+β)) · (C/6)^(β/(α+β)), D_opt = C/(6 N_opt).

``use scaling_fit``  fits E, A, B, α, β to a CSV of observations (``params,tokens,loss``),
    holding out the observations with N ≥ ``holdout_from`` (book example 3-5: fit on the six
    smaller models, check on the two ≥ 2e9); reports coefficients, per-point errors and the
    RMSE of the fitted and held-out points.  Least squares by ``scipy.optimize.least_squares``
    over (E, ln A, ln B, α, β) from a fixed grid of starts (deterministic).

``use published``    a table of published training runs (declarations of kind ``run``):
    D/N, 6ND (with active parameters for MoE), GPU-hours, calendar time T = H/n and
    GPU-hours converted to a reference accelerator by the ratio of dense BF16 peaks
    (989.4/312 ≈ 3.17 H100→A100; §3.6.2), with figures 3-30 and 3-31.

``use request_cost`` GPU time of one served request: 2N[P + (G − 1)] FLOPs at ``flop_rate``
    (§3.6.3: 40 % of 989.4 TFLOP/s = 395.76 TFLOP per GPU-second).

``use lifecycle``    C_life = C_0 + Q · Σ_j w_j c_j (§3.6.3).  Two plans with lifecycle blocks
    reading one task count give the break-even Q* = ΔC_0/Δc as a ``solve`` answer, and the
    cumulative cost figure (fig. 3-29) marks the crossing.

Declaration kind ``run`` (a published training run): ``params``, ``active_params``
(MoE), ``tokens``, ``gpu_hours`` (summed over GPUs, in hours of one GPU), ``gpus``,
``device``; derived ``tokens_per_param``, ``train_flops`` (6·N_active·D) and
``calendar_time`` (gpu_hours / gpus).

Book provenance of the fit's figures: ch. 3 figs. 3-27 and 3-28 (observed against predicted loss).
"""
from __future__ import annotations

import csv
import functools

from dsl.plugin import hookimpl
from dsl.plugin import FigureSpec, KindSpec, Param, Table, TableSpec, UseSpec, install_hint

BATCH = UseSpec(
    "batch", "tokens read and label tokens per parameter update",
    references=("batch size in tokens: sequences per update × tokens per sequence",),
    params=(
        Param("micro_batch", "seq", doc="sequences per micro-batch B_μ", min=0, min_open=True),
        Param("seq_len", "token", doc="input tokens per sequence P", min=0, min_open=True),
        Param("label_len", "token", default="seq_len",
              doc="tokens per sequence that take part in the loss P_label", min=0),
        Param("accumulation", "", "1", "micro-batches accumulated per update a", kind="int", min=1),
    ),
    order=20,
    provides=("input_tokens_per_update", "label_tokens_per_update", "loss_weight_per_label"),
)

LINEAR = UseSpec(
    "linear", "matrix FLOPs of one linear layer Y = XW in training",
    references=("FLOPs of a linear layer Y = XW: 2·m·k·n",),
    params=(
        Param("rows", "", doc="rows m of the input X [m, k] (tokens in the micro-batch)", min=0, min_open=True),
        Param("inputs", "", doc="input width k", min=0, min_open=True),
        Param("outputs", "", doc="output width n", min=0, min_open=True),
        Param("frozen", default="false", kind="bool", doc="weights frozen: no weight gradient dW"),
        Param("input_grad", default="true", kind="bool",
              doc="an earlier layer still needs the input gradient dX"),
    ),
    order=20,
    provides=("forward_flops", "input_grad_flops", "weight_grad_flops", "layer_train_flops"),
)

LAW = UseSpec(
    "scaling_law", "loss L(N, D) = E + A/N^α + B/D^β and the compute-optimal N, D for a budget C = 6ND",
    references=("compute-optimal model size and data under C = 6ND: Hoffmann et al. 2022, 'Training Compute-Optimal "
                "Large Language Models'",),
    params=(
        Param("E", "", doc="irreducible loss (nat/token)", min=0),
        Param("A", "", doc="coefficient of the parameter term", min=0, min_open=True),
        Param("B", "", doc="coefficient of the data term", min=0, min_open=True),
        Param("alpha", "", doc="exponent α of the parameter term", min=0, min_open=True),
        Param("beta", "", doc="exponent β of the data term", min=0, min_open=True),
        Param("budget", "FLOP", doc="training compute C (C = 6ND)", min=0, min_open=True),
    ),
    order=30,
    provides=("n_opt", "d_opt", "loss_opt", "tokens_per_param_opt"),
)

FIT = UseSpec(
    "scaling_fit", "fit L(N, D) = E + A/N^α + B/D^β to observations with a held-out check",
    references=("fitting L(N, D) = E + A/N^α + B/D^β: Hoffmann et al. 2022, 'Training Compute-Optimal Large Language "
                "Models'",),
    params=(
        Param("data", kind="file", doc="CSV with columns params, tokens, loss (one observation per row)"),
        Param("holdout_from", "param", default="1e300 param",
              doc="observations with at least this many parameters are held out of the fit", min=0),
    ),
    order=30,
    provides=("fit_E", "fit_A", "fit_B", "fit_alpha", "fit_beta", "fit_rmse", "holdout_rmse"),
)

PUBLISHED = UseSpec(
    "published", "published training runs compared: D/N, 6ND, GPU-hours, calendar time",
    references=("published training runs: parameters, tokens and GPU-hours from each run's own report "
                "(@catalog/runs.plan)",),
    params=(
        Param("runs", kind="list", item="ref", ref_kind="run", min_items=1, doc="the runs to compare"),
        Param("reference", kind="ref", ref_kind="device",
              doc="accelerator the GPU-hours are converted to (ratio of dense BF16 peaks)"),
    ),
    order=30,
)

REQUEST = UseSpec(
    "request_cost", "GPU time of one served request, 2N[P + (G − 1)] FLOPs",
    references=("cost of a served request: 2N FLOPs per token (Kaplan et al. 2020, 'Scaling Laws for Neural Language "
                "Models') at peak · MFU",),
    params=(
        Param("params", "param", doc="model parameters N (active parameters for MoE)", min=0, min_open=True),
        Param("prompt", "token", doc="prompt tokens P", min=0),
        Param("output", "token", doc="generated tokens G", min=1),
        Param("flop_rate", "FLOP/s", doc="delivered FLOP/s of one GPU (peak × MFU)", min=0, min_open=True),
    ),
    order=30,
    provides=("request_flops", "request_gpu_time"),
)

LIFE = UseSpec(
    "lifecycle", "lifecycle cost C_life = C_0 + Q·Σ w_j c_j",
    references=("lifecycle cost: C_life = C_0 + Q · Σ_j w_j c_j",),
    params=(
        Param("upfront", "h", doc="upfront cost C_0 in GPU-hours (training, data, evaluation)", min=0),
        Param("per_task", "s", kind="list", min_items=1, min=0,
              doc="GPU time c_j of one task of each class (one item: a single class)"),
        Param("mix", "", kind="list", optional=True, min=0, max=1,
              doc="share w_j of each task class (defaults to one class; must sum to 1)"),
        Param("tasks", "", doc="tasks Q served over the model's life", min=0),
    ),
    order=30,
    provides=("task_cost", "life_cost"),
)

RUN_FIELDS = (
    Param("params", "param", doc="total parameters N"),
    Param("active_params", "param", doc="parameters active per token (MoE); defaults to params", optional=True),
    Param("tokens", "token", doc="training tokens D"),
    Param("gpu_hours", "h", doc="GPU-hours of the run, summed over GPUs", optional=True),
    Param("gpus", "", doc="accelerators used at once", optional=True),
    Param("device", kind="ref", ref_kind="device", doc="the accelerator", optional=True),
    Param("stage", kind="string", doc="what the figures cover (pre-training only …)", optional=True),
)


@hookimpl
def plan_blocks_register():
    return [BATCH, LINEAR, LAW, FIT, PUBLISHED, REQUEST, LIFE]


@hookimpl
def plan_kinds_register():
    return [KindSpec("run", "a published training run: parameters, tokens, GPU-hours", RUN_FIELDS,
                     references=("published training runs: parameters, tokens and GPU-hours from each run's own "
                                 "report (@catalog/runs.plan)",)),
            KindSpec("workload", "the work to do", (
                Param("tasks", "", doc="tasks served over a model's life (lifecycle cost)", optional=True),))]


@hookimpl
def plan_declaration_derive(ctx):
    if ctx.kind != "run" or not (ctx.has("params") and ctx.has("tokens")):
        return
    n = ctx.view.q("params", "param", positive=True)
    d = ctx.view.q("tokens", "token", positive=True)
    n_act = ctx.view.q("active_params", "param", positive=True) if ctx.has("active_params") else n
    ctx.define("tokens_per_param", d / n, "token/param", "training tokens per parameter D/N")
    ctx.define("train_flops", 6 * n_act * d, "FLOP", "training compute 6·N·D (N active for MoE)",
               references=("training FLOPs C ≈ 6ND: Kaplan et al. 2020, 'Scaling Laws for Neural Language Models'",))
    if ctx.has("gpu_hours") and ctx.has("gpus"):
        ctx.define("calendar_time", ctx.view.q("gpu_hours", "h", positive=True) / ctx.view.q("gpus", "", positive=True),
                   "day", "calendar time T = H / n with every GPU busy",
                   references=("calendar time of a run: GPU-hours divided by the GPUs used at once",))


# ---------------------------------------------------------------- pricing
@hookimpl
def plan_quantities_price(ctx):
    _batch(ctx)
    _linear(ctx)
    _law(ctx)
    _fit(ctx)
    _published(ctx)
    _request(ctx)
    _lifecycle(ctx)


def _batch(ctx):
    b = ctx.block("batch")
    if b is None:
        return
    a, bm, p, pl = b.q("accumulation"), b.q("micro_batch"), b.q("seq_len"), b.q("label_len")
    if b.value("label_len") > b.value("seq_len"):
        b.error_at("label_len", "label tokens per sequence exceed the sequence length",
                   "P_label counts tokens of the sequence that take part in the loss: P_label ≤ P")
    ctx.define("input_tokens_per_update", a * bm * p, "token", "a·B_μ·P tokens read per update", headline=True)
    labels = ctx.define("label_tokens_per_update", a * bm * pl, "token",
                        "a·B_μ·P_label tokens in the loss per update", headline=True)
    ctx.define("loss_weight_per_label", 1 / labels, "token^-1",
               "weight of one label token when the loss is the mean over the update's labels")


def _linear(ctx):
    b = ctx.block("linear")
    if b is None:
        return
    m, k, n = b.q("rows"), b.q("inputs"), b.q("outputs")
    fwd = ctx.define("forward_flops", 2 * m * k * n, "GFLOP", "Y = XW: 2mkn", headline=True)
    dx = ctx.define("input_grad_flops", 2 * m * k * n if b.value("input_grad") else 0, "GFLOP",
                    "dX = dY·Wᵀ: 2mkn (0 when no earlier layer needs it)", headline=True)
    dw = ctx.define("weight_grad_flops", 0 if b.value("frozen") else 2 * m * k * n, "GFLOP",
                    "dW = Xᵀ·dY: 2mkn (0 for a frozen layer)", headline=True)
    ctx.define("layer_train_flops", fwd + dx + dw, "GFLOP", "forward + dX + dW (6mkn when all run)",
               headline=True)


@functools.lru_cache(maxsize=None)
def optimal_split():
    """(N_opt, D_opt, (A, B, alpha, beta, C)): the compute-optimal split of
    L(N, D) = E + A/N^α + B/D^β under C = 6ND as sympy expressions of the positive symbols
    A, B, alpha, beta, C (dimensionless; C in FLOP, N in parameters, D in tokens).

    Closed form (Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models",
    eq. (4) and appendix D.2, with k = 6): eliminating D = C/(6N),

        L(N) = E + A·N^(−α) + B·(6N/C)^β
        dL/dN = −αA·N^(−α−1) + βB·(6/C)^β·N^(β−1) = 0
        ⇔  N^(α+β) = αA·C^β / (βB·6^β)
        ⇒  N_opt = (αA·C^β / (6^β·βB))^(1/(α+β)) = G·(C/6)^(β/(α+β)),  G = (αA/(βB))^(1/(α+β)),
           D_opt = C / (6·N_opt).

    N^(α+β) is increasing on N > 0, so this is the only stationary point; L → ∞ as N → 0 and
    as N → ∞ (then D → 0), so it is the minimum.  The expression is built in the form
    ``sympy.solve`` gives for dL/dN = 0 (same tree), so every value, ``solve`` answer and
    explanation built from it is unchanged; building it costs nothing, solving cost ≈0.9 s.
    """
    import sympy as sp

    A, B, al, be, C = sp.symbols("A B alpha beta C", positive=True)
    n_opt = (al * A * C ** be / (6 ** be * B * be)) ** (1 / (al + be))
    return n_opt, C / (6 * n_opt), (A, B, al, be, C)


def _law(ctx):
    b = ctx.block("scaling_law")
    if b is None:
        return
    n_opt, d_opt, syms = optimal_split()
    E, A, B, al, be, C = (b.q(p) for p in ("E", "A", "B", "alpha", "beta", "budget"))
    subs = dict(zip(syms, (A, B, al, be, C)))
    n = ctx.define("n_opt", n_opt.xreplace(subs), "param", "compute-optimal parameters (derived: dL/dN = 0)",
                   headline=True)
    d = ctx.define("d_opt", d_opt.xreplace(subs), "token", "compute-optimal tokens C/(6 N_opt)", headline=True)
    ctx.define("tokens_per_param_opt", d / n, "token/param", "D_opt / N_opt", headline=True)
    ctx.define("loss_opt", E + A / n ** al + B / d ** be, "", "loss at the optimum", headline=True)


# ---------------------------------------------------------------- fitting
def read_observations(path):
    """Rows ``(params, tokens, loss)`` of a CSV with those column names (floats > 0).

    :raises ValueError: naming the file, row and column of a missing or bad value.
    """
    rows = []
    import io

    import dsl.plugin as safeio
    # safeio drops a spreadsheet's byte-order mark
    with io.StringIO(safeio.read_text(path, what="data file"), newline="") as fh:
        reader = csv.DictReader(fh)
        cols = [c.strip() for c in (reader.fieldnames or [])]
        missing = [c for c in ("params", "tokens", "loss") if c not in cols]
        if missing:
            raise ValueError(f"{path.name}: missing column{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(missing)} (header: {', '.join(cols) or 'empty'})")
        for i, r in enumerate(reader, start=2):
            r = {(k or "").strip(): v for k, v in r.items()}
            vals = []
            for c in ("params", "tokens", "loss"):
                text = (r.get(c) or "").strip()
                try:
                    v = float(text)
                except ValueError:
                    raise ValueError(f"{path.name}: row {i}, column '{c}': "
                                     + (f"'{text}' is not a number" if text else "empty")) from None
                if not v > 0 or v != v or v == float("inf"):
                    raise ValueError(f"{path.name}: row {i}, column '{c}': {text} must be a positive number")
                vals.append(v)
            rows.append(tuple(vals))
    if not rows:
        raise ValueError(f"{path.name}: no observations")
    return rows


def fit_law(obs):
    """Least-squares fit of (E, A, B, α, β) to ``obs`` = [(N, D, loss)].

    Parameterised as (E, ln A, ln B, α, β) so A, B stay positive; started from a fixed grid
    (deterministic) and the best local optimum kept.  Returns a dict of coefficients, each to
    ten significant digits (the same on every platform).
    """
    import numpy as np
    from scipy.optimize import least_squares

    N = np.array([o[0] for o in obs])
    D = np.array([o[1] for o in obs])
    y = np.array([o[2] for o in obs])

    log_n, log_d = np.log(N), np.log(D)       # the same arrays at every evaluation

    def residuals(x):
        E, la, lb, al, be = x
        return E + np.exp(la - al * log_n) + np.exp(lb - be * log_d) - y

    best = None
    for al0 in (0.2, 0.35, 0.5):
        for be0 in (0.2, 0.35, 0.5):
            for e0 in (0.5 * y.min(), 0.9 * y.min()):
                x0 = [e0, np.log(max(y.max() - e0, 1e-3)) + al0 * np.log(N.min()),
                      np.log(max(y.max() - e0, 1e-3)) + be0 * np.log(D.min()), al0, be0]
                r = least_squares(residuals, x0, method="trf",
                                  bounds=([0, -50, -50, 0.01, 0.01], [y.min(), 200, 200, 3, 3]),
                                  xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=20000)
                if best is None or r.cost < best.cost - 1e-18:
                    best = r
    E, la, lb, al, be = best.x
    # ten significant digits: the optimum's last digits depend on the platform's linear algebra
    # (scipy/BLAS builds differ at ~1e-12 relative), so the coefficients, and the RMSEs computed
    # from them, are the same on every machine
    return {k: float(f"{v:.10g}") for k, v in (("E", E), ("A", np.exp(la)), ("B", np.exp(lb)), ("alpha", al),
                                                ("beta", be))}


def law(c, n, d):
    return c["E"] + c["A"] / n ** c["alpha"] + c["B"] / d ** c["beta"]


def _fit(ctx):
    import math

    import sympy as sp

    b = ctx.block("scaling_fit")
    if b is None:
        return
    path = b.path("data")
    try:
        obs = read_observations(path)
    except ValueError as e:
        b.error_at("data", str(e), "the CSV needs a header params,tokens,loss and one positive number per cell",
                   code="bad-data")
    cut = b.value("holdout_from")
    fit_obs = [o for o in obs if o[0] < cut]
    held = [o for o in obs if o[0] >= cut]
    if len(fit_obs) < 5:
        b.error_at("holdout_from", f"only {len(fit_obs)} observation(s) left to fit five coefficients",
                   "hold out fewer observations or add more rows")
    try:
        c = fit_law(fit_obs)
    except ImportError:
        ctx.error("fitting needs numpy and scipy", install_hint("numeric"), code="missing-dependency")
    for k in ("E", "A", "B", "alpha", "beta"):
        ctx.define(f"fit_{k}", sp.Float(c[k], 15), "", f"fitted {k}", headline=True)

    def rmse(rows):
        return math.sqrt(sum((law(c, o[0], o[1]) - o[2]) ** 2 for o in rows) / len(rows)) if rows else 0.0
    ctx.define("fit_rmse", sp.Float(rmse(fit_obs), 15), "", "RMSE on the fitted observations (nat/token)",
               headline=True)
    if held:
        ctx.define("holdout_rmse", sp.Float(rmse(held), 15), "",
                   "RMSE on the held-out observations (nat/token)", headline=True)


def _fit_table(ws, plan):
    if "scaling_fit" not in ws.decls[plan].uses:
        return None
    try:
        c = {k: float(ws.base_value(f"{plan}.fit_{k}")) for k in ("E", "A", "B", "alpha", "beta")}
        obs = read_observations(ws.file_param(f"{plan}.scaling_fit.data"))
        cut = ws.python_value(f"{plan}.scaling_fit.holdout_from")
    except (KeyError, ValueError, TypeError):
        return None
    rows, nf, nh = [], 0, 0
    for o in sorted(obs):
        held = o[0] >= cut
        nh, nf = nh + held, nf + (not held)
        pred = law(c, o[0], o[1])
        rows.append((f"H{nh}" if held else f"F{nf}", f"{o[0]:.4g}", f"{o[1]:.4g}", f"{o[2]:.4f}", f"{pred:.4f}",
                     f"{pred - o[2]:+.4f}"))
    return Table(("point", "params", "tokens", "loss", "predicted", "error"), tuple(rows),
                 ("F = fitted, H = held out; error = predicted − observed (nat/token)",))


def _draw_fit(ws, plan, fig) -> bool:
    t = _fit_table(ws, plan)
    if t is None:
        return False
    ax1, ax2 = fig.subplots(1, 2)
    for r in t.rows:
        held = r[0].startswith("H")
        ax1.plot(float(r[3]), float(r[4]), "s" if held else "o", color="C1" if held else "C0")
        ax1.annotate(r[0], (float(r[3]), float(r[4])), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax2.bar(r[0], float(r[5]), color="C1" if held else "C0")
    lo = min(float(r[3]) for r in t.rows)
    hi = max(float(r[3]) for r in t.rows)
    ax1.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax1.set_xlabel("observed loss")
    ax1.set_ylabel("predicted loss")
    ax1.set_title("fit (o) and held-out (s) points", fontsize=9)
    ax2.axhline(0, color="k", lw=0.8)
    ax2.set_ylabel("predicted − observed")
    ax2.set_title("errors", fontsize=9)
    fig.tight_layout()
    return True


# ---------------------------------------------------------------- published runs
def _published(ctx):
    b = ctx.block("published")
    if b is None:
        return
    ref = b.ref("reference")
    peak_ref = ref.q("peak_flops", "FLOP/s", positive=True)
    devices = sorted({ctx.decl(r.name).value("device").name for r in b.value("runs")
                      if ctx.decl(r.name).has("device")})
    for dev in devices:
        if dev != ref.name:
            ctx.define(f"{dev}_peak_ratio", ctx.decl(dev).q("peak_flops", "FLOP/s", positive=True)
                       / peak_ref, "", f"{ref.name}-hours per {dev} hour (ratio of dense BF16 peaks)",
                       headline=True)
    for run in b.value("runs"):
        v = ctx.decl(run.name)
        if not v.has("gpu_hours") or not v.has("device"):
            continue
        dev = v.value("device")
        peak = ctx.decl(dev.name).q("peak_flops", "FLOP/s", positive=True)
        hours = v.q("gpu_hours", "h", positive=True)
        ctx.define(f"{run.name}_equivalent_hours", hours * peak / peak_ref, "h",
                   f"GPU-hours of {run.name} converted to {ref.name} by the ratio of dense BF16 peaks",
                   headline=True)


def _runs(ws, plan):
    if "published" not in ws.decls[plan].uses:
        return None
    try:
        return ws.python_value(f"{plan}.published.runs"), ws.python_value(f"{plan}.published.reference")
    except Exception:
        return None


def _num(ws, nid, unit=""):
    from dsl.plugin import convert
    if nid not in ws.nodes:
        return None
    v = ws.base_value(nid)
    return None if v is None else convert(float(v), unit)


def _published_table(ws, plan):
    got = _runs(ws, plan)
    if got is None:
        return None
    runs, ref = got
    rows = []
    for r in runs:
        n = _num(ws, f"{r.name}.params") / 1e9
        act = _num(ws, f"{r.name}.active_params")
        act = None if act is None else act / 1e9
        rows.append((r.name, f"{n:,.1f} B" + (f" ({act:,.0f} B active)" if act is not None else ""),
                     f"{_num(ws, f'{r.name}.tokens') / 1e12:,.1f} T",
                     f"{_num(ws, f'{r.name}.tokens_per_param', 'token/param'):,.0f}",
                     f"{_num(ws, f'{r.name}.train_flops'):.3e}",
                     _fmt(_num(ws, f"{r.name}.gpu_hours", "h"), ",.0f"),
                     _fmt(_num(ws, f"{r.name}.gpus"), ",.0f"),
                     _fmt(_num(ws, f"{r.name}.calendar_time", "day"), ",.2f"),
                     _fmt(_num(ws, f"{plan}.{r.name}_equivalent_hours", "h"), ",.0f")))
    return Table(("run", "params", "tokens", "D/N", "6ND (FLOP)", "GPU-hours", "GPUs", "days",
                  f"{ref.name} hours"), tuple(rows),
                 ("6ND uses active parameters for MoE; days = GPU-hours / GPUs with every GPU busy; the "
                  "conversion assumes equal utilisation on both accelerators",))


def _fmt(v, spec):
    return "—" if v is None else format(v, spec)


def _draw_published(ws, plan, fig) -> bool:
    got = _runs(ws, plan)
    if got is None:
        return False
    runs, ref = got
    ax1, ax2 = fig.subplots(1, 2)
    fig.set_size_inches(11, 4)
    names = [r.name for r in runs]
    ax1.bar(names, [_num(ws, f"{r}.tokens_per_param", "token/param") for r in names], color="C0")
    ax1.set_ylabel("training tokens per parameter (D/N)")
    ax1.tick_params(axis="x", rotation=45, labelsize=7)
    eq = [(r, _num(ws, f"{plan}.{r}_equivalent_hours", "h")) for r in names]
    eq = [(r, v) for r, v in eq if v is not None]
    if eq:
        ax2.barh([r for r, _ in eq], [v for _, v in eq], color="C1")
        ax2.set_xscale("log")
        ax2.set_xlabel(f"GPU-hours as {ref.name} (log scale)")
        ax2.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    return True


# ---------------------------------------------------------------- serving and lifecycle
def _request(ctx):
    b = ctx.block("request_cost")
    if b is None:
        return
    import sympy as sp
    n, p, g, rate = b.q("params"), b.q("prompt"), b.q("output"), b.q("flop_rate")
    f = ctx.define("request_flops", 2 * n * (p + g - sp.Integer(1)), "GFLOP",
                   "2N[P + (G − 1)]: one prefill of P tokens and G − 1 decode steps", headline=True)
    ctx.define("request_gpu_time", f / rate, "s", "GPU time of one request at flop_rate", headline=True)


def _lifecycle(ctx):
    b = ctx.block("lifecycle")
    if b is None:
        return
    import sympy as sp
    costs = b.q_list("per_task")
    mix = b.q_list("mix") if b.given("mix") else [sp.Integer(1)]
    if len(mix) != len(costs):
        b.error_at("mix", f"mix has {len(mix)} shares for {len(costs)} task classes in per_task",
                   "give one share per class")
    if b.given("mix") and abs(sum(b.value("mix")) - 1) > 1e-9:
        b.error_at("mix", f"the shares of mix sum to {sum(b.value('mix')):g}, not 1", "shares are fractions of Q")
    c = ctx.define("task_cost", sp.Add(*[w * cj for w, cj in zip(mix, costs)]), "s",
                   "mean GPU time of one task Σ w_j c_j", headline=True)
    ctx.define("life_cost", b.q("upfront") + b.q("tasks") * c, "h",
               "lifecycle GPU time C_0 + Q·Σ w_j c_j", headline=True)


def _draw_lifecycle(ws, plan, fig) -> bool:
    plans = [p for p in ws.plans(own=True) if "lifecycle" in ws.decls[p].uses]
    if not plans or plan != plans[0]:
        return False     # one chart for all lifecycle plans, drawn once
    pts = {}
    for p in plans:
        c0 = _num(ws, f"{p}.lifecycle.upfront", "h")
        c = _num(ws, f"{p}.task_cost", "h")
        q = _num(ws, f"{p}.lifecycle.tasks")
        if None in (c0, c, q):
            return False
        pts[p] = (c0, c, q)
    qmax = max(v[2] for v in pts.values()) * 3
    cross = []
    ps = list(pts)
    for i in range(len(ps)):
        for j in range(i + 1, len(ps)):
            (a0, a1, _), (b0, b1, _) = pts[ps[i]], pts[ps[j]]
            if a1 != b1:
                qx = (b0 - a0) / (a1 - b1)
                if qx > 0:
                    cross.append(qx)
    if cross:
        qmax = max(qmax, 1.5 * max(cross))
    ax = fig.subplots()
    for p, (c0, c, _) in pts.items():
        ax.plot([0, qmax], [c0, c0 + c * qmax], label=p)
    for qx in cross:
        ax.axvline(qx, color="k", ls=":", lw=0.8)
        ax.annotate(f"break-even ≈ {qx:.3g} tasks", (qx, 0), xytext=(4, 8), textcoords="offset points", fontsize=7)
    ax.set_xlabel("tasks served Q")
    ax.set_ylabel("cumulative GPU-hours")
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


@hookimpl
def plan_tables_register():
    return [TableSpec("published-runs", "Published training runs", _published_table,
                      "D/N, 6ND, GPU-hours, calendar time and converted GPU-hours",
                      references=("published training runs: parameters, tokens and GPU-hours from each run's own "
                                  "report (@catalog/runs.plan)",), per_plan=False),
            TableSpec("scaling-fit", "Scaling-law fit: observations, predictions and errors", _fit_table,
                      references=("fitting L(N, D) = E + A/N^α + B/D^β: Hoffmann et al. 2022, 'Training "
                                  "Compute-Optimal Large Language Models'",))]


@hookimpl
def plan_figures_register():
    return [FigureSpec("published-runs", "Tokens per parameter and converted GPU-hours",
                       _draw_published, references=("published training runs: tokens per parameter, and GPU-hours "
                                                   "converted between devices by peak FLOP/s",)),
            FigureSpec("scaling-fit", "Predicted vs observed loss and the errors", _draw_fit,
                       references=("fitting L(N, D) = E + A/N^α + B/D^β with a held-out check: Hoffmann et al. 2022, "
                                   "'Training Compute-Optimal Large Language Models'",)),
            FigureSpec("lifecycle", "Cumulative cost of training and serving with the break-even",
                       _draw_lifecycle, references=("lifecycle cost: training cost plus the cost of every request "
                                                    "served over the model's life",))]

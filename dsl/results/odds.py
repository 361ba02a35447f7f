"""Answers with odds: Monte Carlo over the uncertain inputs of a plan (`plan eval --samples`).

Each headline quantity of a plan, and both sides of each of its requirements, is expanded to a
sympy expression of the inputs (as for :mod:`dsl.results.sweep`), the uncertain inputs —
those written as a distribution (:mod:`dsl.engine.distributions`) — kept free and every other
input at its nominal value, and compiled **once** with ``sympy.lambdify(..., "numpy",
cse=True)``; the samples are then evaluated as numpy arrays (``benchmarks/bench_odds.py``:
10⁶ samples of the design case in well under a second).  The symbolic form stays what
``plan get --expr`` and ``solve`` read.

* **Seeds.** Input ``x`` is drawn from ``numpy.random.Generator(PCG64(SeedSequence([seed,
  crc32(x)])))``: its draws depend on the seed and its own id only, so adding an uncertain
  input elsewhere does not change them, and the same seed gives byte-identical output.
* **Structural inputs** (a GPU count a layout divides, a ZeRO stage: ``ws.structural``) shape
  the plan, so substituting samples into the expressions of the nominal structure would be
  wrong: their samples are grouped by value and the plan re-evaluated per group
  (:func:`_sample_grouped`; ``choice(32, 48, 64)`` is their natural distribution); Sobol
  indices refuse them (``error[distribution]``).  A structural *decision* under uncertainty is
  :func:`fewest_for_probability`, which re-evaluates the plan per candidate value.
* **Probabilities** of requirements are the fraction of samples at which the requirement
  holds, with its Monte Carlo standard error sqrt(p(1−p)/N).
* **Limits.** Samples count work: at most ``samples`` (``dsl.syntax.limits``) per plan.
* **Random quantities.** A plugin may define a quantity as a random process's realisation
  (:meth:`dsl.plugin.context.PlanContext.define_random`: failures over a run); its expected
  value is what deterministic outputs read, and sampling draws it from its arguments evaluated
  at the same samples of the uncertain inputs (:func:`draw_random`).
* **Sensitivity.** :func:`sobol` gives first-order and total Sobol indices of a quantity over
  the uncertain inputs with :func:`scipy.stats.sobol_indices` (Saltelli 2010 / Jansen
  estimators; scipy ≥ 1.11, the optional extra ``numeric``).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import sympy as sp

from dsl.results.sweep import holds
from dsl.syntax.diagnostics import Diagnostic, PlanError

#: the percentiles reported unless others are asked for
QUANTILES = (0.05, 0.5, 0.95)


@dataclass
class Odds:
    """What sampling a plan gives.

    :ivar plan: the plan's name.
    :ivar samples: the number of samples N; :ivar seed: the seed.
    :ivar uncertain: ids of the uncertain inputs the plan reads, sorted.
    :ivar values: output id -> numpy array of its samples (base units).
    :ivar units: output id -> display unit.
    :ivar holds: requirement name -> boolean numpy array (the requirement holds at a sample).
    """

    plan: str
    samples: int
    seed: int
    uncertain: list = field(default_factory=list)
    values: dict = field(default_factory=dict)
    units: dict = field(default_factory=dict)
    holds: dict = field(default_factory=dict)

    def quantile(self, nid: str, q: float) -> float:
        """The ``q`` quantile (0..1) of output ``nid`` in base units (numpy's linear method)."""
        import numpy as np
        v = self.values[nid]
        return float(np.nanquantile(v, q)) if np.isnan(v).any() and not np.isnan(v).all() else float(np.quantile(v, q))

    def probability(self, name: str) -> float:
        """The fraction of samples at which requirement ``name`` holds."""
        return float(self.holds[name].mean())

    def stderr(self, name: str) -> float:
        """The Monte Carlo standard error of :meth:`probability`: sqrt(p(1−p)/N)."""
        p = self.probability(name)
        return (p * (1 - p) / self.samples) ** 0.5

    def to_json(self, quantiles=QUANTILES, convert=None) -> dict:
        """The plan's odds as JSON: samples, seed, uncertain inputs, each output's quantiles (in
        its display unit; ``convert(value, unit)``), each requirement's probability."""
        from dsl.engine.units import convert as conv
        convert = convert or (lambda v, u: float(conv(v, u)))
        out = {}
        for nid, u in self.units.items():
            out[nid.removeprefix(self.plan + ".")] = {
                "unit": u if u not in ("", "1") else None,
                **{label(q): convert(self.quantile(nid, q), u) for q in quantiles}}
        reqs = {n: {"probability": self.probability(n), "stderr": self.stderr(n)} for n in self.holds}
        return {"samples": self.samples, "seed": self.seed, "uncertain": list(self.uncertain),
                "quantiles": out, "requirements": reqs}


def label(q: float) -> str:
    """``p5`` for 0.05, ``p50`` for 0.5, ``p99.9`` for 0.999."""
    s = f"{q * 100:.10g}"
    return "p" + s


def uncertain_inputs(ws) -> list[str]:
    """Ids of every input written as a distribution, sorted."""
    return sorted(nid for nid, n in ws.nodes.items() if getattr(n, "dist", None) is not None and n.input)


def random_quantities(ws) -> list[str]:
    """Ids of every random quantity (:meth:`dsl.plugin.context.PlanContext.define_random`), sorted."""
    return sorted(nid for nid, n in ws.nodes.items() if getattr(n, "sampler", None) is not None)


def _check_count(ws, plan: str, samples: int) -> None:
    from dsl.syntax.limits import current, raise_hint
    cap = current().samples
    if samples > cap:
        raise PlanError([Diagnostic("error", "limit", f"{samples:,} samples of plan '{plan}' are above the limit of "
                                    f"{cap:,}", None, raise_hint("samples"))])
    if samples < 2:
        raise PlanError([Diagnostic("error", "usage", "sampling needs at least 2 samples", None,
                                    "pass --samples 10000 or more")])


def _refuse_structural(ws, ids) -> None:
    bad = [i for i in ids if i in getattr(ws, "structural", ())]
    if bad:
        n = ws.nodes[bad[0]]
        raise PlanError([Diagnostic("error", "distribution", f"'{bad[0]}' shapes the plan (a plugin reads it to "
                                    "build it), so it cannot be uncertain", n.span,
                                    "give it a fixed value, and compare its values as plans (or with "
                                    "`plan solve --probability`)")])


def draw(ws, ids: list[str], samples: int, seed: int) -> list:
    """Samples of each uncertain input ``ids`` (numpy arrays, base units): input ``x`` from
    ``Generator(PCG64(SeedSequence([seed, crc32(x)])))`` (module docstring)."""
    import numpy as np
    out = []
    for i in ids:
        ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(i.encode())])
        out.append(ws.nodes[i].dist.draw(np.random.Generator(np.random.PCG64(ss)), samples))
    return out


def draw_random(ws, fn, arrays: list, samples: int, seed: int) -> list:
    """Realisations of the random quantities ``fn.randoms`` of a compiled plan (:func:`compile_plan`):
    each drawn by its plugin's ``draw(rng, n, *args)`` from its arguments evaluated at the
    samples ``arrays`` of the uncertain inputs, ``rng`` seeded as :func:`draw` seeds an input."""
    import numpy as np
    out = []
    for i in fn.randoms:
        a = fn.arg_fns[i](*arrays)
        a = [np.broadcast_to(np.asarray(x, dtype=float), (samples,)) for x in (a if isinstance(a, (list, tuple)) else [a])]
        ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(i.encode())])
        out.append(np.asarray(ws.nodes[i].sampler[0](np.random.Generator(np.random.PCG64(ss)), samples, *a),
                              dtype=float))
    return out


def compile_plan(ws, plan: str, outputs: list[str] | None = None, structural: str = "refuse"):
    """``(fn, ids, reqs, used)``: ``fn`` is one numpy function of the uncertain inputs ``used``
    (ids, in the order of its arguments) and then of the random quantities ``fn.randoms``,
    giving the outputs ``ids`` (``outputs``, default the plan's headline) then both sides of
    each requirement of ``reqs`` (base units).  ``fn.arg_fns``: per random quantity, a function
    of ``used`` giving its sampler's arguments; ``fn.structural``: the uncertain structural
    inputs the outputs read.  ``structural="refuse"`` raises PlanError for one; ``"fix"`` holds
    them at their nominal values (left out of ``used``: the caller groups the samples)."""
    from dsl.results.sweep import plan_requirements
    ids = outputs if outputs is not None else [n.id for n in ws.headline(plan)]
    reqs = plan_requirements(ws, plan)
    every = uncertain_inputs(ws)
    rand = random_quantities(ws)
    free = frozenset(every) | frozenset(rand)
    nominal = ws.nominal_map(exclude=free)

    def full(e, free=free):
        return e.xreplace({s: ws.full_expr(s.name, free) for s in e.free_symbols if s.name in ws.nodes})

    exprs = [full(sp.Symbol(i, real=True)) for i in ids]
    for r in reqs:
        exprs += [full(r.lhs), full(r.rhs)]
    names = {s.name for e in exprs for s in e.free_symbols}
    randoms = [i for i in rand if i in names]
    # a random quantity's arguments, in terms of the uncertain inputs (never of another random one)
    args = {i: [full(a, frozenset(every)) for a in ws.nodes[i].sampler[1]] for i in randoms}
    names |= {s.name for a in args.values() for e in a for s in e.free_symbols}
    used = [i for i in every if i in names]
    fixed = [i for i in used if i in getattr(ws, "structural", ())]
    if structural == "refuse":
        _refuse_structural(ws, used)
    else:                               # "fix": at their nominal values (the caller groups the samples)
        used = [i for i in used if i not in fixed]
    keep = frozenset(sp.Symbol(i, real=True) for i in used + randoms)

    def at_nominal(e):
        return e.xreplace({k: v for k, v in nominal.items() if k not in keep}).evalf(17)
    exprs = [at_nominal(e) for e in exprs]
    syms = [sp.Symbol(i, real=True) for i in used]
    raw = sp.lambdify(syms + [sp.Symbol(i, real=True) for i in randoms], exprs, modules="numpy", cse=True)
    arg_fns = {i: sp.lambdify(syms, [at_nominal(e) for e in a], modules="numpy", cse=True) for i, a in args.items()}

    def fn(*arrays):
        r = raw(*arrays)
        return list(r) if isinstance(r, (list, tuple)) else [r]
    fn.randoms = randoms
    fn.arg_fns = arg_fns
    fn.structural = fixed
    return fn, ids, reqs, used


def sample_plan(ws, plan: str, samples: int, seed: int = 0, outputs: list[str] | None = None) -> Odds:
    """Sample ``plan`` ``samples`` times over its uncertain inputs (see the module docstring).

    :raises PlanError: more samples than the ``samples`` limit; an uncertain structural input.
    """
    import numpy as np
    _check_count(ws, plan, samples)
    fn, ids, reqs, used = compile_plan(ws, plan, outputs, structural="fix")
    if fn.structural:
        return _sample_grouped(ws, plan, samples, seed, fn, ids, reqs)
    arrays = draw(ws, used, samples, seed)
    with np.errstate(all="ignore"):
        arrays += draw_random(ws, fn, arrays, samples, seed)
        vals = [np.broadcast_to(np.asarray(x, dtype=float), (samples,)) for x in fn(*arrays)]
    res = Odds(plan, samples, seed, used + fn.randoms)
    for i in ids:
        res.values[i] = vals.pop(0)
        res.units[i] = ws.nodes[i].unit
    for r in reqs:
        lv, rv = vals.pop(0), vals.pop(0)
        res.holds[r.name] = holds(r.op, lv, rv)
    return res


def _sample_grouped(ws, plan: str, samples: int, seed: int, fn0, ids: list, reqs: list) -> Odds:
    """:func:`sample_plan` of a plan with uncertain **structural** inputs (``choice(32, 48, 64)``
    on a GPU count a layout divides): their samples are drawn as any input's, the samples grouped
    by the structural values drawn, and the plan re-evaluated once per group with those values
    (``evaluate_file`` with overrides, at most ``solve_evaluations`` groups) — its structure
    rebuilt — then sampled over the other inputs at the group's samples (each input's draws the
    same whichever group a sample falls in).  A headline or requirement a group's plan does not
    have is NaN / holds there; a group whose plan cannot be built has NaN values and fails every
    requirement (the design does not run)."""
    import numpy as np
    from dsl.results.evaluation import evaluate_file
    from dsl.syntax.limits import current, raise_hint
    sids = list(fn0.structural)
    for sid in sids:
        n = ws.nodes[sid]
        if n.dist.kind != "empirical":
            raise PlanError([Diagnostic("error", "distribution", f"'{sid}' shapes the plan (a plugin reads it to "
                                        "build it), so its samples rebuild the plan: it needs a distribution of "
                                        f"separate values, not {n.dist.kind}()", n.span,
                                        "write choice(…) with the values to try (e.g. choice(32, 48, 64)), or "
                                        "empirical(\"file.csv\", \"column\")")])
    sarr = draw(ws, sids, samples, seed)
    groups: dict = {}
    for k, key in enumerate(zip(*[a.tolist() for a in sarr])):
        groups.setdefault(key, []).append(k)
    cap = current().solve_evaluations
    if len(groups) > cap:
        raise PlanError([Diagnostic("error", "limit", f"plan '{plan}' draws {len(groups):,} distinct values of its "
                                    f"structural inputs ({', '.join(sids)}), each a new evaluation of the file; the "
                                    f"limit is {cap:,}", ws.nodes[sids[0]].span, raise_hint("solve_evaluations"))])
    res = Odds(plan, samples, seed, list(sids))
    vals = {i: np.full(samples, np.nan) for i in ids}
    held = {r.name: np.ones(samples, dtype=bool) for r in reqs}
    uncertain = set(sids)
    drawn: dict = {}                    # input id -> its N draws (the same whichever group reads it)
    for key in sorted(groups):
        idx = np.asarray(groups[key])
        over = {}
        for sid, v in zip(sids, key):
            x = sp.nsimplify(v, rational=True)
            over[sid] = sp.Integer(int(round(v))) if abs(v - round(v)) < 1e-9 else x
        try:
            ev = evaluate_file(ws.path, plugins=ws.plugins, overrides=over)
            fn, ids_g, reqs_g, used = compile_plan(ev, plan, [i for i in ids if i in ev.nodes], structural="fix")
        except PlanError:
            for h in held.values():
                h[idx] = False
            continue
        uncertain.update(used + fn.randoms)
        todo = [i for i in used if i not in drawn]
        drawn.update(zip(todo, draw(ev, todo, samples, seed)))
        arrays = [drawn[i][idx] for i in used]
        with np.errstate(all="ignore"):
            arrays += draw_random(ev, fn, arrays, len(idx), seed)
            out = [np.broadcast_to(np.asarray(x, dtype=float), (len(idx),)) for x in fn(*arrays)]
        for i in ids_g:
            vals[i][idx] = out.pop(0)
        for r in reqs_g:
            lv, rv = out.pop(0), out.pop(0)
            if r.name in held:
                held[r.name][idx] = holds(r.op, lv, rv)
    res.uncertain = sorted(uncertain)
    for i in ids:
        res.values[i], res.units[i] = vals[i], ws.nodes[i].unit
    res.holds = held
    return res


def sobol(ws, plan: str, nid: str, n: int = 4096, seed: int = 0) -> dict:
    """First-order and total Sobol indices of output ``nid`` of ``plan`` over its uncertain
    inputs: ``{input id: {"first": S1, "total": ST}}`` (:func:`scipy.stats.sobol_indices`,
    ``n`` base samples, a power of two; it evaluates the quantity n·(d+2) times, d the
    uncertain inputs it reads); ``{}`` when it reads none.

    :raises PlanError: scipy missing or older than 1.11; the quantity reads exactly one
        uncertain input (nothing to share its spread among), a random quantity, or an
        uncertain structural input; more evaluations than the ``samples`` limit.
    """
    import numpy as np
    try:
        from scipy.stats import sobol_indices
    except ImportError:
        raise PlanError([Diagnostic("error", "usage", "Sobol indices need scipy >= 1.11", None,
                                    'pip install "plan-dsl[numeric]"')]) from None
    fn, ids, _reqs, used = compile_plan(ws, plan, [nid])
    if fn.randoms:
        raise PlanError([Diagnostic("error", "usage", f"'{nid}' reads the random quantity '{fn.randoms[0]}' (a "
                                    "process sampled as events), which has no distribution to vary", None,
                                    "ask for the Sobol indices of a quantity the events do not enter, or price "
                                    "them at their expected value (the block's default)")])
    if not used:
        return {}
    if len(used) == 1:      # scipy's sobol_indices fails on a single input (a TypeError, not an answer)
        raise PlanError([Diagnostic("error", "usage", f"'{nid}' reads one uncertain input ('{used[0]}'): Sobol "
                                    "indices share a quantity's spread among two or more", None,
                                    "all of its spread is that input's; the percentiles of `--samples` show it")])
    _check_count(ws, plan, n * (len(used) + 2))

    def f(x):
        with np.errstate(all="ignore"):
            return np.array(np.broadcast_to(np.asarray(fn(*x)[0], dtype=float), (x.shape[1],)))[None, :]

    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 0x50B0])))
    res = sobol_indices(func=f, n=n, dists=[ws.nodes[i].dist.scipy() for i in used], random_state=rng)
    return {i: {"first": float(np.ravel(res.first_order)[k]), "total": float(np.ravel(res.total_order)[k])}
            for k, i in enumerate(used)}


def fewest_for_probability(ws, target: str, req: str, p: float, samples: int, seed: int = 0,
                           cap: int | None = None) -> dict:
    """The least whole value of input ``target`` (``gpus48.gpus``) at which requirement ``req``
    of its plan holds with probability at least ``p`` (0..1), the same seed at every candidate
    (common random numbers).

    Each candidate re-evaluates the file with ``target`` overridden (so a count a layout
    divides, or the plan's structure, is rebuilt), at most ``solve_evaluations`` of them.
    Candidates are the whole numbers from 1 to ``cap`` (default 16 × nominal) at which the
    plan's whole-number requirements hold (a GPU count that divides the global batch:
    :func:`~dsl.results.requirement_checks.discrete_requirements`); a candidate the plan cannot
    be built at, or at which another of the plan's requirements fails at the nominal point, is
    left out.  The probability is taken to grow with the target (more GPUs never hurt the odds)
    and the least passing candidate is found by bisection.

    :returns: ``{"target", "requirement", "p", "answer" (int or None), "probability" (at the
        answer), "tried": [{"value", "probability" | "skipped"}]}``.
    :raises PlanError: an unknown target or requirement, a target that is not a whole number.
    """
    from dsl.results.evaluation import evaluate_file
    from dsl.results.requirement_checks import discrete_requirements, holds_exact
    from dsl.syntax.limits import current, raise_hint
    n = ws.nodes.get(target)
    plan = n.owner if n is not None else None
    if n is None or not n.input or not n.numeric or ws.kind(plan) != "plan":
        raise PlanError([Diagnostic("error", "solve", f"'{target}' is not an input of a plan", None,
                                    "name a plan's whole-number input, e.g. gpus48.gpus")])
    if ws.requirement(plan, req) is None:
        raise PlanError([Diagnostic("error", "solve", f"plan '{plan}' has no requirement '{req}'", None,
                                    "`plan eval` lists the plan's requirements")])
    x0 = ws.base_value(target)
    if not (x0.is_Integer and x0 > 0):
        raise PlanError([Diagnostic("error", "solve", f"'{target}' is not a positive whole number ({x0})", n.span,
                                    "the probability solve answers a count (GPUs, replicas)")])
    _check_count(ws, plan, samples)
    x = sp.Symbol(target, real=True)
    free = frozenset({target})
    discrete = discrete_requirements(ws, x, free, ws.nominal_map(exclude=free))
    top = int(cap or 16 * int(x0))
    cands = [k for k in range(1, top + 1) if all(holds_exact(lhs, op, rhs, x, k) for _, lhs, op, rhs in discrete)]
    tried, budget = {}, current().solve_evaluations

    def probe(k: int):
        if k in tried:
            return tried[k]
        if len(tried) >= budget:
            raise PlanError([Diagnostic("error", "limit", f"the probability solve of '{target}' needs more than "
                                        f"{budget} evaluations of the file", n.span, raise_hint("solve_evaluations"))])
        try:
            ev = ws if k == int(x0) else evaluate_file(ws.path, plugins=ws.plugins, overrides={target: sp.Integer(k)})
            bad = [r["name"] for r in ev.requirement_results(plan) if r["name"] != req and not r["ok"]]
            if bad:
                tried[k] = {"value": k, "skipped": "fails " + ", ".join(bad)}
            else:
                o = sample_plan(ev, plan, samples, seed, outputs=[])
                tried[k] = {"value": k, "probability": o.probability(req), "stderr": o.stderr(req)}
        except PlanError as e:
            d = next((d for d in e.diagnostics if d.severity == "error"), None)
            tried[k] = {"value": k, "skipped": f"error[{d.code}]: {d.summary}" if d else "not built"}
        return tried[k]

    def ok(k):   # None: skipped
        r = probe(k)
        return None if "skipped" in r else r["probability"] >= p

    lo, hi = 0, len(cands)          # invariant: the answer's index lies in [lo, hi) or is hi (none)
    while lo < hi:
        mid = (lo + hi) // 2
        r = ok(cands[mid])
        if r is None:
            cands.pop(mid)
            hi -= 1
            continue
        if r:
            hi = mid
        else:
            lo = mid + 1
    answer = cands[lo] if lo < len(cands) else None
    return {"target": target, "requirement": f"{plan}.{req}", "p": p, "samples": samples, "seed": seed,
            "answer": answer, "probability": tried[answer]["probability"] if answer is not None else None,
            "tried": [tried[k] for k in sorted(tried)]}

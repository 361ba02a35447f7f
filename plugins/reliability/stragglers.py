"""Stragglers: a synchronous step waits for the slowest of N devices (book §10.4.5).

``use stragglers { jitter = 5 % }``

Each device's compute time is an independent normal variable with mean μ (the plan's
``compute_time`` unless ``mean`` is given) and standard deviation σ = jitter·μ.  A synchronous
step ends when the slowest device is done, so its compute part is the maximum of N samples::

    E[step] = μ + e_N·σ + waits,     e_N = E[max of N standard normals]
            = ∫ x · N φ(x) Φ(x)^(N−1) dx   over (−∞, ∞)

(φ, Φ the standard normal density and distribution; the density of the maximum of N i.i.d.
variables is N φ Φ^(N−1)).  e_N is the sympy function :class:`expected_max_normal` of the
symbolic device count, evaluated by numerical integration (``mpmath.quad``) when a number
is needed: e_8 ≈ 1.42, e_48 ≈ 2.23, e_1024 ≈ 3.25 (book §10.4.5 table).

With ``use compute`` in the plan (and neither ``mean`` nor ``waits`` given) the expected
delay e_N·σ becomes an activity ``straggler_delay`` on the ``step`` timeline spliced after
``compute`` — so ``step_time`` and with it the ``finish`` block's finish time include it.

Policies for one device that runs at μ + zσ (``slow_z``, default 3), §10.4.5:

* wait: extra time per step ``σ·max(0, z − e_{N−1})`` (the other N−1 devices' expected
  maximum is what the step would have waited for anyway);
* redistribute: its work spread over N−1 devices: ``μN/(N−1) + e_{N−1}σ + waits``;
* evict: restart from the last checkpoint without it: ``τ/2 + r`` (``rollback_cost`` of the
  ``checkpoint`` block).  ``straggler_wait_cost`` = ``slow_steps`` × wait extra; the
  break-even ``solve P.stragglers.slow_steps for P.straggler_wait_cost == P.evict_cost``.
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec

SPEC = UseSpec(
    "stragglers",
    "synchronous steps wait for the slowest device: expected maximum of N normal compute times",
    references=("stragglers: a synchronous step waits for the expected maximum of N normal step times",
                "expected maximum of N normals by numerical integration of the order statistic's density"),
    params=(
        Param("jitter", "", None, "standard deviation of one device's compute time, relative to its mean",
              min=0),
        Param("devices", "", "gpus", "devices that wait for each other every step", min=2, whole=True),
        Param("mean", "s", None, "mean compute time per device and step (default: compute_time)",
              min=0, min_open=True, optional=True),
        Param("waits", "s", None, "fixed per-step time besides compute: exposed communication and "
              "input wait (default: step_time − compute_time)", min=0, optional=True),
        Param("slow_z", "", "3", "a slow device's compute time, in σ above the mean", min=0),
        Param("slow_steps", "", "1", "steps a slow device stays slow (for the evict break-even)", min=0),
    ),
    order=35,
    provides=("straggler_sigma", "expected_max_z", "straggler_delay", "expected_step", "wait_extra",
              "redistribute_step", "straggler_wait_cost", "evict_cost", "evict_steps"),
)


class expected_max_normal(sp.Function):
    """E[max of n i.i.d. standard normal variables] as a sympy function of ``n`` (n ≥ 1).

    Evaluated numerically (mpmath.quad over (−∞, ∞) of x·n·φ(x)·Φ(x)^(n−1)); exact for n = 1
    (0) and n = 2 (1/√π).  Book §10.4.5, footnote 7 ("numerical integration of the order
    statistic").  Real ``n`` is accepted (the integral is defined for every n ≥ 1), so the
    solver can treat the device count as continuous.
    """

    is_real = True

    @classmethod
    def eval(cls, n):
        if n == 1:
            return sp.Integer(0)
        if n == 2:
            return 1 / sp.sqrt(sp.pi)
        return None

    def _eval_evalf(self, prec):
        n = self.args[0]
        if not n.is_number:
            return None
        return sp.Float(_emax_cached(float(n)), precision=min(prec, 53))

    @staticmethod
    def _imp_(n):    # used by sympy.lambdify (the solver's numeric branch)
        return _emax_cached(float(n))


@lru_cache(maxsize=4096)
def _emax_cached(n: float) -> float:
    """E[max of n standard normals] as a float (the quadrature is accurate to ~1e-15)."""
    import mpmath

    with mpmath.workdps(20):
        return float(_emax(mpmath.mpf(n)))


def _emax(n):
    """∫ x · n φ(x) Φ(x)^(n−1) dx over the real line (mpmath numbers, at the working precision).

    ``mpmath.quad`` (tanh–sinh) places the same nodes on the same intervals for every n at a
    given precision, so φ and Φ at a node — three quarters of the integrand's cost — are
    computed once per process (:func:`_normal_at`) and every further n only raises Φ to its
    power: the same operations in the same order as without the memo, so the same result.
    """
    import mpmath

    prec = mpmath.mp.prec
    m = n - 1

    def f(x):
        pdf, cdf = _normal_at(x, prec)
        return x * n * pdf * cdf ** m

    # split where the integrand lives (the maximum of n ≤ 10^6 normals is below 6)
    return mpmath.quad(f, [-mpmath.inf, -2, 0, 2, 4, 6, mpmath.inf])


@lru_cache(maxsize=None)
def _normal_at(x, prec: int):
    """(φ(x), Φ(x)) as ``mpmath.npdf``/``mpmath.ncdf`` give them at ``prec`` bits, memoised per
    (node, precision): the quadrature's nodes are a fixed set (a few thousand at most)."""
    import mpmath
    return mpmath.npdf(x), mpmath.ncdf(x)


@hookimpl
def plan_blocks_register():
    return [SPEC]


def _integrated(ctx, b) -> bool:
    return not b.given("mean") and not b.given("waits") and ctx.provided("compute_time")


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("stragglers")
    if b is None:
        return
    if not b.given("mean") and not ctx.provided("compute_time"):
        b.error_at("jitter", "`use stragglers` needs the mean compute time per device",
                   "give `mean = 52.2 s` in the block, or add `use compute {}` to the plan",
                   code="missing-quantity")
    n = b.q("devices")
    mu = b.q("mean") if b.given("mean") else ctx.q("compute_time", "s")
    sigma = ctx.define("straggler_sigma", b.q("jitter") * mu, "s",
                       "σ: standard deviation of one device's compute time (jitter × mean)")
    e_n = ctx.define("expected_max_z", expected_max_normal(n), "",
                     "e_N = E[max of N standard normals] = ∫ x·Nφ(x)Φ(x)^(N−1) dx",
                     references=("stragglers: a synchronous step waits for the expected maximum of N normal step "
                                 "times",))
    e_rest = expected_max_normal(n - 1)
    delay = ctx.define("straggler_delay", e_n * sigma, "s",
                       "expected wait for the slowest device per step: e_N·σ",
                       references=("stragglers: a synchronous step waits for the expected maximum of N normal step "
                                   "times",))
    if _integrated(ctx, b):
        step = ctx.q("step_time", "s")
        waits = step - ctx.q("compute_time", "s") - delay
    else:
        waits = b.q("waits") if b.given("waits") else ctx.q("step_time", "s") - ctx.q("compute_time", "s")
        step = mu + delay + waits
    ctx.define("expected_step", step, "s", "μ + e_N·σ + waits: expected synchronous step",
               headline=True, references=("stragglers: a synchronous step waits for the expected maximum of N normal "
                                          "step times",))
    z = b.q("slow_z")
    extra = ctx.define("wait_extra", sigma * sp.Max(0, z - e_rest), "s",
                       "wait policy: extra time per step from one device at μ+zσ: σ·max(0, z − e_{N−1})")
    ctx.define("redistribute_step", mu * n / (n - 1) + e_rest * sigma + waits, "s",
               "redistribute policy: μN/(N−1) + e_{N−1}σ + waits")
    ctx.define("straggler_wait_cost", b.q("slow_steps") * extra, "s",
               "time lost by waiting for a slow device over slow_steps steps")
    if ctx.provided("rollback_cost"):
        ev = ctx.define("evict_cost", ctx.q("rollback_cost", "s"), "s",
                        "evict policy: restart without the slow device from the last checkpoint, τ/2 + r")
        ctx.define("evict_steps", ev / (step - delay), "", "the evict cost in steps without stragglers")


@hookimpl
def plan_activities_schedule(ctx):
    b = ctx.block("stragglers")
    if b is None or not _integrated(ctx, b):
        return
    tl = ctx.timeline("step")
    tl.add("straggler_delay", ctx.q("straggler_delay", "s"), "gpu", splice_after="compute",
           doc="expected wait for the slowest device: e_N·σ", kind="wait")

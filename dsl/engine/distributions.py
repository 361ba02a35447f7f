"""Distributions of uncertain inputs: `mfu = normal(40 %, 3 %)` and its kin.

An input written as a distribution keeps a **nominal** value — the stated central value below —
so every deterministic output (``plan eval`` without ``--samples``, ``solve``, sensitivities)
is that of the nominal plan; sampling (:mod:`dsl.results.odds`) draws from the distribution.

===============================  =========================  ===============================
written                          draws                      nominal
===============================  =========================  ===============================
``normal(mean, sd)``             Gaussian (not truncated)   the mean
``uniform(lo, hi)``              uniform on [lo, hi]        the midpoint (the mean)
``lognormal(median, sigma)``     median·exp(sigma·Z)        the median
``triangular(lo, mode, hi)``     triangular                 the mode
``empirical("f.csv", "col"       resampled rows             the median of the values
[, unit])``                      (bootstrap)                (the lower middle one for an
                                                            even count)
``choice(a, b, …)``              one of the values,         the median of the values (the
                                 equally likely             lower middle one), as empirical
===============================  =========================  ===============================

``choice`` is the distribution of a structural input (a GPU count a layout divides): sampling
re-evaluates the plan at each value drawn (:mod:`dsl.results.odds`).

``sigma`` of a lognormal is the standard deviation of ln x (dimensionless); every other
argument has the input's dimension.  Parameters are held as floats in base units (s, B, FLOP …);
the nominal is exact (a sympy number).  numpy (and scipy, for :meth:`Dist.scipy`) are imported
only when something is drawn.
"""
from __future__ import annotations

from dataclasses import dataclass

#: the distribution constructors of the language, with their argument names
KINDS = {
    "normal": ("mean", "sd"),
    "uniform": ("lo", "hi"),
    "lognormal": ("median", "sigma"),
    "triangular": ("lo", "mode", "hi"),
    "empirical": ("file", "column", "unit"),
    "choice": ("value", "…"),
}


@dataclass(frozen=True)
class Dist:
    """One uncertain input's distribution.

    :ivar kind: a key of :data:`KINDS`.
    :ivar params: floats in base units (``lognormal``: median in base units, sigma
        dimensionless; ``empirical``: the sorted values).
    :ivar text: the distribution as written (for messages and reports).
    """

    kind: str
    params: tuple
    text: str = ""

    def draw(self, rng, n: int):
        """``n`` draws (a float64 numpy array, base units) from numpy Generator ``rng``."""
        import numpy as np
        p = self.params
        if self.kind == "normal":
            return rng.normal(p[0], p[1], n)
        if self.kind == "uniform":
            return rng.uniform(p[0], p[1], n)
        if self.kind == "lognormal":
            return p[0] * np.exp(p[1] * rng.standard_normal(n))
        if self.kind == "triangular":
            return rng.triangular(p[0], p[1], p[2], n)
        if self.kind == "empirical":
            return np.asarray(p, dtype=float)[rng.integers(0, len(p), n)]
        raise ValueError(self.kind)  # pragma: no cover

    def scipy(self):
        """An object with ``ppf`` (a frozen ``scipy.stats`` distribution, or the empirical
        quantile function) for :func:`scipy.stats.sobol_indices`."""
        from scipy import stats
        p = self.params
        if self.kind == "normal":
            return stats.norm(loc=p[0], scale=p[1])
        if self.kind == "uniform":
            return stats.uniform(loc=p[0], scale=p[1] - p[0])
        if self.kind == "lognormal":
            return stats.lognorm(s=p[1], scale=p[0])
        if self.kind == "triangular":
            return stats.triang(c=(p[1] - p[0]) / (p[2] - p[0]), loc=p[0], scale=p[2] - p[0])
        return _Empirical(p)


class _Empirical:
    """The quantile function of a sample (``ppf``: the inverse of its step CDF)."""

    def __init__(self, values: tuple):
        self.values = values

    def ppf(self, q):
        import numpy as np
        v = np.asarray(self.values, dtype=float)
        i = np.clip(np.ceil(np.asarray(q) * len(v)).astype(int) - 1, 0, len(v) - 1)
        return v[i]

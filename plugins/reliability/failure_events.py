"""Failures as events: the realised time a run loses to interruptions, sampled.

``use checkpoint { failures = "sampled" }`` makes the checkpoint overhead of a training plan a
random quantity: ``plan eval`` keeps pricing its expected value, and ``plan eval --samples N``
draws, for each sample, the interruptions a whole run meets and the time they cost, so the
finish time's distribution includes them.

The process (the Poisson retry model of ``use checkpoint``): the run's useful time W is cut
into K = ⌈W/τ⌉ segments of τ seconds of training, each followed by a save of c seconds; the
job fails at rate Λ (device failures, loss spikes and outages together); a failure loses the
segment's work done so far and costs a restart r, and the segment is retried until it runs
τ + c seconds without a failure.

* A segment succeeds with probability q = e^{−Λ(τ+c)}, so the failures before K successes are
  negative-binomial: M ~ NB(K, q), E[M] = K(1 − q)/q.
* A failed attempt lasts X ~ Exp(Λ) truncated to [0, τ + c]:
  E[X] = 1/Λ − T·q/(1 − q) and E[X²] = (2/Λ² − q(T² + 2T/Λ + 2/Λ²))/(1 − q), T = τ + c.
* The run's wall time is W + K·c + ΣX + M·r; the realised overhead is that less W, over W.

Its mean is K[(1/Λ + r)(e^{Λ(τ+c)} − 1) − τ]/W — the Poisson retry model's ``retry_overhead``
when W is a whole number of intervals (each of the K segments, the last included, is exposed
for a whole interval) (Young 1974; the retry form in Daly 2006, 'A higher
order estimate of the optimum checkpoint interval for restart dumps').  The attempts' lengths
are drawn one by one while the failures of all samples number at most :data:`EXACT_DRAWS`;
beyond that their sum is drawn from its normal approximation (mean M·E[X], variance
M·Var[X], the central limit theorem over hundreds of failures per run), so memory stays bounded.
"""
from __future__ import annotations

#: the most single failed attempts drawn one by one (across all samples) before the sum of a
#: sample's attempts is drawn from its normal approximation instead
EXACT_DRAWS = 2_000_000


def attempt_moments(lam, T):
    """(E[X], Var[X]) of a failed attempt, X ~ Exp(lam) truncated to [0, T] (numpy arrays or floats;
    lam in 1/s, T in s)."""
    import numpy as np
    lam, T = np.asarray(lam, dtype=float), np.asarray(T, dtype=float)
    q = np.exp(-lam * T)
    m1 = 1 / lam - T * q / (1 - q)
    m2 = (2 / lam**2 - q * (T**2 + 2 * T / lam + 2 / lam**2)) / (1 - q)
    return m1, np.maximum(m2 - m1**2, 0.0)


def sample_overhead(rng, n: int, W, tau, c, r, lam):
    """``n`` realisations of the overhead (lost time over useful time W) of runs of useful time
    ``W`` (s) with checkpoint interval ``tau`` (s), save time ``c`` (s), restart ``r`` (s) and
    interruption rate ``lam`` (1/s): arrays of n samples or floats (see the module docstring).

    :returns: float numpy array of n overheads (a fraction; 0.05 = 5 %).
    """
    import numpy as np
    W, tau, c, r, lam = (np.broadcast_to(np.asarray(x, dtype=float), (n,)) for x in (W, tau, c, r, lam))
    K = np.ceil(W / tau)
    T = tau + c
    q = np.exp(-lam * T)
    M = rng.negative_binomial(K, q).astype(float)
    total = int(M.sum())
    if total <= EXACT_DRAWS:
        lam_i = np.repeat(lam, M.astype(np.int64))
        u = rng.random(total)
        x = -np.log1p(-u * (1 - np.repeat(q, M.astype(np.int64)))) / lam_i
        lost = np.zeros(n)
        np.add.at(lost, np.repeat(np.arange(n), M.astype(np.int64)), x)
    else:
        mu, var = attempt_moments(lam, T)
        lost = np.maximum(rng.normal(M * mu, np.sqrt(M * var)), 0.0)
    return (K * c + lost + M * r) / W


def expected_overhead(W, tau, c, r, lam):
    """E[:func:`sample_overhead`]: K[(1/Λ + r)(e^{Λ(τ+c)} − 1) − τ]/W with K = ⌈W/τ⌉ (floats)."""
    import math
    K = math.ceil(W / tau)
    return K * ((1 / lam + r) * math.expm1(lam * (tau + c)) - tau) / W

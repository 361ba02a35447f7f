"""Bounded least squares for calibration: one unknown by Gauss–Newton (numpy), several by
SciPy's trust-region reflective method."""
from __future__ import annotations

import math


def least_squares_bounded(residuals, x0: list, lo: list, hi: list):
    """Minimise ½·Σ r_i(x)² over the box lo ≤ x ≤ hi: ``residuals(x)`` (x a numpy array) → numpy
    array.  One unknown: :func:`_least_squares_1d` (numpy only); several:
    ``scipy.optimize.least_squares`` (trust-region reflective, bounded, xtol = ftol = gtol = 1e-12).

    :returns: ``(x as a list of floats, cost, status, nfev)``; status > 0 when converged.
    :raises ImportError: several unknowns without scipy (the ``numeric`` extra).
    """
    import numpy as np

    if len(x0) == 1:            # scipy.optimize costs ≈0.5 s to import: a single field does without
        x, cost, status, nfev = _least_squares_1d(lambda t: residuals(np.array([t])), x0[0], lo[0], hi[0])
        return [x], cost, status, nfev
    from scipy.optimize import least_squares
    res = least_squares(residuals, np.array(x0), bounds=(lo, hi), method="trf", x_scale="jac",
                        xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=2000)
    return [float(v) for v in res.x], float(res.cost), int(res.status), int(res.nfev)


XTOL = 1e-12      # relative step and decrease of S that end the one-field fit (least_squares' xtol, ftol)


def _least_squares_1d(residuals, x0: float, lo: float, hi: float, max_nfev: int = 2000):
    """Minimise S(x) = Σ r_i(x)² over lo ≤ x ≤ hi for one unknown: ``residuals(x)`` → numpy array.

    Gauss–Newton (Nocedal & Wright, "Numerical Optimization", 2nd ed., §10.3) with a forward
    difference derivative J (step √ε·max(1, |x|), as scipy's '2-point' Jacobian), each step
    clipped to the bounds and halved until S decreases; stops when the step or the relative
    decrease of S is below :data:`XTOL` (scipy's xtol/ftol criteria) or no step longer lowers S.
    Then, at float resolution, it moves to the best of x ± 1…3 ulp while that lowers S, so no
    float within 3 ulp of the answer has a smaller sum of squares (for one run: its relative
    error is the closest to 0 among its neighbours).  Against scipy's trust-region reflective
    method on the same residuals, S is equal for one run and equal to float rounding (≤ 1e-14
    relative) for several (tests/test_calibration.py).

    :returns: ``(x, cost = S/2, status, nfev)``; status 1 converged, 0 ``max_nfev`` reached.
    """
    import numpy as np

    nfev = 0

    def sq(x):
        nonlocal nfev
        nfev += 1
        with np.errstate(all="ignore"):
            r = np.asarray(residuals(x), dtype=float)
        s = float(r @ r)
        return r, (s if np.isfinite(s) else math.inf)

    x = float(x0)
    r, s = sq(x)
    status = 0
    while nfev < max_nfev:
        h = math.sqrt(np.finfo(float).eps) * max(1.0, abs(x))
        xh = x + h if x + h <= hi else x - h
        rh, _ = sq(xh)
        J = (rh - r) / (xh - x)
        jj = float(J @ J)
        if not (jj > 0 and math.isfinite(jj)):
            status = 1
            break
        step = -float(J @ r) / jj
        xn = x
        while abs(step) > XTOL * (XTOL + abs(x)):
            xn = min(max(x + step, lo), hi)
            if xn == x:
                break
            rn, sn = sq(xn)
            if sn < s:
                break
            xn = x
            step /= 2
        if xn == x:            # no step longer than xtol lowers S
            status = 1
            break
        moved, s_before = abs(xn - x), s
        x, r, s = xn, rn, sn
        if moved <= XTOL * (XTOL + abs(x)) or s_before - s <= XTOL * s_before:
            status = 1
            break
    while nfev < max_nfev:         # polish: the best float within 3 ulp, while it improves
        best = (s, x, r)
        for sign in (1.0, -1.0):
            xn = x
            for _ in range(3):
                xn = math.nextafter(xn, sign * math.inf)
                if not lo <= xn <= hi:
                    break
                rn, sn = sq(xn)
                if sn < best[0]:
                    best = (sn, xn, rn)
        if best[1] == x:
            break
        s, x, r = best
    return x, s / 2, status, nfev

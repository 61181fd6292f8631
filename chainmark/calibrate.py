"""Calibration, the paper's: from a regulator's targets (alpha, n, rho) to a configuration, and back.

*Closed form.* Under the i.i.d. null the validity indicators of a k-regular topology are Bernoulli(p0 = k/S) with
zero covariance, and a watermark with gate density rho lifts their mean by rho (1 - p0). That gives the expected
watermarked z (:func:`predicted_z`), the midpoint threshold halfway between the two means
(:func:`midpoint_threshold`), the Hoeffding bound on its false positive rate (:func:`hoeffding_fpr_bound`) and the
paper's state-count rule S*(n, rho, alpha) (:func:`s_star`, :func:`calibration_table`). Because the count of valid
transitions of i.i.d. uniform states is exactly Binomial(n - 1, p0), the true size of the Gaussian z-test is
computable too (:func:`exact_fpr`).

*Empirical.* Natural text is not i.i.d., so the analytic threshold drifts. :func:`recalibrate` sets a new threshold
from null z-scores of a corpus (the SD recipe mu + z_alpha sigma, or an order-statistic quantile), on a corpus of at
least :func:`min_null_samples` texts. Measured rates and their exact intervals are :mod:`chainmark.auditor.rates`;
the experiments' statistics (bootstrap intervals, split halves, the lifted threshold) are the book's lab.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from .checks import check_alpha, check_int, check_length, check_null_scores, check_rho_positive
from .verdict import decide

__all__ = ["HEAVY_TAIL_KURTOSIS", "calibration_table", "critical_count", "exact_fpr", "excess_kurtosis",
           "hoeffding_fpr_bound", "midpoint_exact_fpr", "midpoint_threshold", "midpoint_z", "min_null_samples",
           "predicted_z", "recalibrate", "s_star", "s_star_exact", "z_alpha"]

#: The paper's lookup-table grid (section "Reference tables").
_PAPER_NS = (100, 200, 500, 1000)
_PAPER_RHOS = (0.3, 0.5)
_PAPER_ALPHAS = (1e-3, 1e-6)

_RECALIBRATION_METHODS = ("sd", "quantile")

# Guards ceilings against floating-point noise such as 0.9 / 0.1 = 9.000000000000002.
_EPS = 1e-9


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------
def _null_p0(S: object, k: object = 1) -> float:
    """The null share of valid transitions, p0 = k / S, for a k-regular topology."""
    S = check_int(S, "S", 2)
    k = check_int(k, "k", 1)
    if k >= S:
        raise ValueError(f"k (successors per state) must lie in [1, S - 1] = [1, {S - 1}], got k = {k}")
    return k / S


# ---------------------------------------------------------------------------
# closed form
# ---------------------------------------------------------------------------
def z_alpha(alpha: float) -> float:
    """One-sided standard-normal critical value: P(Z > z_alpha) = alpha (z_0.01 = 2.326).

    >>> round(cm.z_alpha(0.01), 3)
    2.326
    """
    from scipy.stats import norm  # here: scipy.stats takes seconds to load, and `import chainmark` imports this module

    return float(norm.isf(check_alpha(alpha)))


def predicted_z(n: int, rho: float, S: int, k: int = 1) -> float:
    """Expected watermarked z (the noncentrality): rho * sqrt((1 - p0)(n - 1) / p0).

    The watermark lifts the mean of phi from p0 to p0 + rho (1 - p0); the
    null standard deviation is sqrt(p0 (1 - p0) / (n - 1)). Their ratio is
    this value; for k = 1 it is the paper's rho * sqrt((S - 1)(n - 1)).

    >>> round(cm.predicted_z(n=200, rho=0.5, S=5), 2)
    14.11
    """
    n = check_length(n)
    rho = check_rho_positive(rho)
    p0 = _null_p0(S, k)
    return rho * math.sqrt((1.0 - p0) * (n - 1) / p0)


def midpoint_threshold(rho: float, S: int, k: int = 1) -> float:
    """Midpoint threshold on the phi scale: p0 + (rho / 2)(1 - p0).

    Halfway between the null mean p0 and the watermarked mean
    p0 + rho (1 - p0). It does not depend on n; its z-scale equivalent
    (:func:`midpoint_z`) does.

    >>> cm.midpoint_threshold(rho=0.5, S=5)  # p0 = 1/5, halfway to the watermarked phi
    0.4
    """
    rho = check_rho_positive(rho)
    p0 = _null_p0(S, k)
    return p0 + 0.5 * rho * (1.0 - p0)


def midpoint_z(n: int, rho: float, S: int, k: int = 1) -> float:
    """The midpoint threshold on the z scale: half of :func:`predicted_z`."""
    return 0.5 * predicted_z(n, rho, S, k)


def s_star(n: int, rho: float, alpha: float, k: int = 1) -> int:
    """Smallest state count S whose midpoint threshold clears z_alpha.

    Derivation (any k-regular topology, p0 = k / S). At the midpoint
    threshold the null z-margin is half the noncentrality,

        (rho / 2) * sqrt((1 - p0)(n - 1) / p0)  >=  z_alpha.

    With (1 - p0) / p0 = S / k - 1, squaring (valid for z_alpha > 0) gives

        S / k - 1  >=  4 z_alpha^2 / (rho^2 (n - 1)),
        S          >=  k * (4 z_alpha^2 / (rho^2 (n - 1)) + 1),

    so S* = ceil(k * (4 z_alpha^2 / (rho^2 (n - 1)) + 1)). For k = 1 this is
    the paper's rule ceil(4 z_alpha^2 / (rho^2 (n - 1)) + 1). The bracket
    exceeds 1, so S* >= k + 1 always holds (a valid topology needs k < S).
    For alpha >= 0.5, z_alpha <= 0 and every S qualifies: S* = k + 1.

    >>> cm.s_star(n=200, rho=0.5, alpha=0.01)
    2
    >>> cm.s_star(n=50, rho=0.25, alpha=0.001)
    14
    """
    n = check_length(n)
    rho = check_rho_positive(rho)
    k = check_int(k, "k", 1)
    z = z_alpha(alpha)
    if z <= 0.0:
        return max(2, k + 1)
    bound = k * (4.0 * z * z / (rho * rho * (n - 1)) + 1.0)
    return max(2, k + 1, math.ceil(bound - _EPS))


def hoeffding_fpr_bound(n: int, rho: float, S: int, k: int = 1) -> float:
    """Hoeffding bound on the FPR of the midpoint detector (the detection theorem).

    The n - 1 indicators split into odd and even positions, two sets of
    m = floor((n - 1) / 2) or more independent Bernoulli(p0) terms; phi above
    the midpoint means at least one half is, so a union bound gives

        FPR <= 2 exp(-2 m ((rho / 2)(1 - p0))^2).

    Returned as the formula gives it: values >= 1 (short texts) say nothing.

    >>> cm.hoeffding_fpr_bound(n=200, rho=0.5, S=5) < 0.01
    True
    """
    n = check_length(n)
    gap = midpoint_threshold(rho, S, k) - _null_p0(S, k)
    m = (n - 1) // 2
    return 2.0 * math.exp(-2.0 * m * gap * gap)


def critical_count(n: int, S: int, alpha: float, k: int = 1) -> int:
    """Fewest valid transitions (out of n - 1) at which the detector says 'watermarked'.

    Uses the detector's own decision, p-value < alpha with the Gaussian
    p-value of the z-score; returns n when even n - 1 valid transitions
    are not enough.
    """
    from scipy.stats import norm

    n = check_length(n)
    alpha = check_alpha(alpha)
    p0 = _null_p0(S, k)
    m = n - 1
    sd = math.sqrt(p0 * (1.0 - p0) / m)

    def fires(c: int) -> bool:
        z = (c / m - p0) / sd
        return bool(decide(z=z, p_value=float(norm.sf(z)), alpha=alpha))

    c = max(0, min(m, math.floor(m * p0 + z_alpha(alpha) * sd * m)))
    while c > 0 and fires(c - 1):
        c -= 1
    while c <= m and not fires(c):
        c += 1
    return c


def exact_fpr(n: int, S: int, alpha: float, k: int = 1) -> float:
    """True size of the z-test on i.i.d. uniform states: P(Binomial(n - 1, p0) >= c*).

    With i.i.d. uniform states and a k-regular topology the n - 1 validity
    indicators are exactly i.i.d. Bernoulli(p0) (each one is independent of
    everything after it, given the next state, by column regularity), so the
    count of valid transitions is Binomial(n - 1, p0) and the detector fires
    from :func:`critical_count` on.

    >>> round(cm.exact_fpr(n=200, S=5, alpha=0.01), 4)  # the z-test at alpha = 1% on 200 uniform tokens: above 1%
    0.0143
    """
    from scipy.stats import binom

    c = critical_count(n, S, alpha, k)
    return float(binom.sf(c - 1, n - 1, _null_p0(S, k)))


def midpoint_exact_fpr(n: int, rho: float, S: int, k: int = 1) -> float:
    """Exact false-positive rate of the midpoint detector on a text of n distinct tokens: P(phi >= tau_mid).

    The count of legal transitions is Binomial(n - 1, p0) under a random key
    whenever the text's tokens are all distinct (and for every text on the
    exact test's m + 1 tokens). :func:`s_star` makes the midpoint clear
    z_alpha on the normal scale; this is what that margin delivers exactly,
    which can be more than alpha (18 alpha at n = 100, rho = 0.3,
    alpha = 1e-6, where the binomial's right tail is longer than the normal's).
    """
    from scipy.stats import binom

    n = check_length(n)
    tau = midpoint_threshold(rho, S, k)
    m = n - 1
    return float(binom.sf(math.ceil(tau * m - _EPS) - 1, m, _null_p0(S, k)))


def s_star_exact(n: int, rho: float, alpha: float, k: int = 1, max_states: int = 1_000_000) -> int:
    """Smallest S whose midpoint detector has exact false-positive rate at most alpha (:func:`midpoint_exact_fpr`).

    The binomial counterpart of :func:`s_star`: the same provisioning rule
    (the midpoint between the null and the watermarked means must be a
    rejection point), with the binomial tail where the closed form has the
    normal one. For the exact test, n is the number of distinct tokens (its
    m + 1). Searched upwards from k + 1; the rate is not monotone in S (the
    count moves in steps), so the first S that qualifies is returned, as the
    closed form's ceiling does.
    """
    n = check_length(n)
    rho = check_rho_positive(rho)
    alpha = check_alpha(alpha)
    k = check_int(k, "k", 1)
    for S in range(max(2, k + 1), max_states + 1):
        if midpoint_exact_fpr(n, rho, S, k) <= alpha:
            return S
    raise ValueError(f"no S up to {max_states} gives the midpoint detector an exact rate of at most alpha = "
                     f"{alpha:g} at n = {n}, rho = {rho}")


def calibration_table(
    ns: Iterable[int] = _PAPER_NS,
    rhos: Iterable[float] = _PAPER_RHOS,
    alphas: Iterable[float] = _PAPER_ALPHAS,
    k: int = 1,
) -> "Any":
    """Lookup table of S*(n, rho, alpha): rows n, columns (alpha, rho).

    The defaults are the paper's grid, and the result reproduces its table
    cell for cell. Returns a pandas DataFrame with a two-level column index
    (pandas comes with the book's install, not the model-free core's).
    """
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("calibration_table returns a pandas DataFrame: pip install pandas "
                          "(or the book's lab, cmlab); s_star(n, rho, alpha) gives any cell without it") from None

    ns, rhos, alphas = list(ns), list(rhos), list(alphas)
    for name, values in (("ns", ns), ("rhos", rhos), ("alphas", alphas)):
        if not values:
            raise ValueError(f"{name} must name at least one value")
    columns = pd.MultiIndex.from_tuples([(a, r) for a in alphas for r in rhos], names=["alpha", "rho"])
    rows = [[s_star(n, r, a, k) for a in alphas for r in rhos] for n in ns]
    return pd.DataFrame(rows, index=pd.Index(ns, name="n"), columns=columns)


# ---------------------------------------------------------------------------
# empirical recalibration
# ---------------------------------------------------------------------------
def min_null_samples(alpha: float) -> int:
    """Smallest null corpus that can support a threshold at level alpha: ceil((1 - alpha) / alpha).

    Rule: set the threshold at the order statistic z_(j), j = ceil((M + 1)(1 - alpha)).
    For exchangeable null scores a fresh null text exceeds z_(j) with
    probability (M + 1 - j) / (M + 1) <= alpha, and such a j <= M exists only
    when M >= (1 - alpha) / alpha: a smaller corpus has no score high enough
    for that guarantee (at alpha = 0.01, 99 texts; at 1e-6, 999,999). The SD
    recipe is held to the same rule: below it the corpus cannot contain a
    single expected exceedance, so nothing in it can show whether the
    Gaussian tail that the recipe extrapolates holds at alpha.

    >>> cm.min_null_samples(0.01)
    99
    """
    alpha = check_alpha(alpha)
    return max(2, math.ceil((1.0 - alpha) / alpha - _EPS))


#: Excess kurtosis above which a null corpus counts as heavy-tailed (a Gaussian has 0,
#: Laplace 3, Student's t with 5 degrees of freedom 6): the SD recipe's Gaussian
#: assumption then under-states the tail, and only the quantile recipe is safe.
HEAVY_TAIL_KURTOSIS = 1.0


def excess_kurtosis(z: Any) -> float:
    """Sample excess kurtosis of null scores (0 for a Gaussian; the biased moment estimator,
    as ``scipy.stats.kurtosis``); 0 when there are fewer than 4 values or no spread.

    >>> import numpy as np
    >>> round(cm.excess_kurtosis(np.random.default_rng(0).standard_normal(100_000)), 2)
    0.02
    """
    z = np.asarray(z, dtype=float)
    if z.size < 4:
        return 0.0
    d = z - z.mean()
    var = float(np.mean(d ** 2))
    return float(np.mean(d ** 4) / var ** 2 - 3.0) if var > 0 else 0.0


def recalibrate(null_z: Any, alpha: float, method: str = "sd") -> float:
    """Operating z-threshold from null z-scores of a non-watermarked corpus.

    ``method="sd"``: the paper's plug-in z* = mean + z_alpha * SD (sample SD,
    ddof = 1); right when the null z-scores are close to Gaussian, whatever
    their mean and spread.

    ``method="quantile"``: the empirical (1 - alpha) quantile, taken as the
    order statistic z_(j) with j = ceil((M + 1)(1 - alpha)) of the M scores
    (the finite-sample form of F^-1(1 - alpha); it sits at most one order
    statistic above the plain ECDF inverse). Declaring 'watermarked' when
    z > z* then has FPR <= alpha on fresh null text of the same kind,
    for any shape of the null, and >= alpha - 1 / (M + 1) when there are no ties.

    Raises ValueError for an empty corpus, non-finite scores, alpha outside
    (0, 1), a corpus smaller than :func:`min_null_samples` (the message says
    how many are needed) or, for the SD recipe, scores that are all equal.

    >>> import numpy as np
    >>> null_z = np.random.default_rng(0).standard_normal(5000)
    >>> round(cm.recalibrate(null_z, alpha=0.01, method='quantile'), 1)
    2.3
    """
    alpha = check_alpha(alpha)
    if method not in _RECALIBRATION_METHODS:
        raise ValueError(f"method must be one of {_RECALIBRATION_METHODS}, got {method!r}")
    z = check_null_scores(null_z, "null_z")
    need = min_null_samples(alpha)
    if z.size < need:
        raise ValueError(
            f"null_z has {z.size} scores, too few for alpha = {alpha:g}: at least "
            f"ceil((1 - alpha) / alpha) = {need} are needed (raise alpha or score more null texts)"
        )
    if method == "sd":
        sd = float(np.std(z, ddof=1))
        if sd == 0.0:
            raise ValueError("null_z has zero spread (all scores equal); the SD recipe needs variation")
        return float(np.mean(z)) + z_alpha(alpha) * sd
    j = math.ceil((z.size + 1) * (1.0 - alpha) - _EPS)
    return float(np.sort(z)[j - 1])

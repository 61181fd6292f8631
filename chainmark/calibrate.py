"""Calibration: from a regulator's targets (alpha, n, rho) to a configuration, and back.

Two halves live here.

*Closed form.* Under the i.i.d. null the validity indicators of a k-regular
topology are Bernoulli(p0 = k/S) with zero covariance, and a watermark with
gate density rho lifts their mean by rho (1 - p0). That gives the expected
watermarked z (:func:`predicted_z`), the midpoint threshold halfway between
the two means (:func:`midpoint_threshold`), the Hoeffding bound on its false
positive rate (:func:`hoeffding_fpr_bound`) and the paper's state-count rule
S*(n, rho, alpha) (:func:`s_star`, :func:`calibration_table`). Because the
count of valid transitions of i.i.d. uniform states is exactly
Binomial(n - 1, p0), the true size of the Gaussian z-test is computable too
(:func:`exact_fpr`).

*Empirical.* Natural text is not i.i.d., so the analytic threshold drifts.
:func:`recalibrate` sets a new threshold from null z-scores of a corpus
(the SD recipe mu + z_alpha sigma, or an order-statistic quantile) and
:func:`lifted_threshold` puts it above every null score.
:func:`rate_estimate` and :func:`clopper_pearson` report measured rates with
exact binomial intervals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
from scipy.stats import beta, binom, binomtest, norm

from .checks import check_alpha, check_int, check_length, check_rho_positive
from .checks import is_number as _is_number
from .verdict import decide

__all__ = ["HEAVY_TAIL_KURTOSIS", "PAPER_ALPHAS", "PAPER_NS", "PAPER_RHOS", "RECALIBRATION_METHODS", "RateEstimate",
           "calibration_table", "clopper_pearson", "clopper_pearson_lower", "clopper_pearson_upper",
           "cluster_bootstrap_rate", "critical_count", "exact_fpr", "exceedance_rate", "excess_kurtosis",
           "hoeffding_fpr_bound", "judge_against", "lifted_threshold", "midpoint_exact_fpr", "midpoint_threshold",
           "midpoint_z", "min_null_samples", "null_p0", "predicted_z", "rate_estimate", "recalibrate", "s_star",
           "s_star_exact", "split_halves", "threshold_interval", "trials_to_bound", "z_alpha"]

#: The paper's lookup-table grid (section "Reference tables").
PAPER_NS = (100, 200, 500, 1000)
PAPER_RHOS = (0.3, 0.5)
PAPER_ALPHAS = (1e-3, 1e-6)

RECALIBRATION_METHODS = ("sd", "quantile")

# Guards ceilings against floating-point noise such as 0.9 / 0.1 = 9.000000000000002.
_EPS = 1e-9


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------
def null_p0(S: object, k: object = 1) -> float:
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
    """One-sided standard-normal critical value: P(Z > z_alpha) = alpha (z_0.01 = 2.326)."""
    return float(norm.isf(check_alpha(alpha)))


def predicted_z(n: int, rho: float, S: int, k: int = 1) -> float:
    """Expected watermarked z (the noncentrality): rho * sqrt((1 - p0)(n - 1) / p0).

    The watermark lifts the mean of phi from p0 to p0 + rho (1 - p0); the
    null standard deviation is sqrt(p0 (1 - p0) / (n - 1)). Their ratio is
    this value; for k = 1 it is the paper's rho * sqrt((S - 1)(n - 1)).
    """
    n = check_length(n)
    rho = check_rho_positive(rho)
    p0 = null_p0(S, k)
    return rho * math.sqrt((1.0 - p0) * (n - 1) / p0)


def midpoint_threshold(rho: float, S: int, k: int = 1) -> float:
    """Midpoint threshold on the phi scale: p0 + (rho / 2)(1 - p0).

    Halfway between the null mean p0 and the watermarked mean
    p0 + rho (1 - p0). It does not depend on n; its z-scale equivalent
    (:func:`midpoint_z`) does.
    """
    rho = check_rho_positive(rho)
    p0 = null_p0(S, k)
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
    """
    n = check_length(n)
    gap = midpoint_threshold(rho, S, k) - null_p0(S, k)
    m = (n - 1) // 2
    return 2.0 * math.exp(-2.0 * m * gap * gap)


def critical_count(n: int, S: int, alpha: float, k: int = 1) -> int:
    """Fewest valid transitions (out of n - 1) at which the detector says 'watermarked'.

    Uses the detector's own decision, p-value < alpha with the Gaussian
    p-value of the z-score; returns n when even n - 1 valid transitions
    are not enough.
    """
    n = check_length(n)
    alpha = check_alpha(alpha)
    p0 = null_p0(S, k)
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
    """
    c = critical_count(n, S, alpha, k)
    return float(binom.sf(c - 1, n - 1, null_p0(S, k)))


def midpoint_exact_fpr(n: int, rho: float, S: int, k: int = 1) -> float:
    """Exact false-positive rate of the midpoint detector on a text of n distinct tokens: P(phi >= tau_mid).

    The count of legal transitions is Binomial(n - 1, p0) under a random key
    whenever the text's tokens are all distinct (and for every text on the
    exact test's m + 1 tokens). :func:`s_star` makes the midpoint clear
    z_alpha on the normal scale; this is what that margin delivers exactly,
    which can be more than alpha (18 alpha at n = 100, rho = 0.3,
    alpha = 1e-6, where the binomial's right tail is longer than the normal's).
    """
    n = check_length(n)
    tau = midpoint_threshold(rho, S, k)
    m = n - 1
    return float(binom.sf(math.ceil(tau * m - _EPS) - 1, m, null_p0(S, k)))


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
    ns: Iterable[int] = PAPER_NS,
    rhos: Iterable[float] = PAPER_RHOS,
    alphas: Iterable[float] = PAPER_ALPHAS,
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
# measured rates
# ---------------------------------------------------------------------------
def _check_binomial(hits: object, trials: object, level: object) -> tuple[int, int, float]:
    """Checked (hits, trials, level) of a binomial rate's confidence bound."""
    trials = check_int(trials, "trials", 1)
    hits = check_int(hits, "hits", 0)
    if hits > trials:
        raise ValueError(f"hits must be <= trials, got {hits} > {trials}")
    if not _is_number(level) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return hits, trials, float(level)


def clopper_pearson(hits: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided confidence interval for a binomial rate."""
    hits, trials, level = _check_binomial(hits, trials, level)
    ci = binomtest(hits, trials).proportion_ci(confidence_level=float(level), method="exact")
    return float(ci.low), float(ci.high)


def clopper_pearson_upper(hits: int, trials: int, level: float = 0.95) -> float:
    """Exact one-sided upper confidence bound for a binomial rate (Clopper-Pearson).

    The rate lies at or below it with confidence ``level``: the bound a
    certificate needs ("at most alpha"), where the two-sided interval's upper
    end would spend half of 1 - level on the other side.
    """
    hits, trials, level = _check_binomial(hits, trials, level)
    if hits == trials:
        return 1.0
    return float(beta.ppf(level, hits + 1, trials - hits))


def clopper_pearson_lower(hits: int, trials: int, level: float = 0.95) -> float:
    """Exact one-sided lower confidence bound for a binomial rate (0 when nothing was hit)."""
    hits, trials, level = _check_binomial(hits, trials, level)
    if hits == 0:
        return 0.0
    return float(beta.ppf(1.0 - level, hits, trials - hits + 1))


def trials_to_bound(rate: float, level: float = 0.95) -> int:
    """Fewest trials whose one-sided upper bound can reach ``rate``: zero hits in n trials bound the
    rate by 1 - (1 - level)^(1/n), at most ``rate`` from n = ln(1 - level) / ln(1 - rate) on
    (299 at rate 1% and 95%: the "rule of three", 3 / n, in exact form)."""
    rate = check_alpha(rate)
    if not _is_number(level) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    n = math.ceil(math.log1p(-float(level)) / math.log1p(-rate) - _EPS)
    while n > 1 and clopper_pearson_upper(0, n - 1, level) <= rate:
        n -= 1
    while clopper_pearson_upper(0, n, level) > rate:
        n += 1
    return n


@dataclass(frozen=True)
class RateEstimate:
    """A measured rate (FPR or TPR) with its exact binomial interval."""

    hits: int
    trials: int
    rate: float
    low: float
    high: float
    level: float = 0.95

    def __str__(self) -> str:
        return self.format()

    def format(self, digits: int = 1, counts: bool = True) -> str:
        """The rate and its interval in percent, as a table cell: ``"12.5% [1.6, 38.3] (2/16)"``.

        ``digits`` is the number of decimals of the three percentages (``0``
        gives ``"12% [2, 38] (2/16)"``); ``counts=False`` leaves out the
        ``(hits/trials)`` count. ``str()`` is ``format()`` with the defaults.
        """
        if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)) or digits < 0:
            raise ValueError(f"digits must be a non-negative integer, got {digits!r}")
        d = int(digits)
        text = f"{100 * self.rate:.{d}f}% [{100 * self.low:.{d}f}, {100 * self.high:.{d}f}]"
        return f"{text} ({self.hits}/{self.trials})" if counts else text

    def to_dict(self) -> dict[str, float]:
        return {"hits": self.hits, "trials": self.trials, "rate": self.rate,
                "low": self.low, "high": self.high, "level": self.level}


def rate_estimate(flags: Any, level: float = 0.95) -> RateEstimate:
    """Share of True flags with its Clopper-Pearson interval."""
    values = np.asarray(flags, dtype=bool).ravel()
    if values.size == 0:
        raise ValueError("flags is empty: a rate needs at least one trial")
    hits, trials = int(values.sum()), int(values.size)
    low, high = clopper_pearson(hits, trials, level)
    return RateEstimate(hits, trials, hits / trials, low, high, float(level))


def cluster_bootstrap_rate(flags: Any, clusters: Any, level: float = 0.95, n_boot: int = 2000,
                           seed: int = 0) -> RateEstimate:
    """Share of True flags with a percentile interval from resampling whole clusters.

    Use it when several units share a text (many keys on one text, windows of
    one text, pairs): they are not independent, so the binomial interval would
    be too narrow. Clusters (e.g. text ids) are drawn with replacement
    ``n_boot`` times and the rate recomputed each time. When no flag (or
    every flag) is set, every resample gives the same rate and the
    percentile interval would have zero width: the Clopper-Pearson interval
    over the clusters is returned instead (0 or all of C clusters).
    """
    values = np.asarray(flags, dtype=bool).ravel()
    groups = np.asarray(clusters).ravel()
    if values.size == 0:
        raise ValueError("flags is empty: a rate needs at least one trial")
    if groups.size != values.size:
        raise ValueError(f"clusters must give one cluster per flag: {groups.size} clusters for {values.size} flags")
    if not _is_number(level) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    n_boot = check_int(n_boot, "n_boot", 100)
    _, index = np.unique(groups, return_inverse=True)
    hits = np.bincount(index, weights=values.astype(float))
    sizes = np.bincount(index).astype(float)
    if values.all() or not values.any():
        n_clusters = len(sizes)
        low, high = clopper_pearson(n_clusters if values.all() else 0, n_clusters, level)
        return RateEstimate(int(values.sum()), int(values.size), float(values.mean()), low, high, float(level))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(sizes), size=(n_boot, len(sizes)))
    rates = hits[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    tail = (1.0 - float(level)) / 2.0
    low, high = np.quantile(rates, [tail, 1.0 - tail])
    return RateEstimate(int(values.sum()), int(values.size), float(values.mean()), float(low), float(high),
                        float(level))


def exceedance_rate(z: Any, threshold: float, level: float = 0.95) -> RateEstimate:
    """Share of scores strictly above a threshold (the detector's 'watermarked' side)."""
    if not _is_number(threshold) or math.isnan(float(threshold)):
        raise TypeError(f"threshold must be a real number, got {threshold!r}")
    return rate_estimate(_as_scores(z, "z") > float(threshold), level)


# ---------------------------------------------------------------------------
# empirical recalibration
# ---------------------------------------------------------------------------
def _as_scores(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{name} is empty: recalibration needs null z-scores from a corpus")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values; drop texts too short to score")
    return arr


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
    """
    alpha = check_alpha(alpha)
    return max(2, math.ceil((1.0 - alpha) / alpha - _EPS))


#: Excess kurtosis above which a null corpus counts as heavy-tailed (a Gaussian has 0,
#: Laplace 3, Student's t with 5 degrees of freedom 6): the SD recipe's Gaussian
#: assumption then under-states the tail, and only the quantile recipe is safe.
HEAVY_TAIL_KURTOSIS = 1.0


def excess_kurtosis(z: Any) -> float:
    """Sample excess kurtosis of null scores (0 for a Gaussian; the biased moment estimator,
    as ``scipy.stats.kurtosis``); 0 when there are fewer than 4 values or no spread."""
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
    """
    alpha = check_alpha(alpha)
    if method not in RECALIBRATION_METHODS:
        raise ValueError(f"method must be one of {RECALIBRATION_METHODS}, got {method!r}")
    z = _as_scores(null_z, "null_z")
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


def threshold_interval(null_z: Any, clusters: Any, alpha: float, method: str = "quantile", level: float = 0.95,
                       n_boot: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """An empirical threshold (:func:`recalibrate`) and a percentile bootstrap interval for it.

    The null texts are resampled by cluster (e.g. prompt: texts of one prompt share their
    topic), ``n_boot`` times, as many clusters as there are, and the threshold recomputed on
    each resample; a resample with fewer than :func:`min_null_samples` texts draws more clusters
    rather than fail. Returns
    (threshold, low, high). A wide interval says the corpus is too small for this alpha.
    """
    z = _as_scores(null_z, "null_z")
    groups = np.asarray(clusters).ravel()
    if groups.size != z.size:
        raise ValueError(f"clusters must give one cluster per score: {groups.size} clusters for {z.size} scores")
    if not _is_number(level) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    n_boot = check_int(n_boot, "n_boot", 100)
    point = recalibrate(z, alpha, method)
    _, index = np.unique(groups, return_inverse=True)
    members = [np.flatnonzero(index == g) for g in range(index.max() + 1)]
    need = min_null_samples(alpha)
    rng = np.random.default_rng(seed)
    values = np.empty(n_boot)
    for b in range(n_boot):
        chosen: list[np.ndarray] = []
        size = 0
        while len(chosen) < len(members) or size < need:  # as many clusters as there are, more if too few texts
            pick = members[int(rng.integers(len(members)))]
            chosen.append(pick)
            size += pick.size
        values[b] = recalibrate(z[np.concatenate(chosen)], alpha, method)
    tail = (1.0 - float(level)) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return point, float(low), float(high)


def judge_against(estimate: RateEstimate, reported: float) -> str:
    """Where a reported rate (a share in [0, 1], e.g. the paper's) falls against our interval:
    'consistent' (inside it), or our rate is 'above' / 'below' it (the whole interval is)."""
    if not _is_number(reported) or not 0.0 <= float(reported) <= 1.0:
        raise ValueError(f"reported must be a share in [0, 1], got {reported!r}")
    if estimate.low > float(reported):
        return "above"
    if estimate.high < float(reported):
        return "below"
    return "consistent"


def lifted_threshold(null_z: Any, margin: float = 0.5) -> float:
    """Threshold above every null score: max z + margin (the paper uses 0.5).

    No text of the calibration corpus is flagged (FPR = 0 there); on fresh
    text the FPR is small but not zero, at most about 1 / (M + 1).
    """
    if not _is_number(margin) or not math.isfinite(float(margin)) or float(margin) < 0:
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    return float(np.max(_as_scores(null_z, "null_z"))) + float(margin)


def split_halves(n_items: int, seed: int = 0, strata: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Random split of item indices into a fitting half and an evaluation half.

    With ``strata`` (one label per item) every stratum is split on its own,
    so both halves hold the same mix of sources.
    """
    n_items = check_int(n_items, "n_items", 2)
    rng = np.random.default_rng(seed)
    labels = np.zeros(n_items, dtype=int) if strata is None else np.asarray(strata)
    if labels.shape != (n_items,):
        raise ValueError(f"strata must hold one label per item ({n_items}), got shape {labels.shape}")
    fit: list[np.ndarray] = []
    held: list[np.ndarray] = []
    for label in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == label))
        half = (idx.size + 1) // 2
        fit.append(idx[:half])
        held.append(idx[half:])
    return np.sort(np.concatenate(fit)), np.sort(np.concatenate(held))

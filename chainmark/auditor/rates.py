"""Measured rates with exact binomial intervals: what the auditor reports beside a false-positive rate.

:func:`rate_estimate` gives the share of flagged texts with its two-sided Clopper-Pearson interval
(:func:`clopper_pearson`) as a :class:`RateEstimate`; the one-sided bounds (:func:`clopper_pearson_upper`,
:func:`clopper_pearson_lower`) are what a certificate needs ("at most alpha"), and :func:`trials_to_bound` says how
many trials can reach a given bound.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..checks import check_alpha, check_int
from ..checks import is_number as _is_number

__all__ = ["RateEstimate", "clopper_pearson", "clopper_pearson_lower", "clopper_pearson_upper", "rate_estimate",
           "trials_to_bound"]

# Guards ceilings against floating-point noise such as 0.9 / 0.1 = 9.000000000000002.
_EPS = 1e-9


def _check_level(level: object) -> float:
    """A confidence level, strictly between 0 and 1."""
    if not _is_number(level) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return float(level)


def _check_binomial(hits: object, trials: object, level: object) -> tuple[int, int, float]:
    """Checked (hits, trials, level) of a binomial rate's confidence bound."""
    trials = check_int(trials, "trials", 1)
    hits = check_int(hits, "hits", 0)
    if hits > trials:
        raise ValueError(f"hits must be <= trials, got {hits} > {trials}")
    return hits, trials, _check_level(level)


def clopper_pearson(hits: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided confidence interval for a binomial rate.

    >>> low, high = cm.clopper_pearson(97, 100)
    >>> round(low, 3), round(high, 3)
    (0.915, 0.994)
    """
    from scipy.stats import binomtest  # here: it takes seconds to load, and `import chainmark` imports this module

    hits, trials, level = _check_binomial(hits, trials, level)
    ci = binomtest(hits, trials).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def clopper_pearson_upper(hits: int, trials: int, level: float = 0.95) -> float:
    """Exact one-sided upper confidence bound for a binomial rate (Clopper-Pearson): the rate lies at or below it
    with confidence ``level``, the bound a certificate needs ("at most alpha"), where the two-sided interval's
    upper end would spend half of 1 - level on the other side."""
    hits, trials, level = _check_binomial(hits, trials, level)
    if hits == trials:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(level, hits + 1, trials - hits))


def clopper_pearson_lower(hits: int, trials: int, level: float = 0.95) -> float:
    """Exact one-sided lower confidence bound for a binomial rate (0 when nothing was hit)."""
    hits, trials, level = _check_binomial(hits, trials, level)
    if hits == 0:
        return 0.0
    from scipy.stats import beta

    return float(beta.ppf(1.0 - level, hits, trials - hits + 1))


def trials_to_bound(rate: float, level: float = 0.95) -> int:
    """Fewest trials whose one-sided upper bound can reach ``rate``: zero hits in n trials bound the
    rate by 1 - (1 - level)^(1/n), at most ``rate`` from n = ln(1 - level) / ln(1 - rate) on
    (299 at rate 1% and 95%: the "rule of three", 3 / n, in exact form)."""
    rate = check_alpha(rate)
    level = _check_level(level)
    n = math.ceil(math.log1p(-level) / math.log1p(-rate) - _EPS)
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
        """The rate and its interval in percent, as a table cell: ``"12.5% [1.6, 38.3] (2/16)"``; ``digits`` is
        the number of decimals (``0`` gives ``"12% [2, 38] (2/16)"``), ``counts=False`` leaves out the count."""
        if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)) or digits < 0:
            raise ValueError(f"digits must be a non-negative integer, got {digits!r}")
        d = int(digits)
        text = f"{100 * self.rate:.{d}f}% [{100 * self.low:.{d}f}, {100 * self.high:.{d}f}]"
        return f"{text} ({self.hits}/{self.trials})" if counts else text

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def rate_estimate(flags: Any, level: float = 0.95) -> RateEstimate:
    """Share of True flags with its Clopper-Pearson interval.

    >>> est = cm.rate_estimate([True] * 97 + [False] * 3)
    >>> est.rate, round(est.low, 3), round(est.high, 3)
    (0.97, 0.915, 0.994)
    """
    values = np.asarray(flags, dtype=bool).ravel()
    if values.size == 0:
        raise ValueError("flags is empty: a rate needs at least one trial")
    hits, trials = int(values.sum()), int(values.size)
    low, high = clopper_pearson(hits, trials, level)
    return RateEstimate(hits, trials, hits / trials, low, high, float(level))

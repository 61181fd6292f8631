"""Planning a key audit before running it: at which level must the deployed test flag for a fresh key to certify
the false-positive rate a deployer promises, on the corpus it can assemble?

A key tested at the rate it promises certifies only when its rate on the corpus lies well below the promise (the
certificate needs the one-sided upper bound at or below it), and one key's rate scatters around the exact test's
size. :func:`plan_certification` measures that scatter on pilot keys and returns a :class:`CertificationPlan`:
the stricter level, the chance it gives, and what testing at the promise itself would take.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..checks import check_alpha, check_int
from ..config import ChainMarkConfig
from ..detection import detect
from ..keys import derive_key
from .keyaudit import CertificationTarget
from .rates import RateEstimate, rate_estimate, trials_to_bound

_EPS = 1e-9  # guards a ceiling against floating-point noise
#: How many pilot keys a plan scores by default: its probability then carries an interval of about +-4 points.
_PILOT_KEYS = 200


@dataclass(frozen=True)
class CertificationPlan:
    """What :func:`plan_certification` found for one corpus: deploy the exact test at ``test_alpha`` and a fresh
    key certifies ``promise`` with probability ``pass_share`` (the share of pilot keys that did, with its 95%
    interval); ``at_promise`` is that share for a test at the promise itself, and ``documents_needed`` estimates
    the corpus on which that test would pass with ``probability`` (None: none within a hundredfold corpus)."""

    promise: float
    probability: float
    level: float
    documents: int
    texts: int
    most_flagged: int
    test_alpha: float
    pass_share: RateEstimate
    at_promise: RateEstimate
    documents_needed: int | None

    def describe(self) -> str:
        """The plan in words, as ``chainmark key audit --plan`` prints it."""
        needed = (f"about {self.documents_needed:,} documents" if self.documents_needed else "more than a "
                  "hundredfold corpus")
        return "\n".join([
            f"to certify a false-positive rate of at most {self.promise:g} ({100 * self.level:g}% bound) on "
            f"{self.documents:,} documents ({self.texts:,} texts), a key may flag at most {self.most_flagged}",
            f"deploy the exact test at alpha = {self.test_alpha:.2g}: {self.pass_share.format(counts=False)} of "
            f"{self.pass_share.trials} pilot keys certify (planned: at least {100 * self.probability:g}%)",
            f"at alpha = {self.promise:g} itself {self.at_promise.format(counts=False)} certify; to certify there "
            f"with probability {100 * self.probability:g}% takes {needed}",
            "the pilot keys are derived from the key, which itself is not scored: audit it once, at the planned "
            "alpha, and never draw keys until one passes without declaring it (--keys-tried)",
            "the certificate bounds mislabelling of natural text, not forgery or scrubbing by whoever collects the "
            "key's outputs; no corpus or level plans that away, so the public-output budget "
            "(--public-output-budget) is declared, not planned: rotate the key by it"])


def plan_certification(config: ChainMarkConfig, texts: Sequence[Sequence[int]], promise: float = 0.01, *,
                       probability: float = 0.9, level: float = 0.95,
                       documents: Sequence[Any] | None = None, vocab_size: int | None = None,
                       pilot_keys: int = _PILOT_KEYS) -> CertificationPlan:
    """Plan a key audit before running it: the largest level ``test_alpha`` for the exact test at which a fresh
    key certifies ``promise`` on this corpus with at least ``probability``.

    A key certifies when its flagged documents number at most the most whose upper bound stays at or below the
    promise. The exact test's size is at most alpha for each text over a random key, but one key's rate scatters
    around it (two documents that share common token pairs are flagged together), so the plan measures the
    scatter: it scores the corpus under ``pilot_keys`` keys derived from ``config.key`` (HKDF, so the plan is
    reproducible by whoever holds the key and says nothing about the key itself) and takes the level that that
    share of them pass at. ``documents_needed`` fits a beta-binomial to the pilot keys' counts at the promise.

    >>> config = cm.ChainMarkConfig(b'example key', S=5)
    >>> rng = np.random.default_rng(0)
    >>> corpus = [rng.integers(0, 5000, 60).tolist() for _ in range(400)]
    >>> plan = cm.auditor.plan_certification(config, corpus, 0.05, pilot_keys=20, vocab_size=5000)
    >>> plan.most_flagged, plan.test_alpha < 0.05
    (12, True)
    """
    target = CertificationTarget(alpha=promise, level=level)  # checks both
    promise, level = target.alpha, target.level
    probability, pilot_keys = check_alpha(probability, "probability"), check_int(pilot_keys, "pilot_keys", 20)
    names = range(len(texts)) if documents is None else documents
    kept = [(np.asarray(t, dtype=np.int64), str(n)) for t, n in zip(texts, names, strict=True) if len(t) >= 2]
    first: dict[str, int] = {}
    groups = np.array([first.setdefault(n, len(first)) for _, n in kept], dtype=np.int64)
    n_docs, least = len(first), trials_to_bound(promise, level)
    if n_docs < least:
        raise ValueError(f"{n_docs} documents cannot certify {promise:g} even with none flagged: at level {level:g} "
                         f"that takes at least {least}")
    most = _most_flagged(n_docs, promise, level)
    smallest = np.ones((pilot_keys, n_docs))  # each pilot key's documents by their smallest p-value
    for i in range(pilot_keys):
        pilot = ChainMarkConfig(derive_key(config.key, f"certification-plan/{i}"), S=config.S, topology=config.topo)
        p_values = [detect(t, pilot, promise, vocab_size, test="exact").p_value for t, _ in kept]
        np.minimum.at(smallest[i], groups, p_values)
    edge = np.sort(smallest, axis=1)[:, most]  # a pilot key passes at alpha <= its (most + 1)-th smallest p
    best = float(np.sort(edge)[::-1][math.ceil(probability * pilot_keys - _EPS) - 1])
    if best <= 0:
        raise ValueError("no test level lets a fresh key certify this promise with that probability on this corpus")
    digits = 1 - math.floor(math.log10(best))  # rounded down to two significant digits: a share can only rise
    test_alpha = min(promise, math.floor(best * 10 ** digits) / 10 ** digits)
    counts = (smallest < promise).sum(axis=1)
    return CertificationPlan(promise, probability, level, n_docs, len(kept), most, test_alpha,
                             rate_estimate(edge >= test_alpha), rate_estimate(edge >= promise),
                             _documents_needed(counts, n_docs, promise, probability, level))


def _most_flagged(documents: int, promise: float, level: float) -> int:
    """The most flagged documents of ``documents`` whose one-sided upper bound is at or below the promise."""
    from scipy.stats import beta

    hits = np.arange(min(documents, math.ceil(promise * documents) + 1))  # the bound passes the promise by then
    return int(np.searchsorted(beta.ppf(level, hits + 1, documents - hits), promise, side="right")) - 1


def _documents_needed(counts: np.ndarray, documents: int, promise: float, probability: float,
                      level: float) -> int | None:
    """How many documents a test at the promise needs for a fresh key to pass with ``probability``: the pilot
    keys' flagged counts at the promise fit a beta-binomial (their rate and their spread beyond the binomial's),
    scaled to larger corpora; None when none up to a hundredfold corpus does."""
    from scipy.stats import betabinom, binom

    rate, var = counts.mean() / documents, counts.var(ddof=1)
    if not 0 < rate < promise:
        return None
    icc = max((var / (documents * rate * (1 - rate)) - 1) / (documents - 1), 0.0)  # the documents' correlation
    for n in np.unique(np.geomspace(documents, 100 * documents, 400).astype(int)):
        most = _most_flagged(int(n), promise, level)
        chance = (binom.cdf(most, n, rate) if icc == 0 else
                  betabinom.cdf(most, n, rate * (1 / icc - 1), (1 - rate) * (1 / icc - 1)))
        if chance >= probability:
            return int(n)
    return None


__all__ = ["CertificationPlan", "plan_certification"]

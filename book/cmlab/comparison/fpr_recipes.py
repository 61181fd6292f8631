"""Recipes for holding the false-positive rate at alpha on real text, and ones that fail.

The closed-form threshold z_alpha assumes independent transitions; real text
repeats tokens and phrases, so its null z is wider than N(0, 1) and the FPR
lands above alpha. The paper (its appendix table "FPR recalibration: SD recipe
and failure modes") compares fixes on unwatermarked text. This module runs
the same comparison on any null corpus: every recipe is a rule "flag a text
when its statistic exceeds a threshold", fitted on one half of the null
(split by prompt, so no prompt is on both sides), judged by its FPR on the
other half and its TPR on watermarked text, each with a 95% interval: the
held-out null texts resampled by group (texts of one prompt share its topic),
the watermarked texts (one a prompt) by Clopper-Pearson.

The paper names its failure modes without defining them; the definitions
here are this book's reading, stated in :data:`RECIPE_NOTES`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from chainmark.calibrate import min_null_samples, recalibrate, z_alpha
from chainmark.checks import check_options
from chainmark.auditor.rates import RateEstimate, rate_estimate
from cmlab.stats import cluster_bootstrap_rate, lifted_threshold, split_halves
from chainmark.config import ChainMarkConfig, takes_config
from chainmark.detection import valid_transitions
from chainmark.significance import z_score
from chainmark.partition import states_of
from chainmark.topology import Topology

#: The paper's table (3,000 null texts, 1,000 per model; TPR on its watermarked texts), in %.
PAPER_FPR_RECIPES = {
    "iid": (2.07, 100.0), "sd": (1.17, 100.0), "hac": (3.45, 100.0), "k_skip": (2.46, 2.2),
    "stopword": (5.18, 99.0), "hdd_lite": (2.35, 100.0),
}

#: What each recipe does, in the order the table shows them.
RECIPE_NOTES = {
    "iid": "no fix: z from all transitions, threshold z_alpha",
    "sd": "Fix 1: threshold mean + z_alpha * SD of the null z (fit half)",
    "quantile": "the (1 - alpha) order statistic of the null z (fit half)",
    "lift": "FPR = 0 on the fit half: the largest null z + 0.5",
    "hac": "Fix 2: Newey-West (HAC) standard error of the transition indicators, threshold z_alpha",
    "k_skip": "Fix 3: tokens k = 3 apart checked with the one-step rule, threshold z_alpha",
    "stopword": "Fix 4: transitions touching the 200 most frequent null tokens dropped, threshold z_alpha",
    "hdd_lite": "Fix 5: transitions weighted by the next token's inverse frequency (log form), threshold z_alpha",
}
_RECIPES = tuple(RECIPE_NOTES)


@dataclass(frozen=True)
class RecipeResult:
    """One recipe's threshold, its FPR on held-out null text and its TPR on watermarked text."""

    recipe: str
    threshold: float
    fpr: RateEstimate
    tpr: RateEstimate

    def to_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "what it does": RECIPE_NOTES[self.recipe], "threshold": self.threshold,
                "FPR": self.fpr, "TPR": self.tpr}


def _z(hits: float, mean: float, var: float) -> float:
    return (hits - mean) / math.sqrt(var) if var > 0 else 0.0


def _iid_z(valid: np.ndarray, p0: float) -> float:
    """The detector's z (:func:`~chainmark.detection.z_score`): legal transitions against p0."""
    m = int(valid.size)
    return z_score(float(valid.sum()) / m, p0, m) if m else 0.0


def _hac_z(valid: np.ndarray, p0: float, maxlags: int | None = None) -> float:
    """z of the mean of (legal - p0) with a Newey-West standard error (statsmodels, Bartlett kernel).

    ``maxlags`` defaults to floor(4 (m / 100)^(2/9)), the usual plug-in. The HAC
    variance is estimated around the text's own mean, as a HAC test of a mean is.
    """
    import statsmodels.api as sm

    m = valid.size
    if m < 3:
        return 0.0
    lags = int(4 * (m / 100) ** (2 / 9)) if maxlags is None else int(maxlags)
    x = valid.astype(float) - p0
    if np.all(x == x[0]):
        return _iid_z(valid, p0)
    fit = sm.OLS(x, np.ones(m)).fit(cov_type="HAC", cov_kwds={"maxlags": lags})
    se = float(fit.bse[0])
    return float(fit.params[0]) / se if se > 0 else 0.0


def _k_skip_z(states: np.ndarray, topology: Topology, k: int = 3) -> float:
    """z over pairs of tokens k apart, each checked with the one-step rule."""
    if states.size <= k:
        return 0.0
    valid = topology.is_valid(states[:-k], states[k:])
    return _iid_z(np.asarray(valid, dtype=bool), topology.p0)


def _weighted_z(valid: np.ndarray, weights: np.ndarray, p0: float) -> float:
    """z of a weighted count: sum w (legal - p0) / sqrt(p0 (1 - p0) sum w^2)."""
    return _z(float(np.sum(weights * valid)), p0 * float(np.sum(weights)), p0 * (1 - p0) * float(np.sum(weights ** 2)))


def _statistics(ids: np.ndarray, key: bytes, topo: Topology, vocab_size: int | None, stop: np.ndarray,
                idf: np.ndarray) -> dict[str, float]:
    states = states_of(ids, key, topo.S, vocab_size)
    valid = valid_transitions(states, topo)
    nxt = ids[1:]
    keep = ~(stop[ids[:-1]] | stop[nxt])
    z = _iid_z(valid, topo.p0)
    return {"iid": z, "sd": z, "quantile": z, "lift": z, "hac": _hac_z(valid, topo.p0),
            "k_skip": _k_skip_z(states, topo), "stopword": _iid_z(valid[keep], topo.p0),
            "hdd_lite": _weighted_z(valid, idf[nxt], topo.p0)}


@dataclass(frozen=True)
class RecipeFit:
    """How :func:`fpr_recipes` fits and judges the recipes: at level ``alpha``, over ids of a vocabulary of
    ``vocab_size`` (None: as :func:`~chainmark.partition.states_of` takes it), with the ``n_stopwords`` most
    frequent tokens of the fit half as the stopword list, splitting the groups in halves with ``seed``."""

    alpha: float = 0.01
    vocab_size: int | None = None
    n_stopwords: int = 200
    seed: int = 0


@takes_config()
def fpr_recipes(null_ids: Sequence[Sequence[int]], null_groups: Sequence[Any], wm_ids: Sequence[Sequence[int]],
                config: ChainMarkConfig, fit: RecipeFit | None = None) -> list[RecipeResult]:
    """Fit every recipe on half of a null corpus and judge it on the other half and on watermarked text, all
    scored under ``config`` (its key, S and topology, as :func:`~chainmark.detection.detect` reads them).

    ``null_groups`` gives each null text's group (its prompt): the split keeps a group
    whole, and the held-out FPR's interval resamples groups (:func:`~cmlab.stats.cluster_bootstrap_rate`).
    The stopword list and the token frequencies come from the fit half only. How the recipes are fitted is
    a :class:`RecipeFit` (``RecipeFit(alpha=0.01, vocab_size=V)``).
    The quantile recipe needs :func:`~chainmark.calibrate.min_null_samples` texts in the fit half.
    """
    fit = check_options(RecipeFit, fit, "fit")
    alpha, vocab_size, n_stopwords, seed = fit.alpha, fit.vocab_size, fit.n_stopwords, fit.seed
    if len(null_ids) != len(null_groups):
        raise ValueError(f"null_groups must give one group per null text: {len(null_groups)} for {len(null_ids)}")
    if not len(wm_ids):
        raise ValueError("wm_ids is empty: the TPR needs watermarked texts")
    key, topo = config.key, config.topo
    groups = np.asarray([str(g) for g in null_groups])
    names = np.unique(groups)
    fit_groups, _ = split_halves(len(names), seed=seed)
    in_fit = np.isin(groups, names[fit_groups])
    if in_fit.sum() < min_null_samples(alpha):
        raise ValueError(f"the fit half holds {int(in_fit.sum())} null texts; the quantile recipe needs "
                         f"{min_null_samples(alpha)} at alpha = {alpha:g}: score more null texts")
    null_arrays = [np.asarray(t, dtype=np.int64) for t in null_ids]
    width = int(max(max(int(a.max()) for a in null_arrays if a.size),
                    max(int(np.max(t)) for t in wm_ids if len(t)))) + 1
    width = max(width, int(vocab_size or 0))
    counts = np.bincount(np.concatenate([a for a, f in zip(null_arrays, in_fit) if f]), minlength=width)
    stop = np.zeros(width, dtype=bool)
    stop[np.argsort(-counts, kind="stable")[:n_stopwords]] = True
    idf = np.log((counts.sum() + 1.0) / (counts + 1.0))
    null_stats = [_statistics(a, key, topo, vocab_size, stop, idf) for a in null_arrays]
    wm_stats = [_statistics(np.asarray(t, dtype=np.int64), key, topo, vocab_size, stop, idf) for t in wm_ids]
    za = z_alpha(alpha)
    out = []
    for recipe in _RECIPES:
        null_z = np.array([s[recipe] for s in null_stats])
        fit_z = null_z[in_fit]
        threshold = {"sd": lambda: recalibrate(fit_z, alpha, "sd"),
                     "quantile": lambda: recalibrate(fit_z, alpha, "quantile"),
                     "lift": lambda: lifted_threshold(fit_z, 0.5)}.get(recipe, lambda: za)()
        wm_z = np.array([s[recipe] for s in wm_stats])
        fpr = cluster_bootstrap_rate(null_z[~in_fit] > threshold, groups[~in_fit])
        out.append(RecipeResult(recipe, float(threshold), fpr, rate_estimate(wm_z > threshold)))
    return out


__all__ = ["PAPER_FPR_RECIPES", "RECIPE_NOTES", "RecipeFit", "RecipeResult", "fpr_recipes"]

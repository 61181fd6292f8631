"""The experiments' statistics: intervals when units share a text, thresholds with their uncertainty, splits.

The wheel's :mod:`chainmark.auditor.rates` gives a rate with its exact binomial
interval and :mod:`chainmark.calibrate` the paper's calibration and the
empirical threshold. What the book's experiments add lives here:
:func:`cluster_bootstrap_rate` (a rate whose units share texts, resampled by
text), :func:`prompt_rate` (a rate over the reference run's replies, three per
prompt, resampled by prompt with the one labelling every page uses, so the same
flags give the same interval everywhere), :func:`threshold_interval` (a bootstrap interval for an empirical threshold),
:func:`lifted_threshold` (above every null score, as the paper does),
:func:`split_halves` (a fitting and an evaluation half) and
:func:`judge_against` (where a reported rate falls against our interval).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from chainmark.calibrate import min_null_samples, recalibrate
from chainmark.checks import check_int, check_null_scores
from chainmark.checks import is_number as _is_number
from chainmark.auditor.rates import RateEstimate, clopper_pearson, rate_estimate

__all__ = ["cluster_bootstrap_rate", "judge_against", "lifted_threshold", "prompt_labels",
           "prompt_rate", "split_halves", "threshold_interval"]


def cluster_bootstrap_rate(flags: Any, clusters: Any, level: float = 0.95, n_boot: int = 2000,
                           seed: int = 0) -> RateEstimate:
    """Share of True flags with a percentile interval from resampling whole clusters.

    Use it when several units share a text (many keys on one text, windows of
    one text, pairs): they are not independent, so the binomial interval would
    be too narrow. Clusters (e.g. text ids) are drawn with replacement
    ``n_boot`` times and the rate recomputed each time. When no flag (or
    every flag) is set, every resample gives the same rate and the
    percentile interval would have zero width: the Clopper-Pearson interval
    over the clusters is returned instead (0 or all of C clusters). Otherwise
    the interval is never narrower than the Clopper-Pearson interval of the
    flags as independent trials: with few flags the percentile interval is
    too narrow (one flag among 600 texts in 200 clusters of three gave an
    upper limit of 0.5%, below the binomial 0.93%), and units that share a
    cluster carry no more information than independent ones.
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
    binomial_low, binomial_high = clopper_pearson(int(values.sum()), int(values.size), level)
    return RateEstimate(int(values.sum()), int(values.size), float(values.mean()), float(min(low, binomial_low)),
                        float(max(high, binomial_high)), float(level))


def prompt_labels(records: Any) -> np.ndarray:
    """Each reference reply's prompt as ``"domain/prompt_index"`` (e.g. ``"code/7"``), the cluster label of
    :func:`prompt_rate`.

    ``records`` is a table with columns ``domain`` and ``prompt_index`` (``load_reference``) or a sequence of
    mappings with those keys (``load_texts``); the index is written as an integer, so both give the same labels.
    """
    if hasattr(records, "columns"):
        domains, indices = list(records["domain"]), list(records["prompt_index"])
    else:
        domains, indices = [r["domain"] for r in records], [r["prompt_index"] for r in records]
    labels = []
    for domain, index in zip(domains, indices):
        if isinstance(index, bool) or not float(index).is_integer():
            raise ValueError(f"prompt_index must be an integer, got {index!r}")
        labels.append(f"{domain}/{int(index)}")
    return np.asarray(labels, dtype=object)


def prompt_rate(flags: Any, records: Any, level: float = 0.95) -> RateEstimate:
    """Share of True flags over the reference run's replies, its interval from resampling prompts.

    The run holds three unwatermarked replies per prompt, which share a topic and its token pairs, so they
    are not independent texts: :func:`cluster_bootstrap_rate` over :func:`prompt_labels` (its defaults:
    2,000 resamples, seed 0). Every page rates those replies through this function, so the same flags give
    the same interval wherever they are shown. ``records`` holds one record (or table row) per flag, in the
    same order.
    """
    return cluster_bootstrap_rate(flags, prompt_labels(records), level)


def threshold_interval(null_z: Any, clusters: Any, alpha: float, method: str = "quantile", level: float = 0.95,
                       n_boot: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """An empirical threshold (:func:`recalibrate`) and a percentile bootstrap interval for it.

    The null texts are resampled by cluster (e.g. prompt: texts of one prompt share their
    topic), ``n_boot`` times, as many clusters as there are, and the threshold recomputed on
    each resample; a resample with fewer than :func:`min_null_samples` texts draws more clusters
    rather than fail. Returns
    (threshold, low, high). A wide interval says the corpus is too small for this alpha.
    """
    z = check_null_scores(null_z, "null_z")
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
    return float(np.max(check_null_scores(null_z, "null_z"))) + float(margin)


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

"""What a text's repeats do to the null: the legal count's exact moments over a random key, and the warning.

Under the null a key is a uniformly random state assignment: every distinct token gets a state, independent and
uniform over S. A transition's legality is a function of its token pair, so a text that repeats a pair m times
repeats that pair's legality m times, and a pair and its reverse (a -> b, b -> a) are tied together by the
topology. From the text's pair multiplicities the legal count C of the z-test (every transition) or of the
distinct-pair test (each pair once) has, for a k-regular topology T over S states with p0 = k/S, d = trace(T)/S
and R = sum(T * T') / S^2,

    E[C]   = p0 * sum_{a != b} m_ab + d * sum_a m_aa,
    Var[C] = p0 (1 - p0) sum_{a != b} m_ab^2 + d (1 - d) sum_a m_aa^2
             + 2 (R - p0^2) sum_{a < b} m_ab m_ba,

exactly: with row and column regularity, two pairs that share one token are uncorrelated (the paper's
null-variance lemma, token by token), so only a pair with itself and with its reverse covary (:func:`text_null`).
The nominal z-test assumes Var[C] = p0 (1 - p0) n. The false-positive rate at a threshold follows from the
distribution of C with every pair group (a pair and its reverse) independent of the others: exact when the text's
token graph has no cycle, and equal to the truth in mean and variance always (:func:`null_fpr`);
:func:`repetition_warning` speaks when it lies above 2 alpha. The exact test needs none of this: its count is
Binomial(m, p0) for every text.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.signal import fftconvolve
from scipy.special import ndtr
from scipy.stats import binom

from ..checks import check_alpha
from ..topology import Topology

#: The false-positive rate, as a multiple of alpha, above which the warning speaks.
_WARN_FACTOR = 2.0
#: Texts of up to this many scored transitions get their null's distribution convolved exactly (an array of
#: that many probabilities); longer ones keep the largest groups exact and take the rest as normal.
_EXACT_UP_TO = 250_000
#: How many groups of largest multiplicity a long text's null keeps exact.
_LARGEST_GROUPS = 10


def pair_counts(ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The text's distinct ordered token pairs (a, b) and how often each occurs as a transition."""
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids must be one-dimensional, got shape {ids.shape}")
    if ids.size < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    ids = ids.astype(np.int64)
    low, top = int(ids.min()), int(ids.max())
    if low >= 0 and top < 2**31:  # one int64 code per pair: much faster than unique over rows
        codes, counts = np.unique(ids[:-1] * (top + 1) + ids[1:], return_counts=True)
        a, b = np.divmod(codes, top + 1)
        return a, b, counts.astype(np.int64)
    pairs, counts = np.unique(np.stack([ids[:-1], ids[1:]], axis=1), axis=0, return_counts=True)
    return pairs[:, 0], pairs[:, 1], counts.astype(np.int64)


@dataclass(frozen=True)
class TextNull:
    """The legal count's null over a random key for one text and one test: exact mean and variance, the
    nominal variance the z-test assumes, and the distribution :func:`null_fpr` reads."""

    n_scored: int
    mean: float
    variance: float
    nominal_variance: float
    pmf: np.ndarray | None  # P(C = c) for c = 0 .. n_scored, pair groups independent; None past _EXACT_UP_TO
    big_values: np.ndarray | None = None  # past _EXACT_UP_TO: the largest groups' joint values and probabilities,
    big_probs: np.ndarray | None = None  # the rest normal with its exact mean and variance
    rest_mean: float = 0.0
    rest_variance: float = 0.0

    @property
    def variance_ratio(self) -> float:
        """Var[C] over the nominal p0 (1 - p0) n: how much the text's repeats inflate the z-test's null."""
        return self.variance / self.nominal_variance if self.nominal_variance > 0 else 1.0

    def z_standardised(self, n_hits: int) -> float:
        """The legal count standardised by this text's own null: (C - E[C]) / sd[C] (a diagnostic)."""
        return 0.0 if self.variance <= 0 else (n_hits - self.mean) / math.sqrt(self.variance)


def _topology_constants(topology: Topology) -> tuple[float, float, float]:
    """p0 = k/S, the diagonal's density d and the reversed-pair probability R of a k-regular topology."""
    if not isinstance(topology, Topology):
        raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
    if topology.k is None:
        raise ValueError("the text's null needs a k-regular topology (p0 = k/S); this one is irregular")
    m = topology.matrix.astype(np.int64)
    S = topology.S
    return topology.p0, float(np.trace(m)) / S, float((m * m.T).sum()) / S**2


def text_null(ids: Any, topology: Topology, test: str = "z") -> TextNull:
    """The null of one text's legal count under a uniformly random key, for the z test (every transition: a pair
    repeated m times counts m times) or the distinct test (each distinct pair once)."""
    return pair_null(*pair_counts(ids), topology, test)


def pair_null(a: np.ndarray, b: np.ndarray, m: np.ndarray, topology: Topology, test: str = "z") -> TextNull:
    """:func:`text_null` from the text's distinct pairs (a, b) and their multiplicities m (:func:`pair_counts`,
    or a streaming detector's): any labelling of the tokens will do, the pairs' pattern is what counts.

    The distribution is convolved exactly (pair groups independent) up to :data:`_EXACT_UP_TO` scored transitions;
    past that, so that memory does not grow with the text, the :data:`_LARGEST_GROUPS` groups of largest
    multiplicity are kept exact and the rest is taken as normal with its exact mean and variance.
    """
    if test not in ("z", "distinct"):
        raise ValueError(f"test must be 'z' or 'distinct' (the exact test's null is Binomial(m, p0) for every "
                         f"text), got {test!r}")
    a, b, m = (np.asarray(x, dtype=np.int64) for x in (a, b, m))
    if test == "distinct":
        m = np.ones_like(m)
    p0, d, R = _topology_constants(topology)
    n = int(m.sum())
    self_pair = a == b
    # each unordered pair {a, b} once: its two directions' multiplicities (0 when a direction is absent)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    forward = a <= b
    order = np.lexsort((hi[~self_pair], lo[~self_pair]))
    lo_, hi_, m_, fw_ = lo[~self_pair][order], hi[~self_pair][order], m[~self_pair][order], forward[~self_pair][order]
    start = np.ones(lo_.size, dtype=bool)
    start[1:] = (lo_[1:] != lo_[:-1]) | (hi_[1:] != hi_[:-1])
    group = np.cumsum(start) - 1
    n_groups = int(group[-1]) + 1 if group.size else 0
    m_fw = np.zeros(n_groups, dtype=np.int64)
    m_bw = np.zeros(n_groups, dtype=np.int64)
    np.add.at(m_fw, group[fw_], m_[fw_])
    np.add.at(m_bw, group[~fw_], m_[~fw_])
    m_self = m[self_pair]
    mean = p0 * float(m_fw.sum() + m_bw.sum()) + d * float(m_self.sum())
    variance = (p0 * (1 - p0) * float((m_fw**2).sum() + (m_bw**2).sum()) + d * (1 - d) * float((m_self**2).sum())
                + 2.0 * (R - p0 * p0) * float((m_fw * m_bw).sum()))
    variance = max(variance, 0.0)
    if n <= _EXACT_UP_TO:
        return TextNull(n, mean, variance, p0 * (1 - p0) * n, _distribution(n, p0, d, R, m_fw, m_bw, m_self))
    values, probs, big_mean, big_variance = _largest_groups(p0, d, R, m_fw, m_bw, m_self)
    return TextNull(n, mean, variance, p0 * (1 - p0) * n, None, values, probs, mean - big_mean,
                    max(variance - big_variance, 0.0))


def _lone_pairs(m_fw: np.ndarray, m_bw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which groups hold a pair and its reverse, and the multiplicities of the pairs whose reverse is absent."""
    both = (m_fw > 0) & (m_bw > 0)
    return both, np.concatenate([m_fw[~both & (m_fw > 0)], m_bw[~both & (m_bw > 0)]])


def _largest_groups(p0: float, d: float, R: float, m_fw: np.ndarray, m_bw: np.ndarray,
                    m_self: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The joint distribution of the :data:`_LARGEST_GROUPS` groups of largest multiplicity (values, probabilities)
    and their mean and variance: on a long text these are the ones a normal curve would misdescribe."""
    both, lone = _lone_pairs(m_fw, m_bw)
    items: list[tuple[int, np.ndarray, np.ndarray]] = [(int(m), np.array([0, m]), np.array([1 - p0, p0]))
                                                       for m in np.sort(lone)[-_LARGEST_GROUPS:]]
    if d > 0:
        items += [(int(m), np.array([0, m]), np.array([1 - d, d])) for m in np.sort(m_self)[-_LARGEST_GROUPS:]]
    sums = m_fw[both] + m_bw[both]
    for i in np.argsort(sums)[-_LARGEST_GROUPS:]:
        x, y = int(m_fw[both][i]), int(m_bw[both][i])
        items.append((x + y, np.array([0, x, y, x + y]), np.array([1 - 2 * p0 + R, p0 - R, p0 - R, R])))
    items = sorted(items, key=lambda item: item[0])[-_LARGEST_GROUPS:]
    values, probs = np.zeros(1, dtype=np.int64), np.ones(1)
    for _, v, q in items:
        joint_v = (values[:, None] + v[None, :]).ravel()
        joint_q = (probs[:, None] * q[None, :]).ravel()
        values, index = np.unique(joint_v, return_inverse=True)
        probs = np.bincount(index.ravel(), weights=joint_q, minlength=values.size)
    mean = float((values * probs).sum())
    return values, probs, mean, float(((values - mean) ** 2 * probs).sum())


def _scaled(pmf_small: np.ndarray, step: int) -> np.ndarray:
    """The pmf of step * X from the pmf of X on 0, 1, 2, ..."""
    out = np.zeros((pmf_small.size - 1) * step + 1)
    out[::step] = pmf_small
    return out


def _distribution(n: int, p0: float, d: float, R: float, m_fw: np.ndarray, m_bw: np.ndarray,
                  m_self: np.ndarray) -> np.ndarray:
    """P(C = c), c = 0 .. n, with the pair groups independent: a lone pair of multiplicity m adds m Bernoulli(p0)
    (those of equal m together: m Binomial(g, p0)); a pair and its reverse add (m_ab, m_ba), (m_ab, 0), (0, m_ba)
    or nothing with probabilities R, p0 - R, p0 - R, 1 - 2 p0 + R; a self pair m Bernoulli(d)."""
    parts: list[np.ndarray] = []
    both, lone = _lone_pairs(m_fw, m_bw)
    for mult, count in zip(*np.unique(lone, return_counts=True)):
        parts.append(_scaled(binom.pmf(np.arange(count + 1), count, p0), int(mult)))
    for mult, count in zip(*np.unique(m_self, return_counts=True)):
        if d > 0:
            parts.append(_scaled(binom.pmf(np.arange(count + 1), count, d), int(mult)))
    pairs, counts = np.unique(np.stack([m_fw[both], m_bw[both]], axis=1), axis=0, return_counts=True) \
        if both.any() else (np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64))
    for (x, y), count in zip(pairs, counts):
        kernel = np.zeros(int(x + y) + 1)
        kernel[0] += 1 - 2 * p0 + R
        kernel[int(x)] += p0 - R
        kernel[int(y)] += p0 - R
        kernel[int(x + y)] += R
        parts.append(_power(kernel, int(count)))
    pmf = _convolve_all(parts)
    out = np.zeros(n + 1)
    out[:min(pmf.size, n + 1)] = pmf[:n + 1]
    return out / out.sum()


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The pmf of a sum of two independent counts (FFT for long ones; rounding below zero clipped)."""
    out = fftconvolve(a, b) if min(a.size, b.size) > 64 else np.convolve(a, b)
    return np.clip(out, 0.0, None)


def _power(kernel: np.ndarray, count: int) -> np.ndarray:
    """The pmf of a sum of ``count`` independent copies of ``kernel`` (by repeated squaring)."""
    result, square = np.ones(1), kernel
    while count:
        if count & 1:
            result = _convolve(result, square)
        count >>= 1
        if count:
            square = _convolve(square, square)
    return result


def _convolve_all(parts: list[np.ndarray]) -> np.ndarray:
    """The pmf of the sum of independent parts, the two shortest merged first (a Huffman order: each long
    convolution happens once, not once per part)."""
    heap = [(part.size, i, part) for i, part in enumerate(parts)]
    heapq.heapify(heap)
    if not heap:
        return np.ones(1)
    counter = len(heap)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        merged = _convolve(a, b)
        heapq.heappush(heap, (merged.size, counter, merged))
        counter += 1
    return heap[0][2]


def null_fpr(null: TextNull, p0: float, threshold: float) -> float:
    """The share of random keys under which the z-test flags this text (z > threshold), from :attr:`TextNull.pmf`."""
    n = null.n_scored
    if n == 0:
        return 0.0
    if null.pmf is not None:
        counts = np.arange(n + 1)
        z = (counts / n - p0) / math.sqrt(p0 * (1 - p0) / n)
        return float(null.pmf[z > threshold].sum())
    # flagged when the count exceeds n p0 + threshold * sd: from the first integer above that line on
    first = math.floor(n * p0 + threshold * math.sqrt(n * p0 * (1 - p0))) + 1
    need = first - null.big_values  # what the rest must reach, for each joint value of the largest groups
    if null.rest_variance <= 0:
        rest = (null.rest_mean >= need).astype(float)
    else:
        rest = ndtr((null.rest_mean - (need - 0.5)) / math.sqrt(null.rest_variance))  # continuity corrected
    return float((null.big_probs * rest).sum())


def repetition_warning(null: TextNull | None, share: float, n_transitions: int, n_scored: int, test: str,
                       threshold: float, alpha: float, p0: float) -> tuple[str | None, float | None]:
    """What a text's repeats do to the test applied to it: a warning (None when nothing worth saying) and the
    false-positive rate over random keys the text's own null gives at ``threshold`` (None for the exact test,
    whose size is at most alpha for every text over a random key).

    For the z and distinct tests the warning fires when that rate exceeds :data:`_WARN_FACTOR` alpha; for the
    exact and distinct tests on a text that is mostly repeats it says how little was scored instead.
    """
    alpha = check_alpha(alpha)
    rate = None if test == "exact" or null is None else null_fpr(null, p0, threshold)
    if n_transitions == 0:
        return None, rate
    percent = f"{100 * share:.1f}% of its {n_transitions} transitions repeat an earlier token pair"
    if rate is not None and rate > _WARN_FACTOR * alpha:
        what = "each repeat counts its pair's legality again" if test == "z" else \
            "a pair and its reverse are tied by the topology"
        return (f"{percent}: {what}, so over random keys this text alone would be flagged {100 * rate:.1f}% "
                f"of the time by the {test} test instead of {100 * alpha:g}% (variance "
                f"{null.variance_ratio:.2f} times the nominal); the exact test (--test exact) has size at most "
                "alpha for every text over a random key"), rate
    if test != "z" and share >= 0.5:
        scored = ("the exact test scores only the transitions that reach a new token" if test == "exact"
                  else "the distinct test scores each pair once")
        return (f"{percent}: {scored}, {n_scored} here, so it can say little about this text either way "
                "(repeats cannot inflate its false-positive rate)"), rate
    return None, rate


__all__ = ["TextNull", "null_fpr", "pair_counts", "pair_null", "repetition_warning", "text_null"]

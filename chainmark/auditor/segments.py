"""Watermarked spans inside a longer document: a window scan calibrated by re-drawing the key.

A pasted paragraph is diluted in a whole-text statistic. The scan looks at every window of transitions whose
length lies on a geometric grid (16, 32, 64, ..., at every start) and standardises each window's count of legal
transitions against p0 = k/S. Its statistic is the largest window z: the quantity the geometry-cover approach of
Zhao, Liao, Wang and Li (ACL 2025) scans and WaterSeeker's local traversal refines. What is new here is the
calibration: the null distribution of that maximum is simulated for this very text by re-drawing the key
(:mod:`chainmark.randomisation`, its draws seeded from the key), so over a random key the family-wise error (any
span reported on a text without the watermark) is at most alpha for every text, repeated tokens and all (a
single-step max-T adjustment in the sense of Westfall and Young). Flagged windows are joined into regions, each
segmented where the legal rate changes (:func:`_spans_above`), so a span's ends come from the legal transitions
around the passage, not from the window that flagged it. A passage is found from 17 tokens (16 transitions, the
shortest window) on. Its peer, the geometry cover with a Bonferroni correction, is the book's
(:mod:`cmlab.comparison.segments_peer`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..checks import check_alpha, check_int, check_offsets
from ..config import ChainMarkConfig, takes_config
from ..detection import valid_transitions
from ..partition import Key, as_token_array, states_of
from ..randomisation import key_randomisation_test
from ..topology import Topology

__all__ = ["Segment", "SegmentsResult", "detect_segments", "scan_maximum", "window_lengths"]


@dataclass(frozen=True)
class Segment:
    """One watermarked span: tokens [start, end) (and characters, when offsets were given), its evidence."""

    start: int
    end: int
    z: float
    p_value: float
    window: int
    char_start: int | None = None
    char_end: int | None = None

    @property
    def n_tokens(self) -> int:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "n_tokens": self.n_tokens, "char_start": self.char_start,
                "char_end": self.char_end, "z": round(float(self.z), 6), "p_value": self.p_value,
                "window": self.window}


@dataclass(frozen=True)
class SegmentsResult:
    """The spans a segment finder reports on one document, with the document-level test behind them.

    ``statistic`` is the document's largest window z and ``p_value`` its
    family-wise p-value (for the cover: the smallest Bonferroni-adjusted
    interval p-value); no span is reported unless ``p_value <= alpha``.
    """

    segments: list[Segment]
    statistic: float
    p_value: float
    alpha: float
    n_tokens: int
    windows: tuple[int, ...]
    method: str
    draws: int | None = None

    @property
    def is_watermarked(self) -> bool:
        return bool(self.segments)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "n_tokens": self.n_tokens, "statistic": round(float(self.statistic), 6),
                "p_value": self.p_value, "alpha": self.alpha, "is_watermarked": self.is_watermarked,
                "draws": self.draws, "windows": list(self.windows),
                "segments": [s.to_dict() for s in self.segments]}


def window_lengths(n_transitions: int, min_window: int = 16) -> tuple[int, ...]:
    """The scanned window lengths: min_window, 2 min_window, 4 min_window, ... up to the number of transitions."""
    n_transitions = check_int(n_transitions, "n_transitions", 0)
    min_window = check_int(min_window, "min_window", 2)
    out, w = [], min_window
    while w <= n_transitions:
        out.append(w)
        w *= 2
    return tuple(out)


def _row_cumsum(legal: np.ndarray) -> np.ndarray:
    """Each row's running count of legal transitions, from 0: window counts are differences of it."""
    legal = np.atleast_2d(legal)
    csum = np.zeros((legal.shape[0], legal.shape[1] + 1), dtype=np.int32)
    np.cumsum(legal, axis=1, out=csum[:, 1:])
    return csum


def _window_z(legal: np.ndarray, w: int, p0: float) -> tuple[np.ndarray, np.ndarray]:
    """(starts, z) of every window of ``w`` transitions (the scan looks at all of them); ``legal`` is (rows, m),
    z is (rows, windows)."""
    csum = _row_cumsum(legal)
    starts = np.arange(0, csum.shape[1] - w)
    counts = csum[:, starts + w] - csum[:, starts]
    return starts, (counts - w * p0) / math.sqrt(w * p0 * (1.0 - p0))


def scan_maximum(windows: Sequence[int], p0: float):
    """The scan's statistic as a function of a legal matrix: each row's largest window z over ``windows``."""
    def statistic(legal: np.ndarray) -> np.ndarray:
        csum = _row_cumsum(legal)
        best = np.full(csum.shape[0], -np.inf)
        for w in windows:  # z grows with the count at a fixed w: take the largest count, then standardise it
            top = (csum[:, w:] - csum[:, :-w]).max(axis=1)
            np.maximum(best, (top - w * p0) / math.sqrt(w * p0 * (1.0 - p0)), out=best)
        return best
    return statistic


def _marked_runs(legal: np.ndarray, lo: int, hi: int, p0: float, p1: float, penalty: float) -> list[tuple[int, int]]:
    """The runs [a, b) of transitions lo..hi-1 that a two-state segmentation calls watermarked.

    Each transition is legal with probability p0 (unwatermarked) or p1 (watermarked); the labelling with the
    largest log-likelihood less ``penalty`` per switch of state wins (Viterbi, free at both ends; ties keep the
    state and prefer unwatermarked). A stretch near p0 inside a run splits it when it gains more than two
    switches' penalty, so the ends fall where the legal rate changes.
    """
    up, down = math.log(p1 / p0), math.log((1.0 - p1) / (1.0 - p0))  # log-likelihood ratio, legal / illegal
    plain, marked = 0.0, 0.0
    came = np.zeros((hi - lo, 2), dtype=bool)  # came[i, s]: state s at i was reached by a switch
    for i, t in enumerate(range(lo, hi)):
        stay0, switch0 = plain, marked - penalty
        stay1, switch1 = marked, plain - penalty
        came[i, 0], came[i, 1] = switch0 > stay0, switch1 > stay1
        plain = max(stay0, switch0)
        marked = max(stay1, switch1) + (up if legal[t] else down)
    state = 1 if marked > plain else 0
    runs, end = [], None
    for i in range(hi - lo - 1, -1, -1):
        if state == 1 and end is None:
            end = lo + i + 1
        switched = came[i, state]
        if state == 1 and (switched or i == 0):
            runs.append((lo + i, end))
            end = None
        state = 1 - state if switched else state
    return runs[::-1]


def _char_span(offsets: Sequence[tuple[int, int]] | None, start: int, end: int) -> tuple[int | None, int | None]:
    if offsets is None:
        return None, None
    return int(offsets[start][0]), int(offsets[end - 1][1])


def _regions(flagged: Sequence[tuple[float, int, int]]) -> list[tuple[int, int]]:
    """The union of the flagged windows [a, a + w) as disjoint regions of transitions (touching ones joined)."""
    regions: list[list[int]] = []
    for a, b in sorted((a, a + w) for _, a, w in flagged):
        if regions and a <= regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], b)
        else:
            regions.append([a, b])
    return [(a, b) for a, b in regions]


def _spans_above(legal: Any, p0: float, windows: Sequence[int], threshold: float,
                min_window: int = 16) -> list[tuple[int, int, float, int]]:
    """Disjoint token spans ``(start, end, z, window)`` where windows with z above ``threshold`` lie.

    The flagged windows are joined into regions (windows that overlap or touch share one). Each region, with
    the length of its longest flagged window added on either side, is segmented in two states
    (:func:`_marked_runs`: unwatermarked at rate p0, watermarked at the legal rate of the region's strongest
    window, a switch costing log(n - 1)), so a span's ends come from where the legal rate changes, not from
    the window that flagged it, and two passages in one region come out as two spans. A run of at least
    ``min_window`` transitions that overlaps a flagged window becomes a span, carrying the largest z of the
    flagged windows it overlaps and that window's length; spans fewer than ``min_window`` tokens apart are
    joined, keeping the larger z. ``legal`` is the legal-transition indicator of the text (n - 1 values); the
    playground's JavaScript repeats this rule step for step.
    """
    legal = np.asarray(legal, dtype=bool)
    m = int(legal.size)
    csum = np.concatenate([[0], np.cumsum(legal, dtype=np.int64)])
    flagged = []
    for w in windows:
        starts, z = _window_z(legal, w, p0)
        flagged += [(float(z[0, i]), int(starts[i]), int(w)) for i in np.flatnonzero(z[0] > threshold)]
    flagged.sort(key=lambda f: (-f[0], f[1], f[2]))  # the strongest first: a span's evidence is the first it meets
    penalty = math.log(max(m, 2))
    spans: list[tuple[int, int, float, int]] = []
    for lo, hi in _regions(flagged):
        inside = [f for f in flagged if lo <= f[1] and f[1] + f[2] <= hi]
        _, a, w = inside[0]
        p1 = min(float(csum[a + w] - csum[a]) / w, 0.99)
        if p1 <= p0:  # no legal rate above the null's to segment by (only with a threshold below 0)
            continue
        pad = max(f[2] for f in inside)
        for s, e in _marked_runs(legal, max(0, lo - pad), min(m, hi + pad), p0, p1, penalty):
            support = [f for f in inside if f[1] < e and s < f[1] + f[2]]
            if e - s >= min_window and support:
                spans.append((s, e + 1, support[0][0], support[0][2]))  # transitions s..e-1 touch tokens s..e
    merged: list[tuple[int, int, float, int]] = []
    for span in sorted(spans):
        if merged and span[0] - merged[-1][1] < min_window:
            last = merged[-1]
            best = last if last[2] >= span[2] else span
            merged[-1] = (last[0], max(last[1], span[1]), best[2], best[3])
        else:
            merged.append(span)
    return merged


def _observed_legal(ids: np.ndarray, key: Key, topo: Any, vocab_size: int | None) -> np.ndarray:
    return valid_transitions(states_of(ids, key, topo.S, vocab_size), topo)


def _regular(config: ChainMarkConfig) -> Topology:
    """The configuration's topology, which must be k-regular (windows are standardised against p0 = k/S)."""
    if config.topo.k is None:
        raise ValueError("the segment finder needs a k-regular topology (p0 = k/S); this one is irregular")
    return config.topo


@takes_config()
def detect_segments(token_ids: object, config: ChainMarkConfig, *, alpha: float = 0.01, draws: int = 999,
                    seed: int | None = None, min_window: int = 16, offsets: Sequence[tuple[int, int]] | None = None,
                    vocab_size: int | None = None) -> SegmentsResult:
    """Find the watermarked spans of one document (``config`` as :func:`chainmark.detect` takes it), with
    family-wise error at most ``alpha`` over a random key.

    Every window gets the p-value (1 + #{null maxima >= its z}) / (draws + 1), the null maxima coming from
    ``draws`` re-drawn keys; windows at or below ``alpha`` are flagged and resolved into disjoint spans by
    :func:`_spans_above`. A span carries the z and family-wise p-value of the strongest flagged window behind
    it; ``offsets`` (one (char_start, char_end) per token) add character spans. The re-drawn keys are seeded
    from the key (:func:`chainmark.randomisation.key_seed`), which makes the guarantee hold for every text; an
    explicit ``seed`` reproduces another run's draws but gives that up (the error is then alpha on average over
    seeds, not for every text).

    >>> config = cm.ChainMarkConfig(b'example key', S=5)
    >>> found = cm.detect_segments(list(range(100, 300)), config, draws=99)
    >>> found.segments  # unwatermarked ids: no span
    []
    """
    key, topo = config.key, _regular(config)
    alpha = check_alpha(alpha)
    draws = check_int(draws, "draws", 1)
    if (1.0 / (draws + 1)) > alpha:
        raise ValueError(f"draws = {draws} cannot give a p-value at or below alpha = {alpha:g}: use at least "
                         f"{math.ceil(1.0 / alpha) - 1} draws")
    ids = as_token_array(token_ids, vocab_size)
    offsets = check_offsets(offsets, int(ids.size))
    m = int(ids.size) - 1
    windows = window_lengths(max(m, 0), min_window)
    if not windows:
        return SegmentsResult([], -math.inf, 1.0, alpha, int(ids.size), (), "scan", draws)
    statistic = scan_maximum(windows, topo.p0)
    test = key_randomisation_test(ids, config, statistic=statistic, draws=draws, seed=seed, vocab_size=vocab_size)
    null = np.sort(test.null)
    legal = _observed_legal(ids, key, topo, vocab_size)
    # p <= alpha for a window exactly when its z exceeds the K-th largest null maximum, K = floor(alpha (B + 1))
    threshold = float(null[null.size - math.floor(alpha * (draws + 1) + 1e-9)])
    segments = []
    for start, end, z, w in _spans_above(legal, topo.p0, windows, threshold, min_window):
        p = (1 + (null.size - np.searchsorted(null, z, side="left"))) / (draws + 1)
        segments.append(Segment(start, end, z, float(p), w, *_char_span(offsets, start, end)))
    return SegmentsResult(segments, test.observed, test.p_value, alpha, int(ids.size), windows, "scan", draws)

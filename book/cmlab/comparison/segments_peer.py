"""The segment finder's peer: the dyadic geometry cover of Zhao, Liao, Wang and Li (ACL 2025), ported onto
ChainMark's sequence of legal transitions.

The package's own finder (:func:`chainmark.auditor.detect_segments`) calibrates its window scan by re-drawing the
key. This peer tests each interval of a dyadic cover with an exact binomial test and corrects for the number of
intervals with Bonferroni, treating the transitions as independent; ``tools/measure_segments.py`` compares the two.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.special import bdtrc

from chainmark.auditor.segments import Segment, SegmentsResult
from chainmark.checks import check_alpha, check_int, check_offsets
from chainmark.config import ChainMarkConfig, takes_config
from chainmark.detection import valid_transitions
from chainmark.partition import as_token_array, states_of

__all__ = ["cover_segments"]


@takes_config()
def cover_segments(token_ids: object, config: ChainMarkConfig, *, alpha: float = 0.01, min_window: int = 16,
                   offsets: Sequence[tuple[int, int]] | None = None,
                   vocab_size: int | None = None) -> SegmentsResult:
    """The dyadic geometry cover, an exact binomial test per interval, Bonferroni over the intervals.

    Intervals [i 2^j, (i + 1) 2^j) of transitions for every 2^j >= ``min_window`` (rounded up to a power of
    two); an interval is flagged when its binomial tail P(Bin(w, p0) >= count) times the number of intervals is
    at most ``alpha``; overlapping or adjacent flagged intervals merge into one span. The binomial treats the
    transitions as independent, which repeated tokens break. The authors' public code is looser still: a normal
    z-test per interval against a fixed threshold (0.001 to 0.05) with no multiplicity correction.
    """
    topo = config.topo
    if topo.k is None:
        raise ValueError("the segment finder needs a k-regular topology (p0 = k/S); this one is irregular")
    alpha = check_alpha(alpha)
    min_window = check_int(min_window, "min_window", 2)
    ids = as_token_array(token_ids, vocab_size)
    offsets = check_offsets(offsets, int(ids.size))
    m = int(ids.size) - 1
    first = 1 << max(0, (min_window - 1).bit_length())
    windows = tuple(w for w in (first << j for j in range(64)) if w <= m) if m >= first else ()
    if not windows:
        return SegmentsResult([], -math.inf, 1.0, alpha, int(ids.size), (), "cover")
    legal = valid_transitions(states_of(ids, config.key, topo.S, vocab_size), topo)
    csum = np.concatenate([[0], np.cumsum(legal, dtype=np.int64)])
    intervals = [(a, a + w) for w in windows for a in range(0, m - w + 1, w)]
    lo = np.array([a for a, _ in intervals])
    hi = np.array([b for _, b in intervals])
    counts = csum[hi] - csum[lo]
    width = hi - lo
    tail = np.where(counts > 0, bdtrc(counts - 1, width, topo.p0), 1.0)
    adjusted = np.minimum(1.0, tail * len(intervals))
    z = (counts - width * topo.p0) / np.sqrt(width * topo.p0 * (1 - topo.p0))
    best = int(np.argmin(adjusted))
    spans: list[list[Any]] = []
    for i in sorted(np.flatnonzero(adjusted <= alpha), key=lambda i: (lo[i], hi[i])):
        if spans and lo[i] <= spans[-1][1]:
            s = spans[-1]
            s[1] = max(s[1], int(hi[i]))
            if adjusted[i] < s[3] or (adjusted[i] == s[3] and z[i] > s[2]):
                s[2], s[3], s[4] = float(z[i]), float(adjusted[i]), int(width[i])
        else:
            spans.append([int(lo[i]), int(hi[i]), float(z[i]), float(adjusted[i]), int(width[i])])
    segments = [Segment(a, b + 1, zz, p, w, *_char_span(offsets, a, b + 1)) for a, b, zz, p, w in spans]
    return SegmentsResult(segments, float(z[best]), float(adjusted[best]), alpha, int(ids.size), windows, "cover")


def _char_span(offsets: Sequence[tuple[int, int]] | None, start: int, end: int) -> tuple[int | None, int | None]:
    """The characters that tokens start..end-1 cover, or (None, None) without offsets."""
    if offsets is None:
        return None, None
    return int(offsets[start][0]), int(offsets[end - 1][1])

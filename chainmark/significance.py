"""The tests' statistics: which transitions each test scores, and the z-score and p-value they give.

The z-test scores every transition, the distinct-pair test each token pair once (:func:`first_occurrences`), the
exact test the transitions of a spanning forest of the text (:func:`spanning_forest`). Counts become numbers in one
place, :func:`transition_statistics`, which the detector, the streaming detector and the corpus audit call.
Model-free and key-free: a mask depends on the token ids alone.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import bdtrc, log_ndtr, ndtr

from .checks import check_int

__all__ = ["DEFAULT_TEST", "TESTS", "binomial_p_value", "check_test", "first_occurrences", "forest_mask",
           "log_p_value", "p_value", "spanning_forest", "transition_statistics", "z_score"]


def z_score(phi: float, p0: float, n_transitions: int) -> float:
    """Standardised score of phi against the null mean p0 over n_transitions.

    Computed in the same order of operations as the paper's listing
    (``(phi - p0) / sqrt(p0 * (1 - p0) / n)``), so the two agree bit for bit.
    ``phi`` is a fraction in [0, 1] and ``n_transitions`` a count (an
    integer >= 0); anything else is an error naming the parameter. No
    transitions means no evidence: z = 0, as :func:`detect` reports for a
    text of fewer than two tokens.
    """
    if not 0.0 < p0 < 1.0:  # also rejects NaN
        raise ValueError(f"p0 must lie in (0, 1), got {p0}")
    if isinstance(phi, bool) or not isinstance(phi, (int, float, np.integer, np.floating)):
        raise TypeError(f"phi must be a number in [0, 1], got {type(phi).__name__}")
    if not 0.0 <= phi <= 1.0:  # also rejects NaN
        raise ValueError(f"phi (fraction of legal transitions) must lie in [0, 1], got {phi}")
    n_transitions = check_int(n_transitions, "n_transitions", 0)
    if n_transitions == 0:
        return 0.0
    se = math.sqrt(p0 * (1.0 - p0) / n_transitions)
    return (phi - p0) / se


def p_value(z: float) -> float:
    """One-sided normal upper-tail probability 1 - Phi(z), accurate far in the tail.

    ``ndtr(-z)`` (what ``scipy.stats.norm.sf`` calls, without its
    per-call overhead) evaluates the tail directly through erfc, so it keeps
    full relative precision where ``1 - norm.cdf(z)`` has cancelled to 0
    (z above about 8). It underflows to 0 only beyond z of about 38; use
    :func:`log_p_value` there. ``z`` may be infinite (p = 0 or 1); NaN is
    a ``ValueError``, since a p-value of NaN would silently never reject.
    """
    return float(ndtr(-_check_z(z)))


def log_p_value(z: float) -> float:
    """Natural log of the one-sided p-value; finite even where the p-value underflows.

    Like :func:`p_value`, NaN is a ``ValueError``.
    """
    return float(log_ndtr(-_check_z(z)))


def _check_z(z: object) -> float:
    """A z-score as a float: any real scalar (int, float, numpy or 0-d array), not NaN."""
    if isinstance(z, (bool, str, bytes)):
        raise TypeError(f"z must be a number, got {type(z).__name__}")
    try:
        z = float(z)
    except (TypeError, ValueError):
        raise TypeError(f"z must be a number, got {type(z).__name__}") from None
    if math.isnan(z):
        raise ValueError("z must be a number, got NaN")
    return z


def first_occurrences(ids: np.ndarray) -> np.ndarray:
    """Mask over transitions: True where the pair (t_i, t_{i+1}) appears for the first time.

    The distinct test (``test="distinct"``) scores only these transitions, so a
    phrase the text repeats counts once (compare ``ignore_repeated_ngrams``
    in lm-watermarking). A pair's legality is a function of the pair, so a
    repeat adds no new evidence, only correlated copies of old evidence.

    >>> import numpy as np
    >>> cm.first_occurrences(np.array([7, 8, 7, 8, 9]))  # (7, 8) again at the third transition
    array([ True,  True, False,  True])
    """
    ids = np.asarray(ids)
    if ids.size < 2:
        return np.zeros(max(ids.size - 1, 0), dtype=bool)
    a, b = ids[:-1], ids[1:]
    top = int(ids.max())
    if top < 2**31:  # one int64 code per pair: much faster than unique over rows
        codes = a.astype(np.int64) * (top + 1) + b.astype(np.int64)
        _, first = np.unique(codes, return_index=True)
    else:
        _, first = np.unique(np.stack([a, b], axis=1), axis=0, return_index=True)
    mask = np.zeros(ids.size - 1, dtype=bool)
    mask[first] = True
    return mask


#: The tests the detector offers. ``"z"``: every transition, the paper's z-test (normal tail).
#: ``"distinct"``: each distinct pair (t_i, t_{i+1}) once, same z-test. ``"exact"``: the transitions of a
#: spanning forest of the text's token graph (:func:`spanning_forest`), an exact binomial test whose size
#: is at most alpha for every text under a uniformly random key.
TESTS = ("z", "distinct", "exact")
DEFAULT_TEST = "exact"  # without a named test, in the API and the command line alike: its size holds for every text


def check_test(test: object) -> str:
    """A test name from :data:`TESTS`."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, got {test!r}")
    return str(test)


def spanning_forest(ids: Any) -> np.ndarray:
    """Mask over transitions: True where t_{i+1} is a token the text has not used before.

    These transitions form a spanning forest of the text's token graph (nodes:
    its distinct tokens; edges: its transitions): reading the transitions in
    order and keeping one only when it joins two tokens not yet connected by
    kept ones (a union-find) keeps exactly these, because the tokens of a text
    read so far are always connected by the walk itself, so a transition joins
    something new only when its second token is new. The mask depends on the
    token ids alone, never on the key. Under a uniformly random key the states
    of distinct tokens are independent and uniform, so the new token's state is
    fresh: with a k-regular topology each kept transition is legal with
    probability k/S independently of all the others, and the legal count is
    exactly Binomial(m, k/S) for any text, whatever it repeats (m = distinct
    tokens - 1). Repeated pairs and transitions that close a cycle, which make
    the z-test's false-positive rate drift, are what this drops.

    >>> cm.spanning_forest([7, 8, 7, 8, 9])  # only 8 and 9 are new tokens
    array([ True, False, False,  True])
    """
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids must be one-dimensional, got shape {ids.shape}")
    dense = ids.size >= 2 and ids.dtype.kind in "iu" and int(ids.min()) >= 0
    return forest_mask(ids, int(ids.max()) if dense else None)


def forest_mask(ids: np.ndarray, top: int | None) -> np.ndarray:
    """:func:`spanning_forest` for checked ids; ``top`` is their largest value when all are >= 0."""
    n = int(ids.size)
    if n < 2:
        return np.zeros(max(n - 1, 0), dtype=bool)
    index = np.int32 if n < 2**31 else np.int64  # half the memory traffic of int64: about 3x faster
    positions = np.arange(n, dtype=index)
    if top is not None and top < max(4 * n, 1 << 20):
        first = np.full(top + 1, n, dtype=index)  # each id's first position, in one scatter
        np.minimum.at(first, ids, positions)
        new = first[ids] == positions
    else:  # sparse or huge ids: sort instead of a table over the id range
        new = np.zeros(n, dtype=bool)
        new[np.unique(ids, return_index=True)[1]] = True
    return new[1:]  # transition i reaches token i + 1: kept when that token is new


def transition_statistics(c: Any, m: Any, p0: float, test: str = "z") -> tuple[Any, Any, Any]:
    """phi, z and the p-value of c legal transitions among m scored, under ``test``: the one switch over the tests.

    The detector, the streaming detector and the corpus audit all turn their
    counts into numbers here. z is :func:`z_score`'s; the p-value is the
    normal tail of z for ``"z"`` and ``"distinct"`` and the binomial tail
    P(Binomial(m, p0) >= c) for ``"exact"``; m = 0 gives phi = z = 0, p = 1.
    Integers give floats; arrays (one entry per text) give arrays, computed
    with the same IEEE operations, so the two agree bit for bit.
    """
    if np.ndim(m) == 0:
        m, c = int(m), int(c)
        if m == 0:
            return 0.0, 0.0, 1.0
        phi = c / m
        z = z_score(phi, p0, m)
        return phi, z, binomial_p_value(c, m, p0) if test == "exact" else p_value(z)
    c, m = np.asarray(c), np.asarray(m)
    scored = m > 0
    phi, z, p = np.zeros(m.shape), np.zeros(m.shape), np.ones(m.shape)
    phi[scored] = c[scored] / m[scored]
    z[scored] = (phi[scored] - p0) / np.sqrt(p0 * (1.0 - p0) / m[scored])  # z_score's operations, in its order
    if test == "exact":
        hit = scored & (c > 0)
        p[hit] = bdtrc(c[hit] - 1, m[hit], p0)
    else:
        p[scored] = ndtr(-z[scored])
    return phi, z, p


def binomial_p_value(c: int, m: int, p0: float) -> float:
    """Exact one-sided p-value P(Binomial(m, p0) >= c): the exact test's tail (1 when m = 0)."""
    if m == 0 or c <= 0:
        return 1.0
    return float(bdtrc(c - 1, m, p0))  # scipy.stats.binom.sf without its per-call overhead

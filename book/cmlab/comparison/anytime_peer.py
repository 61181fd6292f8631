"""A peer for the anytime detector: the average e-process of Su, Wang & Zhao, run on ChainMark's scored transitions.

**The peer.** Su, Wang & Zhao ("Online LLM watermark detection via
e-processes", arXiv:2602.14286, 2026) build anytime-valid watermark detectors
from a stream of independent pivotal statistics whose null law is known: each
pivot is turned into a p-value P_t, uniform under the null (for the
Gumbel-max watermark P_t = 1 - Y_t), and the e-process is a product
M_t = f_1(P_1) ... f_t(P_t) of *predictable calibrators*: decreasing densities
f_s on [0, 1], each chosen from P_1..P_{s-1} only, so that E f_s(P_s) = 1
given the past and M is a test martingale (Ville's inequality then bounds the
chance that it ever reaches 1/alpha by alpha). They propose ways to choose
f_s from the past (their "empirically adaptive" e-processes), two of which
this module writes down, and recommend their equal-weight average:

* **weight-adaptive (WA)**: f = (1 - eta) + eta (-log p), a mix of the
  uniform calibrator and the log calibrator, with eta_t in [0, 1/2] the
  maximiser of the past factors' log product, sum_{s<t} log f(P_s), and
  eta_1 = 0;
* **online Grenander (OG)**: f_t is the decreasing density of largest
  likelihood on the past p-values together with two pseudo-observations of
  weight 1/2 at p = 0 and p = 1 (their endpoint-adjusted estimator; the one
  at 1 keeps f_t(1) > 0, so one unlucky factor never zeroes the process);
* **average**: M = (M_WA + M_OG) / 2, the mean of the two processes (not of
  their factors), itself a test martingale.

The cap 1/2, the endpoint weight 1/2 and the equal weights are fixed here in
advance, so the tuning cannot depend on the text; every fit uses only
transitions before the one it bets on, so each factor is predictable and the
process stays an e-process. Written from the paper's abstract and from public
notes on its method, which give the cap 1/2 as the one its implementation
uses and the endpoint-adjusted likelihood as its equation (13); check those
two details against the paper before quoting them. Where this module had to
choose (the mapping and the endpoint convention below), it says so.

**ChainMark's pivot.** ChainMark's pivot is the legal indicator X_j of the
j-th scored transition (one into a token not seen before in the text), with
P(X_j = 1 | past) = p0 = k/S exactly under a random key
(:mod:`chainmark.auditor.anytime`). Its randomised p-value
U_j = p0 V if legal, p0 + (1 - p0) V if not, V uniform on (0, 1], is exactly
uniform given the past, so the paper's construction applies to U_j as
written. We take one step more and average each factor over V:
E[f(U_j) | X_j] is again a factor with conditional mean 1 under the null,
needs no random draw (so nothing has to be seeded from the key), and, V being
the detector's own draw, by Jensen's inequality its expected log is at least
that of f(U_j) under any alternative, for any given calibrator f. A
calibrator averaged over the two blocks (0, p0] and (p0, 1] is a two-step
density, fixed by its mass q on (0, p0], q >= p0; its factor is the
likelihood ratio q/p0 on a legal transition and (1 - q)/(1 - p0) on an
illegal one. The peer is then two plug-in likelihood ratios, where the
package's detector mixes fixed ones:

* WA averages the log calibrator to 1 - log p0 on a legal transition and
  1 + p0 log p0 / (1 - p0) on an illegal one, so its rate is
  q = p0 (1 - eta log p0), with eta_t found in closed form from the past
  counts (the objective is concave, so clipping its root to [0, 1/2] is the
  constrained maximiser); q is at most p0 (1 - log(p0) / 2), 0.361 at p0 = 0.2;
* OG is fitted to the block p-values (P = p0 if legal, 1 if not, the plain
  one-sided p-value of one Bernoulli) rather than to draws of U, which would
  need the draws and a monotone fit per transition; it is the two-step density with
  q = (h + 1/2) / (m + 1) after h legal among m scored, or the uniform
  density (q = p0) when that is below p0 or when nothing legal has been seen
  (no data point at p0, so no step there). We count the pseudo-observation
  at 0 toward the first block, the usual Grenander convention that the
  density at 0 is its first block's. This is the Krichevsky-Trofimov
  estimate of the legal rate, floored at p0; its factor at P = p0 or 1 is
  the same as at any U in that block, so here OG loses nothing to the block
  averaging.

The log calibrator fitted to the block p-value instead of the randomised one
would have null mean p0 (-log p0) < 1 (0.32 at p0 = 0.2) and, at a legal rate
of 0.6, a mean still below 1 (0.97): WA would never bet. That is why the
randomised p-value, averaged, is the mapping used.

Model-free: numpy only. :func:`_peer_log_e` gives log E after every scored
transition for one row of indicators or many (one per re-drawn key, say);
:func:`peer_crossing` the first index at which E reaches 1/alpha.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from chainmark.checks import check_alpha, is_number

__all__ = ["peer_crossing"]

#: The largest weight WA puts on the log calibrator (the paper's experiments use 1/2).
_PEER_CAP = 0.5
#: The weight of each pseudo-observation (at p = 0 and p = 1) in the online Grenander fit.
_PEER_ENDPOINT_WEIGHT = 0.5
#: The e-processes :func:`_peer_log_e` returns: the paper's recommended average and its two parts.
_PEER_COMPONENTS = ("average", "weight_adaptive", "grenander")
#: Rows scored together: bounds memory at about ten float arrays of this many rows.
_ROWS = 4096


def _check_p0(p0: object) -> float:
    """The null legal rate: a number strictly between 0 and 1."""
    if not is_number(p0):
        raise TypeError(f"p0 must be a number in (0, 1), got {type(p0).__name__}")
    if not 0.0 < float(p0) < 1.0:
        raise ValueError(f"p0 must lie in (0, 1), got {p0!r}")
    return float(p0)


def _check_component(component: object) -> str:
    """One of :data:`_PEER_COMPONENTS`."""
    if component not in _PEER_COMPONENTS:
        raise ValueError(f"component must be one of {_PEER_COMPONENTS}, got {component!r}")
    return str(component)


def _as_indicators(legal: Any) -> np.ndarray:
    """The legal indicators as a boolean array of one or two dimensions (0/1 integers accepted)."""
    try:
        x = np.asarray(legal)
    except ValueError:  # a ragged nested list
        raise ValueError("legal must be a 1-D array of indicators or a 2-D array with rows of equal length") \
            from None
    if x.dtype == object:
        raise ValueError("legal must be a 1-D array of indicators or a 2-D array with rows of equal length")
    if x.ndim not in (1, 2):
        raise ValueError(f"legal must be 1-D (one text) or 2-D (one row per key), got {x.ndim} dimensions")
    if x.dtype == bool:
        return x
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise TypeError(f"legal must hold booleans (or 0/1), got dtype {x.dtype}")
    if x.size and not np.all((x == 0) | (x == 1)):
        raise ValueError("legal must hold only 0 and 1 (or False and True)")
    return x.astype(bool)


def _log_calibrator_steps(p0: float) -> tuple[float, float]:
    """The log calibrator averaged over (0, p0] and over (p0, 1], minus 1: (-log p0, p0 log p0 / (1 - p0))."""
    return -math.log(p0), p0 * math.log(p0) / (1.0 - p0)


def _bets(hits: np.ndarray, scored: np.ndarray, p0: float) -> tuple[np.ndarray, np.ndarray]:
    """The WA and OG rates for checked float arrays of counts (see :func:`_peer_bets`)."""
    up, down = _log_calibrator_steps(p0)
    with np.errstate(divide="ignore", invalid="ignore"):
        root = (hits * up + (scored - hits) * down) / (scored * up * -down)
    eta = np.clip(np.where(scored > 0, root, 0.0), 0.0, _PEER_CAP)
    w = _PEER_ENDPOINT_WEIGHT
    grenander = np.where(hits > 0, np.maximum(p0, (hits + w) / (scored + 2.0 * w)), p0)
    return p0 * (1.0 + eta * up), grenander


def _peer_bets(hits: Any, scored: Any, p0: float) -> tuple[np.ndarray, np.ndarray]:
    """The legal rates q the WA and OG parts bet on after ``hits`` legal among ``scored`` transitions (counts,
    arrays broadcast together); a valid e-process passes the counts *before* the transition it bets on."""
    p0 = _check_p0(p0)
    h, m = np.asarray(hits, dtype=float), np.asarray(scored, dtype=float)
    if np.any(h < 0) or np.any(h > m) or np.any(h != np.floor(h)) or np.any(m != np.floor(m)):
        raise ValueError("hits and scored must be counts with 0 <= hits <= scored")
    return _bets(h, m, p0)


def _log_factors(x: np.ndarray, q: np.ndarray, p0: float) -> np.ndarray:
    """log of each factor: log(q/p0) on a legal transition, log((1 - q)/(1 - p0)) on an illegal one."""
    return np.where(x, np.log(q / p0), np.log1p(-q) - math.log1p(-p0))


def _rows_log_e(x: np.ndarray, p0: float, component: str) -> np.ndarray:
    """log E after each scored transition for a 2-D block of rows, each process fitted on the past alone."""
    n, length = x.shape
    hits = np.zeros((n, length))
    np.cumsum(x[:, :-1], axis=1, out=hits[:, 1:])  # legal transitions before each one
    scored = np.broadcast_to(np.arange(length, dtype=float), (n, length))
    q_wa, q_og = _bets(hits, scored, p0)
    if component == "weight_adaptive":
        return np.cumsum(_log_factors(x, q_wa, p0), axis=1)
    log_og = np.cumsum(_log_factors(x, q_og, p0), axis=1)
    if component == "grenander":
        return log_og
    return np.logaddexp(np.cumsum(_log_factors(x, q_wa, p0), axis=1), log_og) - math.log(2.0)


def _peer_log_e(legal: Any, p0: float, component: str = "average") -> np.ndarray:
    """log E of the peer after each scored transition, the same shape as ``legal`` (one text's indicators, or
    one row per key); ``component`` picks the average (the paper's recommendation) or one of its two parts."""
    x, p0, component = _as_indicators(legal), _check_p0(p0), _check_component(component)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    out = np.zeros(rows.shape)
    if rows.shape[1]:
        for lo in range(0, rows.shape[0], _ROWS):
            out[lo:lo + _ROWS] = _rows_log_e(rows[lo:lo + _ROWS], p0, component)
    return out.reshape(x.shape)


def peer_crossing(legal: Any, p0: float, alpha: float = 0.01, component: str = "average") -> Any:
    """The index of the first scored transition at which E reaches 1/alpha, or -1 where it never does: an int
    for one text, an array with one entry per row for a 2-D input."""
    alpha = check_alpha(alpha)
    log_e = _peer_log_e(legal, p0, component)
    rows = log_e.reshape(1, -1) if log_e.ndim == 1 else log_e
    over = rows >= math.log(1.0 / alpha)
    first = np.full(rows.shape[0], -1, dtype=np.int64)
    if rows.shape[1]:
        first = np.where(over.any(axis=1), over.argmax(axis=1), -1).astype(np.int64)
    return int(first[0]) if log_e.ndim == 1 else first

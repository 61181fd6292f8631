"""Anytime-valid detection: evidence that may be checked after every token of a stream, at no cost in error.

Re-running a fixed-length test after each new token and stopping at the first rejection (peeking) inflates its
false-positive rate far above alpha. An **e-process** does not: a nonnegative supermartingale E_t under the null
with E_0 = 1 obeys Ville's inequality, P(sup_t E_t >= 1/alpha) <= alpha, so a text may be stopped (or read on)
whenever anyone likes and flagged as soon as E_t reaches 1/alpha.

**Why ChainMark has one, for every text.** Under the null the text does not depend on the key, and over a uniformly
random key the states of its distinct tokens are independent and uniform on {0, ..., S-1} (SHA-256 as a random
function; reducing its digest mod S leaves a bias of order S/2^64). Call the transition x_{t-1} -> x_t *scored*
when x_t has not occurred before t: its state is then a fresh uniform draw, so given the whole past it is legal
with probability exactly k/S = p0 in a k-regular topology (an irregular one is refused: p0 must be exact). The
scored legal indicators therefore have P(X_j = 1 | past) = p0, whatever the text repeats, even when each next token
is chosen after seeing the indicators so far. A transition into a repeated token is skipped: its legality is
determined by, or correlated with, what was already seen. The scored transitions are the exact test's spanning
forest (:func:`chainmark.significance.spanning_forest`).

**The mixture: a grid of bets on rates above p0.** For a legal rate q, the likelihood ratio
prod_j (q/p0)^X_j ((1-q)/(1-p0))^(1-X_j) is a test martingale under the null, and so is any mixture with weights
fixed in advance. We mix over q_i = p0 + (1 - p0) u_i, u_i = (i - 1/2)/100, i = 1..100:

    log E = logsumexp_i [log w_i + h log(q_i/p0) + (m - h) log((1 - q_i)/(1 - p0))]

for h legal among m scored transitions. A closed-form Beta mixture would also bet on rates *below* p0 (its E grows
on a text with fewer legal transitions than chance), so a flag would not mean "more legal transitions than
chance"; truncating it to (p0, 1) needs a log incomplete beta function that scipy does not give. The grid is
one-sided, exact in log space on a text of any length and cheap (a stream has at most as many scored transitions
as the vocabulary has tokens); against a bet on the text's own rate q it loses at most
(0.005 (1 - p0))^2 / (2 q (1 - q)) nats per scored transition, about 2.5 nats over the embedded vocabulary at S = 5.

**The weights.** Under the watermark a scored transition is legal with probability about p0 + rho (1 - p0), that
is u* = rho; which positions a gate picks changes how many gated positions bring a new token, so the weights follow
a broad Beta(4 mu, 4 (1 - mu)) density in u, mu = rho clipped into [0.05, 0.95], worth four transitions of belief.
``prior=(a, b)`` sets another, fixed before the text is read (weights chosen after looking do not give a valid
test).

The guarantee is over a random key, as the exact test's is (:mod:`chainmark.auditor.keyaudit` measures one key's
rate on a corpus). Memory is bounded by the vocabulary. ``tests/test_anytime.py`` checks the guarantee by
simulation on periodic, repeated-paragraph, repeated-pair, de Bruijn and licence texts, and that the same
e-process over *all* transitions breaks it on each of them. Model-free: numpy only.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from ..checks import check_alpha, check_rho, is_number
from ..config import ChainMarkConfig, takes_config
from ..detection import detection_args, valid_transitions
from ..partition import as_token_array, states_of
from ..topology import Topology
from .stream import ids_and_offsets, text_pieces

__all__ = ["AnytimeDetector", "AnytimeResult", "BetGrid", "anytime_detect", "bet_grid"]

#: How many alternative rates the e-process bets on (evenly spaced in u = (q - p0)/(1 - p0)).
_GRID_POINTS = 100
#: How many transitions' worth of belief the default Beta weights hold (a + b).
_PRIOR_STRENGTH = 4.0
#: Scored transitions whose log E is computed in one block (bounds the memory of a long piece).
_BLOCK = 1 << 14
#: Characters per piece when text is read as it arrives: small, so that a crossing stops the reading soon.
_STREAM_PIECE_CHARS = 1 << 14
#: Largest vocabulary whose ids seen are kept as one flag per entry (16 MiB); past it, a sorted array.
_DENSE_IDS_MAX = 1 << 24


def _default_prior(rho: float) -> tuple[float, float]:
    """The default Beta(a, b) weights in u = (q - p0)/(1 - p0): mean rho clipped into [0.05, 0.95], with
    a + b = :data:`_PRIOR_STRENGTH` (see the module docstring for why)."""
    mean = min(max(check_rho(rho), 0.05), 0.95)
    return _PRIOR_STRENGTH * mean, _PRIOR_STRENGTH * (1.0 - mean)


def _check_prior(prior: object) -> tuple[float, float]:
    """A Beta prior (a, b): two finite positive numbers."""
    try:
        a, b = prior  # type: ignore[misc]
    except (TypeError, ValueError):
        raise TypeError(f"prior must be a pair (a, b) of positive numbers, got {prior!r}") from None
    if not (is_number(a) and is_number(b) and 0.0 < float(a) < math.inf and 0.0 < float(b) < math.inf):
        raise ValueError(f"prior must be a pair (a, b) of finite positive numbers, got {prior!r}")
    return float(a), float(b)


@dataclass(frozen=True, eq=False)
class BetGrid:
    """The alternatives the e-process bets on: rates ``q`` above ``p0`` and their log weights (summing to 1)."""

    p0: float
    prior: tuple[float, float]
    q: np.ndarray
    log_weights: np.ndarray

    def log_e(self, hits: Any, scored: Any) -> Any:
        """log E after ``hits`` legal among ``scored`` transitions (arrays of counts give an array): the one
        formula the detector uses, for simulations and the chapter."""
        h, m = np.asarray(hits, dtype=float), np.asarray(scored, dtype=float)
        if np.any(h < 0) or np.any(h > m) or np.any(h != np.floor(h)) or np.any(m != np.floor(m)):
            raise ValueError("hits and scored must be counts with 0 <= hits <= scored")
        out = self._log_e(h.ravel(), m.ravel()).reshape(h.shape)
        return float(out) if out.ndim == 0 else out

    def _log_e(self, h: np.ndarray, m: np.ndarray) -> np.ndarray:
        """log E for flat arrays of checked counts, a block of rows at a time."""
        up, down = np.log(self.q / self.p0), np.log1p(-self.q) - math.log1p(-self.p0)
        out = np.empty(h.size)
        for lo in range(0, h.size, _BLOCK):
            hb, mb = h[lo:lo + _BLOCK, None], m[lo:lo + _BLOCK, None]
            out[lo:lo + _BLOCK] = _logsumexp_rows(self.log_weights + hb * up + (mb - hb) * down)
        return out


def _logsumexp_rows(x: np.ndarray) -> np.ndarray:
    """log sum exp along each row (scipy's logsumexp, without its generality: three times faster here)."""
    top = x.max(axis=1)
    return top + np.log(np.exp(x - top[:, None]).sum(axis=1))


def bet_grid(p0: float, rho: float = 0.5, prior: tuple[float, float] | None = None) -> BetGrid:
    """The grid of :data:`_GRID_POINTS` rates q = p0 + (1 - p0) u, u at the midpoints of (0, 1), weighted by the
    Beta(a, b) density in u: ``prior``, else :func:`_default_prior` of ``rho``."""
    if not is_number(p0) or not 0.0 < float(p0) < 1.0:
        raise ValueError(f"p0 must lie in (0, 1), got {p0!r}")
    return _grid(float(p0), _default_prior(rho) if prior is None else _check_prior(prior))


@functools.lru_cache(maxsize=64)
def _grid(p0: float, prior: tuple[float, float]) -> BetGrid:
    """The grid for checked arguments, built once (its arrays are read-only)."""
    a, b = prior
    u = (np.arange(_GRID_POINTS) + 0.5) / _GRID_POINTS
    log_density = (a - 1.0) * np.log(u) + (b - 1.0) * np.log1p(-u)
    log_weights = log_density - _logsumexp_rows(log_density[None, :])[0]
    q = p0 + (1.0 - p0) * u
    for arr in (q, log_weights):
        arr.flags.writeable = False
    return BetGrid(p0, (a, b), q, log_weights)


@dataclass(frozen=True)
class AnytimeResult:
    """Whether and where a text's anytime evidence crossed 1/alpha, and how strong it was.

    ``crossing_token`` is the index of the token whose transition first took E to 1/alpha or above (None if it
    never did), ``crossing_char`` the character offset just past that token (the text up to there already holds
    the evidence; None without offsets). ``log_e_value`` is log E after the last token read, ``max_log_e_value``
    the largest log E on the way; ``n_scored`` transitions reached a new token, ``n_legal`` of them were legal.
    ``read_to_end`` is False when reading stopped at the crossing.
    """

    crossed: bool
    crossing_token: int | None
    crossing_char: int | None
    log_e_value: float
    max_log_e_value: float
    n_tokens: int
    n_scored: int
    n_legal: int
    alpha: float
    p0: float
    prior: tuple[float, float]
    read_to_end: bool = True

    @property
    def is_watermarked(self) -> bool:
        """The decision: the evidence crossed 1/alpha (the name the other detectors' results use)."""
        return self.crossed

    @property
    def e_value(self) -> float:
        """E after the last token read (``inf`` beyond a double's range; :attr:`log_e_value` holds it)."""
        return _exp(self.log_e_value)

    @property
    def max_e_value(self) -> float:
        """The largest E on the way (``inf`` beyond a double's range)."""
        return _exp(self.max_log_e_value)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: e-values as numbers (null past a double's range) and as base-10 logarithms."""
        return {"crossed": self.crossed, "is_watermarked": self.crossed, "crossing_token": self.crossing_token,
                "crossing_char": self.crossing_char, "e_value": _finite(self.e_value),
                "max_e_value": _finite(self.max_e_value),
                "log10_e_value": self.log_e_value / math.log(10),
                "max_log10_e_value": self.max_log_e_value / math.log(10), "threshold": 1.0 / self.alpha,
                "n_tokens": self.n_tokens, "n_scored": self.n_scored, "n_legal": self.n_legal,
                "read_to_end": self.read_to_end, "p0": self.p0, "prior": list(self.prior), "alpha": self.alpha}


def _exp(log_value: float) -> float:
    """exp, with ``inf`` where a double cannot hold the value (instead of an OverflowError)."""
    return math.exp(log_value) if log_value < 709.0 else math.inf


def _finite(value: float) -> float | None:
    """The value, or None where JSON could not hold it."""
    return value if math.isfinite(value) else None


def _regular(config: ChainMarkConfig) -> Topology:
    """The configuration's topology, checked as detection checks it (S, the key's type), and k-regular."""
    if config.topo.k is None:
        raise ValueError("anytime detection needs a k-regular topology (p0 = k/S exactly); this one is irregular")
    topo, _, _ = detection_args(config, 0.5)
    return topo


class AnytimeDetector:
    """The e-process of one text, fed token ids as they arrive (:meth:`update`) or text (:meth:`feed_text`).

    Holds the ids seen so far, the previous token's state, the counts (m scored, h legal), log E now and at its
    largest, and the first crossing of 1/alpha. ``config`` is the :class:`~chainmark.config.ChainMarkConfig` that
    :func:`chainmark.detect` takes; its rho centres the prior, and ``prior=(a, b)`` replaces the prior outright.
    ``vocab_size`` (when known) rejects ids outside the vocabulary and keeps the ids seen as one flag per entry.
    """

    @takes_config(("key", "S", "topology", "rho"))
    def __init__(self, config: ChainMarkConfig, alpha: float = 0.01, *, prior: tuple[float, float] | None = None,
                 vocab_size: int | None = None):
        self._key, self.topology = config.key, _regular(config)
        self.alpha = check_alpha(alpha)
        self.p0 = float(self.topology.p0)
        self.grid = bet_grid(self.p0, config.rho, prior)
        if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer))
                                       or vocab_size < 1):
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
        self.vocab_size = None if vocab_size is None else int(vocab_size)
        self._bound = math.log(1.0 / self.alpha)
        self._dense = self.vocab_size is not None and self.vocab_size <= _DENSE_IDS_MAX
        self._seen_flags = np.zeros(self.vocab_size if self._dense else 0, dtype=bool)
        self._seen_ids = np.zeros(0, dtype=np.uint64)  # sorted, without a known (small) vocabulary
        self._prev_state: np.ndarray | None = None
        self.n_tokens = self.n_scored = self.n_legal = 0
        self.log_e_value = self.max_log_e_value = 0.0
        self.crossing_token: int | None = None
        self.crossing_char: int | None = None
        self.read_to_end = True

    @property
    def crossed(self) -> bool:
        """Whether E has reached 1/alpha at some token so far."""
        return self.crossing_token is not None

    def update(self, token_ids: Any, offsets: Sequence[tuple[int, int]] | None = None) -> bool:
        """Add the next token ids (one id or a piece); ``offsets`` are their (start, end) character spans in the
        whole text. Returns whether E has crossed 1/alpha so far. Bad ids change nothing."""
        single = isinstance(token_ids, (int, np.integer)) and not isinstance(token_ids, bool)
        ids = as_token_array([token_ids] if single else token_ids, self.vocab_size)
        if offsets is not None and len(offsets) != ids.size:
            raise ValueError(f"offsets must hold one (start, end) per token ({ids.size}), got {len(offsets)}")
        if ids.size == 0:
            return self.crossed
        states = states_of(ids, self._key, self.topology.S, self.vocab_size)
        fresh = self._fresh(ids)
        chain = states if self._prev_state is None else np.concatenate([self._prev_state, states])
        legal = valid_transitions(chain, self.topology)
        if self._prev_state is None:
            fresh = fresh[1:]  # the text's first token has no transition into it
        first = self.n_tokens + ids.size - legal.size  # token index of the transition legal[0] reaches
        self._prev_state = states[-1:].copy()
        self.n_tokens += int(ids.size)
        self._score(np.flatnonzero(fresh), legal[fresh], first, offsets, ids.size - legal.size)
        return self.crossed

    def _fresh(self, ids: np.ndarray) -> np.ndarray:
        """Mask over ``ids``: True at a token's first occurrence in the whole text so far (and remember them).
        Only the ids not seen before this piece are sorted, so a long text costs a lookup per token."""
        if self._dense:
            unseen = np.flatnonzero(~self._seen_flags[ids])
        else:
            flat = ids.astype(np.uint64)
            where = np.minimum(np.searchsorted(self._seen_ids, flat), max(self._seen_ids.size - 1, 0))
            unseen = np.flatnonzero(self._seen_ids[where] != flat) if self._seen_ids.size else np.arange(ids.size)
        mask = np.zeros(ids.size, dtype=bool)
        if unseen.size == 0:
            return mask
        uniq, first = np.unique(ids[unseen], return_index=True)
        mask[unseen[first]] = True
        if self._dense:
            self._seen_flags[uniq] = True
        else:  # two sorted runs: the stable sort merges them in linear time
            self._seen_ids = np.sort(np.concatenate([self._seen_ids, uniq.astype(np.uint64)]), kind="stable")
        return mask

    def _score(self, at: np.ndarray, legal: np.ndarray, first: int, offsets: Any, shift: int) -> None:
        """Advance the counts over the scored transitions (``at``: their places among this piece's transitions)
        and record log E, its largest value and the first crossing.

        E rises only at a legal transition (every bet is on a rate above p0), so its largest value and its
        first crossing are found among those, and log E is computed there and at the piece's last one.
        """
        if at.size == 0:
            return
        h = self.n_legal + np.cumsum(legal)
        m = self.n_scored + np.arange(1, at.size + 1)
        rise = np.flatnonzero(legal)
        where = rise if legal[-1] else np.append(rise, at.size - 1)
        logs = self.grid._log_e(h[where].astype(float), m[where].astype(float))
        self.n_scored, self.n_legal = int(m[-1]), int(h[-1])
        self.log_e_value = float(logs[-1])
        if rise.size:
            self.max_log_e_value = max(self.max_log_e_value, float(logs[:rise.size].max()))
        if self.crossing_token is None:
            over = np.flatnonzero(logs[:rise.size] >= self._bound)
            if over.size:
                j = int(at[rise[over[0]]])  # transition j of the piece reaches token first + j, the piece's j + shift
                self.crossing_token = first + j
                self.crossing_char = None if offsets is None else int(offsets[j + shift][1])

    def feed_text(self, chunks: Iterable[str], tokenizer: Any, *, stop: bool = True,
                  piece_chars: int = _STREAM_PIECE_CHARS) -> bool:
        """Read text given in chunks of any size, tokenizing it in pieces cut where the tokens stay the whole
        text's (:func:`chainmark.auditor.stream.text_pieces`), with character offsets where the tokenizer gives
        them. With ``stop`` reading ends at the piece where E crosses 1/alpha. Returns whether the text was
        read to its end (also :attr:`read_to_end`)."""
        base = 0
        pieces = text_pieces(chunks, tokenizer, piece_chars, 256 * piece_chars)
        for piece in pieces:
            ids, offsets = ids_and_offsets(tokenizer, piece)
            self.update(np.asarray(ids, dtype=np.int64),
                        None if offsets is None else [(a + base, b + base) for a, b in offsets])
            base += len(piece)
            if stop and self.crossed:
                pieces.close()  # no further chunk is asked for
                self.read_to_end = False
                return False
        self.read_to_end = True
        return True

    def result(self) -> AnytimeResult:
        """Everything read so far, as an :class:`AnytimeResult`."""
        return AnytimeResult(self.crossed, self.crossing_token, self.crossing_char, self.log_e_value,
                             self.max_log_e_value, self.n_tokens, self.n_scored, self.n_legal, self.alpha, self.p0,
                             self.grid.prior, self.read_to_end)


@takes_config(("key", "S", "topology", "rho"))
def anytime_detect(token_ids: Any, config: ChainMarkConfig, alpha: float = 0.01,
                   offsets: Sequence[tuple[int, int]] | None = None, *,
                   prior: tuple[float, float] | None = None, vocab_size: int | None = None) -> AnytimeResult:
    """The anytime e-process over one whole text: whether and where E first reached 1/alpha, E at the end and
    at its largest. Takes the configuration :func:`chainmark.detect` takes (``anytime_detect(ids, config)``);
    ``offsets`` (one (start, end) per token) add the crossing's character offset. Equal to an
    :class:`AnytimeDetector` fed the same ids in any pieces. Fewer than two tokens score nothing (E = 1)."""
    detector = AnytimeDetector(config, alpha, prior=prior, vocab_size=vocab_size)
    ids = as_token_array(token_ids, vocab_size)
    detector.update(ids, None if offsets is None else [(int(a), int(b)) for a, b in offsets])
    return detector.result()

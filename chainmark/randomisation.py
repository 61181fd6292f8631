"""The key-randomisation test: a p-value for any statistic of a fixed text, over a uniformly random key.

Under the null the key is uniformly random and independent of the text, so the states of the text's *distinct*
tokens are independent and uniform on {0, ..., S-1}, while every copy of a token shares its token's state. The text
stays fixed; only the states are re-drawn. Any statistic of the legal- transition sequence then has a null
distribution that can be simulated for this very text, and the Monte Carlo p-value (1 + #{simulated >= observed}) /
(draws + 1) is valid for every text, whatever its repetition or length (the observed value is exchangeable with the
simulated ones) as long as the re-drawn keys are independent of the real one. That is why their generator is seeded
from the key itself (:func:`key_seed`, a keyed hash of the key and a fixed label): over a random key the seed is as
random as the states, so the p-value is valid for every text. A fixed seed would fix each text's null sample, and a
text whose sample happens to be light in its upper tail would then be flagged more often than alpha (the rate is
alpha only on average over seeds); an explicit ``seed`` is for reproducing a run. Re-drawing is a table lookup per
token, so a thousand keys on a 10,000-token text take a fraction of a second. Model-free: only the token ids and the
topology.
"""
from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .checks import check_int
from .config import ChainMarkConfig, takes_config
from .detection import valid_transitions
from .partition import Key, as_token_array, key_bytes, states_of
from .topology import Topology

__all__ = ["RandomisationResult", "key_randomisation_test", "key_seed", "legal_transitions_null"]

#: A statistic maps a (rows, transitions) boolean legal matrix to one value per row.
Statistic = Callable[[np.ndarray], np.ndarray]

#: About how many states one block of re-drawn keys holds (bounds the memory of a long text's null).
_BLOCK_CELLS = 1 << 22
#: Draws per run of one random generator (see :func:`_redrawn_blocks`).
_RUN = 64
#: The label of the keyed hash that seeds the re-drawn keys (:func:`key_seed`).
_SEED_LABEL = b"chainmark/v1/key-randomisation-seed"


def key_seed(key: Key, context: str = "") -> int:
    """The seed of the re-drawn keys that follows the key: HMAC-SHA-256(key, label + context), 128 bits.

    Under a random key it is random too, and independent of the text's states
    (those hash the key with token ids, this with a fixed label), which is what
    makes the Monte Carlo p-value valid for every text. ``context`` (a document
    id, say) gives each document of a corpus its own draws under one key.
    """
    if not isinstance(context, str):
        raise TypeError(f"context must be a str, got {type(context).__name__}")
    digest = hmac.new(key_bytes(key), _SEED_LABEL + b"/" + context.encode("utf-8"), hashlib.sha256).digest()
    return int.from_bytes(digest[:16], "big")


def _legal_count(legal: np.ndarray) -> np.ndarray:
    """The default statistic: how many transitions of each row are legal."""
    return np.count_nonzero(legal, axis=-1)


def _regular(config: ChainMarkConfig) -> Topology:
    """The configuration's topology, which must be k-regular (the null rate p0 = k/S)."""
    if config.topo.k is None:
        raise ValueError("the key-randomisation test needs a k-regular topology (p0 = k/S); this one is irregular")
    return config.topo


def _check_draws(draws: object) -> int:
    return check_int(draws, "draws", 1)


def _check_seed(seed: object, key: Key) -> int:
    """An explicit seed as given, or the key's own (:func:`key_seed`) when ``seed`` is None."""
    return key_seed(key) if seed is None else check_int(seed, "seed", 0)


def _text_ids(token_ids: object) -> np.ndarray:
    ids = as_token_array(token_ids)
    if ids.size < 2:
        raise ValueError(f"the text needs at least 2 tokens (one transition), got {ids.size}")
    return ids


def _redrawn_blocks(ids: np.ndarray, topology: Topology, draws: int, seed: int):
    """Yield (rows, n - 1) legal matrices, ``draws`` rows in all, for keys re-drawn uniformly at random.

    Draws come in runs of :data:`_RUN` rows, run j from its own generator
    seeded with (seed, j), so the draws do not depend on how many rows a
    block of memory holds.
    """
    _, inverse = np.unique(ids, return_inverse=True)
    inverse = inverse.ravel()
    distinct = int(inverse.max()) + 1
    dtype = np.int8 if topology.S <= 127 else (np.int16 if topology.S <= 32767 else np.int32)
    runs_per_block = max(1, _BLOCK_CELLS // (ids.size * _RUN))
    n_runs = -(-draws // _RUN)
    for first in range(0, n_runs, runs_per_block):
        parts = []
        for j in range(first, min(first + runs_per_block, n_runs)):
            rows = min(_RUN, draws - j * _RUN)
            parts.append(np.random.default_rng([seed, j]).integers(0, topology.S, size=(rows, distinct), dtype=dtype))
        yield valid_transitions(np.concatenate(parts)[:, inverse], topology)


@takes_config()
def legal_transitions_null(token_ids: object, config: ChainMarkConfig, draws: int = 999, *,
                           seed: int | None = None) -> np.ndarray:
    """The text's legal-transition indicators under ``draws`` re-drawn keys: a (draws, n - 1) boolean array.

    Row r is what the detector would see on this text under the r-th random
    key: each distinct token's state drawn uniformly, copies sharing it, with
    the S and topology of ``config``. Its key only seeds the draws: left out,
    ``seed`` is :func:`key_seed` of it, the draws
    :func:`key_randomisation_test` makes for that configuration.
    """
    ids = _text_ids(token_ids)
    seed = _check_seed(seed, config.key)
    return np.concatenate(list(_redrawn_blocks(ids, config.topo, _check_draws(draws), seed)))


def _monte_carlo_p_value(observed: float, null: np.ndarray) -> float:
    """(1 + #{null >= observed}) / (len(null) + 1): a p-value that is valid however few the draws."""
    null = np.asarray(null, dtype=float)
    return float((1 + np.count_nonzero(null >= observed)) / (null.size + 1))


@dataclass(frozen=True)
class RandomisationResult:
    """A statistic of one text against its key-randomisation null."""

    observed: float
    p_value: float
    draws: int
    exceedances: int
    null: np.ndarray = field(repr=False)

    @property
    def mc_error(self) -> float:
        """Standard error of the Monte Carlo p-value (how far another seed's p-value would typically land)."""
        p = self.exceedances / self.draws
        return math.sqrt(p * (1.0 - p) / self.draws)

    def to_dict(self) -> dict[str, Any]:
        return {"observed": float(self.observed), "p_value": self.p_value, "mc_error": self.mc_error,
                "draws": self.draws, "exceedances": self.exceedances}


@takes_config()
def key_randomisation_test(token_ids: object, config: ChainMarkConfig, *, statistic: Statistic = _legal_count,
                           mask: object = None, draws: int = 999, seed: int | None = None,
                           vocab_size: int | None = None) -> RandomisationResult:
    """The Monte Carlo p-value of ``statistic`` on this text under ``draws`` re-drawn keys.

    ``config`` is the :class:`ChainMarkConfig` the text is tested for, as
    :func:`chainmark.detect` takes it; the observed statistic is computed
    with its key, the null with uniformly random states.
    ``mask`` (a boolean array over the n - 1 transitions, e.g.
    :func:`chainmark.significance.forest_mask`) scores a subset of
    transitions. Larger statistics are evidence of the watermark.

    The re-drawn keys are seeded from the key (:func:`key_seed`), so over a
    random key P(p <= alpha) <= alpha for every text, every alpha and every
    number of draws. Give ``seed`` only to reproduce draws: with a fixed seed
    the guarantee holds on average over seeds, not for every text.

    >>> config = cm.ChainMarkConfig(b'example key', S=5)
    >>> r = cm.key_randomisation_test(list(range(100, 160)), config, draws=199)
    >>> r.draws, 0 < r.p_value <= 1
    (199, True)
    """
    key, topo = config.key, _regular(config)
    draws, seed = _check_draws(draws), _check_seed(seed, key)
    ids = _text_ids(token_ids)
    keep = None
    if mask is not None:
        keep = np.asarray(mask, dtype=bool)
        if keep.shape != (ids.size - 1,):
            raise ValueError(f"mask must hold one flag per transition ({ids.size - 1}), got shape {keep.shape}")
    if not callable(statistic):
        raise TypeError(f"statistic must be a callable on a legal matrix, got {type(statistic).__name__}")
    legal = valid_transitions(states_of(ids, key, topo.S, vocab_size), topo)[None, :]
    observed = float(np.asarray(statistic(legal if keep is None else legal[:, keep]))[0])
    null = np.concatenate([np.asarray(statistic(block if keep is None else block[:, keep]), dtype=float)
                           for block in _redrawn_blocks(ids, topo, draws, seed)])
    exceed = int(np.count_nonzero(null >= observed))
    return RandomisationResult(observed, (1 + exceed) / (draws + 1), draws, exceed, null)

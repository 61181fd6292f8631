"""The key-randomisation test: a p-value for any statistic of a fixed text, over a uniformly random key.

Under the null the key is uniformly random and independent of the text, so
the states of the text's *distinct* tokens are independent and uniform on
{0, ..., S-1}, while every copy of a token shares its token's state. The text
stays fixed; only the states are re-drawn. Any statistic of the legal-
transition sequence then has a null distribution that can be simulated for
this very text, and the Monte Carlo p-value (1 + #{simulated >= observed}) /
(draws + 1) is valid for every text, whatever its repetition or length
(the observed value is exchangeable with the simulated ones). Re-drawing is a
table lookup per token, so a thousand keys on a 10,000-token text take a
fraction of a second. Model-free: only the token ids and the topology.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .checks import check_int
from .config import ChainMarkConfig
from .detection import unpack_config, valid_transitions
from .partition import Key, as_token_array, states_of
from .topology import Topology, TopologyLike, resolve_topology

__all__ = ["RandomisationResult", "key_randomisation_test", "legal_count", "legal_transitions_null",
           "monte_carlo_p_value", "resolve_config"]

#: A statistic maps a (rows, transitions) boolean legal matrix to one value per row.
Statistic = Callable[[np.ndarray], np.ndarray]

#: About how many states one block of re-drawn keys holds (bounds the memory of a long text's null).
_BLOCK_CELLS = 1 << 22
#: Draws per run of one random generator (see :func:`_redrawn_blocks`).
_RUN = 64


def legal_count(legal: np.ndarray) -> np.ndarray:
    """The default statistic: how many transitions of each row are legal."""
    return np.count_nonzero(legal, axis=-1)


def resolve_config(key: Key | ChainMarkConfig, S: object, topology: TopologyLike | None) -> tuple[Key, Topology]:
    """The key and the checked k-regular topology, from a :class:`ChainMarkConfig` or given one by one
    (S = 5 and clockwork by default, as :func:`chainmark.detect` takes them)."""
    key, S, topology = unpack_config(key, S, topology)
    topo = resolve_topology(topology, S)
    if topo.k is None:
        raise ValueError("the key-randomisation test needs a k-regular topology (p0 = k/S); this one is irregular")
    return key, topo


def _check_draws(draws: object) -> int:
    return check_int(draws, "draws", 1)


def _check_seed(seed: object) -> int:
    return check_int(seed, "seed", 0)


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


def legal_transitions_null(token_ids: object, S: int = 5, topology: TopologyLike | None = None,
                           draws: int = 999, seed: int = 0) -> np.ndarray:
    """The text's legal-transition indicators under ``draws`` re-drawn keys: a (draws, n - 1) boolean array.

    Row r is what the detector would see on this text under the r-th random
    key: each distinct token's state drawn uniformly, copies sharing it.
    """
    topo = resolve_topology("clockwork" if topology is None else topology, S)
    ids = _text_ids(token_ids)
    return np.concatenate(list(_redrawn_blocks(ids, topo, _check_draws(draws), _check_seed(seed))))


def monte_carlo_p_value(observed: float, null: np.ndarray) -> float:
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


def key_randomisation_test(token_ids: object, key: Key | ChainMarkConfig, S: object = None,
                           topology: TopologyLike | None = None, *, statistic: Statistic = legal_count,
                           mask: object = None, draws: int = 999, seed: int = 0,
                           vocab_size: int | None = None) -> RandomisationResult:
    """The Monte Carlo p-value of ``statistic`` on this text under ``draws`` re-drawn keys.

    ``key`` is the key the text is tested for (or the generation's
    :class:`ChainMarkConfig`, which carries S and the topology); the observed
    statistic is computed with it, the null with uniformly random states.
    ``mask`` (a boolean array over the n - 1 transitions, e.g.
    :func:`chainmark.significance.forest_mask`) scores a subset of
    transitions. Larger statistics are evidence of the watermark.
    """
    key, topo = resolve_config(key, S, topology)
    draws, seed = _check_draws(draws), _check_seed(seed)
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

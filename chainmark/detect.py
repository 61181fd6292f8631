"""The model-free detector: re-derive states from the key and count legal transitions.

phi = share of transitions t_i -> t_{i+1} whose states follow the topology;
under the null (text not written with this key) phi has mean p0 = k/S and
variance p0(1 - p0)/(n - 1), so z = (phi - p0) / sqrt(p0(1 - p0)/(n - 1)) and
the one-sided p-value is the normal upper tail at z (the paper's Algorithm 2
and reference listing). Only the key and the tokenizer are needed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from scipy.stats import norm

from .partition import Key, as_token_array, check_num_states, states_of
from .topology import Topology, TopologyLike, resolve_topology


def check_alpha(alpha: object, name: str = "alpha") -> float:
    """A significance level must lie strictly between 0 and 1."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)):
        raise TypeError(f"{name} must be a number in (0, 1), got {type(alpha).__name__}")
    if not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"{name} must lie in (0, 1), got {alpha}")
    return float(alpha)


def z_score(phi: float, p0: float, n_transitions: int) -> float:
    """Standardised score of phi against the null mean p0 over n_transitions."""
    if n_transitions < 1:
        return 0.0
    return (phi - p0) / math.sqrt(p0 * (1.0 - p0) / n_transitions)


def p_value(z: float) -> float:
    """One-sided normal upper-tail probability, accurate far in the tail."""
    return float(norm.sf(z))


@dataclass
class DetectionResult:
    """What the detector found in one token sequence."""

    phi: float
    z: float
    p_value: float
    is_watermarked: bool
    n_tokens: int
    n_transitions: int
    n_valid: int
    S: int
    k: int
    p0: float
    alpha: float
    valid_mask: np.ndarray = field(repr=False)
    scored_mask: np.ndarray = field(repr=False)

    def to_dict(self, include_masks: bool = False) -> dict[str, Any]:
        """Plain-Python dictionary (JSON-ready); masks only when asked for."""
        out: dict[str, Any] = {
            "phi": float(self.phi),
            "z": float(self.z),
            "p_value": float(self.p_value),
            "is_watermarked": bool(self.is_watermarked),
            "n_tokens": int(self.n_tokens),
            "n_transitions": int(self.n_transitions),
            "n_valid": int(self.n_valid),
            "S": int(self.S),
            "k": int(self.k),
            "p0": float(self.p0),
            "alpha": float(self.alpha),
        }
        if include_masks:
            out["valid_mask"] = self.valid_mask.astype(int).tolist()
            out["scored_mask"] = self.scored_mask.astype(int).tolist()
        return out


def _first_occurrence(ids: np.ndarray) -> np.ndarray:
    """Mask of transitions whose (t_i, t_{i+1}) pair appears for the first time."""
    pairs = np.stack([ids[:-1], ids[1:]], axis=1)
    _, first = np.unique(pairs, axis=0, return_index=True)
    mask = np.zeros(len(pairs), dtype=bool)
    mask[first] = True
    return mask


def score_states(
    states: np.ndarray,
    topology: Topology,
    alpha: float = 0.01,
    scored: np.ndarray | None = None,
    n_tokens: int | None = None,
) -> DetectionResult:
    """Detection statistics from a state sequence (the part that needs no hashing)."""
    n = int(len(states))
    p0, k = topology.p0, int(topology.k)
    if n < 2:
        empty = np.zeros(0, dtype=bool)
        return DetectionResult(0.0, 0.0, 1.0, False, n if n_tokens is None else n_tokens,
                               0, 0, topology.S, k, p0, alpha, empty, empty)
    flat = topology.matrix.ravel()
    prev = states[:-1].astype(np.int32 if topology.S < 46341 else np.int64)
    valid = np.take(flat, prev * topology.S + states[1:])
    if scored is None:
        scored = np.ones(n - 1, dtype=bool)
    m = int(scored.sum())
    c = int(valid[scored].sum())
    phi = c / m
    z = z_score(phi, p0, m)
    p = p_value(z)
    return DetectionResult(phi, z, p, p < alpha, n if n_tokens is None else n_tokens,
                           m, c, topology.S, k, p0, alpha, valid, scored)


def _is_batch(token_ids: Any) -> bool:
    if isinstance(token_ids, np.ndarray):
        return token_ids.ndim == 2
    if hasattr(token_ids, "dim") and hasattr(token_ids, "tolist"):  # torch tensor
        return token_ids.dim() == 2
    if isinstance(token_ids, (list, tuple)) and token_ids:
        return all(isinstance(row, (list, tuple, np.ndarray)) or hasattr(row, "tolist")
                   for row in token_ids)
    return False


def detect(
    token_ids: Any,
    key: Key,
    S: int = 5,
    topology: TopologyLike = "clockwork",
    alpha: float = 0.01,
    distinct_pairs: bool = False,
    vocab_size: int | None = None,
) -> DetectionResult | list[DetectionResult]:
    """Test a token sequence (or a batch of them) for the ChainMark watermark.

    ``distinct_pairs=True`` scores each distinct (t_i, t_{i+1}) pair once:
    repeated n-grams otherwise count several times and break the
    independence the z-test assumes. ``vocab_size`` (when known) rejects
    token ids outside the vocabulary. A 2-D array or a list of lists gives
    a list of results, one per row.
    """
    S = check_num_states(S)
    alpha = check_alpha(alpha)
    topo = resolve_topology(topology, S)
    if topo.k is None:
        raise ValueError("detection needs a k-regular topology")
    if _is_batch(token_ids):
        rows = token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids
        return [detect(row, key, S, topo, alpha, distinct_pairs, vocab_size) for row in rows]
    if hasattr(token_ids, "tolist") and not isinstance(token_ids, np.ndarray):
        token_ids = token_ids.tolist()  # torch tensors
    ids = as_token_array(token_ids, vocab_size)
    states = states_of(ids, key, S)
    scored = _first_occurrence(ids) if (distinct_pairs and ids.size >= 2) else None
    return score_states(states, topo, alpha, scored)


def detect_text(
    text: str,
    tokenizer: Any,
    key: Key,
    S: int = 5,
    topology: TopologyLike = "clockwork",
    alpha: float = 0.01,
    distinct_pairs: bool = False,
) -> DetectionResult:
    """The auditor's path: tokenize the text (no special tokens), then detect."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return detect(ids, key, S, topology, alpha, distinct_pairs, vocab_size=len(tokenizer))


def reference_detect(token_ids: Sequence[int], key: bytes, S: int, alpha: float = 0.01) -> dict:
    """A plain per-token re-statement of the paper's reference detector (clockwork).

    Written independently of the vectorised path above, for tests and for the
    chapter's comparison; it hashes every token with ``hashlib`` in a loop.
    """
    import hashlib

    n = len(token_ids)
    if n < 2:
        return {"phi": 0.0, "z": 0.0, "p_value": 1.0, "is_watermarked": False}
    st = [int.from_bytes(hashlib.sha256(key + int(t).to_bytes(8, "big")).digest()[:8], "big") % S
          for t in token_ids]
    valid = sum(1 for i in range(n - 1) if st[i + 1] == (st[i] + 1) % S)
    phi = valid / (n - 1)
    p0 = 1.0 / S
    z = (phi - p0) / math.sqrt(p0 * (1 - p0) / (n - 1))
    p = 1.0 - norm.cdf(z)
    return {"phi": phi, "z": z, "p_value": p, "is_watermarked": p < alpha}

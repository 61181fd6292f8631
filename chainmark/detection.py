"""The detectors: re-derive states from the key and test whether the text walks the cycle.

**Model-free detector** (the paper's Algorithm 2 and reference listing). phi is the share of transitions t_i ->
t_{i+1} whose states follow the topology. Under the null (text not written with this key) phi has mean p0 = k/S and
variance p0 (1 - p0) / (n - 1) for any k-regular topology, so

    z = (phi - p0) / sqrt(p0 (1 - p0) / (n - 1)),   p = 1 - Phi(z),

and the text is flagged when p < alpha (:func:`chainmark.verdict.decide`, the package's one decision rule). Only the
configuration (one :class:`~chainmark.config.ChainMarkConfig`, which carries the key, S and the topology) and the
tokenizer are needed. The implementation is vectorised through the cached state table (the per-token ``hashlib``
loop of the paper's listing, kept for comparison, is ``tests/paper_listing.py``). The result is a
:class:`DetectionResult`, the package's :class:`~chainmark.verdict.Verdict` with the masks, S and k.

The LM-aware likelihood-ratio detector, for a verifier who also has the model, is :mod:`cmlab.comparison.lrdetect`;
this module needs neither torch nor a model.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from .checks import check_alpha, check_states
from .config import ChainMarkConfig, takes_config
from .partition import Key, as_token_array, key_bytes, states_of
from .significance import (DEFAULT_TEST, check_test, first_occurrences, forest_mask, log_p_value,
                           transition_statistics)
from .topology import Topology
from .verdict import RECORD_FORM, FormField, Verdict, decide

__all__ = ["DetectionResult", "counts_result", "detect", "detect_batch", "detect_text", "detection_args",
           "score_states", "valid_transitions"]

# --------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------


@dataclass
class DetectionResult(Verdict):
    """What the model-free detector found in one token sequence: a :class:`~chainmark.verdict.Verdict`.

    ``valid_mask[i]`` says whether transition ``t_i -> t_{i+1}`` is legal;
    ``scored_mask[i]`` whether it was counted (all of them under the
    z-test, ``test="z"``). ``n_scored`` counts the scored transitions and
    ``n_hits`` the legal ones among them (the dictionaries call them
    ``n_transitions`` and ``n_valid``); ``p0 = k/S``.
    """

    S: int
    k: int
    valid_mask: np.ndarray = field(repr=False)
    scored_mask: np.ndarray = field(repr=False)

    FORMS: ClassVar[Mapping[str, tuple[FormField, ...]]] = {
        # the detector's own dictionary, as chapters and earlier releases print it
        "result": ("phi", "z", "p_value", "log_p_value", "is_watermarked", "n_tokens",
                   ("n_transitions", "n_scored"), ("n_valid", "n_hits"), "S", "k", "p0", "alpha"),
        "record": RECORD_FORM,
        # one row of `chainmark detect --json` (after its "file"): the regime's threshold and decision
        "audit": ("n_tokens", ("n_transitions", "n_scored"), ("n_valid", "n_hits"), "phi", "z", "p_value",
                  ("threshold", "regime.threshold"), ("is_watermarked", "regime.flagged"),
                  ("decision", "regime.label"), "S", "k", ("topology", "regime.topology"),
                  ("alpha", "regime.alpha"), ("distinct_pairs", "regime.distinct_pairs"),
                  ("test", "regime.effective_test"),
                  ("tokenizer", "regime.tokenizer_label"), ("key_fingerprint", "regime.key_fingerprint")),
    }
    MASKS: ClassVar[tuple[str, ...]] = ("valid_mask", "scored_mask")

    @property
    def log_p_value(self) -> float:
        """Natural log of the p-value (finite when the p-value itself underflows to 0)."""
        return 0.0 if self.n_scored == 0 else log_p_value(self.z)


# --------------------------------------------------------------------------
# validity of transitions
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=128)
def _circulant_offsets(topology: Topology) -> tuple[int, ...] | None:
    """Offsets o with T[s, (s + o) mod S] = 1 if T is circulant, else None.

    Clockwork (offset 1) and soft-cycle (offsets 1, 2) are circulant: whether
    a transition is legal depends only on the difference of the two states,
    which lets the detector skip the matrix lookup.
    """
    m, S = topology.matrix, topology.S
    offsets = tuple(int(o) for o in np.flatnonzero(m[0]))
    rows, cols = np.nonzero(m)  # k * S entries: no second S x S matrix
    if rows.size != S * len(offsets):
        return None
    # every entry on an offset diagonal, and k entries per row: exactly the circulant
    return offsets if bool(np.isin((cols - rows) % S, offsets).all()) else None


def _signed(states: np.ndarray) -> np.ndarray:
    """States as a signed integer array (differences must not wrap around)."""
    if states.dtype.kind == "i":
        return states
    if states.dtype.kind == "u":
        return states.astype(np.int64)
    raise TypeError(f"states must be integers, got dtype {states.dtype}")


def valid_transitions(states: np.ndarray, topology: Topology) -> np.ndarray:
    """Boolean legality of every transition ``states[..., i] -> states[..., i + 1]``.

    Works along the last axis, so a 2-D array of equal-length rows is
    handled in one pass. For circulant topologies the test uses the state
    difference d = s_{i+1} - s_i: the step is legal when d is an allowed
    offset o, or o - S (the wrap-around). Comparisons on the compact int8
    states are several times cheaper than gathering from the S x S matrix.

    >>> import numpy as np
    >>> topo = cm.resolve_topology('clockwork', 5)
    >>> cm.valid_transitions(np.array([0, 1, 2, 4, 0]), topo)
    array([ True,  True, False,  True])
    """
    states = _signed(np.asarray(states))
    S = topology.S
    prev, nxt = states[..., :-1], states[..., 1:]
    offsets = _circulant_offsets(topology)
    if offsets is not None:
        d = nxt - prev  # in [-(S-1), S-1]: fits any signed type that holds S - 1
        valid = d == offsets[0]
        valid |= d == offsets[0] - S
        for o in offsets[1:]:
            valid |= d == o
            valid |= d == o - S
        return valid
    index_type = np.int32 if S < 46341 else np.int64
    return np.take(topology.matrix.ravel(), prev.astype(index_type) * S + nxt)


def _check_states(states: np.ndarray, S: int) -> np.ndarray:
    states = _signed(np.asarray(states))
    if states.ndim != 1:
        raise ValueError(f"states must be one-dimensional, got shape {states.shape}")
    if states.size and (int(states.min()) < 0 or int(states.max()) >= S):
        raise ValueError(f"states must lie in [0, {S - 1}] for S = {S}, "
                         f"got values in [{int(states.min())}, {int(states.max())}]")
    return states


def _verdict(n_tokens: int, m: int, c: int, topology: Topology, alpha: float,
             numbers: tuple[float, float, float, bool], masks: tuple[np.ndarray, np.ndarray]) -> DetectionResult:
    """The detector's result from its counts, its (phi, z, p, flagged) and its (valid, scored) masks."""
    phi, z, p, flagged = numbers
    return DetectionResult(phi=phi, z=z, p_value=p, is_watermarked=flagged, n_tokens=n_tokens, n_scored=m,
                           n_hits=c, p0=topology.p0, alpha=alpha, S=topology.S, k=int(topology.k),
                           valid_mask=masks[0], scored_mask=masks[1])


def _empty_result(n_tokens: int, topology: Topology, alpha: float) -> DetectionResult:
    empty = np.zeros(0, dtype=bool)
    valid = np.zeros(max(n_tokens - 1, 0), dtype=bool)
    masks = (valid, np.zeros_like(valid)) if n_tokens >= 2 else (empty, empty)
    return _verdict(n_tokens, 0, 0, topology, alpha, (0.0, 0.0, 1.0, False), masks)


def counts_result(n_tokens: int, m: int, c: int, topology: Topology, alpha: float, test: str = "z",
                  masks: tuple[np.ndarray, np.ndarray] | None = None) -> DetectionResult:
    """phi, z, p-value and decision from m scored transitions of which c are legal, by ``test``'s tail.

    The one counts-to-verdict step of :func:`detect` and the streaming
    detector (which keeps no masks: ``masks`` None leaves them empty).
    """
    if masks is None:
        empty = np.zeros(0, dtype=bool)
        masks = (empty, empty)
    phi, z, p = transition_statistics(c, m, topology.p0, test)
    flagged = m > 0 and bool(decide(z=z, p_value=p, alpha=alpha))
    return _verdict(n_tokens, m, c, topology, alpha, (phi, z, p, flagged), masks)


def _result(n_tokens: int, m: int, c: int, topology: Topology, alpha: float,
            valid: np.ndarray, scored: np.ndarray, exact: bool = False) -> DetectionResult:
    """The result of m scored transitions of which c are legal: the normal tail of z, or with ``exact`` the
    binomial tail P(Binomial(m, p0) >= c); z is reported either way."""
    if m == 0:
        return _empty_result(n_tokens, topology, alpha)
    return counts_result(n_tokens, m, c, topology, alpha, "exact" if exact else "z", (valid, scored))


def score_states(
    states: np.ndarray,
    topology: Topology,
    alpha: float = 0.01,
    scored: np.ndarray | None = None,
    n_tokens: int | None = None,
) -> DetectionResult:
    """Detection statistics from a state sequence (the part that needs no hashing).

    ``scored`` (a boolean mask over the n - 1 transitions) selects which
    transitions count; None counts all of them. Fewer than two states, or no
    scored transition, give phi = z = 0, p = 1 and no detection.

    >>> import numpy as np
    >>> topo = cm.resolve_topology('clockwork', 5)
    >>> walk = np.arange(40) % 5  # a text that walks the cycle at every step
    >>> r = cm.score_states(walk, topo)
    >>> r.phi, r.is_watermarked
    (1.0, True)
    """
    if not isinstance(topology, Topology):
        raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
    if topology.k is None:
        raise ValueError("detection needs a k-regular topology (p0 = k/S); this one is irregular")
    alpha = check_alpha(alpha)
    states = _check_states(states, topology.S)
    if scored is not None:
        scored = np.asarray(scored, dtype=bool)
        if scored.shape != (max(states.size - 1, 0),):
            raise ValueError(f"scored must have one entry per transition ({max(states.size - 1, 0)}), "
                             f"got shape {scored.shape}")
    return _score(states, topology, alpha, scored, states.size if n_tokens is None else int(n_tokens))


def _score(states: np.ndarray, topology: Topology, alpha: float, scored: np.ndarray | None,
           n_tokens: int, exact: bool = False) -> DetectionResult:
    """score_states without the argument checks (the detector's states are valid by construction)."""
    n = int(states.size)
    if n < 2:
        return _empty_result(n_tokens, topology, alpha)
    valid = valid_transitions(states, topology)
    if scored is None:
        scored = np.ones(n - 1, dtype=bool)
        m, c = n - 1, int(np.count_nonzero(valid))
    else:
        m, c = int(np.count_nonzero(scored)), int(np.count_nonzero(valid & scored))
    return _result(n_tokens, m, c, topology, alpha, valid, scored, exact)


# --------------------------------------------------------------------------
# token-level detection
# --------------------------------------------------------------------------


def _is_sequence(item: Any) -> bool:
    """True for a list, tuple, array or tensor of at least one dimension (a row), not for a scalar."""
    if isinstance(item, (list, tuple)):
        return True
    ndim = getattr(item, "ndim", None)  # numpy scalars and 0-d tensors have ndim 0
    return isinstance(ndim, int) and ndim >= 1


def _reject_batch(token_ids: Any) -> None:
    """A ValueError naming :func:`detect_batch` when ``token_ids`` holds rows rather than one text.

    Only the first item of a list is looked at (a scalar there means one
    text; a list mixing scalars and rows is refused by the id normaliser), so
    the check costs nothing on long texts.
    """
    ndim = getattr(token_ids, "ndim", None)
    if isinstance(ndim, int) and ndim == 2:  # a numpy array or torch tensor
        raise ValueError(f"token_ids must be one text (1-D), got a batch of shape {tuple(token_ids.shape)}; "
                         "score a batch with detect_batch")
    if isinstance(token_ids, (list, tuple)) and token_ids and _is_sequence(token_ids[0]):
        raise ValueError(f"token_ids must be one text (a flat sequence of ids), got a sequence of sequences "
                         f"({len(token_ids)} rows); score a batch with detect_batch")


def detection_args(config: ChainMarkConfig, alpha: object, test: object = None) -> tuple[Topology, float, str]:
    """The configuration's checked topology, alpha and test, shared by :func:`detect`, :func:`detect_batch` and
    the streaming and anytime detectors.

    Everything is checked before any id is read, so a bad argument is
    reported even for an empty input.
    """
    check_states(config.S)  # at most MAX_STATES
    alpha = check_alpha(alpha)
    topo = config.topo
    if topo.k is None:
        raise ValueError("detection needs a k-regular topology (p0 = k/S); this one is irregular")
    return topo, alpha, DEFAULT_TEST if test is None else check_test(test)


def _generation_type() -> type | None:
    """:class:`chainmark.embed.Generation` if it is imported (no Generation exists before), without importing torch."""
    return getattr(sys.modules.get("chainmark.embed"), "Generation", None)


def _ids_and_config(token_ids: Any, config: ChainMarkConfig | None) -> tuple[Any, ChainMarkConfig]:
    """The ids to score and the config: a Generation gives its token ids and, when no config is given, its own."""
    generation = _generation_type()
    if generation is not None and isinstance(token_ids, generation):
        if config is None and token_ids.config is None:
            raise ValueError("this Generation carries no configuration (it was generated without a watermark): "
                             "pass the ChainMarkConfig to detect it")
        return token_ids.token_ids, token_ids.config if config is None else config
    if config is None:
        raise TypeError("pass the ChainMarkConfig the text was generated with: detect(ids, ChainMarkConfig(key, "
                        "S=...)) (only a Generation carries its own configuration)")
    return token_ids, config


def _detect_one(token_ids: Any, key: Key, topo: Topology, alpha: float, test: str,
                vocab_size: int | None) -> DetectionResult:
    """Score one text once the arguments are checked."""
    if isinstance(token_ids, np.ndarray) and token_ids.ndim == 1 and token_ids.dtype.kind in "iu" \
            and token_ids.size >= 2:
        ids = token_ids  # states_of validates the ids (sign, range) in the same pass it uses them
    else:
        ids = as_token_array(token_ids, vocab_size)
        if ids.size < 2:
            return _empty_result(int(ids.size), topo, alpha)
    states = states_of(ids, key, topo.S, vocab_size)
    if test == "exact":  # states_of has checked the ids: non-negative integers
        scored = forest_mask(ids, vocab_size - 1 if vocab_size is not None else int(ids.max()))
    else:
        scored = first_occurrences(ids) if test == "distinct" else None
    return _score(states, topo, alpha, scored, int(ids.size), exact=test == "exact")


def _detect_matrix(ids: np.ndarray, key: Key, topo: Topology, alpha: float,
                   vocab_size: int | None) -> list[DetectionResult]:
    """All rows of a rectangular batch in one vectorised pass."""
    rows, n = ids.shape
    if rows == 0:
        return []
    if n < 2:
        return [_empty_result(n, topo, alpha) for _ in range(rows)]
    states = states_of(ids.ravel(), key, topo.S, vocab_size).reshape(rows, n)
    valid = valid_transitions(states, topo)
    counts = np.count_nonzero(valid, axis=1)
    m = n - 1
    phi, z, p = transition_statistics(counts, np.full(rows, m), topo.p0, "z")  # bit for bit the scalar path's
    flagged = decide(z=z, p_value=p, alpha=alpha)
    scored = np.ones(m, dtype=bool)
    scored.flags.writeable = False  # one mask shared by every row
    return [_verdict(n, m, int(counts[r]), topo, alpha, (float(phi[r]), float(z[r]), float(p[r]), bool(flagged[r])),
                     (valid[r], scored))
            for r in range(rows)]


@takes_config(optional=True)
def detect(
    token_ids: Any,
    config: ChainMarkConfig | None = None,
    alpha: float = 0.01,
    vocab_size: int | None = None,
    *,
    test: str | None = None,
) -> DetectionResult:
    """Test one token sequence for the ChainMark watermark.

    ``token_ids`` is one text: a 1-D sequence of ids (list or tuple of ints,
    numpy or torch scalars, a numpy array or a torch tensor on any device).
    ``config`` is the :class:`~chainmark.config.ChainMarkConfig` the text was
    generated with, which carries the key, S and the topology: ``detect(ids,
    ChainMarkConfig(key, S=5))``. A bare key, or S or the topology given
    beside it, is a TypeError that says so. A :class:`~chainmark.embed.Generation`
    may stand for the ids; it carries its config, so ``detect(generation)``
    needs none. A batch (a 2-D array or tensor, or a list of sequences) is a ``ValueError``:
    score it with :func:`detect_batch`, which always returns a list.

    ``test`` picks the test by name (:data:`TESTS`): ``"exact"`` (the default,
    :data:`DEFAULT_TEST`, as on the command line), the binomial test on a
    spanning forest of the text (:func:`spanning_forest`), whose size is at
    most alpha for every text over a uniformly random key (a fixed key's rate
    on a corpus is what :mod:`chainmark.auditor.keyaudit` measures);
    ``"z"``, the paper's z-test on every transition, whose normal tail is an
    approximation; or ``"distinct"`` (each distinct (t_i, t_{i+1}) pair once:
    repeated n-grams otherwise count several times and break the
    independence the z-test assumes). ``vocab_size`` (when
    known) rejects ids outside the vocabulary and saves a pass over the ids.
    ``S`` is at most :data:`~chainmark.limits.MAX_STATES`.

    >>> config = cm.ChainMarkConfig(b'example key', S=5)
    >>> result = cm.detect([1234, 99, 7, 4242, 31, 5, 808, 77], config)
    >>> result.n_scored, result.is_watermarked
    (7, False)
    """
    if isinstance(token_ids, str):
        raise TypeError("detect scores token ids or a Generation, not text: for text, detect_text(text, tokenizer, "
                        "config) tokenizes it and detects with the same config")
    token_ids, config = _ids_and_config(token_ids, config)
    topo, alpha, test = detection_args(config, alpha, test)
    _reject_batch(token_ids)
    return _detect_one(token_ids, config.key, topo, alpha, test, vocab_size)


@takes_config(optional=True)
def detect_batch(
    batch: Any,
    config: ChainMarkConfig | None = None,
    alpha: float = 0.01,
    vocab_size: int | None = None,
    *,
    test: str | None = None,
) -> list[DetectionResult]:
    """Test many token sequences; always a list of results, one per text, equal to :func:`detect` on each.

    ``batch`` is a 2-D numpy array or torch tensor (every row scored whole,
    so strip padding first; scored in one vectorised pass) or an iterable of
    sequences of any lengths (lists, arrays, tensors). The other arguments
    are those of :func:`detect`. One text (a flat sequence of ids) is an
    error naming :func:`detect`. A list of Generations may stand for the
    rows; without a config they must carry one configuration, which is used.

    >>> config = cm.ChainMarkConfig(b'example key', S=5)
    >>> results = cm.detect_batch([[1234, 99, 7], [5, 6, 7, 8]], config)
    >>> [r.n_scored for r in results]
    [2, 3]
    """
    batch, config = _batch_and_config(batch, config)
    topo, alpha, test = detection_args(config, alpha, test)
    key = config.key
    if isinstance(batch, (str, bytes)):
        raise TypeError("batch must hold sequences of token ids, not text; tokenize it first")
    ndim = getattr(batch, "ndim", None)
    if isinstance(ndim, int):  # a numpy array or torch tensor
        if ndim != 2:
            raise ValueError(f"batch must be 2-D (one row per text), got shape {tuple(batch.shape)}"
                             + ("; score one text with detect" if ndim == 1 else ""))
        ids = as_token_array(batch, vocab_size, ndim=2)
        if test == "z":
            return _detect_matrix(ids, key, topo, alpha, vocab_size)
        return [_detect_one(row, key, topo, alpha, test, vocab_size) for row in ids]
    try:
        rows = list(batch)
    except TypeError:
        raise TypeError(f"batch must be a 2-D array or an iterable of token-id sequences, "
                        f"got {type(batch).__name__}") from None
    for i, row in enumerate(rows):
        if not _is_sequence(row):
            raise TypeError(f"batch must hold sequences of token ids (one per text), got "
                            f"{type(row).__name__} at position {i}; score one text with detect")
    return [_detect_one(row, key, topo, alpha, test, vocab_size) for row in rows]


def _batch_and_config(batch: Any, config: ChainMarkConfig | None) -> tuple[Any, ChainMarkConfig]:
    """Rows and config for :func:`detect_batch`: Generations become their token ids, their one config the config."""
    generation = _generation_type()
    if generation is None or not isinstance(batch, (list, tuple)) or \
            not any(isinstance(row, generation) for row in batch):
        return _ids_and_config(batch, config)
    if config is not None:
        return [row.token_ids if isinstance(row, generation) else row for row in batch], config
    if not all(isinstance(row, generation) for row in batch):
        raise TypeError("config must be given unless every row is a Generation carrying its configuration")
    configs = [_ids_and_config(row, None)[1] for row in batch]
    if len({(key_bytes(c.key), c.S, c.topo) for c in configs}) > 1:
        raise ValueError("the generations carry different configurations: detect each group with its own config")
    return [row.token_ids for row in batch], configs[0]


@takes_config()
def detect_text(
    text: str,
    tokenizer: Any,
    config: ChainMarkConfig,
    alpha: float = 0.01,
    vocab_size: int | None = None,
    *,
    test: str | None = None,
) -> DetectionResult:
    """The auditor's path: tokenize the text without special tokens, then :func:`detect` with ``config``.

    The auditor has the published text, not the generated ids; re-tokenizing
    the decoded text usually, but not always, gives back the same ids (the
    detection chapter measures how often). ``vocab_size`` defaults to
    ``len(tokenizer)``; pass the model's logit width if the state table
    was built for a larger vocabulary.

    >>> # with the tokenizer of the model that generated the text:
    >>> config = cm.ChainMarkConfig(b'example key')
    >>> r = cm.detect_text('The sky is blue because of Rayleigh scattering.', tokenizer, config)
    >>> r.n_tokens > 5
    True
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if vocab_size is None:
        vocab_size = len(tokenizer)
    return detect(np.asarray(ids, dtype=np.int64), config, alpha, vocab_size, test=test)

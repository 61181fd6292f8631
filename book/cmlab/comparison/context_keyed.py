"""A context-keyed ChainMark: a token's state derived from the key and its predecessor (a defence against stealing).

ChainMark gives every vocabulary id one state, so each watermarked reply leaks pairs of states and a few
thousand tokens of replies recover the map (:mod:`cmlab.comparison.stealing`). Here the state of token ``b``
after token ``a`` is

    sigma(a, b) = SHA-256(K' || a as 4 bytes || b as 4 bytes), first 8 digest bytes, mod S,

with ``K' = HKDF(key, "chainmark/v1/context-keyed")``: ChainMark's own partition (:func:`chainmark.partition.
state_of`) applied to the pair code ``a * 2**32 + b`` under a derived key. The walk and the gate are ChainMark's:
at a gated step the next token ``b`` must satisfy ``sigma(a, b)`` = a successor of ``sigma(x, a)``, the state of the
previous pair. What an adversary must learn grows from V states to one per pair (V^2, 2.4 billion for the
embedded model), and the evidence of a reply is about triples of tokens.

What carries over, and what it costs:

* **The exact test.** The text's pair codes are a sequence of "tokens" whose distinct values get independent
  uniform states under a random key, which is all the exact test's argument uses: :func:`context_detect` is
  :func:`chainmark.detection.detect` on the codes, valid for every text over a random key like ChainMark's.
* **Robustness.** A substituted token changes two pair codes and so three transitions (those ending at its
  pair, at the next pair, and the one between them): under independent substitutions at rate delta a
  transition survives with probability (1 - delta)^3 (ChainMark: (1 - delta)^2), :func:`survival`.
* **Cost.** Generation hashes a row of V pairs for every new predecessor at a gated step (cached);
  detection hashes one pair per token instead of looking up a table.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from chainmark.config import ChainMarkConfig
from chainmark.detection import detect
from chainmark.keys import hkdf
from chainmark.partition import as_token_array, key_bytes, states_of

#: The HKDF label that derives the pairs' key from the deployment's key.
CONTEXT_INFO = b"chainmark/v1/context-keyed"
#: Token ids must fit 4 bytes: a pair is coded a * 2**32 + b.
_ID_BITS = 32


def context_config(config: ChainMarkConfig) -> ChainMarkConfig:
    """The configuration that scores pair codes: ``config`` (S, rho, gate, topology) with the derived pairs' key.

    Example::

        pairs = context_config(ChainMarkConfig(key, S=5))
        detect(pair_codes(ids), pairs, test="exact")   # what context_detect does
    """
    if not isinstance(config, ChainMarkConfig):
        raise TypeError(f"config must be a ChainMarkConfig, got {type(config).__name__}")
    return ChainMarkConfig(hkdf(key_bytes(config.key), CONTEXT_INFO), S=config.S, rho=config.rho,
                           gate=config.gate, topology=config.topology)


def pair_codes(token_ids: Any) -> np.ndarray:
    """The codes ``a * 2**32 + b`` of a text's adjacent pairs (n - 1 of them for n tokens), as int64."""
    ids = as_token_array(token_ids)
    if ids.size and int(ids.max()) >= 1 << _ID_BITS:
        raise ValueError(f"token_ids must lie below 2**{_ID_BITS} for pair codes, got {int(ids.max())}")
    ids = ids.astype(np.int64)
    return (ids[:-1] << _ID_BITS) | ids[1:]


def context_states(token_ids: Any, config: ChainMarkConfig) -> np.ndarray:
    """The state of every token but the first, given its predecessor: ``sigma(t[i-1], t[i])`` for i >= 1."""
    pairs = context_config(config)
    return states_of(pair_codes(token_ids), pairs.key, pairs.S)


def context_detect(token_ids: Any, config: ChainMarkConfig, alpha: float = 0.01, test: str = "exact") -> Any:
    """Test a text for the context-keyed watermark: ChainMark's test (``"exact"`` by default) on its pair codes.

    A text of n tokens has n - 1 pairs and n - 2 scored transitions. Example::

        context_detect(ids, ChainMarkConfig(key, S=5)).p_value
    """
    return detect(pair_codes(token_ids), context_config(config), alpha, test=test)


def survival(delta: float, context: bool = True) -> float:
    """Share of transitions that survive independent substitutions at rate ``delta``: (1 - delta)^3 here,
    (1 - delta)^2 for ChainMark (``context=False``)."""
    if not 0.0 <= float(delta) <= 1.0:
        raise ValueError(f"delta must lie in [0, 1], got {delta!r}")
    return (1.0 - float(delta)) ** (3 if context else 2)


def _processor_class() -> type:
    import torch
    from transformers import LogitsProcessor

    from chainmark.gate_signals import entropy_signals

    class _ContextKeyedLogitsProcessor(LogitsProcessor):
        def __init__(self, config: ChainMarkConfig, gate: Any = None, cache_rows: int = 8192):
            pairs = context_config(config)
            self.config, self.gate = config, gate if gate is not None else config.default_gate()
            if self.gate.kind != config.gate:
                raise ValueError(f"gate kind {self.gate.kind!r} does not match config.gate {config.gate!r}")
            self._key, self.S = pairs.key, pairs.S
            self._successors = np.asarray(pairs.topo.matrix, dtype=bool)
            self._rows: OrderedDict[int, np.ndarray] = OrderedDict()
            self._cache_rows = int(cache_rows)
            self.gated: list[Any] = []
            self.forced: list[Any] = []
            self.rows_hashed = 0

        def _row(self, a: int, width: int) -> np.ndarray:
            """sigma(a, v) for every v of the logits (hashed once per predecessor, least recently used dropped)."""
            row = self._rows.get(a)
            if row is None or row.size != width:
                row = states_of(np.arange(width, dtype=np.int64) + (a << _ID_BITS), self._key, self.S)
                self._rows[a] = row
                self.rows_hashed += 1
                if len(self._rows) > self._cache_rows:
                    self._rows.popitem(last=False)
            else:
                self._rows.move_to_end(a)
            return row

        def _state(self, x: int, a: int) -> int:
            return int(states_of([(x << _ID_BITS) | a], self._key, self.S)[0])

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            kind = self.gate.kind
            if kind == "all":
                flags = [True] * scores.shape[0]
            else:
                sig = entropy_signals(scores.float(), gap=kind == "top2_gap")
                flags = self.gate.flags_from_signal(sig.gap if kind == "top2_gap" else sig.entropy).tolist()
            ids = input_ids[:, -2:].tolist()
            width = scores.shape[1]
            forced = []
            for r, open_ in enumerate(flags):
                force = False
                if open_:
                    x, a = ids[r] if len(ids[r]) == 2 else (ids[r][0], ids[r][0])
                    legal = np.flatnonzero(self._successors[self._state(x, a)][self._row(a, width)])
                    if legal.size:
                        idx = torch.from_numpy(legal).to(scores.device)
                        values = scores[r, idx]
                        best = int(torch.argmax(values))
                        if torch.isfinite(values[best]):
                            token, keep = int(legal[best]), scores[r, int(legal[best])].clone()
                            scores[r] = float("-inf")
                            scores[r, token] = keep
                            force = True
                forced.append(force)
            self.gated.append(torch.tensor(flags, dtype=torch.bool))
            self.forced.append(torch.tensor(forced, dtype=torch.bool))
            return scores

        def acted_matrix(self) -> np.ndarray:
            """Where the watermark forced a token, as a (batch, steps) boolean array."""
            if not self.forced:
                return np.zeros((0, 0), dtype=bool)
            return torch.stack(self.forced, dim=1).numpy().astype(bool)

    return _ContextKeyedLogitsProcessor


def ContextKeyedLogitsProcessor(config: ChainMarkConfig, gate: Any = None, cache_rows: int = 8192) -> Any:
    """A ``transformers`` LogitsProcessor that walks the cycle on pair states: at a step the gate opens, the
    likeliest token ``b`` with ``sigma(a, b)`` a successor of ``sigma(x, a)`` (``x, a`` the last two tokens) is
    forced; elsewhere the model samples as usual. ``acted_matrix()`` says where it forced. Example::

        proc = ContextKeyedLogitsProcessor(ChainMarkConfig(key, S=5), gate)
        chainmark.embed.generate(model, tok, prompts, extra_processors=[proc])
    """
    if not isinstance(config, ChainMarkConfig):
        raise TypeError(f"config must be a ChainMarkConfig, got {type(config).__name__}")
    return _processor_class()(config, gate, cache_rows)


def legal_share(texts: Sequence[Sequence[int]], config: ChainMarkConfig, forced: Sequence[Sequence[bool]],
                prompt_ids: Sequence[Sequence[int]]) -> float:
    """The share of forced positions whose pair state follows the previous pair's (1.0 for a correct
    generator): each text is read with its prompt's last two tokens in front, as the processor saw it."""
    pairs = context_config(config)
    good = total = 0
    for ids, flags, prompt in zip(texts, forced, prompt_ids):
        full = list(prompt[-2:]) + list(ids)
        states = states_of(pair_codes(full), pairs.key, pairs.S).astype(np.int64)  # states[j]: pair (full[j], full[j+1])
        for i, f in enumerate(flags):
            if f and i < len(ids):
                good += bool(pairs.topo.matrix[states[i]][states[i + 1]])   # pair ending at ids[i-1] -> at ids[i]
                total += 1
    return good / total if total else float("nan")


__all__ = ["CONTEXT_INFO", "ContextKeyedLogitsProcessor", "context_config", "context_detect", "context_states",
           "legal_share", "pair_codes", "survival"]

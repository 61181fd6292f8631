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

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from chainmark.config import ChainMarkConfig
from chainmark.detection import detect
from chainmark.keys import hkdf
from chainmark.partition import as_token_array, key_bytes, states_of

#: The HKDF label that derives the pairs' key from the deployment's key.
_CONTEXT_INFO = b"chainmark/v1/context-keyed"
#: Token ids must fit 4 bytes: a pair is coded a * 2**32 + b.
_ID_BITS = 32
#: A stolen pair's state counts as known at this posterior (as for ChainMark's stolen map).
_MIN_CONFIDENCE = 0.9


def context_config(config: ChainMarkConfig) -> ChainMarkConfig:
    """The configuration that scores pair codes: ``config`` (S, rho, gate, topology) with the derived pairs' key.

    Example::

        pairs = context_config(ChainMarkConfig(key, S=5))
        detect(pair_codes(ids), pairs, test="exact")   # what context_detect does
    """
    if not isinstance(config, ChainMarkConfig):
        raise TypeError(f"config must be a ChainMarkConfig, got {type(config).__name__}")
    return ChainMarkConfig(hkdf(key_bytes(config.key), _CONTEXT_INFO), S=config.S, rho=config.rho,
                           gate=config.gate, topology=config.topology)


def pair_codes(token_ids: Any) -> np.ndarray:
    """The codes ``a * 2**32 + b`` of a text's adjacent pairs (n - 1 of them for n tokens), as int64."""
    ids = as_token_array(token_ids)
    if ids.size and int(ids.max()) >= 1 << _ID_BITS:
        raise ValueError(f"token_ids must lie below 2**{_ID_BITS} for pair codes, got {int(ids.max())}")
    ids = ids.astype(np.int64)
    return (ids[:-1] << _ID_BITS) | ids[1:]


def _context_states(token_ids: Any, config: ChainMarkConfig) -> np.ndarray:
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
        # states[j]: the state of the pair (full[j], full[j + 1])
        states = states_of(pair_codes(full), pairs.key, pairs.S).astype(np.int64)
        for i, f in enumerate(flags):
            if f and i < len(ids):
                good += bool(pairs.topo.matrix[states[i]][states[i + 1]])   # pair ending at ids[i-1] -> at ids[i]
                total += 1
    return good / total if total else float("nan")


# --------------------------------------------------------------------------- the stealing adversary against it


@dataclass(frozen=True)
class StolenPairMap:
    """What the stealing adversary learned about the variant: a believed state per pair code it saw (sorted
    ``codes``), up to a rotation, with its confidence and how often the pair occurred in the watermarked pool."""

    S: int
    codes: np.ndarray
    states: np.ndarray
    confidence: np.ndarray
    counts: np.ndarray
    tokens_observed: int

    def known(self, min_confidence: float = _MIN_CONFIDENCE) -> np.ndarray:
        """The believed state of every seen pair, -1 where the posterior is below ``min_confidence``."""
        return np.where(self.confidence >= min_confidence, self.states, -1)

    def n_known(self, min_confidence: float = _MIN_CONFIDENCE) -> int:
        """How many pairs have a confident state."""
        return int((self.known(min_confidence) >= 0).sum())

    def frequent(self, top: int) -> np.ndarray:
        """Indices (into ``codes``) of the ``top`` pairs most often seen in the watermarked pool."""
        order = np.argsort(-self.counts, kind="stable")
        return order[:min(top, int((self.counts > 0).sum()))]

    def agreement(self, config: ChainMarkConfig, index: np.ndarray) -> tuple[int, int]:
        """(right, total) over the pairs at ``index`` after the best rotation (needs the key: evaluation only)."""
        pairs = context_config(config)
        truth = states_of(self.codes[index], pairs.key, pairs.S).astype(np.int64)
        guess = self.states[index]
        best = max(int(((guess + r) % self.S == truth).sum()) for r in range(self.S)) if index.size else 0
        return best, int(index.size)


def steal_pairs(watermarked: Sequence[Sequence[int]], baseline: Sequence[Sequence[int]], S: int, rho: float,
                **options: Any) -> StolenPairMap:
    """The stealing attack of :func:`cmlab.comparison.stealing.steal` aimed at the variant: an adversary who
    knows the scheme (the regime says it is context-keyed) treats every pair as a token and learns the pairs'
    states from consecutive pairs (triples of tokens) in the watermarked replies against the baseline's.
    ``options`` go to :func:`~cmlab.comparison.stealing.steal`. Example::

        stolen = steal_pairs(replies_ids, baseline_ids, S=5, rho=0.5)
        stolen.n_known()
    """
    from cmlab.comparison.stealing import steal

    vocab, w, b = _compact(watermarked, baseline)
    stolen = steal(w, b, S, rho, int(vocab.size), **options)
    return StolenPairMap(int(S), vocab, stolen.states, stolen.confidence, stolen.token_counts,
                         int(sum(len(t) for t in watermarked)))


def _compact(watermarked: Sequence[Sequence[int]],
             baseline: Sequence[Sequence[int]]) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Every text as its pair codes renumbered 0..n-1 over the pairs of both piles (sorted ``vocab``)."""
    w = [pair_codes(t) for t in watermarked]
    b = [pair_codes(t) for t in baseline]
    every = [c for c in w + b if c.size]
    vocab = np.unique(np.concatenate(every)) if every else np.zeros(0, dtype=np.int64)
    if vocab.size < 3:
        raise ValueError("steal_pairs needs watermarked and baseline replies of at least two tokens")
    return vocab, [np.searchsorted(vocab, c) for c in w], [np.searchsorted(vocab, c) for c in b]


def replay_table(watermarked: Sequence[Sequence[int]], baseline: Sequence[Sequence[int]], S: int, rho: float,
                 min_evidence: float = 0.0) -> dict[int, np.ndarray]:
    """The replaying adversary's table: for every pair code (x, a) of the watermarked replies, the tokens b of the
    triples (x, a, b) that the replies hold more often than the baseline predicts (evidence above
    ``min_evidence``, :func:`~cmlab.comparison.stealing.bigram_evidence` on pair codes), best first. It fits no
    states: a triple the watermark wrote at a forced step is legal, so a triple over-represented in its replies
    probably is, whatever the states of the pairs elsewhere. Example::

        table = replay_table(replies_ids, baseline_ids, S=5, rho=0.5)
        table.get((x << 32) | a)     # the tokens to put after x, a
    """
    from cmlab.comparison.stealing import bigram_evidence

    vocab, w, b = _compact(watermarked, baseline)
    ev = bigram_evidence(w, b, S, rho, int(vocab.size))
    keep = ev.weight > float(min_evidence)
    first, nxt, weight = vocab[ev.first[keep]], vocab[ev.second[keep]] & ((1 << _ID_BITS) - 1), ev.weight[keep]
    order = np.lexsort((-weight, first))
    first, nxt = first[order], nxt[order]
    starts = np.flatnonzero(np.r_[True, first[1:] != first[:-1]]) if first.size else np.zeros(0, dtype=int)
    ends = np.r_[starts[1:], first.size]
    return {int(first[i]): nxt[i:j] for i, j in zip(starts, ends)}


def replay_edit(token_ids: Sequence[int], table: dict[int, np.ndarray], budget: float) -> list[int]:
    """The replaying editor: left to right, wherever the pair before position j is in ``table`` and token j is not
    among its replayed successors, put the best one there; at most ``budget`` (a share of the tokens) edits."""
    if not 0.0 <= float(budget) <= 1.0:
        raise ValueError(f"budget must lie in [0, 1], got {budget!r}")
    ids = [int(t) for t in as_token_array(token_ids).tolist()]
    edits = int(math.floor(float(budget) * len(ids)))
    for j in range(2, len(ids)):
        if edits <= 0:
            break
        after = table.get((ids[j - 2] << _ID_BITS) | ids[j - 1])
        if after is not None and ids[j] not in after:
            ids[j] = int(after[0])
            edits -= 1
    return ids


def forge_pairs(token_ids: Sequence[int], stolen: StolenPairMap, budget: float,
                min_confidence: float = _MIN_CONFIDENCE) -> list[int]:
    """The editor forger against the variant: left to right, wherever the pair before position j has a believed
    state s and the pair ending at j is not believed to follow it, replace token j by the most frequent token b
    whose pair (token j - 1, b) is believed to have state s + 1; at most ``budget`` (a share of the text's tokens)
    replacements. Edits chain: a replaced token's pair is known, so the next position can be walked on. Example::

        forged = forge_pairs(ids, steal_pairs(replies, baseline, 5, 0.5), budget=0.1)
    """
    if not 0.0 <= float(budget) <= 1.0:
        raise ValueError(f"budget must lie in [0, 1], got {budget!r}")
    ids = [int(t) for t in as_token_array(token_ids).tolist()]
    edits = int(math.floor(float(budget) * len(ids)))
    known, codes = stolen.known(min_confidence), stolen.codes
    sure = np.flatnonzero(known >= 0)
    # predecessor -> {believed state: the most frequent token b with a confident pair (a, b) of that state}
    best: dict[int, dict[int, int]] = {}
    for i in sure[np.argsort(-stolen.counts[sure], kind="stable")]:
        a, b = int(codes[i]) >> _ID_BITS, int(codes[i]) & ((1 << _ID_BITS) - 1)
        best.setdefault(a, {}).setdefault(int(known[i]), b)

    def believed(x: int, a: int) -> int:
        code = (x << _ID_BITS) | a
        at = int(np.searchsorted(codes, code))
        return int(known[at]) if at < codes.size and int(codes[at]) == code else -1

    for j in range(2, len(ids)):
        if edits <= 0:
            break
        s = believed(ids[j - 2], ids[j - 1])
        if s < 0 or believed(ids[j - 1], ids[j]) == (s + 1) % stolen.S:
            continue
        b = best.get(ids[j - 1], {}).get((s + 1) % stolen.S)
        if b is not None and b != ids[j]:
            ids[j] = b
            edits -= 1
    return ids


def _pair_forger_class() -> type:
    import torch
    from transformers import LogitsProcessor

    from chainmark.gate_signals import entropy_signals

    class _StolenPairProcessor(LogitsProcessor):
        def __init__(self, stolen: StolenPairMap, tau: float, min_confidence: float = _MIN_CONFIDENCE):
            self.S, self.tau, self.forced, self.steps = stolen.S, float(tau), 0, 0
            known = stolen.known(min_confidence)
            self._codes, self._known = stolen.codes, known
            sure = known >= 0
            first, second, state = stolen.codes[sure] >> _ID_BITS, stolen.codes[sure] & ((1 << _ID_BITS) - 1), \
                known[sure]
            order = np.argsort(first, kind="stable")
            first, second, state = first[order], second[order], state[order]
            starts = np.flatnonzero(np.r_[True, first[1:] != first[:-1]]) if first.size else np.zeros(0, int)
            ends = np.r_[starts[1:], first.size]
            #: predecessor a -> (the b of its confident pairs, their believed states)
            self._after = {int(first[i]): (second[i:j], state[i:j]) for i, j in zip(starts, ends)}

        def _believed(self, x: int, a: int) -> int:
            code = (x << _ID_BITS) | a
            at = int(np.searchsorted(self._codes, code))
            return int(self._known[at]) if at < self._codes.size and int(self._codes[at]) == code else -1

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            entropy = entropy_signals(scores.float()).entropy.tolist()
            ids = input_ids[:, -2:].tolist()
            self.steps += scores.shape[0]
            for r, h in enumerate(entropy):
                if h < self.tau or len(ids[r]) < 2:
                    continue
                x, a = ids[r]
                s, after = self._believed(x, a), self._after.get(a)
                if s < 0 or after is None:
                    continue
                legal = after[0][after[1] == (s + 1) % self.S]
                legal = legal[legal < scores.shape[1]]
                if not legal.size:
                    continue
                idx = torch.from_numpy(legal.astype(np.int64)).to(scores.device)
                best = int(torch.argmax(scores[r, idx]))
                token = int(legal[best])
                if not torch.isfinite(scores[r, token]):
                    continue
                scores[r] = -math.inf
                scores[r, token] = 0.0
                self.forced += 1
            return scores

    return _StolenPairProcessor


def _replay_class() -> type:
    import torch
    from transformers import LogitsProcessor

    from chainmark.gate_signals import entropy_signals

    class _ReplayProcessor(LogitsProcessor):
        def __init__(self, table: dict[int, np.ndarray], tau: float):
            self.table, self.tau, self.forced, self.steps = table, float(tau), 0, 0

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            entropy = entropy_signals(scores.float()).entropy.tolist()
            ids = input_ids[:, -2:].tolist()
            self.steps += scores.shape[0]
            for r, h in enumerate(entropy):
                if h < self.tau or len(ids[r]) < 2:
                    continue
                after = self.table.get((ids[r][0] << _ID_BITS) | ids[r][1])
                if after is None:
                    continue
                after = after[after < scores.shape[1]]
                idx = torch.from_numpy(after.astype(np.int64)).to(scores.device)
                token = int(after[int(torch.argmax(scores[r, idx]))]) if after.size else -1
                if token < 0 or not torch.isfinite(scores[r, token]):
                    continue
                scores[r] = -math.inf
                scores[r, token] = 0.0
                self.forced += 1
            return scores

    return _ReplayProcessor


def ReplayProcessor(table: dict[int, np.ndarray], tau: float) -> Any:
    """The replaying generator against the variant: at a step whose entropy is at least ``tau``, when the last two
    tokens' pair is in :func:`replay_table`'s ``table``, force the likeliest of the tokens replayed after it;
    elsewhere the open model samples. No key, no fitted states. ``forced`` counts forced steps. Example::

        proc = ReplayProcessor(replay_table(replies, baseline, 5, 0.5), tau=gate.tau)
    """
    return _replay_class()(table, tau)


def StolenPairProcessor(stolen: StolenPairMap, tau: float, min_confidence: float = _MIN_CONFIDENCE) -> Any:
    """The generator forger against the variant: at a step whose entropy is at least ``tau``, when the pair of the
    last two tokens has a confident believed state s, force the likeliest token b whose pair (last token, b) is
    believed to have state s + 1; elsewhere the open model samples. No key. ``forced`` counts forced steps.
    Example::

        proc = StolenPairProcessor(steal_pairs(replies, baseline, 5, 0.5), tau=gate.tau)
        chainmark.embed.generate(model, tok, prompts, extra_processors=[proc])
    """
    return _pair_forger_class()(stolen, tau, min_confidence)


__all__ = ["ContextKeyedLogitsProcessor", "ReplayProcessor", "StolenPairMap", "StolenPairProcessor", "context_config",
           "context_detect", "forge_pairs", "legal_share", "pair_codes", "replay_edit", "replay_table", "steal_pairs",
           "survival"]

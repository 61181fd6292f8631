"""Stealing the key from its outputs: an adversary without the key who learns the states from watermarked replies.

The paper's security argument covers an adversary who sees one text. A deployed model's replies are public,
and each leaks pairs of states: at a forced position the pair (previous token, forced token) is a legal
transition, so legal pairs are over-represented in watermarked replies against the open model's own
unwatermarked replies to the same prompts. This module follows the published recipe of watermark stealing
(Jovanović, Staab and Vechev, ICML 2024: bigram frequencies of watermarked output against a base model's),
adapted to ChainMark's one state per token:

1. :func:`bigram_evidence`: for every observed pair (a, b), the log-likelihood ratio that b's state follows
   a's (a Poisson model of the pair's count in the watermarked replies, its rate read from the baseline);
2. :func:`steal`: a spectral start (the states as phases e^{2 pi i s / S}, the top eigenvector of the
   Hermitian matrix of the evidence, as in angular synchronisation) refined by mean-field iterations of the
   Potts model the evidence defines; a state per token, up to a rotation of the cycle, and a confidence;
3. the forgers and the scrubber, all without the key: :func:`forge_path` edits a text toward believed-legal
   pairs (the editor), :func:`scrub_path` away from them, and :class:`StolenMapProcessor` lets the open model
   generate with the stolen map in place of the key (the generator: the forged text is the model's own).

The attacker knows what a published regime says (S, rho, the topology); it never sees the key. Measuring
what it achieves needs the key, which only the evaluation uses (:func:`edits_to_flip`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from chainmark.checks import check_int, check_num_states, check_rho
from chainmark.config import ChainMarkConfig
from cmlab.comparison.attacks import ATTACK_SEED, SeedLike, check_vocab_size

#: A stolen state counts as known when the mean-field posterior puts at least this much on it.
_MIN_CONFIDENCE = 0.9
#: The evidence of one pair is clipped to this range before the states are fitted: the Poisson model is only
#: roughly right (the watermark forces the likeliest legal token, it does not renormalise), and unclipped, the
#: few very frequent pairs of the language dominate the fit (on the reference run the top-500 tokens' states
#: came out right for 34% of them unclipped, 96% clipped, from 70,000 tokens).
EVIDENCE_CLIP = (-3.0, 6.0)


def _pair_codes(texts: Sequence[Sequence[int]], vocab_size: int) -> np.ndarray:
    """Every adjacent pair of every text as one int64 code a * V + b (self-pairs kept)."""
    parts = []
    for t in texts:
        ids = np.asarray(t, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise ValueError(f"token ids must lie in [0, {vocab_size - 1}] (vocab_size = {vocab_size})")
        if ids.size >= 2:
            parts.append(ids[:-1] * vocab_size + ids[1:])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class BigramEvidence:
    """Observed pairs and the log-likelihood ratio ``weight`` that each is a legal transition."""

    first: np.ndarray
    second: np.ndarray
    weight: np.ndarray
    watermarked_count: np.ndarray
    tokens_observed: int
    token_counts: np.ndarray  # occurrences of every vocabulary id in the watermarked replies


def bigram_evidence(watermarked: Sequence[Sequence[int]], baseline: Sequence[Sequence[int]], S: int, rho: float,
                    vocab_size: int, smoothing: float = 0.1) -> BigramEvidence:
    """The evidence each observed pair gives that its second token's state follows its first's.

    A pair's count in the watermarked replies is modelled as Poisson with the rate the baseline predicts (its
    baseline count, plus ``smoothing``, scaled to the watermarked replies' size), times ``g1`` if the pair is
    legal and ``g0`` if not. At a share rho of positions the watermark keeps only the legal tokens
    (probability mass renormalised onto about 1/S of the vocabulary: x S) and removes the illegal ones, so
    ``g1 = 1 - rho + rho S`` and ``g0 = 1 - rho``; the log-likelihood ratio of legal against illegal is
    ``c log(g1 / g0) - lambda (g1 - g0)``. Pairs seen only in the baseline are left out: their evidence is
    weak and negative. Self-pairs (a, a) are never legal on a cycle and carry no information on a state.
    """
    S, rho, vocab_size = check_num_states(S), check_rho(rho), check_vocab_size(vocab_size)
    if rho >= 1.0:
        raise ValueError("rho must be below 1: with every position forced the baseline's rates say nothing")
    w_codes, w_counts = np.unique(_pair_codes(watermarked, vocab_size), return_counts=True)
    b_codes, b_counts = np.unique(_pair_codes(baseline, vocab_size), return_counts=True)
    n_w, n_b = max(int(w_counts.sum()), 1), max(int(b_counts.sum()), 1)
    at = np.searchsorted(b_codes, w_codes)
    hit = (at < b_codes.size) & (b_codes[np.minimum(at, max(b_codes.size - 1, 0))] == w_codes) if b_codes.size else \
        np.zeros(w_codes.size, dtype=bool)
    base = np.where(hit, b_counts[np.minimum(at, max(b_codes.size - 1, 0))] if b_codes.size else 0, 0)
    lam = (base + smoothing) * n_w / n_b
    g1, g0 = 1.0 - rho + rho * S, 1.0 - rho
    weight = w_counts * math.log(g1 / g0) - lam * (g1 - g0)
    first, second = w_codes // vocab_size, w_codes % vocab_size
    keep = first != second
    tokens = np.bincount(np.concatenate([np.asarray(t, dtype=np.int64) for t in watermarked])
                         if len(watermarked) else np.zeros(0, dtype=np.int64), minlength=vocab_size)
    return BigramEvidence(first[keep], second[keep], weight[keep], w_counts[keep], int(tokens.sum()), tokens)


@dataclass(frozen=True)
class StolenMap:
    """What the adversary learned: a state per vocabulary id (-1: never seen), its confidence, up to rotation."""

    S: int
    states: np.ndarray
    confidence: np.ndarray
    tokens_observed: int
    token_counts: np.ndarray

    def known(self, min_confidence: float = _MIN_CONFIDENCE) -> np.ndarray:
        """The believed state of every id, -1 where the posterior is below ``min_confidence``."""
        return np.where(self.confidence >= min_confidence, self.states, -1)

    def n_known(self, min_confidence: float = _MIN_CONFIDENCE) -> int:
        """How many vocabulary ids have a confident state."""
        return int((self.known(min_confidence) >= 0).sum())

    def agreement(self, true_states: np.ndarray, tokens: Any) -> tuple[int, int]:
        """(right, total) over ``tokens`` after the best rotation: a stolen map is only defined up to one."""
        tokens = np.asarray(tokens, dtype=np.int64)
        guess, truth = self.states[tokens], np.asarray(true_states)[tokens]
        seen = guess >= 0
        best = max(int(((guess[seen] + r) % self.S == truth[seen]).sum()) for r in range(self.S))
        return best, int(tokens.size)

    def frequent_tokens(self, top: int) -> np.ndarray:
        """The ``top`` ids most often seen in the watermarked replies (what forgery and scrubbing meet most)."""
        order = np.argsort(-self.token_counts, kind="stable")
        return order[:min(top, int((self.token_counts > 0).sum()))]


def _spectral_states(first: np.ndarray, second: np.ndarray, weight: np.ndarray, n: int, S: int,
                     seed: SeedLike) -> np.ndarray:
    """Phases of the top eigenvector of H, with H[b, a] = w e^{2 pi i / S} (and its conjugate at [a, b])."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.linalg import eigsh

    omega = np.exp(2j * np.pi / S)
    rows = np.concatenate([second, first])
    cols = np.concatenate([first, second])
    vals = np.concatenate([weight * omega, weight * np.conj(omega)])
    H = coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
    if n < 3:
        return np.zeros(n)
    rng = np.random.default_rng(seed)
    v0 = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    try:
        _, vec = eigsh(H, k=1, which="LA", v0=v0, maxiter=20 * n, tol=1e-6)
        return np.angle(vec[:, 0])
    except Exception:  # noqa: BLE001 - no convergence on a degenerate graph: start from random phases
        return rng.uniform(-np.pi, np.pi, n)


def _mean_field(A: Any, At: Any, start: np.ndarray, S: int, iterations: int) -> np.ndarray:
    """Mean-field posteriors of the Potts model sum_ab A[a, b] [s_b = s_a + 1], from a hard start (damped).

    Deterministic annealing: the evidence is scaled by a factor rising from 0.05 to 1 over the first half of
    the iterations, so that regions fitted with different rotations can merge before they freeze (at full
    strength from the start, the fit on the reference run's 70,000 tokens was worse than on 20,000).
    """
    n = start.size
    q = np.full((n, S), 0.5 / (S - 1))
    q[np.arange(n), start] = 0.5
    for t in range(iterations):
        beta = min(1.0, 0.05 * (1.0 / 0.05) ** (t / max(1, iterations // 2)))
        # field on b from its predecessors a (s_b = s_a + 1) and on a from its successors b (s_a = s_b - 1)
        field = beta * (At @ np.roll(q, 1, axis=1) + A @ np.roll(q, -1, axis=1))
        field -= field.max(axis=1, keepdims=True)
        new = np.exp(field)
        new /= new.sum(axis=1, keepdims=True)
        q = 0.5 * q + 0.5 * new
    return q


def steal(watermarked: Sequence[Sequence[int]], baseline: Sequence[Sequence[int]], S: int, rho: float,
          vocab_size: int, iterations: int = 60, restarts: int = 4, seed: SeedLike = ATTACK_SEED) -> StolenMap:
    """Learn every seen token's state from watermarked replies and the open model's unwatermarked ones.

    ``watermarked``: the replies the adversary collected from the deployed model (token ids);
    ``baseline``: the open model's own replies to the same kind of prompts, unwatermarked (the adversary
    generates them at no cost). ``S`` and ``rho`` are what the published regime states. Returns a
    :class:`StolenMap`, whose states equal the key's up to one rotation on each connected part of the
    pair graph. Example::

        stolen = steal(replies_ids, baseline_ids, S=5, rho=0.5, vocab_size=49152)
        stolen.n_known()   # tokens with a confident state
    """
    S = check_num_states(S)
    iterations = check_int(iterations, "iterations", 0)
    restarts = check_int(restarts, "restarts", 0)
    ev = bigram_evidence(watermarked, baseline, S, rho, vocab_size)
    vocab_size = int(vocab_size)
    states = np.full(vocab_size, -1, dtype=np.int64)
    confidence = np.zeros(vocab_size)
    seen = np.unique(np.concatenate([ev.first, ev.second]))
    if seen.size == 0:
        return StolenMap(S, states, confidence, ev.tokens_observed, ev.token_counts)
    from scipy.sparse import coo_matrix

    a, b = np.searchsorted(seen, ev.first), np.searchsorted(seen, ev.second)
    n, weight = seen.size, np.clip(ev.weight, *EVIDENCE_CLIP)
    A = coo_matrix((weight, (a, b)), shape=(n, n)).tocsr()   # A[a, b]: evidence that s_b = s_a + 1
    At = A.T.tocsr()
    rng = np.random.default_rng(seed)
    starts = [np.rint(_spectral_states(a, b, weight, n, S, rng) / (2 * np.pi / S)).astype(np.int64) % S]
    starts += [rng.integers(0, S, size=n) for _ in range(restarts)]
    best_q, best_fit = None, -math.inf
    for start in starts:
        q = _mean_field(A, At, start, S, iterations)
        hard = q.argmax(axis=1)
        fit = float(weight[(hard[b] - hard[a]) % S == 1].sum())   # the evidence the assignment explains
        if fit > best_fit:
            best_q, best_fit = q, fit
    q = best_q
    states[seen] = q.argmax(axis=1)
    confidence[seen] = q.max(axis=1)
    return StolenMap(S, states, confidence, ev.tokens_observed, ev.token_counts)


# --------------------------------------------------------------------------- the editor and the scrubber


def _candidates(stolen: StolenMap, min_confidence: float, per_state: int) -> list[np.ndarray]:
    """Per believed state, its ``per_state`` most frequent confident tokens (the editor's replacements)."""
    known = stolen.known(min_confidence)
    order = np.argsort(-stolen.token_counts, kind="stable")
    out = []
    for s in range(stolen.S):
        members = order[known[order] == s]
        out.append(members[:per_state])
    return out


def _edit_path(token_ids: Sequence[int], stolen: StolenMap, want_legal: bool, min_confidence: float,
               per_state: int, seed: SeedLike) -> list[tuple[int, int]]:
    """Edits (position, new id) in the order a greedy editor makes them, the best gain per edit first.

    A token with no confident state is unknown: a transition touching one is believed legal with probability
    1/S. The gain of giving position j a token of believed state s is the change in the believed-legal
    transitions (j-1, j) and (j, j+1) (believed-illegal ones for the scrubber). The forger also weighs two
    adjacent edits together (states s and s+1 at j and j+1): between unknown tokens no single edit gains, but a
    run of known tokens does. Within a state the editor takes its least used candidate (most frequent first):
    the exact test scores a spanning forest, where a repeated token's pairs can close a cycle and count for
    nothing. Ties are broken at random (``seed``), so that edits spread over the text.
    """
    S = stolen.S
    known = stolen.known(min_confidence)
    ids = np.asarray(token_ids, dtype=np.int64).copy()
    n = ids.size
    pool = [p.tolist() for p in _candidates(stolen, min_confidence, per_state)]
    if n < 2 or not any(pool):
        return []
    states = [s for s in range(S) if pool[s]]
    believed = known[ids].copy()
    rng = np.random.default_rng(seed)
    jitter = rng.uniform(0, 1e-3, size=n)
    uses: dict[int, int] = {}
    for t in ids.tolist():
        uses[t] = uses.get(t, 0) + 1
    sign = 1.0 if want_legal else -1.0

    def legal(sx: int, sy: int) -> float:  # believed probability that a token of state sx -> one of sy is legal
        if sx < 0 or sy < 0:
            return 1.0 / S
        return 1.0 if (sy - sx) % S == 1 else 0.0

    def around(j: int, s: int, right: int | None = None) -> float:
        left = legal(int(believed[j - 1]), s) if j > 0 else 0.0
        nxt = int(believed[j + 1]) if right is None and j + 1 < n else right
        return left + (legal(s, nxt) if j + 1 < n and nxt is not None else 0.0)

    def single(j: int) -> tuple[float, tuple[tuple[int, int], ...]]:
        now = around(j, int(believed[j]))
        g, s = max(((sign * (around(j, s) - now), s) for s in states), default=(0.0, -1))
        return g, ((j, s),)

    def double(j: int) -> tuple[float, tuple[tuple[int, int], ...]]:
        if not want_legal or j + 1 >= n:
            return -math.inf, ()
        now = around(j, int(believed[j])) + around(j + 1, int(believed[j + 1])) - legal(int(believed[j]),
                                                                                         int(believed[j + 1]))
        best = (-math.inf, ())
        for s in states:
            t = (s + 1) % S
            if t not in states:
                continue
            after = (legal(int(believed[j - 1]), s) if j > 0 else 0.0) + 1.0 + \
                (legal(t, int(believed[j + 2])) if j + 2 < n else 0.0)
            best = max(best, ((after - now) / 2, ((j, s), (j + 1, t))))
        return best

    def option(j: int) -> tuple[float, tuple[tuple[int, int], ...]]:
        one, two = single(j), double(j)
        pick = two if two[0] > one[0] + 1e-9 else one
        return pick[0] + jitter[j], pick[1]

    edited = np.zeros(n, dtype=bool)
    options = [option(j) for j in range(n)]
    path: list[tuple[int, int]] = []
    while True:
        live = [j for j in range(n) if not edited[j] and all(not edited[k] for k, _ in options[j][1])]
        j = max(live, key=lambda j: options[j][0], default=None)
        if j is None or options[j][0] <= 0.01:
            break
        for k, s in options[j][1]:
            tok = min(pool[s], key=lambda c: uses.get(c, 0))   # least used; the most frequent among ties
            uses[int(ids[k])] -= 1
            ids[k], believed[k] = tok, s
            uses[tok] = uses.get(tok, 0) + 1
            edited[k] = True
            path.append((k, tok))
        for k in range(max(0, j - 2), min(n, j + 3)):
            if not edited[k]:
                options[k] = option(k)
    return path


def forge_path(token_ids: Sequence[int], stolen: StolenMap, min_confidence: float = _MIN_CONFIDENCE,
               per_state: int = 20, seed: SeedLike = ATTACK_SEED) -> list[tuple[int, int]]:
    """The editor forger's edits to ``token_ids`` (any text), best first: each makes believed-legal pairs.

    Apply a prefix with :func:`apply_path`; the editor never sees the key, so it cannot tell when it has
    done enough: a budget of edits (a share of the tokens) is what it spends. Example::

        path = forge_path(human_ids, stolen)
        forged = apply_path(human_ids, path, budget=0.1)
    """
    return _edit_path(token_ids, stolen, True, min_confidence, per_state, seed)


def scrub_path(token_ids: Sequence[int], stolen: StolenMap, min_confidence: float = _MIN_CONFIDENCE,
               per_state: int = 20, seed: SeedLike = ATTACK_SEED) -> list[tuple[int, int]]:
    """The scrubber's edits to a watermarked text, best first: each breaks believed-legal pairs."""
    return _edit_path(token_ids, stolen, False, min_confidence, per_state, seed)


def apply_path(token_ids: Sequence[int], path: Sequence[tuple[int, int]], budget: float | None = None,
               edits: int | None = None) -> list[int]:
    """``token_ids`` after the first edits of ``path``: ``edits`` of them, or ceil(``budget`` x length)."""
    ids = list(int(t) for t in token_ids)
    if edits is None:
        edits = len(path) if budget is None else int(math.ceil(round(float(budget) * len(ids), 9)))
    for j, tok in path[:max(0, int(edits))]:
        ids[j] = tok
    return ids


def edits_to_flip(token_ids: Sequence[int], path: Sequence[tuple[int, int]], config: ChainMarkConfig,
                  alpha: float = 0.01, test: str = "exact", want_flagged: bool = True,
                  vocab_size: int | None = None) -> int | None:
    """The fewest edits of ``path`` after which the detector (the key holder's: ``config``) flags the text
    (``want_flagged``) or stops flagging it; None if the whole path does not get there. Evaluation only."""
    from chainmark.detection import detect

    ids = [int(t) for t in token_ids]
    for m in range(len(path) + 1):
        if m:
            j, tok = path[m - 1]
            ids[j] = tok
        if bool(detect(ids, config, alpha, vocab_size=vocab_size, test=test).is_watermarked) == want_flagged:
            return m
    return None


# --------------------------------------------------------------------------- the generator forger


def _stolen_successors(stolen: StolenMap, vocab_size: int, min_confidence: float = _MIN_CONFIDENCE) -> list[np.ndarray]:
    """For every believed state s, the confident ids whose state follows s (the generator's allowed tokens)."""
    known = stolen.known(min_confidence)[:vocab_size]
    return [np.flatnonzero(known == (s + 1) % stolen.S) for s in range(stolen.S)]


def _processor_class() -> type:
    from transformers import LogitsProcessor

    class _StolenMapProcessor(LogitsProcessor):
        def __init__(self, stolen: StolenMap, tau: float, vocab_size: int, min_confidence: float = _MIN_CONFIDENCE):
            import torch

            self.S, self.tau = stolen.S, float(tau)
            known = np.full(vocab_size, -1, dtype=np.int64)
            width = min(vocab_size, stolen.states.size)
            known[:width] = stolen.known(min_confidence)[:width]
            self._known = torch.from_numpy(known)
            self._allowed = [torch.from_numpy(a) for a in _stolen_successors(stolen, vocab_size, min_confidence)]
            self.forced = 0
            self.steps = 0

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            import torch

            from chainmark.gate_signals import entropy_signals

            entropy = entropy_signals(scores).entropy
            last = self._known[input_ids[:, -1].cpu()]
            self.steps += scores.shape[0]
            for row in range(scores.shape[0]):
                s = int(last[row])
                if s < 0 or float(entropy[row]) < self.tau or self._allowed[s].numel() == 0:
                    continue
                allowed = self._allowed[s].to(scores.device)
                pick = allowed[int(torch.argmax(scores[row, allowed]))]
                if not torch.isfinite(scores[row, pick]):
                    continue
                scores[row] = -math.inf
                scores[row, pick] = 0.0
                self.forced += 1
            return scores

    return _StolenMapProcessor


def StolenMapProcessor(stolen: StolenMap, tau: float, vocab_size: int,
                       min_confidence: float = _MIN_CONFIDENCE) -> Any:
    """A ``transformers`` LogitsProcessor that forges with a stolen map: at a step whose entropy is at least
    ``tau`` (the published gate's threshold, or one the adversary calibrates on its own pilot) and whose last
    token has a confident state, it forces the likeliest confident token believed to follow it; elsewhere the
    model samples as usual. No key is involved; the text is the open model's own. ``forced`` counts the
    forced steps. Example::

        proc = StolenMapProcessor(stolen, tau=gate.tau, vocab_size=cm.logits_width(model))
        model.generate(**inputs, logits_processor=LogitsProcessorList([proc]), do_sample=True)
    """
    return _processor_class()(stolen, tau, vocab_size, min_confidence)


__all__ = ["BigramEvidence", "StolenMap", "StolenMapProcessor", "apply_path", "bigram_evidence",
           "edits_to_flip", "forge_path", "scrub_path", "steal"]

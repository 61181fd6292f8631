"""The adversaries of the robustness chapter: the theorem's oracle-blind one (its predicted z ratio and its
Monte Carlo on state walks) and one who knows the key (:func:`keyed_scrub`, :func:`keyed_forge`,
:func:`random_walk_text`), which shows why the key must stay secret.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from chainmark.config import ChainMarkConfig, takes_config
from chainmark.partition import as_token_array, state_table
from chainmark.checks import check_int, check_num_states
from chainmark.topology import TopologyLike, resolve_topology
from cmlab.comparison.attacks import ATTACK_SEED, SeedLike, check_delta, check_vocab_size, n_edits

# --------------------------------------------------------------------------- the oracle-blind adversary, predicted


def _walk_excess(d: int, rho: float, S: int) -> float:
    """E[X] - p0 for two tokens d steps apart on a clockwork walk of strength rho.

    Each step moves +1 with probability p0 + rho(1 - p0) and to any other
    offset uniformly otherwise; the Fourier coefficients of that step law are
    rho * omega^k, so the d-step offset is 1 (mod S) with probability
    1/S + rho^d (S [d = 1 mod S] - 1) / S.
    """
    return rho ** d * (S * (d % S == 1) - 1) / S


def predicted_z_ratio(kind: str, delta: float, n: int | None = None,
                      rho: float | None = None, S: int | None = None) -> float:
    """Expected z_post / z_pre of an oracle-blind random attack at rate ``delta``.

    Every watermark pair that survives intact keeps its excess over p0; every
    pair touching a new token is legal with probability p0 only. With the
    null standard deviation over the *post-attack* number of pairs:

    * substitution: intact share (1-delta)^2, same length -> (1-delta)^2;
    * deletion: intact share (1-delta)^2 over (1-delta) n pairs -> (1-delta)^1.5;
    * insertion: a pair stays adjacent with probability 1/(1+delta), over
      (1+delta) n pairs -> (1+delta)^-1.5.

    With ``n`` the exact finite-n values for ceil(delta n) edits are returned
    (substitution: (n-m)(n-m-1) / (n(n-1)) instead of (1-delta)^2). For
    deletion, giving also the walk strength ``rho`` = (phi - p0) / (1 - p0)
    and ``S`` (clockwork) adds the second-order effect of the pairs that a
    deletion joins: tokens two or more steps apart on the walk are legal
    slightly *less* often than p0.
    """
    delta = check_delta(delta)
    if kind not in ("substitution", "deletion", "insertion"):
        raise ValueError(f"kind must be 'substitution', 'deletion' or 'insertion', got {kind!r}")
    if n is None:
        return {"substitution": (1 - delta) ** 2, "deletion": (1 - delta) ** 1.5,
                "insertion": (1 + delta) ** -1.5}[kind]
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 3:
        raise ValueError(f"n must be an integer >= 3, got {n}")
    n = int(n)
    m = n_edits(delta, n)
    if kind == "substitution":
        return (n - m) * (n - m - 1) / (n * (n - 1))
    if kind == "insertion":
        intact = n / (n + m)
        return intact * (n - 1) / (n + m - 1) * math.sqrt((n + m - 1) / (n - 1))
    if n - m < 2:
        return 0.0
    total = math.comb(n, m)

    def expected_pairs(d: int) -> float:  # kept pairs d apart with the d-1 between them deleted
        return (n - d) * math.comb(n - d - 1, m - d + 1) / total

    if rho is None or S is None:
        excess = expected_pairs(1)
    else:
        S = check_num_states(S)
        if not 0.0 <= float(rho) <= 1.0:
            raise ValueError(f"rho must lie in [0, 1], got {rho}")
        if rho == 0:
            return 0.0
        base = _walk_excess(1, rho, S)
        excess = sum(expected_pairs(d) * _walk_excess(d, rho, S) / base for d in range(1, m + 2))
    return excess / (n - m - 1) * math.sqrt((n - m - 1) / (n - 1))


# --------------------------------------------------------------------------- the theorem's Monte Carlo


def simulate_walks(trials: int, n: int, S: int, rho: float, seed: SeedLike = ATTACK_SEED,
                   topology: TopologyLike = "clockwork") -> np.ndarray:
    """``trials`` state walks of length ``n`` under the robustness theorem's model.

    A walk starts at a uniform state; every later step is, with probability
    ``rho``, forced to a legal successor of the previous state (uniform among
    the k successors of a k-regular topology) and is otherwise a uniform
    state. Per step the draws are: the forcing coins, then (k > 1 only) the
    successor picks, then the free states. ``seed`` is an int, a
    ``SeedSequence`` or a ``Generator``; a ``Generator`` is drawn from in
    place, so that one generator passed to several calls (and to
    :func:`blind_substitution`) gives one reproducible Monte Carlo. Returns an
    int64 array of shape (trials, n).
    """
    trials = check_int(trials, "trials", 1)
    n = check_int(n, "n", 1)
    rho = check_delta(rho, "rho")
    topo = resolve_topology(topology, check_num_states(S))
    if topo.k is None:
        raise ValueError("simulate_walks needs a k-regular topology (every state with k successors)")
    succ = np.array([topo.successors(s) for s in range(topo.S)], dtype=np.int64)  # shape (S, k)
    rng = np.random.default_rng(seed)
    states = np.empty((trials, n), dtype=np.int64)
    states[:, 0] = rng.integers(0, topo.S, trials)
    for i in range(1, n):
        forced = rng.random(trials) < rho
        pick = rng.integers(0, topo.k, trials) if topo.k > 1 else 0
        states[:, i] = np.where(forced, succ[states[:, i - 1], pick], rng.integers(0, topo.S, trials))
    return states


def blind_substitution(states: Any, delta: float, S: int, seed: SeedLike = ATTACK_SEED) -> np.ndarray:
    """The theorem's oracle-blind adversary on state walks: a coin per position.

    Each position independently becomes, with probability ``delta``, a fresh
    uniform state in ``[0, S)`` (unlike
    :class:`~cmlab.comparison.attacks.Substitution`, which edits exactly
    ceil(delta n) token ids). ``states`` is an integer array of any
    shape (e.g. :func:`simulate_walks`'s); ``seed`` as there. Draws: one coin
    per position, then one uniform state per position.
    """
    delta = check_delta(delta)
    S = check_num_states(S)
    states = np.asarray(states)
    if not np.issubdtype(states.dtype, np.integer):
        raise TypeError(f"states must be an integer array, got dtype {states.dtype}")
    rng = np.random.default_rng(seed)
    hit = rng.random(states.shape) < delta
    return np.where(hit, rng.integers(0, S, states.shape), states)


# --------------------------------------------------------------------------- informed adversary


def _valid_rows(config: ChainMarkConfig, vocab_size: int):
    return config.topo, state_table(config.key, vocab_size, config.S)


def _informed_edit(token_ids: Sequence[int], config: ChainMarkConfig, vocab_size: int, want_valid: bool,
                   target_z: float | None, candidates: Any, seed: SeedLike) -> list[int]:
    from chainmark.detection import detect

    vocab_size = check_vocab_size(vocab_size)
    topo, table = _valid_rows(config, vocab_size)
    ids = as_token_array(token_ids, vocab_size).copy()  # an id >= vocab_size has no state: ValueError
    n = ids.size
    if n < 2:
        return ids.tolist()
    rng = np.random.default_rng(seed)
    M = topo.matrix

    def good(a: int, b: int) -> bool:  # is the transition what the attacker wants?
        return bool(M[table[a], table[b]]) == want_valid

    def done() -> bool:
        if target_z is None:
            return False
        z = detect(ids.tolist(), config, test="z").z
        return z < target_z if not want_valid else z > target_z

    # Visit the transitions in a random order so that the edits spread over the
    # text. Sweep 0 only edits a token whose *both* transitions are wrong for
    # the attacker (one edit fixes two), sweep 1 any token; in sweeps 0-1 no
    # edit sits next to another (so candidates read from the original context
    # stay plausible), sweep 2 lifts that rule.
    order = rng.permutation(n - 1)
    edited = np.zeros(n, dtype=bool)
    for sweep in (0, 1, 2):
        for i in order:
            j = i + 1  # the token we may replace; it sits in transitions (i, j) and (j, j + 1)
            if good(ids[i], ids[j]):
                continue
            next_was_good = j + 1 < n and good(ids[j], ids[j + 1])
            if sweep == 0 and (j + 1 >= n or next_was_good):
                continue
            if sweep < 2 and (edited[i] or (j + 1 < n and edited[j + 1])):
                continue
            if done():
                return ids.tolist()
            pool = candidates(j) if callable(candidates) else rng.integers(0, len(table), size=256)
            best = None
            for c in pool:  # candidates are tried in order (most fluent first)
                c = int(c)
                if not 0 <= c < vocab_size:
                    raise ValueError(f"candidates({j}) returned token id {c}, outside the vocabulary "
                                     f"[0, {vocab_size - 1}] of vocab_size = {vocab_size}")
                if c == ids[j] or not good(ids[i], c):
                    continue
                if j + 1 >= n or good(c, ids[j + 1]):  # fixes both transitions
                    best = c
                    break
                if best is None and not next_was_good and sweep > 0:  # fixes one, spoils none
                    best = c
            if best is not None:
                ids[j] = best
                edited[j] = True
    return ids.tolist()


@takes_config()
def keyed_scrub(token_ids: Sequence[int], config: ChainMarkConfig, vocab_size: int, target_z: float | None = None,
                candidates: Callable[[int], Sequence[int]] | None = None,
                seed: SeedLike = ATTACK_SEED) -> list[int]:
    """What an adversary WITH the key (``config``: its key, S and topology) can do: break legal transitions on purpose.

    Visiting the transitions in a random order (edits spread out, none next
    to another while that is possible, tokens sitting in two legal
    transitions first), whenever a transition is legal its second token is
    replaced by the first candidate that makes it illegal (and the following
    transition too if possible, never spoiling it). ``candidates(j)`` lists replacement ids for
    position j, best first (e.g. the model's top-k, so the text stays fluent);
    by default random tokens are tried. Stops once z < ``target_z`` if given.
    This is a demonstration of why the key must stay secret, not a tool.
    Every id in ``token_ids`` and every candidate must lie in
    ``[0, vocab_size)`` (the key's state table covers exactly those ids);
    one outside is a ``ValueError`` naming the id and ``vocab_size``.
    """
    return _informed_edit(token_ids, config, vocab_size, False, target_z, candidates, seed)


@takes_config()
def keyed_forge(token_ids: Sequence[int], config: ChainMarkConfig, vocab_size: int, target_z: float | None = None,
                candidates: Callable[[int], Sequence[int]] | None = None,
                seed: SeedLike = ATTACK_SEED) -> list[int]:
    """The mirror image of :func:`keyed_scrub`: make illegal transitions legal.

    Turns any text (a human's, another model's) into one the detector flags,
    i.e. a false attribution; stops once z > ``target_z`` if given.
    """
    return _informed_edit(token_ids, config, vocab_size, True, target_z, candidates, seed)


@takes_config()
def random_walk_text(n: int, config: ChainMarkConfig, vocab_size: int, seed: SeedLike = ATTACK_SEED) -> list[int]:
    """n random tokens that walk the cycle perfectly: a forgery from nothing but the key (``config``: its key, S
    and topology).

    ``n`` is the number of tokens, an integer >= 1 (one token has no
    transition yet; every further token makes one legal transition).
    """
    n = check_int(n, "n", 1)
    topo, table = _valid_rows(config, check_vocab_size(vocab_size))
    rng = np.random.default_rng(seed)
    by_state = [np.flatnonzero(table == s) for s in range(topo.S)]
    out = [int(rng.integers(0, vocab_size))]
    for _ in range(n - 1):
        s = int(rng.choice(topo.successors(int(table[out[-1]]))))
        out.append(int(rng.choice(by_state[s])))
    return out


__all__ = ["blind_substitution", "keyed_forge", "keyed_scrub", "predicted_z_ratio", "random_walk_text",
           "simulate_walks"]

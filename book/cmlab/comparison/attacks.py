"""The attack interface and the token-level edit attacks, with the per-record seeding every stored record depends on.

:class:`Attack` is the one interface of every attack (``apply_ids``, ``apply_text``); :class:`Substitution`
(the paper's protocol, seed :data:`ATTACK_SEED`), :class:`Deletion` and :class:`Insertion` edit token ids at
rate ``delta``, and :func:`edit_fraction` measures what an attack really changed (delta_eff).
"""
from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from chainmark.partition import as_token_array
from chainmark.checks import check_int

#: An int, a ``np.random.SeedSequence`` or a ``np.random.Generator``.
SeedLike = Any

#: The substitution attack's seed in the paper's protocol.
ATTACK_SEED = 43


# --------------------------------------------------------------------------- checks


def check_delta(delta: object, name: str = "delta") -> float:
    """An edit rate must be a number in [0, 1]."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number in [0, 1], got {type(delta).__name__}")
    if not 0.0 <= float(delta) <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {delta}")
    return float(delta)


def check_vocab_size(vocab_size: object) -> int:
    """A vocabulary size must be a positive integer."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size must be a positive integer, got {type(vocab_size).__name__}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive integer, got {vocab_size}")
    return int(vocab_size)


def n_edits(delta: float, n: int) -> int:
    """Number of edits at rate ``delta`` on ``n`` tokens: ceil(delta * n).

    The product is rounded to 9 decimals first, so that float noise such as
    0.07 * 100 = 7.000000000000001 does not add a spurious edit. ``n`` is a
    token count: an integer >= 0.
    """
    delta = check_delta(delta)
    n = check_int(n, "n", 0)
    return int(math.ceil(round(delta * n, 9)))


def _spawn(seed: SeedLike, count: int) -> list[np.random.Generator]:
    """``count`` independent, reproducible random streams derived from one seed.

    A runner that attacks many texts gives text i the i-th stream, so texts of
    equal length do not all get the same edit positions.
    """
    if isinstance(seed, np.random.Generator):
        return seed.spawn(count)
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return [np.random.default_rng(s) for s in seq.spawn(count)]


#: How :func:`_record_seed` derives a text's stream (stored in a grid's run.json).
RECORD_SEEDING = "seed+sha256(record id)/1"


def _record_seed(seed: SeedLike, record: str) -> np.random.SeedSequence:
    """The random stream of one named text: the attack seed and a stable hash of its name.

    The name (a grid record id such as ``"chainmark/wiki/0003"``) is hashed
    with SHA-256, whose first 16 bytes become four 32-bit words appended to
    the seed's spawn key: ``SeedSequence(seed, spawn_key=words)``. So the
    same seed and name always give the same stream (on any machine, in any
    batch, in any order), while two names give independent streams, whatever
    their position in a batch. ``seed`` is an int or a ``SeedSequence``; a
    ``Generator`` has no reproducible state to derive from and is refused.
    """
    if not isinstance(record, str):
        raise TypeError(f"record must be a str (e.g. a record id), got {type(record).__name__}")
    if isinstance(seed, np.random.Generator):
        raise TypeError("seed must be an int or a numpy SeedSequence to derive per-record streams, "
                        "not a Generator")
    base = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    digest = hashlib.sha256(record.encode("utf-8")).digest()[:16]
    words = tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4))
    return np.random.SeedSequence(base.entropy, spawn_key=tuple(base.spawn_key) + words,
                                  pool_size=base.pool_size)


# --------------------------------------------------------------------------- one interface


class Attack(ABC):
    """An attack on watermarked text, applied one way to token ids and one way to text.

    ``level`` says what the attack edits: ``"tokens"`` (token ids) or
    ``"text"`` (strings). Every attack is applied to a batch:

    * ``attack.apply_ids(id_lists, tokenizer=None, names=None)``: token ids
      in, token ids out, whatever the level (a text attack decodes with
      ``tokenizer``, rewrites and re-tokenizes, so a runner can treat every
      attack alike);
    * ``attack.apply_text(texts)``: text in, text out (text attacks only).

    A token attack gives text i its own random stream: the i-th child spawned
    from its seed, or, with ``names``, a stream derived from the seed and
    ``names[i]``, so that a text's edits depend on its name, not on its
    position in a batch. Its
    ``edit(ids, seed)`` is the attack itself on one sequence with one stream
    (by default the attack's own seed: the paper's protocol on one text).
    Text attacks rewrite the whole batch with their own seed and ignore names.
    """

    name: str = "attack"
    level: str = "tokens"

    @abstractmethod
    def apply_ids(self, id_lists: Sequence[Sequence[int]], tokenizer: Any = None, *,
                  names: Sequence[str] | None = None) -> list[list[int]]: ...

    def apply_text(self, texts: Sequence[str]) -> list[str]:
        """Rewrite ``texts`` (text attacks; a token attack edits token ids: use :meth:`apply_ids`)."""
        raise TypeError(f"the {self.name} attack edits token ids, not text: use apply_ids(id_lists)")

    def describe(self) -> dict[str, Any]:
        """JSON-ready parameters (no models, no keys)."""
        return {"attack": self.name, "level": self.level,
                **{k: v for k, v in vars(self).items()
                   if isinstance(v, (int, float, str, bool)) and not k.startswith("_")}}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.describe().items() if k not in ("attack", "level"))
        return f"{type(self).__name__}({params})"


def _check_names(items: Sequence[Any], names: Sequence[str]) -> list[str]:
    if isinstance(names, str):
        raise TypeError("names must be a sequence of strings (one per item), not one string")
    names = list(names)
    if len(names) != len(items):
        raise ValueError(f"names must have one entry per item: {len(names)} names for {len(items)} items")
    return names


class _TokenAttack(Attack):
    level = "tokens"

    def __init__(self, delta: float, seed: SeedLike = ATTACK_SEED):
        self.delta = check_delta(delta)
        self.seed = seed

    def apply_ids(self, id_lists: Sequence[Sequence[int]], tokenizer: Any = None, *,
                  names: Sequence[str] | None = None) -> list[list[int]]:
        """Edit every sequence: ``id_lists[i]`` with the i-th stream spawned from the seed, or, with
        ``names``, with a stream derived from the seed and ``names[i]``.

        ``tokenizer`` is not needed (token attacks work on ids); it is accepted so that a
        runner can call every attack alike.
        """
        if names is None:
            return [self.edit(x, rng) for x, rng in zip(id_lists, _spawn(self.seed, len(id_lists)))]
        names = _check_names(id_lists, names)
        return [self.edit(x, np.random.default_rng(_record_seed(self.seed, name)))
                for x, name in zip(id_lists, names)]

    @abstractmethod
    def edit(self, ids: Sequence[int], seed: SeedLike = None) -> list[int]:
        """The attack on one sequence with one random stream (``None``: the attack's own seed)."""


class TextAttack(Attack):
    """The base of the text-level attacks: rewrite strings; on token ids, decode, rewrite and re-tokenize."""

    level = "text"

    @abstractmethod
    def apply_text(self, texts: Sequence[str]) -> list[str]: ...

    def apply_ids(self, id_lists: Sequence[Sequence[int]], tokenizer: Any = None, *,
                  names: Sequence[str] | None = None) -> list[list[int]]:
        """Decode each sequence with ``tokenizer``, rewrite the batch, re-tokenize (``names`` are ignored)."""
        if tokenizer is None:
            raise ValueError(f"the {self.name} attack works on text: pass tokenizer=...")
        if names is not None:
            _check_names(id_lists, names)
        texts = [tokenizer.decode(list(ids), skip_special_tokens=True) for ids in id_lists]
        return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in self.apply_text(texts)]


# --------------------------------------------------------------------------- token-level attacks


class Substitution(_TokenAttack):
    """Uniform random substitution at rate ``delta``: ``Substitution(delta, vocab_size, seed=43)``.

    Exactly ceil(delta * n) positions are replaced, chosen uniformly without
    replacement; each gets a uniform draw from ``[0, vocab_size)``, which may
    by chance equal the original token (the paper's protocol).
    """

    name = "substitution"

    def __init__(self, delta: float, vocab_size: int, seed: SeedLike = ATTACK_SEED):
        super().__init__(delta, seed)
        self.vocab_size = check_vocab_size(vocab_size)

    def edit(self, ids: Sequence[int], seed: SeedLike = None) -> list[int]:
        """Replace exactly ceil(delta * n) positions of ``ids``, chosen uniformly without replacement.

        The positions are the first ceil(delta n) entries of one random
        permutation and the replacement for position i is drawn once per
        position, so for a fixed seed a larger delta edits a superset of the
        positions a smaller one edits, with the same new tokens: curves over
        delta are coupled. ``seed`` (an int, ``SeedSequence`` or
        ``Generator``) defaults to the attack's own seed.
        """
        ids = as_token_array(ids)
        n = ids.size
        rng = np.random.default_rng(self.seed if seed is None else seed)
        order = rng.permutation(n)
        fresh = rng.integers(0, self.vocab_size, size=n)
        chosen = order[:n_edits(self.delta, n)]
        out = ids.copy()
        out[chosen] = fresh[chosen]
        return out.tolist()


class Deletion(_TokenAttack):
    """Uniform random deletion at rate ``delta``: ``Deletion(delta, seed=43)``."""

    name = "deletion"

    def edit(self, ids: Sequence[int], seed: SeedLike = None) -> list[int]:
        """Delete exactly ceil(delta * n) tokens at positions chosen uniformly without replacement.

        Nested in delta for a fixed seed, like :meth:`Substitution.edit`.
        """
        ids = as_token_array(ids)
        rng = np.random.default_rng(self.seed if seed is None else seed)
        order = rng.permutation(ids.size)
        keep = np.ones(ids.size, dtype=bool)
        keep[order[:n_edits(self.delta, ids.size)]] = False
        return ids[keep].tolist()


class Insertion(_TokenAttack):
    """Uniform random insertion at rate ``delta``: ``Insertion(delta, vocab_size, seed=43)``."""

    name = "insertion"

    def __init__(self, delta: float, vocab_size: int, seed: SeedLike = ATTACK_SEED):
        super().__init__(delta, seed)
        self.vocab_size = check_vocab_size(vocab_size)

    def edit(self, ids: Sequence[int], seed: SeedLike = None) -> list[int]:
        """Insert ceil(delta * n) uniform tokens, one at a time, each at a uniform position.

        Each insertion picks one of the ``len + 1`` gaps of the current
        sequence uniformly, so the final set of inserted slots is uniform over
        all arrangements. Nested in delta for a fixed seed.
        """
        out = as_token_array(ids).tolist()
        rng = np.random.default_rng(self.seed if seed is None else seed)
        for _ in range(n_edits(self.delta, len(out))):
            pos = int(rng.integers(0, len(out) + 1))
            out.insert(pos, int(rng.integers(0, self.vocab_size)))
        return out


def edit_fraction(original_ids: Sequence[int], attacked_ids: Sequence[int]) -> float:
    """delta_eff: token-level Levenshtein distance divided by the original length.

    Insertions, deletions and substitutions cost 1 each (rapidfuzz's
    Levenshtein on integer sequences). The value can exceed 1 when the attack
    adds many tokens. An empty original gives 0 if the attack is empty too.
    """
    a = as_token_array(original_ids).tolist()
    b = as_token_array(attacked_ids).tolist()
    if not a:
        if b:
            raise ValueError("original_ids is empty, so the edit fraction is undefined")
        return 0.0
    from rapidfuzz.distance import Levenshtein  # imported here: the protocol reads ATTACK_SEED without it

    return Levenshtein.distance(a, b) / len(a)


__all__ = [
    "ATTACK_SEED", "Attack", "Deletion", "Insertion", "RECORD_SEEDING", "SeedLike", "Substitution", "TextAttack",
    "check_delta", "check_vocab_size", "edit_fraction", "n_edits",
]

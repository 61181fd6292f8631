"""Serving: the watermark inside an inference engine, with a key per account.

:mod:`chainmark.serving.batch` holds the engine-independent part (the server's configuration and key folder, and
the rows of a batch with the key each carries); :mod:`chainmark.serving.vllm` is vLLM's V1 logits processor built
on it (``pip install "chainmark[vllm]"``; importing it needs vLLM, so it is not among the names loaded here).
"""
from __future__ import annotations

from ..exports import lazy_exports

#: The modules whose ``__all__`` this package exports, each imported on first use of one of its names.
MODULES = ("batch",)
__getattr__, __dir__ = lazy_exports(__name__, __file__, MODULES)

"""The auditor's toolkit: what a platform needs to check text for the watermark without a model.

Key files and the book's teaching key, the tokenizer, streaming detection of long inputs, anytime-valid
detection of text as it arrives, watermarked spans in a mixed document, what a text's repeats do to its null,
measured rates with exact intervals, corpus audits (one process or Dask), the published regime, the key audit and
detection over a set of keys (per account or rotated).
Everything here runs in the model-free install.
"""
from __future__ import annotations

from ..exports import lazy_exports

#: The modules whose ``__all__`` this package exports, each imported on first use of one of its names.
MODULES = ("anytime", "corpus", "corpus_input", "keyaudit", "keyfiles", "keyplan", "keysets", "rates", "regime",
           "repetition", "segments", "stream", "tokenizer", "transit")
__getattr__, __dir__ = lazy_exports(__name__, __file__, MODULES)

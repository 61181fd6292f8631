"""Upper bounds on what the detector and the auditor's command line accept.

Kept in a module with no imports, so that the command line can state them in
its help without loading numpy. Each bound is checked, with an error that
names it, before anything of that size is read or allocated.
"""
from __future__ import annotations

__all__ = ["DEFAULT_MAX_CORPUS_BYTES", "DEFAULT_MAX_INPUT_BYTES", "DEFAULT_MAX_TEXT_BYTES", "MAX_KEY_FILE_BYTES",
           "MAX_REGIME_BYTES", "MAX_STATES", "MIN_KEY_BYTES"]

#: Largest state count S. The keyed partition splits the vocabulary into S
#: classes: at S = 4096 the embedded model's 49,152 tokens leave 12 per state,
#: so a forced step chooses among a handful of tokens and larger S cannot
#: carry a usable watermark. The bound also keeps a dense S x S topology at
#: 16 MiB at most (S = 50,000 would need 2.5 GB before a single token is scored).
MAX_STATES = 4096

#: Shortest key accepted from a key file or ``$CHAINMARK_KEY``: 16 bytes
#: (128 bits), the usual floor for a secret key; ``chainmark keygen`` writes 32.
MIN_KEY_BYTES = 16

#: Largest key file read: keys are 32 bytes, so anything near this size is
#: not a key file (and ``/dev/zero`` is refused at once instead of read forever).
MAX_KEY_FILE_BYTES = 4096

#: Default largest text input of ``chainmark detect`` (``--max-bytes`` changes
#: it): a safety limit, not a memory limit, since texts are tokenized and
#: scored in pieces of a quarter megabyte (:mod:`chainmark.auditor.stream`) and memory
#: stays flat as they grow. A gibibyte of text is some 300 million tokens.
DEFAULT_MAX_TEXT_BYTES = 1024 * 1024 * 1024

#: Default largest null file of ``chainmark recalibrate`` (read whole: a
#: hundred thousand z-scores is far more than a quantile needs).
DEFAULT_MAX_INPUT_BYTES = 4 * 1024 * 1024

#: Default largest corpus of ``chainmark key audit`` (its texts are scored one by one, the corpus is read whole).
DEFAULT_MAX_CORPUS_BYTES = 256 * 1024 * 1024

#: Largest regime file read: a regime is a few hundred bytes of JSON.
MAX_REGIME_BYTES = 1024 * 1024

"""Upper bounds on what the detector and the auditor's command line accept.

Kept in a module with no imports, so that the command line can state them in
its help without loading numpy. Each bound is checked, with an error that
names it, before anything of that size is read or allocated.
"""
from __future__ import annotations

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

#: Default largest text input of ``chainmark detect`` (``--max-bytes`` raises
#: it): about a million tokens, far more than a z-test needs; tokenizing costs
#: roughly 180 bytes of memory per byte of text, so 4 MiB stays under 1 GB.
DEFAULT_MAX_INPUT_BYTES = 4 * 1024 * 1024

#: Largest regime file read: a regime is a few hundred bytes of JSON.
MAX_REGIME_BYTES = 1024 * 1024

"""ChainMark: a model-free, calibrated watermark for LLM text.

A secret key hashes every vocabulary token into one of S states arranged in a
cycle; at a share rho of positions generation is forced to the next state, so
the text walks the cycle, and an auditor with the key and the tokenizer alone
counts the legal transitions.

``import chainmark as cm`` gives the method the book builds: keys and key
files, the keyed partition, topologies, gates and their signals, the
configuration, generation with the watermark, detection and its tests'
statistics, the verdict, calibration and measured rates. Beside it: ``chainmark.auditor`` (checking text without a model)
and ``chainmark.cli`` (the command line). The book's lab (experiments,
baselines, the reference run, the book's machinery) is a separate package,
``cmlab``, kept with the book and never imported from here.
"""
from __future__ import annotations

from ._exports import lazy_exports

__version__ = "0.1.0"

#: The method's modules, whose ``__all__`` is the package's API. Names are imported on first use (PEP 562),
#: so ``import chainmark`` and the auditor's command line pay for torch only when a model-based name is touched.
METHOD_MODULES = ("keys", "keyfiles", "partition", "topology", "gates", "gate_signals", "config", "embed",
                  "detection", "significance", "verdict", "calibrate", "rates", "repetition", "randomisation",
                  "segments")
SUBPACKAGES = ("auditor", "cli")

__getattr__, __dir__ = lazy_exports(__name__, __file__, METHOD_MODULES, SUBPACKAGES)

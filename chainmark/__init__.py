"""ChainMark: a model-free, calibrated watermark for LLM text.

A secret key hashes every vocabulary token into one of S states arranged in a
cycle; at a share rho of positions generation is forced to the next state, so
the text walks the cycle, and an auditor with the key and the tokenizer alone
counts the legal transitions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Public name -> the submodule that defines it. Submodules are imported on first use
# (PEP 562), so `import chainmark` and the auditor's CLI do not pay for torch and
# transformers unless a name that needs them is touched.
_EXPORTS: dict[str, str] = {
    "Attack": "attacks",
    "BackTranslation": "attacks",
    "Deletion": "attacks",
    "Insertion": "attacks",
    "Paraphrase": "attacks",
    "Substitution": "attacks",
    "edit_fraction": "attacks",
    "make_attack": "attacks",
    "KGWConfig": "baselines",
    "KGWLogitsProcessor": "baselines",
    "SweetConfig": "baselines",
    "kgw_detect": "baselines",
    "sweet_detect": "baselines",
    "load_prompts": "prompts",
    "prompt_grid": "prompts",
    "read_records": "records",
    "run_grid": "records",
    "ChainMarkConfig": "embed",
    "ChainMarkLogitsProcessor": "embed",
    "DetectionResult": "detect",
    "Verdict": "verdict",
    "GATE_KINDS": "gates",
    "Gate": "gates",
    "Topology": "topology",
    "calibration_table": "calibrate",
    "detect": "detect",
    "detect_batch": "detect",
    "detect_text": "detect",
    "StreamingDetector": "stream",
    "detect_text_stream": "stream",
    "LikelihoodRatioResult": "lrdetect",
    "lr_detect": "lrdetect",
    "generate": "embed",
    "get_settings": "settings",
    "hoeffding_fpr_bound": "calibrate",
    "lifted_threshold": "calibrate",
    "midpoint_threshold": "calibrate",
    "predicted_z": "calibrate",
    "recalibrate": "calibrate",
    "s_star": "calibrate",
    "state_of": "partition",
    "state_table": "partition",
    "states_of": "partition",
    "z_alpha": "calibrate",
    "Regime": "regime",
    "regime_document": "regime",
    "tokenizer_fingerprint": "regime",
    "book_key": "keys",
    "derive_key": "keys",
    "generate_key": "keys",
    "key_fingerprint": "keys",
    "load_key": "keys",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'chainmark' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # static checkers and IDEs see the eager imports
    from .attacks import Attack, BackTranslation, Deletion, Insertion, Paraphrase, Substitution, edit_fraction, make_attack
    from .baselines import KGWConfig, KGWLogitsProcessor, SweetConfig, kgw_detect, sweet_detect
    from .prompts import load_prompts, prompt_grid
    from .records import read_records, run_grid
    from .embed import ChainMarkConfig, ChainMarkLogitsProcessor, generate
    from .detect import DetectionResult, detect, detect_batch, detect_text
    from .stream import StreamingDetector, detect_text_stream
    from .lrdetect import LikelihoodRatioResult, lr_detect
    from .gates import GATE_KINDS, Gate
    from .topology import Topology
    from .calibrate import calibration_table, hoeffding_fpr_bound, lifted_threshold, midpoint_threshold, predicted_z, recalibrate, s_star, z_alpha
    from .settings import get_settings
    from .partition import state_of, state_table, states_of
    from .regime import Regime, regime_document, tokenizer_fingerprint
    from .verdict import Verdict
    from .keys import book_key, derive_key, generate_key, key_fingerprint, load_key

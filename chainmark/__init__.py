"""ChainMark: a model-free, calibrated watermark for LLM text.

A secret key hashes every vocabulary token into one of S states arranged in a
cycle; at a share rho of positions generation is forced to the next state, so
the text walks the cycle, and an auditor with the key and the tokenizer alone
counts the legal transitions.
"""
from .attacks import (
    Attack,
    BackTranslation,
    Deletion,
    Insertion,
    Paraphrase,
    Substitution,
    back_translate,
    delete,
    edit_fraction,
    insert,
    make_attack,
    paraphrase,
    substitute,
)
from .baselines import KGWConfig, KGWLogitsProcessor, SweetConfig, kgw_detect, sweet_detect
from .calibrate import (
    calibration_table,
    hoeffding_fpr_bound,
    lifted_threshold,
    midpoint_threshold,
    predicted_z,
    recalibrate,
    s_star,
    z_alpha,
)
from .cli import regime_document, tokenizer_fingerprint
from .detect import DetectionResult, LikelihoodRatioResult, detect, detect_text, lm_detect, lr_detect
from .embed import ChainMarkConfig, ChainMarkLogitsProcessor, generate
from .gates import GATE_KINDS, Gate
from .keys import book_key, derive_key, generate_key, key_fingerprint, load_key
from .partition import state_of, state_table, states_of
from .prompts import load_prompts, prompt_grid
from .records import read_records, run_grid
from .settings import get_settings
from .topology import Topology

__version__ = "0.1.0"

__all__ = [
    "Attack",
    "BackTranslation",
    "Deletion",
    "Insertion",
    "Paraphrase",
    "Substitution",
    "back_translate",
    "delete",
    "edit_fraction",
    "insert",
    "make_attack",
    "paraphrase",
    "substitute",
    "KGWConfig",
    "KGWLogitsProcessor",
    "SweetConfig",
    "kgw_detect",
    "sweet_detect",
    "load_prompts",
    "prompt_grid",
    "read_records",
    "run_grid",
    "ChainMarkConfig",
    "ChainMarkLogitsProcessor",
    "DetectionResult",
    "GATE_KINDS",
    "Gate",
    "Topology",
    "calibration_table",
    "detect",
    "detect_text",
    "LikelihoodRatioResult",
    "lm_detect",
    "lr_detect",
    "generate",
    "get_settings",
    "hoeffding_fpr_bound",
    "lifted_threshold",
    "midpoint_threshold",
    "predicted_z",
    "recalibrate",
    "s_star",
    "state_of",
    "state_table",
    "states_of",
    "z_alpha",
    "regime_document",
    "tokenizer_fingerprint",
    "book_key",
    "derive_key",
    "generate_key",
    "key_fingerprint",
    "load_key",
]

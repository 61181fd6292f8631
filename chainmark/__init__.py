"""ChainMark: a model-free, calibrated watermark for LLM text.

A secret key hashes every vocabulary token into one of S states arranged in a
cycle; at a share rho of positions generation is forced to the next state, so
the text walks the cycle, and an auditor with the key and the tokenizer alone
counts the legal transitions.

``import chainmark as cm`` gives the method the book builds: forty names at the
top (:data:`TOP_LEVEL`: keys, the partition, topologies and gates, the
configuration, generation, detection, calibration and rates), and every
method module beside them for the rest (``cm.calibrate.s_star_exact``). Beside
the method: ``chainmark.auditor`` (checking text without a model) and
``chainmark.cli`` (the command line) and ``chainmark.serving`` (the watermark in an inference engine, a key per
account). The book's lab (experiments, baselines,
the reference run, the book's machinery) is a separate package, ``cmlab``,
kept with the book and never imported from here. Editors and type checkers
see every name through ``__init__.pyi`` (``tools/write_stubs.py``).
"""
from __future__ import annotations

from .exports import lazy_exports

__version__ = "0.1.0"

#: The method's modules (``cm.<module>``). Names are imported on first use (PEP 562),
#: so ``import chainmark`` and the auditor's command line pay for torch only when a model-based name is touched.
METHOD_MODULES = ("keys", "partition", "topology", "gates", "gate_signals", "config", "embed", "detection",
                  "significance", "verdict", "calibrate", "randomisation")
SUBPACKAGES = ("auditor", "cli", "serving")
#: The auditor's modules that a few top-level names come from (key files, measured rates, spans in a document).
AUDITOR_EXPORTS = ("auditor.keyfiles", "auditor.rates", "auditor.segments")

#: The names at the top, each used by a chapter, the README or the command line (``tests/test_architecture.py``
#: checks both ways). Every other name of a method module is reached through it: ``cm.calibrate.s_star_exact``.
TOP_LEVEL = (
    # keys and the partition
    "book_key", "derive_key", "generate_key", "key_fingerprint", "load_key", "write_key_file",
    "state_of", "states_of", "state_table",
    # topology, gates and the configuration
    "Topology", "resolve_topology", "Gate", "calibrate_gate", "entropy", "entropy_signals", "ChainMarkConfig",
    # generation
    "generate", "chat_prompt", "ChainMarkLogitsProcessor", "logits_width",
    # detection and its statistics
    "detect", "detect_batch", "detect_text", "valid_transitions", "score_states", "first_occurrences",
    "spanning_forest", "detect_segments", "key_randomisation_test",
    # calibration and rates
    "z_alpha", "predicted_z", "s_star", "midpoint_threshold", "hoeffding_fpr_bound", "exact_fpr",
    "min_null_samples", "recalibrate", "excess_kurtosis", "rate_estimate", "clopper_pearson",
)

__getattr__, __dir__ = lazy_exports(__name__, __file__, METHOD_MODULES + AUDITOR_EXPORTS, SUBPACKAGES,
                                     only=TOP_LEVEL)

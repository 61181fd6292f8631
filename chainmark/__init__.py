"""ChainMark: a model-free, calibrated watermark for LLM text.

A secret key hashes every vocabulary token into one of S states arranged in a
cycle; at a share rho of positions generation is forced to the next state, so
the text walks the cycle, and an auditor with the key and the tokenizer alone
counts the legal transitions.

``import chainmark as cm`` gives the method the book builds: forty names at the
top (keys, the partition, topologies and gates, the configuration, generation,
detection, calibration and rates), and every method module beside them for the
rest (``cm.calibrate.s_star_exact``). Beside the method: ``chainmark.auditor``
(checking text without a model), ``chainmark.cli`` (the command line) and
``chainmark.serving`` (the watermark in an inference engine, a key per account).
The book's lab (experiments, baselines, the reference run, the book's
machinery) is a separate package, ``cmlab``, kept with the book and never
imported from here.

The import lines below are the only list of the names at the top: ``__all__``
is read from them (``chainmark/exports.py``), and editors and type checkers read
them as they are. The names whose module imports torch (generation and the
gate's signals) sit under ``TYPE_CHECKING`` and load on first use, so
``import chainmark`` and the auditor's command line never pay for torch.
"""
from typing import TYPE_CHECKING

from .auditor.keyfiles import book_key as book_key, load_key as load_key, write_key_file as write_key_file
from .auditor.rates import clopper_pearson as clopper_pearson, rate_estimate as rate_estimate
from .auditor.segments import detect_segments as detect_segments
from .calibrate import (
    exact_fpr as exact_fpr,
    hoeffding_fpr_bound as hoeffding_fpr_bound,
    midpoint_threshold as midpoint_threshold,
    min_null_samples as min_null_samples,
    predicted_z as predicted_z,
    recalibrate as recalibrate,
    s_star as s_star,
    z_alpha as z_alpha,
)
from .config import ChainMarkConfig as ChainMarkConfig
from .detection import (
    detect as detect,
    detect_batch as detect_batch,
    detect_text as detect_text,
    score_states as score_states,
    valid_transitions as valid_transitions,
)
from .exports import top_level_exports
from .gates import Gate as Gate
from .keys import derive_key as derive_key, generate_key as generate_key, key_fingerprint as key_fingerprint
from .partition import state_of as state_of, state_table as state_table, states_of as states_of
from .randomisation import key_randomisation_test as key_randomisation_test
from .significance import first_occurrences as first_occurrences, spanning_forest as spanning_forest
from .topology import Topology as Topology, resolve_topology as resolve_topology

if TYPE_CHECKING:  # these modules import torch: each name is imported on its first use (top_level_exports)
    from .embed import (
        ChainMarkLogitsProcessor as ChainMarkLogitsProcessor,
        Sampling as Sampling,
        calibrate_gate as calibrate_gate,
        chat_prompt as chat_prompt,
        generate as generate,
        logits_width as logits_width,
    )
    from .gate_signals import entropy as entropy, entropy_signals as entropy_signals

__version__ = "0.1.0"

#: The method's modules (``cm.<module>``), imported on first use like the names above.
METHOD_MODULES = ("keys", "partition", "topology", "gates", "gate_signals", "config", "embed", "detection",
                  "significance", "verdict", "calibrate", "randomisation")
#: The audience folders beside the method: checking text without a model, the command line, serving.
SUBPACKAGES = ("auditor", "cli", "serving")

__getattr__, __dir__ = top_level_exports(__name__, __file__, METHOD_MODULES + SUBPACKAGES)

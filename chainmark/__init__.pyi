"""Static names of ``chainmark`` for editors and type checkers; the runtime loads them lazily.

Written by ``tools/write_stubs.py`` from the modules' ``__all__``: do not edit."""
from __future__ import annotations

from . import auditor as auditor
from . import calibrate as calibrate
from . import cli as cli
from . import config as config
from . import detection as detection
from . import embed as embed
from . import gate_signals as gate_signals
from . import gates as gates
from . import keys as keys
from . import partition as partition
from . import randomisation as randomisation
from . import serving as serving
from . import significance as significance
from . import topology as topology
from . import verdict as verdict
from .auditor.keyfiles import (
    book_key as book_key,
    load_key as load_key,
    write_key_file as write_key_file,
)
from .auditor.rates import (
    clopper_pearson as clopper_pearson,
    rate_estimate as rate_estimate,
)
from .auditor.segments import (
    detect_segments as detect_segments,
)
from .calibrate import (
    exact_fpr as exact_fpr,
    excess_kurtosis as excess_kurtosis,
    hoeffding_fpr_bound as hoeffding_fpr_bound,
    midpoint_threshold as midpoint_threshold,
    min_null_samples as min_null_samples,
    predicted_z as predicted_z,
    recalibrate as recalibrate,
    s_star as s_star,
    z_alpha as z_alpha,
)
from .config import (
    ChainMarkConfig as ChainMarkConfig,
)
from .detection import (
    detect as detect,
    detect_batch as detect_batch,
    detect_text as detect_text,
    score_states as score_states,
    valid_transitions as valid_transitions,
)
from .embed import (
    ChainMarkLogitsProcessor as ChainMarkLogitsProcessor,
    calibrate_gate as calibrate_gate,
    chat_prompt as chat_prompt,
    generate as generate,
    logits_width as logits_width,
)
from .gate_signals import (
    entropy as entropy,
    entropy_signals as entropy_signals,
)
from .gates import (
    Gate as Gate,
)
from .keys import (
    derive_key as derive_key,
    generate_key as generate_key,
    key_fingerprint as key_fingerprint,
)
from .partition import (
    state_of as state_of,
    state_table as state_table,
    states_of as states_of,
)
from .randomisation import (
    key_randomisation_test as key_randomisation_test,
)
from .significance import (
    first_occurrences as first_occurrences,
    spanning_forest as spanning_forest,
)
from .topology import (
    Topology as Topology,
    resolve_topology as resolve_topology,
)

__version__: str
METHOD_MODULES: tuple[str, ...]
SUBPACKAGES: tuple[str, ...]
TOP_LEVEL: tuple[str, ...]
__all__ = ["ChainMarkConfig", "ChainMarkLogitsProcessor", "Gate", "Topology", "book_key", "calibrate_gate", "chat_prompt", "clopper_pearson", "derive_key", "detect", "detect_batch", "detect_segments", "detect_text", "entropy", "entropy_signals", "exact_fpr", "excess_kurtosis", "first_occurrences", "generate", "generate_key", "hoeffding_fpr_bound", "key_fingerprint", "key_randomisation_test", "load_key", "logits_width", "midpoint_threshold", "min_null_samples", "predicted_z", "rate_estimate", "recalibrate", "resolve_topology", "s_star", "score_states", "spanning_forest", "state_of", "state_table", "states_of", "valid_transitions", "write_key_file", "z_alpha"]

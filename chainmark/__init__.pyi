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
from . import keyfiles as keyfiles
from . import keys as keys
from . import partition as partition
from . import randomisation as randomisation
from . import rates as rates
from . import repetition as repetition
from . import segments as segments
from . import significance as significance
from . import topology as topology
from . import verdict as verdict
from .calibrate import (
    HEAVY_TAIL_KURTOSIS as HEAVY_TAIL_KURTOSIS,
    PAPER_ALPHAS as PAPER_ALPHAS,
    PAPER_NS as PAPER_NS,
    PAPER_RHOS as PAPER_RHOS,
    calibration_table as calibration_table,
    critical_count as critical_count,
    exact_fpr as exact_fpr,
    excess_kurtosis as excess_kurtosis,
    hoeffding_fpr_bound as hoeffding_fpr_bound,
    midpoint_exact_fpr as midpoint_exact_fpr,
    midpoint_threshold as midpoint_threshold,
    midpoint_z as midpoint_z,
    min_null_samples as min_null_samples,
    null_p0 as null_p0,
    predicted_z as predicted_z,
    recalibrate as recalibrate,
    s_star as s_star,
    s_star_exact as s_star_exact,
    z_alpha as z_alpha,
)
from .config import (
    ChainMarkConfig as ChainMarkConfig,
    GENERATION_SEED as GENERATION_SEED,
)
from .detection import (
    DetectionResult as DetectionResult,
    detect as detect,
    detect_batch as detect_batch,
    detect_text as detect_text,
    detection_args as detection_args,
    score_states as score_states,
    unpack_config as unpack_config,
    valid_transitions as valid_transitions,
    verdict_of as verdict_of,
)
from .embed import (
    ChainMarkLogitsProcessor as ChainMarkLogitsProcessor,
    Generation as Generation,
    SignalRecorder as SignalRecorder,
    calibrate_gate as calibrate_gate,
    chat_prompt as chat_prompt,
    generate as generate,
    logits_width as logits_width,
    pilot_signal as pilot_signal,
)
from .gate_signals import (
    EntropySignals as EntropySignals,
    Workspace as Workspace,
    entropy as entropy,
    entropy_signals as entropy_signals,
    gate_flags as gate_flags,
    gate_signal as gate_signal,
    row_maxima as row_maxima,
    row_signals as row_signals,
    top2_gap as top2_gap,
)
from .gates import (
    GATE_KINDS as GATE_KINDS,
    Gate as Gate,
    check_gate_kind as check_gate_kind,
)
from .keyfiles import (
    KEY_ENV as KEY_ENV,
    KEY_FILE_ENV as KEY_FILE_ENV,
    TEACHING_LABEL as TEACHING_LABEL,
    book_key as book_key,
    book_key_source as book_key_source,
    key_file_is_private as key_file_is_private,
    load_key as load_key,
    read_key_file as read_key_file,
    teaching_key as teaching_key,
    write_key_file as write_key_file,
)
from .keys import (
    derive_key as derive_key,
    generate_key as generate_key,
    hkdf as hkdf,
    hkdf_expand as hkdf_expand,
    key_fingerprint as key_fingerprint,
    weak_key_reason as weak_key_reason,
)
from .partition import (
    as_token_array as as_token_array,
    key_bytes as key_bytes,
    state_of as state_of,
    state_table as state_table,
    states_of as states_of,
)
from .randomisation import (
    RandomisationResult as RandomisationResult,
    key_randomisation_test as key_randomisation_test,
    key_seed as key_seed,
    legal_count as legal_count,
    legal_transitions_null as legal_transitions_null,
    monte_carlo_p_value as monte_carlo_p_value,
    resolve_config as resolve_config,
)
from .rates import (
    RateEstimate as RateEstimate,
    clopper_pearson as clopper_pearson,
    clopper_pearson_lower as clopper_pearson_lower,
    clopper_pearson_upper as clopper_pearson_upper,
    rate_estimate as rate_estimate,
    trials_to_bound as trials_to_bound,
)
from .repetition import (
    TextNull as TextNull,
    null_fpr as null_fpr,
    pair_counts as pair_counts,
    pair_null as pair_null,
    repetition_warning as repetition_warning,
    text_null as text_null,
)
from .segments import (
    Segment as Segment,
    SegmentsResult as SegmentsResult,
    cover_segments as cover_segments,
    detect_segments as detect_segments,
    scan_maximum as scan_maximum,
    spans_above as spans_above,
    window_lengths as window_lengths,
    window_z as window_z,
)
from .significance import (
    TESTS as TESTS,
    binomial_p_value as binomial_p_value,
    check_test as check_test,
    first_occurrences as first_occurrences,
    forest_mask as forest_mask,
    log_p_value as log_p_value,
    p_value as p_value,
    spanning_forest as spanning_forest,
    transition_statistics as transition_statistics,
    z_score as z_score,
)
from .topology import (
    TOPOLOGY_K as TOPOLOGY_K,
    Topology as Topology,
    adjacent_covariance as adjacent_covariance,
    cycle_topology as cycle_topology,
    null_moments as null_moments,
    resolve_topology as resolve_topology,
)
from .verdict import (
    RECORD_FORM as RECORD_FORM,
    Verdict as Verdict,
    alias as alias,
    decide as decide,
)

__version__: str
METHOD_MODULES: tuple[str, ...]
SUBPACKAGES: tuple[str, ...]
__all__ = ["ChainMarkConfig", "ChainMarkLogitsProcessor", "DetectionResult", "EntropySignals", "GATE_KINDS", "GENERATION_SEED", "Gate", "Generation", "HEAVY_TAIL_KURTOSIS", "KEY_ENV", "KEY_FILE_ENV", "PAPER_ALPHAS", "PAPER_NS", "PAPER_RHOS", "RECORD_FORM", "RandomisationResult", "RateEstimate", "Segment", "SegmentsResult", "SignalRecorder", "TEACHING_LABEL", "TESTS", "TOPOLOGY_K", "TextNull", "Topology", "Verdict", "Workspace", "adjacent_covariance", "alias", "as_token_array", "auditor", "binomial_p_value", "book_key", "book_key_source", "calibrate", "calibrate_gate", "calibration_table", "chat_prompt", "check_gate_kind", "check_test", "cli", "clopper_pearson", "clopper_pearson_lower", "clopper_pearson_upper", "config", "cover_segments", "critical_count", "cycle_topology", "decide", "derive_key", "detect", "detect_batch", "detect_segments", "detect_text", "detection", "detection_args", "embed", "entropy", "entropy_signals", "exact_fpr", "excess_kurtosis", "first_occurrences", "forest_mask", "gate_flags", "gate_signal", "gate_signals", "gates", "generate", "generate_key", "hkdf", "hkdf_expand", "hoeffding_fpr_bound", "key_bytes", "key_file_is_private", "key_fingerprint", "key_randomisation_test", "key_seed", "keyfiles", "keys", "legal_count", "legal_transitions_null", "load_key", "log_p_value", "logits_width", "midpoint_exact_fpr", "midpoint_threshold", "midpoint_z", "min_null_samples", "monte_carlo_p_value", "null_fpr", "null_moments", "null_p0", "p_value", "pair_counts", "pair_null", "partition", "pilot_signal", "predicted_z", "randomisation", "rate_estimate", "rates", "read_key_file", "recalibrate", "repetition", "repetition_warning", "resolve_config", "resolve_topology", "row_maxima", "row_signals", "s_star", "s_star_exact", "scan_maximum", "score_states", "segments", "significance", "spanning_forest", "spans_above", "state_of", "state_table", "states_of", "teaching_key", "text_null", "top2_gap", "topology", "transition_statistics", "trials_to_bound", "unpack_config", "valid_transitions", "verdict", "verdict_of", "weak_key_reason", "window_lengths", "window_z", "write_key_file", "z_alpha", "z_score"]

"""Static names of ``chainmark.auditor`` for editors and type checkers; the runtime loads them lazily.

Written by ``tools/write_stubs.py`` from the modules' ``__all__``: do not edit."""
from __future__ import annotations

from . import anytime as anytime
from . import corpus as corpus
from . import corpus_input as corpus_input
from . import keyaudit as keyaudit
from . import keyfiles as keyfiles
from . import keyplan as keyplan
from . import keysets as keysets
from . import rates as rates
from . import regime as regime
from . import repetition as repetition
from . import segments as segments
from . import stream as stream
from . import tokenizer as tokenizer
from . import transit as transit
from .anytime import (
    AnytimeDetector as AnytimeDetector, AnytimeResult as AnytimeResult, BetGrid as BetGrid,
    anytime_detect as anytime_detect, bet_grid as bet_grid,
)
from .corpus import (
    AuditExecution as AuditExecution, AuditSummary as AuditSummary, parts_folder as parts_folder,
    read_audit as read_audit, run_audit as run_audit, score_many as score_many,
)
from .corpus_input import (
    AuditError as AuditError, Batch as Batch, CorpusReading as CorpusReading, corpus_batches as corpus_batches,
    pyarrow_parquet as pyarrow_parquet, read_batch as read_batch,
)
from .keyaudit import (
    CertificationTarget as CertificationTarget, KeySelection as KeySelection, audit_key as audit_key,
    certificate_problems as certificate_problems, certify as certify, format_audit as format_audit,
    fpr_across_keys as fpr_across_keys, read_certificate as read_certificate,
    recheck_certificate as recheck_certificate, seal as seal,
)
from .keyfiles import (
    KEY_FILE_ENV as KEY_FILE_ENV, book_key as book_key, book_key_source as book_key_source,
    key_file_is_private as key_file_is_private, load_key as load_key, read_key_file as read_key_file,
    teaching_key as teaching_key, write_key_file as write_key_file,
)
from .keyplan import (
    CertificationPlan as CertificationPlan, plan_certification as plan_certification,
)
from .keysets import (
    KeySetVerdict as KeySetVerdict, detect_over_keys as detect_over_keys,
)
from .rates import (
    RateEstimate as RateEstimate, clopper_pearson as clopper_pearson,
    clopper_pearson_lower as clopper_pearson_lower, clopper_pearson_upper as clopper_pearson_upper,
    rate_estimate as rate_estimate, trials_to_bound as trials_to_bound,
)
from .regime import (
    Regime as Regime, RegimeError as RegimeError, parse_regime_text as parse_regime_text,
    published_regime_problems as published_regime_problems, regime_document as regime_document,
    tokenizer_fingerprint as tokenizer_fingerprint,
)
from .repetition import (
    TextNull as TextNull, null_fpr as null_fpr, pair_counts as pair_counts, pair_null as pair_null,
    repetition_warning as repetition_warning, text_null as text_null,
)
from .segments import (
    Segment as Segment, SegmentsResult as SegmentsResult, detect_segments as detect_segments,
    scan_maximum as scan_maximum, window_lengths as window_lengths,
)
from .stream import (
    PIECE_CHARS as PIECE_CHARS, StreamingDetector as StreamingDetector, UncuttableText as UncuttableText,
    decoded_chunks as decoded_chunks, detect_text_stream as detect_text_stream, ids_and_offsets as ids_and_offsets,
    ids_batch as ids_batch, stream_text as stream_text, text_pieces as text_pieces,
)
from .tokenizer import (
    AuditTokenizer as AuditTokenizer, DEFAULT_MODEL as DEFAULT_MODEL, EMBEDDED_TOKENIZER as EMBEDDED_TOKENIZER,
    MODEL_ENV as MODEL_ENV, TokenizerLoadError as TokenizerLoadError, default_model_name as default_model_name,
    load_tokenizer as load_tokenizer,
)
from .transit import (
    AS_GIVEN as AS_GIVEN, TextPreparation as TextPreparation,
)

MODULES: tuple[str, ...]
__all__ = ["AS_GIVEN", "AnytimeDetector", "AnytimeResult", "AuditError", "AuditExecution", "AuditSummary", "AuditTokenizer", "Batch", "BetGrid", "CertificationPlan", "CertificationTarget", "CorpusReading", "DEFAULT_MODEL", "EMBEDDED_TOKENIZER", "KEY_FILE_ENV", "KeySelection", "KeySetVerdict", "MODEL_ENV", "PIECE_CHARS", "RateEstimate", "Regime", "RegimeError", "Segment", "SegmentsResult", "StreamingDetector", "TextNull", "TextPreparation", "TokenizerLoadError", "UncuttableText", "anytime_detect", "audit_key", "bet_grid", "book_key", "book_key_source", "certificate_problems", "certify", "clopper_pearson", "clopper_pearson_lower", "clopper_pearson_upper", "corpus_batches", "decoded_chunks", "default_model_name", "detect_over_keys", "detect_segments", "detect_text_stream", "format_audit", "fpr_across_keys", "ids_and_offsets", "ids_batch", "key_file_is_private", "load_key", "load_tokenizer", "null_fpr", "pair_counts", "pair_null", "parse_regime_text", "parts_folder", "plan_certification", "published_regime_problems", "pyarrow_parquet", "rate_estimate", "read_audit", "read_batch", "read_certificate", "read_key_file", "recheck_certificate", "regime_document", "repetition_warning", "run_audit", "scan_maximum", "score_many", "seal", "stream_text", "teaching_key", "text_null", "text_pieces", "tokenizer_fingerprint", "trials_to_bound", "window_lengths", "write_key_file"]

"""Static names of ``cmlab.harness.reference`` for editors and type checkers; the runtime loads them lazily.

Written by ``tools/write_stubs.py`` from the modules' ``__all__``: do not edit."""
from __future__ import annotations

from . import compare as compare
from . import generation as generation
from . import protocol as protocol
from . import read as read
from . import store as store
from . import verification as verification
from .compare import (
    VERIFY_TOLERANCE as VERIFY_TOLERANCE, compare_records as compare_records, tolerance_rules as tolerance_rules,
)
from .generation import (
    RunContext as RunContext, regenerate_command as regenerate_command, run as run, status as status,
)
from .protocol import (
    Cell as Cell, EXPERIMENTS as EXPERIMENTS, MIN_REWRITE_TOKENS as MIN_REWRITE_TOKENS, PROTOCOL as PROTOCOL,
    PromptBatch as PromptBatch, Protocol as Protocol, REFERENCE_LABEL as REFERENCE_LABEL, cells as cells,
    reference_key as reference_key, topology_for as topology_for,
)
from .read import (
    explorer_grid as explorer_grid, load_reference as load_reference, load_texts as load_texts,
    scores_by_test as scores_by_test,
)
from .store import (
    MANIFEST as MANIFEST, PROVENANCE as PROVENANCE, encode_shard as encode_shard, environment as environment,
    git_commit as git_commit, manifest_for as manifest_for, protocol_differences as protocol_differences,
    provenance_parts as provenance_parts, read_dir as read_dir, read_provenance as read_provenance,
    read_shard as read_shard, reference_dir as reference_dir, shard_path as shard_path, utc_now as utc_now,
    weights_sha256 as weights_sha256,
)
from .verification import (
    NoBatchWithinBound as NoBatchWithinBound, ShardCheck as ShardCheck, verify as verify,
)

MODULES: tuple[str, ...]
__all__ = ["Cell", "EXPERIMENTS", "MANIFEST", "MIN_REWRITE_TOKENS", "NoBatchWithinBound", "PROTOCOL", "PROVENANCE", "PromptBatch", "Protocol", "REFERENCE_LABEL", "RunContext", "ShardCheck", "VERIFY_TOLERANCE", "cells", "compare_records", "encode_shard", "environment", "explorer_grid", "git_commit", "load_reference", "load_texts", "manifest_for", "protocol_differences", "provenance_parts", "read_dir", "read_provenance", "read_shard", "reference_dir", "reference_key", "regenerate_command", "run", "scores_by_test", "shard_path", "status", "tolerance_rules", "topology_for", "utc_now", "verify", "weights_sha256"]

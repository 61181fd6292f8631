"""Static names of ``cmlab.harness`` for editors and type checkers; the runtime loads them lazily.

Written by ``tools/write_stubs.py`` from the modules' ``__all__``: do not edit."""
from __future__ import annotations

from . import adapters as adapters
from . import context_keyed as context_keyed
from . import corpora as corpora
from . import grids as grids
from . import mixed as mixed
from . import models as models
from . import options as options
from . import prompts as prompts
from . import reference as reference
from . import runner as runner
from . import runs as runs
from . import serving as serving
from . import settings as settings
from . import stealing as stealing
from .adapters import (
    ChainMarkMethod as ChainMarkMethod, ContextKeyedMethod as ContextKeyedMethod, KGWMethod as KGWMethod,
    Method as Method, NoWatermark as NoWatermark, SweetMethod as SweetMethod,
)
from .context_keyed import (
    CONTEXT_FILE as CONTEXT_FILE, CONTEXT_GENERATED_DIR as CONTEXT_GENERATED_DIR,
    CONTEXT_GENERATORS as CONTEXT_GENERATORS, context_pool as context_pool,
    distinct_pair_share as distinct_pair_share, load_context as load_context,
    load_context_generated as load_context_generated, measure_context_keyed as measure_context_keyed,
    paired_replies as paired_replies,
)
from .corpora import (
    Document as Document, corpus_summary as corpus_summary, human_windows as human_windows,
    key_audit_corpus as key_audit_corpus, python_reference_documents as python_reference_documents,
    shipped_texts as shipped_texts,
)
from .grids import (
    AttackSweep as AttackSweep, ExplorerOptions as ExplorerOptions, attack_curve as attack_curve,
    embedding_grid as embedding_grid, generate_example as generate_example, grid_cell as grid_cell,
    robustness_grid as robustness_grid,
)
from .mixed import (
    BOUNDARY_CASES as BOUNDARY_CASES, MIXED_FILE as MIXED_FILE, MixedDocument as MixedDocument,
    boundary_summary as boundary_summary, build_mixed_documents as build_mixed_documents,
    load_mixed_documents as load_mixed_documents, match_segments as match_segments, mixed_config as mixed_config,
    read_segment_records as read_segment_records, segment_summary as segment_summary,
    write_mixed_documents as write_mixed_documents,
)
from .models import (
    CACHE_ENV as CACHE_ENV, DEVICE_MEMORY_ENV as DEVICE_MEMORY_ENV, DTYPE_BYTES as DTYPE_BYTES,
    EMBEDDED_PARAMS as EMBEDDED_PARAMS, ModelLoadError as ModelLoadError, ModelSize as ModelSize,
    ModelTooLargeError as ModelTooLargeError, available_ram as available_ram, check_fits as check_fits,
    device_memory as device_memory, embedded_gguf_path as embedded_gguf_path, last_loaded as last_loaded,
    load_model as load_model, memory_needed as memory_needed, model_size as model_size,
    vllm_checkpoint as vllm_checkpoint,
)
from .options import (
    BatchContext as BatchContext, GridOptions as GridOptions, sampling_named as sampling_named,
)
from .prompts import (
    DOMAINS as DOMAINS, SOURCES as SOURCES, load_prompts as load_prompts, prompt_grid as prompt_grid,
)
from .runner import (
    GridRun as GridRun, generate_once as generate_once, generate_resumable as generate_resumable,
    run_batch as run_batch, run_grid as run_grid, score_null_texts as score_null_texts, tpr as tpr,
)
from .runs import (
    META_FILE as META_FILE, RECORDS_FILE as RECORDS_FILE, RecordWriter as RecordWriter, RunControl as RunControl,
    RunFolderBusy as RunFolderBusy, lock_run_folder as lock_run_folder, read_records as read_records,
    records_frame as records_frame, repair as repair, stored_gate as stored_gate, write_meta as write_meta,
)
from .serving import (
    SERVING_RECORD as SERVING_RECORD, account_key as account_key, complete as complete,
    load_serving as load_serving, mixed_requests as mixed_requests, reference_requests as reference_requests,
    run_vllm as run_vllm, serving_folder as serving_folder, vllm_environment as vllm_environment,
    vllm_server as vllm_server,
)
from .settings import (
    RUNS_ENV as RUNS_ENV, Settings as Settings, default_dtype as default_dtype,
    default_runs_dir as default_runs_dir, get_settings as get_settings, progress_bars_off as progress_bars_off,
    use_settings as use_settings,
)
from .stealing import (
    ADAPTIVE_FILE as ADAPTIVE_FILE, AttackerPool as AttackerPool, CURVE_FILE as CURVE_FILE,
    GENERATED_DIR as GENERATED_DIR, GENERATOR_TOKENS as GENERATOR_TOKENS, HELD_OUT_PROMPTS as HELD_OUT_PROMPTS,
    KEYSET_FILE as KEYSET_FILE, MODELCHECK_FILE as MODELCHECK_FILE, ORDERS_FILE as ORDERS_FILE, TESTS as TESTS,
    TOKENS_OBSERVED as TOKENS_OBSERVED, attacker_pool as attacker_pool, blind_scrub as blind_scrub,
    first_tokens as first_tokens, generator_batches as generator_batches, load_adaptive as load_adaptive,
    load_curve as load_curve, load_generated as load_generated, load_keyset as load_keyset,
    load_modelcheck as load_modelcheck, load_orders as load_orders, reference_config as reference_config,
    reference_gate as reference_gate, stealing_point as stealing_point,
)

MODULES: tuple[str, ...]
__all__ = ["ADAPTIVE_FILE", "AttackSweep", "AttackerPool", "BOUNDARY_CASES", "BatchContext", "CACHE_ENV", "CONTEXT_FILE", "CONTEXT_GENERATED_DIR", "CONTEXT_GENERATORS", "CURVE_FILE", "ChainMarkMethod", "ContextKeyedMethod", "DEVICE_MEMORY_ENV", "DOMAINS", "DTYPE_BYTES", "Document", "EMBEDDED_PARAMS", "ExplorerOptions", "GENERATED_DIR", "GENERATOR_TOKENS", "GridOptions", "GridRun", "HELD_OUT_PROMPTS", "KEYSET_FILE", "KGWMethod", "META_FILE", "MIXED_FILE", "MODELCHECK_FILE", "Method", "MixedDocument", "ModelLoadError", "ModelSize", "ModelTooLargeError", "NoWatermark", "ORDERS_FILE", "RECORDS_FILE", "RUNS_ENV", "RecordWriter", "RunControl", "RunFolderBusy", "SERVING_RECORD", "SOURCES", "Settings", "SweetMethod", "TESTS", "TOKENS_OBSERVED", "account_key", "attack_curve", "attacker_pool", "available_ram", "blind_scrub", "boundary_summary", "build_mixed_documents", "check_fits", "complete", "context_pool", "corpus_summary", "default_dtype", "default_runs_dir", "device_memory", "distinct_pair_share", "embedded_gguf_path", "embedding_grid", "first_tokens", "generate_example", "generate_once", "generate_resumable", "generator_batches", "get_settings", "grid_cell", "human_windows", "key_audit_corpus", "last_loaded", "load_adaptive", "load_context", "load_context_generated", "load_curve", "load_generated", "load_keyset", "load_mixed_documents", "load_model", "load_modelcheck", "load_orders", "load_prompts", "load_serving", "lock_run_folder", "match_segments", "measure_context_keyed", "memory_needed", "mixed_config", "mixed_requests", "model_size", "paired_replies", "progress_bars_off", "prompt_grid", "python_reference_documents", "read_records", "read_segment_records", "records_frame", "reference_config", "reference_gate", "reference_requests", "repair", "robustness_grid", "run_batch", "run_grid", "run_vllm", "sampling_named", "score_null_texts", "segment_summary", "serving_folder", "shipped_texts", "stealing_point", "stored_gate", "tpr", "use_settings", "vllm_checkpoint", "vllm_environment", "vllm_server", "write_meta", "write_mixed_documents"]

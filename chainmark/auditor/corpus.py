"""Audit a corpus: every document scored under one key, one row each, in bounded memory, resumable, on one
process or a Dask cluster.

The corpus is read in batches (:mod:`chainmark.auditor.corpus_input`); each batch is tokenized together, scored
in one vectorised pass (:func:`score_many`; texts longer than a piece go through :mod:`chainmark.auditor.stream`)
and its rows written atomically to one part file in ``<out>.parts/``, so an interrupted audit scores only the
batches without a part. At the end the p-values of all parts give the Benjamini-Hochberg q-values
(``scipy.stats.false_discovery_control``) and the parts are merged into the output, Parquet or JSON Lines.

Only the documents the regime judges enter that step: one shorter than ``n_min`` tokens, or with no scored
transition, keeps its p-value but is never flagged and its ``q_value`` is null. The exact test's p-values are
valid for every text under a random key and the plain z-test decides by its nominal p-value; a z-test regime whose
threshold is not z_alpha (recalibrated, or lowered to trade false positives for power) says that the normal tail
is not the null of its scores, so under it the audit computes no q-values and says why (:func:`_fdr_refusal`),
rather than borrow another test's p-values that its rows would not show.

With ``segments`` each document is also searched for watermarked spans (:mod:`chainmark.auditor.segments`, its
re-drawn keys seeded from the key and the document id), in two more columns, null for a document scored in
pieces. On Dask each batch is one task named ``chainmark-audit-<run>-<batch>``; the key reaches the workers in a
worker plugin, never in a task's name or arguments. Parquet needs ``pyarrow`` and a cluster ``dask[distributed]``
(the ``audit`` extra).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..config import ChainMarkConfig, takes_config
from ..detection import valid_transitions
from ..jsonio import atomic_write, atomic_write_json, to_jsonable
from ..partition import states_of
from ..significance import transition_statistics
from ..verdict import decide
from .corpus_input import AuditError, Batch, CorpusReading, corpus_batches, pyarrow_parquet, read_batch
from .rates import clopper_pearson
from .regime import Regime
from .stream import PIECE_CHARS, detect_text_stream, ids_batch

#: Columns of an audit's output, in order, with their Arrow types (for Parquet).
_COLUMNS = {"doc_id": "string", "n_tokens": "int64", "n_transitions": "int64", "n_valid": "int64",
            "phi": "float64", "z": "float64", "p_value": "float64", "test": "string", "flagged": "bool",
            "repeated_pair_share": "float64", "q_value": "float64"}
#: The columns ``segments=`` adds: the watermarked spans found in the document (a JSON list of
#: ``[start, end, p_value]`` in token positions) and the document's family-wise p-value of the scan.
_SEGMENT_COLUMNS = {"segments": "string", "segments_p_value": "float64"}
#: The columns :func:`score_many` computes, in the order a long document's streamed result gives them.
_SCORES = ("n_tokens", "n_transitions", "n_valid", "phi", "z", "p_value", "repeated_pair_share")
#: Format tag of a part folder's manifest.
_MANIFEST_FORMAT = "chainmark-audit-parts/1"

_TOKENIZERS: dict[tuple[str | None, str | None], Any] = {}


def _tokenizer(settings: Regime) -> Any:
    """The tokenizer, loaded once per process (each Dask worker is one)."""
    key = (settings.tokenizer, settings.tokenizer_revision)
    if key not in _TOKENIZERS:
        from .tokenizer import load_tokenizer

        _TOKENIZERS[key] = load_tokenizer(settings.tokenizer, settings.tokenizer_revision)
    return _TOKENIZERS[key]


def _prepare_batch(batch: Batch, settings: Regime) -> tuple[list[tuple[str, str]], dict[int, np.ndarray]]:
    """A batch read and tokenized: its documents, and the token ids of those short enough to tokenize whole.
    The tokenizers library releases the GIL, so the next batch can be prepared in a thread meanwhile."""
    docs = [(doc_id, settings.text_preparation.apply(text)) for doc_id, text in read_batch(batch)]
    short = [i for i, (_, text) in enumerate(docs) if len(text) <= PIECE_CHARS]
    encoded = ids_batch(_tokenizer(settings), [docs[i][1] for i in short])
    return docs, {i: np.asarray(ids, dtype=np.int64) for i, ids in zip(short, encoded)}


def _finish_batch(prepared: tuple[list[tuple[str, str]], dict[int, np.ndarray]], settings: Regime,
                  key: bytes, segments: int | None) -> dict[str, list]:
    """A prepared batch's rows (every column but the q-value) in its document order, decided by the regime
    (its test, threshold and n_min); with ``segments`` (a number of re-drawn keys) also each document's spans."""
    docs, encoded = prepared
    tokenizer = _tokenizer(settings)
    vocab = len(tokenizer)
    config = settings.config(key)
    test = settings.effective_test
    order = sorted(encoded)
    columns = score_many([encoded[i] for i in order], config, test, vocab)
    full = {name: np.zeros(len(docs), dtype=values.dtype) for name, values in columns.items()}
    for name, values in columns.items():
        full[name][order] = values
    for i, (_, text) in enumerate(docs):
        if i not in encoded:  # a long document: in pieces, in bounded memory
            r, share = detect_text_stream([text], tokenizer, config, settings.alpha, test=test, vocab_size=vocab)
            for name, value in zip(_SCORES, (r.n_tokens, r.n_scored, r.n_hits, r.phi, r.z, r.p_value, share)):
                full[name][i] = value
    too_short = _too_short(full["n_tokens"], full["n_transitions"], settings.n_min)
    threshold = None if settings.exact else settings.threshold
    flagged = ~too_short & decide(z=full["z"], p_value=full["p_value"], alpha=settings.alpha, threshold=threshold)
    rows = {name: full[name].tolist() for name in full}
    rows.update(doc_id=[doc_id for doc_id, _ in docs], test=[test] * len(docs), flagged=flagged.tolist())
    if segments is not None:
        rows.update(_segment_rows(docs, encoded, config, settings.alpha, segments))
    return {name: rows[name] for name in _columns(segments) if name != "q_value"}


def _columns(segments: int | None) -> dict[str, str]:
    return {**_COLUMNS, **_SEGMENT_COLUMNS} if segments is not None else _COLUMNS


def _segment_rows(docs: Sequence[tuple[str, str]], encoded: dict[int, np.ndarray], config: ChainMarkConfig,
                  alpha: float, draws: int) -> dict[str, list]:
    """Each document's spans by the window scan, its re-drawn keys seeded from the key and the document id; a
    document scored in pieces is not searched (None)."""
    from ..randomisation import key_seed
    from .segments import detect_segments

    spans: list[str | None] = []
    p_values: list[float | None] = []
    for i, (doc_id, _) in enumerate(docs):
        res = None if i not in encoded else detect_segments(encoded[i], config, alpha=alpha, draws=draws,
                                                            seed=key_seed(config.key, doc_id))
        spans.append(None if res is None else json.dumps([[s.start, s.end, s.p_value] for s in res.segments]))
        p_values.append(None if res is None else res.p_value)
    return {"segments": spans, "segments_p_value": p_values}


def _too_short(n_tokens: Any, n_transitions: Any, n_min: int | None) -> np.ndarray:
    """Rows the regime does not judge (never flagged, never in the FDR step): no scored transition, or fewer
    tokens than ``n_min`` (:meth:`chainmark.auditor.regime.Regime.too_short`, for columns)."""
    return (np.asarray(n_transitions) < 1) | (np.asarray(n_tokens) < (n_min or 0))


def _fdr_refusal(settings: Regime) -> str | None:
    """Why an audit under ``settings`` computes no q-values (a z-test regime that carries a ``recalibration`` or
    decides by a threshold other than z_alpha: see the module docstring), or None when it computes them."""
    if settings.exact:
        return None
    threshold, za = settings.threshold, settings.z_alpha
    moved = threshold is not None and not math.isclose(threshold, za, rel_tol=1e-9, abs_tol=1e-12)
    if not moved and not settings.recalibration:
        return None
    if settings.recalibration:
        method = settings.recalibration.get("method")
        source = "recalibrated on a null corpus" + (f" by the {method} recipe" if isinstance(method, str) else "")
    elif settings.trades_fpr_for_power and threshold is not None and threshold < za:
        source = "lowered to trade false positives for power"
    else:
        source = "chosen by the regime"
    cut = f"z > {threshold:.4g}" if threshold is not None else f"z > z_alpha = {za:.4g}"
    return (f"the {settings.effective_test} test here flags {cut}, a threshold {source}, not z_alpha = {za:.4g} "
            f"at alpha = {settings.alpha:g}; so the normal tail's p-values are not the scale this regime decides "
            "by, and Benjamini-Hochberg on them would not control the FDR. Audit with --test exact for q-values "
            "(its p-values are valid for every text under a random key)")


@takes_config()
def score_many(texts: Sequence[np.ndarray], config: ChainMarkConfig, test: str,
               vocab_size: int) -> dict[str, np.ndarray]:
    """:func:`~chainmark.detection.detect` under ``config`` on each of many token-id arrays, in one vectorised pass
    over their concatenation: columns n_tokens, n_transitions, n_valid, phi, z, p_value (computed with the
    detector's own operations in its order, so bit for bit the same) and each text's repeated_pair_share."""
    topology = config.topo
    count = len(texts)
    lengths = np.array([t.size for t in texts], dtype=np.int64)
    flat = np.concatenate(texts) if lengths.sum() else np.zeros(0, dtype=np.int64)
    doc = np.repeat(np.arange(count, dtype=np.int64), lengths)
    states = states_of(flat, config.key, topology.S, vocab_size)  # checks every id against the vocabulary
    within = doc[:-1] == doc[1:]  # a transition inside one text (not from one text into the next)
    valid = valid_transitions(states, topology) & within
    tdoc = doc[:-1]
    pairs = (tdoc * vocab_size + flat[:-1]) * vocab_size + flat[1:]  # (text, token, next token) as one code
    first_pair = np.zeros(pairs.size, dtype=bool)
    first_pair[np.unique(np.where(within, pairs, -1), return_index=True)[1]] = True
    first_pair &= within
    if test == "exact":  # a transition into a token the text has not used before
        fresh = np.zeros(flat.size, dtype=bool)
        fresh[np.unique(doc * vocab_size + flat, return_index=True)[1]] = True
        mask = fresh[1:] & within
    elif test == "distinct":
        mask = first_pair
    else:
        mask = within
    m = np.bincount(tdoc[mask], minlength=count)
    c = np.bincount(tdoc[mask & valid], minlength=count)
    distinct = np.bincount(tdoc[first_pair], minlength=count)
    phi, z, p = transition_statistics(c, m, topology.p0, test)
    share = np.zeros(count)
    long_enough = lengths >= 2
    share[long_enough] = 1.0 - distinct[long_enough] / (lengths[long_enough] - 1)
    return {"n_tokens": lengths, "n_transitions": m.astype(np.int64), "n_valid": c.astype(np.int64), "phi": phi,
            "z": z, "p_value": p, "repeated_pair_share": share}


@dataclass
class AuditSummary:
    """What the auditor publishes about one audit (no key): counts, rates with intervals, throughput."""

    documents: int
    tokens: int
    flagged: int
    flagged_low: float
    flagged_high: float
    discoveries: int | None  # None when the audit computes no q-values (fdr_refused says why)
    fdr: float
    alpha: float
    test: str
    key_fingerprint: str
    batches_scored: int
    batches_resumed: int
    seconds: float
    output: str
    extra: dict = field(default_factory=dict)
    #: Documents whose p-values entered the Benjamini-Hochberg step (0 when no q-values were computed).
    fdr_documents: int = 0
    #: Documents shorter than the regime's n_min tokens, and (of the others) those with no scored transition:
    #: not judged, q_value null, never a discovery.
    below_n_min: int = 0
    unscored: int = 0
    n_min: int | None = None
    #: Why no q-values were computed (:func:`_fdr_refusal`), or None.
    fdr_refused: str | None = None

    def lines(self) -> list[str]:
        """The summary as the command line prints it."""
        rate = self.flagged / self.documents if self.documents else 0.0
        scoring = max(self.extra["scoring_seconds"], 1e-9)
        short = f"{self.below_n_min:,} below n_min = {self.n_min} tokens" if self.n_min else ""
        short += (", " if short else "") + f"{self.unscored:,} with no scored transition"
        if self.fdr_refused is not None:
            fdr = [f"discoveries at FDR {self.fdr:g}: not computed (every q_value is null): {self.fdr_refused}",
                   f"FDR step: no document entered it ({self.below_n_min + self.unscored:,} too short to judge: "
                   f"{short})"]
        else:
            fdr = [f"discoveries at FDR {self.fdr:g} (Benjamini-Hochberg q <= {self.fdr:g}): {self.discoveries:,}",
                   f"FDR step: {self.fdr_documents:,} documents entered it; "
                   f"{self.below_n_min + self.unscored:,} too short to judge stayed out ({short}; their q_value "
                   "is null)"]
        return [
            f"audited {self.documents:,} documents ({self.tokens:,} tokens) with the {self.test} test, key "
            f"{self.key_fingerprint}",
            f"flagged at alpha = {self.alpha:g}: {self.flagged:,} ({100 * rate:.2f}% "
            f"[{100 * self.flagged_low:.2f}, {100 * self.flagged_high:.2f}])",
            *fdr,
            f"{self.batches_scored} batch(es) scored now, {self.batches_resumed} resumed from an earlier run; "
            f"{self.seconds:.1f} s in all",
            f"throughput: {self.extra['scored_documents'] / scoring:,.0f} documents/s, "
            f"{self.extra['scored_tokens'] / scoring:,.0f} tokens/s (the batches scored now)",
            f"wrote {self.output}",
        ]


def parts_folder(out: str | os.PathLike) -> Path:
    """Where an audit writing ``out`` keeps its part files until it is complete."""
    out = Path(out)
    return out.with_name(out.name + ".parts")


def _manifest(batches: Sequence[Batch], settings: Regime, source: str, reading: CorpusReading,
              segments: int | None) -> dict[str, Any]:
    """What must match for an earlier run's parts to be resumed: the corpus (its files' sizes and times), the
    regime, the reading and the segment search."""
    files = sorted({b.path for b in batches} | {str(Path(b.path) / n) for b in batches for n in b.names})
    stats = [[f, os.stat(f).st_size, os.stat(f).st_mtime_ns] for f in files if Path(f).is_file()]
    manifest = {"format": _MANIFEST_FORMAT, "source": str(source), "regime": to_jsonable(dataclasses.asdict(settings)),
                "batches": len(batches), "batch_docs": reading.batch_docs, "text_field": batches[0].text_field,
                "id_field": batches[0].id_field, "files": stats}
    return manifest if segments is None else {**manifest, "segments_draws": segments}


@dataclass(frozen=True)
class AuditExecution:
    """Where and how an audit runs; nothing here changes a row of its output.

    ``scheduler`` None scores on this process; ``"local"`` starts a Dask cluster of ``workers`` processes
    on this machine (None: one per CPU); any other value is the address of a running Dask scheduler.
    ``progress(done, total)`` is called after each batch. ``tokenizer``, when given, is the regime's
    tokenizer already loaded (this process then does not load it again).
    """

    scheduler: str | None = None
    workers: int | None = None
    progress: Callable[[int, int], None] | None = None
    tokenizer: Any = None

    def __post_init__(self) -> None:
        if self.scheduler is not None and not isinstance(self.scheduler, str):
            raise TypeError(f"scheduler must be None, 'local' or a scheduler's address, got "
                            f"{type(self.scheduler).__name__}")
        if self.workers is not None and (type(self.workers) is not int or self.workers < 1):
            raise ValueError(f"workers must be a positive integer or None, got {self.workers!r}")
        if self.progress is not None and not callable(self.progress):
            raise TypeError(f"progress must be a callable progress(done, total) or None, got "
                            f"{type(self.progress).__name__}")


def run_audit(source: str | os.PathLike, out: str | os.PathLike, key: bytes, settings: Regime,
              reading: CorpusReading = CorpusReading(), fdr: float = 0.01, segments: int | None = None,
              execution: AuditExecution = AuditExecution()) -> AuditSummary:
    """Audit ``source`` into ``out`` (``.parquet`` or ``.jsonl``) under ``key`` and the regime ``settings``,
    resuming the parts an earlier run left; ``fdr`` is the false discovery rate of the discoveries counted.
    ``segments`` (a number of re-drawn keys, at least 1/alpha - 1) also searches every document for watermarked
    spans. :class:`AuditError` for a problem with the corpus or the output the caller can fix.
    """
    for name, value, kind in (("settings", settings, Regime), ("reading", reading, CorpusReading),
                              ("execution", execution, AuditExecution)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be {'an' if name == 'execution' else 'a'} {kind.__name__}, got "
                            f"{type(value).__name__}")
    if segments is not None and (isinstance(segments, bool) or not isinstance(segments, int)
                                 or (segments + 1) * settings.alpha < 1):
        raise AuditError(f"segments must be a number of re-drawn keys of at least {math.ceil(1 / settings.alpha) - 1} "
                         f"(1/alpha - 1), got {segments!r}")
    if execution.tokenizer is not None:
        _TOKENIZERS[(settings.tokenizer, settings.tokenizer_revision)] = execution.tokenizer
    start = time.perf_counter()
    out = Path(out)
    if out.suffix not in (".parquet", ".jsonl"):
        raise AuditError(f"{out}: the output is a .parquet or .jsonl file")
    if out.exists():
        raise AuditError(f"{out} exists; refusing to overwrite an audit (choose another output)")
    if not (0 < fdr < 1):
        raise AuditError(f"fdr must lie in (0, 1), got {fdr!r}")
    if out.suffix == ".parquet":
        pyarrow_parquet()
    batches = corpus_batches(source, reading)
    if not batches:
        raise AuditError(f"{source}: no documents")
    parts = parts_folder(out)
    _open_parts(parts, _manifest(batches, settings, str(source), reading, segments))
    todo = [b for b in batches if not _part(parts, b.index).exists()]
    done = resumed = len(batches) - len(todo)
    if execution.progress:
        execution.progress(done, len(batches))
    scored_docs = scored_tokens = 0
    scoring = time.perf_counter()
    for index, rows in _score_all(todo, settings, key, execution, segments):
        atomic_write(_part(parts, index), json.dumps(rows, allow_nan=False))
        scored_docs += len(rows["doc_id"])
        scored_tokens += sum(rows["n_tokens"])
        done += 1
        if execution.progress:
            execution.progress(done, len(batches))
    scoring = time.perf_counter() - scoring
    refused = _fdr_refusal(settings)
    merged = _merge(parts, len(batches), out, fdr, settings.n_min, refused is None)
    low, high = clopper_pearson(merged["flagged"], merged["documents"])
    shutil.rmtree(parts)
    return AuditSummary(merged["documents"], merged["tokens"], merged["flagged"], low, high, merged["discoveries"],
                        fdr, settings.alpha, settings.effective_test, settings.key_fingerprint, len(todo), resumed,
                        time.perf_counter() - start, str(out),
                        {"scored_documents": scored_docs, "scored_tokens": scored_tokens, "scoring_seconds": scoring},
                        fdr_documents=merged["fdr_documents"], below_n_min=merged["below_n_min"],
                        unscored=merged["unscored"], n_min=settings.n_min, fdr_refused=refused)


def _open_parts(parts: Path, manifest: dict[str, Any]) -> None:
    """Create the part folder with its manifest, or check that the one there holds parts of this same audit."""
    if not parts.exists():
        parts.mkdir(parents=True, mode=0o700)
        atomic_write_json(parts / "manifest.json", manifest)
        return
    try:
        previous = json.loads((parts / "manifest.json").read_text("utf-8"))
    except (OSError, ValueError):
        previous = None
    if previous != json.loads(json.dumps(manifest)):
        raise AuditError(f"{parts} holds parts of another audit (another corpus, key or settings); delete it "
                         "or choose another output")


def _part(parts: Path, index: int) -> Path:
    return parts / f"part-{index:07d}.json"


def _read_part(parts: Path, index: int) -> dict[str, list]:
    return json.loads(_part(parts, index).read_text("utf-8"))


def _merge(parts: Path, n_batches: int, out: Path, fdr: float, n_min: int | None, with_q: bool) -> dict[str, Any]:
    """q-values from the p-values of every part's judged documents (those :func:`_too_short` leaves in; none
    without ``with_q``), then the rows to ``out`` part by part (one part in memory); the counts."""
    from scipy.stats import false_discovery_control

    kept: dict[str, list[np.ndarray]] = {"p_value": [], "n_tokens": [], "n_transitions": []}
    for i in range(n_batches):
        columns = _read_part(parts, i)
        for name, arrays in kept.items():
            arrays.append(np.asarray(columns[name], dtype=float if name == "p_value" else np.int64))
    p, n_tokens, n_transitions = (np.concatenate(arrays) for arrays in kept.values())
    below = n_tokens < (n_min or 0)
    short = _too_short(n_tokens, n_transitions, n_min)
    judged = ~short & with_q
    q = np.full(p.size, np.nan)  # NaN marks "no q-value" here; the rows get None (JSON null, a Parquet null)
    if judged.any():
        q[judged] = false_discovery_control(p[judged], method="bh")
    del kept, n_tokens, n_transitions
    tmp = out.with_name(out.name + ".tmp")
    tokens = flagged = position = 0
    writer = None
    try:
        with open(tmp, "w", encoding="utf-8") if out.suffix == ".jsonl" else contextlib.nullcontext() as fh:
            for i in range(n_batches):
                columns = _read_part(parts, i)
                names = _columns(0 if "segments" in columns else None)
                size = len(columns["doc_id"])
                columns["q_value"] = [None if math.isnan(v) else v for v in q[position:position + size].tolist()]
                position += size
                tokens += sum(columns["n_tokens"])
                flagged += sum(columns["flagged"])
                if out.suffix == ".jsonl":
                    fh.writelines(json.dumps(dict(zip(names, values)), allow_nan=False) + "\n"
                                  for values in zip(*(columns[c] for c in names)))
                else:
                    writer = _write_parquet_columns(writer, tmp, columns, names)
        if writer is not None:
            writer.close()
            writer = None
        os.replace(tmp, out)
    finally:
        if writer is not None:
            writer.close()
        if tmp.exists():
            tmp.unlink()
    return {"documents": int(p.size), "tokens": tokens, "flagged": flagged,
            "discoveries": int(np.count_nonzero(q[judged] <= fdr)) if with_q else None,
            "fdr_documents": int(np.count_nonzero(judged)), "below_n_min": int(np.count_nonzero(below)),
            "unscored": int(np.count_nonzero(short & ~below))}


def _write_parquet_columns(writer: Any, path: Path, columns: dict[str, list], names: dict[str, str]) -> Any:
    """One part's rows appended to the Parquet file at ``path`` (its writer opened on the first part)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.type_for_alias(kind)) for name, kind in names.items()])
    table = pa.Table.from_pydict({c: columns[c] for c in schema.names}, schema=schema)
    if writer is None:
        writer = pq.ParquetWriter(path, schema)
    writer.write_table(table)
    return writer


def read_audit(path: str | os.PathLike) -> list[dict[str, Any]]:
    """An audit's output (Parquet or JSON Lines) as a list of rows."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    return pyarrow_parquet().read_table(path).to_pylist()


def _score_all(batches: Sequence[Batch], settings: Regime, key: bytes, execution: AuditExecution,
               segments: int | None) -> Iterator[tuple[int, dict[str, list]]]:
    """(batch index, rows) for every batch, in completion order."""
    if execution.scheduler is not None:
        yield from _score_on_dask(batches, settings, key, execution, segments)
        return
    from concurrent.futures import ThreadPoolExecutor

    # read and tokenize the next batch in a thread while this one is scored
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chainmark-audit-read") as pool:
        ahead = pool.submit(_prepare_batch, batches[0], settings) if batches else None
        for n, batch in enumerate(batches):
            prepared = ahead.result()
            ahead = pool.submit(_prepare_batch, batches[n + 1], settings) if n + 1 < len(batches) else None
            yield batch.index, _finish_batch(prepared, settings, key, segments)


def _score_on_dask(batches: Sequence[Batch], settings: Regime, key: bytes, execution: AuditExecution,
                   segments: int | None) -> Iterator[tuple[int, dict[str, list]]]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise AuditError("a Dask scheduler needs the audit extra: pip install 'chainmark[audit]' "
                         "(or audit on this process with --scheduler none)") from None
    cluster = None
    if execution.scheduler == "local":
        cluster = LocalCluster(n_workers=execution.workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=None, silence_logs=40)
    client = Client(cluster if cluster is not None else execution.scheduler)
    try:
        client.register_plugin(_key_plugin(key, settings.key_fingerprint),
                               name=f"chainmark-audit-key-{settings.key_fingerprint}")
        run = os.urandom(4).hex()  # task names unique to this run, made of nothing secret
        futures = [client.submit(_score_on_worker, batch, settings, segments,
                                 key=f"chainmark-audit-{run}-{batch.index}", pure=False) for batch in batches]
        for future in as_completed(futures):
            index, rows = future.result()
            future.release()
            yield index, rows
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _key_plugin(key: bytes, fingerprint: str) -> Any:
    """A Dask worker plugin that hands the key to each worker once, outside every task's name and arguments
    (its repr, all a log or the dashboard could show, is the fingerprint)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class KeyPlugin(WorkerPlugin):
        def __init__(self) -> None:
            self._key = key
            self.fingerprint = fingerprint

        def setup(self, worker: Any) -> None:
            keys = getattr(worker, "_chainmark_keys", {})
            keys[self.fingerprint] = self._key
            worker._chainmark_keys = keys

        def __repr__(self) -> str:
            return f"KeyPlugin(fingerprint={self.fingerprint})"

    return KeyPlugin()


def _score_on_worker(batch: Batch, settings: Regime, segments: int | None) -> tuple[int, dict[str, list]]:
    from distributed import get_worker

    key = get_worker()._chainmark_keys[settings.key_fingerprint]
    return batch.index, _finish_batch(_prepare_batch(batch, settings), settings, key, segments)


__all__ = ["AuditExecution", "AuditSummary", "parts_folder", "read_audit", "run_audit", "score_many"]

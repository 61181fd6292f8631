"""Audit a corpus: every document scored under one key, one row each, in bounded memory, resumable, on one
process or a Dask cluster.

The corpus (a JSON Lines file, a Parquet file or folder, or a folder of ``.txt`` files) is divided into
*batches* of a fixed number of documents, each described by a small picklable :class:`Batch` (a byte range,
a row-group slice, a slice of the sorted file list). A batch is read, tokenized together (the
``tokenizers`` library spreads it over the cores), scored in one vectorised pass (:func:`score_many`; texts
longer than a piece go through :mod:`chainmark.stream`), and its rows are written to one part file in
``<out>.parts/``, atomically. An interrupted audit scores only the batches without a part file, so no
document is scored twice or lost. At the end the p-values of all parts give the Benjamini-Hochberg q-values
(``scipy.stats.false_discovery_control``) and the parts are merged into the output, Parquet or JSON Lines.

On Dask (``scheduler`` "local" for processes on this machine, or a scheduler's address) each batch is one
task named ``chainmark-audit-<run>-<batch>``; the key reaches the workers in a worker plugin, never in a
task's name or arguments, and each worker loads the tokenizer and builds the state table once. The rows
are those of one process, document for document. Parquet needs ``pyarrow`` and a cluster
``dask[distributed]`` (the ``audit`` extra); the scoring itself is the core's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from scipy.special import bdtrc, ndtr

from .detect import valid_transitions
from .partition import states_of
from .topology import Topology, resolve_topology
from .jsonio import atomic_write_json, to_jsonable
from .regime import Regime
from .verdict import decide
from .stream import PIECE_CHARS, detect_text_stream, ids_batch

#: Columns of an audit's output, in order.
COLUMNS = ("doc_id", "n_tokens", "n_transitions", "n_valid", "phi", "z", "p_value", "test", "flagged",
           "repeated_pair_share", "q_value")
#: Documents per batch (one part file, one task).
BATCH_DOCS = 1000
#: Format tag of a part folder's manifest.
MANIFEST_FORMAT = "chainmark-audit-parts/1"


class AuditError(ValueError):
    """A problem with the corpus or the output the caller can fix (the command line exits with code 2)."""


@dataclass(frozen=True)
class Batch:
    """One batch of a corpus: where its documents are, never the documents themselves."""

    index: int
    kind: str  # "jsonl", "parquet" or "txt"
    path: str
    start: int = 0  # jsonl: byte offset; parquet: row offset in the row group
    stop: int = 0  # jsonl: byte offset; parquet: row offset in the row group
    first: int = 0  # jsonl: number of the first line (1-based); parquet: row group
    names: tuple[str, ...] = ()  # txt: the files (relative to path)
    text_field: str = "text"
    id_field: str | None = None


# --------------------------------------------------------------------------- the corpus, as batches


def corpus_batches(source: str | os.PathLike, text_field: str = "text", id_field: str | None = None,
                   batch_docs: int = BATCH_DOCS) -> list[Batch]:
    """The batches of a corpus, in a fixed order: a JSON Lines file (``.jsonl``/``.json``), a Parquet file or a
    folder of them (``.parquet``), or a folder of ``.txt`` files (searched recursively, sorted)."""
    if isinstance(batch_docs, bool) or not isinstance(batch_docs, int) or batch_docs < 1:
        raise AuditError(f"batch_docs must be a positive integer, got {batch_docs!r}")
    path = Path(source)
    if not path.exists():
        raise AuditError(f"{path} does not exist")
    if path.is_dir():
        parquet = sorted(p for p in path.rglob("*.parquet") if p.is_file())
        texts = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if parquet and texts:
            raise AuditError(f"{path} holds both .parquet and .txt files; point the audit at one kind")
        if parquet:
            return _parquet_batches(parquet, text_field, id_field, batch_docs)
        if texts:
            names = [str(p.relative_to(path)) for p in texts]
            return [Batch(i, "txt", str(path), names=tuple(names[s:s + batch_docs]))
                    for i, s in enumerate(range(0, len(names), batch_docs))]
        raise AuditError(f"{path} holds no .parquet or .txt files")
    if path.suffix == ".parquet":
        return _parquet_batches([path], text_field, id_field, batch_docs)
    if path.suffix in (".jsonl", ".json", ".ndjson"):
        return _jsonl_batches(path, text_field, id_field, batch_docs)
    raise AuditError(f"{path}: not a corpus the audit reads (a .jsonl file, a .parquet file or folder, or a "
                     "folder of .txt files)")


def _jsonl_batches(path: Path, text_field: str, id_field: str | None, batch_docs: int) -> list[Batch]:
    """Byte ranges of ``batch_docs`` non-blank lines each, found in one pass over the file (lines end at \\n)."""
    batches, start, line_no, first, docs, offset = [], 0, 0, 1, 0, 0
    with open(path, "rb") as fh:
        for line in fh:  # binary iteration splits on b"\n" only, never on U+2028
            line_no += 1
            offset += len(line)
            if line.strip():
                docs += 1
            if docs == batch_docs:
                batches.append(Batch(len(batches), "jsonl", str(path), start, offset, first, (), text_field, id_field))
                start, first, docs = offset, line_no + 1, 0
    if docs:
        batches.append(Batch(len(batches), "jsonl", str(path), start, offset, first, (), text_field, id_field))
    return batches


def _parquet_batches(files: Sequence[Path], text_field: str, id_field: str | None, batch_docs: int) -> list[Batch]:
    pq = _pyarrow_parquet()
    batches = []
    for file in files:
        meta = pq.ParquetFile(file).metadata
        names = pq.ParquetFile(file).schema_arrow.names
        for name in (text_field, id_field):
            if name is not None and name not in names:
                raise AuditError(f"{file}: no column {name!r} (columns: {', '.join(names)})")
        for group in range(meta.num_row_groups):
            rows = meta.row_group(group).num_rows
            for s in range(0, rows, batch_docs):
                batches.append(Batch(len(batches), "parquet", str(file), s, min(s + batch_docs, rows), group, (),
                                     text_field, id_field))
    return batches


def read_batch(batch: Batch) -> list[tuple[str, str]]:
    """The (document id, text) pairs of one batch; :class:`AuditError` naming the document for a bad one."""
    if batch.kind == "txt":
        docs = []
        for name in batch.names:
            try:
                docs.append((name, (Path(batch.path) / name).read_text(encoding="utf-8")))
            except UnicodeDecodeError as exc:
                raise AuditError(f"{name} is not UTF-8 text (byte offset {exc.start})") from None
            except OSError as exc:
                raise AuditError(f"{name} cannot be read ({exc.strerror or type(exc).__name__})") from None
        return docs
    if batch.kind == "parquet":
        pq = _pyarrow_parquet()
        columns = [batch.text_field] + ([batch.id_field] if batch.id_field else [])
        table = pq.ParquetFile(batch.path).read_row_group(batch.first, columns=columns)
        table = table.slice(batch.start, batch.stop - batch.start)
        texts = table.column(batch.text_field).to_pylist()
        ids = (table.column(batch.id_field).to_pylist() if batch.id_field
               else [f"{Path(batch.path).name}:{batch.first}:{batch.start + i}" for i in range(len(texts))])
        for doc_id, text in zip(ids, texts):
            if not isinstance(text, str):
                raise AuditError(f"{batch.path}: document {doc_id}: column {batch.text_field!r} is not text "
                                 f"({type(text).__name__})")
        return [(str(i), t) for i, t in zip(ids, texts)]
    with open(batch.path, "rb") as fh:
        fh.seek(batch.start)
        raw = fh.read(batch.stop - batch.start)
    lines = [(number, line) for number, line in enumerate(raw.split(b"\n"), start=batch.first) if line.strip()]
    try:  # one parse for the whole batch (a C loop); line by line only to name a bad line
        records = json.loads(b"[" + b",".join(line for _, line in lines) + b"]")
    except (UnicodeDecodeError, ValueError, RecursionError):
        records = None
    docs = []
    for k, (number, line) in enumerate(lines):
        try:
            record = records[k] if records is not None else json.loads(line)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise AuditError(f"{batch.path} line {number}: not a JSON object") from None
        if not isinstance(record, dict):
            raise AuditError(f"{batch.path} line {number}: not a JSON object")
        if batch.text_field not in record:
            raise AuditError(f"{batch.path} line {number}: no field {batch.text_field!r} (fields: "
                             f"{', '.join(map(str, list(record)[:10]))}); name the text field with --text-field")
        text = record[batch.text_field]
        if not isinstance(text, str):
            raise AuditError(f"{batch.path} line {number}: field {batch.text_field!r} is not text "
                             f"({type(text).__name__})")
        if batch.id_field is not None and batch.id_field not in record:
            raise AuditError(f"{batch.path} line {number}: no field {batch.id_field!r}")
        docs.append((str(record[batch.id_field]) if batch.id_field else str(number), text))
    return docs


# --------------------------------------------------------------------------- scoring one batch


_TOKENIZERS: dict[tuple[str | None, str | None], Any] = {}


def _tokenizer(settings: Regime) -> Any:
    """The tokenizer, loaded once per process (each Dask worker is one)."""
    key = (settings.tokenizer, settings.tokenizer_revision)
    if key not in _TOKENIZERS:
        from .tokenizer import load_tokenizer

        _TOKENIZERS[key] = load_tokenizer(settings.tokenizer, settings.tokenizer_revision)
    return _TOKENIZERS[key]


def score_batch(batch: Batch, settings: Regime, key: bytes) -> dict[str, list]:
    """The rows of one batch (columns of :data:`COLUMNS` but the q-value), in the batch's document order,
    decided by the regime (``settings``: its test, threshold and n_min)."""
    return finish_batch(prepare_batch(batch, settings), settings, key)


def prepare_batch(batch: Batch, settings: Regime) -> tuple[list[tuple[str, str]], dict[int, np.ndarray]]:
    """A batch read and tokenized: its documents, and the token ids of those short enough to tokenize whole.

    The tokenizers library spreads the batch over the cores and releases the GIL meanwhile, so the next batch
    can be prepared in a thread while this one is scored.
    """
    docs = read_batch(batch)
    tokenizer = _tokenizer(settings)
    short = [i for i, (_, text) in enumerate(docs) if len(text) <= PIECE_CHARS]
    texts = [docs[i][1] for i in short]
    encoded = [np.asarray(ids, dtype=np.int64) for ids in ids_batch(tokenizer, texts)]
    return docs, dict(zip(short, encoded))


def finish_batch(prepared: tuple[list[tuple[str, str]], dict[int, np.ndarray]], settings: Regime,
                 key: bytes) -> dict[str, list]:
    """Score a prepared batch (:func:`prepare_batch`) into its rows, decided by the regime."""
    docs, encoded = prepared
    tokenizer = _tokenizer(settings)
    vocab = len(tokenizer)
    topo = resolve_topology(settings.topology, settings.S)
    test = settings.effective_test
    order = sorted(encoded)
    columns = score_many([encoded[i] for i in order], key, topo, test, vocab)
    full = {name: np.zeros(len(docs), dtype=values.dtype) for name, values in columns.items()}
    for name, values in columns.items():
        full[name][order] = values
    for i, (_, text) in enumerate(docs):
        if i not in encoded:  # a long document: in pieces, in bounded memory
            r, share = detect_text_stream([text], tokenizer, key, S=settings.S, topology=topo, alpha=settings.alpha,
                                          test=test, vocab_size=vocab)
            for name, value in zip(("n_tokens", "n_transitions", "n_valid", "phi", "z", "p_value",
                                    "repeated_pair_share"),
                                   (r.n_tokens, r.n_scored, r.n_hits, r.phi, r.z, r.p_value, share)):
                full[name][i] = value
    too_short = (full["n_transitions"] < 1) | (full["n_tokens"] < (settings.n_min or 0))
    threshold = None if settings.exact else settings.threshold
    flagged = ~too_short & decide(z=full["z"], p_value=full["p_value"], alpha=settings.alpha, threshold=threshold)
    rows = {name: full[name].tolist() for name in full}
    rows.update(doc_id=[doc_id for doc_id, _ in docs], test=[test] * len(docs), flagged=flagged.tolist())
    return {name: rows[name] for name in COLUMNS if name != "q_value"}


def score_many(texts: Sequence[np.ndarray], key: bytes, topology: Topology, test: str,
               vocab_size: int) -> dict[str, np.ndarray]:
    """:func:`~chainmark.detect.detect` on each of many token-id arrays, in one vectorised pass over their
    concatenation: columns n_tokens, n_transitions, n_valid, phi, z, p_value (computed with the detector's
    own operations in its order, so bit for bit the same) and each text's repeated_pair_share."""
    count = len(texts)
    lengths = np.array([t.size for t in texts], dtype=np.int64)
    flat = np.concatenate(texts) if lengths.sum() else np.zeros(0, dtype=np.int64)
    doc = np.repeat(np.arange(count, dtype=np.int64), lengths)
    states = states_of(flat, key, topology.S, vocab_size)  # checks every id against the vocabulary
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
    p0 = topology.p0
    scored = m > 0
    phi = np.zeros(count)
    phi[scored] = c[scored] / m[scored]
    z = np.zeros(count)
    z[scored] = (phi[scored] - p0) / np.sqrt(p0 * (1.0 - p0) / m[scored])  # z_score's operations, in its order
    p = np.ones(count)
    if test == "exact":
        hit = scored & (c > 0)
        p[hit] = bdtrc(c[hit] - 1, m[hit], p0)  # binomial_p_value
    else:
        p[scored] = ndtr(-z[scored])  # p_value
    share = np.zeros(count)
    long_enough = lengths >= 2
    share[long_enough] = 1.0 - distinct[long_enough] / (lengths[long_enough] - 1)
    return {"n_tokens": lengths, "n_transitions": m.astype(np.int64), "n_valid": c.astype(np.int64), "phi": phi,
            "z": z, "p_value": p, "repeated_pair_share": share}


# --------------------------------------------------------------------------- parts, resuming, the output


@dataclass
class AuditSummary:
    """What the auditor publishes about one audit (no key): counts, rates with intervals, throughput."""

    documents: int
    tokens: int
    flagged: int
    flagged_low: float
    flagged_high: float
    discoveries: int
    fdr: float
    alpha: float
    test: str
    key_fingerprint: str
    batches_scored: int
    batches_resumed: int
    seconds: float
    output: str
    extra: dict = field(default_factory=dict)

    def lines(self) -> list[str]:
        rate = self.flagged / self.documents if self.documents else 0.0
        return [
            f"audited {self.documents:,} documents ({self.tokens:,} tokens) with the {self.test} test, key "
            f"{self.key_fingerprint}",
            f"flagged at alpha = {self.alpha:g}: {self.flagged:,} ({100 * rate:.2f}% "
            f"[{100 * self.flagged_low:.2f}, {100 * self.flagged_high:.2f}])",
            f"discoveries at FDR {self.fdr:g} (Benjamini-Hochberg q <= {self.fdr:g}): {self.discoveries:,}",
            f"{self.batches_scored} batch(es) scored now, {self.batches_resumed} resumed from an earlier run; "
            f"{self.seconds:.1f} s in all",
            f"throughput: {self.extra['scored_documents'] / max(self.extra['scoring_seconds'], 1e-9):,.0f} "
            f"documents/s, {self.extra['scored_tokens'] / max(self.extra['scoring_seconds'], 1e-9):,.0f} tokens/s "
            "(the batches scored now)",
            f"wrote {self.output}",
        ]


def parts_folder(out: str | os.PathLike) -> Path:
    """Where an audit writing ``out`` keeps its part files until it is complete."""
    out = Path(out)
    return out.with_name(out.name + ".parts")


def _manifest(batches: Sequence[Batch], settings: Regime, source: str, batch_docs: int) -> dict[str, Any]:
    files = sorted({b.path for b in batches} | {str(Path(b.path) / n) for b in batches for n in b.names})
    stats = [[f, os.stat(f).st_size, os.stat(f).st_mtime_ns] for f in files if Path(f).is_file()]
    return {"format": MANIFEST_FORMAT, "source": str(source), "regime": to_jsonable(dataclasses.asdict(settings)),
            "batches": len(batches), "batch_docs": batch_docs, "text_field": batches[0].text_field,
            "id_field": batches[0].id_field, "files": stats}


def run_audit(source: str | os.PathLike, out: str | os.PathLike, key: bytes, settings: Regime,
              text_field: str = "text", id_field: str | None = None, batch_docs: int = BATCH_DOCS,
              fdr: float = 0.01, scheduler: str | None = None, workers: int | None = None,
              progress: Callable[[int, int], None] | None = None, tokenizer: Any = None) -> AuditSummary:
    """Audit ``source`` into ``out`` (``.parquet`` or ``.jsonl``); resumes the parts an earlier run left.

    ``scheduler`` None scores on this process; ``"local"`` starts a Dask cluster of ``workers`` processes
    on this machine; any other value is the address of a running Dask scheduler. ``progress(done, total)``
    is called after each batch. ``tokenizer``, when given, is the regime's tokenizer already loaded (this
    process then does not load it again).
    """
    if tokenizer is not None:
        _TOKENIZERS[(settings.tokenizer, settings.tokenizer_revision)] = tokenizer
    from .calibrate import clopper_pearson

    start = time.perf_counter()
    out = Path(out)
    if out.suffix not in (".parquet", ".jsonl"):
        raise AuditError(f"{out}: the output is a .parquet or .jsonl file")
    if out.exists():
        raise AuditError(f"{out} exists; refusing to overwrite an audit (choose another output)")
    if not (0 < fdr < 1):
        raise AuditError(f"fdr must lie in (0, 1), got {fdr!r}")
    if out.suffix == ".parquet":
        _pyarrow_parquet()
    batches = corpus_batches(source, text_field, id_field, batch_docs)
    if not batches:
        raise AuditError(f"{source}: no documents")
    parts = parts_folder(out)
    manifest = _manifest(batches, settings, str(source), batch_docs)
    if parts.exists():
        try:
            previous = json.loads((parts / "manifest.json").read_text("utf-8"))
        except (OSError, ValueError):
            previous = None
        if previous != json.loads(json.dumps(manifest)):
            raise AuditError(f"{parts} holds parts of another audit (another corpus, key or settings); delete it "
                             "or choose another output")
    else:
        parts.mkdir(parents=True, mode=0o700)
        atomic_write_json(parts / "manifest.json", manifest)
    todo = [b for b in batches if not _part(parts, b.index).exists()]
    resumed = len(batches) - len(todo)
    done = resumed
    if progress:
        progress(done, len(batches))
    scored_docs = scored_tokens = 0
    scoring = time.perf_counter()
    for index, rows in _score_all(todo, settings, key, scheduler, workers):
        _write_part(parts, index, rows)
        scored_docs += len(rows["doc_id"])
        scored_tokens += sum(rows["n_tokens"])
        done += 1
        if progress:
            progress(done, len(batches))
    scoring = time.perf_counter() - scoring
    documents, tokens, flagged, discoveries = _merge(parts, len(batches), out, fdr)
    low, high = clopper_pearson(flagged, documents)
    import shutil

    shutil.rmtree(parts)
    return AuditSummary(documents, tokens, flagged, low, high, discoveries, fdr, settings.alpha, settings.effective_test,
                        settings.key_fingerprint, len(todo), resumed, time.perf_counter() - start, str(out),
                        {"scored_documents": scored_docs, "scored_tokens": scored_tokens, "scoring_seconds": scoring})


def _part(parts: Path, index: int) -> Path:
    return parts / f"part-{index:07d}.json"


def _write_part(parts: Path, index: int, rows: dict[str, list]) -> None:
    """One batch's rows as one JSON object of columns (floats written exactly), under a temporary name, then
    renamed: a part file exists only once it is complete."""
    path = _part(parts, index)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({c: rows[c] for c in COLUMNS if c != "q_value"}, allow_nan=False))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_part(parts: Path, index: int) -> dict[str, list]:
    return json.loads(_part(parts, index).read_text("utf-8"))


def _merge(parts: Path, n_batches: int, out: Path, fdr: float) -> tuple[int, int, int, int]:
    """q-values from every part's p-values, then the rows to ``out`` part by part (one part in memory)."""
    from scipy.stats import false_discovery_control

    p = np.concatenate([np.asarray(_read_part(parts, i)["p_value"], dtype=float) for i in range(n_batches)])
    q = false_discovery_control(p, method="bh") if p.size else p
    tmp = out.with_name(out.name + ".tmp")
    tokens = flagged = position = 0
    writer = None
    try:
        with open(tmp, "w", encoding="utf-8") if out.suffix == ".jsonl" else contextlib.nullcontext() as fh:
            for i in range(n_batches):
                columns = _read_part(parts, i)
                size = len(columns["doc_id"])
                columns["q_value"] = q[position:position + size].tolist()
                position += size
                tokens += sum(columns["n_tokens"])
                flagged += sum(columns["flagged"])
                if out.suffix == ".jsonl":
                    fh.writelines(json.dumps(dict(zip(COLUMNS, values)), allow_nan=False) + "\n"
                                  for values in zip(*(columns[c] for c in COLUMNS)))
                else:
                    writer = _write_parquet_columns(writer, tmp, columns)
        if writer is not None:
            writer.close()
            writer = None
        os.replace(tmp, out)
    finally:
        if writer is not None:
            writer.close()
        if tmp.exists():
            tmp.unlink()
    return int(p.size), tokens, flagged, int(np.count_nonzero(q <= fdr))


def _write_parquet_columns(writer: Any, path: Path, columns: dict[str, list]) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("doc_id", pa.string()), ("n_tokens", pa.int64()), ("n_transitions", pa.int64()),
                        ("n_valid", pa.int64()), ("phi", pa.float64()), ("z", pa.float64()),
                        ("p_value", pa.float64()), ("test", pa.string()), ("flagged", pa.bool_()),
                        ("repeated_pair_share", pa.float64()), ("q_value", pa.float64())])
    table = pa.Table.from_pydict({c: columns[c] for c in COLUMNS}, schema=schema)
    if writer is None:
        writer = pq.ParquetWriter(path, schema)
    writer.write_table(table)
    return writer


def read_audit(path: str | os.PathLike) -> list[dict[str, Any]]:
    """An audit's output (Parquet or JSON Lines) as a list of rows."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    return _pyarrow_parquet().read_table(path).to_pylist()


# --------------------------------------------------------------------------- one process, or Dask


def _score_all(batches: Sequence[Batch], settings: Regime, key: bytes, scheduler: str | None,
               workers: int | None) -> Iterator[tuple[int, dict[str, list]]]:
    """(batch index, rows) for every batch, in completion order."""
    if scheduler is None:  # read and tokenize the next batch in a thread while this one is scored
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chainmark-audit-read") as pool:
            ahead = pool.submit(prepare_batch, batches[0], settings) if batches else None
            for n, batch in enumerate(batches):
                prepared = ahead.result()
                ahead = pool.submit(prepare_batch, batches[n + 1], settings) if n + 1 < len(batches) else None
                yield batch.index, finish_batch(prepared, settings, key)
        return
    yield from _score_on_dask(batches, settings, key, scheduler, workers)


def _score_on_dask(batches: Sequence[Batch], settings: Regime, key: bytes, scheduler: str,
                   workers: int | None) -> Iterator[tuple[int, dict[str, list]]]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise AuditError("a Dask scheduler needs the audit extra: pip install 'chainmark[audit]' "
                         "(or audit on this process with --scheduler none)") from None
    cluster = None
    if scheduler == "local":
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=40)
        client = Client(cluster)
    else:
        client = Client(scheduler)
    try:
        client.register_plugin(key_plugin(key, settings.key_fingerprint),
                               name=f"chainmark-audit-key-{settings.key_fingerprint}")
        run = os.urandom(4).hex()  # task names unique to this run, made of nothing secret
        futures = [client.submit(_score_on_worker, batch, settings, key=f"chainmark-audit-{run}-{batch.index}",
                                 pure=False) for batch in batches]
        for future in as_completed(futures):
            index, rows = future.result()
            future.release()
            yield index, rows
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def key_plugin(key: bytes, fingerprint: str) -> Any:
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


def _score_on_worker(batch: Batch, settings: Regime) -> tuple[int, dict[str, list]]:
    from distributed import get_worker

    key = get_worker()._chainmark_keys[settings.key_fingerprint]
    return batch.index, score_batch(batch, settings, key)


def _pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise AuditError("Parquet needs pyarrow: pip install 'chainmark[audit]' (or use .jsonl files)") from None
    return pq


__all__ = ["AuditError", "Regime", "AuditSummary", "BATCH_DOCS", "Batch", "COLUMNS",
           "corpus_batches", "key_plugin", "parts_folder", "read_audit", "finish_batch", "prepare_batch", "read_batch", "run_audit", "score_batch", "score_many"]

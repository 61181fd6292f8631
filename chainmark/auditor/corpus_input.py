"""The corpus a corpus audit reads: JSON Lines, Parquet or a folder of ``.txt`` files, as batches of documents.

A :class:`Batch` says where its documents are (a byte range, a row-group slice, a slice of a sorted file
list), never the documents themselves, so it is small and picklable for a Dask task; :func:`read_batch`
reads it. :mod:`chainmark.auditor.corpus` scores the batches.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence


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


@dataclass(frozen=True)
class CorpusReading:
    """How an audit reads its corpus: the field (JSON Lines) or column (Parquet) holding each document's
    text, the one holding its id (None: the line number, row position or file name), and the documents per
    batch (one part file, one task). A folder of ``.txt`` files uses only ``batch_docs``."""

    text_field: str = "text"
    id_field: str | None = None
    batch_docs: int = 1000

    def __post_init__(self) -> None:
        if not isinstance(self.text_field, str):
            raise TypeError(f"text_field must be a field name (a string), got {type(self.text_field).__name__}")
        if self.id_field is not None and not isinstance(self.id_field, str):
            raise TypeError(f"id_field must be a field name (a string) or None, got {type(self.id_field).__name__}")
        if isinstance(self.batch_docs, bool) or not isinstance(self.batch_docs, int) or self.batch_docs < 1:
            raise AuditError(f"batch_docs must be a positive integer, got {self.batch_docs!r}")


def corpus_batches(source: str | os.PathLike, reading: CorpusReading) -> list[Batch]:
    """The batches of a corpus, in a fixed order: a JSON Lines file (``.jsonl``/``.json``), a Parquet file or a
    folder of them (``.parquet``), or a folder of ``.txt`` files (searched recursively, sorted)."""
    path = Path(source)
    if not path.exists():
        raise AuditError(f"{path} does not exist")
    if path.is_dir():
        parquet = sorted(p for p in path.rglob("*.parquet") if p.is_file())
        texts = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if parquet and texts:
            raise AuditError(f"{path} holds both .parquet and .txt files; point the audit at one kind")
        if parquet:
            return _parquet_batches(parquet, reading)
        if texts:
            names = [str(p.relative_to(path)) for p in texts]
            size = reading.batch_docs
            return [Batch(i, "txt", str(path), names=tuple(names[s:s + size]))
                    for i, s in enumerate(range(0, len(names), size))]
        raise AuditError(f"{path} holds no .parquet or .txt files")
    if path.suffix == ".parquet":
        return _parquet_batches([path], reading)
    if path.suffix in (".jsonl", ".json", ".ndjson"):
        return _jsonl_batches(path, reading)
    raise AuditError(f"{path}: not a corpus the audit reads (a .jsonl file, a .parquet file or folder, or a "
                     "folder of .txt files)")


def _jsonl_batches(path: Path, reading: CorpusReading) -> list[Batch]:
    """Byte ranges of ``batch_docs`` non-blank lines each, found in one pass over the file (lines end at \\n)."""
    batches, start, line_no, first, docs, offset = [], 0, 0, 1, 0, 0
    fields = (reading.text_field, reading.id_field)
    with open(path, "rb") as fh:
        for line in fh:  # binary iteration splits on b"\n" only, never on U+2028
            line_no += 1
            offset += len(line)
            docs += bool(line.strip())
            if docs == reading.batch_docs:
                batches.append(Batch(len(batches), "jsonl", str(path), start, offset, first, (), *fields))
                start, first, docs = offset, line_no + 1, 0
    if docs:
        batches.append(Batch(len(batches), "jsonl", str(path), start, offset, first, (), *fields))
    return batches


def _parquet_batches(files: Sequence[Path], reading: CorpusReading) -> list[Batch]:
    pq = pyarrow_parquet()
    batches = []
    size, fields = reading.batch_docs, (reading.text_field, reading.id_field)
    for file in files:
        meta = pq.ParquetFile(file).metadata
        names = pq.ParquetFile(file).schema_arrow.names
        for name in fields:
            if name is not None and name not in names:
                raise AuditError(f"{file}: no column {name!r} (columns: {', '.join(names)})")
        for group in range(meta.num_row_groups):
            rows = meta.row_group(group).num_rows
            for s in range(0, rows, size):
                batches.append(Batch(len(batches), "parquet", str(file), s, min(s + size, rows), group, (), *fields))
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
        pq = pyarrow_parquet()
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


def pyarrow_parquet() -> Any:
    """pyarrow.parquet, or an AuditError saying how to install it (the `audit` extra)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise AuditError("Parquet needs pyarrow: pip install 'chainmark[audit]' (or use .jsonl files)") from None
    return pq


__all__ = ["AuditError", "Batch", "CorpusReading", "corpus_batches", "pyarrow_parquet", "read_batch"]

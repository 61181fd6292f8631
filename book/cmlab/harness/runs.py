"""Where runs live and how their records are stored: durable JSON lines, one writer per folder.

A run folder holds ``records.jsonl`` (one JSON line per record, appended with
``flush`` + ``fsync`` so that an interruption never loses or duplicates a
written record; a half-written last line is cut off before appending),
``run.json`` (the run's settings) and a lock file held by the one process
that writes there. Records hold each method's key *fingerprint*, never the
key: :class:`RecordWriter` refuses any line that contains a secret in any
common encoding.
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from chainmark.gates import Gate
from chainmark.jsonio import atomic_write, atomic_write_json, to_jsonable
from cmlab.harness.settings import RUNS_ENV, default_runs_dir  # noqa: F401  (where runs live: one definition, in settings)

__all__ = ["META_FILE", "RECORDS_FILE", "RecordWriter", "RunControl", "RunFolderBusy", "lock_run_folder",
           "read_records", "records_frame", "repair", "stored_gate", "write_meta"]


@dataclass(frozen=True)
class RunControl:
    """How a resumable run proceeds, nothing of which changes a record: a progress bar (``progress``) and an
    early stop after ``stop_after`` new records or batches (to demonstrate resuming)."""

    progress: bool = True
    stop_after: int | None = None

    def __post_init__(self) -> None:
        stop = self.stop_after
        if stop is not None and (isinstance(stop, bool) or not isinstance(stop, int) or stop < 0):
            raise ValueError(f"stop_after must be an integer >= 0 or None, got {stop!r}")


RECORDS_FILE = "records.jsonl"
META_FILE = "run.json"
#: Lock file of a run folder: held by the one process that writes there.
_LOCK_FILE = ".lock"


def stored_gate(path: str | os.PathLike, calibrate: Any, name: str = "gate") -> Any:
    """The gate stored in ``path/<name>.json``, or ``calibrate()``'s result, stored there first.

    A calibrated threshold comes from a sampled pilot run, which need not
    reproduce bit for bit on another machine (GPU kernels, thread counts);
    a resumed run must use the *same* tau as the records already written,
    so the first run stores it and later runs read it back.
    """
    file = Path(path) / f"{name}.json"
    if file.exists():
        data = json.loads(file.read_text("utf-8"))
        return Gate(data["kind"], float(data["tau"]), data.get("rho"))  # files before rho was kept: none
    gate = calibrate()
    if not isinstance(gate, Gate):
        raise TypeError(f"calibrate() must return a chainmark.gates.Gate, got {type(gate).__name__}")
    atomic_write_json(file, {"kind": gate.kind, "tau": float(gate.tau), "rho": gate.rho})
    return gate


# --------------------------------------------------------------------------- JSONL storage


def _secret_forms(secrets: Iterable[Any]) -> list[str]:
    """Text forms a secret could take in a JSON line (hex, base64, decimal, raw)."""
    forms: list[str] = []
    for s in secrets:
        if isinstance(s, int) and not isinstance(s, bool):
            forms.append(str(s))
            continue
        raw = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        forms += [raw.hex(), raw.hex().upper(), base64.b64encode(raw).decode(), repr(raw)[2:-1]]
        try:
            forms.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return [f for f in forms if len(f) >= 8]


def write_meta(path: str | os.PathLike, meta: Mapping[str, Any], secrets: Iterable[Any] = ()) -> None:
    """Write a run folder's ``run.json`` atomically; refuse it if it contains a secret in any common encoding."""
    text = json.dumps(to_jsonable(dict(meta)), indent=2, sort_keys=True, allow_nan=False)
    for form in _secret_forms(secrets):
        if form in text:
            raise RuntimeError("refusing to write run metadata that contains a secret key")
    atomic_write(Path(path) / META_FILE, text + "\n")


def repair(path: str | os.PathLike) -> int:
    """Cut a half-written last line (no trailing newline) off a JSONL file; return bytes removed."""
    path = Path(path)
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return 0
        # scan back to the last newline
        pos, chunk = size, 4096
        cut = 0
        while pos > 0:
            start = max(0, pos - chunk)
            fh.seek(start)
            block = fh.read(pos - start)
            idx = block.rfind(b"\n")
            if idx >= 0:
                cut = start + idx + 1
                break
            pos = start
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())
    return size - cut


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All complete records of a JSONL file; a half-written last line is ignored.

    A malformed line anywhere else is an error (it cannot come from an
    interruption, since the writer repairs the file before appending).
    """
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail is b"" when the file ends with a newline
    out = []
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {number} is not valid JSON ({exc})") from None
    del tail  # an unfinished record: ignored (and cut off by the writer)
    return out


class RecordWriter:
    """Append records to a JSONL file, one durable line at a time (flush + fsync)."""

    def __init__(self, path: str | os.PathLike, secrets: Iterable[Any] = ()):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair(self.path)
        self._forms = _secret_forms(secrets)
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Append ``record`` as one durable line; return it as written (JSON types, NaN as None)."""
        clean = to_jsonable(dict(record))
        line = json.dumps(clean, ensure_ascii=False, allow_nan=False)
        for form in self._forms:
            if form in line:
                raise RuntimeError("refusing to write a record that contains a secret key")
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        return clean

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------- one writer per folder


class RunFolderBusy(RuntimeError):
    """Another process is writing to this run folder (it holds the folder's lock)."""


@contextlib.contextmanager
def lock_run_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Hold the run folder's exclusive lock while the block runs; a second writer gets :class:`RunFolderBusy` at once.

    The lock (``filelock``, an OS-level lock on ``path/.lock``) is released
    when the block ends or the process dies, so a killed run never leaves
    its folder locked.
    """
    from filelock import FileLock, Timeout  # the generation extra: only a writer needs it

    path = Path(path)
    lock = FileLock(str(path / _LOCK_FILE))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunFolderBusy(f"{path} is being written by another process (it holds {path / _LOCK_FILE}); "
                            "wait for that run to finish, or give this one another folder") from None
    try:
        yield path
    finally:
        lock.release()


def records_frame(records: Sequence[Mapping[str, Any]]) -> Any:
    """One tidy row per (record, detector, condition): condition ``clean`` or an attack label."""
    import pandas as pd  # the generation extra: reading and writing records needs only the standard library

    rows = []
    for r in records:
        base = {"id": r["id"], "method": r["method"], "watermarked": r["watermarked"], "domain": r["domain"],
                "prompt_index": r["prompt_index"], "n_tokens": r["n_tokens"], "self_ppl": r["self_ppl"],
                "rho_realised": r["rho_realised"], "generate_s": r.get("seconds", {}).get("generate")}
        for det, res in r["detection"].items():
            rows.append({**base, "detector": det, "condition": "clean", "edit_fraction": 0.0,
                         "detect_s": r.get("seconds", {}).get(f"detect_{det}"),
                         **{k: res.get(k) for k in ("phi", "z", "p_value", "decision", "n_scored")}})
        for label, res in r.get("attacks", {}).items():
            rows.append({**base, "detector": r["method"], "condition": label,
                         "edit_fraction": res.get("edit_fraction"), "detect_s": None,
                         **{k: res.get(k) for k in ("phi", "z", "p_value", "decision", "n_scored")}})
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["z"] = frame["z"].astype(float)
    return frame

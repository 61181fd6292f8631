"""JSON-safe values and atomic file writes: the package's one serialiser and one writer.

Every record, run description, regime, widget payload and stored gate goes
through :func:`to_jsonable` (numpy scalars and arrays to Python, NaN and
infinities to ``null``, which JSON lacks), and every file that must never be
seen half-written goes through :func:`atomic_write`.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["atomic_write", "atomic_write_json", "to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """A JSON-safe copy: dict keys to str, tuples and arrays to lists, numpy scalars to
    Python, non-finite floats to None; anything else is returned as it is."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    return value


def atomic_write(path: str | os.PathLike, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Write ``data`` (text, or bytes as they are) to ``path`` so that a reader sees the old
    file or the whole new one.

    The text goes to a temporary file in the same folder (named after this
    process, so two writers never share one), is flushed to disk, then
    replaces ``path`` in one rename. Missing parent folders are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data.encode(encoding) if isinstance(data, str) else bytes(data))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def atomic_write_json(path: str | os.PathLike, value: Any, **dumps: Any) -> Path:
    """:func:`atomic_write` of ``json.dumps(to_jsonable(value), **dumps)`` with a final newline
    (``allow_nan=False``: the file is strict JSON)."""
    return atomic_write(path, json.dumps(to_jsonable(value), allow_nan=False, **dumps) + "\n")

"""Where the reference run lives and how it is stored: folders, shard files, the manifest, provenance.

Kept apart from running and reading so that the file format (one gzip JSON lines file per batch,
written whole) and the record of what produced each batch have one definition that both sides use.
"""
from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

from chainmark import __version__
from chainmark.auditor.tokenizer import DEFAULT_MODEL
from chainmark.jsonio import to_jsonable
from chainmark.keys import key_fingerprint
from cmlab.harness.settings import default_runs_dir, get_settings
from cmlab.harness.reference.compare import VERIFY_TOLERANCE
from cmlab.harness.reference.protocol import EXPERIMENTS, REFERENCE_LABEL, Cell, PromptBatch, Protocol, cells, reference_key

#: ``CHAINMARK_REFERENCE`` names another root folder (one sub-folder per model).
_REFERENCE_ENV = "CHAINMARK_REFERENCE"
MANIFEST = "manifest.json"
PROVENANCE = "provenance.jsonl"
#: The ``chainmark`` package folder: the embedded model's reference ships in its ``data/reference``.
_PACKAGE_DIR = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- where it lives


def _model_slug(model_name: str) -> str:
    return model_name.replace("/", "--")


def reference_dir(model_name: str | None = None) -> Path:
    """Folder of the reference run for ``model_name`` (default: the settings' model).

    ``$CHAINMARK_REFERENCE/<model>`` if set; the embedded default model's run
    ships inside the package (``chainmark/data/reference``); other models
    (Colab) go to ``runs/reference/<model>`` beside the book's runs.
    """
    model_name = model_name or get_settings().model
    env = os.environ.get(_REFERENCE_ENV, "").strip()
    if env:
        return Path(env).expanduser() / _model_slug(model_name)
    if model_name == DEFAULT_MODEL:
        return _PACKAGE_DIR / "data" / "reference" / _model_slug(model_name)
    return default_runs_dir() / "reference" / _model_slug(model_name)


def read_dir(model_name: str | None = None) -> Path:
    """The folder the reading functions use: the embedded model's committed reference by default.

    The chapters' reference sections always read the reference run of the
    embedded model, whatever ``CHAINMARK_MODEL`` the live run uses; a reader's
    own run (another model) is read only when its name is given.
    """
    return reference_dir(model_name or DEFAULT_MODEL)


# --------------------------------------------------------------------------- shard files


def shard_path(root: Path, cell: Cell, batch: PromptBatch) -> Path:
    return root / cell.experiment / cell.name / f"b{batch.index:03d}.jsonl.gz"


def encode_shard(records: Sequence[Mapping[str, Any]]) -> bytes:
    """A batch's records as the bytes of its shard: gzip-compressed JSON lines, reproducible (mtime 0)."""
    lines = "".join(json.dumps(to_jsonable(dict(r)), ensure_ascii=False, allow_nan=False) + "\n" for r in records)
    return gzip.compress(lines.encode("utf-8"), compresslevel=9, mtime=0)


def read_shard(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# --------------------------------------------------------------------------- provenance


def git_commit() -> str:
    """The commit of the package's checkout (``+dirty`` with uncommitted changes), or ``unknown``."""
    here = _PACKAGE_DIR
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        # uncommitted changes to the package's code; the reference's own (growing) records do not count
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)data/reference"], capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def weights_sha256(model_name: str) -> str | None:
    """SHA-256 of the embedded GGUF file (the default model), else None."""
    if model_name != DEFAULT_MODEL:
        return None
    from cmlab.harness.models import embedded_gguf_path

    h = hashlib.sha256()
    with open(embedded_gguf_path(), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def environment(model: Any) -> dict[str, Any]:
    """What a provenance line records of the machine: versions, commit, device, dtype, threads."""
    import torch
    import transformers

    param = next(model.parameters())
    return {"chainmark_version": __version__, "git_commit": git_commit(), "torch": torch.__version__,
            "transformers": transformers.__version__, "device": str(param.device),
            "device_name": (torch.cuda.get_device_name(param.device) if param.device.type == "cuda"
                            else _cpu_name()),
            "dtype": str(param.dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
            "python": platform.python_version()}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def read_provenance(path: Path) -> list[dict[str, Any]]:
    """The lines of a cell's ``provenance.jsonl`` (a line cut by an interruption is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text("utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by an interruption
            continue
    return out


def provenance_parts(root: Path, protocol: Protocol) -> dict[str, Any]:
    """Per experiment: what produced it (commits, versions, device, threads) and at what speed."""
    parts: dict[str, Any] = {}
    for experiment in EXPERIMENTS:
        prov = [p for c in cells(protocol, (experiment,))
                for p in read_provenance(root / experiment / c.name / PROVENANCE)]
        if not prov:
            continue
        seconds, tokens = sum(p["seconds"] for p in prov), sum(p["tokens"] for p in prov)
        parts[experiment] = {
            "batches": len(prov), "texts": sum(p["texts"] for p in prov), "tokens": tokens,
            "wall_seconds": round(seconds, 1), "tokens_per_second": round(tokens / seconds, 2) if seconds else None,
            **{k: sorted({str(p.get(k)) for p in prov}) for k in
               ("git_commit", "chainmark_version", "torch", "transformers", "device", "device_name", "dtype",
                "threads", "batch_size")},
            "first": min(p["finished"] for p in prov), "last": max(p["finished"] for p in prov)}
    return parts


# --------------------------------------------------------------------------- the manifest


def manifest_for(root: Path, protocol: Protocol, model_name: str) -> dict[str, Any]:
    """The manifest stored in ``root``, or the one a new run of ``protocol`` with ``model_name`` starts."""
    file = root / MANIFEST
    if file.exists():
        return json.loads(file.read_text("utf-8"))
    return {"format": "chainmark-reference/1", "model": model_name, "weights_sha256": weights_sha256(model_name),
            "key_label": REFERENCE_LABEL, "key_fingerprint": key_fingerprint(reference_key()),
            "protocol": protocol.describe(), "seeds": {"generation": protocol.seed, "attack": protocol.attack_seed,
                                                      "batch": "generation seed + batch index"},
            "created": utc_now(), "parts": {}, "verify_tolerance": json.loads(json.dumps(VERIFY_TOLERANCE))}


def utc_now() -> str:
    """The current time, UTC, to the second (ISO 8601): when a batch finished."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def protocol_differences(manifest: Mapping[str, Any], protocol: Protocol) -> list[str]:
    """Protocol fields that differ between the stored run and ``protocol``."""
    stored, now = manifest.get("protocol", {}), protocol.describe()
    return sorted(k for k in set(stored) | set(now) if stored.get(k) != now.get(k))


__all__ = ["MANIFEST", "PROVENANCE", "encode_shard", "environment", "git_commit", "manifest_for",
           "protocol_differences", "provenance_parts", "read_dir", "read_provenance", "read_shard", "reference_dir",
           "shard_path", "utc_now", "weights_sha256"]

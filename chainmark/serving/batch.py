"""ChainMark inside a serving engine: one batch, many requests, a key per account.

An inference server decodes many requests in one batch, and each account that
sends them should carry its own key (chapter 9.5 shows why: replies collected
under one shared key let an adversary steal the partition). This module is the
engine-independent half of the watermark's serving path:

* :class:`ServingConfig` is what the server is configured with: the folder of
  key files (one ``<key_id>.key`` per account, written by ``chainmark keygen``),
  the watermark's S, rho, gate kind and threshold tau, its topology, and what to
  do with a request that names no key (generate it unwatermarked, or refuse it).
  Keys never travel in a request or a log: a request names a key id.
* :class:`RequestWatermarks` holds which row of the engine's batch carries
  which request, and applies the watermark to a step's logits: rows are grouped
  by key, and each group goes through that key's
  :class:`~chainmark.embed.ChainMarkLogitsProcessor` in one call, so a reply
  served here is forced exactly as ``chainmark.generate`` would force it and
  ``chainmark detect`` with the account's key reads it.

The engine adapter (:mod:`chainmark.serving.vllm`) only translates vLLM's batch
updates into :meth:`RequestWatermarks.add`, :meth:`~RequestWatermarks.remove`
and :meth:`~RequestWatermarks.move`.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from ..auditor.keyfiles import read_key_file
from ..config import ChainMarkConfig
from ..embed import ChainMarkLogitsProcessor
from ..gates import Gate

__all__ = ["KEY_ID_ARG", "SERVING_ENV", "RequestWatermarks", "ServingConfig"]

#: The environment variable naming the server's configuration file (JSON, the fields of :class:`ServingConfig`).
SERVING_ENV = "CHAINMARK_SERVING"
#: The request's argument that names its key: vLLM's ``SamplingParams(extra_args={KEY_ID_ARG: "acct-17"})``, or
#: ``"vllm_xargs": {"chainmark_key_id": "acct-17"}`` in a request to the OpenAI-compatible server (whose extra
#: arguments are flat strings and numbers, so the name is flat too).
KEY_ID_ARG = "chainmark_key_id"

_LOG = logging.getLogger(__name__)
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_UNKEYED = ("plain", "refuse")


def _request_key_id(extra_args: Mapping[str, Any] | None) -> str | None:
    """The key id a request names in its extra arguments, or None; a malformed id is a ValueError.

    A key id is 1 to 128 letters, digits, ``_``, ``.`` or ``-``, starting with a letter or digit (so it can
    name no file outside the key folder). Example::

        request_key_id({"chainmark_key_id": "acct-17"})  # "acct-17"
    """
    if not extra_args or extra_args.get(KEY_ID_ARG) is None:
        return None
    key_id = extra_args[KEY_ID_ARG]
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id) or ".." in key_id:
        raise ValueError(f"{KEY_ID_ARG} must be 1 to 128 letters, digits, '_', '.' or '-' starting with a letter "
                         f"or digit, got {key_id!r}")
    return key_id


@dataclass(frozen=True)
class ServingConfig:
    """How a server watermarks: its key folder, the watermark's parameters, and what an unkeyed request gets.

    ``gate`` is the calibrated :class:`~chainmark.gates.Gate` (its kind and threshold tau) and ``rho`` the share
    of positions it was calibrated to open, so the configuration a reply is generated with is the one its
    auditor reads. ``unkeyed`` is ``"plain"`` (a request without a key id is served unwatermarked) or
    ``"refuse"`` (it is an error). Example::

        serving = ServingConfig("keys/", S=5, rho=0.5, gate=Gate("high_entropy", 2.17))
        serving.config_for("acct-17")   # the ChainMarkConfig of keys/acct-17.key
    """

    keys_dir: Path
    S: int = 5
    rho: float = 0.5
    gate: Gate = field(default_factory=lambda: Gate("all"))
    topology: str = "clockwork"
    unkeyed: str = "plain"

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys_dir", Path(self.keys_dir))
        if not isinstance(self.gate, Gate):
            raise TypeError(f"gate must be a chainmark Gate (its kind and tau), got {type(self.gate).__name__}")
        if self.unkeyed not in _UNKEYED:
            raise ValueError(f"unkeyed must be one of {_UNKEYED}, got {self.unkeyed!r}")
        if self.gate.rho is None:  # a threshold the deployer states opens the serving rho
            object.__setattr__(self, "gate", Gate(self.gate.kind, self.gate.tau, self.rho))
        # the parameters are checked once, here, by the configuration every reply is generated with
        self._config_for_key(b"\x00" * 32)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> ServingConfig:
        """Read a JSON file: ``{"keys_dir": ..., "S": 5, "rho": 0.5, "gate": "high_entropy", "tau": 2.17,
        "topology": "clockwork", "unkeyed": "plain"}``; a relative ``keys_dir`` is relative to the file."""
        path = Path(path)
        try:
            raw = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"serving configuration {path} does not exist") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"serving configuration {path} is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ValueError(f"serving configuration {path} must hold a JSON object")
        known = {"keys_dir", "S", "rho", "gate", "tau", "topology", "unkeyed"}
        unknown = sorted(set(raw) - known)
        if unknown or "keys_dir" not in raw:
            raise ValueError(f"serving configuration {path}: "
                             + (f"unknown field(s) {', '.join(unknown)}; " if unknown else "no keys_dir; ")
                             + f"the fields are {', '.join(sorted(known))}")
        kind, rho = raw.get("gate", "high_entropy"), raw.get("rho", 0.5)
        if "tau" in raw:
            gate = Gate(kind, raw["tau"])
        else:  # parameters out of range fail here with their own message
            probe = ChainMarkConfig(b"\x00" * 32, raw.get("S", 5), rho, kind, raw.get("topology", "clockwork"))
            try:
                gate = probe.default_gate()
            except ValueError as exc:
                raise ValueError(f"serving configuration {path}: {exc} (the file's field is 'tau')") from None
        keys_dir = Path(raw["keys_dir"])
        return cls(keys_dir if keys_dir.is_absolute() else path.parent / keys_dir, raw.get("S", 5), rho, gate,
                   raw.get("topology", "clockwork"), raw.get("unkeyed", "plain"))

    @classmethod
    def from_env(cls) -> ServingConfig:
        """The configuration named by ``$CHAINMARK_SERVING`` (how an engine's worker processes find it)."""
        path = os.environ.get(SERVING_ENV)
        if not path:
            raise LookupError(f"no serving configuration: set {SERVING_ENV} to the path of its JSON file")
        return cls.from_file(path)

    def _key_path(self, key_id: str) -> Path:
        """The file of a well-formed key id that names an existing key; otherwise a LookupError that names the
        id and none of the server's paths."""
        path = self.keys_dir / f"{key_id}.key"
        if not path.is_file():
            raise LookupError(f"unknown chainmark key id {key_id!r}")
        return path

    def config_for(self, key_id: str) -> ChainMarkConfig:
        """The watermark configuration of one account; an id without a key file is a LookupError.

        The key is read now; an engine keeps the configuration while it serves (a rotated or removed key file
        takes effect when the server restarts)."""
        _request_key_id({KEY_ID_ARG: key_id})
        return self._config_for_key(read_key_file(self._key_path(key_id)))

    def _config_for_key(self, key: bytes) -> ChainMarkConfig:
        """The whole configuration (the gate's threshold included) that replies under ``key`` are generated with."""
        return ChainMarkConfig(key, self.S, self.rho, self.gate.kind, self.topology).with_gate(self.gate)

    def check_request(self, extra_args: Mapping[str, Any] | None) -> str | None:
        """The request's key id after checking it can be served (its key exists; or no key and unkeyed requests
        are served plain); the errors a server returns to the client."""
        key_id = _request_key_id(extra_args)
        if key_id is None:
            if self.unkeyed == "refuse":
                raise ValueError(f"this server watermarks every reply: name your key with {KEY_ID_ARG}")
            return None
        self._key_path(key_id)
        return key_id


@dataclass
class _Row:
    key_id: str | None  # None: the key could not be loaded after the request was admitted (the row is closed)
    prompt_ids: Sequence[int] | None
    output_ids: Sequence[int]  # the engine's live list: it grows as the request decodes

    def last_token(self) -> int | None:
        if self.output_ids:
            return int(self.output_ids[-1])
        return int(self.prompt_ids[-1]) if self.prompt_ids else None


class RequestWatermarks:
    """The rows of an engine's batch and the key each carries; :meth:`apply` watermarks one step's logits.

    Rows are the batch's positions (row ``i`` of the logits is the request added at index ``i``). A row's
    previous token is the last of its output so far, or of its prompt at the first step, as in
    :func:`chainmark.generate`. Rows without a key pass unchanged. Each key's processor is built on first use
    and kept; :meth:`counts` says, per key id, how many row-steps were served and how many of them forced (never
    the key).

    A request is admitted only if its key file exists (:meth:`ServingConfig.check_request`), but the file can
    vanish before the engine first schedules it (a key revoked in between). Such a row fails closed: with
    ``eos_token_id`` given it may emit only that token, so the reply ends at once and no unwatermarked text
    leaves under an account that asked for a watermark, while the rest of the batch goes on; without it,
    :meth:`add` raises the LookupError. Example::

        marks = RequestWatermarks(serving, eos_token_id=2)
        marks.add(0, "acct-17", prompt_ids, output_ids)   # output_ids: the list the engine appends to
        logits = marks.apply(logits)                      # one decoding step of the whole batch
    """

    def __init__(self, serving: ServingConfig, eos_token_id: int | None = None) -> None:
        if not isinstance(serving, ServingConfig):
            raise TypeError(f"serving must be a ServingConfig, got {type(serving).__name__}")
        self.serving = serving
        self.eos_token_id = eos_token_id
        self._rows: dict[int, _Row] = {}
        self._processors: dict[str, ChainMarkLogitsProcessor] = {}
        self._steps: dict[str, int] = {}
        self._forced: dict[str, Any] = {}  # an int, or a tensor on the logits' device (no host sync per step)

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, index: int, key_id: str | None, prompt_ids: Sequence[int] | None,
            output_ids: Sequence[int]) -> None:
        """Put a request at batch row ``index`` (replacing what was there); ``key_id`` None: not watermarked."""
        self._rows.pop(index, None)
        if key_id is None:
            return
        if key_id not in self._processors:
            try:
                config = self.serving.config_for(key_id)
            except (LookupError, OSError, ValueError) as exc:
                if self.eos_token_id is None:
                    raise
                _LOG.error("chainmark: the key of id %r could not be loaded (%s); its reply ends at once "
                           "(end of sequence only)", key_id, type(exc).__name__)
                self._rows[index] = _Row(None, prompt_ids, output_ids)
                return
            self._processors[key_id] = ChainMarkLogitsProcessor(config)
            self._steps[key_id], self._forced[key_id] = 0, 0
        self._rows[index] = _Row(key_id, prompt_ids, output_ids)

    def remove(self, index: int) -> None:
        """The request at row ``index`` has finished (or was preempted)."""
        self._rows.pop(index, None)

    def move(self, source: int, target: int, swap: bool = False) -> None:
        """Row ``source``'s request now sits at ``target`` (``swap``: and ``target``'s at ``source``)."""
        a, b = self._rows.pop(source, None), self._rows.pop(target, None)
        if a is not None:
            self._rows[target] = a
        if swap and b is not None:
            self._rows[source] = b

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per key id: ``(row-steps served, row-steps forced)`` since this object was made."""
        return {key_id: (self._steps[key_id], int(self._forced[key_id])) for key_id in self._steps}

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Watermark one decoding step: each key's rows through its processor, in one call per key."""
        groups: dict[str, tuple[list[int], list[int]]] = {}
        for index, row in self._rows.items():
            if row.key_id is None and index < logits.shape[0]:  # closed: only the end of sequence
                logits[index] = float("-inf")
                logits[index, self.eos_token_id] = 0.0
                continue
            last = row.last_token()
            if last is not None and index < logits.shape[0]:
                rows, lasts = groups.setdefault(row.key_id, ([], []))
                rows.append(index)
                lasts.append(last)
        for key_id, (rows, lasts) in groups.items():
            processor = self._processors[key_id]
            previous = torch.tensor(lasts, dtype=torch.long, device=logits.device).unsqueeze(1)
            whole = rows == list(range(logits.shape[0]))
            where = None if whole else torch.tensor(rows, dtype=torch.long, device=logits.device)
            out = processor(previous, logits if whole else logits.index_select(0, where))
            self._steps[key_id] += len(rows)
            self._forced[key_id] = self._forced[key_id] + processor.forced[-1].sum()
            processor.reset()
            if whole:
                logits = out
            else:
                logits.index_copy_(0, where, out)
        return logits

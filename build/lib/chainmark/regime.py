"""The detection regime: the public document a deployer publishes so that anyone can audit.

It names S, the topology, alpha, the operating threshold, the shortest text
that may be judged, the tokenizer (by name and by a fingerprint of its
vocabulary) and the key's fingerprint, never the key. :func:`regime_document`
writes it; :func:`regime_problems` checks a parsed one field by field, so
that a regime file can never silently change a verdict (a NaN threshold, a
string where a boolean belongs). The command line (``chainmark regime``,
``chainmark detect --regime``) is a thin layer over these functions.
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable

from .limits import MAX_STATES

#: Format tag of the published regime document.
REGIME_FORMAT = "chainmark-regime/1"



def _check_finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of a tokenizer's vocabulary (token -> id), to catch mismatches.

    Two tokenizers with the same fingerprint map every token string to the
    same id, which is what the keyed partition needs.
    """
    import hashlib

    if not hasattr(tokenizer, "get_vocab"):
        raise TypeError(f"tokenizer must have get_vocab(), got {type(tokenizer).__name__}")
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    blob = json.dumps(vocab, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def regime_document(
    key: bytes | str,
    S: int,
    alpha: float,
    topology: str = "clockwork",
    threshold: float | None = None,
    tokenizer_name: str | None = None,
    tokenizer: Any = None,
    tokenizer_revision: str | None = None,
    n_min: int | None = None,
    rho: float | None = None,
    gate: str | None = None,
    distinct_pairs: bool = False,
    recalibration: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The public detection regime a deployer publishes (JSON-ready; no key).

    ``threshold`` is the operating z threshold; left out, it is the analytic
    z_alpha. ``tokenizer`` (the object), when given, adds its vocabulary
    fingerprint so that an auditor's tokenizer can be checked against it;
    ``tokenizer_revision`` records the Hub revision (commit hash) it was
    loaded at, so an auditor loads the same files.
    """
    from .calibrate import z_alpha as critical_z
    from .detect import check_alpha, check_states
    from .gates import check_gate_kind, check_rho
    from .keys import key_fingerprint
    from .partition import key_bytes
    from .topology import resolve_topology

    if not key_bytes(key):
        raise ValueError("key must be non-empty")
    S = check_states(S)
    alpha = check_alpha(alpha)
    topo = resolve_topology(topology, S)
    z_alpha = float(critical_z(alpha))
    if threshold is None:
        threshold = z_alpha
    threshold = _check_finite(threshold, "threshold")
    doc: dict[str, Any] = {
        "format": REGIME_FORMAT,
        "scheme": "chainmark",
        "S": S,
        "topology": topo.name,
        "k": topo.k,
        "p0": topo.p0,
        "alpha": alpha,
        "z_alpha": z_alpha,
        "threshold": threshold,
        "distinct_pairs": bool(distinct_pairs),
        "tokenizer": tokenizer_name,
        "key_fingerprint": key_fingerprint(key),
    }
    if tokenizer_revision is not None:
        if not _is_text(tokenizer_revision):
            raise ValueError(f"tokenizer_revision must be a non-empty string, got {tokenizer_revision!r}")
        doc["tokenizer_revision"] = tokenizer_revision
    if tokenizer is not None:
        doc["tokenizer_fingerprint"] = tokenizer_fingerprint(tokenizer)
        doc["vocab_size"] = len(tokenizer)
    if n_min is not None:
        if isinstance(n_min, bool) or not isinstance(n_min, int) or n_min < 2:
            raise ValueError(f"n_min must be an integer >= 2, got {n_min!r}")
        doc["n_min"] = n_min
    if rho is not None:
        doc["rho"] = check_rho(rho)
    if gate is not None:
        doc["gate"] = check_gate_kind(gate)
    if recalibration is not None:
        doc["recalibration"] = dict(recalibration)
    return doc


#: Gate kinds a regime may name (as :data:`chainmark.gates.GATE_KINDS`, without importing torch).
GATE_NAMES = ("all", "high_entropy", "low_entropy", "top2_gap")
#: Successors per state of each topology a regime may name.
TOPOLOGY_K = {"clockwork": 1, "soft_cycle": 2}


def _is_int(value: Any, low: int, high: float = math.inf) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def _is_number(value: Any, low: float = -math.inf, high: float = math.inf, open_ends: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return low < value < high if open_ends else low <= value <= high


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


#: Every field of a regime document: (accepts the value, what it must be). None is
#: allowed only where the description says so.
REGIME_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "format": (lambda v: v == REGIME_FORMAT, f"the string {REGIME_FORMAT!r}"),
    "scheme": (lambda v: v == "chainmark", "the string 'chainmark'"),
    "S": (lambda v: _is_int(v, 2, MAX_STATES), f"an integer in [2, {MAX_STATES}]"),
    "topology": (lambda v: v in TOPOLOGY_K, f"one of {sorted(TOPOLOGY_K)}"),
    "k": (lambda v: _is_int(v, 1, MAX_STATES - 1), f"an integer in [1, {MAX_STATES - 1}]"),
    "p0": (lambda v: _is_number(v, 0.0, 1.0, open_ends=True), "a number in (0, 1)"),
    "alpha": (lambda v: _is_number(v, 0.0, 1.0, open_ends=True), "a number in (0, 1)"),
    "z_alpha": (_is_number, "a finite number"),
    "threshold": (lambda v: v is None or _is_number(v), "a finite number or null"),
    "distinct_pairs": (lambda v: isinstance(v, bool), "true or false"),
    "tokenizer": (lambda v: v is None or _is_text(v), "a string or null"),
    "key_fingerprint": (lambda v: v is None or _is_text(v), "a string or null"),
    "tokenizer_fingerprint": (lambda v: v is None or _is_text(v), "a string or null"),
    "tokenizer_revision": (lambda v: v is None or _is_text(v), "a string or null"),
    "vocab_size": (lambda v: _is_int(v, 1), "an integer >= 1"),
    "n_min": (lambda v: _is_int(v, 2), "an integer >= 2"),
    "rho": (lambda v: _is_number(v, 0.0, 1.0), "a number in [0, 1]"),
    "gate": (lambda v: v in GATE_NAMES, f"one of {list(GATE_NAMES)}"),
    "recalibration": (lambda v: isinstance(v, dict), "a JSON object"),
}


def _shown(value: Any) -> str:
    """A short description of a regime value for an error message (strings are cut, never echoed whole)."""
    if isinstance(value, str):
        return f"the string {value[:20]!r}" + ("..." if len(value) > 20 else "")
    if isinstance(value, (list, dict)):
        return f"a JSON {'array' if isinstance(value, list) else 'object'}"
    return json.dumps(value) if isinstance(value, (bool, int, float)) or value is None else type(value).__name__


def regime_problems(doc: Any) -> list[str]:
    """Everything wrong with a parsed regime document, field by field (empty when it is valid)."""
    if not isinstance(doc, dict) or doc.get("format") != REGIME_FORMAT:
        return [f"not a {REGIME_FORMAT} document"]
    unknown = sorted(set(doc) - set(REGIME_FIELDS))
    problems = [f"unknown field(s) {', '.join(map(repr, unknown))}"] if unknown else []
    for name, value in doc.items():
        accepts, wanted = REGIME_FIELDS.get(name, (None, ""))
        if accepts is not None and not accepts(value):
            problems.append(f'"{name}" must be {wanted}, got {_shown(value)}')
    if doc.get("topology") in TOPOLOGY_K and _is_int(doc.get("k"), 1) and doc["k"] != TOPOLOGY_K[doc["topology"]]:
        problems.append(f'"k" is {doc["k"]}, but the {doc["topology"]} topology has k = {TOPOLOGY_K[doc["topology"]]}')
    return problems


__all__ = ["GATE_NAMES", "REGIME_FIELDS", "REGIME_FORMAT", "TOPOLOGY_K", "regime_document", "regime_problems",
           "tokenizer_fingerprint"]

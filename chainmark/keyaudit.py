"""Auditing a key before deployment: its false-positive rate on text it will be judged against.

The false-positive rate of a deployed watermark is a property of its key: a
common token pair ("of the", ". The") is legal under some keys and not
others, and every text repeats such pairs, so one key's rate on human or
model text can sit well above alpha for the z-test while another's sits
below. :func:`audit_key` scores a corpus of unwatermarked text under one key
with every test (:data:`chainmark.detect.TESTS`) and reports each test's
false-positive rate with its 95% interval, the threshold that would hold
alpha on that corpus, and whether the key holds alpha; the result is the
body of a certificate (:data:`CERTIFICATE_FORMAT`) that names the key by its
fingerprint only, and that a regime carries so that an auditor can check it
(:func:`certificate_problems`).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

import numpy as np

from .calibrate import rate_estimate, recalibrate
from .checks import check_alpha
from .detect import TESTS, check_test, detect
from .keys import key_fingerprint
from .partition import Key
from .topology import TopologyLike, resolve_topology

CERTIFICATE_FORMAT = "chainmark-key-audit/1"
#: The fields a certificate must have, and what a regime's use of it must match.
CERTIFICATE_FIELDS = ("format", "key_fingerprint", "tokenizer", "tokenizer_fingerprint", "S", "topology", "k",
                      "alpha", "corpus", "tests", "deploy_test", "verdict", "package_version")


def corpus_fingerprint(texts: Sequence[Sequence[int]]) -> str:
    """A short hash of a corpus of token-id sequences (their lengths and ids, in order)."""
    h = hashlib.sha256()
    for ids in texts:
        arr = np.asarray(ids, dtype=np.int64).ravel()
        h.update(len(arr).to_bytes(8, "little"))
        h.update(arr.astype("<i8").tobytes())
    return h.hexdigest()[:16]


def _scores(key: Key, texts: Sequence[np.ndarray], topo: Any, alpha: float, test: str,
            vocab_size: int | None) -> list[Any]:
    """Every text's verdict under one key and one test (the audit and the across-keys table share it)."""
    return [detect(ids, key, topo.S, topo, alpha, vocab_size=vocab_size, test=test) for ids in texts]


def _threshold(values: np.ndarray, alpha: float, upper: bool) -> float | None:
    """The corpus threshold that holds alpha: on z (flag above), or on p (flag below); None if too few texts."""
    try:
        return float(recalibrate(values if upper else -values, alpha, method="quantile")) * (1 if upper else -1)
    except ValueError:  # fewer texts than the quantile needs
        return None


def audit_key(
    key: Key,
    texts: Sequence[Sequence[int]],
    S: int = 5,
    topology: TopologyLike = "clockwork",
    alpha: float = 0.01,
    deploy_test: str = "exact",
    vocab_size: int | None = None,
) -> dict[str, Any]:
    """Score unwatermarked ``texts`` (token ids) under ``key`` with every test; the certificate's body.

    For each test: texts scored, flagged at alpha, the rate with its 95%
    Clopper-Pearson interval, and the threshold that would hold alpha on
    this corpus (the empirical quantile of z, or of the exact test's
    p-values). A test *holds* alpha on the corpus unless the whole interval
    lies above alpha; the verdict is ``"pass"`` when ``deploy_test`` holds.
    Texts shorter than two tokens are left out (they have no transition).
    """
    alpha = check_alpha(alpha)
    deploy_test = check_test(deploy_test)
    topo = resolve_topology(topology, S)
    kept = [np.asarray(t, dtype=np.int64) for t in texts if len(t) >= 2]
    if not kept:
        raise ValueError("the corpus has no text of two tokens or more: nothing to audit the key on")
    tests: dict[str, Any] = {}
    for test in TESTS:
        results = _scores(key, kept, topo, alpha, test, vocab_size)
        flags = np.array([r.is_watermarked for r in results])
        est = rate_estimate(flags)
        z = np.array([r.z for r in results])
        p = np.array([r.p_value for r in results])
        holds = est.low <= alpha
        tests[test] = {
            "texts": est.trials, "flagged": est.hits, "fpr": est.rate, "ci_low": est.low, "ci_high": est.high,
            "holds_alpha": bool(holds),
            "z_threshold": None if test == "exact" else _threshold(z, alpha, upper=True),
            "p_threshold": _threshold(p, alpha, upper=False) if test == "exact" else None,
        }
    return {
        "format": CERTIFICATE_FORMAT,
        "key_fingerprint": key_fingerprint(key),
        "S": topo.S, "topology": topo.name, "k": topo.k, "alpha": alpha,
        "corpus": {"texts": len(kept), "tokens": int(sum(t.size for t in kept)),
                   "fingerprint": corpus_fingerprint(kept)},
        "tests": tests,
        "deploy_test": deploy_test,
        "verdict": "pass" if tests[deploy_test]["holds_alpha"] else "fail",
    }


def fpr_across_keys(
    texts: Sequence[Sequence[int]],
    keys: Sequence[Key],
    S: int = 5,
    topology: TopologyLike = "clockwork",
    alpha: float = 0.01,
    tests: Sequence[str] = TESTS,
    vocab_size: int | None = None,
) -> list[dict[str, Any]]:
    """Each key's false-positive rate on the same unwatermarked ``texts``, for each test.

    One row per (key, test): the key's fingerprint, texts scored, flagged at
    alpha, the rate and its 95% Clopper-Pearson interval. The spread of the
    rows of one test is how much the rate depends on the key; their mean is
    the rate over random keys, which the exact test bounds by alpha for
    every text.
    """
    alpha = check_alpha(alpha)
    tests = [check_test(t) for t in tests]
    topo = resolve_topology(topology, S)
    kept = [np.asarray(t, dtype=np.int64) for t in texts if len(t) >= 2]
    if not kept or not keys:
        raise ValueError("fpr_across_keys needs at least one text of two tokens and one key")
    rows = []
    for key in keys:
        fingerprint = key_fingerprint(key)
        for test in tests:
            est = rate_estimate([r.is_watermarked for r in _scores(key, kept, topo, alpha, test, vocab_size)])
            rows.append({"key": fingerprint, "test": test, "texts": est.trials, "flagged": est.hits,
                         "fpr": est.rate, "ci_low": est.low, "ci_high": est.high})
    return rows


def certificate_problems(cert: Any, *, key_fingerprint: str | None = None, tokenizer_fingerprint: str | None = None,
                         S: int | None = None, topology: str | None = None, test: str | None = None,
                         alpha: float | None = None) -> list[str]:
    """What is wrong with a certificate, or with using it for this key, tokenizer, S, topology, test and alpha
    (empty: fine). A certificate speaks for the test it was made for (``deploy_test``) at its alpha only."""
    if not isinstance(cert, Mapping) or cert.get("format") != CERTIFICATE_FORMAT:
        return [f"not a {CERTIFICATE_FORMAT} certificate"]
    missing = [f for f in CERTIFICATE_FIELDS if f not in cert]
    if missing:
        return [f"the certificate lacks {', '.join(missing)}"]
    problems = []
    for name, wanted in (("key_fingerprint", key_fingerprint), ("tokenizer_fingerprint", tokenizer_fingerprint),
                         ("S", S), ("topology", topology), ("deploy_test", test), ("alpha", alpha)):
        if wanted is not None and cert.get(name) != wanted:
            problems.append(f"the certificate was made for {name} {cert.get(name)!r}, this audit uses {wanted!r}")
    if cert.get("verdict") not in ("pass", "fail"):
        problems.append(f"the certificate's verdict must be 'pass' or 'fail', got {cert.get('verdict')!r}")
    return problems


def read_certificate(path: str) -> dict[str, Any]:
    """A certificate file (JSON); a ``ValueError`` naming the problem when it is not one."""
    with open(path, "rb") as fh:
        data = fh.read(1024 * 1024 + 1)
    if len(data) > 1024 * 1024:
        raise ValueError(f"{path} is larger than 1 MiB: not a key-audit certificate")
    try:
        cert = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a JSON certificate ({exc})") from None
    problems = certificate_problems(cert)
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return cert


def format_audit(cert: Mapping[str, Any]) -> str:
    """The certificate as a table: one row per test, the rate with its interval, the corpus threshold."""
    lines = [f"key {cert['key_fingerprint']}: S={cert['S']} {cert['topology']}, alpha={cert['alpha']:g}, "
             f"{cert['corpus']['texts']} texts ({cert['corpus']['tokens']} tokens, corpus {cert['corpus']['fingerprint']})",
             f"{'test':9s} {'flagged':>9s} {'FPR [95% CI]':>24s}  {'holds alpha':11s} threshold on this corpus"]
    for test, row in cert["tests"].items():
        thr = (f"z > {row['z_threshold']:.3f}" if row.get("z_threshold") is not None else
               f"p < {row['p_threshold']:.3g}" if row.get("p_threshold") is not None else "(too few texts)")
        lines.append(f"{test:9s} {row['flagged']:>4d}/{row['texts']:<4d} "
                     f"{100 * row['fpr']:7.2f}% [{100 * row['ci_low']:.2f}, {100 * row['ci_high']:.2f}]  "
                     f"{'yes' if row['holds_alpha'] else 'NO':11s} {thr}")
    lines.append(f"verdict for the {cert['deploy_test']} test: {cert['verdict'].upper()}")
    return "\n".join(lines)


__all__ = ["CERTIFICATE_FORMAT", "audit_key", "certificate_problems", "corpus_fingerprint", "format_audit",
           "fpr_across_keys", "read_certificate"]

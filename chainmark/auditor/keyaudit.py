"""Auditing a key before deployment: its false-positive rate on text it will be judged against.

A common token pair ("of the") is legal under some keys and not others, so one key's rate on human or model
text can sit above alpha, even for the exact test, whose guarantee is over a *random* key. :func:`audit_key`
scores unwatermarked documents under one key with every test and *certifies* the key for the deployed test
only when the one-sided upper confidence bound on its rate is at or below alpha (which needs at least
:func:`_minimum_documents` documents). The unit is the document: a document counts as flagged when any of its
windows is. The certificate names the key by its fingerprint only, binds the tokenizer and the corpus (its
texts and their grouping into documents) and carries a digest; :func:`certificate_problems` recomputes its
verdict from its counts, :func:`recheck_certificate` its counts from the key and the corpus.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..calibrate import recalibrate
from ..config import ChainMarkConfig
from .rates import clopper_pearson, clopper_pearson_lower, clopper_pearson_upper, rate_estimate, trials_to_bound
from ..checks import check_alpha, check_int
from ..significance import DEFAULT_TEST, TESTS, check_test
from ..detection import detect
from ..keys import key_fingerprint
from ..partition import Key
from ..topology import TopologyLike, resolve_topology

#: Format 5: the certificate states its ``promise`` (the rate it certifies) apart from ``alpha`` (the level the
#: deployed test flags at); format 4, read as promising its alpha, stated its scope and the public-output budget;
#: format 3's corpus fingerprint already covered which texts form which document (format 2's hashed the texts only).
_CERTIFICATE_FORMAT = "chainmark-key-audit/5"
_PROMISE_AT_ALPHA_FORMAT = "chainmark-key-audit/4"
#: The confidence of the bound a certificate states (one-sided): the least a certificate may use.
_CERTIFICATE_LEVEL = 0.95
#: What a certificate says of ``keys_tried`` and ``selected_on``: nothing in it can check them.
_KEYS_TRIED_NOTE = ("keys_tried and selected_on are declared by whoever ran the audit, not verified: a key chosen "
                    "among more keys than declared has a rate biased low")
#: What every certificate says it certifies and what it does not: an audit on natural text measures mislabelling,
#: not an adversary who reads the deployment's outputs (the book's chapter 9.5 measures that one).
_SCOPE = {"certifies": "this key's false-positive rate on natural text: unwatermarked documents like the corpus's "
                      "are flagged at most the promise's share of the time (a one-sided bound at the stated level)",
         "does_not_certify": "that flagged text came from the deployment: anyone who collects this key's outputs can "
                             "learn the states of its frequent tokens, then make any text look watermarked "
                             "(forgery) or edit watermarked text until it is not (scrubbing). Retire the key before "
                             "its public output reaches the public_output_budget"}
_SCOPE_4 = {**_SCOPE, "certifies": _SCOPE["certifies"].replace("the promise's share", "alpha")}
_BUDGET_NOTE = ("the tokens of output the deployer promises to publish under this key before retiring it, declared "
                "by whoever ran the audit, not verified; null: no budget stated")
#: The fields a certificate, its rows and its corpus must have.
_CERTIFICATE_FIELDS = ("format", "key_fingerprint", "tokenizer", "tokenizer_fingerprint", "S", "topology", "k",
                      "alpha", "level", "minimum_documents", "corpus", "selection", "tests", "deploy_test",
                      "verdict", "scope", "public_output_budget", "package_version", "digest", "promise")
_ROW_FIELDS = ("texts", "documents", "flagged", "fpr", "ci_low", "ci_high", "upper_bound", "certified")
_CORPUS_FIELDS = ("texts", "documents", "tokens", "fingerprint", "texts_fingerprint", "unit", "grouping")


def _groups(n: int, documents: Sequence[Any] | None) -> list[int]:
    """Each text's document as the order in which documents first appear: which texts share one, not its name."""
    if documents is None:
        return list(range(n))
    first: dict[str, int] = {}
    return [first.setdefault(str(name), len(first)) for name in documents]


def _corpus_fingerprint(texts: Sequence[Sequence[int]], documents: Sequence[Any] | None = None) -> str:
    """A short hash of a corpus of token-id sequences and its grouping: each text's length, ids and document
    (by order of first appearance), in order; ``documents`` None makes every text its own document."""
    h = hashlib.sha256()
    for ids, group in zip(texts, _groups(len(texts), documents), strict=True):
        arr = np.asarray(ids, dtype=np.int64).ravel()
        h.update(len(arr).to_bytes(8, "little"))
        h.update(arr.astype("<i8").tobytes())
        h.update(group.to_bytes(8, "little"))
    return h.hexdigest()[:16]


def _check_level(level: Any) -> float:
    """A certificate's confidence level: at least :data:`_CERTIFICATE_LEVEL` and below 1, else a ``ValueError``."""
    number = not isinstance(level, bool) and isinstance(level, (int, float, np.floating))
    if not number or not _CERTIFICATE_LEVEL <= level < 1:
        raise ValueError(f"level must be at least {_CERTIFICATE_LEVEL:g} and below 1, got "
                         f"{level!r}: a bound at lower confidence passes keys whose rate lies above alpha")
    return float(level)


def _minimum_documents(alpha: float, level: float = _CERTIFICATE_LEVEL) -> int:
    """Fewest documents on which a key can be certified at ``alpha``: even with none flagged, a smaller
    corpus leaves the one-sided upper bound above alpha (299 at alpha = 1% and 95%)."""
    return trials_to_bound(alpha, level)


def certify(flagged: int, documents: int, alpha: float, level: float = _CERTIFICATE_LEVEL) -> str:
    """The verdict on a key that flagged ``flagged`` of ``documents`` unwatermarked documents: ``"pass"`` when
    the one-sided upper confidence bound on its rate is at or below alpha, ``"fail"`` when the lower bound lies
    above alpha, ``"inconclusive"`` otherwise. A ``level`` below :data:`_CERTIFICATE_LEVEL` is a ``ValueError``."""
    alpha, level = check_alpha(alpha), _check_level(level)
    if clopper_pearson_upper(flagged, documents, level) <= alpha:
        return "pass"
    if clopper_pearson_lower(flagged, documents, level) > alpha:
        return "fail"
    return "inconclusive"


def _scores(config: ChainMarkConfig, texts: Sequence[np.ndarray], alpha: float, test: str,
            vocab_size: int | None) -> list[Any]:
    """Every text's verdict under one configuration and one test (the audit and the across-keys table share it)."""
    return [detect(ids, config, alpha, vocab_size=vocab_size, test=test) for ids in texts]


def _threshold(values: np.ndarray, alpha: float, upper: bool) -> float | None:
    """The corpus threshold that holds alpha: on z (flag above), or on p (flag below); None if too few texts."""
    try:
        return float(recalibrate(values if upper else -values, alpha, method="quantile")) * (1 if upper else -1)
    except ValueError:  # fewer texts than the quantile needs
        return None


def _per_document(flags: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """One flag per document (``groups``: each text's document as 0, 1, ...): True when any of its texts is."""
    out = np.zeros(int(groups.max()) + 1, dtype=bool)
    np.logical_or.at(out, groups, flags)
    return out


def _row(doc_flags: np.ndarray, texts: int, alpha: float, level: float) -> dict[str, Any]:
    """A test's row of the certificate from its per-document flags."""
    n, hits = int(doc_flags.size), int(np.count_nonzero(doc_flags))
    low, high = clopper_pearson(hits, n)
    upper = clopper_pearson_upper(hits, n, level)
    return {"texts": texts, "documents": n, "flagged": hits, "fpr": hits / n, "ci_low": low, "ci_high": high,
            "upper_bound": upper, "certified": bool(upper <= alpha)}


def _certificate_digest(cert: Mapping[str, Any]) -> str:
    """SHA-256 of a certificate's canonical form (every field but the digest, sorted keys, no spaces)."""
    body = {k: v for k, v in cert.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(cert: Mapping[str, Any]) -> dict[str, Any]:
    """The certificate with its ``digest`` set (call it after the last field is added)."""
    body = {k: v for k, v in cert.items() if k != "digest"}
    return {**body, "digest": _certificate_digest(body)}


@dataclass(frozen=True)
class CertificationTarget:
    """What a key audit certifies: that the key's false-positive rate under the deployed ``test``
    (:data:`chainmark.detection.TESTS`), flagging at ``alpha``, is at most ``promise`` (by default alpha), by a
    one-sided upper bound at confidence ``level``. A test at the level it promises certifies only when the key's
    rate lies well below it; :func:`chainmark.auditor.keyplan.plan_certification` finds the stricter ``alpha``
    at which a fresh key passes.
    A ``level`` below :data:`_CERTIFICATE_LEVEL` is a ``ValueError``: a lower one would let the certificate pass
    keys whose rate lies above the promise."""

    test: str = DEFAULT_TEST
    alpha: float = 0.01
    level: float = _CERTIFICATE_LEVEL
    #: the tokens of output the deployer will publish under the key before retiring it (None: not stated)
    public_output_budget: int | None = None
    #: the false-positive rate the certificate promises (None: alpha)
    promise: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", check_alpha(self.alpha))
        object.__setattr__(self, "promise", check_alpha(self.alpha if self.promise is None else self.promise,
                                                        "promise"))
        object.__setattr__(self, "level", _check_level(self.level))
        object.__setattr__(self, "test", check_test(self.test))
        if self.public_output_budget is not None:
            object.__setattr__(self, "public_output_budget",
                               check_int(self.public_output_budget, "public_output_budget", 1))


@dataclass(frozen=True)
class KeySelection:
    """How the audited key was chosen, as whoever runs the audit declares it (recorded, not verified):
    ``keys_tried`` > 1 says it was chosen among others, on another corpus, whose fingerprint is ``selected_on``."""

    keys_tried: int = 1
    selected_on: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.keys_tried, bool) or not isinstance(self.keys_tried, (int, np.integer)) \
                or self.keys_tried < 1:
            raise ValueError(f"keys_tried must be an integer >= 1, got {self.keys_tried!r}")
        if self.selected_on is not None and not isinstance(self.selected_on, str):
            raise TypeError(f"selected_on must be a corpus fingerprint (a string) or None, got "
                            f"{type(self.selected_on).__name__}")


def audit_key(
    config: ChainMarkConfig,
    texts: Sequence[Sequence[int]],
    target: CertificationTarget = CertificationTarget(),
    *,
    vocab_size: int | None = None,
    documents: Sequence[Any] | None = None,
    grouping: str | None = None,
    selection: KeySelection = KeySelection(),
) -> dict[str, Any]:
    """Score unwatermarked ``texts`` (token ids) under the key, S and topology of ``config`` with every test;
    the certificate's body (the caller adds the tokenizer fields and the package version, then :func:`seal`).

    ``documents`` names each text's document (windows of one document share a name; by default every text is
    its own), ``grouping`` says so in words. Each test's row: documents flagged at ``target.alpha``, the rate
    with its 95% interval and its one-sided upper bound at ``target.level``, whether that certifies alpha, and
    the corpus threshold (quantile of z, or of the exact test's p-values) that would hold alpha; the verdict is
    :func:`certify`'s for ``target.test``. A key chosen among several (``selection``) on this very corpus is a
    ``ValueError``. Texts shorter than two tokens are left out.
    """
    for name, value, kind in (("config", config, ChainMarkConfig), ("target", target, CertificationTarget),
                              ("selection", selection, KeySelection)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    key, topo = config.key, config.topo
    alpha, level, deploy_test, promise = target.alpha, target.level, target.test, target.promise
    keys_tried, selected_on = selection.keys_tried, selection.selected_on
    if documents is not None and len(documents) != len(texts):
        raise ValueError(f"documents must name one document per text: {len(documents)} names for "
                         f"{len(texts)} texts")
    names = range(len(texts)) if documents is None else documents
    kept_pairs = [(np.asarray(t, dtype=np.int64), name) for t, name in zip(texts, names) if len(t) >= 2]
    if not kept_pairs:
        raise ValueError("the corpus has no text of two tokens or more: nothing to audit the key on")
    kept, kept_names = [t for t, _ in kept_pairs], [n for _, n in kept_pairs]
    fingerprint, texts_fingerprint = _corpus_fingerprint(kept, kept_names), _corpus_fingerprint(kept)
    if keys_tried > 1 and (selected_on is None or selected_on in (fingerprint, texts_fingerprint)):
        raise ValueError(f"this key was chosen among {keys_tried}: choose on one corpus and certify on another "
                         "(give the selection corpus's fingerprint; it must differ from this corpus's "
                         f"{fingerprint}), or the chosen key's rate on the same corpus is biased low")
    doc_index = np.array(_groups(len(kept), kept_names))
    tests: dict[str, Any] = {}
    for test in TESTS:
        results = _scores(config, kept, alpha, test, vocab_size)
        flags = np.array([r.is_watermarked for r in results])
        z = np.array([r.z for r in results])
        p = np.array([r.p_value for r in results])
        tests[test] = {
            **_row(_per_document(flags, doc_index), len(kept), promise, level),
            "texts_flagged": int(np.count_nonzero(flags)),
            "z_threshold": None if test == "exact" else _threshold(z, alpha, upper=True),
            "p_threshold": _threshold(p, alpha, upper=False) if test == "exact" else None,
        }
    n_docs = int(doc_index.max()) + 1
    return {
        "format": _CERTIFICATE_FORMAT,
        "key_fingerprint": key_fingerprint(key),
        "S": topo.S, "topology": topo.name, "k": topo.k, "alpha": alpha, "promise": promise, "level": level,
        "minimum_documents": _minimum_documents(promise, level),
        "corpus": {"texts": len(kept), "documents": n_docs, "tokens": int(sum(t.size for t in kept)),
                   "fingerprint": fingerprint, "texts_fingerprint": texts_fingerprint, "unit": "document",
                   "grouping": grouping or _default_grouping(documents is None, len(kept), n_docs),
                   "windows": ("none: every text is its own document" if n_docs == len(kept) else
                               f"{len(kept)} texts from {n_docs} documents; a document counts as flagged "
                               "when any of its texts is")},
        "selection": {"keys_tried": int(keys_tried), "selected_on": selected_on, "note": _KEYS_TRIED_NOTE},
        "tests": tests,
        "deploy_test": deploy_test,
        "verdict": certify(tests[deploy_test]["flagged"], n_docs, promise, level),
        "scope": dict(_SCOPE),
        "public_output_budget": {"tokens": target.public_output_budget, "note": _BUDGET_NOTE},
    }


def _default_grouping(unnamed: bool, texts: int, documents: int) -> str:
    """How the texts became documents, in words, when the caller does not say."""
    if unnamed:
        return "every text is its own document (no document names were given)"
    return f"texts with the same document name form one document ({texts} texts, {documents} documents)"


def fpr_across_keys(
    texts: Sequence[Sequence[int]],
    keys: Sequence[Key],
    S: int = 5,
    topology: TopologyLike = "clockwork",
    alpha: float = 0.01,
    tests: Sequence[str] = TESTS,
    vocab_size: int | None = None,
) -> list[dict[str, Any]]:
    """Each key's false-positive rate on the same unwatermarked ``texts``, for each test: one row per (key,
    test) with the key's fingerprint, texts scored and flagged at alpha, the rate and its 95% interval. The
    spread over keys is how much the rate depends on the key."""
    alpha = check_alpha(alpha)
    tests = [check_test(t) for t in tests]
    topo = resolve_topology(topology, S)
    kept = [np.asarray(t, dtype=np.int64) for t in texts if len(t) >= 2]
    if not kept or not keys:
        raise ValueError("fpr_across_keys needs at least one text of two tokens and one key")
    rows = []
    for key in keys:
        fingerprint, config = key_fingerprint(key), ChainMarkConfig(key, S=topo.S, topology=topo)
        for test in tests:
            est = rate_estimate([r.is_watermarked for r in _scores(config, kept, alpha, test, vocab_size)])
            rows.append({"key": fingerprint, "test": test, "texts": est.trials, "flagged": est.hits,
                         "fpr": est.rate, "ci_low": est.low, "ci_high": est.high})
    return rows


def certificate_problems(cert: Any, *, key_fingerprint: str | None = None, tokenizer_fingerprint: str | None = None,
                         S: int | None = None, topology: str | None = None, test: str | None = None,
                         alpha: float | None = None) -> list[str]:
    """What is wrong with a certificate, or with using it for this key, tokenizer, S, topology, test and alpha
    (empty: fine). It is checked against itself too: its digest, its level, every row's rate and bounds
    against its counts, its verdict against :func:`certify`, and a key chosen on another corpus."""
    old = _older_format(cert)
    if old:
        return [old]
    if not isinstance(cert, Mapping) or cert.get("format") not in (_CERTIFICATE_FORMAT, _PROMISE_AT_ALPHA_FORMAT):
        return [f"not a {_CERTIFICATE_FORMAT} certificate"]
    fields = _CERTIFICATE_FIELDS if cert["format"] == _CERTIFICATE_FORMAT else _CERTIFICATE_FIELDS[:-1]
    missing = [f for f in fields if f not in cert]
    if missing:
        return [f"the certificate lacks {', '.join(missing)}"]
    problems = []
    for name, wanted in (("key_fingerprint", key_fingerprint), ("tokenizer_fingerprint", tokenizer_fingerprint),
                         ("S", S), ("topology", topology), ("deploy_test", test), ("alpha", alpha)):
        if wanted is not None and cert.get(name) != wanted:
            problems.append(f"the certificate was made for {name} {cert.get(name)!r}, this audit uses {wanted!r}")
    try:
        problems += _internal_problems(cert)
    except (TypeError, ValueError, KeyError) as exc:
        problems.append(f"the certificate's counts cannot be read ({exc})")
    if cert.get("digest") != _certificate_digest(cert):
        problems.append("the certificate's digest does not match its content: it was changed after it was written")
    return problems


def _promise(cert: Mapping[str, Any]) -> Any:
    """The rate a certificate promises: its ``promise``, or for format 4 its alpha."""
    return cert["alpha"] if cert.get("format") == _PROMISE_AT_ALPHA_FORMAT else cert["promise"]


def _is_count(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def _older_format(cert: Any) -> str | None:
    """The problem with a certificate of an older format of this package, else None."""
    fmt = cert.get("format") if isinstance(cert, Mapping) else None
    if not isinstance(fmt, str) or not fmt.startswith("chainmark-key-audit/") or fmt in (_CERTIFICATE_FORMAT,
                                                                                            _PROMISE_AT_ALPHA_FORMAT):
        return None
    lacks = ("it does not state what it certifies and what it does not, nor the key's public-output budget"
             if fmt == "chainmark-key-audit/3" else
             "its corpus fingerprint does not cover how the texts are grouped into documents, which its counts "
             "depend on")
    return (f"a {fmt} certificate, an older format than {_CERTIFICATE_FORMAT}: {lacks}; re-run the audit "
            "(chainmark key audit) to write a new certificate")


def _level_problem(level: Any) -> str | None:
    """The problem with a certificate's level (below :data:`_CERTIFICATE_LEVEL`, or not a number), else None."""
    try:
        _check_level(level)
    except ValueError:
        return (f"the certificate's level is {level!r}, but a certificate states its bound at a confidence of "
                f"at least {_CERTIFICATE_LEVEL:g}: at a lower level its verdict passes keys whose rate lies "
                "above alpha")
    return None


def _internal_problems(cert: Mapping[str, Any]) -> list[str]:
    """The certificate's level, corpus, rows, minimum and verdict recomputed from its own counts."""
    level_problem = _level_problem(cert["level"])
    if level_problem:
        return [level_problem]
    missing = [f for f in _CORPUS_FIELDS if f not in cert["corpus"]]
    problems = [f"the certificate's corpus lacks {', '.join(missing)}"] if missing else []
    if cert["selection"].get("note") != _KEYS_TRIED_NOTE:
        problems.append("the certificate's selection lacks its note that keys_tried is declared, not verified")
    if cert["scope"] != (_SCOPE if cert["format"] == _CERTIFICATE_FORMAT else _SCOPE_4):
        problems.append("the certificate's scope is not the one every certificate states (what it certifies and "
                        "what it does not)")
    budget = cert["public_output_budget"]
    if not isinstance(budget, Mapping):
        budget = {}
    tokens = budget.get("tokens", "missing")
    if not (tokens is None or _is_count(tokens)) or budget.get("note") != _BUDGET_NOTE:
        problems.append("the certificate's public_output_budget must hold tokens (an integer >= 1, or null) and "
                        "its note")
    alpha, level = check_alpha(_promise(cert), "promise"), float(cert["level"])  # what the rows are judged against
    if cert["minimum_documents"] != _minimum_documents(alpha, level):
        problems.append(f"minimum_documents is {cert['minimum_documents']}, but promise {alpha:g} at level "
                        f"{level:g} needs {_minimum_documents(alpha, level)}")
    tests = cert["tests"]
    if cert["deploy_test"] not in tests:
        return problems + [f"the certificate has no row for its deploy_test {cert['deploy_test']!r}"]
    for test, row in tests.items():
        missing = [f for f in _ROW_FIELDS if f not in row]
        if missing:
            problems.append(f"the {test} row lacks {', '.join(missing)}")
            continue
        fresh = _row(np.arange(row["documents"]) < row["flagged"], row["texts"], alpha, level)
        for name in ("fpr", "ci_low", "ci_high", "upper_bound"):
            if not math.isclose(float(row[name]), fresh[name], rel_tol=1e-9, abs_tol=1e-12):
                problems.append(f"the {test} row's {name} is {row[name]!r}, but {row['flagged']} of "
                                f"{row['documents']} documents give {fresh[name]!r}")
        if row["certified"] != fresh["certified"]:
            problems.append(f"the {test} row says certified={row['certified']}, but its upper bound "
                            f"{fresh['upper_bound']:.4g} against the promise {alpha:g} says {fresh['certified']}")
    row = tests[cert["deploy_test"]]
    if row["documents"] != cert["corpus"].get("documents"):
        problems.append(f"the {cert['deploy_test']} row counts {row['documents']} documents, the corpus "
                        f"{cert['corpus'].get('documents')}")
    verdict = certify(row["flagged"], row["documents"], alpha, level)
    if cert["verdict"] != verdict:
        problems.append(f"the certificate's verdict is {cert['verdict']!r}, but {row['flagged']} of "
                        f"{row['documents']} documents flagged by the {cert['deploy_test']} test give {verdict!r}")
    selection = cert["selection"]
    own = (None, cert["corpus"].get("fingerprint"), cert["corpus"].get("texts_fingerprint"))
    if selection.get("keys_tried", 1) > 1 and selection.get("selected_on") in own:
        problems.append(f"the key was chosen among {selection['keys_tried']} on the corpus it is certified on: "
                        "its rate there is biased low")
    return problems


def recheck_certificate(cert: Mapping[str, Any], key: Key, texts: Sequence[Sequence[int]],
                        documents: Sequence[Any] | None = None, vocab_size: int | None = None) -> list[str]:
    """Recompute a certificate's counts and verdict with the key and the corpus it names, the same texts grouped
    into ``documents`` the same way (empty: they agree)."""
    problems = certificate_problems(cert)
    if problems:
        return problems
    if key_fingerprint(key) != cert["key_fingerprint"]:
        return [f"the key's fingerprint {key_fingerprint(key)} is not the certificate's {cert['key_fingerprint']}"]
    fresh = audit_key(ChainMarkConfig(key, S=cert["S"], topology=cert["topology"]), texts,
                      CertificationTarget(test=cert["deploy_test"], alpha=cert["alpha"], level=cert["level"],
                                          promise=_promise(cert)),
                      vocab_size=vocab_size, documents=documents)
    if fresh["corpus"]["fingerprint"] != cert["corpus"]["fingerprint"]:
        return [_corpus_mismatch(fresh["corpus"], cert["corpus"])]
    for test, row in cert["tests"].items():
        again = fresh["tests"].get(test)
        if again is None:
            problems.append(f"the certificate's test {test!r} is not one this package runs")
            continue
        for name in ("texts", "documents", "flagged", "texts_flagged"):
            if row.get(name) != again[name]:
                problems.append(f"the {test} row's {name} is {row.get(name)}, recomputed {again[name]}")
    if fresh["verdict"] != cert["verdict"]:
        problems.append(f"the verdict recomputed is {fresh['verdict']!r}, the certificate's {cert['verdict']!r}")
    return problems


def _corpus_mismatch(fresh: Mapping[str, Any], certified: Mapping[str, Any]) -> str:
    """Why a recheck's corpus is not the certified one: other texts, or the same texts grouped otherwise."""
    if fresh["texts_fingerprint"] != certified["texts_fingerprint"]:
        return (f"this corpus (fingerprint {fresh['fingerprint']}) is not the certified one "
                f"({certified['fingerprint']})")
    return (f"these are the certified texts, but grouped into documents differently: here {fresh['documents']} "
            f"documents (fingerprint {fresh['fingerprint']}), the certificate's {certified['documents']} "
            f"({certified['fingerprint']}; {certified['grouping']}); recheck with the certificate's grouping")


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
    """The certificate as a table: how the texts became documents, one row per test (the rate with its
    interval and upper bound, the corpus threshold), then the verdict, what it means, and the keys tried."""
    corpus = cert["corpus"]
    level = f"{100 * cert['level']:g}%"
    promise = _promise(cert)
    lines = [f"key {cert['key_fingerprint']}: S={cert['S']} {cert['topology']}, alpha={cert['alpha']:g}"
             + ("" if promise == cert["alpha"] else f" (the test's level), promise={promise:g}") + ", "
             f"{corpus['documents']} documents ({corpus['texts']} texts, {corpus['tokens']} tokens, "
             f"corpus {corpus['fingerprint']})",
             f"documents: {corpus['grouping']}",
             f"{'test':9s} {'flagged':>10s} {'FPR [95% CI]':>24s} {'upper ' + level:>10s}  {'certifies':9s} "
             "threshold on this corpus"]
    for test, row in cert["tests"].items():
        thr = (f"z > {row['z_threshold']:.3f}" if row.get("z_threshold") is not None else
               f"p < {row['p_threshold']:.3g}" if row.get("p_threshold") is not None else "(too few texts)")
        lines.append(f"{test:9s} {row['flagged']:>5d}/{row['documents']:<5d} "
                     f"{100 * row['fpr']:7.2f}% [{100 * row['ci_low']:.2f}, {100 * row['ci_high']:.2f}] "
                     f"{100 * row['upper_bound']:9.2f}%  {'yes' if row['certified'] else 'no':9s} {thr}")
    row = cert["tests"][cert["deploy_test"]]
    meaning = {
        "pass": f"the key's false-positive rate is at most {promise:g} with {level} confidence",
        "fail": f"the key's false-positive rate lies above {promise:g} with {level} confidence",
        "inconclusive": (f"the corpus cannot certify {promise:g}: the upper bound "
                         f"{100 * row['upper_bound']:.2f}% lies above it"
                         + (f" (certifying needs at least {cert['minimum_documents']} documents)"
                            if corpus["documents"] < cert["minimum_documents"] else "")),
    }[cert["verdict"]]
    lines.append(f"verdict for the {cert['deploy_test']} test: {cert['verdict'].upper()}: {meaning}")
    lines.append(f"certifies: {cert['scope']['certifies']}")
    lines.append(f"does not certify: {cert['scope']['does_not_certify']}")
    tokens = cert["public_output_budget"]["tokens"]
    lines.append(f"public-output budget: {tokens:,} tokens (declared, not verified)" if tokens is not None else
                 "public-output budget: not stated (chainmark key audit --public-output-budget TOKENS)")
    selection = cert["selection"]
    lines.append(f"chosen among {selection['keys_tried']} keys on corpus {selection['selected_on']}"
                 if selection["keys_tried"] > 1 else "keys tried: 1")
    lines[-1] += f"; {selection.get('note', _KEYS_TRIED_NOTE)}"
    return "\n".join(lines)


__all__ = ["CertificationTarget", "KeySelection", "audit_key", "certificate_problems", "certify", "format_audit",
           "fpr_across_keys", "read_certificate", "recheck_certificate", "seal"]

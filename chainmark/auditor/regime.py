"""The detection regime: the settings an audit applies, and the public document that publishes them.

A :class:`Regime` holds everything that decides a verdict (S, topology, alpha, the z threshold, the test, the
shortest text judged, the tokenizer by name and vocabulary fingerprint, the key by its fingerprint only) and owns
the decision. :func:`regime_document` writes the published document; :func:`_regime_problems` and
:func:`published_regime_problems` check a parsed one field by field, so that a regime file can never silently
change a verdict. ``chainmark regime`` and ``chainmark detect --regime`` are thin layers over these.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..config import ChainMarkConfig
from ..significance import TESTS
from ..gates import GATE_KINDS
from ..keys import key_fingerprint
from ..limits import MAX_STATES
from ..partition import key_bytes
from ..topology import TOPOLOGY_K, Topology, resolve_topology
from ..verdict import Verdict, decide
from .transit import AS_GIVEN, TextPreparation

#: Format tag of the published regime document.
_REGIME_FORMAT = "chainmark-regime/1"


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of a tokenizer's vocabulary (token -> id): two tokenizers with the same fingerprint map every
    token string to the same id, which is what the keyed partition needs."""
    if not hasattr(tokenizer, "get_vocab"):
        raise TypeError(f"tokenizer must have get_vocab(), got {type(tokenizer).__name__}")
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    blob = json.dumps(vocab, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def regime_document(key: bytes | str, regime: Regime, tokenizer: Any = None) -> dict[str, Any]:
    """The public detection regime a deployer publishes for ``key`` (JSON-ready; no key).

    ``regime`` holds the settings to publish (a deployer holding its
    :class:`~chainmark.config.ChainMarkConfig` passes ``Regime.from_config(config, alpha=..., test=...)``); the
    document adds the key's fingerprint and the vocabulary fingerprint and size of ``tokenizer`` (left out, the one
    ``regime`` names is loaded), so that an auditor's key and tokenizer can be checked against them. ``n_min``
    must be at least 2, and a certificate in ``key_audit`` must fit the key, the tokenizer and the regime
    (:meth:`Regime.check_certificate`).
    """
    if not isinstance(regime, Regime):
        raise TypeError(f"regime must be a chainmark.auditor.regime.Regime (the settings to publish), got "
                        f"{type(regime).__name__}")
    if not key_bytes(key):
        raise ValueError("key must be non-empty")
    resolve_topology(regime.topology, regime.S)  # a ValueError when they do not fit (soft_cycle with S = 2)
    if regime.n_min is not None and regime.n_min < 2:
        raise ValueError(f"n_min must be an integer >= 2, got {regime.n_min!r}")
    regime.check_key(key)
    if tokenizer is None:  # a published regime names its tokenizer by its vocabulary fingerprint
        from .tokenizer import load_tokenizer

        tokenizer = load_tokenizer(regime.tokenizer, revision=regime.tokenizer_revision)
    else:
        regime.check_tokenizer(tokenizer)
    regime = dataclasses.replace(
        regime, tokenizer_fingerprint=tokenizer_fingerprint(tokenizer), vocab_size=len(tokenizer),
        key_fingerprint=key_fingerprint(key), trades_fpr_for_power=True if regime.trades_fpr_for_power else None)
    regime.check_certificate(key, tokenizer)
    return regime.to_document()


def _is_int(value: Any, low: int, high: float = math.inf) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def _is_number(value: Any, low: float = -math.inf, high: float = math.inf, open_ends: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return low < value < high if open_ends else low <= value <= high


def _is_text(value: Any, optional: bool = False) -> bool:
    return isinstance(value, str) or (optional and value is None)


#: What the published test's alpha means, written into every regime document (``"guarantee"``) so that a
#: reader of the JSON alone knows what is promised and what is not.
_GUARANTEES = {
    "exact": ("size at most alpha for every text, repetitive ones included, over a uniformly random key; the "
              "deployed key's own false-positive rate on a corpus is what its key audit (key_audit) measures"),
    "z": ("the paper's z-test, a normal approximation: its exact size lies above alpha on short texts and at "
          "small alpha even without repeated tokens, and far above it on text that repeats its token pairs"),
    "distinct": ("the z-test on each distinct token pair once: close to alpha on text without repeated tokens, "
                 "not valid for every text"),
}

#: Every field of a regime document: (accepts the value, what it must be). None is
#: allowed only where the description says so.
_REGIME_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "format": (lambda v: v == _REGIME_FORMAT, f"the string {_REGIME_FORMAT!r}"),
    "scheme": (lambda v: v == "chainmark", "the string 'chainmark'"),
    "S": (lambda v: _is_int(v, 2, MAX_STATES), f"an integer in [2, {MAX_STATES}]"),
    "topology": (lambda v: v in TOPOLOGY_K, f"one of {sorted(TOPOLOGY_K)}"),
    "k": (lambda v: _is_int(v, 1, MAX_STATES - 1), f"an integer in [1, {MAX_STATES - 1}]"),
    "p0": (lambda v: _is_number(v, 0.0, 1.0, open_ends=True), "a number in (0, 1)"),
    "alpha": (lambda v: _is_number(v, 0.0, 1.0, open_ends=True), "a number in (0, 1)"),
    "z_alpha": (_is_number, "a finite number"),
    "threshold": (lambda v: v is None or _is_number(v), "a finite number or null"),
    "distinct_pairs": (lambda v: isinstance(v, bool), "true or false"),
    "test": (lambda v: v in TESTS, f"one of {list(TESTS)}"),
    "tokenizer": (lambda v: _is_text(v, optional=True), "a string or null"),
    "key_fingerprint": (lambda v: _is_text(v, optional=True), "a string or null"),
    "tokenizer_fingerprint": (lambda v: _is_text(v, optional=True), "a string or null"),
    "tokenizer_revision": (lambda v: _is_text(v, optional=True), "a string or null"),
    "vocab_size": (lambda v: _is_int(v, 1), "an integer >= 1"),
    "n_min": (lambda v: _is_int(v, 2), "an integer >= 2"),
    "rho": (lambda v: _is_number(v, 0.0, 1.0), "a number in [0, 1]"),
    "gate": (lambda v: v in GATE_KINDS, f"one of {list(GATE_KINDS)}"),
    "tau": (_is_number, "a finite number (the gate's threshold)"),
    "recalibration": (lambda v: isinstance(v, dict), "a JSON object"),
    "key_audit": (lambda v: isinstance(v, dict), "a JSON object (the key's audit certificate)"),
    "trades_fpr_for_power": (lambda v: isinstance(v, bool), "true or false"),
    "guarantee": (_is_text, "a string (what the test's alpha promises)"),
    "text_preparation": (lambda v: _preparation_problem(v) is None, 'a JSON object {"unicode": "NFC", "NFD", "NFKC", '
                         '"NFKD" or null, "newlines": "lf" or "keep", "html_entities": true or false}'),
    "digest": (lambda v: isinstance(v, str) and len(v) == 64, "a 64-digit hexadecimal SHA-256"),
}


def _preparation_problem(value: Any) -> str | None:
    """What is wrong with a document's ``"text_preparation"`` object, None when nothing is."""
    try:
        TextPreparation.from_document(value)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _shown(value: Any) -> str:
    """A short description of a regime value for an error message (strings are cut, never echoed whole)."""
    if isinstance(value, str):
        return f"the string {value[:20]!r}" + ("..." if len(value) > 20 else "")
    if isinstance(value, (list, dict)):
        return f"a JSON {'array' if isinstance(value, list) else 'object'}"
    return json.dumps(value) if isinstance(value, (bool, int, float)) or value is None else type(value).__name__


def _regime_problems(doc: Any) -> list[str]:
    """Everything wrong with a parsed regime document, field by field (empty when it is valid)."""
    if not isinstance(doc, dict) or doc.get("format") != _REGIME_FORMAT:
        return [f"not a {_REGIME_FORMAT} document"]
    unknown = sorted(set(doc) - set(_REGIME_FIELDS))
    problems = [f"unknown field(s) {', '.join(map(repr, unknown))}"] if unknown else []
    for name, value in doc.items():
        accepts, wanted = _REGIME_FIELDS.get(name, (None, ""))
        if accepts is not None and not accepts(value):
            problems.append(f'"{name}" must be {wanted}, got {_shown(value)}'
                            + (f" ({_preparation_problem(value)})" if name == "text_preparation" else ""))
    if doc.get("topology") in TOPOLOGY_K and _is_int(doc.get("k"), 1) and doc["k"] != TOPOLOGY_K[doc["topology"]]:
        problems.append(f'"k" is {doc["k"]}, but the {doc["topology"]} topology has k = {TOPOLOGY_K[doc["topology"]]}')
    test, distinct = doc.get("test"), doc.get("distinct_pairs")
    if test in TESTS and isinstance(distinct, bool) and distinct != (test == "distinct"):
        problems.append(f'"distinct_pairs" follows from "test": it must be {json.dumps(test == "distinct")} for the '
                        f'{test!r} test, got {json.dumps(distinct)}')
    problems += _k_below_S(doc)
    return problems


def _document_test(doc: Mapping[str, Any]) -> str | None:
    """The test a (checked) document names: its ``"test"``, else ``"distinct"`` when an older document says only
    ``"distinct_pairs": true``, else None (the paper's z-test)."""
    return doc.get("test") or ("distinct" if doc.get("distinct_pairs") else None)


def _k_below_S(doc: Mapping[str, Any]) -> list[str]:
    """The problem when a document's k (or its topology's) is not below S: k successors per state among S
    states needs 1 <= k <= S - 1 (k = S makes every transition legal, p0 = 1, and leaves nothing to detect)."""
    S = doc.get("S")
    if not _is_int(S, 2, MAX_STATES):
        return []
    rule = f"k successors per state among S states needs 1 <= k <= S - 1 = {S - 1}"
    if _is_int(doc.get("k"), 1) and doc["k"] >= S:
        return [f'"k" is {doc["k"]}, but k must be below S = {S}: {rule} (k = S would make every transition '
                'legal, p0 = k/S = 1, and leave nothing to detect)']
    topology = doc.get("topology")
    if topology in TOPOLOGY_K and TOPOLOGY_K[topology] >= S:
        return [f'the {topology} topology has k = {TOPOLOGY_K[topology]}, which must be below S = {S}: {rule} '
                f'(choose S >= {TOPOLOGY_K[topology] + 1} or the clockwork topology)']
    return []


#: Fields a published regime must carry, not null (``threshold`` may be null for the exact test alone).
_PUBLISHED_REQUIRED = ("format", "scheme", "S", "topology", "k", "p0", "alpha", "z_alpha", "threshold",
                      "distinct_pairs", "tokenizer_fingerprint", "key_fingerprint", "digest")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name, value in pairs:
        if name in seen:
            raise ValueError(f'the field "{name}" appears twice: a reader could take either value')
        seen[name] = value
    return seen


def parse_regime_text(text: str) -> Any:
    """Parse a regime file's JSON, refusing a field that appears twice and nesting deeper than a regime's."""
    depth = 0
    for ch in text:  # json's recursion limit is far deeper than a regime; refuse a bomb before parsing it
        if ch in "[{":
            depth += 1
            if depth > 32:
                raise ValueError("nested more than 32 levels deep: not a regime file")
        elif ch in "]}":
            depth -= 1
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg}, line {exc.lineno})") from None


def _regime_digest(doc: Mapping[str, Any]) -> str:
    """SHA-256 of a regime's canonical form (every field but the digest, sorted keys, no spaces)."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def published_regime_problems(doc: Any) -> list[str]:
    """:func:`_regime_problems`, plus what a published regime must satisfy: the required fields present and
    not null, k, p0 and z_alpha equal to what S, the topology and alpha give, a threshold no lower than
    z_alpha unless a ``recalibration`` or ``trades_fpr_for_power`` says why (none for the exact test), and
    the digest. The digest is not a signature (anyone can recompute it): it catches an edit made by
    mistake, and the rules above keep even a recomputed edit from flipping a verdict silently."""
    problems = _regime_problems(doc)
    if problems:
        return problems
    test = _document_test(doc) or "z"
    for name in _PUBLISHED_REQUIRED:
        if name not in doc:
            problems.append(f'"{name}" is missing')
        elif doc[name] is None and not (name == "threshold" and test == "exact"):
            problems.append(f'"{name}" is null')
    if problems:
        return problems
    from ..calibrate import z_alpha

    if doc.get("guarantee") != _GUARANTEES[test]:
        problems.append(f'"guarantee" must state what the {test} test promises: {_GUARANTEES[test]!r}')
    S, k, alpha = doc["S"], doc["k"], doc["alpha"]
    if not math.isclose(doc["p0"], k / S, rel_tol=1e-12, abs_tol=1e-15):
        problems.append(f'"p0" is {doc["p0"]}, but k/S = {k}/{S} = {k / S}')
    za = float(z_alpha(alpha))
    if not math.isclose(doc["z_alpha"], za, rel_tol=1e-9, abs_tol=1e-12):
        problems.append(f'"z_alpha" is {doc["z_alpha"]}, but alpha = {alpha} gives {za}')
    threshold = doc["threshold"]
    if test == "exact" and threshold is not None:
        problems.append('"threshold" must be null for the exact test, which decides by its p-value')
    if (threshold is not None and threshold < za - 1e-9 and doc.get("trades_fpr_for_power") is not True
            and not doc.get("recalibration")):
        problems.append(f'"threshold" {threshold} lies below z_alpha = {za:.4f} for alpha = {alpha}: on text '
                        'as the analytic null describes it, it would flag more than alpha; a regime publishes '
                        'such a threshold only with the "recalibration" that fitted it on a null corpus, or '
                        'saying "trades_fpr_for_power": true')
    if not problems and doc["digest"] != _regime_digest(doc):
        problems.append('"digest" does not match the document: it was changed after it was written')
    return problems


#: The optional fields of a regime document, in the order :meth:`Regime.to_document` writes them.
_OPTIONAL = ("test", "trades_fpr_for_power", "key_audit", "tokenizer_revision", "tokenizer_fingerprint",
             "vocab_size", "n_min", "rho", "gate", "tau", "recalibration", "text_preparation")
#: What the command line may set on top of a published regime (``chainmark detect``'s options).
_OPTIONS = ("S", "topology", "alpha", "threshold", "test", "n_min", "tokenizer", "tokenizer_revision",
            "text_preparation")


class RegimeError(ValueError):
    """A regime document (or a regime's settings) that cannot be applied; the message names every problem."""


@dataclass(frozen=True)
class Regime:
    """The detection settings an audit applies, and the decision they lead to.

    The defaults are the detector's: S = 5, clockwork, alpha = 0.01, no threshold (flag when p < alpha), no
    length floor. With a ``threshold`` on z a text is flagged when z exceeds it. ``n_min`` is the shortest text
    (in tokens) judged at all; ``tokenizer`` None means the embedded model's. The key appears only as its
    fingerprint. ``text_preparation`` is what the auditor does to a text before tokenizing it
    (:class:`~chainmark.auditor.transit.TextPreparation`: NFC and LF line endings unless the regime says
    otherwise; a published document that names none means the text as given).
    """

    S: int = 5
    topology: str = "clockwork"
    alpha: float = 0.01
    threshold: float | None = None
    n_min: int | None = None
    tokenizer: str | None = None
    tokenizer_revision: str | None = None
    tokenizer_fingerprint: str | None = None
    vocab_size: int | None = None
    key_fingerprint: str | None = None
    rho: float | None = None
    gate: str | None = None
    tau: float | None = None
    recalibration: dict[str, Any] | None = field(default=None, hash=False)
    test: str | None = None
    key_audit: dict[str, Any] | None = field(default=None, hash=False)
    trades_fpr_for_power: bool | None = None
    text_preparation: TextPreparation = TextPreparation()

    def __post_init__(self) -> None:
        problems = [f'"{name}" must be {wanted}, got {_shown(getattr(self, name))}'
                    for name, (accepts, wanted) in _REGIME_FIELDS.items()
                    if name in _FIELD_NAMES and name not in ("n_min", "text_preparation")
                    and getattr(self, name) is not None and not accepts(getattr(self, name))]
        if not isinstance(self.text_preparation, TextPreparation):
            problems.append(f'"text_preparation" must be a TextPreparation, got {_shown(self.text_preparation)}')
        if self.n_min is not None and not _is_int(self.n_min, 0):
            problems.append(f'"n_min" must be an integer >= 0, got {_shown(self.n_min)}')
        if self.test == "exact" and self.threshold is not None:
            problems.append('"threshold" is a threshold on z; the exact test decides by its p-value (set none)')
        if self.gate == "all" and self.rho not in (None, 1.0):
            problems.append(f'"gate" "all" opens every position, so "rho" must be 1, got {_shown(self.rho)}')
        if self.tau is not None and (self.gate in (None, "all") or self.rho is None):
            problems.append('"tau" is the threshold of a gate: publish it with its "gate" (not "all") and "rho"')
        if problems:
            raise RegimeError("; ".join(problems))

    @property
    def topo(self) -> Topology:
        """The topology over S states (a ``ValueError`` when the two do not fit, e.g. soft_cycle with S = 2)."""
        return resolve_topology(self.topology, self.S)

    @property
    def z_alpha(self) -> float:
        """The analytic one-sided threshold on z at alpha."""
        from ..calibrate import z_alpha

        return float(z_alpha(self.alpha))

    @property
    def effective_test(self) -> str:
        """The test this regime applies (:data:`chainmark.detection.TESTS`): ``test``, else the paper's ``"z"``."""
        return self.test or "z"

    @property
    def distinct_pairs(self) -> bool:
        """True for the distinct-pairs test: the document's derived ``"distinct_pairs"`` field (read-only; the test is
        chosen by ``test="distinct"``)."""
        return self.effective_test == "distinct"

    @property
    def exact(self) -> bool:
        """True for the exact binomial test, which decides by its p-value alone (no threshold on z)."""
        return self.effective_test == "exact"

    @property
    def operating_threshold(self) -> float:
        """The z threshold a published regime applies: ``threshold``, or z_alpha when none is set."""
        return self.threshold if self.threshold is not None else self.z_alpha

    @property
    def tokenizer_label(self) -> str:
        """The tokenizer's name, the embedded model's when none is named."""
        from .tokenizer import default_model_name

        return self.tokenizer or default_model_name()

    def config(self, key: bytes | str) -> ChainMarkConfig:
        """The configuration that detection under this regime takes with ``key``: S, the topology, and rho when the
        regime publishes it (the anytime detector's bets start from it), with its gate and threshold when published
        too (detection never reads them; a deployer regenerating under the regime does)."""
        gate = {} if self.rho is None or self.gate is None else {"gate": self.gate, "tau": self.tau}
        return ChainMarkConfig(key, S=self.S, topology=self.topo, **({} if self.rho is None else {"rho": self.rho}),
                               **gate)

    def too_short(self, verdict: Verdict) -> bool:
        """True when the text has no scored position or fewer tokens than ``n_min``: it is not judged."""
        return verdict.n_scored < 1 or verdict.n_tokens < (self.n_min or 0)

    def decide(self, verdict: Verdict) -> bool:
        """Whether this regime flags the text: long enough, and p < alpha, or z > threshold when one is set
        (the exact test always decides by its exact p-value)."""
        threshold = None if self.exact else self.threshold
        return not self.too_short(verdict) and bool(
            decide(z=verdict.z, p_value=verdict.p_value, alpha=self.alpha, threshold=threshold))

    def label(self, verdict: Verdict) -> str:
        """The decision in words, as the audit prints it: 'WATERMARKED', 'not detected' or 'too short'."""
        if self.too_short(verdict):
            return "too short"
        return "WATERMARKED" if self.decide(verdict) else "not detected"

    def check_key(self, key: bytes | str) -> None:
        """A ``RegimeError`` when the regime names a key fingerprint and ``key`` has another."""
        seen = key_fingerprint(key)
        if self.key_fingerprint not in (None, seen):
            raise RegimeError(f"the key's fingerprint {seen} does not match the regime's "
                              f"{self.key_fingerprint}: wrong key file?")

    def check_certificate(self, key: bytes | str, tokenizer: Any, *, strict_test: bool = True) -> list[str]:
        """A ``RegimeError`` when the regime carries a key-audit certificate with problems of its own (an older
        format, a level below 0.95, counts that contradict its verdict) or made for another key, tokenizer, S or
        topology (:func:`chainmark.auditor.keyaudit.certificate_problems`), or for another test or
        alpha. With ``strict_test=False`` (an auditor who chose another test or alpha on the command
        line) those two are returned as notes instead: the audit is valid, its rate is not certified."""
        if self.key_audit is None:
            return []
        from .keyaudit import certificate_problems

        problems = certificate_problems(self.key_audit, key_fingerprint=key_fingerprint(key),
                                        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer), S=self.S,
                                        topology=self.topology)
        other = [p for p in certificate_problems(self.key_audit, test=self.effective_test, alpha=self.alpha)
                 if p not in problems]  # the certificate's own problems are in both lists
        if strict_test:
            problems += other
        if problems:
            raise RegimeError("the regime's key-audit certificate does not fit this audit: " + "; ".join(problems))
        return other

    def check_tokenizer(self, tokenizer: Any) -> None:
        """A ``RegimeError`` when the regime names a vocabulary fingerprint and ``tokenizer`` has another."""
        if not self.tokenizer_fingerprint:
            return
        seen = tokenizer_fingerprint(tokenizer)
        if seen != self.tokenizer_fingerprint:
            raise RegimeError(
                f"tokenizer mismatch: {self.tokenizer_label!r} has vocabulary fingerprint "
                f"{seen}, the regime was published for {self.tokenizer_fingerprint}; detection "
                "with another tokenizer sees different token ids and finds nothing")

    @classmethod
    def from_document(cls, doc: Any) -> "Regime":
        """The regime of a parsed regime document, checked field by field (:func:`_regime_problems`).

        Fields the document leaves out (or sets to null) take the defaults; ``k``, ``p0`` and ``z_alpha`` follow
        from S, the topology and alpha, and ``distinct_pairs`` from the test (an older document that says
        ``"distinct_pairs": true`` and names no test means the distinct test).
        """
        problems = _regime_problems(doc)
        if problems:
            raise RegimeError("; ".join(problems))
        settings = {name: doc[name] for name in _FIELD_NAMES if doc.get(name) is not None}
        settings["text_preparation"] = (TextPreparation.from_document(doc["text_preparation"])
                                        if "text_preparation" in doc else AS_GIVEN)  # older documents: as given
        if _document_test(doc) is not None:
            settings["test"] = _document_test(doc)
        return cls(**settings)

    @classmethod
    def from_config(cls, config: ChainMarkConfig, **settings: Any) -> "Regime":
        """The published half of the configuration a deployer generates with: S, topology, rho, the gate and its
        threshold tau (when finite), the key only as its fingerprint; ``settings`` (alpha, test, threshold, n_min,
        ...) as for any regime."""
        tau = config.tau if config.tau is not None and math.isfinite(config.tau) else None
        return cls(S=config.S, topology=config.topo.name, rho=config.rho, gate=config.gate, tau=tau,
                   key_fingerprint=config.fingerprint, **settings)

    def to_document(self) -> dict[str, Any]:
        """The published regime document (JSON-ready): ``threshold`` is the operating threshold (none for the
        exact test), optional fields are written when set; a ``RegimeError`` when it cannot be published."""
        topo = self.topo
        doc: dict[str, Any] = {
            "format": _REGIME_FORMAT,
            "scheme": "chainmark",
            "S": self.S,
            "topology": topo.name,
            "k": topo.k,
            "p0": topo.p0,
            "alpha": self.alpha,
            "z_alpha": self.z_alpha,
            "threshold": None if self.exact else self.operating_threshold,
            "distinct_pairs": self.distinct_pairs,
            "tokenizer": self.tokenizer,
            "key_fingerprint": self.key_fingerprint,
            "guarantee": _GUARANTEES[self.effective_test],
        }
        doc.update({name: getattr(self, name) for name in _OPTIONAL if getattr(self, name) is not None})
        doc["text_preparation"] = self.text_preparation.to_document()
        for name in ("recalibration", "key_audit"):
            if doc.get(name) is not None:
                doc[name] = json.loads(json.dumps(doc[name]))  # a copy the caller cannot change
        doc["digest"] = _regime_digest(doc)
        problems = published_regime_problems(doc)
        if problems:
            raise RegimeError("this regime cannot be published: " + "; ".join(problems))
        return doc

    @classmethod
    def resolve(cls, document: Mapping[str, Any] | None = None, **options: Any) -> "Regime":
        """The regime an audit applies: explicit options (:data:`_OPTIONS`, None meaning not given) win over the
        published document, the document over the defaults. The document's tokenizer revision does not carry
        over to another tokenizer, nor its threshold (set for its alpha) to another alpha."""
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise TypeError(f"unknown regime option(s) {', '.join(unknown)}; choose from {_OPTIONS}")
        regime = cls.from_document(document) if document is not None else cls()
        given = {k: v for k, v in options.items() if v is not None}
        if given.get("test") == "exact":  # a test named here replaces the document's, its z threshold included
            given["threshold"] = None
        if document is not None and "tokenizer" in given:
            given.setdefault("tokenizer_revision", None)
        if document is not None and "alpha" in given and given["alpha"] != document.get("alpha"):
            given.setdefault("threshold", None)
        return dataclasses.replace(regime, **given)

    def replace(self, **changes: Any) -> "Regime":
        """A copy with some settings changed (checked like any regime)."""
        return dataclasses.replace(self, **changes)


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(Regime))


__all__ = ["Regime", "RegimeError", "parse_regime_text", "published_regime_problems", "regime_document",
           "tokenizer_fingerprint"]

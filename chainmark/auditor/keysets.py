"""Detection over a set of keys: keys per account or session, or rotated keys, with the family-wise error stated.

A provider that gives every account (or session, or month) its own key must ask of a text: was it watermarked
under any of my K keys, and which? Testing each key at alpha would flag unwatermarked text K times as often.
:func:`detect_over_keys` tests each key at alpha / K (Bonferroni): for any text, the chance over random keys
that some key flags it is at most K x alpha / K = alpha, whatever the keys' tests have in common, because each
test's p-value is valid on its own. With the exact test (the default) that holds for every text; with the
z-test only as far as its normal approximation does. The key that flags a text says whose key its watermark
carries: a forgery built from one account's stolen outputs points at that account's key.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..checks import check_alpha
from ..config import ChainMarkConfig
from ..significance import DEFAULT_TEST

__all__ = ["KeySetVerdict", "detect_over_keys"]


@dataclass(frozen=True)
class KeySetVerdict:
    """One text tested under K keys: each key's p-value, the Bonferroni-adjusted p-value and the keys that flag.

    ``flagged`` lists the indices (into the configurations given) whose p-value is below alpha / K;
    ``best`` is the index of the smallest p-value; ``adjusted_p_value`` = min(1, K x that p-value), so the text
    is flagged when it is below alpha (the rule of :func:`chainmark.verdict.decide`). ``fingerprints`` name the
    keys (never the keys themselves).
    """

    n_keys: int
    alpha: float
    test: str
    n_tokens: int
    p_values: tuple[float, ...]
    fingerprints: tuple[str, ...]
    best: int
    adjusted_p_value: float
    flagged: tuple[int, ...]

    @property
    def is_watermarked(self) -> bool:
        return bool(self.flagged)

    @property
    def key_fingerprint(self) -> str | None:
        """The fingerprint of the key with the smallest p-value when the text is flagged, else None."""
        return self.fingerprints[self.best] if self.flagged else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the decision, the adjusted p-value, the flagging keys' fingerprints and every p-value."""
        return {"n_keys": self.n_keys, "alpha": self.alpha, "per_key_alpha": self.alpha / self.n_keys,
                "test": self.test, "n_tokens": self.n_tokens, "is_watermarked": self.is_watermarked,
                "adjusted_p_value": self.adjusted_p_value, "key_fingerprint": self.key_fingerprint,
                "flagged_fingerprints": [self.fingerprints[i] for i in self.flagged],
                "p_values": dict(zip(self.fingerprints, self.p_values))}


def detect_over_keys(token_ids: Any, configs: Sequence[ChainMarkConfig], alpha: float = 0.01,
                     vocab_size: int | None = None, *, test: str = DEFAULT_TEST) -> KeySetVerdict:
    """Test one text under every configuration of ``configs`` (one per key) with family-wise error ``alpha``.

    Each key is tested at alpha / K; the family-wise error (some key flags an unwatermarked text) is at most
    alpha for every text over random keys with the exact test. The configurations may differ in S or topology
    as well as in key. Example::

        keys = [ChainMarkConfig(k, S=5) for k in account_keys]
        verdict = detect_over_keys(ids, keys)
        verdict.is_watermarked, verdict.key_fingerprint
    """
    from ..detection import detect

    configs = list(configs)
    if not configs:
        raise ValueError("configs is empty: pass one ChainMarkConfig per key")
    for i, c in enumerate(configs):
        if not isinstance(c, ChainMarkConfig):
            raise TypeError(f"configs[{i}] must be a ChainMarkConfig, got {type(c).__name__}")
    fingerprints = tuple(c.fingerprint for c in configs)
    if len(set(fingerprints)) < len(fingerprints):
        raise ValueError("configs holds the same key twice (equal fingerprints): each key once, or the "
                         "family-wise error is spent on a duplicate")
    alpha = check_alpha(alpha)
    K = len(configs)
    results = [detect(token_ids, c, alpha / K, vocab_size, test=test) for c in configs]
    p = tuple(float(r.p_value) for r in results)
    best = min(range(K), key=lambda i: p[i])
    flagged = tuple(i for i in range(K) if results[i].is_watermarked)
    return KeySetVerdict(K, alpha, test, int(results[0].n_tokens), p, fingerprints, best, min(1.0, K * p[best]),
                         flagged)

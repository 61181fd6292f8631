"""The paper's reference detector listing, re-stated per token: the oracle the vectorised detector is checked against.

Not part of the package: :func:`chainmark.detection.detect` is the detector.
This is the listing's plain loop (one ``hashlib`` SHA-256 per token), kept for
the tests (``test_detect``, ``test_properties``) and the speed benchmark
(``benchmarks/bench_detect.py``).
"""
from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np
from scipy.stats import norm

__all__ = ["reference_detect"]


def reference_detect(token_ids: Sequence[int], key: bytes, S: int, alpha: float = 0.01,
                     T: Sequence[Sequence[int]] | None = None) -> dict:
    """A plain per-token re-statement of the paper's reference detector listing.

    Written independently of :mod:`chainmark.detection`'s vectorised path, for
    the tests and the benchmark (the appendix writes the listing out on its
    page): it hashes every token with ``hashlib`` in a Python loop. Without ``T`` it is the clockwork listing
    itself (including its ``1 - norm.cdf(z)`` p-value, which loses all
    precision beyond z of about 8); with a 0/1 matrix ``T`` it applies the
    listing's stated extension to k-regular topologies
    (``T[s_i][s_{i+1}] > 0`` and ``p0 = (T > 0).mean()``).
    """
    n = len(token_ids)
    if n < 2:
        return {"phi": 0.0, "z": 0.0, "p_value": 1.0, "is_watermarked": False}
    st = [int.from_bytes(hashlib.sha256(key + int(t).to_bytes(8, "big")).digest()[:8], "big") % S
          for t in token_ids]
    if T is None:
        valid = sum(1 for i in range(n - 1) if st[i + 1] == (st[i] + 1) % S)
        p0 = 1.0 / S
    else:
        valid = sum(1 for i in range(n - 1) if T[st[i]][st[i + 1]] > 0)
        p0 = float((np.asarray(T) > 0).mean())
    phi = valid / (n - 1)
    se = math.sqrt(p0 * (1.0 - p0) / (n - 1))
    z = (phi - p0) / se
    p = 1.0 - norm.cdf(z)
    return {"phi": phi, "z": z, "p_value": p, "is_watermarked": p < alpha}

"""The LM-aware likelihood-ratio detector: a verifier who also has the model.

The model-free detector (:mod:`chainmark.detection`) counts legal transitions and
knows nothing of the gate. A verifier who can run the model recomputes, by
teacher forcing, the gate's signal at every step (:func:`teacher_forced_signal`),
turns it into the probability that the step was gated (:func:`gate_probabilities`)
and weighs each transition by it in a likelihood ratio whose null is simulated
(:func:`lr_detect`). Chapter 5 compares the two.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import torch

from chainmark.checks import check_alpha, check_options, check_states
from chainmark.config import ChainMarkConfig, takes_config
from chainmark.detection import valid_transitions
from chainmark.gates import Gate
from chainmark.partition import as_token_array, states_of
from chainmark.gate_signals import gate_signal
from chainmark.verdict import RECORD_FORM, FormField, Verdict, decide

__all__ = ["LikelihoodRatioResult", "SimulatedNull", "gate_probabilities", "lr_detect",
           "teacher_forced_signal"]


def teacher_forced_signal(model: Any, token_ids: Sequence[int], kind: str = "high_entropy",
                          prefix_ids: Sequence[int] | None = None) -> np.ndarray:
    """The gate's signal at the step that produced each token, from one forward pass.

    Feeds ``prefix_ids + token_ids`` to the model (teacher forcing) and
    evaluates the gate signal (entropy in nats, or the top-2 gap) of the
    next-token logits before every token of ``token_ids``; entry ``j``
    belongs to the step that generated ``token_ids[j]``, the same indexing
    as ``Generation.entropy``. Logits are taken raw, before temperature,
    which is what the watermark's gate saw during generation. Without a
    prefix the first entry has no context and is NaN.
    """
    ids = [int(t) for t in token_ids]
    prefix = [int(t) for t in (prefix_ids or [])]
    out = np.full(len(ids), np.nan)
    if not ids or len(prefix) + len(ids) < 2:
        return out
    device = next(model.parameters()).device
    inputs = torch.tensor([prefix + ids[:-1]], device=device)  # the last token predicts nothing we need
    with torch.no_grad():
        logits = model(input_ids=inputs).logits[0]
    signal = gate_signal(logits.float(), kind).cpu().numpy().astype(float)
    start = len(prefix) - 1  # logits at position p predict token p + 1
    if start >= 0:
        out[:] = signal[start:start + len(ids)]
    else:
        out[1:] = signal[:len(ids) - 1]
    return out


def gate_probabilities(signal: Any, gate: Any, width: float = 0.0, eps: float = 0.05) -> np.ndarray:
    """Probability q_i that step i was gated, from the recomputed gate signal.

    ``width = 0`` uses the gate itself (q = 0 or 1). A positive ``width``
    (in the signal's units, e.g. nats) softens it into a logistic ramp
    around tau, for a verifier whose recomputed signal is only close to the
    one the generator saw (a missing prompt, other numerics). Either way q
    is capped at ``1 - eps``: a likelihood ratio that treats a step as
    surely gated sends log(1 - pi) to minus infinity on a single illegal
    transition there, and one re-tokenized token or one misjudged gate
    would veto any amount of evidence. ``eps`` is the probability allowed
    for "looked gated but was not". NaN signals (no context) give q = 0.
    """
    if not isinstance(gate, Gate):
        raise TypeError(f"gate must be a chainmark Gate, got {type(gate).__name__}")
    if isinstance(width, bool) or not isinstance(width, (int, float, np.integer, np.floating)) or width < 0:
        raise ValueError(f"width must be a number >= 0, got {width!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) or not 0 < eps < 1:
        raise ValueError(f"eps must lie in (0, 1), got {eps!r}")
    signal = np.asarray(signal, dtype=float)
    if gate.kind == "all":
        q = np.ones_like(signal)
    elif width == 0:
        q = np.asarray(gate.flags_from_signal(signal), dtype=float)
    else:
        margin = (signal - gate.tau) if gate.kind == "high_entropy" else (gate.tau - signal)
        with np.errstate(over="ignore", invalid="ignore"):
            q = 1.0 / (1.0 + np.exp(-margin / width))
        if not math.isfinite(gate.tau):  # rho = 0 or 1: the gate is constant
            q = np.asarray(gate.flags_from_signal(signal), dtype=float)
    q = np.where(np.isnan(signal), 0.0, q)
    return np.minimum(q, 1.0 - eps)


@dataclass
class LikelihoodRatioResult(Verdict):
    """The LM-aware detector's verdict on one token sequence: a :class:`~chainmark.verdict.Verdict`.

    ``llr`` is the product-form log-likelihood ratio Lambda (nats);
    ``critical_value`` its simulated null (1 - alpha)-quantile; ``p_value``
    the share of null draws at least as large (with the +1 correction);
    ``z`` Lambda standardised by its exact null mean and SD, for reference.
    ``n_scored`` and ``n_hits`` count every transition and the legal ones
    (``n_transitions`` and ``n_valid`` in its dictionary).
    """

    llr: float
    critical_value: float
    expected_gated: float
    n_null: int
    pi: np.ndarray = field(repr=False)
    valid_mask: np.ndarray = field(repr=False)

    FORMS: ClassVar[Mapping[str, tuple[FormField, ...]]] = {
        "result": ("llr", "critical_value", "p_value", "z", "is_watermarked", "n_tokens",
                   ("n_transitions", "n_scored"), ("n_valid", "n_hits"), "expected_gated", "p0", "alpha", "n_null"),
        "record": RECORD_FORM,
    }
    MASKS: ClassVar[tuple[str, ...]] = ("valid_mask",)



def _llr_weights(q: np.ndarray, p0: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step alternative probability pi and the LLR's weights for X = 1 and X = 0.

    Under the watermark a gated step is legal for sure and an ungated one
    with p0, so pi_i = q_i + (1 - q_i) p0 (the paper's g_i + (1 - g_i)/S
    for k = 1). A legal step adds log(pi/p0), an illegal one
    log((1 - pi)/(1 - p0)); ungated steps (pi = p0) add nothing.
    """
    q = np.asarray(q, dtype=float)
    if q.size and (np.nanmin(q) < 0 or np.nanmax(q) >= 1 or np.isnan(q).any()):
        raise ValueError("gate probabilities q must lie in [0, 1) (cap them with eps)")
    pi = q + (1.0 - q) * p0
    return pi, np.log(pi / p0), np.log((1.0 - pi) / (1.0 - p0))


def _simulate_llr_null(q: np.ndarray, p0: float, n_null: int = 20000, seed: int | None = 0) -> np.ndarray:
    """Draws of Lambda when the text carries no watermark under this key.

    Under the null each step is legal independently with probability p0
    (the random-oracle product law), whatever the model thinks of the text,
    because the states come from the key and the gate from the model.
    """
    _, w1, w0 = _llr_weights(q, p0)
    rng = np.random.default_rng(seed)
    legal = rng.random((int(n_null), w1.size)) < p0
    return legal @ (w1 - w0) + w0.sum()


@dataclass(frozen=True)
class SimulatedNull:
    """How :func:`lr_detect` judges Lambda: at level ``alpha``, against ``n_null`` draws of its null
    (:func:`_simulate_llr_null`, seeded with ``seed``, so results are reproducible)."""

    alpha: float = 0.01
    n_null: int = 20000
    seed: int | None = 0


@takes_config()
def lr_detect(
    token_ids: Any,
    config: ChainMarkConfig,
    gate_probs: Any,
    *,
    vocab_size: int | None = None,
    null: SimulatedNull | None = None,
) -> LikelihoodRatioResult:
    """Likelihood-ratio test of one sequence under ``config`` (its key, S and topology, as
    :func:`~chainmark.detection.detect` reads them), given per-transition gate probabilities.

    ``gate_probs[i]`` is the probability that the step producing
    ``token_ids[i + 1]`` was gated (length n - 1; see
    :func:`gate_probabilities`). The critical value and p-value come from
    ``n_null`` simulated null draws (seeded, so results are reproducible): a :class:`SimulatedNull`,
    for example ``SimulatedNull(alpha=0.01, n_null=5000, seed=3)``.
    """
    null = check_options(SimulatedNull, null, "null")
    alpha, n_null, seed = null.alpha, null.n_null, null.seed
    S = check_states(config.S)
    alpha = check_alpha(alpha)
    topo = config.topo
    if topo.k is None:
        raise ValueError("detection needs a k-regular topology (p0 = k/S); this one is irregular")
    if isinstance(n_null, bool) or not isinstance(n_null, (int, np.integer)) or n_null < 100:
        raise ValueError(f"n_null must be an integer >= 100, got {n_null!r}")
    ids = as_token_array(token_ids, vocab_size)
    n = int(ids.size)
    q = np.asarray(gate_probs, dtype=float).ravel()
    if q.size != max(n - 1, 0):
        raise ValueError(f"gate_probs needs one entry per transition ({max(n - 1, 0)}), got {q.size}")
    p0 = topo.p0
    if n < 2:
        empty = np.zeros(0)
        return LikelihoodRatioResult(phi=0.0, z=0.0, p_value=1.0, is_watermarked=False, n_tokens=n, n_scored=0,
                                     n_hits=0, p0=p0, alpha=alpha, llr=0.0, critical_value=0.0, expected_gated=0.0,
                                     n_null=int(n_null), pi=empty, valid_mask=empty.astype(bool))
    valid = valid_transitions(states_of(ids, config.key, S, vocab_size), topo)
    pi, w1, w0 = _llr_weights(q, p0)
    llr = float(np.where(valid, w1, w0).sum())
    draws = _simulate_llr_null(q, p0, n_null, seed)
    critical = float(np.quantile(draws, 1.0 - alpha, method="higher"))
    p = (1.0 + np.count_nonzero(draws >= llr - 1e-12)) / (n_null + 1.0)
    mean = float((p0 * w1 + (1 - p0) * w0).sum())
    sd = math.sqrt(float((p0 * (1 - p0) * (w1 - w0) ** 2).sum()))
    z = (llr - mean) / sd if sd > 0 else 0.0
    hits = int(np.count_nonzero(valid))
    return LikelihoodRatioResult(phi=hits / (n - 1), z=z, p_value=float(p),
                                 is_watermarked=bool(decide(z=z, p_value=p, alpha=alpha)), n_tokens=n,
                                 n_scored=n - 1, n_hits=hits, p0=p0, alpha=alpha, llr=llr, critical_value=critical,
                                 expected_gated=float(q.sum()), n_null=int(n_null), pi=pi, valid_mask=valid)

"""Baselines for the head-to-head: KGW and SWEET, at the paper's operating point.

**KGW** (Kirchenbauer et al. 2023) is taken from ``transformers``' own
watermarking: :class:`transformers.generation.logits_process.WatermarkLogitsProcessor`
draws a "green list" of ``gamma V`` tokens from a pseudo-random permutation
seeded by the previous token and the hashing key, and adds ``delta`` to their
logits; :class:`transformers.WatermarkDetector` counts green tokens and
reports ``z = (g - gamma m) / sqrt(m gamma (1 - gamma))``. The paper runs it
at ``gamma = 0.5``, ``delta = 2``.

**SWEET** (Lee et al. 2023) is KGW applied only where the model is unsure:
the bias is added only at positions whose next-token entropy exceeds a
threshold ``tau`` (calibrated so a share ``rho = 0.5`` of positions pass, as
ChainMark's high-entropy gate), and the detector scores only those
positions. It must therefore recompute the entropies, which takes the
language model itself at detection time: a teacher-forced forward pass over
the text. ChainMark's and KGW's detectors need only the key and the
tokenizer.

Three choices of ours, each for a reason:

* the KGW hashing key is derived from the book's secret key with HKDF, so
  all methods share one secret and records can show its fingerprint only;
* green lists are always drawn on the CPU: ``torch.randperm`` with a seeded
  generator gives a different permutation on a GPU, so text generated on
  CUDA would otherwise not be detectable by an auditor on a laptop;
* the p-value is computed from ``z`` with ``scipy.stats.norm.sf`` (as
  ChainMark's detector does), and the detector's own p-value and the exact
  binomial tail are reported next to it, because the normal approximation
  behind any ``z``-based p-value is far off in the extreme tail (chapter 8
  shows by how much).
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import torch
from scipy.special import logsumexp
from scipy.stats import binom, norm
from transformers import WatermarkDetector, WatermarkingConfig
from transformers.generation.logits_process import WatermarkLogitsProcessor

from chainmark.checks import check_alpha
from chainmark.gates import Gate
from chainmark.gate_signals import gate_flags
from chainmark.keys import derive_key, key_fingerprint
from chainmark.partition import Key, as_token_array, key_bytes
from chainmark.checks import check_int
from cmlab.comparison.quality import score_tokens
from chainmark.verdict import RECORD_FORM, FormField, Verdict, decide

#: The paper's KGW operating point: green-list share and logit bias.
_KGW_GAMMA = 0.5
_KGW_DELTA = 2.0


# --------------------------------------------------------------------------- configuration


@contextlib.contextmanager
def _one_thread():
    """Run green-list draws single-threaded.

    ``torch.randperm`` with a generator is parallelised on the CPU, which
    gains nothing at vocabulary size and on a busy machine costs 10-40x
    (measured); the model's own matmuls keep their threads.
    """
    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _kgw_hashing_key(key: Key) -> int:
    """The integer hashing key ``transformers``' KGW needs, derived from ``key`` (HKDF).

    56 bits, so that it (and the seeds computed from it) stay inside the range
    ``torch.Generator.manual_seed`` accepts. It is as secret as the key.
    """
    return int.from_bytes(derive_key(key, "baselines/kgw-hashing-key", 7), "big")


def _check_gamma(gamma: object) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating)):
        raise TypeError(f"gamma must be a number in (0, 1), got {type(gamma).__name__}")
    if not 0.0 < float(gamma) < 1.0:
        raise ValueError(f"gamma (green-list share) must lie in (0, 1), got {gamma}")
    return float(gamma)


def _check_bias(delta: object) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating)):
        raise TypeError(f"delta must be a number >= 0, got {type(delta).__name__}")
    if not (math.isfinite(float(delta)) and float(delta) >= 0.0):
        raise ValueError(f"delta (logit bias) must be a finite number >= 0, got {delta}")
    return float(delta)


@dataclass(frozen=True)
class KGWConfig:
    """KGW watermark settings (lefthash, context width 1). The key never appears in its repr."""

    key: Key = field(repr=False)
    gamma: float = _KGW_GAMMA
    delta: float = _KGW_DELTA

    def __post_init__(self) -> None:
        if len(key_bytes(self.key)) == 0:
            raise ValueError("key must not be empty")
        object.__setattr__(self, "gamma", _check_gamma(self.gamma))
        object.__setattr__(self, "delta", _check_bias(self.delta))

    @property
    def hashing_key(self) -> int:
        return _kgw_hashing_key(self.key)

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.key)

    def watermarking_config(self) -> WatermarkingConfig:
        """The same settings as ``transformers``' own :class:`WatermarkingConfig`."""
        return WatermarkingConfig(greenlist_ratio=self.gamma, bias=self.delta,
                                  hashing_key=self.hashing_key, seeding_scheme="lefthash",
                                  context_width=1)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description with the key's fingerprint, never the key."""
        return {"method": "kgw", "key_fingerprint": self.fingerprint, "gamma": self.gamma,
                "delta": self.delta, "seeding_scheme": "lefthash", "context_width": 1}


@dataclass(frozen=True)
class SweetConfig:
    """SWEET: KGW's bias only at high-entropy positions (entropy > ``gate.tau``)."""

    key: Key = field(repr=False)
    gate: Gate = field(default_factory=lambda: Gate("high_entropy", math.inf))
    gamma: float = _KGW_GAMMA
    delta: float = _KGW_DELTA

    def __post_init__(self) -> None:
        if not isinstance(self.gate, Gate):
            raise TypeError(f"gate must be a chainmark.gates.Gate, got {type(self.gate).__name__}")
        if self.gate.kind != "high_entropy":
            raise ValueError(f"SWEET gates on high entropy: gate.kind must be 'high_entropy', "
                             f"got {self.gate.kind!r}")
        self.kgw  # validates key, gamma, delta

    @property
    def kgw(self) -> KGWConfig:
        return KGWConfig(self.key, self.gamma, self.delta)

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.key)

    def describe(self) -> dict[str, Any]:
        return {**self.kgw.describe(), "method": "sweet", "gate": self.gate.kind,
                "tau": float(self.gate.tau)}


# --------------------------------------------------------------------------- generation


class KGWLogitsProcessor(WatermarkLogitsProcessor):
    """``transformers``' KGW processor, optionally gated (SWEET), batched, device-independent.

    Green lists come from the parent class's own ``_get_greenlist_ids`` but
    are always drawn on the CPU (see the module notes), then moved to the
    logits' device. With a ``gate``, the bias is added only in rows whose
    gate is open (SWEET). ``gated`` records, per step, which rows got the
    bias; :meth:`reset` clears it between batches.
    """

    def __init__(self, config: KGWConfig | SweetConfig, vocab_size: int):
        if isinstance(config, SweetConfig):
            kgw, gate = config.kgw, config.gate
        elif isinstance(config, KGWConfig):
            kgw, gate = config, None
        else:
            raise TypeError(f"config must be a KGWConfig or a SweetConfig, got {type(config).__name__}")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 2:
            raise ValueError(f"vocab_size must be an integer >= 2 (the width of the logits), got {vocab_size!r}")
        with _one_thread():
            super().__init__(vocab_size=int(vocab_size), device="cpu", greenlist_ratio=kgw.gamma,
                             bias=kgw.delta, hashing_key=kgw.hashing_key, seeding_scheme="lefthash",
                             context_width=1)
        self.fixed_table = None  # only the 'selfhash' scheme reads it; 8 MB we do not need
        self.gate = gate
        self.gated: list[torch.Tensor] = []

    def reset(self) -> None:
        self.gated.clear()

    def greenlist(self, prev_token: int) -> torch.Tensor:
        """Green token ids (CPU, int64) after ``prev_token``: transformers' own draw."""
        return self._get_greenlist_ids(torch.tensor([int(prev_token)], dtype=torch.long))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[-1] != self.vocab_size:
            raise ValueError(f"the processor was built for {self.vocab_size} logits but got "
                             f"{scores.shape[-1]}; pass vocab_size = the width of the model's logits")
        if self.gate is None:
            flags = torch.ones(scores.shape[0], dtype=torch.bool)
        else:
            flags = gate_flags(self.gate, scores).cpu()
        self.gated.append(flags)
        rows = torch.nonzero(flags).flatten().tolist()
        if not rows:
            return scores
        out = scores.clone()
        last = input_ids[:, -1].tolist()
        with _one_thread():
            greens = [self.greenlist(last[b]) for b in rows]
        for b, green in zip(rows, greens):
            out[b, green.to(scores.device)] += self.bias
        return out

    def gated_matrix(self) -> np.ndarray:
        """Recorded gate flags as a (batch, steps) boolean array."""
        if not self.gated:
            return np.zeros((0, 0), dtype=bool)
        return torch.stack(self.gated, dim=1).numpy().astype(bool)


# --------------------------------------------------------------------------- detection


@dataclass
class BaselineResult(Verdict):
    """Detection by a green-list detector (KGW or SWEET) on one token sequence: a :class:`~chainmark.verdict.Verdict`.

    ``phi`` is the green fraction among scored positions (the analogue of
    ChainMark's legal-transition fraction): ``n_hits`` green positions of
    ``n_scored``, against the green share ``p0`` (the config's ``gamma``;
    the dictionaries name them ``n_green`` and ``gamma``). ``p_value`` is
    ``norm.sf(z)``; ``p_value_binomial`` is the exact
    tail ``P(Bin(m, gamma) >= g)`` and ``p_value_transformers`` what
    ``transformers``' detector reported (KGW only; NaN otherwise).
    """

    method: str = "kgw"
    p_value_binomial: float = math.nan
    p_value_transformers: float = math.nan
    green_mask: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), repr=False)
    scored_mask: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), repr=False)

    FORMS: ClassVar[Mapping[str, tuple[FormField, ...]]] = {
        "result": ("phi", "z", "p_value", "is_watermarked", "n_tokens", "n_scored", ("n_green", "n_hits"),
                   ("gamma", "p0"), "alpha", "p_value_binomial"),
        # a stored record keeps the green count and the exact tail next to the common fields
        "record": (*RECORD_FORM, ("n_green", "n_hits"), "p_value_binomial"),
    }
    MASKS: ClassVar[tuple[str, ...]] = ("green_mask", "scored_mask")


def _check_counts(n_green: object, n_scored: object) -> tuple[int, int]:
    """Green and scored counts: integers with 0 <= n_green <= n_scored."""
    n_scored = check_int(n_scored, "n_scored", 0)
    if isinstance(n_green, bool) or not isinstance(n_green, (int, np.integer)):
        raise TypeError(f"n_green must be an integer >= 0, got {type(n_green).__name__}")
    if not 0 <= n_green <= n_scored:
        raise ValueError(f"n_green must lie in [0, n_scored] = [0, {n_scored}] (green positions are "
                         f"among the scored ones), got {n_green}")
    return int(n_green), int(n_scored)


def _green_z(n_green: int, n_scored: int, gamma: float) -> float:
    """KGW's one-proportion z-score (0 when nothing is scored).

    ``n_green`` green positions among ``n_scored`` scored ones, so
    0 <= n_green <= n_scored; ``gamma`` (the green-list share) lies in (0, 1).
    Anything else is an error naming the parameter.
    """
    n_green, n_scored = _check_counts(n_green, n_scored)
    gamma = _check_gamma(gamma)
    if n_scored == 0:
        return 0.0
    return (n_green - gamma * n_scored) / math.sqrt(n_scored * gamma * (1.0 - gamma))


def _result(method: str, n_tokens: int, n_green: int, n_scored: int, gamma: float, alpha: float,
            p_transformers: float = math.nan, green: np.ndarray | None = None,
            scored: np.ndarray | None = None) -> BaselineResult:
    m, g = int(n_scored), int(n_green)
    z = _green_z(g, m, gamma)
    p = float(norm.sf(z)) if m else 1.0
    p_exact = float(binom.sf(g - 1, m, gamma)) if m else 1.0
    empty = np.zeros(0, dtype=bool)
    return BaselineResult(phi=g / m if m else 0.0, z=z, p_value=p,
                          is_watermarked=m > 0 and bool(decide(z=z, p_value=p, alpha=alpha)), n_tokens=n_tokens,
                          n_scored=m, n_hits=g, p0=gamma, alpha=alpha, method=method, p_value_binomial=p_exact,
                          p_value_transformers=p_transformers, green_mask=empty if green is None else green,
                          scored_mask=empty if scored is None else scored)


def _green_mask(token_ids: Sequence[int], config: KGWConfig, vocab_size: int) -> np.ndarray:
    """Entry ``i - 1`` says whether token ``i`` is green given token ``i - 1`` (length n - 1).

    Uses the same green lists as generation (``transformers``' own draw, on
    the CPU), one draw per distinct previous token.
    """
    ids = as_token_array(token_ids, vocab_size).tolist()
    proc = _processor(config, int(vocab_size))
    cache: dict[int, torch.Tensor] = {}
    out = np.zeros(max(len(ids) - 1, 0), dtype=bool)
    with _one_thread():
        for i in range(1, len(ids)):
            prev = ids[i - 1]
            if prev not in cache:
                mask = torch.zeros(vocab_size, dtype=torch.bool)
                mask[proc.greenlist(prev)] = True
                cache[prev] = mask
            out[i - 1] = bool(cache[prev][ids[i]])
    return out


@functools.lru_cache(maxsize=8)
def _processor(config: KGWConfig, vocab_size: int) -> KGWLogitsProcessor:
    return KGWLogitsProcessor(config, vocab_size)


@functools.lru_cache(maxsize=8)
def _kgw_detector(config: KGWConfig, vocab_size: int) -> WatermarkDetector:
    """``transformers``' :class:`WatermarkDetector` for ``config`` (cached, CPU).

    An auditor needs the model's *configuration* only for its vocabulary
    size and BOS id; we pass exactly that (no BOS: generated text is scored
    with the prompt stripped), so no model weights are involved.
    """
    model_config = SimpleNamespace(vocab_size=int(vocab_size), bos_token_id=-1, is_encoder_decoder=False)
    return WatermarkDetector(model_config=model_config, device="cpu",
                             watermarking_config=config.watermarking_config())


def kgw_detect(token_ids: Any, config: KGWConfig, vocab_size: int, alpha: float = 0.01,
               masks: bool = False) -> BaselineResult:
    """Score one token sequence with ``transformers``' KGW detector; p from ``norm.sf(z)``.

    Every token after the first is scored (its green list depends on the
    token before it). Sequences of fewer than two tokens cannot be scored
    and get ``z = 0``, ``p = 1``. ``masks=True`` also recomputes the per-token
    green flags (for plots), checked against the detector's count.
    """
    if not isinstance(config, KGWConfig):
        raise TypeError(f"config must be a KGWConfig, got {type(config).__name__}")
    alpha = check_alpha(alpha)
    ids = as_token_array(token_ids, vocab_size).tolist()
    n = len(ids)
    if n < 2:
        return _result("kgw", n, 0, 0, config.gamma, alpha)
    with _one_thread():
        out = _kgw_detector(config, int(vocab_size))(torch.tensor([ids], dtype=torch.long),
                                                     z_threshold=float(norm.isf(alpha)), return_dict=True)
    m = int(np.asarray(out.num_tokens_scored).ravel()[0])
    g = int(np.asarray(out.num_green_tokens).ravel()[0])
    p_hf = float(np.asarray(out.p_value).ravel()[0])
    green = scored = None
    if masks:
        green, scored = _green_mask(ids, config, vocab_size), np.ones(n - 1, dtype=bool)
        if int(green.sum()) != g or scored.size != m:
            raise RuntimeError("transformers' detector and our green lists disagree")
    return _result("kgw", n, g, m, config.gamma, alpha, p_hf, green, scored)


def text_entropies(model: Any, token_ids: Sequence[Sequence[int]],
                   prompt_ids: Sequence[Sequence[int]] | None = None, batch_size: int = 8) -> list[np.ndarray]:
    """Next-token entropy (nats, temperature 1) at every position of each text, by teacher forcing.

    With ``prompt_ids`` (what the generator saw before the text) entry ``i``
    is the entropy of the distribution that produced token ``i``, as at
    generation. Without it the text is its own context: the first token has
    no entropy (NaN) and the others are conditioned on the text only. This
    is SWEET's detection-time cost: a forward pass of the language model.
    """
    texts = [as_token_array(t).tolist() for t in token_ids]
    if prompt_ids is not None and len(prompt_ids) != len(texts):
        raise ValueError("prompt_ids must have one entry per text")
    out: list[np.ndarray | None] = [None] * len(texts)
    ctx, tgt, where = [], [], []
    for j, ids in enumerate(texts):
        context = list(prompt_ids[j]) if prompt_ids is not None else ids[:1]
        target = ids if prompt_ids is not None else ids[1:]
        if not context or not target:
            out[j] = np.full(len(ids), np.nan)
            continue
        ctx.append(context)
        tgt.append(target)
        where.append(j)
    if ctx:
        scores = score_tokens(model, ctx, tgt, batch_size=batch_size)
        for j, s in zip(where, scores):
            ent = np.asarray(s.entropy, dtype=float)
            out[j] = ent if prompt_ids is not None else np.concatenate([[np.nan], ent])
    return [np.asarray(e) for e in out]  # type: ignore[arg-type]


def _sweet_detect(token_ids: Any, config: SweetConfig, vocab_size: int, entropies: Any,
                 alpha: float = 0.01) -> BaselineResult:
    """SWEET's detector, given the text's entropies (from :func:`text_entropies`).

    Token ``i >= 1`` is scored when its entropy exceeds ``tau``; the green
    fraction among scored tokens gives ``z``. The entropies are the part that
    needs the model; :func:`sweet_detect_batch` computes them.
    """
    if not isinstance(config, SweetConfig):
        raise TypeError(f"config must be a SweetConfig, got {type(config).__name__}")
    alpha = check_alpha(alpha)
    ids = as_token_array(token_ids).tolist()
    ent = np.asarray(entropies, dtype=float).ravel()
    if ent.size != len(ids):
        raise ValueError(f"entropies has {ent.size} entries for {len(ids)} tokens")
    if len(ids) < 2:
        return _result("sweet", len(ids), 0, 0, config.gamma, alpha)
    green = _green_mask(ids, config.kgw, vocab_size)
    with np.errstate(invalid="ignore"):
        scored = np.asarray(config.gate.flags_from_signal(ent[1:]), dtype=bool) & np.isfinite(ent[1:])
    return _result("sweet", len(ids), int((green & scored).sum()), int(scored.sum()), config.gamma,
                   alpha, green=green, scored=scored)


def sweet_detect_batch(token_ids: Sequence[Sequence[int]], config: SweetConfig, model: Any,
                       vocab_size: int, prompt_ids: Sequence[Sequence[int]] | None = None,
                       alpha: float = 0.01, batch_size: int = 8) -> list[BaselineResult]:
    """SWEET detection of several texts: one batched forward pass for the entropies, then scoring."""
    ents = text_entropies(model, token_ids, prompt_ids, batch_size=batch_size)
    return [_sweet_detect(ids, config, vocab_size, e, alpha) for ids, e in zip(token_ids, ents)]


# --------------------------------------------------------------------------- p-values in the tail


def transformers_p_value(z: Any) -> np.ndarray:
    """The p-value ``transformers``' ``WatermarkDetector`` computes from z-scores (its own ``_compute_pval``,
    whose form depends on the release; see :func:`tail_p_values`), as a float array of ``z``'s shape."""
    z = np.asarray(z, dtype=float)
    return np.asarray(WatermarkDetector._compute_pval(None, z), dtype=float).reshape(z.shape)


def tail_p_values(n_green: int, n_scored: int, gamma: float = _KGW_GAMMA) -> dict[str, float]:
    """Three p-values for the same green count: the chapter's tail comparison.

    ``transformers``: what ``WatermarkDetector`` computes from z (its own
    ``_compute_pval``: ``0.5 * erfc(z / sqrt 2)`` in recent releases, the
    stand-in ``0.5 * exp(-2 z**2 / pi)`` in older ones such as 5.17); ``norm_sf``: ``scipy.stats.norm.sf(z)``
    (what we report); ``binomial``: the exact tail of the green count under
    the null, ``P(Bin(m, gamma) >= g)``; ``confidence``: the detector's
    ``1 - p``, which rounds to exactly 1 long before the p-value underflows.
    ``n_green`` counts green positions among ``n_scored`` scored ones
    (0 <= n_green <= n_scored) and ``gamma`` lies in (0, 1), as for :func:`_green_z`.
    """
    z = _green_z(n_green, n_scored, gamma)
    n_green, n_scored = int(n_green), int(n_scored)
    hf = float(transformers_p_value(z))
    # log of the exact tail by summing pmf terms in log space (binom.logsf underflows far out)
    log_tail = float(logsumexp(binom.logpmf(np.arange(n_green, n_scored + 1), n_scored, gamma)))
    return {"z": z, "transformers": hf, "norm_sf": float(norm.sf(z)),
            "binomial": math.exp(log_tail), "log10_binomial": log_tail / math.log(10),
            "log10_norm_sf": float(norm.logsf(z) / math.log(10)), "confidence": 1.0 - hf}


__all__ = ["BaselineResult", "KGWConfig", "KGWLogitsProcessor", "SweetConfig", "kgw_detect", "sweet_detect_batch",
           "tail_p_values", "text_entropies", "transformers_p_value"]

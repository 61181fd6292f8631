"""What the watermark costs in text quality, measured with the model's own logits.

Two measures, both from one teacher-forced forward pass over prompt +
generated tokens (not from the generation-time trace):

* **self-perplexity**: ``exp`` of the mean negative log-likelihood of the
  generated tokens under the generating model itself (temperature 1). A
  forced token the model found unlikely raises it.
* **KL cost** (the paper's quality theorem): at a gated position with
  previous state ``s`` the watermark keeps only the allowed set
  ``A_s`` (tokens whose state may follow ``s``). Renormalising the model's
  distribution ``p`` onto ``A_s`` costs ``KL = log(1 / Z_s)`` nats, where
  ``Z_s = p(A_s)`` is the mass of the allowed set. Under hash uniformity
  ``E[Z_s] = k / S`` for a k-regular topology, and Jensen's inequality gives
  ``E[KL] >= log(S / k)`` per gated position, ``rho log(S / k)`` per token.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from chainmark.config import ChainMarkConfig
from chainmark.embed import logits_width
from chainmark.checks import check_rho
from chainmark.checks import check_num_states
from chainmark.partition import state_table
from chainmark.gate_signals import entropy_signals

__all__ = ["FORCED_TOKENS_FILE", "KLCost", "TokenScores", "kl_bound", "kl_cost", "load_forced_tokens",
           "repeated_ngram_share", "score_generations", "score_tokens", "self_perplexity", "surprise_by_gate"]


def kl_bound(rho: float, S: int, k: int = 1) -> float:
    """A lower bound on the mean KL per token of forcing into k of S states: ``rho log(S / k)`` nats.

    The paper states its quality theorem, with the bound ``rho log S``, for the
    clockwork (k = 1) only; ``log(S / k)`` is our extension of the same Jensen
    argument to a k-regular topology, where the allowed states hold on average
    k/S of the probability. With ``rho = 1`` it is the bound per gated position.
    """
    rho = check_rho(rho)
    S = check_num_states(S)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < S:
        raise ValueError(f"k must be an integer in [1, S-1] = [1, {S - 1}], got {k!r}")
    return rho * math.log(S / k)


def repeated_ngram_share(token_ids: Sequence[int], n: int = 4) -> float:
    """Share of a text's token n-grams that repeat an n-gram seen earlier in the same text.

    Self-perplexity rewards a text that loops (a repeated phrase is easy to
    predict), so the book reports this beside it. 0.0 for a text shorter
    than ``n`` tokens.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    ids = [int(t) for t in token_ids]
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return repeats / len(grams) if grams else 0.0


@dataclass
class TokenScores:
    """Teacher-forced scores of one generation; entry ``i`` belongs to generated token ``i``.

    ``nll`` is ``-log p_i(t_i)`` and ``entropy`` the entropy of ``p_i`` (both
    nats, temperature 1). ``allowed_mass`` is ``Z_i = p_i(A_{s_{i-1}})``, the
    model's probability of the tokens the watermark would allow at step ``i``
    (``s_{-1}`` is the state of the prompt's last token); it is present only
    when a configuration was given. ``gated`` marks the positions the
    watermark forced, when known.
    """

    nll: np.ndarray
    entropy: np.ndarray
    allowed_mass: np.ndarray | None = None
    gated: np.ndarray | None = None

    @property
    def n_tokens(self) -> int:
        return int(self.nll.size)

    @property
    def perplexity(self) -> float:
        """``exp(mean nll)``; NaN for an empty generation."""
        return float(np.exp(self.nll.mean())) if self.nll.size else math.nan

    @property
    def kl(self) -> np.ndarray:
        """Per-position KL cost ``log(1 / Z_i)`` of forcing into the allowed set."""
        if self.allowed_mass is None:
            raise ValueError("allowed_mass is unknown: score the tokens with a ChainMarkConfig")
        with np.errstate(divide="ignore"):
            return -np.log(self.allowed_mass)


def _check_sequences(prompt_ids: Sequence[Sequence[int]], token_ids: Sequence[Sequence[int]]) -> None:
    if len(prompt_ids) != len(token_ids):
        raise ValueError(f"prompt_ids and token_ids must have the same length, got "
                         f"{len(prompt_ids)} and {len(token_ids)}")
    for i, p in enumerate(prompt_ids):
        if len(p) == 0:
            raise ValueError(f"prompt_ids[{i}] is empty: the first generated token needs a context")


def _batches(n: int, batch_size: int) -> Iterable[range]:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    for start in range(0, n, batch_size):
        yield range(start, min(n, start + batch_size))


def _one_hot_states(table: torch.Tensor, S: int) -> torch.Tensor:
    """``V x S`` float matrix with a 1 at (token, state of token)."""
    onehot = torch.zeros(table.numel(), S, dtype=torch.float32, device=table.device)
    onehot[torch.arange(table.numel(), device=table.device), table] = 1.0
    return onehot


@torch.no_grad()
def score_tokens(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    token_ids: Sequence[Sequence[int]],
    config: Any = None,
    gated: Sequence[Sequence[bool]] | None = None,
    batch_size: int = 4,
) -> list[TokenScores]:
    """Teacher-forced per-token scores of generated continuations.

    Each sequence ``prompt_ids[j] + token_ids[j]`` is run through ``model``
    (left-padded batches, padding masked, position ids counted from the first
    real token, as in generation); the logits that predicted each generated
    token give its ``nll`` and ``entropy``, and, with a ``ChainMarkConfig``,
    the mass ``Z`` of the tokens the watermark allows after the previous
    token's state.
    """
    _check_sequences(prompt_ids, token_ids)
    if gated is not None and len(gated) != len(token_ids):
        raise ValueError("gated must have one entry per sequence")
    device = next(model.parameters()).device
    onehot = successors = table = None
    if config is not None:
        if not isinstance(config, ChainMarkConfig):
            raise TypeError(f"config must be a ChainMarkConfig or None, got {type(config).__name__}")
        table = torch.from_numpy(np.array(state_table(config.key, logits_width(model), config.S)))
        table = table.to(device)
        onehot = _one_hot_states(table, config.S)
        successors = torch.from_numpy(np.array(config.topo.matrix, dtype=np.float32)).to(device)
    results: list[TokenScores] = []
    for rows in _batches(len(token_ids), batch_size):
        seqs = [list(prompt_ids[j]) + list(token_ids[j]) for j in rows]
        n_new = [len(token_ids[j]) for j in rows]
        width = max(len(s) for s in seqs)
        keep = max(n_new) + 1  # logits at the last prompt token onwards
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        mask = torch.zeros(len(seqs), width, dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[r, width - len(s):] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                       logits_to_keep=keep).logits[:, -keep:-1]  # (b, keep-1, V)
        signals = entropy_signals(logits, log_probs=True)
        del logits
        logp, p = signals.log_probs, signals.probs
        assert logp is not None and p is not None
        targets = ids[:, width - keep + 1:]  # the tokens those logits predicted
        nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        mass = None
        if onehot is not None:
            state_mass = p @ onehot  # (b, keep-1, S): probability of each state
            prev_ids = ids[:, width - keep:-1]  # token before each predicted one
            prev_states = table[prev_ids]
            mass = (state_mass * successors[prev_states]).sum(-1).clamp(max=1.0)
        nll, entropy = nll.cpu().numpy(), signals.entropy.cpu().numpy()
        mass_np = mass.cpu().numpy() if mass is not None else None
        for r, j in enumerate(rows):
            n = n_new[r]
            sl = slice(keep - 1 - n, keep - 1)  # right-aligned: the last n predictions
            results.append(TokenScores(
                nll=nll[r, sl].astype(np.float64),
                entropy=entropy[r, sl].astype(np.float64),
                allowed_mass=mass_np[r, sl].astype(np.float64) if mass_np is not None else None,
                gated=np.asarray(gated[j], dtype=bool)[:n] if gated is not None else None,
            ))
    return results


def score_generations(model: Any, generations: Sequence[Any], config: Any = None,
                      batch_size: int = 4) -> list[TokenScores]:
    """:func:`score_tokens` for :class:`chainmark.embed.Generation` objects.

    Uses each generation's exact prompt tokens and its ``forced`` flags as the
    gated positions.
    """
    for g in generations:
        if not getattr(g, "prompt_ids", None):
            raise ValueError("a generation has no prompt_ids; produce it with chainmark.embed.generate")
    return score_tokens(model, [g.prompt_ids for g in generations], [g.token_ids for g in generations],
                        config=config, gated=[g.forced for g in generations], batch_size=batch_size)


def self_perplexity(model: Any, generations: Sequence[Any], batch_size: int = 4) -> np.ndarray:
    """Self-perplexity of each generation under the generating model (temperature 1)."""
    return np.array([s.perplexity for s in score_generations(model, generations, batch_size=batch_size)])


@dataclass
class KLCost:
    """The watermark's KL cost over a set of generations, against the theorem's bound."""

    kl_gated: np.ndarray  # log(1/Z) at every gated position, pooled
    n_positions: int  # all generated positions
    S: int
    k: int

    @property
    def n_gated(self) -> int:
        return int(self.kl_gated.size)

    @property
    def rho_realised(self) -> float:
        return self.n_gated / self.n_positions if self.n_positions else 0.0

    @property
    def mean_gated(self) -> float:
        """Mean KL per gated position (nats); the bound is ``log(S / k)``."""
        return float(self.kl_gated.mean()) if self.n_gated else math.nan

    @property
    def se_gated(self) -> float:
        """Standard error of :attr:`mean_gated`."""
        if self.n_gated < 2:
            return math.nan
        return float(self.kl_gated.std(ddof=1) / math.sqrt(self.n_gated))

    @property
    def per_token(self) -> float:
        """Mean KL per generated token (gated ones cost log(1/Z), the others 0)."""
        return float(self.kl_gated.sum() / self.n_positions) if self.n_positions else math.nan

    @property
    def bound_gated(self) -> float:
        return kl_bound(1.0, self.S, self.k)

    @property
    def bound_per_token(self) -> float:
        """``rho log(S / k)`` at the realised rho."""
        return kl_bound(min(1.0, self.rho_realised), self.S, self.k)

    def to_dict(self) -> dict[str, float]:
        return {"n_positions": self.n_positions, "n_gated": self.n_gated,
                "rho_realised": self.rho_realised, "mean_kl_gated": self.mean_gated,
                "bound_gated": self.bound_gated, "kl_per_token": self.per_token,
                "bound_per_token": self.bound_per_token}


def kl_cost(scores: Sequence[TokenScores], config: Any, all_positions: bool = False) -> KLCost:
    """Pool the KL cost ``log(1/Z)`` of scored generations.

    By default only the gated (forced) positions count; ``all_positions=True``
    treats every position as if it had been gated (the counterfactual cost on
    unwatermarked text, where the bound holds exactly because the contexts do
    not depend on the key).
    """
    kls, n = [], 0
    for s in scores:
        kl = s.kl
        n += kl.size
        if all_positions:
            kls.append(kl)
        else:
            if s.gated is None:
                raise ValueError("these scores carry no gate flags; pass all_positions=True")
            kls.append(kl[s.gated])
    pooled = np.concatenate(kls) if kls else np.zeros(0)
    return KLCost(pooled, n, config.S, config.topo.k or 1)


#: Where ``tools/measure_quality.py`` keeps the reference run's teacher-forced view of its forced tokens.
FORCED_TOKENS_FILE = Path(__file__).resolve().parents[1] / "data" / "quality" / "forced_tokens.json"


def _pooled_mean(values: Sequence[np.ndarray], rng: np.random.Generator, n_boot: int) -> dict[str, float]:
    """The token-pooled mean of per-text arrays, with a 95% interval from resampling whole texts."""
    sums = np.array([v.sum() for v in values], dtype=float)
    counts = np.array([v.size for v in values], dtype=float)
    if counts.sum() == 0:
        raise ValueError("no tokens to average")
    picks = rng.integers(len(values), size=(n_boot, len(values)))
    boot = sums[picks].sum(axis=1) / np.maximum(counts[picks].sum(axis=1), 1.0)
    low, high = np.quantile(boot, [0.025, 0.975])
    return {"mean": float(sums.sum() / counts.sum()), "low": float(low), "high": float(high),
            "tokens": int(counts.sum())}


def surprise_by_gate(scores: Sequence[TokenScores], opened: Sequence[Sequence[bool]], rng: np.random.Generator,
                     n_boot: int = 1000) -> dict[str, Any]:
    """How surprised the model is by the tokens at the positions a gate opened and at the others.

    For each text, ``scores`` (its teacher-forced :class:`TokenScores`) and ``opened`` (one flag per generated
    token: forced, for watermarked text; where the deployment's gate would have opened, for plain text). Returns
    the mean surprise ``-log p(t)`` (nats, pooled over tokens) at opened and at closed positions, each with a 95%
    interval from resampling whole texts (``rng``: the resampling's generator), the share of positions opened
    (``share_opened``, with its interval), and, when the scores carry the allowed mass, the mean ``log(1 / Z)`` at
    opened positions (the quality theorem's cost of renormalising there).
    """
    if len(scores) != len(opened) or not scores:
        raise ValueError(f"one flag list per text is needed: {len(scores)} texts, {len(opened)} flag lists")
    flags = [np.asarray(f, dtype=bool)[:s.n_tokens] for s, f in zip(scores, opened)]
    if any(f.size != s.n_tokens for s, f in zip(scores, flags)):
        raise ValueError("every text needs one flag per generated token")
    out: dict[str, Any] = {"texts": len(scores),
                           "share_opened": _pooled_mean([f.astype(float) for f in flags], rng, n_boot),
                           "opened": _pooled_mean([s.nll[f] for s, f in zip(scores, flags)], rng, n_boot),
                           "closed": _pooled_mean([s.nll[~f] for s, f in zip(scores, flags)], rng, n_boot)}
    if all(s.allowed_mass is not None for s in scores):
        out["opened_kl"] = _pooled_mean([s.kl[f] for s, f in zip(scores, flags)], rng, n_boot)
    return out


def load_forced_tokens(path: Path | None = None) -> dict[str, Any]:
    """The reference run's teacher-forced view of its forced tokens (``tools/measure_quality.py``)."""
    path = FORCED_TOKENS_FILE if path is None else Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run `python tools/measure_quality.py` to measure it")
    return json.loads(path.read_text("utf-8"))

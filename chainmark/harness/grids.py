"""The experiments behind the explorers: grids of generations and attacks, computed in Python.

:mod:`chainmark.teaching.widgets` draws sliders over what these functions return;
they run the model (:func:`embedding_grid`, :func:`generate_example`) or
the detector on attacked texts (:func:`robustness_grid`, with a Monte Carlo
under the theorem's model from :func:`simulate_watermarked_ids`). The key
is an argument and never part of a result.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..comparison.attacks import ATTACK_SEED

#: Substitution rates of the robustness explorer (the default grid of :func:`robustness_grid`).
DELTAS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(0, 13))


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token id decoded on its own (what the explorers colour, one tile per token)."""
    return [tokenizer.decode([int(t)]) for t in ids]


def embedding_grid(model: Any, tokenizer: Any, key: Any, prompts: Sequence[str],
                   S_values: Sequence[int] = (2, 3, 5, 8), rho_values: Sequence[float] = (0.25, 0.5, 0.75, 1.0),
                   max_new_tokens: int = 64, gate: str = "high_entropy", alpha: float = 0.01,
                   batch_size: int = 8, progress: bool = True, model_name: str | None = None) -> dict[str, Any]:
    """Generate watermarked text for every (S, rho) of a grid and score it.

    One unwatermarked run of ``prompts`` is the baseline (its self-perplexity)
    and the pilot that calibrates the gate threshold for each rho. Every grid
    cell then generates from the same prompts (seed 42) and records, per
    text, phi, z, p-value, realised rho and self-perplexity; the first text
    is kept token by token (strings, ids, states, forced flags) as the cell's
    example. ``model_name`` names the model on the page (default: the
    settings' model, as in the banner). The key is used, never stored.
    """
    from tqdm.auto import tqdm

    from ..detection import detect
    from ..config import ChainMarkConfig
    from ..embed import generate
    from ..gates import Gate
    from ..comparison.quality import self_perplexity

    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one prompt")
    S_values = [int(s) for s in S_values]
    rho_values = [float(r) for r in rho_values]
    if not S_values or not rho_values:
        raise ValueError("S_values and rho_values must each hold at least one value")
    kw = dict(max_new_tokens=max_new_tokens, batch_size=batch_size, min_new_tokens=max_new_tokens)
    pilot = generate(model, tokenizer, prompts, config=None, **kw)
    signal = np.concatenate([np.asarray(g.gap if gate == "top2_gap" else g.entropy) for g in pilot])
    baseline_ppl = self_perplexity(model, pilot)
    gates = {r: Gate.calibrate(gate, r, signal) for r in rho_values}
    cells = []
    grid = [(S, r) for S in S_values for r in rho_values]
    for S, r in tqdm(grid, desc="S x rho grid", disable=not progress):
        config = ChainMarkConfig(key, S=S, rho=r, gate=gate)
        gens = generate(model, tokenizer, prompts, config=config, gate=gates[r], **kw)
        dets = [detect(g.token_ids, key, S, alpha=alpha) for g in gens]
        ppl = self_perplexity(model, gens)
        ex, d0 = gens[0], dets[0]
        cells.append({
            "S": S, "rho": r, "n_prompts": len(gens),
            "mean_z": float(np.mean([d.z for d in dets])),
            "mean_phi": float(np.mean([d.phi for d in dets])),
            "mean_ppl": float(np.mean(ppl)),
            "mean_rho_realised": float(np.mean([g.rho_realised for g in gens])),
            "tpr": float(np.mean([d.is_watermarked for d in dets])),
            "texts": [{"token_ids": g.token_ids, "z": d.z, "phi": d.phi, "self_ppl": float(p)}
                      for g, d, p in zip(gens, dets, ppl)],
            "example": {
                "prompt": ex.prompt, "token_ids": ex.token_ids, "tokens": token_strings(tokenizer, ex.token_ids),
                "states": ex.states, "forced": [int(f) for f in ex.forced],
                "n_tokens": d0.n_tokens, "phi": d0.phi, "z": d0.z, "p_value": d0.p_value,
                "rho_realised": ex.rho_realised, "self_ppl": float(ppl[0]),
            },
        })
    if model_name is None:
        from .settings import get_settings

        model_name = get_settings().model
    return {
        "S_values": S_values, "rho_values": rho_values, "gate": gate, "alpha": alpha,
        "taus": {str(r): gates[r].tau for r in rho_values}, "max_new_tokens": max_new_tokens,
        "prompts": prompts, "baseline_ppl": float(np.mean(baseline_ppl)), "model": model_name,
        "cells": cells,
    }


def generate_example(model: Any, tokenizer: Any, key: Any, prompt: str, S: int, rho: float, tau: float,
                     gate: str = "high_entropy", max_new_tokens: int = 64, alpha: float = 0.01) -> dict[str, Any]:
    """Generate one watermarked text at (S, rho) with a given gate threshold and score it."""
    from ..detection import detect
    from ..config import ChainMarkConfig
    from ..embed import generate
    from ..gates import Gate
    from ..comparison.quality import self_perplexity

    config = ChainMarkConfig(key, S=S, rho=rho, gate=gate)
    g = generate(model, tokenizer, [prompt], config=config, gate=Gate(gate, tau),
                 max_new_tokens=max_new_tokens)[0]
    d = detect(g.token_ids, key, S, alpha=alpha)
    ppl = self_perplexity(model, [g])
    return {"example": {"prompt": prompt, "token_ids": g.token_ids, "tokens": token_strings(tokenizer, g.token_ids),
                        "states": g.states, "forced": [int(f) for f in g.forced], "n_tokens": d.n_tokens,
                        "phi": d.phi, "z": d.z, "p_value": d.p_value, "rho_realised": g.rho_realised,
                        "self_ppl": float(ppl[0])}}


# ---------------------------------------------------------------------------
# substitution at rate delta: model texts and a Monte Carlo
# ---------------------------------------------------------------------------
def simulate_watermarked_ids(trials: int, n: int, key: Any, S: int, rho: float, vocab_size: int,
                             seed: int = ATTACK_SEED) -> np.ndarray:
    """Synthetic watermarked token ids under the theorem's model, through the real partition.

    Each sequence starts at a uniform token; every later position is, with
    probability ``rho``, a uniform token of the clockwork successor state of
    its predecessor (a forced step) and otherwise a uniform token of the
    vocabulary. Returns an int64 array of shape (trials, n).

    This is the token-level twin of :func:`chainmark.comparison.adversary.simulate_walks`
    (the same model on states, which chapter 7 attacks): the explorers need
    token ids to run the package's :class:`~chainmark.comparison.attacks.Substitution`
    and detector on, so these sequences go through the key's partition, and
    a free position is a uniform *token* (its state then follows the
    partition's shares). Its draws differ from ``simulate_walks``' (a free
    token before the forcing coin, per position), and chapter 10's numbers
    rest on them.
    """
    from ..checks import check_length
    from ..checks import check_rho
    from ..partition import state_table

    n = check_length(n)
    rho = check_rho(rho)
    if not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    table = state_table(key, vocab_size, S)
    buckets = [np.flatnonzero(table == s) for s in range(S)]
    rng = np.random.default_rng(seed)
    ids = np.empty((trials, n), dtype=np.int64)
    ids[:, 0] = rng.integers(0, vocab_size, size=trials)
    for i in range(1, n):
        ids[:, i] = rng.integers(0, vocab_size, size=trials)
        forced = rng.random(trials) < rho
        nxt = (table[ids[:, i - 1]] + 1) % S
        for s in range(S):
            rows = np.flatnonzero(forced & (nxt == s))
            if rows.size:
                ids[rows, i] = buckets[s][rng.integers(0, buckets[s].size, size=rows.size)]
    return ids


def attack_curve(id_lists: Sequence[Sequence[int]], key: Any, S: int, vocab_size: int,
                  deltas: Sequence[float], alpha: float, seed: int) -> dict[str, Any]:
    """Mean z before/after substitution at each delta, the z ratio and the TPR."""
    from ..comparison.attacks import Substitution
    from ..detection import detect

    z0 = np.array([detect(ids, key, S, alpha=alpha).z for ids in id_lists])
    ratio, tpr, mean_z, attacked_first = [], [], [], []
    for delta in deltas:
        attacked = Substitution(delta, vocab_size, seed=seed).apply_ids(list(id_lists))
        dets = [detect(a, key, S, alpha=alpha) for a in attacked]
        z = np.array([d.z for d in dets])
        mean_z.append(float(z.mean()))
        ratio.append(float(z.mean() / z0.mean()) if z0.mean() > 0 else float("nan"))
        tpr.append(float(np.mean([d.is_watermarked for d in dets])))
        attacked_first.append(attacked[0])
    return {"ratio": ratio, "tpr": tpr, "mean_z": mean_z, "mean_z_before": float(z0.mean()),
            "n_texts": len(id_lists), "attacked_first": attacked_first}


def robustness_grid(texts: Sequence[Sequence[int]], key: Any, S: int, rho: float, vocab_size: int,
                    tokenizer: Any = None, deltas: Sequence[float] = DELTAS, alpha: float = 0.01,
                    mc_trials: int = 400, mc_length: int | None = None,
                    seed: int = ATTACK_SEED) -> dict[str, Any]:
    """z ratio and TPR against delta, on model text and on a Monte Carlo under the theorem's model.

    ``texts`` are token ids of texts watermarked with (key, S, rho). Each text
    is attacked with :class:`chainmark.comparison.attacks.Substitution` at every delta
    (seed 43, nested in delta) and detected again; the z ratio is
    mean z after / mean z before. The Monte Carlo does the same on
    ``mc_trials`` sequences from :func:`simulate_watermarked_ids` of length
    ``mc_length`` (default: the mean text length).
    """
    from ..partition import states_of

    texts = [list(map(int, t)) for t in texts]
    if not texts:
        raise ValueError("texts must hold at least one watermarked text")
    deltas = [float(d) for d in deltas]
    n_mc = int(mc_length or round(np.mean([len(t) for t in texts])))
    mc_ids = simulate_watermarked_ids(mc_trials, n_mc, key, S, rho, vocab_size, seed=seed)
    mc = attack_curve([row.tolist() for row in mc_ids], key, S, vocab_size, deltas, alpha, seed)
    text = attack_curve(texts, key, S, vocab_size, deltas, alpha, seed)
    examples = []
    for attacked in text.pop("attacked_first"):
        changed = [int(a != b) for a, b in zip(attacked, texts[0])]
        examples.append({"tokens": token_strings(tokenizer, attacked) if tokenizer is not None
                         else [str(t) for t in attacked],
                         "states": states_of(attacked, key, S).tolist(), "substituted": changed})
    mc.pop("attacked_first")
    return {"S": S, "rho": rho, "alpha": alpha, "deltas": deltas, "vocab_size": vocab_size,
            "mc": {**mc, "trials": mc_trials, "length": n_mc}, "text": {**text, "examples": examples},
            "texts": texts, "seed": seed}


__all__ = ["DELTAS", "attack_curve", "embedding_grid", "generate_example", "robustness_grid",
           "simulate_watermarked_ids", "token_strings"]

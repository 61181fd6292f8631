"""The experiments behind the explorers: grids of generations and attacks, computed in Python.

:mod:`cmlab.teaching.widgets` draws sliders over what these functions return;
they run the model (:func:`embedding_grid`, :func:`generate_example`) or
the detector on attacked texts (:func:`robustness_grid`, with a Monte Carlo
under the theorem's model from :func:`simulate_watermarked_ids`). The key
is an argument and never part of a result.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from cmlab.comparison.attacks import ATTACK_SEED
from cmlab.harness.settings import progress_bars_off

#: Substitution rates of the robustness explorer (the default grid of :func:`robustness_grid`).
DELTAS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(0, 13))


def _token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token id decoded on its own (what the explorers colour, one tile per token)."""
    return [tokenizer.decode([int(t)]) for t in ids]


def grid_cell(S: int, rho: float, records: Sequence[Mapping[str, Any]], detector: str, example: Mapping[str, Any],
              key: Any, tokenizer: Any = None, alpha: float = 0.01) -> dict[str, Any]:
    """One (S, rho) cell of an explorer grid from the runner's records (:func:`cmlab.harness.runner.run_batch`).

    The cell summarises its texts (mean z, phi, self-perplexity, realised rho,
    the share detected at ``alpha``) and keeps ``example``, one of the records,
    token by token (strings need ``tokenizer``; without it the tiles show ids).
    The live grid (:func:`embedding_grid`) and the reference's
    (:func:`cmlab.harness.reference.explorer_grid`) are both built here.
    """
    from chainmark.partition import states_of

    dets = [r["detection"][detector] for r in records]
    d0 = example["detection"][detector]
    ids = [int(t) for t in example["token_ids"]]
    return {
        "S": int(S), "rho": float(rho), "n_prompts": len(records),
        "mean_z": float(np.mean([d["z"] for d in dets])),
        "sd_z": float(np.std([d["z"] for d in dets], ddof=1)) if len(dets) > 1 else float("nan"),
        "mean_phi": float(np.mean([d["phi"] for d in dets])),
        "mean_ppl": float(np.mean([r["self_ppl"] for r in records])),
        "mean_rho_realised": float(np.mean([r["rho_realised"] for r in records])),
        "detected": int(sum(d["p_value"] < alpha for d in dets)),
        "tpr": float(np.mean([d["p_value"] < alpha for d in dets])),
        "texts": [{"token_ids": r["token_ids"], "forced": [int(f) for f in r["gated"]], "z": d["z"],
                   "phi": d["phi"], "p_value": d["p_value"], "self_ppl": r["self_ppl"], "domain": r["domain"],
                   "prompt_index": r["prompt_index"]} for r, d in zip(records, dets)],
        "example": {
            "prompt": example["prompt"], "domain": example["domain"], "token_ids": ids,
            "tokens": _token_strings(tokenizer, ids) if tokenizer is not None else [str(t) for t in ids],
            "states": states_of(ids, key, S).tolist(), "forced": [int(f) for f in example["gated"]],
            "n_tokens": example["n_tokens"], "phi": d0["phi"], "z": d0["z"], "p_value": d0["p_value"],
            "rho_realised": example["rho_realised"], "self_ppl": example["self_ppl"],
        },
    }


def _cell_records(model: Any, tokenizer: Any, method: Any, prompts: Sequence[str], batch_size: int,
                  alpha: float, gen_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """Generate and score ``prompts`` with ``method`` through the runner's batch step (batch j: seed 42 + j)."""
    import torch

    from chainmark.config import GENERATION_SEED
    from chainmark.embed import logits_width
    from cmlab.harness.runner import run_batch

    items = [("grid", i, p) for i, p in enumerate(prompts)]
    vocab_size = logits_width(model)
    records: list[dict[str, Any]] = []
    with torch.no_grad():
        for j in range(0, len(items), batch_size):
            records += run_batch(method, [method], items[j:j + batch_size], j // batch_size, model, tokenizer, {},
                                 vocab_size, alpha, GENERATION_SEED, True, gen_kwargs)
    return records


def embedding_grid(model: Any, tokenizer: Any, key: Any, prompts: Sequence[str],
                   S_values: Sequence[int] = (2, 3, 5, 8), rho_values: Sequence[float] = (0.25, 0.5, 0.75, 1.0),
                   max_new_tokens: int = 64, gate: str = "high_entropy", alpha: float = 0.01,
                   batch_size: int = 8, progress: bool = True, model_name: str | None = None,
                   temperature: float = 0.7) -> dict[str, Any]:
    """Generate watermarked text for every (S, rho) of a grid and score it.

    One unwatermarked run of ``prompts`` is the baseline (its self-perplexity)
    and the pilot that calibrates the gate threshold for each rho. Every grid
    cell then runs the same prompts through the runner's batch step
    (:func:`cmlab.harness.runner.run_batch`, batch j sampled with seed
    42 + j, as the book's grids and the reference run are) and is summarised
    by :func:`grid_cell`, with the first prompt's text as the cell's example.
    ``model_name`` names the model on the page (default: the settings'
    model, as in the banner). The key is used, never stored.
    """
    from tqdm.auto import tqdm

    from chainmark.checks import check_alpha
    from chainmark.config import ChainMarkConfig
    from chainmark.embed import generate
    from chainmark.gates import Gate
    from cmlab.comparison.quality import self_perplexity
    from cmlab.harness.adapters import ChainMarkMethod

    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one prompt")
    S_values = [int(s) for s in S_values]
    rho_values = [float(r) for r in rho_values]
    if not S_values or not rho_values:
        raise ValueError("S_values and rho_values must each hold at least one value")
    alpha = check_alpha(alpha)
    pilot = generate(model, tokenizer, prompts, config=None, max_new_tokens=max_new_tokens, batch_size=batch_size,
                     min_new_tokens=max_new_tokens, temperature=temperature)
    signal = np.concatenate([np.asarray(g.gap if gate == "top2_gap" else g.entropy) for g in pilot])
    baseline_ppl = self_perplexity(model, pilot)
    gates = {r: Gate.calibrate(gate, r, signal) for r in rho_values}
    gen_kwargs = dict(max_new_tokens=max_new_tokens, temperature=temperature, min_new_tokens=max_new_tokens)
    cells = []
    grid = [(S, r) for S in S_values for r in rho_values]
    for S, r in tqdm(grid, desc="S x rho grid", disable=not progress or progress_bars_off()):
        name = f"S{S}_rho{r:g}"
        method = ChainMarkMethod(ChainMarkConfig(key, S=S, rho=r, gate=gate), gates[r], name)
        records = _cell_records(model, tokenizer, method, prompts, batch_size, alpha, gen_kwargs)
        cells.append(grid_cell(S, r, records, name, records[0], key, tokenizer, alpha))
    if model_name is None:
        from cmlab.harness.settings import get_settings

        model_name = get_settings().model
    return {
        "S_values": S_values, "rho_values": rho_values, "gate": gate, "alpha": alpha,
        "taus": {str(r): gates[r].tau for r in rho_values}, "max_new_tokens": max_new_tokens,
        "prompts": prompts, "baseline_ppl": float(np.mean(baseline_ppl)), "model": model_name,
        "cells": cells,
    }


def generate_example(model: Any, tokenizer: Any, key: Any, prompt: str, S: int, rho: float, tau: float,
                     gate: str = "high_entropy", max_new_tokens: int = 64, alpha: float = 0.01,
                     temperature: float = 0.7) -> dict[str, Any]:
    """Generate one watermarked text at (S, rho) with a given gate threshold and score it (a one-text cell)."""
    from chainmark.config import ChainMarkConfig
    from chainmark.gates import Gate
    from cmlab.harness.adapters import ChainMarkMethod

    method = ChainMarkMethod(ChainMarkConfig(key, S=S, rho=rho, gate=gate), Gate(gate, tau), "example")
    records = _cell_records(model, tokenizer, method, [prompt], 1, alpha,
                            dict(max_new_tokens=max_new_tokens, temperature=temperature, min_new_tokens=None))
    return {"example": grid_cell(S, rho, records, "example", records[0], key, tokenizer, alpha)["example"]}


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

    This is the token-level twin of :func:`cmlab.comparison.adversary.simulate_walks`
    (the same model on states, which chapter 7 attacks): the explorers need
    token ids to run the package's :class:`~cmlab.comparison.attacks.Substitution`
    and detector on, so these sequences go through the key's partition, and
    a free position is a uniform *token* (its state then follows the
    partition's shares). Its draws differ from ``simulate_walks``' (a free
    token before the forcing coin, per position), and chapter 10's numbers
    rest on them.
    """
    from chainmark.checks import check_length
    from chainmark.checks import check_rho
    from chainmark.partition import state_table

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
    from cmlab.comparison.attacks import Substitution
    from chainmark.detection import detect

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
    is attacked with :class:`cmlab.comparison.attacks.Substitution` at every delta
    (seed 43, nested in delta) and detected again; the z ratio is
    mean z after / mean z before. The Monte Carlo does the same on
    ``mc_trials`` sequences from :func:`simulate_watermarked_ids` of length
    ``mc_length`` (default: the mean text length).
    """
    from chainmark.partition import states_of

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
        examples.append({"tokens": _token_strings(tokenizer, attacked) if tokenizer is not None
                         else [str(t) for t in attacked],
                         "states": states_of(attacked, key, S).tolist(), "substituted": changed})
    mc.pop("attacked_first")
    return {"S": S, "rho": rho, "alpha": alpha, "deltas": deltas, "vocab_size": vocab_size,
            "mc": {**mc, "trials": mc_trials, "length": n_mc}, "text": {**text, "examples": examples},
            "texts": texts, "seed": seed}


__all__ = ["DELTAS", "attack_curve", "embedding_grid", "generate_example", "grid_cell", "robustness_grid",
           "simulate_watermarked_ids",]

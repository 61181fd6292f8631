"""The experiments behind the explorers: grids of generations and attacks, computed in Python.

:mod:`cmlab.teaching.widgets` draws sliders over what these functions return;
they run the model (:func:`embedding_grid`, :func:`generate_example`) or
the detector on attacked texts (:func:`robustness_grid`, with a Monte Carlo
under the theorem's model from :func:`_simulate_watermarked_ids`). The key
is an argument and never part of a result.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from chainmark.config import ChainMarkConfig, takes_config
from cmlab.comparison.attacks import ATTACK_SEED
from cmlab.harness.settings import progress_bars_off

if TYPE_CHECKING:  # chainmark.embed loads torch: the explorers' model-free side must not
    from chainmark.config import ChainMarkConfig
    from chainmark.embed import Sampling
    from chainmark.gates import Gate

#: Substitution rates of the robustness explorer (the default grid of :func:`robustness_grid`).
_DELTAS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(0, 13))


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


def _cell_records(model: Any, tokenizer: Any, method: Any, prompts: Sequence[str], how: Sampling,
                  alpha: float) -> list[dict[str, Any]]:
    """Generate and score ``prompts`` with ``method`` through the runner's batch step (batch j: seed
    ``how.seed + j``, 42 + j by default)."""
    import torch

    from chainmark.embed import logits_width
    from cmlab.harness.options import BatchContext
    from cmlab.harness.runner import run_batch

    items = [("grid", i, p) for i, p in enumerate(prompts)]
    context = BatchContext(model, tokenizer, logits_width(model), how, {}, alpha, True)
    records: list[dict[str, Any]] = []
    with torch.no_grad():
        for j in range(0, len(items), how.batch_size):
            records += run_batch(context, method, [method], items[j:j + how.batch_size], j // how.batch_size)
    return records


#: New tokens a text of the explorers' grids, unless a ``Sampling`` says otherwise.
_EXPLORER_TOKENS = 64


def _explorer_sampling(sampling: Sampling | None) -> Sampling:
    """``sampling``, or :data:`_EXPLORER_TOKENS` new tokens and ``Sampling``'s other defaults."""
    from chainmark.embed import Sampling
    from chainmark.checks import check_options

    if sampling is None:
        return Sampling(max_new_tokens=_EXPLORER_TOKENS)
    return check_options(Sampling, sampling, "sampling")


@dataclass(frozen=True)
class ExplorerOptions:
    """How :func:`embedding_grid` runs its grid, beyond its S and rho values: the gate's kind, the level
    ``alpha`` its cells are judged at, a progress bar or not, and the model named on the page (default: the
    settings' model, as in the banner)."""

    gate: str = "high_entropy"
    alpha: float = 0.01
    progress: bool = True
    model_name: str | None = None


def embedding_grid(model: Any, tokenizer: Any, key: Any, prompts: Sequence[str],
                   S_values: Sequence[int] = (2, 3, 5, 8), rho_values: Sequence[float] = (0.25, 0.5, 0.75, 1.0),
                   *, sampling: Sampling | None = None, options: ExplorerOptions | None = None) -> dict[str, Any]:
    """Generate watermarked text for every (S, rho) of the grid ``S_values`` x ``rho_values`` and score it.

    How texts are sampled is a ``Sampling`` (default: 64 new tokens; ``Sampling(max_new_tokens=32)``), the
    rest an :class:`ExplorerOptions` (``ExplorerOptions(gate="top2_gap")``). Every text has
    exactly ``max_new_tokens`` tokens (``min_new_tokens`` defaults to it).
    One unwatermarked run of ``prompts`` is the baseline (its self-perplexity)
    and the pilot that calibrates the gate threshold for each rho. Every grid
    cell then runs the same prompts through the runner's batch step
    (:func:`cmlab.harness.runner.run_batch`, batch j sampled with seed
    42 + j, as the book's grids and the reference run are) and is summarised
    by :func:`grid_cell`, with the first prompt's text as the cell's example.
    The key is used, never stored.
    """
    from tqdm.auto import tqdm

    from chainmark.checks import check_alpha, check_options
    from chainmark.config import ChainMarkConfig
    from chainmark.embed import generate
    from chainmark.gates import Gate
    from cmlab.comparison.quality import self_perplexity
    from cmlab.harness.adapters import ChainMarkMethod

    spec = check_options(ExplorerOptions, options, "options")
    how = _explorer_sampling(sampling)
    if how.min_new_tokens is None:  # texts of one length: every cell compares like with like
        how = replace(how, min_new_tokens=how.max_new_tokens)
    gate, max_new_tokens = spec.gate, how.max_new_tokens
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one prompt")
    S_values = [int(s) for s in S_values]
    rho_values = [float(r) for r in rho_values]
    if not S_values or not rho_values:
        raise ValueError("S_values and rho_values must each hold at least one value")
    alpha = check_alpha(spec.alpha)
    pilot = generate(model, tokenizer, prompts, config=None, sampling=how)
    signal = np.concatenate([np.asarray(g.gap if gate == "top2_gap" else g.entropy) for g in pilot])
    baseline_ppl = self_perplexity(model, pilot)
    gates = {r: Gate.calibrate(gate, r, signal) for r in rho_values}
    cells = []
    pairs = [(S, r) for S in S_values for r in rho_values]
    for S, r in tqdm(pairs, desc="S x rho grid", disable=not spec.progress or progress_bars_off()):
        name = f"S{S}_rho{r:g}"
        method = ChainMarkMethod(ChainMarkConfig(key, S=S, rho=r, gate=gate), gates[r], name)
        records = _cell_records(model, tokenizer, method, prompts, how, alpha)
        cells.append(grid_cell(S, r, records, name, records[0], key, tokenizer, alpha))
    model_name = spec.model_name
    if model_name is None:
        from cmlab.harness.settings import get_settings

        model_name = get_settings().model
    return {
        "S_values": S_values, "rho_values": rho_values, "gate": gate, "alpha": alpha,
        "taus": {str(r): gates[r].tau for r in rho_values}, "max_new_tokens": max_new_tokens,
        "prompts": prompts, "baseline_ppl": float(np.mean(baseline_ppl)), "model": model_name,
        "cells": cells,
    }


def generate_example(model: Any, tokenizer: Any, config: ChainMarkConfig, gate: Gate, prompt: str, *,
                     alpha: float = 0.01, sampling: Sampling | None = None) -> dict[str, Any]:
    """Generate one watermarked text with ``config`` (key, S, rho) and ``gate`` (its threshold) and score it
    (a one-text cell). How it samples is a ``Sampling`` (default: 64 new tokens); the text is one batch of
    one (``sampling.batch_size`` is not read), sampled with seed ``sampling.seed``."""
    from cmlab.harness.adapters import ChainMarkMethod

    how = replace(_explorer_sampling(sampling), batch_size=1)
    method = ChainMarkMethod(config, gate, "example")
    records = _cell_records(model, tokenizer, method, [prompt], how, alpha)
    return {"example": grid_cell(config.S, config.rho, records, "example", records[0], config.key, tokenizer,
                                 alpha)["example"]}


# ---------------------------------------------------------------------------
# substitution at rate delta: model texts and a Monte Carlo
# ---------------------------------------------------------------------------
@takes_config()
def _simulate_watermarked_ids(trials: int, n: int, config: ChainMarkConfig, vocab_size: int,
                             seed: int = ATTACK_SEED) -> np.ndarray:
    """Synthetic watermarked token ids under the theorem's model, through the real partition of ``config``.

    Each sequence starts at a uniform token; every later position is, with
    probability ``config.rho``, a uniform token of the clockwork successor state of
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

    if config.topo.name != "clockwork":
        raise ValueError(f"the theorem's model walks the clockwork cycle; config has the {config.topo.name} topology")
    key, S = config.key, config.S
    n = check_length(n)
    rho = check_rho(config.rho)
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


@takes_config()
def attack_curve(id_lists: Sequence[Sequence[int]], config: ChainMarkConfig, vocab_size: int,
                 deltas: Sequence[float], alpha: float, seed: int) -> dict[str, Any]:
    """Mean z before/after substitution at each delta, the z ratio and the TPR, detected with ``config``."""
    from cmlab.comparison.attacks import Substitution
    from chainmark.detection import detect

    z0 = np.array([detect(ids, config, alpha=alpha, test="z").z for ids in id_lists])
    ratio, tpr, mean_z, attacked_first = [], [], [], []
    for delta in deltas:
        attacked = Substitution(delta, vocab_size, seed=seed).apply_ids(list(id_lists))
        dets = [detect(a, config, alpha=alpha, test="z") for a in attacked]
        z = np.array([d.z for d in dets])
        mean_z.append(float(z.mean()))
        ratio.append(float(z.mean() / z0.mean()) if z0.mean() > 0 else float("nan"))
        tpr.append(float(np.mean([d.is_watermarked for d in dets])))
        attacked_first.append(attacked[0])
    return {"ratio": ratio, "tpr": tpr, "mean_z": mean_z, "mean_z_before": float(z0.mean()),
            "n_texts": len(id_lists), "attacked_first": attacked_first}


@dataclass(frozen=True)
class AttackSweep:
    """How :func:`robustness_grid` attacks: the substitution rates ``deltas``, the level ``alpha`` of the
    detector, the Monte Carlo's ``mc_trials`` sequences of ``mc_length`` tokens (default: the texts' mean
    length), and the attack's ``seed`` (43 in the book), nested in delta."""

    deltas: Sequence[float] = _DELTAS
    alpha: float = 0.01
    mc_trials: int = 400
    mc_length: int | None = None
    seed: int = ATTACK_SEED


@takes_config()
def robustness_grid(texts: Sequence[Sequence[int]], config: ChainMarkConfig, vocab_size: int,
                    tokenizer: Any = None, sweep: AttackSweep | None = None) -> dict[str, Any]:
    """z ratio and TPR against delta, on model text and on a Monte Carlo under the theorem's model.

    ``texts`` are token ids of texts watermarked with ``config`` (its key, S and rho). How they are attacked is an
    :class:`AttackSweep` (``AttackSweep(mc_trials=100)``). Each text
    is attacked with :class:`cmlab.comparison.attacks.Substitution` at every delta
    (seed 43, nested in delta) and detected again; the z ratio is
    mean z after / mean z before. The Monte Carlo does the same on
    ``mc_trials`` sequences from :func:`_simulate_watermarked_ids` of length
    ``mc_length`` (default: the mean text length).
    """
    from chainmark.partition import states_of

    from chainmark.checks import check_options

    sweep = check_options(AttackSweep, sweep, "sweep")
    alpha, mc_trials, seed = sweep.alpha, sweep.mc_trials, sweep.seed
    key, S, rho = config.key, config.S, config.rho
    texts = [list(map(int, t)) for t in texts]
    if not texts:
        raise ValueError("texts must hold at least one watermarked text")
    deltas = [float(d) for d in sweep.deltas]
    n_mc = int(sweep.mc_length or round(np.mean([len(t) for t in texts])))
    mc_ids = _simulate_watermarked_ids(mc_trials, n_mc, config, vocab_size, seed=seed)
    mc = attack_curve([row.tolist() for row in mc_ids], config, vocab_size, deltas, alpha, seed)
    text = attack_curve(texts, config, vocab_size, deltas, alpha, seed)
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


__all__ = ["AttackSweep", "ExplorerOptions", "attack_curve", "embedding_grid", "generate_example",
           "grid_cell", "robustness_grid"]

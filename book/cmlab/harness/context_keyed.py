"""The context-keyed defence measured on the reference run: its null, power, robustness, quality, cost, and the
stealing adversary aimed at it.

The reference experiment ``context_keyed`` asks the stealing pool's 400 prompts again under the same seeds as
ChainMark's pool cells (``chainmark_pool_seed3``, ``..._seed4``), with the variant of
:mod:`cmlab.comparison.context_keyed` (same key, S, rho and gate): each variant reply has a ChainMark reply to the
same prompt, sampled from the same seed, beside it (:func:`paired_replies`). The adversary of
:mod:`cmlab.harness.stealing` collects the variant's replies to the prompts it may see (:func:`context_pool`; the
held-out prompts stay out) and runs the fitted attack (:func:`~cmlab.comparison.context_keyed.steal_pairs`) and
the replaying one (:func:`~cmlab.comparison.context_keyed.replay_table`); ``tools/measure_stealing.py context``
writes what :func:`measure_context_keyed` returns into ``book/cmlab/data/stealing/context_keyed.json``, and
``context-generate`` the generator forgers' replies against it into ``generated_context/``.
"""
from __future__ import annotations

import gzip
import json
import time
from typing import Any, Sequence

import numpy as np

from chainmark.auditor.rates import rate_estimate
from chainmark.config import ChainMarkConfig
from chainmark.detection import detect
from cmlab.comparison.attacks import ATTACK_SEED, Substitution
from cmlab.comparison.context_keyed import (context_detect, forge_pairs, pair_codes, replay_edit, replay_table,
                                           steal_pairs, survival)
from cmlab.harness.stealing import (DATA_DIR, HELD_OUT_PROMPTS, AttackerPool, attacker_pool, first_tokens,
                                    reference_config)

CONTEXT_FILE = DATA_DIR / "context_keyed.json"
CONTEXT_GENERATED_DIR = DATA_DIR / "generated_context"
#: Watermarked tokens observed at which the map of pairs is stolen and scored (the last: the whole pool).
_TOKENS_OBSERVED = (1_000, 5_000, 20_000, 50_000)
#: The generator forgers against the variant: (how: ``states`` fits the pairs' states and forces believed-legal
#: tokens, ``replay`` forces tokens of triples the replies over-represent; tokens observed, None: the whole pool;
#: replies).
CONTEXT_GENERATORS = (("states", None, 100), ("replay", 5_000, 100), ("replay", None, 100))
#: Edit budgets of the editor forger against the variant (ChainMark's curve has the same).
EDITOR_BUDGETS = (0.1, 0.2)
#: Substitution rates of the robustness comparison.
_DELTAS = (0.1, 0.2, 0.3)


def paired_replies(root: Any = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(variant records, ChainMark records) of the reference run, matched one to one by prompt and seed."""
    from cmlab.harness.reference.read import load_texts

    def by_prompt(experiment: str, prefix: str) -> dict[tuple[str, str, int], dict[str, Any]]:
        return {(r["cell"][len(prefix):], r["domain"], r["prompt_index"]): r for r in load_texts(experiment, root)
                if r["cell"].startswith(prefix)}

    variant, chain = by_prompt("context_keyed", "context_pool_"), by_prompt("stealing", "chainmark_pool_")
    both = sorted(set(variant) & set(chain))
    if not both:
        raise ValueError("the reference run holds no context-keyed replies: run `cmlab reference run "
                         "--experiments context_keyed`")
    return [variant[k] for k in both], [chain[k] for k in both]


def context_pool(root: Any = None, seed: Any = ATTACK_SEED) -> AttackerPool:
    """The stealing adversary's pool against the variant: its replies to the prompts below
    :data:`~cmlab.harness.stealing.HELD_OUT_PROMPTS` (in an order shuffled with the attack seed), the same
    baseline and held-out unwatermarked replies as against ChainMark, and its held-out watermarked replies."""
    base = attacker_pool(root)
    variant, _ = paired_replies(root)
    seen = [r for r in variant if r["prompt_index"] < HELD_OUT_PROMPTS]
    held = [r for r in variant if r["prompt_index"] >= HELD_OUT_PROMPTS]
    order = np.random.default_rng(seed).permutation(len(seen))
    return AttackerPool(watermarked=[list(seen[i]["token_ids"]) for i in order], baseline=base.baseline,
                        held_out_unwatermarked=base.held_out_unwatermarked,
                        held_out_watermarked=[list(r["token_ids"]) for r in held], vocab_size=base.vocab_size,
                        held_out_unwatermarked_prompts=base.held_out_unwatermarked_prompts,
                        held_out_watermarked_prompts=[f"{r['domain']}/{r['prompt_index']}" for r in held])


def _detect(ids: Sequence[int], config: ChainMarkConfig, context: bool, test: str, alpha: float) -> Any:
    return context_detect(ids, config, alpha, test) if context else detect(ids, config, alpha, test=test)


def _rate(flags: Sequence[bool]) -> dict[str, Any]:
    return rate_estimate(np.asarray(flags, dtype=bool)).to_dict()


def _median_interval(values: Sequence[float], seed: Any = ATTACK_SEED, n_boot: int = 2000) -> dict[str, float]:
    x = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    rng = np.random.default_rng(seed)
    boots = np.median(x[rng.integers(0, x.size, size=(n_boot, x.size))], axis=1)
    return {"median": float(np.median(x)), "low": float(np.quantile(boots, 0.025)),
            "high": float(np.quantile(boots, 0.975)), "n": int(x.size)}


def distinct_pair_share(ids: Sequence[int]) -> float:
    """Distinct adjacent pairs over all adjacent pairs of a text (1.0: no pair repeats): a repetition measure."""
    codes = pair_codes(ids)
    return float(np.unique(codes).size / codes.size) if codes.size else float("nan")


def _null(config: ChainMarkConfig, plain: Sequence[Sequence[int]], alpha: float) -> dict[str, Any]:
    """Unwatermarked replies flagged under the reference key and, each under its own fresh key, over keys."""
    from chainmark.keys import hkdf

    out: dict[str, Any] = {"texts": len(plain)}
    for test in ("exact", "z"):
        out[test] = {
            "reference_key": _rate([_detect(t, config, True, test, alpha).is_watermarked for t in plain]),
            "fresh_keys": _rate([_detect(t, ChainMarkConfig(hkdf(f"context null {i}".encode(), b"chainmark/v1/keys"),
                                                            S=config.S, rho=config.rho), True, test, alpha)
                                 .is_watermarked for i, t in enumerate(plain)])}
    return out


def _robustness(texts: Sequence[Sequence[int]], config: ChainMarkConfig, context: bool, vocab_size: int,
                alpha: float) -> dict[str, Any]:
    """TPR of the exact test and the mean share of valid transitions (all of them) after substitution at each delta,
    beside the law's prediction ``survival * phi0 + (1 - survival) / S`` from the unattacked texts' phi0."""
    phi0 = float(np.mean([_detect(t, config, context, "z", alpha).phi for t in texts]))
    rows: dict[str, Any] = {"phi0": phi0}
    for d in _DELTAS:
        attack = Substitution(d, vocab_size)
        edited = [attack.edit(t, seed=np.random.SeedSequence([ATTACK_SEED, i])) for i, t in enumerate(texts)]
        verdicts = [_detect(t, config, context, "exact", alpha) for t in edited]
        s = survival(d, context)
        rows[f"{d:g}"] = {"tpr_exact": _rate([v.is_watermarked for v in verdicts]),
                          # phi over every transition (the z-test's; the exact test's is over a spanning forest)
                          "phi": float(np.mean([_detect(t, config, context, "z", alpha).phi for t in edited])),
                          "phi_law": s * phi0 + (1 - s) / config.S}
    return rows


def _cost(texts: Sequence[Sequence[int]], config: ChainMarkConfig, repeats: int = 3) -> dict[str, float]:
    """Seconds per text of the exact test on ChainMark's states and on pair codes (best of ``repeats``, same run);
    ChainMark's table is warm (its states are a lookup), each pair is hashed."""
    def best(context: bool) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for t in texts:
                _detect(t, config, context, "exact", 0.01)
            times.append((time.perf_counter() - t0) / len(texts))
        return min(times)

    chain, ctx = best(False), best(True)
    return {"chainmark_s": chain, "context_s": ctx, "ratio": ctx / chain}


def _steal_point(pool: AttackerPool, tokens: int | None, config: ChainMarkConfig) -> dict[str, Any]:
    """Steal the pairs' map from the pool's first ``tokens`` tokens (None: all) and score it with the key: pairs
    with a confident state, and the right share among the 500 and 2,000 most frequent pairs."""
    seen = pool.watermarked if tokens is None else first_tokens(pool.watermarked, tokens)
    t0 = time.perf_counter()
    stolen = steal_pairs(seen, pool.baseline, config.S, config.rho)
    row: dict[str, Any] = {"tokens": stolen.tokens_observed, "pairs_seen": int((stolen.counts > 0).sum()),
                           "known": stolen.n_known(), "seconds": round(time.perf_counter() - t0, 1),
                           "states_right": {}}
    for top in (500, 2000):
        right, total = stolen.agreement(config, stolen.frequent(top))
        row["states_right"][str(top)] = {"right": right, "total": total}
    row["forge_editor"] = _forged_share(pool, lambda ids, b: forge_pairs(ids, stolen, b), config)
    table = replay_table(seen, pool.baseline, config.S, config.rho)
    row["replay_contexts"] = len(table)
    row["forge_replay"] = _forged_share(pool, lambda ids, b: replay_edit(ids, table, b), config)
    return row


def _forged_share(pool: AttackerPool, edit: Any, config: ChainMarkConfig) -> dict[str, Any]:
    """An editor's flagged share on the held-out unwatermarked replies at each budget (the variant's exact test),
    with 95% intervals resampling whole prompts; ``edit(ids, budget)`` returns the edited text."""
    from cmlab.stats import cluster_bootstrap_rate

    return {f"{b:g}": cluster_bootstrap_rate([bool(context_detect(edit(ids, b), config).is_watermarked)
                                              for ids in pool.held_out_unwatermarked],
                                             list(pool.held_out_unwatermarked_prompts)).to_dict()
            for b in EDITOR_BUDGETS}


def measure_context_keyed(root: Any = None, alpha: float = 0.01) -> dict[str, Any]:
    """Everything of the variant the page reports except the generator forger (no model needed)."""
    config = reference_config()
    variant, chain = paired_replies(root)
    base = attacker_pool(root)
    plain = base.baseline + base.held_out_unwatermarked
    vocab = base.vocab_size
    v_ids, c_ids = [r["token_ids"] for r in variant], [r["token_ids"] for r in chain]
    out: dict[str, Any] = {"replies": len(variant), "alpha": alpha, "null": _null(config, plain, alpha)}
    out["power"] = {name: {test: _rate([_detect(t, config, ctx, test, alpha).is_watermarked for t in ids])
                           for test in ("exact", "z")}
                    for name, ids, ctx in (("context", v_ids, True), ("chainmark", c_ids, False))}
    out["robustness"] = {"context": _robustness(v_ids, config, True, vocab, alpha),
                         "chainmark": _robustness(c_ids, config, False, vocab, alpha)}
    from cmlab.harness.reference.read import load_texts

    none = [r for r in load_texts("head_to_head", root) if r["method"] == "none"]
    out["quality"] = {name: {"self_ppl": _median_interval([r["self_ppl"] for r in recs]),
                             "distinct_pairs": _median_interval([distinct_pair_share(r["token_ids"]) for r in recs]),
                             "rho_realised": float(np.mean([r["rho_realised"] for r in recs]))}
                      for name, recs in (("context", variant), ("chainmark", chain), ("unwatermarked", none))}
    out["cost"] = _cost(v_ids[:100], config)
    pool = context_pool(root)
    out["pool_tokens"], out["pool_texts"] = pool.pool_tokens, len(pool.watermarked)
    sizes = [t for t in _TOKENS_OBSERVED if t < pool.pool_tokens] + [None]
    out["stealing"] = {("all" if t is None else str(t)): _steal_point(pool, t, config) for t in sizes}
    return out


def load_context() -> dict[str, Any]:
    """The variant measured (``tools/measure_stealing.py context``)."""
    return json.loads(CONTEXT_FILE.read_text("utf-8"))


def load_context_generated() -> list[dict[str, Any]]:
    """The generator forger's replies against the variant (``tools/measure_stealing.py context-generate``)."""
    out: list[dict[str, Any]] = []
    for path in sorted(CONTEXT_GENERATED_DIR.glob("*_t*_b*.jsonl.gz")):
        out += [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines() if line]
    return out


__all__ = ["CONTEXT_FILE", "CONTEXT_GENERATED_DIR", "CONTEXT_GENERATORS", "context_pool", "distinct_pair_share",
           "load_context", "load_context_generated", "measure_context_keyed", "paired_replies"]

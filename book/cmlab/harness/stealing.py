"""The stealing experiment on the reference run: the adversary's pool, the held-out texts, and its curves.

The adversary collects the deployed model's replies (every reference reply of the reference configuration,
S = 5, rho = 0.5, the published key, to the prompts it may see) and generates the open model's own
unwatermarked replies to the same prompts as its baseline. Prompts from :data:`HELD_OUT_PROMPTS` on (12 per domain)
are kept apart: their unwatermarked replies are what the forgers edit, their watermarked replies what the
scrubber edits, so no evaluated text was in the pool. For each number of watermarked tokens observed
(the pool's first tokens, in the order :func:`attacker_pool` gives), :func:`stealing_point` steals a map and
measures, with 95% intervals over the held-out texts (resampling whole prompts): the share of the most frequent tokens
whose state came out right, the share of forged texts each test flags at each edit budget, the edits each
needed, and what the scrubber achieves. :func:`_true_key_map` is the same attacker holding the key.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from chainmark.auditor.rates import rate_estimate
from chainmark.config import ChainMarkConfig
from chainmark.partition import state_table
from cmlab.comparison.attacks import ATTACK_SEED
from cmlab.comparison.stealing import StolenMap, apply_path, edits_to_flip, forge_path, scrub_path, steal

#: Prompts with this index or more (in each domain) are held out of the adversary's pool.
HELD_OUT_PROMPTS = 88
#: The numbers of watermarked tokens observed at which the curve is measured.
TOKENS_OBSERVED = (250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000)
#: Edit budgets (shares of a text's tokens) at which forgeries and scrubbed texts are scored.
_BUDGETS = (0.05, 0.1, 0.2)
#: The tests the curves score: the exact test the book recommends, and the paper's z-test.
TESTS = ("exact", "z")
#: Where ``tools/measure_stealing.py`` writes what the page reads.
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "stealing"
CURVE_FILE = DATA_DIR / "curve.json"
KEYSET_FILE = DATA_DIR / "keyset.json"
MODELCHECK_FILE = DATA_DIR / "modelcheck.json"
ORDERS_FILE = DATA_DIR / "orders.json"
ADAPTIVE_FILE = DATA_DIR / "adaptive.json"
GENERATED_DIR = DATA_DIR / "generated"
#: The generator forger's runs: (watermarked tokens the map was stolen from, forged replies).
GENERATOR_TOKENS = ((5_000, 100), (20_000, 400))
#: The generator's replies are sampled with the reference seed plus this (apart from every reference cell).
GENERATOR_SEED_OFFSET = 50_000


@dataclass
class AttackerPool:
    """What the adversary holds (``watermarked`` in the order it collected them, ``baseline``) and the held-out
    texts it is measured on; ``vocab_size`` is the reference model's logits width."""

    watermarked: list[list[int]]
    baseline: list[list[int]]
    held_out_unwatermarked: list[list[int]]
    held_out_watermarked: list[list[int]]
    vocab_size: int
    #: each held-out text's prompt ("domain/index"): replies to one prompt are not independent trials
    held_out_unwatermarked_prompts: list[str] = dataclasses.field(default_factory=list)
    held_out_watermarked_prompts: list[str] = dataclasses.field(default_factory=list)

    @property
    def pool_tokens(self) -> int:
        return sum(len(t) for t in self.watermarked)


def reference_config() -> ChainMarkConfig:
    """The reference run's configuration (its published key, S, the clockwork): what the adversary attacks."""
    from cmlab.harness.reference.protocol import PROTOCOL, reference_key, topology_for

    return ChainMarkConfig(reference_key(), S=PROTOCOL.S, rho=PROTOCOL.rho, topology=topology_for(PROTOCOL.S))


def reference_gate() -> Any:
    """The reference run's gate at its rho (high entropy, the threshold in its ``gates.json``): what a published
    regime states, and what the generator forger uses."""
    from chainmark.gates import Gate
    from cmlab.harness.reference.protocol import PROTOCOL
    from cmlab.harness.reference.store import read_dir

    stored = json.loads((read_dir() / "gates.json").read_text("utf-8"))
    return Gate(stored["kind"], float(stored["tau"][f"{PROTOCOL.rho:g}"]), PROTOCOL.rho)


def attacker_pool(root: str | Path | None = None, vocab_size: int = 49152, seed: Any = ATTACK_SEED) -> AttackerPool:
    """The reference run's texts split into the adversary's pool and the held-out evaluation texts.

    Watermarked: every ChainMark reply of the reference configuration (head-to-head, calibration at S = 5,
    k-regular at k = 1, the stealing pool); unwatermarked: the head-to-head's and the null's replies.
    """
    from cmlab.harness.reference.read import load_texts

    from cmlab.harness.reference.protocol import PROTOCOL

    def ours(experiment: str, cell: str | None = None) -> list[dict[str, Any]]:
        return [r for r in load_texts(experiment, root) if (cell is None or r["cell"] == cell)]

    # the order the adversary collected them in: each block shuffled with the attack seed, the blocks in the order
    # the run made them, so that a pool that grows (a new stealing seed) leaves its first tokens as they were
    blocks = [[r for r in ours("head_to_head") if r["method"] == "chainmark"],
              ours("calibration", f"chainmark_S{PROTOCOL.S}"), ours("kregular", "chainmark_k1")]
    blocks += [ours("stealing", f"chainmark_pool_seed{s}") for s in PROTOCOL.stealing_seeds]
    rng = np.random.default_rng(seed)
    train: list[list[int]] = []
    for block in blocks:
        texts = [r["token_ids"] for r in block if r["prompt_index"] < HELD_OUT_PROMPTS]
        train += [list(texts[i]) for i in rng.permutation(len(texts))]
    marked = [r for block in blocks for r in block if r["prompt_index"] >= HELD_OUT_PROMPTS]
    plain = [r for r in ours("head_to_head") if r["method"] == "none"] + ours("null")
    held = [r for r in plain if r["prompt_index"] >= HELD_OUT_PROMPTS]
    return AttackerPool(
        watermarked=train,
        baseline=[list(r["token_ids"]) for r in plain if r["prompt_index"] < HELD_OUT_PROMPTS],
        held_out_unwatermarked=[list(r["token_ids"]) for r in held],
        held_out_watermarked=[list(r["token_ids"]) for r in marked],
        vocab_size=int(vocab_size),
        held_out_unwatermarked_prompts=[f"{r['domain']}/{r['prompt_index']}" for r in held],
        held_out_watermarked_prompts=[f"{r['domain']}/{r['prompt_index']}" for r in marked])


def first_tokens(texts: Sequence[Sequence[int]], tokens: int) -> list[list[int]]:
    """The first ``tokens`` tokens of ``texts`` taken in order (the last reply cut short)."""
    out, have = [], 0
    for t in texts:
        if have >= tokens:
            break
        out.append(list(t[:tokens - have]))
        have += len(out[-1])
    return out


def _true_key_map(config: ChainMarkConfig, vocab_size: int, token_counts: Any = None) -> StolenMap:
    """What an adversary holding the key knows: every state, fully confident (the curves' ceiling)."""
    counts = np.ones(vocab_size, dtype=np.int64) if token_counts is None else np.asarray(token_counts)
    return StolenMap(config.S, state_table(config.key, vocab_size, config.S).astype(np.int64),
                     np.ones(vocab_size), -1, counts)


def _paths(texts: Sequence[Sequence[int]], stolen: StolenMap, forge: bool) -> list[list[tuple[int, int]]]:
    return [(forge_path if forge else scrub_path)(ids, stolen) for ids in texts]


def _random_paths(texts: Sequence[Sequence[int]], vocab_size: int,
                  seed: Any = ATTACK_SEED) -> list[list[tuple[int, int]]]:
    """The blind scrubber's edits: every position once, in a random order, each to a random token (no map)."""
    rng = np.random.default_rng(seed)
    return [[(int(j), int(rng.integers(0, vocab_size))) for j in rng.permutation(len(ids))] for ids in texts]


def _measure(texts: Sequence[Sequence[int]], paths: Sequence[Sequence[tuple[int, int]]], prompts: Sequence[str],
             config: ChainMarkConfig, test: str, forge: bool, budgets: Sequence[float], alpha: float,
             vocab_size: int) -> dict[str, Any]:
    """Per budget, the share of texts flagged (forge) or no longer flagged (scrub) after exactly that budget of
    the path's edits, its interval resampling whole prompts; and the median share of tokens edited when the
    detector's verdict first flips (None when it does not flip for most texts along the whole path)."""
    from chainmark.detection import detect
    from cmlab.stats import cluster_bootstrap_rate

    row: dict[str, Any] = {}
    for b in budgets:
        flags = [bool(detect(apply_path(ids, path, budget=b), config, alpha, vocab_size=vocab_size,
                             test=test).is_watermarked) == forge for ids, path in zip(texts, paths)]
        row[f"{b:g}"] = cluster_bootstrap_rate(flags, list(prompts)).to_dict()
    needed = np.array([np.inf if (m := edits_to_flip(ids, path, config, alpha, test, want_flagged=forge,
                                                      vocab_size=vocab_size)) is None else m / max(len(ids), 1)
                       for ids, path in zip(texts, paths)])
    row["median_edits"] = float(np.median(needed)) if np.isfinite(needed).sum() * 2 > needed.size else None
    return row


def stealing_point(pool: AttackerPool, tokens: int | None, config: ChainMarkConfig | None = None,
                   alpha: float = 0.01, budgets: Sequence[float] = _BUDGETS, tests: Sequence[str] = TESTS,
                   scrub_budgets: Sequence[float] = (0.1, 0.2, 0.3)) -> dict[str, Any]:
    """One point of the curves: steal from the pool's first ``tokens`` tokens (None: the true key) and measure.

    Forgery and scrubbing rates are over the held-out texts after exactly each budget of edits, with 95%
    intervals that resample whole prompts (three unwatermarked replies share each held-out prompt).
    ``states_right`` counts the frequent tokens of the pool whose stolen state is right after the best
    rotation: all of the ``top`` most frequent (an unknown state counts as wrong) and the confident ones among
    them; a fixed set of tokens, not a sample, so it carries no interval.
    """
    config = config or reference_config()
    V = pool.vocab_size
    if tokens is None:
        counts = np.bincount(np.concatenate([np.asarray(t) for t in pool.watermarked]), minlength=V)
        stolen = _true_key_map(config, V, counts)
        observed = None
    else:
        seen = first_tokens(pool.watermarked, tokens)
        stolen = steal(seen, pool.baseline, config.S, config.rho, V)
        observed = stolen.tokens_observed
    truth = state_table(config.key, V, config.S)
    row: dict[str, Any] = {"tokens": observed, "known": stolen.n_known(), "states_right": {}}
    known = stolen.known()
    for top in (500, 2000):
        frequent = stolen.frequent_tokens(top)
        right, total = stolen.agreement(truth, frequent)
        confident = frequent[known[frequent] >= 0]
        c_right, c_total = stolen.agreement(truth, confident) if confident.size else (0, 0)
        row["states_right"][str(top)] = {"right": right, "total": total, "confident_right": c_right,
                                         "confident_total": c_total}
    forge_paths = _paths(pool.held_out_unwatermarked, stolen, True)
    scrub_paths = _paths(pool.held_out_watermarked, stolen, False)
    row["forge"] = {test: _measure(pool.held_out_unwatermarked, forge_paths, pool.held_out_unwatermarked_prompts,
                                   config, test, True, budgets, alpha, V) for test in tests}
    row["scrub"] = {test: _measure(pool.held_out_watermarked, scrub_paths, pool.held_out_watermarked_prompts,
                                   config, test, False, scrub_budgets, alpha, V) for test in tests}
    return row


def blind_scrub(pool: AttackerPool, config: ChainMarkConfig | None = None, alpha: float = 0.01,
                budgets: Sequence[float] = (0.1, 0.2, 0.3)) -> dict[str, Any]:
    """The scrubber without any map (random positions, random tokens) on the held-out watermarked texts, scored
    as :func:`stealing_point` scores the stolen map's scrubber."""
    config = config or reference_config()
    paths = _random_paths(pool.held_out_watermarked, pool.vocab_size)
    return {test: _measure(pool.held_out_watermarked, paths, pool.held_out_watermarked_prompts, config, test,
                           False, budgets, alpha, pool.vocab_size) for test in TESTS}


def generator_batches(texts: int, batch_size: int = 25) -> list[Any]:
    """The generator forger's prompts: the first ``texts / 4`` of each reference domain, in domain-pure batches
    (:class:`cmlab.harness.reference.protocol.PromptBatch`), batch j sampled with its own seed."""
    from cmlab.harness.reference.protocol import PROTOCOL, PromptBatch
    from cmlab.harness.prompts import prompt_grid

    items = prompt_grid(texts // len(PROTOCOL.domains), PROTOCOL.domains)
    by_domain = [[it for it in items if it[0] == d] for d in PROTOCOL.domains]
    chunks = [group[i:i + batch_size] for group in by_domain for i in range(0, len(group), batch_size)]
    return [PromptBatch(j, PROTOCOL.seed + GENERATOR_SEED_OFFSET + j, list(c)) for j, c in enumerate(chunks)]


def load_curve() -> dict[str, Any]:
    """The measured curves (``tools/measure_stealing.py curve``): one point per number of tokens observed."""
    return json.loads(CURVE_FILE.read_text("utf-8"))


def load_keyset() -> dict[str, Any]:
    """The key-set defence measured (``tools/measure_stealing.py keyset``)."""
    return json.loads(KEYSET_FILE.read_text("utf-8"))


def load_modelcheck() -> dict[str, Any]:
    """The model-checked verification measured (``tools/measure_stealing.py modelcheck``)."""
    return json.loads(MODELCHECK_FILE.read_text("utf-8"))


def load_orders() -> dict[str, Any]:
    """The curve's forgery rates under other collection orders (``tools/measure_stealing.py orders``)."""
    return json.loads(ORDERS_FILE.read_text("utf-8"))


def load_adaptive() -> dict[str, Any]:
    """The generator with the whole pool's map, model-checked (``tools/measure_stealing.py adaptive``)."""
    return json.loads(ADAPTIVE_FILE.read_text("utf-8"))


def load_generated() -> list[dict[str, Any]]:
    """The generator forger's replies (``tools/measure_stealing.py generate``), one record per reply."""
    out: list[dict[str, Any]] = []
    for path in sorted(GENERATED_DIR.glob("t*_b*.jsonl.gz")):
        out += [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines() if line]
    return out


__all__ = ["ADAPTIVE_FILE", "CURVE_FILE", "GENERATED_DIR", "GENERATOR_TOKENS", "HELD_OUT_PROMPTS", "KEYSET_FILE",
           "MODELCHECK_FILE", "ORDERS_FILE", "TESTS", "TOKENS_OBSERVED", "AttackerPool", "attacker_pool", "blind_scrub",
           "first_tokens", "generator_batches", "load_adaptive", "load_curve", "load_generated", "load_keyset",
           "load_modelcheck", "load_orders", "reference_config", "reference_gate", "stealing_point"]

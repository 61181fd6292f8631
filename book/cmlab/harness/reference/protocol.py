"""The reference run's protocol: every size and setting, the public key, and the cells it runs.

A change here changes what the run generates (``verify`` would report it), so the protocol, the
key's label and the cutting of prompts into batches live together, apart from storage and running.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from cmlab.comparison.attacks import ATTACK_SEED
from chainmark.config import GENERATION_SEED
from chainmark.keys import hkdf
from chainmark.topology import cycle_topology
from cmlab.harness.prompts import load_prompts

#: The published label the reference key is derived from (HKDF-SHA-256).
REFERENCE_LABEL = "chainmark-book/reference-run/v1"
EXPERIMENTS = ("head_to_head", "null", "calibration", "kregular", "explorer", "stealing", "context_keyed")
#: A rewrite with fewer tokens than this did not really rewrite the text
#: (an empty reply, a refusal fragment): it is counted and left out of rates.
MIN_REWRITE_TOKENS = 16


def reference_key() -> bytes:
    """The reference run's key: HKDF of :data:`REFERENCE_LABEL` (public, not secret)."""
    return hkdf(REFERENCE_LABEL.encode("utf-8"), b"chainmark/v1/reference-key")


@dataclass(frozen=True)
class Protocol:
    """Every size and setting of the reference run; changing one invalidates the records."""

    S: int = 5
    rho: float = 0.5
    alpha: float = 0.01
    temperature: float = 0.7
    seed: int = GENERATION_SEED
    attack_seed: int = ATTACK_SEED
    kgw_gamma: float = 0.5
    kgw_delta: float = 2.0
    max_new_tokens: int = 200
    batch_size: int = 25   # benchmarks/bench_batch.py: the fastest size that divides 100 prompts
    n_per_domain: int = 100
    domains: tuple[str, ...] = ("code", "factual", "wiki", "writing")
    deltas: tuple[float, ...] = (0.1, 0.2, 0.3)
    paraphrase_tokens: int = 320
    pilot_per_domain: int = 2
    pilot_tokens: int = 64
    pilot_seed_offset: int = 1000
    null_seeds: tuple[int, ...] = (1, 2)
    null_seed_stride: int = 10_000
    calibration_S: tuple[int, ...] = (2, 3, 5, 8)
    calibration_per_domain: int = 25
    kregular_k: tuple[int, ...] = (1, 2, 3)
    kregular_prompts: int = 100
    kregular_domain: str = "wiki"
    kregular_delta: float = 0.2
    explorer_S: tuple[int, ...] = (2, 3, 5, 8, 10)
    explorer_rho: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 1.0)
    explorer_per_domain: int = 4
    explorer_tokens: int = 128
    stealing_seeds: tuple[int, ...] = (3, 4)
    context_keyed_seeds: tuple[int, ...] = (3, 4)

    def describe(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @property
    def rhos(self) -> tuple[float, ...]:
        """Every budget a gate is calibrated for (one pilot serves them all)."""
        return tuple(sorted({self.rho, *self.explorer_rho}))


PROTOCOL = Protocol()


# --------------------------------------------------------------------------- the cells


@dataclass
class PromptBatch:
    """One generate call: ``items`` are (domain, index, prompt); sampled with ``seed``."""

    index: int
    seed: int
    items: list[tuple[str, int, str]]


@dataclass
class Cell:
    """One method on one list of prompts, in batches; ``spec`` is what it is (JSON)."""

    experiment: str
    name: str
    spec: dict[str, Any]
    batches: list[PromptBatch]
    max_new_tokens: int
    attacks: tuple[str, ...] = ()
    detectors: tuple[str, ...] = ()   # for unwatermarked cells: the detectors that score them

    @property
    def n_texts(self) -> int:
        return sum(len(b.items) for b in self.batches)


def _batches(items_by_domain: Mapping[str, list[tuple[str, int, str]]], size: int, seed: int) -> list[PromptBatch]:
    """Domain-pure batches of at most ``size`` prompts, taken round-robin over the domains.

    Domain-pure: prompts of one domain have similar lengths, so little padding.
    Round-robin: a run stopped half-way has covered every domain.
    """
    chunks = {d: [items[i:i + size] for i in range(0, len(items), size)] for d, items in items_by_domain.items()}
    out: list[PromptBatch] = []
    for r in range(max((len(c) for c in chunks.values()), default=0)):
        for d in items_by_domain:
            if r < len(chunks[d]):
                out.append(PromptBatch(len(out), seed + len(out), chunks[d][r]))
    return out


def _grid(domains: Sequence[str], n: int) -> dict[str, list[tuple[str, int, str]]]:
    return {d: [(d, i, p) for i, p in enumerate(load_prompts(d, n))] for d in domains}


def cells(protocol: Protocol = PROTOCOL, experiments: Sequence[str] = EXPERIMENTS) -> list[Cell]:
    """Every cell of the chosen experiments, in run order."""
    p = protocol
    for e in experiments:
        if e not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {e!r}; choose from {EXPERIMENTS}")
    out: list[Cell] = []
    h2h = _grid(p.domains, p.n_per_domain)
    attacks = tuple(f"sub{d:g}" for d in p.deltas) + ("paraphrase",)
    detectors = ("chainmark", "kgw", "sweet")
    if "head_to_head" in experiments:
        for name in ("chainmark", "kgw", "sweet", "none"):
            spec = {"method": name, "S": p.S, "rho": p.rho} if name == "chainmark" else {"method": name}
            out.append(Cell("head_to_head", name, spec, _batches(h2h, p.batch_size, p.seed), p.max_new_tokens,
                            attacks if name != "none" else (), detectors if name == "none" else ()))
    if "null" in experiments:
        for s in p.null_seeds:
            seed = p.seed + s * p.null_seed_stride
            out.append(Cell("null", f"none_seed{s}", {"method": "none", "seed_base": seed},
                            _batches(h2h, p.batch_size, seed), p.max_new_tokens, (), detectors))
    if "calibration" in experiments:
        grid = _grid(p.domains, p.calibration_per_domain)
        for S in p.calibration_S:
            out.append(Cell("calibration", f"chainmark_S{S}", {"method": "chainmark", "S": S, "rho": p.rho},
                            _batches(grid, p.batch_size, p.seed), p.max_new_tokens))
    if "kregular" in experiments:
        grid = _grid((p.kregular_domain,), p.kregular_prompts)
        for k in p.kregular_k:
            out.append(Cell("kregular", f"chainmark_k{k}", {"method": "chainmark", "S": p.S, "rho": p.rho, "k": k},
                            _batches(grid, p.batch_size, p.seed), p.max_new_tokens, (f"sub{p.kregular_delta:g}",)))
    if "explorer" in experiments:
        # few prompts: one mixed batch per cell (domain-pure batches of 4 would waste the CPU)
        items = [item for d, its in _grid(p.domains, p.explorer_per_domain).items() for item in its]
        one = [PromptBatch(0, p.seed, items)]
        out.append(Cell("explorer", "none", {"method": "none"}, one, p.explorer_tokens))
        for S in p.explorer_S:
            for r in p.explorer_rho:
                out.append(Cell("explorer", f"chainmark_S{S}_rho{r:g}", {"method": "chainmark", "S": S, "rho": r},
                                one, p.explorer_tokens))
    if "stealing" in experiments:
        # what an adversary collects from the deployed model: the head-to-head's prompts asked again, so that with
        # the head-to-head's and the calibration's replies of the same key the pool passes 200,000 tokens
        for s in p.stealing_seeds:
            seed = p.seed + s * p.null_seed_stride
            out.append(Cell("stealing", f"chainmark_pool_seed{s}",
                            {"method": "chainmark", "S": p.S, "rho": p.rho, "seed_base": seed},
                            _batches(h2h, p.batch_size, seed), p.max_new_tokens))
    if "context_keyed" in experiments:
        # the context-keyed variant (a defence against stealing) on the stealing pool's prompts and seeds: paired
        # with ChainMark's replies there, and the same adversary's pool against it
        for s in p.context_keyed_seeds:
            seed = p.seed + s * p.null_seed_stride
            out.append(Cell("context_keyed", f"context_pool_seed{s}",
                            {"method": "context_keyed", "S": p.S, "rho": p.rho, "seed_base": seed},
                            _batches(h2h, p.batch_size, seed), p.max_new_tokens))
    return out


def topology_for(S: int, k: int = 1) -> Any:
    """The k-regular topology of the reference: :func:`chainmark.topology.cycle_topology` (clockwork for
    k = 1, soft cycle for 2, offsets 1..k), the function that also resolves a regime's topology names."""
    return cycle_topology(S, k)


__all__ = ["EXPERIMENTS", "MIN_REWRITE_TOKENS", "PROTOCOL", "REFERENCE_LABEL", "Cell", "PromptBatch", "Protocol",
           "cells", "reference_key", "topology_for"]

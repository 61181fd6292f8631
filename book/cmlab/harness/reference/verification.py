"""Verifying the reference: regenerate stored batches with the current code and compare them, field by field.

The draw of batches and the comparison live here; what generates a batch is the runner's own
:class:`~cmlab.harness.reference.generation.RunContext`, so a check runs exactly the code a run runs.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from cmlab.harness.reference.compare import compare_records, tolerance_rules
from cmlab.harness.reference.generation import RunContext
from cmlab.harness.reference.protocol import PROTOCOL, Cell, PromptBatch, Protocol, cells
from cmlab.harness.reference.store import (MANIFEST, PROVENANCE, encode_shard, git_commit, protocol_differences, read_provenance,
                    read_shard, reference_dir, shard_path)


@dataclass
class ShardCheck:
    """The outcome of regenerating one stored batch."""

    shard: str
    texts: int
    matched: bool
    differences: list[str] = field(default_factory=list)


def _cell_tau(ctx: RunContext, cell: Cell) -> float | None:
    """The gate threshold a cell's texts were generated with (None for methods without a gate)."""
    spec = cell.spec
    rho = spec.get("rho", ctx.protocol.rho if spec.get("method") == "sweet" else None)
    gate = ctx.gates.get(float(rho)) if rho is not None else None
    return None if gate is None else float(gate.tau)


class NoBatchWithinBound(ValueError):
    """No stored batch regenerates within the ``max_tokens`` a check was given."""


def _regeneration_tokens(cell: Cell, batch: PromptBatch, protocol: Protocol = PROTOCOL) -> int:
    """Tokens the model generates to regenerate a batch: each text's new tokens, plus its paraphrase's if attacked."""
    paraphrase = protocol.paraphrase_tokens if "paraphrase" in cell.attacks else 0
    return len(batch.items) * (cell.max_new_tokens + paraphrase)


def _choose_shards(root: Path, samples: int, seed: str, protocol: Protocol = PROTOCOL,
                   max_tokens: int | None = None) -> list[tuple[Cell, PromptBatch]]:
    """``samples`` stored batches drawn at random, the draw seeded by ``seed`` (the current commit).

    With ``max_tokens``, only among the batches whose regeneration generates at most that many tokens
    (:class:`NoBatchWithinBound` if there is none); without it, among all of them.
    """
    stored = [(c, b) for c in cells(protocol) for b in c.batches if shard_path(root, c, b).exists()]
    admissible = [(c, b) for c, b in stored if max_tokens is None or _regeneration_tokens(c, b, protocol) <= max_tokens]
    if stored and not admissible:
        cheapest = min(_regeneration_tokens(c, b, protocol) for c, b in stored)
        raise NoBatchWithinBound(f"no stored batch in {root} regenerates at most {max_tokens} tokens "
                                 f"(the cheapest generates {cheapest}): raise the bound or leave it out")
    rng = random.Random(hashlib.sha256(seed.encode("utf-8")).hexdigest())
    return rng.sample(admissible, min(samples, len(admissible)))


def verify(samples: int = 3, model: Any = None, tokenizer: Any = None, root: str | os.PathLike | None = None,
           protocol: Protocol = PROTOCOL, seed: str | None = None, max_tokens: int | None = None,
           log: Callable[[str], None] = print) -> list[ShardCheck]:
    """Regenerate ``samples`` stored batches with the current code and compare them with the stored ones.

    Token ids, gate decisions, counts and verdicts must be identical, and so
    must every float that is a function of them and the key (phi, z,
    p-values); the floats PyTorch computes from the model's logits (gate
    signals, self-perplexity) agree within their relative tolerance, because
    another CPU rounds differently: :data:`~cmlab.harness.reference.compare.VERIFY_FIELDS` states the rule of
    each field, the manifest's ``verify_tolerance`` the numbers
    (:func:`~cmlab.harness.reference.compare.tolerance_rules`; a float field without a rule is exact). A text
    whose tokens diverge is reported with the first differing position and
    the gate's margin there.

    The draw is seeded by the current git commit (``seed`` overrides it), so
    every commit checks different batches; ``max_tokens`` draws only among
    the batches whose regeneration generates at most that many tokens (texts
    x new tokens, paraphrases included), which bounds the check's time
    (:class:`NoBatchWithinBound` if no stored batch is that cheap). The whole
    batch a record was generated in is regenerated (batch composition changes low-order bits),
    with the thread count the run used. Returns one :class:`ShardCheck` per batch.
    """
    import torch

    root = Path(root) if root is not None else reference_dir()
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"max_tokens must be an integer >= 1 or None, got {max_tokens!r}")
    if not (root / MANIFEST).exists():
        raise FileNotFoundError(f"no reference run in {root}: run `cmlab reference run` first")
    manifest = json.loads((root / MANIFEST).read_text("utf-8"))
    diff = protocol_differences(manifest, protocol)
    if diff:
        return [ShardCheck("protocol", 0, False, [f"protocol field {k}: stored {manifest['protocol'].get(k)!r}, "
                                                  f"code {protocol.describe().get(k)!r}" for k in diff])]
    recorded = manifest.get("verify_tolerance")
    rules = tolerance_rules(recorded)
    kernel = ", ".join(f"{n} (rel {r['rel']:g}, abs {r['abs']:g})" for n, r in rules.items() if r["rule"] == "rel")
    old_format = isinstance(recorded, Mapping) and "format" not in recorded
    log(f"verify: floats from the model's logits within their tolerance, {kernel}; every other float exactly"
        + (" (the manifest's single tolerance, format 1, is read as the one of these floats)" if old_format else ""))
    seed = seed if seed is not None else git_commit().replace("+dirty", "")
    chosen = _choose_shards(root, samples, seed, protocol, max_tokens)
    if not chosen:
        raise FileNotFoundError(f"{root} holds no stored batch to verify")
    if max_tokens is not None:
        log(f"verify: drawn among the stored batches that regenerate at most {max_tokens} tokens")
    if model is None:
        from cmlab.harness.models import load_model

        model, tokenizer = load_model()
    threads = torch.get_num_threads()
    ctx = RunContext(root, protocol, model, tokenizer)
    checks = []
    for cell, batch in chosen:
        path = shard_path(root, cell, batch)
        stored = read_shard(path)
        prov = [p for p in read_provenance(path.parent / PROVENANCE) if p["batch"] == batch.index]
        if prov and prov[-1].get("threads"):
            torch.set_num_threads(int(prov[-1]["threads"]))
        t0 = time.perf_counter()
        try:
            fresh = _roundtrip(ctx.run_batch(cell, batch))
        finally:
            torch.set_num_threads(threads)
        differences = compare_records(stored, fresh, _cell_tau(ctx, cell), rules)
        name = str(path.relative_to(root))
        checks.append(ShardCheck(name, len(stored), not differences, differences[:10]))
        log(f"verify {name}: {len(stored)} records, {'identical' if not differences else 'DIFFERENT'} "
            f"({time.perf_counter() - t0:.0f} s)")
    return checks


def _roundtrip(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records as they read back from a shard (JSON-clean: NaN to None, tuples to lists)."""
    return [json.loads(line) for line in gzip.decompress(encode_shard(records)).decode("utf-8").splitlines()]


__all__ = ["NoBatchWithinBound", "ShardCheck", "verify"]

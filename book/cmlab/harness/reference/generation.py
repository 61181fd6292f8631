"""Running the reference: the context that generates a batch, the resumable locked runner, its status.

A batch of a cell is sampled with ``seed + j`` as one ``generate`` call, exactly as
:func:`cmlab.harness.runner.run_grid` does, and written whole, so a run resumes where it stopped.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

from chainmark.gates import Gate
from chainmark.jsonio import atomic_write
from cmlab.harness.prompts import prompt_grid
from cmlab.harness.runs import RunControl, lock_run_folder
from cmlab.harness.settings import get_settings, progress_bars_off
from cmlab.harness.reference.protocol import EXPERIMENTS, PROTOCOL, Cell, PromptBatch, Protocol, cells, reference_key, topology_for
from cmlab.harness.reference.store import (MANIFEST, PROVENANCE, encode_shard, environment, manifest_for, protocol_differences,
                    provenance_parts, read_provenance, reference_dir, shard_path, utc_now, weights_sha256)


class RunContext:
    """The model, tokenizer, gates and method objects a run or a check needs (built once)."""

    def __init__(self, root: Path, protocol: Protocol, model: Any, tokenizer: Any):
        from chainmark.embed import logits_width

        self.root, self.protocol, self.model, self.tokenizer = root, protocol, model, tokenizer
        self.key = reference_key()
        self.vocab_size = logits_width(model)
        self.gates = self._gates()

    def _gates(self) -> dict[float, Any]:
        """Thresholds for every budget, from one unwatermarked pilot; stored in ``gates.json``."""
        from chainmark.embed import Sampling, pilot_signal
        p, file = self.protocol, self.root / "gates.json"
        exact = {r: Gate.calibrate("high_entropy", r, []) for r in p.rhos if r in (0.0, 1.0)}  # tau = -inf/+inf
        if file.exists():
            stored = json.loads(file.read_text("utf-8"))
            return {**exact, **{float(r): Gate(stored["kind"], float(t), float(r)) for r, t in stored["tau"].items()}}
        pilot = [q for _, _, q in prompt_grid(p.pilot_per_domain, p.domains)]
        signal = pilot_signal(self.model, self.tokenizer, pilot, "high_entropy",
                              sampling=Sampling(max_new_tokens=p.pilot_tokens, batch_size=len(pilot),
                                                seed=p.seed + p.pilot_seed_offset, temperature=p.temperature))
        gates = {r: Gate.calibrate("high_entropy", r, signal) for r in p.rhos if r not in exact}
        atomic_write(file, json.dumps({"kind": "high_entropy", "pilot_prompts": len(pilot),
                                        "pilot_tokens": p.pilot_tokens,
                                        "tau": {f"{r:g}": g.tau for r, g in gates.items()}}, indent=1) + "\n")
        return {**exact, **gates}

    def method(self, cell: Cell) -> Any:
        from cmlab.comparison.baselines import KGWConfig, SweetConfig
        from chainmark.config import ChainMarkConfig
        from cmlab.harness.adapters import ChainMarkMethod, ContextKeyedMethod, KGWMethod, NoWatermark, SweetMethod

        p, spec, name = self.protocol, cell.spec, cell.name
        kind = spec["method"]
        if kind == "none":
            return NoWatermark(name)
        if kind == "kgw":
            return KGWMethod(KGWConfig(self.key, gamma=p.kgw_gamma, delta=p.kgw_delta), name)
        if kind == "sweet":
            return SweetMethod(SweetConfig(self.key, self.gates[p.rho], gamma=p.kgw_gamma, delta=p.kgw_delta),
                               name, batch_size=p.batch_size)
        rho = float(spec["rho"])
        config = ChainMarkConfig(self.key, S=int(spec["S"]), rho=rho, gate="high_entropy",
                                 topology=topology_for(int(spec["S"]), int(spec.get("k", 1))))
        if kind == "context_keyed":
            return ContextKeyedMethod(config, self.gates[rho], name)
        return ChainMarkMethod(config, self.gates[rho], name)

    def detectors(self, cell: Cell) -> list[Any]:
        template = {"chainmark": {"method": "chainmark", "S": self.protocol.S, "rho": self.protocol.rho},
                    "kgw": {"method": "kgw"}, "sweet": {"method": "sweet"}}
        return [self.method(Cell(cell.experiment, d, template[d], [], 0)) for d in cell.detectors]

    def attacks(self, cell: Cell) -> dict[str, Any]:
        from cmlab.comparison.attacks import Substitution
        from cmlab.comparison.rewrites import Paraphrase

        p, out = self.protocol, {}
        for label in cell.attacks:
            if label.startswith("sub"):
                out[label] = Substitution(float(label[3:]), self.vocab_size, seed=p.attack_seed)
            elif label == "paraphrase":
                out[label] = Paraphrase(self.model, self.tokenizer, max_new_tokens=p.paraphrase_tokens,
                                        seed=p.attack_seed, batch_size=p.batch_size, temperature=p.temperature)
            else:  # pragma: no cover - cells() only names the attacks above
                raise ValueError(f"unknown attack label {label!r}")
        return out

    def run_batch(self, cell: Cell, batch: PromptBatch) -> list[dict[str, Any]]:
        """Generate, score and attack one batch, exactly as the runner of the book's grids does."""
        import torch

        from chainmark.embed import Sampling
        from cmlab.harness.options import BatchContext
        from cmlab.harness.runner import run_batch

        method = self.method(cell)
        detectors = self.detectors(cell) if not method.watermarked else [method]
        how = Sampling(max_new_tokens=cell.max_new_tokens, min_new_tokens=cell.max_new_tokens,
                       temperature=self.protocol.temperature, seed=_seed_base(cell, batch),
                       batch_size=len(batch.items))
        context = BatchContext(self.model, self.tokenizer, self.vocab_size, how, self.attacks(cell),
                               self.protocol.alpha, True)
        with torch.no_grad():
            records = list(run_batch(context, method, detectors, batch.items, batch.seed - _seed_base(cell, batch)))
        for r in records:
            r["batch"] = batch.index
            r["seed"] = batch.seed
        return records


def _seed_base(cell: Cell, batch: PromptBatch) -> int:
    """``records.run_batch`` samples with ``seed + j``: pass the base so that ``seed + j`` is the batch's seed."""
    return batch.seed - batch.index


# --------------------------------------------------------------------------- run, status


def regenerate_command(experiments: Sequence[str] = EXPERIMENTS) -> str:
    """The command that deletes and regenerates ``experiments`` (what a mismatch report names)."""
    return "cmlab reference run --fresh " + " ".join(experiments)


def run(model: Any = None, tokenizer: Any = None, experiments: Sequence[str] = EXPERIMENTS,
        root: str | os.PathLike | None = None, protocol: Protocol = PROTOCOL, fresh: Sequence[str] = (),
        control: RunControl = RunControl(), model_name: str | None = None) -> dict[str, int]:
    """Run (or resume) the reference; returns ``{"written": batches, "skipped": batches}``.

    ``fresh`` names experiments whose batches on disk are deleted first (after a
    change to what generation produces). ``control`` shows a progress bar or not and may stop the run
    after ``stop_after`` new batches (to show resuming). Batches are written whole, so an
    interruption loses at most the batch in flight.
    """
    if not isinstance(control, RunControl):
        raise TypeError(f"control must be a RunControl, got {type(control).__name__}")
    model_name = model_name or get_settings().model
    root = Path(root) if root is not None else reference_dir(model_name)
    for e in fresh:
        if e not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {e!r}; choose from {EXPERIMENTS}")
        shutil.rmtree(root / e, ignore_errors=True)
    if fresh and set(fresh) >= set(EXPERIMENTS):
        for name in (MANIFEST, "gates.json"):
            (root / name).unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    with lock_run_folder(root):  # one writer per reference folder (a second one stops at once)
        return _run_locked(root, model, tokenizer, experiments, protocol, control, model_name)


def _pending(root: Path, protocol: Protocol = PROTOCOL,
            experiments: Sequence[str] = EXPERIMENTS) -> list[tuple[Cell, PromptBatch]]:
    """The (cell, batch) pairs not on disk yet, in the order a run generates them.

    Experiments come in the order given (so ``--experiments null head_to_head`` fills the
    null first); within one, batch-major: a run stopped half-way holds every cell (method)
    of the batches it reached and, batches being round-robin over domains, every domain.
    Order never changes what a batch holds: each batch has its own seed.
    """
    order = {e: i for i, e in enumerate(dict.fromkeys(experiments))}
    return sorted(((c, b) for c in cells(protocol, experiments) for b in c.batches
                   if not shard_path(root, c, b).exists()), key=lambda cb: (order[cb[0].experiment], cb[1].index))


def _run_locked(root: Path, model: Any, tokenizer: Any, experiments: Sequence[str], protocol: Protocol,
                control: RunControl, model_name: str) -> dict[str, int]:
    from tqdm.auto import tqdm

    manifest = manifest_for(root, protocol, model_name)
    diff = protocol_differences(manifest, protocol)
    if diff:
        raise ValueError(f"{root} holds a reference made with another protocol ({', '.join(diff)} differ); "
                         f"regenerate it with `{regenerate_command()}`")
    weights = weights_sha256(model_name)
    if manifest.get("weights_sha256") != weights:
        raise ValueError(f"{root} holds a reference made with other model weights (SHA-256 "
                         f"{str(manifest.get('weights_sha256'))[:12]}, this file {str(weights)[:12]}); "
                         f"use another --dir or regenerate it with `{regenerate_command()}`")
    if model is None:
        from cmlab.harness.models import load_model

        model, tokenizer = load_model()
    atomic_write(root / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    ctx = RunContext(root, protocol, model, tokenizer)
    todo = _pending(root, protocol, experiments)
    total_batches = sum(len(c.batches) for c in cells(protocol, experiments))
    env = environment(model)
    written = 0
    bar = tqdm(total=sum(len(b.items) for _, b in todo), unit="text", desc="reference", disable=not control.progress or progress_bars_off())
    for cell, batch in todo:
        if control.stop_after is not None and written >= control.stop_after:
            break
        bar.set_postfix_str(f"{cell.experiment}/{cell.name} b{batch.index:03d}")
        t0 = time.perf_counter()
        records = ctx.run_batch(cell, batch)
        seconds = time.perf_counter() - t0
        atomic_write(shard_path(root, cell, batch), encode_shard(records))
        tokens = sum(r["n_tokens"] for r in records)
        line = {"batch": batch.index, "texts": len(records), "tokens": tokens, "seconds": round(seconds, 2),
                "tokens_per_second": round(tokens / seconds, 2) if seconds > 0 else None,
                "batch_size": len(batch.items), "finished": utc_now(), **env}
        with open(root / cell.experiment / cell.name / PROVENANCE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        manifest["parts"] = provenance_parts(root, protocol)
        atomic_write(root / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        written += 1
        bar.update(len(batch.items))
    bar.close()
    return {"written": written, "skipped": total_batches - len(todo), "total": total_batches}


def status(root: str | os.PathLike | None = None, protocol: Protocol = PROTOCOL,
           experiments: Sequence[str] = EXPERIMENTS) -> list[dict[str, Any]]:
    """One row per cell: batches and texts on disk against the protocol, time spent, throughput."""
    root = Path(root) if root is not None else reference_dir()
    rows = []
    for cell in cells(protocol, experiments):
        done = [b for b in cell.batches if shard_path(root, cell, b).exists()]
        prov = read_provenance(root / cell.experiment / cell.name / PROVENANCE)
        seconds = sum(p["seconds"] for p in prov)
        tokens = sum(p["tokens"] for p in prov)
        rows.append({"experiment": cell.experiment, "cell": cell.name, "batches": len(done),
                     "batches_total": len(cell.batches), "texts": sum(len(b.items) for b in done),
                     "texts_total": cell.n_texts, "complete": len(done) == len(cell.batches),
                     "seconds": round(seconds, 1), "tokens_per_second": round(tokens / seconds, 1) if seconds else None,
                     "commits": sorted({p.get("git_commit", "unknown")[:12] for p in prov})})
    return rows


__all__ = ["RunContext", "regenerate_command", "run", "status"]

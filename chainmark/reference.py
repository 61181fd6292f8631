"""The reference run: the paper's protocol at full size, generated once, committed, verifiable.

The chapters' live runs are small (they must build in minutes on a CPU); the
conclusions the book draws rest on this run instead. It has five experiments,
each a set of *cells* (one method on one list of prompts), each cell a list of
batches:

* ``head_to_head``: 4 domains x 100 prompts x {ChainMark, KGW, SWEET,
  unwatermarked}, n = 200 new tokens, every watermarked text attacked by
  random substitution at delta = 0.1, 0.2, 0.3 and by the LM paraphrase;
* ``null``: the same 400 prompts sampled again without a watermark under two
  more seeds, so that with the head-to-head's own 400 unwatermarked texts the
  null holds 1,200 model texts, each scored by every detector;
* ``calibration``: ChainMark at S = 2, 3, 5, 8 (rho = 0.5) on 25 prompts per
  domain (the paper's state-count calibration design);
* ``kregular``: k = 1, 2, 3 successors per state (S = 5) on 100 wiki prompts;
* ``explorer``: S in {2, 3, 5, 8, 10} x rho in {0.1, 0.25, 0.5, 0.75, 1.0} on 16
  prompts, n = 128, with an unwatermarked baseline (for the static site).

Storage. A batch is written once it is complete, as one gzip-compressed JSON
lines file ``<experiment>/<cell>/b<batch>.jsonl.gz`` (temporary file, fsync,
rename: a file on disk is always whole), and a line is appended to the cell's
``provenance.jsonl`` (package version, git commit, device, dtype, threads,
seconds, tokens). A rerun skips the batches on disk, so an interrupted run
resumes where it stopped, on this machine or after a ``git pull`` on another.
Batch ``j`` of a cell is sampled with ``seed + j`` as one ``generate`` call,
exactly as :func:`chainmark.records.run_grid` does, and its records come from
the same code (:func:`chainmark.records.run_batch`).

The key. The run's key is derived with HKDF from the published label
:data:`REFERENCE_LABEL`: it is *not* secret, by design, so that anyone can
re-derive every state, check every score, and regenerate any batch
(:func:`verify`). Never watermark real text with it.

Longer than 600 lines because the protocol, the runner, the storage format and
the verification of one committed run must change together (a change in one
that the others miss is what ``verify`` would report as a divergence); the
reading functions the chapters use (:func:`load_frame`, :func:`load_texts`,
:func:`load_reference`) are at the end.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import gzip
import hashlib
import json
import math
import os
import platform
import random
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from . import __version__
from .detect import detect
from .gates import Gate
from .jsonio import atomic_write, to_jsonable
from .keys import hkdf, key_fingerprint
from .partition import states_of
from .prompts import load_prompts, prompt_grid
from .settings import ATTACK_SEED, DEFAULT_MODEL, GENERATION_SEED, get_settings
from .store import default_runs_dir, lock_run_folder
from .reference_compare import VERIFY_TOLERANCE, compare_records, tolerance_rules
from .topology import cycle_topology

#: The published label the reference key is derived from (HKDF-SHA-256).
REFERENCE_LABEL = "chainmark-book/reference-run/v1"
#: ``CHAINMARK_REFERENCE`` names another root folder (one sub-folder per model).
REFERENCE_ENV = "CHAINMARK_REFERENCE"
EXPERIMENTS = ("head_to_head", "null", "calibration", "kregular", "explorer")
MANIFEST = "manifest.json"
PROVENANCE = "provenance.jsonl"
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

    def describe(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @property
    def rhos(self) -> tuple[float, ...]:
        """Every budget a gate is calibrated for (one pilot serves them all)."""
        return tuple(sorted({self.rho, *self.explorer_rho}))


PROTOCOL = Protocol()


# --------------------------------------------------------------------------- where it lives


def model_slug(model_name: str) -> str:
    return model_name.replace("/", "--")


def reference_dir(model_name: str | None = None) -> Path:
    """Folder of the reference run for ``model_name`` (default: the settings' model).

    ``$CHAINMARK_REFERENCE/<model>`` if set; the embedded default model's run
    ships inside the package (``chainmark/data/reference``); other models
    (Colab) go to ``runs/reference/<model>`` beside the book's runs.
    """
    model_name = model_name or get_settings().model
    env = os.environ.get(REFERENCE_ENV, "").strip()
    if env:
        return Path(env).expanduser() / model_slug(model_name)
    if model_name == DEFAULT_MODEL:
        return Path(__file__).resolve().parent / "data" / "reference" / model_slug(model_name)
    return default_runs_dir() / "reference" / model_slug(model_name)


def read_dir(model_name: str | None = None) -> Path:
    """The folder the reading functions use: the embedded model's committed reference by default.

    The chapters' reference sections always read the reference run of the
    embedded model, whatever ``CHAINMARK_MODEL`` the live run uses; a reader's
    own run (another model) is read only when its name is given.
    """
    return reference_dir(model_name or DEFAULT_MODEL)


# --------------------------------------------------------------------------- the cells


@dataclass
class Batch:
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
    batches: list[Batch]
    max_new_tokens: int
    attacks: tuple[str, ...] = ()
    detectors: tuple[str, ...] = ()   # for unwatermarked cells: the detectors that score them

    @property
    def n_texts(self) -> int:
        return sum(len(b.items) for b in self.batches)


def _batches(items_by_domain: Mapping[str, list[tuple[str, int, str]]], size: int, seed: int) -> list[Batch]:
    """Domain-pure batches of at most ``size`` prompts, taken round-robin over the domains.

    Domain-pure: prompts of one domain have similar lengths, so little padding.
    Round-robin: a run stopped half-way has covered every domain.
    """
    chunks = {d: [items[i:i + size] for i in range(0, len(items), size)] for d, items in items_by_domain.items()}
    out: list[Batch] = []
    for r in range(max((len(c) for c in chunks.values()), default=0)):
        for d in items_by_domain:
            if r < len(chunks[d]):
                out.append(Batch(len(out), seed + len(out), chunks[d][r]))
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
        one = [Batch(0, p.seed, items)]
        out.append(Cell("explorer", "none", {"method": "none"}, one, p.explorer_tokens))
        for S in p.explorer_S:
            for r in p.explorer_rho:
                out.append(Cell("explorer", f"chainmark_S{S}_rho{r:g}", {"method": "chainmark", "S": S, "rho": r},
                                one, p.explorer_tokens))
    return out


def topology_for(S: int, k: int = 1) -> Any:
    """The k-regular topology of the reference: :func:`chainmark.topology.cycle_topology` (clockwork for
    k = 1, soft cycle for 2, offsets 1..k), the function that also resolves a regime's topology names."""
    return cycle_topology(S, k)


class _Context:
    """The model, tokenizer, gates and method objects a run or a check needs (built once)."""

    def __init__(self, root: Path, protocol: Protocol, model: Any, tokenizer: Any):
        from .embed import logits_width

        self.root, self.protocol, self.model, self.tokenizer = root, protocol, model, tokenizer
        self.key = reference_key()
        self.vocab_size = logits_width(model)
        self.gates = self._gates()

    def _gates(self) -> dict[float, Any]:
        """Thresholds for every budget, from one unwatermarked pilot; stored in ``gates.json``."""
        from .embed import pilot_signal
        p, file = self.protocol, self.root / "gates.json"
        exact = {r: Gate.calibrate("high_entropy", r, []) for r in p.rhos if r in (0.0, 1.0)}  # tau = -inf/+inf
        if file.exists():
            stored = json.loads(file.read_text("utf-8"))
            return {**exact, **{float(r): Gate(stored["kind"], float(t)) for r, t in stored["tau"].items()}}
        pilot = [q for _, _, q in prompt_grid(p.pilot_per_domain, p.domains)]
        signal = pilot_signal(self.model, self.tokenizer, pilot, "high_entropy", max_new_tokens=p.pilot_tokens,
                              batch_size=len(pilot), seed=p.seed + p.pilot_seed_offset,
                              temperature=p.temperature)
        gates = {r: Gate.calibrate("high_entropy", r, signal) for r in p.rhos if r not in exact}
        atomic_write(file, json.dumps({"kind": "high_entropy", "pilot_prompts": len(pilot),
                                        "pilot_tokens": p.pilot_tokens,
                                        "tau": {f"{r:g}": g.tau for r, g in gates.items()}}, indent=1) + "\n")
        return {**exact, **gates}

    def method(self, cell: Cell) -> Any:
        from .baselines import KGWConfig, SweetConfig
        from .embed import ChainMarkConfig
        from .methods import ChainMarkMethod, KGWMethod, NoWatermark, SweetMethod

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
        return ChainMarkMethod(config, self.gates[rho], name)

    def detectors(self, cell: Cell) -> list[Any]:
        template = {"chainmark": {"method": "chainmark", "S": self.protocol.S, "rho": self.protocol.rho},
                    "kgw": {"method": "kgw"}, "sweet": {"method": "sweet"}}
        return [self.method(Cell(cell.experiment, d, template[d], [], 0)) for d in cell.detectors]

    def attacks(self, cell: Cell) -> dict[str, Any]:
        from .attacks import Paraphrase, Substitution

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

    def run_batch(self, cell: Cell, batch: Batch) -> list[dict[str, Any]]:
        """Generate, score and attack one batch, exactly as the runner of the book's grids does."""
        import torch

        from .records import run_batch

        method = self.method(cell)
        detectors = self.detectors(cell) if not method.watermarked else [method]
        gen_kwargs = dict(max_new_tokens=cell.max_new_tokens, temperature=self.protocol.temperature,
                          min_new_tokens=cell.max_new_tokens)
        with torch.no_grad():
            records = list(run_batch(method, detectors, batch.items, batch.seed - _seed_base(cell, batch),
                                      self.model, self.tokenizer, self.attacks(cell), self.vocab_size,
                                      self.protocol.alpha, _seed_base(cell, batch), True, gen_kwargs))
        for r in records:
            r["batch"] = batch.index
            r["seed"] = batch.seed
        return records


def _seed_base(cell: Cell, batch: Batch) -> int:
    """``records.run_batch`` samples with ``seed + j``: pass the base so that ``seed + j`` is the batch's seed."""
    return batch.seed - batch.index


# --------------------------------------------------------------------------- files


def shard_path(root: Path, cell: Cell, batch: Batch) -> Path:
    return root / cell.experiment / cell.name / f"b{batch.index:03d}.jsonl.gz"


def _encode(records: Sequence[Mapping[str, Any]]) -> bytes:
    lines = "".join(json.dumps(to_jsonable(dict(r)), ensure_ascii=False, allow_nan=False) + "\n" for r in records)
    return gzip.compress(lines.encode("utf-8"), compresslevel=9, mtime=0)


def read_shard(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _git_commit() -> str:
    """The commit of the package's checkout (``+dirty`` with uncommitted changes), or ``unknown``."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        # uncommitted changes to the package's code; the reference's own (growing) records do not count
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)data/reference"], capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _weights_sha256(model_name: str) -> str | None:
    """SHA-256 of the embedded GGUF file (the default model), else None."""
    if model_name != DEFAULT_MODEL:
        return None
    from .models import embedded_gguf_path

    h = hashlib.sha256()
    with open(embedded_gguf_path(), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _environment(model: Any) -> dict[str, Any]:
    import torch
    import transformers

    param = next(model.parameters())
    return {"chainmark_version": __version__, "git_commit": _git_commit(), "torch": torch.__version__,
            "transformers": transformers.__version__, "device": str(param.device),
            "device_name": (torch.cuda.get_device_name(param.device) if param.device.type == "cuda"
                            else _cpu_name()),
            "dtype": str(param.dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
            "python": platform.python_version()}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _parts(root: Path, protocol: Protocol) -> dict[str, Any]:
    """Per experiment: what produced it (commits, versions, device, threads) and at what speed."""
    parts: dict[str, Any] = {}
    for experiment in EXPERIMENTS:
        prov = [p for c in cells(protocol, (experiment,))
                for p in _read_provenance(root / experiment / c.name / PROVENANCE)]
        if not prov:
            continue
        seconds, tokens = sum(p["seconds"] for p in prov), sum(p["tokens"] for p in prov)
        parts[experiment] = {
            "batches": len(prov), "texts": sum(p["texts"] for p in prov), "tokens": tokens,
            "wall_seconds": round(seconds, 1), "tokens_per_second": round(tokens / seconds, 2) if seconds else None,
            **{k: sorted({str(p.get(k)) for p in prov}) for k in
               ("git_commit", "chainmark_version", "torch", "transformers", "device", "device_name", "dtype",
                "threads", "batch_size")},
            "first": min(p["finished"] for p in prov), "last": max(p["finished"] for p in prov)}
    return parts


def _manifest(root: Path, protocol: Protocol, model_name: str) -> dict[str, Any]:
    file = root / MANIFEST
    if file.exists():
        return json.loads(file.read_text("utf-8"))
    return {"format": "chainmark-reference/1", "model": model_name, "weights_sha256": _weights_sha256(model_name),
            "key_label": REFERENCE_LABEL, "key_fingerprint": key_fingerprint(reference_key()),
            "protocol": protocol.describe(), "seeds": {"generation": protocol.seed, "attack": protocol.attack_seed,
                                                      "batch": "generation seed + batch index"},
            "created": _now(), "parts": {}, "verify_tolerance": json.loads(json.dumps(VERIFY_TOLERANCE))}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _check_protocol(manifest: Mapping[str, Any], protocol: Protocol) -> list[str]:
    """Protocol fields that differ between the stored run and ``protocol``."""
    stored, now = manifest.get("protocol", {}), protocol.describe()
    return sorted(k for k in set(stored) | set(now) if stored.get(k) != now.get(k))


# --------------------------------------------------------------------------- run, status


def regenerate_command(experiments: Sequence[str] = EXPERIMENTS) -> str:
    return "chainmark reference run --fresh " + " ".join(experiments)


def run(model: Any = None, tokenizer: Any = None, experiments: Sequence[str] = EXPERIMENTS,
        root: str | os.PathLike | None = None, protocol: Protocol = PROTOCOL, fresh: Sequence[str] = (),
        progress: bool = True, stop_after: int | None = None, model_name: str | None = None) -> dict[str, int]:
    """Run (or resume) the reference; returns ``{"written": batches, "skipped": batches}``.

    ``fresh`` names experiments whose batches on disk are deleted first (after a
    change to what generation produces). ``stop_after`` stops after that many
    new batches (to show resuming). Batches are written whole, so an
    interruption loses at most the batch in flight.
    """
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
        return _run_locked(root, model, tokenizer, experiments, protocol, progress, stop_after, model_name)


def pending(root: Path, protocol: Protocol = PROTOCOL,
            experiments: Sequence[str] = EXPERIMENTS) -> list[tuple[Cell, Batch]]:
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
                progress: bool, stop_after: int | None, model_name: str) -> dict[str, int]:
    from tqdm.auto import tqdm

    manifest = _manifest(root, protocol, model_name)
    diff = _check_protocol(manifest, protocol)
    if diff:
        raise ValueError(f"{root} holds a reference made with another protocol ({', '.join(diff)} differ); "
                         f"regenerate it with `{regenerate_command()}`")
    weights = _weights_sha256(model_name)
    if manifest.get("weights_sha256") != weights:
        raise ValueError(f"{root} holds a reference made with other model weights (SHA-256 "
                         f"{str(manifest.get('weights_sha256'))[:12]}, this file {str(weights)[:12]}); "
                         f"use another --dir or regenerate it with `{regenerate_command()}`")
    if model is None:
        from .models import load_model

        model, tokenizer = load_model()
    atomic_write(root / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    ctx = _Context(root, protocol, model, tokenizer)
    todo = pending(root, protocol, experiments)
    total_batches = sum(len(c.batches) for c in cells(protocol, experiments))
    env = _environment(model)
    written = 0
    bar = tqdm(total=sum(len(b.items) for _, b in todo), unit="text", desc="reference", disable=not progress)
    for cell, batch in todo:
        if stop_after is not None and written >= stop_after:
            break
        bar.set_postfix_str(f"{cell.experiment}/{cell.name} b{batch.index:03d}")
        t0 = time.perf_counter()
        records = ctx.run_batch(cell, batch)
        seconds = time.perf_counter() - t0
        atomic_write(shard_path(root, cell, batch), _encode(records))
        tokens = sum(r["n_tokens"] for r in records)
        line = {"batch": batch.index, "texts": len(records), "tokens": tokens, "seconds": round(seconds, 2),
                "tokens_per_second": round(tokens / seconds, 2) if seconds > 0 else None,
                "batch_size": len(batch.items), "finished": _now(), **env}
        with open(root / cell.experiment / cell.name / PROVENANCE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        manifest["parts"] = _parts(root, protocol)
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
        prov = _read_provenance(root / cell.experiment / cell.name / PROVENANCE)
        seconds = sum(p["seconds"] for p in prov)
        tokens = sum(p["tokens"] for p in prov)
        rows.append({"experiment": cell.experiment, "cell": cell.name, "batches": len(done),
                     "batches_total": len(cell.batches), "texts": sum(len(b.items) for b in done),
                     "texts_total": cell.n_texts, "complete": len(done) == len(cell.batches),
                     "seconds": round(seconds, 1), "tokens_per_second": round(tokens / seconds, 1) if seconds else None,
                     "commits": sorted({p.get("git_commit", "unknown")[:12] for p in prov})})
    return rows


def _read_provenance(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text("utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by an interruption
            continue
    return out


# --------------------------------------------------------------------------- verify


@dataclass
class Check:
    """The outcome of regenerating one stored batch."""

    shard: str
    texts: int
    matched: bool
    differences: list[str] = field(default_factory=list)


def _cell_tau(ctx: "_Context", cell: Cell) -> float | None:
    """The gate threshold a cell's texts were generated with (None for methods without a gate)."""
    spec = cell.spec
    rho = spec.get("rho", ctx.protocol.rho if spec.get("method") == "sweet" else None)
    gate = ctx.gates.get(float(rho)) if rho is not None else None
    return None if gate is None else float(gate.tau)


def choose_shards(root: Path, samples: int, seed: str, protocol: Protocol = PROTOCOL) -> list[tuple[Cell, Batch]]:
    """``samples`` stored batches drawn at random, the draw seeded by ``seed`` (the current commit)."""
    stored = [(c, b) for c in cells(protocol) for b in c.batches if shard_path(root, c, b).exists()]
    rng = random.Random(hashlib.sha256(seed.encode("utf-8")).hexdigest())
    return rng.sample(stored, min(samples, len(stored)))


def verify(samples: int = 3, model: Any = None, tokenizer: Any = None, root: str | os.PathLike | None = None,
           protocol: Protocol = PROTOCOL, seed: str | None = None,
           log: Callable[[str], None] = print) -> list[Check]:
    """Regenerate ``samples`` stored batches with the current code and compare them with the stored ones.

    Token ids, gate decisions, counts and verdicts must be identical, and so
    must every float that is a function of them and the key (phi, z,
    p-values); the floats PyTorch computes from the model's logits (gate
    signals, self-perplexity) agree within their relative tolerance, because
    another CPU rounds differently: :data:`~chainmark.reference_compare.VERIFY_FIELDS` states the rule of
    each field, the manifest's ``verify_tolerance`` the numbers
    (:func:`tolerance_rules`; a float field without a rule is exact). A text
    whose tokens diverge is reported with the first differing position and
    the gate's margin there.

    The draw is seeded by the current git commit (``seed`` overrides it), so
    every commit checks different batches. The whole batch a record was
    generated in is regenerated (batch composition changes low-order bits),
    with the thread count the run used. Returns one :class:`Check` per batch.
    """
    import torch

    root = Path(root) if root is not None else reference_dir()
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    if not (root / MANIFEST).exists():
        raise FileNotFoundError(f"no reference run in {root}: run `chainmark reference run` first")
    manifest = json.loads((root / MANIFEST).read_text("utf-8"))
    diff = _check_protocol(manifest, protocol)
    if diff:
        return [Check("protocol", 0, False, [f"protocol field {k}: stored {manifest['protocol'].get(k)!r}, "
                                             f"code {protocol.describe().get(k)!r}" for k in diff])]
    recorded = manifest.get("verify_tolerance")
    rules = tolerance_rules(recorded)
    kernel = ", ".join(f"{n} (rel {r['rel']:g}, abs {r['abs']:g})" for n, r in rules.items() if r["rule"] == "rel")
    old_format = isinstance(recorded, Mapping) and "format" not in recorded
    log(f"verify: floats from the model's logits within their tolerance, {kernel}; every other float exactly"
        + (" (the manifest's single tolerance, format 1, is read as the one of these floats)" if old_format else ""))
    seed = seed if seed is not None else _git_commit().replace("+dirty", "")
    chosen = choose_shards(root, samples, seed, protocol)
    if not chosen:
        raise FileNotFoundError(f"{root} holds no stored batch to verify")
    if model is None:
        from .models import load_model

        model, tokenizer = load_model()
    threads = torch.get_num_threads()
    ctx = _Context(root, protocol, model, tokenizer)
    checks = []
    for cell, batch in chosen:
        path = shard_path(root, cell, batch)
        stored = read_shard(path)
        prov = [p for p in _read_provenance(path.parent / PROVENANCE) if p["batch"] == batch.index]
        if prov and prov[-1].get("threads"):
            torch.set_num_threads(int(prov[-1]["threads"]))
        t0 = time.perf_counter()
        try:
            fresh = _roundtrip(ctx.run_batch(cell, batch))
        finally:
            torch.set_num_threads(threads)
        differences = compare_records(stored, fresh, _cell_tau(ctx, cell), rules)
        name = str(path.relative_to(root))
        checks.append(Check(name, len(stored), not differences, differences[:10]))
        log(f"verify {name}: {len(stored)} records, {'identical' if not differences else 'DIFFERENT'} "
            f"({time.perf_counter() - t0:.0f} s)")
    return checks


def _roundtrip(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records as they read back from a shard (JSON-clean: NaN to None, tuples to lists)."""
    return [json.loads(line) for line in gzip.decompress(_encode(records)).decode("utf-8").splitlines()]


# --------------------------------------------------------------------------- reading


def _iter_records(root: Path, experiment: str, protocol: Protocol) -> Iterator[tuple[Cell, dict[str, Any]]]:
    for cell in cells(protocol, (experiment,)):
        for batch in cell.batches:
            path = shard_path(root, cell, batch)
            if path.exists():
                for r in read_shard(path):
                    yield cell, r


def _rows(cell: Cell, r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Tidy rows of one record: one per detector on the clean text, one per attack."""
    spec = cell.spec
    base = {"id": r["id"], "experiment": cell.experiment, "cell": cell.name, "method": spec["method"],
            "domain": r["domain"], "prompt_index": r["prompt_index"], "seed": r.get("seed"),
            "S": spec.get("S"), "k": spec.get("k", 1 if spec["method"] == "chainmark" else None),
            "rho": spec.get("rho"), "rho_realised": r["rho_realised"], "self_ppl": r["self_ppl"],
            "watermarked": r["watermarked"]}
    for det, res in r["detection"].items():
        yield {**base, "detector": det, "attack": "clean", "n_tokens": r["n_tokens"], "edit_fraction": 0.0,
               "rewrite_failed": False, **{k: res.get(k) for k in ("phi", "z", "p_value", "decision", "n_scored")}}
    for label, res in r.get("attacks", {}).items():
        failed = "text" in res and res.get("n_tokens", 0) < MIN_REWRITE_TOKENS
        yield {**base, "detector": r["method"], "attack": label, "n_tokens": res.get("n_tokens"),
               "edit_fraction": res.get("edit_fraction"), "rewrite_failed": failed,
               **{k: res.get(k) for k in ("phi", "z", "p_value", "decision", "n_scored")}}


def _null_rows(root: Path, protocol: Protocol, scorers: Mapping[str, tuple[Any, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every stored unwatermarked text scored by extra model-free ChainMark detectors (S or k)."""
    key, rows = reference_key(), []
    for experiment in ("head_to_head", "null"):
        for cell, r in _iter_records(root, experiment, protocol):
            if cell.spec["method"] != "none":
                continue
            for name, (topo, extra) in scorers.items():
                d = detect(r["token_ids"], key, topo.S, topo, protocol.alpha)
                rows.append({"id": r["id"], "experiment": experiment, "cell": cell.name, "method": "none",
                             "detector": name, "domain": r["domain"], "prompt_index": r["prompt_index"],
                             "seed": r.get("seed"), "attack": "clean", "n_tokens": r["n_tokens"],
                             "edit_fraction": 0.0, "rewrite_failed": False, "watermarked": False,
                             "rho_realised": 0.0, "self_ppl": r["self_ppl"], **d.to_dict("record"), **extra})
    return rows


def load_frame(name: str, root: str | os.PathLike | None = None, protocol: Protocol = PROTOCOL) -> Any:
    """The reference experiment ``name`` as a pandas DataFrame, one row per scored text.

    Columns include ``method``, ``detector``, ``domain``, ``attack`` (``clean``
    or an attack label), ``n_tokens``, ``phi``, ``z``, ``p_value``,
    ``decision``, ``self_ppl``, ``rho_realised`` and, where they vary, ``S``,
    ``k`` and ``rho``. Unwatermarked texts carry one row per detector.
    ``null`` holds every unwatermarked text (the head-to-head's and the extra
    seeds'); ``calibration`` and ``kregular`` add those null texts scored by
    a ChainMark detector at each S (or k), so that an FPR sits beside each
    TPR. Rewrites shorter than :data:`MIN_REWRITE_TOKENS` tokens have
    ``rewrite_failed = True``: leave them out of rates and count them.
    """
    import pandas as pd

    if name not in EXPERIMENTS:
        raise ValueError(f"unknown reference experiment {name!r}; choose from {EXPERIMENTS}")
    root = Path(root) if root is not None else read_dir()
    if name == "null":
        rows = [row for e in ("head_to_head", "null") for cell, r in _iter_records(root, e, protocol)
                if cell.spec["method"] == "none" for row in _rows(cell, r)]
    else:
        rows = [row for cell, r in _iter_records(root, name, protocol) for row in _rows(cell, r)]
    if name == "calibration":
        rows += _null_rows(root, protocol, {f"chainmark_S{S}": (topology_for(S), {"S": S, "k": 1, "rho": protocol.rho})
                                            for S in protocol.calibration_S})
    elif name == "kregular":
        rows += _null_rows(root, protocol, {f"chainmark_k{k}": (topology_for(protocol.S, k),
                                                                {"S": protocol.S, "k": k, "rho": protocol.rho})
                                            for k in protocol.kregular_k})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=["id", "experiment", "cell", "method", "detector", "domain", "attack",
                                     "n_tokens", "phi", "z", "p_value", "decision"])
    frame["z"] = frame["z"].astype(float)
    return frame


def explorer_grid(tokenizer: Any = None, root: str | os.PathLike | None = None, protocol: Protocol = PROTOCOL,
                  example: tuple[str, int] = ("writing", 0), alpha: float | None = None) -> dict[str, Any]:
    """The reference explorer grid in the shape of :func:`chainmark.experiments.embedding_grid`.

    Every (S, rho) cell summarises its texts (mean z, phi, self-perplexity,
    realised rho, the share detected at ``alpha``, default the protocol's) and
    keeps the text of one prompt, ``example`` = (domain, prompt index), token
    by token (strings need ``tokenizer``; without it the tiles show ids); each
    cell's ``texts`` keep every text's ids, forced flags and scores. The
    unwatermarked cell gives the baseline perplexity and ``baseline_texts``. Raises ``ValueError``
    while a cell of the grid is missing (see ``chainmark reference status``).
    """
    from .experiments import _token_strings
    root = Path(root) if root is not None else read_dir()
    alpha = protocol.alpha if alpha is None else float(alpha)
    by_cell: dict[str, tuple[Cell, list[dict[str, Any]]]] = {}
    for cell, r in _iter_records(root, "explorer", protocol):
        by_cell.setdefault(cell.name, (cell, []))[1].append(r)
    wanted = cells(protocol, ("explorer",))
    missing = [c.name for c in wanted if len(by_cell.get(c.name, (c, []))[1]) < c.n_texts]
    if missing:
        raise ValueError(f"the reference explorer grid is incomplete ({len(missing)} of {len(wanted)} cells "
                         f"missing or partial, e.g. {missing[0]}); run `chainmark reference run --experiments "
                         f"explorer` or check `chainmark reference status`")
    key, out_cells = reference_key(), []
    baseline = by_cell["none"][1]
    for cell in wanted[1:]:
        S, rho = int(cell.spec["S"]), float(cell.spec["rho"])
        recs = sorted(by_cell[cell.name][1], key=lambda r: (protocol.domains.index(r["domain"]), r["prompt_index"]))
        dets = [r["detection"][cell.name] for r in recs]
        ex = next((r for r in recs if (r["domain"], r["prompt_index"]) == tuple(example)), None)
        if ex is None:
            raise ValueError(f"no explorer prompt {example!r}; choose a (domain, index) with domain in "
                             f"{protocol.domains} and index below {protocol.explorer_per_domain}")
        d0 = ex["detection"][cell.name]
        ids = [int(t) for t in ex["token_ids"]]
        out_cells.append({
            "S": S, "rho": rho, "n_prompts": len(recs),
            "mean_z": float(np.mean([d["z"] for d in dets])),
            "sd_z": float(np.std([d["z"] for d in dets], ddof=1)),
            "mean_phi": float(np.mean([d["phi"] for d in dets])),
            "mean_ppl": float(np.mean([r["self_ppl"] for r in recs])),
            "mean_rho_realised": float(np.mean([r["rho_realised"] for r in recs])),
            "detected": int(sum(d["p_value"] < alpha for d in dets)),
            "tpr": float(np.mean([d["p_value"] < alpha for d in dets])),
            "texts": [{"token_ids": r["token_ids"], "forced": [int(f) for f in r["gated"]], "z": d["z"],
                       "phi": d["phi"], "p_value": d["p_value"], "self_ppl": r["self_ppl"], "domain": r["domain"],
                       "prompt_index": r["prompt_index"]} for r, d in zip(recs, dets)],
            "example": {
                "prompt": ex["prompt"], "domain": ex["domain"], "token_ids": ids,
                "tokens": _token_strings(tokenizer, ids) if tokenizer is not None else [str(t) for t in ids],
                "states": states_of(ids, key, S).tolist(), "forced": [int(f) for f in ex["gated"]],
                "n_tokens": ex["n_tokens"], "phi": d0["phi"], "z": d0["z"], "p_value": d0["p_value"],
                "rho_realised": ex["rho_realised"], "self_ppl": ex["self_ppl"],
            },
        })
    stored = {float(r): float(t) for r, t in json.loads((root / "gates.json").read_text("utf-8"))["tau"].items()}
    taus = {str(float(r)): stored[float(r)] if float(r) in stored else Gate.calibrate("high_entropy", r, []).tau
            for r in protocol.explorer_rho}
    manifest = json.loads((root / MANIFEST).read_text("utf-8")) if (root / MANIFEST).exists() else {}
    model = manifest.get("model", root.name)
    return {
        "S_values": list(protocol.explorer_S), "rho_values": [float(r) for r in protocol.explorer_rho],
        "gate": "high_entropy", "alpha": alpha, "taus": taus, "max_new_tokens": protocol.explorer_tokens,
        "prompts": [r["prompt"] for r in sorted(baseline, key=lambda r: (protocol.domains.index(r["domain"]),
                                                                         r["prompt_index"]))],
        "baseline_ppl": float(np.mean([r["self_ppl"] for r in baseline])),
        "baseline_texts": [{"token_ids": r["token_ids"], "self_ppl": r["self_ppl"], "domain": r["domain"],
                            "prompt_index": r["prompt_index"]} for r in baseline],
        "model": model, "cells": out_cells,
        "caption": (f"From the committed reference run ({model}): {len(baseline)} prompts, "
                    f"{protocol.explorer_per_domain} per domain, x {protocol.explorer_tokens} new tokens per cell, "
                    f"gate 'high_entropy', seed {protocol.seed}, the published reference key."),
    }


def load_texts(name: str, root: str | os.PathLike | None = None, protocol: Protocol = PROTOCOL) -> list[dict[str, Any]]:
    """The stored records of experiment ``name`` (prompts, texts, token ids, traces), with their cell."""
    root = Path(root) if root is not None else read_dir()
    return [{"cell": cell.name, **r} for cell, r in _iter_records(root, name, protocol)]


__all__ = ["EXPERIMENTS", "MIN_REWRITE_TOKENS", "PROTOCOL", "Protocol", "REFERENCE_LABEL", "cells", "explorer_grid",
           "load_frame", "load_texts", "pending", "read_dir", "reference_dir", "reference_key", "regenerate_command", "run", "status", "verify"]


def load_reference(name: str, model_name: str | None = None) -> Any:
    """The committed reference run's experiment ``name`` as a DataFrame (one row per scored text).

    ``name`` is one of ``"head_to_head"``, ``"null"``, ``"calibration"``,
    ``"kregular"``, ``"explorer"``; see :func:`chainmark.reference.load_frame`
    for the columns. By default it is the embedded model's run, which ships
    with the package, whatever model ``CHAINMARK_MODEL`` names; ``model_name``
    asks for another model's run (one made with ``chainmark reference run``).
    """
    return load_frame(name, read_dir(model_name))


# --------------------------------------------------------------------------- resumable plain generation


def scores_by_test(tests: Sequence[str] | None = None, root: str | os.PathLike | None = None,
                   protocol: Protocol = PROTOCOL, tokenizer: Any = None) -> list[dict[str, Any]]:
    """Every ChainMark text of the head-to-head, clean and under each stored attack, scored by each test.

    The attacked ids are rebuilt from the record: a substitution with the
    attack seed and the record's stream (:func:`chainmark.attacks.record_seed`),
    checked against the stored z-test score; the paraphrase from its stored
    text, through ``tokenizer`` (default: the embedded model's, whatever
    ``CHAINMARK_MODEL`` names). One row per
    (text, condition, test): ``flagged`` at the protocol's alpha, z, p, the
    transitions scored.
    """
    from .attacks import Substitution
    from .detect import TESTS
    from .tokenizer import load_tokenizer

    tests = tuple(TESTS if tests is None else tests)
    tok = tokenizer if tokenizer is not None else load_tokenizer(DEFAULT_MODEL)  # the run's own tokenizer
    key, topo, p = reference_key(), topology_for(protocol.S), protocol
    vocab = len(tok)
    rows: list[dict[str, Any]] = []
    for r in load_texts("head_to_head", root, protocol):
        if r["method"] != "chainmark":
            continue
        conditions = {"clean": list(r["token_ids"])}
        for label, stored in r.get("attacks", {}).items():
            if label.startswith("sub"):
                ids = Substitution(float(label[3:]), vocab, seed=p.attack_seed).apply_ids(
                    [r["token_ids"]], names=[r["id"]])[0]
                again = detect(ids, key, p.S, topo, p.alpha, vocab_size=vocab)
                if not math.isclose(again.z, stored["z"], rel_tol=1e-9, abs_tol=1e-9):
                    raise ValueError(f"{r['id']} {label}: the rebuilt attack scores z = {again.z}, the record "
                                     f"{stored['z']}: the attack's seeding has changed")
                conditions[label] = ids
            elif "text" in stored:
                conditions[label] = tok(stored["text"], add_special_tokens=False)["input_ids"]
        for condition, ids in conditions.items():
            for test in tests:
                res = detect(ids, key, p.S, topo, p.alpha, vocab_size=vocab, test=test)
                rows.append({"id": r["id"], "domain": r["domain"], "condition": condition, "test": test,
                             "flagged": bool(res.is_watermarked), "z": res.z, "p_value": res.p_value,
                             "n_tokens": res.n_tokens, "n_scored": res.n_scored})
    return rows


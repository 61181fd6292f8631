"""The experiment runner: a grid of generations written as resumable JSON lines.

A grid is *method x domain x prompt x attack*. For every (method, domain,
prompt) the runner generates once, then scores the clean text and every
attacked version of it with the method's own detector, and appends one JSON
line with the paper's fields: prompt, output, the per-position gate signal
(next-token entropy) and the flags where the watermark acted (the
generation's ``forced``), the realised budget rho, self-PPL, phi
and z, and for each attack phi, z, p-value and decision. The unwatermarked
method (``NoWatermark``) is the null: its texts are scored by *every*
watermark detector of the run, which is what an empirically calibrated
threshold needs.

One batch step. :func:`run_batch` is the one place a batch is generated,
scored and attacked: :func:`run_grid` (the chapters' grids), the reference
run (:mod:`cmlab.harness.reference`, which writes each batch as a shard)
and the explorers' grid (:func:`cmlab.harness.grids.embedding_grid`)
all drive it, so their records agree field for field.

Resuming. Each record has an id ``method/domain/index``. A rerun reads the
ids already on disk and skips them; records are appended one line at a time
with ``flush`` + ``fsync``, so an interruption (a Colab session dropping)
never loses or duplicates a written record. Generation is batched: with
``batch_size = 1`` an interruption loses at most the generation in flight,
with larger batches at most the batch in flight (its finished records are
written one by one as soon as the batch is scored). A half-written last line
is cut off before appending. Batches have a fixed composition and seed
(``seed + batch index``), so a resumed run produces what an uninterrupted one
would have. One process writes a run folder at a time: :func:`run_grid` and
:func:`generate_resumable` hold the folder's lock (:func:`lock_run_folder`)
and a second writer stops at once with :class:`RunFolderBusy` instead of
duplicating every record.

Attack seeds. A token-level attack edits each text with its own random
stream, derived from the attack's seed (43 in the book) and a SHA-256 hash
of the record id (:meth:`cmlab.comparison.attacks.Attack.apply_ids`). The edits of a
text therefore depend only on the attack seed and the record it belongs to,
not on its position in a batch: texts k of different batches or methods no
longer share edit positions, and a rerun, a resumed run or a run with
another ``batch_size`` edits each text exactly as before. ``run.json``
stores the scheme (``attack_seeding``), so records made under another one
are never mixed in.

Plain generation runs (the chapters' hundreds of texts without a grid) use
:func:`generate_resumable`: the same durable lines, one per generation,
written batch by batch and read back on a rerun.

Secrets. Records and ``run.json`` hold each method's key *fingerprint*,
never the key; the writer refuses any line that contains a key (or the KGW
hashing key derived from it) in any common encoding.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from cmlab.harness.adapters import Method
from chainmark import __version__
from cmlab.comparison.attacks import RECORD_SEEDING, edit_fraction
from chainmark.checks import check_alpha, check_options
from chainmark.embed import Generation, Sampling, generate, logits_width
from cmlab.comparison.quality import score_tokens
from chainmark.jsonio import to_jsonable
from chainmark.verdict import decide
from cmlab.harness.options import BatchContext, GridOptions, sampling_named
from cmlab.harness.runs import (META_FILE, RECORDS_FILE, RecordWriter, RunControl, lock_run_folder, read_records,
                               records_frame, write_meta)
from cmlab.harness.settings import default_runs_dir, get_settings, progress_bars_off


# --------------------------------------------------------------------------- resuming (both runners)


@dataclass(frozen=True)
class _Batch:
    """One unit of work of a resumable run: the keys of the records it makes and how to make them.

    ``produce`` runs only when the batch is due; it yields ``(key, record)``
    pairs in order.
    """

    keys: tuple[Any, ...]
    produce: Callable[[], Iterable[tuple[Any, dict[str, Any]]]]
    label: str = ""


@contextlib.contextmanager
def _open_run(path: Path, meta: dict[str, Any], secrets: Sequence[Any], key_of: Callable[[dict[str, Any]], Any],
              *, ignore: Sequence[str] = (), update_meta: bool = True) -> Iterator[dict[Any, dict[str, Any]]]:
    """Lock ``path``, check ``meta`` against the run already there, and yield its finished records by key.

    The lock is held until the block ends, so only one process appends to a
    run folder; ``key_of`` names each stored record (and may refuse one that
    does not belong to this run).
    """
    path.mkdir(parents=True, exist_ok=True)
    with lock_run_folder(path):
        merged = _merge_meta(path, meta, ignore)
        if update_meta:
            write_meta(path, merged, secrets)
        yield {key_of(rec): rec for rec in read_records(path / RECORDS_FILE)}


def _append_batches(path: Path, batches: Sequence[_Batch], done: dict[Any, dict[str, Any]], secrets: Sequence[Any],
                    *, max_records: int | None = None, max_batches: int | None = None,
                    progress: bool = True) -> tuple[int, bool]:
    """Run the batches that still miss a record and append each new record durably; return (written, stopped).

    Records whose key is already in ``done`` are skipped, also when a batch
    cut short by an interruption makes them again, so a resumed run neither
    loses nor duplicates a record. ``done`` gains every record written.
    ``max_records`` / ``max_batches`` stop the run early (to demonstrate
    resuming); ``stopped`` says whether that left work undone.
    """
    from tqdm.auto import tqdm

    todo = [b for b in batches if any(k not in done for k in b.keys)]
    total = sum(k not in done for b in todo for k in b.keys)
    # no bar when nothing is left to run (a resumed run): an empty "0/0" bar says nothing
    bar = tqdm(total=total, desc=path.name, unit="gen", disable=not progress or total == 0 or progress_bars_off())
    written, stopped = 0, False
    with RecordWriter(path / RECORDS_FILE, secrets) as writer:
        for count, batch in enumerate(todo):
            if (max_batches is not None and count >= max_batches) or (
                    max_records is not None and written >= max_records):
                stopped = True
                break
            bar.set_postfix_str(batch.label)
            for key, record in batch.produce():
                if key in done:
                    continue
                if max_records is not None and written >= max_records:
                    stopped = True
                    break
                done[key] = writer.write(record)
                written += 1
                bar.update(1)
            if stopped:
                break
    bar.close()
    return written, stopped


# --------------------------------------------------------------------------- the runner


def _record_id(method: str, domain: str, index: int) -> str:
    return f"{method}/{domain}/{int(index):04d}"


@dataclass
class GridRun:
    """What :func:`run_grid` did: where, how many records were written and skipped."""

    path: Path
    written: int
    skipped: int
    total: int
    seconds: float
    interrupted: bool = False
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def records_path(self) -> Path:
        return self.path / RECORDS_FILE

    def frame(self) -> Any:
        """The run's records as one table (a pandas DataFrame), one row per text, detector and condition
        (:func:`~cmlab.harness.runs.records_frame`).

        >>> run.frame().groupby(["method", "condition"]).z.mean()  # doctest: +SKIP
        """
        return records_frame(self.records)


def _check_items(items: Sequence[Any]) -> list[tuple[str, int, str]]:
    out = []
    seen = set()
    for item in items:
        try:
            domain, index, prompt = item
        except (TypeError, ValueError):
            raise TypeError("items must be (domain, index, prompt) triples, e.g. from "
                            "cmlab.harness.prompts.prompt_grid(n)") from None
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"prompt of item ({domain!r}, {index!r}) must be a non-empty string")
        if (domain, int(index)) in seen:
            raise ValueError(f"item ({domain!r}, {index}) appears twice")
        seen.add((domain, int(index)))
        out.append((str(domain), int(index), prompt))
    if not out:
        raise ValueError("items is empty: nothing to run")
    return out


def _check_methods(methods: Sequence[Method]) -> list[Method]:
    methods = list(methods)
    if not methods:
        raise ValueError("methods is empty")
    names = [m.name for m in methods]
    for m in methods:
        if not isinstance(m, Method):
            raise TypeError(f"methods must be cmlab.harness.runner.Method objects, got {type(m).__name__}")
    if len(set(names)) != len(names):
        raise ValueError(f"method names must be unique, got {names}")
    for n in names:
        if "/" in n or not n:
            raise ValueError(f"method name {n!r} must be non-empty and contain no '/'")
    return methods


def _meta(methods, attacks, model_name, settings: dict[str, Any]) -> dict[str, Any]:
    meta = {"chainmark_version": __version__, "model": model_name,
            "methods": {m.name: m.describe() for m in methods},
            "attacks": {label: a.describe() for label, a in attacks.items()}, **settings}
    if any(getattr(a, "level", "tokens") == "tokens" for a in attacks.values()):
        meta["attack_seeding"] = RECORD_SEEDING  # how each text's edit stream is derived
    return meta


def _merge_meta(path: Path, new: dict[str, Any], ignore: Sequence[str] = ()) -> dict[str, Any]:
    """Check a resumed run was made with the same settings (but ``ignore``); new methods may join."""
    file = path / META_FILE
    if not file.exists():
        return new
    old = json.loads(file.read_text("utf-8"))
    for k, v in new.items():
        if k == "methods" or k in ignore:
            continue
        if old.get(k) != to_jsonable(v):
            why = (" (it was made before token-level attacks were seeded per record id)"
                   if k == "attack_seeding" and k not in old else "")
            raise ValueError(
                f"{path} holds a run made with other settings ({k} = {old.get(k)!r}, not {to_jsonable(v)!r}){why}; "
                "records of different settings must not be mixed: choose another run folder or delete this one")
    for name, desc in new.get("methods", {}).items():
        if name in old.get("methods", {}) and old["methods"][name] != desc:
            raise ValueError(
                f"{path} holds method {name!r} with settings {old['methods'][name]} (now {desc}); "
                "choose another run folder, another method name, or delete this one")
    merged = {**old, **new}  # an ignored setting takes its new value
    if "methods" in new:
        merged["methods"] = {**old.get("methods", {}), **new["methods"]}
    return merged


def _self_ppl(model: Any, outputs: Sequence[Generation], batch_size: int) -> list[float]:
    todo = [i for i, o in enumerate(outputs) if o.token_ids and o.prompt_ids]
    ppl = [math.nan] * len(outputs)
    if todo:
        scores = score_tokens(model, [outputs[i].prompt_ids for i in todo],
                              [outputs[i].token_ids for i in todo], batch_size=batch_size)
        for i, s in zip(todo, scores):
            ppl[i] = s.perplexity
    return ppl


def _attack_batch(attack: Any, outputs: Sequence[Generation], tokenizer: Any,
                  record_ids: Sequence[str]) -> tuple[list[list[int]], list[str] | None]:
    """Attacked token ids (and texts, for text-level attacks) of a batch of outputs.

    A token-level attack (:class:`cmlab.comparison.attacks.Attack`) edits output k
    with the stream derived from its seed and ``record_ids[k]``
    (``apply_ids(..., names=record_ids)``, see
    :meth:`cmlab.comparison.attacks.Attack.apply_ids`). A text-level attack rewrites the
    outputs' texts as one batch with its own seed (``apply_text``).
    """
    if getattr(attack, "level", "tokens") == "text":
        texts = attack.apply_text([o.text for o in outputs])
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        return ids, list(texts)
    edited = attack.apply_ids([o.token_ids for o in outputs], names=list(record_ids))
    return [list(map(int, x)) for x in edited], None


def run_grid(
    model: Any,
    tokenizer: Any,
    methods: Sequence[Method],
    items: Sequence[tuple[str, int, str]],
    path: str | os.PathLike | None = None,
    attacks: Mapping[str, Any] | None = None,
    *,
    sampling: Sampling | None = None,
    options: GridOptions | None = None,
) -> GridRun:
    """Run (or resume) a grid and return what was done; records go to ``path/records.jsonl``.

    ``methods`` are :class:`Method` objects with distinct names (the null is
    a :class:`NoWatermark`); ``items`` are ``(domain, index, prompt)`` triples
    (:func:`cmlab.harness.prompts.prompt_grid`); ``attacks`` maps a label to an
    attack object of :mod:`cmlab.comparison.attacks` (token- or text-level), applied
    to every watermarked text. How it samples is one :class:`chainmark.Sampling` (``sampling``), how it
    scores and proceeds one :class:`~cmlab.harness.options.GridOptions` (``options``:
    ``GridOptions(alpha=0.01, progress=False)``). ``path`` defaults to
    ``default_runs_dir() / options.run_name``. ``options.stop_after`` stops after writing that
    many new records (to demonstrate resuming). ``model`` may be ``None``
    only for methods that need no model (tests), with ``self_ppl=False``.
    """
    opts = check_options(GridOptions, options, "options")
    how = check_options(Sampling, sampling, "sampling")
    methods = _check_methods(methods)
    items = _check_items(items)
    attacks = dict(attacks or {})
    alpha = check_alpha(opts.alpha)
    path = Path(path) if path is not None else default_runs_dir() / opts.run_name
    model_name = opts.model_name if opts.model_name is not None else get_settings().model
    secrets = [s for m in methods for s in m.secrets()]
    settings = {"max_new_tokens": how.max_new_tokens, "batch_size": how.batch_size, "seed": how.seed,
                "temperature": how.temperature, "min_new_tokens": how.min_new_tokens, "alpha": alpha}
    meta = _meta(methods, attacks, model_name, settings)
    with _open_run(path, meta, secrets, lambda rec: rec.get("id")) as done:
        start = time.perf_counter()
        total = len(items) * len(methods)
        skipped = sum(1 for m in methods for d, i, _ in items if _record_id(m.name, d, i) in done)
        vocab_size = logits_width(model) if model is not None else len(tokenizer)
        detectors = [m for m in methods if m.watermarked]
        context = BatchContext(model, tokenizer, vocab_size, how, attacks, alpha, opts.self_ppl)
        chunks = [items[i:i + how.batch_size] for i in range(0, len(items), how.batch_size)]

        def grid_batch(j: int, chunk: list[tuple[str, int, str]], method: Method) -> _Batch:
            def produce() -> Iterator[tuple[str, dict[str, Any]]]:
                for record in run_batch(context, method, detectors, chunk, j):
                    yield record["id"], record

            return _Batch(tuple(_record_id(method.name, d, i) for d, i, _ in chunk), produce,
                          f"{method.name} batch {j + 1}/{len(chunks)}")

        batches = [grid_batch(j, chunk, m) for j, chunk in enumerate(chunks) for m in methods]
        written, interrupted = _append_batches(path, batches, done, secrets, max_records=opts.stop_after,
                                               progress=opts.progress)
        return GridRun(path, written, skipped, total, time.perf_counter() - start, interrupted,
                       read_records(path / RECORDS_FILE))


def run_batch(context: BatchContext, method: Method, detectors: Sequence[Method],
              batch: Sequence[tuple[str, int, str]], j: int) -> Iterator[dict[str, Any]]:
    """Generate batch ``j`` with ``method`` (seed ``context.sampling.seed + j``), score and attack it; yield
    its records in order. Non-watermarked texts are scored by every one of ``detectors``."""
    model, tokenizer, vocab_size, alpha = context.model, context.tokenizer, context.vocab_size, context.alpha
    how, attacks = context.sampling, context.attacks
    t0 = time.perf_counter()
    outputs = method.generate(model, tokenizer, [p for _, _, p in batch], replace(how, seed=how.seed + j))
    gen_s = (time.perf_counter() - t0) / len(batch)
    ppl = _self_ppl(model, outputs, len(batch)) if context.self_ppl and model is not None \
        else [math.nan] * len(outputs)
    ids = [o.token_ids for o in outputs]
    prompt_ids = [o.prompt_ids for o in outputs]
    own = [method] if method.watermarked else list(detectors)
    clean: dict[str, list[dict[str, Any]]] = {}
    det_s: dict[str, float] = {}
    for det in own:
        t0 = time.perf_counter()
        clean[det.name] = det.detect(ids, vocab_size=vocab_size, alpha=alpha, model=model, prompt_ids=prompt_ids)
        det_s[det.name] = (time.perf_counter() - t0) / len(batch)
    attacked: dict[str, tuple[list[list[int]], list[str] | None, list[dict[str, Any]]]] = {}
    if method.watermarked:
        for label, attack in attacks.items():
            a_ids, a_texts = _attack_batch(attack, outputs, tokenizer,
                                           [_record_id(method.name, d, i) for d, i, _ in batch])
            res = method.detect(a_ids, vocab_size=vocab_size, alpha=alpha, model=model, prompt_ids=prompt_ids)
            for k, r in enumerate(res):
                r["edit_fraction"] = edit_fraction(ids[k], a_ids[k]) if ids[k] else 0.0
                r["n_tokens"] = len(a_ids[k])
                if a_texts is not None:
                    r["text"] = a_texts[k]
            attacked[label] = (a_ids, a_texts, res)
    for k, (domain, index, prompt) in enumerate(batch):
        yield {"id": _record_id(method.name, domain, index), "method": method.name,
               "watermarked": method.watermarked, "domain": domain, "prompt_index": index, "prompt": prompt,
               **_generation_fields(outputs[k]), "self_ppl": ppl[k],
               "detection": {name: res[k] for name, res in clean.items()},
               "attacks": {label: res[k] for label, (_, _, res) in attacked.items()},
               "seconds": {"generate": gen_s, **{f"detect_{n}": s for n, s in det_s.items()}}, "batch": j}


def _generation_fields(g: Generation) -> dict[str, Any]:
    """A record's fields from its :class:`~chainmark.embed.Generation`, in the record's order.

    The gate signal is the next-token entropy (4 decimals); ``gated`` and ``rho_realised`` are the
    generation's ``forced`` flags (where the watermark acted, see :mod:`cmlab.harness.adapters`) and their
    mean. ``g.config`` holds the key and is never written.
    """
    return {"prompt_ids": list(g.prompt_ids), "output": g.text, "token_ids": list(g.token_ids),
            "n_tokens": len(g.token_ids), "gate_signal": [round(float(h), 4) for h in g.entropy],
            "gated": [int(f) for f in g.forced], "rho_realised": g.rho_realised}


def score_null_texts(methods: Sequence[Method], token_ids: Sequence[Sequence[int]], model: Any = None,
                     vocab_size: int | None = None, alpha: float = 0.01, source: str = "null",
                     prompt_ids: Sequence[Sequence[int]] | None = None) -> list[dict[str, Any]]:
    """Score texts known to carry no watermark with every watermark detector (not stored).

    Returns one row per (text, detector) with ``z``, for building an
    empirical null next to a run's unwatermarked generations. Without
    ``prompt_ids``, SWEET's entropies are conditioned on the text alone.
    """
    if vocab_size is None:
        if model is None:
            raise ValueError("pass vocab_size or model")
        vocab_size = logits_width(model)
    rows: list[dict[str, Any]] = []
    ids = [list(map(int, t)) for t in token_ids]
    for m in methods:
        if not m.watermarked:
            continue
        for k, r in enumerate(m.detect(ids, vocab_size=vocab_size, alpha=alpha, model=model,
                                       prompt_ids=prompt_ids)):
            rows.append({"source": source, "text": k, "detector": m.name, "z": r["z"], "phi": r["phi"],
                         "n_tokens": len(ids[k])})
    return rows


# --------------------------------------------------------------------------- analysis


def tpr(frame: Any, thresholds: float | Mapping[str, float], by: Sequence[str] = ("method", "condition")) -> Any:
    """Share (%) of watermarked texts whose own detector's z exceeds the threshold.

    ``thresholds`` is one z (e.g. 2.326) or one per detector (calibrated);
    a text is flagged by the package's one rule with that threshold
    (:func:`chainmark.verdict.decide`: z > threshold).
    """
    wm = frame[frame["watermarked"] & (frame["detector"] == frame["method"])].copy()
    if isinstance(thresholds, Mapping):
        thr = wm["detector"].map(dict(thresholds)).astype(float)
    else:
        thr = float(thresholds)
    wm["hit"] = decide(z=wm["z"], threshold=thr)
    return wm.groupby(list(by))["hit"].mean().mul(100.0)


__all__ = ["GridRun", "generate_once", "generate_resumable", "run_batch", "run_grid", "score_null_texts", "tpr"]


def generate_resumable(
    path: str | os.PathLike,
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    config: Any = None,
    gate: Any = None,
    *,
    sampling: Sampling | None = None,
    control: RunControl | None = None,
) -> list[Any]:
    """:func:`chainmark.generate`, written batch by batch to a JSONL file and resumed from it.

    The chapters' long generation runs (hundreds of texts at full scale in
    Colab) go through this so that a dropped session loses at most the batch
    in flight. How it samples is one :class:`chainmark.Sampling` (``sampling``:
    ``Sampling(batch_size=4, seed=7, max_new_tokens=64)``), how it proceeds one
    :class:`~cmlab.harness.runs.RunControl` (``control``: a progress bar, an early stop). Batch ``b`` holds
    ``prompts[b * batch_size:(b + 1) * batch_size]`` and is sampled with seed ``seed + b``, exactly as one
    uninterrupted
    ``generate`` call would, so a resumed run returns the same generations.
    ``path/run.json`` records the settings (key fingerprint, never the key);
    resuming with different settings or prompts is refused. ``control.stop_after``
    stops after that many new batches (to demonstrate resuming); ``model=None``
    reads a finished run back without generating. Returns one
    :class:`~chainmark.embed.Generation` per prompt, in order, or only the
    finished ones when stopped early.
    """
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not one string")
    opts = check_options(RunControl, control, "control")
    how = check_options(Sampling, sampling, "sampling")
    batch_size = how.batch_size
    prompts = list(prompts)
    path = Path(path)
    watermark, named = _watermark_and_gate(config, gate)
    meta = {
        "chainmark_version": __version__,
        "model": getattr(getattr(model, "config", None), "name_or_path", None),
        "watermark": watermark,
        "gate_tau": getattr(named, "tau", None),
        "batch_size": batch_size,
        "seed": int(how.seed),
        "generate": {k: v for k, v in sorted(sampling_named(how).items()) if k not in ("batch_size", "seed")},
        "n_prompts": len(prompts),
    }
    secrets = [config.key] if config is not None else []

    def key_of(rec: dict[str, Any]) -> int:
        i = int(rec["index"])
        if i >= len(prompts) or rec["prompt"] != prompts[i]:
            raise ValueError(f"{path} holds a generation for prompt {i} that is not this run's "
                             f"prompt {i}; choose another folder or delete this one")
        return i

    def batch(b: int) -> _Batch:
        lo = b * batch_size
        chunk = prompts[lo:lo + batch_size]

        def produce() -> Iterator[tuple[int, dict[str, Any]]]:
            gens = generate(model, tokenizer, chunk, config, gate, sampling=replace(how, seed=how.seed + b))
            for offset, g in enumerate(gens):  # g.config (it holds the key) is never written
                yield lo + offset, {"index": lo + offset, **{k: getattr(g, k) for k in fields}}

        return _Batch(tuple(range(lo, lo + len(chunk))), produce, f"batch {b + 1}")

    fields = [f.name for f in dataclasses.fields(Generation) if f.name != "config"]
    ignore = ("n_prompts", "model") if model is None else ("n_prompts",)
    with _open_run(path, meta, secrets, key_of, ignore=ignore, update_meta=model is not None) as done:
        batches = [batch(b) for b in range(math.ceil(len(prompts) / batch_size))]
        todo = [b for b in batches if any(k not in done for k in b.keys)]
        if todo and model is None:
            raise ValueError(f"model is None, but {len(todo)} of {len(batches)} batches in {path} are still "
                             "to generate: pass the model (None only reads back a finished run)")
        _append_batches(path, batches, done, secrets, max_batches=opts.stop_after, progress=opts.progress)
        return [_generation_from_record(Generation, fields, done[i], config) for i in sorted(done)]


#: Where :func:`generate_once` keeps its texts, under the runs folder.
SHARED_DIR = "shared"


def _watermark_and_gate(config: Any, gate: Any) -> tuple[dict[str, Any] | None, Any]:
    """The watermark settings and the gate that name a run's texts: a whole configuration (one carrying its gate's
    threshold) names them as the same configuration with the gate passed beside it does, since both generate the
    same texts."""
    if config is None:
        return None, gate
    if gate is None and config.tau is not None:
        gate = config.default_gate()
    return {k: v for k, v in config.describe().items() if k != "tau"}, gate


def generate_once(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    config: Any = None,
    gate: Any = None,
    *,
    runs_dir: str | os.PathLike | None = None,
    sampling: Sampling | None = None,
    control: RunControl | None = None,
) -> list[Any]:
    """:func:`chainmark.generate`, made once and read back by every later caller that asks for the same texts.

    Chapters that need the same live texts (4 and 4.1; 5, 5.1 and 5.2; 9 and 9.1) ask with the same arguments: the
    first call stores them under ``runs_dir`` (default :func:`default_runs_dir`) in a folder named by a
    hash of all that determines them (package version; model, device, dtype, weight checksum; tokenizer;
    watermark settings with the key's fingerprint; gate; prompts; ``sampling``), later calls read
    them back, and a chapter run alone generates what is missing. Storage is :func:`generate_resumable`'s,
    with the same ``sampling`` and ``control``: the texts equal one ``generate(..., sampling=sampling)``
    call's.
    """
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not one string")
    how = check_options(Sampling, sampling, "sampling")
    check_options(RunControl, control, "control")
    prompts = list(prompts)
    watermark, named = _watermark_and_gate(config, gate)
    identity = {"chainmark_version": __version__, "model": _model_identity(model),
                "tokenizer": getattr(tokenizer, "name_or_path", None),
                "vocabulary": len(tokenizer) if hasattr(tokenizer, "__len__") else None,
                "watermark": watermark,
                "gate": None if named is None else {"kind": named.kind, "tau": float(named.tau)},
                "prompts": prompts, "batch_size": how.batch_size, "seed": int(how.seed),
                "generate": {k: v for k, v in sorted(sampling_named(how).items())
                             if k not in ("batch_size", "seed")}}
    digest = hashlib.sha256(json.dumps(to_jsonable(identity), sort_keys=True).encode("utf-8")).hexdigest()[:20]
    folder = Path(runs_dir) if runs_dir is not None else default_runs_dir()
    return generate_resumable(folder / SHARED_DIR / digest, model, tokenizer, prompts, config, gate,
                              sampling=how, control=control)


def _model_identity(model: Any) -> dict[str, Any]:
    """What tells one loaded model from another: its name or path, device, dtype, size and a weight checksum."""
    ident: dict[str, Any] = {"name": getattr(getattr(model, "config", None), "name_or_path", None),
                             "device": str(getattr(model, "device", "")), "dtype": str(getattr(model, "dtype", ""))}
    params = getattr(model, "parameters", None)
    if callable(params):
        import torch

        with torch.no_grad():
            weights = list(params())
            ident["parameters"] = int(sum(w.numel() for w in weights))
            # a few values from the first and last tensors: cheap, and different for another checkpoint
            ident["checksum"] = [float(w.reshape(-1)[:4096].double().sum()) for w in (weights[0], weights[-1])]
    return ident


def _generation_from_record(cls: Any, fields: Sequence[str], rec: Mapping[str, Any], config: Any) -> Any:
    """A Generation back from its JSON line with the run's config (JSON has no NaN: missing floats come back as NaN)."""
    values = {k: rec[k] for k in fields if k in rec}
    for k in ("entropy", "gap"):
        if k in values:
            values[k] = [math.nan if v is None else float(v) for v in values[k]]
    return cls(**values, config=config)

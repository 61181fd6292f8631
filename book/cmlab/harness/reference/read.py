"""Reading the reference for the chapters: tidy frames, the stored texts, the explorer grid, scores by test.

Only reads what a run stored (no model is loaded), so a chapter's reference section builds in seconds
from the committed records; the embedded model's run is read by default, whatever model is live.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from chainmark.auditor.tokenizer import DEFAULT_MODEL
from chainmark.config import ChainMarkConfig
from chainmark.detection import detect
from chainmark.gates import Gate
from cmlab.harness.reference.protocol import EXPERIMENTS, MIN_REWRITE_TOKENS, PROTOCOL, Cell, Protocol, cells, reference_key, topology_for
from cmlab.harness.reference.store import MANIFEST, read_dir, read_shard, shard_path


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
    configs = {name: ChainMarkConfig(key, S=topo.S, topology=topo) for name, (topo, _) in scorers.items()}
    for experiment in ("head_to_head", "null"):
        for cell, r in _iter_records(root, experiment, protocol):
            if cell.spec["method"] != "none":
                continue
            for name, (_, extra) in scorers.items():
                d = detect(r["token_ids"], configs[name], protocol.alpha, test="z")
                rows.append({"id": r["id"], "experiment": experiment, "cell": cell.name, "method": "none",
                             "detector": name, "domain": r["domain"], "prompt_index": r["prompt_index"],
                             "seed": r.get("seed"), "attack": "clean", "n_tokens": r["n_tokens"],
                             "edit_fraction": 0.0, "rewrite_failed": False, "watermarked": False,
                             "rho_realised": 0.0, "self_ppl": r["self_ppl"], **d.to_dict("record"), **extra})
    return rows


def _load_frame(name: str, root: str | os.PathLike | None = None, protocol: Protocol = PROTOCOL) -> Any:
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
    """The reference explorer grid in the shape of :func:`cmlab.harness.grids.embedding_grid`.

    Every (S, rho) cell summarises its texts (mean z, phi, self-perplexity,
    realised rho, the share detected at ``alpha``, default the protocol's) and
    keeps the text of one prompt, ``example`` = (domain, prompt index), token
    by token (strings need ``tokenizer``; without it the tiles show ids); each
    cell's ``texts`` keep every text's ids, forced flags and scores. The
    unwatermarked cell gives the baseline perplexity and ``baseline_texts``. Raises ``ValueError``
    while a cell of the grid is missing (see ``cmlab reference status``).
    """
    from cmlab.harness.grids import grid_cell

    root = Path(root) if root is not None else read_dir()
    alpha = protocol.alpha if alpha is None else float(alpha)
    by_cell: dict[str, tuple[Cell, list[dict[str, Any]]]] = {}
    for cell, r in _iter_records(root, "explorer", protocol):
        by_cell.setdefault(cell.name, (cell, []))[1].append(r)
    wanted = cells(protocol, ("explorer",))
    missing = [c.name for c in wanted if len(by_cell.get(c.name, (c, []))[1]) < c.n_texts]
    if missing:
        raise ValueError(f"the reference explorer grid is incomplete ({len(missing)} of {len(wanted)} cells "
                         f"missing or partial, e.g. {missing[0]}); run `cmlab reference run --experiments "
                         f"explorer` or check `cmlab reference status`")
    key, out_cells = reference_key(), []
    baseline = by_cell["none"][1]
    for cell in wanted[1:]:
        S, rho = int(cell.spec["S"]), float(cell.spec["rho"])
        recs = sorted(by_cell[cell.name][1], key=lambda r: (protocol.domains.index(r["domain"]), r["prompt_index"]))
        ex = next((r for r in recs if (r["domain"], r["prompt_index"]) == tuple(example)), None)
        if ex is None:
            raise ValueError(f"no explorer prompt {example!r}; choose a (domain, index) with domain in "
                             f"{protocol.domains} and index below {protocol.explorer_per_domain}")
        out_cells.append(grid_cell(S, rho, recs, cell.name, ex, key, tokenizer, alpha))
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


def load_reference(name: str, model_name: str | None = None) -> Any:
    """The committed reference run's experiment ``name`` as a DataFrame (one row per scored text).

    ``name`` is one of ``"head_to_head"``, ``"null"``, ``"calibration"``,
    ``"kregular"``, ``"explorer"``; see :func:`_load_frame`
    for the columns. By default it is the embedded model's run, which ships
    with the package, whatever model ``CHAINMARK_MODEL`` names; ``model_name``
    asks for another model's run (one made with ``cmlab reference run``).
    """
    return _load_frame(name, read_dir(model_name))


def scores_by_test(tests: Sequence[str] | None = None, root: str | os.PathLike | None = None,
                   protocol: Protocol = PROTOCOL, tokenizer: Any = None) -> list[dict[str, Any]]:
    """Every ChainMark text of the head-to-head, clean and under each stored attack, scored by each test.

    The attacked ids are rebuilt from the record: a substitution with the
    attack seed and the record's own stream (derived from the seed and the record's id),
    checked against the stored z-test score; the paraphrase from its stored
    text, through ``tokenizer`` (default: the embedded model's, whatever
    ``CHAINMARK_MODEL`` names). One row per
    (text, condition, test): ``flagged`` at the protocol's alpha, z, p, the
    transitions scored.
    """
    from chainmark.auditor.tokenizer import load_tokenizer
    from cmlab.comparison.attacks import Substitution
    from chainmark.significance import TESTS

    tests = tuple(TESTS if tests is None else tests)
    tok = tokenizer if tokenizer is not None else load_tokenizer(DEFAULT_MODEL)  # the run's own tokenizer
    p = protocol
    config, vocab = ChainMarkConfig(reference_key(), S=p.S, topology=topology_for(p.S)), len(tok)
    rows: list[dict[str, Any]] = []
    for r in load_texts("head_to_head", root, protocol):
        if r["method"] != "chainmark":
            continue
        conditions = {"clean": list(r["token_ids"])}
        for label, stored in r.get("attacks", {}).items():
            if label.startswith("sub"):
                ids = Substitution(float(label[3:]), vocab, seed=p.attack_seed).apply_ids(
                    [r["token_ids"]], names=[r["id"]])[0]
                again = detect(ids, config, p.alpha, vocab_size=vocab, test="z")
                if not math.isclose(again.z, stored["z"], rel_tol=1e-9, abs_tol=1e-9):
                    raise ValueError(f"{r['id']} {label}: the rebuilt attack scores z = {again.z}, the record "
                                     f"{stored['z']}: the attack's seeding has changed")
                conditions[label] = ids
            elif "text" in stored:
                conditions[label] = tok(stored["text"], add_special_tokens=False)["input_ids"]
        for condition, ids in conditions.items():
            for test in tests:
                res = detect(ids, config, p.alpha, vocab_size=vocab, test=test)
                rows.append({"id": r["id"], "domain": r["domain"], "condition": condition, "test": test,
                             "flagged": bool(res.is_watermarked), "z": res.z, "p_value": res.p_value,
                             "n_tokens": res.n_tokens, "n_scored": res.n_scored})
    return rows


__all__ = ["explorer_grid", "load_reference", "load_texts", "scores_by_test"]

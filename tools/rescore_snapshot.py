"""Re-score fixed inputs and prove that a refactor leaves every score byte-identical.

A change that only moves code (the lab -- ``harness``, ``comparison``, ``teaching`` -- leaving
``chainmark`` for the book's ``cmlab``) must not move a single bit of any score. Re-scored, model-free:

1. every stored reference-run text that ChainMark wrote (1,500: ``head_to_head``, ``calibration``,
   ``kregular``, ``explorer``) or no watermark wrote (1,216, the null, at the protocol's S), every
   shard (KGW and SWEET texts skipped): :func:`chainmark.detection.detect_batch` with the run's key and
   configuration (S, k-regular topology, alpha), by each test (z, distinct, exact), clean and under each
   stored attack (substitutions rebuilt by the lab's ``Substitution``, paraphrases re-tokenized);
2. ``python -m chainmark.cli`` (a subprocess, ``HF_HUB_OFFLINE=1``, no ``CHAINMARK_*`` variables) on
   fixed texts in a temporary folder: ``detect`` (table; ``--json`` plain, ``--test z``, soft cycle at
   S = 3, ``--segments``, ``--anytime``, a derived key, a regime), ``keygen --from-master``, ``calibrate``,
   ``recalibrate``, ``regime``, ``audit``, ``key audit`` (its default corpus is the reference null).
   Kept: exit code, stdout, files written, the CLI's own stderr lines (``chainmark: ...``; library
   warnings carry source paths and line numbers). Inputs are named relative to the folder, so no
   temporary path appears; only wall-clock fields (``"...seconds": x``) are blanked.

    python tools/rescore_snapshot.py capture before.json   # old layout
    python tools/rescore_snapshot.py compare before.json   # new layout: exit 1 on any difference

The snapshot is canonical JSON (sorted keys, shortest round-trip float repr). This checkout's
``chainmark`` is put first on the path; lab modules are ``cmlab.<name>`` where this checkout has
``cmlab``, else ``chainmark.<name>``, so the one tool runs on both sides of the move.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: This checkout's ``chainmark`` (and ``book/cmlab`` once it exists) go first on the path, not an installed copy.
LAB_PATHS = [ROOT] + ([ROOT / "book"] if (ROOT / "book" / "cmlab").is_dir() else [])

PLAIN = ("The committee met on Tuesday to discuss the budget for the coming year. Several members raised "
         "concerns about the cost of the new library, while others argued that it would serve the town for decades.")
TESTS = ("z", "distinct", "exact")


def lab(name: str) -> Any:
    """The lab module ``name`` (e.g. ``harness.reference``): ``cmlab``'s if this checkout has it, else ``chainmark``'s.

    A ``cmlab`` from elsewhere (another checkout's editable install) is ignored: the old layout of
    this checkout must be scored with its own lab.
    """
    try:
        module = importlib.import_module(f"cmlab.{name}")
        if ROOT in Path(getattr(module, "__file__", None) or "/").resolve().parents:
            return module
    except ModuleNotFoundError as exc:
        if exc.name is None or not f"cmlab.{name}".startswith(exc.name):
            raise  # cmlab is there but something it imports is missing: a real failure
    return importlib.import_module(f"chainmark.{name}")  # spelt in parts: a rename by sed leaves it alone


def canonical(obj: Any) -> Any:
    """Plain JSON values: numpy scalars to Python, non-finite floats to strings, tuples to lists."""
    if isinstance(obj, dict):
        return {str(k): canonical(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [canonical(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    return obj


def dumps(obj: Any) -> str:
    """Canonical JSON: sorted keys, Python's shortest round-trip float repr, one trailing newline."""
    return json.dumps(canonical(obj), sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def scores(result: Any) -> dict[str, Any]:
    """What a :class:`DetectionResult` says, read attribute by attribute (not through a form that may change)."""
    return {k: getattr(result, k) for k in ("n_tokens", "n_scored", "n_hits", "phi", "z", "p_value",
                                            "log_p_value", "is_watermarked", "S", "k", "p0", "alpha")}


def rescore_reference() -> dict[str, Any]:
    from chainmark.auditor.tokenizer import DEFAULT_MODEL, load_tokenizer
    from chainmark.config import ChainMarkConfig
    from chainmark.detection import detect_batch

    ref, protocol_mod = lab("harness.reference"), lab("harness.reference.protocol")
    Substitution = lab("comparison.attacks").Substitution
    p, key, tok = protocol_mod.PROTOCOL, protocol_mod.reference_key(), load_tokenizer(DEFAULT_MODEL)
    vocab = len(tok)
    out: dict[str, Any] = {}
    for experiment in protocol_mod.EXPERIMENTS:
        specs = {c.name: c.spec for c in protocol_mod.cells(p, (experiment,))}
        for r in ref.load_texts(experiment):
            spec = specs[r["cell"]]
            if spec["method"] not in ("chainmark", "none"):
                continue  # KGW and SWEET texts: their own detectors are the lab's, not the method's
            spec = spec if spec["method"] == "chainmark" else {"S": p.S, "rho": p.rho}  # null: the run's S
            config = ChainMarkConfig(key, S=spec["S"], rho=spec["rho"],
                                     topology=protocol_mod.topology_for(spec["S"], spec.get("k", 1)))
            conditions = {"clean": list(r["token_ids"])}
            for label, stored in sorted(r.get("attacks", {}).items()):
                if label.startswith("sub"):
                    conditions[label] = Substitution(float(label[3:]), vocab, seed=p.attack_seed).apply_ids(
                        [r["token_ids"]], names=[r["id"]])[0]
                elif "text" in stored:
                    conditions[label] = tok(stored["text"], add_special_tokens=False)["input_ids"]
            batch = [[int(t) for t in ids] for ids in conditions.values()]
            by_test = {t: detect_batch(batch, config, alpha=p.alpha, vocab_size=vocab, test=t) for t in TESTS}
            entry = f"{experiment}/{r['id']}"  # ids start with the cell's name
            assert entry not in out, entry
            out[entry] = {c: {t: scores(by_test[t][i]) for t in TESTS} for i, c in enumerate(conditions)}
    return out


def _untimed(text: str) -> str:
    """Wall-clock fields blanked (``audit --json`` reports its seconds)."""
    return re.sub(r'("[A-Za-z_]*seconds"): -?[0-9.eE+-]+', r'\1: "<time>"', text)


def rescore_cli() -> dict[str, Any]:
    protocol_mod = lab("harness.reference.protocol")
    texts = lab("harness.reference").load_texts("head_to_head")
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([*map(str, LAB_PATHS), os.environ.get("PYTHONPATH", "")])}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, data in {"ref.key": protocol_mod.reference_key(), "master.key": bytes(range(32))}.items():
            (work / name).write_bytes(data)
            (work / name).chmod(0o600)  # no "readable by other users" warning
        cm = [r for r in texts if r["method"] == "chainmark"]
        files = {"plain.txt": PLAIN, "none.txt": next(r["output"] for r in texts if r["method"] == "none"),
                 **{f"wm_{r['domain']}.txt": r["output"] for r in cm if r["prompt_index"] == 0},
                 "para.txt": cm[1]["attacks"]["paraphrase"]["text"]}
        for name, text in files.items():
            (work / name).write_text(text, "utf-8")
        (work / "null.jsonl").write_text("".join(json.dumps({"z": round((i * 0.37) % 3 - 1.5, 6)}) + "\n"
                                                 for i in range(400)), "utf-8")
        (work / "corpus.jsonl").write_text("".join(json.dumps({"id": n, "text": t}) + "\n"
                                                   for n, t in files.items()), "utf-8")
        txt = sorted(files)
        detect = {"json": ["--json"], "table": [], "z": ["--test", "z", "--json"],
                  "soft_S3": ["--S", "3", "--topology", "soft_cycle", "--test", "distinct", "--json"],
                  "segments": ["--segments", "--json"], "anytime": ["--anytime", "--keep-reading", "--json"]}
        commands = {
            **{f"detect_{k}": ["detect", "--key-file", "ref.key", *v, *txt] for k, v in detect.items()},
            "keygen_from_master": ["keygen", "--from-master", "master.key", "--context", "acme/2026-Q3",
                                   "--out", "derived.key"],
            "detect_derived_key": ["detect", "--key-file", "derived.key", "--json", *txt],
            "calibrate": ["calibrate", "--n", "200", "--rho", "0.5", "--alpha", "0.001", "--json"],
            "recalibrate": ["recalibrate", "--null", "null.jsonl", "--alpha", "0.01", "--json"],
            "regime": ["regime", "--key-file", "ref.key", "--S", "5", "--alpha", "0.01", "--n-min", "50",
                       "--out", "regime.json"],
            "detect_regime": ["detect", "--regime", "regime.json", "--key-file", "ref.key", "--json", *txt],
            "audit": ["audit", "corpus.jsonl", "--key-file", "ref.key", "--scheduler", "none",
                      "--out", "audit.jsonl", "--json"],
            "key_audit_reference_null": ["key", "audit", "--key-file", "ref.key", "--S", "5", "--json"],
        }
        for label, args in commands.items():
            run = subprocess.run([sys.executable, "-m", "chainmark.cli", *args], cwd=work, env=env,
                                 capture_output=True, text=True)
            written = [args[args.index("--out") + 1]] if "--out" in args else []
            made = {f: _untimed((work / f).read_text("utf-8")) if f.endswith((".json", ".jsonl"))
                    else (work / f).read_bytes().hex() for f in written if (work / f).is_file()}
            out[label] = {"args": args, "exit": run.returncode, "stdout": _untimed(run.stdout), "files": made,
                          "stderr": [ln for ln in run.stderr.splitlines() if ln.startswith("chainmark")]}
            print(f"  cli {label}: exit {run.returncode}", file=sys.stderr, flush=True)
    return out


def snapshot() -> str:
    import chainmark

    t0 = time.perf_counter()
    print(f"chainmark from {Path(chainmark.__file__).parent}; lab from "
          f"{lab('harness.reference').__name__.split('.')[0]}", file=sys.stderr, flush=True)
    reference = rescore_reference()
    print(f"  reference: {len(reference)} texts re-scored ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    cli = rescore_cli()
    print(f"  done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return dumps({"reference": reference, "cli": cli})


def compare(path: Path) -> int:
    stored_text, fresh_text = path.read_text("utf-8"), snapshot()
    stored, fresh = json.loads(stored_text), json.loads(fresh_text)
    entries = sorted({(part, k) for d in (stored, fresh) for part in d for k in d[part]})
    differ = [(part, k) for part, k in entries
              if dumps(stored.get(part, {}).get(k)) != dumps(fresh.get(part, {}).get(k))]
    for part, k in differ:
        where = "missing now" if k not in fresh.get(part, {}) else "new" if k not in stored.get(part, {}) else "differs"
        print(f"DIFFERS {part}/{k} ({where})")
    byte_same = stored_text == fresh_text
    print(f"{len(entries) - len(differ)} of {len(entries)} entries identical, {len(differ)} differ "
          f"({sum(p == 'reference' for p, _ in entries)} reference texts, {sum(p == 'cli' for p, _ in entries)} "
          f"CLI commands); snapshot bytes {'identical' if byte_same else 'DIFFERENT'}")
    return 0 if byte_same and not differ else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("capture", "compare"))
    parser.add_argument("snapshot", type=Path, help="the snapshot file (JSON) to write or to compare with")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(p) for p in LAB_PATHS]
    for name in [n for n in os.environ if n.startswith("CHAINMARK_")]:
        del os.environ[name]  # the run's own settings: no reader's model, key or reference folder
    if args.command == "compare":
        return compare(args.snapshot)
    args.snapshot.write_text(snapshot(), "utf-8")
    print(f"wrote {args.snapshot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

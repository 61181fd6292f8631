"""Serving the embedded model through vLLM with ChainMark: the lab's side of the serving tests and benchmark.

vLLM's CPU build lives in its own environment (``make vllm``: it pins a transformers older than the book's), so
the lab prepares what a server needs here — a model folder vLLM loads, a key folder with one file per account
and the serving configuration — and runs ``tools/vllm_replies.py`` in that environment. The requests default to
the reference run's ChainMark cell at the operating point (S = 5, rho = 0.5, the high-entropy gate at its stored
tau, 200 tokens): the same prompt tokens, so a reply served by vLLM sits beside the one ``chainmark.generate``
stored for that prompt.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Mapping

from chainmark.auditor.keyfiles import write_key_file
from chainmark.gates import Gate
from chainmark.serving.batch import SERVING_ENV
from cmlab.harness.reference.protocol import PROTOCOL
from cmlab.harness.reference.read import load_texts
from cmlab.harness.reference.store import read_dir

__all__ = ["VLLM_PYTHON", "reference_requests", "run_vllm", "serving_folder"]

ROOT = Path(__file__).resolve().parents[3]
#: The Python of vLLM's environment, made by ``make vllm``.
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
_DRIVER = ROOT / "tools" / "vllm_replies.py"
#: The reference cell the serving run mirrors.
_CELL = f"chainmark_S{PROTOCOL.S}"


def serving_folder(folder: str | os.PathLike, keys: Mapping[str, bytes], gate: Gate | None = None,
                   S: int = PROTOCOL.S, rho: float = PROTOCOL.rho, unkeyed: str = "plain") -> Path:
    """Write a server's key folder (``keys/<key_id>.key``, one per account) and its ``serving.json``; the gate
    defaults to the reference run's stored threshold for ``rho``. Returns the configuration's path."""
    folder = Path(folder)
    for key_id, key in keys.items():
        write_key_file(folder / "keys" / f"{key_id}.key", key, overwrite=True)
    if gate is None:
        stored = json.loads((read_dir() / "gates.json").read_text("utf-8"))
        gate = Gate(stored["kind"], stored["tau"][str(rho)])
    config = {"keys_dir": "keys", "S": S, "rho": rho, "gate": gate.kind, "tau": gate.tau, "unkeyed": unkeyed}
    path = folder / "serving.json"
    path.write_text(json.dumps(config, indent=1) + "\n", "utf-8")
    return path


def reference_requests(n: int | None = None, key_id: str = "reference") -> list[dict[str, Any]]:
    """The reference run's ChainMark texts at the operating point as requests (prompt tokens and key id), each
    with its user message (``"prompt"``) and the stored reply's token ids (``"reference_ids"``) beside it."""
    records = [r for r in load_texts("calibration") if r["cell"] == _CELL][:n]
    return [{"prompt_ids": list(r["prompt_ids"]), "key_id": key_id, "prompt": r["prompt"],
             "reference_ids": list(r["token_ids"])}
            for r in records]


def run_vllm(job: Mapping[str, Any], serving: str | os.PathLike, workdir: str | os.PathLike,
             timeout: float = 1200) -> dict[str, Any]:
    """Run ``tools/vllm_replies.py`` on ``job`` in vLLM's environment with the server configuration ``serving``;
    returns what it wrote (replies, seconds, vLLM's version). Fails with what to do when the environment is
    missing or the run fails (its last output)."""
    if not VLLM_PYTHON.exists():
        raise FileNotFoundError(f"vLLM's environment is missing ({VLLM_PYTHON}): run `make vllm` (about 2 minutes)")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    job_path, out_path = workdir / "job.json", workdir / "replies.json"
    job = {k: v for k, v in job.items()}
    job["requests"] = [{k: r[k] for k in ("prompt_ids", "key_id")} for r in job["requests"]]
    job_path.write_text(json.dumps(job) + "\n", "utf-8")
    env = {**os.environ, SERVING_ENV: str(Path(serving).resolve()), "PYTHONPATH": str(ROOT),
           "VLLM_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPYCACHEPREFIX", None)  # vLLM's own bytecode goes beside it, not in the book's cache
    done = subprocess.run([str(VLLM_PYTHON), str(_DRIVER), str(job_path), str(out_path)], env=env, cwd=workdir,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the vLLM run failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(out_path.read_text("utf-8"))


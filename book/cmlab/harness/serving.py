"""Serving the embedded model through vLLM with ChainMark: the lab's side of the serving tests and benchmark.

vLLM's CPU build lives in its own environment (``make vllm``: it pins a transformers older than the book's), so
the lab prepares what a server needs here — a model folder vLLM loads, a key folder with one file per account
and the serving configuration — and runs ``tools/vllm_replies.py`` in that environment. The requests default to
the reference run's ChainMark cell at the operating point (S = 5, rho = 0.5, the high-entropy gate at its stored
tau, 200 tokens): the same prompt tokens, so a reply served by vLLM sits beside the one ``chainmark.generate``
stored for that prompt.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from chainmark.auditor.keyfiles import write_key_file
from chainmark.gates import Gate
from chainmark.keys import derive_key
from chainmark.serving.batch import KEY_ID_ARG, SERVING_ENV
from cmlab.harness.reference.protocol import PROTOCOL, reference_key
from cmlab.harness.reference.read import load_texts
from cmlab.harness.stealing import reference_gate

__all__ = ["SERVING_RECORD", "account_key", "complete", "load_serving", "mixed_requests", "reference_requests",
           "run_vllm", "serving_folder", "vllm_environment", "vllm_server"]

ROOT = Path(__file__).resolve().parents[3]
#: The committed vLLM run the serving page reads (``tools/serving_record.py`` writes it).
SERVING_RECORD = Path(__file__).resolve().parents[1] / "data" / "serving" / "vllm_run.json.gz"
#: The Python of vLLM's environment, made by ``make vllm``.
_VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
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
        gate = reference_gate() if rho == PROTOCOL.rho else None
        if gate is None:
            raise ValueError(f"the reference run stores its gate at rho = {PROTOCOL.rho}; pass gate= for rho = {rho}")
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


def account_key(key_id: str) -> bytes:
    """The key of a second account in the serving runs: derived from the reference key and the account's id
    (HKDF, ``derive_key``), so the committed run's accounts can be re-derived by anyone who reads it; the
    reference account's key is the reference key itself."""
    return reference_key() if key_id == "reference" else derive_key(reference_key(), f"serving/{key_id}")


def mixed_requests(other: str = "acct-b", n_other: int = 16) -> list[dict[str, Any]]:
    """The serving runs' batch: the reference run's 100 operating-point prompts under the reference account,
    and every sixth of them once more under account ``other``, spread through the batch (each such request
    says in ``"twin"`` which reference prompt it repeats)."""
    requests = reference_requests()
    mixed = list(requests)
    for i, r in enumerate(requests[2::6][:n_other]):
        mixed.insert(7 * i + 5, {**r, "key_id": other, "twin": 2 + 6 * i})
    return mixed


def load_serving() -> dict[str, Any]:
    """The committed vLLM run: its requests (prompt ids, account, twin), replies (token ids, text), vLLM's
    version and the engine's seconds, and the throughput measured by ``benchmarks/bench_vllm.py``."""
    return json.loads(gzip.decompress(SERVING_RECORD.read_bytes()).decode("utf-8"))


def run_vllm(job: Mapping[str, Any], serving: str | os.PathLike, workdir: str | os.PathLike,
             timeout: float = 1200) -> dict[str, Any]:
    """Run ``tools/vllm_replies.py`` on ``job`` in vLLM's environment with the server configuration ``serving``;
    returns what it wrote (replies, seconds, vLLM's version). Fails with what to do when the environment is
    missing or the run fails (its last output)."""
    if not _VLLM_PYTHON.exists():
        raise FileNotFoundError(f"vLLM's environment is missing ({_VLLM_PYTHON}): run `make vllm` (about 2 minutes)")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    job_path, out_path = workdir / "job.json", workdir / "replies.json"
    job = {k: v for k, v in job.items()}
    job["requests"] = [{k: r[k] for k in ("prompt_ids", "key_id")} for r in job["requests"]]
    job_path.write_text(json.dumps(job) + "\n", "utf-8")
    env = {**os.environ, SERVING_ENV: str(Path(serving).resolve()), "PYTHONPATH": str(ROOT),
           "VLLM_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPYCACHEPREFIX", None)  # vLLM's own bytecode goes beside it, not in the book's cache
    done = subprocess.run([str(_VLLM_PYTHON), str(_DRIVER), str(job_path), str(out_path)], env=env, cwd=workdir,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the vLLM run failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(out_path.read_text("utf-8"))



def _chainmark_requirement(extra: str = "vllm") -> str:
    """The pip requirement that installs this chainmark elsewhere (with ``extra``): from the repository and
    revision it came from when pip installed it from Git (as the Colab cell does), from its folder when it is a
    local checkout, else the release of its version on PyPI."""
    from importlib import metadata

    dist = metadata.distribution("chainmark")
    name = f"chainmark[{extra}]" if extra else "chainmark"
    origin = json.loads(dist.read_text("direct_url.json") or "null")
    if origin and "vcs_info" in origin:
        revision = origin["vcs_info"].get("requested_revision") or origin["vcs_info"].get("commit_id")
        return f"{name} @ git+{origin['url']}" + (f"@{revision}" if revision else "")
    if origin and origin.get("url", "").startswith("file://"):
        return f"{name} @ {origin['url']}"
    return f"{name}=={dist.version}"


def vllm_environment(folder: str | os.PathLike, vllm: str = "vllm") -> Path:
    """A virtual environment in ``folder`` with vLLM (the requirement ``vllm``: its GPU build by default) and
    this chainmark, apart from the running interpreter's packages (vLLM pins its own torch, which must not
    replace the notebook's); made once, then reused. Returns its Python. On this book's CPU machines
    ``make vllm`` builds the CPU one (:data:`_VLLM_PYTHON`)."""
    import sys

    folder = Path(folder)
    python = folder / "bin" / "python"
    if not (folder / ".chainmark-ready").exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", vllm, _chainmark_requirement(extra="")],
                       check=True)
        (folder / ".chainmark-ready").write_text("ok\n", "utf-8")
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(python: str | os.PathLike, model: str, serving: str | os.PathLike, log: str | os.PathLike,
                extra: Sequence[str] = (), wait: float = 600) -> Iterator[str]:
    """Start vLLM's OpenAI-compatible server with ChainMark's processor on a free loopback port and yield its
    address once it answers ``/health``; stop it on leaving. ``python`` is vLLM's environment's interpreter
    (the server is started by its module: the ``vllm`` command of the CPU wheel cannot find its own version),
    ``serving`` the configuration file, ``log`` where the server's output goes, ``extra`` more server flags."""
    port = _free_port()
    env = {**os.environ, SERVING_ENV: str(Path(serving).resolve()), "VLLM_LOGGING_LEVEL": "WARNING"}
    if (ROOT / "chainmark").is_dir():  # a checkout: its chainmark, as vLLM's environment installed it (-e)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTHONPYCACHEPREFIX", None)
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--host", "127.0.0.1", "--port", str(port),
               "--logits-processors", "chainmark.serving.vllm:ChainMarkProcessor", *extra]
    log_path = Path(log)
    with log_path.open("w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log_path.parent)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + wait
            while True:
                if server.poll() is not None:
                    raise RuntimeError(f"the vLLM server stopped (exit {server.returncode}):\n"
                                       + log_path.read_text()[-4000:])
                try:
                    with urllib.request.urlopen(base + "/health", timeout=5) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                if time.time() > deadline:
                    raise TimeoutError(f"the vLLM server did not answer within {wait:.0f} s:\n"
                                       + log_path.read_text()[-4000:])
                time.sleep(2)
            yield base
        finally:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()


def complete(base: str, model: str, prompts: Sequence[Any], key_id: str | None, max_tokens: int = 200,
             temperature: float = 0.7) -> tuple[int, dict[str, Any]]:
    """POST one ``/v1/completions`` request (prompts as text or token ids) naming the account's key id, with
    the replies' token ids returned; gives the HTTP status and the JSON answer (an error's body on 4xx)."""
    body: dict[str, Any] = {"model": str(model), "prompt": list(prompts), "max_tokens": max_tokens,
                            "temperature": temperature, "return_token_ids": True}
    if key_id is not None:
        body["vllm_xargs"] = {KEY_ID_ARG: key_id}
    request = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")

"""Hard edges, tried as a hostile user would: one group of tests per defect found that way.

Each test failed before its fix. The command line runs in-process with a
byte-level fake tokenizer, or as a subprocess where the process itself is
the point (memory limits, signals, concurrent writers).
"""
from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from chainmark import cli
from chainmark.auditor.regime import Regime, regime_document, _regime_problems
from chainmark.cli import detect_commands
from chainmark.cli.common import EXIT_INTERNAL, EXIT_USAGE
from cmlab.harness import runner as R
from cmlab.harness import adapters as A
from cmlab.harness import runs as RS
from chainmark.config import ChainMarkConfig
from chainmark.detection import _circulant_offsets, detect, detect_batch
from chainmark.embed import Generation
from cmlab.comparison.lrdetect import lr_detect
from cmlab.harness.options import GridOptions
from cmlab.harness.runs import RunControl
from chainmark.auditor.keyfiles import _KEY_ENV, KEY_FILE_ENV, read_key_file, write_key_file
from chainmark.keys import key_fingerprint
from chainmark.limits import DEFAULT_MAX_INPUT_BYTES, DEFAULT_MAX_TEXT_BYTES, MAX_KEY_FILE_BYTES, MAX_REGIME_BYTES, MAX_STATES
from chainmark.partition import state_table
from chainmark.topology import Topology
from cli_support import KEY, ByteTokenizer, watermarked_text

ROOT = Path(__file__).resolve().parents[1]
HIGH_KEY = bytes(range(0x8F, 0x8F + 32))  # a key whose first byte is not UTF-8


@pytest.fixture(autouse=True)
def fake_tokenizer(monkeypatch):
    """The byte tokenizer for every command; no key from the environment."""
    import chainmark.auditor.tokenizer

    monkeypatch.delenv(_KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setattr(chainmark.auditor.tokenizer, "load_tokenizer", lambda name=None, revision=None: ByteTokenizer())


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "deploy.key"
    write_key_file(path, KEY)
    return path


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def key_forms(key: bytes) -> list[str]:
    """Ways a key (or one byte of it) could leak into a message."""
    forms = [key.hex(), key.hex().upper(), repr(key)[2:-1]]
    forms += [f"byte 0x{b:02x}" for b in key] + [f"\\x{b:02x}" for b in key]
    return forms


def script() -> str:
    exe = Path(sys.executable).with_name("chainmark")
    if not exe.exists():
        pytest.skip("the chainmark console script is not installed (pip install -e .)")
    return str(exe)


# ---------------------------------------------------------------------------
# 1. S is bounded before anything is allocated; no dense S x S where offsets do
# ---------------------------------------------------------------------------
def test_1_detect_with_S_50000_exits_2_under_a_4_gb_memory_limit(tmp_path, key_file):
    """Refused before anything is allocated: the usage error, not a MemoryError, under a 4 GB address space."""
    text = write(tmp_path, "a.txt", "some text to audit")
    command = f"ulimit -v 4000000; exec {script()} detect --key-file {key_file} --S 50000 {text}"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "--S" in proc.stderr and str(MAX_STATES) in proc.stderr
    assert "MemoryError" not in proc.stderr and "Traceback" not in proc.stderr


def test_1_every_entry_point_refuses_S_above_the_bound(capsys, tmp_path, key_file):
    ids = np.arange(50)
    for call in (lambda: detect(ids, ChainMarkConfig(KEY, S=MAX_STATES + 1), test="z"),
                 lambda: lr_detect(ids, ChainMarkConfig(KEY, S=MAX_STATES + 1), np.zeros(49))):
        with pytest.raises(ValueError, match=f"at most {MAX_STATES}"):
            call()
    with pytest.raises(ValueError, match=rf'"S" must be an integer in \[2, {MAX_STATES}\]'):  # a regime to publish
        regime_document(KEY, Regime(S=MAX_STATES + 1, alpha=0.01))
    assert detect(ids, ChainMarkConfig(KEY, S=MAX_STATES), test="z").S == MAX_STATES  # the bound itself is allowed
    code, _, err = run(capsys, "regime", "--key-file", key_file, "--S", MAX_STATES + 1, "--alpha", "0.01")
    assert code == EXIT_USAGE and "--S" in err
    code, _, err = run(capsys, "calibrate", "--n", "100", "--rho", "0.5", "--alpha", "0.01", "--k", MAX_STATES)
    assert code == EXIT_USAGE and "--k" in err


def test_1_circulant_check_allocates_no_second_dense_matrix():
    import tracemalloc

    S = 3000
    for topology, offsets in ((Topology.clockwork(S), (1,)), (Topology.soft_cycle(S), (1, 2))):
        tracemalloc.start()
        try:
            found = _circulant_offsets.__wrapped__(topology)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert found == offsets
        assert peak < S * S // 8, f"peak {peak} bytes: an S x S matrix ({S * S} bytes) was built"


def test_1_circulant_check_still_tells_non_circulant_matrices_apart():
    m = np.roll(np.eye(6, dtype=int), 1, axis=1)
    m[[0, 1]] = m[[1, 0]]  # still 1-regular, no longer circulant
    assert _circulant_offsets.__wrapped__(Topology.from_matrix(m)) is None
    assert _circulant_offsets.__wrapped__(Topology.from_offsets(7, [1, 3])) == (1, 3)


# ---------------------------------------------------------------------------
# 2. regime files are checked field by field
# ---------------------------------------------------------------------------
@pytest.fixture
def regime(capsys, tmp_path, key_file) -> Path:
    path = tmp_path / "regime.json"
    assert run(capsys, "regime", "--key-file", key_file, "--S", "5", "--alpha", "0.01", "--test", "z",
               "--out", path)[0] == 0
    return path


def _edit_regime(path: Path, name: str, raw_json: str) -> None:
    """Set one field of a regime file to a raw JSON value (NaN and Infinity included)."""
    doc = json.loads(path.read_text())
    doc[name] = "@@"
    path.write_text(json.dumps(doc).replace('"@@"', raw_json))


@pytest.mark.parametrize("name, raw, words", [
    ("threshold", "NaN", ['"threshold"', "finite number", "NaN"]),
    ("threshold", "-Infinity", ['"threshold"', "finite number"]),
    ("threshold", "1e999", ['"threshold"', "finite number"]),
    ("threshold", '"2.3"', ['"threshold"', "finite number", "string"]),
    ("distinct_pairs", '"no"', ['"distinct_pairs"', "true or false"]),
    ("distinct_pairs", "1", ['"distinct_pairs"', "true or false"]),
    ("distinct_pairs", "true", ['"distinct_pairs" follows from "test"', "'z' test"]),  # derived, like k
    ("S", str(MAX_STATES + 1), ['"S"', str(MAX_STATES)]),  # just above: a regression allocates 16 MB, not 2.5 GB
    ("S", "5.0", ['"S"', "integer"]),
    ("alpha", "1.5", ['"alpha"', "(0, 1)"]),
    ("topology", '"spiral"', ['"topology"', "clockwork"]),
    ("k", "2", ['"k"', "clockwork topology has k = 1"]),
    ("n_min", "true", ['"n_min"', "integer"]),
    ("thresold", "3.0", ["unknown field", "'thresold'"]),
])
def test_2_bad_regime_fields_are_refused_by_name(capsys, tmp_path, key_file, regime, name, raw, words):
    _edit_regime(regime, name, raw)
    marked = write(tmp_path, "marked.txt", watermarked_text())
    code, out, err = run(capsys, "detect", "--regime", regime, "--key-file", key_file, "--json",
                         "--fail-on-detect", marked)
    assert code == EXIT_USAGE and out == "", err
    for word in words:
        assert word in err, (word, err)


def test_2_a_valid_regime_still_applies(capsys, tmp_path, key_file, regime):
    from chainmark.auditor.regime import _regime_digest

    _edit_regime(regime, "threshold", "2.5")
    code, _, err = run(capsys, "detect", "--regime", regime, "--key-file", key_file, "--json",
                       write(tmp_path, "marked.txt", watermarked_text()))
    assert code == EXIT_USAGE and '"digest" does not match' in err  # an edit without a new digest
    doc = json.loads(regime.read_text())
    doc["digest"] = _regime_digest(doc)  # the deployer re-publishes it
    regime.write_text(json.dumps(doc))
    code, out, _ = run(capsys, "detect", "--regime", regime, "--key-file", key_file, "--json",
                       write(tmp_path, "marked.txt", watermarked_text()))
    assert code == 0 and json.loads(out)["threshold"] == 2.5 and json.loads(out)["is_watermarked"]
    assert _regime_problems(json.loads(regime.read_text())) == []


# ---------------------------------------------------------------------------
# 3. a list of numpy or torch scalars is one text, not a batch
# ---------------------------------------------------------------------------
def test_3_sequences_of_scalars_are_one_text():
    torch = pytest.importorskip("torch")
    ref = detect(np.arange(50), ChainMarkConfig(KEY), test="z")
    for ids in (list(np.arange(50)), tuple(np.arange(50)), [torch.tensor(i) for i in range(50)],
                list(np.arange(50, dtype=np.uint16))):
        res = detect(ids, ChainMarkConfig(KEY), test="z")
        assert not isinstance(res, list) and res.n_tokens == 50
        assert (res.z, res.n_hits) == (ref.z, ref.n_hits)
    batch = detect_batch((np.arange(50), torch.arange(50)), ChainMarkConfig(KEY), test="z")  # sequences of sequences are a batch
    assert isinstance(batch, list) and [r.z for r in batch] == [ref.z, ref.z]
    with pytest.raises(ValueError, match="detect_batch"):  # which detect refuses, naming detect_batch
        detect((np.arange(50), torch.arange(50)), ChainMarkConfig(KEY), test="z")


# ---------------------------------------------------------------------------
# 4. one writer per run folder
# ---------------------------------------------------------------------------
class _Null(A.NoWatermark):
    def generate(self, model, tokenizer, prompts, sampling):
        return [Generation(p, [5, 6, 7], "5 6 7", [0.0] * 3, [0.0] * 3, [False] * 3, [False] * 3, None, None, [1])
                for p in prompts]


class _Tok:
    def __len__(self):
        return 100


def _hold_lock(folder: Path) -> subprocess.Popen:
    """Another process holding the run folder's lock until its standard input closes."""
    code = ("import sys\nfrom cmlab.harness.runner import lock_run_folder\n"
            "with lock_run_folder(sys.argv[1]):\n    print('held', flush=True)\n    sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(timeout=60)


def test_4_a_second_writer_of_a_run_folder_stops_at_once(tmp_path):
    folder = tmp_path / "grid"
    folder.mkdir()
    items = [("wiki", i, f"prompt {i}") for i in range(4)]
    holder = _hold_lock(folder)
    try:
        with pytest.raises(RS.RunFolderBusy, match="another process"):
            R.run_grid(None, _Tok(), [_Null()], items, folder,
                       options=GridOptions(self_ppl=False, model_name="fake", progress=False))
        with pytest.raises(RS.RunFolderBusy):
            R.generate_resumable(folder, None, None, ["a prompt"], control=RunControl(progress=False))
        assert not (folder / RS.RECORDS_FILE).exists() and not (folder / RS.META_FILE).exists()
    finally:
        _release(holder)
    run = R.run_grid(None, _Tok(), [_Null()], items, folder,
                     options=GridOptions(self_ppl=False, model_name="fake", progress=False))
    again = R.run_grid(None, _Tok(), [_Null()], items, folder,
                       options=GridOptions(self_ppl=False, model_name="fake", progress=False))
    assert (run.written, again.written, again.skipped) == (4, 0, 4)  # the lock is released after each run
    assert len(RS.read_records(folder / RS.RECORDS_FILE)) == 4


# ---------------------------------------------------------------------------
# 5. key files: concurrent writers never hand out a half-written key
# ---------------------------------------------------------------------------
class _SlowFile:
    """A file object whose writes take a while, to widen any window in which a key file is incomplete."""

    def __init__(self, fh):
        self._fh = fh

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def write(self, data):
        time.sleep(0.3)
        return self._fh.write(data)

    def __getattr__(self, name):
        return getattr(self._fh, name)


def test_5_concurrent_key_files_never_hand_out_a_half_written_key(tmp_path, monkeypatch):
    """Two writers race for one key file (what the book's per-machine key once did): one wins whole,
    the other is refused, and a reader never sees a partial key."""
    path = tmp_path / "cache" / "shared.key"
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", *a, **k: (
        _SlowFile(real_fdopen(fd, mode, *a, **k)) if "w" in mode else real_fdopen(fd, mode, *a, **k)))
    results: list[object] = [None, None]

    def call(slot: int) -> None:
        try:
            results[slot] = write_key_file(path)
        except FileExistsError as exc:
            results[slot] = exc

    first = threading.Thread(target=call, args=(0,))
    second = threading.Thread(target=call, args=(1,))
    first.start()
    time.sleep(0.1)  # the first writer is writing its key now
    assert not path.exists()  # the name appears only once the key is complete
    second.start()
    first.join(10)
    second.join(10)
    winners = [r for r in results if isinstance(r, bytes)]
    assert len(winners) == 1 and sum(isinstance(r, FileExistsError) for r in results) == 1, results
    assert read_key_file(path) == winners[0] and len(winners[0]) == 32
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["shared.key"]  # no temporary file left


# ---------------------------------------------------------------------------
# 6. Ctrl-C means exit 130, wherever it lands
# ---------------------------------------------------------------------------
_INTERRUPT = """
import os, signal, sys, time
from chainmark import cli

def interrupt():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)  # the signal arrives during this

{patch}
sys.exit(cli.main())
"""


@pytest.mark.parametrize("where, patch", [
    ("while the parser is built (before the command's try)",
     "real = cli._build_parser\ndef slow_parser():\n    interrupt()\n    return real()\n"
     "cli._build_parser = slow_parser"),
    ("inside a library that turns the interrupt into its own error",
     "def load(name, revision=None):\n    try:\n        interrupt()\n    except KeyboardInterrupt:\n"
     "        raise RuntimeError('the library swallowed the interrupt')\ncli.detect_commands.load_tokenizer = load"),
])
def test_6_interrupt_exits_130_without_a_traceback(tmp_path, key_file, where, patch):
    text = write(tmp_path, "a.txt", "some text")
    proc = subprocess.run([sys.executable, "-c", _INTERRUPT.format(patch=patch), "detect", "--key-file",
                           str(key_file), str(text)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, (where, proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "interrupted" in proc.stderr


def test_6_in_process_callers_keep_their_own_interrupt_handling(capsys):
    before = signal.getsignal(signal.SIGINT)
    assert run(capsys, "calibrate", "--n", "100", "--rho", "0.5", "--alpha", "0.01")[0] == 0
    assert signal.getsignal(signal.SIGINT) is before


# ---------------------------------------------------------------------------
# 7. reads are bounded
# ---------------------------------------------------------------------------
def test_7_key_file_larger_than_the_bound_is_refused(capsys, tmp_path):
    big = tmp_path / "big.key"
    big.write_bytes(os.urandom(MAX_KEY_FILE_BYTES + 1))
    os.chmod(big, 0o600)
    code, out, err = run(capsys, "detect", "--key-file", big, write(tmp_path, "t.txt", "hello there"))
    assert code == EXIT_USAGE and out == "" and f"larger than {MAX_KEY_FILE_BYTES} bytes" in err


def test_7_dev_zero_as_key_file_fails_fast_in_bounded_memory(tmp_path):
    text = write(tmp_path, "a.txt", "some text")
    command = f"ulimit -v 2000000; exec {script()} detect --key-file /dev/zero {text}"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_USAGE and "not a key file" in proc.stderr
    with pytest.raises(ValueError, match="not a key file"):
        read_key_file("/dev/zero")


def test_7_text_inputs_are_bounded_by_max_bytes(capsys, tmp_path, key_file):
    text = write(tmp_path, "t.txt", "x" * 101)
    code, out, err = run(capsys, "detect", "--key-file", key_file, "--max-bytes", "100", text)
    assert code == EXIT_USAGE and out == "" and "larger than 100 bytes" in err and "--max-bytes" in err
    code, out, _ = run(capsys, "detect", "--key-file", key_file, "--max-bytes", "101", "--json", text)
    assert code == 0 and json.loads(out)["n_tokens"] == 101
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as fh:  # sparse: no disk space used
        fh.truncate(DEFAULT_MAX_TEXT_BYTES + 1)
    code, _, err = run(capsys, "detect", "--key-file", key_file, huge)  # refused by its size, before it is read
    assert code == EXIT_USAGE and f"larger than {DEFAULT_MAX_TEXT_BYTES} bytes" in err


def test_7_regime_and_null_files_are_bounded(capsys, tmp_path, key_file):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(MAX_REGIME_BYTES + 1)
    code, _, err = run(capsys, "detect", "--regime", big, "--key-file", key_file, write(tmp_path, "t.txt", "hi"))
    assert code == EXIT_USAGE and "larger than" in err
    null = write(tmp_path, "null.jsonl", "".join(json.dumps({"z": float(v)}) + "\n" for v in np.linspace(-2, 2, 50)))
    code, _, err = run(capsys, "recalibrate", "--null", null, "--alpha", "0.1", "--max-bytes", "100")
    assert code == EXIT_USAGE and "larger than 100 bytes" in err
    assert run(capsys, "recalibrate", "--null", null, "--alpha", "0.1")[0] == 0


# ---------------------------------------------------------------------------
# 8. errors never echo key bytes
# ---------------------------------------------------------------------------
def test_8_a_key_file_passed_as_regime_or_null_file_is_not_quoted(capsys, tmp_path):
    key_path = tmp_path / "high.key"
    write_key_file(key_path, HIGH_KEY)
    text = write(tmp_path, "t.txt", "hello there")
    code, _, err = run(capsys, "detect", "--regime", key_path, "--key-file", key_path, text)
    assert code == EXIT_USAGE and "not UTF-8" in err
    code2, _, err2 = run(capsys, "recalibrate", "--null", key_path, "--alpha", "0.1")
    assert code2 == EXIT_USAGE and "not UTF-8" in err2
    for form in key_forms(HIGH_KEY):
        assert form not in err + err2, form


# ---------------------------------------------------------------------------
# 9. hex key files and short keys are refused; every key file is checked for permissions
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("content, words", [
    (KEY.hex().encode() + b"\n", ["hexadecimal text", "xxd -r -p", _KEY_ENV]),
    (KEY.hex().upper().encode(), ["hexadecimal text"]),
    (b"kq7zp", ["5 bytes", "at least 16 bytes", "keygen"]),
])
def test_9_hex_text_and_short_key_files_are_refused(capsys, tmp_path, content, words):
    path = tmp_path / "odd.key"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    code, out, err = run(capsys, "detect", "--key-file", path, write(tmp_path, "t.txt", "hello there"))
    assert code == EXIT_USAGE and out == ""
    for word in words:
        assert word in err, (word, err)
    assert KEY.hex() not in err.lower() and "kq7zp" not in err
    with pytest.raises(ValueError):
        read_key_file(path)


def test_9_short_hex_key_in_the_environment_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(_KEY_ENV, "0a0b0c0d0e")
    code, _, err = run(capsys, "detect", write(tmp_path, "t.txt", "hello there"))
    assert code == EXIT_USAGE and "5-byte key" in err and "0a0b0c0d0e" not in err


def test_9_loose_permissions_warn_for_every_key_file(capsys, tmp_path, key_file, monkeypatch):
    os.chmod(key_file, 0o644)
    monkeypatch.setenv(KEY_FILE_ENV, str(key_file))
    code, _, err = run(capsys, "detect", write(tmp_path, "t.txt", "hello there"))
    assert code == 0 and "readable by other users" in err and "chmod 600" in err
    code, _, err = run(capsys, "keygen", "--out", tmp_path / "derived.key", "--from-master", key_file,
                       "--context", "acme/2026")
    assert code == 0 and f"key file {key_file} is readable by other users" in err


# ---------------------------------------------------------------------------
# 10. standard input honours --encoding
# ---------------------------------------------------------------------------
def _stdin(monkeypatch, data: bytes) -> None:
    """Standard input as a process gets it in a C locale: bytes behind a UTF-8 text layer."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8",
                                                       errors="surrogateescape"))


def test_10_stdin_is_decoded_with_the_given_encoding(capsys, monkeypatch, key_file):
    _stdin(monkeypatch, "café au lait".encode("latin-1"))
    code, out, err = run(capsys, "detect", "--key-file", key_file, "--encoding", "latin-1", "--json", "-")
    assert code == 0, err
    assert json.loads(out)["n_tokens"] == len("café au lait".encode("utf-8"))
    _stdin(monkeypatch, "café au lait".encode("latin-1"))
    code, _, err = run(capsys, "detect", "--key-file", key_file, "-")
    assert code == EXIT_USAGE and "<stdin> is not utf-8 text (byte offset 3)" in err


# ---------------------------------------------------------------------------
# 11. calibrate and recalibrate never divide by zero nor publish infinity
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("n, rho, alpha", [("2", "1e-300", "1e-300"), ("2", "1e-160", "0.01"),
                                           ("2", "0.001", "0.01")])
def test_11_unreachable_targets_are_a_usage_error(capsys, n, rho, alpha):
    code, out, err = run(capsys, "calibrate", "--n", n, "--rho", rho, "--alpha", alpha, "--json")
    assert code == EXIT_USAGE and out == ""
    assert str(MAX_STATES) in err and "--rho" in err


@pytest.mark.parametrize("z", [np.tile([1e308, -1e308], 25), np.full(50, 1e308) + np.arange(50)])
def test_11_recalibrate_refuses_overflowing_scores(capsys, tmp_path, z):
    null = write(tmp_path, "null.jsonl", "".join(json.dumps({"z": float(v)}) + "\n" for v in z))
    for method in ("sd", "quantile"):
        code, out, err = run(capsys, "recalibrate", "--null", null, "--alpha", "0.1", "--method", method, "--json")
        assert "Infinity" not in out and "NaN" not in out
        assert code == EXIT_USAGE and "too large" in err, (method, code, err)


# ---------------------------------------------------------------------------
# 12. no writing through links; private folders whatever the umask
# ---------------------------------------------------------------------------
def test_12_regime_out_refuses_a_dangling_symlink(capsys, tmp_path, key_file):
    target = tmp_path / "elsewhere.json"
    link = tmp_path / "regime.json"
    link.symlink_to(target)
    code, _, err = run(capsys, "regime", "--key-file", key_file, "--S", "5", "--alpha", "0.01", "--out", link)
    assert code == EXIT_USAGE and "refusing to overwrite" in err
    assert not target.exists()
    code, _, err = run(capsys, "keygen", "--out", link)
    assert code == EXIT_USAGE and not target.exists()


@pytest.fixture
def open_umask():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_12_key_folders_are_private_under_umask_000(capsys, tmp_path, monkeypatch, open_umask):
    write_key_file(tmp_path / "cache" / "book.key")
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "cache" / "book.key").stat().st_mode) == 0o600
    assert run(capsys, "keygen", "--out", tmp_path / "keys" / "a.key")[0] == 0
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700


# ---------------------------------------------------------------------------
# 13. exit codes: 2 only for the caller's problems; tests never skip our own modules
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("error", [ValueError("a bug"), TypeError("a bug"), KeyError("a bug"),
                                   OSError("a bug"), FileNotFoundError("a bug")])
def test_13_unexpected_value_and_type_errors_are_internal(capsys, monkeypatch, error):
    def broken(args):
        raise error

    monkeypatch.setattr(detect_commands, "_cmd_calibrate", broken)
    code, out, err = run(capsys, "calibrate", "--n", "100", "--rho", "0.5", "--alpha", "0.01")
    assert code == EXIT_INTERNAL and out == ""
    assert err.startswith("chainmark: internal error: ") and type(error).__name__ in err


def test_13_recognised_input_problems_stay_usage_errors(capsys, tmp_path, key_file):
    text = write(tmp_path, "t.txt", "hello there")
    code, _, err = run(capsys, "detect", "--key-file", key_file, "--S", "2", "--topology", "soft_cycle", text)
    assert code == EXIT_USAGE and "soft_cycle needs S >= 3" in err
    null = write(tmp_path, "null.jsonl", '{"z": 1.0}\n{"z": 2.0}\n')
    code, _, err = run(capsys, "recalibrate", "--null", null, "--alpha", "0.01")
    assert code == EXIT_USAGE and "too few" in err
    code, _, err = run(capsys, "keygen", "--out", tmp_path / "t.txt" / "k.key")
    assert code == EXIT_USAGE and "cannot write the key file" in err


def test_13_no_test_skips_when_a_chainmark_module_fails_to_import():
    needle = "importorskip(" + '"chainmark'  # split, so that this file does not match itself
    offenders = [p.name for p in (ROOT / "tests").glob("test_*.py") if needle in p.read_text(encoding="utf-8")]
    assert offenders == []

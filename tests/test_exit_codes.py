"""Exit codes a script can trust: lost output is an error (2), never a 0 and never an 'internal error' (3)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = f"{shlex.quote(sys.executable)} -m chainmark.cli"


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CHAINMARK_KEY", None)
    env.pop("CHAINMARK_KEY_FILE", None)
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", ["calibrate --n 200 --rho 0.5 --alpha 0.01",
                                     "detect --key-file k.key --S 5 t.txt"])
def test_closed_standard_output_is_an_error(tmp_path, command):
    (tmp_path / "t.txt").write_text("Some text to score. " * 5, "utf-8")
    assert shell(f"{CLI} keygen --out k.key", tmp_path).returncode == 0
    done = shell(f"{CLI} {command} >&-", tmp_path)
    assert done.returncode == 2 and "standard output is closed" in done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_an_error_and_keygen_writes_no_key_it_cannot_name(tmp_path):
    (tmp_path / "t.txt").write_text("Some text to score. " * 5, "utf-8")
    assert shell(f"{CLI} keygen --out k.key", tmp_path).returncode == 0
    done = shell(f"{CLI} detect --key-file k.key --S 5 t.txt > /dev/full", tmp_path)
    assert done.returncode == 2 and "No space left" in done.stderr and "internal error" not in done.stderr
    done = shell(f"{CLI} keygen --out lost.key > /dev/full", tmp_path)
    assert done.returncode == 2 and not (tmp_path / "lost.key").exists()


def test_a_null_file_is_split_at_newlines_only(tmp_path):
    """A raw U+2028 or U+0085 inside a JSON string is legal JSON Lines (and CRLF line ends are too)."""
    import json

    lines = [json.dumps({"file": f"doc\u2028{i}\u0085.txt", "z": 0.1 * (i % 13) - 0.6}, ensure_ascii=False)
             for i in range(400)]
    (tmp_path / "null.jsonl").write_text("\r\n".join(lines) + "\r\n", "utf-8")
    done = shell(f"{CLI} recalibrate --null null.jsonl --alpha 0.05 --json", tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_null"] == 400


@pytest.fixture
def in_process(tmp_path, monkeypatch, capsys):
    from chainmark import cli

    monkeypatch.delenv("CHAINMARK_KEY", raising=False)
    monkeypatch.delenv("CHAINMARK_KEY_FILE", raising=False)
    monkeypatch.chdir(tmp_path)

    def run(*args):
        code = cli.main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_out_must_name_a_file_to_create(tmp_path, in_process):
    (tmp_path / "folder").mkdir()
    for value, says in (("nodir/", "names a folder"), ("folder", "names a folder"), ("-", "a file named '-'"),
                        ("", "--out is empty")):
        code, _, err = in_process("keygen", "--out", value)
        assert code == 2 and says in err, (value, err)
    assert not (tmp_path / "nodir").exists() and not (tmp_path / "-").exists()


def test_keygen_makes_every_new_folder_private(tmp_path, in_process):
    code, _, _ = in_process("keygen", "--out", "new/sub/x.key")
    assert code == 0
    for folder in (tmp_path / "new", tmp_path / "new" / "sub"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_a_negative_threshold_is_read_as_a_number(tmp_path, in_process):
    (tmp_path / "t.txt").write_text("Some text to score. " * 5, "utf-8")
    assert in_process("keygen", "--out", "k.key")[0] == 0
    code, out, err = in_process("detect", "--key-file", "k.key", "--S", "5", "--threshold", "-1e300", "--json",
                                "t.txt")
    assert code == 0, err
    import json

    assert json.loads(out.splitlines()[0])["threshold"] == -1e300


def test_control_characters_in_a_file_name_cannot_draw_a_row(tmp_path, in_process):
    assert in_process("keygen", "--out", "k.key")[0] == 0
    name = "evil\nx.txt  99  99  99  1.000  99.0  0.00e+00  WATERMARKED\x1b[2J"
    (tmp_path / name).write_text("Some text to score. " * 5, "utf-8")
    code, out, _ = in_process("detect", "--key-file", "k.key", "--S", "5", name)
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("evil")]
    assert len(rows) == 1 and "\\n" in rows[0] and "\\x1b" in rows[0] and "\x1b" not in out


def test_the_reference_commands_refuse_a_missing_folder(tmp_path, capsys):
    from cmlab import cli  # the lab's own command line runs through chainmark's, with the same exit codes

    for action in ("status", "verify"):
        code = cli.main(["reference", action, "--dir", str(tmp_path / "missing")])
        assert code == 2 and "no such folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert cli.main(["reference", "status", "--dir", str(tmp_path / "file")]) == 2


def test_a_tampered_published_regime_is_refused_by_detect(tmp_path, in_process):
    import json

    from chainmark.auditor.regime import _regime_digest

    (tmp_path / "t.txt").write_text("Some text to score. " * 5, "utf-8")
    assert in_process("keygen", "--out", "k.key")[0] == 0
    assert in_process("regime", "--key-file", "k.key", "--S", "5", "--alpha", "0.01", "--test", "z",
                      "--out", "r.json")[0] == 0
    text = (tmp_path / "r.json").read_text("utf-8")
    doc = json.loads(text)
    cases = {
        "twice.json": (text.rstrip()[:-1] + ', "threshold": -10}', "appears twice"),
        "low.json": (json.dumps({**doc, "threshold": -10, "digest": _regime_digest({**doc, "threshold": -10})}),
                     "lies below z_alpha"),
        "edited.json": (json.dumps({**doc, "threshold": 3.0}), '"digest" does not match'),
        "bare.json": (json.dumps({"format": "chainmark-regime/1"}), "is missing"),
        "nokey.json": (json.dumps({**doc, "key_fingerprint": None}), '"key_fingerprint" is null'),
        "deep.json": ("[" * 5000 + "]" * 5000, "nested more than 32 levels"),
    }
    for name, (content, says) in cases.items():
        (tmp_path / name).write_text(content, "utf-8")
        code, out, err = in_process("detect", "--regime", name, "--key-file", "k.key", "t.txt")
        assert code == 2 and out == "" and says in err, (name, code, err)
    assert in_process("detect", "--regime", "r.json", "--key-file", "k.key", "t.txt")[0] == 0


def test_user_caused_conditions_exit_2_not_3(tmp_path, in_process):
    """Every one of these once ended in 'internal error' (exit 3); each is the caller's to fix."""
    (tmp_path / "t.txt").write_text("Some text to score. " * 5, "utf-8")
    assert in_process("keygen", "--out", "k.key")[0] == 0
    (tmp_path / "deep.jsonl").write_text("[" * 10_000 + "]" * 10_000 + "\n", "utf-8")
    (tmp_path / "bigint.jsonl").write_text('{"z": 1' + "0" * 400 + "}\n" + '{"z": 1.0}\n', "utf-8")
    cases = [
        (["detect", "--key-file", "k.key", "--encoding", "rot13", "t.txt"], "not a text encoding"),
        (["detect", "--key-file", "k.key", "--encoding", "base64", "t.txt"], "not a text encoding"),
        (["detect", "--key-file", "k.key", "--max-bytes", str(2**64), "t.txt"], "--max-bytes"),
        (["detect", "--key-file", "k.key", ""], "an empty file name"),
        (["detect", "--key-file", "k.key", "x" * 300 + ".txt"], "cannot be read"),
        (["recalibrate", "--null", "deep.jsonl", "--alpha", "0.05"], "nested too deeply"),
        (["recalibrate", "--null", "bigint.jsonl", "--alpha", "0.05"], "an integer of 401 digits"),
        (["calibrate", "--n", "1" + "0" * 400, "--rho", "0.5", "--alpha", "0.01"], "beyond any text"),
        (["keygen", "--out", "c.key", "--from-master", "k.key", "--context", "\udcff\udcfe"], "must be text"),
    ]
    for args, says in cases:
        code, _, err = in_process(*args)
        assert code == 2 and says in err, (args[:3], code, err)


def test_a_fifo_is_refused_instead_of_blocking(tmp_path, in_process):
    assert in_process("keygen", "--out", "k.key")[0] == 0
    os.mkfifo(tmp_path / "pipe")  # no writer: opening it would block forever
    code, _, err = in_process("detect", "--key-file", "k.key", "pipe")
    assert code == 2 and "not a regular file" in err


def test_weak_keys_are_named_by_detect_and_refused_as_a_master(tmp_path, in_process):
    from chainmark.auditor.keyfiles import write_key_file
    from chainmark.keys import weak_key_reason

    (tmp_path / "t.txt").write_text("Some text to score. " * 5, "utf-8")
    for name, key in (("zeros.key", bytes(32)), ("password.key", b"passwordpassword"), ("spaces.key", b" " * 16)):
        write_key_file(tmp_path / name, key)
        assert weak_key_reason(key)
        code, _, err = in_process("detect", "--key-file", name, "--S", "5", "t.txt")
        assert code == 0 and "the key is weak" in err, name
        code, _, err = in_process("keygen", "--out", f"derived-{name}", "--from-master", name, "--context", "x/1")
        assert code == 2 and "weak master key" in err and not (tmp_path / f"derived-{name}").exists()
    assert in_process("keygen", "--out", "strong.key")[0] == 0
    assert "weak" not in in_process("detect", "--key-file", "strong.key", "--S", "5", "t.txt")[2]


def _wait_until_blocked(pid: int, timeout: float = 120.0) -> None:
    """Return once the process has stopped using CPU for a second (it waits on its standard input)."""
    import time

    def cpu() -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks

    start, last, still = time.monotonic(), -1, 0
    while time.monotonic() - start < timeout:
        now = cpu()
        still = still + 1 if now == last else 0
        if still >= 4 and now > 0:
            return
        last = now
        time.sleep(0.25)
    raise AssertionError("the command never settled into waiting for its input")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_end_a_run_with_a_message(tmp_path, signame):
    import signal

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert shell(f"{CLI} keygen --out k.key", tmp_path).returncode == 0
    # standard input that never ends keeps the command waiting, as a long run would
    proc = subprocess.Popen([sys.executable, "-m", "chainmark.cli", "detect", "--key-file", "k.key", "-"],
                            cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_until_blocked(proc.pid)  # past the imports (a signal during them would end Python before main runs)
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + getattr(signal, signame) and f"stopped by {signame}" in err, (proc.returncode, err)


def test_regime_records_how_a_threshold_was_fitted(tmp_path, in_process):
    import json

    assert in_process("keygen", "--out", "k.key")[0] == 0
    code, _, err = in_process("regime", "--key-file", "k.key", "--S", "5", "--alpha", "0.01", "--threshold", "2.0")
    assert code == 2 and "lies below z_alpha" in err
    code, out, err = in_process("regime", "--key-file", "k.key", "--S", "5", "--alpha", "0.01", "--threshold", "2.0",
                                "--recalibrated", "quantile:412")
    assert code == 0 and json.loads(out)["recalibration"] == {"method": "quantile", "n_null": 412}, err
    assert in_process("regime", "--key-file", "k.key", "--S", "5", "--alpha", "0.01", "--recalibrated", "median:3")[0] == 2

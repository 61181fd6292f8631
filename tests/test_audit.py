"""The corpus audit (chainmark.auditor.corpus, `chainmark audit`): every input kind, the same rows on one process and
on a Dask cluster, resuming, q-values, clear errors, and a key that never shows in task names or logs."""
from __future__ import annotations

import base64
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import false_discovery_control

from chainmark import cli
from cmlab.harness import reference
from chainmark.auditor.corpus_input import AuditError, CorpusReading
from chainmark.auditor.corpus import AuditExecution, parts_folder, read_audit, run_audit
from chainmark.detection import detect_text
from chainmark.config import ChainMarkConfig
from chainmark.auditor.keyfiles import write_key_file
from chainmark.keys import key_fingerprint
from chainmark.auditor.regime import Regime
from chainmark.auditor.tokenizer import load_tokenizer
from chainmark.cli.common import EXIT_USAGE

ROOT = Path(__file__).resolve().parents[1]
KEY = reference.reference_key()  # the reference texts' key: ChainMark's replies are watermarked under it
READING = CorpusReading(id_field="id", batch_docs=50)  # JSON Lines with an "id" field, 50 documents a batch


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    """A mixed corpus: the reference replies of every method (ChainMark's watermarked under KEY) and an empty one."""
    records = reference.load_texts("head_to_head")
    rng = np.random.default_rng(0)
    chosen = [records[i] for i in rng.choice(len(records), 240, replace=False)]
    out = [{"id": f"doc-{i:04d}", "text": r["output"], "method": r["method"]} for i, r in enumerate(chosen)]
    out.append({"id": "doc-empty", "text": "", "method": "none"})
    return out


def regime(test: str = "exact", **changes) -> Regime:
    return Regime(S=5, alpha=0.01, test=test, key_fingerprint=key_fingerprint(KEY), **changes)


def write_jsonl(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), "utf-8")
    return path


def test_rows_are_the_detectors_and_q_values_are_benjamini_hochberg(tmp_path, docs):
    source = write_jsonl(tmp_path / "c.jsonl", docs)
    summary = run_audit(source, tmp_path / "out.parquet", KEY, regime(), READING)
    rows = read_audit(tmp_path / "out.parquet")
    assert [r["doc_id"] for r in rows] == [d["id"] for d in docs]  # every document once, in corpus order
    tokenizer = load_tokenizer()
    for test in ("exact", "z", "distinct"):  # bit for bit the detector's numbers, whichever the test
        tested = rows if test == "exact" else read_audit(run_audit(
            source, tmp_path / f"out_{test}.jsonl", KEY, regime(test, n_min=20), READING).output)
        for row, doc in zip(tested, docs):
            ref = detect_text(doc["text"], tokenizer, ChainMarkConfig(KEY, S=5), alpha=0.01, test=test)
            assert (row["n_tokens"], row["n_transitions"], row["n_valid"]) == (ref.n_tokens, ref.n_scored, ref.n_hits)
            assert (row["phi"], row["z"], row["p_value"], row["test"]) == (ref.phi, ref.z, ref.p_value, test)
            n_min = 0 if test == "exact" else 20
            assert row["flagged"] == (ref.n_scored > 0 and ref.n_tokens >= n_min and ref.p_value < 0.01)
            ids = np.asarray(tokenizer(doc["text"], add_special_tokens=False)["input_ids"])
            pairs = set(zip(ids[:-1].tolist(), ids[1:].tolist()))
            assert row["repeated_pair_share"] == (0.0 if ids.size < 2 else 1 - len(pairs) / (ids.size - 1))
    judged = [r for r in rows if r["n_transitions"] > 0]  # the empty document is not judged: no q-value
    assert [r["doc_id"] for r in rows if r not in judged] == ["doc-empty"] and rows[-1]["q_value"] is None
    p = np.array([r["p_value"] for r in judged])
    assert np.array_equal([r["q_value"] for r in judged], false_discovery_control(p, method="bh"))
    assert summary.documents == len(docs) and summary.flagged == sum(r["flagged"] for r in rows)
    assert summary.discoveries == sum(r["q_value"] <= 0.01 for r in judged)
    assert (summary.fdr_documents, summary.below_n_min, summary.unscored) == (len(docs) - 1, 0, 1)
    # ChainMark's replies are the discoveries; the other methods' are not (the truth is in the corpus)
    marked = {d["id"] for d in docs if d["method"] == "chainmark"}
    found = {r["doc_id"] for r in judged if r["q_value"] <= 0.01}
    assert len(found & marked) >= 0.8 * len(marked) and len(found - marked) <= 2
    assert not parts_folder(tmp_path / "out.parquet").exists()  # the parts go once the output is complete


def test_every_input_kind_gives_the_same_rows(tmp_path, docs):
    docs = [d for d in docs if d["text"]][:120]
    write_jsonl(tmp_path / "c.jsonl", docs)
    (tmp_path / "pq").mkdir()
    for half, part in enumerate((docs[:70], docs[70:])):  # two files, several row groups each
        table = pa.table({"doc": [d["id"] for d in part], "body": [d["text"] for d in part]})
        pq.write_table(table, tmp_path / "pq" / f"part{half}.parquet", row_group_size=25)
    (tmp_path / "txt").mkdir()
    for d in docs:
        (tmp_path / "txt" / f"{d['id']}.txt").write_text(d["text"], "utf-8")
    a = run_audit(tmp_path / "c.jsonl", tmp_path / "a.jsonl", KEY, regime(),
                  CorpusReading(id_field="id", batch_docs=40))
    b = run_audit(tmp_path / "pq", tmp_path / "b.parquet", KEY, regime(),
                  CorpusReading(text_field="body", id_field="doc", batch_docs=40))
    c = run_audit(tmp_path / "txt", tmp_path / "c.parquet", KEY, regime(), CorpusReading(batch_docs=40))
    assert b.batches_scored == 5  # batches never span row groups: those of 25 rows are 3 of 70 rows, 2 of 50
    rows_a, rows_b = read_audit(tmp_path / "a.jsonl"), read_audit(tmp_path / "b.parquet")
    rows_c = {r["doc_id"].removesuffix(".txt"): r for r in read_audit(tmp_path / "c.parquet")}
    assert rows_a == rows_b
    assert all({k: v for k, v in rows_c[r["doc_id"]].items() if k != "doc_id"}
               == {k: v for k, v in r.items() if k != "doc_id"} for r in rows_a)
    assert a.documents == b.documents == c.documents == len(docs)


def test_a_local_dask_cluster_gives_the_single_process_rows(tmp_path, docs):
    source = write_jsonl(tmp_path / "c.jsonl", docs)
    run_audit(source, tmp_path / "one.parquet", KEY, regime("z"), CorpusReading(id_field="id", batch_docs=30))
    run_audit(source, tmp_path / "dask.parquet", KEY, regime("z"), CorpusReading(id_field="id", batch_docs=30),
              execution=AuditExecution(scheduler="local", workers=2))
    assert read_audit(tmp_path / "one.parquet") == read_audit(tmp_path / "dask.parquet")


def test_the_reading_and_the_execution_are_checked_by_name(tmp_path):
    """How the corpus is read is one CorpusReading, where the audit runs one AuditExecution; each is checked."""
    source = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "A plain sentence."}])
    with pytest.raises(AuditError, match="batch_docs must be a positive integer, got 0"):
        CorpusReading(batch_docs=0)
    with pytest.raises(TypeError, match="text_field must be a field name"):
        CorpusReading(text_field=3)
    with pytest.raises(TypeError, match="id_field must be a field name"):
        CorpusReading(id_field=["id"])
    with pytest.raises(ValueError, match="workers must be a positive integer or None, got 0"):
        AuditExecution(workers=0)
    with pytest.raises(TypeError, match="progress must be a callable"):
        AuditExecution(progress="yes")
    with pytest.raises(TypeError, match="scheduler must be None, 'local' or a scheduler's address"):
        AuditExecution(scheduler=8786)
    with pytest.raises(TypeError, match="reading must be a CorpusReading, got dict"):
        run_audit(source, tmp_path / "o.jsonl", KEY, regime(), {"id_field": "id"})
    with pytest.raises(TypeError, match="execution must be an AuditExecution, got str"):
        run_audit(source, tmp_path / "o.jsonl", KEY, regime(), execution="local")
    with pytest.raises(TypeError, match="settings must be a Regime"):
        run_audit(source, tmp_path / "o.jsonl", KEY, {"S": 5})
    assert CorpusReading() == CorpusReading("text", None, 1000) and AuditExecution().scheduler is None


def test_an_interrupted_audit_resumes_to_the_same_output(tmp_path, docs):
    source = write_jsonl(tmp_path / "c.jsonl", docs)
    run_audit(source, tmp_path / "whole.jsonl", KEY, regime(), CorpusReading(id_field="id", batch_docs=20))

    def stop_after_five(done, total):
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_audit(source, tmp_path / "cut.jsonl", KEY, regime(), CorpusReading(id_field="id", batch_docs=20),
                  execution=AuditExecution(progress=stop_after_five))
    parts = parts_folder(tmp_path / "cut.jsonl")
    assert len(list(parts.glob("part-*.json"))) == 5 and not (tmp_path / "cut.jsonl").exists()
    (parts / "part-0000007.json.tmp4242").write_text('{"half": ')  # a part being written when the run was killed
    (parts / ".part-0000007.json.tmp4242").write_text('{"half": ')  # the name jsonio.atomic_write gives it
    summary = run_audit(source, tmp_path / "cut.jsonl", KEY, regime(), CorpusReading(id_field="id", batch_docs=20))
    assert summary.batches_resumed == 5 and summary.batches_scored == math.ceil(len(docs) / 20) - 5
    assert (tmp_path / "cut.jsonl").read_text() == (tmp_path / "whole.jsonl").read_text()
    # parts of another audit (another key, test or batch size) are never mixed in
    with pytest.raises(KeyboardInterrupt):
        run_audit(source, tmp_path / "mix.jsonl", KEY, regime(), CorpusReading(id_field="id", batch_docs=20),
                  execution=AuditExecution(progress=stop_after_five))
    with pytest.raises(AuditError, match="parts of another audit"):
        run_audit(source, tmp_path / "mix.jsonl", KEY, regime("z"), CorpusReading(id_field="id", batch_docs=20))


def test_a_killed_command_resumes_to_the_same_output(tmp_path, docs):
    """SIGKILL in the middle of `chainmark audit`, then the same command again: the output of one clean run."""
    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    source = write_jsonl(tmp_path / "c.jsonl", docs * 15)  # 3,615 documents, 181 batches of 20
    args = [sys.executable, "-m", "chainmark.cli", "audit", str(source), "--key-file", str(key), "--batch-docs", "20",
            "--scheduler", "none", "--json"]
    clean = subprocess.run(args + ["--out", str(tmp_path / "clean.jsonl")], capture_output=True, text=True, cwd=ROOT)
    assert clean.returncode == 0, clean.stderr
    parts = parts_folder(tmp_path / "killed.jsonl")
    proc = subprocess.Popen(args + ["--out", str(tmp_path / "killed.jsonl")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(parts.glob("part-*.json"))) < 10 and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if (tmp_path / "killed.jsonl").exists():
        pytest.skip("the audit finished before it could be killed")
    resumed = subprocess.run(args + ["--out", str(tmp_path / "killed.jsonl")], capture_output=True, text=True, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["batches_resumed"] >= 10
    assert (tmp_path / "killed.jsonl").read_text() == (tmp_path / "clean.jsonl").read_text()


def test_the_key_never_appears_in_task_names_or_logs(tmp_path, docs):
    from distributed import Client, LocalCluster

    source = write_jsonl(tmp_path / "c.jsonl", docs)
    secrets = [KEY.hex(), KEY.hex().upper(), base64.b64encode(KEY).decode(), base64.urlsafe_b64encode(KEY).decode(),
               repr(KEY), str(list(KEY))]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.get_task_stream()  # start recording the task stream (what the dashboard draws from)
        start = time.time()
        run_audit(source, tmp_path / "out.parquet", KEY, regime(), CorpusReading(id_field="id", batch_docs=30),
                  execution=AuditExecution(scheduler=cluster.scheduler_address))
        stream = client.get_task_stream(start=start)
        names = [str(task["key"]) for task in stream]
        logs = json.dumps([client.get_scheduler_logs(), client.get_worker_logs()], default=str)
        events = json.dumps(client.run_on_scheduler(lambda dask_scheduler: dict(dask_scheduler.get_events())),
                            default=str)
        plugins = repr(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins)))
    assert names and all(name.startswith("chainmark-audit-") for name in names)
    text = "\n".join(names) + logs + events + plugins
    assert not any(secret in text for secret in secrets)


def test_clear_errors_exit_2(tmp_path, capsys, docs):
    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    good = write_jsonl(tmp_path / "c.jsonl", docs[:10])
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": 42}\n', "utf-8")
    (tmp_path / "notjson.jsonl").write_text('{"text": "fine"}\nnot json\n', "utf-8")
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "a.txt").write_bytes(b"caf\xe9")
    (tmp_path / "exists.parquet").write_text("")
    cases = [
        ([str(good), "--text-field", "body"], "line 1: no field 'body'"),
        ([str(tmp_path / "bad.jsonl")], "line 2: field 'text' is not text"),
        ([str(tmp_path / "notjson.jsonl")], "line 2: not a JSON object"),
        ([str(tmp_path / "txt")], "a.txt is not UTF-8 text"),
        ([str(tmp_path / "missing.jsonl")], "does not exist"),
        ([str(tmp_path / "c.csv")], "does not exist"),
    ]
    for number, (extra, says) in enumerate(cases):
        out = tmp_path / f"o{number}.parquet"
        code = cli.main(["audit", *extra, "--key-file", str(key), "--scheduler", "none", "--out", str(out)])
        err = capsys.readouterr().err
        assert code == EXIT_USAGE and says in err, (extra, err)
    code = cli.main(["audit", str(good), "--key-file", str(key), "--scheduler", "none", "--out",
                     str(tmp_path / "exists.parquet")])
    assert code == EXIT_USAGE and "refusing to overwrite" in capsys.readouterr().err
    code = cli.main(["audit", str(good), "--key-file", str(key), "--scheduler", "none", "--out",
                     str(tmp_path / "x.csv")])
    assert code == EXIT_USAGE and ".parquet or .jsonl" in capsys.readouterr().err


def test_the_command_applies_a_published_regime(tmp_path, capsys, docs):
    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    source = write_jsonl(tmp_path / "c.jsonl", docs)
    assert cli.main(["regime", "--key-file", str(key), "--S", "5", "--alpha", "0.01", "--test", "z",
                     "--threshold", "4.0", "--trades-fpr-for-power", "--n-min", "60",
                     "--out", str(tmp_path / "r.json")]) == 0
    capsys.readouterr()
    code = cli.main(["audit", str(source), "--id-field", "id", "--regime", str(tmp_path / "r.json"), "--key-file",
                     str(key), "--scheduler", "none", "--json", "--out", str(tmp_path / "o.jsonl")])
    summary = json.loads(capsys.readouterr().out)
    rows = read_audit(tmp_path / "o.jsonl")
    assert code == 0 and summary["test"] == "z" and summary["documents"] == len(docs)
    assert all(r["flagged"] == (r["z"] > 4.0 and r["n_tokens"] >= 60) for r in rows)  # its threshold and n_min
    other = tmp_path / "other.key"
    write_key_file(other, bytes(range(1, 33)))
    code = cli.main(["audit", str(source), "--regime", str(tmp_path / "r.json"), "--key-file", str(other),
                     "--scheduler", "none", "--out", str(tmp_path / "o2.jsonl")])
    assert code == EXIT_USAGE and "fingerprint" in capsys.readouterr().err


def test_the_audit_runs_in_the_model_free_install(tmp_path, docs):
    """`chainmark audit` in an interpreter where torch, transformers and pandas cannot be imported."""
    from test_architecture import _core_python

    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    source = write_jsonl(tmp_path / "c.jsonl", docs[:60])
    code = "from chainmark.cli import main\nraise SystemExit(main(sys.argv[1:]))"
    proc = _core_python(code, "audit", str(source), "--key-file", str(key), "--scheduler", "none", "--out",
                        str(tmp_path / "o.parquet"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(read_audit(tmp_path / "o.parquet")) == 60


def test_long_documents_are_scored_in_pieces_with_the_same_rows(tmp_path, docs, monkeypatch):
    import chainmark.auditor.corpus as audit

    source = write_jsonl(tmp_path / "c.jsonl", docs[:40])
    run_audit(source, tmp_path / "whole.jsonl", KEY, regime("distinct"), CorpusReading(id_field="id", batch_docs=15))
    monkeypatch.setattr(audit, "PIECE_CHARS", 300)  # most replies are now "long": scored by chainmark.auditor.stream
    run_audit(source, tmp_path / "pieces.jsonl", KEY, regime("distinct"), CorpusReading(id_field="id", batch_docs=15))
    assert (tmp_path / "pieces.jsonl").read_text() == (tmp_path / "whole.jsonl").read_text()


def _marked_short_corpus(docs: list[dict]) -> tuple[list[dict], dict, int]:
    """Unwatermarked replies, one ChainMark reply with a p-value far below alpha, and the empty document; the
    n_min that puts that reply just below the floor."""
    tokenizer = load_tokenizer()
    plain = [d for d in docs if d["method"] not in ("chainmark", "none")][:60]
    scored = [(detect_text(d["text"], tokenizer, ChainMarkConfig(KEY, S=5), alpha=0.01, test="exact"), d)
              for d in docs if d["method"] == "chainmark"]
    result, short = min(((r, d) for r, d in scored if r.p_value < 1e-4), key=lambda rd: rd[0].n_tokens)
    return plain + [short, docs[-1]], short, result.n_tokens + 1


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_documents_below_n_min_never_enter_the_fdr_step(tmp_path, docs, suffix):
    corpus, short, n_min = _marked_short_corpus(docs)
    source = write_jsonl(tmp_path / "c.jsonl", corpus)
    summary = run_audit(source, tmp_path / f"out{suffix}", KEY, regime(n_min=n_min),
                        CorpusReading(id_field="id", batch_docs=25))
    rows = read_audit(tmp_path / f"out{suffix}")
    row = next(r for r in rows if r["doc_id"] == short["id"])
    judged = [r for r in rows if r["n_tokens"] >= n_min and r["n_transitions"] > 0]
    p_all = np.array([r["p_value"] for r in rows])
    # the construction: with every p-value in the step, the short watermarked reply would be a discovery
    assert row["p_value"] < 1e-4 and false_discovery_control(p_all, method="bh")[rows.index(row)] <= 0.01
    # reported, never judged: its p-value kept, no flag, no q-value, not counted
    assert row["n_tokens"] == n_min - 1 and row["q_value"] is None and not row["flagged"]
    assert all(r["q_value"] is None for r in rows if r not in judged) and len(rows) - len(judged) >= 2
    # the others' q-values are Benjamini-Hochberg on their p-values alone
    p = np.array([r["p_value"] for r in judged])
    assert np.array_equal([r["q_value"] for r in judged], false_discovery_control(p, method="bh"))
    assert summary.discoveries == sum(r["q_value"] <= 0.01 for r in judged)
    assert summary.fdr_documents == len(judged) and summary.fdr_refused is None
    assert summary.below_n_min == sum(r["n_tokens"] < n_min for r in rows) and summary.unscored == 0
    text = "\n".join(summary.lines())
    assert f"FDR step: {len(judged):,} documents entered it" in text
    assert f"{summary.below_n_min:,} below n_min = {n_min} tokens" in text


def test_a_z_regime_off_z_alpha_computes_no_q_values_and_says_why(tmp_path, docs, capsys):
    from chainmark.auditor.corpus import _fdr_refusal

    source = write_jsonl(tmp_path / "c.jsonl", docs[:80])
    za = regime("z").z_alpha
    recalibrated = regime("z", threshold=3.1, recalibration={"method": "sd", "n_null": 500}, n_min=20)
    summary = run_audit(source, tmp_path / "r.parquet", KEY, recalibrated,
                        CorpusReading(id_field="id", batch_docs=30))
    rows = read_audit(tmp_path / "r.parquet")
    assert all(r["q_value"] is None for r in rows) and summary.discoveries is None and summary.fdr_documents == 0
    assert all(r["flagged"] == (r["z"] > 3.1 and r["n_tokens"] >= 20) for r in rows)  # the regime's own decisions
    assert "recalibrated on a null corpus by the sd recipe" in summary.fdr_refused
    assert "--test exact" in summary.fdr_refused
    text = "\n".join(summary.lines())
    assert "discoveries at FDR 0.01: not computed" in text and "FDR step: no document entered it" in text
    # any threshold other than z_alpha, recalibrated or not, distinct pairs too; z_alpha itself, unset, or the
    # exact test: q-values as usual
    for settings in (regime("z", threshold=2.0, trades_fpr_for_power=True), regime("distinct", threshold=4.0)):
        assert _fdr_refusal(settings) is not None
    for settings in (regime("z"), regime("z", threshold=za), regime("distinct", threshold=za), regime("exact")):
        assert _fdr_refusal(settings) is None
    plain = run_audit(source, tmp_path / "z.jsonl", KEY, regime("z", threshold=za, n_min=20),
                      CorpusReading(id_field="id", batch_docs=30))
    rows = read_audit(tmp_path / "z.jsonl")
    judged = [r for r in rows if r["n_tokens"] >= 20 and r["n_transitions"] > 0]
    p = np.array([r["p_value"] for r in judged])
    assert np.array_equal([r["q_value"] for r in judged], false_discovery_control(p, method="bh"))
    assert plain.fdr_refused is None and plain.discoveries == sum(r["q_value"] <= 0.01 for r in judged)
    # the command line's summary, as JSON: null discoveries and the reason
    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    code = cli.main(["audit", str(source), "--id-field", "id", "--key-file", str(key), "--test", "z",
                     "--threshold", "3.1", "--scheduler", "none", "--json", "--out", str(tmp_path / "cli.jsonl")])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["discoveries"] is None and "--test exact" in out["fdr_refused"]


def test_the_audit_reports_segments_per_document(tmp_path, docs):
    """--segments: each document's spans by the window scan, the same on one process as detect_segments says."""
    from chainmark.config import ChainMarkConfig
    from chainmark.randomisation import key_seed
    from chainmark.auditor.segments import detect_segments

    source = write_jsonl(tmp_path / "c.jsonl", docs[:60])
    run_audit(source, tmp_path / "out.jsonl", KEY, regime(), CorpusReading(id_field="id", batch_docs=25),
              segments=199)
    rows = read_audit(tmp_path / "out.jsonl")
    tokenizer = load_tokenizer()
    marked = [r for r, d in zip(rows, docs[:60]) if d["method"] == "chainmark"]
    assert marked and all(json.loads(r["segments"]) for r in marked if r["p_value"] < 1e-6)
    for r, d in list(zip(rows, docs[:60]))[:12]:
        if not d["text"]:
            continue
        ids = tokenizer(d["text"], add_special_tokens=False)["input_ids"]
        expect = detect_segments(ids, ChainMarkConfig(KEY, S=5), alpha=0.01, draws=199,
                                 seed=key_seed(KEY, d["id"]))
        assert json.loads(r["segments"]) == [[s.start, s.end, s.p_value] for s in expect.segments]
        assert r["segments_p_value"] == expect.p_value
    run_audit(source, tmp_path / "out.parquet", KEY, regime(), CorpusReading(id_field="id", batch_docs=25),
              segments=199)
    assert [r["segments"] for r in read_audit(tmp_path / "out.parquet")] == [r["segments"] for r in rows]
    with pytest.raises(AuditError, match="at least 99"):
        run_audit(source, tmp_path / "bad.jsonl", KEY, regime(), segments=50)
    key = tmp_path / "k.key"
    write_key_file(key, KEY)
    code = cli.main(["audit", str(source), "--id-field", "id", "--key-file", str(key), "--scheduler", "none",
                     "--segments", "199", "--out", str(tmp_path / "cli.jsonl")])
    assert code == 0 and [r["segments"] for r in read_audit(tmp_path / "cli.jsonl")] == [r["segments"] for r in rows]


def test_score_many_is_the_detector_on_each_text_under_one_config():
    """The audit's vectorised scorer gives, text by text, the numbers ``detect`` gives under the same
    configuration, for every test (texts of 0, 1 and many tokens, repeats included); a bare key is refused."""
    from chainmark.auditor.corpus import score_many
    from chainmark.detection import detect

    rng = np.random.default_rng(11)
    texts = [rng.integers(0, 300, n) for n in (0, 1, 2, 40, 400)] + [np.tile(np.arange(7), 30)]
    config = ChainMarkConfig(KEY, S=7, topology="soft_cycle")
    for test in ("z", "distinct", "exact"):
        cols = score_many(texts, config, test, 300)
        for i, ids in enumerate(texts):
            if ids.size < 2:
                assert cols["n_transitions"][i] == 0
                continue
            r = detect(ids, config, test=test)
            assert (cols["n_transitions"][i], cols["n_valid"][i]) == (r.n_scored, r.n_hits)
            assert (cols["z"][i], cols["p_value"][i]) == (r.z, r.p_value)  # bit for bit
    with pytest.raises(TypeError, match="takes one ChainMarkConfig"):
        score_many(texts, KEY, "z", 300)

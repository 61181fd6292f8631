"""The resumable grid runner: interruption, truncated lines, settings checks, no keys in records."""
from __future__ import annotations

import base64
import dataclasses
import json
import zlib

import numpy as np
import pytest

from cmlab.harness import runner as R
from cmlab.harness import adapters as A
from cmlab.harness import runs as RS
from cmlab.harness import settings as ST
from cmlab.comparison.attacks import Substitution
from cmlab.comparison.baselines import KGWConfig
from chainmark.config import ChainMarkConfig
from chainmark.embed import Generation, Sampling
from cmlab.harness.options import GridOptions
from cmlab.harness.runs import RunControl
from chainmark.keys import key_fingerprint

V = 1000  # a small vocabulary keeps the KGW green lists cheap
KEY = bytes(range(7, 39))  # a test key (32 bytes); not the book key


class FakeTokenizer:
    """Only what the runner needs without a model: the vocabulary size."""

    def __len__(self) -> int:
        return V


def _generation(prompt, prompt_ids, ids, text, entropy, forced, gated=None):
    """A Generation as ``chainmark.generate`` returns it (no walk states: the fakes have no key)."""
    return Generation(prompt, list(ids), text, list(entropy), [0.0] * len(ids),
                      list(forced) if gated is None else list(gated), list(forced), None, None, list(prompt_ids))


def _fake_outputs(prompts, seed, n=24):
    """Deterministic 'generations': token ids from the prompt and the batch seed; the gate open everywhere,
    the watermark acting at about half the positions (``forced``, what a record's ``gated`` stores)."""
    out = []
    for p in prompts:
        rng = np.random.default_rng([zlib.crc32(p.encode()), seed])
        ids = rng.integers(0, V, size=n).tolist()
        out.append(_generation(p, [1, 2, 3], ids, " ".join(map(str, ids)), rng.random(n).tolist(),
                               [bool(b) for b in rng.random(n) < 0.5], gated=[True] * n))
    return out


class FakeChainMark(A.ChainMarkMethod):
    """The real ChainMark detector on fake generations."""

    calls = 0
    fail_on_call: int | None = None

    def generate(self, model, tokenizer, prompts, sampling):
        type(self).calls += 1
        if self.fail_on_call is not None and type(self).calls == self.fail_on_call:
            raise KeyboardInterrupt("simulated Colab disconnect")
        return _fake_outputs(prompts, sampling.seed)


class FakeKGW(A.KGWMethod):
    """The real KGW detector (transformers') on fake generations."""

    def generate(self, model, tokenizer, prompts, sampling):
        return _fake_outputs(prompts, sampling.seed + 1000)


class FakeNull(A.NoWatermark):
    def generate(self, model, tokenizer, prompts, sampling):
        return _fake_outputs(prompts, sampling.seed + 2000)


ITEMS = [(d, i, f"prompt {d} {i}") for d in ("wiki", "code") for i in range(5)]


def _methods():
    FakeChainMark.calls = 0
    FakeChainMark.fail_on_call = None
    return [FakeChainMark(ChainMarkConfig(KEY)), FakeKGW(KGWConfig(KEY)), FakeNull()]


def _run(path, methods=None, **kw):
    """The fake grid, run with ``kw``: Sampling's fields (batch_size 3 unless given) and GridOptions'."""
    sampling = {k: kw.pop(k) for k in [f.name for f in dataclasses.fields(Sampling)] if k in kw}
    sampling.setdefault("batch_size", 3)
    options = GridOptions(**{"self_ppl": False, "model_name": "fake", "progress": False, **kw})
    return R.run_grid(None, FakeTokenizer(), methods or _methods(), ITEMS, path,
                      attacks={"substitution_0.2": Substitution(0.2, V)}, sampling=Sampling(**sampling),
                      options=options)


def _strip(records):
    return sorted((json.dumps({k: v for k, v in r.items() if k != "seconds"}, sort_keys=True)
                   for r in records))


def test_full_run_writes_one_record_per_method_and_prompt(tmp_path):
    run = _run(tmp_path / "a")
    assert (run.written, run.skipped, run.total) == (30, 0, 30)
    ids = [r["id"] for r in run.records]
    assert len(set(ids)) == 30
    rec = next(r for r in run.records if r["method"] == "chainmark")
    for field in ("prompt", "output", "gate_signal", "gated", "rho_realised", "self_ppl", "detection",
                  "attacks"):
        assert field in rec
    assert set(rec["detection"]) == {"chainmark"}
    assert {"phi", "z", "decision", "edit_fraction"} <= set(rec["attacks"]["substitution_0.2"])
    null = next(r for r in run.records if r["method"] == "none")
    assert set(null["detection"]) == {"chainmark", "kgw"} and null["attacks"] == {}
    # the record's generation fields are the Generation's, its gated the flags where the watermark acted
    gen = _fake_outputs([rec["prompt"]], Sampling().seed + rec["batch"])[0]
    assert (rec["token_ids"], rec["prompt_ids"], rec["output"]) == (gen.token_ids, gen.prompt_ids, gen.text)
    assert rec["gate_signal"] == [round(h, 4) for h in gen.entropy]
    assert rec["gated"] == [int(f) for f in gen.forced] != [int(f) for f in gen.gated]
    assert rec["rho_realised"] == gen.rho_realised == np.mean(gen.forced)
    # a rerun does nothing
    again = _run(tmp_path / "a")
    assert (again.written, again.skipped) == (0, 30)
    assert len(RS.read_records(tmp_path / "a")) == 30


def test_resume_after_stop_matches_an_uninterrupted_run(tmp_path):
    reference = _run(tmp_path / "ref")
    first = _run(tmp_path / "b", stop_after=7)
    assert first.interrupted and first.written == 7 and len(first.records) == 7
    second = _run(tmp_path / "b")
    assert second.written == 23 and second.skipped == 7
    assert _strip(second.records) == _strip(reference.records)


def test_resume_after_an_exception_mid_run(tmp_path):
    methods = _methods()
    FakeChainMark.fail_on_call = 3  # dies while generating the third ChainMark batch
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "c", methods=methods)
    survived = RS.read_records(tmp_path / "c")
    assert len(survived) == 2 * 3 * 3  # two full batches of three methods, nothing partial
    FakeChainMark.fail_on_call = None
    rest = _run(tmp_path / "c", methods=methods)
    assert rest.written == 30 - len(survived)
    assert _strip(rest.records) == _strip(_run(tmp_path / "ref2").records)


def test_truncated_last_line_is_ignored_then_repaired(tmp_path):
    _run(tmp_path / "d", stop_after=4)
    file = tmp_path / "d" / RS.RECORDS_FILE
    good = file.read_bytes()
    file.write_bytes(good + b'{"id": "kgw/wiki/0003", "out')  # a write cut by a crash
    assert len(RS.read_records(file)) == 4
    run = _run(tmp_path / "d")
    lines = file.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert len(run.records) == 30 and len({r["id"] for r in run.records}) == 30


def test_repair_and_read_edge_cases(tmp_path):
    f = tmp_path / "x.jsonl"
    assert RS.repair(f) == 0 and RS.read_records(f) == []
    f.write_bytes(b"no newline at all")
    assert RS.read_records(f) == []
    assert RS.repair(f) == len(b"no newline at all") and f.read_bytes() == b""
    f.write_bytes(b'{"a": 1}\nnot json\n{"b": 2}\n')
    with pytest.raises(ValueError, match="line 2"):
        RS.read_records(f)


def test_changed_settings_are_refused(tmp_path):
    _run(tmp_path / "e", stop_after=2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        _run(tmp_path / "e", max_new_tokens=64)
    other = [FakeChainMark(ChainMarkConfig(KEY, S=7)), FakeKGW(KGWConfig(KEY)), FakeNull()]
    with pytest.raises(ValueError, match="chainmark"):
        _run(tmp_path / "e", methods=other)


def test_token_attacks_are_seeded_per_record_id_not_per_batch_position():
    """Text k of every batch used to get the same edit positions; now the record id picks them."""
    from cmlab.comparison.attacks import Deletion

    ids = list(range(100, 140))  # equal length and distinct tokens: the deleted positions are exact

    def deleted(record_ids):
        outputs = [_generation("p", [1], ids, "", [0.0] * len(ids), [False] * len(ids)) for _ in record_ids]
        attacked, texts = R._attack_batch(Deletion(0.25), outputs, FakeTokenizer(), record_ids)
        assert texts is None and all(len(a) == 30 for a in attacked)
        return [tuple(sorted(set(ids) - set(a))) for a in attacked]

    rid = [R._record_id("chainmark", "wiki", i) for i in range(4)]
    batch0, batch1 = deleted(rid[:2]), deleted(rid[2:])
    assert batch0[0] != batch1[0] and batch0[1] != batch1[1]  # same position in two batches
    assert deleted([R._record_id("kgw", "wiki", 0)])[0] != batch0[0]  # same position, another method
    assert len(set(batch0 + batch1)) == 4
    # determinism: a rerun, another batch composition or order edits each record the same way
    assert deleted(rid[:2]) == batch0
    assert deleted([rid[3], rid[0], rid[2]]) == [batch1[1], batch0[0], batch1[0]]


def test_run_json_stores_the_attack_seeding_and_refuses_older_runs(tmp_path):
    from cmlab.comparison.attacks import RECORD_SEEDING

    _run(tmp_path / "s", stop_after=2)
    meta_file = tmp_path / "s" / RS.META_FILE
    meta = json.loads(meta_file.read_text())
    assert meta["attack_seeding"] == RECORD_SEEDING
    del meta["attack_seeding"]  # a run made before per-record attack seeds
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="attack_seeding.*seeded per record id"):
        _run(tmp_path / "s")


def _key_forms(key: bytes) -> list[bytes]:
    return [key, key.hex().encode(), key.hex().upper().encode(), base64.b64encode(key), repr(key)[2:-1].encode()]


def test_records_and_metadata_never_contain_the_key(tmp_path):
    _run(tmp_path / "f")
    secret_int = str(KGWConfig(KEY).hashing_key).encode()
    for name in (RS.RECORDS_FILE, RS.META_FILE):
        blob = (tmp_path / "f" / name).read_bytes()
        for form in _key_forms(KEY) + [secret_int]:
            assert form not in blob
    meta = json.loads((tmp_path / "f" / RS.META_FILE).read_text())
    assert meta["methods"]["chainmark"]["key_fingerprint"] == key_fingerprint(KEY)
    assert meta["methods"]["kgw"]["key_fingerprint"] == key_fingerprint(KEY)


def test_writer_refuses_a_line_with_a_key(tmp_path):
    with RS.RecordWriter(tmp_path / "g.jsonl", secrets=[KEY, 123456789012]) as w:
        w.write({"id": "ok", "value": 1})
        with pytest.raises(RuntimeError, match="secret"):
            w.write({"id": "bad", "note": KEY.hex()})
        with pytest.raises(RuntimeError, match="secret"):
            w.write({"id": "bad2", "seed": 123456789012})
    assert [r["id"] for r in RS.read_records(tmp_path / "g.jsonl")] == ["ok"]


def test_nan_becomes_null_and_frame_and_tpr(tmp_path):
    run = _run(tmp_path / "h")
    assert all(r["self_ppl"] is None for r in run.records)  # NaN (not computed) -> JSON null
    frame = run.frame()
    assert frame.equals(RS.records_frame(run.records))
    assert set(frame["condition"]) == {"clean", "substitution_0.2"}
    assert len(frame) == 10 * 2 * 2 + 10 * 2  # watermarked: clean + attack; null: two detectors
    table = R.tpr(frame, 2.326)
    assert set(table.index.get_level_values("method")) == {"chainmark", "kgw"}
    assert ((table >= 0) & (table <= 100)).all()
    # the fake texts carry no watermark, so the calibrated per-detector thresholds are accepted
    per = R.tpr(frame, {"chainmark": 100.0, "kgw": 100.0})
    assert (per == 0).all()


@pytest.mark.parametrize("bad, err", [
    (dict(batch_size=0), ValueError), (dict(stop_after=-1), ValueError), (dict(alpha=1.5), ValueError)])
def test_bad_arguments(tmp_path, bad, err):
    with pytest.raises(err):
        _run(tmp_path / "i", **bad)


def test_bad_items_and_methods(tmp_path):
    with pytest.raises(ValueError, match="twice"):
        R.run_grid(None, FakeTokenizer(), _methods(), ITEMS + ITEMS[:1], tmp_path,
                   options=GridOptions(self_ppl=False, progress=False, model_name="fake"))
    with pytest.raises(ValueError, match="unique"):
        R.run_grid(None, FakeTokenizer(), [FakeNull(), FakeNull()], ITEMS, tmp_path,
                   options=GridOptions(self_ppl=False, progress=False, model_name="fake"))
    with pytest.raises(TypeError, match="triples"):
        R.run_grid(None, FakeTokenizer(), _methods(), ["just a prompt"], tmp_path,
                   options=GridOptions(self_ppl=False, progress=False, model_name="fake"))


def test_default_runs_dir(monkeypatch, tmp_path):
    monkeypatch.setenv(ST.RUNS_ENV, str(tmp_path / "elsewhere"))
    assert ST.default_runs_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv(ST.RUNS_ENV)
    (tmp_path / "_toc.yml").write_text("root: x\n")
    (tmp_path / "book").mkdir()
    monkeypatch.chdir(tmp_path / "book")
    assert ST.default_runs_dir() == tmp_path.resolve() / "runs"


@pytest.mark.slow
def test_real_grid_on_the_embedded_model(model_and_tokenizer, tmp_path):
    """All four methods through the runner on the real model (tiny), resumed once."""
    from cmlab.comparison.baselines import SweetConfig
    from chainmark.gates import Gate

    model, tok = model_and_tokenizer
    gate = Gate("high_entropy", 1.5, rho=0.5)  # a fixed threshold, its share stated for the test
    methods = [A.ChainMarkMethod(ChainMarkConfig(KEY), gate), A.KGWMethod(KGWConfig(KEY)),
               A.SweetMethod(SweetConfig(KEY, gate)), A.NoWatermark()]
    items = [("factual", 0, "What is the capital of Japan?"), ("wiki", 0, "Explain entropy in a comprehensive way.")]
    kw = dict(attacks={"substitution_0.2": Substitution(0.2, 49152)},
              sampling=Sampling(max_new_tokens=16, batch_size=2))
    first = R.run_grid(model, tok, methods, items, tmp_path,
                       options=GridOptions(model_name="embedded", progress=False, stop_after=3), **kw)
    assert first.written == 3
    run = R.run_grid(model, tok, methods, items, tmp_path, options=GridOptions(model_name="embedded", progress=False),
                     **kw)
    assert run.written == 5 and len(run.records) == 8
    for r in run.records:
        assert r["self_ppl"] is None or r["self_ppl"] >= 1.0
        assert len(r["gate_signal"]) == len(r["gated"]) == r["n_tokens"]
    null = next(r for r in run.records if r["method"] == "none")
    assert set(null["detection"]) == {"chainmark", "kgw", "sweet"}
    kgw = next(r for r in run.records if r["method"] == "kgw")
    assert all(kgw["gated"]) and kgw["rho_realised"] == 1.0
    sweet = next(r for r in run.records if r["method"] == "sweet")
    signal = np.array(sweet["gate_signal"])
    clear = np.abs(signal - gate.tau) > 1e-3  # the stored signal is rounded to 4 decimals
    assert np.array_equal(np.array(sweet["gated"], dtype=bool)[clear], (signal > gate.tau)[clear])
    blob = (tmp_path / RS.RECORDS_FILE).read_bytes()
    for form in _key_forms(KEY):
        assert form not in blob


def test_stored_gate_is_calibrated_once_then_read_back(tmp_path):
    from chainmark.gates import Gate

    calls = []

    def calibrate():
        calls.append(1)
        return Gate("high_entropy", 1.2345678901234567)

    first = RS.stored_gate(tmp_path, calibrate)
    second = RS.stored_gate(tmp_path, lambda: Gate("high_entropy", 9.0))
    assert first == second == Gate("high_entropy", 1.2345678901234567)  # exact float round trip
    assert len(calls) == 1
    with pytest.raises(TypeError):
        RS.stored_gate(tmp_path / "other", lambda: 1.5)


# --------------------------------------------------------------------------- generate_resumable

RESUME_PROMPTS = ["Name a colour.", "Say hello in French.", "What is 2 + 2?", "Name a river.",
                  "Give one word for happy."]


def _same(a, b) -> bool:
    return [(g.prompt, g.token_ids, g.states, g.forced) for g in a] == \
           [(g.prompt, g.token_ids, g.states, g.forced) for g in b]


@pytest.mark.slow
def test_generate_resumable_resumes_to_the_uninterrupted_result(model_and_tokenizer, tmp_path):
    from chainmark.embed import generate

    from chainmark.gates import Gate

    model, tok = model_and_tokenizer
    cfg = ChainMarkConfig(KEY, S=5, gate="high_entropy", rho=0.5)
    gate = Gate("high_entropy", 1.5, rho=0.5)  # a fixed threshold (share stated): sampled and forced steps occur
    how = Sampling(max_new_tokens=10, min_new_tokens=10, batch_size=2)
    direct = generate(model, tok, RESUME_PROMPTS, cfg, gate, sampling=how)
    assert any(not f for g in direct for f in g.forced), "no sampled step: the seeds would go untested"

    folder = tmp_path / "gen"
    first = R.generate_resumable(folder, model, tok, RESUME_PROMPTS, cfg, gate, sampling=how,
                                 control=RunControl(stop_after=1, progress=False))
    assert [g.prompt for g in first] == RESUME_PROMPTS[:2]
    with open(folder / RS.RECORDS_FILE, "a") as fh:  # a crash in the middle of the next line
        fh.write('{"index": 2, "prompt": "Wha')
    resumed = R.generate_resumable(folder, model, tok, RESUME_PROMPTS, cfg, gate, sampling=how,
                                   control=RunControl(progress=False))
    assert _same(resumed, direct)
    indices = [r["index"] for r in RS.read_records(folder)]
    assert sorted(indices) == list(range(len(RESUME_PROMPTS))) and len(set(indices)) == len(indices)
    # a finished run is read back without generating again, NaN-free floats intact
    again = R.generate_resumable(folder, None, tok, RESUME_PROMPTS, cfg, gate, sampling=how,
                                 control=RunControl(progress=False))
    assert _same(again, direct)
    assert np.allclose(again[0].entropy, direct[0].entropy, equal_nan=True)
    blob = b"".join(p.read_bytes() for p in folder.iterdir())
    assert KEY not in blob and KEY.hex().encode() not in blob
    assert key_fingerprint(KEY).encode() in blob


@pytest.mark.slow
def test_generate_resumable_refuses_to_mix_settings_or_prompts(model_and_tokenizer, tmp_path):
    model, tok = model_and_tokenizer
    cfg = ChainMarkConfig(KEY, S=5, gate="all", rho=1.0)
    folder = tmp_path / "gen"
    R.generate_resumable(folder, model, tok, RESUME_PROMPTS[:2], cfg,
                         sampling=Sampling(batch_size=2, max_new_tokens=6),
                         control=RunControl(progress=False))
    with pytest.raises(ValueError, match="other settings"):
        R.generate_resumable(folder, model, tok, RESUME_PROMPTS[:2], ChainMarkConfig(KEY, S=7, gate="all", rho=1.0),
                             sampling=Sampling(batch_size=2, max_new_tokens=6), control=RunControl(progress=False))
    with pytest.raises(ValueError, match="other settings"):
        R.generate_resumable(folder, model, tok, RESUME_PROMPTS[:2], cfg,
                             sampling=Sampling(batch_size=2, max_new_tokens=8),
                             control=RunControl(progress=False))
    with pytest.raises(ValueError, match="not this run's prompt"):
        R.generate_resumable(folder, model, tok, RESUME_PROMPTS[2:4], cfg,
                             sampling=Sampling(batch_size=2, max_new_tokens=6),
                             control=RunControl(progress=False))


def test_a_whole_configuration_names_the_same_texts_as_its_config_and_gate_apart():
    """``generate_once`` finds the texts of ``(config, gate)`` again when asked with ``config.with_gate(gate)``
    (they are the same texts), and tells another threshold apart."""
    from chainmark.gates import Gate

    gate = Gate("high_entropy", 1.5, rho=0.5)
    config = ChainMarkConfig(KEY, S=5, rho=0.5)
    apart, whole = R._watermark_and_gate(config, gate), R._watermark_and_gate(config.with_gate(gate), None)
    assert apart == whole and whole[1] == gate and "tau" not in whole[0]
    other = R._watermark_and_gate(config.with_gate(Gate("high_entropy", 1.6, rho=0.5)), None)
    assert other[1] != gate and R._watermark_and_gate(None, None) == (None, None)


@pytest.mark.slow
def test_generate_once_generates_once_and_tells_other_settings_apart(model_and_tokenizer, tmp_path, monkeypatch):
    from chainmark.embed import generate
    from chainmark.gates import Gate

    model, tok = model_and_tokenizer
    cfg = ChainMarkConfig(KEY, S=5, gate="high_entropy", rho=0.5)
    gate = Gate("high_entropy", 1.5, rho=0.5)
    how = Sampling(max_new_tokens=6, min_new_tokens=6, batch_size=2)
    direct = generate(model, tok, RESUME_PROMPTS[:3], cfg, gate, sampling=how)
    first = R.generate_once(model, tok, RESUME_PROMPTS[:3], cfg, gate, runs_dir=tmp_path,
                            control=RunControl(progress=False), sampling=how)
    assert _same(first, direct)  # the texts one generate call makes

    def no_generation(*args, **kwargs):
        raise AssertionError("generated again")

    monkeypatch.setattr(R, "generate", no_generation)
    again = R.generate_once(model, tok, RESUME_PROMPTS[:3], cfg, gate, runs_dir=tmp_path,
                            control=RunControl(progress=False), sampling=how)
    assert _same(again, direct)  # read back, not generated
    assert len(list((tmp_path / R.SHARED_DIR).iterdir())) == 1
    # anything that changes the texts asks for another folder (and so generates)
    for other in (dict(config=ChainMarkConfig(KEY[::-1], S=5, gate="high_entropy", rho=0.5)),
                  dict(gate=Gate("high_entropy", 1.0, rho=0.5)), dict(sampling=dataclasses.replace(how, max_new_tokens=7)),
                  dict(sampling=dataclasses.replace(how, seed=11)), dict(prompts=RESUME_PROMPTS[1:4])):
        args = {"config": cfg, "gate": gate, "prompts": RESUME_PROMPTS[:3], "sampling": how, **other}
        with pytest.raises(AssertionError, match="generated again"):
            R.generate_once(model, tok, runs_dir=tmp_path, control=RunControl(progress=False), **args)
    with pytest.raises(TypeError, match="extra_processors"):  # code, not settings: no folder can name it
        R.generate_once(model, tok, RESUME_PROMPTS[:1], extra_processors=[], runs_dir=tmp_path)
    with pytest.raises(TypeError, match="sequence of strings"):
        R.generate_once(model, tok, "one prompt", runs_dir=tmp_path)


def test_generate_resumable_validates_its_arguments(tmp_path):
    with pytest.raises(TypeError, match="sequence of strings"):
        R.generate_resumable(tmp_path, None, None, "one prompt")
    with pytest.raises(ValueError, match="batch_size"):
        R.generate_resumable(tmp_path, None, None, ["a"], sampling=Sampling(batch_size=0))
    with pytest.raises(ValueError, match="stop_after"):
        R.generate_resumable(tmp_path, None, None, ["a"], control=RunControl(stop_after=-1))


def test_generate_resumable_without_a_model_only_reads_a_finished_run(tmp_path):
    with pytest.raises(ValueError, match="model is None"):
        R.generate_resumable(tmp_path / "empty", None, None, ["a", "b"], sampling=Sampling(batch_size=1),
                             control=RunControl(progress=False))


class _FakeModel:
    """Stands in for a model: ``generate_resumable`` only reads its name."""

    class config:
        name_or_path = "fake-model"


def _fake_generate(calls):
    """A stand-in for ``chainmark.embed.generate``: deterministic texts per (prompt, seed); logs each batch."""
    from chainmark.embed import Generation

    def generate(model, tokenizer, prompts, config=None, gate=None, *, sampling):
        seed = sampling.seed
        calls.append((tuple(prompts), seed))
        out = []
        for p in prompts:
            ids = np.random.default_rng([zlib.crc32(p.encode()), seed]).integers(0, V, size=5).tolist()
            out.append(Generation(p, ids, p.upper(), [0.5, float("nan"), 1.0, 2.0, 0.1], [0.1] * 5,
                                  [True] * 5, [False] * 5, None, None, [1, 2], config=config))
        return out

    return generate


def test_generate_resumable_neither_loses_nor_duplicates_a_batch_cut_short(tmp_path, monkeypatch):
    """A batch whose first record reached the disk before a crash is regenerated; only the rest is written."""
    import chainmark.embed

    calls = []
    monkeypatch.setattr(R, "generate", _fake_generate(calls))
    prompts = [f"prompt {i}" for i in range(5)]
    whole = R.generate_resumable(tmp_path / "ref", _FakeModel(), None, prompts, sampling=Sampling(batch_size=2, seed=10),
                                 control=RunControl(progress=False))
    folder = tmp_path / "gen"
    first = R.generate_resumable(folder, _FakeModel(), None, prompts, sampling=Sampling(batch_size=2, seed=10),
                                 control=RunControl(stop_after=2, progress=False))
    assert [g.prompt for g in first] == prompts[:4]
    file = folder / RS.RECORDS_FILE
    lines = file.read_bytes().split(b"\n")
    file.write_bytes(b"\n".join(lines[:3]) + b"\n" + lines[3][:20])  # batch 1 cut after index 2, mid-line
    calls.clear()
    resumed = R.generate_resumable(folder, _FakeModel(), None, prompts, sampling=Sampling(batch_size=2, seed=10),
                                   control=RunControl(progress=False))
    assert calls == [(("prompt 2", "prompt 3"), 11), (("prompt 4",), 12)]  # seed 10 + batch index
    assert [r["index"] for r in RS.read_records(folder)] == [0, 1, 2, 3, 4]
    assert [(g.prompt, g.token_ids) for g in resumed] == [(g.prompt, g.token_ids) for g in whole]
    assert np.isnan(resumed[3].entropy[1])  # the record kept in memory reads like the one read back
    calls.clear()
    again = R.generate_resumable(folder, None, None, prompts, sampling=Sampling(batch_size=2, seed=10),
                                 control=RunControl(progress=False))
    assert calls == [] and [(g.prompt, g.token_ids) for g in again] == [(g.prompt, g.token_ids) for g in whole]


def test_a_generations_config_is_never_written_and_comes_back_with_the_run(tmp_path, monkeypatch):
    from chainmark.detection import detect

    monkeypatch.setattr(R, "generate", _fake_generate([]))
    cfg = ChainMarkConfig(KEY, S=5, gate="all", rho=1.0)
    made = R.generate_resumable(tmp_path, _FakeModel(), None, ["a", "b"], cfg, sampling=Sampling(batch_size=1),
                                control=RunControl(progress=False))
    records = RS.read_records(tmp_path)
    assert records and all("config" not in r for r in records)
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert KEY not in blob and KEY.hex().encode() not in blob
    again = R.generate_resumable(tmp_path, None, None, ["a", "b"], cfg, sampling=Sampling(batch_size=1),
                                 control=RunControl(progress=False))
    assert all(g.config is cfg for g in made + again)  # read back with the run's configuration
    assert detect(again[0], test="z").to_dict() == detect(again[0].token_ids, cfg, test="z").to_dict()


def test_generate_resumable_names_the_setting_that_changed(tmp_path, monkeypatch):
    import chainmark.embed

    monkeypatch.setattr(R, "generate", _fake_generate([]))
    R.generate_resumable(tmp_path, _FakeModel(), None, ["a", "b"], sampling=Sampling(batch_size=1, seed=10),
                         control=RunControl(progress=False))
    with pytest.raises(ValueError, match="other settings .seed = 10, not 11"):
        R.generate_resumable(tmp_path, _FakeModel(), None, ["a", "b"], sampling=Sampling(batch_size=1, seed=11),
                             control=RunControl(progress=False))
    # more prompts may join a run (n_prompts is not a setting), and are stored as the new count
    R.generate_resumable(tmp_path, _FakeModel(), None, ["a", "b", "c"], sampling=Sampling(batch_size=1, seed=10),
                         control=RunControl(progress=False))
    assert json.loads((tmp_path / RS.META_FILE).read_text())["n_prompts"] == 3
    assert len(RS.read_records(tmp_path)) == 3


def test_record_writer_returns_the_record_as_written(tmp_path):
    with RS.RecordWriter(tmp_path / "w.jsonl") as w:
        written = w.write({"id": "a", "x": np.float32(0.5), "y": float("inf"), "t": (1, 2)})
    assert written == {"id": "a", "x": 0.5, "y": None, "t": [1, 2]} == RS.read_records(tmp_path / "w.jsonl")[0]

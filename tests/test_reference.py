"""The reference run: its protocol, resumable batches, status, exact verification, the frames."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from cmlab.harness import reference as ref
from cmlab.harness.reference import compare as rcmp
from cmlab.harness.reference import store, verification
from cmlab.harness.reference.protocol import PROTOCOL, Protocol, cells

#: The suite verifies one committed batch drawn among those that regenerate at most this many tokens: 102 of the
#: 150 (explorer 16 x 128, and 25 x 200 without a paraphrase), about 25 to 55 s each on the 2-core machine by
#: the run's own provenance; a head-to-head batch with its paraphrases (25 x 520 tokens) takes 2 to 3 minutes.
SUITE_MAX_TOKENS = 5000

TINY = Protocol(n_per_domain=2, batch_size=2, max_new_tokens=12, paraphrase_tokens=24, domains=("factual", "wiki"),
                null_seeds=(1,), calibration_S=(2, 3), calibration_per_domain=1, kregular_k=(1, 2),
                kregular_prompts=2, explorer_S=(2,), explorer_rho=(0.5, 1.0), explorer_per_domain=1,
                explorer_tokens=10, pilot_per_domain=1, pilot_tokens=12)


def test_protocol_sizes_are_the_issue_s():
    count = {e: sum(c.n_texts for c in cells(PROTOCOL, (e,))) for e in ref.EXPERIMENTS}
    assert count["head_to_head"] == 4 * 100 * 4
    assert count["head_to_head"] // 4 + count["null"] >= 1000          # the null corpus
    assert all(c.n_texts >= 100 for c in cells(PROTOCOL, ("calibration", "kregular")))
    assert {c.name for c in cells(PROTOCOL, ("calibration",))} == {f"chainmark_S{S}" for S in (2, 3, 5, 8)}
    explorer = cells(PROTOCOL, ("explorer",))
    assert len(explorer) == 1 + 5 * 5 and all(c.n_texts >= 16 for c in explorer)
    assert PROTOCOL.max_new_tokens == 200 and (PROTOCOL.S, PROTOCOL.rho) == (5, 0.5)
    assert (PROTOCOL.kgw_gamma, PROTOCOL.kgw_delta, PROTOCOL.seed, PROTOCOL.attack_seed) == (0.5, 2.0, 42, 43)


def test_batches_are_domain_pure_round_robin_and_seeded_in_order():
    cell = cells(PROTOCOL, ("head_to_head",))[0]
    domains = [{d for d, _, _ in b.items} for b in cell.batches]
    assert all(len(d) == 1 for d in domains)
    assert [next(iter(d)) for d in domains[:4]] == list(PROTOCOL.domains)
    assert [b.seed for b in cell.batches] == [PROTOCOL.seed + b.index for b in cell.batches]
    seen = [(d, i) for b in cell.batches for d, i, _ in b.items]
    assert len(seen) == len(set(seen)) == 400
    null = cells(PROTOCOL, ("null",))
    seeds = {b.seed for c in [cell, *null] for b in c.batches}
    assert len(seeds) == len(cell.batches) * (1 + len(null))   # the null seeds never repeat a head-to-head seed


def test_the_key_is_derived_from_the_published_label():
    from chainmark.keys import hkdf

    assert ref.reference_key() == hkdf(ref.REFERENCE_LABEL.encode(), b"chainmark/v1/reference-key")
    assert len(ref.reference_key()) == 32


def test_unknown_experiment_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown experiment 'headtohead'"):
        cells(PROTOCOL, ("headtohead",))
    with pytest.raises(ValueError, match="unknown reference experiment"):
        ref.load_frame("nope", tmp_path)


def test_status_of_an_empty_folder_lists_everything_missing(tmp_path):
    rows = ref.status(tmp_path)
    assert rows and not any(r["complete"] or r["texts"] for r in rows)
    assert {r["experiment"] for r in rows} == set(ref.EXPERIMENTS)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, model_and_tokenizer):
    """A whole (tiny) reference: interrupted after 3 batches, then resumed to the end."""
    model, tok = model_and_tokenizer
    root = tmp_path_factory.mktemp("reference")
    first = ref.run(model, tok, root=root, protocol=TINY, stop_after=3, progress=False, model_name="tiny-test")
    partial = ref.status(root, TINY)
    second = ref.run(model, tok, root=root, protocol=TINY, progress=False, model_name="tiny-test")
    return root, first, partial, second


@pytest.mark.slow
def test_a_stopped_run_resumes_and_completes(tiny_run):
    root, first, partial, second = tiny_run
    assert first["written"] == 3 and sum(r["batches"] for r in partial) == 3
    assert second["skipped"] == 3 and second["written"] == first["total"] - 3
    rows = ref.status(root, TINY)
    assert all(r["complete"] for r in rows)
    manifest = json.loads((root / ref.MANIFEST).read_text())
    assert manifest["protocol"] == TINY.describe() and manifest["key_label"] == ref.REFERENCE_LABEL
    prov = [json.loads(line) for line in (root / "head_to_head" / "chainmark" / ref.PROVENANCE).read_text().splitlines()]
    assert {"git_commit", "torch", "transformers", "device", "dtype", "threads", "seconds",
            "tokens_per_second", "chainmark_version"} <= set(prov[0])
    # no key material anywhere: the key is public by design, but never stored
    key = ref.reference_key()
    for path in root.rglob("*"):
        if path.is_file():
            blob = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            assert key not in blob and key.hex().encode() not in blob, path


@pytest.mark.slow
def test_frames_have_one_row_per_scored_text(tiny_run):
    root = tiny_run[0]
    h2h = ref.load_frame("head_to_head", root, TINY)
    for col in ("method", "domain", "attack", "n_tokens", "z", "p_value", "detector", "rewrite_failed"):
        assert col in h2h.columns
    clean = h2h[(h2h.attack == "clean") & (h2h.detector == h2h.method)]
    assert clean.groupby("method").size().to_dict() == {"chainmark": 4, "kgw": 4, "sweet": 4}
    assert set(h2h[h2h.method != "none"].attack) == {"clean", "sub0.1", "sub0.2", "sub0.3", "paraphrase"}
    null = ref.load_frame("null", root, TINY)
    assert set(null.detector) == {"chainmark", "kgw", "sweet"} and len(null) == 3 * (4 + 4)
    cal = ref.load_frame("calibration", root, TINY)
    assert set(cal[cal.method == "none"].S) == {2, 3} and set(cal[cal.method == "chainmark"].S) == {2, 3}
    kreg = ref.load_frame("kregular", root, TINY)
    assert set(kreg.k) == {1, 2}
    exp = ref.load_frame("explorer", root, TINY)
    assert set(exp[exp.method == "chainmark"].rho) == {0.5, 1.0}
    assert exp[exp.method == "chainmark"].n_tokens.max() <= TINY.explorer_tokens


@pytest.mark.slow
def test_the_explorer_grid_summarises_every_cell_and_keeps_one_prompt_token_by_token(tiny_run, model_and_tokenizer):
    from chainmark.detection import detect
    from chainmark.partition import states_of

    root, tok = tiny_run[0], model_and_tokenizer[1]
    grid = ref.explorer_grid(tok, root, TINY, example=("wiki", 0))
    frame = ref.load_frame("explorer", root, TINY)
    assert grid["S_values"] == [2] and grid["rho_values"] == [0.5, 1.0] and len(grid["cells"]) == 2
    baseline = [r["self_ppl"] for r in ref.load_texts("explorer", root, TINY) if r["cell"] == "none"]
    assert len(baseline) == 2 and grid["baseline_ppl"] == pytest.approx(sum(baseline) / 2)
    assert set(grid["taus"]) == {"0.5", "1.0"} and grid["taus"]["1.0"] == float("-inf")
    for c in grid["cells"]:
        mine = frame[(frame.method == "chainmark") & (frame.rho == c["rho"])]
        assert c["n_prompts"] == len(mine) == 2
        assert c["mean_z"] == pytest.approx(mine.z.mean()) and c["detected"] == int(mine.decision.sum())
        ex = c["example"]
        assert ex["domain"] == "wiki" and len(ex["tokens"]) == len(ex["states"]) == len(ex["forced"]) == ex["n_tokens"]
        assert ex["states"] == states_of(ex["token_ids"], ref.reference_key(), c["S"]).tolist()
        assert ex["z"] == pytest.approx(detect(ex["token_ids"], ref.reference_key(), c["S"]).z)
    with pytest.raises(ValueError, match="no explorer prompt"):
        ref.explorer_grid(tok, root, TINY, example=("code", 0))


def test_an_incomplete_explorer_grid_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="explorer grid is incomplete"):
        ref.explorer_grid(root=tmp_path, protocol=TINY)


@pytest.mark.slow
def test_verify_regenerates_identically_and_catches_changes(tiny_run, model_and_tokenizer):
    model, tok = model_and_tokenizer
    root = tiny_run[0]
    checks = ref.verify(2, model, tok, root=root, protocol=TINY, seed="test", log=lambda _: None)
    assert len(checks) == 2 and all(c.matched for c in checks), [c.differences for c in checks]
    # a generation parameter changed in the code: refused before anything is regenerated
    hotter = replace(TINY, temperature=0.9)
    bad = ref.verify(2, model, tok, root=root, protocol=hotter, seed="test", log=lambda _: None)
    assert not bad[0].matched and "temperature" in bad[0].differences[0]
    # a stored batch that this code does not generate (as after a change to the sampler)
    cell, batch = verification._choose_shards(root, 1, "tamper", TINY)[0]
    path = ref.shard_path(root, cell, batch)
    records = ref.read_shard(path)
    records[0]["token_ids"][0] = (records[0]["token_ids"][0] + 1) % 49152
    path.write_bytes(store.encode_shard(records))
    again = ref.verify(1, model, tok, root=root, protocol=TINY, seed="tamper", log=lambda _: None)
    # reported once per text, with where the tokens part (the fields that follow from them are not listed)
    assert not again[0].matched and any("tokens diverge at position 0 " in d for d in again[0].differences), \
        again[0].differences


@pytest.mark.slow
def test_cli_verify_names_the_regeneration_command_on_a_mismatch(tiny_run, monkeypatch, capsys):
    from cmlab import cli

    root = tiny_run[0]
    monkeypatch.setattr(ref, "PROTOCOL", replace(TINY, temperature=0.9))
    assert cli.main(["reference", "verify", "--dir", str(root), "--samples", "1"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "cmlab reference run --fresh" in out


@pytest.mark.slow
def test_the_committed_reference_verifies():
    """CI: regenerate a committed batch (a different draw at every commit, among the batches of at most
    SUITE_MAX_TOKENS tokens) on this machine; the next test regenerates the same batch with another CPU's
    kernels. (One batch, not two, since issue 41; a bounded draw since issue 51.)"""
    root = ref.reference_dir("smollm2-135m-instruct-gguf")
    assert (root / ref.MANIFEST).exists(), "the reference run is not committed"
    out = subprocess.run([sys.executable, "-m", "cmlab", "reference", "verify", "--samples", "1",
                          "--max-tokens", str(SUITE_MAX_TOKENS)], capture_output=True, text=True, timeout=1800)
    print(out.stdout, out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verified 1 stored batches" in out.stdout


def _key(pair):
    cell, batch = pair
    return cell.experiment, cell.name, batch.index


def test_a_bounded_draw_picks_only_batches_within_the_bound():
    """--max-tokens draws among the committed batches that regenerate at most that many tokens, all of them
    and only them; a bound at or above the costliest batch draws as no bound does."""
    root = ref.reference_dir("smollm2-135m-instruct-gguf")
    every = verification._choose_shards(root, 10**6, "any", PROTOCOL)
    cost = {_key(pair): verification._regeneration_tokens(*pair, PROTOCOL) for pair in every}
    assert sorted(set(cost.values())) == [16 * 128, 25 * 200, 25 * (200 + PROTOCOL.paraphrase_tokens)]
    bounded = verification._choose_shards(root, 10**6, "any", PROTOCOL, SUITE_MAX_TOKENS)
    assert {_key(p) for p in bounded} == {k for k, c in cost.items() if c <= SUITE_MAX_TOKENS}
    assert 0 < len(bounded) < len(every)
    for seed in range(40):  # the commit's draw, whatever the commit
        assert cost[_key(verification._choose_shards(root, 1, f"commit{seed}", PROTOCOL, SUITE_MAX_TOKENS)[0])] \
            <= SUITE_MAX_TOKENS
    unbounded = verification._choose_shards(root, 3, "x", PROTOCOL)
    assert verification._choose_shards(root, 3, "x", PROTOCOL, max(cost.values())) == unbounded


@pytest.fixture
def tiny_layout(tmp_path):
    """A folder laid out as a complete TINY reference (its manifest, every shard file empty): enough to draw."""
    (tmp_path / ref.MANIFEST).write_text(json.dumps(store.manifest_for(tmp_path, TINY, "tiny-test")))
    for cell in cells(TINY):
        for batch in cell.batches:
            path = ref.shard_path(tmp_path, cell, batch)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    return tmp_path


def test_a_bound_below_every_batch_is_a_clear_error(tiny_layout, monkeypatch, capsys):
    from cmlab import cli

    # TINY's cheapest batches are the calibration's (1 text x 12 tokens), then the explorer's (2 x 10)
    cheap = verification._choose_shards(tiny_layout, 100, "x", TINY, 20)
    assert {c.experiment for c, _ in cheap} == {"calibration", "explorer"}
    with pytest.raises(verification.NoBatchWithinBound, match="at most 11 tokens .the cheapest generates 12."):
        ref.verify(1, root=tiny_layout, protocol=TINY, seed="x", max_tokens=11, log=lambda _: None)
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match="max_tokens must be an integer"):
            ref.verify(1, root=tiny_layout, protocol=TINY, seed="x", max_tokens=bad, log=lambda _: None)
    monkeypatch.setattr(ref, "PROTOCOL", TINY)
    assert cli.main(["reference", "verify", "--dir", str(tiny_layout), "--samples", "1", "--max-tokens", "11"]) == 2
    err = capsys.readouterr().err
    assert "regenerates at most 11 tokens" in err and "Traceback" not in err
    assert cli.main(["reference", "verify", "--dir", str(tiny_layout), "--max-tokens", "0"]) == 2
    assert "argument --max-tokens: must be an integer >= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_refuses_to_resume_with_other_weights(tiny_run, model_and_tokenizer):
    model, tok = model_and_tokenizer
    root = tiny_run[0]
    with pytest.raises(ValueError, match="other model weights"):
        ref.run(model, tok, root=root, protocol=TINY, progress=False, model_name="smollm2-135m-instruct-gguf")


def test_pending_batches_follow_the_experiments_in_the_order_given(tmp_path):
    """`--experiments null head_to_head` fills the null first; within an experiment, batch-major."""
    from cmlab.harness.reference.protocol import PROTOCOL
    from cmlab.harness.reference.generation import pending

    todo = pending(tmp_path, PROTOCOL, ["null", "head_to_head"])
    kinds = [c.experiment for c, _ in todo]
    assert kinds[0] == "null" and kinds[-1] == "head_to_head"
    assert kinds == sorted(kinds, key=["null", "head_to_head"].index)
    first_h2h = [(c.name, b.index) for c, b in todo if c.experiment == "head_to_head"][:4]
    assert [b for _, b in first_h2h] == [0, 0, 0, 0]          # every method of batch 0 before batch 1
    default = pending(tmp_path, PROTOCOL)
    assert [c.experiment for c, _ in default][0] == "head_to_head"


# ---- verify across CPUs: exact where it must be, a stated tolerance for floats ----------------------
def _record(**over):
    base = {"id": "chainmark/wiki/0000", "token_ids": [5, 6, 7, 8], "gate_signal": [1.2345, 0.5, 2.0, 0.1],
            "gated": [1, 0, 1, 0], "self_ppl": 3.1737226796180176,
            "detection": {"chainmark": {"z": 4.2, "p_value": 1.3e-5, "decision": True, "n_scored": 3}}}
    return {**base, **over}


def test_verify_accepts_float_rounding_within_the_stated_tolerance():
    stored = [_record()]
    # what another CPU did: a gate signal stored to 4 decimals crossed a rounding boundary, the
    # perplexity moved at 1e-8 (AMD EPYC against the Intel Xeon that made the run)
    fresh = [_record(gate_signal=[1.2346, 0.5, 2.0, 0.1], self_ppl=3.1737226896180176)]
    assert rcmp.compare_records(stored, fresh) == []
    assert rcmp.VERIFY_FIELDS["gate_signal"]["abs"] >= 1e-4  # one step of the 4-decimal rounding


def test_verify_is_exact_for_tokens_gates_counts_and_verdicts():
    stored = [_record()]
    gate_flip = [_record(gated=[1, 1, 1, 0])]
    assert any("gated[1]" in d for d in rcmp.compare_records(stored, gate_flip))
    verdict = [_record(detection={"chainmark": {"z": 4.2, "p_value": 1.3e-5, "decision": False, "n_scored": 3}})]
    assert any("decision" in d for d in rcmp.compare_records(stored, verdict))
    count = [_record(detection={"chainmark": {"z": 4.2, "p_value": 1.3e-5, "decision": True, "n_scored": 4}})]
    assert any("n_scored" in d for d in rcmp.compare_records(stored, count))
    drift = [_record(self_ppl=3.2)]
    assert any("self_ppl" in d and "tolerance" in d for d in rcmp.compare_records(stored, drift))
    assert rcmp.compare_records(stored, []) == ["stored 1 records, regenerated 0"]


def test_a_token_divergence_names_the_position_and_the_gate_margin():
    stored = [_record()]
    fresh = [_record(token_ids=[5, 6, 9, 8], gate_signal=[1.2345, 0.5, 1.9999, 0.1], gated=[1, 0, 0, 0])]
    out = rcmp.compare_records(stored, fresh, tau=2.0)
    assert len(out) == 1, out  # reported once, not once per field that follows from the tokens
    assert "position 2" in out[0] and "stored id 7" in out[0] and "regenerated 9" in out[0]
    assert "margin +0.0000" in out[0] and "gated True stored, False regenerated" in out[0]


def _committed_rules():
    manifest = json.loads((ref.reference_dir("smollm2-135m-instruct-gguf") / ref.MANIFEST).read_text())
    return rcmp.tolerance_rules(manifest["verify_tolerance"])


def test_the_committed_manifest_states_the_verify_tolerance():
    """It records format 1, one tolerance for every float: read as the kernel floats' tolerance, all else exact."""
    manifest = json.loads((ref.reference_dir("smollm2-135m-instruct-gguf") / ref.MANIFEST).read_text())
    assert manifest["verify_tolerance"] == {"rel": 1e-5, "abs": 5e-4}
    rules = _committed_rules()
    assert {n for n, r in rules.items() if r["rule"] == "rel"} == {"gate_signal", "self_ppl"}
    assert all(rules[n] == {"rule": "rel", "rel": 1e-5, "abs": 5e-4} for n in ("gate_signal", "self_ppl"))
    assert all(rules[n] == {"rule": "exact"} for n in ("phi", "z", "p_value", "p_value_binomial", "rho_realised"))


def test_a_new_run_records_the_per_field_rules(tmp_path):
    recorded = store.manifest_for(tmp_path, TINY, "tiny-test")["verify_tolerance"]
    assert recorded["format"] == "chainmark-verify/2" and recorded["default"] == "exact"
    assert json.loads(json.dumps(recorded)) == rcmp.VERIFY_TOLERANCE
    assert rcmp.tolerance_rules(recorded) == rcmp.tolerance_rules()
    # a manifest states the numbers of the kernel floats, but cannot relax a field the code computes exactly
    looser = {**recorded, "fields": {**recorded["fields"], "self_ppl": {"rule": "rel", "rel": 1e-3, "abs": 0.0},
                                     "z": {"rule": "rel", "rel": 0.5, "abs": 0.5}, "new": {"rule": "rel", "rel": 1}}}
    rules = rcmp.tolerance_rules(looser)
    assert rules["self_ppl"]["rel"] == 1e-3 and rules["z"] == {"rule": "exact"} and "new" not in rules
    with pytest.raises(ValueError, match="unknown verify_tolerance"):
        rcmp.tolerance_rules({"relative": 1e-5})
    with pytest.raises(ValueError, match="compared exactly"):
        rcmp.tolerance_rules({**recorded, "default": "rel"})


# ---- verify is exact for what the ids determine, relative for kernel floats, log10 for kernel p-values -----
def _scores(**over):
    return {"chainmark": {"z": 7.1, "p_value": 1e-12, "decision": True, "n_scored": 199, **over}}


@pytest.mark.parametrize("rules", [None, "committed"], ids=["code", "committed-manifest"])
def test_verify_compares_p_values_and_z_from_the_ids_exactly(rules):
    rules = _committed_rules() if rules == "committed" else None
    stored = [_record(detection=_scores())]
    # the old tolerance (abs 5e-4 below 50) called these equal
    out = rcmp.compare_records(stored, [_record(detection=_scores(p_value=4e-4))], rules=rules)
    assert len(out) == 1 and "detection.chainmark.p_value" in out[0] and "compared exactly" in out[0], out
    out = rcmp.compare_records(stored, [_record(detection=_scores(z=7.1 + 1e-9))], rules=rules)
    assert len(out) == 1 and "detection.chainmark.z" in out[0] and "compared exactly" in out[0], out
    assert rcmp.compare_records(stored, [_record(detection=_scores())], rules=rules) == []


@pytest.mark.parametrize("field", ["self_ppl", "gate_signal"])
@pytest.mark.parametrize("rules", [None, "committed"], ids=["code", "committed-manifest"])
def test_verify_compares_kernel_floats_within_their_relative_tolerance(field, rules):
    rules = _committed_rules() if rules == "committed" else None
    stored = [_record()]

    def moved(factor):
        value = stored[0][field]
        return [_record(**{field: [v * factor for v in value] if isinstance(value, list) else value * factor})]

    assert rcmp.compare_records(stored, moved(1 + 1e-6), rules=rules) == []
    out = rcmp.compare_records(stored, moved(1 + 1e-2), rules=rules)
    assert out and all(field in d and "beyond the tolerance rel" in d for d in out), out


def test_an_unknown_float_field_is_compared_exactly():
    stored = [_record(new_score=0.25, detection={"chainmark": {"z": 4.2, "new_stat": 3.0}})]
    fresh = [_record(new_score=0.25 + 1e-15, detection={"chainmark": {"z": 4.2, "new_stat": 3.0 * (1 + 1e-12)}})]
    out = rcmp.compare_records(stored, fresh)
    assert len(out) == 2 and all("no rule in VERIFY_FIELDS" in d for d in out), out
    assert "new_score" not in rcmp.VERIFY_FIELDS and "new_stat" not in rcmp.VERIFY_FIELDS
    same = [_record(new_score=0.25, detection={"chainmark": {"z": 4.2, "new_stat": 3.0}})]
    assert rcmp.compare_records(stored, same) == []


def test_a_kernel_p_value_is_compared_on_a_log_scale():
    """No stored p-value comes from the logits today; a detector that did (the LR detector) would be named by path."""
    rules = {**rcmp.VERIFY_FIELDS, "detection.lr.p_value": {"rule": "log10_p", "log10": 1e-3}}

    def rec(p_lr, p_chainmark=1e-12):
        return [_record(detection={"lr": {"p_value": p_lr}, "chainmark": {"p_value": p_chainmark}})]

    assert rcmp.compare_records(rec(1e-12), rec(1.001e-12), rules=rules) == []       # 0.04% of p
    assert rcmp.compare_records(rec(0.3), rec(0.3 * (1 + 1e-4)), rules=rules) == []
    far = rcmp.compare_records(rec(1e-12), rec(4e-4), rules=rules)
    assert len(far) == 1 and "log10 p differs by 8.6" in far[0], far
    assert rcmp.compare_records(rec(1e-12), rec(1.01e-12), rules=rules)              # 1% of p: beyond 10**0.001
    # underflow: 0 and a subnormal both lie below the smallest normal double; 1e-300 does not
    assert rcmp.compare_records(rec(0.0), rec(1e-320), rules=rules) == []
    assert rcmp.compare_records(rec(0.0), rec(0.0), rules=rules) == []
    assert rcmp.compare_records(rec(0.0), rec(1e-300), rules=rules)
    assert "not a probability" in rcmp.compare_records(rec(0.5), rec(-0.5), rules=rules)[0]
    # the path-qualified rule is the lr detector's only: chainmark's p-value beside it stays exact
    out = rcmp.compare_records(rec(0.5), rec(0.5, 1.0000001e-12), rules=rules)
    assert len(out) == 1 and "detection.chainmark.p_value" in out[0] and "compared exactly" in out[0], out


@pytest.mark.slow
def test_the_committed_reference_verifies_with_other_cpu_kernels():
    """Another CPU, simulated: PyTorch's AVX2 kernels instead of this machine's best (README: other CPUs)."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2")
    out = subprocess.run([sys.executable, "-m", "cmlab", "reference", "verify", "--samples", "1",
                          "--max-tokens", str(SUITE_MAX_TOKENS)], capture_output=True, text=True, timeout=1800, env=env)
    print(out.stdout, out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verified 1 stored batches" in out.stdout


def test_reading_the_reference_ignores_the_live_model(monkeypatch):
    """Reference sections read the embedded model's committed run whatever CHAINMARK_MODEL is."""
    from cmlab.harness.settings import get_settings

    monkeypatch.setenv("CHAINMARK_MODEL", "/some/other/model")
    assert get_settings().model == "/some/other/model"  # read when asked: nothing cached
    assert ref.read_dir() == ref.reference_dir("smollm2-135m-instruct-gguf")
    assert ref.reference_dir() != ref.read_dir()  # a reader's own run still goes to its own folder
    from cmlab.harness.reference.read import load_reference

    assert len(load_reference("kregular")) > 0


def test_scores_by_test_rebuilds_every_attack_of_the_head_to_head():
    """Each stored substitution is rebuilt from its seed (checked against the stored z inside), each paraphrase
    re-tokenized; the z-test on the rebuilt clean texts gives the stored decisions."""
    import collections

    from cmlab.harness.reference.read import load_texts, scores_by_test

    rows = scores_by_test()
    counts = collections.Counter((r["condition"], r["test"]) for r in rows)
    assert set(counts.values()) == {400} and len(counts) == 15
    stored = {r["id"]: r["detection"]["chainmark"]["decision"] for r in load_texts("head_to_head")
              if r["method"] == "chainmark"}
    for r in rows:
        if r["condition"] == "clean" and r["test"] == "z":
            assert r["flagged"] == stored[r["id"]]
        if r["test"] == "exact":  # distinct tokens - 1 of the n - 1 transitions
            assert r["n_scored"] <= max(r["n_tokens"] - 1, 0)
    exact = [r["n_scored"] for r in rows if r["test"] == "exact" and r["condition"] == "clean"]
    every = [r["n_scored"] for r in rows if r["test"] == "z" and r["condition"] == "clean"]
    assert sum(exact) < 0.8 * sum(every)

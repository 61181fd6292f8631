"""Serving: the server's configuration and key folder, and the rows of an engine's batch each watermarked
under its own account's key, exactly as chainmark's own processor watermarks them. vLLM itself: test_vllm.py."""
from __future__ import annotations

import json

import pytest
import torch

from chainmark import ChainMarkConfig, ChainMarkLogitsProcessor, Gate, generate_key, write_key_file
from chainmark.serving.batch import KEY_ID_ARG, SERVING_ENV, RequestWatermarks, ServingConfig, _request_key_id

V = 600


@pytest.fixture()
def server(tmp_path):
    keys = {name: generate_key() for name in ("acct-a", "acct-b")}
    for name, key in keys.items():
        write_key_file(tmp_path / "keys" / f"{name}.key", key)
    (tmp_path / "serving.json").write_text(json.dumps(
        {"keys_dir": "keys", "S": 5, "rho": 0.5, "gate": "high_entropy", "tau": 6.2}), "utf-8")
    return ServingConfig.from_file(tmp_path / "serving.json"), keys


@pytest.mark.parametrize("args, expected", [(None, None), ({}, None), ({KEY_ID_ARG: None}, None),
                                            ({KEY_ID_ARG: "acct-17"}, "acct-17"), ({KEY_ID_ARG: "a.b_c-9"}, "a.b_c-9")])
def test_a_request_names_its_key_by_id(args, expected):
    assert _request_key_id(args) == expected


@pytest.mark.parametrize("bad", ["", "../acct", "a/b", ".hidden", "a..b", "x" * 129, 17, ["acct"]])
def test_a_malformed_key_id_is_refused_naming_the_argument(bad):
    with pytest.raises(ValueError, match=KEY_ID_ARG):
        _request_key_id({KEY_ID_ARG: bad})


def test_the_configuration_file_is_read_with_its_key_folder_beside_it(server, tmp_path):
    serving, keys = server
    assert serving.keys_dir == tmp_path / "keys" and serving.gate == Gate("high_entropy", 6.2)
    config = serving.config_for("acct-a")
    assert config == ChainMarkConfig(keys["acct-a"], S=5, rho=0.5, gate="high_entropy", tau=6.2)  # whole
    assert serving.gate.rho == 0.5  # the file states the share its threshold opens
    assert serving.check_request({KEY_ID_ARG: "acct-b"}) == "acct-b" and serving.check_request(None) is None


@pytest.mark.parametrize("content, words", [
    ({"S": 5}, "no keys_dir"),
    ({"keys_dir": "k", "tau": 1.0, "secret": 1}, "unknown field(s) secret"),
    ({"keys_dir": "k", "rho": 0.5, "gate": "high_entropy"}, "needs a threshold tau"),
    ({"keys_dir": "k", "tau": 1.0, "unkeyed": "maybe"}, "unkeyed must be one of"),
    ({"keys_dir": "k", "S": 1, "tau": 1.0}, "S"),
    ([1, 2], "must hold a JSON object"),
])
def test_a_bad_configuration_is_refused_clearly(tmp_path, content, words):
    path = tmp_path / "serving.json"
    path.write_text(json.dumps(content), "utf-8")
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ServingConfig.from_file(path)


def test_the_configuration_comes_from_the_environment(server, tmp_path, monkeypatch):
    monkeypatch.delenv(SERVING_ENV, raising=False)
    with pytest.raises(LookupError, match=SERVING_ENV):
        ServingConfig.from_env()
    monkeypatch.setenv(SERVING_ENV, str(tmp_path / "serving.json"))
    assert ServingConfig.from_env() == server[0]


def test_an_unknown_key_id_is_refused_without_the_servers_paths(server, tmp_path):
    serving, _ = server
    with pytest.raises(LookupError, match="unknown chainmark key id 'acct-z'") as caught:
        serving.check_request({KEY_ID_ARG: "acct-z"})
    assert str(tmp_path) not in str(caught.value)
    refusing = ServingConfig(serving.keys_dir, gate=serving.gate, unkeyed="refuse")
    with pytest.raises(ValueError, match="watermarks every reply"):
        refusing.check_request({})


def _logits(rows: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, V, generator=g) * torch.linspace(0.2, 3.0, rows).unsqueeze(1)


def test_each_row_is_watermarked_under_its_own_key_as_chainmarks_processor_does(server):
    """A batch of six rows, two keys and an unkeyed row: each keyed row comes out as the key's own
    ChainMarkLogitsProcessor makes it from the row's previous token; the unkeyed row is untouched."""
    serving, keys = server
    prompts = [[5, 9, 11], [7], [3, 4], [8, 1], [2], [6, 6]]
    outputs: list[list[int]] = [[], [40], [], [41, 42], [], []]
    owners = ["acct-a", "acct-b", None, "acct-a", "acct-b", "acct-a"]
    marks = RequestWatermarks(serving)
    for i, owner in enumerate(owners):
        marks.add(i, owner, prompts[i], outputs[i])
    logits = _logits(6, 0)
    got = marks.apply(logits.clone())
    for i, owner in enumerate(owners):
        if owner is None:
            assert torch.equal(got[i], logits[i])
            continue
        own = ChainMarkLogitsProcessor(serving.config_for(owner), serving.gate)
        last = (outputs[i] or prompts[i])[-1]
        assert torch.equal(got[i], own(torch.tensor([[last]]), logits[i:i + 1].clone())[0])
    forced = {k: v for k, v in marks.counts().items()}
    assert forced["acct-a"][0] == 3 and forced["acct-b"][0] == 2 and 0 < sum(f for _, f in forced.values()) < 5
    # the engine appends to the live output list: the next step reads the new previous token
    outputs[0].append(77)
    again = marks.apply(logits.clone())
    own = ChainMarkLogitsProcessor(serving.config_for("acct-a"), serving.gate)
    assert torch.equal(again[0], own(torch.tensor([[77]]), logits[:1].clone())[0])


def test_rows_follow_the_batch_as_requests_finish_move_and_swap(server):
    serving, _ = server
    marks = RequestWatermarks(serving)
    marks.add(0, "acct-a", [1], [])
    marks.add(1, "acct-b", [2], [])
    marks.add(2, "acct-a", [3], [])
    marks.remove(2)
    marks.move(0, 1, swap=True)          # acct-a now at 1, acct-b at 0
    marks.move(1, 3)                     # acct-a on to 3
    logits = _logits(4, 1)
    got = marks.apply(logits.clone())
    a = ChainMarkLogitsProcessor(serving.config_for("acct-a"), serving.gate)
    b = ChainMarkLogitsProcessor(serving.config_for("acct-b"), serving.gate)
    assert torch.equal(got[0], b(torch.tensor([[2]]), logits[0:1].clone())[0])
    assert torch.equal(got[1], logits[1]) and torch.equal(got[2], logits[2])
    assert torch.equal(got[3], a(torch.tensor([[1]]), logits[3:4].clone())[0])
    assert len(marks) == 2
    marks.add(3, None, [1], [])          # a new unkeyed request replaces the row
    assert len(marks) == 1


def test_a_whole_batch_under_one_key_is_one_call_and_walks_the_cycle(server):
    """All rows under one key, the gate open everywhere: every forced row keeps one finite logit, a legal
    successor of its previous token's state."""
    serving, keys = server
    everywhere = ServingConfig(serving.keys_dir, S=5, rho=1.0, gate=Gate("all"))
    marks = RequestWatermarks(everywhere)
    lasts = [[3], [17], [250], [599]]
    for i, last in enumerate(lasts):
        marks.add(i, "acct-a", [1, 2], last)
    got = marks.apply(_logits(4, 2))
    config = everywhere.config_for("acct-a")
    from chainmark import state_table

    table = state_table(config.key, V, 5)
    for i, last in enumerate(lasts):
        finite = torch.isfinite(got[i]).nonzero().ravel().tolist()
        assert len(finite) == 1
        assert config.topo.matrix[table[last[0]], table[finite[0]]]
    assert marks.counts() == {"acct-a": (4, 4)}


def test_a_request_whose_key_vanished_after_admission_fails_closed(server, caplog):
    """The key file is removed between the request's admission and its first step: with the end-of-sequence id
    known, that row may emit only it (no text leaves unwatermarked) and the rest of the batch is served; the log
    names the id, not the key or the path. Without an end-of-sequence id the error is raised."""
    serving, _ = server
    assert serving.check_request({KEY_ID_ARG: "acct-b"}) == "acct-b"
    (serving.keys_dir / "acct-b.key").unlink()
    marks = RequestWatermarks(serving, eos_token_id=2)
    marks.add(0, "acct-a", [1], [])
    marks.add(1, "acct-b", [2], [])
    logits = _logits(2, 3)
    got = marks.apply(logits.clone())
    assert torch.isfinite(got[1]).nonzero().ravel().tolist() == [2]
    a = ChainMarkLogitsProcessor(serving.config_for("acct-a"), serving.gate)
    assert torch.equal(got[0], a(torch.tensor([[1]]), logits[0:1].clone())[0])
    assert "'acct-b'" in caplog.text and str(serving.keys_dir) not in caplog.text
    marks.move(1, 0)                     # the closed row follows the batch like any other
    assert torch.isfinite(marks.apply(_logits(1, 4))[0]).nonzero().ravel().tolist() == [2]
    with pytest.raises(LookupError, match="unknown chainmark key id 'acct-b'"):
        RequestWatermarks(serving).add(0, "acct-b", [2], [])


def test_serving_refuses_what_is_not_a_configuration(tmp_path):
    with pytest.raises(TypeError, match="ServingConfig"):
        RequestWatermarks({"keys_dir": "k"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Gate"):
        ServingConfig(tmp_path, gate="high_entropy")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ServingConfig.from_file(tmp_path / "nope.json")


def test_a_vllm_environment_is_made_once_beside_the_notebooks_packages(tmp_path, monkeypatch):
    """The Colab GPU cell's environment: a virtual environment of its own (vLLM pins its torch, which must not
    replace the notebook's), vLLM and this chainmark installed into it by its own pip, and made only once."""
    import subprocess
    import sys

    from cmlab.harness.serving import vllm_environment

    calls = []

    def run(command, check):
        calls.append([str(c) for c in command])
        if "venv" in calls[-1]:
            (tmp_path / "env" / "bin").mkdir(parents=True)

    monkeypatch.setattr(subprocess, "run", run)
    python = vllm_environment(tmp_path / "env")
    assert python == tmp_path / "env" / "bin" / "python"
    assert calls[0] == [sys.executable, "-m", "venv", str(tmp_path / "env")]
    install = calls[1]
    assert install[:4] == [str(python), "-m", "pip", "install"] and "vllm" in install
    assert any(c.startswith("chainmark") for c in install) and not any(c.startswith("torch") for c in install)
    vllm_environment(tmp_path / "env")
    assert len(calls) == 2  # the second call reuses it

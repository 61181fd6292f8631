"""The lab's options objects: a runner's loose arguments travel as one frozen dataclass, whose fields
may still be given as keywords, and either spelling runs the same thing and names it the same way."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from chainmark.config import ChainMarkConfig
from chainmark.embed import Sampling
from cmlab.comparison.fpr_recipes import RecipeFit, fpr_recipes
from cmlab.comparison.lrdetect import SimulatedNull, lr_detect
from cmlab.harness import grids as E
from cmlab.harness import runner as R
from cmlab.harness import runs as RS
from cmlab.harness.options import GridOptions, RunOptions, named_sampling
from cmlab.teaching import widgets as W
from cmlab.teaching.playground import _PLAYGROUND
from test_records import _FakeModel, _fake_generate, _run, _strip

KEY = b"lab-options-test-key-not-secret!"
CONFIG = ChainMarkConfig(KEY)  # S = 5, the clockwork: what the lab's keyed wrappers take
V = 500


def test_options_take_their_fields_and_samplings_as_keywords():
    opts = GridOptions.of(None, max_new_tokens=9, seed=3, alpha=0.05, progress=False)
    assert opts.sampling == Sampling(max_new_tokens=9, seed=3) and opts.alpha == 0.05 and not opts.progress
    base = GridOptions(sampling=Sampling(temperature=0.9), stop_after=2)
    again = GridOptions.of(base, batch_size=4)
    assert again.sampling == Sampling(temperature=0.9, batch_size=4) and again.stop_after == 2
    assert GridOptions.of(base, sampling=Sampling(seed=5)).sampling == Sampling(seed=5)
    with pytest.raises(TypeError, match="unknown argument.*max_tokens"):
        RunOptions.of(None, max_tokens=5)
    with pytest.raises(TypeError, match="alpha"):  # a grid's option is no plain run's
        RunOptions.of(None, alpha=0.05)
    with pytest.raises(TypeError, match="must be a GridOptions"):
        GridOptions.of(RunOptions())
    with pytest.raises(ValueError, match="stop_after"):
        RunOptions(stop_after=-1)
    with pytest.raises(ValueError, match="batch_size"):
        RunOptions.of(None, batch_size=0)


def test_the_sampling_a_call_names_is_what_it_named():
    """What run.json and generate_once's folder have always recorded: the keywords as given, and a Sampling's
    fields off their defaults, so spelling one setting either way names one run."""
    assert named_sampling(None, {"max_new_tokens": 128}) == {"max_new_tokens": 128}
    assert named_sampling(None, {}) == {}
    assert named_sampling(None, {"sampling": Sampling(max_new_tokens=48)}) == {"max_new_tokens": 48}
    assert named_sampling(RunOptions(sampling=Sampling(seed=3)), {"min_new_tokens": None}) == \
        {"seed": 3, "min_new_tokens": None}


def test_generate_once_finds_one_folder_for_either_spelling(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(R, "generate", _fake_generate(calls))
    prompts = ["a", "b", "c"]
    first = R.generate_once(_FakeModel(), None, prompts, runs_dir=tmp_path, progress=False, max_new_tokens=48,
                            batch_size=2)
    n = len(calls)
    for spelling in (dict(sampling=Sampling(max_new_tokens=48, batch_size=2)),
                     dict(options=RunOptions(sampling=Sampling(max_new_tokens=48), progress=False), batch_size=2)):
        again = R.generate_once(_FakeModel(), None, prompts, runs_dir=tmp_path, **spelling)
        assert [g.token_ids for g in again] == [g.token_ids for g in first]
    assert len(calls) == n and len(list((tmp_path / R.SHARED_DIR).iterdir())) == 1
    meta = json.loads(next((tmp_path / R.SHARED_DIR).iterdir()).joinpath(RS.META_FILE).read_text())
    assert meta["generate"] == {"max_new_tokens": 48} and meta["batch_size"] == 2


def test_a_grid_runs_the_same_from_options_or_keywords(tmp_path):
    by_keywords = _run(tmp_path / "k", batch_size=2, seed=7, alpha=0.05)
    options = GridOptions(sampling=Sampling(batch_size=2, seed=7), alpha=0.05, self_ppl=False, model_name="fake",
                          progress=False)
    from test_records import ITEMS, FakeTokenizer, _methods
    from cmlab.comparison.attacks import Substitution

    by_options = R.run_grid(None, FakeTokenizer(), _methods(), ITEMS, tmp_path / "o",
                            {"substitution_0.2": Substitution(0.2, 1000)}, options=options)
    assert _strip(by_options.records) == _strip(by_keywords.records)
    assert json.loads((tmp_path / "o" / RS.META_FILE).read_text())["seed"] == 7


def test_the_model_free_functions_take_their_options_either_way():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, 60)
    q = np.full(59, 0.5)
    assert lr_detect(ids, CONFIG, q, null=SimulatedNull(alpha=0.05, n_null=500, seed=3)).to_dict() == \
        lr_detect(ids, CONFIG, q, alpha=0.05, n_null=500, seed=3).to_dict()
    with pytest.raises(TypeError):
        lr_detect(ids, CONFIG, q, n_nul=500)
    null = [rng.integers(0, V, 40).tolist() for _ in range(240)]
    wm = E._simulate_watermarked_ids(4, 40, ChainMarkConfig(KEY, S=5, rho=1.0), V, seed=1).tolist()
    groups = np.arange(240) // 2
    assert fpr_recipes(null, groups, wm, CONFIG, fit=RecipeFit(alpha=0.05, vocab_size=V, seed=2)) == \
        fpr_recipes(null, groups, wm, CONFIG, alpha=0.05, vocab_size=V, seed=2)
    texts = E._simulate_watermarked_ids(4, 40, ChainMarkConfig(KEY, S=5, rho=0.8), V, seed=3).tolist()
    sweep = E.AttackSweep(deltas=(0.0, 0.3), mc_trials=20, seed=5)
    config = ChainMarkConfig(KEY, S=5, rho=0.8)
    assert json.dumps(E.robustness_grid(texts, config, V, sweep=sweep)) == \
        json.dumps(E.robustness_grid(texts, config, V, deltas=(0.0, 0.3), mc_trials=20, seed=5))


def test_a_browser_block_inlines_its_assets_code():
    block = W.browser_block(W._EXPLORERS, "cm-x", "A title", "", {"a": 1}, attrs=' data-kind="x"')
    assert block.startswith('<div class="cm-explorer" id="cm-x-') and 'data-kind="x"' in block
    assert "window.ChainMarkExplorers.mountFrom" in block and "This explorer runs" in block
    block = W.browser_block(_PLAYGROUND, "cm-playground", "P", "a note", {"b": math.pi})
    assert 'class="cm-playground tex2jax_ignore mathjax_ignore"' in block and "This playground runs" in block
    assert "window.ChainMarkPlayground.mountFrom" in block and "a note" in block


def test_a_one_text_example_takes_no_batch_size_and_the_lr_test_no_positional_vocabulary():
    """generate_example samples a batch of one: a batch_size is refused, not silently replaced; lr_detect's
    arguments after the gate probabilities are keywords, so an old positional S, topology or alpha cannot be read
    as a vocabulary."""
    from chainmark import Gate

    config = ChainMarkConfig(KEY, S=5, rho=0.5)
    gate = Gate.calibrate("high_entropy", 0.5, [0.1, 0.5, 1.0, 2.0])
    with pytest.raises(TypeError, match="batch_size"):
        E.generate_example(object(), object(), config, gate, "a prompt", batch_size=4)
    with pytest.raises(TypeError, match="positional"):
        lr_detect(np.arange(30), config, np.full(29, 0.3), 5, "clockwork", 0.01)

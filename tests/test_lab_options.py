"""The lab's options objects: a runner's loose arguments travel as small frozen dataclasses (how it samples
is one ``Sampling``, how it proceeds and scores one options object), with no keyword mirror of their fields;
a field given as a keyword, or an options object of the wrong class, is refused with an error that names it."""
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
from cmlab.harness.grids import AttackSweep
from cmlab.harness.options import GridOptions, sampling_named
from cmlab.harness.runs import RunControl
from cmlab.teaching import widgets as W
from cmlab.teaching.playground import _PLAYGROUND
from test_records import ITEMS, FakeTokenizer, _FakeModel, _fake_generate, _methods

KEY = b"lab-options-test-key-not-secret!"
CONFIG = ChainMarkConfig(KEY)  # S = 5, the clockwork: what the lab's keyed wrappers take
V = 500


def test_grid_options_are_a_run_control_and_refuse_a_bad_value():
    opts = GridOptions(alpha=0.05, progress=False, stop_after=2)
    assert isinstance(opts, RunControl) and opts.alpha == 0.05 and not opts.progress and opts.stop_after == 2
    with pytest.raises(ValueError, match="stop_after"):
        RunControl(stop_after=-1)
    with pytest.raises(ValueError, match="batch_size"):
        Sampling(batch_size=0)
    with pytest.raises(TypeError, match="sampling"):  # a grid's options hold no sampling: it travels beside them
        GridOptions(sampling=Sampling())


def test_a_runner_refuses_a_mirrored_keyword_and_an_options_object_of_another_class(tmp_path):
    """The options travel as objects: a field of them given as a keyword is a TypeError (no mirror), and so is
    an object of the wrong class in their place, each named."""
    tok, methods = FakeTokenizer(), _methods()
    with pytest.raises(TypeError, match="max_new_tokens"):
        R.run_grid(None, tok, methods, ITEMS, tmp_path, max_new_tokens=9)
    with pytest.raises(TypeError, match="options must be a GridOptions"):
        R.run_grid(None, tok, methods, ITEMS, tmp_path, options=RunControl())
    with pytest.raises(TypeError, match="sampling must be a Sampling"):
        R.run_grid(None, tok, methods, ITEMS, tmp_path, sampling={"max_new_tokens": 9})
    with pytest.raises(TypeError, match="control must be a RunControl"):
        R.generate_resumable(tmp_path, None, tok, ["a"], control=Sampling())
    with pytest.raises(TypeError, match="batch_size"):
        R.generate_once(None, tok, ["a"], runs_dir=tmp_path, batch_size=2)
    with pytest.raises(TypeError, match="options must be an ExplorerOptions"):
        E.embedding_grid(None, tok, KEY, ["a"], options=Sampling())
    with pytest.raises(TypeError, match="sweep must be an AttackSweep"):
        E.robustness_grid([[1, 2, 3]], CONFIG, V, sweep=SimulatedNull())


def test_the_sampling_a_run_names_is_its_fields_off_their_defaults():
    """What run.json and generate_once's folder record of how a run sampled."""
    assert sampling_named(Sampling()) == {}
    assert sampling_named(Sampling(max_new_tokens=48)) == {"max_new_tokens": 48}
    assert sampling_named(Sampling(seed=3, min_new_tokens=5)) == {"seed": 3, "min_new_tokens": 5}


def test_generate_once_finds_one_folder_for_one_sampling(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(R, "generate", _fake_generate(calls))
    prompts = ["a", "b", "c"]
    first = R.generate_once(_FakeModel(), None, prompts, runs_dir=tmp_path, control=RunControl(progress=False),
                            sampling=Sampling(max_new_tokens=48, batch_size=2))
    n = len(calls)
    again = R.generate_once(_FakeModel(), None, prompts, runs_dir=tmp_path,
                            sampling=Sampling(max_new_tokens=48, batch_size=2))  # the control names no run
    assert [g.token_ids for g in again] == [g.token_ids for g in first]
    assert len(calls) == n and len(list((tmp_path / R.SHARED_DIR).iterdir())) == 1
    R.generate_once(_FakeModel(), None, prompts, runs_dir=tmp_path, control=RunControl(progress=False),
                    sampling=Sampling(max_new_tokens=40, batch_size=2))
    assert len(calls) > n and len(list((tmp_path / R.SHARED_DIR).iterdir())) == 2
    meta = json.loads((tmp_path / R.SHARED_DIR).iterdir().__next__().joinpath(RS.META_FILE).read_text())
    assert meta["generate"] in ({"max_new_tokens": 48}, {"max_new_tokens": 40}) and meta["batch_size"] == 2


def test_the_model_free_functions_read_their_options_and_refuse_their_fields_as_keywords():
    """lr_detect, fpr_recipes and robustness_grid take one options object each: its values are used (a
    different level or seed gives a different answer, the same one the same), and its fields are not keywords."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, 60)
    q = np.full(59, 0.5)
    one = lr_detect(ids, CONFIG, q, null=SimulatedNull(alpha=0.05, n_null=500, seed=3))
    assert one.to_dict() == lr_detect(ids, CONFIG, q, null=SimulatedNull(alpha=0.05, n_null=500, seed=3)).to_dict()
    assert one.critical_value != lr_detect(ids, CONFIG, q, null=SimulatedNull(alpha=0.2, n_null=500, seed=3)).critical_value
    with pytest.raises(TypeError, match="n_null"):
        lr_detect(ids, CONFIG, q, n_null=500)
    null = [rng.integers(0, V, 40).tolist() for _ in range(240)]
    wm = E._simulate_watermarked_ids(4, 40, ChainMarkConfig(KEY, S=5, rho=1.0), V, seed=1).tolist()
    groups = np.arange(240) // 2
    fitted = fpr_recipes(null, groups, wm, CONFIG, fit=RecipeFit(alpha=0.05, vocab_size=V, seed=2))
    assert fitted == fpr_recipes(null, groups, wm, CONFIG, fit=RecipeFit(alpha=0.05, vocab_size=V, seed=2))
    assert fitted != fpr_recipes(null, groups, wm, CONFIG, fit=RecipeFit(alpha=0.05, vocab_size=V, seed=9))
    with pytest.raises(TypeError, match="alpha"):
        fpr_recipes(null, groups, wm, CONFIG, alpha=0.05)
    texts = E._simulate_watermarked_ids(4, 40, ChainMarkConfig(KEY, S=5, rho=0.8), V, seed=3).tolist()
    config = ChainMarkConfig(KEY, S=5, rho=0.8)
    swept = E.robustness_grid(texts, config, V, sweep=AttackSweep(deltas=(0.0, 0.3), mc_trials=20, seed=5))
    assert swept["deltas"] == [0.0, 0.3] and swept["mc"]["trials"] == 20 and swept["seed"] == 5
    assert json.dumps(swept) == json.dumps(E.robustness_grid(texts, config, V,
                                                             sweep=AttackSweep(deltas=(0.0, 0.3), mc_trials=20,
                                                                               seed=5)))
    with pytest.raises(TypeError, match="mc_trials"):
        E.robustness_grid(texts, config, V, mc_trials=20)


def test_a_browser_block_inlines_its_assets_code():
    block = W.browser_block(W._EXPLORERS, "cm-x", "A title", "", {"a": 1}, attrs=' data-kind="x"')
    assert block.startswith('<div class="cm-explorer" id="cm-x-') and 'data-kind="x"' in block
    assert "window.ChainMarkExplorers.mountFrom" in block and "This explorer runs" in block
    block = W.browser_block(_PLAYGROUND, "cm-playground", "P", "a note", {"b": math.pi})
    assert 'class="cm-playground tex2jax_ignore mathjax_ignore"' in block and "This playground runs" in block
    assert "window.ChainMarkPlayground.mountFrom" in block and "a note" in block


def test_a_one_text_example_takes_no_batch_size_keyword_and_the_lr_test_no_positional_vocabulary():
    """generate_example samples a batch of one (its Sampling's batch size is not read, and there is no
    batch_size keyword to be misheard); lr_detect's
    arguments after the gate probabilities are keywords, so an old positional S, topology or alpha cannot be read
    as a vocabulary."""
    from chainmark import Gate

    config = ChainMarkConfig(KEY, S=5, rho=0.5)
    gate = Gate.calibrate("high_entropy", 0.5, [0.1, 0.5, 1.0, 2.0])
    with pytest.raises(TypeError, match="batch_size"):
        E.generate_example(object(), object(), config, gate, "a prompt", batch_size=4)
    with pytest.raises(TypeError, match="positional"):
        lr_detect(np.arange(30), config, np.full(29, 0.3), 5, "clockwork", 0.01)

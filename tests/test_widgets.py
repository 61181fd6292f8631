"""Unit tests of cmlab.teaching.widgets (the static blocks, the live twins) and the data builders of cmlab.harness.grids."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from scipy.stats import binom

from chainmark import calibrate as cal
from chainmark.config import ChainMarkConfig
from chainmark.gates import Gate
from cmlab.harness import grids as E
from cmlab.harness.grids import AttackSweep
from cmlab.teaching import widgets as W
from chainmark.detection import detect
from chainmark.partition import states_of

KEY = b"widgets-test-key-not-secret"
V = 2000  # a small vocabulary keeps the state tables cheap


def _payload(html: str) -> dict:
    m = re.search(r'<script type="application/json" class="cm-data">(.*?)</script>', html, re.S)
    assert m, "no JSON data block"
    return json.loads(m.group(1))


def test_static_block_is_self_contained():
    html = W.calibration_explorer().html
    # one data block and one inline script, nothing loaded from anywhere
    assert html.count("</script>") == 2
    assert not re.search(r"<script[^>]+src=", html)
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    assert 'data-kind="calibration"' in html and "ChainMarkExplorers.mountFrom" in html
    data = _payload(html)
    assert data["alphas"] == list(W._ALPHAS) and data["ns"] == list(W.LENGTHS)


def test_both_pages_share_one_mount_script():
    """mount.js (DOM helpers, mounting a block) is inlined before each page's script, which has no copy of it."""
    from importlib import resources

    data = resources.files("cmlab").joinpath("data")
    mount = data.joinpath("mount.js").read_text(encoding="utf-8")
    html = W.calibration_explorer().html
    assert html.index("window.ChainMarkMount = M") < html.index("window.ChainMarkExplorers = CM") \
        < html.rindex("window.ChainMarkExplorers.mountFrom(document.currentScript")
    assert "data-mounted" in mount and "createElementNS" in mount
    for page in ("explorers.js", "playground.js"):
        text = data.joinpath(page).read_text(encoding="utf-8")
        assert "ChainMarkMount.mount(" in text and "ChainMarkMount.blockBefore(" in text
        assert "data-mounted" not in text and "createElementNS" not in text and "function el(" not in text


def test_data_cannot_break_out_of_the_script_element():
    evil = {"text": {"ratio": [1.0], "tpr": [1.0],
                     "examples": [{"tokens": ["</script><b>x</b>", "\u2028&"], "states": [0, 1],
                                   "substituted": [0, 0]}]},
            "mc": {"ratio": [1.0], "tpr": [1.0]}, "deltas": [0.0], "alpha": 0.01, "start": {"delta": 0.0}}
    html = W._StaticExplorer("robustness", evil, "t").html
    assert html.count("</script>") == 2
    assert _payload(html)["text"]["examples"][0]["tokens"][0] == "</script><b>x</b>"


def test_non_finite_numbers_become_null():
    e = W._StaticExplorer("calibration", {"x": float("nan"), "y": [np.float64("inf"), np.int64(3)]}, "t")
    assert e.data == {"x": None, "y": [None, 3]}


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="kind must be one of"):
        W._StaticExplorer("sliders", {}, "t")


def test_start_values_snap_to_the_sliders():
    data = _payload(W.calibration_explorer(alpha=0.011, n=101, rho=0.31, k=5).html)
    assert data["start"] == {"alpha": 0.01, "n": 100, "rho": 0.3, "k": 4}


@pytest.mark.parametrize("alpha,n,rho,k", [(1e-4, 100, 0.3, 1), (1e-6, 200, 0.5, 2), (0.05, 10, 1.0, 1)])
def test_calibration_numbers_are_the_closed_forms(alpha, n, rho, k):
    v = W.calibration_numbers(alpha, n, rho, k)
    S = cal.s_star(n, rho, alpha, k)
    assert v["s_star"] == S
    assert v["predicted_z"] == cal.predicted_z(n, rho, S, k)
    assert v["midpoint_threshold"] == cal.midpoint_threshold(rho, S, k)
    assert v["fpr_bound"] == cal.hoeffding_fpr_bound(n, rho, S, k)
    # at S* the midpoint margin clears z_alpha, one state fewer it does not
    assert cal.predicted_z(n, rho, S, k) / 2 >= cal.z_alpha(alpha) - 1e-12
    if S - 1 > k:
        assert cal.predicted_z(n, rho, S - 1, k) / 2 < cal.z_alpha(alpha)


def test_simulated_sequences_walk_at_the_right_rate():
    """Legal-transition share of the Monte Carlo is rho + (1 - rho)/S (binomial tolerance)."""
    S, rho, trials, n = 5, 0.4, 200, 50
    ids = E._simulate_watermarked_ids(trials, n, ChainMarkConfig(KEY, S=S, rho=rho), V, seed=7)
    assert ids.shape == (trials, n) and ids.min() >= 0 and ids.max() < V
    st = states_of(ids.ravel(), KEY, S, V).reshape(trials, n)
    legal = int(((st[:, 1:] - st[:, :-1]) % S == 1).sum())
    m = trials * (n - 1)
    p = rho + (1 - rho) / S
    lo, hi = binom.ppf(0.0005, m, p), binom.ppf(0.9995, m, p)
    assert lo <= legal <= hi, (legal, lo, hi)


def test_simulation_rejects_bad_sizes():
    with pytest.raises(ValueError):
        E._simulate_watermarked_ids(0, 10, ChainMarkConfig(KEY, rho=0.5), V)
    with pytest.raises(ValueError):
        E._simulate_watermarked_ids(10, 1, ChainMarkConfig(KEY, rho=0.5), V)
    with pytest.raises(ValueError, match="clockwork"):  # the theorem's model walks the cycle, nothing else
        E._simulate_watermarked_ids(10, 20, ChainMarkConfig(KEY, rho=0.5, topology="soft_cycle"), V)
    with pytest.raises(TypeError, match="ChainMarkConfig"):  # the key alone is refused, with what to pass
        E._simulate_watermarked_ids(10, 20, KEY, V)


def test_robustness_grid_on_synthetic_texts():
    texts = E._simulate_watermarked_ids(12, 80, ChainMarkConfig(KEY, S=5, rho=0.8), V, seed=3).tolist()
    rob = E.robustness_grid(texts, ChainMarkConfig(KEY, S=5, rho=0.8), V,
                            sweep=AttackSweep(deltas=(0.0, 0.2, 0.5), mc_trials=60))
    for part in ("mc", "text"):
        assert rob[part]["ratio"][0] == pytest.approx(1.0)
        assert rob[part]["ratio"][0] > rob[part]["ratio"][1] > rob[part]["ratio"][2]
        assert all(0.0 <= t <= 1.0 for t in rob[part]["tpr"])
    assert rob["mc"]["length"] == 80
    ex = rob["text"]["examples"][1]
    assert len(ex["tokens"]) == 80 and sum(ex["substituted"]) <= math.ceil(0.2 * 80)
    z_before = np.mean([detect(t, ChainMarkConfig(KEY, S=5), test="z").z for t in texts])
    assert rob["text"]["mean_z_before"] == pytest.approx(z_before)
    data = _payload(W.robustness_explorer(rob, delta=0.21).html)
    assert data["start"] == {"delta": 0.2} and "texts" not in data


def _fake_grid() -> dict:
    cells = []
    for S in (2, 5):
        for rho in (0.5, 1.0):
            ids = E._simulate_watermarked_ids(1, 30, ChainMarkConfig(KEY, S=S, rho=rho), V, seed=S).tolist()[0]
            d = detect(ids, ChainMarkConfig(KEY, S=S), test="z")
            ex = {"prompt": "p", "token_ids": ids, "tokens": [f"t{t}" for t in ids],
                  "states": states_of(ids, KEY, S).tolist(), "forced": [0] * 30, "n_tokens": 30,
                  "phi": d.phi, "z": d.z, "p_value": d.p_value, "rho_realised": rho, "self_ppl": 3.0}
            cells.append({"S": S, "rho": rho, "n_prompts": 1, "mean_z": d.z, "mean_phi": d.phi,
                          "mean_ppl": 3.0, "mean_rho_realised": rho, "tpr": 1.0,
                          "texts": [{"token_ids": ids, "z": d.z, "phi": d.phi, "self_ppl": 3.0}], "example": ex})
    return {"S_values": [2, 5], "rho_values": [0.5, 1.0], "gate": "high_entropy", "alpha": 0.01,
            "taus": {"0.5": 1.0, "1.0": -math.inf}, "max_new_tokens": 30, "prompts": ["p"],
            "baseline_ppl": 2.5, "model": "fake", "cells": cells}


def test_embedding_explorer_carries_no_key_and_no_bulk_texts():
    grid = _fake_grid()
    html = W.embedding_explorer(grid, S=4, rho=0.9).html
    data = _payload(html)
    assert data["start"] == {"S": 5, "rho": 1.0}
    assert all("texts" not in c for c in data["cells"])
    assert KEY.hex() not in html and KEY.decode() not in html


def test_live_twins_recompute_in_python():
    pytest.importorskip("ipywidgets")
    box = W.calibration_explorer(alpha=1e-4, n=100, rho=0.3, live=True)
    readout = box.children[2]
    assert f">{cal.s_star(100, 0.3, 1e-4)}<" in readout.value
    box.children[0].children[1].value = 1000  # n slider
    assert f">{cal.s_star(1000, 0.3, 1e-4)}<" in readout.value

    grid = _fake_grid()
    emb = W.embedding_explorer(grid, S=2, rho=0.5, live=True)
    view = emb.children[-1]
    before = view.value
    emb.children[0].children[0].value = 5
    assert view.value != before and f"{W._grid_cell(grid, 5, 0.5)['example']['z']:.2f}" in view.value

    texts = E._simulate_watermarked_ids(6, 60, ChainMarkConfig(KEY, S=5, rho=0.8), V, seed=5).tolist()
    rob = E.robustness_grid(texts, ChainMarkConfig(KEY, S=5, rho=0.8), V,
                            sweep=AttackSweep(deltas=(0.0, 0.3), mc_trials=20))
    live = W.robustness_explorer(rob, delta=0.0, live=True, key=KEY)
    live.children[0].value = 0.3
    assert "0.490" in live.children[1].value  # (1 - 0.3)^2
    state = json.dumps([w.get_state() for w in (live, *live.children)], default=str)
    assert KEY.hex() not in state and KEY.decode() not in state


@pytest.mark.slow
def test_live_generation_button_path(model_and_tokenizer):
    """What the embedding twin's 'generate now' button runs: one watermarked text, scored."""
    from chainmark.embed import Sampling

    model, tokenizer = model_and_tokenizer
    out = E.generate_example(model, tokenizer, ChainMarkConfig(KEY, S=5, rho=1.0), Gate("high_entropy", -math.inf),
                             "Name three colours.", sampling=Sampling(max_new_tokens=12))["example"]
    assert 1 <= out["n_tokens"] <= 12 and len(out["tokens"]) == out["n_tokens"]
    assert out["z"] == pytest.approx(detect(out["token_ids"], ChainMarkConfig(KEY, S=5), test="z").z)
    assert out["rho_realised"] > 0.5 and out["self_ppl"] > 1.0

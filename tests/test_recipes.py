"""The FPR recipes (cmlab.comparison.fpr_recipes): each statistic on sequences whose answer is known."""
from __future__ import annotations

import numpy as np
import pytest

from chainmark.config import ChainMarkConfig
from chainmark.partition import state_table
from cmlab.comparison.fpr_recipes import PAPER_FPR_RECIPES, RecipeFit, _RECIPES, fpr_recipes, _hac_z, _iid_z, _k_skip_z, _weighted_z
from chainmark.topology import Topology

KEY = b"recipes-test-key-0123456789abcdef"
CONFIG = ChainMarkConfig(KEY)  # S = 5, the clockwork
V = 2000


def test_weighted_z_with_equal_weights_is_the_detectors_z() -> None:
    rng = np.random.default_rng(0)
    valid = rng.random(199) < 0.3
    assert _weighted_z(valid, np.full(199, 2.5), 0.2) == pytest.approx(_iid_z(valid, 0.2))


def test_hac_shrinks_z_when_legal_steps_come_in_runs() -> None:
    """Runs of legal steps (positive autocorrelation) make the iid z overconfident; HAC widens the error."""
    valid = np.repeat(np.random.default_rng(1).random(40) < 0.35, 5)    # blocks of 5 equal indicators
    assert abs(_hac_z(valid, 0.2)) < abs(_iid_z(valid, 0.2))
    independent = np.random.default_rng(2).random(5000) < 0.2
    assert _hac_z(independent, 0.2) == pytest.approx(_iid_z(independent, 0.2), abs=0.6)


def test_k_skip_sees_no_walk_three_steps_apart() -> None:
    walk = np.arange(200) % 5                                          # a perfect clockwork walk
    clock = Topology.clockwork(5)
    assert _iid_z(np.diff(walk) % 5 == 1, 0.2) > 10
    assert _k_skip_z(walk, clock, k=3) < 0                              # s_{i+3} = s_i + 3, never + 1


def _texts(n: int, length: int, rng: np.random.Generator, walk: bool) -> list[np.ndarray]:
    table = state_table(KEY, V, 5)
    by_state = [np.flatnonzero(table == s) for s in range(5)]
    out = []
    for _ in range(n):
        ids = rng.integers(0, V, size=length)
        if walk:   # every token continues the cycle from the previous one
            for i in range(1, length):
                ids[i] = rng.choice(by_state[(table[ids[i - 1]] + 1) % 5])
        out.append(ids)
    return out


def test_fpr_recipes_on_random_null_and_perfect_walks() -> None:
    rng = np.random.default_rng(3)
    null = _texts(240, 120, rng, walk=False)
    wm = _texts(20, 120, rng, walk=True)
    results = {r.recipe: r for r in fpr_recipes(null, np.arange(240) // 2, wm, CONFIG,
                                                fit=RecipeFit(vocab_size=V))}
    assert list(results) == list(_RECIPES) and set(PAPER_FPR_RECIPES) <= set(_RECIPES)
    for name in ("iid", "sd", "quantile", "lift", "hac", "stopword", "hdd_lite"):
        assert results[name].tpr.rate == 1.0, name                      # a perfect walk is always found
        assert results[name].fpr.trials == 120 and results[name].fpr.high < 0.2, name
    assert results["k_skip"].tpr.rate < 0.2                            # the skipped rule misses the walk
    assert results["lift"].threshold > results["quantile"].threshold


def test_fpr_recipes_refuse_a_null_too_small_for_the_quantile() -> None:
    rng = np.random.default_rng(4)
    with pytest.raises(ValueError, match="fit half holds"):
        fpr_recipes(_texts(60, 50, rng, False), np.arange(60), _texts(2, 50, rng, True), CONFIG,
                    fit=RecipeFit(vocab_size=V))
    with pytest.raises(ValueError, match="one group per null text"):
        fpr_recipes(_texts(4, 50, rng, False), [0, 1], _texts(2, 50, rng, True), CONFIG,
                    fit=RecipeFit(vocab_size=V))
    with pytest.raises(TypeError, match=r"fpr_recipes takes one ChainMarkConfig .*pass ChainMarkConfig\(key, S="):
        fpr_recipes(_texts(4, 50, rng, False), [0, 1], _texts(2, 50, rng, True), KEY,
                    fit=RecipeFit(vocab_size=V))
    with pytest.raises(TypeError, match="ChainMarkConfig and S"):
        fpr_recipes(_texts(4, 50, rng, False), [0, 1], _texts(2, 50, rng, True), CONFIG, S=5,
                    fit=RecipeFit(vocab_size=V))


def test_the_iid_recipe_is_the_detectors_z() -> None:
    from chainmark.detection import detect
    from chainmark.partition import states_of
    from chainmark.detection import valid_transitions

    ids = np.random.default_rng(6).integers(0, V, size=150)
    valid = valid_transitions(states_of(ids, KEY, 5), Topology.clockwork(5))
    assert _iid_z(valid, 0.2) == detect(ids, CONFIG, test="z").z

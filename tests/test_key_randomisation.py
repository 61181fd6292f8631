"""The key-randomisation test: valid for every text, equal to the exact test where both apply, and able to tell."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from chainmark.config import ChainMarkConfig
from chainmark.detection import detect
from chainmark.keys import hkdf
from chainmark.randomisation import (key_randomisation_test, legal_count, legal_transitions_null,
                                     monte_carlo_p_value)
from chainmark.significance import forest_mask

KEY = b"\x07" * 32


def repetitive_text(rng: np.random.Generator, n: int = 300, vocab: int = 40) -> np.ndarray:
    """Token ids with heavy repetition (a Zipf law over a small vocabulary): many repeated token pairs."""
    weights = 1.0 / np.arange(1, vocab + 1) ** 1.2
    return rng.choice(vocab, size=n, p=weights / weights.sum()) * 7 + 3


def random_key(i: int) -> bytes:
    return hkdf(f"test key {i}".encode(), b"chainmark/tests/randomisation")


def looks_uniform(p_values, level: float = 1e-3) -> bool:
    """The one check both directions use: a Kolmogorov-Smirnov test of the p-values against U(0, 1)."""
    return stats.kstest(np.asarray(p_values, dtype=float), "uniform").pvalue > level


def test_reproduces_the_exact_test_on_a_spanning_forest():
    rng = np.random.default_rng(3)
    for i in range(6):
        ids = repetitive_text(rng, n=250, vocab=60)
        mask = forest_mask(ids, int(ids.max()))
        exact = detect(ids, random_key(i), 5, test="exact").p_value
        mc = key_randomisation_test(ids, random_key(i), 5, mask=mask, draws=4999, seed=i)
        assert abs(mc.p_value - exact) <= 4 * mc.mc_error + 2 / 5000, (i, mc.p_value, exact, mc.mc_error)


def test_p_values_are_uniform_on_null_texts_and_the_check_flags_a_miscalibrated_test():
    rng = np.random.default_rng(11)
    texts = [repetitive_text(rng) for _ in range(300)]
    randomised = [key_randomisation_test(t, random_key(i), 5, draws=199, seed=i).p_value for i, t in enumerate(texts)]
    assert looks_uniform(randomised)
    # the z-test's normal tail on the same texts assumes independent transitions, which repeated pairs break
    normal = [detect(t, random_key(i), 5, test="z").p_value for i, t in enumerate(texts)]
    assert not looks_uniform(normal)


def test_the_observed_value_and_the_null_use_the_key_and_the_texts_copies():
    rng = np.random.default_rng(5)
    ids = repetitive_text(rng, n=200)
    res = key_randomisation_test(ids, KEY, 3, draws=99, seed=1)
    assert res.observed == detect(ids, KEY, 3).n_hits
    assert res.null.shape == (99,) and res.exceedances == int((res.null >= res.observed).sum())
    assert res.p_value == monte_carlo_p_value(res.observed, res.null) == (1 + res.exceedances) / 100
    legal = legal_transitions_null(ids, 3, draws=99, seed=1)
    assert legal.shape == (99, 199) and np.array_equal(legal_count(legal), res.null)
    # copies of a token share a state: two positions holding the same pair are legal together in every draw
    a, b = ids[:2]
    twins = [i for i in range(1, 199) if ids[i] == a and ids[i + 1] == b]
    for j in twins:
        assert np.array_equal(legal[:, 0], legal[:, j])


def test_blocks_do_not_change_the_draws(monkeypatch):
    from chainmark import randomisation

    ids = np.arange(500) % 37
    whole = legal_transitions_null(ids, 5, draws=50, seed=9)
    monkeypatch.setattr(randomisation, "_BLOCK_CELLS", 499 * 3)
    assert np.array_equal(legal_transitions_null(ids, 5, draws=50, seed=9), whole)


def test_config_and_errors():
    ids = np.arange(100) % 17
    config = ChainMarkConfig(KEY, S=4, rho=0.5)
    assert key_randomisation_test(ids, config, draws=9).observed == detect(ids, config).n_hits
    with pytest.raises(TypeError, match="configuration carries S"):
        key_randomisation_test(ids, config, S=4)
    with pytest.raises(ValueError, match="draws"):
        key_randomisation_test(ids, KEY, 5, draws=0)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        key_randomisation_test([5], KEY, 5)
    with pytest.raises(ValueError, match="one flag per transition"):
        key_randomisation_test(ids, KEY, 5, mask=np.ones(10, bool))
    with pytest.raises(TypeError, match="callable"):
        key_randomisation_test(ids, KEY, 5, statistic=3)

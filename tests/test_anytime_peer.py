"""The peer e-process (Su, Wang & Zhao's average of weight-adaptive and online Grenander): its two bets against
the paper's recipes computed the slow way, validity under the null with a control variant that must fail it,
power, shapes and bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from chainmark.auditor.rates import clopper_pearson_lower, clopper_pearson_upper
from cmlab.comparison import peer_crossing
from cmlab.comparison.anytime_peer import _PEER_CAP, _PEER_COMPONENTS, _PEER_ENDPOINT_WEIGHT, _peer_bets, _peer_log_e

ALPHA = 0.01
P0 = 0.2
ROWS = 20_000


def _null_rows(length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((ROWS, length)) < P0


def _crossed_share(log_e: np.ndarray) -> tuple[int, int]:
    return int((log_e.max(axis=1) >= math.log(1 / ALPHA)).sum()), log_e.shape[0]


# ---------------------------------------------------------------------------
# the bets, against the paper's recipes done the slow way
# ---------------------------------------------------------------------------
def _grenander_q(p_values: list[float], p0: float) -> float:
    """Mass on (0, p0] of the decreasing density of largest likelihood on the p-values plus weight-1/2 points
    at 0 and 1 (the one at 0 counted in the first block), by pooling adjacent violators."""
    points = sorted(set(p_values) | {1.0})
    weight = {p: float(p_values.count(p)) for p in points}
    weight[1.0] += _PEER_ENDPOINT_WEIGHT
    weight[points[0]] += _PEER_ENDPOINT_WEIGHT
    blocks = []  # [left, right, count]
    left = 0.0
    for p in points:
        blocks.append([left, p, weight[p]])
        left = p
        while len(blocks) > 1 and blocks[-2][2] / (blocks[-2][1] - blocks[-2][0]) < \
                blocks[-1][2] / (blocks[-1][1] - blocks[-1][0]):
            top = blocks.pop()
            blocks[-1][1], blocks[-1][2] = top[1], blocks[-1][2] + top[2]
    total = sum(b[2] for b in blocks)
    return sum(b[2] / total * (min(b[1], p0) - b[0]) / (b[1] - b[0]) for b in blocks if b[0] < p0)


@pytest.mark.parametrize("p0", [0.2, 1 / 3, 0.5, 0.05])
def test_the_grenander_bet_is_the_fit_on_the_block_p_values(p0):
    for m in range(0, 12):
        for h in range(0, m + 1):
            p_values = [p0] * h + [1.0] * (m - h)
            _, q = _peer_bets(h, m, p0)
            assert q == pytest.approx(_grenander_q(p_values, p0), abs=1e-12), (h, m)


@pytest.mark.parametrize("p0", [0.2, 0.5, 0.05])
def test_the_weight_adaptive_bet_maximises_the_past_log_product_within_the_cap(p0):
    etas = np.linspace(0.0, _PEER_CAP, 50_001)
    # the log calibrator -log p averaged over the randomised p-value's block: by quadrature, not the closed form
    grid = (np.arange(200_000) + 0.5) / 200_000
    legal, illegal = np.mean(-np.log(p0 * grid)), np.mean(-np.log(p0 + (1 - p0) * grid))
    assert p0 * legal + (1 - p0) * illegal == pytest.approx(1.0, abs=1e-6)  # a calibrator: mean 1 under the null
    for h, m in [(0, 0), (3, 4), (1, 9), (5, 10), (10, 10), (2, 40), (0, 7)]:
        objective = h * np.log1p(etas * (legal - 1)) + (m - h) * np.log1p(etas * (illegal - 1))
        eta = etas[int(np.argmax(objective))] if m else 0.0
        q, _ = _peer_bets(h, m, p0)
        assert q == pytest.approx(p0 * (1 + eta * (legal - 1)), abs=2e-5), (h, m)


def test_log_e_is_the_running_product_of_likelihood_ratios_at_the_predictable_bets():
    rng = np.random.default_rng(5)
    x = rng.random(60) < 0.5
    h_before = np.concatenate([[0], np.cumsum(x)[:-1]])
    q_wa, q_og = _peer_bets(h_before, np.arange(60), P0)
    lr = lambda q: np.where(x, q / P0, (1 - q) / (1 - P0))  # noqa: E731
    wa, og = np.cumprod(lr(q_wa)), np.cumprod(lr(q_og))
    np.testing.assert_allclose(np.exp(_peer_log_e(x, P0, "weight_adaptive")), wa, rtol=1e-10)
    np.testing.assert_allclose(np.exp(_peer_log_e(x, P0, "grenander")), og, rtol=1e-10)
    np.testing.assert_allclose(np.exp(_peer_log_e(x, P0)), (wa + og) / 2, rtol=1e-10)


# ---------------------------------------------------------------------------
# validity, and a variant that must fail the same check
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("length", [50, 300])
def test_under_the_null_the_share_ever_reaching_one_over_alpha_is_at_most_alpha(length):
    log_e = _peer_log_e(_null_rows(length, seed=length), P0)
    hits, trials = _crossed_share(log_e)
    assert clopper_pearson_upper(hits, trials) <= ALPHA, (hits, trials)
    # each part is a test martingale too
    for component in ("weight_adaptive", "grenander"):
        hits, trials = _crossed_share(_peer_log_e(_null_rows(length, seed=length + 1), P0, component))
        assert clopper_pearson_upper(hits, trials) <= ALPHA, (component, hits, trials)


@pytest.mark.parametrize("length", [50, 300])
def test_fitting_the_bet_on_the_outcome_it_bets_on_fails_the_same_check(length):
    """The off-by-one a careless port makes: counts that include the current transition. Not predictable, so
    not an e-process, and the check above sees it."""
    x = _null_rows(length, seed=length)
    h_with = np.cumsum(x, axis=1)
    q_wa, q_og = _peer_bets(h_with, np.arange(1, length + 1), P0)
    log_lr = lambda q: np.cumsum(np.where(x, np.log(q / P0), np.log1p(-q) - math.log1p(-P0)), axis=1)  # noqa: E731
    hits, trials = _crossed_share(np.logaddexp(log_lr(q_wa), log_lr(q_og)) - math.log(2))
    assert clopper_pearson_lower(hits, trials) > ALPHA, (hits, trials)


def test_each_process_has_null_mean_exactly_one_after_every_transition():
    """Over all 2^12 indicator sequences, weighted by their null probability: a test martingale, not merely a
    supermartingale (no evidence is thrown away)."""
    length = 12
    x = ((np.arange(2 ** length)[:, None] >> np.arange(length)) & 1).astype(bool)
    h = np.cumsum(x, axis=1)
    prob = P0 ** h * (1 - P0) ** (np.arange(1, length + 1) - h)  # of each sequence's first t indicators
    for component in _PEER_COMPONENTS:
        mean = (prob * np.exp(_peer_log_e(x, P0, component))).sum(axis=0) / 2 ** (length - np.arange(1, length + 1))
        np.testing.assert_allclose(mean, 1.0, rtol=1e-12, err_msg=component)


# ---------------------------------------------------------------------------
# power
# ---------------------------------------------------------------------------
def test_at_a_legal_rate_of_0_6_it_crosses_within_100_transitions_in_most_rows():
    x = np.random.default_rng(11).random((5000, 150)) < 0.6
    first = peer_crossing(x, P0, ALPHA)
    assert ((first >= 0) & (first < 100)).mean() > 0.95
    assert np.median(first) < 40
    for component in _PEER_COMPONENTS:
        part = peer_crossing(x, P0, ALPHA, component)
        assert ((part >= 0) & (part < 100)).mean() > 0.95, component


def test_it_does_not_grow_on_fewer_legal_transitions_than_chance():
    """Every bet is on a rate at or above p0: a text with no legal transition lowers E, never raises it."""
    log_e = _peer_log_e(np.zeros(500, dtype=bool), P0)
    assert log_e.max() <= 0.0 and peer_crossing(np.zeros(500, dtype=bool), P0) == -1


# ---------------------------------------------------------------------------
# shapes and bad input
# ---------------------------------------------------------------------------
def test_shapes_rows_and_one_text_agree():
    x = np.random.default_rng(2).random((7, 33)) < 0.5
    log_e = _peer_log_e(x, P0)
    assert log_e.shape == (7, 33)
    np.testing.assert_array_equal(_peer_log_e(x[3], P0), log_e[3])
    np.testing.assert_array_equal(_peer_log_e(x.astype(int), P0), log_e)
    first = peer_crossing(x, P0, 0.2)
    assert first.shape == (7,) and first.dtype == np.int64
    assert isinstance(peer_crossing(x[3], P0, 0.2), int) and peer_crossing(x[3], P0, 0.2) == first[3]
    assert _peer_log_e(np.zeros((4, 0), dtype=bool), P0).shape == (4, 0)
    assert peer_crossing(np.zeros((4, 0), dtype=bool), P0).tolist() == [-1] * 4
    assert peer_crossing([], P0) == -1


def test_many_rows_are_scored_in_blocks_the_same_as_one_by_one():
    x = np.random.default_rng(4).random((9000, 12)) < 0.4
    log_e = _peer_log_e(x, P0)
    for i in (0, 4095, 4096, 8191, 8999):
        np.testing.assert_array_equal(log_e[i], _peer_log_e(x[i], P0))


@pytest.mark.parametrize("legal, error, words", [
    (np.zeros((2, 3, 4), dtype=bool), ValueError, "1-D"),
    (True, ValueError, "1-D"),
    ([[True, False], [True]], ValueError, "equal length"),
    ([0, 1, 2], ValueError, "only 0 and 1"),
    ([0.0, float("nan")], ValueError, "only 0 and 1"),
    (["yes", "no"], TypeError, "booleans"),
])
def test_bad_indicators_are_refused_clearly(legal, error, words):
    with pytest.raises(error, match=words):
        _peer_log_e(legal, P0)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"p0": 0.0}, ValueError, "p0"), ({"p0": 1.0}, ValueError, "p0"), ({"p0": "0.2"}, TypeError, "p0"),
    ({"p0": True}, TypeError, "p0"), ({"p0": P0, "alpha": 1.5}, ValueError, "alpha"),
    ({"p0": P0, "component": "mixture"}, ValueError, "component"),
])
def test_bad_settings_are_refused_clearly(kwargs, error, words):
    with pytest.raises(error, match=words):
        peer_crossing([True, False], **kwargs)


def test_bad_counts_are_refused():
    for hits, scored in [(3, 2), (-1, 2), (0.5, 2)]:
        with pytest.raises(ValueError, match="counts"):
            _peer_bets(hits, scored, P0)

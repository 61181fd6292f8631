"""Entropy gates: signals, gate flags, and quantile calibration of tau."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from chainmark import GATE_KINDS, Gate
from chainmark.gates import check_rho, entropy, gate_signal, top2_gap


# ---- signals ------------------------------------------------------------------------

def test_entropy_uniform_and_one_hot():
    V = 49152
    assert entropy(torch.zeros(V)).item() == pytest.approx(math.log(V), rel=1e-5)
    one_hot = torch.full((V,), float("-inf"))
    one_hot[7] = 3.0
    assert entropy(one_hot).item() == 0.0


def test_entropy_matches_scipy_on_random_logits():
    logits = torch.randn(6, 1000, generator=torch.Generator().manual_seed(0)) * 3
    expected = [stats.entropy(torch.softmax(row.double(), -1).numpy()) for row in logits]
    assert entropy(logits).shape == (6,)
    assert np.allclose(entropy(logits).numpy(), expected, rtol=1e-4)


def test_entropy_is_float32_for_half_input():
    out = entropy(torch.randn(2, 50).half())
    assert out.dtype == torch.float32


def test_top2_gap():
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [1 / 3, 1 / 3, 1 / 3]])
    gap = top2_gap(probs.log())
    assert np.allclose(gap.numpy(), [0.2, 0.7, 0.0], atol=1e-6)


def test_gate_signal_kinds():
    logits = torch.randn(3, 40)
    assert torch.equal(gate_signal(logits, "top2_gap"), top2_gap(logits))
    for kind in ("all", "high_entropy", "low_entropy"):
        assert torch.equal(gate_signal(logits, kind), entropy(logits))
    with pytest.raises(ValueError, match="gate must be one of"):
        gate_signal(logits, "medium_entropy")


# ---- gates on logits -----------------------------------------------------------------

def test_gate_flags_on_logits():
    flat = torch.zeros(100)                       # H = log 100 = 4.6
    peaked = torch.full((100,), -20.0)
    peaked[0] = 20.0                              # H ~ 0, gap ~ 1
    logits = torch.stack([flat, peaked])
    assert Gate("high_entropy", 1.0)(logits).tolist() == [True, False]
    assert Gate("low_entropy", 1.0)(logits).tolist() == [False, True]
    assert Gate("top2_gap", 0.5)(logits).tolist() == [True, False]
    assert Gate("all")(logits).tolist() == [True, True]
    assert Gate("high_entropy", 1.0)(logits).dtype == torch.bool


def test_flags_from_signal_numpy_torch_and_lists():
    gate = Gate("low_entropy", 2.0)
    assert gate.flags_from_signal(np.array([1.0, 3.0])).tolist() == [True, False]
    assert gate.flags_from_signal(torch.tensor([1.0, 3.0])).tolist() == [True, False]
    assert gate.flags_from_signal([1.0, 3.0]).tolist() == [True, False]
    everything = Gate("all").flags_from_signal(np.array([np.nan, 1.0]))
    assert everything.tolist() == [True, True]


# ---- calibration -----------------------------------------------------------------------

RHOS = [0.1, 0.25, 0.5, 0.75, 0.9]


def synthetic_signal(kind: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """Entropy-like (gamma, nats) or gap-like (beta, in [0, 1]) positive signals."""
    if kind == "top2_gap":
        return rng.beta(0.7, 0.9, size=size)
    return rng.gamma(shape=1.3, scale=1.6, size=size)


@pytest.mark.parametrize("kind", ["high_entropy", "low_entropy", "top2_gap"])
@pytest.mark.parametrize("rho", RHOS)
def test_calibrated_rate_on_pilot_is_within_one_position(kind, rho):
    pilot = synthetic_signal(kind, 2001, np.random.default_rng(1))
    gate = Gate.calibrate(kind, rho, pilot)
    assert abs(gate.rate(pilot) - rho) <= 1 / pilot.size + 1e-12


@pytest.mark.parametrize("kind", ["high_entropy", "low_entropy", "top2_gap"])
@pytest.mark.parametrize("rho", RHOS)
def test_calibrated_rate_on_fresh_sample(kind, rho):
    """Realised rate on fresh i.i.d. signals tracks rho.

    The rate on the fresh sample is F(tau_hat); its error has two independent
    parts: the pilot quantile (variance ~ rho(1-rho)/n_pilot) and the fresh
    binomial share (rho(1-rho)/n_fresh). Tolerance: 5 combined SDs.
    """
    rng = np.random.default_rng(2)
    n_pilot, n_fresh = 5_000, 50_000
    gate = Gate.calibrate(kind, rho, synthetic_signal(kind, n_pilot, rng))
    fresh = synthetic_signal(kind, n_fresh, rng)
    sd = math.sqrt(rho * (1 - rho) * (1 / n_pilot + 1 / n_fresh))
    assert abs(gate.rate(fresh) - rho) < 5 * sd


def test_high_and_low_gates_are_complements_at_the_same_tau():
    signal = synthetic_signal("high_entropy", 10_000, np.random.default_rng(3))
    hi = Gate.calibrate("high_entropy", 0.3, signal)
    lo = Gate("low_entropy", hi.tau)
    assert hi.rate(signal) + lo.rate(signal) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["high_entropy", "low_entropy", "top2_gap"])
def test_rho_zero_and_one_are_exact(kind):
    rng = np.random.default_rng(4)
    signal = np.concatenate([synthetic_signal(kind, 1000, rng), [0.0, 0.0, 1.0, 50.0, 1e-30]])
    none = Gate.calibrate(kind, 0.0, signal)
    every = Gate.calibrate(kind, 1.0, signal)
    assert none.rate(signal) == 0.0 and every.rate(signal) == 1.0
    # they need no pilot at all, and hold on signals the pilot never saw
    assert Gate.calibrate(kind, 0.0, []).rate([1e6, -1e6, 0.0]) == 0.0
    assert Gate.calibrate(kind, 1, []).rate([1e6, -1e6, 0.0]) == 1.0
    logits = torch.randn(5, 30)
    assert not every(logits).logical_not().any() and not none(logits).any()


def test_all_gate():
    gate = Gate.calibrate("all", 1.0, [])
    assert gate.rate([0.0, 5.0]) == 1.0
    with pytest.raises(ValueError, match="the 'all' gate has rho = 1"):
        Gate.calibrate("all", 0.5, [1.0, 2.0])


def test_calibration_ignores_non_finite_pilot_values():
    pilot = np.array([np.nan, np.inf, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert Gate.calibrate("high_entropy", 0.5, pilot).tau == pytest.approx(3.0)


def test_calibration_accepts_torch_and_2d_pilots():
    pilot = torch.arange(100, dtype=torch.float32).reshape(10, 10)
    assert Gate.calibrate("low_entropy", 0.5, pilot).tau == pytest.approx(49.5)


# ---- bad inputs ----------------------------------------------------------------------------

@pytest.mark.parametrize("rho", [-0.01, 1.01, float("nan"), float("inf")])
def test_rho_out_of_range(rho):
    with pytest.raises(ValueError, match=r"rho must lie in \[0, 1\]"):
        Gate.calibrate("high_entropy", rho, [1.0, 2.0])
    with pytest.raises(ValueError, match=r"rho must lie in \[0, 1\]"):
        check_rho(rho)


@pytest.mark.parametrize("rho", ["0.5", None, True, [0.5]])
def test_rho_wrong_type(rho):
    with pytest.raises(TypeError, match=r"rho must be a number in \[0, 1\]"):
        Gate.calibrate("high_entropy", rho, [1.0, 2.0])


def test_bad_kind():
    with pytest.raises(ValueError, match="gate must be one of"):
        Gate("medium")
    with pytest.raises(ValueError, match="gate must be one of"):
        Gate.calibrate("entropy", 0.5, [1.0])
    assert set(GATE_KINDS) == {"all", "high_entropy", "low_entropy", "top2_gap"}


@pytest.mark.parametrize("tau, error", [(float("nan"), ValueError), ("1.0", TypeError),
                                        (True, TypeError), (None, TypeError)])
def test_bad_tau(tau, error):
    with pytest.raises(error, match="tau must"):
        Gate("high_entropy", tau)


def test_numpy_tau_accepted():
    assert Gate("high_entropy", np.float32(1.5)).tau == pytest.approx(1.5)
    assert Gate("low_entropy", np.int64(2)).rate([1.0, 3.0]) == 0.5


def test_empty_or_useless_pilot():
    with pytest.raises(ValueError, match="pilot_signal is empty"):
        Gate.calibrate("high_entropy", 0.5, [])
    with pytest.raises(ValueError, match="pilot_signal is empty"):
        Gate.calibrate("top2_gap", 0.5, [np.nan, np.inf])


def test_rate_on_empty_signal():
    with pytest.raises(ValueError, match="signal is empty"):
        Gate("high_entropy", 1.0).rate([])

"""Entropy gates: signals, gate flags, and quantile calibration of tau."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from chainmark import Gate
from chainmark.gates import GATE_KINDS
from chainmark.checks import check_rho
from chainmark.gate_signals import (
    Workspace,
    entropy,
    entropy_signals,
    gate_flags,
    gate_signal,
    row_maxima,
    row_signals,
    top2_gap,
)


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


def awkward_logits(V: int, batch: int = 5) -> torch.Tensor:
    """Random logits with removed tokens (-inf) in row 0 and a tie at the top of row 1."""
    scores = torch.randn(batch, V, generator=torch.Generator().manual_seed(1)) * 3
    scores[0, : V - 50] = float("-inf")
    scores[1, 3] = scores[1, 7] = scores[1].max() + 1.0  # gap 0
    return scores


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("V", [300, 70_000])  # several rows per CPU chunk; one row per chunk
def test_fused_and_row_signals_agree_with_the_definition(V, dtype):
    scores = awkward_logits(V).to(dtype)
    reference = entropy_signals(scores, gap=True)
    assert torch.equal(reference.entropy, entropy(scores)) and torch.equal(reference.gap, top2_gap(scores))
    ws = Workspace()
    for _ in range(2):  # the workspace is reused on the second call
        fused = entropy_signals(scores, gap=True, fused=True, workspace=ws)
        torch.testing.assert_close(fused.entropy, reference.entropy, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(fused.gap, reference.gap, atol=2e-6, rtol=1e-5)
    x = scores.float()
    tops, where = row_maxima(x, with_index=True)
    shifted, e = torch.empty(V), torch.empty(V)
    rows = torch.tensor([row_signals(x[r], tops[r], shifted, e, where[r]) for r in range(len(x))])
    torch.testing.assert_close(rows, torch.stack([fused.entropy, fused.gap], dim=1))
    assert float(fused.gap[1]) == 0.0 and float(rows[1, 1]) == 0.0
    assert entropy_signals(scores, fused=True).gap is None
    assert row_maxima(x, with_index=False) == (tops, None)
    assert math.isnan(row_signals(x[0], tops[0], shifted, e)[1])  # no top position, no gap


def test_signals_keep_leading_axes_and_leave_the_logits_alone():
    scores = awkward_logits(40, batch=6).reshape(2, 3, 40)
    before = scores.clone()
    for fused in (False, True):
        signals = entropy_signals(scores, gap=True, fused=fused)
        assert signals.entropy.shape == signals.gap.shape == (2, 3)
        assert signals.entropy.dtype == torch.float32
    assert torch.equal(scores, before)


def test_a_row_without_finite_logits_has_nan_signals():
    scores = torch.full((2, 30), float("-inf"))
    scores[1] = torch.arange(30.0)
    for fused in (False, True):
        signals = entropy_signals(scores, gap=True, fused=fused)
        assert math.isnan(signals.entropy[0]) and math.isnan(signals.gap[0])
        assert math.isfinite(signals.entropy[1]) and math.isfinite(signals.gap[1])
    tops, where = row_maxima(scores, with_index=True)
    h, g = row_signals(scores[0], tops[0], torch.empty(30), torch.empty(30), where[0])
    assert math.isnan(h) and math.isnan(g)


def test_log_probs_come_with_the_definition():
    scores = awkward_logits(50)
    signals = entropy_signals(scores, log_probs=True)
    assert torch.equal(signals.log_probs, torch.log_softmax(scores, dim=-1))
    assert torch.equal(signals.probs, signals.log_probs.exp())
    assert torch.equal(signals.entropy, entropy(scores))
    assert entropy_signals(scores).log_probs is None and entropy_signals(scores).gap is None


def test_entropy_signals_rejects_bad_input():
    with pytest.raises(TypeError, match="torch.Tensor"):
        entropy_signals([0.0, 1.0])
    with pytest.raises(TypeError, match="vocabulary axis"):
        entropy_signals(torch.tensor(1.0))
    with pytest.raises(ValueError, match="log-probabilities"):
        entropy_signals(torch.zeros(2, 3), fused=True, log_probs=True)


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
    assert gate_flags(Gate("high_entropy", 1.0), logits).tolist() == [True, False]
    assert gate_flags(Gate("low_entropy", 1.0), logits).tolist() == [False, True]
    assert gate_flags(Gate("top2_gap", 0.5), logits).tolist() == [True, False]
    assert gate_flags(Gate("all"), logits).tolist() == [True, True]
    assert gate_flags(Gate("high_entropy", 1.0), logits).dtype == torch.bool


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
    assert not gate_flags(every, logits).logical_not().any() and not gate_flags(none, logits).any()


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

"""The detector's null behaviour on i.i.d. uniform tokens, against exact binomial theory.

Under the null every transition is legal with probability p0 = k/S,
independently (for i.i.d. uniform states the increments s_{i+1} - s_i are
i.i.d. uniform), so the count of legal transitions is Binomial(n - 1, p0).
The z-test rejects when z > z_alpha, i.e. when the count exceeds an integer
cutoff c; its exact size is P[Binomial(n - 1, p0) > c], which differs from
alpha because the statistic is discrete. Every tolerance below is a 99.9%
interval of the sampling distribution of the quantity tested, with a fixed
seed; nothing is tuned to pass.

Most cases simulate the states directly with numpy (the hash adds nothing
there); a few run the whole pipeline on uniformly drawn token ids of the
embedded model's vocabulary, hashed with a key.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from chainmark.detection import detect_batch, score_states
from chainmark.config import ChainMarkConfig
from chainmark.topology import Topology

CONFIDENCE = 0.999
Z_CONF = float(norm.isf((1 - CONFIDENCE) / 2))  # two-sided 99.9%: 3.29
VOCAB = 49152  # the embedded SmolLM2 vocabulary
REPLICATES = {50: 200_000, 200: 100_000}
SEED = 20260


def cutoff(m: int, p0: float, alpha: float) -> int:
    """Largest count c whose z-score does not exceed z_alpha (reject iff count > c)."""
    z_alpha = float(norm.isf(alpha))
    sd = math.sqrt(p0 * (1 - p0) / m)
    c = math.floor(m * (p0 + z_alpha * sd))
    # guard the floor against rounding: step until z(c) <= z_alpha < z(c + 1)
    while (c / m - p0) / sd > z_alpha:
        c -= 1
    while ((c + 1) / m - p0) / sd <= z_alpha:
        c += 1
    return c


def exact_size(n: int, p0: float, alpha: float) -> float:
    """P[Binomial(n - 1, p0) > c]: the probability that the test rejects under the null."""
    return float(binom.sf(cutoff(n - 1, p0, alpha), n - 1, p0))


def binomial_interval(trials: int, p: float) -> tuple[int, int]:
    """Central 99.9% interval of a Binomial(trials, p) count."""
    tail = (1 - CONFIDENCE) / 2
    return int(binom.ppf(tail, trials, p)), int(binom.isf(tail, trials, p))


def simulate_counts(S: int, n: int, reps: int, seed: int, topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Legal-transition counts of ``reps`` sequences of i.i.d. uniform states (and the states)."""
    rng = np.random.default_rng(seed)
    states = rng.integers(0, S, size=(reps, n), dtype=np.int8)
    counts = topo.matrix[states[:, :-1], states[:, 1:]].sum(axis=1)
    return counts, states


def package_decisions(states: np.ndarray, counts: np.ndarray, topo: Topology, alpha: float) -> dict[int, bool]:
    """The package's decision for every count that occurs (one representative row each)."""
    values, first = np.unique(counts, return_index=True)
    decisions = {}
    for value, row in zip(values.tolist(), first.tolist()):
        res = score_states(states[row], topo, alpha)
        assert res.n_hits == value and res.n_scored == states.shape[1] - 1
        decisions[value] = bool(res.is_watermarked)
    return decisions


@pytest.mark.parametrize("S", [2, 5, 11])
@pytest.mark.parametrize("n", [50, 200])
def test_null_fpr_matches_exact_size_simulated_states(S, n):
    topo = Topology.clockwork(S)
    p0 = topo.p0
    reps = REPLICATES[n]
    counts, states = simulate_counts(S, n, reps, SEED + 100 * S + n, topo)
    # the package counts exactly what we count, row by row (a random subsample)
    sample = np.random.default_rng(1).choice(reps, size=300, replace=False)
    for row in sample.tolist():
        assert score_states(states[row], topo, 0.01).n_hits == counts[row]
    for alpha in (0.01, 0.001):
        c = cutoff(n - 1, p0, alpha)
        decisions = package_decisions(states, counts, topo, alpha)
        # the package's decision is exactly "count > c" (the size we compute is its size)
        assert all(decided == (value > c) for value, decided in decisions.items())
        values, freq = np.unique(counts, return_counts=True)
        rejections = int(sum(f for v, f in zip(values.tolist(), freq.tolist()) if decisions[v]))
        size = exact_size(n, p0, alpha)
        lo, hi = binomial_interval(reps, size)
        assert lo <= rejections <= hi, (
            f"S={S} n={n} alpha={alpha}: {rejections} rejections in {reps}, exact size {size:.5f} "
            f"gives the 99.9% interval [{lo}, {hi}]")


@pytest.mark.parametrize("S", [2, 5, 11])
@pytest.mark.parametrize("n", [50, 200])
def test_null_mean_and_variance_of_phi_simulated_states(S, n):
    topo = Topology.clockwork(S)
    p0, m = topo.p0, n - 1
    reps = REPLICATES[n]
    counts, _ = simulate_counts(S, n, reps, SEED + 7 + 100 * S + n, topo)
    phi = counts / m
    _check_mean_and_variance(phi, p0, m)


def _check_mean_and_variance(phi: np.ndarray, p0: float, m: int) -> None:
    reps = phi.size
    var0 = p0 * (1 - p0) / m
    mean_tol = Z_CONF * math.sqrt(var0 / reps)
    assert abs(phi.mean() - p0) <= mean_tol, (phi.mean(), p0, mean_tol)
    # sampling SD of the sample variance, from the binomial's fourth central moment
    q = 1 - p0
    mu4 = m * p0 * q * (1 + 3 * (m - 2) * p0 * q) / m**4
    var_sd = math.sqrt((mu4 - var0**2 * (reps - 3) / (reps - 1)) / reps)
    assert abs(phi.var(ddof=1) - var0) <= Z_CONF * var_sd, (phi.var(ddof=1), var0, Z_CONF * var_sd)


@pytest.mark.parametrize("S, n, topology", [(2, 200, "clockwork"), (5, 200, "clockwork"), (11, 50, "clockwork"),
                                         (5, 50, "soft_cycle")])
def test_null_with_hashed_token_ids(S, n, topology):
    """The whole pipeline (hash, state table, batched detector) on uniform token ids."""
    reps = 40_000
    rng = np.random.default_rng(SEED + S + n)
    key = rng.bytes(32)
    ids = rng.integers(0, VOCAB, size=(reps, n))
    results = detect_batch(ids, ChainMarkConfig(key, S=S, topology=topology), alpha=0.01, vocab_size=VOCAB, test="z")
    topo = Topology.clockwork(S) if topology == "clockwork" else Topology.soft_cycle(S)
    p0 = topo.p0
    phi = np.array([r.phi for r in results])
    z = np.array([r.z for r in results])
    assert np.isfinite(z).all() and ((phi >= 0) & (phi <= 1)).all()
    _check_mean_and_variance(phi, p0, n - 1)
    for alpha in (0.01, 0.001):
        z_alpha = float(norm.isf(alpha))
        rejections = int(np.count_nonzero(z > z_alpha))
        if alpha == 0.01:
            assert rejections == sum(r.is_watermarked for r in results)
        size = exact_size(n, p0, alpha)
        lo, hi = binomial_interval(reps, size)
        assert lo <= rejections <= hi, (S, n, topology, alpha, rejections, size, lo, hi)


@pytest.mark.parametrize("S", [2, 5, 11])
@pytest.mark.parametrize("n", [3, 50, 200])
@pytest.mark.parametrize("alpha", [0.01, 0.001])
def test_exact_size_agrees_with_the_calibration_module(S, n, alpha):
    from chainmark import calibrate as cal

    assert cal.exact_fpr(n, S, alpha) == pytest.approx(exact_size(n, 1 / S, alpha), rel=1e-12, abs=1e-300)


def test_exact_size_differs_from_alpha_where_the_statistic_is_coarse():
    """A sanity check of the helper: the discrete test's size is not alpha itself."""
    # S = 11, n = 50: the cutoff sits between counts; the exact size exceeds alpha
    assert exact_size(50, 1 / 11, 0.01) > 0.01
    # the exact size is the binomial tail above the cutoff, by construction
    c = cutoff(49, 0.5, 0.01)
    assert (c / 49 - 0.5) / math.sqrt(0.25 / 49) <= norm.isf(0.01) < ((c + 1) / 49 - 0.5) / math.sqrt(0.25 / 49)


def test_prompt_rate_is_the_prompt_resampled_bootstrap_whatever_the_records_form():
    """One interval per set of flags: records as dicts or as a table, in any order, give the interval of
    cluster_bootstrap_rate over "domain/prompt_index" (the labels chapters 0 and 5 build themselves)."""
    import pandas as pd

    from cmlab.stats import cluster_bootstrap_rate, prompt_labels, prompt_rate

    rng = np.random.default_rng(SEED)
    records = [{"domain": d, "prompt_index": i} for d in ("code", "wiki") for i in range(40) for _ in range(3)]
    flags = rng.random(len(records)) < 0.08
    expected = cluster_bootstrap_rate(flags, [f"{r['domain']}/{r['prompt_index']}" for r in records])
    assert prompt_rate(flags, records) == expected
    table = pd.DataFrame(records).astype({"prompt_index": "int64"})
    assert prompt_rate(pd.Series(flags), table) == expected
    order = rng.permutation(len(records))
    assert prompt_rate(flags[order], [records[j] for j in order]) == expected
    assert list(prompt_labels(records[:2])) == ["code/0", "code/0"]
    with pytest.raises(ValueError, match="prompt_index"):
        prompt_labels([{"domain": "code", "prompt_index": 1.5}])
    with pytest.raises(ValueError, match="one cluster per flag"):
        prompt_rate(flags[:-1], records)


def test_prompt_rate_on_the_reference_null_matches_every_page():
    """The reference run's 1,200 unwatermarked replies at z_alpha (S = 5, alpha = 1%): 68 flagged, and the
    interval that chapters 0, 5, 6.1, 7 and 8.1 print, 5.7% [4.2, 7.2]."""
    from chainmark import z_alpha
    from cmlab.harness.reference import load_reference
    from cmlab.stats import prompt_rate

    null = load_reference("null")
    own = null[null.detector == "chainmark"]
    est = prompt_rate(own.z.to_numpy() > z_alpha(0.01), own)
    assert (est.hits, est.trials) == (68, 1200)
    assert str(est) == "5.7% [4.2, 7.2] (68/1200)"

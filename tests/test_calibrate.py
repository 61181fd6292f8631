"""Tests for chainmark.calibrate (closed form, exact size, recalibration) and cmlab.harness.corpora.

Statistical tests use fixed seeds; every tolerance is four standard errors of
the quantity's sampling distribution, derived in the test from the model
that generated the data, never tuned to pass.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from chainmark.calibrate import (_PAPER_ALPHAS, _PAPER_NS, _PAPER_RHOS, calibration_table, critical_count, exact_fpr,
                                 hoeffding_fpr_bound, midpoint_threshold, midpoint_z, min_null_samples, _null_p0,
                                 predicted_z, recalibrate, s_star, z_alpha)
from chainmark.auditor.rates import clopper_pearson, rate_estimate
from cmlab.stats import lifted_threshold, split_halves
from chainmark.significance import p_value, z_score
from chainmark.detection import score_states
from chainmark.topology import Topology

# The paper's lookup table (reference tables section): rows n, columns
# (alpha, rho) = (1e-3, 0.3), (1e-3, 0.5), (1e-6, 0.3), (1e-6, 0.5).
PAPER_TABLE = {
    100: (6, 3, 12, 5),
    200: (4, 2, 7, 3),
    500: (2, 2, 4, 2),
    1000: (2, 2, 3, 2),
}
K_SIGMA = 4.0


# ---------------------------------------------------------------- closed form
def test_z_alpha_known_values():
    assert z_alpha(0.01) == pytest.approx(2.3263, abs=1e-4)
    assert z_alpha(0.05) == pytest.approx(1.6449, abs=1e-4)
    assert z_alpha(0.5) == pytest.approx(0.0, abs=1e-12)


def test_calibration_table_reproduces_paper_cell_by_cell():
    table = calibration_table()
    assert list(table.index) == list(_PAPER_NS)
    assert list(table.columns) == [(a, r) for a in _PAPER_ALPHAS for r in _PAPER_RHOS]
    for n, row in PAPER_TABLE.items():
        for (alpha, rho), expected in zip(table.columns, row):
            assert table.loc[n, (alpha, rho)] == expected, (n, alpha, rho)
            assert s_star(n, rho, alpha) == expected


@given(n=st.integers(2, 5000), rho=st.floats(0.01, 1.0), alpha=st.floats(1e-9, 0.49))
@settings(max_examples=300, deadline=None)
def test_k1_reduces_to_paper_rule(n, rho, alpha):
    z = z_alpha(alpha)
    paper = math.ceil(4 * z * z / (rho * rho * (n - 1)) + 1)
    assert abs(s_star(n, rho, alpha, k=1) - paper) <= (1 if _near_integer(4 * z * z / (rho * rho * (n - 1))) else 0)
    S = s_star(n, rho, alpha)
    assert predicted_z(n, rho, S) == pytest.approx(rho * math.sqrt((S - 1) * (n - 1)))
    paper_bound = 2 * math.exp(-2 * ((n - 1) // 2) * ((rho / 2) * (S - 1) / S) ** 2)
    assert hoeffding_fpr_bound(n, rho, S) == pytest.approx(paper_bound)
    assert midpoint_threshold(rho, S) == pytest.approx(1 / S + (rho / 2) * (S - 1) / S)


def _near_integer(x: float) -> bool:
    return abs(x - round(x)) < 1e-8


@given(n=st.integers(2, 3000), rho=st.floats(0.01, 1.0), alpha=st.floats(1e-9, 0.49), k=st.integers(1, 4))
@settings(max_examples=300, deadline=None)
def test_s_star_is_the_smallest_state_count_clearing_the_midpoint(n, rho, alpha, k):
    S = s_star(n, rho, alpha, k)
    assert S >= k + 1
    assert midpoint_z(n, rho, S, k) >= z_alpha(alpha) * (1 - 1e-9)
    if S - 1 >= k + 1:
        assert midpoint_z(n, rho, S - 1, k) < z_alpha(alpha) * (1 + 1e-9)


def test_s_star_monotone_in_n_rho_alpha_and_k():
    ns = [2, 3, 10, 50, 100, 200, 500, 1000, 5000]
    rhos = [0.05, 0.1, 0.3, 0.5, 0.8, 1.0]
    alphas = [1e-8, 1e-6, 1e-3, 1e-2, 0.05, 0.2]
    for rho in rhos:
        for alpha in alphas:
            by_n = [s_star(n, rho, alpha) for n in ns]
            assert by_n == sorted(by_n, reverse=True)  # longer texts need fewer states
    for n in ns:
        for alpha in alphas:
            by_rho = [s_star(n, r, alpha) for r in rhos]
            assert by_rho == sorted(by_rho, reverse=True)  # more budget, fewer states
        for rho in rhos:
            by_alpha = [s_star(n, rho, a) for a in alphas]
            assert by_alpha == sorted(by_alpha, reverse=True)  # stricter alpha, more states
            by_k = [s_star(n, rho, 0.01, k) for k in (1, 2, 3, 4)]
            assert by_k == sorted(by_k)  # more successors, higher baseline, more states


def test_k_regular_generalisation_values():
    # S* = ceil(k (4 z^2 / (rho^2 (n - 1)) + 1)); at k = 2, n = 100, rho = 0.5, alpha = 1e-3:
    z = z_alpha(1e-3)
    assert s_star(100, 0.5, 1e-3, k=2) == math.ceil(2 * (4 * z * z / (0.25 * 99) + 1))
    assert predicted_z(200, 0.5, 5, k=2) == pytest.approx(0.5 * math.sqrt((1 - 0.4) * 199 / 0.4))
    assert s_star(100, 0.5, 0.7) == 2 and s_star(100, 0.5, 0.7, k=3) == 4  # alpha >= 0.5: any S works


def test_hoeffding_bound_decreases_with_n_and_is_vacuous_for_two_tokens():
    values = [hoeffding_fpr_bound(n, 0.5, 5) for n in (2, 11, 101, 1001)]
    assert values[0] == 2.0
    assert values == sorted(values, reverse=True)
    assert values[-1] < 1e-10


# ---------------------------------------------------------------- exact size
@pytest.mark.parametrize("S,k,n,alpha", [(2, 1, 50, 0.01), (5, 1, 128, 0.01), (5, 2, 200, 0.05), (3, 1, 20, 0.1)])
def test_critical_count_and_exact_fpr_match_the_detector(S, k, n, alpha):
    p0 = k / S
    fires = [p_value(z_score(c / (n - 1), p0, n - 1)) < alpha for c in range(n)]
    c_star = critical_count(n, S, alpha, k)
    assert fires == [c >= c_star for c in range(n)]
    direct = sum(stats.binom.pmf(c, n - 1, p0) for c in range(n) if fires[c])
    assert exact_fpr(n, S, alpha, k) == pytest.approx(direct, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("name", ["clockwork", "soft_cycle", "non_circulant"])
def test_iid_uniform_states_reach_the_exact_binomial_size(name):
    """Valid-transition counts of i.i.d. uniform states are Binomial(n - 1, p0) for any k-regular T."""
    S, n, alpha, trials = 5, 64, 0.05, 40_000
    if name == "clockwork":
        topo = Topology.clockwork(S)
    elif name == "soft_cycle":
        topo = Topology.soft_cycle(S)
    else:  # 2-regular, not a circulant: rows and columns sum to 2
        m = np.zeros((S, S), dtype=int)
        for a, b in [(0, 1), (0, 2), (1, 0), (1, 3), (2, 4), (2, 0), (3, 4), (3, 1), (4, 2), (4, 3)]:
            m[a, b] = 1
        topo = Topology.from_matrix(m)
    rng = np.random.default_rng(7)
    states = rng.integers(0, S, size=(trials, n))
    counts = topo.matrix[states[:, :-1], states[:, 1:]].sum(axis=1)
    p0, k = topo.p0, topo.k
    # mean and variance of the count against Binomial(n - 1, p0)
    mean_se = math.sqrt((n - 1) * p0 * (1 - p0) / trials)
    assert abs(counts.mean() - (n - 1) * p0) < K_SIGMA * mean_se
    fired = counts >= critical_count(n, S, alpha, k)
    expected = exact_fpr(n, S, alpha, k)
    assert abs(fired.mean() - expected) < K_SIGMA * math.sqrt(expected * (1 - expected) / trials)
    # the detector itself agrees on a subsample
    for row in states[:200]:
        r = score_states(row, topo, alpha)
        assert r.is_watermarked == (r.n_hits >= critical_count(n, S, alpha, k))


# ---------------------------------------------------------------- rates
def test_clopper_pearson_matches_known_forms():
    lo, hi = clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10))
    lo, hi = clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 10))
    ci = stats.binomtest(7, 50).proportion_ci(0.95, method="exact")
    assert clopper_pearson(7, 50) == pytest.approx((ci.low, ci.high))


def test_rate_estimate():
    r = rate_estimate([True, False, False, True])
    assert (r.hits, r.trials, r.rate) == (2, 4, 0.5) and r.low < 0.5 < r.high
    assert "2/4" in str(r)


def test_rate_estimate_format():
    r = rate_estimate([True] * 2 + [False] * 14)  # 12.5% [1.55, 38.35]
    assert str(r) == r.format() == "12.5% [1.6, 38.3] (2/16)"
    assert r.format(0) == f"{100 * r.rate:.0f}% [{100 * r.low:.0f}, {100 * r.high:.0f}] (2/16)" == "12% [2, 38] (2/16)"
    assert r.format(0, counts=False) == "12% [2, 38]"
    assert r.format(3, counts=False) == f"{100 * r.rate:.3f}% [{100 * r.low:.3f}, {100 * r.high:.3f}]"
    assert rate_estimate([True] * 4).format(0, counts=False).startswith("100% [")
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="digits"):
            r.format(bad)


# ---------------------------------------------------------------- recalibration
M_FIT = N_EVAL = 100_000
ALPHA = 0.01


def _split(sample):
    return sample[:M_FIT], sample[M_FIT:]


def _quantile_tolerance(alpha: float) -> tuple[float, float]:
    """Mean and SD of the held-out FPR of the order-statistic threshold (continuous null).

    The true exceedance probability of z_(j) is Beta(M + 1 - j, j); the held-out
    rate adds binomial noise over N_EVAL draws.
    """
    j = math.ceil((M_FIT + 1) * (1 - alpha) - 1e-9)
    a, b = M_FIT + 1 - j, j
    mean = a / (a + b)
    var_q = a * b / ((a + b) ** 2 * (a + b + 1))
    e_q1q = mean - (var_q + mean * mean)  # E[q(1 - q)]
    return mean, math.sqrt(var_q + e_q1q / N_EVAL)


@pytest.mark.parametrize("family", ["gaussian", "laplace", "student_t3"])
def test_quantile_recipe_hits_alpha_on_held_out_data(family):
    rng = np.random.default_rng({"gaussian": 1, "laplace": 2, "student_t3": 3}[family])
    if family == "gaussian":
        sample = 0.4 + 1.3 * rng.standard_normal(M_FIT + N_EVAL)
    elif family == "laplace":
        sample = 0.2 + rng.laplace(0.0, 1.0, M_FIT + N_EVAL)
    else:
        sample = rng.standard_t(3, M_FIT + N_EVAL)
    fit, held = _split(sample)
    threshold = recalibrate(fit, ALPHA, method="quantile")
    fpr = float(np.mean(held > threshold))
    mean, sd = _quantile_tolerance(ALPHA)
    assert mean <= ALPHA  # the finite-sample guarantee
    assert abs(fpr - mean) < K_SIGMA * sd


def test_sd_recipe_hits_alpha_on_a_gaussian_null():
    rng = np.random.default_rng(11)
    mu, sigma = 0.4, 1.3  # a drifted, widened null like natural text's
    fit, held = _split(mu + sigma * rng.standard_normal(M_FIT + N_EVAL))
    threshold = recalibrate(fit, ALPHA, method="sd")
    fpr = float(np.mean(held > threshold))
    z = z_alpha(ALPHA)
    # delta method: Var(t) = sigma^2 (1/M + z^2 / (2(M - 1))); q = 1 - Phi((t - mu) / sigma)
    var_q = stats.norm.pdf(z) ** 2 * (1 / M_FIT + z * z / (2 * (M_FIT - 1)))
    sd = math.sqrt(var_q + ALPHA * (1 - ALPHA) / N_EVAL)
    assert abs(fpr - ALPHA) < K_SIGMA * sd + 1 / M_FIT


def test_sd_recipe_on_a_heavy_tailed_null_misses_by_the_predicted_amount():
    """On a Laplace null the Gaussian plug-in is off; its FPR is 0.5 exp(-sqrt(2) z_alpha), not alpha."""
    rng = np.random.default_rng(12)
    b = 1.0
    fit, held = _split(rng.laplace(0.0, b, M_FIT + N_EVAL))
    threshold = recalibrate(fit, ALPHA, method="sd")
    fpr = float(np.mean(held > threshold))
    z = z_alpha(ALPHA)
    predicted = 0.5 * math.exp(-math.sqrt(2) * z)  # P(L > z * sd), sd = b sqrt(2)
    # Var(mean) = 2b^2/M, Var(sd) ~ (mu4 - sigma^4) / (4 sigma^2 M) = 2.5 b^2 / M, independent
    t = z * b * math.sqrt(2)
    density = math.exp(-t / b) / (2 * b)
    var_q = density ** 2 * (2 + 2.5 * z * z) * b * b / M_FIT
    sd = math.sqrt(var_q + predicted * (1 - predicted) / N_EVAL)
    assert abs(fpr - predicted) < K_SIGMA * sd
    assert fpr > ALPHA + K_SIGMA * sd  # and that is measurably above the target


def test_quantile_recipe_is_conservative_on_a_discrete_null():
    """Ties (z from counts) can only lower the exceedance probability below alpha."""
    rng = np.random.default_rng(13)
    n, p0 = 128, 0.2
    counts = rng.binomial(n - 1, p0, M_FIT + N_EVAL)
    z = (counts / (n - 1) - p0) / math.sqrt(p0 * (1 - p0) / (n - 1))
    fit, held = _split(z)
    fpr = float(np.mean(held > recalibrate(fit, ALPHA, method="quantile")))
    assert fpr < ALPHA + K_SIGMA * math.sqrt(ALPHA * (1 - ALPHA) / N_EVAL)


def test_quantile_order_statistic():
    assert recalibrate(np.arange(1, 100), 0.01, method="quantile") == 99  # M = 99: the maximum
    assert recalibrate(np.arange(1, 200)[::-1], 0.01, method="quantile") == 198  # j = ceil(200 * 0.99)
    assert recalibrate(np.arange(1, 20), 0.1, method="quantile") == 18  # j = ceil(20 * 0.9)


def test_min_null_samples():
    assert min_null_samples(0.01) == 99
    assert min_null_samples(0.1) == 9
    assert min_null_samples(0.05) == 19
    assert min_null_samples(1e-3) == 999


def test_lifted_threshold():
    z = np.array([-1.0, 0.5, 3.25])
    assert lifted_threshold(z) == 3.75
    assert lifted_threshold(z, margin=0.0) == 3.25
    assert not (z > lifted_threshold(z)).any()


def test_split_halves_is_a_stratified_partition():
    strata = np.array(["model"] * 20 + ["human"] * 101)
    fit, held = split_halves(len(strata), seed=3, strata=strata)
    assert len(np.intersect1d(fit, held)) == 0
    assert sorted(np.concatenate([fit, held]).tolist()) == list(range(len(strata)))
    assert (strata[fit] == "model").sum() == 10 and (strata[held] == "model").sum() == 10
    assert abs((strata[fit] == "human").sum() - (strata[held] == "human").sum()) == 1


# ---------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5])
def test_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        z_alpha(alpha)
    with pytest.raises(ValueError, match="alpha"):
        s_star(100, 0.5, alpha)
    with pytest.raises(ValueError, match="alpha"):
        recalibrate(np.zeros(1000), alpha)


@pytest.mark.parametrize("rho", [0.0, -0.2, 1.01])
def test_bad_rho(rho):
    for call in (lambda: s_star(100, rho, 0.01), lambda: predicted_z(100, rho, 5),
                 lambda: midpoint_threshold(rho, 5), lambda: hoeffding_fpr_bound(100, rho, 5)):
        with pytest.raises(ValueError, match=r"rho must lie in \(0, 1\]"):
            call()


def test_bad_n_S_k_and_types():
    for n in (1, 0, -5):
        with pytest.raises(ValueError, match="n must be >= 2"):
            s_star(n, 0.5, 0.01)
    with pytest.raises(TypeError, match="n must be an integer"):
        s_star(100.5, 0.5, 0.01)
    with pytest.raises(TypeError):
        s_star(100, "0.5", 0.01)
    with pytest.raises(TypeError):
        z_alpha(True)
    with pytest.raises(ValueError, match="S must be an integer >= 2"):
        predicted_z(100, 0.5, 1)
    with pytest.raises(ValueError, match=r"k .* \[1, S - 1\]"):
        predicted_z(100, 0.5, 3, k=3)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        _null_p0(5, 0)
    with pytest.raises(ValueError, match="ns must name"):
        calibration_table(ns=[])


def test_bad_corpora():
    with pytest.raises(ValueError, match="empty"):
        recalibrate([], 0.01)
    with pytest.raises(ValueError, match="empty"):
        lifted_threshold([])
    with pytest.raises(ValueError, match="NaN"):
        recalibrate([0.0] * 200 + [float("nan")], 0.01)
    with pytest.raises(ValueError, match=r"50 scores, too few .* at least .* 99 are needed"):
        recalibrate(np.linspace(-1, 1, 50), 0.01, method="quantile")
    with pytest.raises(ValueError, match="99 are needed"):
        recalibrate(np.linspace(-1, 1, 98), 0.01, method="sd")
    with pytest.raises(ValueError, match="zero spread"):
        recalibrate(np.ones(500), 0.01, method="sd")
    with pytest.raises(ValueError, match="method must be one of"):
        recalibrate(np.linspace(-1, 1, 500), 0.01, method="mad")
    with pytest.raises(ValueError, match="margin"):
        lifted_threshold([1.0, 2.0], margin=-0.1)
    with pytest.raises(ValueError, match="hits must be <= trials"):
        clopper_pearson(5, 4)


# ---------------------------------------------------------------- corpus
def test_python_reference_corpus_is_prose():
    from cmlab.harness.corpora import _CORPUS_LICENSE, corpus_summary, python_reference_documents

    docs = python_reference_documents()
    summary = corpus_summary(docs)
    assert summary["documents"] == len(docs) > 20
    assert summary["words"] > 10_000
    assert summary["license"] == _CORPUS_LICENSE and "PSF" in _CORPUS_LICENSE
    for doc in docs:
        assert "::=" not in doc.text and ">>>" not in doc.text
        assert all(not para[:1].isspace() for para in doc.text.split("\n\n"))
    assert [d.name for d in docs] == sorted(d.name for d in docs)


def test_token_windows_do_not_straddle_sequences():
    from cmlab.harness.corpora import _token_windows

    windows = _token_windows([list(range(10)), list(range(100, 107))], n=3)
    assert [w.tolist() for w in windows] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [100, 101, 102], [103, 104, 105]]
    assert len(_token_windows([list(range(10))], n=3, max_windows=2)) == 2
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        _token_windows([[1, 2, 3]], n=1)


def test_human_windows_through_a_tokenizer():
    from cmlab.harness.corpora import Document, human_windows

    def char_tokenizer(text, add_special_tokens=False):
        assert add_special_tokens is False
        return {"input_ids": [ord(ch) for ch in text]}

    docs = [Document("a", "x" * 25), Document("b", "y" * 9)]
    windows = human_windows(char_tokenizer, 10, documents=docs)
    assert [w.tolist() for w in windows] == [[ord("x")] * 10] * 2  # 'b' is shorter than one window


def test_clopper_pearson_is_scipy_s_exact_interval():
    from scipy.stats import binomtest

    for hits, trials in [(0, 5), (3, 12), (12, 12), (97, 400)]:
        ci = binomtest(hits, trials).proportion_ci(method="exact")
        assert clopper_pearson(hits, trials) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_cluster_bootstrap_widens_the_interval_when_units_share_a_text():
    from cmlab.stats import cluster_bootstrap_rate

    rng = np.random.default_rng(1)
    # 40 texts, 25 units each; a text's units are all flagged or none: 40 independent trials, not 1000
    text_flag = rng.random(40) < 0.3
    flags = np.repeat(text_flag, 25)
    texts = np.repeat(np.arange(40), 25)
    boot = cluster_bootstrap_rate(flags, texts, seed=0)
    naive = rate_estimate(flags)
    assert boot.rate == naive.rate
    assert (boot.high - boot.low) > 3 * (naive.high - naive.low)
    per_text = rate_estimate(text_flag)
    assert boot.high - boot.low == pytest.approx(per_text.high - per_text.low, rel=0.35)
    # independent units: the two intervals agree
    flat = rng.random(1000) < 0.3
    indep = cluster_bootstrap_rate(flat, np.arange(1000), seed=0)
    exact = rate_estimate(flat)
    assert indep.high - indep.low == pytest.approx(exact.high - exact.low, rel=0.15)
    with pytest.raises(ValueError, match="one cluster per flag"):
        cluster_bootstrap_rate([True, False], [0])


def test_a_clustered_interval_is_never_narrower_than_the_binomial_one_of_its_units() -> None:
    """A few flags among many small clusters: the percentile bootstrap alone put the upper limit of one flag
    in 600 texts (200 prompts of three) at 0.5%, below the binomial limit of independent texts."""
    from chainmark.auditor.rates import clopper_pearson
    from cmlab.stats import cluster_bootstrap_rate

    clusters = np.repeat(np.arange(200), 3)
    for hits in (1, 2, 3, 6, 30):
        flags = np.zeros(600, dtype=bool)
        flags[np.arange(hits) * 3] = True                  # one flag in each of the first clusters
        est = cluster_bootstrap_rate(flags, clusters)
        low, high = clopper_pearson(hits, 600)
        assert est.low <= low + 1e-12 and est.high >= high - 1e-12, (hits, str(est))
    highs = [cluster_bootstrap_rate(np.arange(600) < 3 * h, clusters).high for h in range(1, 8)]
    assert highs == sorted(highs)                          # more flags, never a lower upper limit


def test_threshold_interval_brackets_the_threshold_and_narrows_with_more_null_texts() -> None:
    from cmlab.stats import threshold_interval

    rng = np.random.default_rng(5)
    small = rng.standard_normal(200)
    large = rng.standard_normal(4000)
    t_s, lo_s, hi_s = threshold_interval(small, np.arange(200) // 2, 0.01, n_boot=300)
    t_l, lo_l, hi_l = threshold_interval(large, np.arange(4000) // 2, 0.01, n_boot=300)
    assert lo_s <= t_s <= hi_s and lo_l <= t_l <= hi_l
    assert hi_l - lo_l < hi_s - lo_s            # 20x the texts: a narrower interval
    assert lo_l < 2.326 < hi_l                  # the true 99% quantile of N(0, 1) is inside
    with pytest.raises(ValueError, match="one cluster per score"):
        threshold_interval(small, np.arange(10), 0.01)
    with pytest.raises(ValueError, match="too few"):
        threshold_interval(small[:50], np.arange(50), 0.01)


def test_judge_against_reads_the_interval_not_the_point() -> None:
    from chainmark.auditor.rates import rate_estimate
    from cmlab.stats import judge_against

    est = rate_estimate([True] * 95 + [False] * 5)      # 95% [88.7, 98.4]
    assert judge_against(est, 0.90) == "consistent"
    assert judge_against(est, 0.80) == "above"
    assert judge_against(est, 0.999) == "below"
    with pytest.raises(ValueError):
        judge_against(est, 95.0)                        # a percentage, not a share


def test_cluster_bootstrap_gives_a_real_interval_when_no_or_every_unit_is_flagged() -> None:
    from chainmark.auditor.rates import clopper_pearson
    from cmlab.stats import cluster_bootstrap_rate

    clusters = np.repeat(np.arange(16), 6)                 # 16 texts, 6 windows each
    none = cluster_bootstrap_rate(np.zeros(96, dtype=bool), clusters)
    every = cluster_bootstrap_rate(np.ones(96, dtype=bool), clusters)
    assert (none.low, none.high) == pytest.approx(clopper_pearson(0, 16))
    assert (every.low, every.high) == pytest.approx(clopper_pearson(16, 16))
    assert none.high > 0.1 and every.low < 0.9            # 16 texts cannot pin a rate of 0 or 1


def test_the_exact_s_star_is_the_first_state_count_whose_midpoint_holds_alpha_exactly():
    from scipy.stats import binom

    from chainmark.calibrate import midpoint_exact_fpr, midpoint_threshold, s_star, s_star_exact

    # S* guarantees a margin on the z scale, not an exact rate: 18 alpha at the paper's n = 100, rho = 0.3, 1e-6
    assert midpoint_exact_fpr(100, 0.3, s_star(100, 0.3, 1e-6), 1) / 1e-6 == pytest.approx(18.16, abs=0.01)
    for n, rho, alpha, k in [(100, 0.3, 1e-6, 1), (100, 0.3, 1e-3, 1), (200, 0.5, 1e-2, 2), (1000, 0.3, 1e-6, 1),
                             (30, 0.5, 0.01, 1)]:
        S = s_star_exact(n, rho, alpha, k)
        brute = next(s for s in range(k + 1, 10_000)
                     if binom.sf(math.ceil(midpoint_threshold(rho, s, k) * (n - 1) - 1e-9) - 1, n - 1, k / s) <= alpha)
        assert S == brute and midpoint_exact_fpr(n, rho, S, k) <= alpha
    assert s_star_exact(100, 0.3, 1e-6) == 16 > s_star(100, 0.3, 1e-6) == 12
    assert s_star_exact(1000, 0.3, 1e-6) == 2 < s_star(1000, 0.3, 1e-6) == 3
    with pytest.raises(ValueError, match="alpha"):
        s_star_exact(100, 0.3, 0.0)

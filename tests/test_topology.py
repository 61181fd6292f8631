"""Transition topologies: construction, validation, and the null-variance lemma."""
from __future__ import annotations

import numpy as np
import pytest

from chainmark import Topology
from chainmark.topology import adjacent_covariance, null_moments, resolve_topology


# ---- the two named topologies --------------------------------------------------

@pytest.mark.parametrize("S", [2, 3, 5, 12])
def test_clockwork(S):
    topo = Topology.clockwork(S)
    assert topo.k == 1 and topo.S == S and topo.is_regular
    assert topo.p0 == pytest.approx(1 / S)
    expected = np.zeros((S, S), dtype=bool)
    for s in range(S):
        expected[s, (s + 1) % S] = True
        assert topo.successors(s) == ((s + 1) % S,)
    assert np.array_equal(topo.matrix, expected)


@pytest.mark.parametrize("S", [3, 5, 9])
def test_soft_cycle(S):
    topo = Topology.soft_cycle(S)
    assert topo.k == 2 and topo.p0 == pytest.approx(2 / S)
    for s in range(S):
        assert set(topo.successors(s)) == {(s + 1) % S, (s + 2) % S}
    assert (topo.matrix.sum(axis=0) == 2).all() and (topo.matrix.sum(axis=1) == 2).all()


def test_soft_cycle_needs_three_states():
    with pytest.raises(ValueError, match="soft_cycle needs S >= 3"):
        Topology.soft_cycle(2)


@pytest.mark.parametrize("S", [1, 0, -1])
def test_too_few_states(S):
    with pytest.raises(ValueError, match="S must be an integer >= 2"):
        Topology.clockwork(S)
    with pytest.raises(ValueError, match="S must be an integer >= 2"):
        Topology.from_offsets(S, [1])


def test_S_wrong_type():
    with pytest.raises(TypeError, match="S must be an integer"):
        Topology.clockwork(5.0)


# ---- from_offsets -----------------------------------------------------------------

def test_offsets_reduce_mod_S_and_deduplicate():
    a = Topology.from_offsets(7, [1, 3])
    b = Topology.from_offsets(7, [8, -4, 1])  # 8 = 1, -4 = 3 (mod 7)
    assert a == b and hash(a) == hash(b) and a.k == 2


def test_offsets_errors():
    with pytest.raises(ValueError, match="must not include 0"):
        Topology.from_offsets(5, [1, 5])
    with pytest.raises(ValueError, match="at least one successor"):
        Topology.from_offsets(5, [])
    with pytest.raises(TypeError, match="offsets must be integers"):
        Topology.from_offsets(5, [1.5])


def test_offsets_largest_k_is_S_minus_1():
    # offsets are distinct non-zero residues, so k <= S - 1 always holds
    topo = Topology.from_offsets(4, [1, 2, 3, 5, 6, 7])
    assert topo.k == 3 and topo.p0 == pytest.approx(0.75)


# ---- from_matrix --------------------------------------------------------------------

def test_from_matrix_permutation_and_general_regular():
    perm = np.eye(4, dtype=int)[[2, 0, 3, 1]]
    topo = Topology.from_matrix(perm)
    assert topo.k == 1 and topo.successors(0) == (2,)
    two = perm | np.eye(4, dtype=int)[[1, 3, 0, 2]]
    assert Topology.from_matrix(two).k == 2


def test_matrix_is_read_only_bool():
    topo = Topology.clockwork(5)
    assert topo.matrix.dtype == bool
    with pytest.raises(ValueError):
        topo.matrix[0, 0] = True


@pytest.mark.parametrize("matrix, message", [
    (np.ones((2, 3)), "must be square"),
    (np.ones(4), "must be square"),
    (np.ones((2, 2, 2)), "must be square"),
    (np.zeros((0, 0)), "S must be an integer >= 2"),
    ([[1]], "S must be an integer >= 2"),
    ([[0, 2], [2, 0]], "only 0 and 1"),
    ([[0, 0.5], [1, 0]], "only 0 and 1"),
    ([[0, 1, 1], [1, 0, 0], [1, 0, 0]], "must be k-regular"),
    ([[0, 1, 0], [0, 0, 1], [0, 1, 0]], "must be k-regular"),  # rows regular, columns not
    (np.zeros((3, 3)), r"k \(successors per state\) must lie in \[1, S-1\]"),
    (np.ones((3, 3)), r"k \(successors per state\) must lie in \[1, S-1\]"),
])
def test_from_matrix_errors(matrix, message):
    with pytest.raises(ValueError, match=message):
        Topology.from_matrix(matrix)


def test_irregular_message_names_the_sums():
    with pytest.raises(ValueError, match=r"column sums \[2, 1, 0\]"):
        Topology.from_matrix([[0, 1, 0], [1, 0, 0], [1, 0, 0]])


def test_allow_irregular_for_teaching():
    m = [[0, 1, 1], [1, 0, 0], [1, 0, 0]]
    topo = Topology.from_matrix(m, allow_irregular=True)
    assert topo.k is None and not topo.is_regular
    assert topo.p0 == pytest.approx(4 / 9)
    with pytest.raises(ValueError, match="no allowed transition"):
        Topology.from_matrix(np.zeros((3, 3)), allow_irregular=True)


# ---- successors, is_valid, resolve -----------------------------------------------------

def test_successors_bad_state():
    with pytest.raises(ValueError, match=r"state must lie in \[0, 4\]"):
        Topology.clockwork(5).successors(5)
    with pytest.raises(ValueError, match=r"state must lie in \[0, 4\]"):
        Topology.clockwork(5).successors(-1)


def test_is_valid_vectorised():
    topo = Topology.clockwork(5)
    prev = np.array([0, 4, 2, 2])
    nxt = np.array([1, 0, 4, 3])
    assert topo.is_valid(prev, nxt).tolist() == [True, True, False, True]


def test_resolve_topology():
    assert resolve_topology("clockwork", 5) == Topology.clockwork(5)
    assert resolve_topology("soft_cycle", 5) == Topology.soft_cycle(5)
    assert resolve_topology("soft-cycle", 5) == Topology.soft_cycle(5)
    topo = Topology.from_offsets(6, [1, 3])
    assert resolve_topology(topo, 6) is topo
    with pytest.raises(ValueError, match="topology has S = 6 states but S = 5"):
        resolve_topology(topo, 5)
    with pytest.raises(ValueError, match="topology must be one of"):
        resolve_topology("spiral", 5)
    with pytest.raises(ValueError, match="S must be an integer >= 2"):
        resolve_topology("clockwork", 1)


def test_repr_names_k_and_p0():
    assert repr(Topology.soft_cycle(5)) == "Topology(soft_cycle, S=5, k=2, p0=0.4)"


# ---- the null-variance lemma ------------------------------------------------------------

HUB = np.array([  # state 0 may follow and precede everything: row and column sums move together
    [0, 1, 1, 1, 1],
    [1, 0, 1, 0, 0],
    [1, 0, 0, 1, 0],
    [1, 0, 0, 0, 1],
    [1, 1, 0, 0, 0],
])


def test_adjacent_covariance_zero_for_regular_and_positive_for_hub():
    for topo in (Topology.clockwork(5), Topology.soft_cycle(5), Topology.from_offsets(7, [2, 3, 5])):
        assert adjacent_covariance(topo) == pytest.approx(0.0, abs=1e-15)
        p0 = topo.k / topo.S
        mean, var = null_moments(topo, 101)
        assert mean == pytest.approx(p0) and var == pytest.approx(p0 * (1 - p0) / 100)
    hub = Topology.from_matrix(HUB, allow_irregular=True)
    rows, cols = HUB.sum(axis=1) / 5, HUB.sum(axis=0) / 5
    assert adjacent_covariance(hub) == pytest.approx(np.cov(rows, cols, bias=True)[0, 1])
    assert adjacent_covariance(hub) > 0


def test_null_moments_bad_input():
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        null_moments(Topology.clockwork(5), 1)
    with pytest.raises(TypeError, match="n must be an integer"):
        null_moments(Topology.clockwork(5), 10.0)
    with pytest.raises(TypeError, match="topology must be a Topology"):
        adjacent_covariance(np.eye(3))


def simulate_phi(topo: Topology, n: int, reps: int, seed: int) -> np.ndarray:
    """phi over ``reps`` sequences of n i.i.d. uniform states."""
    states = np.random.default_rng(seed).integers(0, topo.S, size=(reps, n))
    return topo.matrix[states[:, :-1], states[:, 1:]].mean(axis=1)


@pytest.mark.parametrize("topo", [Topology.clockwork(5), Topology.soft_cycle(5),
                                  Topology.from_offsets(7, [2, 3, 5]),
                                  Topology.from_matrix(HUB, allow_irregular=True)],
                         ids=["clockwork", "soft_cycle", "offsets7", "hub"])
def test_simulated_moments_match_exact_formula(topo):
    """Sample mean and variance of phi against null_moments (5 standard errors).

    SE of the mean: sqrt(var / reps). SE of the sample variance of a nearly
    normal statistic: var * sqrt(2 / (reps - 1)).
    """
    n, reps = 64, 40_000
    phi = simulate_phi(topo, n, reps, seed=42)
    mean, var = null_moments(topo, n)
    assert abs(phi.mean() - mean) < 5 * np.sqrt(var / reps)
    assert abs(phi.var(ddof=1) - var) < 5 * var * np.sqrt(2 / (reps - 1))


def test_lemma_formula_fails_for_hub():
    """For the hub matrix the textbook p0(1-p0)/(n-1) is far outside the sampling error."""
    hub = Topology.from_matrix(HUB, allow_irregular=True)
    n, reps = 64, 40_000
    phi = simulate_phi(hub, n, reps, seed=7)
    p0 = hub.p0
    naive = p0 * (1 - p0) / (n - 1)
    assert phi.var(ddof=1) > naive * (1 + 10 * np.sqrt(2 / (reps - 1)))


def test_rows_give_a_fresh_target_p0_and_columns_decorrelate_a_shared_target():
    """What each half of k-regularity does (the module docstring), exactly over uniform states: with regular
    rows a transition into a fresh state is legal with probability k/S whatever state it leaves (the exact
    test); two transitions into one shared token are uncorrelated only when the columns are regular too."""
    import itertools

    def moments(m):
        S = m.shape[0]
        legal_from = [m[s].mean() for s in range(S)]  # P(legal | the state left), the target uniform
        both = np.mean([m[a, b] * m[c, b] for a, b, c in itertools.product(range(S), repeat=3)])
        return legal_from, both - m.mean() ** 2  # covariance of a -> b and c -> b

    rows_only = np.array([[0, 1, 0], [0, 1, 0], [0, 1, 0]])  # one successor each, all into state 1
    legal_from, cov = moments(rows_only)
    assert legal_from == [1 / 3] * 3 and cov == pytest.approx(2 / 9)
    assert adjacent_covariance(Topology.from_matrix(rows_only, allow_irregular=True)) == pytest.approx(0.0)
    for topo in (Topology.clockwork(5), Topology.soft_cycle(5), Topology.from_offsets(7, (1, 3, 4))):
        legal_from, cov = moments(topo.matrix.astype(int))
        assert legal_from == pytest.approx([topo.p0] * topo.S) and cov == pytest.approx(0.0)

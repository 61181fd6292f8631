"""Transition topologies: which next states are legal after each state.

A topology is a 0/1 matrix T over S states; T[s, s'] = 1 means that s' may follow s. ChainMark needs T to be
k-regular (every row *and* every column has exactly k ones, 1 <= k <= S - 1), and each half has its own job:

- **rows** (every state has k successors): what the exact test needs. Each transition it keeps reaches a token the
  text has not used before, whose state under a uniformly random key is uniform and independent of all before it, so
  the transition is legal with probability k/S whatever came earlier: p0 = k/S.
- **columns** (every state has k predecessors): what the z-test's null-variance lemma adds to that. Neighbouring
  indicators share a state s', legal with probability c(s')/S before it (the column sum) and r(s')/S after it (the
  row sum), so with both constant they are uncorrelated (:func:`adjacent_covariance`; one constant sum is enough for
  this pair) and Var(phi) = p0(1 - p0)/(n - 1); regular columns also keep two transitions into one token
  uncorrelated, as regular rows do two out of one.
"""
from __future__ import annotations

from typing import Iterable, Union

import numpy as np

from .checks import check_num_states

__all__ = ["TOPOLOGY_K", "Topology", "adjacent_covariance", "cycle_topology", "null_moments", "resolve_topology"]


class Topology:
    """A k-regular transition matrix over S states (k ones in every row and every column, 1 <= k <= S - 1).

    Regular rows make a transition into a fresh token legal with probability
    k/S whatever state it leaves (all the exact test's binomial null needs);
    regular columns, with them, make the z-test's neighbouring validity
    indicators uncorrelated (its null-variance lemma). See the module
    docstring.

    Build one with :meth:`clockwork`, :meth:`soft_cycle`,
    :meth:`from_offsets` or :meth:`from_matrix`. ``allow_irregular=True``
    exists for teaching only (to show the variance formula failing); such a
    topology has ``k = None`` and ``p0`` equal to the matrix density.

    >>> import numpy as np
    >>> ring = cm.Topology(np.roll(np.eye(4, dtype=int), 1, axis=1), name='ring')
    >>> ring.S, ring.k, ring.successors(3)
    (4, 1, (0,))
    """

    def __init__(self, matrix: object, name: str = "custom", allow_irregular: bool = False):
        m = np.asarray(matrix)
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"topology matrix must be square, got shape {m.shape}")
        check_num_states(int(m.shape[0]))
        if not np.isin(m, (0, 1)).all():
            raise ValueError("topology matrix must contain only 0 and 1")
        m = m.astype(bool)
        S = m.shape[0]
        rows, cols = m.sum(axis=1), m.sum(axis=0)
        regular = bool((rows == rows[0]).all() and (cols == rows[0]).all())
        k = int(rows[0]) if regular else None
        if not allow_irregular:
            if not regular:
                raise ValueError(
                    "topology must be k-regular: every row and every column needs the same "
                    f"number of ones; row sums {rows.tolist()}, column sums {cols.tolist()}"
                )
            if not 1 <= k <= S - 1:
                raise ValueError(f"k (successors per state) must lie in [1, S-1] = [1, {S - 1}], got {k}")
        elif not m.any():
            raise ValueError("topology matrix has no allowed transition")
        m.flags.writeable = False
        self._matrix = m
        self.name = name
        self.S = S
        self.k = k
        self.is_regular = regular
        self._p0 = float(m.mean())

    # ---- constructors -------------------------------------------------
    @classmethod
    def from_offsets(cls, S: int, offsets: Iterable[int], name: str | None = None) -> "Topology":
        """Circulant topology: state s may be followed by (s + o) mod S for each offset o."""
        S = check_num_states(S)
        offsets = list(offsets)
        for o in offsets:
            if isinstance(o, bool) or not isinstance(o, (int, np.integer)):
                raise TypeError(f"offsets must be integers, got {o!r}")
        offs = sorted({int(o) % S for o in offsets})
        if not offs:
            raise ValueError("offsets must name at least one successor offset")
        if 0 in offs:
            raise ValueError("offsets must not include 0 (mod S): a state may not follow itself")
        if len(offs) >= S:
            raise ValueError(f"k = {len(offs)} offsets must be fewer than S = {S}")
        m = np.zeros((S, S), dtype=bool)
        for o in offs:
            m[np.arange(S), (np.arange(S) + o) % S] = True
        return cls(m, name=name or f"offsets{tuple(offs)}")

    @classmethod
    def clockwork(cls, S: int) -> "Topology":
        """k = 1: state s is followed only by (s + 1) mod S."""
        return cls.from_offsets(S, [1], name="clockwork")

    @classmethod
    def soft_cycle(cls, S: int) -> "Topology":
        """k = 2: state s is followed by (s + 1) or (s + 2) mod S (needs S >= 3)."""
        S = check_num_states(S)
        if S < 3:
            raise ValueError(f"soft_cycle needs S >= 3 (k = 2 < S), got S = {S}")
        return cls.from_offsets(S, [1, 2], name="soft_cycle")

    @classmethod
    def from_matrix(cls, matrix: object, allow_irregular: bool = False) -> "Topology":
        """A topology from any square 0/1 matrix (checked for k-regularity)."""
        return cls(matrix, name="matrix", allow_irregular=allow_irregular)

    # ---- properties ---------------------------------------------------
    @property
    def matrix(self) -> np.ndarray:
        """The boolean S x S transition matrix (read-only)."""
        return self._matrix

    @property
    def p0(self) -> float:
        """Null probability that a random transition is legal: k/S."""
        return self._p0

    def successors(self, state: int) -> tuple[int, ...]:
        """Legal next states after ``state``."""
        if not 0 <= int(state) < self.S:
            raise ValueError(f"state must lie in [0, {self.S - 1}], got {state}")
        return tuple(int(s) for s in np.flatnonzero(self._matrix[int(state)]))

    def is_valid(self, prev_states: object, next_states: object) -> np.ndarray:
        """Vectorised legality of transitions prev -> next."""
        return self._matrix[np.asarray(prev_states), np.asarray(next_states)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Topology) and np.array_equal(self._matrix, other._matrix)

    def __hash__(self) -> int:
        return hash(self._matrix.tobytes())

    def __repr__(self) -> str:
        return f"Topology({self.name}, S={self.S}, k={self.k}, p0={self.p0:.4g})"


def adjacent_covariance(topology: Topology) -> float:
    """Covariance of two neighbouring validity indicators under the uniform null.

    With i.i.d. uniform states, X_i = T[s_i, s_{i+1}] and X_{i+1} share only
    the middle state s'. Given s', X_i is legal with probability c(s')/S (the
    column sum: how many states may precede s') and X_{i+1} with probability
    r(s')/S (the row sum), independently; so the covariance is the covariance
    of c(s')/S and r(s')/S over a uniform s'. For a k-regular matrix both are
    the constant k/S and the covariance is exactly zero.
    """
    if not isinstance(topology, Topology):
        raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
    m = topology.matrix
    S = topology.S
    rows = m.sum(axis=1) / S
    cols = m.sum(axis=0) / S
    return float(np.mean(rows * cols) - np.mean(rows) * np.mean(cols))


def null_moments(topology: Topology, n: int) -> tuple[float, float]:
    """Exact mean and variance of phi over ``n`` tokens with i.i.d. uniform states.

    phi averages the n - 1 indicators X_i. Each has mean d (the matrix
    density, k/S when regular); indicators two or more steps apart are
    independent; neighbours have covariance :func:`adjacent_covariance`. So
    Var(phi) = [(n-1) d(1-d) + 2(n-2) C] / (n-1)^2, which reduces to the
    lemma's p0(1-p0)/(n-1) exactly when C = 0. Holds for any 0/1 matrix,
    irregular ones included.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an integer >= 2, got {type(n).__name__}")
    if n < 2:
        raise ValueError(f"n must be an integer >= 2 (phi needs a transition), got {n}")
    d = topology.p0
    c = adjacent_covariance(topology)
    m = int(n) - 1
    return d, (m * d * (1.0 - d) + 2.0 * (m - 1) * c) / m**2


TopologyLike = Union[str, Topology]
#: Successors per state (k) of each topology that has a name: the names a regime or the command line uses.
TOPOLOGY_K = {"clockwork": 1, "soft_cycle": 2}
_TOPOLOGY_NAMES = tuple(TOPOLOGY_K)


def cycle_topology(S: int, k: int = 1) -> Topology:
    """The k-regular cycle over S states: state s may be followed by s + 1, ..., s + k (mod S).

    k = 1 is :meth:`Topology.clockwork` and k = 2 :meth:`Topology.soft_cycle`
    (their names are :data:`TOPOLOGY_K`); a larger k gives offsets 1..k. The
    one place that turns a named topology or a reference cell's k into a matrix. ``k`` must lie in
    [1, S - 1]: k = S would make every transition legal (p0 = 1), leaving nothing to detect.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k (successors per state) must be an integer, got {type(k).__name__}")
    if k == 1:
        return Topology.clockwork(S)
    if k == 2:
        return Topology.soft_cycle(S)  # its own message when S < 3
    S = check_num_states(S)
    if not 1 <= k <= S - 1:
        raise ValueError(f"k (successors per state) must lie in [1, S - 1] = [1, {S - 1}] for S = {S} states, "
                         f"got k = {k}")
    return Topology.from_offsets(S, tuple(range(1, k + 1)))


def resolve_topology(topology: TopologyLike, S: int) -> Topology:
    """Turn a name ('clockwork', 'soft_cycle') or a Topology into a Topology over S states.

    >>> topo = cm.resolve_topology('clockwork', 5)
    >>> topo.S, topo.k, topo.successors(4)
    (5, 1, (0,))
    """
    S = check_num_states(S)
    if isinstance(topology, Topology):
        if topology.S != S:
            raise ValueError(f"topology has S = {topology.S} states but S = {S} was asked for")
        return topology
    name = "soft_cycle" if topology == "soft-cycle" else topology
    if isinstance(name, str) and name in TOPOLOGY_K:
        return cycle_topology(S, TOPOLOGY_K[name])
    raise ValueError(f"topology must be one of {_TOPOLOGY_NAMES} or a Topology, got {topology!r}")

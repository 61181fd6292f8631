"""Entropy gates: at which positions the watermark is applied.

The paper's gate family (Definition "Gate family"): every position, high entropy H > tau, low entropy H < tau, or a
small gap between the two most likely tokens (Delta < tau). The threshold tau is calibrated on a pilot by quantile
matching, so that the share of gated positions tracks the budget rho.

This module is the gate's model-free logic (kinds, thresholds, calibration, flags from a signal), importable without
torch; the signals themselves are computed from logits in :mod:`chainmark.gate_signals`, whose
:func:`~chainmark.gate_signals.gate_flags` applies a gate to a batch of logits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .checks import check_rho

__all__ = ["GATE_KINDS", "Gate", "check_gate_kind"]

GATE_KINDS = ("all", "high_entropy", "low_entropy", "top2_gap")


def check_gate_kind(kind: object) -> str:
    if kind not in GATE_KINDS:
        raise ValueError(f"gate must be one of {GATE_KINDS}, got {kind!r}")
    return str(kind)


def _quantile(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q))


@dataclass(frozen=True)
class Gate:
    """A gate of one kind with a threshold: flags from a signal (:meth:`flags_from_signal`),
    or from logits with :func:`chainmark.gate_signals.gate_flags`.

    ``tau = +inf`` with ``high_entropy`` (or ``-inf`` with the others) gates
    nothing, the opposite infinity gates everything, so rho = 0 and rho = 1
    are exact.

    ``rho`` is the share of positions the gate was calibrated to open
    (:meth:`calibrate` sets it; None for a gate built from a threshold alone).
    Generation refuses a configuration whose rho differs from it, since the
    detector's expectations (the anytime bets, the closed forms) read
    ``config.rho``. It is not part of the gate's identity: two gates with the
    same kind and threshold open the same positions and compare equal.

    >>> import numpy as np
    >>> gate = cm.Gate('high_entropy', tau=1.5)
    >>> gate.flags_from_signal(np.array([0.2, 1.5, 3.1]))
    array([False, False,  True])
    """

    kind: str = "high_entropy"
    tau: float = 0.0
    rho: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_gate_kind(self.kind)
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float, np.floating, np.integer)):
            raise TypeError(f"tau must be a number, got {type(self.tau).__name__}")
        if math.isnan(float(self.tau)):
            raise ValueError("tau must not be NaN")
        if self.rho is not None: check_rho(self.rho)  # noqa: E701 (the share it was calibrated for, when stated)
        elif self.kind == "all" or math.isinf(self.tau):  # it opens every position or none: its share is exact
            object.__setattr__(self, "rho", float(self.kind == "all" or (self.tau < 0) == (self.kind == "high_entropy")))

    def flags_from_signal(self, signal: Any) -> Any:
        """Gate flags from precomputed signals (entropies or gaps); numpy or torch."""
        if self.kind == "all":  # all True, same type and shape (NaN included)
            if hasattr(signal, "new_ones"):  # a torch tensor: same device, bool
                return signal.new_ones(signal.shape).bool()
            return np.ones(np.shape(signal), dtype=bool)
        if isinstance(signal, (list, tuple)):
            signal = np.asarray(signal, dtype=float)
        if self.kind == "high_entropy":
            return signal > self.tau
        return signal < self.tau  # low_entropy and top2_gap

    @classmethod
    def calibrate(cls, kind: str, rho: float, pilot_signal: Any) -> "Gate":
        """Choose tau so that a share ``rho`` of the pilot's positions is gated.

        ``pilot_signal`` holds the gate's signal (entropy, or top-2 gap for
        ``top2_gap``) at every position of a pilot run without watermark.
        """
        kind = check_gate_kind(kind)
        rho = check_rho(rho)
        if kind == "all":
            if rho != 1.0:
                raise ValueError(f"the 'all' gate has rho = 1 by definition, got rho = {rho}")
            return cls(kind, 0.0, rho)
        values = np.asarray(pilot_signal, dtype=float).ravel()
        values = values[np.isfinite(values)]
        if rho in (0.0, 1.0):
            gate_none = math.inf if kind == "high_entropy" else -math.inf
            return cls(kind, -gate_none if rho == 1.0 else gate_none, rho)
        if values.size == 0:
            raise ValueError("pilot_signal is empty (no finite values): calibration needs "
                             "the gate signal at the positions of a pilot run")
        if kind == "high_entropy":
            return cls(kind, _quantile(values, 1.0 - rho), rho)
        return cls(kind, _quantile(values, rho), rho)

    def rate(self, signal: Any) -> float:
        """Share of positions this gate opens on the given signals."""
        values = np.asarray(signal, dtype=float).ravel()
        if values.size == 0:
            raise ValueError("signal is empty")
        return float(np.mean(self.flags_from_signal(values)))

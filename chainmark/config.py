"""The watermark's configuration: what a deployer generates with is what the detector reads.

One object travels from generation to detection, as transformers carries one watermarking config from ``generate()``
to its detector: ``generate(model, tokenizer, prompts, config)`` embeds with it and ``detect(ids, config)`` scores
with its key, S and topology, as ``detect_batch``, ``detect_text``, the streaming, anytime and segment detectors and
the key-randomisation test do (they take nothing else in its place: :func:`takes_config`). Its published half,
without the key, is the auditor's :class:`chainmark.auditor.regime.Regime` (``Regime.from_config``). Model-free, so
an auditor's install can hold one.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from .gates import Gate, check_gate_kind
from .checks import check_rho
from .keys import key_fingerprint
from .partition import Key, key_bytes
from .checks import check_num_states
from .topology import Topology, TopologyLike, resolve_topology

__all__ = ["GENERATION_SEED", "ChainMarkConfig", "takes_config"]

#: The generation seed of the paper's protocol (the substitution attack's is
#: :data:`cmlab.comparison.attacks.ATTACK_SEED`, 43).
GENERATION_SEED = 42


@dataclass(frozen=True)
class ChainMarkConfig:
    """A validated watermark configuration. The key never appears in its repr.

    ``tau``, the gate's threshold calibrated to open the share ``rho`` of positions, makes it whole
    (``config.with_gate(cm.calibrate_gate(...))``); None: the gate travels apart, or needs none (rho 0 or 1).

    >>> config = cm.ChainMarkConfig(b'example key', S=5, rho=0.5)
    >>> config  # the key is never shown
    ChainMarkConfig(S=5, rho=0.5, gate='high_entropy', topology=Topology(clockwork, S=5, k=1, p0=0.2), tau=None)
    """

    key: Key = field(repr=False)
    S: int = 5
    rho: float = 0.5
    gate: str = "high_entropy"
    topology: TopologyLike = "clockwork"
    tau: float | None = None

    def __post_init__(self) -> None:
        key_bytes(self.key)  # TypeError for anything but bytes/str
        if len(key_bytes(self.key)) == 0:
            raise ValueError("key must not be empty")
        object.__setattr__(self, "S", check_num_states(self.S))
        object.__setattr__(self, "rho", check_rho(self.rho))
        check_gate_kind(self.gate)
        if self.gate == "all" and self.rho != 1.0:
            raise ValueError(f"gate 'all' watermarks every position, so rho must be 1, got {self.rho}")
        topo = resolve_topology(self.topology, self.S)
        object.__setattr__(self, "topology", topo)
        if self.tau is not None:
            object.__setattr__(self, "tau", Gate(self.gate, self.tau, self.rho).tau)  # a number, not NaN
            if self.gate == "all":
                raise ValueError("gate 'all' has no threshold: leave tau None")

    @property
    def topo(self) -> Topology:
        return self.topology  # type: ignore[return-value]

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.key)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description with the key's fingerprint, never the key."""
        return {"key_fingerprint": self.fingerprint, "S": self.S, "rho": self.rho, "gate": self.gate,
                "topology": self.topo.name, "k": self.topo.k,
                **({"tau": self.tau} if self.tau is not None and math.isfinite(self.tau) else {})}

    def default_gate(self) -> Gate:
        """The gate this configuration carries (``tau``), or one that needs no calibration (rho 0 or 1, 'all')."""
        if self.tau is not None:
            return Gate(self.gate, self.tau, self.rho)
        if self.gate == "all" or self.rho in (0.0, 1.0):
            return Gate.calibrate(self.gate, self.rho, [])
        raise ValueError(f"gate {self.gate!r} at rho = {self.rho} needs a threshold tau: calibrate it on a pilot, "
                         "config.with_gate(chainmark.calibrate_gate(...))")

    def with_gate(self, gate: Gate) -> "ChainMarkConfig":
        """This configuration made whole with ``gate``'s threshold (checked by :meth:`gate_for`).

        >>> cm.ChainMarkConfig(b'example key', rho=0.5).with_gate(cm.Gate('high_entropy', 1.5, rho=0.5)).tau
        1.5
        """
        gate = self.gate_for(gate)
        return dataclasses.replace(self, tau=None if gate.kind == "all" else gate.tau)

    def gate_for(self, gate: Gate | None = None) -> Gate:
        """The gate generation applies: the one carried, or ``gate`` once it is of this kind and threshold and
        states that it opens the share rho (calibrated, or ``Gate(kind, tau, rho=...)`` measured on a pilot)."""
        if gate is None:
            return self.default_gate()
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be a chainmark Gate, got {type(gate).__name__}")
        if gate.kind != self.gate or self.tau not in (None, gate.tau):
            raise ValueError(f"gate {gate.kind!r} (tau = {gate.tau:g}) does not match config.gate {self.gate!r} "
                             f"(tau = {self.tau})")
        if gate.rho is None:
            raise ValueError(f"Gate({gate.kind!r}, tau={gate.tau:g}) states no share of positions it opens, so nothing "
                             f"shows it realises config.rho = {self.rho:g}: calibrate it (chainmark.calibrate_gate), "
                             "or state the share measured on a pilot with rho=...")
        if not math.isclose(gate.rho, self.rho, abs_tol=1e-12):
            raise ValueError(f"the gate was calibrated to open a share rho = {gate.rho:g} of positions, but config.rho is "
                             f"{self.rho:g}: "
                             "calibrate it at config.rho, or give the config its rho")
        return gate


_F = TypeVar("_F", bound=Callable[..., Any])


def takes_config(carried: tuple[str, ...] = ("key", "S", "topology"),
                 optional: bool = False) -> Callable[[_F], _F]:
    """Make a function whose ``config`` argument is a :class:`ChainMarkConfig` refuse the loose form (a key with
    S and the topology beside it) with a TypeError that says what to pass, before Python's own binding error.
    ``optional``: ``config`` may also be None (the function finds it elsewhere, as :func:`~chainmark.detect`
    does in a Generation)."""
    def wrap(func: _F) -> _F:
        names = list(inspect.signature(func).parameters)
        at = names.index("config")
        shown = ", ".join(f"{name}=..." for name in carried if name != "key")
        what = ", ".join(carried[:-1]) + " and " + carried[-1]

        @functools.wraps(func)
        def checked(*args: Any, **kwargs: Any) -> Any:
            config = args[at] if len(args) > at else kwargs.get("config")
            loose = [name for name in carried if name in kwargs]
            if not (isinstance(config, ChainMarkConfig) or optional and config is None) or loose:
                got = f"got {type(config).__name__}" + (f" and {', '.join(loose)}" if loose else "")
                raise TypeError(f"{func.__qualname__.removesuffix('.__init__')} takes one ChainMarkConfig in place "
                                f"of the {what}: pass ChainMarkConfig(key, {shown}) ({got})")
            return func(*args, **kwargs)
        return checked  # type: ignore[return-value]
    return wrap

"""The watermark's configuration: what a deployer generates with is what the detector reads.

One object travels from generation to detection, as transformers carries one
watermarking config from ``generate()`` to its detector: ``generate(model,
tokenizer, prompts, config)`` embeds with it and ``detect(ids, config)``
scores with its key, S and topology, as ``detect_batch``, ``detect_text``, the
streaming, anytime and segment detectors and the key-randomisation test do
(they take nothing else in its place: :func:`takes_config`). Its published half, without the key, is
the auditor's :class:`chainmark.auditor.regime.Regime` (``Regime.from_config``).
Model-free, so an auditor's install can hold one.
"""
from __future__ import annotations

import functools
import inspect
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

    >>> config = cm.ChainMarkConfig(b'example key', S=5, rho=0.5)
    >>> config  # the key is never shown
    ChainMarkConfig(S=5, rho=0.5, gate='high_entropy', topology=Topology(clockwork, S=5, k=1, p0=0.2))
    """

    key: Key = field(repr=False)
    S: int = 5
    rho: float = 0.5
    gate: str = "high_entropy"
    topology: TopologyLike = "clockwork"

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

    @property
    def topo(self) -> Topology:
        return self.topology  # type: ignore[return-value]

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.key)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description with the key's fingerprint, never the key."""
        return {"key_fingerprint": self.fingerprint, "S": self.S, "rho": self.rho,
                "gate": self.gate, "topology": self.topo.name, "k": self.topo.k}

    def default_gate(self) -> Gate:
        """The gate when no calibration is needed (rho = 0 or 1, or the 'all' gate)."""
        if self.gate == "all" or self.rho in (0.0, 1.0):
            return Gate.calibrate(self.gate, self.rho, [])
        raise ValueError(
            f"gate {self.gate!r} at rho = {self.rho} needs a threshold tau: calibrate it on a "
            "pilot with chainmark.embed.calibrate_gate(...) and pass gate=..."
        )


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

"""The watermarking methods as the runner sees them: generate a batch, then detect.

One :class:`Method` per scheme (ChainMark, KGW, SWEET, and :class:`NoWatermark`
for the null), each wrapping the package's own generator and detector, so that
:mod:`cmlab.harness.runner` runs a grid without knowing any scheme's details.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cmlab.comparison.baselines import KGWConfig, KGWLogitsProcessor, SweetConfig, kgw_detect, sweet_detect_batch
from chainmark.detection import detect
from chainmark.config import ChainMarkConfig
from chainmark.embed import generate, logits_width

__all__ = ["ChainMarkMethod", "KGWMethod", "Method", "NoWatermark", "Output", "SweetMethod"]


@dataclass
class Output:
    """One generation as the runner needs it (prompt tokens kept for teacher forcing)."""

    prompt: str
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    gate_signal: list[float]
    gated: list[bool]

    @property
    def rho_realised(self) -> float:
        return float(np.mean(self.gated)) if self.gated else 0.0


class Method(ABC):
    """A watermarking method as the runner sees it: generate, then detect.

    ``needs_model_to_detect`` says whether the detector needs the language
    model (SWEET) or only the key and the tokenizer (ChainMark, KGW).
    """

    name: str = "method"
    watermarked: bool = True
    needs_model_to_detect: bool = False

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """JSON-ready settings with the key's fingerprint, never the key."""

    @abstractmethod
    def generate(self, model: Any, tokenizer: Any, prompts: Sequence[str], *, max_new_tokens: int,
                 seed: int, temperature: float, min_new_tokens: int | None) -> list[Output]:
        """Generate one output per prompt, as one batch sampled with ``seed``."""

    def detect(self, token_ids: Sequence[Sequence[int]], *, vocab_size: int, alpha: float,
               model: Any = None, prompt_ids: Sequence[Sequence[int]] | None = None) -> list[dict[str, Any]]:
        """One stored detection entry per text: the verdict's ``to_dict("record")`` (``phi``, ``z``,
        ``p_value``, ``decision``, ``n_scored`` and the detector's extras)."""
        raise NotImplementedError(f"{self.name} has no detector")

    def secrets(self) -> list[Any]:
        """The secret values this method holds (checked against every record line)."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _outputs(gens: Sequence[Any], gated: np.ndarray | None = None) -> list[Output]:
    out = []
    for i, g in enumerate(gens):
        n = len(g.token_ids)
        flags = (gated[i, :n].astype(bool).tolist() if gated is not None and gated.size
                 else [bool(f) for f in g.forced])
        out.append(Output(g.prompt, list(g.prompt_ids), list(g.token_ids), g.text,
                          [float(h) for h in g.entropy], flags))
    return out


def _generate(model: Any, tokenizer: Any, prompts: Sequence[str], config: Any = None, gate: Any = None,
              extra: Sequence[Any] = (), **kwargs: Any) -> list[Any]:
    return generate(model, tokenizer, list(prompts), config=config, gate=gate, batch_size=len(prompts),
                    extra_processors=list(extra), **kwargs)


def _vocab(model: Any) -> int:
    return logits_width(model)


class ChainMarkMethod(Method):
    """ChainMark: forced walk at gated positions, model-free detection."""

    def __init__(self, config: Any, gate: Any = None, name: str = "chainmark"):
        if not isinstance(config, ChainMarkConfig):
            raise TypeError(f"config must be a ChainMarkConfig, got {type(config).__name__}")
        self.config, self.gate, self.name = config, gate, name

    def describe(self) -> dict[str, Any]:
        d = {**self.config.describe(), "method": "chainmark"}
        if self.gate is not None:
            d["tau"] = float(self.gate.tau)
        return d

    def generate(self, model, tokenizer, prompts, **kwargs):
        return _outputs(_generate(model, tokenizer, prompts, self.config, self.gate, **kwargs))

    def detect(self, token_ids, *, vocab_size, alpha, model=None, prompt_ids=None):
        return [detect(list(ids), self.config, alpha=alpha, vocab_size=vocab_size).to_dict("record")
                for ids in token_ids]

    def secrets(self):
        return [self.config.key]


class KGWMethod(Method):
    """KGW from ``transformers``: green-list bias everywhere, model-free detection."""

    def __init__(self, config: Any, name: str = "kgw"):
        if not isinstance(config, KGWConfig):
            raise TypeError(f"config must be a KGWConfig, got {type(config).__name__}")
        self.config, self.name = config, name

    def describe(self):
        return self.config.describe()

    def _processor(self, model):
        return KGWLogitsProcessor(self.config, _vocab(model))

    def generate(self, model, tokenizer, prompts, **kwargs):
        proc = self._processor(model)
        gens = _generate(model, tokenizer, prompts, extra=[proc], **kwargs)
        return _outputs(gens, proc.gated_matrix())

    def detect(self, token_ids, *, vocab_size, alpha, model=None, prompt_ids=None):
        return [kgw_detect(list(ids), self.config, vocab_size, alpha).to_dict("record") for ids in token_ids]

    def secrets(self):
        return [self.config.key, self.config.hashing_key]


class SweetMethod(KGWMethod):
    """SWEET: KGW bias at high-entropy positions only; detection needs the model."""

    needs_model_to_detect = True

    def __init__(self, config: Any, name: str = "sweet", batch_size: int = 8):
        if not isinstance(config, SweetConfig):
            raise TypeError(f"config must be a SweetConfig, got {type(config).__name__}")
        self.config, self.name, self.batch_size = config, name, batch_size

    def detect(self, token_ids, *, vocab_size, alpha, model=None, prompt_ids=None):
        if model is None:
            raise ValueError("SWEET's detector needs the language model (to recompute entropies): pass model=...")
        res = sweet_detect_batch([list(t) for t in token_ids], self.config, model, vocab_size,
                                 prompt_ids=prompt_ids, alpha=alpha, batch_size=self.batch_size)
        return [r.to_dict("record") for r in res]

    def secrets(self):
        return [self.config.key, self.config.kgw.hashing_key]


class NoWatermark(Method):
    """Plain sampling: the null texts, scored by every watermark detector of the run."""

    watermarked = False

    def __init__(self, name: str = "none"):
        self.name = name

    def describe(self):
        return {"method": "none"}

    def generate(self, model, tokenizer, prompts, **kwargs):
        gens = _generate(model, tokenizer, prompts, **kwargs)
        return _outputs(gens, np.zeros((len(gens), max([len(g.token_ids) for g in gens] + [0])), dtype=bool))

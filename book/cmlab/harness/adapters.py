"""The watermarking methods as the runner sees them: generate a batch, then detect.

One :class:`Method` per scheme (ChainMark, KGW, SWEET, and :class:`NoWatermark`
for the null), each wrapping the package's own generator and detector, so that
:mod:`cmlab.harness.runner` runs a grid without knowing any scheme's details.

Every method returns :func:`chainmark.generate`'s own :class:`~chainmark.embed.Generation`
objects, one record shape from generation to the runs. Their ``forced`` flags say
where the watermark acted: ChainMark forced the walk's token there, KGW and SWEET
biased the logits towards their green list there (their processor's flags, put in
with :func:`dataclasses.replace`, together with ``gated``: a baseline's gate is where
it biases), and without a watermark nowhere. The record's ``gated`` and
``rho_realised`` are these flags and their mean.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from cmlab.comparison.baselines import KGWConfig, KGWLogitsProcessor, SweetConfig, kgw_detect, sweet_detect_batch
from chainmark.detection import detect
from chainmark.config import ChainMarkConfig
from chainmark.embed import Generation, Sampling, generate, logits_width

__all__ = ["ChainMarkMethod", "ContextKeyedMethod", "KGWMethod", "Method", "NoWatermark", "SweetMethod"]


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
    def generate(self, model: Any, tokenizer: Any, prompts: Sequence[str], sampling: Sampling) -> list[Generation]:
        """Generate one text per prompt, as one batch sampled as ``sampling`` says (its seed; its batch size
        is the prompts'); ``forced`` marks where the watermark acted."""

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


def _acted(gens: Sequence[Generation], flags: np.ndarray) -> list[Generation]:
    """A baseline's generations with its processor's flags (row i: text i) as where the watermark acted.

    ``chainmark.generate`` knows only ChainMark's gate, so a KGW or SWEET text
    comes back with no flags; its processor knows where it biased the logits.
    Without any step recorded the generations are returned as they are.
    """
    if not flags.size:
        return list(gens)
    out = []
    for i, g in enumerate(gens):
        acted = flags[i, :len(g.token_ids)].astype(bool).tolist()
        out.append(replace(g, gated=acted, forced=acted))
    return out


def _generate(model: Any, tokenizer: Any, prompts: Sequence[str], sampling: Sampling, config: Any = None,
              gate: Any = None, extra: Sequence[Any] = ()) -> list[Generation]:
    return generate(model, tokenizer, list(prompts), config=config, gate=gate,
                    sampling=replace(sampling, batch_size=max(len(prompts), 1)), extra_processors=list(extra))


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

    def generate(self, model, tokenizer, prompts, sampling):
        return _generate(model, tokenizer, prompts, sampling, self.config, self.gate)

    def detect(self, token_ids, *, vocab_size, alpha, model=None, prompt_ids=None):
        return [detect(list(ids), self.config, alpha=alpha, vocab_size=vocab_size, test="z").to_dict("record")
                for ids in token_ids]

    def secrets(self):
        return [self.config.key]


class ContextKeyedMethod(ChainMarkMethod):
    """The context-keyed variant (:mod:`cmlab.comparison.context_keyed`): ChainMark's walk on pair states, scored
    by the exact test on pair codes."""

    def __init__(self, config: Any, gate: Any = None, name: str = "context_keyed"):
        super().__init__(config, gate, name)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "method": "context_keyed"}

    def generate(self, model, tokenizer, prompts, sampling):
        from cmlab.comparison.context_keyed import ContextKeyedLogitsProcessor

        proc = ContextKeyedLogitsProcessor(self.config, self.gate)
        gens = _generate(model, tokenizer, prompts, sampling, extra=[proc])
        return _acted(gens, proc.acted_matrix())

    def detect(self, token_ids, *, vocab_size, alpha, model=None, prompt_ids=None):
        from cmlab.comparison.context_keyed import context_detect

        return [context_detect(list(ids), self.config, alpha).to_dict("record") for ids in token_ids]

    def secrets(self):
        from cmlab.comparison.context_keyed import context_config

        return [self.config.key, context_config(self.config).key]


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

    def generate(self, model, tokenizer, prompts, sampling):
        proc = self._processor(model)
        gens = _generate(model, tokenizer, prompts, sampling, extra=[proc])
        return _acted(gens, proc.gated_matrix())

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

    def generate(self, model, tokenizer, prompts, sampling):
        return _generate(model, tokenizer, prompts, sampling)  # no config: ``forced`` is all False

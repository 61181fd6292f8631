"""The lab runners' options: how a run samples is one :class:`chainmark.Sampling`, how it proceeds and is
scored one small frozen dataclass beside it.

:func:`chainmark.generate` takes how it samples as one ``Sampling``; the lab's runners take the same object
(``sampling=``) and, apart from it, how they proceed: :class:`~cmlab.harness.runs.RunControl` (a progress
bar, an early stop) for :func:`cmlab.harness.runner.generate_resumable` and
:func:`cmlab.harness.runner.generate_once`, :class:`GridOptions` (a run's control, and how a grid is scored
and named) for :func:`cmlab.harness.runner.run_grid`. No runner mirrors these fields as keywords: a call
builds the object it means. :class:`BatchContext` is what every batch of a run shares
(:func:`cmlab.harness.runner.run_batch`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from chainmark.embed import Sampling
from cmlab.harness.runs import RunControl

def sampling_named(sampling: Sampling) -> dict[str, Any]:
    """The fields of ``sampling`` off their defaults: what a run's ``run.json`` and
    :func:`~cmlab.harness.runner.generate_once`'s folder name record of how it sampled.

    >>> sampling_named(Sampling(max_new_tokens=48))
    {'max_new_tokens': 48}
    """
    default = Sampling()
    return {f.name: getattr(sampling, f.name) for f in fields(Sampling)
            if getattr(sampling, f.name) != getattr(default, f.name)}


@dataclass(frozen=True)
class GridOptions(RunControl):
    """A grid's options (:func:`cmlab.harness.runner.run_grid`) beside its ``Sampling``: how it proceeds
    (:class:`RunControl`), how its texts are scored (level ``alpha``; self-perplexity or not), which model the
    run names, and its folder's name under the runs folder when no path is given."""

    alpha: float = 0.01
    self_ppl: bool = True
    model_name: str | None = None
    run_name: str = "grid"


@dataclass(frozen=True)
class BatchContext:
    """What every batch of one run shares (:func:`run_batch`): the model and tokenizer with its logits' width,
    how texts are sampled (batch ``j`` with seed ``sampling.seed + j``; each batch is one ``generate`` call),
    the attacks, the level ``alpha`` of the verdicts, and whether self-perplexity is scored."""

    model: Any
    tokenizer: Any
    vocab_size: int
    sampling: Sampling
    attacks: Mapping[str, Any] = field(default_factory=dict)
    alpha: float = 0.01
    self_ppl: bool = True


__all__ = ["BatchContext", "GridOptions", "sampling_named"]

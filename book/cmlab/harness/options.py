"""The lab runners' options: how a run samples (a :class:`chainmark.embed.Sampling`) and proceeds, as one object.

:func:`chainmark.generate` takes how it samples as one ``Sampling`` whose fields may also be given as
keywords; the lab's runners do the same with their options. :class:`~cmlab.harness.runs.RunControl` says how
a resumable run proceeds (a progress bar, an early stop), :class:`RunOptions` adds its ``Sampling``
(:func:`cmlab.harness.runner.generate_resumable`, :func:`cmlab.harness.runner.generate_once`) and
:class:`GridOptions` how a grid is scored and named (:func:`cmlab.harness.runner.run_grid`);
:class:`BatchContext` is what every batch of a run shares (:func:`cmlab.harness.runner.run_batch`). Each
options class is built by ``of(options, **overrides)``, where an override names one of its fields, one of
``Sampling``'s (applied to its ``sampling``) or ``sampling`` itself, and an unknown name is a ``TypeError``;
the ``...Args`` typed dicts give editors the same names.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, TypeVar

from chainmark.embed import Sampling, SamplingArgs
from cmlab.harness.runs import RunControl

_O = TypeVar("_O")
#: The names of :class:`~chainmark.embed.Sampling`'s fields.
_SAMPLING_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Sampling))


def _options_of(cls: type[_O], options: _O | None, overrides: Mapping[str, Any]) -> _O:
    """``options`` (default: ``cls()``) with ``overrides``: the options' own fields, ``sampling``, or the
    fields of its :class:`~chainmark.embed.Sampling`; an unknown name is a ``TypeError``."""
    if options is not None and not isinstance(options, cls):
        raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
    own = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - own - set(_SAMPLING_FIELDS))
    if unknown:
        raise TypeError(f"unknown argument(s) {', '.join(unknown)}: expected one of "
                        f"{', '.join(sorted(own | set(_SAMPLING_FIELDS)))}")
    base = options if options is not None else cls()
    mine = {k: v for k, v in overrides.items() if k in own and k != "sampling"}
    how = {k: v for k, v in overrides.items() if k in _SAMPLING_FIELDS}
    if "sampling" in own:
        mine["sampling"] = Sampling.of(overrides.get("sampling", base.sampling), **how)  # type: ignore[attr-defined]
    return replace(base, **mine)  # type: ignore[type-var]


def named_sampling(options: Any, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling settings a call named: the given ``Sampling``'s fields off their defaults, then those
    given as keywords, as given (what a run's ``run.json`` and :func:`~cmlab.harness.runner.generate_once`'s
    folder name have always recorded). A keyword at its default value is named, a ``Sampling`` field at its
    default is not: the two spellings name one run except where a keyword repeats a default."""
    given = overrides.get("sampling", getattr(options, "sampling", None))
    named = {} if given is None else {f: getattr(given, f) for f in _SAMPLING_FIELDS
                                      if getattr(given, f) != getattr(Sampling(), f)}
    named.update({k: overrides[k] for k in _SAMPLING_FIELDS if k in overrides})
    return named


@dataclass(frozen=True)
class RunOptions(RunControl):
    """A resumable generation run's options: how it proceeds (:class:`RunControl`) and how it samples."""

    sampling: Sampling = Sampling()

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.sampling, Sampling):
            raise TypeError(f"sampling must be a chainmark Sampling, got {type(self.sampling).__name__}")

    @classmethod
    def of(cls, options: RunOptions | None = None, **overrides: Any) -> RunOptions:
        """``options`` (default: the defaults) with ``overrides`` (its fields or ``Sampling``'s)."""
        return _options_of(cls, options, overrides)


@dataclass(frozen=True)
class GridOptions(RunOptions):
    """A grid's options (:func:`cmlab.harness.runner.run_grid`): a run's, and how its texts are scored (level
    ``alpha``; self-perplexity or not), which model the run names, and its folder's name under the runs
    folder when no path is given."""

    alpha: float = 0.01
    self_ppl: bool = True
    model_name: str | None = None
    run_name: str = "grid"

    @classmethod
    def of(cls, options: GridOptions | None = None, **overrides: Any) -> GridOptions:  # type: ignore[override]
        """``options`` (default: the defaults) with ``overrides`` (its fields or ``Sampling``'s)."""
        return _options_of(cls, options, overrides)


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


class RunArgs(SamplingArgs, total=False):
    """The keywords of :class:`RunOptions`: its fields and :class:`~chainmark.embed.Sampling`'s."""

    sampling: Sampling
    progress: bool
    stop_after: int | None


class GridArgs(RunArgs, total=False):
    """The keywords of :class:`GridOptions`: its fields and :class:`~chainmark.embed.Sampling`'s."""

    alpha: float
    self_ppl: bool
    model_name: str | None
    run_name: str


__all__ = ["BatchContext", "GridArgs", "GridOptions", "RunArgs", "RunOptions", "named_sampling"]

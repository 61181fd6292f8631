"""One verdict on one scored text, whichever detector gave it, and the one decision rule.

Every detector of the package counts, among the ``n_scored`` positions it scores, the ``n_hits`` that follow the
watermark: legal transitions for ChainMark (:mod:`chainmark.detection`, :mod:`cmlab.comparison.lrdetect`), green
tokens for KGW and SWEET (:mod:`cmlab.comparison.baselines`). ``phi = n_hits / n_scored`` is compared with its rate
``p0`` under the null (k/S, or the green share gamma) through a z-score and a one-sided p-value, and :func:`decide`
turns them into a flag. :class:`Verdict` holds these fields under one set of names; each detector's result is a
subclass that adds what only it has (the masks, S and k, the exact binomial tail, the likelihood ratio). The
attributes have these names only; a detector's dictionaries may name a field as its readers know it
(``n_transitions`` and ``n_valid`` for ChainMark, ``n_green`` for the green-list detectors, ``decision`` in a stored
record), through its forms.

:meth:`Verdict.to_dict` is the one way a verdict becomes JSON. It writes one of a few fixed *forms*, so that what is
already published never changes: the detector's own dictionary (``"result"``), the line of a stored record
(``"record"``: ``phi, z, p_value, decision, n_scored`` and a detector's extras) and, for ChainMark, the command
line's audit row (``"audit"``, which reads its threshold and decision from a
:class:`chainmark.auditor.regime.Regime`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Tuple, Union

import numpy as np

#: A field of a form: its name in the dictionary, or (name in the dictionary, where the value comes from).
#: A source ``"regime.NAME"`` reads the regime's attribute NAME; ``"regime.flagged"`` and
#: ``"regime.label"`` are the regime's verdict on this text (:meth:`~chainmark.auditor.regime.Regime.decide`,
#: :meth:`~chainmark.auditor.regime.Regime.label`).
FormField = Union[str, Tuple[str, str]]

#: The fields of a stored record's detection entry, in their stored order (detectors append their extras).
RECORD_FORM: tuple[FormField, ...] = ("phi", "z", "p_value", ("decision", "is_watermarked"), "n_scored")


def decide(*, z: Any, p_value: Any = None, alpha: Any = None, threshold: Any = None) -> Any:
    """The decision rule, stated once: flag when p < alpha or, when a z threshold is set, when z > threshold.

    Every detector flags with it at its own alpha (no threshold); a
    published regime (:class:`chainmark.auditor.regime.Regime`) and the calibrated
    rates of :func:`cmlab.harness.runner.tpr` apply an operating threshold on
    z. It works element by element on numpy arrays and pandas Series as on
    numbers (a NaN never flags).
    """
    if threshold is not None:
        return z > threshold
    if p_value is None or alpha is None:
        raise ValueError("without a threshold the decision needs p_value and alpha (flag when p < alpha)")
    return p_value < alpha


def _plain(value: Any) -> Any:
    """A JSON-ready Python value: numpy scalars to bool, int or float; masks to lists of 0/1."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.astype(int).tolist()
    return value


@dataclass
class Verdict:
    """A detector's verdict on one token sequence.

    ``phi`` is the share of the ``n_scored`` scored positions that follow the
    watermark (``n_hits`` of them), ``p0`` its mean under the null, ``z`` and
    ``p_value`` the one-sided test of phi against p0, and ``is_watermarked``
    the detector's decision at ``alpha`` (:func:`decide`). ``n_tokens``
    counts the tokens of the text.
    """

    phi: float
    z: float
    p_value: float
    is_watermarked: bool
    n_tokens: int
    n_scored: int
    n_hits: int
    p0: float
    alpha: float

    #: The forms :meth:`to_dict` writes, by name; subclasses extend them.
    FORMS: ClassVar[Mapping[str, tuple[FormField, ...]]] = {
        "result": ("phi", "z", "p_value", "is_watermarked", "n_tokens", "n_scored", "n_hits", "p0", "alpha"),
        "record": RECORD_FORM,
    }
    #: The per-position arrays ``to_dict(include_masks=True)`` adds, as lists of 0/1.
    MASKS: ClassVar[tuple[str, ...]] = ()

    def to_dict(self, form: str = "result", *, regime: Any = None, include_masks: bool = False) -> dict[str, Any]:
        """This verdict as a plain-Python dictionary (JSON-ready) in one of :attr:`FORMS`.

        ``"result"`` (the default) is the detector's own dictionary,
        ``"record"`` the entry a stored record keeps; a form that reads a
        regime (ChainMark's ``"audit"``) needs ``regime``. ``include_masks``
        adds the per-position masks.
        """
        try:
            fields = self.FORMS[form]
        except KeyError:
            raise ValueError(f"form must be one of {sorted(self.FORMS)} for a {type(self).__name__}, "
                             f"got {form!r}") from None
        out: dict[str, Any] = {}
        for entry in fields:
            name, source = (entry, entry) if isinstance(entry, str) else entry
            out[name] = _plain(self._value(source, regime))
        if include_masks:
            for name in self.MASKS:
                out[name] = _plain(np.asarray(getattr(self, name)))
        return out

    def _value(self, source: str, regime: Any) -> Any:
        if not source.startswith("regime."):
            return getattr(self, source)
        if regime is None:
            raise ValueError(f"this form reads {source!r}: pass the regime that judges the text (regime=...)")
        name = source[len("regime."):]
        if name == "flagged":
            return regime.decide(self)
        if name == "label":
            return regime.label(self)
        return getattr(regime, name)


__all__ = ["RECORD_FORM", "Verdict", "decide"]

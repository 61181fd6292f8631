"""Argument checks shared by the whole package: one place that says what a valid S, alpha, rho or n is.

Every public function validates its arguments before it computes anything,
with an error that names the parameter: a wrong type is a ``TypeError``, a
value out of range a ``ValueError``. The checks of one concept stay with it
(a gate kind in :mod:`chainmark.gates`, a key in :mod:`chainmark.keys`);
the ones every layer needs are here.
"""
from __future__ import annotations

from typing import Any, TypeVar

import numpy as np

from .limits import MAX_STATES

__all__ = ["check_alpha", "check_int", "check_length", "check_null_scores", "check_num_states", "check_offsets",
           "check_options", "check_rho", "check_rho_positive", "check_states", "is_number"]

_O = TypeVar("_O")


def is_number(x: object) -> bool:
    """A real number (Python or numpy), not a bool."""
    return not isinstance(x, bool) and isinstance(x, (int, float, np.integer, np.floating))


def check_options(cls: type[_O], value: _O | None, name: str) -> _O:
    """``value``, or ``cls()`` when it is None: the one check of an options object (a ``Sampling``, a grid's
    options). Anything else is a ``TypeError`` that names the parameter and the class to build, so a call
    cannot pass a field of the options as a keyword by mistake and be heard as something else.

    >>> check_options(dict, None, "extra")
    {}
    """
    if value is None:
        return cls()
    if not isinstance(value, cls):
        article = "an" if cls.__name__[:1] in "AEIOU" else "a"
        raise TypeError(f"{name} must be {article} {cls.__name__} ({cls.__name__}(...)), got {type(value).__name__}")
    return value


def check_int(value: object, name: str, low: int) -> int:
    """An integer (Python or numpy, not bool) of at least ``low``, as an ``int``.

    The one integer check of the package: a non-integer is a ``TypeError``, a
    value below ``low`` a ``ValueError``, both naming the parameter.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {low}, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value}")
    return int(value)


def check_num_states(S: object) -> int:
    """Validate a state count: an integer of at least 2."""
    return check_int(S, "S", 2)


def check_states(S: object) -> int:
    """A state count for detection: an integer in [2, MAX_STATES], checked before any topology is built."""
    S = check_num_states(S)
    if S > MAX_STATES:
        raise ValueError(f"S must be at most {MAX_STATES} (a larger S leaves too few tokens per state "
                         f"to carry a watermark), got {S}")
    return S


def check_alpha(alpha: object, name: str = "alpha") -> float:
    """A significance level must lie strictly between 0 and 1."""
    if not is_number(alpha):
        raise TypeError(f"{name} must be a number in (0, 1), got {type(alpha).__name__}")
    if not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"{name} must lie in (0, 1), got {alpha}")
    return float(alpha)


def check_rho(rho: object, name: str = "rho") -> float:
    """A budget must be a real number in [0, 1]."""
    if not is_number(rho):
        raise TypeError(f"{name} must be a number in [0, 1], got {type(rho).__name__}")
    if not (0.0 <= float(rho) <= 1.0):
        raise ValueError(f"{name} must lie in [0, 1], got {rho}")
    return float(rho)


def check_rho_positive(rho: object, name: str = "rho") -> float:
    """A watermark budget for calibration must lie in (0, 1]: rho = 0 carries no signal."""
    if not is_number(rho):
        raise TypeError(f"{name} must be a number in (0, 1], got {type(rho).__name__}")
    if not 0.0 < float(rho) <= 1.0:
        raise ValueError(f"{name} must lie in (0, 1] (rho = 0 embeds nothing to detect), got {rho}")
    return float(rho)


def check_length(n: object, name: str = "n") -> int:
    """A text length in tokens: an integer >= 2 (one transition at least)."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"{name} must be an integer number of tokens >= 2, got {type(n).__name__}")
    if n < 2:
        raise ValueError(f"{name} must be >= 2 tokens (a text of n tokens has n - 1 transitions), got {n}")
    return int(n)


def check_null_scores(values: Any, name: str) -> np.ndarray:
    """Null z-scores as a flat float array: refused when empty or when one is NaN or infinite (a text too short
    to score), with the argument's name in the error."""
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{name} is empty: recalibration needs null z-scores from a corpus")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values; drop texts too short to score")
    return arr


def check_offsets(offsets: Any, n: int) -> list[tuple[int, int]] | None:
    """The tokens' character spans as int pairs, one per token (n of them), or None when none are given."""
    if offsets is None:
        return None
    out = [(int(a), int(b)) for a, b in offsets]
    if len(out) != n:
        raise ValueError(f"offsets must hold one (char_start, char_end) per token ({n}), got {len(out)}")
    return out

"""The check after each Build it: the reader's code against the package, with what differs said in words.

A chapter's Build it has the reader write a piece of the method (the partition, the walk processor, the
detector) and then checks it against the package with :func:`check_build`. The check runs the reader's
code, compares its result with the package's and, when they differ, says where first and what to look at:
the first token id whose state differs, the first step where two processors part, the expected and the
obtained value.

In the book a check is strict: a difference raises :class:`BuildCheckFailed` and fails the build. In the
participant edition (``tools/participant_edition.py`` calls :func:`participant_edition` at the top of every
notebook) a check is lenient: it prints its sentence, says "not written yet" while the skeleton still
raises ``NotImplementedError``, and hands back the package's result, so that one participant's bug never
stops the rest of the chapter.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["BuildCheck", "BuildCheckFailed", "Comparison", "check_build", "participant_edition", "same_array",
           "same_arrays", "same_values"]

_EDITION_ENV = "CHAINMARK_EDITION"  # "participant" makes every check lenient (as participant_edition() does)

#: A comparison: (yours, the package's) -> None when they agree, else a sentence saying where they differ.
Comparison = Callable[[Any, Any], "str | None"]

_participant = False


class BuildCheckFailed(AssertionError):
    """The reader's code and the package's disagree (raised in the book, where a check is strict)."""


def participant_edition(on: bool = True) -> None:
    """Make every later check lenient (``on=True``) or strict again: the participant edition's switch."""
    global _participant
    _participant = bool(on)


def _in_participant_edition() -> bool:
    """Whether checks are lenient: :func:`participant_edition` was called, or ``CHAINMARK_EDITION=participant``."""
    return _participant or os.environ.get(_EDITION_ENV, "").strip().lower() == "participant"


@dataclass(frozen=True)
class BuildCheck:
    """What a check found: ``status`` is ``"agrees"``, ``"differs"``, ``"raised"`` or ``"not written"``.

    ``value`` is what the chapter goes on with: your result when it agrees with the package's, the
    package's otherwise (only the participant edition gets that far with a difference).
    """

    what: str
    status: str
    message: str
    value: Any

    @property
    def ok(self) -> bool:
        return self.status == "agrees"

    def __repr__(self) -> str:
        return f"BuildCheck({self.what!r}, {self.status!r})"


def check_build(what: str, yours: Callable[[], Any], package: Any, *, compare: Comparison,
                look_at: str, agrees: str = "") -> BuildCheck:
    """Run ``yours()`` and compare its result with ``package``; say in a sentence what differs.

    ``what`` names your code in the message ("my_state_table"); ``compare`` is one of :func:`same_array`,
    :func:`same_arrays`, :func:`same_values` or any function returning ``None`` for agreement and a
    sentence otherwise; ``look_at`` says where a difference most likely comes from; ``agrees`` is the
    sentence printed when they agree ("on all 49,152 token ids").
    """
    if not callable(yours):
        raise TypeError("check_build needs your code as a function of no arguments, e.g. lambda: my_table(key, V, S)")
    if not isinstance(look_at, str) or not look_at.strip():
        raise ValueError("check_build needs look_at: where a difference most likely comes from")
    try:
        mine = yours()
    except NotImplementedError:
        return _outcome(what, "not written", f"{what} is not written yet.", package)
    except Exception as exc:  # the reader's code failed: say how, and what to look at
        message = f"{what} raised {type(exc).__name__}: {exc}. Look at {look_at.strip().rstrip('.')}."
        return _outcome(what, "raised", message, package, cause=exc)
    difference = compare(mine, package)
    if difference is None:
        print(f"✓ {what} agrees with the package{(' ' + agrees.strip()) if agrees.strip() else ''}.")
        return BuildCheck(what, "agrees", "", mine)
    message = f"{what} differs from the package: {difference.rstrip('.')}. Look at {look_at.strip().rstrip('.')}."
    return _outcome(what, "differs", message, package)


def _outcome(what: str, status: str, message: str, package: Any, cause: BaseException | None = None) -> BuildCheck:
    """A failed check: raised in the book; printed in the participant edition, which goes on with the package's."""
    if not _in_participant_edition():
        raise BuildCheckFailed(message) from cause
    print(f"✗ {message} The chapter goes on with the package's version.")
    return BuildCheck(what, status, message, package)


# --- comparisons -------------------------------------------------------------------------------------------

def _fmt(v: Any) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.6g}"
    return repr(v) if isinstance(v, str) else str(v)


def _close(a: Any, b: Any, rel_tol: float, abs_tol: float) -> bool:
    if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
        return bool(a) == bool(b)
    if isinstance(a, (int, float, np.number)) and isinstance(b, (int, float, np.number)):
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
    return a == b


def _array_difference(mine: Any, theirs: Any, index: str, value: str, rel_tol: float, abs_tol: float,
                      where: str = "") -> str | None:
    try:
        a = np.asarray(mine)
    except Exception:  # a ragged or odd object
        return f"{where}yours is a {type(mine).__name__} that is not an array"
    b = np.asarray(theirs)
    if a.shape != b.shape:
        return f"{where}yours has shape {a.shape}, the package's {b.shape}"
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        try:
            equal = np.isclose(a, b, rtol=rel_tol, atol=abs_tol, equal_nan=True)
        except TypeError:
            return f"{where}yours holds {a.dtype} values, the package's {b.dtype}"
    else:
        equal = a == b
    if bool(np.all(equal)):
        return None
    bad = np.argwhere(~np.asarray(equal))
    first = tuple(int(i) for i in bad[0])
    at = first[0] if len(first) == 1 else "[" + ", ".join(map(str, first)) + "]"
    sentence = (f"{where}at {index} {at} yours gives {value} {_fmt(a[first])} and the package {_fmt(b[first])} "
                f"({len(bad):,} of {a.size:,} differ)")
    if a.ndim == 1 and a.size > 2 and a.dtype.kind in "iub" and b.dtype.kind in "iub":
        if np.array_equal(a[:-1], b[1:]):
            sentence += f"; your {value} at every {index} t is the package's at t + 1: an off-by-one in what you use for t"
        elif np.array_equal(a[1:], b[:-1]):
            sentence += f"; your {value} at every {index} t is the package's at t - 1: an off-by-one in what you use for t"
    return sentence


def same_array(index: str = "index", value: str = "value", *, rel_tol: float = 0.0,
               abs_tol: float = 0.0) -> Comparison:
    """Compare two arrays element by element (exactly, or within tolerances for floats).

    The sentence names the first differing ``index`` and both ``value``\\ s, counts the differences, and
    notices when yours is the package's shifted by one position (an off-by-one in the index used).
    """
    return lambda mine, theirs: _array_difference(mine, theirs, index, value, rel_tol, abs_tol)


def same_arrays(item: str = "item", index: str = "index", value: str = "value", *, rel_tol: float = 0.0,
                abs_tol: float = 0.0, labels: Sequence[Any] | None = None) -> Comparison:
    """Compare two lists of arrays (one per text, prompt, ...); the sentence names the first that differs."""

    def compare(mine: Any, theirs: Any) -> str | None:
        mine, theirs = list(mine), list(theirs)
        if len(mine) != len(theirs):
            return f"yours gives {len(mine):,} {item}s, the package {len(theirs):,}"
        for i, (a, b) in enumerate(zip(mine, theirs)):
            name = labels[i] if labels is not None else i
            found = _array_difference(a, b, index, value, rel_tol, abs_tol, where=f"{item} {name}: ")
            if found is not None:
                return found
        return None

    return compare


def same_values(fields: Sequence[str] | None = None, *, rel_tol: float = 1e-9, abs_tol: float = 0.0,
                labels: Sequence[Any] | None = None) -> Comparison:
    """Compare a value, a tuple of named values, or a list of either (one per case, named by ``labels``).

    Numbers agree within ``rel_tol``/``abs_tol``, arrays element by element, anything else by ``==``. The
    sentence names the first case and field that differ, with the expected and the obtained value.
    """

    def one(a: Any, b: Any, where: str) -> str | None:
        if fields is None:
            a, b, names = (a,), (b,), [""]
        else:
            if not isinstance(a, (tuple, list)) or len(a) != len(fields):
                return f"{where}yours gives {_fmt(a)}, the package expects {len(fields)} values ({', '.join(fields)})"
            names = list(fields)
        for name, x, y in zip(names, a, b):
            label = f"{where}{name}" if name else where.rstrip(": ")
            if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
                found = _array_difference(x, y, "position", "value", rel_tol, abs_tol,
                                          where=f"{label}: " if label else "")
                if found is not None:
                    return found
            elif not _close(x, y, rel_tol, abs_tol):
                return f"{label + ' ' if label else ''}yours is {_fmt(x)}, the package's {_fmt(y)}".strip()
        return None

    def compare(mine: Any, theirs: Any) -> str | None:
        if labels is None:
            return one(mine, theirs, "")
        mine, theirs = list(mine), list(theirs)
        if len(mine) != len(theirs):
            return f"yours gives {len(mine):,} results, the package {len(theirs):,}"
        for label, a, b in zip(labels, mine, theirs):
            found = one(a, b, f"for {label}: ")
            if found is not None:
                return found
        return None

    return compare

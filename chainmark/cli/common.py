"""What the ``chainmark`` commands share: the exit codes, the usage error that means code 2, argument types that
refuse a bad value with its allowed range, the messages on stderr, and the files a command creates."""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Callable

__all__ = ["EXIT_DETECTED", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "MAX_INPUT_BYTES_LIMIT",
           "UsageError", "add_text_preparation", "create_file", "fail", "finite_float", "float_in", "int_at_least",
           "int_in", "out_path", "warn"]

EXIT_OK = 0
EXIT_DETECTED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A problem with how the command was called or with its inputs (exit code 2)."""


def fail(message: str) -> int:
    """Report a usage error on stderr; its exit code."""
    print(f"chainmark: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def warn(message: str) -> None:
    """A warning on stderr (never on standard output, which carries the results)."""
    print(f"chainmark: warning: {message}", file=sys.stderr)


#: The largest --max-bytes: a safety limit on reading, far above any text a machine holds (2**62 bytes).
MAX_INPUT_BYTES_LIMIT = 2**62


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer >= low; a bad value is a usage error that states the range."""
    return _integer(low, None, f"an integer >= {low}")


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An integer in [low, high] (the upper bound is checked before anything of that size exists)."""
    return _integer(low, high, f"an integer >= {low} and <= {high}")


def _integer(low: int, high: int | None, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value
    return parse


def float_in(low: float, high: float, closed: bool | str) -> Callable[[str], float]:
    """A float in an interval: closed=True [low, high], False (low, high), "right" (low, high]."""
    brackets = {True: "[{}, {}]", False: "({}, {})", "right": "({}, {}]"}[closed]

    def parse(text: str) -> float:
        value = _float(text)
        inside = {True: low <= value <= high, False: low < value < high, "right": low < value <= high}[closed]
        if not inside:
            raise argparse.ArgumentTypeError(f"must lie in {brackets.format(low, high)}, got {text!r}")
        return value
    return parse


def finite_float() -> Callable[[str], float]:
    """A finite float."""
    def parse(text: str) -> float:
        value = _float(text)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        return value
    return parse


def add_text_preparation(parser: argparse.ArgumentParser) -> None:
    """The ``--text-preparation`` option of the commands that tokenize text under a regime."""
    from ..auditor.transit import TextPreparation

    def parse(text: str) -> object:
        try:
            return TextPreparation.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parser.add_argument("--text-preparation", type=parse, metavar="STEPS", help="done to each text before it is "
                        "tokenized: 'none', or a list of a normal form (nfc, nfd, nfkc, nfkd), lf (CRLF, CR to LF), "
                        "html (decode entities); default: the regime's (none if it names none), else nfc,lf; "
                        "--segments' character offsets count the prepared text")


def _float(text: str) -> float:
    """The float ``text`` spells, NaN (in no interval, not finite) when it spells none."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def out_path(value: str, what: str) -> Path:
    """The path an ``--out`` option names: a file to create, never a folder, standard output or nothing."""
    if not value.strip():
        raise UsageError(f"--out is empty: give the path of the {what} to create")
    if value == "-":
        raise UsageError(f"--out - would create a file named '-'; give the path of the {what} to create")
    if value.endswith(("/", os.sep)) or Path(value).is_dir():
        raise UsageError(f"--out {value} names a folder; give the path of the {what} to create inside it")
    return Path(value)


def create_file(path: Path, text: str) -> None:
    """Write a new file (mode 0644 at most): refused if the name exists, even as a dangling link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # O_EXCL never follows a link
    except FileExistsError:
        raise UsageError(f"{path} exists; refusing to overwrite it") from None
    except OSError as exc:
        raise UsageError(f"cannot create {path} ({exc.strerror or type(exc).__name__})") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)

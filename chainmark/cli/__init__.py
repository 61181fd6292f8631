"""The ``chainmark`` command line, the auditor's tool: this dispatcher builds the parser from one module per command
group and turns every outcome into an exit code: 0 ok, 1 a watermark was detected and ``--fail-on-detect`` was given
(or a check failed), 2 a usage error (a problem the commands recognise as the caller's), 3 an internal error (an
unexpected exception: a bug, reported as one line on stderr, never as a traceback), 130 interrupted (Ctrl-C,
wherever it lands)."""
from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from typing import Any, Sequence

from ..auditor.regime import RegimeError
from . import audit_command, detect_commands, key_audit_command, key_commands
from .common import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, UsageError, fail

__all__ = ["main"]

#: The command groups, in the order ``chainmark --help`` lists their commands.
_COMMAND_GROUPS = (detect_commands, key_commands, audit_command, key_audit_command)

_EPILOG = """\
examples:
  chainmark keygen --out deploy.key
  chainmark keygen --out acme.key --from-master master.key --context acme-chat/2026-Q3
  chainmark calibrate --n 200 --rho 0.5 --alpha 0.001
  chainmark regime --key-file acme.key --S 5 --alpha 0.01 --n-min 200 --out regime.json
  chainmark detect --key-file acme.key texts/*.txt
  chainmark detect --regime regime.json --key-file acme.key --json texts/*.txt > scores.jsonl
  cat essay.txt | chainmark detect --key-file acme.key --fail-on-detect -
  chainmark recalibrate --null domain_null.jsonl --alpha 0.01 --method quantile

exit codes: 0 ok; 1 watermark detected (only with detect --fail-on-detect), or
a check failed (key audit);
2 usage error (bad option, missing/unreadable key or input, empty input,
tokenizer that cannot be loaded); 3 internal error (an unexpected failure,
reported in one line: please report it); 130 interrupted.
The key comes from --key-file, else $CHAINMARK_KEY_FILE, else $CHAINMARK_KEY
(hex). It is never printed; only its fingerprint is."""


def _build_parser() -> argparse.ArgumentParser:
    """The ``chainmark`` argument parser: the program's own options, and each command group's subcommands."""
    from .. import __version__

    parser = argparse.ArgumentParser(prog="chainmark", epilog=_EPILOG,
                                     description="Audit text for the ChainMark watermark with a key and a tokenizer.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"chainmark {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in _COMMAND_GROUPS:
        group.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Entry point of the ``chainmark`` console script; returns the exit code.

    ``parser`` (default: the chainmark command's own) lets the book's lab run its own commands with the same exit
    codes, error lines and Ctrl-C handling. Called without ``argv`` (as the program), it first makes Ctrl-C end the
    process with code 130, before any heavy import; with ``argv`` (tests, the audit chapter) signals are the
    caller's.
    """
    previous = _exit_130_on_interrupt() if argv is None else None
    try:
        return _run(argv, parser or _build_parser())
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _exit_130_on_interrupt() -> Any:
    """Install the program's SIGINT handler (and SIGTERM, SIGHUP: a stopped job or a closed terminal end
    the run the same way, with a message); returns the previous SIGINT handler (None when it cannot be
    installed)."""
    try:
        previous = signal.signal(signal.SIGINT, _interrupted)
    except (ValueError, OSError):  # not the main thread of the main interpreter
        return None
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _interrupted)
    return previous


def _interrupted(signum: int, frame: Any) -> None:
    """Ctrl-C: one line on stderr, then exit 130 at once, wherever the signal lands (a KeyboardInterrupt raised
    inside an import or a library could turn into an error of its own, exit 3)."""
    name = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    try:
        sys.stdout.flush()
        sys.stderr.write(f"chainmark: {name}; nothing more was written\n")
        sys.stderr.flush()
    except Exception:  # a stream in the middle of a write; the exit code still says it
        pass
    os._exit(EXIT_INTERRUPTED if signum == signal.SIGINT else 128 + int(signum))


def _run(argv: Sequence[str] | None, parser: argparse.ArgumentParser) -> int:
    """Parse the arguments and run the command; problems of the caller's are code 2, anything else 3."""
    try:
        args = parser.parse_args(_negative_values_attached(sys.argv[1:] if argv is None else list(argv)))
    except SystemExit as exc:  # --help, --version (0) and argparse's usage errors (2)
        return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else EXIT_USAGE
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if sys.stdout is None:  # started with standard output closed (`>&-`): results would be lost
        return fail("standard output is closed: the results would be lost (redirect it to a file or a pipe)")
    try:
        code = args.func(args)
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not after the exit code is decided
        return code
    except (UsageError, RegimeError) as exc:  # a regime that does not fit the key, tokenizer or options
        return fail(str(exc))
    except BrokenPipeError:  # the reader of standard output went away (`| head`): say so once
        _discard_stdout()
        return fail("standard output was closed before the results were written (broken pipe)")
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            return _internal(exc)
        _discard_stdout()
        return fail(f"cannot write the results to standard output ({exc.strerror or exc}); nothing more was written")
    except KeyboardInterrupt:  # in-process callers: the program itself exits from _interrupted
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line and its own exit code, never 1 ("detected") or 2
        return _internal(exc)


#: Errors of a write to standard output that are the caller's to fix (a full disk, a closed descriptor).
_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EPIPE, errno.EBADF, errno.EIO, errno.EDQUOT, errno.EFBIG)


def _internal(exc: BaseException) -> int:
    message = " ".join(str(exc).split()) or "(no message)"
    print(f"chainmark: internal error: {type(exc).__name__}: {message} "
          f"(exit code {EXIT_INTERNAL}; please report it)", file=sys.stderr)
    return EXIT_INTERNAL


#: Options whose value may be a negative number ("--threshold -1e300"); argparse reads a value that starts
#: with "-" and is not a plain decimal as the next option, so such a value is attached ("--threshold=-1e300").
_NUMERIC_OPTIONS = ("--threshold",)


def _negative_values_attached(argv: list[str]) -> list[str]:
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in _NUMERIC_OPTIONS and arg.startswith("-") and _is_number(arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _discard_stdout() -> None:
    """After a write to standard output failed, point it at the null device: Python flushes what is still
    buffered at exit, and a second failure there would replace the exit code decided here with 120."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass

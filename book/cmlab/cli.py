"""``cmlab``: the book's own commands, apart from the auditor's ``chainmark`` program.

``cmlab reference run | status | verify`` generates, inspects and re-checks the
committed reference run; ``cmlab doctor`` checks a laptop before a workshop.
They run through :func:`chainmark.cli.main`, so exit codes, error lines and
Ctrl-C behave as in ``chainmark``.
"""
from __future__ import annotations

import argparse
from typing import Sequence

from . import cli_doctor, cli_reference

__all__ = ["main"]

_EPILOG = """\
examples:
  cmlab reference status
  cmlab reference verify --samples 1 --max-tokens 5000
  cmlab doctor

exit codes: 0 ok; 1 a check failed (doctor) or a regenerated batch differs (reference verify);
2 usage error; 3 internal error; 130 interrupted."""


def _build_parser() -> argparse.ArgumentParser:
    """The ``cmlab`` argument parser: the reference run's commands and the workshop doctor."""
    from . import __version__

    parser = argparse.ArgumentParser(prog="cmlab", description="The ChainMark book's lab: the reference run "
                                     "and the workshop doctor.", epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"cmlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in (cli_reference, cli_doctor):
        group.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cmlab`` console script; returns the exit code."""
    from chainmark.cli import main as run

    return run(argv, _build_parser())

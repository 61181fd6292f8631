"""``cmlab doctor``: check a laptop before a workshop (:mod:`cmlab.teaching.doctor`), so that problems show
the week before rather than in the room."""
from __future__ import annotations

import argparse
import json

from chainmark.cli.common import EXIT_DETECTED, EXIT_OK

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``doctor`` with its options."""
    fmt = argparse.RawDescriptionHelpFormatter
    dr = subparsers.add_parser(
        "doctor", help="check this machine before a workshop",
        description="Check this machine for the book: Python and package versions, a notebook "
                    "front end, free disk and memory, the embedded model (it loads, writes a few "
                    "dozen watermarked tokens and detects them), and how long the chapters "
                    "should take here. Run it the week before a workshop.",
        epilog="exit codes: 0 ready, 1 something to fix (each failed line says what), 2 a usage error",
        formatter_class=fmt)
    dr.add_argument("--no-generation", action="store_true", help="skip loading the model and the probe")
    dr.add_argument("--json", action="store_true", help="one JSON object: every check and the verdict")
    dr.set_defaults(func=_cmd_doctor)


def _cmd_doctor(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from cmlab.teaching.doctor import report, run_checks

    checks = run_checks(generation=not args.no_generation)
    ready = not any(c.status == "fail" for c in checks)
    if args.json:
        print(json.dumps({"ready": ready, "checks": [asdict(c) for c in checks]}))
    else:
        print(report(checks))
    return EXIT_OK if ready else EXIT_DETECTED

"""``cmlab reference run | status | verify``: generate, inspect and re-check the book's committed reference run
(:mod:`cmlab.harness.reference`); ``verify`` exits 1 when a regenerated batch differs from the stored one."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from chainmark.cli.common import EXIT_DETECTED, EXIT_OK, EXIT_USAGE, UsageError, int_at_least

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``reference`` group and its ``run``, ``status`` and ``verify`` actions with their options."""
    fmt = argparse.RawDescriptionHelpFormatter
    ref = subparsers.add_parser(
        "reference", help="run, inspect or verify the committed reference run",
        description="The reference run: the paper's protocol at full size (head-to-head, "
                    "null corpus, calibration grid, k-regular, explorer grid) on the "
                    "settings' model ($CHAINMARK_MODEL, default the embedded SmolLM2). "
                    "Its key is derived from a published label, so anyone can check it.",
        epilog="examples:\n  cmlab reference status\n"
               "  nohup cmlab reference run > reference.log 2>&1 &   # hours on a CPU; resumes\n"
               "  cmlab reference run --experiments head_to_head null\n"
               "  cmlab reference verify --samples 3\n"
               "  cmlab reference verify --samples 1 --max-tokens 5000   # a batch of at most 5,000 tokens",
        formatter_class=fmt)
    rsub = ref.add_subparsers(dest="reference_command", metavar="ACTION")
    from cmlab.harness.reference.protocol import EXPERIMENTS

    rr = rsub.add_parser("run", help="generate what is missing (resumable)",
                         description="Generate every missing batch, in order, writing each batch whole as it "
                                     "finishes; an interrupted run resumes where it stopped.")
    rr.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS), metavar="NAME",
                    help=f"which experiments, run in the order given (default all: {', '.join(EXPERIMENTS)})")
    rr.add_argument("--fresh", nargs="+", choices=EXPERIMENTS, default=[], metavar="NAME",
                    help="delete these experiments' stored batches first and generate them again")
    rr.add_argument("--stop-after", type=int_at_least(1), metavar="N", help="stop after N new batches")
    rr.add_argument("--dir", metavar="FOLDER", help="reference folder (default: the model's, see status)")
    rr.set_defaults(func=_cmd_reference_run)
    rs = rsub.add_parser("status", help="what exists and what is missing, per experiment")
    rs.add_argument("--dir", metavar="FOLDER", help="reference folder (default: the model's)")
    rs.add_argument("--cells", action="store_true", help="one line per cell, not per experiment")
    rs.add_argument("--json", action="store_true", help="print JSON (one object per cell)")
    rs.set_defaults(func=_cmd_reference_status)
    rv = rsub.add_parser("verify", help="regenerate random stored batches and require identical results",
                         description="Regenerate N stored batches, drawn at random with the current git commit "
                                     "as seed, and compare token ids and every score exactly. Exit 0 when all "
                                     "match, 1 on a mismatch (with the command that regenerates the reference).")
    rv.add_argument("--samples", type=int_at_least(1), default=3, metavar="N", help="batches to check (default 3)")
    rv.add_argument("--seed", help="seed of the draw (default: the current git commit)")
    rv.add_argument("--max-tokens", type=int_at_least(1), metavar="N",
                    help="draw only among batches whose regeneration generates at most N tokens (texts x new "
                         "tokens, paraphrases included), to bound the check's time (default: every stored batch)")
    rv.add_argument("--dir", metavar="FOLDER", help="reference folder (default: the model's)")
    rv.set_defaults(func=_cmd_reference_verify)
    ref.set_defaults(func=_cmd_reference_help, reference_parser=ref)


def _cmd_reference_help(args: argparse.Namespace) -> int:
    args.reference_parser.print_help(sys.stderr)
    return EXIT_USAGE


def _cmd_reference_run(args: argparse.Namespace) -> int:
    from cmlab.harness import reference
    from cmlab.harness.runs import RunControl

    try:
        done = reference.run(experiments=args.experiments, root=args.dir, fresh=args.fresh,
                             protocol=reference.PROTOCOL, control=RunControl(stop_after=args.stop_after))
    except ValueError as exc:  # the folder holds a reference made with another protocol
        raise UsageError(str(exc)) from None
    print(f"reference: wrote {done['written']} batches, {done['skipped']} already stored, "
          f"{done['total']} in the protocol")
    return _cmd_reference_status(argparse.Namespace(dir=args.dir, cells=False, json=False))


def _reference_folder(value: str | None) -> Path | None:
    """``--dir`` of the reference commands: an existing folder (a usage error otherwise), or None for the default."""
    if value is None:
        return None
    if not value.strip():
        raise UsageError("--dir is empty: give the reference run's folder, or leave --dir out for the default")
    path = Path(value)
    if not path.is_dir():
        raise UsageError(f"--dir {value}: {'not a folder' if path.exists() else 'no such folder'}")
    return path


def _cmd_reference_status(args: argparse.Namespace) -> int:
    from cmlab.harness import reference

    root = _reference_folder(args.dir) or reference.reference_dir()
    rows = reference.status(root, reference.PROTOCOL)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return EXIT_OK
    print(f"reference run in {root}")
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(f"{row['experiment']}/{row['cell']}" if args.cells else row["experiment"], []).append(row)
    width = max(len(k) for k in groups)
    for name, part in groups.items():
        texts, total = sum(r["texts"] for r in part), sum(r["texts_total"] for r in part)
        batches, btotal = sum(r["batches"] for r in part), sum(r["batches_total"] for r in part)
        seconds = sum(r["seconds"] for r in part)
        state = "complete" if texts == total else ("missing" if texts == 0 else "partial")
        print(f"  {name:<{width}}  {state:8s} {texts:5d}/{total:<5d} texts  {batches:3d}/{btotal:<3d} batches"
              + (f"  {seconds / 3600:5.2f} h" if seconds else ""))
    return EXIT_OK


def _cmd_reference_verify(args: argparse.Namespace) -> int:
    from cmlab.harness import reference

    root = _reference_folder(args.dir)
    try:
        checks = reference.verify(args.samples, root=root, seed=args.seed, protocol=reference.PROTOCOL,
                                  max_tokens=args.max_tokens)
    except (FileNotFoundError, reference.NoBatchWithinBound) as exc:  # no run, no batch, none within --max-tokens
        raise UsageError(str(exc)) from None
    bad = [c for c in checks if not c.matched]
    for c in bad:
        print(f"MISMATCH {c.shard}:")
        for d in c.differences:
            print(f"  {d}")
    if bad:
        print(f"the stored reference no longer matches what this code generates; regenerate it with "
              f"`{reference.regenerate_command()}` and commit the new records")
        return EXIT_DETECTED
    print(f"verified {len(checks)} stored batches ({sum(c.texts for c in checks)} records): "
          + ", ".join(c.shard for c in checks))
    return EXIT_OK

"""``chainmark keygen`` and ``chainmark regime``: write a deployment's key (mode 0600, only its fingerprint printed)
and the public detection regime that auditors apply with it (never the key)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..auditor.regime import Regime, regime_document
from ..limits import MAX_STATES
from ..significance import DEFAULT_TEST
from .common import (EXIT_OK, UsageError, add_text_preparation, create_file, finite_float, float_in, int_at_least,
                     int_in, out_path)
from .inputs import load_key, load_tokenizer, read_certificate, tokenizer_label, warn_if_not_private

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``keygen`` and ``regime`` with their options."""
    fmt = argparse.RawDescriptionHelpFormatter
    k = subparsers.add_parser(
        "keygen", help="write a fresh (or derived) key file, mode 0600",
        description="Write a 32-byte key to a new file with permissions 0600 and print "
                    "only its fingerprint. Never overwrites an existing file.",
        epilog="examples:\n  chainmark keygen --out master.key\n"
               "  chainmark keygen --out acme.key --from-master master.key --context acme-chat/2026-Q3",
        formatter_class=fmt)
    k.add_argument("--out", required=True, metavar="FILE", help="key file to create (must not exist)")
    k.add_argument("--from-master", metavar="KEY", help="derive the key from this master key file (HKDF) "
                   "instead of drawing a random one")
    k.add_argument("--context", help="deployment context for --from-master, e.g. 'acme-chat/2026-Q3'")
    k.set_defaults(func=_cmd_keygen)
    g = subparsers.add_parser(
        "regime", help="write the public detection regime (JSON, no key)",
        description="Write the detection regime a deployer publishes: S, topology, "
                    "alpha, threshold, tokenizer and the key's fingerprint; never the key.",
        epilog="examples:\n  chainmark regime --key-file acme.key --S 5 --alpha 0.01 --out regime.json\n"
               "  chainmark regime --key-file acme.key --S 5 --alpha 0.01 --threshold 2.71 "
               "--n-min 200 --rho 0.5",
        formatter_class=fmt)
    g.add_argument("--key-file", metavar="KEY",
                   help="the deployment key (default: $CHAINMARK_KEY_FILE, $CHAINMARK_KEY)")
    g.add_argument("--S", type=int_in(2, MAX_STATES), required=True, help=f"number of states (2 to {MAX_STATES})")
    g.add_argument("--topology", choices=("clockwork", "soft_cycle"), default="clockwork")
    g.add_argument("--alpha", type=float_in(0.0, 1.0, closed=False), required=True)
    g.add_argument("--threshold", type=finite_float(), metavar="Z", help="operating z threshold (default: z_alpha)")
    g.add_argument("--tokenizer", metavar="NAME", help="tokenizer name to publish (default: the embedded model's); "
                   "it is loaded to record its vocabulary fingerprint")
    g.add_argument("--tokenizer-revision", metavar="REV", help="Hub revision (commit hash) of --tokenizer to "
                   "load and publish, so auditors load the same files")
    g.add_argument("--n-min", type=int_at_least(2), metavar="N", help="minimum text length in tokens")
    add_text_preparation(g)
    g.add_argument("--rho", type=float_in(0.0, 1.0, closed=True), help="watermark budget")
    g.add_argument("--gate", choices=("all", "high_entropy", "low_entropy", "top2_gap"))
    g.add_argument("--tau", type=finite_float(), help="the gate's calibrated threshold (with --gate and --rho)")
    g.add_argument("--test", choices=("z", "distinct", "exact"), help="the test auditors apply (see detect --help; "
                   "default: exact, or the z-test when --threshold is given): exact, size at "
                   "most alpha for every text over a random key; z, the paper's normal approximation; distinct, "
                   "valid on text without repeated tokens. The regime's \"guarantee\" field states which")
    g.add_argument("--recalibrated", metavar="METHOD:N", type=_recalibration,
                   help="record that --threshold was fitted by `chainmark recalibrate --method METHOD` on N null "
                        "texts (e.g. quantile:412); needed for a fitted threshold below z_alpha")
    g.add_argument("--trades-fpr-for-power", action="store_true",
                   help="allow a --threshold below z_alpha: the regime then says, and every audit warns, that it "
                        "flags more than alpha of unwatermarked text in exchange for power")
    g.add_argument("--certificate", metavar="FILE.json", help="the key's audit certificate (chainmark key audit) to "
                   "publish inside the regime; it must be for this key, tokenizer, S and topology")
    g.add_argument("--out", metavar="FILE", help="write the JSON here (default: standard output)")
    g.set_defaults(func=_cmd_regime)


def _recalibration(text: str) -> dict[str, Any]:
    """``METHOD:N`` of ``regime --recalibrated``: the recipe and the size of the null corpus it was fitted on."""
    method, _, n = text.partition(":")
    if method not in ("sd", "quantile") or not n.isdigit() or int(n) < 2:
        raise argparse.ArgumentTypeError(f"must be METHOD:N with METHOD sd or quantile and N >= 2 null texts, "
                                         f"got {text!r}")
    return {"method": method, "n_null": int(n)}


def _cmd_keygen(args: argparse.Namespace) -> int:
    """Write a key file and print its fingerprint. The fingerprint is printed (and flushed) first: if standard
    output cannot take it, no key is written, so a key never exists without the fingerprint that names it."""
    from ..auditor.keyfiles import read_key_file
    from ..keys import derive_key, generate_key, key_fingerprint, weak_key_reason

    if (args.from_master is None) != (args.context is None):
        raise UsageError("--from-master and --context go together")
    out = out_path(args.out, "key file")
    if out.exists() or out.is_symlink():
        raise UsageError(f"{out} exists; refusing to overwrite a key file (choose another --out)")
    if args.from_master is not None:
        try:
            master = read_key_file(args.from_master)
        except (OSError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        weak = weak_key_reason(master)
        if weak:  # every key derived from it would be as guessable
            raise UsageError(f"refusing to derive keys from a weak master key ({weak}); write a random master "
                             "with `chainmark keygen --out master.key`")
        warn_if_not_private(args.from_master)
        if not args.context:
            raise UsageError("--context must be a non-empty string")
        try:
            args.context.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError("--context must be text (it holds bytes that are not valid in the "
                             "terminal's encoding)") from None
        key = derive_key(master, args.context)
        how = f"derived for context {args.context!r} from master {key_fingerprint(master)}"
    else:
        key, how = generate_key(), "random"
    print(key_fingerprint(key))
    sys.stdout.flush()  # an OSError here (a full disk) ends the command before the key exists
    _write_key(out, key)
    print(f"wrote a {len(key)}-byte key ({how}) to {out} with permissions 0600", file=sys.stderr)
    return EXIT_OK


def _write_key(out: Path, key: bytes | None) -> bytes:
    """Create the key file ``out`` (never over an existing file or link); a usage error if it cannot be written."""
    from ..auditor.keyfiles import write_key_file

    try:
        return write_key_file(out, key)
    except FileExistsError:
        raise UsageError(f"{out} exists; refusing to overwrite a key file (choose another --out)") from None
    except OSError as exc:
        raise UsageError(f"cannot write the key file {out} ({exc.strerror or exc})") from None


def _cmd_regime(args: argparse.Namespace) -> int:
    key = load_key(args.key_file)
    tokenizer = load_tokenizer(args.tokenizer, args.tokenizer_revision)
    try:
        test = args.test or (None if args.threshold is not None else DEFAULT_TEST)
        regime = Regime(S=args.S, topology=args.topology, alpha=args.alpha, threshold=args.threshold,
                        n_min=args.n_min, tokenizer=tokenizer_label(args.tokenizer),
                        tokenizer_revision=args.tokenizer_revision, rho=args.rho, gate=args.gate,
                        tau=args.tau, recalibration=args.recalibrated, test=test,
                        key_audit=read_certificate(args.certificate) if args.certificate else None,
                        trades_fpr_for_power=True if args.trades_fpr_for_power else None,
                        **({"text_preparation": args.text_preparation} if args.text_preparation else {}))
        doc = regime_document(key, regime, tokenizer)
    except ValueError as exc:  # the options do not fit together (soft_cycle with S = 2, another key's certificate)
        raise UsageError(str(exc)) from None
    text = json.dumps(doc, indent=2, allow_nan=False)
    if args.out:
        create_file(out_path(args.out, "regime"), text + "\n")
        print(f"wrote the detection regime to {args.out}", file=sys.stderr)
    print(text)
    return EXIT_OK

"""``chainmark key audit``: measure one key's false-positive rate on unwatermarked text with every test before it is
deployed, and write (or recheck) the certificate that a regime carries."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..auditor.regime import Regime, tokenizer_fingerprint
from ..auditor.transit import TextPreparation
from ..limits import DEFAULT_MAX_CORPUS_BYTES, MAX_STATES
from ..significance import DEFAULT_TEST
from .common import (EXIT_DETECTED, EXIT_OK, EXIT_USAGE, MAX_INPUT_BYTES_LIMIT, UsageError, add_text_preparation,
                     create_file, float_in, int_in, out_path)
from .inputs import load_key, load_tokenizer, read_certificate, read_input, regime_topology, tokenizer_label

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``key`` group and its ``audit`` action with their options."""
    fmt = argparse.RawDescriptionHelpFormatter
    key_cmd = subparsers.add_parser(
        "key", help="key tools: audit a key's false-positive rate before deployment",
        description="Key tools. `chainmark key audit` scores unwatermarked text under one "
                    "key with every test and writes a certificate.", formatter_class=fmt)
    ksub = key_cmd.add_subparsers(dest="key_command", metavar="ACTION")
    ka = ksub.add_parser("audit", help="the key's false-positive rate on a corpus, per test; a certificate",
                         description="Audit a key before deploying it: score a corpus of text that was not written "
                                     "with the key (by default the corpus the book's lab offers when it is "
                                     "installed: its reference null, 1,200 texts of the embedded model, and windows "
                                     "of the Python Language Reference's prose) under this key with the z-test, "
                                     "distinct pairs and the exact test, and report each test's false-positive rate "
                                     "over documents with its 95% interval and one-sided 95% upper bound, the "
                                     "threshold that would hold alpha on this corpus, and a verdict for the test "
                                     "you will deploy: PASS when the upper bound is at or below alpha (which needs "
                                     "at least 299 documents at alpha = 1%), FAIL when the lower bound lies above "
                                     "it, INCONCLUSIVE otherwise. The exact test's size is at most alpha for every "
                                     "text over a random key; this audit measures the one key you deploy. The "
                                     "certificate (JSON: key fingerprint, tokenizer fingerprint, S, topology, the "
                                     "corpus's size and fingerprint, which covers its texts and how they are "
                                     "grouped into documents, that grouping in words, rates, thresholds, how many "
                                     "keys were tried as you declare it (not verified), what it certifies and what "
                                     "it does not, the public-output budget you declare, package version, a digest; "
                                     "never the key) goes into the regime with `chainmark regime --certificate`, "
                                     "where `chainmark detect --regime` checks it.",
                         epilog="exit codes: 0 the key is certified for --test on the corpus (PASS), 1 it is "
                                "not (the certificate is written either way), 2 a usage error.\n"
                                "examples:\n  chainmark key audit --key-file acme.key --S 5 --out acme.audit.json\n"
                                "  chainmark key audit --key-file acme.key --S 5 --plan --promise 0.01\n"
                                "  chainmark key audit --key-file acme.key --S 5 --alpha 0.003 --promise 0.01\n"
                                "  chainmark key audit --key-file acme.key --S 5 --corpus forum/*.txt --test z\n"
                                "  chainmark key audit --key-file acme.key --S 5 --check acme.audit.json",
                         formatter_class=fmt)
    ka.add_argument("--key-file", metavar="KEY", help="the key (default: $CHAINMARK_KEY_FILE, $CHAINMARK_KEY)")
    ka.add_argument("--tokenizer", metavar="NAME", help="Hub id or local folder (default: the embedded model's)")
    ka.add_argument("--tokenizer-revision", metavar="REV", help="Hub revision (commit hash) of --tokenizer")
    ka.add_argument("--S", type=int_in(2, MAX_STATES), required=True, help=f"number of states (2 to {MAX_STATES})")
    ka.add_argument("--topology", choices=("clockwork", "soft_cycle"), default="clockwork")
    ka.add_argument("--alpha", type=float_in(0.0, 1.0, closed=False), default=0.01,
                    help="the level the deployed test flags at (default 0.01)")
    ka.add_argument("--promise", type=float_in(0.0, 1.0, closed=False), metavar="RATE",
                    help="the false-positive rate the certificate promises (default: --alpha). A key tested at "
                         "the rate it promises passes only when its rate lies well below it: --plan finds the "
                         "stricter --alpha at which a fresh key passes")
    ka.add_argument("--plan", action="store_true", help="instead of auditing, plan: the largest --alpha for "
                    "the exact test at which a fresh key certifies --promise on this corpus with probability "
                    "--probability, measured on 200 pilot keys derived from the key (the key is not scored)")
    ka.add_argument("--probability", type=float_in(0.0, 1.0, closed=False), default=0.9,
                    help="with --plan: the chance of a pass to plan for (default 0.9)")
    ka.add_argument("--test", choices=("z", "distinct", "exact"), default=DEFAULT_TEST,
                    help="the test the deployment will use: the verdict is for it (default exact)")
    ka.add_argument("--corpus", nargs="+", metavar="FILE", help="your own unwatermarked text instead of the "
                    "default corpus: .txt files (each file one document) or .jsonl files (each non-blank line "
                    "one document, its text in --text-field)")
    ka.add_argument("--text-field", default="text", help="the text's field in .jsonl corpus files (default text)")
    add_text_preparation(ka)  # --corpus texts; give the regime's if it is not the default
    ka.add_argument("--max-bytes", type=int_in(1, MAX_INPUT_BYTES_LIMIT), default=DEFAULT_MAX_CORPUS_BYTES,
                    metavar="N", help="refuse corpus files larger than N bytes in all")
    ka.add_argument("--keys-tried", type=int_in(1, 10**9), default=1, metavar="N",
                    help="how many keys were tried before choosing this one (default 1); with more than one, "
                         "--selected-on must name the other corpus they were compared on. The certificate "
                         "records both as declared: nothing verifies them")
    ka.add_argument("--selected-on", metavar="FINGERPRINT", help="the corpus fingerprint (from that corpus's "
                    "audit) on which the key was chosen; it must differ from the certified corpus's")
    ka.add_argument("--public-output-budget", type=int_in(1, 10**15), metavar="TOKENS",
                    help="the public-output budget: how many tokens of output you will publish under this key "
                         "before retiring it, recorded in the certificate (declared, not verified). The audit "
                         "certifies the false-positive rate on natural text, not against forgery: anyone who "
                         "collects the key's outputs can learn its states (the book's chapter 9.5 measured "
                         "forgeries from a few thousand tokens of one key's replies), so state the budget the "
                         "deployment's key rotation keeps")
    ka.add_argument("--check", metavar="CERT.json", help="instead of auditing, recompute this certificate's "
                    "counts and verdict with the key and the corpus (exit 0 when they agree, 1 when not)")
    ka.add_argument("--out", metavar="FILE", help="write the certificate here (it must not exist)")
    ka.add_argument("--json", action="store_true", help="print the certificate instead of the table")
    ka.set_defaults(func=_cmd_key_audit)
    key_cmd.set_defaults(func=_cmd_key_help, key_parser=key_cmd)


def _cmd_key_help(args: argparse.Namespace) -> int:
    args.key_parser.print_help(sys.stderr)
    return EXIT_USAGE


def _audit_corpus(args: argparse.Namespace, tokenizer: Any) -> tuple[str, str, list[list[int]], list[str]]:
    """The corpus a key is audited on: its name, how its texts became documents (in words), the token ids
    and each text's document. The caller's files: each .jsonl line, and each other file, is one document;
    the book's default corpus: each reply of the reference null is one, the windows of one Language
    Reference topic together are one."""
    if not args.corpus:
        if args.text_preparation is not None:
            raise UsageError("--text-preparation applies to --corpus files; the default corpus is token ids already")
        return _default_corpus(tokenizer)
    texts: list[str] = []
    left = args.max_bytes  # the limit holds for the corpus as a whole
    for path in args.corpus:
        content = read_input(path, f"corpus file {path}", left, too_large=" (the corpus exceeds --max-bytes)")
        left -= len(content.encode("utf-8"))
        texts += _jsonl_texts(path, content, args.text_field) if Path(path).suffix == ".jsonl" else [content]
    prepared = args.text_preparation or TextPreparation()  # as the detector will prepare them (the regime's default)
    ids = [tokenizer(prepared.apply(t), add_special_tokens=False)["input_ids"] for t in texts]
    name = f"{len(texts)} text(s) from {len(args.corpus)} file(s)"
    grouping = f"{_files_grouping(args.corpus, args.text_field)}; each text prepared as {prepared} before tokenizing"
    return name, grouping, ids, [f"text {i}" for i in range(len(texts))]


def _jsonl_texts(path: str, content: str, text_field: str) -> list[str]:
    """The texts of a .jsonl corpus file: each non-blank line's ``text_field``."""
    texts = []
    for number, line in enumerate(content.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}, line {number}: not JSON ({exc.msg})") from None
        text = row.get(text_field) if isinstance(row, dict) else None
        if not isinstance(text, str):
            raise UsageError(f"{path}, line {number}: no text field {text_field!r}")
        texts.append(text)
    return texts


#: The entry-point group where an installed package offers a default corpus for ``key audit`` (the book's lab
#: offers the reference null and the Python Language Reference); the command line never imports it by name.
DEFAULT_CORPUS_GROUP = "chainmark.key_audit_corpus"


def _default_corpus(tokenizer: Any) -> tuple[str, str, list[list[int]], list[str]]:
    """The corpus an installed package registers under :data:`DEFAULT_CORPUS_GROUP`; without one, a usage error."""
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=DEFAULT_CORPUS_GROUP), key=lambda ep: ep.name)
    if not found:
        raise UsageError("no default corpus is installed: give your own unwatermarked text with --corpus FILE ... "
                         "(the book's lab, cmlab, provides the default corpus)")
    return found[0].load()(tokenizer)


def _files_grouping(paths: list[str], text_field: str) -> str:
    """How ``--corpus`` files became documents, in words (what :func:`_audit_corpus` does with them)."""
    jsonl = sum(Path(p).suffix == ".jsonl" for p in paths)
    parts = []
    if jsonl:
        parts.append(f"each non-blank line of a .jsonl file is one document (its {text_field!r} field)")
    if jsonl < len(paths):
        parts.append("each other file is one document (its whole text)" if jsonl else "each file is one document")
    return "; ".join(parts) + "; no two texts share a document"


def _cmd_key_audit(args: argparse.Namespace) -> int:
    from .. import __version__
    from ..auditor.keyaudit import CertificationTarget, KeySelection, audit_key, format_audit, seal
    from ..config import ChainMarkConfig

    key = load_key(args.key_file)
    tokenizer = load_tokenizer(args.tokenizer, args.tokenizer_revision)
    topo = regime_topology(Regime(S=args.S, topology=args.topology))
    out = out_path(args.out, "certificate") if args.out else None
    if out is not None and (out.exists() or out.is_symlink()):
        raise UsageError(f"{out} exists; refusing to overwrite a certificate (choose another --out)")
    name, grouping, texts, documents = _audit_corpus(args, tokenizer)
    if args.check:
        return _check_key_audit(args.check, key, texts, documents, len(tokenizer))
    if args.plan:
        return _plan(args, ChainMarkConfig(key, S=args.S, topology=topo), texts, documents, len(tokenizer))
    try:
        cert = audit_key(ChainMarkConfig(key, S=args.S, topology=topo), texts,
                         CertificationTarget(test=args.test, alpha=args.alpha, promise=args.promise,
                                             public_output_budget=args.public_output_budget),
                         vocab_size=len(tokenizer),
                         documents=documents, grouping=grouping,
                         selection=KeySelection(args.keys_tried, args.selected_on))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    cert = {**cert, "tokenizer": tokenizer_label(args.tokenizer),
            "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer), "package_version": __version__}
    cert["corpus"] = {"name": name, **cert["corpus"]}
    cert = seal(cert)
    text = json.dumps(cert, indent=2, allow_nan=False)
    if out is not None:
        create_file(out, text + "\n")
        print(f"wrote the key-audit certificate to {out}", file=sys.stderr)
    print(text if args.json else format_audit(cert))
    return EXIT_OK if cert["verdict"] == "pass" else EXIT_DETECTED


def _plan(args: argparse.Namespace, config: Any, texts: list[list[int]], documents: list[str], vocab: int) -> int:
    """`chainmark key audit --plan`: the test level at which a fresh key certifies the promise on this corpus."""
    import dataclasses

    from ..auditor.keyplan import plan_certification

    if args.test != "exact" or args.out:
        raise UsageError("--plan plans the exact test, whose size is bounded for every text, and writes no "
                         "certificate: leave out --test and --out")
    try:
        plan = plan_certification(config, texts, args.alpha if args.promise is None else args.promise,
                                  probability=args.probability, documents=documents, vocab_size=vocab)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps(dataclasses.asdict(plan), allow_nan=False) if args.json else plan.describe())
    return EXIT_OK


def _check_key_audit(path: str, key: bytes, texts: list[list[int]], documents: list[str], vocab_size: int) -> int:
    """`chainmark key audit --check`: recompute a certificate's counts with the key and its corpus."""
    from ..auditor.keyaudit import recheck_certificate

    cert = read_certificate(path)
    problems = recheck_certificate(cert, key, texts, documents, vocab_size)
    for problem in problems:
        print(f"{path}: {problem}")
    if not problems:
        print(f"{path}: the counts and the verdict ({cert['verdict']}) recomputed from the key and the corpus "
              "agree with the certificate")
    return EXIT_DETECTED if problems else EXIT_OK

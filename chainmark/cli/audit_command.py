"""``chainmark audit``: score every document of a corpus under one key into one row each with Benjamini-Hochberg
q-values, in bounded memory and resumably, on this process or a Dask cluster (:mod:`chainmark.auditor.corpus`)."""
from __future__ import annotations

import argparse
import json
import sys

from ..limits import MAX_STATES
from .common import EXIT_OK, UsageError, add_text_preparation, finite_float, float_in, int_at_least, int_in, warn
from .inputs import detect_regime, load_key, load_regime, load_tokenizer, regime_topology

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``audit`` with its options."""
    au = subparsers.add_parser(
        "audit", help="audit a corpus: one row per document, q-values, on one process or Dask",
        description="Score every document of a corpus (a JSON Lines file, a Parquet file or folder, "
                    "or a folder of .txt files) under one key and write one row per document "
                    "(id, tokens, transitions scored, valid, phi, z, p-value, test, flagged, "
                    "repeated-pair share, Benjamini-Hochberg q-value) to Parquet or JSON Lines. "
                    "Memory stays flat as the corpus grows; an interrupted audit resumes where it "
                    "stopped (the part files beside --out); the work runs on a local Dask cluster "
                    "(--scheduler local, the default when Dask is installed), on a running "
                    "cluster by address, or on this process (--scheduler none).",
        epilog="examples:\n"
               "  chainmark audit posts.jsonl --text-field body --id-field post_id --key-file acme.key "
               "--regime regime.json --out audit.parquet\n"
               "  chainmark audit crawl/ --key-file acme.key --S 5 --scheduler tcp://10.0.0.5:8786 "
               "--out crawl.parquet\n"
               "the key reaches Dask workers in a worker plugin, never in a task name or argument; "
               "use a TLS-secured scheduler (tls://) when the cluster is not on this machine.\n"
               "exit codes: 0 done, 2 a usage error (bad option, unreadable corpus, a document that is "
               "not text, a missing field), 130 interrupted (run the same command again to resume).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    au.add_argument("source", metavar="CORPUS",
                    help="a .jsonl file, a .parquet file or folder, or a folder of .txt files")
    au.add_argument("--out", required=True, metavar="FILE", help="the results: FILE.parquet or FILE.jsonl (never "
                    "overwritten)")
    au.add_argument("--key-file", metavar="KEY", help="the key (default: $CHAINMARK_KEY_FILE, $CHAINMARK_KEY)")
    au.add_argument("--regime", metavar="FILE.json", help="published detection regime to apply (checked as detect "
                    "checks it)")
    au.add_argument("--S", type=int_in(2, MAX_STATES), help="number of states (default 5)")
    au.add_argument("--topology", choices=("clockwork", "soft_cycle"), help="transition topology (default clockwork)")
    au.add_argument("--alpha", type=float_in(0.0, 1.0, closed=False), help="significance level (default 0.01)")
    au.add_argument("--threshold", type=finite_float(), metavar="Z", help="operating z threshold (z-test)")
    au.add_argument("--test", choices=("z", "distinct", "exact"), help="the test (default: exact, as for detect: "
                    "its p-values are valid for every text over a random key, so its q-values are too; a z regime "
                    "off z_alpha gets no q-values)")
    au.add_argument("--min-tokens", type=int_at_least(0), metavar="N", help="documents shorter than N tokens are "
                    "not flagged (default: the regime's n_min)")
    au.add_argument("--tokenizer", metavar="NAME", help="Hub id or local folder (default: the regime's, else "
                    "$CHAINMARK_MODEL's, else the embedded model's)")
    au.add_argument("--tokenizer-revision", metavar="REV", help="Hub revision (commit hash) of --tokenizer")
    add_text_preparation(au)
    au.add_argument("--text-field", default="text", metavar="NAME", help="the field or column holding the text "
                    "(default: text)")
    au.add_argument("--id-field", metavar="NAME", help="the field or column holding the document id (default: the "
                    "line number, row position or file name)")
    au.add_argument("--fdr", type=float_in(0.0, 1.0, closed=False), default=0.01,
                    help="false discovery rate for the discoveries counted in the summary (default 0.01)")
    au.add_argument("--batch-docs", type=int_in(1, 10_000_000), default=1000, metavar="N",
                    help="documents per batch: one part file, one task (default 1000)")
    au.add_argument("--scheduler", metavar="WHERE", help="none (this process), local (a Dask cluster of --workers "
                    "processes on this machine), or a scheduler address such as tcp://host:8786 (default: local "
                    "when Dask is installed, else none)")
    au.add_argument("--workers", type=int_in(1, 1024), metavar="N", help="processes of a local cluster (default: "
                    "one per CPU)")
    au.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    au.add_argument("--segments", type=int_in(1, 1_000_000), nargs="?", const=999, metavar="B",
                    help="also search every document for watermarked spans (chainmark detect --segments), with B "
                         "re-drawn keys (default 999): columns segments (JSON [start, end, p] in tokens) and "
                         "segments_p_value")
    au.set_defaults(func=_cmd_audit)


def _cmd_audit(args: argparse.Namespace) -> int:
    from ..auditor.corpus_input import AuditError, CorpusReading
    from ..auditor.corpus import AuditExecution, run_audit
    from ..keys import key_fingerprint

    published = load_regime(args.regime) if args.regime else None
    regime = detect_regime(args, published)
    key = load_key(args.key_file)
    regime.check_key(key)
    regime_topology(regime)
    tokenizer = load_tokenizer(regime.tokenizer, regime.tokenizer_revision)
    regime.check_tokenizer(tokenizer)
    regime = regime.replace(threshold=None if regime.exact else regime.operating_threshold,
                            key_fingerprint=key_fingerprint(key))
    scheduler = args.scheduler
    if scheduler is None:
        try:
            import distributed  # noqa: F401
            scheduler = "local"
        except ImportError:
            scheduler = "none"
            warn("Dask is not installed (pip install 'chainmark[audit]'): auditing on this process")
    show = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if show:
            print(f"\rchainmark audit: {done}/{total} batches", end="" if done < total else "\n", file=sys.stderr,
                  flush=True)

    try:
        reading = CorpusReading(text_field=args.text_field, id_field=args.id_field, batch_docs=args.batch_docs)
        execution = AuditExecution(scheduler=None if scheduler == "none" else scheduler, workers=args.workers,
                                   progress=progress, tokenizer=tokenizer)
        summary = run_audit(args.source, args.out, key, regime, reading, fdr=args.fdr, segments=args.segments,
                            execution=execution)
    except AuditError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps({**{k: v for k, v in vars(summary).items() if k != "extra"}, **summary.extra},
                         allow_nan=False))
    else:
        print("\n".join(summary.lines()))
    return EXIT_OK

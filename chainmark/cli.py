"""The auditor's command line: ``chainmark detect | audit | calibrate | recalibrate | keygen | key audit | regime |
reference``.

ChainMark's promise is that a third party can audit text with nothing but
the key and the tokenizer. This module is that third party's tool:

- ``keygen`` writes a fresh 32-byte key (mode 0600) or derives a
  per-deployment key from a master key (HKDF), and prints only the key's
  fingerprint;
- ``calibrate`` turns a regulator's targets (n, rho, alpha) into S*;
- ``key audit`` scores unwatermarked text under one key with every test and
  writes a certificate (the key's false-positive rates; exit 1 when the key
  does not hold alpha for the deployed test);
- ``regime`` writes the public detection regime (S, topology, alpha,
  threshold, test, tokenizer, key fingerprint, the key's certificate, a
  digest of it all; never the key);
- ``detect`` scores text files with the exact test (the default), the
  paper's z-test or distinct pairs (``--test``) and reports phi, z, the
  p-value and a decision, reading any input in bounded memory;
- ``audit`` scores every document of a corpus (JSON Lines, Parquet, a folder
  of text files) into one row each with Benjamini-Hochberg q-values, in
  bounded memory, resumably, on this process or a Dask cluster
  (:mod:`chainmark.audit`);
- ``doctor`` checks a laptop before a workshop (:mod:`chainmark.doctor`);
- ``recalibrate`` sets the operating threshold from the z-scores of
  unwatermarked text of the deployment's own domain;
- ``reference`` runs, inspects (``status``) and re-checks (``verify``) the
  book's committed reference run (:mod:`chainmark.reference`); ``verify``
  exits 1 when a regenerated batch differs from the stored one.

Exit codes: 0 ok, 1 a watermark was detected and ``--fail-on-detect`` was
given, 2 a usage error (bad option, missing or unreadable key or input
file, empty input, tokenizer that cannot be loaded), 3 an internal error
(an unexpected exception: a bug, reported as one line on stderr, never as
a traceback, so that it cannot be mistaken for code 1), 130 interrupted.
Only problems the commands recognise as the caller's are code 2; any other
exception is code 3. Run as a program, the command exits with 130 on
Ctrl-C wherever it lands (even while libraries are being imported).

Inputs are bounded (:mod:`chainmark.limits`): S at most 4096, key files at
most 4 KiB and at least 16 bytes of raw key (hexadecimal text is refused),
regime files 1 MiB, null files 4 MiB, texts 1 GiB unless ``--max-bytes`` says
otherwise. Texts are tokenized and scored in pieces (:mod:`chainmark.stream`),
so their size limit is a safety limit, not a memory limit. Regime files are
checked field by field.

The key is read from a file (``--key-file``) or the environment
(``CHAINMARK_KEY_FILE``, ``CHAINMARK_KEY`` as hex) and is never printed:
output, JSON records and error messages carry its fingerprint only.

Longer than 600 lines because it is one argparse program: the commands share
the input checks, the exit-code discipline and the output formats written
here, and a reader follows one command from its options to its output in one
file. The logic each command runs lives in the core modules it calls.
"""
from __future__ import annotations

import argparse
import errno
import json
import math
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence, TextIO

from .limits import DEFAULT_MAX_CORPUS_BYTES, DEFAULT_MAX_INPUT_BYTES, DEFAULT_MAX_TEXT_BYTES, MAX_REGIME_BYTES, MAX_STATES
from .regime import (REGIME_FORMAT, Regime, RegimeError, parse_regime_text, published_regime_problems,  # noqa: F401
                     regime_document, regime_problems,
                     tokenizer_fingerprint)

EXIT_OK = 0
EXIT_DETECTED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A problem with how the command was called or with its inputs (exit code 2)."""


# ---------------------------------------------------------------------------
# small helpers (importable: the chapter and the tests use them)
# ---------------------------------------------------------------------------
def read_null_z(lines: Iterable[str], source: str = "null file") -> list[float]:
    """z-scores from JSON lines: one object per line with a numeric ``"z"`` field.

    Blank lines are skipped; anything else is an error naming the line. The
    output of ``chainmark detect --json`` has exactly this form, so detecting
    on unwatermarked domain text produces a null file directly.
    """
    values: list[float] = []
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{source}, line {number}: not JSON ({exc.msg})") from None
        except RecursionError:
            raise UsageError(f"{source}, line {number}: JSON nested too deeply to be a detector's line") from None
        if not isinstance(obj, dict) or "z" not in obj:
            raise UsageError(f'{source}, line {number}: expected an object with a "z" field')
        z = obj["z"]
        if isinstance(z, int) and not isinstance(z, bool) and abs(z) > 1e300:  # float(z) would overflow
            raise UsageError(f'{source}, line {number}: "z" must be a finite number, got an integer of '
                             f"{len(str(abs(z)))} digits")
        if isinstance(z, bool) or not isinstance(z, (int, float)) or not math.isfinite(z):
            raise UsageError(f'{source}, line {number}: "z" must be a finite number, got {z!r}')
        values.append(float(z))
    if len(values) < 2:
        raise UsageError(f"{source}: needs at least 2 z-scores, found {len(values)}")
    return values


# ---------------------------------------------------------------------------
# argument types: bad values are usage errors with the allowed range
# ---------------------------------------------------------------------------
#: The largest --max-bytes: a safety limit on reading, far above any text a machine holds (2**62 bytes).
MAX_INPUT_BYTES_LIMIT = 2**62


def _recalibration(text: str) -> dict[str, Any]:
    """``METHOD:N`` of ``regime --recalibrated``: the recipe and the size of the null corpus it was fitted on."""
    method, _, n = text.partition(":")
    if method not in ("sd", "quantile") or not n.isdigit() or int(n) < 2:
        raise argparse.ArgumentTypeError(f"must be METHOD:N with METHOD sd or quantile and N >= 2 null texts, "
                                         f"got {text!r}")
    return {"method": method, "n_null": int(n)}


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value
    return parse


def _int_in(low: int, high: int):
    """An integer in [low, high] (the upper bound is checked before anything of that size exists)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low} and <= {high}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low} and <= {high}, got {value}")
        return value
    return parse


def _float_in(low: float, high: float, closed: bool | str):
    """A float in an interval: closed=True [low, high], False (low, high), "right" (low, high]."""
    if closed not in (True, False, "right"):
        raise ValueError(f"closed must be True, False or 'right', got {closed!r}")
    brackets = {True: "[{}, {}]", False: "({}, {})", "right": "({}, {}]"}[closed]

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        inside = {True: low <= value <= high, False: low < value < high,
                  "right": low < value <= high}[closed]
        if not inside:
            raise argparse.ArgumentTypeError(
                f"must lie in {brackets.format(low, high)}, got {text!r}")
        return value
    return parse


def _finite_float():
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        return value
    return parse


# ---------------------------------------------------------------------------
# the parser
# ---------------------------------------------------------------------------
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
  chainmark reference status

exit codes: 0 ok; 1 watermark detected (only with detect --fail-on-detect), or
a check failed (doctor, key audit);
2 usage error (bad option, missing/unreadable key or input, empty input,
tokenizer that cannot be loaded); 3 internal error (an unexpected failure,
reported in one line: please report it); 130 interrupted.
The key comes from --key-file, else $CHAINMARK_KEY_FILE, else $CHAINMARK_KEY
(hex). It is never printed; only its fingerprint is."""

_DETECT_EPILOG = """\
examples:
  chainmark detect --key-file acme.key essay.txt report.txt
  chainmark detect --key-file acme.key --S 3 --topology soft_cycle --alpha 0.001 *.txt
  chainmark detect --regime regime.json --key-file acme.key --json texts/*.txt
  echo "some text" | chainmark detect --key-file acme.key -
  chainmark detect --key-file acme.key --test exact forum_posts/*.txt

The tests (--test): exact (the default), a binomial test on the transitions
that reach a token for the first time (a spanning forest of the text's
tokens); its size is at most alpha for every text, repetitive ones included,
over a random key. A deployed key is one key: its false-positive rate on a
corpus varies from key to key, and `chainmark key audit` measures it. The
exact test decides by its p-value and has no z threshold. z, the paper's
z-test on every transition with a normal tail (the default of a regime that
names no test, and of --threshold given alone): an approximation, whose exact
size lies above alpha even on text without repeats (about twice alpha at
n = 30, S = 5) and far above it on text that repeats its token pairs.
distinct, the same z-test on each distinct token pair once: close to alpha
on text without repeated tokens, not valid for every text. The table shows
how many transitions each test scored. For the z and distinct tests every
text's own null over random keys is computed from its pair multiplicities;
when it puts the text's false-positive rate at the applied threshold above
twice alpha, a warning on stderr says so (in --json: text_null_fpr, the
variance ratio against the nominal null, text_null_variance_ratio, and z
standardised by the text's own null variance, z_text_null, a diagnostic;
null for a text of more than 2,000,000 distinct token pairs, whose counts are
not kept so that memory stays flat).

Texts are read and scored in pieces of a quarter megabyte, cut where the
tokenizer cuts anyway (each cut checked): the result is the one scoring the
whole text would give, and memory stays flat whatever the input's size.

Every input is read before anything is scored: if one cannot be read, is not
text in the given encoding, is empty or larger than --max-bytes, nothing is
scored and the exit code is 2. Values from --regime (checked field by field)
are used unless the option is given explicitly.
--json prints one JSON object per input (fields file, n_tokens,
n_transitions, n_valid, phi, z, p_value, threshold, is_watermarked, decision,
S, k, topology, alpha, distinct_pairs, test, tokenizer, key_fingerprint,
repeated_pair_share, text_null_fpr, text_null_variance_ratio, z_text_null;
the last three are null for the exact test); such
a file of unwatermarked texts is a valid --null file for `chainmark recalibrate`."""

_RECAL_EPILOG = """\
the --null file (JSON lines): one JSON object per line with a numeric "z"
field, the detector's z-score on one unwatermarked text of the domain; other
fields are ignored and blank lines skipped. Example lines:
  {"file": "doc001.txt", "z": -0.41}
  {"z": 1.27}
`chainmark detect --json` writes exactly this format.

methods: sd       z* = mean + z_alpha * sd of the null z-scores
         quantile z* = the empirical (1 - alpha) quantile (robust to heavy
                   tails; needs well over 1/alpha null texts)
examples:
  chainmark detect --key-file acme.key --json corpus/*.txt > null.jsonl
  chainmark recalibrate --null null.jsonl --alpha 0.01
  chainmark recalibrate --null null.jsonl --alpha 0.01 --method quantile --json"""


def build_parser() -> argparse.ArgumentParser:
    """The ``chainmark`` argument parser with its subcommands."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="chainmark",
        description="Audit text for the ChainMark watermark with a key and a tokenizer.",
        epilog=_EPILOG, formatter_class=fmt)
    from . import __version__

    parser.add_argument("--version", action="version", version=f"chainmark {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    # detect ---------------------------------------------------------------
    d = sub.add_parser("detect", help="score text files for the watermark",
                       description="Score each input for the ChainMark watermark: tokens scored, "
                                   "phi, z, p-value and the decision.",
                       epilog=_DETECT_EPILOG, formatter_class=fmt)
    d.add_argument("inputs", nargs="+", metavar="FILE", help="text files to audit; '-' reads standard input")
    d.add_argument("--key-file", metavar="KEY", help="file holding the raw key bytes "
                   "(default: $CHAINMARK_KEY_FILE, then $CHAINMARK_KEY as hex)")
    d.add_argument("--tokenizer", metavar="NAME", help="Hub id or local folder of the tokenizer "
                   "(default: the regime's, else $CHAINMARK_MODEL's, else the book's embedded SmolLM2-135M-Instruct)")
    d.add_argument("--tokenizer-revision", metavar="REV", help="Hub revision (commit hash) of --tokenizer "
                   "(default: the regime's); pins a Hub id to the files the regime was published with")
    d.add_argument("--regime", metavar="FILE.json", help="published detection regime to apply "
                   "(its key fingerprint must match the key)")
    d.add_argument("--S", type=_int_in(2, MAX_STATES), help=f"number of states (2 to {MAX_STATES}; default 5)")
    d.add_argument("--topology", choices=("clockwork", "soft_cycle"), help="transition topology (default clockwork)")
    d.add_argument("--alpha", type=_float_in(0.0, 1.0, closed=False),
                   help="significance level in (0, 1) (default 0.01)")
    d.add_argument("--threshold", type=_finite_float(), metavar="Z",
                   help="operating z threshold (e.g. from recalibrate); default: z_alpha")
    d.add_argument("--distinct-pairs", action="store_true", default=None,
                   help="score each distinct token pair once (repetitive text); the same as --test distinct")
    d.add_argument("--test", choices=("z", "distinct", "exact"),
                   help="exact (the default): a binomial test on a spanning forest of the text's tokens, whose "
                        "size is at most alpha for every text over a random key (a deployed key's rate: chainmark "
                        "key audit; decides by its p-value, no z threshold); z: every transition, the paper's "
                        "z-test, a normal approximation (the default with --threshold or a regime that names no "
                        "test); distinct: each distinct pair once, valid on text without repeated tokens")
    d.add_argument("--certificate", metavar="FILE.json", help="check this key-audit certificate (chainmark key "
                   "audit) against the key, tokenizer, S and topology first (exit 2 when it does not fit)")
    d.add_argument("--min-tokens", type=_int_at_least(0), metavar="N",
                   help="report texts shorter than N tokens as 'too short' instead of deciding "
                        "(default: the regime's n_min, else 0)")
    d.add_argument("--encoding", default="utf-8", help="text encoding of the inputs, standard input "
                   "included (default utf-8)")
    d.add_argument("--max-bytes", type=_int_in(1, MAX_INPUT_BYTES_LIMIT), default=DEFAULT_MAX_TEXT_BYTES, metavar="N",
                   help=f"refuse an input larger than N bytes (default {DEFAULT_MAX_TEXT_BYTES}, 1 GiB: a safety "
                        "limit; texts are scored in pieces, so memory stays flat whatever their size)")
    d.add_argument("--json", action="store_true", help="one JSON object per input instead of a table")
    d.add_argument("--fail-on-detect", action="store_true",
                   help="exit with code 1 if any input is detected as watermarked")
    d.set_defaults(func=_cmd_detect)

    # calibrate ------------------------------------------------------------
    c = sub.add_parser("calibrate", help="S* from the targets (n, rho, alpha)",
                       description="The smallest state count S* that detects watermarked text of n "
                                   "tokens with budget rho at level alpha (midpoint rule), and the "
                                   "z-score it predicts.",
                       epilog="examples:\n  chainmark calibrate --n 200 --rho 0.5 --alpha 0.01\n"
                              "  chainmark calibrate --n 50 --rho 0.25 --alpha 0.001 --k 2 --json",
                       formatter_class=fmt)
    c.add_argument("--n", type=_int_at_least(2), required=True, help="minimum text length in tokens (>= 2)")
    c.add_argument("--rho", type=_float_in(0.0, 1.0, closed="right"), required=True,
                   help="watermark budget: share of gated positions, in (0, 1] (with none gated "
                        "there is no watermark to detect)")
    c.add_argument("--alpha", type=_float_in(0.0, 1.0, closed=False), required=True,
                   help="target false-positive rate in (0, 1)")
    c.add_argument("--k", type=_int_in(1, MAX_STATES - 1), default=1,
                   help="successors per state (default 1: clockwork)")
    c.add_argument("--json", action="store_true", help="print a JSON object")
    c.set_defaults(func=_cmd_calibrate)

    # recalibrate ----------------------------------------------------------
    r = sub.add_parser("recalibrate", help="operating threshold from a null corpus",
                       description="The operating z threshold z* from the z-scores of unwatermarked "
                                   "texts of the deployment's domain.",
                       epilog=_RECAL_EPILOG, formatter_class=fmt)
    r.add_argument("--null", required=True, metavar="FILE.jsonl", help="null z-scores as JSON lines ('-': stdin)")
    r.add_argument("--alpha", type=_float_in(0.0, 1.0, closed=False), required=True,
                   help="target false-positive rate in (0, 1)")
    r.add_argument("--method", choices=("sd", "quantile"), default="sd", help="recalibration recipe (default sd)")
    r.add_argument("--max-bytes", type=_int_in(1, MAX_INPUT_BYTES_LIMIT), default=DEFAULT_MAX_INPUT_BYTES, metavar="N",
                   help=f"refuse a null file larger than N bytes (default {DEFAULT_MAX_INPUT_BYTES})")
    r.add_argument("--json", action="store_true", help="print a JSON object")
    r.set_defaults(func=_cmd_recalibrate)

    # keygen ---------------------------------------------------------------
    k = sub.add_parser("keygen", help="write a fresh (or derived) key file, mode 0600",
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

    # regime ---------------------------------------------------------------
    g = sub.add_parser("regime", help="write the public detection regime (JSON, no key)",
                       description="Write the detection regime a deployer publishes: S, topology, "
                                   "alpha, threshold, tokenizer and the key's fingerprint; never the key.",
                       epilog="examples:\n  chainmark regime --key-file acme.key --S 5 --alpha 0.01 --out regime.json\n"
                              "  chainmark regime --key-file acme.key --S 5 --alpha 0.01 --threshold 2.71 "
                              "--n-min 200 --rho 0.5",
                       formatter_class=fmt)
    g.add_argument("--key-file", metavar="KEY", help="the deployment key (default: $CHAINMARK_KEY_FILE, $CHAINMARK_KEY)")
    g.add_argument("--S", type=_int_in(2, MAX_STATES), required=True, help=f"number of states (2 to {MAX_STATES})")
    g.add_argument("--topology", choices=("clockwork", "soft_cycle"), default="clockwork")
    g.add_argument("--alpha", type=_float_in(0.0, 1.0, closed=False), required=True)
    g.add_argument("--threshold", type=_finite_float(), metavar="Z",
                   help="operating z threshold (default: z_alpha)")
    g.add_argument("--tokenizer", metavar="NAME", help="tokenizer name to publish (default: the embedded model's); "
                   "it is loaded to record its vocabulary fingerprint")
    g.add_argument("--tokenizer-revision", metavar="REV", help="Hub revision (commit hash) of --tokenizer to "
                   "load and publish, so auditors load the same files")
    g.add_argument("--n-min", type=_int_at_least(2), metavar="N", help="minimum text length in tokens")
    g.add_argument("--rho", type=_float_in(0.0, 1.0, closed=True), help="watermark budget")
    g.add_argument("--gate", choices=("all", "high_entropy", "low_entropy", "top2_gap"))
    g.add_argument("--distinct-pairs", action="store_true")
    g.add_argument("--test", choices=("z", "distinct", "exact"), help="the test auditors apply (see detect --help; "
                   "default: exact, or the z-test when --threshold or --distinct-pairs is given): exact, size at "
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

    # audit a corpus --------------------------------------------------------
    au = sub.add_parser("audit", help="audit a corpus: one row per document, q-values, on one process or Dask",
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
                        formatter_class=fmt)
    au.add_argument("source", metavar="CORPUS", help="a .jsonl file, a .parquet file or folder, or a folder of .txt files")
    au.add_argument("--out", required=True, metavar="FILE", help="the results: FILE.parquet or FILE.jsonl (never "
                    "overwritten)")
    au.add_argument("--key-file", metavar="KEY", help="the key (default: $CHAINMARK_KEY_FILE, $CHAINMARK_KEY)")
    au.add_argument("--regime", metavar="FILE.json", help="published detection regime to apply (checked as detect "
                    "checks it)")
    au.add_argument("--S", type=_int_in(2, MAX_STATES), help="number of states (default 5)")
    au.add_argument("--topology", choices=("clockwork", "soft_cycle"), help="transition topology (default clockwork)")
    au.add_argument("--alpha", type=_float_in(0.0, 1.0, closed=False), help="significance level (default 0.01)")
    au.add_argument("--threshold", type=_finite_float(), metavar="Z", help="operating z threshold (z-test)")
    au.add_argument("--distinct-pairs", action="store_true", default=None, help="the same as --test distinct")
    au.add_argument("--test", choices=("z", "distinct", "exact"), help="the test (default: exact, as for detect: "
                    "its p-values are valid for every text over a random key, so its q-values are too; a z regime "
                    "off z_alpha gets no q-values)")
    au.add_argument("--min-tokens", type=_int_at_least(0), metavar="N", help="documents shorter than N tokens are "
                    "not flagged (default: the regime's n_min)")
    au.add_argument("--tokenizer", metavar="NAME", help="Hub id or local folder (default: the regime's, else "
                    "$CHAINMARK_MODEL's, else the embedded model's)")
    au.add_argument("--tokenizer-revision", metavar="REV", help="Hub revision (commit hash) of --tokenizer")
    au.add_argument("--text-field", default="text", metavar="NAME", help="the field or column holding the text "
                    "(default: text)")
    au.add_argument("--id-field", metavar="NAME", help="the field or column holding the document id (default: the "
                    "line number, row position or file name)")
    au.add_argument("--fdr", type=_float_in(0.0, 1.0, closed=False), default=0.01,
                    help="false discovery rate for the discoveries counted in the summary (default 0.01)")
    au.add_argument("--batch-docs", type=_int_in(1, 10_000_000), default=1000, metavar="N",
                    help="documents per batch: one part file, one task (default 1000)")
    au.add_argument("--scheduler", metavar="WHERE", help="none (this process), local (a Dask cluster of --workers "
                    "processes on this machine), or a scheduler address such as tcp://host:8786 (default: local "
                    "when Dask is installed, else none)")
    au.add_argument("--workers", type=_int_in(1, 1024), metavar="N", help="processes of a local cluster (default: "
                    "one per CPU)")
    au.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    au.set_defaults(func=_cmd_audit)

    # doctor ----------------------------------------------------------------
    dr = sub.add_parser("doctor", help="check this machine before a workshop",
                        description="Check this machine for the book: Python and package versions, a notebook "
                                    "front end, free disk and memory, the embedded model (it loads, writes a few "
                                    "dozen watermarked tokens and detects them), and how long the chapters "
                                    "should take here. Run it the week before a workshop.",
                        epilog="exit codes: 0 ready, 1 something to fix (each failed line says what), 2 a usage error",
                        formatter_class=fmt)
    dr.add_argument("--no-generation", action="store_true", help="skip loading the model and the probe")
    dr.add_argument("--json", action="store_true", help="one JSON object: every check and the verdict")
    dr.set_defaults(func=_cmd_doctor)

    # key audit ------------------------------------------------------------
    key_cmd = sub.add_parser("key", help="key tools: audit a key's false-positive rate before deployment",
                             description="Key tools. `chainmark key audit` scores unwatermarked text under one "
                                         "key with every test and writes a certificate.", formatter_class=fmt)
    ksub = key_cmd.add_subparsers(dest="key_command", metavar="ACTION")
    ka = ksub.add_parser("audit", help="the key's false-positive rate on a corpus, per test; a certificate",
                         description="Audit a key before deploying it: score a corpus of text that was not "
                                     "written with the key (by default the book's reference null, 1,200 texts "
                                     "of the embedded model, and windows of the Python Language Reference's "
                                     "prose) under this key with the z-test, distinct pairs and the exact test, "
                                     "and report each test's false-positive rate over documents with its 95% "
                                     "interval and one-sided 95% upper bound, the threshold that would hold "
                                     "alpha on this corpus, and a verdict for the test you will deploy: PASS "
                                     "when the upper bound is at or below alpha (which needs at least 299 "
                                     "documents at alpha = 1%), FAIL when the lower bound lies above it, "
                                     "INCONCLUSIVE otherwise. The exact test's size is at most alpha for every "
                                     "text over a random key; this audit measures the one key you deploy. "
                                     "The certificate (JSON: key fingerprint, tokenizer fingerprint, S, "
                                     "topology, corpus fingerprint and size, rates, thresholds, how many keys "
                                     "were tried, package version, a digest; never the key) goes into the regime "
                                     "with `chainmark regime --certificate`, where `chainmark detect --regime` "
                                     "checks it.",
                         epilog="exit codes: 0 the key is certified for --test on the corpus (PASS), 1 it is "
                                "not (the certificate is written either way), 2 a usage error.\n"
                                "examples:\n  chainmark key audit --key-file acme.key --S 5 --out acme.audit.json\n"
                                "  chainmark key audit --key-file acme.key --S 5 --corpus forum/*.txt --test z\n"
                                "  chainmark key audit --key-file acme.key --S 5 --check acme.audit.json",
                         formatter_class=fmt)
    ka.add_argument("--key-file", metavar="KEY", help="the key (default: $CHAINMARK_KEY_FILE, $CHAINMARK_KEY)")
    ka.add_argument("--tokenizer", metavar="NAME", help="Hub id or local folder (default: the embedded model's)")
    ka.add_argument("--tokenizer-revision", metavar="REV", help="Hub revision (commit hash) of --tokenizer")
    ka.add_argument("--S", type=_int_in(2, MAX_STATES), required=True, help=f"number of states (2 to {MAX_STATES})")
    ka.add_argument("--topology", choices=("clockwork", "soft_cycle"), default="clockwork")
    ka.add_argument("--alpha", type=_float_in(0.0, 1.0, closed=False), default=0.01,
                    help="significance level (default 0.01)")
    ka.add_argument("--test", choices=("z", "distinct", "exact"), default="exact",
                    help="the test the deployment will use: the verdict is for it (default exact)")
    ka.add_argument("--corpus", nargs="+", metavar="FILE", help="your own unwatermarked text instead of the "
                    "default corpus: .txt files (one text each) or .jsonl files (one text per line, in --text-field)")
    ka.add_argument("--text-field", default="text", help="the text's field in .jsonl corpus files (default text)")
    ka.add_argument("--max-bytes", type=_int_in(1, MAX_INPUT_BYTES_LIMIT), default=DEFAULT_MAX_CORPUS_BYTES, metavar="N",
                    help="refuse corpus files larger than N bytes in all")
    ka.add_argument("--keys-tried", type=_int_in(1, 10**9), default=1, metavar="N",
                    help="how many keys were tried before choosing this one (default 1); with more than one, "
                         "--selected-on must name the other corpus they were compared on")
    ka.add_argument("--selected-on", metavar="FINGERPRINT", help="the corpus fingerprint (from that corpus's "
                    "audit) on which the key was chosen; it must differ from the certified corpus's")
    ka.add_argument("--check", metavar="CERT.json", help="instead of auditing, recompute this certificate's "
                    "counts and verdict with the key and the corpus (exit 0 when they agree, 1 when not)")
    ka.add_argument("--out", metavar="FILE", help="write the certificate here (it must not exist)")
    ka.add_argument("--json", action="store_true", help="print the certificate instead of the table")
    ka.set_defaults(func=_cmd_key_audit)
    key_cmd.set_defaults(func=_cmd_key_help, key_parser=key_cmd)

    # reference ------------------------------------------------------------
    ref = sub.add_parser("reference", help="run, inspect or verify the committed reference run",
                         description="The reference run: the paper's protocol at full size (head-to-head, "
                                     "null corpus, calibration grid, k-regular, explorer grid) on the "
                                     "settings' model ($CHAINMARK_MODEL, default the embedded SmolLM2). "
                                     "Its key is derived from a published label, so anyone can check it.",
                         epilog="examples:\n  chainmark reference status\n"
                                "  nohup chainmark reference run > reference.log 2>&1 &   # hours on a CPU; resumes\n"
                                "  chainmark reference run --experiments head_to_head null\n"
                                "  chainmark reference verify --samples 3",
                         formatter_class=fmt)
    rsub = ref.add_subparsers(dest="reference_command", metavar="ACTION")
    from .reference import EXPERIMENTS

    rr = rsub.add_parser("run", help="generate what is missing (resumable)",
                         description="Generate every missing batch, in order, writing each batch whole as it "
                                     "finishes; an interrupted run resumes where it stopped.")
    rr.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS), metavar="NAME",
                    help=f"which experiments, run in the order given (default all: {', '.join(EXPERIMENTS)})")
    rr.add_argument("--fresh", nargs="+", choices=EXPERIMENTS, default=[], metavar="NAME",
                    help="delete these experiments' stored batches first and generate them again")
    rr.add_argument("--stop-after", type=_int_at_least(1), metavar="N", help="stop after N new batches")
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
    rv.add_argument("--samples", type=_int_at_least(1), default=3, metavar="N", help="batches to check (default 3)")
    rv.add_argument("--seed", help="seed of the draw (default: the current git commit)")
    rv.add_argument("--dir", metavar="FOLDER", help="reference folder (default: the model's)")
    rv.set_defaults(func=_cmd_reference_verify)
    ref.set_defaults(func=_cmd_reference_help, reference_parser=ref)
    return parser


def _cmd_audit(args: argparse.Namespace) -> int:
    from .audit import AuditError, run_audit
    from .keys import key_fingerprint

    published = _load_regime(args.regime) if args.regime else None
    regime = _detect_regime(args, published)
    key = _load_key(args.key_file)
    regime.check_key(key)
    _topology(regime)
    tokenizer = _load_tokenizer(regime.tokenizer, regime.tokenizer_revision)
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
            _warn("Dask is not installed (pip install 'chainmark[audit]'): auditing on this process")
    show = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if show:
            print(f"\rchainmark audit: {done}/{total} batches", end="" if done < total else "\n", file=sys.stderr,
                  flush=True)

    try:
        summary = run_audit(args.source, args.out, key, regime, text_field=args.text_field, id_field=args.id_field,
                            batch_docs=args.batch_docs, fdr=args.fdr,
                            scheduler=None if scheduler == "none" else scheduler, workers=args.workers,
                            progress=progress, tokenizer=tokenizer)
    except AuditError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps({**{k: v for k, v in vars(summary).items() if k != "extra"}, **summary.extra},
                         allow_nan=False))
    else:
        print("\n".join(summary.lines()))
    return EXIT_OK


def _cmd_doctor(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from .doctor import report, run_checks

    checks = run_checks(generation=not args.no_generation)
    ready = not any(c.status == "fail" for c in checks)
    if args.json:
        print(json.dumps({"ready": ready, "checks": [asdict(c) for c in checks]}))
    else:
        print(report(checks))
    return EXIT_OK if ready else EXIT_DETECTED


def _cmd_key_help(args: argparse.Namespace) -> int:
    args.key_parser.print_help(sys.stderr)
    return EXIT_USAGE


def _audit_corpus(args: argparse.Namespace, tokenizer: Any) -> tuple[str, list[list[int]], list[str]]:
    """The corpus a key is audited on, as token ids with each text's document: the caller's files (each
    .txt file, and each line of a .jsonl file, a document), or the book's default corpus (each reply of the
    reference null a document; windows of one Language Reference topic share the topic's)."""
    if args.corpus:
        texts: list[str] = []
        left = args.max_bytes  # the limit holds for the corpus as a whole
        for path in args.corpus:
            content = _read_input(path, f"corpus file {path}", left, too_large=" (the corpus exceeds --max-bytes)")
            left -= len(content.encode("utf-8"))
            if Path(path).suffix == ".jsonl":
                for number, line in enumerate(content.split("\n"), 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise UsageError(f"{path}, line {number}: not JSON ({exc.msg})") from None
                    text = row.get(args.text_field) if isinstance(row, dict) else None
                    if not isinstance(text, str):
                        raise UsageError(f"{path}, line {number}: no text field {args.text_field!r}")
                    texts.append(text)
            else:
                texts.append(content)
        name = f"{len(texts)} text(s) from {len(args.corpus)} file(s)"
        return name, [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], \
            [f"text {i}" for i in range(len(texts))]
    from . import reference
    from .corpora import CORPUS_NAME, python_reference_documents, token_windows

    model_texts = ([r["output"] for r in reference.load_texts("null")]
                   + [r["output"] for r in reference.load_texts("head_to_head") if r["method"] == "none"])
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in model_texts]
    human, topics = [], []
    for doc in python_reference_documents():
        windows = token_windows([tokenizer(doc.text, add_special_tokens=False)["input_ids"]], 200)
        human += [w.tolist() for w in windows]
        topics += [f"topic {doc.name}"] * len(windows)
    name = (f"the reference null ({len(ids)} texts of the embedded model) and {len(human)} windows of "
            f"200 tokens of {CORPUS_NAME}")
    return name, ids + human, [f"reply {i}" for i in range(len(ids))] + topics


def _cmd_key_audit(args: argparse.Namespace) -> int:
    from . import __version__
    from .keyaudit import audit_key, format_audit, seal

    key = _load_key(args.key_file)
    tokenizer = _load_tokenizer(args.tokenizer, args.tokenizer_revision)
    topo = _topology(Regime(S=args.S, topology=args.topology))
    out = _out_path(args.out, "certificate") if args.out else None
    if out is not None and (out.exists() or out.is_symlink()):
        raise UsageError(f"{out} exists; refusing to overwrite a certificate (choose another --out)")
    name, texts, documents = _audit_corpus(args, tokenizer)
    if args.check:
        return _check_key_audit(args.check, key, texts, documents, len(tokenizer))
    try:
        cert = audit_key(key, texts, S=args.S, topology=topo, alpha=args.alpha, deploy_test=args.test,
                         vocab_size=len(tokenizer), documents=documents, keys_tried=args.keys_tried,
                         selected_on=args.selected_on)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    cert = {**cert, "tokenizer": _tokenizer_label(args.tokenizer), "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
            "package_version": __version__}
    cert["corpus"] = {"name": name, **cert["corpus"]}
    cert = seal(cert)
    text = json.dumps(cert, indent=2, allow_nan=False)
    if out is not None:
        _create_file(out, text + "\n")
        print(f"wrote the key-audit certificate to {out}", file=sys.stderr)
    print(text if args.json else format_audit(cert))
    return EXIT_OK if cert["verdict"] == "pass" else EXIT_DETECTED


def _check_key_audit(path: str, key: bytes, texts: list[list[int]], documents: list[str], vocab_size: int) -> int:
    """`chainmark key audit --check`: recompute a certificate's counts with the key and its corpus."""
    from .keyaudit import recheck_certificate

    cert = _read_certificate(path)
    problems = recheck_certificate(cert, key, texts, documents, vocab_size)
    for problem in problems:
        print(f"{path}: {problem}")
    if not problems:
        print(f"{path}: the counts and the verdict ({cert['verdict']}) recomputed from the key and the corpus "
              "agree with the certificate")
    return EXIT_DETECTED if problems else EXIT_OK


def _read_certificate(path: str) -> dict[str, Any]:
    from .keyaudit import read_certificate

    try:
        return read_certificate(path)
    except OSError as exc:
        raise UsageError(f"cannot read the certificate {path} ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _cmd_reference_help(args: argparse.Namespace) -> int:
    args.reference_parser.print_help(sys.stderr)
    return EXIT_USAGE


def _cmd_reference_run(args: argparse.Namespace) -> int:
    from . import reference

    try:
        done = reference.run(experiments=args.experiments, root=args.dir, fresh=args.fresh,
                             protocol=reference.PROTOCOL, stop_after=args.stop_after)
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
    from . import reference

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
    from . import reference

    root = _reference_folder(args.dir)
    try:
        checks = reference.verify(args.samples, root=root, seed=args.seed, protocol=reference.PROTOCOL)
    except FileNotFoundError as exc:  # no reference run, or no stored batch, in the folder
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``chainmark`` console script; returns the exit code.

    Called without ``argv`` (as the program), it first makes Ctrl-C end the
    process with code 130, before any heavy import; called with ``argv``
    (tests, the audit chapter) it leaves signal handling to the caller.
    """
    previous = _exit_130_on_interrupt() if argv is None else None
    try:
        return _run(argv)
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
    """Ctrl-C: one line on stderr, then exit 130 at once.

    Exiting here, rather than raising KeyboardInterrupt, gives the same code
    wherever the signal lands: inside an import, or inside a library that
    would turn the exception into an error of its own (exit 3).
    """
    name = {signal.SIGINT: "interrupted"}.get(signum) or f"stopped by {signal.Signals(signum).name}"
    try:
        sys.stdout.flush()
        sys.stderr.write(f"chainmark: {name}; nothing more was written\n")
        sys.stderr.flush()
    except Exception:  # a stream in the middle of a write; the exit code still says it
        pass
    os._exit(EXIT_INTERRUPTED if signum == signal.SIGINT else 128 + int(signum))


def _run(argv: Sequence[str] | None) -> int:
    """Parse the arguments and run the command; problems of the caller's are code 2, anything else 3."""
    parser = build_parser()
    try:
        args = parser.parse_args(_negative_values_attached(sys.argv[1:] if argv is None else list(argv)))
    except SystemExit as exc:  # --help, --version (0) and argparse's usage errors (2)
        return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else EXIT_USAGE
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if sys.stdout is None:  # started with standard output closed (`>&-`): results would be lost
        return _fail("standard output is closed: the results would be lost (redirect it to a file or a pipe)")
    try:
        code = args.func(args)
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not after the exit code is decided
        return code
    except (UsageError, RegimeError) as exc:  # a regime that does not fit the key, tokenizer or options
        return _fail(str(exc))
    except BrokenPipeError:
        return _output_closed()
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            return _internal(exc)
        _discard_stdout()
        return _fail(f"cannot write the results to standard output ({exc.strerror or exc}); nothing more was written")
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
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _NUMERIC_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            try:
                float(argv[i + 1])
            except ValueError:
                pass
            else:
                out.append(f"{arg}={argv[i + 1]}")
                i += 2
                continue
        out.append(arg)
        i += 1
    return out


def _output_closed() -> int:
    """The reader of standard output went away (``| head``): say so once, and write nothing more."""
    _discard_stdout()
    return _fail("standard output was closed before the results were written (broken pipe)")


def _discard_stdout() -> None:
    """After a write to standard output failed, point it at the null device: Python flushes what is still
    buffered at exit, and a second failure there would replace the exit code decided here with 120."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _fail(message: str) -> int:
    print(f"chainmark: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _warn(message: str) -> None:
    print(f"chainmark: warning: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------
# keys and tokenizers for the commands
# ---------------------------------------------------------------------------
def _load_key(path: str | None) -> bytes:
    from .keys import KEY_FILE_ENV, load_key

    try:
        key = load_key(path)
    except LookupError:
        raise UsageError("no key: pass --key-file KEY, or set CHAINMARK_KEY_FILE (a key file) "
                         "or CHAINMARK_KEY (hex)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    source = path if path is not None else os.environ.get(KEY_FILE_ENV) or None
    if source is not None:
        _warn_if_not_private(source)
    from .keys import weak_key_reason

    weak = weak_key_reason(key)
    if weak:  # the auditor cannot choose the deployer's key, but should know
        _warn(f"the key is weak: {weak}; a key this easy to guess lets anyone forge or remove the watermark "
              "(chainmark keygen writes 32 random bytes)")
    return key


def _warn_if_not_private(path: str) -> None:
    """Warn (never fail) when a key file may be read by users other than its owner."""
    from .keys import key_file_is_private

    try:
        private = key_file_is_private(path)
    except OSError:
        return
    if not private:
        _warn(f"key file {path} is readable by other users; run `chmod 600 {path}`")


def _load_tokenizer(name: str | None, revision: str | None = None) -> Any:
    """The auditor's tokenizer (:mod:`chainmark.tokenizer`): the same code in the model-free install and the full one."""
    from .tokenizer import TokenizerLoadError, load_tokenizer

    try:
        return load_tokenizer(name, revision=revision)
    except TokenizerLoadError as exc:
        raise UsageError(f"the tokenizer cannot be loaded.\n{exc}") from None


def _tokenizer_label(name: str | None) -> str:
    from .tokenizer import default_model_name

    return name or default_model_name()


# ---------------------------------------------------------------------------
# detect
# ---------------------------------------------------------------------------
class _TextInput:
    """One input of ``detect``, checked in full (readable, within --max-bytes, text in --encoding, not empty)
    and then streamed again for scoring, so that no input of any size is held in memory whole.

    A file is re-opened to score it; standard input is spooled (in memory up to 8 MiB, then in a temporary
    file) because it can be read only once; a text-mode stream without a byte buffer (a notebook's, a test's)
    is held as text.
    """

    def __init__(self, source: str, label: str, encoding: str, stdin: TextIO, max_bytes: int):
        self.source, self.label, self.encoding = source, label, encoding
        self.spool: Any = None
        self.text: str | None = None
        if source == "":
            raise UsageError("an empty file name was given (an empty argument, e.g. an unset shell variable)")
        try:
            if source == "-":
                self._spool_stdin(stdin, max_bytes)
            else:
                _check_regular(source, max_bytes, label)
            nonblank = False
            for chunk in self.chunks(max_bytes):  # read to the end: a decoding error anywhere is found now
                nonblank = nonblank or bool(chunk.strip())
        except UnicodeDecodeError as exc:
            raise UsageError(f"{label} is not {encoding} text (byte offset {exc.start}); pass --encoding") from None
        except OSError as exc:
            raise _unreadable(exc, label) from None
        if not nonblank:
            raise UsageError(f"{label}: empty input, nothing to score")

    def _spool_stdin(self, stdin: TextIO, max_bytes: int) -> None:
        import tempfile

        raw = getattr(stdin, "buffer", None)
        if raw is None:  # an in-memory text stream
            self.text = stdin.read(max_bytes + 1)
            if len(self.text) > max_bytes:
                raise UsageError(f"{self.label} is larger than {max_bytes} bytes (raise the limit with --max-bytes)")
            return
        self.spool = tempfile.SpooledTemporaryFile(max_size=8 << 20)
        size = 0
        while block := raw.read(1 << 20):
            size += len(block)
            if size > max_bytes:
                raise UsageError(f"{self.label} is larger than {max_bytes} bytes (raise the limit with --max-bytes)")
            self.spool.write(block)

    def chunks(self, max_bytes: int) -> Iterable[str]:
        """The input's text, a megabyte at a time (decoding errors raise ``UnicodeDecodeError``)."""
        from .stream import decoded_chunks

        if self.text is not None:
            yield self.text
            return
        if self.spool is not None:
            self.spool.seek(0)
            yield from decoded_chunks(self.spool, self.encoding)
            return
        with open(self.source, "rb") as fh:
            yield from decoded_chunks(_Bounded(fh, max_bytes, self.label), self.encoding)


class _Bounded:
    """A binary file that refuses to yield more than ``max_bytes`` (a file growing while it is read)."""

    def __init__(self, fh: Any, max_bytes: int, label: str):
        self.fh, self.left, self.max_bytes, self.label = fh, max_bytes, max_bytes, label

    def read(self, size: int) -> bytes:
        data = self.fh.read(size)
        self.left -= len(data)
        if self.left < 0:
            raise UsageError(f"{self.label} is larger than {self.max_bytes} bytes (raise the limit with --max-bytes)")
        return data


def _unreadable(exc: OSError, label: str) -> UsageError:
    """The usage error for an input that could not be opened or read, saying why."""
    if isinstance(exc, FileNotFoundError):
        return UsageError(f"{label} does not exist")
    if isinstance(exc, IsADirectoryError):
        return UsageError(f"{label} is a folder, not a text file")
    if isinstance(exc, PermissionError):
        return UsageError(f"{label} is not readable by this user")
    return UsageError(f"{label} cannot be read ({exc.strerror or type(exc).__name__})")


def _check_regular(path: str, max_bytes: int, label: str) -> None:
    """A regular file within ``max_bytes``: a FIFO, socket or device is refused before it is opened (opening
    a FIFO with no writer blocks forever), a file too large before it is read."""
    info = os.stat(path)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path} is not a regular file (a pipe, socket or device); pipe text in through "
                         "standard input with '-' instead")
    if info.st_size > max_bytes:
        raise UsageError(f"{label} is larger than {max_bytes} bytes (raise the limit with --max-bytes)")
    with open(path, "rb"):  # readable by this user
        pass


def _read_inputs(paths: Sequence[str], encoding: str, stdin: TextIO,
                 max_bytes: int = DEFAULT_MAX_TEXT_BYTES) -> list[_TextInput]:
    """Check every input first (each is read once through); collect every problem, then fail once."""
    import codecs

    try:
        info = codecs.lookup(encoding)
    except LookupError:
        raise UsageError(f"--encoding: unknown text encoding {encoding!r}") from None
    if not getattr(info, "_is_text_encoding", True):  # rot13, base64, zlib: codecs, not text encodings
        raise UsageError(f"--encoding: {encoding!r} is not a text encoding (it transforms bytes or text); "
                         "name the encoding the files are written in, e.g. utf-8 or latin-1")
    if list(paths).count("-") > 1:
        raise UsageError("'-' (standard input) may be given only once")
    inputs, problems = [], []
    for path in paths:
        label = "<stdin>" if path == "-" else path
        try:
            inputs.append(_TextInput(path, label, encoding, stdin, max_bytes))
        except UsageError as exc:
            problems.append(str(exc))
    if problems:
        raise UsageError("cannot audit these inputs (nothing was scored):\n  " + "\n  ".join(problems))
    return inputs


def _read_input(source: str, label: str, max_bytes: int, encoding: str = "UTF-8", stdin: TextIO | None = None,
                too_large: str = " (raise the limit with --max-bytes)", not_text: str = "") -> str:
    """A file (or standard input for '-') as text: at most ``max_bytes`` bytes, decoded with ``encoding``.

    Every problem is a :class:`UsageError` naming ``label``; a decoding error
    gives the byte offset, never the bytes (a key file passed by mistake
    must not be echoed).
    """
    if source == "":
        raise UsageError("an empty file name was given (an empty argument, e.g. an unset shell variable)")
    try:
        data = _read_stdin(stdin or sys.stdin, max_bytes) if source == "-" else _read_bytes(source, max_bytes)
    except OSError as exc:
        raise _unreadable(exc, label) from None
    if len(data) > max_bytes:
        raise UsageError(f"{label} is larger than {max_bytes} bytes{too_large}")
    try:
        return data if isinstance(data, str) else data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{label} is not {encoding} text (byte offset {exc.start}){not_text}") from None


def _read_bytes(path: str, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of a regular file: enough to tell that it is too large.

    A FIFO, socket or device is refused before it is opened (opening a FIFO with no writer blocks
    forever); standard input ('-') is the way to pipe text in.
    """
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(mode):
        raise UsageError(f"{path} is not a regular file (a pipe, socket or device); pipe text in through "
                         "standard input with '-' instead")
    with open(path, "rb") as fh:
        return fh.read(max_bytes + 1)


def _read_stdin(stdin: TextIO, max_bytes: int) -> bytes | str:
    """Standard input as bytes (so that --encoding applies); an in-memory text stream as its text."""
    raw = getattr(stdin, "buffer", None)
    return raw.read(max_bytes + 1) if raw is not None else stdin.read(max_bytes + 1)


def _load_regime(path: str) -> dict[str, Any]:
    """Read and check a regime file: bounded, UTF-8 JSON, every field valid (messages never quote its bytes)."""
    text = _read_input(path, f"regime file {path}", MAX_REGIME_BYTES, too_large=": not a regime file",
                       not_text=": not a regime file")
    try:
        doc = parse_regime_text(text)
    except ValueError as exc:
        raise UsageError(f"regime file {path} {exc}" if str(exc).startswith("not JSON")
                         else f"regime file {path}: {exc}") from None
    problems = published_regime_problems(doc)
    if problems:
        raise UsageError(f"regime file {path}: " + "; ".join(problems))
    return doc


def _detect_regime(args: argparse.Namespace, document: dict[str, Any] | None) -> Regime:
    """The regime this audit applies (:meth:`Regime.resolve`): explicit options win over the published
    document, the document over the defaults."""
    return Regime.resolve(document, S=args.S, topology=args.topology, alpha=args.alpha, threshold=args.threshold,
                          distinct_pairs=args.distinct_pairs, test=_default_test(args, document),
                          n_min=args.min_tokens,
                          tokenizer=args.tokenizer,
                          tokenizer_revision=args.tokenizer_revision)


def _default_test(args: argparse.Namespace, document: dict[str, Any] | None) -> str | None:
    """The test an audit applies when nothing names one: the exact test, whose false-positive rate holds for
    every text. A published regime keeps its own (one without "test" means the paper's z-test, or distinct
    pairs), and a --threshold or --distinct-pairs given alone asks for the z statistic they apply to."""
    if args.test is not None or document is not None or args.threshold is not None or args.distinct_pairs:
        return args.test
    return "exact"


def _topology(regime: Regime) -> Any:
    """The regime's topology, with S bounded; a usage error if the two do not fit."""
    from .detect import check_states

    try:
        check_states(regime.S)
        return regime.topo
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _cmd_detect(args: argparse.Namespace) -> int:
    from .keys import key_fingerprint
    from .repetition import pair_null, repetition_warning

    published = _load_regime(args.regime) if args.regime else None
    regime = _detect_regime(args, published)
    key = _load_key(args.key_file)
    regime.check_key(key)  # when the regime names a key fingerprint, the key must have it
    topo = _topology(regime)
    texts = _read_inputs(args.inputs, args.encoding, sys.stdin, args.max_bytes)
    tokenizer = _load_tokenizer(regime.tokenizer, regime.tokenizer_revision)
    regime.check_tokenizer(tokenizer)  # and the tokenizer its vocabulary fingerprint
    if args.certificate:  # a certificate given here replaces the one the regime carries
        regime = regime.replace(key_audit=_read_certificate(args.certificate))
    # a key-audit certificate must be this key's, tokenizer's, S's and topology's; for another test or alpha
    # chosen here it does not speak, and the audit says so
    for note in regime.check_certificate(key, tokenizer, strict_test=False):
        _warn(f"the regime's key-audit certificate does not cover this audit ({note}): its rates are not certified")
    if regime.key_audit is not None and regime.key_audit.get("verdict") != "pass":
        row = regime.key_audit["tests"][regime.key_audit["deploy_test"]]
        _warn(f"this regime's key is not certified for the {regime.key_audit['deploy_test']} test (its audit "
              f"says {regime.key_audit['verdict'].upper()}): it flagged {100 * row['fpr']:.2f}% "
              f"[{100 * row['ci_low']:.2f}, {100 * row['ci_high']:.2f}] of {row['documents']} unwatermarked "
              f"documents at alpha = {regime.alpha:g}, upper bound {100 * row['upper_bound']:.2f}% "
              "(see the certificate)")
    if regime.trades_fpr_for_power:
        _warn(f"this regime's threshold (z > {regime.threshold}) lies below z_alpha = {regime.z_alpha:.3f}: it "
              f"flags more than alpha = {regime.alpha:g} of unwatermarked text, by the deployer's choice "
              "(trades_fpr_for_power)")
    # the audit always states its threshold on z (z_alpha unless one is given) and the key it used
    regime = regime.replace(threshold=None if regime.exact else regime.operating_threshold,
                            key_fingerprint=key_fingerprint(key))
    rows = []
    test = regime.effective_test
    for item in texts:
        scorer = _score_input(item, tokenizer, key, regime, topo, args.max_bytes)
        res, share = scorer.result(), scorer.repeated_pair_share
        # the text's own null over random keys: what its repeats do to the z or distinct test's rate
        null = None if test == "exact" or not scorer.pairs_counted else pair_null(*scorer.pair_counts(), topo, test)
        note, rate = repetition_warning(null, share, scorer.n_transitions, res.n_scored, test,
                                        regime.operating_threshold, regime.alpha, topo.p0)
        rows.append({"file": item.label, **res.to_dict("audit", regime=regime),
                     "repeated_pair_share": round(share, 6),
                     "text_null_fpr": rate,
                     "text_null_variance_ratio": None if null is None else null.variance_ratio,
                     "z_text_null": None if null is None else null.z_standardised(res.n_hits)})
        if note:
            _warn(f"{_printable(item.label)}: {note}")
    if args.json:
        for row in rows:
            print(json.dumps(row, allow_nan=False))
    else:
        print(_detect_table(rows, regime))
    if args.fail_on_detect and any(row["is_watermarked"] for row in rows):
        return EXIT_DETECTED
    return EXIT_OK


def _score_input(item: _TextInput, tokenizer: Any, key: bytes, regime: Regime, topo: Any,
                 max_bytes: int) -> Any:
    """One input scored in pieces (:func:`chainmark.stream.stream_text`): the fed detector, whose result is the
    verdict scoring the text whole would give, with its repeated-pair share and pairs' multiplicities."""
    from .stream import UncuttableText, stream_text

    try:
        return stream_text(item.chunks(max_bytes), tokenizer, key, S=regime.S, topology=topo, alpha=regime.alpha,
                           test=regime.effective_test, count_pairs=regime.effective_test != "exact")
    except UncuttableText as exc:
        raise UsageError(f"{item.label}: {exc}") from None
    except UnicodeDecodeError as exc:  # the input changed since it was checked
        raise UsageError(f"{item.label} is not {item.encoding} text (byte offset {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{item.label} cannot be read ({exc.strerror or type(exc).__name__})") from None


def _printable(label: str) -> str:
    """A file name as the table shows it: control characters, line and paragraph separators escaped, so a
    name with a newline or an escape sequence cannot draw a row of its own or recolour the terminal."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in label)


def _detect_table(rows: list[dict[str, Any]], regime: Regime) -> str:
    head = ["file", "tokens", "scored", "valid", "phi", "z", "p-value", "decision"]
    body = [[_printable(r["file"]), str(r["n_tokens"]), str(r["n_transitions"]), str(r["n_valid"]),
             f"{r['phi']:.3f}", f"{r['z']:.2f}", f"{r['p_value']:.2e}", r["decision"]] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    numeric = {1, 2, 3, 4, 5, 6}

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    detected = sum(r["is_watermarked"] for r in rows)
    topo = regime.topo
    lines = [
        f"ChainMark audit: S={topo.S} {topo.name} (k={topo.k}, p0={topo.p0:.3g}), alpha={regime.alpha:g}, "
        + ("exact binomial test on a spanning forest, p < alpha" if regime.exact else
           f"threshold z > {regime.threshold:.3f}{', distinct pairs' if regime.distinct_pairs else ''}"),
        f"tokenizer {rows[0]['tokenizer']}, key fingerprint {regime.key_fingerprint}",
        line(head), line(["-" * w for w in widths]), *(line(b) for b in body),
        f"{detected} of {len(rows)} input(s) detected as watermarked",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# calibrate, recalibrate
# ---------------------------------------------------------------------------
def _cmd_calibrate(args: argparse.Namespace) -> int:
    from . import calibrate as cal

    s_star = _s_star(args.n, args.rho, args.alpha, args.k)
    if args.k >= s_star:
        raise UsageError(f"--k must be smaller than S* = {s_star}, got {args.k}")
    z_a = float(cal.z_alpha(args.alpha))
    z_pred = float(cal.predicted_z(args.n, args.rho, s_star, k=args.k))
    out = {
        "n": args.n, "rho": args.rho, "alpha": args.alpha, "k": args.k,
        "z_alpha": z_a, "S_star": s_star, "predicted_z": z_pred,
        "midpoint_threshold": float(cal.midpoint_threshold(args.rho, s_star, k=args.k)),
        "hoeffding_fpr_bound": float(cal.hoeffding_fpr_bound(args.n, args.rho, s_star, k=args.k)),
    }
    if args.json:
        print(json.dumps(out, allow_nan=False))
        return EXIT_OK
    print(f"targets: n = {args.n} tokens, rho = {args.rho:g}, alpha = {args.alpha:g}, k = {args.k}")
    print(f"S* = {s_star} states (smallest S whose predicted z reaches 2 z_alpha = {2 * z_a:.3f})")
    print(f"predicted z at S*: {z_pred:.3f} (one-sided z_alpha = {z_a:.3f})")
    print(f"midpoint threshold on phi: {out['midpoint_threshold']:.4f}")
    bound = out["hoeffding_fpr_bound"]
    print(f"Hoeffding bound on the false-positive rate at that threshold: {bound:.3g}"
          + (" (>= 1: says nothing at this length)" if bound >= 1 else ""))
    return EXIT_OK


def _s_star(n: int, rho: float, alpha: float, k: int) -> int:
    """S* for the targets, or a usage error when no state count up to MAX_STATES reaches them."""
    from . import calibrate as cal

    try:
        s_star = int(cal.s_star(n, rho, alpha, k=k))
    except (ZeroDivisionError, OverflowError):  # rho * rho underflows, or S* overflows a float
        s_star = None
    if s_star is None and n > 2**53:
        raise UsageError(f"--n {n} is beyond any text (more than 2**53 tokens); give the text length in tokens")
    if s_star is None or s_star > MAX_STATES:
        need = "more states than a float can count" if s_star is None else f"S* = {s_star} states"
        raise UsageError(f"these targets need {need}, above the largest S the detector accepts "
                         f"({MAX_STATES}); raise --n (longer texts), --rho or --alpha")
    return s_star


def _null_lines(source: str, max_bytes: int) -> list[str]:
    """The lines of a null file (or standard input): at most ``max_bytes`` bytes of UTF-8 text."""
    label = "<stdin>" if source == "-" else f"null file {source}"
    text = _read_input(source, label, max_bytes, not_text=": not JSON lines")
    # JSON Lines end lines with "\n" only; str.splitlines would also split at U+2028, U+0085 and
    # other characters a JSON string may hold raw (a "\r" before "\n" is JSON whitespace)
    return text.split("\n")


def _cmd_recalibrate(args: argparse.Namespace) -> int:
    from . import calibrate as cal

    label = "<stdin>" if args.null == "-" else args.null
    values = read_null_z(_null_lines(args.null, args.max_bytes), label)
    import numpy as np

    z = np.asarray(values, dtype=float)
    z_a = float(cal.z_alpha(args.alpha))
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, as a usage error
        try:
            threshold = float(cal.recalibrate(z, args.alpha, method=args.method))
        except ValueError as exc:  # too few null texts for alpha, or no spread
            raise UsageError(f"{label}: {exc}") from None
        out = {
            "alpha": args.alpha, "method": args.method, "n_null": int(z.size),
            "null_mean": float(z.mean()), "null_sd": float(z.std(ddof=1)),
            "z_alpha": z_a, "threshold": threshold,
            "fpr_at_z_alpha": float(np.mean(z > z_a)), "fpr_at_threshold": float(np.mean(z > threshold)),
        }
    overflow = [name for name, value in out.items() if isinstance(value, float) and not math.isfinite(value)]
    if overflow:
        raise UsageError(f"{label}: the z-scores are too large to summarise ({', '.join(overflow)} overflow); "
                         "a detector's z-scores are far smaller: is this the output of `chainmark detect --json`?")
    kurt = cal.excess_kurtosis(z)
    heavy = kurt > cal.HEAVY_TAIL_KURTOSIS
    out["null_excess_kurtosis"] = kurt
    if args.method == "quantile" and z.size * args.alpha < 10:
        advice = ("use more texts (the null is heavy-tailed, excess kurtosis "
                  f"{kurt:.1f}, so --method sd would under-state the tail)" if heavy
                  else "use more texts or --method sd")
        _warn(f"only {z.size} null texts for alpha = {args.alpha:g}: the {1 - args.alpha:g} quantile "
              f"rests on {z.size * args.alpha:.1f} expected exceedances; {advice}")
    if args.method == "sd" and heavy:
        _warn(f"the null z-scores are heavy-tailed (excess kurtosis {kurt:.1f}): the sd recipe assumes a "
              "Gaussian shape and will let through more than alpha; prefer --method quantile with enough texts")
    if args.json:
        print(json.dumps(out, allow_nan=False))
        return EXIT_OK
    print(f"null corpus: {out['n_null']} z-scores, mean {out['null_mean']:.3f}, sd {out['null_sd']:.3f}")
    print(f"analytic threshold z_alpha = {z_a:.3f}: exceeded by {100 * out['fpr_at_z_alpha']:.2f}% of the null "
          f"(target {100 * args.alpha:g}%)")
    print(f"operating threshold ({args.method}): z* = {threshold:.3f}: exceeded by "
          f"{100 * out['fpr_at_threshold']:.2f}% of the null")
    print(f"audit with: chainmark detect --threshold {threshold:.3f} ...")
    return EXIT_OK


# ---------------------------------------------------------------------------
# keygen, regime
# ---------------------------------------------------------------------------
def _cmd_keygen(args: argparse.Namespace) -> int:
    """Write a key file and print its fingerprint. The fingerprint is printed (and flushed) first: if standard
    output cannot take it, no key is written, so a key never exists without the fingerprint that names it."""
    from .keys import derive_key, generate_key, key_fingerprint, read_key_file, weak_key_reason

    if (args.from_master is None) != (args.context is None):
        raise UsageError("--from-master and --context go together")
    out = _out_path(args.out, "key file")
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
        _warn_if_not_private(args.from_master)
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
    from .keys import write_key_file

    try:
        return write_key_file(out, key)
    except FileExistsError:
        raise UsageError(f"{out} exists; refusing to overwrite a key file (choose another --out)") from None
    except OSError as exc:
        raise UsageError(f"cannot write the key file {out} ({exc.strerror or exc})") from None


def _cmd_regime(args: argparse.Namespace) -> int:
    key = _load_key(args.key_file)
    tokenizer = _load_tokenizer(args.tokenizer, args.tokenizer_revision)
    try:
        doc = regime_document(key, args.S, args.alpha, topology=args.topology, threshold=args.threshold,
                              tokenizer_name=_tokenizer_label(args.tokenizer), tokenizer=tokenizer,
                              tokenizer_revision=args.tokenizer_revision,
                              n_min=args.n_min, rho=args.rho, gate=args.gate,
                              distinct_pairs=args.distinct_pairs,
                              test=args.test or (None if args.distinct_pairs or args.threshold is not None else "exact"),
                              key_audit=_read_certificate(args.certificate) if args.certificate else None,
                              trades_fpr_for_power=args.trades_fpr_for_power,
                              recalibration=args.recalibrated)
    except ValueError as exc:  # the options do not fit together (e.g. soft_cycle with S = 2)
        raise UsageError(str(exc)) from None
    Regime.from_document(doc).check_certificate(key, tokenizer)  # the certificate is this key's, S's, ...
    text = json.dumps(doc, indent=2, allow_nan=False)
    if args.out:
        _create_file(_out_path(args.out, "regime"), text + "\n")
        print(f"wrote the detection regime to {args.out}", file=sys.stderr)
    print(text)
    return EXIT_OK


def _out_path(value: str, what: str) -> Path:
    """The path an ``--out`` option names: a file to create, never a folder, standard output or nothing."""
    if not value.strip():
        raise UsageError(f"--out is empty: give the path of the {what} to create")
    if value == "-":
        raise UsageError(f"--out - would create a file named '-'; give the path of the {what} to create")
    if value.endswith(("/", os.sep)) or Path(value).is_dir():
        raise UsageError(f"--out {value} names a folder; give the path of the {what} to create inside it")
    return Path(value)


def _create_file(path: Path, text: str) -> None:
    """Write a new file (mode 0644 at most): refused if the name exists, even as a dangling link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # O_EXCL never follows a link
    except FileExistsError:
        raise UsageError(f"{path} exists; refusing to overwrite it") from None
    except OSError as exc:
        raise UsageError(f"cannot create {path} ({exc.strerror or type(exc).__name__})") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

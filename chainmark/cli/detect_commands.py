"""``chainmark detect``, ``calibrate`` and ``recalibrate``: score texts for the watermark with a key and a tokenizer,
and choose the state count and the operating threshold that detection applies."""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Iterable

from ..auditor.regime import Regime
from ..limits import DEFAULT_MAX_INPUT_BYTES, DEFAULT_MAX_TEXT_BYTES, MAX_STATES
from .common import (EXIT_DETECTED, EXIT_OK, MAX_INPUT_BYTES_LIMIT, UsageError, add_text_preparation, finite_float,
                     float_in, int_at_least, int_in, warn)
from .inputs import (TextInput, detect_regime, load_key, load_regime, load_tokenizer, read_certificate, read_input,
                     read_inputs, regime_topology, tokenizer_label)

__all__ = ["add_commands",]

_DETECT_EPILOG = """\
examples:
  chainmark detect --key-file acme.key essay.txt report.txt
  chainmark detect --key-file acme.key --S 3 --topology soft_cycle --alpha 0.001 *.txt
  chainmark detect --regime regime.json --key-file acme.key --json texts/*.txt
  echo "some text" | chainmark detect --key-file acme.key -
  chainmark detect --key-file acme.key --test exact forum_posts/*.txt
  chainmark detect --key-file acme.key --segments essay.txt
  python chat.py --stream | chainmark detect --key-file acme.key --anytime --json -
  chainmark detect --key-file alice.key --key-file bob.key --key-file carol.key post.txt

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

--segments looks inside each input for watermarked spans (a paragraph
pasted into a longer text, which a whole-text test dilutes): it scans
windows of 16, 32, 64, ... transitions, and each window's p-value compares
its z with the largest window z of the same text under --draws re-drawn keys,
so that on a text without the watermark the chance of reporting any span is
at most alpha, whatever the text repeats. Each span is printed with its token
and character positions, z and family-wise p-value (--json: one object per
input with a "segments" list). --fail-on-detect then means "holds a span".

--anytime follows each input as it arrives and says whether and where the
evidence crossed: an e-process E over the transitions that reach a token for
the first time (each legal with probability exactly p0 = k/S given all before
it, under a random key, whatever the text repeats), a mixture of bets on
legal rates above p0 weighted by a Beta density centred by the regime's rho
(0.5 when it names none). P(E ever reaches 1/alpha) <= alpha for every text
over a random key (Ville's inequality), so it may be checked after every
token. Files are checked first, as above; standard input is read in the
chunks the pipe delivers. Both are tokenized in pieces cut where the
tokenizer cuts anyway, and reading stops once E reaches 1/alpha;
--keep-reading reads on to the end and reports the crossing and the final E.
It replaces the fixed-length tests, so --test, --threshold, --segments,
--certificate and --min-tokens are refused with it. An input
with fewer than two tokens scores nothing (E = 1, a warning says so).
--json fields: file, crossed and is_watermarked (E reached 1/alpha),
crossing_token (index of the token at which it first did, else null),
crossing_char (character offset just past that token, null when the
tokenizer gives no offsets), e_value and max_e_value (E after the last token
read and its largest value; null beyond a double's range), log10_e_value and
max_log10_e_value (the same as base-10 logarithms), threshold (1/alpha),
n_tokens (tokens read), n_scored (transitions into a new token), n_legal
(legal among them), read_to_end (false when reading stopped at the
crossing), p0, prior ([a, b], the Beta weights over u = (q - p0)/(1 - p0)
for a legal rate q), alpha, S, k, topology, tokenizer, key_fingerprint.
--fail-on-detect: exit 1 when any input crossed.

--key-file given more than once tests each input under a set of keys (keys
per account or session, or rotated keys): each key at alpha / K, so that the
chance that any of the K keys flags an unwatermarked text is at most alpha
(the family-wise error; for every text over random keys with the exact test).
A flagged input names the key whose watermark it carries, by fingerprint (a
forgery made from one account's stolen outputs points at that account). The
table gives the adjusted p-value, min(1, K x the smallest p-value); --json
adds every key's p-value. It works with the exact (default), z or distinct
test; --segments, --anytime, --certificate, --threshold and a regime that
names one key are refused with it.

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


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``detect``, ``calibrate`` and ``recalibrate`` with their options."""
    fmt = argparse.RawDescriptionHelpFormatter
    d = subparsers.add_parser("detect", help="score text files for the watermark", epilog=_DETECT_EPILOG,
                              description="Score each input for the ChainMark watermark: tokens scored, phi, z, "
                                          "p-value and the decision.", formatter_class=fmt)
    d.add_argument("inputs", nargs="+", metavar="FILE", help="text files to audit; '-' reads standard input")
    d.add_argument("--key-file", metavar="KEY", action="append", help="file holding the raw key bytes "
                   "(default: $CHAINMARK_KEY_FILE, then $CHAINMARK_KEY as hex); given more than once, each input "
                   "is tested under the set of keys with family-wise error alpha (see below)")
    d.add_argument("--tokenizer", metavar="NAME", help="Hub id or local folder of the tokenizer "
                   "(default: the regime's, else $CHAINMARK_MODEL's, else the book's embedded SmolLM2-135M-Instruct)")
    d.add_argument("--tokenizer-revision", metavar="REV", help="Hub revision (commit hash) of --tokenizer "
                   "(default: the regime's); pins a Hub id to the files the regime was published with")
    d.add_argument("--regime", metavar="FILE.json", help="published detection regime to apply "
                   "(its key fingerprint must match the key)")
    d.add_argument("--S", type=int_in(2, MAX_STATES), help=f"number of states (2 to {MAX_STATES}; default 5)")
    d.add_argument("--topology", choices=("clockwork", "soft_cycle"), help="transition topology (default clockwork)")
    d.add_argument("--alpha", type=float_in(0.0, 1.0, closed=False),
                   help="significance level in (0, 1) (default 0.01)")
    d.add_argument("--threshold", type=finite_float(), metavar="Z",
                   help="operating z threshold (e.g. from recalibrate); default: z_alpha")
    d.add_argument("--test", choices=("z", "distinct", "exact"),
                   help="exact (the default): a binomial test on a spanning forest of the text's tokens, whose "
                        "size is at most alpha for every text over a random key (a deployed key's rate: chainmark "
                        "key audit; decides by its p-value, no z threshold); z: every transition, the paper's "
                        "z-test, a normal approximation (the default with --threshold or a regime that names no "
                        "test); distinct: each distinct pair once, valid on text without repeated tokens")
    d.add_argument("--certificate", metavar="FILE.json", help="check this key-audit certificate (chainmark key "
                   "audit) against the key, tokenizer, S and topology first (exit 2 when it does not fit)")
    d.add_argument("--min-tokens", type=int_at_least(0), metavar="N", help="report texts shorter than N tokens as "
                   "'too short' instead of deciding (default: the regime's n_min, else 0)")
    d.add_argument("--encoding", default="utf-8", help="text encoding of the inputs, standard input "
                   "included (default utf-8)")
    add_text_preparation(d)
    d.add_argument("--max-bytes", type=int_in(1, MAX_INPUT_BYTES_LIMIT), default=DEFAULT_MAX_TEXT_BYTES, metavar="N",
                   help=f"refuse an input larger than N bytes (default {DEFAULT_MAX_TEXT_BYTES}, 1 GiB: a safety "
                        "limit; texts are scored in pieces, so memory stays flat whatever their size)")
    d.add_argument("--json", action="store_true", help="one JSON object per input instead of a table")
    d.add_argument("--fail-on-detect", action="store_true",
                   help="exit with code 1 if any input is detected as watermarked")
    d.add_argument("--segments", action="store_true",
                   help="find the watermarked spans inside each input instead of testing it whole: a window scan "
                        "whose family-wise error is at most alpha for every text over a random key (with the "
                        "default, key-derived seed); passages from 17 tokens (the shortest window) on")
    d.add_argument("--anytime", action="store_true",
                   help="follow each input as it arrives and report whether and where the evidence E crossed "
                        "1/alpha (an e-process: valid however often it is checked); standard input is read as "
                        "it arrives and reading stops at the crossing")
    d.add_argument("--keep-reading", action="store_true",
                   help="with --anytime: read each input to its end, reporting the crossing and the final E")
    d.add_argument("--draws", type=int_in(99, 1_000_000), default=999, metavar="B",
                   help="re-drawn keys behind --segments' p-values (default 999; at least 1/alpha - 1)")
    d.add_argument("--seed", type=int_at_least(0), default=None,
                   help="seed of --segments' re-drawn keys, to reproduce another run's draws (default: a seed "
                        "derived from the key, which makes the family-wise error at most alpha for every text "
                        "over a random key; a fixed seed keeps that only on average over seeds)")
    d.set_defaults(func=_cmd_detect)

    c = subparsers.add_parser("calibrate", help="S* from the targets (n, rho, alpha)", formatter_class=fmt,
                              description="The smallest state count S* that detects watermarked text of n tokens "
                                          "with budget rho at level alpha (midpoint rule), and the z-score it "
                                          "predicts.",
                              epilog="examples:\n  chainmark calibrate --n 200 --rho 0.5 --alpha 0.01\n"
                                     "  chainmark calibrate --n 50 --rho 0.25 --alpha 0.001 --k 2 --json")
    c.add_argument("--n", type=int_at_least(2), required=True, help="minimum text length in tokens (>= 2)")
    c.add_argument("--rho", type=float_in(0.0, 1.0, closed="right"), required=True,
                   help="watermark budget: share of gated positions, in (0, 1] (with none gated "
                        "there is no watermark to detect)")
    c.add_argument("--alpha", type=float_in(0.0, 1.0, closed=False), required=True,
                   help="target false-positive rate in (0, 1)")
    c.add_argument("--k", type=int_in(1, MAX_STATES - 1), default=1, help="successors per state (default 1: clockwork)")
    c.add_argument("--json", action="store_true", help="print a JSON object")
    c.set_defaults(func=_cmd_calibrate)

    r = subparsers.add_parser("recalibrate", help="operating threshold from a null corpus", epilog=_RECAL_EPILOG,
                              description="The operating z threshold z* from the z-scores of unwatermarked texts of "
                                          "the deployment's domain.", formatter_class=fmt)
    r.add_argument("--null", required=True, metavar="FILE.jsonl", help="null z-scores as JSON lines ('-': stdin)")
    r.add_argument("--alpha", type=float_in(0.0, 1.0, closed=False), required=True,
                   help="target false-positive rate in (0, 1)")
    r.add_argument("--method", choices=("sd", "quantile"), default="sd", help="recalibration recipe (default sd)")
    r.add_argument("--max-bytes", type=int_in(1, MAX_INPUT_BYTES_LIMIT), default=DEFAULT_MAX_INPUT_BYTES, metavar="N",
                   help=f"refuse a null file larger than N bytes (default {DEFAULT_MAX_INPUT_BYTES})")
    r.add_argument("--json", action="store_true", help="print a JSON object")
    r.set_defaults(func=_cmd_recalibrate)


def _read_null_z(lines: Iterable[str], source: str) -> list[float]:
    """z-scores from JSON lines, one object per line with a numeric ``"z"`` field (``chainmark detect --json``
    writes exactly this); blank lines are skipped, anything else is an error naming the line."""
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


def _cmd_detect(args: argparse.Namespace) -> int:
    from ..keys import key_fingerprint
    from ..auditor.repetition import pair_null, repetition_warning

    published = load_regime(args.regime) if args.regime else None
    regime = detect_regime(args, published)
    if args.key_file and len(args.key_file) > 1:
        return _detect_over_keys(args, regime)
    key = load_key(args.key_file[0] if args.key_file else None)
    regime.check_key(key)  # when the regime names a key fingerprint, the key must have it
    topo = regime_topology(regime)
    if args.anytime or args.keep_reading:  # before any input is read: standard input is read as it arrives
        from .anytime_command import anytime_reports, anytime_table

        rows = anytime_reports(args, key, regime, topo)
        return _emit(args, rows, lambda: anytime_table(rows, regime))
    texts = read_inputs(args.inputs, args.encoding, sys.stdin, args.max_bytes)
    tokenizer = load_tokenizer(regime.tokenizer, regime.tokenizer_revision)
    regime.check_tokenizer(tokenizer)  # and the tokenizer its vocabulary fingerprint
    if args.certificate:  # a certificate given here replaces the one the regime carries
        regime = regime.replace(key_audit=read_certificate(args.certificate))
    _warn_of_regime(regime, key, tokenizer)
    # the audit always states its threshold on z (z_alpha unless one is given) and the key it used
    regime = regime.replace(threshold=None if regime.exact else regime.operating_threshold,
                            key_fingerprint=key_fingerprint(key))
    if args.segments:
        return _report_segments(args, texts, tokenizer, key, regime, topo)
    rows = []
    test = regime.effective_test
    for item in texts:
        scorer = _score_input(item, tokenizer, key, regime, topo, args.max_bytes)
        res, share = scorer.result(), scorer.repeated_pair_share
        # the text's own null over random keys: what its repeats do to the z or distinct test's rate
        null = None if test == "exact" or not scorer.pairs_counted else pair_null(*scorer.pair_counts(), topo, test)
        note, rate = repetition_warning(null, share, scorer.n_transitions, res.n_scored, test,
                                        regime.operating_threshold, regime.alpha, topo.p0)
        rows.append({"file": item.label, **res.to_dict("audit", regime=regime), "repeated_pair_share": round(share, 6),
                     "text_null_fpr": rate, "text_null_variance_ratio": None if null is None else null.variance_ratio,
                     "z_text_null": None if null is None else null.z_standardised(res.n_hits),
                     "text_preparation": str(regime.text_preparation)})
        if note:
            warn(f"{_printable(item.label)}: {note}")
    return _emit(args, rows, lambda: _detect_table(rows, regime))


def _detect_over_keys(args: argparse.Namespace, regime: Regime) -> int:
    """``detect`` with several --key-file: each input under every key at alpha / K
    (:func:`chainmark.auditor.keysets.detect_over_keys`)."""
    from ..auditor.keysets import detect_over_keys

    options = (("--segments", args.segments), ("--anytime", args.anytime or args.keep_reading),
               ("--certificate", args.certificate), ("--threshold", args.threshold is not None))
    refused = [flag for flag, given in options if given]
    if refused or regime.key_fingerprint:
        what = ", ".join(refused) if refused else "a regime that names one key"
        raise UsageError(f"{what} cannot be used with several --key-file: a key set is tested whole, "
                         "each key at alpha / K")
    keys = [load_key(path) for path in args.key_file]
    configs = [regime.config(key) for key in keys]
    if len({c.fingerprint for c in configs}) < len(configs):
        raise UsageError("the same key is given twice (equal fingerprints): give each key once")
    texts = read_inputs(args.inputs, args.encoding, sys.stdin, args.max_bytes)
    tokenizer = load_tokenizer(regime.tokenizer, regime.tokenizer_revision)
    regime.check_tokenizer(tokenizer)
    rows = []
    for item in texts:
        ids, _ = _ids_and_offsets(tokenizer, regime.text_preparation.apply(_whole_text(item, args.max_bytes)))
        v = detect_over_keys(ids, configs, regime.alpha, test=regime.effective_test)
        rows.append({"file": item.label, **v.to_dict(), "tokenizer": tokenizer_label(regime.tokenizer)})
    return _emit(args, rows, lambda: _key_set_table(rows))


def _key_set_table(rows: list[dict[str, Any]]) -> str:
    first = rows[0]
    lines = [f"ChainMark audit over {first['n_keys']} keys: family-wise alpha={first['alpha']:g} "
             f"(each key at {first['per_key_alpha']:.3g}), {first['test']} test", f"tokenizer {first['tokenizer']}"]
    for r in rows:
        whose = f"watermarked, key {r['key_fingerprint']}" if r["is_watermarked"] else "not detected"
        lines.append(f"{_printable(r['file'])}: {r['n_tokens']} tokens, adjusted p = {r['adjusted_p_value']:.3g}, "
                     f"{whose}")
    lines.append(f"{sum(r['is_watermarked'] for r in rows)} of {len(rows)} input(s) detected as watermarked")
    return "\n".join(lines)


def _warn_of_regime(regime: Regime, key: bytes, tokenizer: Any) -> None:
    """The regime's caveats on stderr: a key-audit certificate that does not cover this audit (it must be this
    key's, tokenizer's, S's and topology's; for another test or alpha it does not speak), a key it does not
    certify, a threshold below z_alpha."""
    for note in regime.check_certificate(key, tokenizer, strict_test=False):
        warn(f"the regime's key-audit certificate does not cover this audit ({note}): its rates are not certified")
    if regime.key_audit is not None and regime.key_audit.get("verdict") != "pass":
        row = regime.key_audit["tests"][regime.key_audit["deploy_test"]]
        warn(f"this regime's key is not certified for the {regime.key_audit['deploy_test']} test (its audit "
             f"says {regime.key_audit['verdict'].upper()}): it flagged {100 * row['fpr']:.2f}% "
             f"[{100 * row['ci_low']:.2f}, {100 * row['ci_high']:.2f}] of {row['documents']} unwatermarked "
             f"documents at alpha = {regime.alpha:g}, upper bound {100 * row['upper_bound']:.2f}% "
             "(see the certificate)")
    if regime.trades_fpr_for_power:
        warn(f"this regime's threshold (z > {regime.threshold}) lies below z_alpha = {regime.z_alpha:.3f}: it "
             f"flags more than alpha = {regime.alpha:g} of unwatermarked text, by the deployer's choice "
             "(trades_fpr_for_power)")


def _report_segments(args: argparse.Namespace, texts: list[TextInput], tokenizer: Any, key: bytes, regime: Regime,
                     topo: Any) -> int:
    """``detect --segments``: each input's watermarked spans (:func:`chainmark.auditor.segments.detect_segments`)."""
    from ..auditor.segments import detect_segments

    if (1.0 / (args.draws + 1)) > regime.alpha:
        raise UsageError(f"--draws {args.draws} cannot reach alpha = {regime.alpha:g}: use at least "
                         f"{math.ceil(1.0 / regime.alpha) - 1}")
    config = regime.config(key)
    reports = []
    for item in texts:
        ids, offsets = _ids_and_offsets(tokenizer, regime.text_preparation.apply(_whole_text(item, args.max_bytes)))
        res = detect_segments(ids, config, alpha=regime.alpha, draws=args.draws, seed=args.seed, offsets=offsets)
        reports.append({"file": item.label, **res.to_dict(), "S": topo.S, "k": topo.k, "topology": topo.name,
                        "tokenizer": tokenizer_label(regime.tokenizer), "key_fingerprint": regime.key_fingerprint,
                        "seed": "from the key" if args.seed is None else args.seed})
    return _emit(args, reports, lambda: _segments_table(reports, regime))


def _emit(args: argparse.Namespace, rows: list[dict[str, Any]], table: Any) -> int:
    """Print the rows (one JSON object each with --json, else the table) and the exit code --fail-on-detect asks."""
    if args.json:
        for row in rows:
            print(json.dumps(row, allow_nan=False))
    else:
        print(table())
    return EXIT_DETECTED if args.fail_on_detect and any(row["is_watermarked"] for row in rows) else EXIT_OK


def _whole_text(item: TextInput, max_bytes: int) -> str:
    """An input read whole (the key-set and segment reports tokenize it at once)."""
    try:
        return "".join(item.chunks(max_bytes))
    except UnicodeDecodeError as exc:  # the input changed since it was checked
        raise UsageError(f"{item.label} is not {item.encoding} text (byte offset {exc.start})") from None


def _ids_and_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
    """The text's token ids and, where the tokenizer gives them, each token's character span."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        enc = backend.encode(text, add_special_tokens=False)
        return list(enc.ids), [tuple(o) for o in enc.offsets]
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]), None


def _segments_table(reports: list[dict[str, Any]], regime: Regime) -> str:
    topo = regime.topo
    lines = [f"ChainMark segments: S={topo.S} {topo.name} (k={topo.k}, p0={topo.p0:.3g}), family-wise "
             f"alpha={regime.alpha:g} over {reports[0]['draws'] if reports else 0} re-drawn keys (window scan)",
             f"tokenizer {reports[0]['tokenizer'] if reports else '-'}, key fingerprint {regime.key_fingerprint}"]
    for r in reports:
        spans = r["segments"]
        lines.append(f"{_printable(r['file'])}: {r['n_tokens']} tokens, largest window z {r['statistic']:.2f}, "
                     f"p = {r['p_value']:.3g}, {len(spans)} watermarked span(s)")
        for sp in spans:
            chars = "" if sp["char_start"] is None else f"  chars {sp['char_start']}-{sp['char_end']}"
            lines.append(f"  tokens {sp['start']}-{sp['end']} ({sp['n_tokens']}){chars}  z {sp['z']:.2f}  "
                         f"p {sp['p_value']:.3g}")
    found = sum(r["is_watermarked"] for r in reports)
    lines.append(f"{found} of {len(reports)} input(s) hold a watermarked span")
    return "\n".join(lines)


def _score_input(item: TextInput, tokenizer: Any, key: bytes, regime: Regime, topo: Any,
                 max_bytes: int) -> Any:
    """One input scored in pieces (:func:`chainmark.auditor.stream.stream_text`): the fed detector, whose result is the
    verdict scoring the text whole would give, with its repeated-pair share and pairs' multiplicities."""
    from ..auditor.stream import UncuttableText, stream_text

    try:
        return stream_text(regime.text_preparation.apply_chunks(item.chunks(max_bytes)), tokenizer, regime.config(key),
                           alpha=regime.alpha, test=regime.effective_test,
                           count_pairs=regime.effective_test != "exact")
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

    def line(cells: list[str]) -> str:  # the file and the decision left-aligned, the numbers right-aligned
        return "  ".join(c.ljust(w) if i in (0, 7) else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    detected = sum(r["is_watermarked"] for r in rows)
    topo = regime.topo
    lines = [
        f"ChainMark audit: S={topo.S} {topo.name} (k={topo.k}, p0={topo.p0:.3g}), alpha={regime.alpha:g}, "
        + ("exact binomial test on a spanning forest, p < alpha" if regime.exact else
           f"threshold z > {regime.threshold:.3f}{', distinct pairs' if regime.distinct_pairs else ''}"),
        f"tokenizer {rows[0]['tokenizer']}, key fingerprint {regime.key_fingerprint}, text prepared: "
        f"{regime.text_preparation}",
        line(head), line(["-" * w for w in widths]), *(line(b) for b in body),
        f"{detected} of {len(rows)} input(s) detected as watermarked",
    ]
    return "\n".join(lines)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from .. import calibrate as cal

    s_star = _s_star(args.n, args.rho, args.alpha, args.k)
    if args.k >= s_star:
        raise UsageError(f"--k must be smaller than S* = {s_star}, got {args.k}")
    z_a = float(cal.z_alpha(args.alpha))
    z_pred = float(cal.predicted_z(args.n, args.rho, s_star, k=args.k))
    out = {"n": args.n, "rho": args.rho, "alpha": args.alpha, "k": args.k, "z_alpha": z_a, "S_star": s_star,
           "predicted_z": z_pred, "midpoint_threshold": float(cal.midpoint_threshold(args.rho, s_star, k=args.k)),
           "hoeffding_fpr_bound": float(cal.hoeffding_fpr_bound(args.n, args.rho, s_star, k=args.k))}
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
    from .. import calibrate as cal

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


def _cmd_recalibrate(args: argparse.Namespace) -> int:
    from .. import calibrate as cal

    label = "<stdin>" if args.null == "-" else args.null
    text = read_input(args.null, "<stdin>" if args.null == "-" else f"null file {args.null}", args.max_bytes,
                      not_text=": not JSON lines")
    # JSON Lines end lines with "\n" only; str.splitlines would also split at U+2028, U+0085 and
    # other characters a JSON string may hold raw (a "\r" before "\n" is JSON whitespace)
    values = _read_null_z(text.split("\n"), label)
    import numpy as np

    z = np.asarray(values, dtype=float)
    z_a = float(cal.z_alpha(args.alpha))
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, as a usage error
        try:
            threshold = float(cal.recalibrate(z, args.alpha, method=args.method))
        except ValueError as exc:  # too few null texts for alpha, or no spread
            raise UsageError(f"{label}: {exc}") from None
        out = {"alpha": args.alpha, "method": args.method, "n_null": int(z.size), "null_mean": float(z.mean()),
               "null_sd": float(z.std(ddof=1)), "z_alpha": z_a, "threshold": threshold,
               "fpr_at_z_alpha": float(np.mean(z > z_a)), "fpr_at_threshold": float(np.mean(z > threshold))}
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
        warn(f"only {z.size} null texts for alpha = {args.alpha:g}: the {1 - args.alpha:g} quantile "
             f"rests on {z.size * args.alpha:.1f} expected exceedances; {advice}")
    if args.method == "sd" and heavy:
        warn(f"the null z-scores are heavy-tailed (excess kurtosis {kurt:.1f}): the sd recipe assumes a "
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

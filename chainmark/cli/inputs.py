"""What the ``chainmark`` commands read, each checked before anything is scored: keys, tokenizers, texts (streamed
in bounded memory), regimes and key-audit certificates; every problem is a :class:`UsageError` (exit code 2)."""
from __future__ import annotations

import argparse
import os
import stat
import sys
from typing import Any, Iterable, Sequence, TextIO

from ..auditor.regime import Regime, parse_regime_text, published_regime_problems
from ..limits import MAX_REGIME_BYTES
from ..significance import DEFAULT_TEST
from .common import UsageError, warn

__all__ = ["TextInput", "detect_regime", "load_key", "load_regime", "load_tokenizer", "read_certificate",
           "read_input", "read_inputs", "regime_topology", "tokenizer_label", "warn_if_not_private"]


def load_key(path: str | None) -> bytes:
    """The key of ``--key-file`` (else the environment's), with a warning when it is weak or readable by others."""
    from ..auditor import keyfiles
    from ..keys import weak_key_reason

    try:
        key = keyfiles.load_key(path)
    except LookupError:
        raise UsageError("no key: pass --key-file KEY, or set CHAINMARK_KEY_FILE (a key file) "
                         "or CHAINMARK_KEY (hex)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    source = path if path is not None else os.environ.get(keyfiles.KEY_FILE_ENV) or None
    if source is not None:
        warn_if_not_private(source)
    weak = weak_key_reason(key)
    if weak:  # the auditor cannot choose the deployer's key, but should know
        warn(f"the key is weak: {weak}; a key this easy to guess lets anyone forge or remove the watermark "
             "(chainmark keygen writes 32 random bytes)")
    return key


def warn_if_not_private(path: str) -> None:
    """Warn (never fail) when a key file may be read by users other than its owner."""
    from ..auditor.keyfiles import key_file_is_private

    try:
        private = key_file_is_private(path)
    except OSError:
        return
    if not private:
        warn(f"key file {path} is readable by other users; run `chmod 600 {path}`")


def load_tokenizer(name: str | None, revision: str | None = None) -> Any:
    """The auditor's tokenizer (:mod:`chainmark.auditor.tokenizer`), the same in the model-free and the full install."""
    from ..auditor import tokenizer

    try:
        return tokenizer.load_tokenizer(name, revision=revision)
    except tokenizer.TokenizerLoadError as exc:
        raise UsageError(f"the tokenizer cannot be loaded.\n{exc}") from None


def tokenizer_label(name: str | None) -> str:
    """The tokenizer's name as outputs record it: the one given, else the default model's."""
    from ..auditor.tokenizer import default_model_name

    return name or default_model_name()


class TextInput:
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
            elif _regular_size(source) > max_bytes:  # refused before it is read
                raise UsageError(f"{label} is larger than {max_bytes} bytes (raise the limit with --max-bytes)")
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
        bounded = _Bounded(raw, max_bytes, self.label)
        while block := bounded.read(1 << 20):
            self.spool.write(block)

    def chunks(self, max_bytes: int) -> Iterable[str]:
        """The input's text, a megabyte at a time (decoding errors raise ``UnicodeDecodeError``)."""
        from ..auditor.stream import decoded_chunks

        if self.text is not None:
            yield self.text
        elif self.spool is not None:
            self.spool.seek(0)
            yield from decoded_chunks(self.spool, self.encoding)
        else:
            with open(self.source, "rb") as fh:
                yield from decoded_chunks(_Bounded(fh, max_bytes, self.label), self.encoding)


class _Bounded:
    """A binary file that refuses to yield more than ``max_bytes`` (standard input, a file growing while read)."""

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


def _regular_size(path: str) -> int:
    """The size of a regular file: a FIFO, socket or device is refused before it is opened (opening a FIFO with
    no writer blocks forever; standard input, '-', is the way to pipe text in)."""
    info = os.stat(path)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path} is not a regular file (a pipe, socket or device); pipe text in through "
                         "standard input with '-' instead")
    return info.st_size


def read_inputs(paths: Sequence[str], encoding: str, stdin: TextIO, max_bytes: int) -> list[TextInput]:
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
            inputs.append(TextInput(path, label, encoding, stdin, max_bytes))
        except UsageError as exc:
            problems.append(str(exc))
    if problems:
        raise UsageError("cannot audit these inputs (nothing was scored):\n  " + "\n  ".join(problems))
    return inputs


def read_input(source: str, label: str, max_bytes: int, too_large: str = " (raise the limit with --max-bytes)",
               not_text: str = "") -> str:
    """A file (or standard input for '-') as UTF-8 text of at most ``max_bytes`` bytes.

    Every problem is a :class:`UsageError` naming ``label``; a decoding error gives the byte offset, never the
    bytes (a key file passed by mistake must not be echoed).
    """
    if source == "":
        raise UsageError("an empty file name was given (an empty argument, e.g. an unset shell variable)")
    try:
        data = _read_stdin(max_bytes) if source == "-" else _read_file(source, max_bytes)
    except OSError as exc:
        raise _unreadable(exc, label) from None
    if len(data) > max_bytes:
        raise UsageError(f"{label} is larger than {max_bytes} bytes{too_large}")
    try:
        return data if isinstance(data, str) else data.decode("UTF-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{label} is not UTF-8 text (byte offset {exc.start}){not_text}") from None


def _read_file(path: str, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of a regular file: enough to tell that it is too large."""
    _regular_size(path)
    with open(path, "rb") as fh:
        return fh.read(max_bytes + 1)


def _read_stdin(max_bytes: int) -> bytes | str:
    """At most ``max_bytes + 1`` bytes of standard input; an in-memory text stream's text."""
    raw = getattr(sys.stdin, "buffer", None)
    return (sys.stdin if raw is None else raw).read(max_bytes + 1)


def load_regime(path: str) -> dict[str, Any]:
    """Read and check a regime file: bounded, UTF-8 JSON, every field valid (messages never quote its bytes)."""
    text = read_input(path, f"regime file {path}", MAX_REGIME_BYTES, too_large=": not a regime file",
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


def detect_regime(args: argparse.Namespace, document: dict[str, Any] | None) -> Regime:
    """The regime this audit applies (:meth:`Regime.resolve`): explicit options win over the published document,
    the document over the defaults. When nothing names a test it is the exact test, whose false-positive rate
    holds for every text; a published regime keeps its own (one without "test" means the paper's z-test, or the
    distinct test when an older one says "distinct_pairs": true), and a --threshold alone asks for the z statistic
    it applies to."""
    test = args.test
    if test is None and document is None and args.threshold is None:
        test = DEFAULT_TEST
    return Regime.resolve(document, S=args.S, topology=args.topology, alpha=args.alpha, threshold=args.threshold,
                          test=test, n_min=args.min_tokens, tokenizer=args.tokenizer,
                          tokenizer_revision=args.tokenizer_revision,
                          text_preparation=getattr(args, "text_preparation", None))


def regime_topology(regime: Regime) -> Any:
    """The regime's topology, with S bounded; a usage error if the two do not fit."""
    from ..checks import check_states

    try:
        check_states(regime.S)
        return regime.topo
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def read_certificate(path: str) -> dict[str, Any]:
    """A key-audit certificate (:mod:`chainmark.auditor.keyaudit`), read and checked."""
    from ..auditor import keyaudit

    try:
        return keyaudit.read_certificate(path)
    except OSError as exc:
        raise UsageError(f"cannot read the certificate {path} ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None

"""Score a text of any size in bounded memory, with the verdict that scoring it whole would give.

Tokenizing a text whole costs about 180 bytes of memory per byte of text (with the embedded tokenizer), so a large
text is cut into pieces of a quarter of a megabyte, tokenized a few at a time. Two things make the result exact:

- **cuts where the tokenizer cuts anyway**: after a newline between two non-space characters (else before a single
  space between two non-spaces), where byte-level pre-tokenizers (GPT-2's, Llama 3's, SmolLM2's) never join
  tokens. Each cut is also checked (a window around it must tokenize the same whole as in two halves), so a
  tokenizer that treats the place differently is caught; no checked cut within reach is an error, never a silent
  approximation.
- **running counters**: the transition between two pieces is scored like any other, and the tests' memory (the
  tokens seen, a flag per vocabulary entry; the pairs seen, one bit per possible pair for vocabularies up to
  65,536 tokens) runs across pieces.

:func:`detect_text_stream` returns what :func:`~chainmark.detection.detect_text` returns for the whole text (no
per-transition masks) with the text's repeated-pair share; :func:`stream_text` gives the fed detector, which with
``count_pairs`` also holds every pair's multiplicity, for the text's own null (:mod:`chainmark.auditor.repetition`).
"""
from __future__ import annotations

import codecs
import re
from typing import IO, Any, Iterable, Iterator

import numpy as np

from ..config import ChainMarkConfig, takes_config
from ..detection import DetectionResult, counts_result, detection_args, valid_transitions
from ..partition import as_token_array, states_of

__all__ = ["PIECE_CHARS", "StreamingDetector", "UncuttableText", "decoded_chunks", "detect_text_stream", "ids_batch",
           "ids_and_offsets", "stream_text", "text_pieces"]

#: Characters of text per piece (a quarter of a megabyte of ASCII), tokenized _PIECES_PER_BATCH at a time
#: (in parallel where the tokenizer can): a batch costs a few hundred MB of memory at most.
PIECE_CHARS = 1 << 18
_PIECES_PER_BATCH = 4
#: Characters on each side of a cut that are tokenized to check it.
_CHECK_WINDOW = 512
#: Largest vocabulary whose token pairs are tracked in a fixed bit table (V^2 bits: 512 MiB at 65,536).
_PAIR_BITMAP_MAX_VOCAB = 1 << 16
#: Largest vocabulary whose ids index tables directly (a byte per id: 16 MiB); past it, or without a vocabulary
#: size, the ids seen are kept in a sorted array.
_DENSE_IDS_MAX = 1 << 24
#: The most distinct token pairs whose multiplicities ``count_pairs`` keeps (16 bytes each: 32 MiB); a longer
#: text is still scored, without its own null.
_PAIR_COUNT_MAX = 2_000_000
#: Bytes read from a file at a time.
_READ_BYTES = 1 << 20

_CUT_PATTERNS = (
    re.compile(r"(?<=\S)\r?\n(?=\S)"),  # cut after a line break between two non-spaces
    re.compile(r"(?<=\S)(?= \S)"),  # cut before a single space between two non-spaces
)


class UncuttableText(ValueError):
    """Raised when a text offers no place to cut that keeps its tokens unchanged within the reach allowed."""


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def ids_batch(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of several pieces, tokenized in parallel where the tokenizer can (a ``tokenizers`` backend
    splits a batch over the machine's cores); one by one otherwise."""
    backend = getattr(tokenizer, "backend", None)  # chainmark.auditor.tokenizer.AuditTokenizer
    if backend is not None and hasattr(backend, "encode_batch"):
        encode = getattr(backend, "encode_batch_fast", None) or backend.encode_batch  # _fast: no offsets kept
        return [e.ids for e in encode(texts, add_special_tokens=False)]
    if getattr(tokenizer, "is_fast", False):  # a transformers fast tokenizer batches in Rust too
        return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    return [_ids(tokenizer, text) for text in texts]


def ids_and_offsets(tokenizer: Any, text: str) -> tuple[Any, list[tuple[int, int]] | None]:
    """A text's token ids and, where the tokenizer gives them (a ``tokenizers`` backend), each token's (start, end)
    character span."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        enc = backend.encode(text, add_special_tokens=False)
        return enc.ids, [tuple(o) for o in enc.offsets]
    return tokenizer(text, add_special_tokens=False)["input_ids"], None


def _cut_keeps_tokens(text: str, at: int, tokenizer: Any, window: int = _CHECK_WINDOW) -> bool:
    """Whether cutting ``text`` at ``at`` leaves its tokens unchanged, checked on a window around the cut."""
    lo, hi = max(0, at - window), min(len(text), at + window)
    return _ids(tokenizer, text[lo:hi]) == _ids(tokenizer, text[lo:at]) + _ids(tokenizer, text[at:hi])


def _safe_cut(text: str, tokenizer: Any, start: int, end: int, tries: int = 8) -> int | None:
    """The last place in ``[start, end]`` where ``text`` can be cut without changing its tokens, or None:
    newline cuts before space cuts, the ``tries`` last candidates of each kind checked."""
    end = min(end, len(text))
    for pattern in _CUT_PATTERNS:
        candidates = [m.end() for m in pattern.finditer(text, start, min(end + 2, len(text)))]
        for at in reversed([at for at in candidates if at <= end][-tries:]):
            if 0 < at < len(text) and _cut_keeps_tokens(text, at, tokenizer):
                return at
    return None


def _first_candidate(text: str, start: int) -> int:
    """Where the first few candidate cuts after ``start`` have been passed (the end of the search window)."""
    ends = [m.end() for pattern in _CUT_PATTERNS for m, _ in zip(pattern.finditer(text, start), range(8))]
    return max(ends, default=start)


def text_pieces(chunks: Iterable[str], tokenizer: Any, piece_chars: int = PIECE_CHARS,
                max_piece_chars: int | None = None) -> Iterator[str]:
    """The text of ``chunks`` (in any sizes) re-cut at checked cuts into pieces of about ``piece_chars``
    characters, so that tokenizing the pieces one by one gives the whole text's tokens.

    A text of at most ``piece_chars`` characters is one piece. :class:`UncuttableText` when no checked cut
    lies within ``max_piece_chars`` (16 pieces' worth by default).
    """
    limit = max_piece_chars if max_piece_chars is not None else 16 * piece_chars
    buffer = ""
    for chunk in chunks:
        buffer += chunk
        while len(buffer) > piece_chars:
            at = _safe_cut(buffer, tokenizer, piece_chars // 2, piece_chars)
            if at is None:  # none in the second half of a piece: the first one after it
                at = _safe_cut(buffer, tokenizer, piece_chars, _first_candidate(buffer, piece_chars))
            if at is None:
                if len(buffer) <= limit:
                    break  # read on: a cut may come later
                raise UncuttableText(
                    f"no place to cut the text without changing its tokens within {limit:,} characters "
                    "(a long run without line breaks or spaces, or a tokenizer that marks the start of every "
                    "text); score it whole instead")
            yield buffer[:at]
            buffer = buffer[at:]
    if buffer:
        yield buffer


def decoded_chunks(stream: IO[bytes], encoding: str = "utf-8", size: int = _READ_BYTES) -> Iterator[str]:
    """The text of a binary stream, decoded incrementally ``size`` bytes at a time.

    A ``UnicodeDecodeError`` carries the offset in the whole stream (its ``start``), never the bytes.
    """
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    offset = 0
    while True:
        data = stream.read(size)
        try:
            text = decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise UnicodeDecodeError(exc.encoding, exc.object, offset + exc.start, offset + exc.end,
                                     exc.reason) from None
        if text:
            yield text
        if not data:
            return
        offset += len(data)


def _lookup(table: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the sorted, distinct ``values`` go in the sorted ``table``, and which of them it holds already."""
    where = np.searchsorted(table, values)
    known = np.zeros(values.size, dtype=bool)
    inside = where < table.size
    known[inside] = table[where[inside]] == values[inside]
    return where, known


class StreamingDetector:
    """The detector's counters, fed token ids a piece at a time (:meth:`update`), read at the end (:meth:`result`).

    Equal to :func:`~chainmark.detection.detect` on the concatenated ids for every test; ``config`` is the
    :class:`~chainmark.config.ChainMarkConfig` it takes. With a ``vocab_size`` of at most 2**24 it keeps a byte
    per vocabulary entry (the tokens seen) and the pairs seen: a fixed table of one bit per possible pair up to
    65,536 tokens, else 8 bytes per distinct pair. Without one, or with a larger one, nothing is sized by the id
    range (ids near 2**40 would ask for a tebibyte): the distinct ids seen are kept sorted, each numbered in the
    order first seen (16 bytes per distinct id), and pairs are coded by those numbers. ``count_pairs`` keeps
    every pair's multiplicity too (the text's own null: :mod:`chainmark.auditor.repetition`).
    """

    @takes_config()
    def __init__(self, config: ChainMarkConfig, alpha: float = 0.01, test: str | None = None,
                 vocab_size: int | None = None, count_pairs: bool = False) -> None:
        self.vocab_size, self.count_pairs = vocab_size, count_pairs
        self._key = config.key
        self._topo, self.alpha, self.test = detection_args(config, alpha, test)
        self.n_tokens = self.n_scored = self.n_hits = self.distinct_pairs = 0
        self._last: np.ndarray | None = None  # the previous piece's last id (its transition to this piece)
        self._dense = vocab_size is not None and vocab_size <= _DENSE_IDS_MAX
        # dense: a flag per vocabulary entry, pairs coded a * V + b; sparse: the distinct ids seen (sorted) and
        # their numbers (in the order first seen), pairs coded by number, the base widened as numbers grow
        self._seen_tokens = np.zeros(vocab_size if self._dense else 0, dtype=bool)
        self._seen_ids = np.zeros(0, dtype=np.int64)
        self._numbers = np.zeros(0, dtype=np.int64)
        self._seen_pairs = np.zeros(0, dtype=np.int64)
        self._pair_codes = np.zeros(0, dtype=np.int64)  # with count_pairs: the pairs seen, sorted, and how often
        self._pair_mult = np.zeros(0, dtype=np.int64)
        self.pairs_counted = bool(count_pairs)  # False once the text passes _PAIR_COUNT_MAX distinct pairs
        self._width = vocab_size if self._dense else 0  # the pair code's base: a * width + b
        # the bit table of pairs seen (at most 512 MiB, 288 MiB for the embedded tokenizer) is allocated lazily
        # by the system: only pages a pair lands on take memory, and it never grows, whatever the text's length
        small = self._dense and vocab_size <= _PAIR_BITMAP_MAX_VOCAB
        self._pair_bits = np.zeros((vocab_size ** 2 + 7) // 8, dtype=np.uint8) if small else None

    def update(self, token_ids: Any) -> None:
        """Add the next piece's token ids."""
        ids = as_token_array(token_ids, self.vocab_size)
        if ids.size == 0:
            return
        if ids.dtype != np.int64:
            raise ValueError("token ids above 2**63 - 1 cannot be scored in pieces")
        self.n_tokens += int(ids.size)
        ext = ids if self._last is None else np.concatenate([self._last, ids])
        self._last = ids[-1:].copy()
        if ext.size < 2:
            return
        valid = valid_transitions(states_of(ext, self._key, self._topo.S, self.vocab_size), self._topo)
        if self._dense:
            codes = ext[:-1] * self._width + ext[1:]
            new_tokens = self._new_tokens(ext) if self.test == "exact" else None
        else:
            numbers, new_tokens = self._number(ext)
            codes = numbers[:-1] * self._width + numbers[1:]
        new_pairs = self._new_pairs(codes)
        if self.count_pairs:
            self._count(codes)
        if self.test == "z":
            self.n_scored += int(valid.size)
        else:  # the exact test scores transitions into new tokens, the distinct-pair test new pairs
            scored = new_tokens[1:] if self.test == "exact" else new_pairs
            self.n_scored += int(np.count_nonzero(scored))
            valid = valid & scored
        self.n_hits += int(np.count_nonzero(valid))

    def _new_tokens(self, ids: np.ndarray) -> np.ndarray:
        """Mask over ``ids`` (dense ids): True at a token's first occurrence in the whole text so far."""
        uniq, first = np.unique(ids, return_index=True)
        fresh = ~self._seen_tokens[uniq]
        mask = np.zeros(ids.size, dtype=bool)
        mask[first[fresh]] = True
        self._seen_tokens[uniq] = True
        return mask

    def _number(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each id's number (ids of any size: no table over their range), and the mask over ``ids`` that is True
        at a token's first occurrence in the whole text so far; widens the pair codes' base as numbers grow."""
        uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        where, known = _lookup(self._seen_ids, uniq)
        numbers = np.empty(uniq.size, dtype=np.int64)
        numbers[known] = self._numbers[where[known]]
        fresh = ~known
        count = self._numbers.size
        numbers[fresh] = np.arange(count, count + int(np.count_nonzero(fresh)), dtype=np.int64)
        if fresh.any():  # two sorted runs: the stable sort merges them in linear time
            merged = np.concatenate([self._seen_ids, uniq[fresh]])
            order = np.argsort(merged, kind="stable")
            self._seen_ids = merged[order]
            self._numbers = np.concatenate([self._numbers, numbers[fresh]])[order]
            self._widen(self._numbers.size)
        mask = np.zeros(ids.size, dtype=bool)
        mask[first[fresh]] = True
        return numbers[inverse.ravel()], mask

    def _widen(self, size: int) -> None:
        """Re-code the pairs seen so far with a base of at least ``size`` (the sparse codes' numbers)."""
        if size <= self._width:
            return
        width = max(size, 2 * self._width)
        if width > 3_037_000_499:  # width**2 must stay below 2**63
            raise ValueError("more than three billion distinct token ids cannot be scored in pieces")
        if self._seen_pairs.size:
            a, b = np.divmod(self._seen_pairs, self._width)
            self._seen_pairs = np.sort(a * width + b)
        if self._pair_codes.size:  # the recoding keeps the order: a * width + b is increasing in (a, b)
            a, b = np.divmod(self._pair_codes, self._width)
            self._pair_codes = a * width + b
        self._width = width

    def _new_pairs(self, codes: np.ndarray) -> np.ndarray:
        """Mask over the transitions coded ``codes``: True where the pair appears for the first time in the text."""
        uniq, first = np.unique(codes, return_index=True)
        if self._pair_bits is not None:  # one bit per possible pair: memory fixed by the vocabulary
            byte, bit = uniq >> 3, (uniq & 7).astype(np.uint8)
            known = ((self._pair_bits[byte] >> bit) & 1).astype(bool)
            np.bitwise_or.at(self._pair_bits, byte[~known], np.left_shift(1, bit[~known]).astype(np.uint8))
        else:  # a sorted array of the pairs seen: memory grows with the distinct pairs
            known = _lookup(self._seen_pairs, uniq)[1]
            if not known.all():  # two sorted runs: the stable sort merges them in linear time
                self._seen_pairs = np.sort(np.concatenate([self._seen_pairs, uniq[~known]]), kind="stable")
        mask = np.zeros(codes.size, dtype=bool)
        mask[first[~known]] = True
        self.distinct_pairs += int(np.count_nonzero(~known))
        return mask

    def _count(self, codes: np.ndarray) -> None:
        """Add a piece's pairs to the multiplicities (sorted codes): existing pairs in place, new ones inserted;
        past :data:`_PAIR_COUNT_MAX` distinct pairs the counts are dropped (:attr:`pairs_counted` turns False)."""
        if not self.pairs_counted:
            return
        uniq, counts = np.unique(codes, return_counts=True)
        where, known = _lookup(self._pair_codes, uniq)
        self._pair_mult[where[known]] += counts[known]
        if self._pair_codes.size + int(np.count_nonzero(~known)) > _PAIR_COUNT_MAX:
            self.pairs_counted = False  # memory stays flat: the text's own null is not computed for it
            self._pair_codes = self._pair_mult = np.zeros(0, dtype=np.int64)
            return
        self._pair_codes = np.insert(self._pair_codes, where[~known], uniq[~known])
        self._pair_mult = np.insert(self._pair_mult, where[~known], counts[~known])

    def pair_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The text's distinct pairs (as token labels a, b: ids, or numbers in order of first appearance) and
        their multiplicities, as :func:`chainmark.auditor.repetition.pair_counts` gives them (needs ``count_pairs``,
        and a text of at most :data:`_PAIR_COUNT_MAX` distinct pairs: see :attr:`pairs_counted`)."""
        if not self.count_pairs:
            raise ValueError("this StreamingDetector was made without count_pairs=True: it kept no multiplicities")
        if not self.pairs_counted:
            raise ValueError(f"the text has more than {_PAIR_COUNT_MAX:,} distinct token pairs: their "
                             "multiplicities were not kept (memory stays flat)")
        if self._width == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        a, b = np.divmod(self._pair_codes, self._width)
        return a, b, self._pair_mult.copy()

    @property
    def n_transitions(self) -> int:
        """Transitions read so far (n - 1)."""
        return max(self.n_tokens - 1, 0)

    @property
    def repeated_pair_share(self) -> float:
        """Share of the transitions whose token pair the text has already used (0 for fewer than two tokens)."""
        n = self.n_transitions
        return 0.0 if n == 0 else 1.0 - self.distinct_pairs / n

    def result(self) -> DetectionResult:
        """The verdict on everything fed so far, as :func:`~chainmark.detection.detect` gives it (without masks)."""
        return counts_result(self.n_tokens, self.n_scored, self.n_hits, self._topo, self.alpha, self.test)


@takes_config()
def detect_text_stream(chunks: Iterable[str], tokenizer: Any, config: ChainMarkConfig, alpha: float = 0.01,
                       test: str | None = None, vocab_size: int | None = None,
                       piece_chars: int | None = None) -> tuple[DetectionResult, float]:
    """:func:`~chainmark.detection.detect_text` for a text given in chunks of any size, in bounded memory: the
    result (equal to scoring the whole text; masks left empty) and the text's repeated-pair share.

    ``piece_chars`` defaults to :data:`PIECE_CHARS`, ``vocab_size`` to ``len(tokenizer)``. :class:`UncuttableText`
    when the text cannot be cut safely (see :func:`text_pieces`).
    """
    scorer = stream_text(chunks, tokenizer, config, alpha, test, vocab_size, piece_chars)
    return scorer.result(), scorer.repeated_pair_share


@takes_config()
def stream_text(chunks: Iterable[str], tokenizer: Any, config: ChainMarkConfig, alpha: float = 0.01,
                test: str | None = None, vocab_size: int | None = None, piece_chars: int | None = None,
                count_pairs: bool = False) -> StreamingDetector:
    """The :class:`StreamingDetector` fed with a text given in chunks (what :func:`detect_text_stream` reads);
    with ``count_pairs`` it also holds the pairs' multiplicities, for the text's own null."""
    scorer = StreamingDetector(config, alpha, test, len(tokenizer) if vocab_size is None else vocab_size, count_pairs)
    batch: list[str] = []
    for piece in text_pieces(chunks, tokenizer, PIECE_CHARS if piece_chars is None else piece_chars):
        batch.append(piece)
        if len(batch) == _PIECES_PER_BATCH:
            _score_batch(scorer, tokenizer, batch)
            batch = []
    _score_batch(scorer, tokenizer, batch)
    return scorer


def _score_batch(scorer: StreamingDetector, tokenizer: Any, pieces: list[str]) -> None:
    for ids in ids_batch(tokenizer, pieces):
        scorer.update(np.asarray(ids, dtype=np.int64))

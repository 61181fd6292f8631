"""The attack playground: edit a watermarked text in the browser and watch the detector answer.

Detection is model-free, so it can run inside a static page: a tokenizer, a
state table and a count. This module packs the three things the page needs,
at build time, from the package itself:

* the **tokenizer** of the reference run's model (SmolLM2's byte-level BPE):
  the id of every single byte, the merges in rank order and the special
  tokens, read from its ``tokenizer.json``;
* the **state table** under the reference run's key for S = 5, one digit per
  vocabulary entry, computed by :func:`chainmark.partition.state_table`; the
  key itself never enters the page (it is public anyway, derived from a
  published label, but the page has no use for it);
* a menu of **sample texts** picked from whatever the reference run has
  stored so far: a few ChainMark texts per domain, one unwatermarked text and
  one KGW text for contrast.

The JavaScript side (``chainmark/data/playground.js``) re-implements the
pre-tokenizer, the BPE merge loop and the detector; the test suite checks in
headless Chromium that it gives the same ids as ``tokenizer.encode`` on more
than a thousand texts and the same n, phi, z and verdict as
:func:`chainmark.detection`. Everything is inlined into one HTML block, so the
playground works from ``file://``, from any static server and in a notebook,
with nothing fetched from anywhere.
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from chainmark.config import ChainMarkConfig, takes_config
from chainmark.partition import state_table
from cmlab.teaching.plots import STATE_COLOURS
from cmlab.teaching.widgets import BrowserAsset, browser_block, standalone_page

#: The reference run's state count (the only S its ChainMark texts carry a signal for).
PLAYGROUND_S = 5
#: Significance level of the verdict the playground shows.
_PLAYGROUND_ALPHA = 0.01
#: Edit budget of the challenges, as a share of the original tokens.
_CHALLENGE_BUDGET = 0.20
#: ChainMark texts per domain in the sample menu.
_PER_DOMAIN = 2
#: Shortest reference text (in tokens) worth offering as a sample.
_MIN_SAMPLE_TOKENS = 100
#: Texts whose distinct 4-gram share reaches this are preferred as samples (the small model loops).
_MIN_DISTINCT_SHARE = 0.6
#: Length classes (tokens) of the window scan's precomputed thresholds, and the re-drawn keys behind each.
_SEGMENT_LENGTHS = (64, 128, 256, 512, 1024, 2048)
_SEGMENT_DRAWS = 999


class PlaygroundError(ValueError):
    """The tokenizer or the data cannot be packed for the browser; the message says why."""


# ---------------------------------------------------------------------------
# the tokenizer, packed for the browser
# ---------------------------------------------------------------------------
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte 0..255 as one printable character.

    Printable Latin-1 bytes stand for themselves; the others are shifted to
    code points from 256 up, in byte order. Byte-level BPE vocabularies spell
    their tokens in this alphabet (a leading space is ``Ġ``).
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in keep]
    table = {b: chr(b) for b in keep}
    table.update({b: chr(256 + i) for i, b in enumerate(shifted)})
    return table


def _tokenizer_json(tokenizer: Any) -> dict[str, Any]:
    """The ``tokenizer.json`` of a fast (Rust-backed) tokenizer, as a dictionary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise PlaygroundError("the playground needs a fast tokenizer (one with backend_tokenizer); "
                              f"got {type(tokenizer).__name__}")
    return json.loads(backend.to_str())


def _is_noop_normalizer(normalizer: Mapping[str, Any] | None) -> bool:
    """``None``, or a ``Sequence`` of no-op normalizers (some transformers releases save ``Sequence([])``)."""
    if normalizer is None:
        return True
    return normalizer.get("type") == "Sequence" and all(_is_noop_normalizer(n) for n in normalizer.get("normalizers", []))


def _check_supported(spec: Mapping[str, Any]) -> None:
    """Only what the JavaScript re-implements: no normalizer, GPT-2 byte-level split, plain BPE.

    Settings that cannot change a byte-level BPE's output are accepted: an
    empty ``Sequence`` normalizer, and ``byte_fallback``/``unk_token`` when
    every byte of the byte-level alphabet is in the vocabulary (neither can
    then fire). transformers 5.17 builds the embedded model's tokenizer with
    both, and this vocabulary lacks some bytes, so that build is refused: it
    would turn them into ``<|endoftext|>`` where the page drops them (the
    package therefore ships its own copy, :data:`chainmark.auditor.tokenizer.EMBEDDED_TOKENIZER`).
    """
    model, pre = spec.get("model") or {}, spec.get("pre_tokenizer") or {}
    problems = []
    if not _is_noop_normalizer(spec.get("normalizer")):
        problems.append(f"a normalizer ({spec['normalizer'].get('type')})")
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True) or pre.get("add_prefix_space"):
        problems.append(f"the pre-tokenizer {json.dumps(pre)} (need ByteLevel, use_regex, no prefix space)")
    vocab = model.get("vocab") or {}
    every_byte = all(ch in vocab for ch in _bytes_to_unicode().values())
    if model.get("type") != "BPE" or model.get("dropout") or model.get("continuing_subword_prefix") \
            or model.get("end_of_word_suffix") or model.get("ignore_merges"):
        problems.append("a BPE model with dropout, affixes or ignore_merges")
    if (model.get("byte_fallback") or model.get("unk_token") is not None) and not every_byte:
        problems.append("byte fallback or an unknown token with bytes missing from the vocabulary")
    for token in spec.get("added_tokens", []):
        if token.get("normalized") or token.get("lstrip") or token.get("rstrip") or token.get("single_word"):
            problems.append(f"the added token {token['content']!r} with normalisation or stripping")
    if problems:
        raise PlaygroundError("the browser tokenizer does not implement " + "; ".join(problems))


def _merge_pairs(merges: Sequence[Any]) -> list[tuple[str, str]]:
    """Merges as (left, right) pairs; older tokenizer.json files write them as 'left right'."""
    return [tuple(m) if isinstance(m, (list, tuple)) else tuple(m.split(" ", 1)) for m in merges]


def _tokenizer_payload(tokenizer: Any) -> dict[str, Any]:
    """What the browser needs to tokenize exactly like ``tokenizer``: bytes, merges, special tokens.

    * ``base``: the id of each byte value 0..255 (-1 where the vocabulary
      lacks it: such bytes are dropped, as the Rust BPE does with no unknown
      token);
    * ``merges``: for each merge in rank order the ids of its left part, its
      right part and its result, little-endian unsigned integers of
      ``id_bytes`` bytes, base64-encoded;
    * ``added``: the special tokens, which are split out of the text before
      anything else.
    """
    spec = _tokenizer_json(tokenizer)
    _check_supported(spec)
    vocab: dict[str, int] = spec["model"]["vocab"]
    added = [{"id": int(t["id"]), "content": t["content"]} for t in spec.get("added_tokens", [])]
    size = max([*vocab.values(), *(t["id"] for t in added)]) + 1
    alphabet = _bytes_to_unicode()
    base = [int(vocab.get(alphabet[b], -1)) for b in range(256)]
    triples = []
    for left, right in _merge_pairs(spec["model"]["merges"]):
        if left not in vocab or right not in vocab or left + right not in vocab:
            raise PlaygroundError(f"the merge {left!r} + {right!r} names a token outside the vocabulary")
        triples.append((vocab[left], vocab[right], vocab[left + right]))
    id_bytes = 2 if size <= 1 << 16 else 4
    packed = np.asarray(triples, dtype="<u2" if id_bytes == 2 else "<u4").tobytes()
    return {"vocab_size": int(size), "base": base, "id_bytes": id_bytes,
            "merges": base64.b64encode(packed).decode("ascii"), "n_merges": len(triples), "added": added}


def _tokenizer_json_digest(tokenizer: Any) -> str:
    """Short SHA-256 of the tokenizer's ``tokenizer.json`` (names the tokenizer on the page)."""
    return hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode("utf-8")).hexdigest()[:12]


def _state_payload(key: Any, vocab_size: int, S: int = PLAYGROUND_S) -> str:
    """The state of every token id under ``key``, one character ``'0' + state`` per id.

    Computed by :func:`chainmark.partition.state_table`; S may be at most 10
    so that every state is one decimal digit.
    """
    if not 2 <= S <= 10:
        raise PlaygroundError(f"the playground ships one digit per state, so S must lie in [2, 10], got {S}")
    table = state_table(key, vocab_size, S)
    return (table.astype(np.uint8) + ord("0")).tobytes().decode("ascii")


# ---------------------------------------------------------------------------
# sample texts
# ---------------------------------------------------------------------------
def _segment_thresholds(S: int = PLAYGROUND_S, alpha: float = _PLAYGROUND_ALPHA, draws: int = _SEGMENT_DRAWS,
                       lengths: Sequence[int] = _SEGMENT_LENGTHS, seed: int = 0) -> dict[str, Any]:
    """The window scan's thresholds (:func:`chainmark.auditor.segments._spans_above`) for texts of each length class.

    For each length n, the largest window z of ``draws`` texts whose n states are all independent and uniform
    (a text without repeated tokens under a random key); the threshold is the one
    :func:`chainmark.auditor.segments.detect_segments` would use with that null, so a text of at most n tokens and no
    repeats gets a span with probability at most ``alpha``. For a real text, which repeats tokens, it is an
    approximation (the page says so); ``chainmark detect --segments`` simulates the text's own null.
    """
    from chainmark.auditor.segments import scan_maximum, window_lengths
    from chainmark.detection import valid_transitions
    from chainmark.topology import resolve_topology

    topo = resolve_topology("clockwork", S)
    rng = np.random.default_rng(seed)
    thresholds = []
    for n in lengths:
        maxima = np.sort(scan_maximum(window_lengths(n - 1), topo.p0)(
            valid_transitions(rng.integers(0, S, size=(draws, n)), topo)))
        thresholds.append(float(maxima[maxima.size - math.floor(alpha * (draws + 1) + 1e-9)]))
    return {"min_window": 16, "lengths": [int(n) for n in lengths], "thresholds": thresholds, "draws": int(draws),
            "alpha": float(alpha)}


@dataclass
class _Sample:
    """One text of the menu: where it comes from and the text itself."""

    label: str
    kind: str  # chainmark | none | kgw | human
    text: str
    domain: str = ""
    prompt: str = ""
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "text": self.text, "domain": self.domain,
                "prompt": self.prompt, "source": self.source}


def _n_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def _distinct_share(ids: Sequence[int], n: int = 4) -> float:
    """Share of distinct token n-grams among all n-grams of a text (1 = no phrase repeats)."""
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def _ranked(records: Iterable[Mapping[str, Any]], tokenizer: Any) -> list[Mapping[str, Any]]:
    """Records long enough to play with, varied ones first, each group in prompt order.

    The small model often loops; a text that repeats itself makes a poor
    playground, so texts whose distinct 4-gram share reaches
    :data:`_MIN_DISTINCT_SHARE` come first.
    """
    scored = []
    for r in records:
        text = r.get("output") or ""
        ids = tokenizer.encode(text, add_special_tokens=False) if text.strip() else []
        if len(ids) >= _MIN_SAMPLE_TOKENS:
            scored.append((_distinct_share(ids) < _MIN_DISTINCT_SHARE, int(r.get("prompt_index", 0)), r))
    return [r for *_, r in sorted(scored, key=lambda t: t[:2])]


def _sample_from(record: Mapping[str, Any], kind: str, label: str) -> _Sample:
    return _Sample(label=label, kind=kind, text=record["output"], domain=record.get("domain", ""),
                  prompt=record.get("prompt", ""), source=f"reference run, {record.get('id', '')}")


def _human_sample(tokenizer: Any, max_tokens: int = 200) -> _Sample:
    """A paragraph of the Python Language Reference (human-written, so unwatermarked), cut at a sentence end."""
    from cmlab.harness.corpora import python_reference_documents

    for doc in python_reference_documents():
        sentences = re.split(r"(?<=[.!?])\s+", " ".join(doc.text.split()))
        text = ""
        for sentence in sentences:
            longer = f"{text} {sentence}".strip()
            if _n_tokens(tokenizer, longer) > max_tokens:
                break
            text = longer
        if _n_tokens(tokenizer, text) >= _MIN_SAMPLE_TOKENS:
            return _Sample(label=f"Human-written: Python reference, '{doc.name}'", kind="human", text=text,
                          source="Python Language Reference (PSF License)")
    raise PlaygroundError("no paragraph of the Python Language Reference is long enough for a sample")


def _pick_samples(records: Iterable[Mapping[str, Any]], tokenizer: Any, per_domain: int = _PER_DOMAIN) -> list[_Sample]:
    """The sample menu from the reference run's head-to-head records, whatever is stored so far.

    Per domain ``per_domain`` ChainMark texts of at least
    :data:`_MIN_SAMPLE_TOKENS` tokens (varied ones first, then in prompt
    order); then one unwatermarked text (method ``none``) and one KGW text
    chosen the same way over all domains. A missing domain or method is
    skipped; without any unwatermarked record a human-written paragraph
    takes its place, so the forging challenge always has a text to start
    from.
    """
    by_method: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for r in records:
        by_method.setdefault(str(r.get("method", "")), {}).setdefault(str(r.get("domain", "")), []).append(r)
    samples: list[_Sample] = []
    for domain, group in sorted(by_method.get("chainmark", {}).items()):
        for r in _ranked(group, tokenizer)[:per_domain]:
            samples.append(_sample_from(r, "chainmark", f"ChainMark · {domain} · prompt {r.get('prompt_index')}"))
    contrast = {"none": "No watermark (plain sampling)", "kgw": "KGW watermark (another scheme)"}
    for method, title in contrast.items():
        ranked = _ranked([r for group in by_method.get(method, {}).values() for r in group], tokenizer)
        if ranked:
            chosen = ranked[0]
            samples.append(_sample_from(chosen, method, f"{title} · {chosen.get('domain')} · "
                                                        f"prompt {chosen.get('prompt_index')}"))
        elif method == "none":
            samples.append(_human_sample(tokenizer))
    return samples


def _reference_samples(tokenizer: Any, per_domain: int = _PER_DOMAIN) -> list[_Sample]:
    """:func:`_pick_samples` over the embedded model's reference run (an empty run gives the human text only)."""
    from cmlab.harness.reference.read import load_texts
    from cmlab.harness.reference.store import reference_dir
    from chainmark.auditor.tokenizer import DEFAULT_MODEL

    try:
        records = load_texts("head_to_head", reference_dir(DEFAULT_MODEL))
    except FileNotFoundError:
        records = []
    return _pick_samples(records, tokenizer, per_domain)


# ---------------------------------------------------------------------------
# what random and targeted attacks need
# ---------------------------------------------------------------------------
@takes_config()
def attack_bounds(token_ids: Sequence[int], config: ChainMarkConfig,
                  alpha: float = _PLAYGROUND_ALPHA) -> dict[str, Any]:
    """How much editing a text needs before the detector stops flagging it under ``config`` (the playground's is
    ``ChainMarkConfig(key, S=PLAYGROUND_S)``).

    * ``random_delta``: the substitution rate at which the average random
      attack brings z down to z_alpha, from z0 (1 - delta)^2 = z_alpha
      (0 when the text is not flagged to begin with);
    * ``perfect_edits`` / ``perfect_delta``: the fewest token substitutions
      that can flip the verdict. One substitution takes part in two
      transitions, so it removes at most two legal steps, and the verdict
      flips once the legal count falls to p0 m + z_alpha sqrt(p0 (1 - p0) m).
      An attacker who can see the states reaches this bound by replacing
      tokens whose two steps are both legal with tokens that break both;
    * ``forge_edits`` / ``forge_delta``: for a text that is not flagged, the
      fewest substitutions that can make it flagged (each adds at most two
      legal steps).

    The playground's JavaScript shows the same two numbers for the text in the box.
    """
    from chainmark.calibrate import z_alpha
    from chainmark.detection import detect

    det = detect(list(token_ids), config, alpha=alpha, test="z")
    za, p0, m = z_alpha(alpha), config.topo.p0, det.n_scored
    allowed = za * math.sqrt(p0 * (1.0 - p0) * m)
    excess = det.n_hits - p0 * m
    perfect = max(0, math.ceil((excess - allowed) / 2)) if m else 0
    forge = max(0, math.floor((allowed - excess) / 2) + 1) if m and not det.is_watermarked else 0
    n = det.n_tokens
    return {"n_tokens": n, "z": det.z, "flagged": det.is_watermarked,
            "random_delta": 1.0 - math.sqrt(za / det.z) if det.z > za else 0.0,
            "perfect_edits": perfect, "perfect_delta": perfect / n if n else 0.0,
            "forge_edits": forge, "forge_delta": forge / n if n else 0.0}


# ---------------------------------------------------------------------------
# the block
# ---------------------------------------------------------------------------
#: The playground's code (:class:`Playground`); MathJax leaves its block alone.
_PLAYGROUND = BrowserAsset("playground", "ChainMarkPlayground", "cm-playground tex2jax_ignore mathjax_ignore",
                          "playground")


class Playground:
    """The attack playground as one self-contained HTML+JavaScript block.

    ``data`` holds the packed tokenizer, the state table and the samples;
    displaying the object in a notebook renders the block, :meth:`page`
    wraps it in a complete HTML document.
    """

    def __init__(self, data: dict[str, Any], title: str = "Attack playground: edit the text, watch the detector",
                 note: str = ""):
        self.data = data
        self.title = title
        self.note = note

    @property
    def samples(self) -> list[dict[str, Any]]:
        return self.data["samples"]

    @property
    def html(self) -> str:
        return browser_block(_PLAYGROUND, "cm-playground", self.title, self.note, self.data)

    def _repr_html_(self) -> str:
        return self.html

    def page(self) -> str:
        """A complete standalone HTML page holding only the playground."""
        return standalone_page(self.title, self.html)

    def __repr__(self) -> str:
        return f"Playground({len(self.samples)} samples, S={self.data['S']})"


@takes_config()
def _build_playground(tokenizer: Any, config: ChainMarkConfig, samples: Sequence[_Sample],
                     alpha: float = _PLAYGROUND_ALPHA, note: str = "") -> Playground:
    """Pack a tokenizer, the states under ``config`` (its key and S; the page's detector walks the clockwork)
    and ``samples`` into a :class:`Playground`. The key is used to compute the state table and is not stored.
    """
    from chainmark.checks import check_alpha

    if config.topo.name != "clockwork":
        raise ValueError(f"the playground's detector walks the clockwork; got the {config.topo.name} topology")
    S = config.S
    tok = _tokenizer_payload(tokenizer)
    data = {"S": int(S), "alpha": check_alpha(alpha), "budget": _CHALLENGE_BUDGET, "colours": STATE_COLOURS,
            "tokenizer": tok, "states": _state_payload(config.key, tok["vocab_size"], S),
            "samples": [s.to_dict() for s in samples], "segments": _segment_thresholds(S, alpha)}
    return Playground(data, note=note)


def attack_playground(tokenizer: Any = None, per_domain: int = _PER_DOMAIN) -> Playground:
    """The playground of the book: the reference run's tokenizer, key (as states) and texts.

    ``tokenizer`` defaults to the embedded SmolLM2-135M-Instruct tokenizer,
    the one the reference run wrote its texts with, whatever model the
    notebook loaded.
    """
    from chainmark.auditor.tokenizer import load_tokenizer
    from cmlab.harness.reference.protocol import PROTOCOL, reference_key
    from chainmark.auditor.tokenizer import DEFAULT_MODEL

    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(DEFAULT_MODEL)
    samples = _reference_samples(tokenizer, per_domain)
    note = (f"Reference run key (public, derived from a published label) as a state table, "
            f"S = {PROTOCOL.S}, clockwork, α = {_PLAYGROUND_ALPHA:g}; tokenizer {DEFAULT_MODEL} "
            f"({len(tokenizer):,} tokens, tokenizer.json {_tokenizer_json_digest(tokenizer)}), "
            "run in your browser.")
    return _build_playground(tokenizer, ChainMarkConfig(reference_key(), S=PROTOCOL.S), samples, note=note)


__all__ = ["PLAYGROUND_S", "Playground", "PlaygroundError", "attack_bounds", "attack_playground"]

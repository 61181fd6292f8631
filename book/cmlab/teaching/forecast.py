"""What a chapter's long steps will cost on this machine: expected time and peak memory, shown before they run.

:func:`expect_generation` times two short generations of the loaded model
(one new token, then nine: the difference is the cost of a decoding step,
the first is the prompt's), multiplies by the steps' batches and tokens, and
adds the memory a batch needs (weights, KV cache, logits) next to the device's
free memory. It is a forecast from a measurement on this machine, for this
model, device, dtype and scale, not a promise: sampling stops early at an
end-of-text token, and the watermark adds a little work per step.
"""
from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from cmlab.harness.models import DTYPE_BYTES, device_memory, last_loaded, memory_needed
from chainmark.auditor.tokenizer import DEFAULT_MODEL

__all__ = ["Expectation", "Step", "duration", "step_seconds",
           "expect_generation"]

#: New tokens of the long probe: the per-token cost is (long - short) / (_PROBE_TOKENS - 1).
_PROBE_TOKENS = 9
#: Prompt length of the probe, in tokens (the book's prompts are chat messages of about this size).
_PROBE_PROMPT_TOKENS = 48
#: The watermark's and sampling's share on top of the model's own step (chapter 4 measures the step).
_STEP_OVERHEAD = 1.1


@dataclass(frozen=True)
class Step:
    """One long step of a chapter: a label, how many texts, at most how many new tokens each.

    ``kind`` is ``"generate"`` (decode ``new_tokens`` tokens per text) or
    ``"score"`` (one teacher-forced pass over the prompt and ``new_tokens``
    tokens of text: self-perplexity, SWEET's detector).
    """

    label: str
    texts: int
    new_tokens: int
    kind: str = "generate"


@dataclass
class Expectation:
    """The forecast for a chapter's long steps, with what it was measured from."""

    steps: list[Step]
    seconds: list[float]
    peak_bytes: int
    free_bytes: int | None
    free_what: str
    batch_size: int
    prefill_seconds: float
    token_seconds: float
    device: str
    dtype: str
    model: str
    notes: list[str] = field(default_factory=list)

    @property
    def total_seconds(self) -> float:
        return float(sum(self.seconds))

    def rows(self) -> list[tuple[str, int, int, str]]:
        return [(s.label, s.texts, s.new_tokens, duration(sec)) for s, sec in zip(self.steps, self.seconds)]

    def summary(self) -> str:
        free = "unknown" if self.free_bytes is None else f"{self.free_bytes / 1e9:.1f} GB {self.free_what}"
        return (f"expected on this machine ({self.model}, {self.device}, {self.dtype}, batches of {self.batch_size}): "
                f"about {duration(self.total_seconds)} for these steps, peak memory about "
                f"{self.peak_bytes / 1e9:.1f} GB ({free})")

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"  {label}: {texts} texts x <= {tokens} tokens: {took}" for label, texts, tokens, took in self.rows()]
        return "\n".join(lines + self.notes)

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's plain-text display
        printer.text(str(self))

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{h}</th>" for h in
                       ("long step", "texts", "tokens each (at most)", "expected time"))
        body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                       for row in self.rows())
        notes = "".join(f"<br>{html.escape(n)}" for n in self.notes)
        return (f"<div class='chainmark-estimate'><p>{html.escape(self.summary())}. Measured now: the prompt "
                f"{self.prefill_seconds:.2f} s and {1000 * self.token_seconds:.0f} ms per new token for a batch."
                f"{notes}</p><table><tr>{head}</tr>{body}</table></div>")


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 07 min``: a time as people write it (never ``2 min 60 s``)."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes} min {rest:02d} s"
    minutes = int(round(seconds / 60))
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest:02d} min"


def _probe(model: Any, tokenizer: Any, batch: int, new_tokens: int) -> float:
    """Seconds for one greedy generation of ``new_tokens`` tokens from a batch of equal-length prompts."""
    import torch

    vocab = int(model.get_output_embeddings().weight.shape[0])
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids = [i for i in range(min(vocab, len(tokenizer))) if i not in special][100:100 + _PROBE_PROMPT_TOKENS]
    if len(ids) < _PROBE_PROMPT_TOKENS:  # a very small vocabulary: repeat what there is
        ids = (ids * _PROBE_PROMPT_TOKENS)[:_PROBE_PROMPT_TOKENS]
    device = next(model.parameters()).device
    input_ids = torch.tensor([ids] * batch, device=device)
    mask = torch.ones_like(input_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _model_name(model: Any) -> str:
    loaded = last_loaded()
    name = loaded.get("name") if loaded.get("model_id") == str(id(model)) else None
    name = name or str(getattr(model.config, "name_or_path", "") or "model")
    return "SmolLM2-135M-Instruct (embedded)" if name == DEFAULT_MODEL else name


def step_seconds(step: Step, batch: int, prefill_seconds: float, token_seconds: float,
                 prompt_tokens: int = 64) -> float:
    """The forecast model's time for one step: its batches, each one prompt pass and one decoding step per token.

    ``prefill_seconds`` is a batch's pass over ``prompt_tokens`` tokens of
    prompt and ``token_seconds`` a batch's decoding step; a ``"score"`` step
    is one teacher-forced pass over prompt and text, which costs what the
    prompt's pass costs per token. The watermark's and sampling's share
    (ten percent) is added on top.
    """
    if not step.texts:
        return 0.0
    if step.kind == "score":
        per_batch = prefill_seconds * (prompt_tokens + step.new_tokens) / max(prompt_tokens, 1)
    else:
        per_batch = prefill_seconds + token_seconds * step.new_tokens
    return math.ceil(step.texts / max(batch, 1)) * per_batch * _STEP_OVERHEAD


def expect_generation(model: Any, tokenizer: Any, steps: Sequence[Step | tuple[str, int, int]],
                      batch_size: int, prompt_tokens: int = 64) -> Expectation:
    """Measure this model here and forecast the time and peak memory of ``steps`` (label, texts, tokens[, kind]).

    Call it before a chapter's long steps so a reader sees, for their model,
    device and scale, what they are about to start (and can stop before it).
    The torch random state is left as it was.
    """
    import torch

    steps = [s if isinstance(s, Step) else Step(*s) for s in steps]  # (label, texts, tokens[, kind])
    if not steps:
        raise ValueError("expect_generation needs at least one step (label, texts, new tokens)")
    for s in steps:
        if s.texts < 0 or s.new_tokens < 0:
            raise ValueError(f"a step's texts and new tokens must be >= 0, got {s}")
        if s.kind not in ("generate", "score"):
            raise ValueError(f"a step's kind is 'generate' or 'score', got {s.kind!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    batch = min(batch_size, max(s.texts for s in steps) or 1)
    device = next(model.parameters()).device
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        _probe(model, tokenizer, batch, 1)  # warm-up: first calls pay for allocations and kernel choice
        short = _probe(model, tokenizer, batch, 1)
        long = _probe(model, tokenizer, batch, _PROBE_TOKENS)
    token_seconds = max(long - short, 0.0) / (_PROBE_TOKENS - 1)
    # the one-token probe is the prompt's pass plus one token; on a loaded machine the long probe can come out so
    # slow that its per-token cost nears or passes the short probe's: the prompt's pass is then at least half of it
    prompt_pass = max(short - token_seconds, 0.5 * short)
    prefill_seconds = prompt_pass * max(prompt_tokens, 1) / _PROBE_PROMPT_TOKENS
    seconds = [step_seconds(s, batch, prefill_seconds, token_seconds, prompt_tokens) for s in steps]
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    config = model.config
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(config, "num_key_value_heads", 0) or heads)
    head_dim = int(getattr(config, "head_dim", 0) or (getattr(config, "hidden_size", 0) // max(heads, 1)))
    length = prompt_tokens + max(s.new_tokens for s in steps)
    kv_bytes = 2 * layers * kv_heads * head_dim * batch * length * DTYPE_BYTES.get(dtype, 4)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    logits_bytes = 3 * batch * vocab * 4  # the step's float32 logits, the processor's copy, the probabilities
    weights = sum({p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}.values())
    peak = memory_needed(weights) + kv_bytes + logits_bytes
    free, what = device_memory(str(device))
    expectation = Expectation(steps=steps, seconds=seconds, peak_bytes=int(peak), free_bytes=free, free_what=what,
                              batch_size=batch, prefill_seconds=prefill_seconds, token_seconds=token_seconds,
                              device=str(device), dtype=dtype, model=_model_name(model))
    if free is not None and peak > free:
        expectation.notes.append(f"warning: the peak is above the free memory; lower the batch size "
                                 f"(now {batch}) or the scale before running the long steps")
    return expectation

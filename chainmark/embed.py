"""Watermark embedding: a ``transformers`` LogitsProcessor that forces the walk.

At a gated position only tokens whose state is a legal successor of the
previous token's state stay available, and the most likely of them is forced
(the paper's Algorithm 1). At other positions the model's distribution is left
untouched and sampled (T = 0.7 by default). If the allowed tokens carry no
probability mass at all, the position is sampled freely.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from .keys import key_fingerprint
from .gates import Gate, check_gate_kind, check_rho, gate_signal
from .partition import Key, check_num_states, key_bytes, state_table
from .settings import GENERATION_SEED
from .topology import Topology, TopologyLike, resolve_topology


@dataclass(frozen=True)
class ChainMarkConfig:
    """A validated watermark configuration. The key never appears in its repr."""

    key: Key = field(repr=False)
    S: int = 5
    rho: float = 0.5
    gate: str = "high_entropy"
    topology: TopologyLike = "clockwork"

    def __post_init__(self) -> None:
        key_bytes(self.key)  # TypeError for anything but bytes/str
        if len(key_bytes(self.key)) == 0:
            raise ValueError("key must not be empty")
        object.__setattr__(self, "S", check_num_states(self.S))
        object.__setattr__(self, "rho", check_rho(self.rho))
        check_gate_kind(self.gate)
        if self.gate == "all" and self.rho != 1.0:
            raise ValueError(f"gate 'all' watermarks every position, so rho must be 1, got {self.rho}")
        topo = resolve_topology(self.topology, self.S)
        object.__setattr__(self, "topology", topo)

    @property
    def topo(self) -> Topology:
        return self.topology  # type: ignore[return-value]

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.key)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description with the key's fingerprint, never the key."""
        return {"key_fingerprint": self.fingerprint, "S": self.S, "rho": self.rho,
                "gate": self.gate, "topology": self.topo.name, "k": self.topo.k}

    def default_gate(self) -> Gate:
        """The gate when no calibration is needed (rho = 0 or 1, or the 'all' gate)."""
        if self.gate == "all" or self.rho in (0.0, 1.0):
            return Gate.calibrate(self.gate, self.rho, [])
        raise ValueError(
            f"gate {self.gate!r} at rho = {self.rho} needs a threshold tau: calibrate it on a "
            "pilot with chainmark.embed.calibrate_gate(...) and pass gate=..."
        )


class SignalRecorder(LogitsProcessor):
    """Records the gate signal (entropy and top-2 gap) at every step; changes nothing."""

    def __init__(self) -> None:
        self.entropy: list[torch.Tensor] = []
        self.gap: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.entropy.append(gate_signal(scores, "high_entropy").detach().cpu())
        self.gap.append(gate_signal(scores, "top2_gap").detach().cpu())
        return scores


class ChainMarkLogitsProcessor(LogitsProcessor):
    """Forces a legal next state at gated positions (masked argmax).

    ``vocab_size`` is the width of the model's logits (``model.config.vocab_size``),
    which may exceed ``len(tokenizer)``; the state table is built once for it
    and kept on ``device``. ``gated`` and ``forced`` record, per step, which
    rows were gated and which were actually forced (gated with allowed mass).
    """

    def __init__(self, config: ChainMarkConfig, gate: Gate | None = None,
                 vocab_size: int | None = None, device: Any = None):
        if not isinstance(config, ChainMarkConfig):
            raise TypeError(f"config must be a ChainMarkConfig, got {type(config).__name__}")
        self.config = config
        self.gate = gate if gate is not None else config.default_gate()
        if self.gate.kind != config.gate:
            raise ValueError(f"gate kind {self.gate.kind!r} does not match config.gate {config.gate!r}")
        self.vocab_size = vocab_size
        self.device = device
        self._table: torch.Tensor | None = None
        self._allowed: torch.Tensor | None = None
        self.gated: list[torch.Tensor] = []
        self.forced: list[torch.Tensor] = []
        if vocab_size is not None:
            self._build(vocab_size, device or "cpu")

    def _build(self, vocab_size: int, device: Any) -> None:
        table = state_table(self.config.key, vocab_size, self.config.S)
        self._table = torch.tensor(table, dtype=torch.long, device=device)
        self._allowed = torch.as_tensor(self.config.topo.matrix, dtype=torch.bool, device=device)
        self.vocab_size = vocab_size

    def reset(self) -> None:
        """Forget the recorded steps (before reusing the processor)."""
        self.gated.clear()
        self.forced.clear()

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        V = scores.shape[-1]
        if self._table is None or self._table.device != scores.device:
            self._build(self.vocab_size or V, scores.device)
        if self._table.numel() != V:
            raise ValueError(
                f"the state table covers {self._table.numel()} token ids but the logits have {V}; "
                "pass vocab_size=model.config.vocab_size (the width of the logits)"
            )
        gate_flags = self.gate(scores)
        prev_state = self._table[input_ids[:, -1]]
        allowed_tokens = self._allowed[prev_state][:, self._table]  # (batch, V) bool
        masked = scores.masked_fill(~allowed_tokens, float("-inf"))
        has_mass = torch.isfinite(masked).any(dim=-1)
        force = gate_flags & has_mass
        self.gated.append(gate_flags.detach().cpu())
        self.forced.append(force.detach().cpu())
        if not bool(force.any()):
            return scores
        choice = masked.argmax(dim=-1, keepdim=True)
        forced_rows = torch.full_like(scores, float("-inf")).scatter(1, choice, scores.gather(1, choice))
        return torch.where(force[:, None], forced_rows, scores)


def calibrate_gate(model: Any, tokenizer: Any, prompts: Sequence[str], kind: str, rho: float,
                   max_new_tokens: int = 64, **kwargs: Any) -> Gate:
    """Calibrate a gate's threshold on an unwatermarked pilot run (quantile matching)."""
    check_gate_kind(kind)
    rho = check_rho(rho)
    if kind == "all" or rho in (0.0, 1.0):
        return Gate.calibrate(kind, rho, [])
    pilot = generate(model, tokenizer, prompts, config=None, max_new_tokens=max_new_tokens, **kwargs)
    signal = np.concatenate([np.asarray(g.gap if kind == "top2_gap" else g.entropy) for g in pilot])
    return Gate.calibrate(kind, rho, signal)


@dataclass
class Generation:
    """One generated text with its per-position trace (prompt stripped)."""

    prompt: str
    token_ids: list[int]
    text: str
    entropy: list[float]
    gap: list[float]
    gated: list[bool]
    forced: list[bool]
    states: list[int] | None
    prev_state: int | None

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def rho_realised(self) -> float:
        """Share of generated positions that were forced by the watermark."""
        return float(np.mean(self.forced)) if self.forced else 0.0

    def to_record(self) -> dict[str, Any]:
        """JSON-ready record (no key: states are derived data, not the key)."""
        return {
            "prompt": self.prompt, "output": self.text, "token_ids": self.token_ids,
            "entropy": [round(float(h), 5) for h in self.entropy],
            "gated": [int(g) for g in self.gated], "forced": [int(f) for f in self.forced],
            "rho_realised": self.rho_realised,
        }


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), tokenizer):
        eos = getattr(source, "eos_token_id", None)
        if eos is None:
            continue
        ids.update([eos] if isinstance(eos, int) else list(eos))
    return ids


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    config: ChainMarkConfig | None = None,
    gate: Gate | None = None,
    max_new_tokens: int = 128,
    batch_size: int = 8,
    temperature: float = 0.7,
    seed: int = GENERATION_SEED,
    chat: bool = True,
    extra_processors: Sequence[LogitsProcessor] = (),
    min_new_tokens: int | None = None,
) -> list[Generation]:
    """Generate from each prompt, watermarked with ``config`` (or not, if None).

    Prompts are user messages rendered through the chat template (``chat=True``)
    or raw text. Batches are left-padded; batch ``b`` is sampled with seed
    ``seed + b``. ``extra_processors`` run after ChainMark (used for baselines).
    Returns one :class:`Generation` per prompt, in order.
    """
    from .models import chat_prompt

    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not one string")
    if not prompts:
        return []
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    device = next(model.parameters()).device
    vocab_size = int(model.get_output_embeddings().weight.shape[0])
    eos = _eos_ids(model, tokenizer)
    table = state_table(config.key, vocab_size, config.S) if config is not None else None
    results: list[Generation] = []
    for b in range(0, len(prompts), batch_size):
        batch = list(prompts[b:b + batch_size])
        texts = [chat_prompt(tokenizer, p) if chat else p for p in batch]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not chat).to(device)
        recorder = SignalRecorder()
        processors: list[LogitsProcessor] = [recorder]
        cm = None
        if config is not None:
            cm = ChainMarkLogitsProcessor(config, gate, vocab_size=vocab_size, device=device)
            processors.append(cm)
        processors.extend(extra_processors)
        torch.manual_seed(seed + b // batch_size)
        with torch.no_grad():
            out = model.generate(
                **enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                logits_processor=LogitsProcessorList(processors),
                pad_token_id=tokenizer.pad_token_id,
            )
        new = out[:, enc["input_ids"].shape[1]:].cpu().numpy()
        steps = len(recorder.entropy)
        ent = torch.stack(recorder.entropy, dim=1).numpy() if steps else np.zeros((len(batch), 0))
        gap = torch.stack(recorder.gap, dim=1).numpy() if steps else np.zeros((len(batch), 0))
        if cm is not None and steps:
            gated = torch.stack(cm.gated, dim=1).numpy()
            forced = torch.stack(cm.forced, dim=1).numpy()
        else:
            gated = forced = np.zeros((len(batch), steps), dtype=bool)
        last_prompt = enc["input_ids"][:, -1].cpu().numpy()
        for i, prompt in enumerate(batch):
            row = new[i].tolist()
            n = next((j for j, t in enumerate(row) if t in eos), len(row))
            ids = row[:n]
            results.append(Generation(
                prompt=prompt,
                token_ids=ids,
                text=tokenizer.decode(ids, skip_special_tokens=True),
                entropy=ent[i, :n].tolist(),
                gap=gap[i, :n].tolist(),
                gated=gated[i, :n].astype(bool).tolist(),
                forced=forced[i, :n].astype(bool).tolist(),
                states=table[ids].tolist() if table is not None else None,
                prev_state=int(table[last_prompt[i]]) if table is not None else None,
            ))
    return results

"""Watermark embedding: a ``transformers`` LogitsProcessor that forces the walk.

At a gated position only tokens whose state is a legal successor of the previous token's state stay available, and
the most likely of them is forced (the paper's Algorithm 1). At other positions the model's distribution is left
untouched and sampled (T = 0.7 by default). If the allowed tokens carry no probability mass at all (every allowed
logit is -inf, e.g. because an earlier processor removed them), the position is sampled freely.

Speed matters because the processor runs once per generated token. Four choices keep it cheap:

* the tokens allowed after each state are listed once, as an ``S x L`` table of token ids (``L`` ~ k V / S), so the
  masked argmax reads only the candidate logits instead of masking the whole ``batch x V`` matrix;
* the gate signal (entropy, and the top-2 gap when asked for) is computed once per step and shared with the trace
  recorder, sharing one softmax (:func:`chainmark.gate_signals.entropy_signals` with ``fused=True``, or
  :func:`chainmark.gate_signals.row_signals` row by row);
* scratch memory is reused from step to step (fresh vocabulary-sized temporaries cost more than the arithmetic on
  them);
* on the CPU each row is handled while it sits in the cache (signal, masked argmax and output row from one read of
  the logits); on a GPU the whole batch is processed at once, with no host synchronisation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from .config import GENERATION_SEED, ChainMarkConfig
from .gates import Gate, check_gate_kind
from .checks import check_int, check_options, check_rho
from .partition import state_table
from .gate_signals import Workspace, entropy_signals, row_maxima, row_signals
from .topology import Topology

__all__ = ["ChainMarkLogitsProcessor", "Generation", "Sampling", "calibrate_gate", "chat_prompt",
           "generate", "logits_width", "pilot_signal"]

#: Above this many (state, candidate) entries the candidate table would be too
#: large (huge S with large k); the processor then masks row by row instead.
_MAX_CANDIDATE_ENTRIES = 1 << 24


def chat_prompt(tokenizer: Any, user_message: str, system: str | None = None) -> str:
    """Render one user message through the tokenizer's chat template.

    >>> text = cm.chat_prompt(tokenizer, 'Why is the sky blue?')
    >>> 'Why is the sky blue?' in text
    True
    """
    if not isinstance(user_message, str) or not user_message.strip():
        raise ValueError("user_message must be a non-empty string")
    messages = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": user_message})
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return user_message  # base models without a template get the raw text


class _SignalRecorder(LogitsProcessor):
    """Records the gate signal (entropy and top-2 gap) at every step; changes nothing.

    Used for unwatermarked runs (pilots, baselines); a watermarked run records
    the same signals inside :class:`ChainMarkLogitsProcessor` so that they are
    computed only once per step. Values stay on the logits' device until
    :meth:`stacked` moves them to the CPU, once.
    """

    def __init__(self) -> None:
        self.entropy: list[torch.Tensor] = []
        self.gap: list[torch.Tensor] = []
        self._workspace = Workspace()

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        signals = entropy_signals(scores, gap=True, fused=True, workspace=self._workspace)
        self.entropy.append(signals.entropy)
        self.gap.append(signals.gap)  # type: ignore[arg-type]
        return scores

    def stacked(self) -> tuple[np.ndarray, np.ndarray]:
        """``(entropy, gap)`` as ``(batch, steps)`` NumPy arrays."""
        return _stack(self.entropy), _stack(self.gap)


def _stack(steps: list[torch.Tensor], dtype: Any = None) -> np.ndarray:
    if not steps:
        return np.zeros((0, 0), dtype=dtype or np.float32)
    return torch.stack(steps, dim=1).cpu().numpy()


def _candidate_table(table: np.ndarray, topology: Topology) -> np.ndarray:
    """Token ids allowed after each state, as an ``S x L`` int64 array.

    Row ``s`` lists, in increasing order, every token whose state is a
    successor of ``s``; shorter rows are padded by repeating their first id,
    which cannot change a maximum (and ``torch.max`` returns the first, i.e.
    the smallest, maximising id, as a full-width masked argmax does).
    """
    S = topology.S
    order = np.argsort(table, kind="stable")
    bounds = np.searchsorted(table[order], np.arange(S + 1))
    members = [order[bounds[s]:bounds[s + 1]] for s in range(S)]
    rows = [np.sort(np.concatenate([members[t] for t in topology.successors(s)])) for s in range(S)]
    width = max(1, max(len(r) for r in rows))
    out = np.empty((S, width), dtype=np.int64)
    for s, r in enumerate(rows):
        if len(r) == 0:  # no token of any successor state: a tiny vocabulary
            raise ValueError(
                f"no token of the vocabulary has a state that may follow state {s}; "
                "use a larger vocabulary or fewer states S"
            )
        out[s, :len(r)] = r
        out[s, len(r):] = r[0]
    return out


class ChainMarkLogitsProcessor(LogitsProcessor):
    """Forces a legal next state at gated positions (masked argmax).

    ``vocab_size`` is the width of the model's logits
    (``model.get_output_embeddings().weight.shape[0]``), which may exceed
    ``len(tokenizer)``; the state table and the per-state candidate lists are
    built once for it and kept on ``device`` (moved once if the logits arrive
    on another device). Without ``vocab_size`` they are built on the first
    call from the logits' width.

    Gated rows come back with exactly one finite logit (the forced token);
    other rows come back unchanged. ``gated`` and ``forced`` record, per step,
    which rows the gate opened and which were actually forced (gated and the
    allowed set had a finite logit). With ``record_signals=True`` the step's
    entropy and top-2 gap are kept as well (computed once, shared with the
    gate). Recorded tensors stay on the device.

    >>> from transformers import LogitsProcessorList
    >>> config = cm.ChainMarkConfig(b'example key', S=5, rho=1.0, gate='all')  # every step forced
    >>> processor = cm.ChainMarkLogitsProcessor(config, vocab_size=cm.logits_width(model))
    >>> enc = tokenizer([cm.chat_prompt(tokenizer, 'Why is the sky blue?')], return_tensors='pt')
    >>> out = model.generate(**enc, logits_processor=LogitsProcessorList([processor]), do_sample=False,
    ...                      max_new_tokens=16)
    >>> new = out[0, enc['input_ids'].shape[1]:].tolist()
    >>> cm.detect(new, config).phi  # every transition legal
    1.0
    """

    def __init__(self, config: ChainMarkConfig, gate: Gate | None = None,
                 vocab_size: int | None = None, device: Any = None,
                 record_signals: bool = False):
        if not isinstance(config, ChainMarkConfig):
            raise TypeError(f"config must be a ChainMarkConfig, got {type(config).__name__}")
        self.config = config
        self.gate = config.gate_for(gate)  # refuses a gate that is not shown to open config.rho
        if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer))
                                       or vocab_size < 1):
            raise ValueError(f"vocab_size must be a positive integer (the logits' width), got {vocab_size!r}")
        self.vocab_size = int(vocab_size) if vocab_size is not None else None
        self.device = torch.device(device) if device is not None else None
        self.record_signals = bool(record_signals)
        #: on the CPU, do the step row by row while each row is in cache
        #: (same results as the batched path, faster); False forces batching
        self.row_path = True
        self._table: torch.Tensor | None = None
        self._table_list: list[int] = []
        self._candidates: torch.Tensor | None = None
        self._successors: torch.Tensor | None = None
        self._workspace = Workspace()
        self.gated: list[torch.Tensor] = []
        self.forced: list[torch.Tensor] = []
        self.entropy: list[torch.Tensor] = []
        self.gap: list[torch.Tensor] = []
        if self.vocab_size is not None:
            self._build(self.vocab_size, self.device or torch.device("cpu"))

    # ---- set-up (once) ------------------------------------------------
    def _build(self, vocab_size: int, device: torch.device) -> None:
        """State table and candidate lists for ``vocab_size`` ids, on ``device``."""
        table = state_table(self.config.key, vocab_size, self.config.S)
        topo = self.config.topo
        self._table = torch.from_numpy(np.array(table)).to(device)
        self._table_list = np.asarray(table).tolist()
        self._successors = torch.from_numpy(np.array(topo.matrix)).to(device)
        k = topo.k or int(topo.matrix.sum(axis=1).max())
        if k * vocab_size <= _MAX_CANDIDATE_ENTRIES * 0.9:
            self._candidates = torch.from_numpy(_candidate_table(table, topo)).to(device)
        else:
            self._candidates = None
        self.vocab_size = vocab_size
        self.device = torch.device(device)

    def _ready(self, scores: torch.Tensor) -> torch.Tensor:
        width = scores.shape[-1]
        if self._table is None:
            self._build(self.vocab_size or width, scores.device)
        elif self._table.device != scores.device:
            self._build(self.vocab_size or width, scores.device)
        table = self._table
        assert table is not None
        if table.numel() != width:
            raise ValueError(
                f"the state table covers {table.numel()} token ids but the logits have {width}; "
                "pass vocab_size equal to the width of the model's logits "
                "(model.get_output_embeddings().weight.shape[0]), not len(tokenizer)"
            )
        return table

    def reset(self) -> None:
        """Forget the recorded steps (before reusing the processor)."""
        for steps in (self.gated, self.forced, self.entropy, self.gap):
            steps.clear()

    # ---- one decoding step --------------------------------------------
    def _step_rows(self, input_ids: torch.Tensor, scores: torch.Tensor, table: torch.Tensor,
                   want_signals: bool, want_gap: bool) -> torch.Tensor:
        """CPU path: the same step, one row at a time while the row is in cache.

        The batch is copied once; each row's logits are then read while
        they sit in cache for the gate signal and, at gated rows, the masked
        argmax, and a forced row is overwritten with -inf but the forced
        token. Scalars (previous states, flags) stay Python values.
        Results equal the batched path's (the entropy is summed in another
        order, so it can differ in the last float32 digits).
        """
        assert self._candidates is not None
        ws, cand, kind = self._workspace, self._candidates, self.gate.kind
        x = scores if scores.dtype == torch.float32 else scores.float()
        n, V = x.shape
        shifted, e = ws.get("row_shifted", x, (V,)), ws.get("row_exp", x, (V,))
        values = ws.get("row_values", x, (cand.shape[1],))
        prev = self._table_list  # state of every token id, as a Python list (cheap scalar reads)
        last = input_ids[:, -1].tolist()
        out = scores.clone()  # one copy of the batch; forced rows are overwritten below
        if want_signals:  # the rows' maxima (and where, for the top-2 gap) in one batched pass
            tops, top_idx = row_maxima(x, want_gap)
        entropy: list[float] = []
        gap: list[float] = []
        gated: list[bool] = []
        forced: list[bool] = []
        for r in range(n):
            row = x[r]
            g_open, force = True, False
            if want_signals:
                h, g = row_signals(row, tops[r], shifted, e, top_idx[r] if top_idx is not None else None)
                entropy.append(h)
                if want_gap:
                    gap.append(g)
                if kind != "all":
                    g_open = bool(self.gate.flags_from_signal(g if kind == "top2_gap" else h))
            if g_open:
                ids = cand[prev[int(last[r])]]
                torch.index_select(row, 0, ids, out=values)
                best, where = values.max(dim=0)
                if float(best) > -math.inf:  # else: no allowed mass, sample freely
                    force = True
                    token = int(ids[int(where)])
                    out[r].fill_(float("-inf"))
                    out[r, token] = scores[r, token]
            gated.append(g_open)
            forced.append(force)
        device = scores.device
        self.gated.append(torch.tensor(gated, dtype=torch.bool, device=device))
        self.forced.append(torch.tensor(forced, dtype=torch.bool, device=device))
        if self.record_signals:
            self.entropy.append(torch.tensor(entropy, dtype=torch.float32, device=device))
            self.gap.append(torch.tensor(gap, dtype=torch.float32, device=device))
        return out

    def _masked_argmax(self, scores: torch.Tensor, prev_state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Best allowed token per row and its logit (-inf when none is allowed), batched."""
        if self._candidates is not None:
            ws = self._workspace
            shape = (scores.shape[0], self._candidates.shape[1])
            cand = torch.index_select(self._candidates, 0, prev_state,
                                      out=ws.get("cand", self._candidates, shape))  # (batch, L) ids
            values = torch.gather(scores, 1, cand, out=ws.get("values", scores, shape))
            best, where = values.max(dim=-1)
            return cand.gather(1, where.unsqueeze(1)).squeeze(1), best
        assert self._successors is not None and self._table is not None
        allowed = self._successors[prev_state][:, self._table]  # (batch, V), rare path
        best, choice = scores.masked_fill(~allowed, float("-inf")).max(dim=-1)
        return choice, best

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        table = self._ready(scores)
        kind = self.gate.kind
        want_signals = kind != "all" or self.record_signals
        want_gap = self.record_signals or kind == "top2_gap"
        if self._candidates is not None and scores.device.type == "cpu" and self.row_path:
            return self._step_rows(input_ids, scores, table, want_signals, want_gap)
        # batched path (GPU, or a vocabulary too large for candidate lists)
        prev_state = table[input_ids[:, -1]]
        x = scores if scores.dtype == torch.float32 else scores.float()
        signals = (entropy_signals(x, gap=want_gap, fused=True, workspace=self._workspace) if want_signals else None)
        choice, best = self._masked_argmax(x, prev_state)
        if self.record_signals:
            assert signals is not None
            self.entropy.append(signals.entropy)
            self.gap.append(signals.gap)  # type: ignore[arg-type]
        if kind == "all" or signals is None:
            flags = torch.ones(scores.shape[0], dtype=torch.bool, device=scores.device)
        else:
            flags = self.gate.flags_from_signal(signals.gap if kind == "top2_gap" else signals.entropy)
        force = flags & (best > float("-inf"))  # fallback: no allowed mass -> sample freely
        self.gated.append(flags)
        self.forced.append(force)
        # forced rows: -inf everywhere but the chosen token; other rows: an
        # exact copy (x + 0 == x, x + -inf == -inf). Writing a row's own logit
        # back at `choice` leaves an unforced row unchanged.
        row_bias = torch.zeros(force.shape, dtype=scores.dtype, device=scores.device)
        row_bias.masked_fill_(force, float("-inf"))
        out = scores + row_bias.unsqueeze(1)
        choice = choice.unsqueeze(1)
        return out.scatter_(1, choice, scores.gather(1, choice))


def pilot_signal(model: Any, tokenizer: Any, prompts: Sequence[str], kind: str = "high_entropy", *,
                 sampling: Sampling | None = None) -> np.ndarray:
    """The gate's signal at every position of an unwatermarked pilot run.

    Entropy for the entropy gates, the top-2 gap for ``top2_gap``; pooled over
    all prompts. The pilot samples as ``sampling`` says (default: ``Sampling(max_new_tokens=64)``, the
    :func:`generate` defaults otherwise). Keep the result to calibrate several budgets from one pilot with
    :meth:`Gate.calibrate`.

    >>> signal = cm.embed.pilot_signal(model, tokenizer, ['Tell me about owls.'],
    ...                                sampling=cm.Sampling(max_new_tokens=16))
    >>> signal.shape[0] <= 16
    True
    """
    check_gate_kind(kind)
    pilot = generate(model, tokenizer, prompts, config=None, sampling=_pilot_sampling(sampling))
    return np.concatenate([np.asarray(g.gap if kind == "top2_gap" else g.entropy, dtype=float) for g in pilot])


def _pilot_sampling(sampling: Sampling | None) -> Sampling:
    """A pilot run's sampling: ``sampling``, or the defaults with 64 new tokens."""
    if sampling is None:
        return Sampling(max_new_tokens=PILOT_TOKENS)
    return check_options(Sampling, sampling, "sampling")


def calibrate_gate(model: Any, tokenizer: Any, prompts: Sequence[str], kind: str, rho: float, *,
                   sampling: Sampling | None = None) -> Gate:
    """Calibrate a gate's threshold on an unwatermarked pilot run (quantile matching).

    The pilot generates from ``prompts`` without a watermark, records the
    gate's signal at every position, and picks tau so that a share ``rho`` of
    those positions would be gated. The pilot samples as ``sampling`` says (a :class:`Sampling`; default:
    64 new tokens a prompt).

    >>> pilot = ['Why is the sky blue?', 'Tell me about owls.']  # unwatermarked prompts like the deployment's
    >>> gate = cm.calibrate_gate(model, tokenizer, pilot, 'high_entropy', rho=0.5,
    ...                          sampling=cm.Sampling(max_new_tokens=16))
    >>> gate.kind, gate.tau > 0
    ('high_entropy', True)
    """
    check_gate_kind(kind)
    rho = check_rho(rho)
    if kind == "all" or rho in (0.0, 1.0):
        return Gate.calibrate(kind, rho, [])
    signal = pilot_signal(model, tokenizer, prompts, kind, sampling=sampling)
    return Gate.calibrate(kind, rho, signal)


@dataclass
class Generation:
    """One generated text with its per-position trace (prompt and EOS stripped).

    Position ``i`` of ``entropy``, ``gap``, ``gated``, ``forced`` and
    ``states`` describes the step that produced ``token_ids[i]``;
    ``prev_state`` is the state of the prompt's last token (where the walk
    starts) and ``prompt_ids`` the exact prompt tokens the model saw.
    ``config`` is the configuration it was watermarked with (None: not
    watermarked), so ``detect(generation)`` needs no key; it holds the key
    and is never written to a record.
    """

    prompt: str
    token_ids: list[int]
    text: str
    entropy: list[float]
    gap: list[float]
    gated: list[bool]
    forced: list[bool]
    states: list[int] | None
    prev_state: int | None
    prompt_ids: list[int] = field(default_factory=list, repr=False)
    config: ChainMarkConfig | None = field(default=None, repr=False, compare=False)

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def rho_realised(self) -> float:
        """Share of generated positions that were forced by the watermark."""
        return float(np.mean(self.forced)) if self.forced else 0.0


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), tokenizer):
        eos = getattr(source, "eos_token_id", None)
        if eos is None:
            continue
        ids.update([eos] if isinstance(eos, int) else list(eos))
    return ids


def logits_width(model: Any) -> int:
    """Width of the model's logits (may exceed ``len(tokenizer)``).

    >>> cm.logits_width(model) >= len(tokenizer)
    True
    """
    head = model.get_output_embeddings()
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


@dataclass(frozen=True)
class Sampling:
    """How :func:`generate` samples, as transformers' ``GenerationConfig`` does for its ``generate``.

    At most ``max_new_tokens`` new tokens a text (at least ``min_new_tokens``), temperature ``temperature``
    (no top-k, no top-p), batches of ``batch_size`` prompts, batch ``b`` seeded ``seed + b``. One object
    says it, for :func:`generate` and for every runner of the book's lab; change a field with
    ``dataclasses.replace``. A bad field is refused when the object is built, naming it.

    >>> from dataclasses import replace
    >>> how = cm.Sampling(max_new_tokens=64, seed=7)
    >>> how.temperature, replace(how, batch_size=4).batch_size
    (0.7, 4)
    """

    max_new_tokens: int = 128
    min_new_tokens: int | None = None
    temperature: float = 0.7
    seed: int = GENERATION_SEED
    batch_size: int = 8

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "batch_size"):  # numpy integers are kept as Python ints
            object.__setattr__(self, name, check_int(getattr(self, name), name, 1))
        if self.min_new_tokens is not None:
            object.__setattr__(self, "min_new_tokens", check_int(self.min_new_tokens, "min_new_tokens", 0))
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)):
            raise TypeError(f"seed must be an integer, got {type(self.seed).__name__}")
        object.__setattr__(self, "seed", int(self.seed))



#: New tokens a prompt of a gate's pilot run (:func:`calibrate_gate`, :func:`pilot_signal`) by default.
PILOT_TOKENS = 64


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    config: ChainMarkConfig | None = None,
    gate: Gate | None = None,
    *,
    sampling: Sampling | None = None,
    extra_processors: Sequence[LogitsProcessor] = (),
) -> list[Generation]:
    """Generate from each prompt, watermarked with ``config`` (or not, if None).

    How it samples is one :class:`Sampling` (``sampling``; default: ``Sampling()``), as transformers'
    ``generate`` takes a ``GenerationConfig``: ``generate(model, tok, prompts, config, gate,
    sampling=cm.Sampling(max_new_tokens=64))``. Prompts are user messages rendered
    through the chat template (raw text for a model without one). Batches are left-padded; batch ``b`` is
    sampled with seed ``seed + b``. ``extra_processors`` run after ChainMark (used for baselines).
    Returns one :class:`Generation` per prompt, in order, each carrying ``config``.

    >>> config = cm.ChainMarkConfig(b'example key', S=5, rho=0.5)
    >>> gate = cm.calibrate_gate(model, tokenizer, ['Tell me about owls.'], 'high_entropy', rho=0.5,
    ...                          sampling=cm.Sampling(max_new_tokens=16))
    >>> [g] = cm.generate(model, tokenizer, ['Why is the sky blue?'], config, gate,
    ...                   sampling=cm.Sampling(max_new_tokens=32))
    >>> cm.detect(g).n_scored > 0, 0 < g.rho_realised <= 1
    (True, True)
    """
    how = check_options(Sampling, sampling, "sampling")
    max_new_tokens, min_new_tokens, temperature = how.max_new_tokens, how.min_new_tokens, how.temperature
    seed, batch_size = how.seed, how.batch_size
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not one string")
    if not prompts:
        return []
    if config is not None and not isinstance(config, ChainMarkConfig):
        raise TypeError(f"config must be a ChainMarkConfig or None, got {type(config).__name__}")
    if getattr(tokenizer, "padding_side", "left") != "left":
        raise ValueError("the tokenizer must pad on the left for batched generation: "
                         "set tokenizer.padding_side = 'left' (load_model does)")
    device = next(model.parameters()).device
    vocab_size = logits_width(model)
    eos = _eos_ids(model, tokenizer)
    table = state_table(config.key, vocab_size, config.S) if config is not None else None
    cm = None
    if config is not None:  # built once, reused (reset) for every batch
        cm = ChainMarkLogitsProcessor(config, gate, vocab_size=vocab_size, device=device, record_signals=True)
    results: list[Generation] = []
    for b in range(0, len(prompts), batch_size):
        batch = list(prompts[b:b + batch_size])
        texts = [chat_prompt(tokenizer, p) for p in batch]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        recorder: _SignalRecorder | ChainMarkLogitsProcessor
        if cm is not None:
            cm.reset()
            recorder = cm
        else:
            recorder = _SignalRecorder()
        processors: list[LogitsProcessor] = [recorder, *extra_processors]
        torch.manual_seed(seed + b // batch_size)
        with torch.no_grad():
            out = model.generate(
                **enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                logits_processor=LogitsProcessorList(processors),
                pad_token_id=tokenizer.pad_token_id,
            )
        new = out[:, enc["input_ids"].shape[1]:].cpu().numpy()
        ent, gap = _stack(recorder.entropy), _stack(recorder.gap)
        steps = ent.shape[1] if ent.size else 0
        if cm is not None and steps:
            gated, forced = _stack(cm.gated), _stack(cm.forced)
        else:
            gated = forced = np.zeros((len(batch), steps), dtype=bool)
        prompt_ids = enc["input_ids"].cpu().numpy()
        prompt_mask = enc["attention_mask"].cpu().numpy().astype(bool)
        for i, prompt in enumerate(batch):
            row = new[i].tolist()
            n = next((j for j, t in enumerate(row) if t in eos), len(row))
            ids = row[:n]
            p_ids = prompt_ids[i][prompt_mask[i]].tolist()
            results.append(Generation(
                prompt=prompt,
                token_ids=ids,
                text=tokenizer.decode(ids, skip_special_tokens=True),
                entropy=ent[i, :n].tolist() if steps else [],
                gap=gap[i, :n].tolist() if steps else [],
                gated=gated[i, :n].astype(bool).tolist(),
                forced=forced[i, :n].astype(bool).tolist(),
                states=table[ids].tolist() if table is not None else None,
                prev_state=int(table[p_ids[-1]]) if table is not None and p_ids else None,
                prompt_ids=p_ids,
                config=config,
            ))
    return results

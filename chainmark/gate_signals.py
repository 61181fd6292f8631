"""The next-token signals a gate reads, computed on torch tensors: entropy and top-2 gap.

The next-token entropy is computed here and nowhere else: :func:`entropy_signals` (the definition, or with
``fused=True`` the generation hot path's one-pass form) and :func:`row_signals` (that form for one row at a time)
serve the gates, the generation step and the quality scores. The gate's logic (kinds, thresholds, calibration) is
model-free and lives in :mod:`chainmark.gates`; this module is the part of gating that needs torch.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from .gates import Gate, check_gate_kind

__all__ = ["EntropySignals", "Workspace", "entropy", "entropy_signals", "gate_flags", "gate_signal", "row_maxima",
           "row_signals", "top2_gap"]

class Workspace:
    """Reusable scratch tensors, one per name, re-allocated only when the shape changes.

    Fresh ``batch x V`` temporaries at every decoding step cost more than the
    arithmetic on them (the allocator hands the pages back and the kernel
    faults them in again), so the per-step work writes into these instead.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, name: str, like: torch.Tensor, shape: tuple[int, ...] | None = None,
            dtype: torch.dtype | None = None) -> torch.Tensor:
        shape = tuple(like.shape) if shape is None else shape
        dtype = dtype or like.dtype
        buf = self._buffers.get(name)
        if buf is None or tuple(buf.shape) != shape or buf.dtype != dtype or buf.device != like.device:
            buf = torch.empty(shape, dtype=dtype, device=like.device)
            self._buffers[name] = buf
        return buf


class EntropySignals(NamedTuple):
    """What :func:`entropy_signals` returns, one value (or row) per row of logits.

    ``gap`` is set when asked for; ``log_probs`` and ``probs`` (the full
    ``log_softmax`` and ``softmax``) only with ``log_probs=True``.
    """

    entropy: torch.Tensor
    gap: torch.Tensor | None = None
    log_probs: torch.Tensor | None = None
    probs: torch.Tensor | None = None


def entropy_signals(logits: torch.Tensor, *, gap: bool = False, log_probs: bool = False,
                    fused: bool = False, workspace: Workspace | None = None) -> EntropySignals:
    """Entropy (nats) of ``softmax(logits)`` over the last axis, in float32; on request
    the top-2 gap and the log-probabilities computed on the way.

    The package's one implementation of the gate's entropy. By default it is
    the definition, ``H = -sum p log p`` over ``log_softmax`` (``0 log 0 = 0``),
    with :func:`top2_gap` for ``gap=True``; ``log_probs=True`` also returns
    ``log_probs`` and ``probs`` (teacher-forced scoring needs them).
    ``fused=True`` is the generation hot path: one pass shares the softmax
    between entropy and gap, ``H = log Z - sum(e x) / Z`` and
    ``gap = (1 - e_second) / Z`` with ``x = logits - max``, ``e = exp(x)``,
    ``Z = sum e``, written into ``workspace``'s scratch memory (reused
    between calls) in cache-sized chunks of rows on the CPU. It equals the
    definition to float32 rounding, never forms the log-probabilities, and
    gives NaN for a row whose logits are all ``-inf``. :func:`row_signals`
    is the same pass for one row at a time.

    >>> import torch
    >>> s = cm.entropy_signals(torch.tensor([[3.0, 1.0, 0.0]]), gap=True)
    >>> round(float(s.entropy[0]), 4), round(float(s.gap[0]), 4)
    (0.5243, 0.7296)
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() < 1:
        raise TypeError(f"logits must be a torch.Tensor with a vocabulary axis, got {logits!r:.80}")
    if fused:
        if log_probs:
            raise ValueError("fused=True never forms the log-probabilities; use fused=False for log_probs")
        return _fused_signals(logits, gap, workspace or Workspace())
    g = top2_gap(logits) if gap else None
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    h = -torch.nan_to_num(logp, neginf=0.0).mul_(p).sum(dim=-1)  # one temporary, multiplied in place
    return EntropySignals(h, g, logp, p) if log_probs else EntropySignals(h, g)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of softmax(logits) along the last axis, in float32:
    ``-sum p log p`` with ``0 log 0 = 0`` (see :func:`entropy_signals`).

    >>> import torch
    >>> cm.entropy(torch.zeros(2, 4))  # uniform over 4 tokens: log 4 nats
    tensor([1.3863, 1.3863])
    """
    return entropy_signals(logits).entropy


def _shift_exp(x: torch.Tensor, top: Any, shifted: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """``shifted = x - top`` and ``e = exp(shifted)``, written into the scratch tensors."""
    torch.sub(x, top, out=shifted)
    return torch.exp(shifted, out=e)


def _entropy_from_sums(z: Any, dot: Any) -> Any:
    """``H = log Z - sum(e x) / Z`` from the two sums: float32 tensors, or Python floats (float64)."""
    if isinstance(z, torch.Tensor):
        return torch.log(z) - dot / z
    return math.log(z) - dot / z if z > 0 else math.nan


def _gap_from_sums(z: Any, second: Any) -> Any:
    """``gap = (1 - e_second) / Z``: the top token has ``e = 1``."""
    if isinstance(z, torch.Tensor):
        return (1.0 - second) / z
    return (1.0 - second) / z if z > 0 else math.nan


def _chunk_rows(x: torch.Tensor) -> int:
    """Rows per chunk: on the CPU about 256 kB of logits, so that the passes
    over a chunk stay in the core's cache; on a GPU the whole batch at once."""
    if x.device.type != "cpu":
        return max(1, x.shape[0])
    return max(1, (1 << 16) // max(1, x.shape[-1]))


def _fused_signals(logits: torch.Tensor, gap: bool, ws: Workspace) -> EntropySignals:
    """``entropy_signals(..., fused=True)``: the sums of every chunk of rows into slices, then the formulas."""
    x = logits if logits.dtype == torch.float32 else logits.float()
    lead = x.shape[:-1]
    x = x.reshape(-1, x.shape[-1])
    n = x.shape[0]
    z, dot = torch.empty(n, device=x.device), torch.empty(n, device=x.device)
    second = torch.empty(n, device=x.device) if gap else None
    step = _chunk_rows(x)
    for a in range(0, n, step):
        b = min(n, a + step)
        _fused_sums_into(x[a:b], ws, z[a:b], dot[a:b], second[a:b] if second is not None else None)
    h = _entropy_from_sums(z, dot)
    g = _gap_from_sums(z, second) if second is not None else None
    return EntropySignals(h.reshape(lead), g.reshape(lead) if g is not None else None)


def _fused_sums_into(x: torch.Tensor, ws: Workspace, z: torch.Tensor, dot: torch.Tensor,
                     second: torch.Tensor | None) -> None:
    """``z = sum e``, ``dot = sum e x`` (``nansum`` drops the ``0 * -inf`` of
    ``-inf`` logits) and, when asked, ``second`` = the runner-up's ``e``, for a
    chunk of rows."""
    rows = x.shape[0]
    shifted = ws.get("shifted", x, (rows, x.shape[1]))
    e = ws.get("exp", x, (rows, x.shape[1]))
    if second is not None:
        top, top_idx = x.max(dim=-1, keepdim=True)
    else:
        top, top_idx = x.amax(dim=-1, keepdim=True), None
    _shift_exp(x, top, shifted, e)
    torch.sum(e, dim=-1, out=z)
    torch.nansum(torch.mul(e, shifted, out=shifted), dim=-1, out=dot)
    if second is not None:
        # the top token has e = 1; knock one copy out to find the runner-up
        torch.amax(e.scatter_(-1, top_idx, 0.0), dim=-1, out=second)


def row_maxima(x: torch.Tensor, with_index: bool) -> tuple[list[float], list[int] | None]:
    """Each row's maximum logit (and its position, for the gap) as Python values, in one
    batched pass: what :func:`row_signals` needs for every row of ``x``."""
    if with_index:
        top, where = x.max(dim=-1)
        return top.tolist(), where.tolist()
    return x.amax(dim=-1).tolist(), None


def row_signals(row: torch.Tensor, top: float, shifted: torch.Tensor, e: torch.Tensor,
                top_index: int | None = None) -> tuple[float, float]:
    """``entropy_signals(..., fused=True)`` for one float32 row whose maximum ``top`` is
    known: ``(entropy, gap)`` as Python floats (gap NaN without ``top_index``).

    For the CPU generation step, which handles each row while it sits in the
    cache: a BLAS dot product takes the place of the chunked ``nansum`` (no
    product is written out) and the formulas run in float64, so the result
    equals the batched one to float32 rounding, not bit for bit. ``shifted``
    and ``e`` are scratch rows of the same length; ``e`` is overwritten.
    """
    _shift_exp(row, top, shifted, e)
    z = float(e.sum())
    dot = float(torch.dot(e, shifted))
    if math.isnan(dot):  # -inf logits: 0 * -inf; drop those terms
        dot = float(torch.nansum(torch.mul(e, shifted, out=shifted)))
    g = math.nan
    if top_index is not None:
        e[top_index] = 0.0
        g = _gap_from_sums(z, float(e.amax()))
    return _entropy_from_sums(z, dot), g


def top2_gap(logits: torch.Tensor) -> torch.Tensor:
    """Probability gap between the most and the second most likely token."""
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def gate_signal(logits: torch.Tensor, kind: str) -> torch.Tensor:
    """The score a gate compares with tau: entropy, or the top-2 gap."""
    kind = check_gate_kind(kind)
    if kind == "top2_gap":
        return top2_gap(logits)
    return entropy(logits)


def gate_flags(gate: Gate, logits: torch.Tensor) -> torch.Tensor:
    """Boolean gate flag per row of a batch of logits (vectorised): the gate's
    signal (:func:`gate_signal`) compared with its threshold."""
    if not isinstance(gate, Gate):
        raise TypeError(f"gate must be a chainmark.gates.Gate, got {type(gate).__name__}")
    if gate.kind == "all":
        return torch.ones(logits.shape[:-1], dtype=torch.bool, device=logits.device)
    return gate.flags_from_signal(gate_signal(logits, gate.kind))

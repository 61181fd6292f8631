"""ChainMark as a vLLM V1 logits processor: every request watermarked under its own account's key.

Start a server with it (the configuration file holds the key folder and the watermark's parameters, see
:class:`chainmark.serving.batch.ServingConfig`)::

    CHAINMARK_SERVING=serving.json vllm serve MODEL \\
        --logits-processors chainmark.serving.vllm:ChainMarkProcessor

and name the account's key in each request: ``"vllm_xargs": {"chainmark_key_id": "acct-17"}`` in an
OpenAI-style request, or ``SamplingParams(extra_args={"chainmark_key_id": "acct-17"})`` with ``LLM(...,
logits_processors=[ChainMarkProcessor])``. A request with an unknown or malformed key id is refused before it is
scheduled (HTTP 400 from the server); one without a key id is served unwatermarked or refused, as the
configuration's ``unkeyed`` says. The processor runs where vLLM applies the processors that change the greedy
choice: on the step's float32 logits, before penalties and temperature, as ChainMark runs first in
``chainmark.generate``; so the gate reads the request's own distribution. Speculative decoding is not supported
(its steps score several tokens a request).
"""
from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from .batch import SERVING_ENV, RequestWatermarks, ServingConfig

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

__all__ = ["ChainMarkProcessor"]


@functools.lru_cache(maxsize=4)
def _read_serving(path: str, stamp: tuple[int, int]) -> ServingConfig:
    return ServingConfig.from_file(path)


def _serving() -> ServingConfig:
    """``$CHAINMARK_SERVING``'s configuration, read again only when the file changes (``validate_params`` runs for
    every request in the server's front end)."""
    path = os.environ.get(SERVING_ENV)
    try:
        stat = os.stat(path) if path else None
    except OSError:
        stat = None
    if stat is None:
        return ServingConfig.from_env()  # its clear error: no variable, or no file
    return _read_serving(path, (stat.st_mtime_ns, stat.st_size))


class ChainMarkProcessor(LogitsProcessor):
    """vLLM's per-request ChainMark: reads ``$CHAINMARK_SERVING`` once, then follows the batch.

    ``update_state`` turns vLLM's batch changes (removed, added, moved, in that order) into the rows of a
    :class:`~chainmark.serving.batch.RequestWatermarks`; ``apply`` watermarks the step, one processor call per
    key in the batch.
    """

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Refuse a request whose key id is malformed or unknown (or absent, where the server refuses those)."""
        try:
            _serving().check_request(sampling_params.extra_args)
        except LookupError as exc:
            raise ValueError(str(exc)) from None

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        if vllm_config.speculative_config is not None:
            raise ValueError("chainmark's vLLM processor does not support speculative decoding")
        self.serving = ServingConfig.from_env()
        eos = getattr(vllm_config.model_config.hf_config, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
        self.marks = RequestWatermarks(self.serving, eos_token_id=eos if isinstance(eos, int) else None)

    def is_argmax_invariant(self) -> bool:
        """False: forcing a legal token changes the greedy choice."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the batch: removed requests, then added ones (with their key), then moves and swaps."""
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.marks.remove(index)
        for index, params, prompt_ids, output_ids in batch_update.added:
            self.marks.add(index, self.serving.check_request(params.extra_args), prompt_ids, output_ids)
        for source, target, direction in batch_update.moved:
            self.marks.move(source, target, swap=direction == MoveDirectionality.SWAP)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """The step's logits with every keyed request's row watermarked."""
        return self.marks.apply(logits) if len(self.marks) else logits

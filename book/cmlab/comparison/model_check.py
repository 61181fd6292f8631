"""A model-checked verification for disputes: does a reply carry the model's own forced tokens?

The model-free detector asks only whether a text walks the keyed cycle, which a stolen map can imitate. A
verifier who holds the model, the key and the prompt can ask more: at every step where the gate opens (the
model's entropy at least tau), ChainMark forces the *likeliest legal* token, so a genuine reply carries exactly
that token there. A forger with a stolen map knows the states of the tokens it has seen, not of the rare ones;
whenever the model's likeliest legal token is one it does not know, it forces another, or samples. One forward
pass over prompt and reply recomputes every step's distribution; :func:`model_check` reports the share of gated
steps whose token is the model's likeliest legal one. It needs the prompt (a provider that keeps its logs has
it) and is for disputes over a single text, not for screening a corpus.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from chainmark.config import ChainMarkConfig, takes_config

#: Below this share of gated steps carrying the likeliest legal token, a reply is not verified.
VERIFIED_SHARE = 0.9


@dataclass(frozen=True)
class ModelCheck:
    """The gated steps of one reply and how many carry the model's likeliest legal token."""

    gated: int
    matching: int

    @property
    def share(self) -> float:
        return self.matching / self.gated if self.gated else 0.0

    @property
    def verified(self) -> bool:
        return self.gated > 0 and self.share >= VERIFIED_SHARE


@takes_config()
def model_check(model: Any, prompt_ids: Sequence[int], token_ids: Sequence[int], config: ChainMarkConfig,
                gate: Any) -> ModelCheck:
    """Recompute each step of a reply with the model and count the gated steps that carry the likeliest legal
    token under ``config`` (its key, S and topology) and ``gate``. The gate reads the entropy of the model's own
    logits, before the sampler's temperature, as the watermark's processor does; the likeliest legal token does
    not depend on the temperature. Example::

        check = model_check(model, reply.prompt_ids, reply.token_ids, config, gate)
        check.share, check.verified
    """
    import torch

    from chainmark.gate_signals import entropy_signals
    from chainmark.partition import state_table

    prompt, reply = list(map(int, prompt_ids)), list(map(int, token_ids))
    if not prompt:
        raise ValueError("prompt_ids is empty: the check recomputes each step from the prompt the reply answered")
    if not reply:
        return ModelCheck(0, 0)
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + reply], device=device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    width = logits.shape[-1]
    table = torch.from_numpy(np.array(state_table(config.key, width, config.S), dtype=np.int64)).to(device)
    successors = torch.from_numpy(np.array(config.topo.matrix, dtype=bool)).to(device)
    entropy = entropy_signals(logits).entropy
    gated = torch.as_tensor(gate.flags_from_signal(entropy.cpu().numpy()), device=device)
    previous = torch.tensor([prompt[-1]] + reply[:-1], device=device)
    legal = successors[table[previous]][:, table]          # (steps, V): may this token follow the previous one?
    best = torch.where(legal, logits, torch.full_like(logits, -torch.inf)).argmax(dim=1)
    carried = best == torch.tensor(reply, device=device)
    return ModelCheck(int(gated.sum()), int((carried & gated).sum()))


__all__ = ["VERIFIED_SHARE", "ModelCheck", "model_check"]

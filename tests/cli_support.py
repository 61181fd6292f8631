"""Helpers shared by the command-line tests: a byte tokenizer, a fixed key, watermarked text."""
from __future__ import annotations

import numpy as np

from chainmark.partition import state_table

KEY = bytes(range(7, 39))  # a fixed test key (never a book key)


class ByteTokenizer:
    """A tiny stand-in tokenizer: one token per UTF-8 byte (vocabulary of 256)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(text.encode("utf-8"))}

    def __len__(self):
        return 256

    def get_vocab(self):
        return {f"<{i}>": i for i in range(256)}


def watermarked_text(key: bytes = KEY, S: int = 5, length: int = 300) -> str:
    """ASCII text whose byte states walk the clockwork cycle under ``key``."""
    table = state_table(key, 256, S)
    by_state = {s: [b for b in range(97, 123) if table[b] == s] or
                [b for b in range(32, 127) if table[b] == s] for s in range(S)}
    rng = np.random.default_rng(0)
    state, out = int(table[ord("a")]), [ord("a")]
    for _ in range(length - 1):
        state = (state + 1) % S
        out.append(int(rng.choice(by_state[state])))
    return bytes(out).decode("ascii")

"""A tiny causal LM that is *not* the embedded model, for running the chapters on "another model".

    python tests/foreign_model.py FOLDER     # writes the model and its tokenizer to FOLDER

It differs from SmolLM2 in everything a chapter could silently depend on: a
byte-level BPE tokenizer trained here on the package's prompt files, with a
vocabulary of at most 3,000 ids (about 2,200 from those files; not 49,152); no chat template; another end-of-text
token; a random-weight two-layer Llama (so its entropies and its first steps
look nothing like a trained model's). ``transformers`` loads the folder with
``from_pretrained`` like any Hub model, so ``CHAINMARK_MODEL=FOLDER`` runs a
chapter on it.
"""
from __future__ import annotations

import sys
from pathlib import Path

VOCAB_SIZE = 3000
SPECIALS = ["<|end|>", "<|pad|>"]


def training_text() -> list[str]:
    """Lines of English prose and Python shipped with the package (no download)."""
    import chainmark

    folder = Path(chainmark.__file__).resolve().parent / "data" / "prompts"
    lines: list[str] = []
    for path in sorted(folder.glob("*.txt")):
        lines += [line for line in path.read_text("utf-8").splitlines() if line.strip()]
    return lines


def build(folder: str | Path, vocab_size: int = VOCAB_SIZE, seed: int = 0) -> Path:
    """Write a random-weight Llama and its own BPE tokenizer to ``folder``; return the folder."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(training_text(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|end|>", pad_token="<|pad|>")
    tokenizer.save_pretrained(folder)

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(build(sys.argv[1]))

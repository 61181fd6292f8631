import time

import pytest
import torch

from chainmark.models import ModelLoadError, chat_prompt, embedded_gguf_path, load_model


def test_embedded_gguf_ships_in_the_package():
    path = embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000


@pytest.mark.slow
def test_default_model_generates_english(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    assert model.config.vocab_size == 49152 and len(tokenizer) == 49152
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    prompt = chat_prompt(tokenizer, "What is the capital of France?")
    assert "<|im_start|>user" in prompt and prompt.rstrip().endswith("assistant")
    enc = tokenizer([prompt], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=12, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    answer = tokenizer.decode(out[0, enc.input_ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


@pytest.mark.slow
def test_cached_load_is_fast(model_and_tokenizer):
    # the fixture has loaded (and if needed converted) once; a second load reads the cache
    start = time.perf_counter()
    load_model()
    assert time.perf_counter() - start < 5.0


def test_unknown_model_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="CHAINMARK_MODEL"):
        load_model("no-such-org/no-such-model-xyz")


def test_chat_prompt_rejects_empty_messages(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match="user_message"):
        chat_prompt(tokenizer, "   ")

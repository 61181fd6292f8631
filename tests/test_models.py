from pathlib import Path

import pytest
import torch

from chainmark.embed import chat_prompt
from cmlab.harness.models import ModelLoadError, embedded_gguf_path, load_model

ROOT = Path(__file__).resolve().parents[1]


def test_embedded_gguf_ships_in_the_package():
    path = embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000


def test_the_shipped_tokenizer_is_the_gguf_s_under_the_pinned_transformers():
    """The copy in chainmark/data/tokenizer equals what the pinned release builds from the GGUF file.

    Other releases build it differently (5.17: byte fallback with an unknown token, <|im_start|> as the
    end-of-sequence token), which is why the package ships this copy and reads it everywhere.
    """
    import json

    import transformers
    from transformers import AutoTokenizer

    from chainmark.auditor.tokenizer import EMBEDDED_TOKENIZER

    pinned = next(line.split("==")[1].strip() for line in open(ROOT / "constraints.txt")
                  if line.lower().startswith("transformers=="))
    if transformers.__version__ != pinned:
        pytest.skip(f"transformers {transformers.__version__} is not the pinned {pinned}")
    gguf = embedded_gguf_path()
    built = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    shipped = AutoTokenizer.from_pretrained(str(EMBEDDED_TOKENIZER), local_files_only=True)  # as load_model loads it
    assert json.loads(shipped.backend_tokenizer.to_str()) == json.loads(built.backend_tokenizer.to_str())
    for attr in ("eos_token", "bos_token", "unk_token", "pad_token", "chat_template"):
        assert getattr(shipped, attr) == getattr(built, attr), attr
    assert sorted(p.name for p in EMBEDDED_TOKENIZER.iterdir()) == ["chat_template.jinja", "tokenizer.json",
                                                                    "tokenizer_config.json"]
    # what differs between releases, pinned here: a control character is dropped, not turned into <|endoftext|>
    ids = shipped("a\x04b", add_special_tokens=False)["input_ids"]
    assert shipped.unk_token_id not in ids and shipped.decode(ids) == "ab"
    assert shipped.eos_token == "<|im_end|>"


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
def test_a_second_load_reads_the_cache(model_and_tokenizer, monkeypatch):
    """The fixture has loaded (and if needed converted) once; a second load reads the converted checkpoint and
    never de-quantises the GGUF again (benchmarks/bench_model_load.py measures what that saves)."""
    from cmlab.harness import models

    def must_not_convert(*args, **kwargs):
        raise AssertionError("the GGUF was converted again instead of read from the cache")

    monkeypatch.setattr(models, "_convert_gguf", must_not_convert)
    model, _ = load_model()
    first = model_and_tokenizer[0].state_dict()
    assert all(torch.equal(tensor, first[name]) for name, tensor in model.state_dict().items())


def test_unknown_model_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="CHAINMARK_MODEL"):
        load_model("no-such-org/no-such-model-xyz")


def test_chat_prompt_rejects_empty_messages(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match="user_message"):
        chat_prompt(tokenizer, "   ")


class _FakeModel:
    """Stands in for a loaded model: records ``.to`` calls, has a device and a dtype."""

    def __init__(self, kwargs):
        self.kwargs = kwargs
        self.moved_to = []
        self.dtype = kwargs.get("dtype")
        self.device = torch.device("cpu")

    def to(self, device):
        self.moved_to.append(str(device))
        return self

    def eval(self):
        return self


class _FakeTokenizer:
    pad_token = None
    eos_token = "</s>"
    padding_side = "right"


@pytest.fixture
def fake_from_pretrained(monkeypatch):
    """Replace both from_pretrained loaders; return the model kwargs of each call."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    calls = []

    def model_loader(source, **kwargs):
        calls.append(kwargs)
        return _FakeModel(kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", model_loader)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda source, **kwargs: _FakeTokenizer())
    return calls


def test_gpu_load_places_weights_with_device_map_not_via_host_memory(fake_from_pretrained):
    # a 7B bfloat16 model staged on the CPU first would need ~14 GB of host RAM
    model, tokenizer = load_model("some-org/some-7b-model", device="cuda")
    (kwargs,) = fake_from_pretrained
    assert kwargs["device_map"] == "cuda" and kwargs["dtype"] == torch.bfloat16
    assert model.moved_to == []  # never built on the host and moved
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "</s>"
    load_model("some-org/some-7b-model", device="cuda:1", dtype=torch.float16)
    assert fake_from_pretrained[1]["device_map"] == "cuda:1"
    assert fake_from_pretrained[1]["dtype"] == torch.float16


def test_cpu_load_keeps_host_path(fake_from_pretrained):
    model, _ = load_model("some-org/some-model", device="cpu")
    (kwargs,) = fake_from_pretrained
    assert "device_map" not in kwargs and kwargs["dtype"] == torch.float32
    assert model.moved_to == ["cpu"]


def test_banner_is_silent_in_the_pages_configuration_and_one_line_elsewhere(monkeypatch):
    """The banner shows nothing for a run like the page's, and one line naming what differs otherwise."""
    from cmlab.teaching.plots import _BANNER_CLASS, banner

    monkeypatch.setattr("cmlab.harness.settings._cuda_available", lambda: False)
    for var in ("CHAINMARK_KEY", "CHAINMARK_KEY_FILE", "CHAINMARK_MODEL", "CHAINMARK_SCALE"):
        monkeypatch.delenv(var, raising=False)
    assert banner() is None
    monkeypatch.setenv("CHAINMARK_MODEL", "some-org/some-model")
    monkeypatch.setenv("CHAINMARK_SCALE", "full")
    text = banner().data
    assert _BANNER_CLASS in text and "some-org/some-model" in text and "full scale" in text
    assert text.count("<p") == 1 and "key" not in text and "GPU" not in text
    for word in ("claims", "strict", "torch", "dtype", "seeds"):
        assert word not in text, word


def test_the_gguf_conversion_bar_is_silenced_and_restored():
    """transformers' GGUF de-quantisation calls tqdm directly: inside the quiet block its bar is off."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from cmlab.harness import models

    original = gguf_utils.tqdm
    with models._quiet_weight_loading():
        assert gguf_utils.tqdm(range(3)).disable
    assert gguf_utils.tqdm is original


def test_weight_loading_bar_is_silenced_and_the_setting_restored(monkeypatch):
    """load_model hides transformers' "Loading weights" bar, and leaves the caller's setting as it was."""
    from transformers.utils import logging as hf_logging

    from cmlab.harness import models

    seen = []
    for before in (True, False):
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()
        with models._quiet_weight_loading():
            seen.append(hf_logging.is_progress_bar_enabled())
        assert hf_logging.is_progress_bar_enabled() is before
    hf_logging.enable_progress_bar()
    assert seen == [False, False]


def test_two_chapters_converting_at_once_keep_one_copy_and_neither_fails(tmp_path, monkeypatch):
    """The build executes two chapters at a time; in a fresh home both may convert the GGUF at once. The one
    that finishes second finds the other's copy in place (even when it appears between its check and its
    rename) and keeps it instead of failing."""
    import os

    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    from cmlab.harness import models

    tiny = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=32, n_positions=16))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: tiny)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"not read: from_pretrained is replaced")
    target = tmp_path / "converted"
    models._convert_gguf(gguf, target)  # the first chapter
    assert (target / "model.safetensors").exists()
    stamp = (target / "model.safetensors").stat().st_mtime_ns
    models._convert_gguf(gguf, target)  # the second, after the first: keeps the first's copy
    real_replace = os.replace

    def other_chapter_first(src, dst):  # the other chapter renames its copy in just before this one
        monkeypatch.setattr(os, "replace", real_replace)
        raise OSError(39, "Directory not empty")

    monkeypatch.setattr(Path, "exists", lambda self: False if self == target else os.path.exists(self))
    monkeypatch.setattr(os, "replace", other_chapter_first)
    models._convert_gguf(gguf, target)  # the race: no error
    assert (target / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []  # no temporary copy left behind

"""Before loading: does the model fit the device? Before the long steps: how long and how much memory?"""
from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cmlab.harness import models  # noqa: E402
from cmlab.teaching.forecast import duration, expect_generation  # noqa: E402
from cmlab.harness.models import (DEVICE_MEMORY_ENV, EMBEDDED_PARAMS, ModelLoadError, ModelTooLargeError,  # noqa: E402
                              check_fits, device_memory, memory_needed, model_size)
from chainmark.auditor.tokenizer import DEFAULT_MODEL  # noqa: E402


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    import foreign_model

    return foreign_model.build(tmp_path_factory.mktemp("small-model"))


def header_only_checkpoint(folder: Path, params: int, dtype: str = "BF16") -> Path:
    """A safetensors file whose header declares ``params`` weights and holds none: enough for sizing."""
    folder.mkdir(parents=True, exist_ok=True)
    header = json.dumps({"model.weight": {"dtype": dtype, "shape": [params], "data_offsets": [0, 2 * params]},
                         "__metadata__": {"format": "pt"}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return folder


def test_a_local_model_is_sized_from_its_file_headers_without_loading(small_model):
    import torch
    from transformers import AutoModelForCausalLM

    size = model_size(str(small_model))
    loaded = AutoModelForCausalLM.from_pretrained(str(small_model), dtype=torch.float32)
    unique = sum({p.data_ptr(): p.numel() for p in loaded.parameters()}.values())
    assert size.params == unique and size.source == "safetensors headers"
    assert size.weight_bytes("float32") == 4 * unique and size.weight_bytes("torch.bfloat16") == 2 * unique
    assert model_size(DEFAULT_MODEL).params == EMBEDDED_PARAMS


@pytest.mark.slow
def test_the_embedded_models_size_is_its_checkpoints():
    from cmlab.harness.models import _converted_dir, _safetensors_params, embedded_gguf_path, load_model

    load_model()  # converts the GGUF once, if this machine has not yet
    converted = _converted_dir(embedded_gguf_path()) / "model.safetensors"
    assert _safetensors_params([converted]) == EMBEDDED_PARAMS


def test_a_7b_model_is_refused_on_a_t4_before_any_weight_is_read(tmp_path, monkeypatch):
    folder = header_only_checkpoint(tmp_path / "seven-b", 7_000_000_000)
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "15")  # a free Colab T4
    with pytest.raises(ModelTooLargeError) as info:
        check_fits(str(folder), "cuda", "float16")
    message = str(info.value)
    assert "7.00 B parameters" in message and "14.0 GB of weights in float16" in message
    assert "does not fit, so it was not loaded" in message and "A100" in message and "at most about" in message
    assert isinstance(info.value, ModelLoadError)  # callers that catch load errors catch this one too
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "40")  # an A100 40 GB
    assert "40.0 GB" in check_fits(str(folder), "cuda", "bfloat16")
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "24")  # this machine's RAM: float32 doubles the weights
    with pytest.raises(ModelTooLargeError, match="run on a GPU"):
        check_fits(str(folder), "cpu", "float32")


def test_load_model_refuses_before_loading(small_model, monkeypatch):
    from transformers import AutoModelForCausalLM

    def must_not_load(*args, **kwargs):
        raise AssertionError("weights were read before the size check")

    need = memory_needed(model_size(str(small_model)).weight_bytes("float32"))
    monkeypatch.setenv(DEVICE_MEMORY_ENV, str(need / 2 / 1e9))
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", must_not_load)
    with pytest.raises(ModelTooLargeError, match="free memory first"):
        models.load_model(str(small_model), device="cpu")
    monkeypatch.undo()
    monkeypatch.setenv(DEVICE_MEMORY_ENV, str(2 * need / 1e9))
    model, tokenizer = models.load_model(str(small_model), device="cpu")
    assert model is not None


def test_a_hub_download_is_announced_with_its_size_before_it_starts(small_model, monkeypatch, capsys):
    """A Hub id not yet in the cache: load_model says how much it will download (the Hub's safetensors
    metadata, per stored dtype) and what it needs, before any weight is fetched; cached, local and embedded
    models download nothing and say nothing."""
    import types

    import huggingface_hub
    from transformers import AutoModelForCausalLM, AutoTokenizer

    meta = types.SimpleNamespace(parameter_count={"BF16": 7_000_000_000, "F32": 1_000_000})
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", lambda name: meta)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda name, filename: None)
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "80")
    size = model_size("some-org/some-7b")
    assert size.params == 7_001_000_000 and size.stored_bytes == 2 * 7_000_000_000 + 4 * 1_000_000
    notice = models._download_notice("some-org/some-7b", check_fits("some-org/some-7b", "cuda", "bfloat16"))
    assert notice.startswith("Downloading some-org/some-7b from the Hugging Face Hub once (about 14.0 GB")
    assert "7.00 B parameters" in notice and "80.0 GB" in notice

    class Stop(Exception):
        pass

    def fetching(*args, **kwargs):
        raise Stop  # where the download would begin

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", fetching)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fetching)
    with pytest.raises(Stop):
        models.load_model("some-org/some-7b", device="cpu")
    assert "Downloading some-org/some-7b" in capsys.readouterr().out  # printed before the first fetch
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda name, filename: "/cache/config.json")
    assert models._download_notice("some-org/some-7b", "") is None
    assert models._download_notice(str(small_model), "") is None and models._download_notice(DEFAULT_MODEL, "") is None


def test_device_memory_reads_the_machine_or_the_simulation(monkeypatch):
    monkeypatch.delenv(DEVICE_MEMORY_ENV, raising=False)
    free, what = device_memory("cpu")
    assert free is not None and free > 100e6 and "RAM" in what
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "2.5")
    assert device_memory("cuda:0") == (2_500_000_000, f"set by ${DEVICE_MEMORY_ENV}")
    for bad in ("lots", "0", "-1"):
        monkeypatch.setenv(DEVICE_MEMORY_ENV, bad)
        with pytest.raises(ValueError, match=DEVICE_MEMORY_ENV):
            device_memory("cpu")


def test_an_unknown_size_is_said_and_refuses_nothing(tmp_path, monkeypatch):
    empty = tmp_path / "no-weights"
    empty.mkdir()
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "0.01")
    assert model_size(str(empty)).params is None
    assert "not checked" in check_fits(str(empty), "cpu", "float32")


def test_the_forecast_measures_scales_with_the_work_and_leaves_the_random_state(small_model, monkeypatch):
    import torch

    monkeypatch.delenv(DEVICE_MEMORY_ENV, raising=False)
    model, tokenizer = models.load_model(str(small_model), device="cpu")
    torch.manual_seed(7)
    state = torch.get_rng_state()
    forecast = expect_generation(model, tokenizer, [("short", 4, 16), ("long", 4, 160), ("more texts", 16, 160),
                                                    ("none", 0, 100)], batch_size=4)
    assert torch.equal(state, torch.get_rng_state())
    short, long, more, none = forecast.seconds
    assert 0 < short < long < more and none == 0
    assert more == pytest.approx(4 * long)  # four times the batches
    assert forecast.token_seconds > 0 and forecast.batch_size == 4
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert forecast.peak_bytes > weights and forecast.free_bytes and forecast.free_bytes > 0
    text = str(forecast)
    assert str(small_model) in text and "peak memory" in text and "expected on this machine" in text
    assert "chainmark-estimate" in forecast._repr_html_()
    monkeypatch.setenv(DEVICE_MEMORY_ENV, str(forecast.peak_bytes / 2 / 1e9))
    tight = expect_generation(model, tokenizer, [("short", 4, 16)], batch_size=4)
    assert any("lower the batch size" in note for note in tight.notes)
    scoring = expect_generation(model, tokenizer, [("score", 8, 160, "score"), ("score more", 16, 160, "score")],
                                batch_size=4)
    assert 0 < scoring.seconds[0] and scoring.seconds[1] == pytest.approx(2 * scoring.seconds[0])
    with pytest.raises(ValueError, match="kind"):
        expect_generation(model, tokenizer, [("x", 1, 1, "train")], batch_size=1)
    with pytest.raises(ValueError):
        expect_generation(model, tokenizer, [], batch_size=4)
    with pytest.raises(ValueError):
        expect_generation(model, tokenizer, [("x", 1, 1)], batch_size=0)
    with pytest.raises(ValueError):
        expect_generation(model, tokenizer, [("x", -1, 1)], batch_size=1)


def test_the_forecast_is_the_probes_cost_per_pass_times_the_work(small_model, monkeypatch):
    """The forecast of a step is its batches x (prompt pass + new tokens x the cost of a decoding step), both
    costs from the probes, with the watermark's overhead; given probe times, so whatever the machine's load.
    How close it comes to a real generation is measured by benchmarks/bench_forecast.py."""
    import math

    from cmlab.teaching import forecast as F

    calls = []

    def probe(model, tokenizer, batch, new_tokens):  # 0.3 s for the prompt, 0.05 s per new token
        calls.append((batch, new_tokens))
        return 0.3 + 0.05 * new_tokens

    monkeypatch.setattr(F, "_probe", probe)
    monkeypatch.delenv(DEVICE_MEMORY_ENV, raising=False)
    model, tokenizer = models.load_model(str(small_model), device="cpu")
    forecast = expect_generation(model, tokenizer, [("plain", 4, 32), ("more", 10, 200), ("score", 8, 160, "score")],
                                 batch_size=4, prompt_tokens=96)
    assert calls == [(4, 1), (4, 1), (4, F._PROBE_TOKENS)]  # a warm-up, then one new token, then nine
    assert forecast.token_seconds == pytest.approx(0.05)
    assert forecast.prefill_seconds == pytest.approx(0.3 * 96 / F._PROBE_PROMPT_TOKENS)
    prefill, overhead = forecast.prefill_seconds, F._STEP_OVERHEAD
    plain, more, score = forecast.seconds
    assert plain == pytest.approx((prefill + 0.05 * 32) * overhead)
    assert more == pytest.approx(math.ceil(10 / 4) * (prefill + 0.05 * 200) * overhead)
    assert score == pytest.approx(2 * prefill * (96 + 160) / 96 * overhead)


def test_a_noisy_long_probe_never_makes_the_prompt_free(small_model, monkeypatch):
    """Under load the nine-token probe can take so long that its per-token cost exceeds the one-token probe; the
    prompt's pass is then half the one-token probe, never zero (a loaded CI machine once forecast 0 s)."""
    from cmlab.teaching import forecast as F

    times = iter([0.2, 0.2, 5.0])  # warm-up, one token, nine tokens: 0.6 s per token, three times the short probe
    monkeypatch.setattr(F, "_probe", lambda model, tokenizer, batch, new_tokens: next(times))
    monkeypatch.delenv(DEVICE_MEMORY_ENV, raising=False)
    model, tokenizer = models.load_model(str(small_model), device="cpu")
    forecast = expect_generation(model, tokenizer, [("score", 8, 160, "score")], batch_size=4,
                                 prompt_tokens=F._PROBE_PROMPT_TOKENS)
    assert forecast.token_seconds == pytest.approx(4.8 / (F._PROBE_TOKENS - 1))
    assert forecast.prefill_seconds == pytest.approx(0.1)  # half the one-token probe, never less
    assert forecast.seconds[0] > 0


@pytest.mark.parametrize("seconds, shown", [(0.4, "0 s"), (9.4, "9 s"), (59.6, "1 min 00 s"), (119.7, "2 min 00 s"),
                                            (3599.6, "1 h 00 min"), (3600 + 29 * 60 + 50, "1 h 30 min"),
                                            (-3, "0 s")])
def test_durations_are_written_as_people_write_them(seconds, shown):
    assert duration(seconds) == shown

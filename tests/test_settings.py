"""Settings: read from the environment each time they are asked for, set by each chapter's settings cell."""
import os
import stat

import pytest

from cmlab.harness import settings as settings_mod
from chainmark.auditor.keyfiles import read_key_file, teaching_key
from chainmark.keys import key_fingerprint
from chainmark.auditor.tokenizer import DEFAULT_MODEL
from cmlab.harness.settings import _SETTING_ENV, default_dtype, get_settings, use_settings


@pytest.fixture(autouse=True)
def fresh_settings(monkeypatch):
    for name in (*_SETTING_ENV.values(), "CHAINMARK_KEY"):
        # set, then delete: monkeypatch then restores the original on teardown even though use_settings
        # writes os.environ itself (nothing a test sets may leak into the next test)
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)
    # use_settings(None) returns to the environment the process started with: here, none of these set
    monkeypatch.setattr(settings_mod, "_STARTING_ENV", {name: None for name in _SETTING_ENV.values()})
    monkeypatch.setattr(settings_mod, "_cuda_available", lambda: False)
    yield


def test_defaults_on_cpu():
    s = get_settings()
    assert (s.model, s.scale, s.device, s.dtype) == (DEFAULT_MODEL, "smoke", "cpu", "float32")
    assert (s.generation_seed, s.attack_seed) == (42, 43)
    assert s.sized(smoke=1, full=2) == 1
    assert s.key_file is None


def test_defaults_on_gpu(monkeypatch):
    monkeypatch.setattr(settings_mod, "_cuda_available", lambda: True)
    monkeypatch.setattr(settings_mod, "_bf16_supported", lambda: True)
    s = get_settings()
    assert (s.scale, s.device, s.dtype) == ("full", "cuda", "bfloat16")
    assert s.sized(smoke=1, full=2) == 2


def test_a_gpu_without_bfloat16_gets_float16(monkeypatch):
    monkeypatch.setattr(settings_mod, "_bf16_supported", lambda: False)
    assert default_dtype("cuda") == default_dtype("cuda:0") == "float16"
    assert default_dtype("cpu") == "float32"
    monkeypatch.setattr(settings_mod, "_bf16_supported", lambda: None)  # no GPU here to ask: bfloat16
    assert default_dtype("cuda") == "bfloat16"


def test_environment_overrides(monkeypatch):
    monkeypatch.setenv("CHAINMARK_MODEL", "Qwen/Qwen2.5-7B-Instruct")
    monkeypatch.setenv("CHAINMARK_SCALE", "FULL")
    s = get_settings()
    assert s.model == "Qwen/Qwen2.5-7B-Instruct" and s.scale == "full"


def test_settings_are_read_when_asked_never_stale(monkeypatch):
    assert get_settings().scale == "smoke"
    monkeypatch.setenv("CHAINMARK_SCALE", "full")
    assert get_settings().scale == "full"


def test_bad_scale_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CHAINMARK_SCALE", "huge")
    with pytest.raises(ValueError, match="CHAINMARK_SCALE must be one of"):
        get_settings()


def test_the_settings_cell_sets_every_value_and_none_returns_to_the_start(tmp_path, monkeypatch):
    folder = tmp_path / "my-model"
    folder.mkdir()
    key_file = tmp_path / "drive" / "chainmark" / "key.bin"
    runs = tmp_path / "drive" / "chainmark" / "runs"
    s = use_settings(model=str(folder), scale="full", key_file=key_file, runs_dir=runs)
    assert (s.model, s.scale, s.key_file, s.runs_dir) == (str(folder.resolve()), "full", str(key_file), str(runs))
    assert runs.is_dir() and key_file.is_file()
    assert stat.S_IMODE(key_file.stat().st_mode) & 0o077 == 0  # created owner-only
    key = read_key_file(key_file)
    # what the chapters then read
    from chainmark.auditor.keyfiles import book_key, book_key_source
    from cmlab.harness.settings import default_runs_dir

    assert book_key_source() == "key file" and book_key() == key and default_runs_dir() == runs
    assert key_fingerprint(key) in str(s) and key.hex() not in str(s) and key.hex() not in s._repr_html_()
    # a second session naming the same file gets the same key (it is never replaced)
    use_settings(key_file=key_file)
    assert book_key() == key
    # None: back to what the process started with
    s = use_settings()
    assert (s.model, s.scale, s.key_file) == (DEFAULT_MODEL, "smoke", None)
    assert book_key_source() == "teaching" and book_key() == teaching_key()
    assert all(os.environ.get(name) is None for name in _SETTING_ENV.values())


def test_none_keeps_what_the_environment_said_at_start(monkeypatch):
    monkeypatch.setattr(settings_mod, "_STARTING_ENV", {**settings_mod._STARTING_ENV, "CHAINMARK_SCALE": "full"})
    use_settings(scale="smoke")
    assert get_settings().scale == "smoke"
    assert use_settings().scale == "full"


def test_the_settings_cell_refuses_bad_values_clearly(tmp_path):
    with pytest.raises(ValueError, match="scale must be one of"):
        use_settings(scale="medium")
    with pytest.raises(ValueError, match="no folder there"):
        use_settings(model=str(tmp_path / "missing-model"))
    with pytest.raises(ValueError, match="no folder there"):
        use_settings(model="./models/mine")
    with pytest.raises(ValueError, match="Hub id or a local folder"):
        use_settings(model="  ")
    bad = tmp_path / "short.key"
    bad.write_bytes(b"too short")
    with pytest.raises(ValueError):
        use_settings(key_file=bad)
    assert get_settings().model == DEFAULT_MODEL  # a refused value changes nothing


def test_a_key_file_named_in_the_cell_wins_over_a_hex_key_in_the_environment(tmp_path, monkeypatch):
    from chainmark.auditor.keyfiles import book_key

    monkeypatch.setenv("CHAINMARK_KEY", bytes(range(32)).hex())
    use_settings(key_file=tmp_path / "k.bin")
    assert book_key() == read_key_file(tmp_path / "k.bin")
    use_settings()
    assert book_key() == bytes(range(32))  # back to the environment's key


def test_a_hub_id_is_taken_as_written():
    assert use_settings(model="HuggingFaceTB/SmolLM2-360M-Instruct").model == "HuggingFaceTB/SmolLM2-360M-Instruct"


def test_settings_show_the_model_the_key_source_and_never_the_key():
    text = str(use_settings())
    assert "SmolLM2-135M-Instruct, embedded" in text and "published teaching key" in text
    assert key_fingerprint(teaching_key()) in text and teaching_key().hex() not in text


def test_the_runs_folder_is_shown_relative_never_as_the_builders_path(monkeypatch, tmp_path):
    from cmlab.harness.settings import RUNS_ENV, get_settings

    (tmp_path / "_toc.yml").write_text("root: x\n")
    (tmp_path / "book").mkdir()
    monkeypatch.chdir(tmp_path / "book")
    monkeypatch.delenv(RUNS_ENV, raising=False)
    assert get_settings().rows()["runs folder"] == "runs/ (the default)"
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "_build" / "runs"))
    shown = get_settings().rows()["runs folder"]
    assert shown == "_build/runs/ (from $CHAINMARK_RUNS)" and str(tmp_path) not in shown

import pytest

from chainmark import settings as settings_mod
from chainmark.settings import DEFAULT_MODEL, get_settings


@pytest.fixture(autouse=True)
def fresh_settings(monkeypatch):
    monkeypatch.delenv("CHAINMARK_MODEL", raising=False)
    monkeypatch.delenv("CHAINMARK_SCALE", raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_defaults_on_cpu(monkeypatch):
    monkeypatch.setattr(settings_mod, "_cuda_available", lambda: False)
    s = get_settings()
    assert (s.model, s.scale, s.device) == (DEFAULT_MODEL, "smoke", "cpu")
    assert (s.generation_seed, s.attack_seed) == (42, 43)
    assert s.model == DEFAULT_MODEL
    assert s.sized(smoke=1, full=2) == 1


def test_defaults_on_gpu(monkeypatch):
    monkeypatch.setattr(settings_mod, "_cuda_available", lambda: True)
    s = get_settings()
    assert (s.scale, s.device) == ("full", "cuda")
    assert s.sized(smoke=1, full=2) == 2


def test_environment_overrides(monkeypatch):
    monkeypatch.setattr(settings_mod, "_cuda_available", lambda: False)
    monkeypatch.setenv("CHAINMARK_MODEL", "Qwen/Qwen2.5-7B-Instruct")
    monkeypatch.setenv("CHAINMARK_SCALE", "FULL")
    s = get_settings()
    assert s.model == "Qwen/Qwen2.5-7B-Instruct" and s.model != DEFAULT_MODEL
    assert s.scale == "full"


def test_settings_are_read_once(monkeypatch):
    monkeypatch.setattr(settings_mod, "_cuda_available", lambda: False)
    first = get_settings()
    monkeypatch.setenv("CHAINMARK_SCALE", "full")
    assert get_settings() is first


def test_bad_scale_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CHAINMARK_SCALE", "huge")
    with pytest.raises(ValueError, match="CHAINMARK_SCALE must be one of"):
        get_settings()

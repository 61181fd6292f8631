"""The claim mechanism: strict in the book's configuration, a note and the chapter goes on anywhere else."""
from __future__ import annotations

import json

import pytest

from cmlab.teaching import claims
from cmlab.teaching.claims import ClaimFailed, book_configuration, claim, _claim_outcomes, _claims_mode, claims_report


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    for var in ("CHAINMARK_CLAIMS", "CHAINMARK_CLAIMS_LOG", "CHAINMARK_KEY", "CHAINMARK_KEY_FILE",
                "CHAINMARK_MODEL", "CHAINMARK_SCALE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(claims, "_outcomes", [])
    yield


def _book_config_on_cpu(monkeypatch):
    monkeypatch.setattr("cmlab.harness.settings._cuda_available", lambda: False)


def test_strict_exactly_in_the_books_configuration(monkeypatch):
    _book_config_on_cpu(monkeypatch)
    assert all(book_configuration().values()) and _claims_mode() == "strict"
    for var, value in (("CHAINMARK_KEY", bytes(range(32)).hex()), ("CHAINMARK_MODEL", "some/other-model"),
                       ("CHAINMARK_SCALE", "full")):
        monkeypatch.setenv(var, value)
        assert _claims_mode() == "soft", var
        monkeypatch.delenv(var)
    monkeypatch.setattr("cmlab.harness.settings._cuda_available", lambda: True)
    monkeypatch.setenv("CHAINMARK_SCALE", "smoke")
    assert not book_configuration()["CPU"] and _claims_mode() == "soft"


def test_the_environment_forces_either_mode_and_refuses_others(monkeypatch):
    _book_config_on_cpu(monkeypatch)
    monkeypatch.setenv("CHAINMARK_CLAIMS", "soft")
    assert _claims_mode() == "soft"
    monkeypatch.setenv("CHAINMARK_KEY", bytes(range(32)).hex())
    monkeypatch.setenv("CHAINMARK_CLAIMS", "STRICT")
    assert _claims_mode() == "strict"
    monkeypatch.setenv("CHAINMARK_CLAIMS", "lenient")
    with pytest.raises(ValueError, match="strict"):
        _claims_mode()


def test_strict_mode_fails_with_the_sentence_and_what_the_run_shows(monkeypatch):
    monkeypatch.setenv("CHAINMARK_CLAIMS", "strict")
    measured = 0.95
    with pytest.raises(ClaimFailed, match="the SD is larger") as err:
        with claim("the SD is larger with every transition scored"):
            assert measured > 0.97, (measured, 0.97)
    assert "0.95" in str(err.value) and isinstance(err.value, AssertionError)
    assert [o.held for o in _claim_outcomes()] == [False]


def test_soft_mode_shows_a_note_skips_the_rest_of_the_block_and_goes_on(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("CHAINMARK_CLAIMS", "soft")
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv("CHAINMARK_CLAIMS_LOG", str(log))
    reached = []
    with claim("two is less than one"):
        assert 2 < 1, "two is not less than one"
        reached.append("after")  # skipped: a claim's block holds checks only
    with claim("the reference run's texts are all flagged", tier="reference"):
        assert True
    assert reached == []
    out = capsys.readouterr().out
    assert "this run differs from the text" in out and "two is less than one" in out
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["held"], r["tier"], r["mode"]) for r in rows] == [(False, "live", "soft"), (True, "reference", "soft")]
    assert "two is not less than one" in rows[0]["shows"]
    claims_report()
    assert [o.says for o in _claim_outcomes() if not o.held] == ["two is less than one"]
    out = capsys.readouterr().out
    assert "1 of 2 sentences on this page are not borne out by your run" in out and "two is less than one" in out
    assert "the reference run's texts" not in out  # a claim that held is not listed


def test_other_exceptions_are_never_swallowed(monkeypatch):
    monkeypatch.setenv("CHAINMARK_CLAIMS", "soft")
    with pytest.raises(KeyError):
        with claim("a lookup works"):
            {}["missing"]


def test_a_claim_needs_a_sentence_and_a_known_tier():
    with pytest.raises(ValueError, match="sentence"):
        with claim("  "):
            pass
    with pytest.raises(ValueError, match="tier"):
        with claim("fine", tier="rumour"):
            pass


def test_the_key_never_reaches_the_log(monkeypatch, tmp_path):
    key = bytes(range(50, 82))
    monkeypatch.setenv("CHAINMARK_KEY", key.hex())
    monkeypatch.setenv("CHAINMARK_CLAIMS", "soft")
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv("CHAINMARK_CLAIMS_LOG", str(log))
    with claim("a claim"):
        assert False, "no"
    text = log.read_text()
    assert key.hex() not in text and key.hex().upper() not in text


def test_the_robustness_tool_keeps_its_keys_private_and_resumes(tmp_path):
    import stat
    import claims_robustness as tool

    first = tool.keys_in(tmp_path, 3, fresh=False)
    contents = [p.read_bytes() for p in first]
    assert len(set(contents)) == 3 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in first)
    assert [p.read_bytes() for p in tool.keys_in(tmp_path, 3, fresh=False)] == contents  # resuming: same keys
    assert [p.read_bytes() for p in tool.keys_in(tmp_path, 3, fresh=True)] != contents


def test_the_robustness_summary_names_every_live_claim_that_failed_under_some_key():
    import claims_robustness as tool

    def run(fp, failed):
        return {"key_fingerprint": fp, "chapter": "book/x.ipynb", "completed": True, "error": None, "seconds": 1.0,
                "live_checked": 3, "live_held": 3 - len(failed), "reference_checked": 1, "reference_held": 1,
                "failed": [{"says": s, "tier": "live", "shows": "no"} for s in failed]}

    summary = tool.summarise([run("a", []), run("b", ["the SD is larger"])], ["book/x.ipynb"], 2)
    chapter = summary["chapters"]["book/x.ipynb"]
    assert chapter["keys"] == 2 and chapter["completed"] == 2 and chapter["live_claims"] == 3
    assert chapter["live_failed_under_some_key"] == ["the SD is larger"]


def test_a_merge_replaces_only_the_chapters_run_and_stamps_each(monkeypatch):
    import pytest

    import claims_robustness as tool

    monkeypatch.setattr(tool, "toc_notebooks", lambda: ["book/a.ipynb", "book/b.ipynb", "book/c.ipynb"])
    old = {"what": "w", "measured": "2026-01-01 00:00 UTC", "keys": 5,
           "chapters": {"book/a.ipynb": {"keys": 5}, "book/b.ipynb": {"keys": 5}, "book/gone.ipynb": {"keys": 5}}}
    new = {"measured": "2026-02-02 00:00 UTC", "keys": 5, "chapters": {"book/c.ipynb": {"keys": 5},
                                                                        "book/b.ipynb": {"keys": 5, "new": True}}}
    out = tool.merged(old, new)
    assert list(out["chapters"]) == ["book/a.ipynb", "book/b.ipynb", "book/c.ipynb"]
    assert out["chapters"]["book/a.ipynb"]["measured"] == "2026-01-01 00:00 UTC"
    assert out["chapters"]["book/b.ipynb"] == {"keys": 5, "new": True, "measured": "2026-02-02 00:00 UTC"}
    assert out["measured"] == "2026-02-02 00:00 UTC" and out["keys"] == 5
    with pytest.raises(ValueError, match="at least"):
        tool.merged(old, {**new, "keys": 3})


def test_the_report_shows_nothing_when_every_claim_held(monkeypatch, capsys):
    import cmlab.teaching.claims as claims_module

    monkeypatch.setattr(claims_module, "_outcomes", [])
    claims_report()  # a page that states nothing about its run
    monkeypatch.setenv("CHAINMARK_CLAIMS", "soft")
    with claim("one is less than two"):
        assert 1 < 2
    claims_report()
    assert capsys.readouterr().out == ""
    with claim("two is less than one"):
        assert 2 < 1
    capsys.readouterr()
    claims_report()
    out = capsys.readouterr().out
    assert out.startswith("1 of 2 sentences on this page are not borne out by your run")
    assert "strict" not in out and "soft" not in out and "claim" not in out

"""The checks after each Build it (cmlab.teaching.workshop): strict in the book, lenient and explanatory for participants."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from chainmark import state_table
from cmlab.teaching.workshop import (_EDITION_ENV, BuildCheckFailed, check_build, _in_participant_edition,
                                participant_edition, same_array, same_arrays, same_values)

KEY, V, S = b"workshop-test-key", 3000, 5


@pytest.fixture
def participant():
    participant_edition()
    yield
    participant_edition(False)


def my_table(key: bytes, V: int, S: int, shift: int = 0) -> np.ndarray:
    return np.array([int.from_bytes(hashlib.sha256(key + (t + shift).to_bytes(8, "big")).digest()[:8], "big") % S
                     for t in range(V)])


def unwritten():
    raise NotImplementedError("my_state_table is not written yet")


def check_table(fn, **kw):
    return check_build("my_state_table", fn, state_table(KEY, V, S), compare=same_array("token id", "state"),
                       look_at="the bytes you hash", **kw)


def test_agreement_returns_yours_and_says_so(capsys):
    result = check_table(lambda: my_table(KEY, V, S), agrees=f"on all {V:,} token ids")
    assert result.ok and result.status == "agrees" and np.array_equal(result.value, state_table(KEY, V, S))
    assert capsys.readouterr().out.strip() == f"✓ my_state_table agrees with the package on all {V:,} token ids."


def test_in_the_book_a_difference_or_an_unwritten_skeleton_stops_the_chapter():
    assert not _in_participant_edition()
    with pytest.raises(BuildCheckFailed, match="at token id 0 yours gives state"):
        check_table(lambda: my_table(KEY, V, S, shift=1))
    with pytest.raises(BuildCheckFailed, match="not written yet"):
        check_table(unwritten)
    with pytest.raises(BuildCheckFailed, match="raised ZeroDivisionError") as info:
        check_table(lambda: 1 / 0)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_an_off_by_one_in_the_hash_input_is_explained_in_one_sentence(participant, capsys):
    result = check_table(lambda: my_table(KEY, V, S, shift=1))
    out = capsys.readouterr().out.strip()
    assert result.status == "differs" and np.array_equal(result.value, state_table(KEY, V, S))  # the package's
    first = out.split(". ")[0]  # the explanation, before "Look at ..." and "The chapter goes on ..."
    assert first.startswith("✗ my_state_table differs from the package: at token id 0 yours gives state")
    assert "is the package's at t + 1: an off-by-one in what you use for t" in first
    assert out.endswith("The chapter goes on with the package's version.")
    assert "Look at the bytes you hash." in out


def test_the_other_shift_and_a_plain_difference_are_told_apart(participant, capsys):
    check_table(lambda: np.r_[0, state_table(KEY, V, S)[:-1]])  # the state of id t - 1 at id t
    assert "at t - 1" in capsys.readouterr().out
    wrong = state_table(KEY, V, S).copy()
    wrong[17] = (wrong[17] + 1) % S
    check_table(lambda: wrong)
    out = capsys.readouterr().out
    assert "at token id 17 yours gives state" in out and "(1 of 3,000 differ)" in out and "off-by-one" not in out


def test_participants_go_on_with_the_package_after_any_failure(participant, capsys):
    for fn, status, says in ((unwritten, "not written", "my_state_table is not written yet."),
                             (lambda: 1 / 0, "raised", "raised ZeroDivisionError: division by zero"),
                             (lambda: np.zeros(V - 1), "differs", "yours has shape (2999,), the package's (3000,)")):
        result = check_table(fn)
        assert result.status == status and not result.ok
        assert np.array_equal(result.value, state_table(KEY, V, S))
        assert says in capsys.readouterr().out


def test_the_environment_variable_also_selects_the_participant_edition(monkeypatch, capsys):
    monkeypatch.setenv(_EDITION_ENV, "participant")
    assert _in_participant_edition()
    assert check_table(unwritten).status == "not written"
    monkeypatch.setenv(_EDITION_ENV, "book")
    assert not _in_participant_edition()


def test_same_values_names_the_case_and_the_field(participant, capsys):
    labels = ["watermarked generation 0", "plain generation 0"]
    package = [(0.5, 4.2, 1e-5, True), (0.2, 0.1, 0.46, False)]
    mine = [(0.5, 4.2, 1e-5, True), (0.2, 0.1 + 1e-6, 0.46, False)]
    check_build("my_detect", lambda: mine, package, compare=same_values(["φ", "z", "p-value", "flagged"], labels=labels),
                look_at="the standard error")
    assert "for plain generation 0: z yours is 0.100001, the package's 0.1" in capsys.readouterr().out
    assert check_build("my_detect", lambda: mine, package, look_at="x",
                       compare=same_values(["φ", "z", "p-value", "flagged"], labels=labels, rel_tol=1e-4)).ok
    assert same_values()(3, 3) is None and "yours is 4, the package's 3" in same_values()(4, 3)
    assert "expects 2 values" in same_values(["a", "b"])((1,), (1, 2))
    assert "flagged yours is False, the package's True" in same_values(["flagged"])((False,), (True,))


def test_same_arrays_names_the_item_and_tolerances_apply():
    compare = same_arrays(item="text", index="transition", value="flag", labels=["a", "b"])
    assert compare([np.array([True, False]), np.array([True])], [np.array([True, False]), np.array([True])]) is None
    found = compare([np.array([True, False]), np.array([False])], [np.array([True, False]), np.array([True])])
    assert found.startswith("text b: at transition 0 yours gives flag False and the package True")
    assert "gives 1 texts" in compare([np.array([1])], [np.array([1]), np.array([2])])
    assert same_array(abs_tol=1e-3)(np.array([1.0, 2.0005]), np.array([1.0, 2.0])) is None
    assert "at position 1" in same_array("position", abs_tol=1e-4)(np.array([1.0, 2.0005]), np.array([1.0, 2.0]))
    assert "at entry [0, 1]" in same_array("entry")(np.eye(2, dtype=int), np.ones((2, 2), dtype=int))


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(TypeError, match="function of no arguments"):
        check_build("x", 3, 3, compare=same_values(), look_at="y")
    with pytest.raises(ValueError, match="look_at"):
        check_build("x", lambda: 3, 3, compare=same_values(), look_at=" ")

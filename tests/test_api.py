"""The API reference (book/api.md): every name at the top of chainmark is on the page once, rendered from its
docstring, and every docstring carries an example that runs (the model-free ones here, in make check; those
that need a model on the embedded one)."""
from __future__ import annotations

import doctest
import inspect
import re
from pathlib import Path

import pytest

import chainmark as cm

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "api.md"
BUILT = ROOT / "_build" / "html" / "book" / "api.html"
AUTO = re.compile(r"^\.\. auto(?:function|class):: chainmark\.(\w+)\s*$", re.M)  # inside {eval-rst} blocks
#: The names whose example needs a causal language model (``model`` and ``tokenizer`` in the example's namespace).
MODEL_EXAMPLES = {"calibrate_gate", "chat_prompt", "ChainMarkLogitsProcessor", "detect_text", "generate",
                  "logits_width"}


def run_examples(name: str, globs: dict) -> tuple[int, int, str]:
    """(examples, failures, report) of the doctest in ``chainmark.<name>``'s own docstring."""
    tests = doctest.DocTestFinder(recurse=False).find(getattr(cm, name), name=f"chainmark.{name}",
                                                      globs={"cm": cm, **globs})
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test, out=report.append)
    return sum(len(t.examples) for t in tests), runner.failures, "".join(report)


def test_the_api_page_lists_every_top_level_name_once():
    names = AUTO.findall(PAGE.read_text("utf-8"))
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]
    assert set(names) == set(cm.__all__), {"not on the page": sorted(set(cm.__all__) - set(names)),
                                             "not at the top": sorted(set(names) - set(cm.__all__))}
    assert MODEL_EXAMPLES <= set(cm.__all__)


def test_every_top_level_name_has_an_example():
    missing = [name for name in cm.__all__ if ">>> " not in (inspect.getdoc(getattr(cm, name)) or "")]
    assert not missing, f"no example in the docstring of: {', '.join(missing)}"


@pytest.mark.parametrize("name", [n for n in cm.__all__ if n not in MODEL_EXAMPLES])
def test_the_example_runs(name):
    examples, failures, report = run_examples(name, {})
    assert examples >= 1 and failures == 0, report


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODEL_EXAMPLES))
def test_the_example_runs_on_the_embedded_model(name, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    examples, failures, report = run_examples(name, {"model": model, "tokenizer": tokenizer})
    assert examples >= 1 and failures == 0, report


def test_a_wrong_example_is_reported():
    """The runner can fail: an example whose output differs from what it prints is a failure with a report."""
    test = doctest.DocTestParser().get_doctest(">>> cm.z_alpha(0.5)\n1.0\n", {"cm": cm}, "planted", None, 0)
    report: list[str] = []
    runner = doctest.DocTestRunner()
    runner.run(test, out=report.append)
    assert runner.failures == 1 and "Expected" in "".join(report)


@pytest.mark.slow
@pytest.mark.built
def test_the_built_api_page_renders_every_name_with_its_example():
    if not BUILT.exists():
        pytest.skip(f"no built page at {BUILT}: build the book first (make test does)")
    html = BUILT.read_text("utf-8")
    missing = [name for name in cm.__all__ if f'id="chainmark.{name}"' not in html]
    assert not missing, f"the API page renders no entry for: {', '.join(missing)}"
    assert html.count("&gt;&gt;&gt;") >= len(cm.__all__)  # the examples are shown
    assert "Failed to import" not in html and ".. autofunction::" not in html  # rendered, not shown raw


def test_the_names_the_page_cites_beside_the_top_exist():
    """The page's prose names a few module-level functions (``cm.calibrate.s_star_exact``): each one exists."""
    import importlib

    for dotted in re.findall(r"`cm\.(\w+)\.(\w+)`", PAGE.read_text("utf-8")):
        module = importlib.import_module(f"chainmark.{dotted[0]}")
        assert hasattr(module, dotted[1]), f"cm.{dotted[0]}.{dotted[1]} does not exist"

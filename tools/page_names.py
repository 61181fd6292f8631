"""Which names of ``chainmark`` and ``cmlab`` each chapter uses, and the private ones among them.

A page should show the method, not the whole toolbox: the book allows at most
30 names of the two packages on a page and no private name at all. This reads
every chapter's code cells (imports, ``cm.<...>`` and ``lab.<...>`` chains, and
attributes reached through an imported name such as ``partition._state_table``)
and prints one line per page. A page's count is what the built page shows: a name
used only in hidden cells (the claims, the glue, the banner) is not counted, but
a private name is refused in every cell::

    python tools/page_names.py            # a table: names per page, the private ones
    python tools/page_names.py --names    # every page's names, one per line
    python tools/page_names.py --check    # exit 1 when a page uses a private name or more than --limit names
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("chainmark", "cmlab")
ALIASES = {"cm": "chainmark", "lab": "cmlab", "chainmark": "chainmark", "cmlab": "cmlab"}
LIMIT = 30


#: Cells whose code the built page does not show (the claims, the glue, the run's banner).
HIDDEN = {"remove-cell", "remove-input"}


def _code(notebook: Path, on_page: bool = False) -> str:
    """A chapter's code cells as one Python source (IPython magics and shell lines become ``pass``); with
    ``on_page``, only the cells whose code the built page shows."""
    cells = json.loads(notebook.read_text("utf-8"))["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] == "code" and not (on_page and HIDDEN & set(cell.get("metadata", {}).get("tags", []))):
            for line in "".join(cell["source"]).splitlines():
                magic = line.lstrip().startswith(("%", "!"))
                lines.append(line[:len(line) - len(line.lstrip())] + "pass" if magic else line)
            lines.append("")
    return "\n".join(lines)


def page_names(notebook: Path, on_page: bool = False) -> tuple[set[str], set[str]]:
    """The qualified package names a chapter uses, and the private ones among them (``_name``, not dunders).

    With ``on_page``, only the names the built page shows: those in its hidden cells' code alone (claims, glue,
    the banner) are left out, as the reader of the site never sees them.
    """
    every = _code(notebook)
    source = _code(notebook, on_page) if on_page else every
    names: set[str] = set()
    imported: dict[str, str] = {}  # local name -> qualified package name, from every cell
    for node in ast.walk(ast.parse(every)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for local, qualified in imported.items():
        if re.search(rf"(?<![\w.]){re.escape(local)}\b", source):  # imported, or used, where it is counted
            names.add(qualified)
    roots = dict(ALIASES)
    roots.update({local: qualified for local, qualified in imported.items() if local[:1].islower()})
    pattern = "|".join(sorted(map(re.escape, roots), key=len, reverse=True))
    for local, chain in re.findall(rf"(?<![\w.])({pattern})((?:\.[A-Za-z_]\w*)+)", source):
        parts = chain.strip(".").split(".")
        # the chain up to its first name that is not a package or module (cm.harness.run_grid ->
        # cmlab.harness.run_grid), and on through private attributes (cm.Processor._step -> ...Processor._step)
        kept = [roots[local]]
        for i, part in enumerate(parts):
            kept.append(part)
            if part not in _SUBMODULES and not (i + 1 < len(parts) and _private(parts[i + 1])):
                break
        names.add(".".join(kept))
    names = {n for n in names if n.rsplit(".", 1)[-1] not in _SUBMODULES}  # a package or module is not a name
    private = {n for n in names if any(map(_private, n.split(".")))}
    return names, private


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


#: Subpackage and module names that a chain passes through on its way to a name, read from the two packages'
#: folders (``chainmark/`` and ``book/cmlab/``) so that a new module is known without a list to keep.
_SUBMODULES = {p.stem if p.suffix == ".py" else p.name
               for package in (ROOT / "chainmark", ROOT / "book" / "cmlab")
               for p in package.rglob("*") if (p.suffix == ".py" and not p.stem.startswith("_"))
               or (p.is_dir() and (p / "__init__.py").is_file())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--names", action="store_true", help="list every page's names")
    parser.add_argument("--check", action="store_true", help="exit 1 on a private name or too many names")
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"names allowed on a page (default {LIMIT})")
    args = parser.parse_args(argv)
    problems = 0
    print(f"{'page':<28} {'names':>5}  private")
    for notebook in sorted((ROOT / "book").glob("*.ipynb")):
        names, private = page_names(notebook, on_page=True)
        private = page_names(notebook)[1]  # private names are refused in every cell, shown or not
        over = len(names) > args.limit
        problems += bool(private) + over
        flag = " !" if over else ""
        print(f"{notebook.stem:<28} {len(names):>5}{flag}  {', '.join(sorted(private)) or '-'}")
        if args.names:
            print("".join(f"    {n}\n" for n in sorted(names)), end="")
    return 1 if args.check and problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Talk outlines for instructors: one short talk per chapter, read from ``book/data/talk_outlines.yml``.

Each outline gives a talk of 10 to 15 minutes: its objectives, the one
figure to show (by its label, so the page prints the figure's number), the
one formula, and two questions to ask the room. The Teaching page renders
them beside the schedules, and the schedules take each talk's minutes from
here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OUTLINES_FILE", "TalkOutline", "load_outlines", "outline_markdown"]

#: Where the outlines live, relative to the repository's root.
OUTLINES_FILE = Path("book") / "data" / "talk_outlines.yml"

_FIELDS = ("chapter", "minutes", "objectives", "figure", "figure_note", "formula", "formula_note", "questions")


@dataclass(frozen=True)
class TalkOutline:
    """One chapter's talk: ``figure`` is a figure label of the chapter's pages, or ``None`` on a page without one."""

    chapter: str
    minutes: int
    objectives: tuple[str, ...]
    figure: str | None
    figure_note: str
    formula: str
    formula_note: str
    questions: tuple[str, ...]


def load_outlines(path: str | Path | None = None) -> list[TalkOutline]:
    """The outlines in file order, each checked: every field, 10 to 15 minutes, two or three objectives, two questions.

    ``path`` defaults to :data:`OUTLINES_FILE` under the current folder, its parent, or the
    repository the package is installed from.
    """
    import yaml

    if path is None:
        roots = [Path.cwd(), Path.cwd().parent, Path(__file__).resolve().parents[3]]
        path = next((r / OUTLINES_FILE for r in roots if (r / OUTLINES_FILE).is_file()), roots[0] / OUTLINES_FILE)
    entries = yaml.safe_load(Path(path).read_text("utf-8"))
    outlines = []
    for i, entry in enumerate(entries):
        where = f"{path}, entry {i + 1} ({entry.get('chapter', '?')})"
        missing = [f for f in _FIELDS if f not in entry or (entry[f] in ("", None, []) and f != "figure")]
        extra = sorted(set(entry) - set(_FIELDS))
        if missing or extra:
            raise ValueError(f"{where}: missing or empty fields {missing}, unknown fields {extra}")
        if not 10 <= int(entry["minutes"]) <= 15:
            raise ValueError(f"{where}: a talk takes 10 to 15 minutes, not {entry['minutes']}")
        if not 2 <= len(entry["objectives"]) <= 3 or len(entry["questions"]) != 2:
            raise ValueError(f"{where}: two or three objectives and two questions")
        texts = [*entry["objectives"], *entry["questions"], entry["figure_note"], entry["formula"], entry["formula_note"]]
        if not all(isinstance(t, str) and t.strip() for t in texts) or not isinstance(entry["figure"], (str, type(None))):
            raise ValueError(f"{where}: every objective, question, note and the formula is a line of text "
                             "(quote a line that holds ': ')")
        outlines.append(TalkOutline(chapter=str(entry["chapter"]), minutes=int(entry["minutes"]),
                                    objectives=tuple(map(str, entry["objectives"])), figure=entry["figure"],
                                    figure_note=str(entry["figure_note"]), formula=str(entry["formula"]).strip(),
                                    formula_note=str(entry["formula_note"]), questions=tuple(map(str, entry["questions"]))))
    chapters = [o.chapter for o in outlines]
    if len(set(chapters)) != len(chapters):
        raise ValueError(f"{path}: a chapter has two outlines")
    return outlines


def _chapter_figures(notebook: str | Path) -> list[str]:
    """The labels of a notebook's numbered figures (``mystnb.figure.name`` in its cells' metadata), in page order."""
    nb = json.loads(Path(notebook).read_text("utf-8"))
    return [c["metadata"]["mystnb"]["figure"]["name"] for c in nb["cells"]
            if c.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name")]


def outline_markdown(outline: TalkOutline, title: str) -> str:
    """The outline as MyST Markdown: the figure as a numbered reference, the formula as display math."""
    figure = (f"{{numref}}`{outline.figure}`: {outline.figure_note}" if outline.figure
              else outline.figure_note)
    lines = [f"**{title}** ({outline.minutes} min)", "",
             "- *Objectives*:", *[f"  - {o}" for o in outline.objectives],
             f"- *The figure*: {figure}",
             f"- *The formula*: {outline.formula_note}", "",
             "  $$", f"  {outline.formula}", "  $$", "",
             "- *Ask the room*:", *[f"  {i}. {q}" for i, q in enumerate(outline.questions, 1)], ""]
    return "\n".join(lines)

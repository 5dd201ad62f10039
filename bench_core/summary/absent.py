"""A report of findings, not of absences: after the summary notebook ran, every section whose only output
is an `absent` note (html.absent: "No AMP speed-up: it needs fp32 and a reduced precision ...") is taken
out, and its notes become one line each of one section near the end, "Not measured in these results",
which says what would fill them. The table of contents lists the sections that are drawn.

It works on the executed notebook (the summary.ipynb `bench report` writes beside the HTML, which JupyterLab
opens as the report shows it), before the HTML is made from it.
"""
from __future__ import annotations

import html
import re

from bench_core.summary.html import ABSENT_CLASS

TITLE = "Not measured in these results"
BEFORE = ("Failures", "Environment", "Method")  # the list goes before the first of these that is drawn
INTRO = ("What these results could not show, and what would fill each: a sweep file under params/, or a "
         "`bench` flag (docs/ says more of each). Each of these sections is drawn once its rows exist.")
_TAG = re.compile(r"<[^>]+>")


def heading(cell) -> str | None:
    """The title of a section's heading cell ('## AMP speed-up ...' -> 'AMP speed-up'), else None."""
    if cell.get("cell_type") != "markdown":
        return None
    first = "".join(cell.get("source", "")).lstrip().splitlines()[:1]
    return first[0][3:].strip() if first and first[0].startswith("## ") else None


def absent_texts(cell) -> list[str] | None:
    """The absent notes of a code cell, when they are all it showed; None when it showed anything else."""
    texts = []
    for output in cell.get("outputs", []):
        markup = output.get("data", {}).get("text/html")
        markup = "".join(markup) if isinstance(markup, list) else markup
        if output.get("output_type") not in ("display_data", "execute_result") or not markup \
                or f'class="{ABSENT_CLASS}"' not in markup:
            return None
        texts.append(html.unescape(_TAG.sub("", markup)).strip())
    return texts


def anchor(title: str) -> str:
    """The anchor nbconvert and JupyterLab give a heading: its text with spaces as '-'."""
    return title.replace(" ", "-")


def gather(notebook) -> list[tuple[str, list[str]]]:
    """Take the sections with nothing to show out of `notebook` (in place), list them in one section before
    BEFORE, and rewrite the contents; returns what was taken, (title, notes) per section."""
    import nbformat
    cells, sections, start = notebook.cells, [], None
    for index, cell in enumerate(cells + [None]):
        if cell is None or heading(cell) is not None:
            if start is not None:
                sections.append((start, index))
            start = index if cell is not None else None
    taken, drop = [], set()
    for first, end in sections:
        code = [c for c in cells[first + 1:end] if c.get("cell_type") == "code"]
        notes = [absent_texts(c) for c in code]
        if code and all(n is not None for n in notes) and any(notes):
            taken.append((heading(cells[first]), [text for n in notes for text in n]))
            drop.update(range(first, end))
    if not taken:
        return []
    kept = [c for i, c in enumerate(cells) if i not in drop]
    lines = "\n".join(f"- **{title}**: {' '.join(texts)}" for title, texts in taken)
    listed = nbformat.v4.new_markdown_cell(f"## {TITLE}\n\n{INTRO}\n\n{lines}")
    place = next((i for i, c in enumerate(kept) if heading(c) in BEFORE), len(kept))
    kept.insert(place, listed)
    titles = [t for t in (heading(c) for c in kept) if t]
    for cell in kept:
        if cell.get("cell_type") == "markdown" and "".join(cell.get("source", "")).startswith("**Contents**"):
            cell["source"] = "**Contents**: " + " · ".join(f"[{t}](#{anchor(t)})" for t in titles)
    notebook.cells = kept
    return taken

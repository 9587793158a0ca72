"""The README's measured numbers, copied from the headline table of docs/PERFORMANCE.md so the two cannot disagree.

    .venv/bin/python -m scripts.readme_numbers           # rewrite the block between the markers in README.md
    .venv/bin/python -m scripts.readme_numbers --check   # exit 1 when README.md's block is not what this makes

The headline table (between ``BEGIN`` and ``END`` in docs/PERFORMANCE.md) is edited by hand when a run replaces a
figure: one row per figure, its date (the run's, ``YYYY-MM-DD``) and a link to the section that holds the command
and the run (a section of docs/PERFORMANCE.md, or of a page beside it or under it: ``lab/memory.md#...``).
``headline_rows`` refuses a row without a date or whose link names no section; the README gets the same rows with
the links pointing into docs/. tests/test_readme_numbers.py runs the check.
"""

from __future__ import annotations

import re

from scripts.readme_block import ROOT, main, replace_block

PERFORMANCE = ROOT / "docs" / "PERFORMANCE.md"
BEGIN = "<!-- headline numbers: scripts/readme_numbers.py copies this table into README.md -->"
END = "<!-- end of the headline numbers -->"
README_BEGIN = "<!-- measured numbers: made by scripts/readme_numbers.py from docs/PERFORMANCE.md; edit that, not this -->"
README_END = "<!-- end of the measured numbers -->"
HEADER = ("what", "measured", "date", "where")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
LINK = re.compile(r"^\[[^\]]+\]\(([^)]+)\)$")


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (lower case, punctuation dropped, spaces to
    hyphens; a repeated heading gets ``-1``, ``-2``, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def headline_rows(performance: str) -> list[list[str]]:
    """The rows of the headline table; ``ValueError`` for a row without a date or with a link to no section."""
    _, begin, rest = performance.partition(BEGIN)
    body, end, _ = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"docs/PERFORMANCE.md lacks the markers {BEGIN!r} ... {END!r}")
    lines = [ln for ln in body.strip().splitlines() if ln.startswith("|")]
    if not lines or tuple(_cells(lines[0])) != HEADER:
        raise ValueError(f"the headline table's header must be {' | '.join(HEADER)}")
    known = anchors(performance)
    rows = []
    for line in lines[2:]:
        cells = _cells(line)
        if len(cells) != len(HEADER):
            raise ValueError(f"headline row with {len(cells)} cells, not {len(HEADER)}: {line}")
        what, _, date, where = cells
        if not DATE.match(date):
            raise ValueError(f"headline row {what!r}: its date {date!r} is not YYYY-MM-DD")
        link = LINK.match(where)
        if not link or not _resolves(link.group(1), known):
            raise ValueError(f"headline row {what!r}: {where!r} links to no section of docs/PERFORMANCE.md or of a doc in docs/")
        rows.append(cells)
    return rows


def _resolves(target: str, known: set[str]) -> bool:
    """``#anchor`` names a heading of docs/PERFORMANCE.md (``known``); ``OTHER.md#anchor`` (or ``lab/OTHER.md#anchor``)
    one of that doc under docs/."""
    doc, _, anchor = target.partition("#")
    if doc:
        path = PERFORMANCE.parent / doc
        if not path.is_file():
            return False
        known = anchors(path.read_text(encoding="utf-8"))
    return not anchor or anchor in known


def table(performance: str) -> str:
    """The README's table: the headline rows, their links pointing into docs/."""
    out = ["| " + " | ".join(HEADER) + " |", "|---|---|---|---|"]
    for what, measured, date, where in headline_rows(performance):
        target = LINK.match(where).group(1)  # type: ignore[union-attr]
        where = where.replace(f"({target})", f"(docs/PERFORMANCE.md{target})" if target.startswith("#") else f"(docs/{target})")
        out.append(f"| {what} | {measured} | {date} | {where} |")
    return "\n".join(out)


def rewrite(readme: str) -> str:
    """``readme`` with the text between its markers replaced by the headline table of docs/PERFORMANCE.md."""
    return replace_block(readme, README_BEGIN, README_END, table(PERFORMANCE.read_text(encoding="utf-8")))


if __name__ == "__main__":
    raise SystemExit(main(__doc__.splitlines()[0], rewrite, what="measured numbers"))

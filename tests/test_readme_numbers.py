"""README.md's measured numbers are the headline table of docs/PERFORMANCE.md: one source, every row dated and
pointing at the section that holds its command (issue 25, item 6)."""

from __future__ import annotations

import pytest

from pathlib import Path

from scripts.readme_numbers import BEGIN, END, PERFORMANCE, README_BEGIN, anchors, headline_rows, rewrite
from scripts.readme_block import README, main, replace_block


def _with_rows(*rows: str) -> str:
    head = "# Benchmarks\n\n## Voices (issue 2)\n\n" + BEGIN + "\n| what | measured | date | where |\n|---|---|---|---|\n"
    return head + "\n".join(rows) + "\n" + END + "\n"


def test_the_readme_numbers_are_the_headline_table() -> None:
    readme = README.read_text(encoding="utf-8")
    assert README_BEGIN in readme
    assert rewrite(readme) == readme, "README.md's measured numbers are stale: run .venv/bin/python -m scripts.readme_numbers"


def test_every_headline_row_is_dated_and_points_at_a_section() -> None:
    rows = headline_rows(PERFORMANCE.read_text(encoding="utf-8"))
    assert len(rows) >= 10
    assert all(row[2].startswith("2026-") for row in rows)


def test_a_row_without_a_date_or_with_a_dead_link_is_refused() -> None:
    good = "| joe | 26 × | 2026-11-29 | [Voices](#voices-issue-2) |"
    assert headline_rows(_with_rows(good)) == [["joe", "26 ×", "2026-11-29", "[Voices](#voices-issue-2)"]]
    with pytest.raises(ValueError, match="date"):
        headline_rows(_with_rows("| joe | 26 × | last week | [Voices](#voices-issue-2) |"))
    with pytest.raises(ValueError, match="links to no section"):
        headline_rows(_with_rows("| joe | 26 × | 2026-11-29 | [Voices](#voices-issue-3) |"))
    with pytest.raises(ValueError, match="links to no section"):
        headline_rows(_with_rows("| joe | 26 × | 2026-11-29 | [R](RELIABILITY.md#no-such-heading) |"))
    with pytest.raises(ValueError, match="links to no section"):
        headline_rows(_with_rows("| joe | 26 × | 2026-11-29 | [R](NO-SUCH-DOC.md#voices-issue-2) |"))
    assert headline_rows(_with_rows("| joe | 26 × | 2026-11-29 | [L](lab/README.md) |"))[0][3] == "[L](lab/README.md)"
    with pytest.raises(ValueError, match="links to no section"):
        headline_rows(_with_rows("| joe | 26 × | 2026-11-29 | [L](lab/no-such-page.md) |"))


def test_anchors_follow_github() -> None:
    md = "## Listeners side by side: just-in-time admission (issue 22)\n### Goals, judged\n### Goals, judged\n## `baker` vs `kumo`, 10,000 jobs\n"
    assert anchors(md) == {"listeners-side-by-side-just-in-time-admission-issue-22", "goals-judged", "goals-judged-1",
                           "baker-vs-kumo-10000-jobs"}


def test_the_check_exits_1_on_a_stale_block_and_0_once_it_is_rewritten(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``--check`` (what CI and a reviewer run) fails on a stale block and leaves the file alone; a run without it
    rewrites the block, and the check then passes."""
    doc = tmp_path / "README.md"
    doc.write_text("intro\n<!-- b -->\nold figure\n<!-- e -->\nrest\n", encoding="utf-8")
    made = lambda text: replace_block(text, "<!-- b -->", "<!-- e -->", "new figure")  # noqa: E731
    assert main("a block", made, ["--check"], path=doc) == 1
    assert "-old figure" in capsys.readouterr().out and "old figure" in doc.read_text(encoding="utf-8")
    assert main("a block", made, [], path=doc) == 0
    assert doc.read_text(encoding="utf-8") == "intro\n<!-- b -->\nnew figure\n<!-- e -->\nrest\n"
    assert main("a block", made, ["--check"], path=doc) == 0

"""Audiobooks, reading: plain text, Markdown and EPUB into chapters, a chapter manifest, stable job ids
and the dry-run plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import InputError
from books import BookOptions, default_book_id, main, plan_book
from books.formats import BAD_BOOK, apply_manifest, load_book, parse_epub, parse_markdown, parse_text
from tests.book_files import BOOK_ID, DATA, MD, epub_of, make_epub


# -- reading books ---------------------------------------------------------------------------------------------


def test_markdown_chapters_from_the_most_used_heading_level() -> None:
    book = load_book(MD)
    assert book.title == "The Small Farm" and book.format == "markdown"
    assert [c.title for c in book.chapters][:3] == ["The Small Farm", "Chapter 1: Morning", "第二章 雨"]
    assert len(book.chapters) == 11  # front matter (the introduction) + ten chapters
    ch = {c.title: c for c in book.chapters}
    assert ch["Chapter 1: Morning"].paragraphs == ("The sun rose over the quiet hills.", "Birds sang.")  # emphasis gone
    assert ch["Chapter 3: The Market"].paragraphs == ("We sold apples and pears.", "我们卖苹果。")  # list items
    assert ch["第四章 朋友"].paragraphs == ("他是我的好朋友。",)  # link text kept, URL dropped


def test_markdown_parts_are_chapters_and_sections_are_read() -> None:
    text = ("---\ntitle: Front Matter Title\n---\n# Part One\n\n## One\n\nFirst `code` words.\n\n### A section\n\nMore.\n\n"
            "```\nnot read()\n```\n\n## Two\n\n| a | b |\n|---|---|\n| x | y |\n\n# Part Two\n\n## Three\n\nLast.\n")
    book = parse_markdown(text)
    assert book.title == "Front Matter Title"
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("Part One", ()),  # a part is a chapter of its own: its title is read
        ("One", ("First code words.", "A section", "More.")),  # deeper headings are read as paragraphs
        ("Two", ("a, b", "x, y")),  # table rows
        ("Part Two", ()),
        ("Three", ("Last.",)),
    ]


def test_plain_text_chapters_in_english_and_chinese() -> None:
    text = ("My Book\n\nChapter 1\n\nIt was a cold day.\nThe wind blew.\n\nCHAPTER II. The Sea\n\nWaves.\n\n"
            "第三章 风起\n\n　　风来了。\n\n序章\n\n最后。\n")
    book = parse_text(text, default_title="x")
    assert book.title == "My Book"
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("Chapter 1", ("It was a cold day.", "The wind blew.")),
        ("CHAPTER II. The Sea", ("Waves.",)),
        ("第三章 风起", ("风来了。",)),
        ("序章", ("最后。",)),
    ]
    zh = parse_text("第一章\n第一行。\n第二行，\n接着写。\n第二章\n下一章。", default_title="书")
    assert [c.paragraphs for c in zh.chapters] == [("第一行。", "第二行，接着写。"), ("下一章。",)]  # one paragraph a line
    wrapped = parse_text("Chapter 1\n\nIt was a cold\nday.\n\nNext.", default_title="x")
    assert wrapped.chapters[0].paragraphs == ("It was a cold day.", "Next.")  # hard-wrapped lines run on
    plain = parse_text("No headings here. Just text.", default_title="notes")
    assert [(c.title, c.paragraphs) for c in plain.chapters] == [("notes", ("No headings here. Just text.",))]


def test_epub_of_the_markdown_book_reads_the_same(tmp_path: Path) -> None:
    md = load_book(MD)
    book = load_book(epub_of(md, tmp_path / "small_farm.epub"))
    assert book.format == "epub" and book.title == md.title and book.language == "zh" and book.author == "Test Author"
    assert [(c.title, c.paragraphs) for c in book.chapters] == [(c.title, c.paragraphs) for c in md.chapters]


def test_epub_nav_sections_spine_and_ncx(tmp_path: Path) -> None:
    docs = [("cover.xhtml", "<p>Cover text.</p>"), ("toc.xhtml", "<p>Contents page.</p>"),
            ("part1.xhtml", "<h1>Part One</h1>"),
            ("c1.xhtml", '<h2>One</h2><p>Alpha.</p><h3 id="s1">Section</h3><p>Beta.</p>'),
            ("c1b.xhtml", "<p>Gamma continues one.</p>"),
            ("c23.xhtml", '<h2 id="two">Two</h2><p>Delta.</p><h2 id="three">Three</h2><p>Epsilon &amp; more.</p>')]
    toc = [(0, "Part One", "part1.xhtml"), (1, "One", "c1.xhtml"), (2, "Section", "c1.xhtml#s1"),
           (1, "Two", "c23.xhtml#two"), (1, "Three", "c23.xhtml#three")]
    for nav in (True, False):  # EPUB 3 nav, then the EPUB 2 NCX alone
        book = parse_epub(make_epub(tmp_path / f"b{nav}.epub", "Nested", docs, toc, nav=nav, linear_no=("toc.xhtml",)).read_bytes())
        assert [(c.title, c.paragraphs) for c in book.chapters] == [
            ("Nested", ("Cover text.",)),  # before the first entry: front matter (toc.xhtml is linear="no")
            ("Part One", ()),
            ("One", ("Alpha.", "Section", "Beta.", "Gamma continues one.")),  # a section stays in its chapter
            ("Two", ("Delta.",)),
            ("Three", ("Epsilon & more.",)),  # split inside one file at the anchor
        ], nav


def test_epub_with_drm_or_broken_is_refused(tmp_path: Path) -> None:
    docs, toc = [("a.xhtml", "<p>Text.</p>")], [(0, "A", "a.xhtml")]
    fonts = make_epub(tmp_path / "fonts.epub", "T", docs, toc, encryption="http://www.idpf.org/2008/embedding")
    assert load_book(fonts).chapters[0].paragraphs == ("Text.",)  # font obfuscation is not DRM
    drm = make_epub(tmp_path / "drm.epub", "T", docs, toc, encryption="http://www.w3.org/2001/04/xmlenc#aes128-cbc")
    for bad in (drm, tmp_path / "not.epub"):
        if not bad.exists():
            bad.write_bytes(b"PK\x03\x04 not really a zip")
        with pytest.raises(InputError) as err:
            load_book(bad)
        assert err.value.code == BAD_BOOK


def test_manifest_renames_skips_and_resplits() -> None:
    book = load_book(MD, manifest=DATA / "small_farm.chapters.json")
    assert book.title == "The Small Farm (retitled)"
    assert [c.title for c in book.chapters][:2] == ["Morning", "Rain 雨"] and len(book.chapters) == 10
    split = apply_manifest(load_book(MD), {"chapters": [{"title": "First half", "start": "Chapter 1: Morning"},
                                                        {"title": "Second half", "start": "Chapter 7"}]})
    assert [c.title for c in split.chapters] == ["First half", "Second half"]
    assert split.chapters[0].paragraphs[:3] == ("Chapter 1: Morning", "The sun rose over the quiet hills.", "Birds sang.")
    assert split.chapters[1].paragraphs[:2] == ("Chapter 7: Letters", "A letter arrived on Monday.")
    assert split.chapters[1].paragraphs[-1] == "明天见。"
    with pytest.raises(InputError):
        apply_manifest(load_book(MD), {"chapters": [{"title": "only one"}]})


# -- planning and job ids --------------------------------------------------------------------------------------


def test_job_ids_are_stable_and_an_edit_changes_only_its_segments(base_settings: Any, tmp_path: Path) -> None:
    opts = BookOptions()
    plan = plan_book(base_settings, load_book(MD), book_id=BOOK_ID, opts=opts)
    assert plan_book(base_settings, load_book(MD), book_id=BOOK_ID, opts=opts).jobs.keys() == plan.jobs.keys()
    edited = MD.read_text(encoding="utf-8").replace("came out, one by one", "came out slowly").replace(
        "## Chapter 1: Morning", "## Prologue: Dawn\n\nIt was early.\n\n## Chapter 1: Morning")
    (tmp_path / "small_farm.md").write_text(edited, encoding="utf-8")
    plan2 = plan_book(base_settings, load_book(tmp_path / "small_farm.md"), book_id=BOOK_ID, opts=opts)
    new = {plan2.jobs[j].text for j in set(plan2.jobs) - set(plan.jobs)}
    assert new == {"Prologue:", "Dawn", "It was early.", "The stars came out slowly."}
    assert len(plan2.chapters) == len(plan.chapters) + 1  # chapter numbers moved; their segments did not
    other = plan_book(base_settings, load_book(MD), book_id=BOOK_ID, opts=BookOptions(options={"speed": 1.1}))
    assert not set(other.jobs) & set(plan.jobs)
    # the farm's segmenter, with the pauses from the settings; nothing after a chapter's last segment
    fe = base_settings.frontend
    pauses = {s.pause_after_s for ch in plan.chapters for s in ch.segments}
    assert pauses <= {0.0, fe.phrase_pause_s, fe.sentence_pause_s, fe.paragraph_pause_s}
    assert all(ch.segments[-1].pause_after_s == 0.0 for ch in plan.chapters)
    assert default_book_id("/x/My Novel.epub") == "my-novel"


def test_dry_run_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(MD), "--out", "/tmp/unused", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert " 11  第十章 再见" in out and "11 chapters" in out

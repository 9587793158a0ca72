"""Books in, chapters out: plain text, Markdown and EPUB, with an optional JSON manifest that overrides
the chapter splits and titles.

Only the standard library. A chapter is a title and a list of paragraphs of plain text, one line each
(``books.model``); what is read aloud is decided later (``books.plan``).

Chapters come from:

- plain text: lines that are chapter headings on their own (``Chapter 3``, ``CHAPTER IV. The Sea``,
  ``Prologue``, ``第三章 风起``, ``序章``); none found, the whole text is one chapter. Paragraphs are
  separated by blank lines, or, in a book without blank lines inside chapters, one a line.
- Markdown: the heading level used most often (ties: the higher level). A lone higher heading before
  the first chapter is the book's title; other higher headings (``# Part Two``) start a chapter of
  their own (as a part page does in an EPUB); deeper ones are read as paragraphs.
- EPUB (``books.epub``): the table of contents (EPUB 3 nav, else the EPUB 2 NCX) over the spine.
  A nav entry that points into the same file as its parent (a section) stays inside its parent's
  chapter; spine files without an entry continue the chapter before them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, InputError
from books.model import Book, Chapter, make_chapter, one_line
from books.epub import MAX_MEMBER_BYTES, parse_epub
from wire.errors import BAD_BOOK

__all__ = [
    "BAD_BOOK", "MAX_BOOK_BYTES", "MAX_MEMBER_BYTES", "Book", "Chapter", "apply_manifest", "is_text_heading",
    "load_book", "one_line", "parse_epub", "parse_markdown", "parse_text", "strip_inline",
]

MAX_BOOK_BYTES = 512 * 1024 * 1024


def load_book(path: str | Path, *, fmt: str | None = None, manifest: str | Path | Mapping[str, Any] | None = None) -> Book:
    """Read ``path`` (format from its suffix unless ``fmt``), then apply ``manifest`` if given."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_BOOK_BYTES:
            raise InputError(f"{p.name} is {size} bytes; the limit is {MAX_BOOK_BYTES}", code=BAD_BOOK)
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the book {str(p)!r}: {exc.strerror or exc}", code=BAD_BOOK) from None
    kind = (fmt or {".md": "markdown", ".markdown": "markdown", ".epub": "epub"}.get(p.suffix.lower(), "text")).lower()
    stem = _readable(p.stem).replace("_", " ").strip() or "Book"
    if kind == "epub":
        book = parse_epub(data, default_title=stem)
    elif kind in ("markdown", "md"):
        book = parse_markdown(_decode(data, p.name), default_title=stem)
    elif kind in ("text", "txt"):
        book = parse_text(_decode(data, p.name), default_title=stem)
    else:
        raise InputError(f"unknown book format {fmt!r}; use text, markdown or epub", code=BAD_OPTION)
    if manifest is not None:
        book = apply_manifest(book, _read_manifest(manifest))
    if not book.chapters:
        raise InputError(f"{p.name}: no chapter has any text", code=BAD_BOOK)
    return book


def _readable(name: str) -> str:
    """A file name as text to read aloud: a byte of the name that is not UTF-8 (which Python keeps as a lone
    surrogate) reads as U+FFFD, as one in an EPUB does."""
    return os.fsencode(name).decode("utf-8", errors="replace")


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name} is not UTF-8 (byte {exc.start})", code=BAD_BOOK) from None


# -- paragraphs ------------------------------------------------------------------------------------

_BLANK = re.compile(r"\n[ \t\u3000]*\n")
_ENDS = tuple(".!?。！？…”’\"')）:：")


def _paragraphs(lines: list[str], blank_lines: bool = True) -> list[str]:
    """Blank-line paragraphs; in a book whose chapters have no blank lines inside (common in Chinese),
    one paragraph a line, where a line that does not end a sentence runs on into the next."""
    body = "\n".join(lines).strip("\n")
    if blank_lines:
        return [p for p in _BLANK.split(body) if p.strip()]
    out: list[str] = []
    for line in (x.strip() for x in body.split("\n")):
        if line and out and not out[-1].endswith(_ENDS):
            out[-1] += "\n" + line
        elif line:
            out.append(line)
    return out


# -- plain text ------------------------------------------------------------------------------------

_NUM_EN = r"(?:\d+|[IVXLCDM]+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|[a-z]+teen|twenty[- a-z]*|thirty[- a-z]*)"
_HEADING_EN = re.compile(rf"^(?:(?:chapter|part|book)\s+{_NUM_EN}\b.*|prologue|epilogue|preface|foreword|introduction|afterword)\W{{0,3}}.{{0,60}}$", re.IGNORECASE)
_HEADING_ZH = re.compile(r"^(?:第[0-9０-９〇零一二三四五六七八九十百千两]+[章节回卷部篇幕]|序章|序言|序|楔子|引子|前言|尾声|后记|番外)(?:[\s：:·、.．—-]*\S.{0,38})?$")


def is_text_heading(line: str) -> bool:
    s = line.strip()
    if not s or len(s) > 80 or s[-1] in "。！？；，,;" or (s[-1] == "." and len(s.split()) > 6):
        return False
    return bool(_HEADING_EN.match(s) or _HEADING_ZH.match(s))


def parse_text(text: str, *, default_title: str = "Book") -> Book:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    starts = [i for i, line in enumerate(lines) if is_text_heading(line)]
    bounds = list(zip([-1, *starts], [*starts, len(lines)]))
    blank = any(_BLANK.search("\n".join(lines[a + 1 : b]).strip("\n")) for a, b in bounds)
    chapters: list[Chapter] = []
    title = default_title
    pre = lines[: starts[0]] if starts else lines
    pre_paras = _paragraphs(pre, blank)
    if starts and len(pre_paras) == 1 and len(pre_paras[0]) <= 80 and pre_paras[0].strip()[-1:] not in ".。!?！？":
        title, pre_paras = one_line(pre_paras[0]), []  # a lone first line before chapter one: the title
    if pre_paras:
        ch = make_chapter(title if starts else default_title, pre_paras, "line 1")
        chapters += [ch] if ch else []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        ch = make_chapter(lines[start], _paragraphs(lines[start + 1 : end], blank), f"line {start + 1}")
        chapters += [ch] if ch else []
    return Book(title=title, chapters=tuple(chapters), format="text")


# -- Markdown --------------------------------------------------------------------------------------

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INLINE = [
    (re.compile(r"<!--.*?-->", re.DOTALL), ""),
    (re.compile(r"!\[[^\]]*\]\([^)]*\)"), ""),  # images
    (re.compile(r"\[\^[^\]]*\]"), ""),  # footnote references
    (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),  # links
    (re.compile(r"\[([^\]]*)\]\[[^\]]*\]"), r"\1"),  # reference links
    (re.compile(r"<https?://[^>]*>"), ""),
    (re.compile(r"</?[A-Za-z][^>]*>"), ""),  # inline HTML
    (re.compile(r"`+([^`]*)`+"), r"\1"),
    (re.compile(r"(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1"), r"\2"),
    (re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])"), r"\1"),
    (re.compile(r"(?<![\w_])_(?=\S)(.+?)(?<=\S)_(?![\w_])"), r"\1"),
    (re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~])"), r"\1"),
]
_LIST = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])[ \t]+")
_REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*\S+")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")


def strip_inline(text: str) -> str:
    for pattern, repl in _INLINE:
        text = pattern.sub(repl, text)
    return text


def _markdown_blocks(text: str) -> list[tuple[int, str, int]]:
    """(heading level or 0 for a paragraph, text, line number)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    if lines and lines[0].strip() == "---":  # YAML front matter is not read (parse_markdown takes its title)
        i = next((j + 1 for j in range(1, len(lines)) if lines[j].strip() in ("---", "...")), 0)
    blocks: list[tuple[int, str, int]] = []
    para: list[str] = []
    para_line = 0
    fence = ""

    def flush() -> None:
        if para:
            blocks.append((0, strip_inline("\n".join(para)), para_line))
            para.clear()

    while i < len(lines):
        line = lines[i]
        if fence:
            if line.strip().startswith(fence):
                fence = ""
        elif m := _FENCE.match(line):
            flush()
            fence = m.group(1)
        elif m := _ATX.match(line):
            flush()
            blocks.append((len(m.group(1)), strip_inline(m.group(2) or ""), i + 1))
        elif para and len(para) == 1 and re.match(r"^ {0,3}(=+|-+)[ \t]*$", line):
            level = 1 if line.strip()[0] == "=" else 2
            blocks.append((level, strip_inline(para.pop()), para_line))
        elif not line.strip() or _RULE.match(line) or _REFDEF.match(line):
            flush()
        elif line.lstrip().startswith("|"):
            flush()
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                blocks.append((0, strip_inline(", ".join(c for c in cells if c)), i + 1))
        else:
            stripped = re.sub(r"^ {0,3}>[ \t]?", "", line)
            if _LIST.match(stripped):
                flush()
                stripped = _LIST.sub("", stripped)
            if not para:
                para_line = i + 1
            para.append(stripped)
        i += 1
    flush()
    return blocks


def parse_markdown(text: str, *, default_title: str = "Book") -> Book:
    front = re.match(r"^---\n(?:.*\n)*?title:\s*(.+)\n(?:.*\n)*?(?:---|\.\.\.)\n", text.replace("\r\n", "\n"))
    blocks = _markdown_blocks(text)
    levels = [lvl for lvl, t, _ in blocks if lvl and t.strip()]
    title = front.group(1).strip().strip("\"'") if front else default_title
    if not levels:
        ch = make_chapter(title, [t for lvl, t, _ in blocks if not lvl], "line 1")
        return Book(title=title, chapters=(ch,) if ch else (), format="markdown")
    counts = {lvl: levels.count(lvl) for lvl in set(levels)}
    chapter_level = max(counts, key=lambda lvl: (counts[lvl], -lvl))
    chapters: list[Chapter] = []
    cur_paras: list[str] = []
    cur_title, cur_line, started = title, 1, False
    for lvl, text_, line in blocks:
        if lvl and lvl < chapter_level and not started and counts[lvl] == 1 and not cur_paras:
            title = cur_title = text_  # the book's title
        elif lvl and lvl <= chapter_level and text_.strip():  # a chapter, or a part: its own (short) chapter
            if cur_paras or started:
                ch = make_chapter(cur_title, cur_paras, f"line {cur_line}")
                chapters += [ch] if ch else []
            cur_title, cur_paras, cur_line, started = text_, [], line, True
        elif text_.strip():
            cur_paras.append(text_)
    if cur_paras or started:
        ch = make_chapter(cur_title, cur_paras, f"line {cur_line}")
        chapters += [ch] if ch else []
    return Book(title=title, chapters=tuple(chapters), format="markdown")


# -- manifest override -----------------------------------------------------------------------------


def _read_manifest(manifest: str | Path | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(manifest, Mapping):
        return manifest
    try:
        data = json.loads(Path(manifest).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the chapter manifest {str(manifest)!r}: {exc}", code=BAD_OPTION) from None
    if not isinstance(data, dict):
        raise InputError("the chapter manifest must be a JSON object", code=BAD_OPTION)
    return data


def apply_manifest(book: Book, manifest: Mapping[str, Any]) -> Book:
    """Override chapters and titles.

    ``{"title": "...", "author": "...", "chapters": [...]}``. When every chapter entry has ``start``
    (text where it begins, found in order), the book's paragraphs are split there, headings included;
    text before the first start is dropped. Otherwise the entries map one to one onto the chapters
    found, each may set ``title`` or ``"skip": true``.
    """
    entries = manifest.get("chapters")
    title = str(manifest.get("title") or book.title)
    author = str(manifest.get("author") or book.author)
    if entries is None:
        return replace(book, title=title, author=author)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError("manifest 'chapters' must be a list of objects", code=BAD_OPTION)
    if entries and all("start" in e for e in entries):
        return replace(book, title=title, author=author, chapters=tuple(_split_at(book, entries)))
    if len(entries) != len(book.chapters):
        raise InputError(f"manifest lists {len(entries)} chapters but the book has {len(book.chapters)}; "
                         "give every entry a 'start' to re-split instead", code=BAD_OPTION)
    chapters = [replace(ch, title=one_line(str(e.get("title") or ch.title))) for ch, e in zip(book.chapters, entries)
                if not e.get("skip")]
    return replace(book, title=title, author=author, chapters=tuple(chapters))


def _split_at(book: Book, entries: list[dict[str, Any]]) -> list[Chapter]:
    paras = [p for ch in book.chapters for p in ((ch.title,) if ch.title else ()) + ch.paragraphs]
    cuts: list[tuple[int, int]] = []  # (paragraph, offset in it)
    pi, off = 0, 0
    for e in entries:
        needle = one_line(str(e["start"]))
        if not needle:
            raise InputError("a manifest 'start' is empty", code=BAD_OPTION)
        while pi < len(paras):
            at = paras[pi].find(needle, off)
            if at >= 0:
                cuts.append((pi, at))
                off = at + 1
                break
            pi, off = pi + 1, 0
        else:
            raise InputError(f"manifest start {needle[:40]!r} not found (after the previous start)", code=BAD_OPTION)
    out: list[Chapter] = []
    for n, (e, (p0, o0)) in enumerate(zip(entries, cuts)):
        p1, o1 = cuts[n + 1] if n + 1 < len(cuts) else (len(paras), 0)
        body = [paras[p][o0 if p == p0 else 0 : o1 if p == p1 else len(paras[p])]
                for p in range(p0, min(p1, len(paras) - 1) + 1)]
        ch = make_chapter(str(e.get("title") or ""), body, f"start {n + 1}")
        if ch is not None and not e.get("skip"):
            out.append(replace(ch, title=ch.title or (ch.paragraphs[0][:60] if ch.paragraphs else "")))
    return out

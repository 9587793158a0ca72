"""Books in, chapters out: plain text, Markdown and EPUB, with an optional JSON manifest that overrides
the chapter splits and titles.

Only the standard library: EPUB is a zip of XHTML read with ``zipfile`` and ``html.parser`` (which
also copes with HTML entities that strict XML refuses). A chapter is a title and a list of
paragraphs of plain text, one line each; what is read aloud is decided later (``producer.book``).

Chapters come from:

- plain text: lines that are chapter headings on their own (``Chapter 3``, ``CHAPTER IV. The Sea``,
  ``Prologue``, ``第三章 风起``, ``序章``); none found, the whole text is one chapter. Paragraphs are
  separated by blank lines, or, in a book without blank lines inside chapters, one a line.
- Markdown: the heading level used most often (ties: the higher level). A lone higher heading before
  the first chapter is the book's title; other higher headings (``# Part Two``) start a chapter of
  their own (as a part page does in an EPUB); deeper ones are read as paragraphs.
- EPUB: the table of contents (EPUB 3 nav, else the EPUB 2 NCX) over the spine. A nav entry that
  points into the same file as its parent (a section) stays inside its parent's chapter; spine
  files without an entry continue the chapter before them.
"""

from __future__ import annotations

import html.parser
import io
import json
import posixpath
import re
import unicodedata
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag

from pipeline.errors import BAD_OPTION, InputError

BAD_BOOK = "BAD_BOOK"  # the book file cannot be read (not UTF-8, a broken or DRM-protected EPUB)
MAX_BOOK_BYTES = 512 * 1024 * 1024
MAX_MEMBER_BYTES = 64 * 1024 * 1024  # one file inside an EPUB, decompressed: a zip bomb stops here


@dataclass(frozen=True)
class Chapter:
    title: str
    paragraphs: tuple[str, ...]
    source: str = ""  # where it starts: "line 12", "OEBPS/ch01.xhtml#s2"


@dataclass(frozen=True)
class Book:
    title: str
    chapters: tuple[Chapter, ...]
    format: str  # text | markdown | epub
    language: str = ""
    author: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)


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
    stem = p.stem.replace("_", " ").strip() or "Book"
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


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name} is not UTF-8 (byte {exc.start})", code=BAD_BOOK) from None


# -- shared text helpers ---------------------------------------------------------------------------

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef"
_CJK_JOIN = re.compile(f"(?<=[{_HAN}])\\s*\\n\\s*(?=[{_HAN}])")
_WS = re.compile(r"[ \t\u00a0\u3000]+")


def one_line(text: str) -> str:
    """A paragraph on one line: hard-wrapped Chinese joins without a space, anything else with one."""
    text = _CJK_JOIN.sub("", text.strip())
    return _WS.sub(" ", text.replace("\n", " ")).strip()


def _key(text: str) -> str:
    """For comparing a title with a paragraph: case, width, spaces and punctuation ignored."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if ch.isalnum())


def _chapter(title: str, paragraphs: Iterable[str], source: str) -> Chapter | None:
    paras = [p for p in (one_line(x) for x in paragraphs) if p and any(ch.isalnum() for ch in p)]
    if paras and title and _key(paras[0]) == _key(title):
        paras = paras[1:]  # the heading repeated in the body: it is read once, as the title
    if not paras and not title:
        return None
    return Chapter(title=one_line(title), paragraphs=tuple(paras), source=source)


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
        ch = _chapter(title if starts else default_title, pre_paras, "line 1")
        chapters += [ch] if ch else []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        ch = _chapter(lines[start], _paragraphs(lines[start + 1 : end], blank), f"line {start + 1}")
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
        ch = _chapter(title, [t for lvl, t, _ in blocks if not lvl], "line 1")
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
                ch = _chapter(cur_title, cur_paras, f"line {cur_line}")
                chapters += [ch] if ch else []
            cur_title, cur_paras, cur_line, started = text_, [], line, True
        elif text_.strip():
            cur_paras.append(text_)
    if cur_paras or started:
        ch = _chapter(cur_title, cur_paras, f"line {cur_line}")
        chapters += [ch] if ch else []
    return Book(title=title, chapters=tuple(chapters), format="markdown")


# -- EPUB ------------------------------------------------------------------------------------------

_NS = {"c": "urn:oasis:names:tc:opendocument:xmlns:container", "opf": "http://www.idpf.org/2007/opf",
       "dc": "http://purl.org/dc/elements/1.1/", "ncx": "http://www.daisy.org/z3986/2005/ncx/"}
_FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
_BLOCK = {"p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "blockquote", "section", "article", "header",
          "footer", "br", "tr", "dt", "dd", "figcaption", "pre", "hr", "table", "ul", "ol", "body", "td", "th"}
_SKIP = {"script", "style", "head", "rt", "rp", "svg", "math", "nav", "template", "noscript"}
_VOID = {"br", "hr", "img", "meta", "link", "input", "col", "area", "base", "wbr", "source"}
_NOTE_TYPES = ("footnote", "endnote", "rearnote", "noteref", "pagebreak")


class _TextExtractor(html.parser.HTMLParser):
    """Paragraphs of an XHTML document, with a marker where an element carries one of ``ids``."""

    def __init__(self, ids: set[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.ids = ids
        self.items: list[tuple[str, str]] = []  # ("p", text) | ("h", text) | ("mark", id)
        self.buf: list[str] = []
        self.heading = False
        self.skip_depth = 0
        self.stack: list[tuple[str, bool]] = []  # (tag, opened a skip)

    def _flush(self) -> None:
        text = one_line("".join(self.buf))
        self.buf = []
        if text:
            self.items.append(("h" if self.heading else "p", text))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): (v or "") for k, v in attrs}
        if a.get("id") in self.ids:
            self._flush()
            self.items.append(("mark", a["id"]))
        kinds = (a.get("epub:type", "") + " " + a.get("role", "")).lower()
        skip = tag in _SKIP or any(t in kinds for t in _NOTE_TYPES) or a.get("hidden") is not None or (
            tag == "sup" and any(t == "a" for t, _ in self.stack))
        if tag in _BLOCK:
            self._flush()
            self.heading = tag in ("h1", "h2", "h3", "h4", "h5", "h6") and not self.skip_depth
        if tag in _VOID:
            return
        self.stack.append((tag, skip))
        self.skip_depth += skip

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): (v or "") for k, v in attrs}
        if a.get("id") in self.ids:
            self._flush()
            self.items.append(("mark", a["id"]))
        if tag in _BLOCK:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        while any(t == tag for t, _ in self.stack):  # unclosed tags inside are closed too; a stray end tag is ignored
            t, skip = self.stack.pop()
            self.skip_depth -= skip
            if t == tag:
                break
        if tag in _BLOCK:
            self._flush()
            self.heading = False

    def handle_data(self, data: str) -> None:
        if not self.skip_depth:
            self.buf.append(data)

    def result(self) -> list[tuple[str, str]]:
        self._flush()
        return self.items


@dataclass
class _TocEntry:
    title: str
    file: str
    fragment: str
    depth: int


class _EpubReader:
    def __init__(self, data: bytes) -> None:
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile:
            raise InputError("the EPUB is not a zip file", code=BAD_BOOK) from None
        self.names = set(self.zip.namelist())

    def read(self, name: str) -> bytes:
        if name not in self.names:
            raise InputError(f"the EPUB lacks {name!r}", code=BAD_BOOK)
        info = self.zip.getinfo(name)
        if info.file_size > MAX_MEMBER_BYTES:
            raise InputError(f"{name!r} in the EPUB is larger than {MAX_MEMBER_BYTES} bytes", code=BAD_BOOK)
        with self.zip.open(info) as fh:
            data = fh.read(MAX_MEMBER_BYTES + 1)
        if len(data) > MAX_MEMBER_BYTES:
            raise InputError(f"{name!r} in the EPUB is larger than {MAX_MEMBER_BYTES} bytes", code=BAD_BOOK)
        return data

    def xml(self, name: str) -> ET.Element:
        try:
            return ET.fromstring(self.read(name))
        except ET.ParseError as exc:
            raise InputError(f"{name!r} in the EPUB is not well-formed XML: {exc}", code=BAD_BOOK) from None

    def check_drm(self) -> None:
        if "META-INF/encryption.xml" not in self.names:
            return
        root = self.xml("META-INF/encryption.xml")
        for method in root.iter():
            if method.tag.endswith("EncryptionMethod") and method.get("Algorithm") not in _FONT_OBFUSCATION:
                raise InputError("the EPUB is encrypted (DRM); only DRM-free books can be read", code=BAD_BOOK)


def _resolve(base_file: str, href: str) -> tuple[str, str]:
    path, frag = urldefrag(href)
    if not path:
        return base_file, unquote(frag)
    return posixpath.normpath(posixpath.join(posixpath.dirname(base_file), unquote(path))), unquote(frag)


def _nav_entries(reader: _EpubReader, nav_file: str) -> list[_TocEntry]:
    """EPUB 3: the ``<nav epub:type="toc">`` list, walked with html.parser (nav files use HTML entities)."""
    entries: list[_TocEntry] = []

    class Nav(html.parser.HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.in_toc = 0
            self.depth = -1
            self.href: str | None = None
            self.text: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = {k.lower(): (v or "") for k, v in attrs}
            if tag == "nav":
                kinds = (a.get("epub:type", "") + " " + a.get("role", "")).lower()
                self.in_toc = self.in_toc + 1 if (self.in_toc or "toc" in kinds) else 0
            elif self.in_toc and tag == "ol":
                self.depth += 1
            elif self.in_toc and tag == "a" and a.get("href"):
                self.href, self.text = a["href"], []

        def handle_endtag(self, tag: str) -> None:
            if tag == "nav" and self.in_toc:
                self.in_toc -= 1
            elif self.in_toc and tag == "ol":
                self.depth -= 1
            elif self.in_toc and tag == "a" and self.href is not None:
                file, frag = _resolve(nav_file, self.href)
                entries.append(_TocEntry(one_line("".join(self.text)), file, frag, max(0, self.depth)))
                self.href = None

        def handle_data(self, data: str) -> None:
            if self.href is not None:
                self.text.append(data)

    Nav().feed(reader.read(nav_file).decode("utf-8", errors="replace"))
    return entries


def _ncx_entries(reader: _EpubReader, ncx_file: str) -> list[_TocEntry]:
    root = reader.xml(ncx_file)
    out: list[_TocEntry] = []

    def walk(node: ET.Element, depth: int) -> None:
        for point in node.findall("ncx:navPoint", _NS):
            label = point.find("ncx:navLabel/ncx:text", _NS)
            content = point.find("ncx:content", _NS)
            if content is not None and content.get("src"):
                file, frag = _resolve(ncx_file, content.get("src", ""))
                out.append(_TocEntry(one_line(label.text or "" if label is not None else ""), file, frag, depth))
            walk(point, depth + 1)

    nav_map = root.find("ncx:navMap", _NS)
    if nav_map is not None:
        walk(nav_map, 0)
    return out


def parse_epub(data: bytes, *, default_title: str = "Book") -> Book:
    reader = _EpubReader(data)
    reader.check_drm()
    rootfile = reader.xml("META-INF/container.xml").find(".//c:rootfile", _NS)
    if rootfile is None or not rootfile.get("full-path"):
        raise InputError("the EPUB's container.xml names no package file", code=BAD_BOOK)
    opf_path = rootfile.get("full-path", "")
    opf = reader.xml(opf_path)
    meta = opf.find("opf:metadata", _NS)

    def dc(name: str) -> str:
        node = meta.find(f"dc:{name}", _NS) if meta is not None else None
        return one_line(node.text or "") if node is not None and node.text else ""

    items: dict[str, tuple[str, str, str]] = {}  # id -> (file, media type, properties)
    for item in opf.iterfind("opf:manifest/opf:item", _NS):
        file, _ = _resolve(opf_path, item.get("href", ""))
        items[item.get("id", "")] = (file, item.get("media-type", ""), item.get("properties", ""))
    spine_node = opf.find("opf:spine", _NS)
    if spine_node is None:
        raise InputError("the EPUB has no spine", code=BAD_BOOK)
    spine = [items[ref.get("idref", "")][0] for ref in spine_node.iterfind("opf:itemref", _NS)
             if ref.get("idref", "") in items and ref.get("linear", "yes") != "no"]
    nav_file = next((f for f, _, props in items.values() if "nav" in props.split()), "")
    toc = _nav_entries(reader, nav_file) if nav_file else []
    if not toc and spine_node.get("toc") in items:
        toc = _ncx_entries(reader, items[spine_node.get("toc", "")][0])
    spine_set = set(spine)
    toc = [e for e in toc if e.file in spine_set and e.title]
    # A section: an entry pointing into the file its parent (shallower, earlier) entry starts.
    starts: list[_TocEntry] = []
    for e in toc:
        parent = next((s for s in reversed(starts) if s.depth < e.depth), None)
        if parent is not None and parent.file == e.file and e.fragment:
            continue
        if any(s.file == e.file and s.fragment == e.fragment for s in starts):
            continue
        starts.append(e)
    by_file: dict[str, list[_TocEntry]] = {}
    for e in starts:
        by_file.setdefault(e.file, []).append(e)

    chapters: list[Chapter] = []
    cur_paras: list[str] = []
    cur_title, cur_source, first_heading = "", "", ""

    def close() -> None:
        title = cur_title or first_heading or (dc("title") or default_title)
        ch = _chapter(title, cur_paras, cur_source)
        if ch and (ch.paragraphs or cur_title):
            chapters.append(ch)

    for file in spine:
        entries = by_file.get(file, [])
        ids = {e.fragment for e in entries if e.fragment}
        extractor = _TextExtractor(ids)
        extractor.feed(reader.read(file).decode("utf-8", errors="replace"))
        pending = {e.fragment: e for e in entries}
        if "" in pending:
            close()
            e = pending.pop("")
            cur_title, cur_paras, cur_source, first_heading = e.title, [], file, ""
        for kind, value in extractor.result():
            if kind == "mark":
                if value in pending:
                    close()
                    e = pending.pop(value)
                    cur_title, cur_paras, cur_source, first_heading = e.title, [], f"{file}#{value}", ""
                continue
            if kind == "h" and not first_heading and not cur_paras:
                first_heading = value
            if not cur_source:
                cur_source = file
            cur_paras.append(value)
        for e in pending.values():  # an anchor that was never found: start the chapter at the file's end
            close()
            cur_title, cur_paras, cur_source, first_heading = e.title, [], file, ""
    close()
    return Book(title=dc("title") or default_title, chapters=tuple(chapters), format="epub", language=dc("language"),
                author=dc("creator"))


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
        ch = _chapter(str(e.get("title") or ""), body, f"start {n + 1}")
        if ch is not None and not e.get("skip"):
            out.append(replace(ch, title=ch.title or (ch.paragraphs[0][:60] if ch.paragraphs else "")))
    return out

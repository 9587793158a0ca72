"""EPUB in, a ``Book`` out: the table of contents (EPUB 3 nav, else the EPUB 2 NCX) over the spine.

Only the standard library: an EPUB is a zip of XHTML read with ``zipfile`` and ``html.parser`` (which
also copes with HTML entities that strict XML refuses). A nav entry that points into the same file as
its parent (a section) stays inside its parent's chapter; spine files without an entry continue the
chapter before them. Encrypted books (DRM) are refused; font obfuscation is not encryption.
"""

from __future__ import annotations

import html.parser
import io
import posixpath
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from urllib.parse import unquote, urldefrag

from pipeline.errors import InputError
from books.model import Book, Chapter, make_chapter, one_line
from wire.errors import BAD_BOOK

MAX_MEMBER_BYTES = 64 * 1024 * 1024  # one file inside an EPUB, decompressed: a zip bomb stops here

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
        ch = make_chapter(title, cur_paras, cur_source)
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


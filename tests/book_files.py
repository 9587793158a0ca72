"""What the audiobook tests share: EPUB files built on the spot (so each fixture shows what the parser
meets), the test book, and measures of a joined chapter (its layout, the steps at its joins)."""

from __future__ import annotations

import html
import zipfile
from pathlib import Path

import numpy as np

from books.formats import Book

DATA = Path(__file__).parent / "data" / "book"
MD = DATA / "small_farm.md"
BOOK_ID = "small-farm"


# -- EPUB files made here, so the fixtures show what the parser meets ----------------------------------


def make_epub(path: Path, title: str, docs: list[tuple[str, str]], toc: list[tuple[int, str, str]], *, lang: str = "en",
              nav: bool = True, linear_no: tuple[str, ...] = (), encryption: str | None = None) -> Path:
    """``docs``: (file name, body HTML) in spine order; ``toc``: (depth, label, href) in reading order."""
    items = "".join(f'<item id="d{i}" href="text/{name}" media-type="application/xhtml+xml"/>' for i, (name, _) in enumerate(docs))
    no = ' linear="no"'
    spine = "".join(f'<itemref idref="d{i}"{no if name in linear_no else ""}/>' for i, (name, _) in enumerate(docs))
    nav_item = '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>' if nav else ""
    opf = (f'<?xml version="1.0" encoding="utf-8"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
           f'<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{html.escape(title)}</dc:title>'
           f'<dc:language>{lang}</dc:language><dc:creator>Test Author</dc:creator></metadata>'
           f'<manifest>{nav_item}<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>{items}</manifest>'
           f'<spine toc="ncx">{spine}</spine></package>')

    def ol(entries: list[tuple[int, str, str]], depth: int = 0) -> str:
        out, i = "<ol>", 0
        while i < len(entries):
            _, label, href = entries[i]
            j = i + 1
            while j < len(entries) and entries[j][0] > depth:
                j += 1
            inner = ol(entries[i + 1 : j], depth + 1) if j > i + 1 else ""
            out += f'<li><a href="text/{href}">{html.escape(label)}</a>{inner}</li>'
            i = j
        return out + "</ol>"

    nav_doc = (f'<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml" '
               f'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>nav</title></head><body>'
               f'<nav epub:type="landmarks"><ol><li><a href="text/{docs[0][0]}">Start</a></li></ol></nav>'
               f'<nav epub:type="toc"><h1>Contents</h1>{ol(toc)}</nav></body></html>')
    points, stack = "", []
    for n, (d, label, href) in enumerate(toc):
        while stack and stack[-1] >= d:
            points += "</navPoint>"
            stack.pop()
        points += (f'<navPoint id="p{n}"><navLabel><text>{html.escape(label)}</text></navLabel>'
                   f'<content src="text/{href}"/>')
        stack.append(d)
    points += "</navPoint>" * len(stack)
    ncx = (f'<?xml version="1.0" encoding="utf-8"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
           f'<navMap>{points}</navMap></ncx>')
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", '<?xml version="1.0"?><container version="1.0" '
                   'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
                   '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>')
        z.writestr("OEBPS/content.opf", opf)
        if nav:
            z.writestr("OEBPS/nav.xhtml", nav_doc)
        z.writestr("OEBPS/toc.ncx", ncx)
        for name, body in docs:
            z.writestr(f"OEBPS/text/{name}", '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml" '
                       f'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>{name}</title>'
                       f'<style>p {{ margin: 0 }}</style></head><body>{body}</body></html>')
        if encryption:
            z.writestr("META-INF/encryption.xml", '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                       'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
                       f'<enc:EncryptionMethod Algorithm="{encryption}"/></enc:EncryptedData></encryption>')
    return path


def epub_of(book: Book, path: Path) -> Path:
    """The EPUB of a parsed book: front matter without a nav entry, then one file per chapter, with the
    markup real EPUBs carry (a footnote, ruby, entities, a heading repeating the title)."""
    docs, toc = [], []
    front, chapters = book.chapters[0], book.chapters[1:]
    docs.append(("front.xhtml", f"<h1>{html.escape(front.title)}</h1>" + "".join(f"<p>{html.escape(p)}</p>" for p in front.paragraphs)))
    for n, ch in enumerate(chapters, 1):
        paras = [f"<p>{html.escape(p)}</p>" for p in ch.paragraphs]
        if n == 1:
            paras[0] = paras[0].replace("quiet", "<em>quiet</em>").replace("hills.", 'hills.<a epub:type="noteref" href="#fn1"><sup>1</sup></a>')
            paras.append('<aside epub:type="footnote" id="fn1"><p>A footnote is not read.</p></aside>')
        if n == 2:
            paras[0] = paras[0].replace("下雨", "<ruby>下<rt>xià</rt></ruby>雨")
        body = f'<section><h2 class="title">{html.escape(ch.title)}</h2>{"".join(paras)}</section>'
        docs.append((f"ch{n:02d}.xhtml", body.replace("&#x27;", "&apos;").replace("Birds sang", "Birds&#160;sang")))
        toc.append((0, ch.title, f"ch{n:02d}.xhtml"))
    return make_epub(path, book.title, docs, toc, lang="zh")


# -- measures of a joined chapter ------------------------------------------------------------------


def join_steps(y: np.ndarray, joins: list[int], reach: int = 3) -> float:
    """The largest sample-to-sample step within ``reach`` samples of any join."""
    return max((float(np.max(np.abs(np.diff(y[max(0, b - reach) : b + reach])))) for b in joins if 0 < b < len(y)), default=0.0)


def typical_step(y: np.ndarray) -> float:
    """The median sample-to-sample step where there is sound."""
    d = np.abs(np.diff(y))
    return float(np.median(d[np.abs(y[1:]) > 0.01]))


def layout(lengths: list[int], pauses: list[float], rate: int, head_s: float, tail_s: float) -> tuple[int, list[int]]:
    """The expected length of a chapter and the sample index of every join in it."""
    pos, joins = round(head_s * rate), []
    for n, pause in zip(lengths, pauses):
        joins.append(pos)
        pos += n
        joins.append(pos)
        pos += round(pause * rate)
    return pos + round(tail_s * rate), joins

"""What a parsed book is (a title and chapters of one-line paragraphs), and the text helpers every
format's reader shares (``books.formats``, ``books.epub``)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from wire.errors import BAD_BOOK



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


def make_chapter(title: str, paragraphs: Iterable[str], source: str) -> Chapter | None:
    """A chapter of the paragraphs that have something to read, each on one line; None when empty."""
    paras = [p for p in (one_line(x) for x in paragraphs) if p and any(ch.isalnum() for ch in p)]
    if paras and title and _key(paras[0]) == _key(title):
        paras = paras[1:]  # the heading repeated in the body: it is read once, as the title
    if not paras and not title:
        return None
    return Chapter(title=one_line(title), paragraphs=tuple(paras), source=source)

"""Audiobooks: reading books (plain text, Markdown, EPUB, a chapter manifest), planning and job ids, the
chapter join (exact length, no clicks, one gain), then end to end on real worker processes: Markdown
into a folder, the EPUB of the same book into S3 (moto) reusing every segment, an edited book, and a
SIGKILL of the worker and the runner midway through a book."""

from __future__ import annotations

import html
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from pipeline.errors import InputError
from producer.book import (
    BookOptions,
    BookPlan,
    BookResult,
    book_gain,
    default_book_id,
    loudness_of,
    main,
    plan_book,
    run_book,
    segment_key,
    submit_book,
)
from producer.book_formats import (
    BAD_BOOK,
    Book,
    apply_manifest,
    load_book,
    parse_epub,
    parse_markdown,
    parse_text,
)
from producer.client import Client
from tests.conftest import Farm
from workers.assembly import LoudnessMeter, join_chapter, limit_peaks

ROOT = Path(__file__).resolve().parent.parent
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


# -- the join ----------------------------------------------------------------------------------------------------


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


def test_join_is_exact_and_click_free_where_a_plain_concatenation_clicks() -> None:
    rate = 24000
    t = np.arange(int(0.5 * rate)) / rate
    segs = [(0.5 * np.sin(2 * np.pi * 220 * t + phase)).astype(np.float32) for phase in (0.4, 1.1, 2.0)]  # cut mid-wave
    pauses = [0.3, 0.0, 0.0]
    y = np.concatenate(list(join_chapter(zip(segs, pauses), rate, head_s=0.5, tail_s=1.0)))
    length, joins = layout([len(s) for s in segs], pauses, rate, 0.5, 1.0)
    assert len(y) == length
    naive = np.concatenate([np.zeros(12000), segs[0], np.zeros(7200), segs[1], segs[2], np.zeros(24000)]).astype(np.float32)
    assert join_steps(naive, joins) > 3 * typical_step(naive)  # the measure does catch a click
    assert join_steps(y, joins) <= 0.1 * typical_step(y)
    mid = slice(joins[0] + 500, joins[1] - 500)
    np.testing.assert_array_equal(y[mid], segs[0][500:-500])  # between the fades the audio is untouched


def test_limiter_holds_the_ceiling_and_leaves_quiet_audio_alone() -> None:
    rate = 24000
    x = (0.3 * np.sin(2 * np.pi * 180 * np.arange(rate) / rate)).astype(np.float32)
    x[12000:12030] = np.linspace(0.9, -0.95, 30)  # a short burst over the ceiling
    y = limit_peaks(x.copy(), rate, ceiling=0.5)
    assert np.max(np.abs(y)) <= 0.5 + 1e-6
    np.testing.assert_array_equal(y[:11000], x[:11000])  # gain dips only around the burst (+-20 ms)
    np.testing.assert_array_equal(y[13100:], x[13100:])
    assert np.max(np.abs(np.diff(y))) <= np.max(np.abs(np.diff(x)))  # no new edge


def test_limiter_holds_the_ceiling_over_long_loud_segments() -> None:
    """Minutes of audio mostly over the ceiling: the gain's running sums must not drift above it."""
    rng = np.random.default_rng(7)
    for rate, seconds in ((22050, 90), (24000, 47), (16000, 300)):
        x = (rng.standard_normal(rate * seconds) * 0.4).astype(np.float32)
        y = limit_peaks(x.copy(), rate, ceiling=0.708)
        assert np.max(np.abs(y)) <= 0.708 * (1 + 1e-6), (rate, seconds)


def test_gated_loudness_and_one_gain_for_the_book() -> None:
    rate = 24000
    loud, quiet = LoudnessMeter(rate), LoudnessMeter(rate)
    tone = np.sin(2 * np.pi * 200 * np.arange(2 * rate) / rate).astype(np.float32)
    loud.add(0.2 * tone)
    loud.add(np.zeros(rate, np.float32))  # silence is gated out
    quiet.add(0.1 * tone)
    assert loudness_of([loud.bins]) == pytest.approx(20 * np.log10(0.2 / np.sqrt(2)), abs=0.05)
    both = loudness_of([loud.bins, quiet.bins])
    assert 20 * np.log10(0.1 / np.sqrt(2)) < both < 20 * np.log10(0.2 / np.sqrt(2))
    gain, capped = book_gain(-26.0, 0.5, BookOptions(loudness_db=-20.0, peak_db=-3.0, limit_db=6.0))
    assert gain == pytest.approx(6.0) and not capped
    gain, capped = book_gain(-30.0, 1.0, BookOptions(loudness_db=-20.0, peak_db=-3.0, limit_db=6.0))
    assert gain == pytest.approx(3.0) and capped  # the limiter may take 6 dB off a 0 dBFS peak, no more


def test_stream_encoder_writes_each_format_with_tags() -> None:
    from workers.assembly import StreamEncoder

    rate = 22050
    x = (0.3 * np.sin(2 * np.pi * 300 * np.arange(rate) / rate)).astype(np.float32)
    for fmt, out_rate in (("flac", 22050), ("wav", 22050), ("ogg", 24000)):  # Opus runs at 24 kHz, not 22.05
        enc = StreamEncoder(fmt, rate, {"title": "第一章 Morning", "album": "Book", "tracknumber": "3"})
        for i in range(0, rate, 1000):
            enc.write(x[i : i + 1000])
        f = sf.SoundFile(io.BytesIO(enc.close()))
        assert (f.samplerate, f.frames) == (out_rate, out_rate), fmt
        if fmt != "wav":
            assert (f.title, f.album, f.tracknumber) == ("第一章 Morning", "Book", "3")


def test_workers_write_only_into_marked_folders(tmp_path: Path) -> None:
    from pipeline.settings import StorageSettings
    from producer.book import OUTPUT_MARKER, normalize_out
    from workers.assembly import output_storage

    with pytest.raises(InputError) as err:
        output_storage(StorageSettings(), str(tmp_path))  # any folder a task names: refused
    assert err.value.code == "BOOK_OUTPUT_REFUSED"
    out = normalize_out(str(tmp_path / "book"))  # the runner makes the folder and marks it
    assert (Path(out) / OUTPUT_MARKER).is_file()
    assert output_storage(StorageSettings(), out).put("001-a.flac", b"x", "audio/flac").startswith("file://")
    with pytest.raises(InputError):
        output_storage(StorageSettings(), "relative/dir")


# -- end to end on a farm --------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    if url := os.environ.get("TTSFARM_TEST_S3_ENDPOINT"):
        yield url
        return
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
       "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}


@pytest.fixture(scope="module")
def farm(redis_url: str, tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str) -> Iterator[Farm]:
    with pytest.MonkeyPatch.context() as mp:
        for k, v in AWS.items():
            mp.setenv(k, v)
        f = Farm(redis_url, tmp_path_factory.mktemp("bookfarm"), TTSFARM_STORAGE_S3_ENDPOINT_URL=s3_endpoint,
                 TTSFARM_QUEUE_CLAIM_IDLE_MS="10000", **AWS)  # a dead worker's entries come back after 10 s
        f.start_worker()
        try:
            yield f
        finally:
            f.stop()


@pytest.fixture(scope="module")
def md_run(farm: Farm, tmp_path_factory: pytest.TempPathFactory) -> tuple[BookResult, Path, str]:
    out = tmp_path_factory.mktemp("md_out")
    err = io.StringIO()
    result = run_book(farm.settings, MD, None, str(out), book_id=BOOK_ID, progress=err, timeout=150)
    return result, out, err.getvalue()


def _check_chapters(farm: Farm, plan: BookPlan, result: BookResult, read: Any) -> dict[str, float]:
    """Every chapter: its length is its segments plus the planned pauses; no join clicks; one gain."""
    from workers.storage import storage_from_settings

    store = storage_from_settings(farm.settings.storage)
    opts = BookOptions()
    gain = 10 ** (result.gain_db / 20)
    worst, plain, ratios, errors = 0.0, 0.0, [], []
    for ch, made in zip(plan.chapters, result.chapters):
        audio, rate = read(made.file)
        assert rate == plan.sample_rate
        segs = [np.frombuffer(store.get(segment_key(s.job_id)), "<i2").astype(np.float32) / 32768 for s in ch.segments]
        length, joins = layout([len(s) for s in segs], [s.pause_after_s for s in ch.segments], rate, opts.head_s, opts.tail_s)
        errors.append(abs(len(audio) - length) / rate)
        assert abs(len(audio) - length) / rate <= 0.020, (made.title, len(audio), length)
        assert abs(made.duration_s - len(audio) / rate) < 1e-3
        step = join_steps(audio, joins) / typical_step(audio)
        worst = max(worst, step)
        assert step <= 1.0, (made.title, step)
        pieces = list(zip(segs, [s.pause_after_s for s in ch.segments]))
        naive = np.zeros(length, np.float32)
        pos = round(opts.head_s * rate)
        for seg, pause in pieces:  # the same layout without fades: what the joins would be without them
            naive[pos : pos + len(seg)] = seg * gain
            pos += len(seg) + round(pause * rate)
        plain = max(plain, join_steps(naive, joins) / typical_step(naive))
        ref = np.concatenate(list(join_chapter(pieces, rate, fade_ms=opts.fade_ms, head_s=opts.head_s, tail_s=opts.tail_s)))
        loud = np.abs(ref) > 0.02
        ratios.append(float(np.median(audio[loud] / ref[loud])))
        assert np.max(np.abs(audio)) <= 10 ** (opts.peak_db / 20) + 2 / 32768
    assert max(abs(r - gain) for r in ratios) < 0.01 * gain, ratios  # the same gain in every chapter
    return {"max_join_step_over_typical": round(worst, 3), "unfaded_max_join_step_over_typical": round(plain, 3),
            "max_duration_error_s": max(errors), "gain_db": round(result.gain_db, 2)}


@pytest.mark.slow
def test_markdown_book_into_a_folder(farm: Farm, md_run: tuple[BookResult, Path, str]) -> None:
    result, out, progress = md_run
    plan = plan_book(farm.settings, load_book(MD), book_id=BOOK_ID, opts=BookOptions())
    assert len(result.chapters) == 11 and result.segments == len(plan.jobs) == result.synthesized
    assert result.reused == 0 and not result.skipped
    numbers = _check_chapters(farm, plan, result, lambda f: sf.read(out / f, dtype="float32"))
    print(f"\nmarkdown book: {numbers}, {result.duration_s:.1f} s of audio in {result.wall_s:.1f} s")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert [c["title"] for c in manifest["chapters"]] == [c.title for c in plan.chapters]
    assert [c["file"] for c in manifest["chapters"]] == sorted(p.name for p in out.glob("*.flac"))
    loud = manifest["loudness"]
    assert loud["gain_capped"] or abs(loud["measured_db"] + loud["gain_db"] - loud["target_db"]) < 0.01
    m3u = (out / "playlist.m3u8").read_text(encoding="utf-8").splitlines()
    assert m3u[0] == "#EXTM3U" and m3u[-1] == "011-第十章-再见.flac" and m3u[-2].endswith(",第十章 再见")
    last = progress.strip().splitlines()[-1]
    assert last.startswith("done") and f"{len(plan.jobs)}/{len(plan.jobs)} segments" in last and "chapters 11/11" in last
    assert sf.info(str(out / result.chapters[2].file)).format == "FLAC"


@pytest.mark.slow
def test_epub_of_the_same_book_into_s3_reuses_every_segment(farm: Farm, md_run: tuple[BookResult, Path, str],
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.settings import StorageSettings
    from workers.storage import S3Storage

    for k, v in AWS.items():
        monkeypatch.setenv(k, v)
    first, md_out, _ = md_run
    epub = epub_of(load_book(MD), tmp_path / "small_farm.epub")
    bucket = f"books-{uuid.uuid4().hex[:10]}"
    s3 = S3Storage(StorageSettings(s3_bucket=bucket, s3_endpoint_url=farm.settings.storage.s3_endpoint_url, prefix="audio/small"))
    s3.ensure_bucket()
    result = run_book(farm.settings, epub, None, f"s3://{bucket}/audio/small", book_id=BOOK_ID, timeout=120)
    assert result.reused == result.segments == first.segments and result.synthesized == 0
    assert result.manifest_url == f"s3://{bucket}/audio/small/manifest.json"
    listing = s3.client.list_objects_v2(Bucket=bucket)["Contents"]
    assert len(listing) == 11 + 2
    manifest = json.loads(s3.get("manifest.json"))
    assert manifest["title"] == "The Small Farm" and len(manifest["chapters"]) == 11
    for a, b in zip(first.chapters, result.chapters):  # the same segments, pauses and gain: the same audio
        s3_audio, _ = sf.read(io.BytesIO(s3.get(b.file)), dtype="int16")
        local, _ = sf.read(md_out / a.file, dtype="int16")
        np.testing.assert_array_equal(s3_audio, local)


@pytest.mark.slow
def test_edited_book_remakes_only_the_changed_segments(farm: Farm, md_run: tuple[BookResult, Path, str], tmp_path: Path) -> None:
    assert md_run[0].synthesized  # the book was made once before
    edited = tmp_path / "small_farm.md"
    edited.write_text(MD.read_text(encoding="utf-8").replace("came out, one by one", "came out slowly").replace(
        "## Chapter 1: Morning", "## Prologue: Dawn\n\nIt was early.\n\n## Chapter 1: Morning"), encoding="utf-8")
    result = run_book(farm.settings, edited, None, str(tmp_path / "out"), book_id=BOOK_ID, timeout=120)
    assert result.synthesized == 4 and result.reused == result.segments - 4  # see the planning test
    assert len(result.chapters) == 12


KILL_BOOK = "\n\n".join(
    [f"Chapter {n}\n\n{a}. {b}. The end of part {n}." for n, (a, b) in enumerate(
        [("The road was long", "We walked all day"), ("Rain fell on the roof", "The cat slept"),
         ("A boat crossed the lake", "Fish jumped"), ("The bell rang twice", "Children ran out"),
         ("Snow covered the town", "Lamps were lit"), ("A train came late", "Nobody minded"),
         ("The garden grew wild", "Bees hummed"), ("Letters piled up", "Someone answered them")], 1)]
    + ["第九章 夜\n\n夜很静。"])


@pytest.mark.slow
def test_killed_worker_and_runner_then_a_rerun_redoes_only_what_was_in_flight(farm: Farm, tmp_path: Path) -> None:
    """Last in the module: it kills the module's worker and leaves a new one. The bulk lane admits 6
    segments at a time, so the runner also dies holding segments it never queued."""
    book = tmp_path / "kill_book.txt"
    book.write_text(KILL_BOOK, encoding="utf-8")
    out = tmp_path / "out"
    settings = farm.settings.replace(queue={"max_backlog_bulk_segments": 6})
    plan = plan_book(settings, load_book(book), book_id="kill-book", opts=BookOptions())
    ids = list(plan.jobs)
    client = farm.client()

    def states() -> dict[str, str]:
        pipe = client.redis.pipeline()
        for j in ids:
            pipe.hget(client.keys.status(j), "state")
        return {j: (s or b"absent").decode() for j, s in zip(ids, pipe.execute())}

    env = {**os.environ, **farm.env, "PYTHONPATH": str(ROOT), "TTSFARM_QUEUE_MAX_BACKLOG_BULK_SEGMENTS": "6"}
    runner = subprocess.Popen([sys.executable, "-m", "producer.book", str(book), "--out", str(out), "--book-id", "kill-book",
                               "--quiet"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while sum(s == "done" for s in states().values()) < len(ids) // 3:
        assert runner.poll() is None, runner.stderr.read() if runner.stderr else ""
        assert time.monotonic() < deadline, states()
        time.sleep(0.05)
    for w in farm.workers:
        w.stop(signal.SIGKILL)  # type: ignore[attr-defined]
    runner.send_signal(signal.SIGKILL)
    runner.wait(10)
    before = states()
    in_flight = sorted(j for j, s in before.items() if s != "done")
    assert 0 < len(in_flight) < len(ids) and set(before.values()) <= {"done", "queued", "running", "absent"}, before
    assert "absent" in before.values()  # held back by the full lane when the runner died
    rerun_at = time.time()
    with Client.from_url(settings=settings) as sdk:  # the rerun, through the SDK this time
        handle = submit_book(sdk, book, out=str(out), book_id="kill-book")
        p = handle.progress()
        assert (p.done, p.reused, p.total) == (len(ids) - len(in_flight), len(ids) - len(in_flight), len(ids))
        farm.start_worker()  # only now: nothing can finish between the snapshot and the rerun's submission
        chapters = list(handle.results(timeout=150))
        result = handle.result()
    assert [c.index for c in chapters] == [c.index for c in plan.chapters] and result.chapters == tuple(chapters)
    assert (result.reused, result.synthesized, result.skipped) == (len(ids) - len(in_flight), len(in_flight), ())
    finished = {j: float(client.redis.hget(client.keys.status(j), "finished") or 0) for j in ids}
    assert sorted(j for j in ids if finished[j] > rerun_at) == in_flight  # only those were made again
    entries: Counter[str] = Counter()
    for stream in client.keys.queues(len(farm.settings.queue.bucket_edges_s) + 1):
        for _, fields in client.redis.xrange(stream):
            entries[json.loads(fields[b"job"])["job_id"]] += 1
    assert all(entries[j] == 1 for j in ids), {j: entries[j] for j in ids if entries[j] != 1}  # no job was queued twice
    numbers = _check_chapters(farm, plan, result, lambda f: sf.read(out / f, dtype="float32"))
    print(f"\nkilled and rerun: {len(in_flight)} of {len(ids)} redone, {numbers}, rerun {result.wall_s:.1f} s")

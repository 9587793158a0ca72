"""A book's plan on the farm: its options, the segment jobs of each chapter and their ids, the progress
and result types, and the one gain per book chosen from the chapters' loudness. Pure computation: no
Redis or Celery here (``books.handle`` drives the plan on the farm)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, NOTHING_TO_SPEAK, InputError
from books.formats import Book
from producer.checks import integer_arg, lexicon_arg, name_arg, number_arg, optional_name_arg, options_arg
from wire.settings import Settings
from wire.tasks import CHAPTER_FORMATS, LOUDNESS_FLOOR_DB, LOUDNESS_STEP_DB

ID_VERSION = 1  # bump when the same inputs should no longer reuse earlier audio


@dataclass(frozen=True)
class BookOptions:
    voice: str | None = None
    format: str = "flac"  # flac | ogg (Opus) | mp3 | wav: the chapter files
    sample_rate: int | None = None
    bitrate: int | None = None  # bit/s of ogg or mp3 chapters; None: the codec's default
    lexicon: Mapping[str, str] = field(default_factory=dict)  # word -> pinyin or phonemes (pipeline.text.lexicon)
    single_file: bool = True  # one M4B (AAC, chapter marks, title) of the whole book beside the chapters
    options: Mapping[str, float] = field(default_factory=dict)  # speed, noise_scale, noise_w
    read_titles: bool = True
    loudness_db: float = -20.0  # gated RMS target of the whole book, dBFS
    peak_db: float = -3.0  # sample peak ceiling of the files, dBFS (ACX asks for -3)
    limit_db: float = 6.0  # the most the peak limiter may take off the loudest peak; the gain is capped to fit
    head_s: float = 0.5  # silence before and after each chapter
    tail_s: float = 1.0
    fade_ms: float = 5.0  # raised-cosine fade at every segment edge: no clicks at joins
    max_retries: int = 2  # per failed segment, then the book fails
    stall_s: float = 300.0  # no progress this long: resend the outstanding assembly tasks


@dataclass(frozen=True)
class PlannedSegment:
    job_id: str
    text: str
    lang: str
    voice: str
    pause_after_s: float
    est_s: float
    words: tuple[tuple[int, int, int, int, str, str], ...] = ()  # as SegmentJob.words (offsets into the paragraphs)


@dataclass(frozen=True)
class ChapterPlan:
    index: int  # 1-based
    title: str
    segments: tuple[PlannedSegment, ...]
    skipped: tuple[str, ...] = ()  # paragraphs that could not be read (language, nothing to speak)

    @property
    def file_stem(self) -> str:
        slug = re.sub(r"[^\w]+", "-", self.title, flags=re.UNICODE).strip("-_")[:48].strip("-_")
        return f"{self.index:03d}-{slug}" if slug else f"{self.index:03d}"


@dataclass(frozen=True)
class BookPlan:
    book_id: str
    book: Book
    voice: str
    sample_rate: int
    options: Mapping[str, float]
    chapters: tuple[ChapterPlan, ...]

    @property
    def jobs(self) -> dict[str, PlannedSegment]:
        return {s.job_id: s for ch in self.chapters for s in ch.segments}


@dataclass(frozen=True)
class BookProgress:
    phase: str  # synthesizing | assembling | done
    done: int
    total: int
    reused: int
    skipped: int
    audio_s: float  # the book's audio done so far, as its chapter files lay it out (the manifest's at the end)
    elapsed_s: float
    rate_x: float  # seconds of the book's audio this run added, per second
    eta_s: float | None
    chapters_done: int
    chapters_total: int


@dataclass(frozen=True)
class ChapterResult:
    index: int
    title: str
    file: str
    url: str
    duration_s: float
    segments: int
    bytes: int
    captions: str = ""  # the chapter's WebVTT, beside its audio file


@dataclass(frozen=True)
class BookResult:
    book_id: str
    title: str
    out: str
    chapters: tuple[ChapterResult, ...]
    manifest_url: str
    playlist_url: str
    segments: int
    reused: int
    synthesized: int
    skipped: tuple[str, ...]
    loudness_db: float
    gain_db: float
    gain_capped: bool
    wall_s: float
    book_file_url: str | None = None  # the M4B of the whole book (opts.single_file)

    @property
    def duration_s(self) -> float:
        return sum(c.duration_s for c in self.chapters)


# -- planning --------------------------------------------------------------------------------------


def default_book_id(path: str | Path) -> str:
    """The file's name without suffix, as a slug: stable across edits of the book."""
    slug = re.sub(r"[^\w]+", "-", Path(path).stem.lower(), flags=re.UNICODE).strip("-")
    return slug[:48] or "book"


def segment_job_id(book_id: str, voice: str, lang: str, text: str, rate: int, options: Mapping[str, float]) -> str:
    material = json.dumps([ID_VERSION, book_id, voice, lang, text, rate, sorted(options.items())], ensure_ascii=False)
    digest = base64.b32encode(hashlib.sha256(material.encode("utf-8")).digest()).decode().lower()
    return "bk" + digest[:30]


def segment_key(job_id: str) -> str:
    """Where a worker stores a pcm job's output (``Publisher.store_and_finish``)."""
    return f"{job_id}/audio.pcm"


def book_args(path: Any, out: Any, book_id: Any, manifest: Any) -> tuple[str | os.PathLike[str], str, str | None]:
    """The arguments of ``submit_book`` that name things, checked for type (``producer.checks``)."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)) or not str(path):
        raise InputError(f"the book must be a file path (str or os.PathLike), not {type(path).__name__}", code=BAD_OPTION)
    if not isinstance(out, str) or not out.strip():
        raise InputError(f"out must be s3://bucket/prefix or a folder, not {out!r}"[:200], code=BAD_OPTION)
    if manifest is not None and not isinstance(manifest, (str, os.PathLike, Mapping)):
        raise InputError(f"the chapter manifest must be a path or a mapping, not {type(manifest).__name__}", code=BAD_OPTION)
    return path, out, optional_name_arg("book_id", book_id)


def check_book_options(opts: BookOptions) -> None:
    """Every ``BookOptions`` field of the wrong type or out of range is BAD_OPTION (the voice, format and
    rate vocabularies are checked where they are used)."""
    optional_name_arg("voice", opts.voice)
    name_arg("format", opts.format)
    integer_arg("sample_rate", opts.sample_rate, optional=True)
    options_arg(opts.options)
    lexicon_arg(opts.lexicon)
    if not isinstance(opts.single_file, bool):
        raise InputError(f"single_file must be true or false, not {opts.single_file!r}"[:120], code=BAD_OPTION)
    if not isinstance(opts.read_titles, bool):
        raise InputError(f"read_titles must be true or false, not {opts.read_titles!r}"[:120], code=BAD_OPTION)
    number_arg("loudness_db", opts.loudness_db, low=LOUDNESS_FLOOR_DB, high=0)
    number_arg("peak_db", opts.peak_db, low=-60, high=0)
    number_arg("limit_db", opts.limit_db, low=0, high=24)
    number_arg("head_s", opts.head_s, low=0, high=60)
    number_arg("tail_s", opts.tail_s, low=0, high=60)
    number_arg("fade_ms", opts.fade_ms, low=0, high=1000)
    number_arg("max_retries", opts.max_retries, low=0, high=100, integer=True)
    number_arg("stall_s", opts.stall_s, low=0, high=7 * 86400, low_open=True)


def check_book_text(book: Book) -> None:
    """Every title and paragraph is valid Unicode (INVALID_UTF8 otherwise). A book file is decoded strictly
    (``books.formats``: BAD_BOOK when it is not UTF-8), but a manifest (JSON's "\\ud800") or a ``Book`` made in
    Python can hand in a lone surrogate, which no chapter file, manifest or segment job could carry."""
    from pipeline.text.clean import check_unicode

    check_unicode(book.title, "the book's title")
    check_unicode(book.author, "the book's author")
    for n, ch in enumerate(book.chapters, 1):
        check_unicode(ch.title, f"the title of chapter {n}")
        for para in ch.paragraphs:
            check_unicode(para, f"a paragraph of chapter {n}")


def plan_book(settings: Settings, book: Book, *, book_id: str, opts: BookOptions) -> BookPlan:
    """Segments and job ids of every chapter; input errors (voice, options) are raised here."""
    from pipeline.audio import check_sample_rate
    from pipeline.audio import output_rate as encoded_rate
    from pipeline.encoders import check_bitrate
    from pipeline.text.segment import Segmenter
    from pipeline.text.sources import words_after
    from pipeline.voices.bank import output_rate
    from pipeline.voices.base import SynthesisOptions

    from pipeline.text.lexicon import apply_lexicon, check_lexicon

    check_book_options(opts)
    check_book_text(book)
    lexicon = check_lexicon(opts.lexicon)
    if not re.fullmatch(r"[\w.-]{1,64}", name_arg("book_id", book_id)):
        raise InputError(f"book id {book_id!r}: use 1 to 64 letters, digits, '.', '_' or '-'", code=BAD_OPTION)
    spec = settings.catalogue.get(opts.voice)
    rate = check_sample_rate(opts.sample_rate) if opts.sample_rate else output_rate(settings.catalogue, spec.name)
    check_bitrate(opts.format, opts.bitrate, encoded_rate(opts.format, rate) if opts.format in CHAPTER_FORMATS else None)
    options = SynthesisOptions.from_dict(options_arg(opts.options)).to_dict()
    fe = settings.frontend
    segmenter = Segmenter(dataclasses.replace(fe, first_segment_chars=fe.max_segment_chars,
                                              first_segment_chars_zh=fe.max_segment_chars_zh))
    chapters = []
    for n, ch in enumerate(book.chapters, 1):
        paras = [apply_lexicon(p, lexicon) for p in ([ch.title] if opts.read_titles and ch.title else []) + list(ch.paragraphs)]
        segs, skipped = _segment_paragraphs(segmenter, paras, fe.paragraph_pause_s)
        after = words_after([(s.words, source) for s, source in segs])
        planned = tuple(_planned(settings, spec.name, s, book_id, rate, options, source, tails)
                        for (s, source), tails in zip(segs, after))
        chapters.append(ChapterPlan(n, ch.title or f"{n}", planned, tuple(skipped)))
    chapters = [c for c in chapters if c.segments]
    if not chapters:
        raise InputError("no chapter of the book has anything this voice can read", code=NOTHING_TO_SPEAK)
    return BookPlan(book_id, book, spec.name, rate, options, tuple(chapters))


def _segment_paragraphs(segmenter: Any, paras: list[str], paragraph_pause: float) -> tuple[list[tuple[Any, str]], list[str]]:
    """The whole chapter at once (one language guess for bare numbers); paragraph by paragraph, skipping
    the ones that cannot be read, when that fails or the chapter is over the text limit. Each segment comes
    with the text its words' offsets index."""
    text = "\n\n".join(paras)
    if paras and len(text) <= segmenter.s.max_text_chars:
        try:
            return [(s, text) for s in segmenter.split(text)], []
        except InputError:
            pass
    segs: list[tuple[Any, str]] = []
    skipped: list[str] = []
    for para in paras:
        try:
            part = segmenter.split(para)
        except InputError as exc:
            skipped.append(f"[{exc.code}] {para[:60]}")
            continue
        if segs:
            segs[-1] = (dataclasses.replace(segs[-1][0], pause_after_s=paragraph_pause, brk="paragraph"), segs[-1][1])
        segs += [(s, para) for s in part]
    return segs, skipped


def _planned(settings: Settings, voice: str, seg: Any, book_id: str, rate: int, options: dict[str, float],
             source: str, after: list[str]) -> PlannedSegment:
    from pipeline.voices.bank import route

    concrete = route(settings.catalogue, voice, seg.lang, settings.runtime.cache_dir).name
    words = tuple((a, b, c, d, source[c:d], tail) for (a, b, c, d), tail in zip(seg.words, after))
    return PlannedSegment(segment_job_id(book_id, concrete, seg.lang, seg.text, rate, options), seg.text, seg.lang,
                          concrete, float(seg.pause_after_s), round(max(0.0, seg.est_seconds - seg.pause_after_s), 3), words)


# -- loudness: histograms the workers measure, combined here for one gain per book --------------------


def loudness_of(hists: list[Mapping[str, list[float]]]) -> float:
    """Gated loudness (dBFS) of blocks binned by ``workers.assembly``: absolute gate at the floor, then
    a relative gate 10 dB under the ungated mean, as in ITU-R BS.1770 (without its K-weighting)."""
    bins: dict[int, list[float]] = {}
    for h in hists:
        for k, (count, energy) in h.items():
            b = bins.setdefault(int(k), [0.0, 0.0])
            b[0] += count
            b[1] += energy
    n, e = sum(c for c, _ in bins.values()), sum(x for _, x in bins.values())
    if n <= 0 or e <= 0:
        return -math.inf
    gate = 10 * math.log10(e / n) - 10.0
    kept = [(c, x) for k, (c, x) in bins.items() if LOUDNESS_FLOOR_DB + (k + 1) * LOUDNESS_STEP_DB > gate]
    n, e = sum(c for c, _ in kept), sum(x for _, x in kept)
    return 10 * math.log10(e / n) if n and e > 0 else -math.inf


def book_gain(loudness_db: float, peak: float, opts: BookOptions) -> tuple[float, bool]:
    """(gain in dB, whether the peak allowance held it under the target). Peaks the gain lifts over the
    ceiling are brought down by the assembly's limiter, by at most ``limit_db``."""
    if not math.isfinite(loudness_db):
        return 0.0, False
    gain = max(-30.0, min(30.0, opts.loudness_db - loudness_db))
    if peak > 0 and 20 * math.log10(peak) + gain > opts.peak_db + opts.limit_db:
        return opts.peak_db + opts.limit_db - 20 * math.log10(peak), True
    return gain, False

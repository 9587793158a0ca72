"""``ttsfarm book``: ``run_book`` with a progress bar, the summary, the arguments and the command."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from pipeline.errors import TTSFarmError
from books.formats import load_book
from books.handle import submit_book
from books.plan import (
    BookOptions,
    BookProgress,
    BookResult,
    default_book_id,
    plan_book,
)
from producer.checks import read_lexicon, timeout_arg
from wire.settings import Settings


def run_book(settings: Settings, path: str | Path, voice: str | None, out: str, *, book_id: str | None = None,
             manifest: Any = None, opts: BookOptions | None = None, progress: TextIO | None = None,
             timeout: float | None = None) -> BookResult:
    """Make the audiobook of ``path`` into ``out``; with ``progress`` (a stream) draw a progress bar there."""
    from producer.client import Client

    with Client.from_url(settings=settings) as client:
        handle = submit_book(client, path, out=out, voice=voice, book_id=book_id, manifest=manifest, opts=opts)
        bar = ProgressBar(progress) if progress is not None else None
        result = handle.wait(timeout, on_progress=bar.update if bar else None)
        if bar:
            bar.close(handle._progress())
        return result


class ProgressBar:
    """One redrawn line on a terminal; a line every 10 s elsewhere (logs, CI)."""

    def __init__(self, stream: TextIO, width: int = 24) -> None:
        self.stream, self.width = stream, width
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.every = 0.2 if self.tty else 10.0
        self.last = 0.0

    @staticmethod
    def line(p: BookProgress, width: int = 24) -> str:
        fill = int(width * p.done / max(1, p.total))
        eta = "--:--" if p.eta_s is None else f"{int(p.eta_s // 60)}:{int(p.eta_s % 60):02d}"
        return (f"{p.phase:<12} [{'#' * fill}{'-' * (width - fill)}] {p.done}/{p.total} segments  "
                f"{p.audio_s / 60:.1f} min audio  x{p.rate_x:.1f} real time  ETA {eta}  "
                f"chapters {p.chapters_done}/{p.chapters_total}")

    def update(self, p: BookProgress) -> None:
        if time.monotonic() - self.last < self.every:
            return
        self.last = time.monotonic()
        self.stream.write(("\r" + self.line(p, self.width) + "\x1b[K") if self.tty else self.line(p, self.width) + "\n")
        self.stream.flush()

    def close(self, p: BookProgress) -> None:
        self.last = 0.0
        self.update(p)
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()


def summary(result: BookResult) -> str:
    capped = " (capped: the peaks allow no more)" if result.gain_capped else ""
    lines = [(f"book {result.title!r} ({result.book_id}): {len(result.chapters)} chapters, "
              f"{result.duration_s / 60:.1f} min of audio; {result.segments} segments: {result.reused} reused, "
              f"{result.synthesized} made, {len(result.skipped)} skipped; {result.wall_s:.1f} s"),
             f"loudness {result.loudness_db:.1f} dBFS, gain {result.gain_db:+.1f} dB{capped}",
             f"manifest {result.manifest_url}", f"playlist {result.playlist_url}"]
    lines += [f"skipped: {s}" for s in result.skipped[:10]]
    return "\n".join(lines)


def add_arguments(p: Any) -> None:
    """The ``ttsfarm book`` arguments (``cli`` adds them to its subparser)."""
    p.add_argument("book", help="a .txt, .md or .epub file (UTF-8)")
    p.add_argument("--out", required=True, help="s3://bucket/prefix, or a folder the workers can write")
    p.add_argument("--voice", default=None, help="a catalogue voice or blend (default: the catalogue's default)")
    p.add_argument("--format", default="flac", choices=["flac", "ogg", "mp3", "wav"], help="the chapter files")
    p.add_argument("--bitrate", type=int, default=None, help="bit/s of ogg or mp3 chapters (default: the codec's)")
    p.add_argument("--no-m4b", action="store_true", help="no single M4B of the whole book (chapter files only)")
    p.add_argument("--lexicon", default=None, help='pronunciations: a JSON file or JSON {"重庆": "chong2 qing4"}')
    p.add_argument("--rate", type=int, default=None, help="output sample rate (default: the voice's)")
    p.add_argument("--book-id", default=None, help="names the book's jobs (default: the file name); keep it across edits")
    p.add_argument("--chapters", default=None, help="a JSON manifest overriding chapter splits and titles")
    p.add_argument("--no-titles", action="store_true", help="do not read chapter titles aloud")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--noise-off", action="store_true", help="deterministic output (noise scales 0)")
    p.add_argument("--loudness", type=float, default=-20.0, help="target gated RMS of the book, dBFS")
    p.add_argument("--peak", type=float, default=-3.0, help="peak ceiling, dBFS")
    p.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    p.add_argument("--dry-run", action="store_true", help="print the chapters and segment counts, submit nothing")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def cmd_book(settings: Settings, args: Any) -> int:
    timeout_arg("--timeout", args.timeout)  # before anything is queued
    options = {"speed": args.speed, **({"noise_scale": 0.0, "noise_w": 0.0} if args.noise_off else {})}
    opts = BookOptions(voice=args.voice, format=args.format, sample_rate=args.rate, options=options,
                       read_titles=not args.no_titles, loudness_db=args.loudness, peak_db=args.peak,
                       bitrate=args.bitrate, single_file=not args.no_m4b, lexicon=read_lexicon(args.lexicon) or {})
    if args.dry_run:
        book = load_book(args.book, manifest=args.chapters)
        plan = plan_book(settings, book, book_id=args.book_id or default_book_id(args.book), opts=opts)
        for ch in plan.chapters:
            est = sum(s.est_s + s.pause_after_s for s in ch.segments)
            print(f"{ch.index:3d}  {ch.title[:50]:<50}  {len(ch.segments):5d} segments  ~{est / 60:.1f} min")
        print(f"{plan.book.title!r} ({plan.book_id}): {len(plan.chapters)} chapters, {len(plan.jobs)} distinct segments")
        return 0
    result = run_book(settings, args.book, args.voice, args.out, book_id=args.book_id, manifest=args.chapters, opts=opts,
                      progress=None if args.quiet else sys.stderr, timeout=args.timeout)
    print(summary(result), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m books``: the same as ``ttsfarm book``."""
    import argparse

    from wire.settings import load_settings

    ap = argparse.ArgumentParser(prog="ttsfarm book", description="Make an audiobook on the farm")
    ap.add_argument("--redis", default=None)
    add_arguments(ap)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    env = dict(os.environ, **({"TTSFARM_REDIS_URL": args.redis} if args.redis else {}))
    try:
        return cmd_book(load_settings(env=env), args)
    except TTSFarmError as exc:
        print(f"ttsfarm: error {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


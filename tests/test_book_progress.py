"""Audiobooks, the progress line: the audio it counts is the book's as its chapter files lay it out (segments
made now or reused from an earlier run, each use with its pause, a whole chapter's head and tail), so it ends
at the manifest's total; its real-time factor is the audio this run added per second. Fast: the handle runs on the
in-memory stub broker, a worker's end of each job written with the worker's step (the farm-level runs are in
test_book.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from books.cli import ProgressBar
from books.handle import BookHandle
from books.model import Book
from books.plan import BookOptions, BookPlan, ChapterPlan, PlannedSegment
from producer.client import Client
from wire.connect import connect

SECONDS = {"a": 60.0, "b": 30.0, "c": 45.0, "d": 20.0}  # each segment's audio, as its job's status says
PAUSE = {"a": 0.6, "b": 0.3, "c": 0.6, "d": 0.0}


def seg(job_id: str) -> PlannedSegment:
    return PlannedSegment(job_id, f"text {job_id}", "en", "joe", PAUSE[job_id], SECONDS[job_id] * 0.9)


PLAN = BookPlan("progress-book", Book("Progress", (), "markdown"), "joe", 24000, {}, (
    ChapterPlan(1, "One", (seg("a"), seg("b"))),
    ChapterPlan(2, "Two", (seg("c"),)),
    ChapterPlan(3, "Three", (seg("d"), seg("a"))),  # a segment read twice is in the file twice
))


def finish(broker: Any, job_id: str) -> None:
    """A worker's end of the job: done, with its audio's duration."""
    assert broker.finalize(job_id, "done", {}, maxlen=100, ttl_s=60, duration=SECONDS[job_id]) == 1


def handle(base_settings: Any, done_before: set[str]) -> tuple[BookHandle, Any]:
    """The book submitted on a farm's stub broker; ``done_before``: segments an earlier run of the book made."""
    settings = base_settings.replace(redis={"url": f"memory://progress-{uuid.uuid4().hex}"})
    client = Client(None, settings, broker=connect(settings.redis))
    if done_before:
        BookHandle(client, PLAN, "/tmp/out", BookOptions())._submit_all()
        for j in done_before:
            finish(client.broker, j)
    h = BookHandle(client, PLAN, "/tmp/out", BookOptions())
    h._submit_all()
    return h, client.broker


def manifest_s(opts: BookOptions = BookOptions()) -> float:
    """The total the chapter files (and so the manifest) have: head, each segment and its pause, tail."""
    return sum(opts.head_s + sum(SECONDS[s.job_id] + s.pause_after_s for s in ch.segments) + opts.tail_s
               for ch in PLAN.chapters)


def test_reused_segments_count_in_the_audio_and_the_end_is_the_manifests(base_settings: Any) -> None:
    h, broker = handle(base_settings, done_before={"a", "b"})  # an earlier run made chapter one
    start = h.progress()
    before = BookOptions().head_s + 60.6 + 30.3 + BookOptions().tail_s + 60.6  # chapter one, and three's "a"
    assert (start.done, start.reused) == (2, 2)
    assert start.audio_s == pytest.approx(before)
    for j in ("c", "d"):
        finish(broker, j)
    end = h.progress()
    assert end.done == end.total == 4
    assert end.audio_s == pytest.approx(manifest_s())  # 3.7 min, not the 1.1 min made in this run
    assert end.rate_x * end.elapsed_s == pytest.approx(manifest_s() - before)  # what this run added, per second
    line = ProgressBar.line(end)
    assert f"4/4 segments  {manifest_s() / 60:.1f} min audio" in line and "3.7 min audio" in line


def test_a_fresh_book_counts_its_pauses_head_and_tail(base_settings: Any) -> None:
    h, broker = handle(base_settings, done_before=set())
    assert h.progress().audio_s == 0.0
    finish(broker, "a")
    assert h.progress().audio_s == pytest.approx(60.6 + 60.6)  # read twice; no chapter whole yet
    for j in ("b", "c", "d"):
        finish(broker, j)
    end = h.progress()
    assert end.audio_s == pytest.approx(manifest_s()) and end.rate_x * end.elapsed_s == pytest.approx(manifest_s())

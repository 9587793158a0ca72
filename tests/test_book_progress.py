"""Audiobooks, the progress line: the audio it counts is the book's as its chapter files lay it out (segments
made now or reused from an earlier run, each use with its pause, a whole chapter's head and tail), so it ends
at the manifest's total; its real-time factor is the audio this run added per second. Fast: a stand-in broker
answers the handle's status reads (the farm-level runs are in test_book.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from books.cli import ProgressBar
from books.handle import BookHandle
from books.model import Book
from books.plan import BookOptions, BookPlan, ChapterPlan, PlannedSegment
from wire.keys import Keys

SECONDS = {"a": 60.0, "b": 30.0, "c": 45.0, "d": 20.0}  # each segment's audio, as its job's status says
PAUSE = {"a": 0.6, "b": 0.3, "c": 0.6, "d": 0.0}


def seg(job_id: str) -> PlannedSegment:
    return PlannedSegment(job_id, f"text {job_id}", "en", "joe", PAUSE[job_id], SECONDS[job_id] * 0.9)


PLAN = BookPlan("progress-book", Book("Progress", (), "markdown"), "joe", 24000, {}, (
    ChapterPlan(1, "One", (seg("a"), seg("b"))),
    ChapterPlan(2, "Two", (seg("c"),)),
    ChapterPlan(3, "Three", (seg("d"), seg("a"))),  # a segment read twice is in the file twice
))


class StatusBroker:
    """The handle's side of the wire: admission answers and the jobs' status fields."""

    def __init__(self, done_before: set[str]) -> None:
        self.keys = Keys("t")
        self.status = {j: {"state": "done" if j in done_before else "queued"} for j in SECONDS}
        for j in done_before:
            self.status[j]["duration"] = str(SECONDS[j])

    def start_book_run(self, book_id: str, run_id: str, ttl_s: int) -> str:
        return f"run:{book_id}"

    def admit_book_segments(self, subs: list[Any], queue: Any, *, force: bool) -> list[str]:
        return ["done" if self.status[s.job_id]["state"] == "done" else "submitted" for s in subs]

    def job_fields(self, job_ids: list[str], fields: tuple[str, ...]) -> list[list[str | None]]:
        return [[self.status[j].get(f) for f in fields] for j in job_ids]

    def finish(self, job_id: str) -> None:
        self.status[job_id] = {"state": "done", "duration": str(SECONDS[job_id])}

    def drop_results(self, job_ids: list[str]) -> None:
        pass

    def keep_jobs(self, job_ids: list[str], ttl_s: int) -> None:
        pass


def handle(base_settings: Any, done_before: set[str]) -> tuple[BookHandle, StatusBroker]:
    broker = StatusBroker(done_before)
    client = SimpleNamespace(broker=broker, settings=base_settings, ensure_groups=lambda: None)
    h = BookHandle(client, PLAN, "/tmp/out", BookOptions())
    h._submit_all()
    return h, broker


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
        broker.finish(j)
    end = h.progress()
    assert end.done == end.total == 4
    assert end.audio_s == pytest.approx(manifest_s())  # 3.7 min, not the 1.1 min made in this run
    assert end.rate_x * end.elapsed_s == pytest.approx(manifest_s() - before)  # what this run added, per second
    line = ProgressBar.line(end)
    assert f"4/4 segments  {manifest_s() / 60:.1f} min audio" in line and "3.7 min audio" in line


def test_a_fresh_book_counts_its_pauses_head_and_tail(base_settings: Any) -> None:
    h, broker = handle(base_settings, done_before=set())
    assert h.progress().audio_s == 0.0
    broker.finish("a")
    assert h.progress().audio_s == pytest.approx(60.6 + 60.6)  # read twice; no chapter whole yet
    for j in ("b", "c", "d"):
        broker.finish(j)
    end = h.progress()
    assert end.audio_s == pytest.approx(manifest_s()) and end.rate_x * end.elapsed_s == pytest.approx(manifest_s())

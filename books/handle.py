"""A book running on the farm: ``submit_book`` queues its segment jobs, ``BookHandle`` follows them,
sends the assembly tasks (``workers.assembly``) and collects their replies.

Everything the runner asks of the farm's store is a step of the client's broker (``wire.broker``,
its books steps): the handle holds no connection of its own."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import secrets
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, UNSUPPORTED_FORMAT, InputError
from books.formats import Book, load_book
from books.plan import (
    BookOptions,
    BookPlan,
    BookProgress,
    BookResult,
    ChapterPlan,
    ChapterResult,
    book_args,
    book_gain,
    check_book_options,
    default_book_id,
    loudness_of,
    plan_book,
    segment_key,
)
from producer.checks import timeout_arg
from wire.errors import (
    BOOK_NOT_FINISHED,
    SEGMENT_MISSING,
    JobError,
    JobTimeoutError,
    error_class_for,
    error_from_dict,
)
from wire.keys import bucket_of
from wire.records import SegmentJob, Submission
from wire.tasks import (
    ASSEMBLE_BOOK_FILE,
    ASSEMBLE_CHAPTER,
    CHAPTER_FORMATS,
    MEASURE_CHAPTER,
    OUTPUT_MARKER,
    REPLY_TTL_S,
    WRITE_BOOK_FILES,
    celery_sender,
)

log = logging.getLogger(__name__)

RUN_TTL_S = 30 * 86400

HELD_BATCH = 2000  # segments offered again per round while the bulk lane is full


def submit_book(client: Any, path: str | Path, *, out: str, voice: str | None = None, book_id: str | None = None,
                manifest: Any = None, opts: BookOptions | None = None, book: Book | None = None,
                **unknown: Any) -> BookHandle:
    """Parse, plan and queue a book (.txt, .md, .epub) as per-segment bulk jobs; returns at once. ``client``
    is a ``producer.Client``; ``voice`` overrides ``opts.voice``; ``book`` is an already parsed book (``path``
    then only names it). Any other keyword is refused (BAD_OPTION), like every bad argument here."""
    from pipeline.audio import check_format

    if unknown:
        raise InputError(f"unknown book option(s) {', '.join(map(repr, sorted(unknown)))}", code=BAD_OPTION)
    checked, out, book_id = book_args(path, out, book_id, manifest)
    path = Path(checked)
    if opts is not None and not isinstance(opts, BookOptions):
        raise InputError(f"opts must be a BookOptions, not {type(opts).__name__}", code=BAD_OPTION)
    opts = opts or BookOptions()
    if voice is not None:
        opts = dataclasses.replace(opts, voice=voice)
    check_book_options(opts)

    if check_format(opts.format) not in CHAPTER_FORMATS:
        raise InputError(f"a chapter file is {', '.join(CHAPTER_FORMATS)}, not {opts.format}", code=UNSUPPORTED_FORMAT)
    out = normalize_out(out)
    book = book or load_book(path, manifest=manifest)
    plan = plan_book(client.settings, book, book_id=book_id or default_book_id(path), opts=opts)
    handle = BookHandle(client, plan, out, opts)
    handle._submit_all()
    return handle


def normalize_out(out: str) -> str:
    """``s3://bucket/prefix`` as given, or a local folder as an absolute path, created with the marker
    that allows workers to write there (the workers must see the same file system: one machine or a
    shared mount). A task can name any folder, so without the marker a worker refuses: whoever can
    reach Redis cannot make workers write audio over arbitrary files."""
    if out.startswith("s3://"):
        bucket = out[5:].split("/", 1)[0]
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
            raise InputError(f"{out!r}: not a valid S3 bucket name", code=BAD_OPTION)
        return out.rstrip("/")
    if "://" in out:
        raise InputError(f"--out must be s3://bucket/prefix or a folder, not {out!r}", code=BAD_OPTION)
    folder = Path(out).expanduser().resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / OUTPUT_MARKER).write_text("ttsfarm book output: workers may write chapter files here\n")
    except OSError as exc:
        raise InputError(f"cannot use {str(folder)!r} for the book: {exc.strerror or exc}", code=BAD_OPTION) from None
    return str(folder)


def book_audio_s(plan: BookPlan, duration: Mapping[str, float], state: Mapping[str, str], opts: BookOptions) -> float:
    """Seconds of the book's audio whose segments are done (made in this run or an earlier one), laid out as
    ``join_chapter`` lays out the chapter files: every use of a segment with its pause, and a chapter's head and
    tail once all of it is done. Once the book is written, the manifest's total."""
    total = 0.0
    for ch in plan.chapters:
        kept = [s for s in ch.segments if state.get(s.job_id) != "skipped"]
        done = [s for s in kept if s.job_id in duration]
        total += sum(duration[s.job_id] + max(0.0, s.pause_after_s) for s in done)
        if kept and len(done) == len(kept):
            total += opts.head_s + opts.tail_s
    return total


class BookHandle:
    """A book on the farm: ``progress()`` any time, ``results()`` yields chapters as they are written,
    ``wait()`` returns the ``BookResult``. The caller's thread drives the assembly steps."""

    def __init__(self, client: Any, plan: BookPlan, out: str, opts: BookOptions) -> None:
        self.client, self.plan, self.out, self.opts = client, plan, out, opts
        self.broker, self.settings = client.broker, client.settings
        self.id = plan.book_id
        self.run_id = secrets.token_hex(8)
        self.run_key = ""  # named by start_book_run
        self.jobs = plan.jobs
        self.state: dict[str, str] = {j: "" for j in self.jobs}
        self.duration: dict[str, float] = {}
        self.reused: set[str] = set()
        self.attempts: dict[str, int] = {}
        self.skipped: dict[str, str] = {}
        self.started = time.monotonic()
        self.made_s = 0.0  # segment audio made in this run (the ETA's pace)
        self.ready_at_start = 0.0  # the book's audio that earlier runs had made (``book_audio_s``)
        self.measured: dict[int, dict[str, Any]] = {}
        self.written: dict[int, ChapterResult] = {}
        self.tasks: dict[str, tuple[str, dict[str, Any], int]] = {}  # reply key -> (task, spec, chapter)
        self.last_event = time.monotonic()
        self.gain: tuple[float, float, bool] | None = None  # (loudness, gain dB, limited)
        self.gen = 0  # bumped when the gain must be chosen again: older assembly replies are then ignored
        self.files: dict[str, str] = {}
        self.book_file: dict[str, Any] | None = None  # the M4B's reply, when opts.single_file
        self._sender: Any = None
        self._last_ttl = self._last_offer = time.monotonic()
        self._offer_every = 0.0
        self.forced: dict[str, bool] = {}  # held segments that must replace a stored output that is gone

    # -- submitting ------------------------------------------------------------------------------
    def _submit_all(self) -> None:
        self.client.ensure_groups()
        self.run_key = self.broker.start_book_run(self.id, self.run_id, RUN_TTL_S)
        states = self._submit_jobs(list(self.jobs), force=False)
        self.reused = {j for j, st in states.items() if st == "done"}
        self._refresh(all_jobs=True)
        self.ready_at_start = book_audio_s(self.plan, self.duration, self.state, self.opts)
        log.info("book %s: %d chapters, %d segments (%d done before, %d queued, %d held: the bulk lane is full)",
                 self.id, len(self.plan.chapters), len(self.jobs), len(self.reused),
                 sum(st == "submitted" for st in states.values()), sum(st == "full" for st in states.values()))

    def _submit_jobs(self, ids: list[str], *, force: bool) -> dict[str, str]:
        now = time.time()
        replies = self.broker.admit_book_segments([self._submission(j, now) for j in ids], self.settings.queue, force=force)
        for job_id, st in zip(ids, replies):
            self.state[job_id] = {"submitted": "queued", "full": "held"}.get(st, st)
            if st == "full":
                self.forced[job_id] = force
        return dict(zip(ids, replies))

    def _submission(self, job_id: str, now: float) -> Submission:
        """A segment of the book as a one-segment bulk job."""
        p = self.jobs[job_id]
        job = SegmentJob(job_id=job_id, seg=0, total=1, text=p.text, lang=p.lang, voice=p.voice,
                         request_voice=self.plan.voice, format="pcm", sample_rate=self.plan.sample_rate,
                         lane="bulk", pause_s=0.0, est_s=p.est_s, options=dict(self.plan.options), created=now,
                         words=[list(w) for w in p.words])
        status = {"state": "queued", "total": 1, "done": 0, "voice": self.plan.voice, "format": "pcm",
                  "sample_rate": self.plan.sample_rate, "lane": "bulk", "created": now, "deadline": 0.0,
                  "est_seconds": p.est_s, "book": self.id}
        stream = self.broker.keys.queue("bulk", bucket_of(p.est_s, self.settings.queue.bucket_edges_s))
        return Submission(job_id=job_id, segments=[job], status=status, streams=[stream])

    def _offer_held(self) -> None:
        """While the bulk lane is full, segments wait here; offer some again every couple of seconds."""
        held = [j for j, st in self.state.items() if st == "held"]
        if held and time.monotonic() - self._last_offer > self._offer_every:
            self._last_offer = time.monotonic()
            for force in (True, False):
                batch = [j for j in held[:HELD_BATCH] if self.forced.get(j, False) == force]
                if batch:
                    self._submit_jobs(batch, force=force)
            admitted = any(self.state[j] != "held" for j in held[:HELD_BATCH])
            self._offer_every = 0.0 if admitted else min(2.0, max(0.25, 2 * self._offer_every))

    # -- reading the farm ------------------------------------------------------------------------
    def _pending(self) -> list[str]:
        return [j for j, st in self.state.items() if st not in ("done", "skipped")]

    def _refresh(self, all_jobs: bool = False) -> None:
        ids = [j for j in (list(self.jobs) if all_jobs else self._pending()) if self.state[j] != "held"]
        rows = self.broker.job_fields(ids, ("state", "duration", "error_code", "error_message"))
        finished, failed = [], []
        for j, (st, dur, code, msg) in zip(ids, rows):
            st = st or "absent"
            if st == "done" and j not in self.duration:  # made now, or reused: admitted as done already
                self.duration[j] = float(dur or 0.0)
                if j not in self.reused:
                    self.made_s += self.duration[j]
            if st == "done" and self.state[j] != "done":
                finished.append(j)
            elif st in ("failed", "cancelled", "expired", "absent"):
                failed.append((j, code or f"JOB_{st.upper()}", msg or ""))
            self.state[j] = st
        if finished:
            self.last_event = time.monotonic()
            self.broker.drop_results(finished)  # nobody streams book jobs
        for j, code, msg in failed:
            self._failed(j, code, msg)
        if time.monotonic() - self._last_ttl > 600:  # a long book outlives job_ttl_s while its runner lives
            self._last_ttl = time.monotonic()
            self.broker.keep_jobs(self._pending(), self.settings.queue.job_ttl_s)

    def _failed(self, job_id: str, code: str, message: str) -> None:
        p = self.jobs[job_id]
        if issubclass(error_class_for(code), InputError):
            self.state[job_id] = "skipped"  # the text cannot be read: the book goes on without it
            self.skipped[job_id] = f"[{code}] {p.text[:60]}"
            log.warning("book %s: segment %s skipped: [%s] %s", self.id, job_id, code, message)
            return
        self.attempts[job_id] = self.attempts.get(job_id, 0) + 1
        if self.attempts[job_id] > self.opts.max_retries:
            raise JobError(f"book {self.id}: segment {job_id} failed {self.attempts[job_id]} times: [{code}] {message}",
                           code=code)
        log.warning("book %s: segment %s %s, queued again: %s", self.id, job_id, code, message)
        self._submit_jobs([job_id], force=False)

    def progress(self) -> BookProgress:
        self._refresh()
        return self._progress()

    def _progress(self) -> BookProgress:
        done = sum(st in ("done", "skipped") for st in self.state.values())
        elapsed = time.monotonic() - self.started
        pace = self.made_s / elapsed if elapsed > 0 else 0.0
        est_done = sum(self.jobs[j].est_s for j in self.duration) or 1.0
        ratio = sum(self.duration.values()) / est_done if self.duration else 1.0
        left = sum(self.jobs[j].est_s for j in self._pending()) * ratio
        eta = left / pace if pace > 0 else (0.0 if not left else None)
        phase = "synthesizing" if done < len(self.jobs) else ("done" if self.files else "assembling")
        audio = book_audio_s(self.plan, self.duration, self.state, self.opts)
        rate = max(0.0, audio - self.ready_at_start) / elapsed if elapsed > 0 else 0.0
        return BookProgress(phase, done, len(self.jobs), len(self.reused), len(self.skipped),
                            audio, elapsed, rate, eta, len(self.written), len(self.plan.chapters))

    # -- assembly tasks ----------------------------------------------------------------------------
    def _send(self, task: str, spec: dict[str, Any], chapter: int) -> None:
        if self._sender is None:
            self._sender = celery_sender(self.settings)
        reply = self.broker.keys.book_reply(self.id, secrets.token_hex(8))
        spec = {**spec, "reply": reply, "run_key": self.run_key, "run_id": self.run_id}
        self._sender.send_task(task, kwargs={"spec": spec})
        self.tasks[reply] = (task, spec, chapter)

    def _segments(self, ch: ChapterPlan) -> list[list[Any]]:
        return [[segment_key(s.job_id), s.pause_after_s] for s in ch.segments if self.state[s.job_id] != "skipped"]

    def _collect(self) -> list[tuple[str, dict[str, Any], int, dict[str, Any]]]:
        if not self.tasks:
            return []
        out = []
        for key, raw in zip(list(self.tasks), self.broker.book_replies(list(self.tasks))):
            if raw is not None:
                task, spec, chapter = self.tasks.pop(key)
                out.append((task, spec, chapter, json.loads(raw)))
                self.last_event = time.monotonic()
        if time.monotonic() - self.last_event > self.opts.stall_s:  # a worker died holding a task: send again
            self.last_event = time.monotonic()
            for key, (task, spec, chapter) in list(self.tasks.items()):
                log.warning("book %s: no reply to %s for chapter %d, sending it again", self.id, task, chapter)
                del self.tasks[key]
                self._send(task, {k: v for k, v in spec.items() if k not in ("reply", "run_key", "run_id")}, chapter)
        return out

    def _step(self) -> list[ChapterResult]:
        """One round: read statuses, queue measurements and files as they become possible, take replies."""
        self._offer_held()
        self._refresh()
        asked = {(t, c) for t, _, c in self.tasks.values()}
        for ch in self.plan.chapters:
            ready = all(self.state[s.job_id] in ("done", "skipped") for s in ch.segments)
            if ready and ch.index not in self.measured and (MEASURE_CHAPTER, ch.index) not in asked:
                self._send(MEASURE_CHAPTER, {"rate": self.plan.sample_rate,
                                                       "segments": self._segments(ch)}, ch.index)
        new: list[ChapterResult] = []
        for task, spec, chapter, reply in self._collect():
            if task in GAIN_TASKS and spec.get("gen") != self.gen:
                continue
            if not reply.get("ok"):
                if reply.get("code") != SEGMENT_MISSING:
                    raise error_from_dict(reply)
                self._resubmit_missing(reply.get("missing", []))
                self.measured.pop(chapter, None)
                if task in GAIN_TASKS:  # lost after measuring: measure and choose the gain again
                    self.gain, self.gen = None, self.gen + 1
                    self.written.clear()
                    self.book_file = None
                continue
            if task == MEASURE_CHAPTER:
                self.measured[chapter] = reply
            elif task == ASSEMBLE_CHAPTER:
                ch = self.plan.chapters[[c.index for c in self.plan.chapters].index(chapter)]
                self.written[chapter] = ChapterResult(chapter, ch.title, reply["key"], reply["url"], reply["duration_s"],
                                                      len(ch.segments), reply["bytes"], reply.get("captions", ""))
                new.append(self.written[chapter])
            elif task == ASSEMBLE_BOOK_FILE:
                self.book_file = {"file": reply["key"], **{k: reply[k] for k in ("url", "format", "bytes", "duration_s",
                                                                                  "chapters")}}
            else:
                self.files = reply["urls"]
        if self.gain is None and len(self.measured) == len(self.plan.chapters):
            self._assemble_all()
        chapters_done = self.gain is not None and len(self.written) == len(self.plan.chapters) and not self.tasks
        if chapters_done and self.opts.single_file and self.book_file is None:
            self._send(ASSEMBLE_BOOK_FILE, self._book_file_spec(), 0)
        elif chapters_done and not self.files:
            self._send(WRITE_BOOK_FILES, {"out": self.out, "files": self._manifest()}, 0)
        return new

    def _resubmit_missing(self, keys: list[str]) -> None:
        ids = [k.split("/", 1)[0] for k in keys if k.split("/", 1)[0] in self.jobs]
        log.warning("book %s: %d stored segment(s) are gone, making them again", self.id, len(ids))
        for j in ids:
            self.reused.discard(j)
            self.duration.pop(j, None)
        self._submit_jobs(ids, force=True)

    def _join_spec(self) -> dict[str, Any]:
        """How chapters are joined, the same for the chapter files and the book file."""
        o, gain_db = self.opts, (self.gain or (0.0, 0.0, False))[1]
        return {"gen": self.gen, "rate": self.plan.sample_rate, "gain": 10 ** (gain_db / 20), "head_s": o.head_s,
                "tail_s": o.tail_s, "fade_ms": o.fade_ms, "ceiling": 10 ** (o.peak_db / 20), "out": self.out}

    def _assemble_all(self) -> None:
        loud = loudness_of([m["hist"] for m in self.measured.values()])
        peak = max(float(m["peak"]) for m in self.measured.values())
        gain_db, limited = book_gain(loud, peak, self.opts)
        self.gain = (loud, gain_db, limited)
        o = self.opts
        for ch in self.plan.chapters:
            self._send(ASSEMBLE_CHAPTER, {
                **self._join_spec(), "segments": self._segments(ch), "format": o.format, "bitrate": o.bitrate,
                "file": f"{ch.file_stem}.{o.format}",
                "tags": {"title": ch.title, "album": self.plan.book.title, "artist": self.plan.book.author,
                         "tracknumber": str(ch.index)}}, ch.index)

    def _book_file_spec(self) -> dict[str, Any]:
        book = self.plan.book
        return {**self._join_spec(), "file": f"{self.id}.m4b",
                "chapters": [{"title": ch.title, "segments": self._segments(ch)} for ch in self.plan.chapters],
                "tags": {"title": book.title, "album": book.title, "artist": book.author, "genre": "Audiobook"}}

    def _manifest(self) -> dict[str, str]:
        loud, gain_db, limited = self.gain or (0.0, 0.0, False)
        chapters = [dataclasses.asdict(self.written[c.index]) for c in self.plan.chapters]
        manifest = {"book_id": self.id, "title": self.plan.book.title, "author": self.plan.book.author,
                    "language": self.plan.book.language, "voice": self.plan.voice, "format": self.opts.format,
                    "sample_rate": self.plan.sample_rate, "options": dict(self.plan.options),
                    "loudness": {"target_db": self.opts.loudness_db, "measured_db": round(loud, 2),
                                 "gain_db": round(gain_db, 2), "gain_capped": limited, "peak_ceiling_db": self.opts.peak_db},
                    "duration_s": round(sum(c["duration_s"] for c in chapters), 3), "chapters": chapters,
                    "book_file": self.book_file,
                    "created": time.time(), "generator": "ttsfarm"}
        m3u = ["#EXTM3U", f"#PLAYLIST:{self.plan.book.title}"]
        for c in chapters:
            m3u += [f"#EXTINF:{round(c['duration_s'])},{c['title']}", c["file"]]
        return {"manifest.json": json.dumps(manifest, ensure_ascii=False, indent=2), "playlist.m3u8": "\n".join(m3u) + "\n"}

    def results(self, timeout: float | None = None, on_progress: Any = None) -> Iterator[ChapterResult]:
        """Drive the book to its end, yielding each chapter once its file is written; ``on_progress``
        is called with a ``BookProgress`` every round (about four a second)."""
        timeout = timeout_arg("timeout", timeout)
        if on_progress is not None and not callable(on_progress):
            raise InputError("on_progress must be callable", code=BAD_OPTION)
        return self._results(timeout, on_progress)

    def _results(self, timeout: float | None, on_progress: Any) -> Iterator[ChapterResult]:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self.files:
                yield from self._step()
                if on_progress is not None:
                    on_progress(self._progress())
                if self.files:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise JobTimeoutError(f"book {self.id} did not finish within {timeout} s")
                time.sleep(max(0.25, len(self._pending()) / 20000))  # ~20k status reads a second at most
        finally:
            self.close()

    def cancel(self) -> int:
        """Cancel the segments not yet made (workers skip them), each unless it ended meanwhile (one atomic
        step, the same as a job's cancel); a later run queues them again. Returns how many were cancelled."""
        cancelled = sum(outcome == 1 for outcome in self.broker.cancel_jobs(self._pending()))
        self.close()
        return cancelled

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    def wait(self, timeout: float | None = None, on_progress: Any = None) -> BookResult:
        for _ in self.results(timeout, on_progress):
            pass
        return self.result()

    def result(self) -> BookResult:
        """The finished book (after ``wait`` or the end of ``results``)."""
        if not self.files:
            raise JobError(f"book {self.id} is not finished", code=BOOK_NOT_FINISHED)
        loud, gain_db, capped = self.gain or (0.0, 0.0, False)
        return BookResult(self.id, self.plan.book.title, self.out,
                          tuple(self.written[c.index] for c in self.plan.chapters), self.files["manifest.json"],
                          self.files["playlist.m3u8"], len(self.jobs), len(self.reused),
                          len(self.jobs) - len(self.reused) - len(self.skipped),
                          tuple(self.skipped.values()) + tuple(p for c in self.plan.chapters for p in c.skipped),
                          loud, gain_db, capped, time.monotonic() - self.started,
                          (self.book_file or {}).get("url"))


GAIN_TASKS = (ASSEMBLE_CHAPTER, ASSEMBLE_BOOK_FILE)  # made with one gain (one `gen`)

"""Bulk audiobooks: a book file in, one audio file per chapter plus a manifest out.

    result = run_book(settings, "novel.epub", "default", "s3://bucket/books/novel")
    handle = submit_book(client, "novel.epub", out="s3://bucket/books/novel")  # on a producer.Client of yours

1. The book is parsed into chapters (``books.formats``) and each chapter is cut by the farm's
   ``Segmenter`` (with the short first segment of streaming switched off: a book need not start early).
2. Every segment is one job in the bulk lane, ``format="pcm"``, ``pause_s=0``, with an id derived from
   the book id and what decides its audio (text, language, concrete voice, rate, options). Per-segment
   jobs resume at the finest grain (a killed worker loses one segment), an edit re-makes only the
   sentences it touched (segments never span a sentence), and a sentence repeated in the book is made
   once. The chapter index is deliberately not in the id: inserting a chapter re-makes nothing else.
3. Submitting is the broker's ``admit_book_segments`` (``wire.broker``), atomic per job: a job that
   is queued, running or done is left alone (a rerun waits for it: a killed worker's entry is reclaimed by
   XAUTOCLAIM), anything else (absent, failed, cancelled, expired) is reset and queued again, so reruns and
   concurrent runners never duplicate it. Each segment is admitted against the bulk lane's backlog limit
   (``wire.backlog``): while the lane is full, the rest of the book waits in the runner and trickles
   in as workers ack.
4. As each chapter's segments are done, ``ttsfarm.measure_chapter`` runs on a worker (are all stored
   outputs there? loudness histogram, peak); when all are measured one gain is chosen for the book,
   ``ttsfarm.assemble_chapter`` writes each chapter file (pauses added here, not by the workers, so they
   are never doubled), ``ttsfarm.assemble_book_file`` the whole book as one M4B with chapter marks
   (``workers.book_file``; unless ``single_file=False``) and ``ttsfarm.write_book_files`` writes
   ``manifest.json`` (which lists the M4B as ``book_file``) and ``playlist.m3u8``.
   Tasks reply on lists the runner owns (the broker's ``reply_to_book`` and ``book_replies``); the Celery
   app needs no result backend.

The modules, in the order a book goes through them: ``books.formats`` (parsing, with ``books.epub``,
into the ``Book`` of ``books.model``), ``books.plan`` (options, segment jobs, the gain), ``books.handle``
(``submit_book``, the entry point on a ``producer.Client``, and the ``BookHandle`` that drives a book on the
farm through the client's broker) and ``books.cli`` (``run_book`` with its progress bar, and ``ttsfarm book``);
their public names are all importable from here. Books is a front end on the SDK: the SDK never imports it.
"""

from __future__ import annotations

from books.cli import (
    ProgressBar,
    add_arguments,
    cmd_book,
    main,
    run_book,
    summary,
)
from books.formats import Book, load_book
from books.handle import (
    HELD_BATCH,
    OUTPUT_MARKER,
    REPLY_TTL_S,
    RUN_TTL_S,
    BookHandle,
    celery_sender,
    normalize_out,
    submit_book,
)
from books.plan import (
    ID_VERSION,
    LOUDNESS_FLOOR_DB,
    LOUDNESS_STEP_DB,
    BookOptions,
    BookPlan,
    BookProgress,
    BookResult,
    ChapterPlan,
    ChapterResult,
    PlannedSegment,
    book_gain,
    default_book_id,
    loudness_of,
    plan_book,
    segment_job_id,
    segment_key,
)

__all__ = [
    "HELD_BATCH", "ID_VERSION", "LOUDNESS_FLOOR_DB", "LOUDNESS_STEP_DB", "OUTPUT_MARKER", "REPLY_TTL_S", "RUN_TTL_S",
    "Book", "BookHandle", "BookOptions", "BookPlan", "BookProgress", "BookResult", "ChapterPlan", "ChapterResult",
    "PlannedSegment", "ProgressBar", "add_arguments", "book_gain", "celery_sender", "cmd_book", "default_book_id",
    "load_book", "loudness_of", "main", "normalize_out", "plan_book", "run_book", "segment_job_id", "segment_key",
    "submit_book", "summary",
]

"""Everything a worker writes back: chunks to the job's results stream, the status record, the stored
full output, and one final record per job.

The final record and the end state are written by one Lua script that runs only once per job, so a
redone segment (after a crash or a redelivery) cannot publish a second final record.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from wire.admission import Admission, may_stage
from wire.broker import WorkBroker, run_blocking
from wire.pieces import ClaimReply, FrameClaim, Piece, PieceReply, SegmentEnd
from wire.keys import STATES_FINAL
from wire.queue import Entry
from wire.records import SegmentJob, chunks_fields, job_words, words_in, words_key
from wire.settings import Settings
from wire.storage import Storage

log = logging.getLogger(__name__)


@dataclass
class SegmentProgress:
    """A segment being published piece by piece: the next chunk's part number, the pieces and samples so far."""

    job: SegmentJob
    attempt: str
    words: list[Any] = field(default_factory=list)  # the segment's wire words, samples from its start
    frames_stored: bool = False  # its claim stored its frames in Redis (its end drops them)
    part: int = 0
    pieces: int = 0
    samples: int = 0  # published so far
    # the job's playback clock as the last published piece found it (workers/schedule.py): its first chunk's time,
    # and the audio seconds published for the job before that piece
    started: float = 0.0
    delivered_before_s: float = 0.0
    delivered_s: float = 0.0  # and with that piece
    planned: int = 0  # the pieces it is cut into (its window plan; 1 published whole; 0 not known)
    # a one-segment job's PCM as this process published it, every piece from the first: its output when this ends the
    # job (no read of its parts back from Redis); None once a piece was not this process's own
    kept: list[bytes] | None = field(default_factory=list)

    def clock(self) -> tuple[float, float] | None:
        """The job's playback clock (first chunk's time, audio delivered) as this segment's last published piece
        left it; None before its first."""
        return (self.started, self.delivered_s) if self.started else None


@dataclass
class PieceOut:
    """A piece of a segment to publish: its PCM, whether it is the segment's last, whether to publish it (False: a
    window an earlier attempt published, whose numbering is only advanced)."""

    seg: SegmentProgress
    pcm: bytes
    last: bool
    publish: bool = True
    claim: FrameClaim | None = None  # the attempt's first piece of a streamed segment claims the segment with it


@dataclass
class SegmentOutcome:
    done: int
    total: int  # the job's segments; 0 while its text is still being appended (not closed)
    state: str
    started: float = 0.0  # the job's playback clock before the segment's last piece (see SegmentProgress)
    delivered_before_s: float = 0.0
    output: tuple[dict[int, bytes], dict[int, Any]] | None = None  # the job's parts and words, when it ended the job
    written: bool = True  # False: the job had ended (``state`` says how) and nothing was written


@dataclass(frozen=True)
class PieceResult:
    """A piece as the store took it: the job's state as read; ``written`` unless the job had ended or the piece's claim
    found another attempt's (``held``: that attempt's claim); after a segment's last piece, its ``outcome``."""

    state: str
    written: bool = True
    held: ClaimReply | None = None
    outcome: SegmentOutcome | None = None


class Publisher:
    """A worker's writes back, as the broker's results steps: chunks of each piece, the job's end."""

    @classmethod
    def of(cls, settings: Settings, broker: WorkBroker, storage: Storage) -> Publisher:
        """The publisher ``settings`` describe, writing through ``broker`` into ``storage``."""
        q = settings.queue
        return cls(broker, storage, chunk_ms=q.chunk_ms, maxlen=q.results_maxlen, ttl_s=q.job_ttl_s,
                   admission=Admission.of(q))

    def __init__(self, broker: WorkBroker, storage: Storage, *, chunk_ms: int, maxlen: int, ttl_s: int,
                 admission: Admission = Admission()) -> None:
        self.broker = broker
        self.admission = admission
        self.storage = storage
        self.chunk_ms = chunk_ms
        self.maxlen = maxlen
        self.ttl = ttl_s

    def job_state(self, job_id: str) -> str:
        return self.broker.job_states([job_id])[0]

    def has_started(self, job_id: str) -> bool:
        """Whether a segment of the job has started on any worker."""
        st = run_blocking(self.broker, self.broker.job_status(job_id))
        return bool(st and st.started)

    def publish_segment(self, job: SegmentJob, pcm: bytes, *, attempt: str, batch_id: str, worker: str,
                        words: list[Any] | None = None) -> SegmentOutcome:
        """Chunks of one finished segment, then its part for assembly, in one round trip. ``words``: the
        segment's wire words (``workers/timings.py``); each chunk carries those that end inside it."""
        outcome = self.publish_piece(SegmentProgress(job, attempt, words=words or [], planned=1), pcm, last=True,
                                     batch_id=batch_id, worker=worker)
        assert outcome is not None
        return outcome

    def publish_piece(self, seg: SegmentProgress, pcm: bytes, *, last: bool, batch_id: str, worker: str,
                      publish: bool = True) -> SegmentOutcome | None:
        """The next piece of a segment (a whole segment, or one vocoder window of it) as chunks of at most
        ``chunk_ms``, numbered on from the segment's earlier pieces, in one record and one round trip; each chunk
        carries the segment's words that end inside it (by sample range from the segment's start); the piece's PCM is
        kept for the job's assembly. With ``last``, the segment is counted done and the outcome is returned.
        ``publish=False`` (a redo of a window an earlier attempt published) only advances the numbering."""
        return self.publish_pieces([PieceOut(seg, pcm, last, publish)], batch_id=batch_id, worker=worker)[0].outcome

    def publish_pieces(self, outs: list[PieceOut], *, batch_id: str, worker: str) -> list[PieceResult]:
        """Several segments' next pieces (a window step's: one piece per segment), as ``publish_piece`` each, in one
        round trip. A piece of a job that ended, or whose claim (``PieceOut.claim``) lost, is not written and leaves
        its segment's numbering where it was."""
        pieces, counts = [], []
        for out in outs:
            seg, pcm, job = out.seg, out.pcm, out.seg.job
            step = max(2, int(job.sample_rate * (job.chunk_ms or self.chunk_ms) / 1000) * 2)
            parts = [pcm[i : i + step] for i in range(0, len(pcm), step)] or [b""]
            chunks = []
            if out.publish:  # the piece's chunks as one record: they are made, and read, together
                words = []
                for i, part in enumerate(parts):
                    start = seg.samples + i * step // 2
                    words.append(words_in(seg.words, start, start + len(part) // 2, last=out.last and i == len(parts) - 1))
                chunks.append(chunks_fields(job.seg, seg.part, out.last, seg.attempt, job.sample_rate, parts, words))
            end = None
            if out.last:
                end = SegmentEnd(json.dumps(seg.words, ensure_ascii=False), batch_id, worker, open=job.total == 0,
                                 frames=seg.frames_stored)
            pieces.append(Piece(job.job_id, job.seg, chunks, seg.pieces, len(pcm) / 2 / job.sample_rate, end,
                                self.admission if may_stage(job) else None, job.total, out.claim, _copies(seg, self.maxlen)))
            counts.append(len(parts))
        replies = self.broker.publish_pieces(pieces, maxlen=self.maxlen, ttl_s=self.ttl)
        results: list[PieceResult] = []
        for out, piece, n_parts, reply in zip(outs, pieces, counts, replies):
            seg = out.seg
            if not reply.written:
                outcome = SegmentOutcome(0, seg.job.total, reply.state, written=False) if out.last else None
                results.append(PieceResult(reply.state, False, reply.claim, outcome))
                continue
            if seg.kept is not None and out.publish and seg.pieces == len(seg.kept) and seg.job.total == 1:
                seg.kept.append(out.pcm)
            else:
                seg.kept = None
            seg.part += n_parts
            seg.pieces += 1
            seg.samples += len(out.pcm) // 2
            if out.publish:
                seg.delivered_before_s = max(0.0, reply.delivered_s - piece.seconds)
                seg.delivered_s = reply.delivered_s
                seg.started = reply.first_chunk
            results.append(PieceResult(reply.state, outcome=None if not out.last else SegmentOutcome(
                done=reply.done, total=seg.job.total or reply.total, state=reply.state, started=seg.started,
                delivered_before_s=seg.delivered_before_s, output=reply.output or _kept_output(seg, reply))))
        return results

    def assemble(self, job: SegmentJob, output: tuple[dict[int, bytes], dict[int, Any]] | None = None) -> tuple[bytes, float, list[Any]]:
        """The job's full PCM16 from its parts, in segment order, and its words timed in it: from ``output`` (a job of
        one piece: what its publish sent), else read (one round trip, a plain HGETALL: no script touches the PCM)."""
        by_seg, words = output or self.broker.job_output(job.job_id)
        missing = [i for i in range(job.total) if i not in by_seg]
        if missing:
            raise RuntimeError(f"job {job.job_id}: parts missing for segments {missing[:5]}")
        parts = [by_seg[i] for i in range(job.total)]
        pcm = b"".join(parts)
        timed = job_words([words.get(seg, []) for seg in range(job.total)], [len(p) // 2 for p in parts], job.sample_rate)
        return pcm, len(pcm) / 2 / job.sample_rate, timed

    def store_and_finish(self, job: SegmentJob, output: tuple[dict[int, bytes], dict[int, Any]] | None = None,
                         ack: Sequence[Entry] = ()) -> tuple[str | None, bool]:
        """Encode, store and finish a job whose segments are all done (``output``: its parts and words, for a job of
        one piece, as its publish sent them; ``ack``: the entry whose segment finished it, acked with the end). Returns
        the URL (None if another worker already finished it, or a cancel won) and whether this call ended it as
        cancelled."""
        from pipeline.audio import CONTENT_TYPES, encode_pcm16

        pcm, duration, timed = self.assemble(job, output)
        data = pcm if job.format == "pcm" else encode_pcm16(pcm, job.sample_rate, job.format, bitrate=job.bitrate or None)
        key = f"{job.job_id}/audio.{job.format}"
        url = self.storage.put(key, data, _content_type(CONTENT_TYPES, job))
        info = {"url": url, "key": key, "duration": round(duration, 4), "bytes": len(data)}
        words = json.dumps([w.to_dict() for w in timed], ensure_ascii=False)
        # Beside the audio, for whoever joins stored jobs later (a book's chapter captions).
        self.storage.put(words_key(job.job_id), words.encode("utf-8"), "application/json")
        won = self.finish(job.job_id, "done", info, drop_work=True, ack=ack, url=url, key=key, duration=round(duration, 4),
                          finished=time.time(), done=job.total, info=json.dumps(info, ensure_ascii=False), words=words)
        if won == 2:
            log.info("job %s was cancelled while it finished", job.job_id)
            return None, True
        if won:
            log.info("job %s done: %.2f s of audio in %.2f s -> %s", job.job_id, duration, time.time() - job.created, url)
        return (url if won else None), False

    def finish(self, job_id: str, state: str, final_info: dict[str, Any], *, drop_work: bool = False,
               ack: Sequence[Entry] = (), **status: Any) -> int:
        """Write the end state and the one final record of a job: 1 as asked, 2 if a cancel won the race,
        0 if the job had ended already. ``drop_work``: with it, delete what the job keeps only while it runs; ``ack``:
        queue entries acked in the same step, whatever the answer."""
        return self.broker.finalize(job_id, state, final_info, maxlen=self.maxlen, ttl_s=self.ttl, drop_work=drop_work,
                                    ack=ack, **status)

    def fail(self, job_id: str, code: str, message: str, state: str = "failed") -> int:
        info = {"code": code, "message": message}
        return self.finish(job_id, state, info, drop_work=True, error_code=code, error_message=message, finished=time.time())

    def is_final(self, state: str) -> bool:
        return state in STATES_FINAL


def _content_type(types: dict[str, str], job: SegmentJob) -> str:
    ctype = types.get(job.format, "application/octet-stream")
    return ctype.format(rate=job.sample_rate) if "{rate}" in ctype else ctype


def _copies(seg: SegmentProgress, maxlen: int) -> bool:
    """Whether a segment's pieces are copied into its job's parts hash for the job's assembly. Not for a job that is
    this one segment whose records (its planned pieces and the final record) all fit its results stream untrimmed: its
    worker ends it with the pieces it kept, and a redo that ends it reads them from that stream (``job_output``)."""
    return not (seg.job.total == 1 and 0 < seg.planned and seg.planned + 1 <= maxlen)


def _kept_output(seg: SegmentProgress, reply: PieceReply) -> tuple[dict[int, bytes], dict[int, Any]] | None:
    """A one-segment job that this piece ended, every piece of it published by this process: its output as sent. Not
    a redo's (an earlier attempt's end counted): its readers heard that attempt's pieces, kept where it stored them."""
    if seg.kept is None or seg.job.total != 1 or reply.done < 1 or not reply.counted:
        return None
    return {seg.job.seg: b"".join(seg.kept)}, {seg.job.seg: seg.words}

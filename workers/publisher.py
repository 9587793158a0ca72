"""Everything a worker writes back: chunks to the job's results stream, the status record, the stored
full output, and one final record per job.

The final record and the end state are written by one Lua script that runs only once per job, so a
redone segment (after a crash or a redelivery) cannot publish a second final record.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from producer.wire.keys import STATES_FINAL, Keys
from producer.wire.redis_broker import RedisBroker
from producer.wire.lua import CLAIM_FRAMES
from producer.wire.records import SegmentJob, chunk_fields, job_words, words_in, words_key
from producer.wire.storage import Storage

log = logging.getLogger(__name__)







@dataclass
class SegmentProgress:
    """A segment being published piece by piece: the next chunk's part number, the pieces so far."""

    job: SegmentJob
    attempt: str
    words: list[Any] = field(default_factory=list)  # the segment's wire words, samples from its start
    part: int = 0
    pieces: int = 0
    samples: int = 0  # published so far
    pcm: list[bytes] = field(default_factory=list)
    # the job's playback clock as the last published piece found it (workers/schedule.py): its first chunk's time,
    # and the audio seconds published for the job before that piece
    started: float = 0.0
    delivered_before_s: float = 0.0


@dataclass
class SegmentOutcome:
    done: int
    total: int
    state: str
    started: float = 0.0  # the job's playback clock before the segment's last piece (see SegmentProgress)
    delivered_before_s: float = 0.0


class Publisher:
    def __init__(self, r: redis.Redis, keys: Keys, storage: Storage, *, chunk_ms: int, maxlen: int, ttl_s: int) -> None:
        self.r = r
        self.keys = keys
        self.storage = storage
        self.chunk_ms = chunk_ms
        self.maxlen = maxlen
        self.ttl = ttl_s
        self.broker = RedisBroker(r, keys)
        self._claim_frames = r.register_script(CLAIM_FRAMES)

    def job_state(self, job_id: str) -> str:
        state = self.r.hget(self.keys.status(job_id), "state")
        return state.decode() if state else ""

    def has_started(self, job_id: str) -> bool:
        """Whether a segment of the job has started on any worker."""
        return bool(self.r.hexists(self.keys.status(job_id), "started"))

    def mark_started(self, job: SegmentJob, worker: str) -> bool:
        """True for the first segment of a job to start anywhere (the job's start)."""
        return self.broker.mark_started(job.job_id, worker)

    def publish_segment(self, job: SegmentJob, pcm: bytes, *, attempt: str, batch_id: str, worker: str,
                        words: list[Any] | None = None) -> SegmentOutcome:
        """Chunks of one finished segment, then its part for assembly, in one round trip. ``words``: the
        segment's wire words (``workers/timings.py``); each chunk carries those that end inside it."""
        outcome = self.publish_piece(SegmentProgress(job, attempt, words=words or []), pcm, last=True, batch_id=batch_id,
                                     worker=worker)
        assert outcome is not None
        return outcome

    def publish_piece(self, seg: SegmentProgress, pcm: bytes, *, last: bool, batch_id: str, worker: str,
                      publish: bool = True) -> SegmentOutcome | None:
        """The next piece of a segment (a whole segment, or one vocoder window of it) as chunks of at most
        ``chunk_ms``, numbered on from the segment's earlier pieces, in one round trip; each chunk carries the
        segment's words that end inside it (by sample range from the segment's start). With ``last``, the
        segment's whole PCM (its pieces joined) becomes its part for assembly and the outcome is returned.
        ``publish=False`` (a redo of a window an earlier attempt published) only advances the numbering."""
        job, keys = seg.job, self.keys
        k_status, k_res = keys.status(job.job_id), keys.results(job.job_id)
        step = max(2, int(job.sample_rate * (job.chunk_ms or self.chunk_ms) / 1000) * 2)
        pieces = [pcm[i : i + step] for i in range(0, len(pcm), step)] or [b""]
        pipe = self.r.pipeline(transaction=True)
        clock_at, seconds = 0, len(pcm) / 2 / job.sample_rate
        if publish:
            for i, piece in enumerate(pieces):
                final = last and i == len(pieces) - 1
                start = seg.samples + i * step // 2
                inside = words_in(seg.words, start, start + len(piece) // 2, last=final)
                fields = chunk_fields(job.seg, seg.part + i, final, seg.attempt, job.sample_rate, piece, inside)
                pipe.xadd(k_res, fields, maxlen=self.maxlen, approximate=True)
            pipe.expire(k_res, self.ttl)
            pipe.hset(k_status, f"windows:{job.seg}", seg.pieces + 1)
            # the job's playback clock: audio delivered by every worker, and when its first chunk went out
            clock_at = len(pipe)
            pipe.hincrbyfloat(k_status, "delivered_s", seconds)
            pipe.hsetnx(k_status, "first_chunk", time.time())
            pipe.hget(k_status, "first_chunk")
        seg.part += len(pieces)
        seg.pieces += 1
        seg.samples += len(pcm) // 2
        seg.pcm.append(pcm)
        if not last:
            if publish:
                self._read_clock(seg, pipe.execute(), clock_at, seconds)
            return None
        pipe.hdel(self.frames_key(job.job_id), f"{job.seg}:frames")  # a book keeps only its segments in flight
        pipe.hset(keys.parts(job.job_id), str(job.seg), b"".join(seg.pcm))
        pipe.expire(keys.parts(job.job_id), self.ttl)
        pipe.hset(keys.words(job.job_id), str(job.seg), json.dumps(seg.words, ensure_ascii=False))
        pipe.expire(keys.words(job.job_id), self.ttl)
        pipe.sadd(keys.done(job.job_id), job.seg)
        pipe.expire(keys.done(job.job_id), self.ttl)
        pipe.hsetnx(k_status, "first_chunk", time.time())
        pipe.hset(k_status, mapping={f"batch:{job.seg}": batch_id, f"worker:{job.seg}": worker})
        pipe.scard(keys.done(job.job_id))
        pipe.hget(k_status, "state")
        replies = pipe.execute()
        if publish:
            self._read_clock(seg, replies, clock_at, seconds)
        done, state = int(replies[-2]), replies[-1]
        self.r.hset(k_status, "done", done)
        return SegmentOutcome(done=done, total=job.total, state=state.decode() if state else "", started=seg.started,
                              delivered_before_s=seg.delivered_before_s)

    @staticmethod
    def _read_clock(seg: SegmentProgress, replies: list[Any], at: int, seconds: float) -> None:
        seg.delivered_before_s = max(0.0, float(replies[at]) - seconds)
        seg.started = float(replies[at + 2] or 0.0)

    def claim_frames(self, job: SegmentJob, attempt: str, frames: bytes) -> tuple[bool, str, bytes, int]:
        """Fix a streamed segment's acoustic output before any of its windows is published: the first attempt
        to claim it stores its attempt tag and frames (and gets True); a later attempt (a redo after a crash, or a
        retry) gets those back,
        with how many windows were published, and vocodes the same frames, so readers see one attempt.
        Empty frames: the segment was published whole already (its frames are dropped then)."""
        won, tag, stored, windows = self._claim_frames(keys=[self.frames_key(job.job_id), self.keys.status(job.job_id)],
                                                       args=[str(job.seg), attempt, frames, self.ttl])
        return bool(int(won)), _str(tag), frames if int(won) else bytes(stored or b""), int(windows or 0)

    def frames_key(self, job_id: str) -> str:
        return self.keys.status(job_id) + ":frames"

    def _job_keys(self, job_id: str) -> tuple[str, ...]:
        """What a job keeps while it runs, dropped when it ends: parts, done set, words, streamed frames."""
        return self.keys.parts(job_id), self.keys.done(job_id), self.keys.words(job_id), self.frames_key(job_id)

    def assemble(self, job: SegmentJob) -> tuple[bytes, float]:
        """The job's full PCM16 from its parts, in segment order."""
        parts = self.r.hgetall(self.keys.parts(job.job_id))
        by_seg = {int(k): v for k, v in parts.items()}
        missing = [i for i in range(job.total) if i not in by_seg]
        if missing:
            raise RuntimeError(f"job {job.job_id}: parts missing for segments {missing[:5]}")
        pcm = b"".join(by_seg[i] for i in range(job.total))
        return pcm, len(pcm) / 2 / job.sample_rate

    def store_and_finish(self, job: SegmentJob) -> tuple[str | None, bool]:
        """Encode, store and finish a job whose segments are all done. Returns the URL (None if another
        worker already finished it, or a cancel won) and whether this call ended it as cancelled."""
        from pipeline.audio import CONTENT_TYPES, encode, from_pcm16

        pcm, duration = self.assemble(job)
        data = pcm if job.format == "pcm" else encode(from_pcm16(pcm), job.sample_rate, job.format,
                                                      bitrate=job.bitrate or None)
        key = f"{job.job_id}/audio.{job.format}"
        url = self.storage.put(key, data, _content_type(CONTENT_TYPES, job))
        created = job.created
        info = {"url": url, "key": key, "duration": round(duration, 4), "bytes": len(data)}
        words = json.dumps([w.to_dict() for w in self.job_words(job)], ensure_ascii=False)
        # Beside the audio, for whoever joins stored jobs later (a book's chapter captions).
        self.storage.put(words_key(job.job_id), words.encode("utf-8"), "application/json")
        won = self.finish(job.job_id, "done", info, url=url, key=key, duration=round(duration, 4), finished=time.time(),
                          done=job.total, info=json.dumps(info, ensure_ascii=False), words=words)
        if won == 2:
            log.info("job %s was cancelled while it finished", job.job_id)
            self.r.delete(*self._job_keys(job.job_id))
            return None, True
        if won:
            self.r.delete(*self._job_keys(job.job_id))
            log.info("job %s done: %.2f s of audio in %.2f s -> %s", job.job_id, duration, time.time() - created, url)
        return (url if won else None), False

    def job_words(self, job: SegmentJob) -> list[Any]:
        """Every word of the job, its times in the assembled audio (segments in order, pauses counted)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(self.keys.words(job.job_id))
        for seg in range(job.total):
            pipe.hstrlen(self.keys.parts(job.job_id), str(seg))
        replies = pipe.execute()
        by_seg = {int(k): json.loads(v) for k, v in replies[0].items()}
        return job_words([by_seg.get(seg, []) for seg in range(job.total)], [int(n) // 2 for n in replies[1:]],
                         job.sample_rate)

    def finish(self, job_id: str, state: str, final_info: dict[str, Any], **status: Any) -> int:
        """Write the end state and the one final record of a job: 1 as asked, 2 if a cancel won the race,
        0 if the job had ended already."""
        return self.broker.finalize(job_id, state, final_info, maxlen=self.maxlen, ttl_s=self.ttl, **status)

    def fail(self, job_id: str, code: str, message: str, state: str = "failed") -> int:
        info = {"code": code, "message": message}
        won = self.finish(job_id, state, info, error_code=code, error_message=message, finished=time.time())
        if won:
            self.r.delete(*self._job_keys(job_id))
        return won

    def is_final(self, state: str) -> bool:
        return state in STATES_FINAL


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _content_type(types: dict[str, str], job: SegmentJob) -> str:
    ctype = types.get(job.format, "application/octet-stream")
    return ctype.format(rate=job.sample_rate) if "{rate}" in ctype else ctype

"""The wire contract between producers and workers: key names, the job record, results records.

Both sides import it from here. Everything on the wire is JSON or plain strings, never pickle, and
every job record carries a schema version so a worker can refuse one it does not understand.
"""

from __future__ import annotations

import bisect
import json
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.errors import MALFORMED_JOB, InputError

SCHEMA_VERSION = 1
JOB_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")  # also a storage key part: no dots, no slashes
LANES = ("interactive", "bulk")
CHUNK_MS_RANGE = (20, 5000)
GROUP = "workers"
# Creates the consumer group ARGV[1] on each queue stream in KEYS unless it is there: one round trip,
# the same call from the sync SDK, the asyncio SDK and the workers.
ENSURE_GROUPS = """
for _, key in ipairs(KEYS) do
  local reply = redis.pcall('XGROUP', 'CREATE', key, ARGV[1], '0', 'MKSTREAM')
  if type(reply) == 'table' and reply.err and not string.find(reply.err, 'BUSYGROUP') then
    return redis.error_reply(reply.err)
  end
end
return #KEYS
"""
STATES_FINAL = ("done", "failed", "cancelled", "expired")
# Cancels the job whose status hash is KEYS[1] unless it has ended; ARGV[1]: now. Atomic, so a worker's
# finish cannot slip between the check and the write. Returns -1 (no such job), 0 (had ended), 1.
CANCEL = f"""
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end
if {" or ".join(f"state == '{s}'" for s in STATES_FINAL)} then return 0 end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished', ARGV[1])
return 1
"""


# Reads the results stream KEYS[1] after ARGV[1] (an exclusive start, "(1-0"), at most ARGV[2] entries, with
# how many entries the stream has lost at its head (Redis 7's entries-added minus its length; -1 before 7):
# workers trim it at results_maxlen and nothing else deletes from it, so a reader that has read fewer entries
# than that has lost some. nil when the stream does not exist (not yet, or expired).
READ_RESULTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local added, length = -1, 0
for i = 1, #info, 2 do
  if info[i] == 'entries-added' then added = info[i + 1] end
  if info[i] == 'length' then length = info[i + 1] end
end
local lost = -1
if added >= 0 then lost = added - length end
return {lost, redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])}
"""


@dataclass(frozen=True)
class Keys:
    """Every Redis key of the farm, under one prefix."""

    prefix: str = "ttsfarm"

    def queue(self, lane: str, bucket: int) -> str:
        return f"{self.prefix}:q:{lane}:{bucket}"

    def queues(self, n_buckets: int, lanes: tuple[str, ...] = LANES) -> list[str]:
        return [self.queue(lane, b) for lane in lanes for b in range(n_buckets)]

    def status(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def results(self, job_id: str) -> str:
        return f"{self.prefix}:res:{job_id}"

    def parts(self, job_id: str) -> str:
        return f"{self.prefix}:pcm:{job_id}"

    def done(self, job_id: str) -> str:
        return f"{self.prefix}:done:{job_id}"

    def dead_letters(self) -> str:
        return f"{self.prefix}:dlq"

    def workers(self) -> str:
        return f"{self.prefix}:workers"

    def backlog(self, lane: str) -> str:
        return f"{self.prefix}:backlog:{lane}"

    def words(self, job_id: str) -> str:
        """Hash: segment -> its words with their times (JSON), until the job is assembled."""
        return f"{self.prefix}:words:{job_id}"


def new_job_id() -> str:
    """128 random bits, URL-safe: unguessable, so a job id is also the right to read its results."""
    return secrets.token_urlsafe(16)


def bucket_of(est_seconds: float, edges: tuple[float, ...]) -> int:
    return bisect.bisect_right(list(edges), est_seconds)


@dataclass(frozen=True)
class SegmentJob:
    """One segment of one job: the unit a worker batches. Sent as JSON in a stream entry."""

    job_id: str
    seg: int
    total: int
    text: str
    lang: str
    voice: str  # the concrete voice that speaks this segment
    request_voice: str  # what the client asked for (a voice or a blend)
    format: str
    sample_rate: int  # the job's output rate
    lane: str = "interactive"
    deadline: float = 0.0  # unix seconds; 0 = none
    pause_s: float = 0.0
    est_s: float = 0.0
    options: Mapping[str, float] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    chunk_ms: int = 0  # PCM per results record; 0 = the worker's setting
    # The segment's words: [start, end in ``text``, char_start, char_end in the caller's text, that text].
    words: Sequence[Sequence[Any]] = ()
    bitrate: int = 0  # bit/s of a lossy stored output (mp3, ogg, aac); 0 = the codec's default
    v: int = SCHEMA_VERSION

    def to_fields(self) -> dict[str, str]:
        return {"v": str(self.v), "job": json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))}

    @classmethod
    def from_fields(cls, fields: Mapping[Any, Any]) -> SegmentJob:
        """Parse a stream entry; anything off raises ``InputError`` with code MALFORMED_JOB."""
        f = {_s(k): v for k, v in fields.items()}
        if "v" not in f or "job" not in f:
            raise InputError("stream entry lacks the 'v' or 'job' field", code=MALFORMED_JOB)
        if _s(f["v"]) != str(SCHEMA_VERSION):
            raise InputError(f"unknown job schema version {_s(f['v'])!r}", code=MALFORMED_JOB)
        try:
            data = json.loads(_s(f["job"]))
            job = cls(**data)
        except (ValueError, TypeError) as exc:
            raise InputError(f"job record is not valid: {exc}", code=MALFORMED_JOB) from None
        job.validate()
        return job

    def validate(self) -> None:
        checks = [
            (isinstance(self.job_id, str) and JOB_ID.fullmatch(self.job_id) is not None, "job_id"),
            (isinstance(self.seg, int) and isinstance(self.total, int) and 0 <= self.seg < self.total <= 100_000, "seg/total"),
            (isinstance(self.text, str) and 0 < len(self.text) <= 10_000, "text"),
            (self.lane in LANES, "lane"),
            (isinstance(self.sample_rate, int) and 8000 <= self.sample_rate <= 48000, "sample_rate"),
            (isinstance(self.options, dict), "options"),
            (isinstance(self.words, (list, tuple)) and all(_is_word_ref(w, len(self.text)) for w in self.words), "words"),
            (isinstance(self.chunk_ms, int) and (self.chunk_ms == 0 or CHUNK_MS_RANGE[0] <= self.chunk_ms <= CHUNK_MS_RANGE[1]), "chunk_ms"),
            (isinstance(self.bitrate, int) and 0 <= self.bitrate <= 1_000_000, "bitrate"),
        ]
        bad = [name for ok, name in checks if not ok]
        if bad:
            raise InputError(f"job record has bad field(s): {', '.join(bad)}", code=MALFORMED_JOB)


def _is_word_ref(w: Any, n: int) -> bool:
    return (isinstance(w, (list, tuple)) and len(w) == 5 and all(isinstance(x, int) for x in w[:4])
            and 0 <= w[0] <= w[1] <= n and 0 <= w[2] <= w[3] and isinstance(w[4], str))


def _s(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


# Results-stream records. ``type`` is one of these; a reader stops at FINAL.
CHUNK, FINAL = "chunk", "final"


def chunk_fields(seg: int, part: int, last: bool, attempt: str, rate: int, pcm: bytes,
                 words: Sequence[Sequence[Any]] = ()) -> dict[str, Any]:
    """A chunk record; ``words``: the wire words that end inside it (``words_in``), if any."""
    fields = {"type": CHUNK, "seg": seg, "part": part, "last": int(last), "attempt": attempt, "rate": rate, "pcm": pcm}
    if words:
        fields["words"] = json.dumps(list(words), ensure_ascii=False, separators=(",", ":"))
    return fields


# Word timings on the wire: [start, end, char_start, char_end, text, approx], start and end in samples of the
# job's rate from the start of the word's segment (a worker does not know where its segment starts in the job;
# a reader does). char_start/char_end index the submitted text (code points). approx: 1 when the voice gave no
# durations and the time is the word's share of its segment.
def words_in(words: Sequence[Sequence[Any]], start: int, end: int, *, last: bool) -> list[Sequence[Any]]:
    """The wire words of a segment that end inside the chunk of its samples [start, end); the segment's last
    chunk also takes any that end at or after its end. Any chunking of a segment gives each word exactly once."""
    return [w for w in words if start <= w[1] and (last or w[1] < end)]


@dataclass(frozen=True)
class Word:
    """A word of the submitted text and when it is spoken in the job's audio."""

    text: str  # the submitted text[char_start:char_end] ("2024年" reads as several words but is one span)
    start_s: float
    end_s: float
    char_start: int
    char_end: int
    approx: bool = False  # the voice gave no durations: the word's share of its segment

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def words_from_wire(words: Sequence[Sequence[Any]], offset: int, rate: int) -> list[Word]:
    """Wire words of one segment that starts ``offset`` samples into the job -> ``Word``s."""
    return [Word(str(w[4]), round((offset + w[0]) / rate, 4), round((offset + w[1]) / rate, 4), int(w[2]), int(w[3]),
                 bool(w[5]) if len(w) > 5 else False) for w in words]


def words_key(job_id: str) -> str:
    """Storage key of a finished job's words (a JSON list of ``Word`` dicts), beside its audio."""
    return f"{job_id}/words.json"


def job_words(segments: Sequence[Sequence[Sequence[Any]]], lengths: Sequence[int], rate: int) -> list[Word]:
    """All words of a job from each segment's wire words and its length in samples (pause included)."""
    out: list[Word] = []
    offset = 0
    for words, n in zip(segments, lengths):
        out.extend(words_from_wire(words, offset, rate))
        offset += n
    return merge_words(out)


def merge_words(words: Sequence[Word]) -> list[Word]:
    """One word per span of the submitted text: pieces of one span (a date read across two segments) join."""
    out: list[Word] = []
    for w in words:
        if out and w.char_start < out[-1].char_end:
            p = out[-1]
            text = p.text if p.char_end >= w.char_end else p.text + w.text[p.char_end - w.char_start :]
            out[-1] = Word(text, p.start_s, max(p.end_s, w.end_s),
                           p.char_start, max(p.char_end, w.char_end), p.approx or w.approx)
        else:
            out.append(w)
    return out


def final_fields(state: str, **info: Any) -> dict[str, Any]:
    return {"type": FINAL, "state": state, "info": json.dumps(info, ensure_ascii=False)}


@dataclass(frozen=True)
class Chunk:
    """Audio as it streams: PCM16 mono little-endian at ``sample_rate``; ``seq`` counts from 0."""

    seq: int
    seg: int
    pcm: bytes
    sample_rate: int
    last: bool  # the last chunk of the whole job
    words: tuple[Word, ...] = ()  # the words that end inside this chunk, times in the job's audio


@dataclass(frozen=True)
class JobResult:
    job_id: str
    state: str
    url: str
    duration_s: float
    timings: Mapping[str, float]
    info: Mapping[str, Any]
    words: tuple[Word, ...] = ()  # every word of the submitted text and when it is spoken

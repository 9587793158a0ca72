"""The wire's records: the job record a producer queues (with the submission it belongs to), the chunk and final records a worker publishes on
a job's results stream, word timings, and the dead-letter record.

Each record is built and parsed here, nowhere else: both sides import it from here. Everything on the wire
is JSON or plain strings, never pickle, and every job record carries a schema version so a worker can
refuse one it does not understand.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.errors import MALFORMED_JOB, InputError
from pipeline.text.clean import SURROGATE
from wire.errors import JOB_CANCELLED
from wire.keys import JOB_ID, LANES


SCHEMA_VERSION = 1
CHUNK_MS_RANGE = (20, 5000)


@dataclass(frozen=True)
class SegmentJob:
    """One segment of one job: the unit a worker batches. Sent as JSON in a stream entry."""

    job_id: str
    seg: int
    total: int  # the job's segments; 0 while the job's text is being appended (the total is then in its status)
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
    # The segment's words: [start, end in ``text``, char_start, char_end in the caller's text, that text, what
    # follows it there (``pipeline.text.sources.word_after``: its punctuation, for captions)].
    words: Sequence[Sequence[Any]] = ()
    bitrate: int = 0  # bit/s of a lossy stored output (mp3, ogg, aac); 0 = the codec's default
    # A closer (``lua.APPEND_SEGMENTS``): a copy of an appended job's last segment, queued when its client closed the
    # job after every segment was done; the worker finishes the job with it and synthesizes nothing.
    closing: bool = False
    v: int = SCHEMA_VERSION

    def to_fields(self) -> dict[str, str]:
        return {"v": str(self.v), "job": json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))}

    @classmethod
    def from_fields(cls, fields: Mapping[Any, Any]) -> SegmentJob:
        """Parse a stream entry; anything off raises ``InputError`` with code MALFORMED_JOB."""
        f = {text_of(k): v for k, v in fields.items()}
        if "v" not in f or "job" not in f:
            raise InputError("stream entry lacks the 'v' or 'job' field", code=MALFORMED_JOB)
        if text_of(f["v"]) != str(SCHEMA_VERSION):
            raise InputError(f"unknown job schema version {text_of(f['v'])!r}", code=MALFORMED_JOB)
        try:
            data = json.loads(text_of(f["job"]))
            job = cls(**data)
        except (ValueError, TypeError) as exc:
            raise InputError(f"job record is not valid: {exc}", code=MALFORMED_JOB) from None
        job.validate()
        return job

    def validate(self) -> None:
        checks = [
            (isinstance(self.job_id, str) and JOB_ID.fullmatch(self.job_id) is not None, "job_id"),
            (isinstance(self.seg, int) and isinstance(self.total, int) and 0 <= self.seg < 100_000
             and (self.total == 0 or self.seg < self.total <= 100_000), "seg/total"),
            (isinstance(self.closing, bool), "closing"),
            (isinstance(self.text, str) and 0 < len(self.text) <= 10_000 and not SURROGATE.search(self.text), "text"),
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
    return (isinstance(w, (list, tuple)) and len(w) in (5, 6) and all(isinstance(x, int) for x in w[:4])
            and 0 <= w[0] <= w[1] <= n and 0 <= w[2] <= w[3] and all(isinstance(x, str) for x in w[4:]))


def text_of(value: Any) -> str:
    """A reply's field or value as text: redis-py gives ``bytes`` (``str`` with ``decode_responses``), UTF-8 on the
    wire; a byte that is not UTF-8 reads as U+FFFD instead of failing the reader."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


@dataclass(frozen=True)
class Submission:
    """A job as it is admitted: its status record and its segments, each with the bucket stream it is queued on
    (``producer.submit.prepare_submission`` builds it; the broker's ``admit`` writes it at once)."""

    job_id: str
    segments: list[SegmentJob]
    status: dict[str, Any]
    streams: list[str]  # the bucket stream of each segment

    @property
    def total(self) -> int:
        return len(self.segments)

    @property
    def fingerprint(self) -> str:
        """What the request asked for, as a hash: every segment's job fields but when it was made (``created``,
        and ``deadline``, a moment rather than a length) and ``est_s`` (a prediction, not a choice). A retry
        of the same submission and a later submit of the same text and options agree; other text or another
        option under the same job id does not (``lua.ADMIT`` compares it when the id exists)."""
        asked = [{k: v for k, v in asdict(s).items() if k not in _NOT_ASKED} for s in self.segments]
        return hashlib.sha256(json.dumps(asked, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


_NOT_ASKED = frozenset({"created", "deadline", "est_s"})  # the segment fields ``Submission.fingerprint`` leaves out


# Results-stream records. ``type`` is one of these; a reader stops at FINAL.
CHUNK, FINAL = "chunk", "final"
# Every results record's number in its stream, from 1 (the status's ``results_entries`` counts them): a reader that
# finds a number past the one it expects knows that trimming took the records between.
ENTRY = "entry"
# A results stream made by a job's first chunk expires this long past the job TTL, so a job that ends within half of
# it keeps its results a TTL after its end without its end setting the expiry again.
RESULTS_SLACK_S = 600


def chunk_fields(seg: int, part: int, last: bool, attempt: str, rate: int, pcm: bytes,
                 words: Sequence[Sequence[Any]] = ()) -> dict[str, Any]:
    """A chunk record; ``words``: the wire words that end inside it (``words_in``), if any."""
    fields = {"type": CHUNK, "seg": seg, "part": part, "last": int(last), "attempt": attempt, "rate": rate, "pcm": pcm}
    if words:
        fields["words"] = json.dumps(list(words), ensure_ascii=False, separators=(",", ":"))
    return fields


def chunks_fields(seg: int, part: int, last: bool, attempt: str, rate: int, pcms: Sequence[bytes],
                  words: Sequence[Sequence[Sequence[Any]]]) -> dict[str, Any]:
    """Consecutive chunks of one segment made at once (a piece's) as one record: parts ``part``, ``part`` + 1, ...;
    ``last``: the final one is the segment's last; ``words``: per chunk its wire words. One chunk is a plain chunk
    record; several carry their PCM joined, ``sizes`` (each chunk's bytes, comma-separated) and, when any chunk has
    words, ``words`` as one list per chunk. ``chunk_parts`` reads either back. One stream entry per piece rather
    than per chunk: the chunks reach a reader together either way."""
    if len(pcms) == 1:
        return chunk_fields(seg, part, last, attempt, rate, pcms[0], words[0] if words else ())
    fields = chunk_fields(seg, part, last, attempt, rate, b"".join(pcms))
    fields["sizes"] = ",".join(str(len(p)) for p in pcms)
    if any(words):
        fields["words"] = json.dumps([list(w) for w in words], ensure_ascii=False, separators=(",", ":"))
    return fields


def chunk_parts(fields: Mapping[str, Any]) -> list[tuple[int, bytes, bool, list[Any]]]:
    """The chunks of a chunk record (``chunk_fields`` or ``chunks_fields``; keys already text): per chunk its part
    number, PCM, whether it is its segment's last, and its wire words."""
    part, pcm, last = int(text_of(fields["part"])), bytes(fields["pcm"]), text_of(fields["last"]) == "1"
    words = json.loads(text_of(fields["words"])) if fields.get("words") else None
    if not fields.get("sizes"):
        return [(part, pcm, last, words or [])]
    sizes = [int(x) for x in text_of(fields["sizes"]).split(",")]
    if sum(sizes) != len(pcm) or any(n < 0 for n in sizes) or (words is not None and len(words) != len(sizes)):
        raise ValueError(f"a chunk record's sizes {sizes[:8]} do not match its {len(pcm)} bytes or its words")
    out, at = [], 0
    for i, n in enumerate(sizes):
        out.append((part + i, pcm[at : at + n], last and i == len(sizes) - 1, words[i] if words else []))
        at += n
    return out


# Word timings on the wire: [start, end, char_start, char_end, text, approx, after], start and end in samples of the
# job's rate from the start of the word's segment (a worker does not know where its segment starts in the job;
# a reader does). char_start/char_end index the submitted text (code points). approx: 1 when the voice gave no
# durations and the time is the word's share of its segment. after: what follows the word in the submitted text
# (``SegmentJob.words``); a record without it reads as None.
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
    # The punctuation and space that follow the word in the submitted text, up to the next word (", " "。"; a
    # newline where a paragraph ends): ``pipeline.text.sources.word_after``. Captions keep it. None: not recorded.
    after: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def words_from_wire(words: Sequence[Sequence[Any]], offset: int, rate: int) -> list[Word]:
    """Wire words of one segment that starts ``offset`` samples into the job -> ``Word``s."""
    return [Word(str(w[4]), round((offset + w[0]) / rate, 4), round((offset + w[1]) / rate, 4), int(w[2]), int(w[3]),
                 bool(w[5]) if len(w) > 5 else False, str(w[6]) if len(w) > 6 else None) for w in words]


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
                           p.char_start, max(p.char_end, w.char_end), p.approx or w.approx,
                           w.after if w.char_end >= p.char_end else p.after)
        else:
            out.append(w)
    return out


def final_fields(state: str, **info: Any) -> dict[str, Any]:
    """A job's final record: its end state and what the reader gets (a result's url, or an error's code)."""
    return {"type": FINAL, "state": state, "info": json.dumps(info, ensure_ascii=False)}


def final_record(state: str, info: Mapping[str, Any]) -> str:
    """``final_fields`` as the flat JSON list ``[field, value, ...]`` that the FINALIZE script appends."""
    return json.dumps([x for kv in final_fields(state, **info).items() for x in kv], ensure_ascii=False)


# The final record of a job a client cancelled (``lua.FINALIZE`` writes it when a cancel wins a race).
CANCELLED_INFO = {"code": JOB_CANCELLED, "message": "cancelled by the client"}


def record_type(fields: Mapping[Any, Any]) -> str:
    """CHUNK or FINAL (or whatever else a newer writer sent) of a results-stream entry."""
    return text_of(fields.get("type", fields.get(b"type", "")))


def parse_final(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A final record (fields by name) -> ``{"state": ..., **info}``."""
    return {"state": text_of(fields.get("state", "")), **json.loads(text_of(fields.get("info", "{}")))}


# -- dead letters: segments a worker could not run (malformed, or failing ``max_deliveries`` times) ---------


def dead_letter_fields(stream: str, entry_id: str, code: str, message: str, deliveries: int,
                       fields: Mapping[Any, Any]) -> dict[str, Any]:
    """The dead-letter record of a queue entry: where it was, why it left, and its fields as they were."""
    raw = {text_of(k): text_of(v) for k, v in fields.items()}
    return {"stream": stream, "entry_id": entry_id, "code": code, "message": message[:2000], "deliveries": deliveries,
            "fields": json.dumps(raw, ensure_ascii=False)[:100_000]}


@dataclass(frozen=True)
class DeadLetter:
    id: str
    stream: str
    entry_id: str
    code: str
    message: str
    deliveries: int
    fields: dict[str, str]

    @property
    def job_id(self) -> str:
        try:
            return str(json.loads(self.fields.get("job", "{}")).get("job_id", ""))
        except (ValueError, TypeError, AttributeError):
            return ""

    @property
    def ts(self) -> float:
        """When it was dead-lettered (seconds since the epoch, from its stream entry id)."""
        try:
            return int(self.id.split("-")[0]) / 1000
        except ValueError:
            return 0.0


def parse_dead_letter(entry_id: Any, f: Mapping[Any, Any]) -> DeadLetter:
    """A dead-letter entry as written by ``dead_letter_fields``; a damaged field reads as empty, never raises."""
    g = {text_of(k): text_of(v) for k, v in f.items()}
    try:
        deliveries = int(g.get("deliveries", "0") or 0)
    except ValueError:
        deliveries = 0
    try:
        fields = json.loads(g.get("fields", "{}"))
    except ValueError:
        fields = {}
    return DeadLetter(id=text_of(entry_id), stream=g.get("stream", ""), entry_id=g.get("entry_id", ""), code=g.get("code", ""),
                      message=g.get("message", ""), deliveries=deliveries,
                      fields={text_of(k): text_of(v) for k, v in fields.items()} if isinstance(fields, dict) else {})


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

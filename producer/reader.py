"""Turns results-stream records into ordered chunks, for ``producer.core`` (both SDK faces) and the load bench.

Workers publish a segment's chunks tagged with the segment, part and attempt, a piece's chunks in one entry:
the whole segment at once, or a vocoder window at a time (streamed; workers/streaming.py). Segments can finish
out of order (several workers), and a segment can be redone after a worker dies, so the reader keeps each (segment, attempt) apart and
releases chunks in segment order: the segment being read comes from one attempt (a complete one if there
is one, else the first to start), its parts released as they come. A streamed segment has one attempt
tag whatever happens (a redo continues it), and a segment published whole arrives complete, so chunks
of an abandoned attempt are never mixed with a later one; a part seen twice counts once.

Workers trim the results stream at ``queue.results_maxlen`` entries, and it expires ``job_ttl_s`` after
the job ends. Every record carries its number in the stream (``records.ENTRY``). A reader that fell that far behind,
or that resumes (``after_seq``) once the head of the stream is gone, finds a number past the one it expects: it
cannot number or complete the chunks, and raises ``JobError`` with code STREAM_TRIMMED at
once (the job's full output is still stored: ``wait()`` gives its URL) instead of waiting forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wire.errors import STREAM_TRIMMED, JobError
from wire.keys import STATES_FINAL
from wire.records import CHUNK, ENTRY, FINAL, Chunk, Word, chunk_parts, parse_final, record_type, text_of, words_from_wire

READ_COUNT = 256  # entries per read


def _complete(parts: Mapping[int, tuple[bytes, int, bool, list[Any]]]) -> bool:
    last = [p for p, (_, _, is_last, _) in parts.items() if is_last]
    return bool(last) and len(parts) == last[0] + 1


@dataclass
class ResultsReader:
    total: int
    skip_through_seq: int = -1  # resume: drop chunks up to and including this seq
    job_id: str = ""
    last_id: str = "0-0"
    entries: int = 0  # entries read, from the stream's first: the reader's position
    next_seg: int = 0
    seq: int = 0
    final: dict[str, Any] | None = None
    samples: int = 0  # samples released so far (resumed-past chunks too): where the next segment starts
    _parts: dict[tuple[int, str], dict[int, tuple[bytes, int, bool, list[Any]]]] = field(default_factory=dict)
    _attempt: str | None = None  # the attempt the segment being read comes from
    _next_part: int = 0
    _seg_start: int = 0  # samples before the segment being read

    def idle_error(self, state: str) -> JobError | None:
        """When a read found nothing new and the status says ``state``: the error to end the stream with, if the job
        cannot add more. An ended job whose final record this reader has not read (and read again after the status
        said so) has a results stream that expired."""
        if state in ("cancelled", "expired"):
            return JobError(f"job {self.job_id} was {state}", code=f"JOB_{state.upper()}")
        if state in STATES_FINAL:
            return JobError(f"job {self.job_id} is {state} and its results stream has expired; fetch the stored "
                            "output instead", code=STREAM_TRIMMED)
        return None

    def feed(self, entry_id: Any, fields: Mapping[Any, Any]) -> list[Chunk]:
        f = {text_of(k): v for k, v in fields.items()}
        if ENTRY in f and int(text_of(f[ENTRY])) > self.entries + 1:
            raise JobError(f"job {self.job_id}: the results stream no longer holds chunks this reader needs (its "
                           f"next entry is number {text_of(f[ENTRY])}, {self.entries} read; results_maxlen bounds it): "
                           "read faster, or fetch the stored output once the job is done", code=STREAM_TRIMMED)
        self.last_id = text_of(entry_id)
        self.entries += 1
        kind = record_type(f)
        if kind == FINAL:
            self.final = parse_final(f)
            return []
        if kind != CHUNK:
            return []
        seg, attempt, rate = int(text_of(f["seg"])), text_of(f["attempt"]), int(text_of(f["rate"]))
        if seg < self.next_seg:
            return []
        parts = self._parts.setdefault((seg, attempt), {})
        for part, pcm, last, words in chunk_parts(f):
            parts.setdefault(part, (pcm, rate, last, words))
        return self._release()

    def _choose(self, seg: int) -> str | None:
        """The attempt to read segment ``seg`` from: one that is complete, else the first whose part 0 came."""
        started = [a for (s, a), parts in self._parts.items() if s == seg and 0 in parts]
        complete = [a for a in started if _complete(self._parts[(seg, a)])]
        return complete[0] if complete else started[0] if started else None

    def _release(self) -> list[Chunk]:
        """Parts of the segment being read, in order, as they come; then the next segment's."""
        out: list[Chunk] = []
        while True:
            seg = self.next_seg
            if self._attempt is None:
                self._attempt = self._choose(seg)
                self._next_part = 0
                self._seg_start = self.samples
                if self._attempt is None:
                    return out
            parts = self._parts[(seg, self._attempt)]
            if self._next_part not in parts:
                return out
            pcm, rate, is_last, wire_words = parts[self._next_part]
            if self.seq > self.skip_through_seq:
                words: tuple[Word, ...] = tuple(words_from_wire(wire_words, self._seg_start, rate))
                out.append(Chunk(seq=self.seq, seg=seg, pcm=bytes(pcm), sample_rate=rate, last=is_last and seg == self.total - 1,
                                 words=words))
            self.seq += 1
            self.samples += len(pcm) // 2
            self._next_part += 1
            if is_last:
                for key in [k for k in self._parts if k[0] == seg]:
                    del self._parts[key]
                self.next_seg += 1
                self._attempt = None

    @property
    def finished(self) -> bool:
        return self.final is not None and (self.final.get("state") != "done" or self.next_seg >= self.total)

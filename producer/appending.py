"""A job whose text is appended while it plays: open it, append text as it is written (an LLM's tokens), close it.

    job = client.open(voice="joe")          # or: async with await aclient.open(...) as job
    for token in llm:
        job.append(token)                    # each finished sentence is queued at once, while the rest is written
    job.flush()                              # optional: what is buffered is queued now, even mid-sentence
    job.close()                              # the rest is queued and the job's total set
    for chunk in job.stream(): ...           # from any thread or process, before, during or after the appends

The text is buffered here and cut where a sentence ends (``SENTENCE_END``: ``.!?;`` and the like followed by a space,
Chinese ``。！？；``, a line break): each finished piece is planned like a submitted text (``submit.plan_segments``) and
appended to the same job in one round trip, its segments numbered on from the last and its words' character offsets
counted in the whole text written. A segment therefore never spans two appends: a sentence finished is spoken as it
was written. The wire's side (the job's status, the worker's end) is ``wire.appends``.

Ordering, cancel and resume are a whole-text job's: chunks come in segment order, ``cancel`` stops it, and
``stream(after_seq=...)`` resumes. Until the close a reader cannot know the job's last chunk (its ``last`` flags stay
False); the stream ends with the job. A job never closed ends when its status expires (``queue.job_ttl_s``). SSML is
not taken in pieces (BAD_OPTION): submit it whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.errors import BAD_OPTION, MALFORMED_JOB, InputError
from producer.checks import check_unicode
from producer.submit import Terms
from wire.records import SegmentJob

# Where a sentence (or a line) ends: the text up to the end of the last match is finished.
SENTENCE_END = re.compile(r"[.!?;…]+[\"'”’)\]]*\s+|[。！？；]+[”’」』）)]*\s*|\n+\s*")


@dataclass
class TextBuffer:
    """The text written so far; ``take`` hands out what has finished since the last take."""

    text: str = ""
    taken: int = 0  # characters handed out

    def add(self, piece: object) -> None:
        if not isinstance(piece, str):
            raise InputError(f"appended text must be a str, not {type(piece).__name__}", code=MALFORMED_JOB)
        self.text += check_unicode(piece)

    def take(self, *, final: bool = False) -> tuple[str, int]:
        """The finished text not yet handed out (with ``final``, all of it) and its offset in the whole text."""
        end = len(self.text) if final else self.taken
        if not final:
            for match in SENTENCE_END.finditer(self.text, self.taken):
                end = match.end()
        piece, start = self.text[self.taken:end], self.taken
        self.taken = end
        return piece, start


@dataclass
class OpenedJob:
    """What the SDK holds for one job whose text it appends (both faces' ``open``)."""

    job_id: str
    terms: Terms
    created: float
    deadline: float
    buffer: TextBuffer = field(default_factory=TextBuffer)
    next_seg: int = 0  # the number of the next segment to append
    last: tuple[SegmentJob, str] | None = None  # the last segment appended and its stream
    closed: bool = False


def check_open_terms(terms: Terms) -> None:
    if terms.ssml:
        raise InputError("ssml: a job whose text is appended takes plain text; submit SSML whole", code=BAD_OPTION)

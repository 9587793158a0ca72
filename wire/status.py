"""A job's status record (``Keys.status``): its one owner.

The record is a hash that many steps write a field or two of, each atomically with what goes with it: admission
writes the job's request (``JobStatus.admitted``), the first segment to start marks ``started`` (with ``claimed``, when its loop claimed it, and ``worker``), a published piece
moves the playback clock (``first_chunk``, ``delivered_s``) and a segment's bookkeeping (``windows:N``,
``batch:N``, ``worker:N``, ``failures:N``; a streamed segment's ``claim:N``, its attempt and replay record), and the one finalize writes the end state and the result. Those writes
are the broker's steps (``wire.redis.broker``); every reader parses the hash here, into ``JobStatus``.

``JobStatus`` reads both ways: typed attributes (``st.state``, ``st.total``) and, for callers that treat a status
as the mapping it is stored as, ``st["state"]`` and ``"started" in st`` over the fields the record has.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from wire.errors import error_from_dict
from wire.keys import STATES_FINAL
from wire.records import JobResult, Word, text_of

# Fields read as numbers; everything else is text.
_INTS = ("total", "done", "sample_rate", "bitrate", "results_entries")
_FLOATS = ("created", "claimed", "started", "first_chunk", "finished", "duration", "deadline", "est_seconds", "delivered_s",
           "results_expire")
SEGMENT_FIELDS = ("windows", "batch", "worker", "failures", "claim")  # per segment: "<name>:<seg>"


@dataclass(frozen=True)
class JobStatus(Mapping[str, Any]):
    """A job's status as stored; ``fields``: every field, numbers decoded (the mapping face reads these)."""

    job_id: str
    fields: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_fields(cls, job_id: str, raw: Mapping[Any, Any]) -> JobStatus | None:
        """The record of a stored hash; None when there is none (no such job, or it expired)."""
        if not raw:
            return None
        out: dict[str, Any] = {}
        for k, v in raw.items():
            name, val = text_of(k), text_of(v)
            try:
                out[name] = int(val) if name in _INTS else float(val) if name in _FLOATS else val
            except ValueError:
                out[name] = val  # a field written around the SDK: kept as text
        return cls(job_id, out)

    @staticmethod
    def admitted(**request: Any) -> dict[str, str]:
        """The fields admission writes for a new job: ``request`` (the job's total, voice, format, ...) as stored
        text, queued with nothing done unless it says otherwise."""
        return {k: repr(v) if isinstance(v, float) else str(v) for k, v in {"state": "queued", "done": 0, **request}.items()}

    # -- the mapping face ------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    # -- typed reads -----------------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return str(self.fields.get("state", ""))

    @property
    def ended(self) -> bool:
        return self.state in STATES_FINAL

    @property
    def total(self) -> int:
        return int(self.fields.get("total", 0) or 0)

    @property
    def open(self) -> bool:
        """Its text is still being appended (``wire.appends``): its total is not known yet."""
        return str(self.fields.get("open", "")) == "1"

    @property
    def done(self) -> int:
        return int(self.fields.get("done", 0) or 0)

    @property
    def started(self) -> float:
        return float(self.fields.get("started", 0.0) or 0.0)

    @property
    def first_chunk(self) -> float:
        return float(self.fields.get("first_chunk", 0.0) or 0.0)

    def segment(self, name: str, seg: int) -> str:
        """A segment's bookkeeping field (``SEGMENT_FIELDS``), '' when unset."""
        return str(self.fields.get(f"{name}:{seg}", ""))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.fields)

    def result(self) -> JobResult:
        """The result of an ended job; a failed or cancelled job raises its error instead."""
        st = self.fields
        if self.state != "done":
            raise error_from_dict({"code": st.get("error_code") or f"JOB_{self.state.upper()}",
                                   "message": st.get("error_message") or f"job {self.job_id} {self.state}"})
        created = float(st.get("created", 0.0))
        timings = {name: round(float(st[name]) - created, 4) for name in ("started", "first_chunk", "finished") if st.get(name)}
        info = json.loads(st["info"]) if st.get("info") else {}
        words = tuple(Word(**w) for w in json.loads(st["words"])) if st.get("words") else ()
        return JobResult(job_id=self.job_id, state=self.state, url=str(st.get("url", "")),
                         duration_s=float(st.get("duration", 0.0)), timings=timings, info=info, words=words)

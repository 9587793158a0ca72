"""The dead-letter stream: segments a worker could not run (malformed, or failing ``max_deliveries``
times). `ttsfarm dlq` lists, shows and requeues them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from producer.contract import Keys, SegmentJob


def _s(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


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
        except ValueError:
            return ""


def _parse(entry_id: Any, f: dict[Any, Any]) -> DeadLetter:
    g = {_s(k): _s(v) for k, v in f.items()}
    return DeadLetter(id=_s(entry_id), stream=g.get("stream", ""), entry_id=g.get("entry_id", ""), code=g.get("code", ""),
                      message=g.get("message", ""), deliveries=int(g.get("deliveries", "0") or 0),
                      fields=json.loads(g.get("fields", "{}")))


class DeadLetters:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r = r
        self.keys = keys

    def list(self, count: int = 50) -> list[DeadLetter]:
        return [_parse(i, f) for i, f in self.r.xrevrange(self.keys.dead_letters(), count=count)]

    def get(self, dlq_id: str) -> DeadLetter | None:
        found = self.r.xrange(self.keys.dead_letters(), min=dlq_id, max=dlq_id)
        return _parse(*found[0]) if found else None

    def requeue(self, dlq_id: str) -> str:
        """Put a dead-lettered segment back on its queue and reopen its job. Returns the new entry id.
        A malformed entry cannot be requeued (it would only fail again)."""
        dl = self.get(dlq_id)
        if dl is None:
            raise KeyError(dlq_id)
        job = SegmentJob.from_fields(dl.fields)  # raises MALFORMED_JOB for entries that never parsed
        status, results = self.keys.status(job.job_id), self.keys.results(job.job_id)
        finals = [i for i, f in self.r.xrange(results) if f.get(b"type") == b"final"]
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hdel(status, "final", "error_code", "error_message", "finished")
            pipe.hset(status, "state", "queued")
            if finals:
                pipe.xdel(results, *finals)
            pipe.xadd(dl.stream, job.to_fields())
            pipe.xdel(self.keys.dead_letters(), dl.id)
            replies = pipe.execute()
        return _s(replies[-2])

    def purge(self) -> int:
        n = int(self.r.xlen(self.keys.dead_letters()))
        self.r.delete(self.keys.dead_letters())
        return n

"""The dead-letter stream: segments a worker could not run (malformed, or failing ``max_deliveries``
times). `ttsfarm dlq` lists, shows and requeues them. The record is ``producer.wire.records``'s."""

from __future__ import annotations

import json
import sys

import redis

from producer.wire.keys import Keys
from producer.wire.records import FINAL, DeadLetter, SegmentJob, parse_dead_letter, record_type


class DeadLetters:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r = r
        self.keys = keys

    def list(self, count: int = 50) -> list[DeadLetter]:
        return [parse_dead_letter(i, f) for i, f in self.r.xrevrange(self.keys.dead_letters(), count=count)]

    def get(self, dlq_id: str) -> DeadLetter | None:
        found = self.r.xrange(self.keys.dead_letters(), min=dlq_id, max=dlq_id)
        return parse_dead_letter(*found[0]) if found else None

    def requeue(self, dlq_id: str) -> str:
        """Put a dead-lettered segment back on its queue and reopen its job. Returns the new entry id.
        A malformed entry cannot be requeued (it would only fail again)."""
        dl = self.get(dlq_id)
        if dl is None:
            raise KeyError(dlq_id)
        job = SegmentJob.from_fields(dl.fields)  # raises MALFORMED_JOB for entries that never parsed
        status, results = self.keys.status(job.job_id), self.keys.results(job.job_id)
        finals = [i for i, f in self.r.xrange(results) if record_type(f) == FINAL]
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hdel(status, "final", "error_code", "error_message", "finished")
            pipe.hset(status, "state", "queued")
            if finals:
                pipe.xdel(results, *finals)
            pipe.xadd(dl.stream, job.to_fields())
            pipe.xdel(self.keys.dead_letters(), dl.id)
            replies = pipe.execute()
        return str(replies[-2].decode() if isinstance(replies[-2], bytes) else replies[-2])

    def purge(self) -> int:
        n = int(self.r.xlen(self.keys.dead_letters()))
        self.r.delete(self.keys.dead_letters())
        return n


def run(dlq: DeadLetters, action: str, entry_id: str = "", count: int = 50) -> int:
    """`ttsfarm dlq list|show|requeue|purge`: print what was found or done; 1 when ``show`` finds nothing."""
    if action == "list":
        for dl in dlq.list(count):
            print(f"{dl.id}  {dl.code:<22} job={dl.job_id or '-':<24} deliveries={dl.deliveries}  {dl.message[:80]}")
    elif action == "show":
        found = dlq.get(entry_id)
        if found is None:
            print(f"no dead letter {entry_id}", file=sys.stderr)
            return 1
        print(json.dumps(found.__dict__, indent=2, ensure_ascii=False))
    elif action == "requeue":
        print(f"requeued as {dlq.requeue(entry_id)}")
    elif action == "purge":
        print(f"removed {dlq.purge()} dead letter(s)")
    return 0

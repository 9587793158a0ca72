"""The wire's records are built and parsed in one place (wire/records.py): the final record that the
FINALIZE script appends is ``final_fields``'s, and the reader's ``parse_final`` reads it back; the dead-letter
record round-trips through ``dead_letter_fields`` / ``parse_dead_letter``. Real Redis."""

from __future__ import annotations

import redis

from wire.errors import JOB_CANCELLED
from wire.keys import Keys
from wire.redis.broker import RedisBroker
from wire.records import ENTRY, FINAL, dead_letter_fields, final_fields, parse_dead_letter, parse_final, record_type
from workers.publisher import Publisher


def _by_name(f: dict) -> dict:
    return {k.decode(): v for k, v in f.items()}


def test_the_final_record_is_final_fields_and_parses_back(r: redis.Redis) -> None:
    keys = Keys("wire-test")
    pub = Publisher(RedisBroker(r, keys), None, chunk_ms=500, maxlen=100, ttl_s=100)  # type: ignore[arg-type]  # no storage needed
    r.hset(keys.status("job-done"), "state", "running")
    assert pub.finish("job-done", "done", {"url": "u", "n": 1}, url="u", info='{"url": "u"}') == 1  # as publish_job
    assert pub.finish("job-done", "done", {"url": "u"}) == 0  # one final record per job
    ((_, f),) = r.xrange(keys.results("job-done"))
    assert {k.decode(): v.decode() for k, v in f.items()} == {ENTRY: "1", **final_fields("done", url="u", n=1)}
    assert list(f) == [b"entry", b"type", b"state", b"info"]  # numbered: the stream's first record
    assert record_type(f) == FINAL and parse_final(_by_name(f)) == {"state": "done", "url": "u", "n": 1}
    assert r.hget(keys.status("job-done"), "url") == b"u" and r.hget(keys.status("job-done"), "info") == b'{"url": "u"}'


def test_a_cancel_that_won_the_race_writes_the_cancelled_record(r: redis.Redis) -> None:
    keys = Keys("wire-test")
    pub = Publisher(RedisBroker(r, keys), None, chunk_ms=500, maxlen=100, ttl_s=100)  # type: ignore[arg-type]
    r.hset(keys.status("job-cancelled"), "state", "cancelled")
    assert pub.finish("job-cancelled", "done", {"url": "u"}, url="u") == 2
    ((_, f),) = r.xrange(keys.results("job-cancelled"))
    assert parse_final(_by_name(f)) == {"state": "cancelled", "code": JOB_CANCELLED, "message": "cancelled by the client"}
    assert r.hget(keys.status("job-cancelled"), "url") is None


def test_the_dead_letter_record_round_trips(r: redis.Redis) -> None:
    r.xadd("wire-test:dlq", dead_letter_fields("q:1", "1-0", "TOO_MANY_FAILURES", "x" * 3000, 6,
                                               {b"v": b"1", "job": '{"job_id": "abcdefgh"}'}))
    ((entry_id, f),) = r.xrange("wire-test:dlq")
    dl = parse_dead_letter(entry_id, f)
    assert (dl.stream, dl.entry_id, dl.code, dl.deliveries, dl.job_id) == ("q:1", "1-0", "TOO_MANY_FAILURES", 6, "abcdefgh")
    assert dl.fields == {"v": "1", "job": '{"job_id": "abcdefgh"}'} and len(dl.message) == 2000
    assert dl.ts == int(entry_id.decode().split("-")[0]) / 1000


def test_a_damaged_dead_letter_reads_as_empty_fields_not_an_error() -> None:
    dl = parse_dead_letter(b"1700000000123-0", {b"code": b"X", b"deliveries": b"many", b"fields": b"{not json"})
    assert (dl.code, dl.deliveries, dl.fields, dl.job_id, dl.ts) == ("X", 0, {}, "", 1700000000.123)
    dl = parse_dead_letter("junk", {"fields": '{"job": "[1, 2]"}'})
    assert (dl.fields, dl.job_id, dl.ts) == ({"job": "[1, 2]"}, "", 0.0)

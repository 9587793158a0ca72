"""How a worker's consumer reads the queue streams (``wire/redis/consumer.py``) on a real redis-server,
counted by Redis itself: a peek asks only the streams that moved, and a process's idle consumers of the same streams
wait with one blocking read at a time (``IdleGate``)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.processes import free_port
from producer.client import Client
from wire.keys import Keys
from wire.redis.broker import RedisBroker
from wire.redis.consumer import RedisConsumer
from wire import shard_consumer
from wire.shard_consumer import ShardedConsumer
from wire.settings import Settings


def calls(r: redis.Redis, name: str) -> int:
    """How often Redis ran command ``name`` so far (``INFO commandstats``)."""
    return int(r.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


def two_consumers(settings: Settings, r: redis.Redis) -> tuple[Client, RedisConsumer, RedisConsumer]:
    """A client, and two consumers of one process (one broker) on every queue stream, its groups made and each one's
    first peek done (nothing queued)."""
    keys = Keys(settings.redis.key_prefix)
    streams = keys.queues(settings.queue.n_buckets)
    broker = RedisBroker(r, keys)
    one, two = broker.consumer("c1", streams), broker.consumer("c2", streams)
    one.ensure_groups()
    assert one.heads(0) == [] and two.heads(0) == []
    return Client(r, settings), one, two


def test_a_peek_asks_only_the_streams_that_moved(settings: Settings, r: redis.Redis) -> None:
    """Heads are read with one XREAD over every stream from the ids the consumer last saw; only a stream with an
    entry after that id is asked for its group's id (XINFO GROUPS), and where that is still the id seen, what the XREAD
    read is the head (no XRANGE). What another consumer claimed is never a head, and an entry added later is."""
    client, mine, other = two_consumers(settings, r)
    before = calls(r, "xinfo|groups")
    assert mine.heads(0) == [] and calls(r, "xinfo|groups") == before  # nothing moved: no stream asked
    client.submit("Hello there.", job_id="peek-job-0001", lane="bulk")
    ranges = calls(r, "xrange")
    (head,) = mine.heads(0)
    assert head.job_id == "peek-job-0001" and calls(r, "xinfo|groups") == before + 1  # the one stream that moved
    assert calls(r, "xrange") == ranges  # the group's id was the one seen: the XREAD's entries are the head
    (taken,) = other.claim(head.stream, 1)
    assert taken.job is not None and taken.job.job_id == head.job_id
    assert mine.heads(0) == []  # delivered to another consumer: pending, not a head
    client.submit("Hello again.", job_id="peek-job-0002", lane="bulk")
    other.claim(head.stream, 1)
    client.submit("Hello once more.", job_id="peek-job-0003", lane="bulk")
    ranges = calls(r, "xrange")
    assert [h.job_id for h in mine.heads(0)] == ["peek-job-0003"]  # past what another consumer took meanwhile
    assert calls(r, "xrange") == ranges + 1


def test_idle_consumers_of_one_process_wait_with_one_read(settings: Settings, r: redis.Redis) -> None:
    """Idle consumers of one process on the same streams block with one XREAD at a time (``IdleGate``): two of them
    idling three rounds cost three XREADs, not six, and no peek after a round that timed out (its ids stay exact). An
    entry added while they wait wakes both: the reader has it as a head, the waiter finds it at its next peek."""
    client, one, two = two_consumers(settings, r)

    def idle(consumer: Any, rounds: int, got: list[Any]) -> None:
        for _ in range(rounds):
            got.append(consumer.heads(300))

    def together(rounds: int) -> list[Any]:
        got: list[Any] = []
        threads = [threading.Thread(target=idle, args=(c, rounds, got)) for c in (one, two)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        return got

    assert together(1) == [[]] * 2  # each peeks once first
    reads, peeks = calls(r, "xread"), calls(r, "evalsha")
    assert together(3) == [[]] * 6
    assert calls(r, "xread") - reads <= 4 and calls(r, "evalsha") == peeks  # ungated: 6 XREADs; a timed-out round: no peek

    heard: dict[str, list[Any]] = {}
    waiting = [threading.Thread(target=lambda c=c: heard.setdefault(c.name, c.heads(5000))) for c in (one, two)]
    for t in waiting:
        t.start()
    time.sleep(0.3)
    started = time.monotonic()
    client.submit("Hello there.", job_id="gate-job-0001", lane="bulk")
    for t in waiting:
        t.join(10)
    assert time.monotonic() - started < 2.0  # both woke with the entry, not at the 5 s block's end
    assert sorted(len(h) for h in heard.values()) == [0, 1]
    waiter = one if not heard["c1"] else two
    assert [h.job_id for h in waiter.heads(0)] == ["gate-job-0001"]


def test_a_consumer_going_idle_waits_from_what_it_last_saw_without_a_peek(settings: Settings, r: redis.Redis) -> None:
    """A consumer that peeked (a busy loop's last step) and then goes idle blocks from the ids that peek read, with no
    script first; an entry added meanwhile still wakes it as a head. After a read that returned entries, the next idle
    call peeks again: what it read may have been taken by another consumer since, and a pending entry is not a head."""
    client, mine, other = two_consumers(settings, r)
    assert mine.heads(0) == []  # a busy step's peek
    scripts, reads = calls(r, "evalsha"), calls(r, "xread")
    assert mine.heads(200) == []
    assert calls(r, "evalsha") == scripts and calls(r, "xread") == reads + 1  # one blocking read, no peek

    heard: list[Any] = []
    waiting = threading.Thread(target=lambda: heard.append(mine.heads(5000)))
    waiting.start()
    time.sleep(0.3)
    client.submit("Hello there.", job_id="seen-job-0001", lane="bulk")
    waiting.join(10)
    assert [h.job_id for h in heard[0]] == ["seen-job-0001"]
    (taken,) = other.claim(heard[0][0].stream, 1)  # another consumer takes it; it stays pending in the stream
    scripts = calls(r, "evalsha")
    assert mine.heads(200) == []  # peeks first: the entry it read is pending now, not a head
    assert calls(r, "evalsha") == scripts + 1


def test_a_sharded_consumer_woken_by_one_shard_does_not_peek_every_shard_again(settings: Settings,
                                                                                 r: redis.Redis) -> None:
    """Idle over two shards (here two key prefixes of one Redis), a sharded consumer waits on each shard at once; an
    entry on one wakes it with that shard's head, read by that shard's blocking read: no shard is peeked again (a
    peek is a script: none runs but the submit's)."""
    n = settings.queue.n_buckets
    shards = [RedisBroker(r, Keys(f"{settings.redis.key_prefix}-s{i}")) for i in range(2)]
    sharded = ShardedConsumer([b.consumer("c1", b.keys.queues(n)) for b in shards])
    sharded.ensure_groups()
    assert sharded.heads(0) == []
    second = Client(r, settings.replace(redis={"key_prefix": f"{settings.redis.key_prefix}-s1"}))
    for aside in ("warm", "aside"):  # what a new client's first submit runs, its scripts already loaded (the second)
        before = calls(r, "evalsha")
        Client(r, settings.replace(redis={"key_prefix": f"{settings.redis.key_prefix}-{aside}"})).submit(
            "Hello there.", job_id=f"{aside}-job-0001", lane="bulk")
        submit_scripts = calls(r, "evalsha") - before

    heard: list[Any] = []
    waiting = threading.Thread(target=lambda: heard.append(sharded.heads(2000)))
    waiting.start()
    gates = [c.gate for c in sharded.shards]  # type: ignore[attr-defined]
    deadline = time.monotonic() + 5
    while not all(g.reading for g in gates) and time.monotonic() < deadline:
        time.sleep(0.01)
    scripts = calls(r, "evalsha")
    second.submit("Hello there.", job_id="shard-job-0001", lane="bulk")
    waiting.join(10)
    (head,) = heard[0]
    assert head.job_id == "shard-job-0001" and head.stream.startswith("1@")
    assert calls(r, "evalsha") == scripts + submit_scripts  # the submit's script, no peek of either shard
    while any(g.reading for g in gates) and time.monotonic() < deadline:  # the first shard's read times out
        time.sleep(0.05)
    sharded.leave()


def test_a_busy_sharded_peek_asks_one_shard_in_turn_and_those_with_heads(settings: Settings, r: redis.Redis,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Between its steps a loop over three shards asks the shards where it last found heads and one more in turn, not
    every shard every time: a job on a shard that had none is seen within one round of steps, and a shard with heads
    is asked at every step until they are gone. An idle call asks every shard; so does a busy one once a shard has
    not been asked for ``BUSY_ROUND_S``."""
    # the turns alone, whatever the machine's pace
    monkeypatch.setattr(shard_consumer, "BUSY_ROUND_S", 3600.0, raising=False)
    n = settings.queue.n_buckets
    prefixes = [f"{settings.redis.key_prefix}-t{i}" for i in range(3)]
    sharded = ShardedConsumer([RedisBroker(r, Keys(p)).consumer("c1", Keys(p).queues(n)) for p in prefixes])
    sharded.ensure_groups()
    assert sharded.heads(0) == []  # the first asks every shard: nothing is known of any
    scripts = calls(r, "evalsha")
    assert sharded.heads(0) == [] and sharded.heads(0) == []
    assert calls(r, "evalsha") == scripts + 2  # one shard a step

    second = Client(r, settings.replace(redis={"key_prefix": prefixes[1]}))
    second.submit("Hello there.", job_id="turn-job-0001", lane="bulk")
    seen = [sharded.heads(0) for _ in range(3)]  # a round: every shard's turn comes once
    assert [h.job_id for got in seen for h in got][:1] == ["turn-job-0001"]
    scripts = calls(r, "evalsha")
    assert [h.job_id for h in sharded.heads(0)] == ["turn-job-0001"]  # unclaimed: its shard is asked at every step
    assert calls(r, "evalsha") - scripts in (1, 2)  # that shard, and the one whose turn it is

    scripts = calls(r, "evalsha")
    assert [h.job_id for h in sharded.heads(200)] == ["turn-job-0001"] and calls(r, "evalsha") == scripts + 3  # idle
    monkeypatch.setattr(shard_consumer, "BUSY_ROUND_S", 0.0)
    scripts = calls(r, "evalsha")
    sharded.heads(0)
    assert calls(r, "evalsha") == scripts + 3  # none asked within BUSY_ROUND_S: every shard
    sharded.leave()


def test_a_busy_sharded_peek_whose_turn_falls_on_a_lost_shard_asks_the_others(settings: Settings, r: redis.Redis,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy loop's turn on a shard that does not answer (its node is down) does not fail the step while another
    shard answers: the others are asked, and their heads come back."""
    monkeypatch.setattr(shard_consumer, "BUSY_ROUND_S", 3600.0, raising=False)
    monkeypatch.setattr(shard_consumer, "RETRY_S", (0.0, 0.0))  # the lost shard is tried again at once, at its turn
    n = settings.queue.n_buckets
    up, down = Keys(f"{settings.redis.key_prefix}-up"), Keys(f"{settings.redis.key_prefix}-down")
    nowhere = redis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))  # refused at once
    sharded = ShardedConsumer([RedisBroker(r, up).consumer("c1", up.queues(n)),
                               RedisBroker(nowhere, down).consumer("c1", down.queues(n))])
    assert sharded.heads(0) == []  # both asked: the second fails, the first answers
    client = Client(r, settings.replace(redis={"key_prefix": up.prefix}))
    client.submit("Hello there.", job_id="up-job-0001", lane="bulk")
    assert [h.job_id for h in sharded.heads(0)] == ["up-job-0001"]  # the down shard's turn: the up one is asked too

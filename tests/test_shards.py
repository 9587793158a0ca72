"""Shards (``redis.shards``) with real processes: three redis-servers (the session's as shard 0 and two more), one
real Celery worker consuming all three, the SDK submitting and reading through its ``ShardedBroker``.

Each job's records (status, results stream, queue entries) are on the shard its id names and on no other; every job
finishes once (one final record, each chunk once) and a fresh client reads it from its id alone; cancel and status
reach a job on another shard than the first; every shard's backlog counters come back to 0 (acks reach the shard of
their entry); a malformed entry on a shard is dead-lettered there, under an id naming the shard; a book's sentences
spread over the shards and the book is assembled. Without ``redis.shards`` the farm's broker is the plain
``RedisBroker`` on ``redis.url``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from wire.broker import Broker, Consumer
from wire.keys import LANES, Keys
from wire.redis.broker import RedisBroker
from wire.settings import load_settings
from wire.connect import connect
from wire.shards import ShardedBroker, shard_of
from tests.conftest import Farm, FarmSpec

ROOT = Path(__file__).resolve().parent.parent
NOISELESS = {"noise_scale": 0.0, "noise_w": 0.0}


def test_a_job_id_names_the_same_shard_everywhere() -> None:
    """The shard function is part of the wire: fixed values (another hash would strand every stored job), spread
    evenly, and a shard added moves only the ids that go to it."""
    pinned = ("abcdefgh", "job-00000001", "job-00000004", "Zz_9-Zz_9-Zz_9")
    assert [shard_of(j, 3) for j in pinned] == [0, 2, 1, 0]
    assert [shard_of(j, 5) for j in pinned] == [0, 2, 1, 4]
    ids = [f"job{i:06d}" for i in range(6000)]
    counts = [sum(shard_of(j, 3) == s for j in ids) for s in range(3)]
    assert min(counts) > 1800, counts
    moved = [j for j in ids if shard_of(j, 3) != shard_of(j, 4)]
    assert all(shard_of(j, 4) == 3 for j in moved) and 1300 < len(moved) < 1700, len(moved)


def test_shard_setting_reads_and_refuses() -> None:
    s = load_settings(env={"TTSFARM_REDIS_URL": "redis://a:1/0", "TTSFARM_REDIS_SHARDS": "redis://b:1/0, redis://c:1/0"})
    assert s.redis.shards == ("redis://b:1/0", "redis://c:1/0")
    sharded = connect(s.redis)
    # every step of the seam has its route: a step added to Broker or Consumer without one fails here
    assert isinstance(sharded, ShardedBroker) and isinstance(sharded, Broker)
    assert isinstance(sharded.consumer("c", ["q"]), Consumer)
    assert load_settings(env={"TTSFARM_REDIS_SHARDS": '["redis://b:1/0"]'}).redis.shards == ("redis://b:1/0",)
    plain = connect(load_settings(env={}).redis)
    assert type(plain) is RedisBroker  # no shards: today's broker, nothing in between
    for bad in ("redis://a:1/0", "redis://b:1/0,redis://b:1/0", "sentinel://s:26379"):
        with pytest.raises(Exception) as exc:
            load_settings(env={"TTSFARM_REDIS_URL": "redis://a:1/0", "TTSFARM_REDIS_SHARDS": bad})
        assert getattr(exc.value, "code", "") == "BAD_OPTION", bad


FARM = FarmSpec(shards=2, env={"TTSFARM_QUEUE_MAX_BATCH_CPU": "4"})  # the session's redis-server and two of its own


@pytest.fixture(scope="module")
def nodes(farm: Farm) -> list[str]:
    return farm.nodes


def _ids(per_shard: int, shards: int, tag: str) -> list[str]:
    """Job ids, ``per_shard`` on each shard, interleaved."""
    by: list[list[str]] = [[] for _ in range(shards)]
    i = 0
    while min(len(b) for b in by) < per_shard:
        j = f"{tag}-{i:05d}"
        if len(by[shard_of(j, shards)]) < per_shard:
            by[shard_of(j, shards)].append(j)
        i += 1
    return [j for group in zip(*by) for j in group]


def _conns(nodes: list[str]) -> list[redis.Redis]:
    return [redis.Redis.from_url(u) for u in nodes]


@pytest.mark.slow
def test_jobs_live_on_their_shard_and_finish_once(farm: Farm, nodes: list[str]) -> None:
    keys, conns = Keys(farm.prefix), _conns(nodes)
    client = farm.client()
    assert isinstance(client.broker, ShardedBroker)
    ids = _ids(3, len(nodes), "spread")
    texts = {j: f"Sentence number {n} goes to its own shard. It has two parts." for n, j in enumerate(ids)}
    jobs = [client.submit(texts[j], voice="joe", job_id=j, options=NOISELESS) for j in ids]
    for job in jobs:
        assert job.wait(timeout=120).state == "done"
    reader = farm.client()  # a fresh client finds each job from its id alone
    for j in ids:
        home = shard_of(j, len(nodes))
        for n, conn in enumerate(conns):
            assert conn.exists(keys.status(j), keys.results(j)) == (2 if n == home else 0), (j, n, home)
        finals = [f for _, f in conns[home].xrange(keys.results(j)) if f.get(b"type") == b"final"]
        assert len(finals) == 1, (j, finals)
        chunks = list(reader.job(j).stream(timeout=30))
        assert [c.seq for c in chunks] == list(range(len(chunks))) and chunks[-1].last, j
        assert sum(len(c.pcm) for c in chunks) > 0
        st = conns[home].hgetall(keys.status(j))
        assert st[b"state"] == b"done" and int(st[b"done"]) == int(st[b"total"]) == len({c.seg for c in chunks}), st
    # every entry acked on its own shard: no lane's backlog left anywhere, no queue entry left (the entry that ended a
    # job is acked just after its end is written: wait a moment for it, never for ever)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(float(c.hget(keys.backlog(lane), "n") or 0) for c in conns for lane in LANES):
        time.sleep(0.1)
    for conn in conns:
        for lane in LANES:
            assert float(conn.hget(keys.backlog(lane), "n") or 0) == 0, (conn, lane)
        assert sum(conn.xlen(q) for q in keys.queues(farm.settings.queue.n_buckets)) == 0
    reader.close()
    client.close()


@pytest.mark.slow
def test_cancel_status_and_the_status_screen_across_shards(farm: Farm, nodes: list[str]) -> None:
    client = farm.client()
    far = next(j for j in _ids(1, len(nodes), "cancel") if shard_of(j, len(nodes)) == 2)
    job = client.submit("A long bulk job that is cancelled at once. " * 20, voice="joe", lane="bulk", job_id=far)
    assert client.job(far).status().state in ("queued", "running")
    assert job.cancel() is True
    with pytest.raises(Exception) as exc:
        job.wait(timeout=60)
    assert "CANCELLED" in str(getattr(exc.value, "code", exc.value))
    assert client.job(far).status().state == "cancelled"
    assert _conns(nodes)[2].hget(Keys(farm.prefix).status(far), "state") == b"cancelled"
    topology = client.broker.topology()
    assert [s["master"] for s in topology["shards"]] == [u.split("@")[-1].split("//")[-1].removesuffix("/0") for u in nodes]
    screen = subprocess.run([sys.executable, "-m", "cli", "status"], env={**farm.env, "PATH": ""}, cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert screen.returncode == 0, screen.stderr
    assert "shards 3:" in screen.stdout and "1 up" in screen.stdout, screen.stdout
    client.close()


@pytest.mark.slow
def test_a_malformed_entry_is_dead_lettered_on_its_shard(farm: Farm, nodes: list[str]) -> None:
    keys, conns = Keys(farm.prefix), _conns(nodes)
    client = farm.client()
    client.ensure_groups()
    conns[1].xadd(keys.queue("interactive", 1), {"v": "1", "job": "[1, 2, 3]"})
    broker = client.broker
    deadline = time.monotonic() + 30
    while not broker.dead_letters(10) and time.monotonic() < deadline:
        time.sleep(0.05)
    (dl,) = broker.dead_letters(10)
    assert dl.id.endswith("@1") and dl.code == "MALFORMED_JOB" and dl.stream == keys.queue("interactive", 1)
    assert conns[1].xlen(keys.dead_letters()) == 1 and conns[0].xlen(keys.dead_letters()) == 0
    assert broker.find_dead_letter(dl.id) == dl
    assert broker.queue_snapshot(farm.settings.queue.n_buckets).dead_letter_count == 1
    assert broker.purge_dead_letters() == 1
    assert client.submit("Still serving.", voice="joe").wait(timeout=60).state == "done"
    client.close()


@pytest.mark.slow
def test_a_books_sentences_spread_over_the_shards(farm: Farm, nodes: list[str], tmp_path: Path) -> None:
    from books import run_book

    src = tmp_path / "small.md"
    src.write_text("# One\n\nThe first chapter opens. It goes on a little. Then it ends.\n\n"
                   "# Two\n\nThe second chapter starts here. It is short too. The end.\n", encoding="utf-8")
    result = run_book(farm.settings, src, None, str(tmp_path / "out"), book_id="spread-book", timeout=150)
    assert len(result.chapters) == 2 and all(Path(c.url.removeprefix("file://")).is_file() for c in result.chapters)
    keys, held = Keys(farm.prefix), []
    for conn in _conns(nodes):
        held.append(sum(conn.hget(k, "book") == b"spread-book" for k in conn.scan_iter(keys.status("*"))
                        if conn.type(k) == b"hash"))
    assert sum(held) == result.segments and sum(n > 0 for n in held) >= 2, held


@pytest.mark.slow
def test_a_job_whose_text_is_appended_lives_on_its_shard(farm: Farm, nodes: list[str]) -> None:
    """Text-in streaming (open, append, close) on a sharded farm: every step of the open job goes to its id's shard."""
    keys, conns = Keys(farm.prefix), _conns(nodes)
    client = farm.client()
    job_id = next(j for j in _ids(1, len(nodes), "textin") if shard_of(j, len(nodes)) == 2)
    job = client.open(voice="joe", format="wav", job_id=job_id)
    job.append("The first sentence is written while the job is open. ")
    job.append("The second one comes after it.")
    job.close()
    assert job.wait(timeout=120).state == "done"
    assert [bool(c.exists(keys.status(job_id))) for c in conns] == [False, False, True]


@pytest.mark.slow
def test_a_lost_shard_stops_only_its_own_jobs(farm: Farm, nodes: list[str]) -> None:
    """Shard 2's node shut down (last in this module: it stays down): jobs on shards 0 and 1 still finish on the same
    worker, a submit to shard 2 is refused as transient, naming the job."""
    from wire.errors import TransientError

    client = farm.client()
    client.ensure_groups()
    redis.Redis.from_url(nodes[2]).shutdown(nosave=True)
    ids = _ids(2, len(nodes), "lost")
    alive = [j for j in ids if shard_of(j, len(nodes)) != 2]
    started = time.monotonic()
    for j in alive:
        assert client.submit("Served while another shard is down.", voice="joe", job_id=j).wait(timeout=60).state == "done"
    assert time.monotonic() - started < 45
    lost = next(j for j in ids if shard_of(j, len(nodes)) == 2)
    with pytest.raises(TransientError) as exc:
        client.submit("Its shard is down.", voice="joe", job_id=lost)
    assert exc.value.detail["job_id"] == lost
    assert "shard 2 does not answer" in "".join(p.read_text(errors="replace") for p in farm.root.glob("*.log"))
    client.close()


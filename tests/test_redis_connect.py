"""``redis.url`` in Celery's Sentinel form: how it is read, what Celery gets, and the errors a bad one gets."""

from __future__ import annotations

import pytest
import redis.connection
import redis.exceptions

from pipeline.errors import BAD_OPTION, InputError
from wire.redis.connect import WHOLE_PACKER, SentinelUrl, WholePacker, connect
from wire.settings import load_settings
from wire.tasks import celery_connection

URL = "sentinel://:p%40ss@h1:26379;sentinel://h2:26380;sentinel://h3/2"


def test_a_sentinel_url_is_read_wherever_its_parts_are_written() -> None:
    u = SentinelUrl.parse(URL)
    assert u.sentinels == (("h1", 26379), ("h2", 26380), ("h3", 26379))
    assert (u.db, u.password, u.tls) == (2, "p@ss", None)
    assert u.node_kwargs() == {"db": 2, "password": "p@ss"}
    tls = SentinelUrl.parse("sentinel://h1:1;sentinel://h2:2/0?ssl_ca_certs=/ca.pem&ssl_check_hostname=false")
    assert tls.node_kwargs() == {"db": 0, "ssl": True, "ssl_ca_certs": "/ca.pem", "ssl_check_hostname": False}


def test_celery_gets_every_address_with_the_credentials_and_the_master_name() -> None:
    settings = load_settings(env={"TTSFARM_REDIS_URL": URL, "TTSFARM_REDIS_MASTER_NAME": "farm",
                                  "TTSFARM_REDIS_SENTINEL_PASSWORD": "s3"})
    conf = celery_connection(settings)
    assert conf["broker_url"] == "sentinel://:p%40ss@h1:26379/2;sentinel://:p%40ss@h2:26380/2;sentinel://:p%40ss@h3:26379/2"
    assert conf["broker_transport_options"] == {"global_keyprefix": "ttsfarm:celery:", "master_name": "farm",
                                                "sentinel_kwargs": {"password": "s3"}}
    assert conf["result_backend_transport_options"]["master_name"] == "farm"
    plain = celery_connection(load_settings(env={"TTSFARM_REDIS_URL": "redis://h:6379/0"}))
    assert plain == {"broker_url": "redis://h:6379/0", "broker_transport_options": {"global_keyprefix": "ttsfarm:celery:"}}


@pytest.mark.parametrize("url", ["sentinel://", "sentinel://h1:1;redis://h2:2", "sentinel://h1:1/zero",
                                 "sentinel://h1:notaport", "sentinel://h1:1?sentinel_timeout=3"])
def test_a_bad_sentinel_url_gets_bad_option(url: str) -> None:
    with pytest.raises(InputError) as caught:
        connect(url, master_name="m")
    assert caught.value.code == BAD_OPTION


def test_a_sentinel_url_without_a_master_name_is_refused_at_load() -> None:
    with pytest.raises(InputError) as caught:
        load_settings(env={"TTSFARM_REDIS_URL": "sentinel://h1:26379"})
    assert caught.value.code == BAD_OPTION and "TTSFARM_REDIS_MASTER_NAME" in caught.value.message
    with pytest.raises(InputError):
        load_settings(env={"TTSFARM_REDIS_WAIT_REPLICAS": "-1"})


def test_the_password_never_shows_in_an_error() -> None:
    with pytest.raises(InputError) as caught:
        connect("sentinel://:secret@h1:1;http://:secret@h2:2", master_name="m")
    assert "secret" not in str(caught.value)


# -- how a blocking client packs its commands --------------------------------------------------------
PACKED_ARGS = [
    ("EVALSHA", "a" * 40, 2, "k:1", "k:2", 0, -7, 1.5, 1733500000.123456, 1e-7, 0.1 + 0.2, 10**20, "héllo ✓", b"\x00\xff" * 9000, ""),
    ("CONFIG GET", "maxmemory"),  # a command of two words, split as redis-py splits it
    (b"CLIENT SETNAME", b"x"),
    ("SET", "k", memoryview(b"view")),  # what hiredis does not take: redis-py's own packer
    ("SET", "k", bytearray(b"array")),
    # a publish's shape: many arguments, its PCM as views (sent as they are), one at the end, two side by side
    ("EVALSHA", "s" * 40, 1, "k", *range(20), memoryview(b"\x01\x02" * 5000), "x", 2.5, memoryview(b""), memoryview(b"pcm")),
    ("EVALSHA", "s" * 40, 0, *range(20), memoryview(bytearray(b"ab")), memoryview(b"cd"), ""),
]


@pytest.mark.parametrize("args", PACKED_ARGS, ids=range(len(PACKED_ARGS)))
def test_the_whole_packer_sends_what_redis_py_would(args: tuple[object, ...]) -> None:
    own = redis.connection.Connection().pack_command(*args)
    assert b"".join(bytes(x) for x in WholePacker().pack(*args)) == b"".join(bytes(x) for x in own)


def test_the_whole_packer_sends_a_publishs_pcm_views_without_copying_them() -> None:
    pcm = [memoryview(bytes([i]) * 100_000) for i in range(8)]
    args = ("EVALSHA", "s" * 40, 0, *[x for i, view in enumerate(pcm) for x in (i, "pcm", view, 1.5)])
    packed = WholePacker().pack(*args)
    assert [x for x in packed if isinstance(x, memoryview)] == pcm and all(a is b for a, b in zip(packed[1::2], pcm))
    assert sum(len(x) for x in packed if isinstance(x, bytes)) < 1000  # the rest: the small arguments, packed


def test_the_whole_packer_refuses_a_bad_type_as_redis_py_does() -> None:
    for bad in (True, None, {"a": 1}):
        with pytest.raises(redis.exceptions.DataError):
            WholePacker().pack("SET", "k", bad)


def test_a_blocking_client_packs_with_it_and_talks_to_redis(redis_url: str) -> None:
    client = connect(redis_url)
    assert client.connection_pool.connection_kwargs["command_packer"] is WHOLE_PACKER is not None
    pcm = bytes(range(256)) * 100
    assert client.eval("return {ARGV[1], ARGV[2], ARGV[3], ARGV[4]}", 0, pcm, 7, 2.5, "é") == [pcm, b"7", b"2.5", "é".encode()]
    views = [memoryview(bytes([i]) * 70_000) for i in range(3)]
    echo = "local t = {} for i = 1, #ARGV do t[i] = ARGV[i] end return t"
    assert client.eval(echo, 0, *range(20), views[0], "a", views[1], views[2]) == [
        *[str(i).encode() for i in range(20)], bytes(views[0]), b"a", bytes(views[1]), bytes(views[2])]
    pipe = client.pipeline(transaction=False)
    pipe.set("packed:a", pcm).get("packed:a").delete("packed:a")
    assert pipe.execute() == [True, pcm, 1]
    client.close()
    assert "command_packer" not in connect(redis_url, asyncio=True).connection_pool.connection_kwargs
    assert "command_packer" not in connect(redis_url, encoding="latin-1").connection_pool.connection_kwargs


def test_a_sentinel_client_sends_a_command_again_when_its_connection_is_lost() -> None:
    """A Sentinel group's client re-sends a command whose connection was lost mid-command, on a fresh connection to
    the master the Sentinel names (docs/RELIABILITY.md, "Failover"): here the connection is killed while the
    command blocks on the master, the way a failover drops it."""
    import threading
    import time

    import redis

    from bench.processes import RedisServer

    master = RedisServer().start()
    guard = RedisServer(sentinel=f"sentinel monitor m 127.0.0.1 {master.port} 1\n").start()
    try:
        client = connect(f"sentinel://127.0.0.1:{guard.port}", master_name="m", socket_timeout=5)
        assert client.ping()
        admin = redis.Redis(port=master.port)
        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.append(_blpop(client)))
        waiter.start()
        deadline = time.monotonic() + 5
        while not any(c["cmd"] == "blpop" for c in admin.client_list()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 1  # the blocked command's connection
        while admin.llen("waiting") == 0 and time.monotonic() < deadline:
            admin.rpush("waiting", "there")  # for the command sent again, once it blocks anew
            time.sleep(0.1)
        waiter.join(10)
        assert got == [(b"waiting", b"there")]
    finally:
        guard.stop()
        master.stop()


def _blpop(client: redis.Redis) -> object:
    try:
        return client.blpop(["waiting"], timeout=4)
    except redis.exceptions.ConnectionError as exc:
        return exc

"""The farm's connection to Redis: one server, or the master of a Sentinel group that follows a failover.

``redis.url`` names a server (``redis://``, ``rediss://`` for TLS, ``unix://``) or, in Celery's form, the
Sentinels of a group: ``sentinel://HOST:PORT;sentinel://HOST:PORT[/DB]`` with ``redis.master_name``. A password
(``sentinel://:PASSWORD@HOST:PORT;...``) and TLS (``?ssl=true`` with redis-py's ``ssl_*`` options in the query)
are the data nodes'; the Sentinels' own password is ``redis.sentinel_password``. As in Celery, the Sentinels are
asked only for the master's address.

With a group, the client is redis-py's ``Sentinel(...).master_for(name)``: each new connection asks the Sentinels
where the master is, a connection to a demoted master is dropped (its ``READONLY`` error), and the client's retries
(``SENTINEL_RETRIES``, backing off to 1 s) re-send a command whose connection was lost on a fresh connection to the
new master. redis-py gives a client built on a pool (``master_for``, ``from_url``) no retries of its own: the group's
client is given them here.
Which wire steps are safe to re-send is docs/RELIABILITY.md's "Failover" section. Celery gets the same group with
``celery_url`` and ``celery_transport_options`` (kombu reads credentials and database from the first address).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.retry
import redis.sentinel
from redis.backoff import ExponentialBackoff
from redis.connection import HIREDIS_AVAILABLE, Encoder, HiredisRespSerializer, PythonRespSerializer

from pipeline.errors import BAD_OPTION, InputError

if HIREDIS_AVAILABLE:
    import hiredis

SCHEME = "sentinel://"
SENTINEL_RETRIES = 10  # a command's tries after the first on a Sentinel group's client, 50 ms doubling to 1 s apart
TLS_OPTIONS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname", "ssl_ca_path")


def is_sentinel(url: str) -> bool:
    return url.strip().lower().startswith(SCHEME)


@dataclass(frozen=True)
class SentinelUrl:
    """A ``sentinel://`` URL read: the Sentinels' addresses and what the data nodes need (database, credentials,
    TLS options), wherever in the list they were written."""

    sentinels: tuple[tuple[str, int], ...]
    db: int = 0
    username: str = ""
    password: str = ""
    tls: Mapping[str, str] | None = None  # None: no TLS; else redis-py's ssl_* options (maybe none)
    query: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, url: str) -> SentinelUrl:
        sentinels: list[tuple[str, int]] = []
        db, username, password, query = 0, "", "", {}
        for part in url.strip().split(";"):
            if not part.strip():
                continue
            if not is_sentinel(part):
                raise InputError(f"setting redis.url: {_safe(part)!r} is not a sentinel://HOST:PORT address (a "
                                 "Sentinel URL lists sentinel:// addresses separated by ';')", code=BAD_OPTION)
            try:
                u = urlsplit(part.strip())
                host, port = u.hostname, u.port or 26379
            except ValueError as exc:
                raise InputError(f"setting redis.url: cannot read {_safe(part)!r}: {exc}", code=BAD_OPTION) from None
            if not host:
                raise InputError(f"setting redis.url: {_safe(part)!r} names no host", code=BAD_OPTION)
            sentinels.append((host, port))
            username = unquote(u.username) if u.username else username
            password = unquote(u.password) if u.password else password
            path = u.path.strip("/")
            if path:
                if not path.isdigit():
                    raise InputError(f"setting redis.url: database {path!r} is not a number", code=BAD_OPTION)
                db = int(path)
            query.update(parse_qsl(u.query))
        if not sentinels:
            raise InputError("setting redis.url: a Sentinel URL names at least one sentinel://HOST:PORT", code=BAD_OPTION)
        unknown = set(query) - {"ssl", *TLS_OPTIONS}
        if unknown:
            raise InputError(f"setting redis.url: unknown option(s) {', '.join(sorted(unknown))} (ssl and "
                             f"{', '.join(TLS_OPTIONS)} pass through)", code=BAD_OPTION)
        tls_on = query.get("ssl", "").lower() in ("1", "true", "yes") or any(k in query for k in TLS_OPTIONS)
        tls = {k: v for k, v in query.items() if k in TLS_OPTIONS} if tls_on else None
        return cls(tuple(sentinels), db, username, password, tls, query)

    def node_kwargs(self) -> dict[str, Any]:
        """redis-py's keyword arguments for the master's connections."""
        kwargs: dict[str, Any] = {"db": self.db}
        if self.username:
            kwargs["username"] = self.username
        if self.password:
            kwargs["password"] = self.password
        if self.tls is not None:
            kwargs["ssl"] = True
            kwargs.update(self.tls)
            if "ssl_check_hostname" in self.tls:
                kwargs["ssl_check_hostname"] = self.tls["ssl_check_hostname"].lower() in ("1", "true", "yes")
        return kwargs

    def celery_url(self) -> str:
        """The URL for Celery: every address with the credentials and database (kombu reads them from the first),
        no query (Celery's TLS options are ``broker_use_ssl``)."""
        auth = ""
        if self.username or self.password:
            auth = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}@"
        return ";".join(f"sentinel://{auth}{host}:{port}/{self.db}" for host, port in self.sentinels)


class WholePacker:
    """redis-py's command packer for the blocking client, the arguments handed to hiredis in one call: hiredis
    encodes ``str``, ``int``, ``float`` and ``bytes`` in C to the same bytes as redis-py's encoder, which redis-py
    would first run in Python on every argument; a long command's ``memoryview`` arguments (a publish's PCM) are sent
    as they are (``_with_views``). In the proxy's worker that halved the CPU of packing small commands and took a
    publish's packing from ~1.3 ms to ~0.14 ms: ~0.1 ms a segment (docs/lab/host-and-redis-path.md, "Packing a
    command's arguments"). Anything else (a ``bytearray``, a wrong type: ``DataError``) goes to redis-py's own packer.
    Stateless: one serves every connection."""

    def __init__(self) -> None:
        encoder = Encoder("utf-8", "strict", False)
        python = PythonRespSerializer(6000, encoder.encode)
        self._fallback = HiredisRespSerializer(python.pack, encoder.encode)

    def pack(self, *args: Any) -> list[bytes]:
        head = args[0]
        if isinstance(head, str) and " " in head:  # "CONFIG GET": the words are arguments of their own, as in redis-py
            args = (*head.encode().split(), *args[1:])
        elif isinstance(head, bytes) and b" " in head:
            args = (*head.split(), *args[1:])
        try:
            if len(args) > 16 and memoryview in map(type, args):  # a publish's PCM: sent as it is, not copied
                return _with_views(args)
            return [hiredis.pack_command(args)]
        except TypeError:
            return self._fallback.pack(*args)


def _with_views(args: tuple[Any, ...]) -> list[bytes | memoryview]:
    """A command whose large arguments came as ``memoryview``s (a publish's PCM): each one sent as it is, after its
    length, the runs of other arguments between them packed by hiredis (one call a run); nothing of the views is
    copied (hiredis would copy each three times: ~1 ms for a publish's ~800 KB). ``TypeError`` for an argument
    hiredis does not take."""
    views = [i for i, a in enumerate(args) if type(a) is memoryview]
    out: list[bytes | memoryview] = []
    pending = [b"*%d\r\n" % len(args)]
    start = 0
    for i in [*views, len(args)]:
        if i > start:
            run = hiredis.pack_command(args[start:i])
            pending.append(run[run.index(b"\r\n") + 2:])  # its arguments, without its own count
        if i == len(args):
            break
        view = args[i]
        pending.append(b"$%d\r\n" % view.nbytes)
        out += [b"".join(pending), view]
        pending = [b"\r\n"]
        start = i + 1
    out.append(b"".join(pending))
    return out


WHOLE_PACKER = WholePacker() if HIREDIS_AVAILABLE else None


def connect(url: str, *, master_name: str = "", sentinel_password: str = "", asyncio: bool = False,
            **redis_kwargs: Any) -> Any:
    """A redis-py client of ``url`` (blocking, or asyncio with ``asyncio``): of the server it names, or of the
    master of the Sentinel group ``master_name`` that a ``sentinel://`` URL lists. Nothing connects until the
    first command. ``redis_kwargs`` go to the data nodes' connections; the Sentinels get their socket options.
    A blocking client packs commands with ``WholePacker`` (the text encoding is redis-py's default, UTF-8)."""
    if not asyncio and WHOLE_PACKER is not None and not {"encoding", "encoding_errors"} & set(redis_kwargs):
        redis_kwargs.setdefault("command_packer", WHOLE_PACKER)
    if not is_sentinel(url):
        client = redis.asyncio.Redis if asyncio else redis.Redis
        return client.from_url(url, **redis_kwargs)
    parsed = SentinelUrl.parse(url)
    if not master_name:
        raise InputError("setting redis.master_name: a sentinel:// redis.url needs the name of the Sentinels' master "
                         "(TTSFARM_REDIS_MASTER_NAME)", code=BAD_OPTION)
    sentinel_kwargs = {k: v for k, v in redis_kwargs.items() if k.startswith("socket_")}
    if sentinel_password:
        sentinel_kwargs["password"] = sentinel_password
    module: Any = redis.asyncio.sentinel if asyncio else redis.sentinel
    group = module.Sentinel(list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs)
    retry = (redis.asyncio.retry if asyncio else redis.retry).Retry(ExponentialBackoff(cap=1.0, base=0.05),
                                                                    SENTINEL_RETRIES)
    return group.master_for(master_name, **{"retry": retry, **parsed.node_kwargs(), **redis_kwargs})


def master_address(client: Any) -> str:
    """``host:port`` of the master a Sentinel client last connected to ('' before its first connection, and for a
    plain server's client). No IO: the connection pool keeps it."""
    address = getattr(client.connection_pool, "master_address", None)
    return f"{address[0]}:{address[1]}" if address else ""


def celery_transport_options(url: str, master_name: str, sentinel_password: str) -> dict[str, Any]:
    """The Sentinel part of Celery's broker (and result backend) transport options: empty for a plain server."""
    if not is_sentinel(url):
        return {}
    options: dict[str, Any] = {"master_name": master_name}
    if sentinel_password:
        options["sentinel_kwargs"] = {"password": sentinel_password}
    return options


def celery_ssl(url: str) -> dict[str, Any] | None:
    """Celery's ``broker_use_ssl`` for a Sentinel URL asking for TLS (None: none, or a plain URL, which says it in
    its own scheme)."""
    if not is_sentinel(url):
        return None
    tls = SentinelUrl.parse(url).tls
    return None if tls is None else dict(tls)


def _safe(part: str) -> str:
    """An address without its password, for an error message."""
    u = urlsplit(part.strip())
    return part.replace(u.password, "***") if u.password else part

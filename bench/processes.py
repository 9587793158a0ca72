"""Local processes for the demo, the benchmarks and the tests: a redis-server, Celery workers, a front end.

Nothing here is needed in production, where Redis and the workers run as services (deploy/).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from wire.broker import run_blocking
from wire.connect import connect_url
from wire.errors import BrokerError

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_reachable(url: str, timeout: float = 0.5, master_name: str = "") -> bool:
    return connect_url(url, master_name=master_name, socket_connect_timeout=timeout, socket_timeout=timeout).reachable()


@dataclass
class RedisServer:
    """A private redis-server on a free port, in its own folder; ``stop`` removes it."""

    port: int = field(default_factory=free_port)
    appendonly: bool = False
    appendfsync: str = "everysec"
    password: str = ""
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ttsfarm-redis-")))
    proc: subprocess.Popen[bytes] | None = None
    extra: tuple[str, ...] = ()  # more redis-server arguments (``--replicaof HOST PORT``)
    sentinel: str = ""  # a Sentinel's configuration: the process runs ``redis-server FILE --sentinel``

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run scripts/setup.sh (apt-get install -y redis-server)")
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", self.appendfsync,
                "--loglevel", "warning", "--repl-diskless-sync-delay", "0", *self.extra]
        if self.sentinel:  # a Sentinel rewrites its file as it learns the group
            conf = self.dir / "sentinel.conf"
            conf.write_text(self.sentinel)
            args = [binary, str(conf), "--sentinel", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                    str(self.dir), "--loglevel", "warning"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not redis_reachable(self.url, 0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def halt(self) -> None:
        """Stop the server but keep its folder (its AOF), so ``start`` brings the same data back."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.dir, ignore_errors=True)

    def signal(self, sig: int) -> None:
        """SIGKILL (a lost machine), SIGSTOP / SIGCONT (a node that stops answering, then answers again)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig == signal.SIGKILL:
                self.proc.wait(10)


@dataclass
class SentinelGroup:
    """A master, a replica and ``sentinels`` Sentinels watching them (quorum 2), each a private redis-server on
    a free port, for the failover tests. Short timeouts, so a failover takes
    about ``down_after_ms`` plus a second or two."""

    name: str = "ttsfarm"
    sentinels: int = 3
    down_after_ms: int = 1000
    failover_timeout_ms: int = 3000
    master: RedisServer = field(default_factory=RedisServer)
    replica: RedisServer = field(default_factory=RedisServer)
    guards: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The farm's ``redis.url`` for this group (``redis.master_name``: ``name``)."""
        return ";".join(f"sentinel://127.0.0.1:{g.port}" for g in self.guards) + "/0"

    @property
    def env(self) -> dict[str, str]:
        return {"TTSFARM_REDIS_URL": self.url, "TTSFARM_REDIS_MASTER_NAME": self.name}

    def start(self, timeout: float = 30.0) -> SentinelGroup:
        self.master.start()
        self.restart_replica(timeout)
        conf = (f"sentinel monitor {self.name} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {self.name} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.name} {self.failover_timeout_ms}\n")
        self.guards = [RedisServer(sentinel=conf).start() for _ in range(self.sentinels)]
        deadline = time.monotonic() + timeout
        while not self._settled():
            if time.monotonic() > deadline:
                raise RuntimeError("the Sentinel group did not settle (replica linked, Sentinels aware of each other)")
            time.sleep(0.1)
        return self

    def _settled(self) -> bool:
        try:
            for g in self.guards:
                state = _ask(g.port, "sentinel_master", self.name)
                if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < len(self.guards) - 1:
                    return False
            return True
        except (BrokerError, OSError):
            return False

    def master_port(self) -> int:
        """The master's port as the first live Sentinel says it."""
        for g in self.guards:
            if g.proc and g.proc.poll() is None:
                try:
                    return int(_ask(g.port, "sentinel_get_master_addr_by_name", self.name)[1])
                except (BrokerError, OSError):
                    continue
        raise RuntimeError("no Sentinel answers")

    def wait_failover(self, old_port: int, timeout: float = 60.0) -> float:
        """Seconds until the Sentinels name a master other than ``old_port``; then ``master`` and ``replica`` are
        swapped (the old master, dead or not, is ``replica`` now)."""
        t0 = time.monotonic()
        while self.master_port() == old_port:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"no failover away from port {old_port} in {timeout} s")
            time.sleep(0.05)
        if self.replica.port != old_port:
            self.master, self.replica = self.replica, self.master
        return time.monotonic() - t0

    def restart_replica(self, timeout: float = 30.0) -> None:
        """Start the replica's process again, as a replica of the current master, and wait until it is linked."""
        self.replica.extra = ("--replicaof", "127.0.0.1", str(self.master.port))
        self.replica.start()
        deadline = time.monotonic() + timeout
        while _ask(self.replica.port, "info", "replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise TimeoutError("the restarted replica did not link to the master")
            time.sleep(0.1)

    def stop(self) -> None:
        for node in (*self.guards, self.master, self.replica):
            node.stop()


def _ask(port: int, command: str, *args: Any) -> Any:
    """One redis-py call to the local server or Sentinel on ``port`` (a Sentinel's own commands: no farm step)."""
    r = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1, decode_responses=True)
    try:
        return getattr(r, command)(*args)
    except redis.RedisError as exc:
        raise BrokerError(f"{command} on port {port}: {exc}") from exc
    finally:
        r.close()


def inherited_env(*prefixes: str) -> dict[str, str]:
    """The variables of this process's environment that start with ``prefixes``: what the processes started here
    inherit of them (a bench records those it ran under)."""
    return {k: v for k, v in os.environ.items() if k.startswith(prefixes)}


def start_front_end(command: list[str], env: Mapping[str, str], ready: Callable[[], bool], log_path: Path,
                    timeout: float = 120.0) -> subprocess.Popen[bytes]:
    """``ttsfarm COMMAND`` (``gateway``, ``grpc``) as a process of its own, as deployed, with this environment's
    variables but for its ``TTSFARM_*`` ones and then ``env``; returned once ``ready()`` says it serves."""
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("TTSFARM_")}, **env}
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "cli", *command], env=full, cwd=root, stdout=log_path.open("wb"),
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{command[0]} did not start: {log_path.read_text()[-2000:]}")
        time.sleep(0.2)
    return proc


def worker_command(name: str, *, loglevel: str = "INFO", extra: list[str] | None = None,
                   app: str = "workers.app") -> list[str]:
    """The plain Celery command that starts one farm worker (``app``: the Celery app module; tests start their
    fault-injected workers with their own)."""
    return [sys.executable, "-m", "celery", "-A", app, "worker", "--pool=solo", "-E",
            "--without-mingle", "--without-gossip", f"--hostname={name}", f"--loglevel={loglevel}", *(extra or [])]


@dataclass
class WorkerProcess:
    """One ``celery -A workers.app worker`` process with the given ``TTSFARM_*`` environment."""

    name: str
    env: Mapping[str, str]
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    app: str = "workers.app"

    def start(self) -> WorkerProcess:
        env = {**os.environ, **self.env}
        env.setdefault("PYTHONUNBUFFERED", "1")
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        root = Path(__file__).resolve().parent.parent
        self.proc = subprocess.Popen(worker_command(self.name, app=self.app), env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root)
        return self

    def wait_ready(self, url: str, prefix: str = "ttsfarm", timeout: float = 120.0, master_name: str = "") -> None:
        """Until this worker's heartbeat says it serves (voices loaded and warmed up)."""
        broker = connect_url(url, key_prefix=prefix, master_name=master_name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited with {self.proc.returncode}")
            for name, info in run_blocking(broker, broker.read_heartbeats()).items():
                if name.startswith(self.name + ":") and info.get("pid") == self.proc.pid:  # type: ignore[union-attr]
                    if info["state"] == "serving":
                        return
                    if info["state"] == "failed":
                        raise RuntimeError(f"worker {self.name} failed: {info.get('error')}")
            time.sleep(0.1)
        raise TimeoutError(f"worker {self.name} not serving after {timeout} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

"""Local processes for the demo, the benchmarks and the tests: a redis-server and Celery workers.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from producer.wire.broker import run_blocking
from producer.wire.keys import Keys
from producer.wire.redis_broker import RedisBroker

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_reachable(url: str, timeout: float = 0.5) -> bool:
    return RedisBroker.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout).reachable()


@dataclass
class RedisServer:
    """A private redis-server on a free port, in its own folder; ``stop`` removes it."""

    port: int = field(default_factory=free_port)
    appendonly: bool = False
    appendfsync: str = "everysec"
    password: str = ""
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ttsfarm-redis-")))
    proc: subprocess.Popen[bytes] | None = None

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
                "--loglevel", "warning"]
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

    def wait_ready(self, url: str, prefix: str = "ttsfarm", timeout: float = 120.0) -> None:
        """Until this worker's heartbeat says it serves (voices loaded and warmed up)."""
        broker = RedisBroker.from_url(url, keys=Keys(prefix))
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

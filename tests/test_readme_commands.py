"""Every shell command the README shows (its ```bash blocks), and those of the docs pages it links for the rest
(``tests.readme_blocks.COMMAND_PAGES``: docs/USAGE.md, docs/DEPLOY.md), works as written.

Each command has a check by its kind (the program and subcommand): it is run (offline commands, the farm's
commands against a real worker the README's own worker command started), or started and seen ready, then
stopped (workers, Flower, the gateway, ``status --watch``). A few are parsed only, each with its reason
(``quantize`` takes minutes of CPU; ``book --out s3://`` needs a bucket); Docker and kubectl commands are
skipped here (tests/test_deploy.py validates their files). A README command of a kind without a check fails
``test_every_readme_command_has_a_check``, and every ``ttsfarm`` and ``celery worker`` command's flags go
through the real parsers, so an unknown flag fails even where the command is not run.

Rewrites, all of them: the fixed ports (8000, 5555, 9108, 50051) become free ones, Flower's ``/data/flower.db`` a
file in a temp folder, and ``$ID`` is the id the README's job request answered. Commands run with bash in a
temp folder that links ``.venv`` to the repository's, with ``TTSFARM_*`` pointing at a test Redis.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import redis
import soundfile as sf

from cli import parse_args
from bench.processes import free_port
from tests.readme_blocks import SHARD_PORTS, kind, readme_commands, words
from tests.test_make_recipes import make_dry_run

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


# kind -> the test that runs it, or why it is only parsed or skipped here
CHECKS = {
    "make demo": "test_make_demo",
    "make test": "tests/test_make_recipes.py",
    "ttsfarm say": "test_offline_commands",
    "ttsfarm phonemize": "test_offline_commands",
    "ttsfarm --version": "test_offline_commands",
    "ttsfarm doctor": "test_offline_commands",
    "celery worker": "test_workers_start",
    "ttsfarm worker": "test_workers_start",
    "celery worker metered": "metrics_worker (fixture)",
    "curl metrics": "test_metrics_and_farm_commands",
    "ttsfarm submit": "test_metrics_and_farm_commands",
    "ttsfarm status": "test_metrics_and_farm_commands",
    "ttsfarm voices": "test_metrics_and_farm_commands",
    "celery flower": "test_flower_starts",
    "ttsfarm gateway": "test_gateway_and_its_curl_commands",
    "ttsfarm grpc": "test_grpc_serves_the_riva_client",
    "curl gateway": "test_gateway_and_its_curl_commands",
    "sentinel": "test_sentinel_commands",
    "shards": "test_shard_commands",
}
PARSED_ONLY = {
    "ttsfarm quantize": "minutes of CPU per run; tests/test_quantize.py runs it",
    "ttsfarm book": "--out s3:// needs a bucket; tests/test_book*.py make books end to end",
}
INSTALLS = {  # not run into the test's own environment; the same install is made in a fresh virtualenv there
    "pip": "tests/test_packaging.py::test_the_wheel_alone_says_english_and_chinese installs the wheel and runs it",
}
SKIPPED = {
    "docker": "needs a Docker engine; tests/test_deploy.py validates the compose file and Dockerfiles",
    "kubectl": "needs a Kubernetes cluster; tests/test_deploy.py validates the manifests",
    "cp": "prepares deploy/.env for docker compose (skipped with it); the source file is checked",
}


def of_kind(*kinds: str) -> list[str]:
    return [c for c in readme_commands() if kind(c) in kinds]


# -- every command: a check, and flags the real parsers accept ---------------------------------------
def test_every_readme_command_has_a_check() -> None:
    cmds = readme_commands()
    assert len(cmds) >= 20
    unknown = [c for c in cmds if kind(c) not in CHECKS | PARSED_ONLY | SKIPPED | INSTALLS]
    assert not unknown, f"README commands without a check in tests/test_readme_commands.py: {unknown}"
    for cmd in cmds:
        for word in words(cmd):
            if word.startswith("deploy/") and kind(cmd) in SKIPPED:
                assert (ROOT / word).exists() or word == "deploy/.env", (cmd, word)


def check_flags(cmd: str) -> None:
    """Raise (SystemExit, AssertionError) when a parser refuses the command's arguments."""
    toks = words(cmd)
    prog = Path(toks[0]).name
    if prog == "ttsfarm":
        try:
            args = parse_args(toks[1:])
        except SystemExit as exc:  # --version and --help print and exit 0
            assert exc.code == 0, cmd
            return
        if args.cmd == "gateway":
            from gateway.app import build_parser

            build_parser().parse_args(args.passed)
        elif args.cmd == "grpc":
            from grpcfront.server import build_parser as build_grpc_parser

            build_grpc_parser().parse_args(args.passed)
        elif args.cmd == "worker":
            celery_help(args.passed)
    elif prog == "celery" and kind(cmd).startswith("celery worker"):
        celery_help(toks[toks.index("worker") + 1:])


def celery_help(worker_args: list[str]) -> None:
    """`celery worker ARGS --help`: click refuses an unknown option before it prints the help."""
    done = subprocess.run([str(VENV_BIN / "celery"), "-A", "workers.app", "worker", *worker_args, "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("cmd", [c for c in readme_commands() if Path(words(c)[0]).name == "ttsfarm"
                                 or kind(c).startswith("celery worker")])
def test_flags_parse(cmd: str) -> None:
    check_flags(cmd)


@pytest.mark.parametrize("bad", [".venv/bin/ttsfarm gateway --prot 8000", ".venv/bin/ttsfarm say hi -o x.wav --rte 8000",
                                 ".venv/bin/ttsfarm status --wach", ".venv/bin/celery -A workers.app worker --pool=solo --hostnme=w1"])
def test_an_unknown_flag_fails_the_check(bad: str) -> None:
    with pytest.raises((SystemExit, AssertionError)):
        check_flags(bad)


def test_the_extraction_reads_blocks_continuations_and_comments() -> None:
    text = "x\n```bash\nA=1 .venv/bin/celery -A workers.app flower --port=5555 \\\n    --db=/d  # note\n```\n" \
           "```python\nnot = 'a command'\n```\n```bash\nmake demo   # set up\n```\n"
    assert readme_commands(text) == ["A=1 .venv/bin/celery -A workers.app flower --port=5555      --db=/d", "make demo"]
    assert [kind(c) for c in readme_commands(text)] == ["celery flower", "make demo"]


# -- running them ------------------------------------------------------------------------------------
@dataclass
class Shell:
    """Runs README commands as written (bash, in ``work``), with the rewrites the module docstring lists."""

    work: Path
    env: dict[str, str]
    ports: dict[str, int]

    def text(self, cmd: str) -> str:
        for fixed, port in self.ports.items():
            cmd = re.sub(rf"\b{fixed}\b", str(port), cmd)
        return cmd.replace("/data/flower.db", str(self.work / "flower.db"))

    def run(self, cmd: str, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["bash", "-c", self.text(cmd)], cwd=self.work, env={**self.env, **extra},
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{cmd}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    def start(self, cmd: str, log: str) -> subprocess.Popen[bytes]:
        out = open(self.work / log, "wb")
        return subprocess.Popen(["bash", "-c", self.text(cmd)], cwd=self.work, env=self.env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def log(self, name: str, tail: int = 3000) -> str:
        return (self.work / name).read_text(errors="replace")[-tail:]


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 60) -> int:
    """Signal the process group this test started, and wait."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


def wait_for(what: str, ready: object, proc: subprocess.Popen[bytes], shell: Shell, log: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{what} exited with {proc.returncode}:\n{shell.log(log)}"
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not ready after {timeout} s:\n{shell.log(log)}")


def shut_down(ports: Iterable[int]) -> None:
    """The daemonized redis-servers (or Sentinels) a test started, by their ports."""
    for port in ports:
        try:
            redis.Redis(port=port, socket_timeout=2).shutdown(nosave=True)
        except (redis.RedisError, OSError):
            pass


def heartbeat(r: redis.Redis, prefix: str, name: str, states: tuple[str, ...]) -> bool:
    beats = r.hgetall(f"{prefix}:workers")
    return any(k.decode().startswith(name) and json.loads(v).get("state") in states for k, v in beats.items())


def http(url: str, auth: str = "") -> int:
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def audio_ok(path: Path, rate: int | None = None) -> None:
    data, sr = sf.read(path)
    assert rate is None or sr == rate, (path, sr)
    assert len(data) / sr > 0.3 and float(np.abs(data).max()) > 0.05, path


@pytest.fixture(scope="module")
def shell(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Shell:
    work = tmp_path_factory.mktemp("readme")
    (work / ".venv").symlink_to(VENV_BIN.parent)
    prefix = f"readme{os.getpid()}"
    cache = os.environ.get("TTSFARM_TEST_CACHE") or str(Path.home() / ".cache" / "ttsfarm")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTSFARM_")}
    env.update(TTSFARM_REDIS_URL=redis_url, TTSFARM_REDIS_KEY_PREFIX=prefix, TTSFARM_RUNTIME_MODEL_CACHE_DIR=cache,
               TTSFARM_STORAGE_LOCAL_DIR=str(work / "storage"), PYTHONUNBUFFERED="1",
               PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}")  # commands without .venv/bin/: an activated venv
    return Shell(work, env, {"8000": free_port(), "5555": free_port(), "9108": free_port(), "50051": free_port()})


@pytest.mark.slow
def test_offline_commands(shell: Shell) -> None:
    for cmd in of_kind("ttsfarm say", "ttsfarm phonemize", "ttsfarm --version", "ttsfarm doctor"):
        done = shell.run(cmd)
        toks = words(cmd)
        if kind(cmd) == "ttsfarm --version":
            assert re.fullmatch(r"ttsfarm \S+\n", done.stdout), done.stdout
        elif kind(cmd) == "ttsfarm doctor":
            assert "a session gets:" in done.stdout and done.stdout.rstrip().endswith("OK")
        elif "-o" in toks:
            rate = int(toks[toks.index("--rate") + 1]) if "--rate" in toks else None
            audio_ok(shell.work / toks[toks.index("-o") + 1], rate)
        else:
            assert "tokens:" in done.stdout and "yin2 hang2" in done.stdout


@pytest.mark.slow
def test_make_demo(shell: Shell) -> None:
    """``make demo`` is setup (run by every session that runs this) and ``ttsfarm -v demo``, which runs here with
    its output in the temp folder."""
    (cmd,) = of_kind("make demo")
    recipe = make_dry_run(cmd)[-1]
    assert recipe == ".venv/bin/ttsfarm -v demo", recipe
    out = shell.run(f"{recipe} -o demo/demo.wav", timeout=600)
    assert "time to first chunk" in out.stdout
    audio_ok(shell.work / "demo" / "demo.wav", 24000)


@pytest.mark.slow
def test_workers_start(shell: Shell) -> None:
    r = redis.Redis.from_url(shell.env["TTSFARM_REDIS_URL"])
    for i, cmd in enumerate(of_kind("celery worker", "ttsfarm worker")):
        toks = words(cmd)
        name = next(t.split("=", 1)[1] for t in toks if t.startswith("--hostname=")) if "--name" not in toks \
            else toks[toks.index("--name") + 1]
        name = name.split("%h")[0]
        proc = shell.start(cmd, f"worker{i}.log")
        try:
            wait_for(cmd, lambda: heartbeat(r, shell.env["TTSFARM_REDIS_KEY_PREFIX"], name, ("loading", "serving")),
                     proc, shell, f"worker{i}.log")
        finally:
            assert stop(proc) == 0, shell.log(f"worker{i}.log")  # SIGTERM: Celery's warm shutdown


@pytest.fixture(scope="module")
def metrics_worker(shell: Shell) -> Iterator[subprocess.Popen[bytes]]:
    """The README's metrics worker command, serving (voices loaded and warm) for the farm commands."""
    (cmd,) = of_kind("celery worker metered")
    r = redis.Redis.from_url(shell.env["TTSFARM_REDIS_URL"])
    proc = shell.start(cmd, "farm.log")
    try:
        wait_for("the metrics worker", lambda: heartbeat(r, shell.env["TTSFARM_REDIS_KEY_PREFIX"], "w1@", ("serving",)),
                 proc, shell, "farm.log", timeout=300)
        yield proc
    finally:
        stop(proc)


@pytest.mark.slow
def test_metrics_and_farm_commands(shell: Shell, metrics_worker: subprocess.Popen[bytes]) -> None:
    for cmd in readme_commands():
        k = kind(cmd)
        if k == "curl metrics":
            out = shell.run(cmd).stdout
            assert "ttsfarm_voice_version" in out and "ttsfarm_voice_info" in out
        elif k == "ttsfarm submit":
            done = shell.run(cmd)
            assert "first chunk after" in done.stderr
            toks = words(cmd)
            audio_ok(shell.work / toks[toks.index("-o") + 1], 24000)
            if "--captions" in toks:
                captions = (shell.work / toks[toks.index("--captions") + 1]).read_text(encoding="utf-8")
                assert captions.startswith("WEBVTT\n") and " --> " in captions, captions
        elif k == "ttsfarm status" and "--watch" in cmd:
            proc = shell.start(cmd, "watch.log")
            try:
                wait_for(cmd, lambda: shell.log("watch.log", 0).count("ttsfarm status ") >= 2, proc, shell, "watch.log", 30)
            finally:
                assert stop(proc, signal.SIGINT) in (0, 130)
        elif k == "ttsfarm status":
            out = shell.run(cmd).stdout
            assert "WORKERS" in out and "w1@" in out and "served: " in out
        elif k == "ttsfarm voices":
            out = shell.run(cmd, timeout=400).stdout
            action = words(cmd)[2] if len(words(cmd)) > 2 else "list"
            if action == "reload":
                assert "reloaded in" in out, out
            elif action == "prepare":
                assert "prepared" in out, out  # idempotent: the set-up already prepared every voice
            else:
                assert "joe" in out, out


@pytest.mark.slow
def test_gateway_and_its_curl_commands(shell: Shell, metrics_worker: subprocess.Popen[bytes]) -> None:
    (cmd,) = of_kind("ttsfarm gateway")
    port = shell.ports["8000"]
    proc = shell.start(cmd, "gateway.log")
    try:
        wait_for(cmd, lambda: http(f"http://127.0.0.1:{port}/") == 200, proc, shell, "gateway.log", 60)
        env: dict[str, str] = {}
        for curl in of_kind("curl gateway"):
            done = shell.run(curl, timeout=300, **env)
            if "-d" in words(curl):
                env["ID"] = json.loads(done.stdout)["id"]
            elif "/events" in curl:
                assert "event: chunk" in done.stdout and "event: done" in done.stdout
            elif "-o" in words(curl):
                audio_ok(shell.work / words(curl)[words(curl).index("-o") + 1], 24000)
        assert "ID" in env
    finally:
        stop(proc)


@pytest.mark.slow
def test_grpc_serves_the_riva_client(shell: Shell, metrics_worker: subprocess.Popen[bytes]) -> None:
    import grpc
    import riva.client
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    (cmd,) = of_kind("ttsfarm grpc")
    target = f"127.0.0.1:{shell.ports['50051']}"
    proc = shell.start(cmd, "grpc.log")

    def serving() -> bool:
        try:
            reply = health_pb2_grpc.HealthStub(grpc.insecure_channel(target)).Check(health_pb2.HealthCheckRequest(),
                                                                                    timeout=2)
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    try:
        wait_for(cmd, serving, proc, shell, "grpc.log", 60)
        tts = riva.client.SpeechSynthesisService(riva.client.Auth(uri=target))
        whole = tts.synthesize("Hello from the farm.", voice_name="English-US.Male-1", sample_rate_hz=22050)
        assert len(whole.audio) / 2 / 22050 > 0.5
    finally:
        stop(proc)


@pytest.mark.slow
def test_flower_starts(shell: Shell) -> None:
    (cmd,) = of_kind("celery flower")
    port = shell.ports["5555"]
    user = re.search(r"FLOWER_BASIC_AUTH=(\S+)", cmd)
    proc = shell.start(cmd, "flower.log")
    try:
        wait_for(cmd, lambda: http(f"http://127.0.0.1:{port}/") != 0, proc, shell, "flower.log", 60)
        assert http(f"http://127.0.0.1:{port}/") == 401
        assert user and http(f"http://127.0.0.1:{port}/", auth=user.group(1)) == 200
    finally:
        stop(proc)
    assert (shell.work / "flower.db").exists() or list(shell.work.glob("flower.db*"))


@pytest.mark.slow
def test_sentinel_commands(shell: Shell) -> None:
    """The Sentinel block in order, on free ports: the group, a worker on it, a submit, the master shut down, a
    submit through the new master, and ``ttsfarm status`` showing the failover the worker followed."""
    ports = {p: free_port() for p in ("6380", "6381", "26380", "26381", "26382")}
    work = shell.work / "sentinel"
    work.mkdir()
    sh = Shell(work, shell.env, ports)
    (work / ".venv").symlink_to(VENV_BIN.parent)
    prefix = shell.env["TTSFARM_REDIS_KEY_PREFIX"]
    master = redis.Redis(port=ports["6380"])
    worker = None

    def sentinel_master() -> int:
        return int(redis.Redis(port=ports["26380"]).sentinel_get_master_addr_by_name("ttsfarm")[1])

    try:
        for cmd in of_kind("sentinel"):
            prog = Path(words(cmd)[0]).name
            if prog == "celery":
                worker = sh.start(cmd, "worker.log")
                wait_for(cmd, lambda: heartbeat(master, prefix, "s1@", ("serving",)), worker, sh, "worker.log", 300)
            elif prog == "redis-cli":
                sh.run(cmd)
                deadline = time.monotonic() + 60
                while sentinel_master() != ports["6381"]:
                    assert time.monotonic() < deadline, "no failover"
                    time.sleep(0.1)
            elif "submit" in words(cmd):
                assert "first chunk after" in sh.run(cmd).stderr
                toks = words(cmd)
                audio_ok(work / toks[toks.index("-o") + 1], 24000)
            elif "status" in words(cmd):
                deadline = time.monotonic() + 20
                while "failovers followed by workers 1" not in (out := sh.run(cmd).stdout):
                    assert time.monotonic() < deadline, out
                    time.sleep(0.5)
                assert f"master 127.0.0.1:{ports['6381']}" in out and "3/3 sentinels answer" in out, out
                assert f"redis master 127.0.0.1:{ports['6381']}, failovers followed 1" in out, out
            else:
                sh.run(cmd)
        assert worker is not None
    finally:
        if worker is not None:
            stop(worker)
        shut_down(ports.values())


@pytest.mark.slow
def test_shard_commands(shell: Shell) -> None:
    """The shards block in order, on free ports, shard 0 being the test Redis: two more nodes, a worker on all
    three, a submit, and ``ttsfarm status`` listing the three shards."""
    ports = {p: free_port() for p in SHARD_PORTS}
    work = shell.work / "shards"
    work.mkdir()
    prefix = shell.env["TTSFARM_REDIS_KEY_PREFIX"] + "sh"  # no other README worker reads these jobs
    sh = Shell(work, {**shell.env, "TTSFARM_REDIS_KEY_PREFIX": prefix}, ports)
    (work / ".venv").symlink_to(VENV_BIN.parent)
    first = redis.Redis.from_url(shell.env["TTSFARM_REDIS_URL"])
    worker = None
    try:
        for cmd in of_kind("shards"):
            toks = words(cmd)
            if Path(toks[0]).name == "celery":
                worker = sh.start(cmd, "worker.log")
                wait_for(cmd, lambda: heartbeat(first, prefix, "sh1@", ("serving",)), worker, sh, "worker.log", 300)
            elif "submit" in toks:
                assert "first chunk after" in sh.run(cmd).stderr
                audio_ok(work / toks[toks.index("-o") + 1], 24000)
            elif "status" in toks:
                out = sh.run(cmd).stdout
                addresses = [first.connection_pool.connection_kwargs["port"], *ports.values()]
                assert "shards 3: " + ", ".join(f"127.0.0.1:{p}" for p in addresses) in out, out
            else:
                sh.run(cmd)
        assert worker is not None
        assert sum(redis.Redis(port=p).exists(f"{prefix}:workers") for p in ports.values()) == 0  # heartbeats on shard 0
    finally:
        if worker is not None:
            stop(worker)
        shut_down(ports.values())

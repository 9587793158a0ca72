"""First audio and throughput over gRPC (Riva's protocol) beside the HTTP gateway and the SDK, on the same load.

    ttsfarm bench grpc [--concurrency 2] [--duration-s 20] [--rounds 2] [--piece-ms 30] [--out bench-results/grpc]

One farm of our own (``bench.local.LocalFarm``: a redis-server and one worker with the defaults), the HTTP gateway
and the gRPC front end each in its own process (``ttsfarm gateway``, ``ttsfarm grpc``), as deployed. Then, in
rounds (the paths' order reversed every other round, against drift), each path runs a closed loop of
``--concurrency`` clients for ``--duration-s`` seconds over the same sequence of texts:

* whole texts (the bench's ``en_short`` sentences): ``sdk`` (``Client.submit`` + ``Job.stream``, PCM), ``http``
  (``POST /v1/audio/speech``, ``response_format=pcm``, read as it streams), ``grpc`` (``SynthesizeOnline`` of one
  message through nvidia-riva-client). First audio: from the call's start to the first audio bytes in the client.
* text in pieces (the bench's paragraphs, a word every ``--piece-ms`` as an LLM writes): ``grpc pieces``
  (``SynthesizeOnline``, one message per word) and ``sdk pieces`` (``Client.open``, ``append`` per word). First audio:
  from the moment the first sentence's last word was sent to the first audio bytes.

Throughput: audio seconds received per wall second over the path's run. Prints Markdown tables; writes
``<out>/grpc.json``. The machine may be shared: the last column is the 1-minute load average at the end of each
run (the farm's own work included; 2 cores). The gRPC and HTTP clients (the ``grpc`` and ``gateway`` extras) are
imported when the stage runs, not when its options are read.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.load import PARAGRAPHS_EN, SHORT_EN
from bench.local import LocalFarm, worker_env
from bench.processes import free_port, start_front_end
from producer.client import Client
from wire.settings import load_settings

RATE = 22050  # joe's own rate: no resampling on any path
Sample = tuple[float, float]  # (first audio s, audio s received)


def grpc_serving(target: str) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        reply = health_pb2_grpc.HealthStub(grpc.insecure_channel(target)).Check(health_pb2.HealthCheckRequest(), timeout=2)
    except grpc.RpcError:
        return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def http_ready(url: str) -> bool:
    import httpx

    try:
        return bool(httpx.get(f"{url}/healthz", timeout=2).json().get("workers"))
    except (httpx.HTTPError, ValueError):
        return False


def pieces_of(text: str) -> tuple[list[str], int]:
    """Word pieces (each with its space) and the index of the piece that ends the first sentence."""
    words = [w + " " for w in text.split(" ")]
    end = next(i for i, w in enumerate(words) if w.rstrip().endswith((".", "!", "?")))
    return words, end


class Paths:
    def __init__(self, settings: Any, http_url: str, grpc_target: str, piece_s: float) -> None:
        import httpx
        import riva.client

        self.client = Client.from_url(settings=settings)
        self.http = httpx.Client(base_url=http_url, timeout=120)
        self.tts = riva.client.SpeechSynthesisService(riva.client.Auth(uri=grpc_target))
        self.piece_s = piece_s

    def sdk(self, text: str) -> Sample:
        start, first, n = time.monotonic(), 0.0, 0
        for chunk in self.client.submit(text, voice="joe", format="pcm").stream(timeout=120):
            first = first or time.monotonic() - start
            n += len(chunk.pcm)
        return first, n / 2 / RATE

    def http_(self, text: str) -> Sample:
        start, first, n = time.monotonic(), 0.0, 0
        body = {"model": "tts-1", "voice": "joe", "input": text, "response_format": "pcm", "sample_rate": RATE}
        with self.http.stream("POST", "/v1/audio/speech", json=body) as r:
            r.raise_for_status()
            for data in r.iter_bytes():
                first = first or time.monotonic() - start
                n += len(data)
        return first, n / 2 / RATE

    def grpc_(self, text: str) -> Sample:
        start, first, n = time.monotonic(), 0.0, 0
        for response in self.tts.synthesize_online(text, voice_name="joe", language_code="en-US", sample_rate_hz=RATE):
            first = first or time.monotonic() - start
            n += len(response.audio)
        return first, n / 2 / RATE

    def grpc_pieces(self, text: str) -> Sample:
        words, end = pieces_of(text)
        sent = [0.0]
        outer = self

        class Paced(list):  # type: ignore[type-arg]  # synthesize_online takes a list; this one is written as it goes
            def __iter__(self) -> Iterator[str]:
                for i, word in enumerate(words):
                    time.sleep(outer.piece_s)
                    if i == end:
                        sent[0] = time.monotonic()
                    yield word

        first, n = 0.0, 0
        for response in self.tts.synthesize_online(Paced(words), voice_name="joe", language_code="en-US",
                                                   sample_rate_hz=RATE):
            first = first or time.monotonic() - sent[0]
            n += len(response.audio)
        return first, n / 2 / RATE

    def sdk_pieces(self, text: str) -> Sample:
        words, end = pieces_of(text)
        job = self.client.open(voice="joe", format="pcm")
        got: dict[str, float] = {}

        def read() -> None:
            n = 0
            for chunk in self.client.job(job.id).stream(timeout=120):
                got.setdefault("first", time.monotonic())
                n += len(chunk.pcm)
            got["n"] = n

        reader = threading.Thread(target=read)
        reader.start()
        for i, word in enumerate(words):
            time.sleep(self.piece_s)
            job.append(word)
            if i == end:
                got["sent"] = time.monotonic()
        job.close()
        reader.join(120)
        return got["first"] - got["sent"], got["n"] / 2 / RATE


def closed_loop(fn: Callable[[str], Sample], texts: list[str], concurrency: int, duration_s: float) -> dict[str, Any]:
    source = itertools.cycle(texts)
    lock = threading.Lock()
    samples: list[Sample] = []
    errors: list[str] = []
    stop_at = time.monotonic() + duration_s

    def client() -> None:
        while time.monotonic() < stop_at:
            with lock:
                text = next(source)
            try:
                sample = fn(text)
            except Exception as exc:  # counted and reported: a bench measures, it does not stop at one failure
                errors.append(repr(exc)[:200])
                continue
            with lock:
                samples.append(sample)

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    firsts = sorted(s[0] for s in samples)
    pct = (lambda q: round(firsts[min(len(firsts) - 1, int(q * len(firsts)))] * 1000)) if firsts else (lambda q: None)
    return {"calls": len(samples), "errors": len(errors), "error_sample": errors[:3], "wall_s": round(wall, 1),
            "first_ms_p50": round(statistics.median(firsts) * 1000) if firsts else None, "first_ms_p95": pct(0.95),
            "audio_s": round(sum(s[1] for s in samples), 1),
            "throughput_x": round(sum(s[1] for s in samples) / wall, 2), "load_1min": round(os.getloadavg()[0], 1)}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--piece-ms", type=float, default=30.0, help="one word every this many ms (an LLM's pace)")
    ap.add_argument("--out", default="bench-results/grpc")


def main(args: argparse.Namespace) -> int:
    farm = LocalFarm(workers=1, env=worker_env()).start()
    http_port, grpc_port = free_port(), free_port()
    procs = []
    try:
        procs.append(start_front_end(["gateway", "--port", str(http_port), "--log-level", "warning"], farm.env,
                                     lambda: http_ready(f"http://127.0.0.1:{http_port}"), farm.root / "gateway.log"))
        procs.append(start_front_end(["grpc", "--port", str(grpc_port), "--log-level", "warning"], farm.env,
                                     lambda: grpc_serving(f"127.0.0.1:{grpc_port}"), farm.root / "grpc.log"))
        paths = Paths(load_settings(env=farm.env), f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}",
                      args.piece_ms / 1000)
        runs: dict[str, list[dict[str, Any]]] = {}
        whole = [("sdk", paths.sdk), ("http", paths.http_), ("grpc", paths.grpc_)]
        pieces = [("grpc pieces", paths.grpc_pieces), ("sdk pieces", paths.sdk_pieces)]
        for fn in (paths.sdk, paths.http_, paths.grpc_, paths.grpc_pieces, paths.sdk_pieces):  # warm every path once
            fn(PARAGRAPHS_EN[0] if "pieces" in fn.__name__ else SHORT_EN[0])
        for r in range(args.rounds):
            for name, fn in (whole if r % 2 == 0 else whole[::-1]):
                runs.setdefault(name, []).append(closed_loop(fn, list(SHORT_EN), args.concurrency, args.duration_s))
                print(name, runs[name][-1], flush=True)
            for name, fn in (pieces if r % 2 == 0 else pieces[::-1]):
                runs.setdefault(name, []).append(closed_loop(fn, list(PARAGRAPHS_EN), args.concurrency, args.duration_s))
                print(name, runs[name][-1], flush=True)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
        farm.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"args": vars(args), "runs": runs}
    (out / "grpc.json").write_text(json.dumps(doc, indent=2))
    print(report(doc))
    return 0


def report(doc: dict[str, Any]) -> str:
    lines = ["| path | round | calls | errors | first audio P50 | P95 | throughput (audio s / s) | load (1 min) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in doc["runs"].items():
        for i, row in enumerate(rows):
            lines.append(f"| {name} | {i + 1} | {row['calls']} | {row['errors']} | {row['first_ms_p50']} ms | "
                         f"{row['first_ms_p95']} ms | {row['throughput_x']} | {row['load_1min']} |")
    return "\n".join(lines)

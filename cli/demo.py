"""`ttsfarm demo`: the whole farm on this machine, end to end, in one command.

Starts Redis if none answers, starts one worker with the plain Celery command, submits mixed Chinese
and English text, writes the audio to a WAV file while it streams, and says where the full output was
stored.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.common import settings_of

if TYPE_CHECKING:
    from wire.settings import Settings

DEMO_TEXT = (
    "今天天气很好，我们去公园散步吧。Hello from the farm. "
    "This voice runs in a batching worker, and the audio streams back while the rest is still being made. "
    "我们一边合成，一边播放。"
)


def add_commands(sub: Any) -> None:
    p = sub.add_parser("demo", help="start Redis if needed and a worker, submit mixed text, stream it to a WAV")
    p.add_argument("-o", "--output", default="out/demo.wav")
    p.add_argument("--text", default=None)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(settings_of(args), output=args.output, text=args.text)


def run_demo(settings: Settings, *, output: str, text: str | None = None) -> int:
    import soundfile as sf

    from producer.client import Client
    from bench.processes import RedisServer, WorkerProcess, redis_reachable

    server = None
    url = settings.redis.url
    if not redis_reachable(url):
        server = RedisServer().start()
        url = server.url
        settings = settings.replace(redis={"url": url})
        print(f"no Redis at {settings.redis.url}; started a private redis-server at {url}")
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {"TTSFARM_REDIS_URL": url, "TTSFARM_REDIS_KEY_PREFIX": settings.redis.key_prefix}
    worker = WorkerProcess("demo@ttsfarm", env, log_path=out.with_suffix(".worker.log")).start()
    try:
        t0 = time.perf_counter()
        worker.wait_ready(url, settings.redis.key_prefix, timeout=300)
        print(f"worker ready (voices loaded and warmed up) in {time.perf_counter() - t0:.1f} s; "
              f"log: {out.with_suffix('.worker.log')}")
        client = Client.from_url(settings=settings)
        start = time.perf_counter()
        job = client.submit(text or DEMO_TEXT, format="wav")
        print(f"submitted job {job.id}: {job.total} segments")
        first = None
        with sf.SoundFile(out, "w", samplerate=settings.catalogue.voices[settings.catalogue.default_voice].sample_rate,
                          channels=1, subtype="PCM_16") as f:
            import numpy as np

            seg0: list[float] = []  # when each chunk of the first segment came, to show it streaming
            for chunk in job.stream(timeout=600):
                now = time.perf_counter() - start
                if first is None:
                    first = now
                    print(f"time to first chunk: {first * 1000:.0f} ms "
                          f"({len(chunk.pcm) / 2 / chunk.sample_rate:.2f} s of audio)")
                if chunk.seg == 0:
                    seg0.append(now)
                f.write(np.frombuffer(chunk.pcm, dtype="<i2"))
        if seg0:
            how = ("streamed: its first window played while the rest was vocoded" if seg0[-1] - seg0[0] > 0.005
                   else "published whole")
            print(f"segment 0 came in {len(seg0)} chunks: the first after {seg0[0] * 1000:.0f} ms, the last after "
                  f"{seg0[-1] * 1000:.0f} ms ({how})")
        result = job.wait(timeout=60)
        total = time.perf_counter() - start
        print(f"wrote {out} ({result.duration_s:.2f} s of audio) in {total:.2f} s: "
              f"{result.duration_s / total:.1f} x real time, first chunk after {(first or 0) * 1000:.0f} ms")
        print(f"full output stored at {result.url}")
        return 0
    finally:
        worker.stop()
        if server is not None:
            server.stop()

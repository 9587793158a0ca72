"""What storing a finished job costs the worker's CPU: its audio and its words (the two objects
``Publisher.store_and_finish`` writes), per backend, measured in this process (``time.process_time``: every thread of
it, so boto3's transfer threads count) against a private ``moto`` S3 server in another process.

    python -m bench.lab storage [--jobs 300] [--audio-s 3.0]

Why (docs/lab/storage.md): the host-path proxy (``ttsfarm bench host``) stores into a local folder, but a
deployment stores into S3, on the same process as the loops (the finisher thread) unless
``queue.finisher_processes`` moves it out. The S3 server is ``bench.local.MotoServer``.

Rows: the local folder (fsync and rename per object); S3 through boto3's transfer manager for every object (what
``S3Storage.put`` is compared against); ``S3Storage.put`` itself (one PUT below the multipart threshold).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time
from collections.abc import Callable

from bench.local import MotoServer
from wire.settings import StorageSettings
from wire.storage import LocalStorage
from wire.storage.s3 import S3Storage


def job_objects(audio_s: float, rate: int = 22050) -> tuple[bytes, bytes]:
    """A job's WAV (PCM16 mono, its header) and its words JSON, of the sizes a job of ``audio_s`` seconds makes."""
    from pipeline.audio import encode_pcm16

    pcm = os.urandom(2 * int(audio_s * rate))
    words = [{"text": f"word{i}", "start_s": i * 0.3, "end_s": i * 0.3 + 0.25, "char_start": 6 * i, "char_end": 6 * i + 5}
             for i in range(int(audio_s / 0.3))]
    return encode_pcm16(pcm, rate, "wav"), json.dumps(words).encode()


def measure(store: Callable[[str, bytes, str], object], audio: bytes, words: bytes, jobs: int) -> tuple[float, float]:
    """CPU and wall milliseconds per job (two objects), after a warm-up of 10 jobs."""
    for i in range(10):
        store(f"warm-{i}/audio.wav", audio, "audio/wav")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(jobs):
        store(f"job-{i}/audio.wav", audio, "audio/wav")
        store(f"job-{i}/words.json", words, "application/json")
    return 1000 * (time.process_time() - cpu0) / jobs, 1000 * (time.perf_counter() - wall0) / jobs


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--audio-s", type=float, default=3.0, help="seconds of audio per job (22.05 kHz WAV)")


def main(args: argparse.Namespace) -> int:
    audio, words = job_objects(args.audio_s)
    moto = MotoServer().start()
    os.environ.update({k: v for k, v in moto.env().items() if k.startswith("AWS_")})  # boto3's credentials chain
    try:
        s3 = S3Storage(StorageSettings(backend="s3", s3_bucket=moto.bucket, s3_endpoint_url=moto.url, s3_region="us-east-1"))

        def transfer_manager(key: str, data: bytes, content_type: str) -> None:  # every object, whatever its size
            s3.client.upload_fileobj(io.BytesIO(data), s3.bucket, s3.object_key(key), ExtraArgs={"ContentType": content_type},
                                     Config=s3.transfer_config)

        with tempfile.TemporaryDirectory(prefix="ttsfarm-bench-storage-") as tmp:
            rows = [("local folder (fsync, rename)", LocalStorage(tmp).put),
                    ("S3, boto3's transfer manager for every object (before)", transfer_manager),
                    ("S3, `S3Storage.put` (one PUT below the multipart threshold)", s3.put)]
            print(f"a job of {args.audio_s:g} s: audio {len(audio):,} B, words {len(words):,} B; {args.jobs} jobs per row")
            print("| backend, path | worker CPU ms per job (two objects) | wall ms per job |")
            print("|---|---:|---:|")
            for label, store in rows:
                cpu, wall = measure(store, audio, words, args.jobs)
                print(f"| {label} | {cpu:.2f} | {wall:.2f} |", flush=True)
    finally:
        moto.stop()
    return 0

"""`ttsfarm submit`: queue text on the farm and stream its audio while it is made, to a WAV or raw PCM16 on stdout.

Timings go to stderr (the first chunk's latency, the whole stream's); with ``captions`` the job's word timings
are written as WebVTT or SRT beside it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from producer.checks import timeout_arg
from producer.client import Client


def check_args(timeout: float, captions: str | None) -> None:
    """Refuse a bad ``--timeout`` or caption file name before the text is read or anything is queued."""
    timeout_arg("--timeout", timeout)
    if captions:
        from pipeline.captions import caption_format

        caption_format(captions)


def stream_to_output(client: Client, text: bytes | str, *, output: str = "-", timeout: float = 300.0,
                     captions: str | None = None, **request: Any) -> int:
    """Submit ``text`` (``request``: ``Client.submit``'s options) and write its chunks as they come: to
    ``output`` (a .wav, written once the stream ends) or, for ``-``, to stdout at once."""
    start = time.perf_counter()
    job = client.submit(text, format="pcm", **request)
    print(f"job {job.id}: {job.total} segment(s)", file=sys.stderr)
    first = None
    pcm = bytearray()
    rate = 0
    sink = sys.stdout.buffer if output == "-" else None
    for chunk in job.stream(timeout=timeout):
        if first is None:
            first = time.perf_counter() - start
            print(f"first chunk after {first * 1000:.0f} ms", file=sys.stderr)
        rate = chunk.sample_rate
        if sink:
            sink.write(chunk.pcm)
            sink.flush()
        else:
            pcm += chunk.pcm
    total = time.perf_counter() - start
    if not sink:
        from pipeline.audio import from_pcm16, write

        write(output, from_pcm16(bytes(pcm)), rate)
        print(f"{output}: {len(pcm) / 2 / rate:.2f} s of audio streamed in {total:.2f} s", file=sys.stderr)
    result = job.wait(timeout=timeout)
    print(f"full output stored at {result.url}", file=sys.stderr)
    if captions:
        write_captions(captions, result.words, text)
    return 0


def write_captions(path: str, words: Any, text: bytes | str) -> None:
    from pipeline.captions import render

    source = text.decode("utf-8") if isinstance(text, bytes) else text  # the words' char offsets index this
    Path(path).write_text(render(words, path, source), encoding="utf-8")
    print(f"{path}: {len(words)} word(s) timed", file=sys.stderr)

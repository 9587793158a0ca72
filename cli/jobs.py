"""`ttsfarm say` and `ttsfarm phonemize`: synthesize or show the text's plan offline, in this process. `ttsfarm
submit`: queue text on the farm and stream its audio while it is made, to a WAV or raw PCM16 on stdout.

Submit's timings go to stderr (the first chunk's latency, the whole stream's); with ``captions`` the job's word
timings are written as WebVTT or SRT beside it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from producer.checks import timeout_arg
from cli.common import add_markup_opts, add_voice_opts, client_of, markup_of, options_of, settings_of, text_of

if TYPE_CHECKING:
    from producer.client import Client


def add_commands(sub: Any) -> None:
    p = sub.add_parser("say", help="synthesize offline, in this process")
    p.add_argument("text", help="text, '-' for stdin")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--format", default=None, help="wav | flac | ogg (Opus) | mp3 | aac | pcm (default: from the file name)")
    p.add_argument("--rate", type=int, default=None, help="output sample rate")
    p.add_argument("--bitrate", type=int, default=None, help="bit/s of mp3, ogg or aac (default: the codec's)")
    p.add_argument("--file", action="store_true", help="TEXT names a UTF-8 file")
    add_voice_opts(p)
    add_markup_opts(p)
    p.set_defaults(func=cmd_say)

    p = sub.add_parser("phonemize", help="show segments, languages, pinyin and model tokens")
    p.add_argument("text")
    p.add_argument("--voice", default=None)
    add_markup_opts(p)
    p.set_defaults(func=cmd_phonemize)

    p = sub.add_parser("submit", help="queue text on the farm and stream its audio while it is made")
    p.add_argument("text")
    p.add_argument("-o", "--output", default="-", help="a .wav file, or - for raw PCM16 on stdout")
    p.add_argument("--lane", default="interactive", choices=["interactive", "bulk"])
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--file", action="store_true", help="TEXT names a UTF-8 file")
    p.add_argument("--captions", metavar="FILE", help="also write the word timings as captions: a .vtt or .srt file")
    add_voice_opts(p)
    add_markup_opts(p)
    p.set_defaults(func=cmd_submit)


def cmd_say(args: argparse.Namespace) -> int:
    from pipeline.offline import say

    print(say(settings_of(args), text_of(args), args.voice, options_of(args), args.output, fmt=args.format,
              rate=args.rate, bitrate=args.bitrate, **markup_of(args)))
    return 0


def cmd_phonemize(args: argparse.Namespace) -> int:
    from pipeline.offline import phonemize

    for line in phonemize(settings_of(args), text_of(args), args.voice, **markup_of(args)):
        print(line)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    check_args(args.timeout, args.captions)  # before anything is read or queued
    return stream_to_output(client_of(args), text_of(args), output=args.output, timeout=args.timeout,
                            captions=args.captions, voice=args.voice, lane=args.lane, options=options_of(args),
                            **markup_of(args))


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

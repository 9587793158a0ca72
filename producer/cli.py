"""`ttsfarm`: the command line. Heavy parts (onnxruntime, celery) load only in the commands that use them."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from pipeline.errors import TTSFarmError

log = logging.getLogger("ttsfarm")


def _settings(args: argparse.Namespace) -> Any:
    from pipeline.settings import load_settings

    env = dict(os.environ)
    if getattr(args, "redis", None):
        env["TTSFARM_REDIS_URL"] = args.redis
    return load_settings(env=env)


def _text(args: argparse.Namespace) -> bytes | str:
    if args.text == "-":
        return sys.stdin.buffer.read()
    if getattr(args, "file", False):
        return Path(args.text).read_bytes()
    return args.text


def _options(args: argparse.Namespace) -> dict[str, float]:
    opts: dict[str, float] = {"speed": args.speed}
    if args.noise_off:
        opts.update(noise_scale=0.0, noise_w=0.0)
    return opts


def cmd_say(args: argparse.Namespace) -> int:
    from pipeline.audio import write
    from pipeline.synth import Synthesizer
    from pipeline.voices.base import SynthesisOptions

    settings = _settings(args)
    synth = Synthesizer(settings)
    out = synth.synthesize(_text(args), args.voice, SynthesisOptions.from_dict(_options(args)))
    rate = args.rate or out.sample_rate
    write(args.output, out.audio, out.sample_rate, fmt=args.format, out_rate=rate)
    t = out.timings
    print(f"{args.output}: {out.duration_s:.2f} s of audio at {rate} Hz, {len(out.segments)} segment(s), "
          f"made in {t['total_s']:.2f} s (RTF {t['total_s'] / max(out.duration_s, 1e-9):.3f})")
    return 0


def cmd_phonemize(args: argparse.Namespace) -> int:
    from pipeline.synth import Synthesizer

    synth = Synthesizer(_settings(args))
    for planned, ph in synth.phonemize(_text(args), args.voice):
        seg = planned.segment
        print(f"[{seg.index}] {seg.lang} voice={planned.voice} pause={seg.pause_after_s:.2f}s")
        print(f"  text:     {seg.text}")
        if ph.pinyin:
            print(f"  pinyin:   {' '.join(ph.pinyin)}")
        print(f"  phonemes: {ph.phonemes}")
        print(f"  tokens:   {' '.join(map(str, ph.ids))}")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from producer.client import Client

    settings = _settings(args)
    client = Client.from_url(settings=settings)
    start = time.perf_counter()
    job = client.submit(_text(args), voice=args.voice, format="pcm", lane=args.lane, options=_options(args))
    print(f"job {job.id}: {job.total} segment(s)", file=sys.stderr)
    first = None
    pcm = bytearray()
    rate = 0
    sink = sys.stdout.buffer if args.output == "-" else None
    for chunk in job.stream(timeout=args.timeout):
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

        write(args.output, from_pcm16(bytes(pcm)), rate)
        print(f"{args.output}: {len(pcm) / 2 / rate:.2f} s of audio streamed in {total:.2f} s", file=sys.stderr)
    result = job.wait(timeout=args.timeout)
    print(f"full output stored at {result.url}", file=sys.stderr)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from producer.local import worker_command

    cmd = worker_command(args.name, loglevel=args.loglevel, extra=args.celery_args)
    os.execvp(cmd[0], cmd)
    return 0  # not reached


def cmd_flower(args: argparse.Namespace) -> int:
    cmd = [sys.executable, "-m", "celery", "-A", "workers.app", "flower", f"--port={args.port}", *args.flower_args]
    os.execvp(cmd[0], cmd)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from producer.demo import run_demo

    return run_demo(_settings(args), output=args.output, text=args.text)


def cmd_dlq(args: argparse.Namespace) -> int:
    import json

    import redis

    from producer.contract import Keys
    from producer.dlq import DeadLetters

    settings = _settings(args)
    dlq = DeadLetters(redis.Redis.from_url(settings.redis.url), Keys(settings.redis.key_prefix))
    if args.action == "list":
        for dl in dlq.list(args.count):
            print(f"{dl.id}  {dl.code:<22} job={dl.job_id or '-':<24} deliveries={dl.deliveries}  {dl.message[:80]}")
    elif args.action == "show":
        dl = dlq.get(args.id)
        if dl is None:
            print(f"no dead letter {args.id}", file=sys.stderr)
            return 1
        print(json.dumps(dl.__dict__, indent=2, ensure_ascii=False))
    elif args.action == "requeue":
        print(f"requeued as {dlq.requeue(args.id)}")
    elif args.action == "purge":
        print(f"removed {dlq.purge()} dead letter(s)")
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    from pipeline.quantize import main as quantize_main

    return quantize_main(_settings(args), args)


def _add_voice_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voice", default=None, help="a catalogue voice or blend (default: the catalogue's default)")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--noise-off", action="store_true", help="deterministic output (noise scales 0)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ttsfarm", description="Batch text-to-speech farm")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    ap.add_argument("--redis", help="Redis URL (default: settings, TTSFARM_REDIS_URL)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("say", help="synthesize offline, in this process")
    p.add_argument("text", help="text, '-' for stdin")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--format", default=None, help="wav | flac | ogg | pcm (default: from the file name)")
    p.add_argument("--rate", type=int, default=None, help="output sample rate")
    p.add_argument("--file", action="store_true", help="TEXT names a UTF-8 file")
    _add_voice_opts(p)
    p.set_defaults(func=cmd_say)

    p = sub.add_parser("phonemize", help="show segments, languages, pinyin and model tokens")
    p.add_argument("text")
    p.add_argument("--voice", default=None)
    p.set_defaults(func=cmd_phonemize)

    p = sub.add_parser("submit", help="queue text on the farm and stream its audio while it is made")
    p.add_argument("text")
    p.add_argument("-o", "--output", default="-", help="a .wav file, or - for raw PCM16 on stdout")
    p.add_argument("--lane", default="interactive", choices=["interactive", "bulk"])
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--file", action="store_true", help="TEXT names a UTF-8 file")
    _add_voice_opts(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("worker", help="start a farm worker (the plain `celery -A workers.app worker`)")
    p.add_argument("--name", default=f"ttsfarm-{os.getpid()}@{os.uname().nodename}")
    p.add_argument("--loglevel", default="INFO")
    p.add_argument("celery_args", nargs=argparse.REMAINDER, help="more celery worker arguments")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("flower", help="start Flower on the farm's broker")
    p.add_argument("--port", type=int, default=5555)
    p.add_argument("flower_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_flower)

    p = sub.add_parser("demo", help="start Redis if needed and a worker, submit mixed text, stream it to a WAV")
    p.add_argument("-o", "--output", default="out/demo.wav")
    p.add_argument("--text", default=None)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("dlq", help="list, show, requeue or purge dead-lettered segments")
    p.add_argument("action", choices=["list", "show", "requeue", "purge"])
    p.add_argument("id", nargs="?", default="", help="dead-letter entry id (show, requeue)")
    p.add_argument("--count", type=int, default=50)
    p.set_defaults(func=cmd_dlq)

    p = sub.add_parser("quantize", help="make an INT8 model of a voice and check it against FP32")
    p.add_argument("voice")
    p.add_argument("--mode", default="static", choices=["static", "dynamic"])
    p.add_argument("--per-channel", action="store_true")
    p.add_argument("--exclude", default=None, help="comma-separated node name prefixes kept in FP32")
    p.add_argument("--calibration", default=None, help="a UTF-8 file of calibration sentences, one a line")
    p.add_argument("--report", default=None, help="also write the report JSON here")
    p.set_defaults(func=cmd_quantize)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except TTSFarmError as exc:
        print(f"ttsfarm: error {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`ttsfarm`: the command line. Heavy parts (onnxruntime, celery) load only in the commands that use them."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, EXTRA_MISSING, InputError, ModelError, TTSFarmError
from producer.checks import read_lexicon

log = logging.getLogger("ttsfarm")


def _settings(args: argparse.Namespace) -> Any:
    from producer.wire.settings import load_settings

    env = dict(os.environ)
    if getattr(args, "redis", None):
        env["TTSFARM_REDIS_URL"] = args.redis
    return load_settings(env=env)


def _text(args: argparse.Namespace) -> bytes | str:
    if args.text == "-":
        return sys.stdin.buffer.read()
    if getattr(args, "file", False):
        try:
            return Path(args.text).read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read {args.text!r}: {exc.strerror or exc}", code=BAD_OPTION) from None
    return args.text


def _options(args: argparse.Namespace) -> dict[str, float]:
    opts: dict[str, float] = {"speed": args.speed}
    if args.noise_off:
        opts.update(noise_scale=0.0, noise_w=0.0)
    return opts


def _markup(args: argparse.Namespace) -> dict[str, Any]:
    """``lexicon`` (from --lexicon: a JSON file or inline JSON) and ``ssml`` (--ssml) for plan/submit."""
    return {"lexicon": read_lexicon(args.lexicon), "ssml": True if args.ssml else None}


def _add_markup_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lexicon", default=None, help='pronunciations: JSON {"重庆": "chong2 qing4", "Nguyen": "ŋwˈɪn"} '
                                                  "or a JSON file of them")
    p.add_argument("--ssml", action="store_true", help="read TEXT as SSML (text starting with <speak> is SSML anyway)")


def _client(args: argparse.Namespace) -> Any:
    """The SDK client of the farm the settings (and ``--redis``) name: the one place a connection is built."""
    from producer.client import Client

    return Client.from_url(settings=_settings(args))


def cmd_say(args: argparse.Namespace) -> int:
    from pipeline.offline import say

    print(say(_settings(args), _text(args), args.voice, _options(args), args.output, fmt=args.format, rate=args.rate,
              bitrate=args.bitrate, **_markup(args)))
    return 0


def cmd_phonemize(args: argparse.Namespace) -> int:
    from pipeline.offline import phonemize

    for line in phonemize(_settings(args), _text(args), args.voice, **_markup(args)):
        print(line)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from producer.submit_cli import check_args, stream_to_output

    check_args(args.timeout, args.captions)  # before anything is read or queued
    return stream_to_output(_client(args), _text(args), output=args.output, timeout=args.timeout, captions=args.captions,
                            voice=args.voice, lane=args.lane, options=_options(args), **_markup(args))


def cmd_worker(args: argparse.Namespace) -> int:
    from producer.local import worker_command

    cmd = worker_command(args.name, loglevel=args.loglevel, extra=args.passed)
    os.execvp(cmd[0], cmd)
    return 0  # not reached


def cmd_flower(args: argparse.Namespace) -> int:
    cmd = [sys.executable, "-m", "celery", "-A", "workers.app", "flower", f"--port={args.port}", *args.passed]
    os.execvp(cmd[0], cmd)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from producer.demo import run_demo

    return run_demo(_settings(args), output=args.output, text=args.text)


def cmd_dlq(args: argparse.Namespace) -> int:
    from producer.dlq import run

    return run(_client(args).broker, args.action, args.id, args.count)


def cmd_status(args: argparse.Namespace) -> int:
    from producer.status_cli import run

    client = _client(args)
    return run(client.broker, client.settings.queue.n_buckets, watch=args.watch, iterations=args.iterations)


def cmd_voices(args: argparse.Namespace) -> int:
    """`voices [list]`: the catalogue with what this install serves. `voices prepare [VOICE...]`: build what the
    voices need into the model cache. `voices reload [VOICE...]`: hot reload on the running workers."""
    if args.action not in ("list", "prepare", "reload"):  # `voices joe kumo`: list those
        args.voice, args.action = [args.action, *args.voice], "list"
    if args.action == "list":
        from pipeline.voice_list import list_voices

        print(list_voices(_settings(args), args.voice, as_json=args.json))
        return 0
    if args.action == "prepare":
        from pipeline.prepare import main as prepare_main

        return prepare_main(_settings(args), args)
    from producer.reload_cli import reload_voices

    return reload_voices(_client(args), args.voice, destination=args.destination, reply_timeout=args.reply_timeout,
                         wait=args.wait, timeout=args.timeout)


def cmd_book(args: argparse.Namespace) -> int:
    from books import cmd_book as book_main

    return int(book_main(_settings(args), args))


def cmd_gateway(args: argparse.Namespace) -> int:
    try:
        from gateway.app import main as gateway_main
    except ImportError as exc:
        raise ModelError(f"the gateway needs {exc.name}, which is not installed: pip install 'ttsfarm[gateway]'",
                         code=EXTRA_MISSING) from exc
    return int(gateway_main(args.passed + (["--redis", args.redis] if args.redis else [])) or 0)


def cmd_doctor(args: argparse.Namespace) -> int:
    from pipeline.doctor import main as doctor_main

    return doctor_main(_settings(args).runtime, args.device)


def cmd_quantize(args: argparse.Namespace) -> int:
    from pipeline.quantize import main as quantize_main

    return quantize_main(_settings(args), args)


def cmd_bench(args: argparse.Namespace) -> int:
    from bench.run import main as bench_main

    args.argv = sys.argv[1:]
    return bench_main(args)


def _add_voice_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voice", default=None, help="a catalogue voice or blend (default: the catalogue's default)")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--noise-off", action="store_true", help="deterministic output (noise scales 0)")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ttsfarm")
    except PackageNotFoundError:
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """Commands that hand the rest of their arguments to another program (worker, flower, gateway) say so with
    ``passthrough``: main() gives them what this parser does not know as ``args.passed``; any other command
    refuses an unknown argument."""
    ap = argparse.ArgumentParser(prog="ttsfarm", description="Batch text-to-speech farm")
    ap.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    ap.add_argument("--redis", help="Redis URL (default: settings, TTSFARM_REDIS_URL)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("say", help="synthesize offline, in this process")
    p.add_argument("text", help="text, '-' for stdin")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--format", default=None, help="wav | flac | ogg (Opus) | mp3 | aac | pcm (default: from the file name)")
    p.add_argument("--rate", type=int, default=None, help="output sample rate")
    p.add_argument("--bitrate", type=int, default=None, help="bit/s of mp3, ogg or aac (default: the codec's)")
    p.add_argument("--file", action="store_true", help="TEXT names a UTF-8 file")
    _add_voice_opts(p)
    _add_markup_opts(p)
    p.set_defaults(func=cmd_say)

    p = sub.add_parser("phonemize", help="show segments, languages, pinyin and model tokens")
    p.add_argument("text")
    p.add_argument("--voice", default=None)
    _add_markup_opts(p)
    p.set_defaults(func=cmd_phonemize)

    p = sub.add_parser("submit", help="queue text on the farm and stream its audio while it is made")
    p.add_argument("text")
    p.add_argument("-o", "--output", default="-", help="a .wav file, or - for raw PCM16 on stdout")
    p.add_argument("--lane", default="interactive", choices=["interactive", "bulk"])
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--file", action="store_true", help="TEXT names a UTF-8 file")
    p.add_argument("--captions", metavar="FILE", help="also write the word timings as captions: a .vtt or .srt file")
    _add_voice_opts(p)
    _add_markup_opts(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("worker", help="start a farm worker (the plain `celery -A workers.app worker`)",
                       epilog="Other arguments go to `celery worker`.")
    p.add_argument("--name", default=f"ttsfarm-{os.getpid()}@{os.uname().nodename}")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=cmd_worker, passthrough=True)

    p = sub.add_parser("flower", help="start Flower on the farm's broker", epilog="Other arguments go to Flower.")
    p.add_argument("--port", type=int, default=5555)
    p.set_defaults(func=cmd_flower, passthrough=True)

    p = sub.add_parser("demo", help="start Redis if needed and a worker, submit mixed text, stream it to a WAV")
    p.add_argument("-o", "--output", default="out/demo.wav")
    p.add_argument("--text", default=None)
    p.set_defaults(func=cmd_demo)

    from books import add_arguments as add_book_arguments

    p = sub.add_parser("book", help="make an audiobook on the farm: a file per chapter, a manifest, a playlist")
    add_book_arguments(p)
    p.set_defaults(func=cmd_book)

    # Its options (--host, --port, --workers, --log-level; --help) are the gateway's own parser's.
    p = sub.add_parser("gateway", help="serve the HTTP gateway: OpenAI-style /v1/audio/speech, jobs, SSE/WebSocket, a page at /",
                       add_help=False)
    p.set_defaults(func=cmd_gateway, passthrough=True)

    p = sub.add_parser("doctor", help="check the install: onnxruntime build and providers, torch CUDA, GPU; fails "
                       "when this host would not serve on the configured device")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                   help="check for this runtime.device (default: the settings')")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("dlq", help="list, show, requeue or purge dead-lettered segments")
    p.add_argument("action", choices=["list", "show", "requeue", "purge"])
    p.add_argument("id", nargs="?", default="", help="dead-letter entry id (show, requeue)")
    p.add_argument("--count", type=int, default=50)
    p.set_defaults(func=cmd_dlq)

    p = sub.add_parser("status", help="workers, lanes and backlog, throughput and recent errors on one screen")
    p.add_argument("--watch", type=float, nargs="?", const=2.0, default=0.0, metavar="SECONDS",
                   help="redraw every SECONDS (default 2) until interrupted")
    p.add_argument("--iterations", type=int, default=0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("voices", help="list the voices and what is served; prepare them into the model cache; hot reload them")
    p.add_argument("action", nargs="?", default="list", metavar="{list,prepare,reload}",
                   help="list (default; `voices NAME...` lists those): engines, stages, precision served, license, gate figures; prepare: build "
                        "split stages, INT8 where its gate passes (once; idempotent); reload: on the running workers")
    p.add_argument("voice", nargs="*", help="voices (default: all)")
    p.add_argument("--json", action="store_true", help="list: JSON instead of text")
    p.add_argument("--force", action="store_true", help="prepare: build again even if prepared")
    p.add_argument("--no-int8", action="store_true", help="prepare: FP32 stages only (no quantization, no gate)")
    p.add_argument("--destination", action="append", help="only this worker (node name); repeatable")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="return once the workers accepted")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the reloads")
    p.add_argument("--reply-timeout", type=float, default=3.0, help="seconds to collect the workers' replies")
    p.set_defaults(func=cmd_voices)

    p = sub.add_parser("quantize", help="make an INT8 model of a voice and check it against FP32")
    p.add_argument("voice")
    p.add_argument("--mode", default="static", choices=["static", "dynamic"])
    p.add_argument("--per-channel", action="store_true")
    p.add_argument("--exclude", default=None, help="comma-separated node name prefixes kept in FP32")
    p.add_argument("--calibration", default=None, help="a UTF-8 file of calibration sentences, one a line")
    p.add_argument("--report", default=None, help="also write the report JSON here")
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("bench", help="load-test a farm: first-chunk latency, throughput, batches, worker RSS")
    p.add_argument("--redis", dest="bench_redis", default=None, help="a running farm's Redis URL (default: start our own)")
    p.add_argument("--workers", type=int, default=1, help="worker processes to start (own farm)")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads per worker (own farm)")
    p.add_argument("--inference-threads", type=int, default=None, help="inference loops per worker sharing one session")
    p.add_argument("--max-batch", type=int, default=None, help="queue.max_batch_cpu of the workers (own farm)")
    p.add_argument("--precision", default=None, choices=["auto", "fp32", "int8"])
    p.add_argument("--set", action="append", metavar="TTSFARM_KEY=VALUE", help="more worker settings (own farm)")
    p.add_argument("--mix", default="mixed", help="mixed | en | en_short | en_paragraph | zh")
    p.add_argument("--rate", type=float, default=0.0, help="Poisson arrivals, jobs/s (0: closed loop at --concurrency)")
    p.add_argument("--concurrency", type=int, default=4, help="jobs in flight (closed loop)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of submitting")
    p.add_argument("--jobs", type=int, default=1_000_000, help="at most this many jobs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--job-timeout", type=float, default=300.0)
    p.add_argument("--saturate", type=float, default=0.0,
                   help="first run closed loop this many seconds to find saturation, then load at --load-fraction of it")
    p.add_argument("--load-fraction", type=float, default=0.7)
    p.add_argument("--warmup-jobs", type=int, default=4)
    p.add_argument("--label", default="")
    p.add_argument("--out", default="bench-results/farm", help="folder for bench.json and the PNG plots")
    p.add_argument("--no-plots", action="store_true")
    p.set_defaults(func=cmd_bench)
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as main() reads it: unknown arguments go on (``args.passed``) only where the command
    hands them to another program; anywhere else they are an error (exit 2)."""
    parser = build_parser()
    args, passed = parser.parse_known_args(argv)
    if passed and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(passed)}")
    args.passed = passed
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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

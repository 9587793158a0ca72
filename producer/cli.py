"""`ttsfarm`: the command line. Heavy parts (onnxruntime, celery) load only in the commands that use them."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, EXTRA_MISSING, InputError, ModelError, TTSFarmError
from producer.checks import read_lexicon, timeout_arg

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


def cmd_say(args: argparse.Namespace) -> int:
    from pipeline.audio import write
    from pipeline.synth import Synthesizer
    from pipeline.voices.base import SynthesisOptions

    settings = _settings(args)
    synth = Synthesizer(settings)
    out = synth.synthesize(_text(args), args.voice, SynthesisOptions.from_dict(_options(args)), **_markup(args))
    rate = args.rate or out.sample_rate
    write(args.output, out.audio, out.sample_rate, fmt=args.format, out_rate=rate, bitrate=args.bitrate)
    t = out.timings
    print(f"{args.output}: {out.duration_s:.2f} s of audio at {rate} Hz, {len(out.segments)} segment(s), "
          f"made in {t['total_s']:.2f} s (RTF {t['total_s'] / max(out.duration_s, 1e-9):.3f})")
    return 0


def cmd_phonemize(args: argparse.Namespace) -> int:
    from pipeline.synth import Synthesizer

    synth = Synthesizer(_settings(args))
    for planned, ph in synth.phonemize(_text(args), args.voice, **_markup(args)):
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

    timeout_arg("--timeout", args.timeout)  # before anything is queued
    if args.captions:
        from producer.captions import caption_format

        caption_format(args.captions)
    settings = _settings(args)
    client = Client.from_url(settings=settings)
    start = time.perf_counter()
    text = _text(args)
    job = client.submit(text, voice=args.voice, format="pcm", lane=args.lane, options=_options(args), **_markup(args))
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
    if args.captions:
        from producer.captions import render

        source = text.decode("utf-8") if isinstance(text, bytes) else text  # the words' char offsets index this
        Path(args.captions).write_text(render(result.words, args.captions, source), encoding="utf-8")
        print(f"{args.captions}: {len(result.words)} word(s) timed", file=sys.stderr)
    return 0


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
    import json

    import redis

    from producer.dlq import DeadLetters
    from producer.wire.keys import Keys

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


def cmd_status(args: argparse.Namespace) -> int:
    import redis

    from producer.status_cli import run
    from producer.wire.keys import Keys

    settings = _settings(args)
    r = redis.Redis.from_url(settings.redis.url, socket_timeout=settings.redis.socket_timeout_s)
    return run(r, Keys(settings.redis.key_prefix), settings.queue.n_buckets, watch=args.watch,
               iterations=args.iterations)


def cmd_voices(args: argparse.Namespace) -> int:
    """`voices [list]`: the catalogue with what this install serves. `voices prepare [VOICE...]`: build what the
    voices need into the model cache. `voices reload [VOICE...]`: hot reload on the running workers."""
    if args.action not in ("list", "prepare", "reload"):  # `voices joe kumo`: list those
        args.voice, args.action = [args.action, *args.voice], "list"
    if args.action == "list":
        from pipeline.voice_list import describe_catalogue, format_voices

        settings = _settings(args)
        for name in args.voice:
            settings.catalogue.get(name)  # an unknown name is UNKNOWN_VOICE
        rows = [r for r in describe_catalogue(settings) if not args.voice or r["name"] in args.voice]
        print(format_voices(rows, as_json=args.json))
        return 0
    if args.action == "prepare":
        from pipeline.prepare import main as prepare_main

        return prepare_main(_settings(args), args)
    return _reload_voices(args)


def _reload_voices(args: argparse.Namespace) -> int:
    """`voices reload [VOICE...]`: a Celery broadcast; each worker loads the new version beside the old, warms it
    up and swaps it in between batches. With --wait (the default) it waits for every answering worker's report."""
    import json

    import redis

    from producer.wire.control import broadcast_reload, control_app, versions_by_node
    from producer.wire.keys import Keys

    settings = _settings(args)
    r = redis.Redis.from_url(settings.redis.url)
    key = Keys(settings.redis.key_prefix).workers()

    def beats() -> dict[str, dict[str, Any]]:
        return versions_by_node({k.decode() if isinstance(k, bytes) else k: json.loads(v) for k, v in r.hgetall(key).items()})

    before = {node: (info.get("reload") or {}).get("at", 0) for node, info in beats().items()}
    replies = broadcast_reload(control_app(settings), args.voice, destination=args.destination, timeout=args.reply_timeout)
    if not replies:
        print("no worker answered (are any running on this broker?)", file=sys.stderr)
        return 1
    failed = 0
    waiting = []
    for node, reply in sorted(replies.items()):
        if reply.get("ok"):
            print(f"{node}: reloading {', '.join(args.voice) or 'all voices'} (now {reply.get('versions')})")
            waiting.append(node)
        else:
            failed += 1
            print(f"{node}: refused: {reply.get('error')}")
    deadline = time.monotonic() + args.timeout
    while waiting and args.wait:
        now = beats()
        for node in list(waiting):
            last = (now.get(node) or {}).get("reload") or {}
            if last.get("at", 0) > before.get(node, 0):
                waiting.remove(node)
                if last.get("ok"):
                    info = now[node].get("voice_info") or {}
                    done = ", ".join(f"{v} v{info.get(v, {}).get('version')} ({info.get(v, {}).get('model')}, "
                                     f"{info.get(v, {}).get('precision')})" for v in last.get("voices", []))
                    print(f"{node}: reloaded in {last.get('seconds')} s: {done}")
                else:
                    failed += 1
                    print(f"{node}: reload failed, old voices still serving: {last.get('error')}")
        if waiting and time.monotonic() > deadline:
            print(f"timed out waiting for: {', '.join(waiting)}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 1 if failed else 0


def cmd_book(args: argparse.Namespace) -> int:
    from producer.book import cmd_book as book_main

    return int(book_main(_settings(args), args))


def cmd_gateway(args: argparse.Namespace) -> int:
    try:
        from gateway.app import main as gateway_main
    except ImportError as exc:
        raise ModelError(f"the gateway needs {exc.name}, which is not installed: pip install 'ttsfarm[gateway]'",
                         code=EXTRA_MISSING) from exc
    return int(gateway_main(args.passed + (["--redis", args.redis] if args.redis else [])) or 0)


def cmd_doctor(args: argparse.Namespace) -> int:
    import dataclasses

    from pipeline.doctor import examine, versions

    runtime = _settings(args).runtime
    if args.device:
        runtime = dataclasses.replace(runtime, device=args.device)
    report = examine(runtime)
    print(versions())
    print("\n".join(report.lines()))
    if not report.ok:
        print(f"ttsfarm doctor: {len(report.problems)} problem(s); this install would not serve as configured",
              file=sys.stderr)
    return 0 if report.ok else 1


def cmd_quantize(args: argparse.Namespace) -> int:
    from pipeline.quantize import main as quantize_main

    return quantize_main(_settings(args), args)


def cmd_bench(args: argparse.Namespace) -> int:
    from producer.bench import main as bench_main

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

    from producer.book import add_arguments as add_book_arguments

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

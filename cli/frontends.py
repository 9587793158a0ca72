"""Front ends started from the command line: `ttsfarm book` (audiobooks), `ttsfarm gateway` (the HTTP gateway),
`ttsfarm grpc` (NVIDIA Riva's TTS protocol) and `ttsfarm bench` (load tests). Each is imported only inside the command that starts it (the book command's
arguments when the parser is built): none of them loads on `import producer`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pipeline.errors import EXTRA_MISSING, ModelError
from cli.common import settings_of


def add_commands(sub: Any) -> None:
    from books import add_arguments as add_book_arguments

    p = sub.add_parser("book", help="make an audiobook on the farm: a file per chapter, a manifest, a playlist")
    add_book_arguments(p)
    p.set_defaults(func=cmd_book)

    # Its options (--host, --port, --workers, --log-level; --help) are the gateway's own parser's.
    p = sub.add_parser("gateway", help="serve the HTTP gateway: OpenAI-style /v1/audio/speech, jobs, SSE/WebSocket, a page at /",
                       add_help=False)
    p.set_defaults(func=cmd_gateway, passthrough=True)

    # Its options (--host, --port, --log-level; --help) are the gRPC front end's own parser's.
    p = sub.add_parser("grpc", help="serve NVIDIA Riva's TTS protocol over gRPC: Synthesize, SynthesizeOnline, voices",
                       add_help=False)
    p.set_defaults(func=cmd_grpc, passthrough=True)

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


def cmd_book(args: argparse.Namespace) -> int:
    from books import cmd_book as book_main

    return int(book_main(settings_of(args), args))


def cmd_gateway(args: argparse.Namespace) -> int:
    try:
        from gateway.app import main as gateway_main
    except ImportError as exc:
        raise ModelError(f"the gateway needs {exc.name}, which is not installed: pip install 'ttsfarm[gateway]'",
                         code=EXTRA_MISSING) from exc
    return int(gateway_main(args.passed + (["--redis", args.redis] if args.redis else [])) or 0)


def cmd_grpc(args: argparse.Namespace) -> int:
    try:
        from grpcfront.server import main as grpc_main
    except ImportError as exc:
        raise ModelError(f"the gRPC front end needs {exc.name}, which is not installed: pip install 'ttsfarm[grpc]'",
                         code=EXTRA_MISSING) from exc
    return int(grpc_main(args.passed + (["--redis", args.redis] if args.redis else [])) or 0)


def cmd_bench(args: argparse.Namespace) -> int:
    from bench.run import main as bench_main

    args.argv = sys.argv[1:]
    return bench_main(args)

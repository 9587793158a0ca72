"""Front ends started from the command line: `ttsfarm book` (audiobooks), `ttsfarm gateway` (the HTTP gateway),
`ttsfarm grpc` (NVIDIA Riva's TTS protocol) and `ttsfarm bench` (the benchmarks, a stage each). Each is imported only inside the command that starts it (the book command's
arguments when the parser is built): none of them loads on `import producer`."""

from __future__ import annotations

import argparse
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

    # Its stages and their options (--help) are the bench's own parsers' (bench/cli.py): `ttsfarm bench --help` lists them.
    p = sub.add_parser("bench", help="benchmarks, one stage each: load (the default), host, farm, listeners, memory, idle, "
                                     "shards, grpc", add_help=False)
    p.set_defaults(func=cmd_bench, passthrough=True)


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
    from bench.cli import main as bench_main

    return bench_main(args.passed, redis_url=args.redis)

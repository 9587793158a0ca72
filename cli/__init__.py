"""`ttsfarm`: the command line, a thin dispatcher. Each command group's module adds its commands to the parser
(``add_commands``) and holds what they do; heavy parts (onnxruntime, celery, a front end) load only inside the
command that uses them.

=============  =============================================================================================
``jobs``       say, phonemize (offline, in this process); submit (on the farm, streaming its audio)
``host``       worker, flower, doctor: this host's part of the farm
``demo``       demo: the whole farm on this machine, end to end
``frontends``  book, gateway, bench: front ends, each imported by the command that starts it
``dlq``        dlq list / show / requeue / purge: the dead letters, through the broker's steps
``status``     status: workers, lanes, backlog and recent errors on one screen
``voices``     voices list / prepare / reload, quantize
``common``     what every command reads from its arguments: settings, text, options, the SDK client
=============  =============================================================================================
"""

from __future__ import annotations

import argparse
import logging
import sys

from pipeline.errors import TTSFarmError
from cli import demo, dlq, frontends, host, jobs, status, voices

GROUPS = (jobs, host, demo, frontends, dlq, status, voices)  # in the order `ttsfarm --help` lists their commands


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
    for group in GROUPS:
        group.add_commands(sub)
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

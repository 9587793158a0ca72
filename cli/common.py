"""What the commands read from their arguments: the settings (configs/ plus ``TTSFARM_*``, ``--redis`` over
them), the text, the synthesis options and markup, and the SDK client; and the options several commands share."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, InputError
from producer.checks import read_lexicon


def settings_of(args: argparse.Namespace) -> Any:
    from wire.settings import load_settings

    env = dict(os.environ)
    if getattr(args, "redis", None):
        env["TTSFARM_REDIS_URL"] = args.redis
    return load_settings(env=env)


def client_of(args: argparse.Namespace) -> Any:
    """The SDK client of the farm the settings (and ``--redis``) name: the one place a command gets a
    connection (its ``broker`` holds the farm's steps)."""
    from producer.client import Client

    return Client.from_url(settings=settings_of(args))


def text_of(args: argparse.Namespace) -> bytes | str:
    if args.text == "-":
        return sys.stdin.buffer.read()
    if getattr(args, "file", False):
        try:
            return Path(args.text).read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read {args.text!r}: {exc.strerror or exc}", code=BAD_OPTION) from None
    return args.text


def options_of(args: argparse.Namespace) -> dict[str, float]:
    opts: dict[str, float] = {"speed": args.speed}
    if args.noise_off:
        opts.update(noise_scale=0.0, noise_w=0.0)
    return opts


def markup_of(args: argparse.Namespace) -> dict[str, Any]:
    """``lexicon`` (from --lexicon: a JSON file or inline JSON) and ``ssml`` (--ssml) for plan/submit."""
    return {"lexicon": read_lexicon(args.lexicon), "ssml": True if args.ssml else None}


def add_markup_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lexicon", default=None, help='pronunciations: JSON {"重庆": "chong2 qing4", "Nguyen": "ŋwˈɪn"} '
                                                  "or a JSON file of them")
    p.add_argument("--ssml", action="store_true", help="read TEXT as SSML (text starting with <speak> is SSML anyway)")


def add_voice_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voice", default=None, help="a catalogue voice or blend (default: the catalogue's default)")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--noise-off", action="store_true", help="deterministic output (noise scales 0)")

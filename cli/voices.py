"""`ttsfarm voices [list]`: the catalogue with what this install serves. `ttsfarm voices prepare [VOICE...]`: build
what the voices need into the model cache. `ttsfarm quantize VOICE`: an INT8 model of a voice, checked against FP32.
`ttsfarm voices reload [VOICE...]`: hot reload on the running workers. `ttsfarm voices add NAME MODEL.onnx` / `ttsfarm
voices remove NAME`: a user's own Piper voice in the user's catalogue (``pipeline/prepare/user_voices.py``).

A reload is a Celery broadcast (``wire.control``); each worker loads the new version beside the old, warms
it up and swaps it in between batches. With ``wait`` it follows every answering worker's heartbeat
(``Client.workers``) until its reload report is newer than the one before the broadcast.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cli.common import client_of, settings_of
from wire.control import broadcast_reload, control_app, versions_by_node

if TYPE_CHECKING:
    from producer.client import Client


def add_commands(sub: Any) -> None:
    p = sub.add_parser("voices", help="list the voices and what is served; prepare them into the model cache; hot reload them")
    p.add_argument("action", nargs="?", default="list", metavar="{list,prepare,reload,add,remove}",
                   help="list (default; `voices NAME...` lists those): engines, stages, precision served, license, gate figures; prepare: build "
                        "split stages, INT8 where its gate passes (once; idempotent); reload: on the running workers; add NAME MODEL.onnx: a "
                        "user's own Piper voice, checked, prepared and gated; remove NAME: one of those")
    p.add_argument("voice", nargs="*", help="voices (default: all); add: NAME MODEL.onnx")
    p.add_argument("--config", default=None, help="add: the model's Piper config (default: MODEL.onnx.json beside it)")
    p.add_argument("--speaker", action="append", default=[], help="add: a speaker of a multi-speaker model (a name or a number; "
                   "repeatable): each becomes a voice NAME-SPEAKER")
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


def cmd_voices(args: argparse.Namespace) -> int:
    if args.action not in ("list", "prepare", "reload", "add", "remove"):  # `voices joe kumo`: list those
        args.voice, args.action = [args.action, *args.voice], "list"
    if args.action == "list":
        from pipeline.voice_list import list_voices

        print(list_voices(settings_of(args), args.voice, as_json=args.json))
        return 0
    if args.action == "prepare":
        from pipeline.prepare.registry import main as prepare_main

        return prepare_main(settings_of(args), args)
    if args.action in ("add", "remove"):
        return user_voice(args)
    return reload_voices(client_of(args), args.voice, destination=args.destination, reply_timeout=args.reply_timeout,
                         wait=args.wait, timeout=args.timeout)


def user_voice(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pipeline.errors import BAD_OPTION, InputError
    from pipeline.prepare.registry import describe_result
    from pipeline.prepare.user_voices import add_voice, remove_voice

    settings = settings_of(args)
    if args.action == "remove":
        if len(args.voice) != 1:
            raise InputError("usage: ttsfarm voices remove NAME", code=BAD_OPTION)
        gone = remove_voice(settings, args.voice[0])
        print(f"{', '.join(gone)}: removed from {settings.runtime.user_catalogue}; `ttsfarm voices reload` stops running "
              "workers serving it")
        return 0
    if len(args.voice) != 2:
        raise InputError("usage: ttsfarm voices add NAME MODEL.onnx [--config MODEL.onnx.json] [--speaker S]", code=BAD_OPTION)
    name, model = args.voice
    results = add_voice(settings, name, Path(model), config=Path(args.config) if args.config else None, speakers=args.speaker,
                        int8=not args.no_int8)
    for result in results:
        print(describe_result(result))
    added = ", ".join(r.voice for r in results)
    print(f"{added}: added to {settings.runtime.user_catalogue}; `ttsfarm say --voice {results[0].voice} ...` speaks it, "
          "`ttsfarm voices reload` serves it on running workers")
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    from pipeline.prepare.quantize import main as quantize_main

    return quantize_main(settings_of(args), args)


def reload_voices(client: Client, voices: Sequence[str], *, destination: Sequence[str] | None = None,
                  reply_timeout: float = 3.0, wait: bool = True, timeout: float = 300.0) -> int:
    """Print each worker's answer and, with ``wait``, its outcome; 0 when every answering worker reloaded."""
    voices = list(voices)

    def beats() -> dict[str, dict[str, Any]]:
        return versions_by_node(client.workers())

    before = {node: (info.get("reload") or {}).get("at", 0) for node, info in beats().items()}
    replies = broadcast_reload(control_app(client.settings), voices, destination=destination, timeout=reply_timeout)
    if not replies:
        print("no worker answered (are any running on this broker?)", file=sys.stderr)
        return 1
    failed = 0
    waiting = []
    for node, reply in sorted(replies.items()):
        if reply.get("ok"):
            print(f"{node}: reloading {', '.join(voices) or 'all voices'} (now {reply.get('versions')})")
            waiting.append(node)
        else:
            failed += 1
            print(f"{node}: refused: {reply.get('error')}")
    deadline = time.monotonic() + timeout
    while waiting and wait:
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

"""`ttsfarm voices reload [VOICE...]`: hot reload on the running workers.

A Celery broadcast (``producer.wire.control``); each worker loads the new version beside the old, warms it up
and swaps it in between batches. With ``wait`` it follows every answering worker's heartbeat (``Client.workers``)
until its reload report is newer than the one before the broadcast.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from producer.client import Client
from producer.wire.control import broadcast_reload, control_app, versions_by_node


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

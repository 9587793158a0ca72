"""The control broadcast, the sending side: ``ttsfarm voices reload`` asks every worker to reload voices.

The workers' side (the remote-control command that runs the reload) is ``workers.control``; both name the
command by ``RELOAD_COMMAND``. It is a Celery remote-control broadcast on the farm's broker, under the same
key prefix as ``workers.app`` configures; Celery is imported only when a broadcast is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from wire.settings import Settings
from wire.tasks import celery_connection

RELOAD_COMMAND = "ttsfarm_reload_voices"


def control_app(settings: Settings) -> Any:
    """A client-side Celery app on the farm's broker, as ``workers.app`` configures it (for broadcasts)."""
    from celery import Celery

    app = Celery("ttsfarm", set_as_current=False)
    app.conf.update(broker_connection_retry_on_startup=True, accept_content=["json"], task_serializer="json",
                    **celery_connection(settings))
    return app


def broadcast_reload(app: Any, voices: Sequence[str], *, destination: Sequence[str] | None = None,
                     timeout: float = 3.0) -> dict[str, dict[str, Any]]:
    """Send the reload to the workers; return each answering worker's reply by its node name."""
    replies = app.control.broadcast(RELOAD_COMMAND, arguments={"voices": list(voices)}, reply=True, timeout=timeout,
                                    destination=list(destination) if destination else None)
    out: dict[str, dict[str, Any]] = {}
    for reply in replies or []:
        for node, answer in reply.items():
            out[node] = answer
    return out


def versions_by_node(heartbeats: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Heartbeats (field ``node:pid`` -> info) by node name, the newest per node."""
    out: dict[str, dict[str, Any]] = {}
    for field, info in heartbeats.items():
        node = field.rsplit(":", 1)[0]
        if node not in out or info.get("ts", 0) > out[node].get("ts", 0):
            out[node] = dict(info)
    return out

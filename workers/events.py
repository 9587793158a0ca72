"""Flower sees stream jobs as Celery tasks: the worker sends the task events itself.

Each job is one task, its job id the task's uuid: ``task-received`` and ``task-started`` when its first
segment starts, ``task-succeeded`` or ``task-failed`` when it ends, ``task-revoked`` when a client cancelled
it (Flower shows REVOKED): once, by the worker that finds it cancelled, whether it was still queued (its
segments are skipped; ``task-received`` goes first so Flower has its name) or running (it stops between
segments; ``terminated`` is then true).

The loops never wait for an event: ``_send`` queues it, with its time, and one sender thread with its own broker
connection publishes what has queued up within ``LINGER_S`` of the first as one message (Celery's buffered "task"
group: a list of events, which Celery's event receiver and so Flower read as the events one by one, each with the
time it was sent), in the order they were sent: a busy worker sends a few messages a second, not one per job.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

TASK_NAME = "ttsfarm.synthesize"
LINGER_S = 0.1  # events queued this long after the first of a message go with it


class JobEvents:
    def __init__(self, app: Any, hostname: str, *, enabled: bool = True) -> None:
        self.app = app
        self.hostname = hostname
        self.enabled = enabled
        self._lock = threading.Lock()
        self._conn: Any = None
        self._dispatcher: Any = None
        self._started: dict[str, float] = {}
        self._outbox: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._sender: threading.Thread | None = None

    def _send(self, kind: str, **fields: Any) -> None:
        if not self.enabled:
            return
        if self._sender is None:
            with self._lock:
                if self._sender is None:
                    self._sender = threading.Thread(target=self._send_queued, name="ttsfarm-events", daemon=True)
                    self._sender.start()
        self._outbox.put((kind, {**fields, "timestamp": time.time()}))

    def _send_queued(self) -> None:
        """The sender thread: everything queued since its last message, and within ``LINGER_S`` of the first, goes out
        as one (at once on close)."""
        while True:
            item = self._outbox.get()
            batch = [item]
            until = time.monotonic() + LINGER_S
            while item is not None:
                try:
                    item = self._outbox.get(timeout=max(0.0, until - time.monotonic()))
                except queue.Empty:
                    break
                batch.append(item)
            events = [x for x in batch if x is not None]
            if events:
                self._publish(events)
            if batch[-1] is None:
                return

    def _publish(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        try:  # monitoring must never stop the work
            if self._dispatcher is None:
                self._conn = self.app.connection_for_write()
                self._dispatcher = self.app.events.Dispatcher(self._conn, hostname=self.hostname, enabled=True,
                                                              buffer_group={"task"}, buffer_limit=len(events) + 1)
            self._dispatcher.buffer_limit = len(events) + 1  # flushed below, once
            for kind, fields in events:
                self._dispatcher.send(kind, **fields)
            self._dispatcher.flush()
        except Exception as exc:
            log.warning("could not send %d task events: %s", len(events), exc)
            self._reset()

    def _reset(self) -> None:
        try:
            if self._conn is not None:
                self._conn.release()
        except Exception:
            pass
        self._conn = self._dispatcher = None

    def started(self, job_id: str, *, voice: str, lane: str, total: int, text: str) -> None:
        self._started[job_id] = time.time()
        self._received(job_id, voice=voice, lane=lane, total=total, text=text)
        self._send("task-started", uuid=job_id)

    def _received(self, job_id: str, *, voice: str, lane: str, total: int, text: str) -> None:
        kwargs = json.dumps({"voice": voice, "lane": lane, "segments": total}, ensure_ascii=False)
        self._send("task-received", uuid=job_id, name=TASK_NAME, args=json.dumps([text[:80]], ensure_ascii=False),
                   kwargs=kwargs, retries=0, eta=None, expires=None, root_id=job_id, parent_id=None)

    def revoked(self, job_id: str, *, running: bool, voice: str, lane: str, total: int, text: str) -> None:
        """The job was cancelled: ``running`` if a segment of it had started (anywhere) before."""
        if self._started.pop(job_id, None) is None:
            self._received(job_id, voice=voice, lane=lane, total=total, text=text)
        self._send("task-revoked", uuid=job_id, terminated=running, signum=None, expired=False)

    def succeeded(self, job_id: str, result: str) -> None:
        runtime = time.time() - self._started.pop(job_id, time.time())
        self._send("task-succeeded", uuid=job_id, result=result, runtime=runtime)

    def failed(self, job_id: str, code: str, message: str) -> None:
        self._started.pop(job_id, None)
        self._send("task-failed", uuid=job_id, exception=f"{code}: {message}", traceback="")

    def close(self) -> None:
        """Send what is queued, then let the connection go."""
        sender = self._sender
        if sender is not None:
            self._outbox.put(None)
            sender.join(10)
            self._sender = None
        self._reset()

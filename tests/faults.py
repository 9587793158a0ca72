"""Fault injection for the reliability suite: a TCP proxy that can cut a service off and bring it back, and faults
inside a worker's inference loop, installed in its hooks (``workers/context.py`` ``LoopHooks``).

A worker started from the tests' Celery app module (``FAULT_APP``: ``celery -A tests.fault_worker worker``, which
production never imports) with ``TTSFARM_TEST_FAULT=<action>:<marker>`` in its environment (``worker_faults``)
fails so: ``raise:<marker>`` raises in any segment whose text contains the marker; ``exit:<marker>`` kills the
process there (a crash mid-batch); ``exitwindow:<marker>`` kills it once a segment holding the marker has
published a window and has more to make (a crash mid-segment).
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from bench.processes import free_port

FAULT_ENV = "TTSFARM_TEST_FAULT"
FAULT_APP = "tests.fault_worker"  # the Celery app module of a worker that injects faults


def worker_faults(spec: str) -> dict[str, str]:
    """The environment of a worker started from ``FAULT_APP`` that injects the fault ``spec`` (``<action>:<marker>``)."""
    return {FAULT_ENV: spec}


class LoopFaults:
    """The fault ``<action>:<marker>``, as the loop's hooks call it."""

    def __init__(self, spec: str) -> None:
        self.action, _, self.marker = spec.partition(":")

    def before_segment(self, job: Any) -> None:
        if not self.marker or self.marker not in job.text or self.action == "exitwindow":
            return
        if self.action == "exit":
            os._exit(70)
        raise RuntimeError(f"injected fault on {self.marker!r}")

    def after_window(self, live: list[Any]) -> None:
        if self.action != "exitwindow" or not self.marker:
            return
        if any(self.marker in (s.entry.job.text if s.entry.job else "") and s.progress.pieces for s in live):
            os._exit(70)


def install(hooks: Any) -> None:
    """Add the fault named by ``TTSFARM_TEST_FAULT`` in this worker's environment to a loop's ``hooks``."""
    faults = LoopFaults(os.environ.get(FAULT_ENV, ""))
    hooks.before_segment.append(faults.before_segment)
    hooks.after_window.append(faults.after_window)


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target. ``down()`` closes the listener and every open connection
    (clients see refused connections), ``up()`` listens again on the same port."""

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target = ("127.0.0.1", target_port)
        self.port = port or free_port()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._stop = threading.Event()

    def up(self) -> TcpProxy:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()
        return self

    def down(self) -> None:
        with self._lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self._conns.clear()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

"""The gateway served inside a test: uvicorn on a thread, on a free port.

Production runs ``ttsfarm gateway`` (``gateway.app.main``) as its own process.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Self


class BackgroundServer:
    """``with BackgroundServer(app) as server: httpx.get(server.url + "/healthz")``."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int | None = None, log_level: str = "warning") -> None:
        """``port``: default a free one, chosen by the system when the server binds (known once started)."""
        import uvicorn

        self.host = host
        self.port = port or 0
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=self.port, log_level=log_level, lifespan="on",
                                                    ws_ping_interval=20.0))
        self.thread = threading.Thread(target=self.server.run, name="gateway-background", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> Self:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the gateway did not start on {self.url}")
            time.sleep(0.02)
        if not self.port:
            self.port = int(self.server.servers[0].sockets[0].getsockname()[1])
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

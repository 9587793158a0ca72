"""The HTTP gateway (FastAPI + uvicorn) over the farm's Redis streams. Needs the ``gateway`` extra.

Importing ``producer`` never imports this package: FastAPI loads only where the gateway runs.
"""

from __future__ import annotations

from gateway.app import create_app, main
from producer.wire.settings import GatewaySettings

__all__ = ["GatewaySettings", "create_app", "main"]

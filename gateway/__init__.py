"""The HTTP gateway (FastAPI + uvicorn) over the farm's Redis streams. Needs the ``gateway`` extra.

A front end of its own: it uses the farm's wire (``wire``) and the SDK (``producer.aio``), never
``workers/``; what it may take from ``producer/`` is ``tests/test_structure.py``'s ``FRONT_END_MAY_IMPORT``.
Of ``producer/`` only the CLI's ``ttsfarm gateway`` imports it, lazily: FastAPI loads only where it runs.
Its modules import each other by module path (``gateway.streams``), never through this ``__init__``.
"""

from __future__ import annotations

from gateway.app import create_app, main
from wire.settings import GatewaySettings

__all__ = ["GatewaySettings", "create_app", "main"]

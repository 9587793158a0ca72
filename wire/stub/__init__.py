"""An in-process broker with the farm's semantics (``StubBroker``): unit tests, and the farm in one process
(``memory://NAME`` as ``redis.url``). ``broker`` holds the steps, ``consumer`` the queue reading, ``store`` the data."""

from wire.stub.broker import StubBroker
from wire.stub.store import Store

__all__ = ["Store", "StubBroker"]

"""The Celery app module of a fault-injected worker: ``celery -A tests.fault_worker worker`` runs the farm's
worker (``workers.app``) with the fault named by ``TTSFARM_TEST_FAULT`` added to its loops' hooks
(``tests/faults.py``). Production starts ``workers.app``, which never imports this module.
"""

from __future__ import annotations

from typing import Any

from tests.faults import install
from workers.app import app
from workers.step import farm_created

__all__ = ["app"]


@farm_created.connect
def _install_faults(sender: Any, **_: Any) -> None:
    install(sender.hooks)

"""The consumer bootstep: runs a ``FarmWorker`` inside an ordinary Celery worker.

Celery starts it with the consumer and stops it on warm shutdown: SIGTERM lets the batch in flight finish and be
acked before the process exits. A broker reconnect (Celery restarts its consumer: a Redis failover, a Sentinel
lost) leaves the farm running: its loops have their own connection, which follows the failover by itself, and
stopping them would idle the worker for as long as Celery takes to reconnect (34 s measured with one Sentinel
killed: docs/RELIABILITY.md).

``farm_created`` is sent once, with the new ``FarmWorker`` as sender, before its loops start: a receiver may add
to ``farm.hooks`` (the tests' fault injection does, from ``tests/fault_worker.py``). Production connects nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps
from celery.bootsteps import RUN
from celery.utils.dispatch import Signal

log = logging.getLogger(__name__)

farm_created = Signal(name="farm_created")


class StreamConsumerStep(bootsteps.StartStopStep):
    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.farm: Any = None

    def start(self, c: Any) -> None:
        if self.farm is not None and not self.farm.stopping.is_set():
            return
        from workers.events import JobEvents
        from workers.farm import FarmWorker
        from workers.metrics import WorkerMetrics

        settings = c.app.conf.ttsfarm_settings
        events = JobEvents(c.app, c.hostname, enabled=True)
        if self.farm is None:
            metrics = WorkerMetrics.from_settings(settings.worker, c.app.conf.get("ttsfarm_environ") or {})
            self.farm = FarmWorker(settings, hostname=c.hostname, events=events, metrics=metrics)
            farm_created.send(sender=self.farm)
        else:
            self.farm.events = events
        c.ttsfarm_farm = self.farm  # for the remote control commands (workers.control)
        log.info("ttsfarm stream consumer starting on %s", c.hostname)
        self.farm.start()

    def stop(self, c: Any) -> None:
        if c.blueprint.state == RUN:  # Celery restarting its consumer after a lost broker connection
            log.info("ttsfarm stream consumer keeps running while Celery reconnects to the broker")
            return
        if self.farm is not None:
            log.info("ttsfarm stream consumer stopping: finishing the batch in flight")
            self.farm.stop()

    def shutdown(self, c: Any) -> None:
        if self.farm is not None:
            self.farm.stop()

"""The Celery application. Start workers with the ordinary command, so Celery and Flower see them:

    celery -A workers.app worker --loglevel=INFO --pool=solo -E

A consumer bootstep runs the farm's inference loop inside the worker (``workers.step``). Settings are
read once here, from ``configs/`` and ``TTSFARM_*`` environment variables: this module is the entry point.
"""

from __future__ import annotations

import os

from celery import Celery

from wire.settings import load_settings
from wire.tasks import PING, celery_connection
from workers.step import StreamConsumerStep

settings = load_settings(env=os.environ)

app = Celery("ttsfarm")
app.conf.update(
    **celery_connection(settings),
    worker_send_task_events=True,
    task_send_sent_event=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
)
app.conf.ttsfarm_settings = settings
# What later reads the environment (a voice reload reads the settings again, the metrics their folder) gets
# it from here: only the farm's own variables, never the process's credentials.
app.conf.ttsfarm_environ = {k: v for k, v in os.environ.items() if k.startswith("TTSFARM_") or k == "PROMETHEUS_MULTIPROC_DIR"}
app.steps["consumer"].add(StreamConsumerStep)


@app.task(name=PING)
def ping() -> str:
    """A trivial task: proves the Celery side of a worker answers."""
    return "pong"

import workers.assembly  # noqa: E402,F401  (registers ttsfarm.measure_chapter / assemble_chapter / write_book_files)
import workers.book_file  # noqa: E402,F401  (registers ttsfarm.assemble_book_file)
import workers.control  # noqa: E402,F401  (registers the ttsfarm_reload_voices remote control command)

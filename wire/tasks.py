"""The wire's Celery tasks: their names, and a sender that only sends them.

The book runner (``books.handle``) sends the assembly tasks; workers register them under these names
(``workers.assembly``, ``workers.book_file``) on the app ``workers.app`` configures. The sender is configured
like that app (same broker, same key prefix); Celery is imported only when a sender is made.
"""

from __future__ import annotations

from typing import Any

from wire.redis.connect import SentinelUrl, celery_ssl, celery_transport_options, is_sentinel
from wire.settings import Settings

MEASURE_CHAPTER = "ttsfarm.measure_chapter"
ASSEMBLE_CHAPTER = "ttsfarm.assemble_chapter"
WRITE_BOOK_FILES = "ttsfarm.write_book_files"
ASSEMBLE_BOOK_FILE = "ttsfarm.assemble_book_file"
PING = "ttsfarm.ping"

# What the book runner and the assembly tasks agree on.
CHAPTER_FORMATS = ("flac", "ogg", "mp3", "wav")  # what a chapter file may be (the runner checks it, the task encodes it)
REPLY_TTL_S = 3600  # a task's reply list lives this long
OUTPUT_MARKER = ".ttsfarm-book-output"  # workers write chapters only into a local folder that holds it
LOUDNESS_FLOOR_DB = -70.0  # measure_chapter's loudness histogram: absolute gate; blocks below it are silence
LOUDNESS_STEP_DB = 0.25  # ... and its bin width


def celery_connection(settings: Settings) -> dict[str, Any]:
    """The broker configuration every Celery app of the farm shares (the workers', the senders', the broadcasts'):
    the farm's Redis or Sentinel group (``redis_connect``) and key prefix. A Sentinel group's master name goes to
    the result backend's options too, for a deployment that adds a ``sentinel://`` result backend."""
    r = settings.redis
    sentinel = celery_transport_options(r.url, r.master_name, r.sentinel_password)
    conf: dict[str, Any] = {
        "broker_url": SentinelUrl.parse(r.url).celery_url() if is_sentinel(r.url) else r.url,
        "broker_transport_options": {"global_keyprefix": f"{r.key_prefix}:celery:", **sentinel},
    }
    if sentinel:
        conf["result_backend_transport_options"] = dict(sentinel)
    ssl = celery_ssl(r.url)
    if ssl is not None:
        conf["broker_use_ssl"] = ssl
    return conf


def celery_sender(settings: Settings) -> Any:
    """A Celery app that only sends, configured like ``workers.app`` (same broker and key prefix)."""
    from celery import Celery

    app = Celery("ttsfarm-book", set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"], task_send_sent_event=True,
                    broker_connection_retry_on_startup=True, **celery_connection(settings))
    return app

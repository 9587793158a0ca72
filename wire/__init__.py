"""The farm's wire: everything a producer, a front end and a worker must agree on, in one package.

=================  ===========================================================================================
``keys``           every Redis key (``Keys``), the consumer group, the lanes, the job states, the job id rule
``records``        the job record (``SegmentJob``), a job's ``Submission``, chunk and final records, word timings,
                   the dead-letter record: each built and parsed here and nowhere else
``status``         ``JobStatus``: a job's status record, the one reader of the status hash
``queue``          what a worker reads off the queue: a stream's ``Head``, a claimed ``Entry``
``lua``            the Lua scripts of the steps: heads, a batch's start, frame claims, pieces, acks, the final record
``lua_admission``  the Lua scripts of a job's admission: submit, the sweep, cancel, text appended
``broker``         ``Broker``, the seam where another backend goes: every step the farm takes (the SDK's
                   sans-IO producing steps, the workers' blocking consuming and results steps, admin steps)
``redis_broker``   ``RedisBroker``: those steps on Redis (with ``redis_consumer``: the only code that speaks Redis)
``sharded``        ``ShardedBroker``: a ``Broker`` over one broker per shard (``redis.shards``), each job on the shard
                   its id names; ``broker_from_settings`` builds the farm's broker (with ``sharded_consumer``)
``admission``      just-in-time admission: a listener's segments enter the streams a little ahead of playback
``backlog``        the backpressure arithmetic around ``lua_admission.ADMIT``
``tasks``          Celery task names and the sender the book runner uses
``storage``        where full outputs go (``storage_s3`` for S3): workers write, the SDK and front ends read
``storage_keys``   the key rule every storage backend follows (``safe_key``)
``heartbeats``     the workers' heartbeat records, read for the status screen, reloads and front ends
``snapshot``       the queue snapshot: backlog, each bucket stream's lag and pending, dead letters, in one read
``control``        the sending side of the voice-reload broadcast (``workers.control`` is the receiving side)
``settings``       the farm's settings sections and the one loader of every section
``errors``         the farm's errors and the registry of every stable error code
=================  ===========================================================================================

Who may import whom: ``pipeline/`` <- ``producer/`` (this wire, the SDK) <- front ends; ``workers/`` -> this wire.
Nothing here imports ``workers/`` or a front end; ``tests/test_structure.py`` checks it.

Adding a front end (gRPC, a message-queue bridge): make a top-level package like ``gateway/`` that takes a
``Settings`` from ``settings.load_settings`` (add its section to ``settings.SECTIONS`` if it needs one),
submits and follows jobs with the SDK (``producer.Client`` / ``producer.aio.AsyncClient``), reads stored
outputs with ``storage.storage_from_settings`` and the workers' state with the SDK's ``workers()`` (and
``heartbeats.serving``), catches ``errors.BrokerError`` (never the broker client's own classes), and answers
with the codes of ``errors`` (declare any new code there, once). It never imports ``workers/``: what it needs
from the workers belongs here. What else of ``producer/`` it may use is ``tests/test_structure.py``'s
``FRONT_END_MAY_IMPORT`` (the SDK).

Adding a broker: implement ``broker.Broker`` and its ``broker.Consumer`` (the docstrings list every step and how
atomic each must be; ``redis_broker`` is the worked example), keep the records of ``records`` unchanged on the
wire, and name your store's objects after ``keys.Keys``. Hand it to ``Client(connection, settings, broker=...)``
and to the worker process (``workers.farm.FarmWorker`` builds its broker in one place).
"""

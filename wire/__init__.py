"""The farm's wire: everything a client, a front end and a worker must agree on, in one package.

=================  ===========================================================================================
``broker``         the seam, by role: ``JobBroker`` (a client's steps), ``WorkBroker`` (a worker's),
                   ``AdminBroker`` (an operator's), ``BookBroker`` (books'); ``Broker``, all four, is what a backend
                   implements (its docstring says how to add one)
``connect``        the farm's broker from its settings: the one place a broker is built (by ``redis.url``'s scheme)
``redis/``         the brokers on Redis: ``broker`` (every step as one Lua script or command), ``consumer`` (the queue
                   reading), ``lua`` and ``lua_admission`` (the scripts), ``connect`` (a server, or a Sentinel group's
                   master), ``steps`` (its IO steps), ``errors`` (redis-py's errors as the wire's), ``round_trips``
``stub/``          ``StubBroker``: the same steps in memory, for unit tests and one-process farms (``memory://``)
``shards``         ``ShardedBroker``: one broker per shard, each job on the shard its id names (with
                   ``shard_consumer``, a worker's queue reading over every shard)
``keys``           every name in the store (``Keys``), the consumer group, the lanes, the job states, the job id rule
``records``        the job record (``SegmentJob``), a job's ``Submission``, chunk and final records, word timings,
                   the dead-letter record: each built and parsed here and nowhere else
``pieces``         what a worker publishes (``Piece``, its segment's end, a streamed segment's claim) and the replies
``status``         ``JobStatus``: a job's status record, the one reader of the status hash
``queue``          what a worker reads off the queue: a stream's ``Head``, a claimed ``Entry``
``admission``      just-in-time admission: a listener's segments enter the streams a little ahead of playback
``backlog``        the backpressure arithmetic of a submit
``appends``        a job whose text is appended while it plays: what opening, appending and closing write
``tasks``          Celery task names and the sender the book runner uses
``storage/``       where full outputs go: ``local`` (a folder), ``s3``, and the key rule both follow (``keys``)
``heartbeats``     the workers' heartbeat records, read for the status screen, reloads and front ends
``snapshot``       the queue snapshot: backlog, each bucket stream's lag and pending, dead letters, in one read
``control``        the sending side of the voice-reload broadcast (``workers.control`` is the receiving side)
``settings``       the farm's settings sections and the one loader of every section
``errors``         the farm's errors (``BrokerError`` and its kinds among them) and every stable error code
=================  ===========================================================================================

Who may import whom: ``pipeline/`` <- ``wire/`` <- ``producer/`` (the SDK) <- front ends (``gateway/``,
``grpcfront/``, ``books/``, ``bench/``) <- ``cli/``; ``workers/`` -> ``wire/`` and ``pipeline/``. Nothing here imports
``workers/``, the SDK or a front end; ``tests/test_structure.py`` checks it, and that nothing outside ``wire/`` builds
a broker or imports a backend's modules.

Adding a front end (a message-queue bridge, another protocol): make a top-level package like ``gateway/`` that takes
a ``Settings`` from ``settings.load_settings`` (add its section to ``settings.SECTIONS`` if it needs one), submits
and follows jobs with the SDK (``producer.Client`` / ``producer.aio.AsyncClient``), reads stored outputs with
``storage.storage_from_settings`` and the workers' state with the SDK's ``workers()`` (and ``heartbeats.serving``),
catches ``errors.BrokerError`` and the SDK's errors (never a client library's own classes), and answers with the codes
of ``errors`` (declare any new code there, once). It never imports ``workers/``: what it needs from the workers
belongs here. Give ``cli/frontends.py`` a command that imports it inside the command.

Adding a broker: ``broker``'s docstring.
"""

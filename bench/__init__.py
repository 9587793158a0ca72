"""``ttsfarm bench``: the farm's benchmarks, a front end over the SDK like the gateway.

==============  =============================================================================================
``cli``         ``ttsfarm bench [STAGE]``: imports the stage that runs and hands it its options
``run``         the ``load`` stage (the default): phases of load against a farm of its own or a running one
``host``        a GPU worker's host and Redis path on a fake device (its worker: ``workers.bench_app``)
``farm``        the farm against its baselines, in stages; ``scheduling``: FIFO against deadline, one of them
``listeners``   long listeners and short requests on one worker, by scheduling mode; ``conversations``: callers
                taking turns with a voice agent (capacity in conversations), and N first replies at once
``memory``      what one process keeps per call; ``idle``: the first chunk on an idle farm, by stage
``shards``      one worker over 1, 2 and 3 Redis nodes; ``grpc_paths``: gRPC beside the gateway and the SDK
``load``        one load phase: the text mix, open- or closed-loop arrivals, what a streaming client sees
``local``       the machine side: a farm of its own, the workers' RSS and CPU from /proc, a quiet-machine check
``processes``   a private redis-server, worker and front-end processes (the demo and the tests use them too)
``report``      summaries, JSON and plots; ``agreement``: the farm's audio against this process's (the GPU check)
``lab``         the lab's benches, whose figures stay in lab notes: ``python -m bench.lab NAME``
==============  =============================================================================================

It reaches the farm through the SDK (``producer.Client``, ``producer.reader``) and the wire only; it never
imports ``workers/`` (a bench that needs a worker of its own starts one by name: ``celery -A workers.bench_app``).
"""

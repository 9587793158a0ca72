"""``ttsfarm bench``: load and latency benchmarks of a farm, a front end over the SDK like the gateway.

=============  ==============================================================================================
``run``        the command: phases of load against a farm of its own (``local``) or a running one
``load``       one load phase: the text mix, open- or closed-loop arrivals, what a streaming client sees
``local``      the machine side: a farm of its own, the workers' RSS and CPU from /proc, a quiet-machine check
``report``     summaries, JSON and plots
=============  ==============================================================================================

It reaches the farm through the SDK (``producer.Client``, ``producer.reader``) and the wire only; it never
imports ``workers/``.
"""

"""The null engine: a voice with the real English frontend and the real stages' shapes and call pattern, but next
to no model cost, for measuring the host and Redis path of a worker without a device (``ttsfarm bench host``).
How an engine package is laid out: ``pipeline/voices/__init__.py``.

* ``device.py``: ``FakeDevice``, a device made of sleeps: each stage call holds the stage's lock for the time the
  calibrated profile gives for its padded batch (``PROFILES``: ``h200``, calibrated from the GPU check's sweep on
  an H200, docs/GPU.md, and ``none``), and counts how long the device was busy.
* ``stages.py``: ``NullAcoustic``, ``NullVocoder`` and the builder ``STAGE_BUILDERS["null"]``.

It speaks silence: it is served only from a catalogue entry that names it (``engine = "twostage"``, ``source =
"null"``), which no shipped catalogue holds; the bench writes its own catalogue for the worker it starts.
"""

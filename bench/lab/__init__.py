"""The lab's benches: ``python -m bench.lab NAME [ARGS]``. Their figures stay in lab notes (how a setting was chosen,
what a change bought), not in the figures a user reads, which ``ttsfarm bench`` makes.

=============  ==============================================================================================
``storage``    what storing a finished job costs the worker's CPU, per backend (local folder, S3 on moto)
``voices``     real-time factor of each voice at batch 1, 4 and 8; Piper FP32 against INT8
``tune``       CPU tuning: worker processes x intra-op threads, onnxruntime session options, spinning
``streaming``  whole-segment against windowed vocoding, side by side: what ``streaming.windowed`` buys
``zh_voices``  the Mandarin voices side by side: character error rate and speed on the held-out set
``peeks``      what one peek of the queue's heads costs inside Redis, by what it finds, and its parts
=============  ==============================================================================================

Each module has ``add_arguments(parser)`` and ``main(args)``, as a stage of ``ttsfarm bench`` has (``bench.cli``).
"""

from __future__ import annotations

from bench.cli import Stage

LAB: dict[str, Stage] = {
    "storage": Stage("bench.lab.storage", "what storing a finished job costs the worker's CPU, per backend"),
    "voices": Stage("bench.lab.voices", "real-time factor of each voice at batch 1, 4 and 8; Piper FP32 against INT8"),
    "tune": Stage("bench.lab.tune", "CPU tuning: worker processes x intra-op threads, onnxruntime session options"),
    "streaming": Stage("bench.lab.streaming", "whole-segment against windowed vocoding: what streaming.windowed buys"),
    "zh_voices": Stage("bench.lab.zh_voices", "the Mandarin voices side by side: character error rate and speed"),
    "peeks": Stage("bench.lab.peeks", "what one peek of the queue's heads costs inside Redis, by what it finds"),
}

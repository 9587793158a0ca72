"""The farm's client side: submit text, stream its audio, wait for the stored result.

Light on purpose: importing it loads no model runtime (onnxruntime, torch).
"""

from pipeline.errors import InputError, TTSFarmError
from producer.client import Client, Job
from wire.errors import JobError, OverloadedError
from wire.records import Chunk, JobResult, Word

__all__ = ["Chunk", "Client", "InputError", "Job", "JobError", "JobResult", "OverloadedError", "TTSFarmError", "Word"]

"""Pure compute: text -> segments -> phoneme ids -> model -> audio.

No redis, celery or boto3 here, and importing the package loads no model runtime.
"""

from pipeline.errors import InputError, ModelError, TTSFarmError

__all__ = ["InputError", "ModelError", "TTSFarmError"]

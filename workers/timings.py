"""The wire words of a finished segment: its words (``SegmentJob.words``) with their times in its audio.

Computed once per segment from the acoustic stage's durations (``pipeline/timing.py``); the publisher then
hands each chunk the words that end inside it (``records.words_in``), whatever the chunking. Word timings
never fail a job: if they cannot be computed the segment's chunks carry none, and a warning is logged.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from pipeline.timing import word_times
from pipeline.voices.base import Phonemized
from wire.records import SegmentJob

log = logging.getLogger(__name__)


def segment_words(job: SegmentJob, ph: Phonemized | None, durations: np.ndarray | None, *, hop: int, voice_rate: int,
                  model_samples: int) -> list[list[Any]]:
    """``[start, end, char_start, char_end, text, approx, after]`` per word; samples at the job's rate from the
    segment's start. ``model_samples``: the voice's audio of the segment (before resampling and pause)."""
    if not job.words or ph is None:
        return []
    try:
        refs = [(int(w[0]), int(w[1]), int(w[2]), int(w[3])) for w in job.words]
        speech = int(round(model_samples * job.sample_rate / voice_rate))
        times = word_times(refs, job.text, job.lang, ph, durations, hop=hop, voice_rate=voice_rate,
                           out_rate=job.sample_rate, speech_samples=speech)
    except Exception:  # noqa: BLE001 - timings are an extra: the audio goes out without them
        log.warning("job %s segment %d: word timings failed", job.job_id, job.seg, exc_info=True)
        return []
    return [[t.start, t.end, t.char_start, t.char_end, str(w[4]), int(t.approx), *([str(w[5])] if len(w) > 5 else [])]
            for t, w in zip(times, job.words)]

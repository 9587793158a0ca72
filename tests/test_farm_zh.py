"""A Chinese job end to end on the native voice: real redis-server, a real Celery worker batching up to four
segments, the prepared `baker` voice; what streams back is what `ttsfarm say` makes, and it is Mandarin
a recognizer understands (scored on syllables: pipeline.prepare.listening.syllable_error_rate)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from pipeline.audio import from_pcm16, to_pcm16
from pipeline.prepare.intelligibility import transcribe
from pipeline.prepare.listening import syllable_error_rate
from pipeline.synth import Synthesizer, plan
from pipeline.voices.base import SynthesisOptions
from tests.conftest import Farm, FarmSpec

pytestmark = pytest.mark.slow

TEXTS = [  # a polyphone (行), a number (2024 read out), sandhi (很好), and mixed lengths for the batch
    "今天天气很好，我们去公园散步吧。",
    "我在银行工作了三年，每天早上八点上班。",
    "请把这本书还给他。",
    "2024年的春天，他们一起去了北京。",
]


FARM = FarmSpec(baker=True, env={"TTSFARM_QUEUE_MAX_BATCH_CPU": "4"})


def test_default_voice_routes_chinese_to_the_native_voice(farm: Farm) -> None:
    assert {p.voice for p in plan(TEXTS[0], None, farm.settings)} == {"baker"}


@pytest.mark.parametrize("voice", ["baker", None])
def test_chinese_jobs_stream_equal_say_and_are_understood(farm: Farm, voice: str | None) -> None:
    client = farm.client()
    jobs = [client.submit(text, voice=voice, format="wav") for text in TEXTS]  # submitted together: batched
    synth = Synthesizer(farm.settings)
    heard = []
    for text, job in zip(TEXTS, jobs):
        chunks = list(job.stream(timeout=180))
        assert [c.seq for c in chunks] == list(range(len(chunks))) and chunks[-1].last
        streamed = from_pcm16(b"".join(c.pcm for c in chunks))
        result = job.wait(timeout=60)
        path = result.url[len("file://") :]
        stored, rate = sf.read(path, dtype="float32")
        assert rate == 24000 == chunks[0].sample_rate
        np.testing.assert_array_equal(stored, streamed)
        offline = from_pcm16(to_pcm16(synth.synthesize(text, voice, SynthesisOptions()).audio))
        assert len(offline) == len(stored), text
        assert float(np.max(np.abs(offline - stored))) <= 2e-3, text
        heard.append(transcribe(stored, rate, "zh", farm.settings.runtime.cache_dir))
    spoken = [t.replace("2024", "二零二四") for t in TEXTS]
    assert syllable_error_rate(spoken, heard) <= 0.10, heard

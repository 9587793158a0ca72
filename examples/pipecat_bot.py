"""A Pipecat voice bot that speaks through a ttsfarm gateway (``pipecat-ttsfarm``).

    pip install ./integrations/pipecat "pipecat-ai[daily,openai,silero]==1.14.0"
    ttsfarm gateway --port 8000                      # beside a farm: redis-server and `ttsfarm worker`
    export DAILY_ROOM_URL=... OPENAI_API_KEY=...
    python examples/pipecat_bot.py                   # then join the Daily room

    python examples/pipecat_bot.py say "Hello there." out.wav   # no room: the service alone, into a WAV

Each reply is one context on the gateway's agents' socket, spoken as the LLM writes it; the words reach the
transcript as they are heard (TTSTextFrames from the farm's word timings); when the caller talks over the bot, the
interruption cancels the reply's job on the farm.
"""

from __future__ import annotations

import asyncio
import os
import sys
import wave

from pipecat.frames.frames import EndFrame, Frame, TTSAudioRawFrame, TTSSpeakFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from pipecat_ttsfarm import TTSFarmTTSService

GATEWAY = os.environ.get("TTSFARM_GATEWAY_URL", "http://127.0.0.1:8000")


class WavSink(FrameProcessor):
    """Writes the TTS audio that reaches it to a WAV file."""

    def __init__(self, path: str, sample_rate: int) -> None:
        super().__init__()
        self.out = wave.open(path, "wb")
        self.out.setnchannels(1)
        self.out.setsampwidth(2)
        self.out.setframerate(sample_rate)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.out.writeframes(frame.audio)
        if isinstance(frame, EndFrame):
            self.out.close()
        await self.push_frame(frame, direction)


async def say(text: str, path: str) -> None:
    """The service alone: speak ``text`` into ``path`` through a two-processor pipeline."""
    rate = 24000
    worker = PipelineWorker(Pipeline([TTSFarmTTSService(base_url=GATEWAY, voice=os.environ.get("TTSFARM_VOICE")),
                                      WavSink(path, rate)]),
                            params=PipelineParams(audio_out_sample_rate=rate), cancel_on_idle_timeout=False)
    await worker.queue_frames([TTSSpeakFrame(text), EndFrame()])
    runner = WorkerRunner()
    await runner.add_workers(worker)
    await runner.run()


async def bot() -> None:
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair, LLMUserAggregatorParams
    from pipecat.services.openai.llm import OpenAILLMService
    from pipecat.services.openai.stt import OpenAISTTService
    from pipecat.transports.daily.transport import DailyParams, DailyTransport

    transport = DailyTransport(os.environ["DAILY_ROOM_URL"], None, "ttsfarm bot",
                               DailyParams(audio_in_enabled=True, audio_out_enabled=True))
    context = LLMContext([{"role": "system", "content": "You are a helpful voice assistant. Be brief."}])
    aggregators = LLMContextAggregatorPair(context,
                                           user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer()))
    pipeline = Pipeline([transport.input(), OpenAISTTService(), aggregators.user(), OpenAILLMService(),
                         TTSFarmTTSService(base_url=GATEWAY, voice=os.environ.get("TTSFARM_VOICE")),
                         transport.output(), aggregators.assistant()])
    runner = WorkerRunner()
    await runner.add_workers(PipelineWorker(pipeline))
    await runner.run()


if __name__ == "__main__":
    if sys.argv[1:2] == ["say"]:
        asyncio.run(say(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "ttsfarm-pipecat.wav"))
    else:
        asyncio.run(bot())

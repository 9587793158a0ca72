"""ttsfarm for LiveKit Agents: ``TTS(base_url="http://farm-gateway:8000")``, a streaming TTS with word timings over the
farm gateway's agents' socket (``/v1/agents``; the farm's docs/AGENTS.md)."""

from livekit.agents import Plugin

from .log import logger
from .tts import TTS, SynthesizeStream
from .version import __version__

__all__ = ["TTS", "SynthesizeStream", "__version__"]


class TTSFarmPlugin(Plugin):
    def __init__(self) -> None:
        super().__init__(__name__, __version__, __package__, logger)


Plugin.register_plugin(TTSFarmPlugin())

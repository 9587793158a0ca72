"""ttsfarm for Pipecat: ``TTSFarmTTSService(base_url="http://farm-gateway:8000")``, a WebSocket TTS service with word
timestamps over the farm gateway's agents' socket (``/v1/agents``; the farm's docs/AGENTS.md)."""

from pipecat_ttsfarm.tts import TTSFarmTTSService

__all__ = ["TTSFarmTTSService"]
__version__ = "0.1.0"

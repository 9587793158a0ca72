"""The gRPC front end: NVIDIA Riva's TTS protocol (``nvidia.riva.tts.RivaSpeechSynthesis``) over the farm, so Riva
clients (``nvidia-riva-client``'s ``SpeechSynthesisService``, its scripts, the C++ clients) use it unchanged.

It reaches the farm through the asyncio SDK (``producer.aio``) only, like the HTTP gateway. ``ttsfarm grpc`` serves
it (``grpcfront.server.main``); settings ``[grpc]``, ``TTSFARM_GRPC_*``.
"""

from grpcfront.server import BackgroundServer, FrontServer, main

__all__ = ["BackgroundServer", "FrontServer", "main"]

"""A LiveKit voice agent that speaks through a ttsfarm gateway (``livekit-plugins-ttsfarm``).

    pip install ./integrations/livekit "livekit-agents[openai,silero]==1.8.9"
    ttsfarm gateway --port 8000                      # beside a farm: redis-server and `ttsfarm worker`
    export LIVEKIT_URL=... LIVEKIT_API_KEY=... LIVEKIT_API_SECRET=... OPENAI_API_KEY=...
    python examples/livekit_agent.py dev             # then join the room from the LiveKit playground

    python examples/livekit_agent.py say "Hello there." out.wav   # no room: the plugin alone, into a WAV

The farm streams each reply as the LLM writes it (one context per reply on the gateway's agents' socket); when the
caller talks over the agent, LiveKit closes the stream and the farm cancels the reply's job. The transcript the room
shows follows the words as they are heard (``aligned_transcript``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import wave

from livekit.plugins import ttsfarm

GATEWAY = os.environ.get("TTSFARM_GATEWAY_URL", "http://127.0.0.1:8000")


async def say(text: str, path: str) -> None:
    """The plugin alone: stream ``text`` word by word, as an LLM would write it, and write the audio to ``path``."""
    tts = ttsfarm.TTS(base_url=GATEWAY, voice=os.environ.get("TTSFARM_VOICE"))
    try:
        stream = tts.stream()
        for word in text.split(" "):
            stream.push_text(word + " ")
        stream.end_input()
        with wave.open(path, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(tts.sample_rate)
            async for event in stream:
                out.writeframes(event.frame.data.tobytes())
        await stream.aclose()
    finally:
        await tts.aclose()


def run_agent() -> None:
    from livekit import agents
    from livekit.agents import Agent, AgentSession
    from livekit.plugins import openai, silero

    async def entrypoint(ctx: agents.JobContext) -> None:
        await ctx.connect()
        session = AgentSession(
            vad=silero.VAD.load(),
            stt=openai.STT(),
            llm=openai.LLM(model="gpt-4o-mini"),
            tts=ttsfarm.TTS(base_url=GATEWAY, voice=os.environ.get("TTSFARM_VOICE")),
        )
        await session.start(room=ctx.room, agent=Agent(instructions="You are a helpful voice assistant. Be brief."))
        await session.generate_reply(instructions="Greet the caller.")

    agents.cli.run_app(agents.WorkerOptions(entrypoint_fnc=entrypoint))


if __name__ == "__main__":
    if sys.argv[1:2] == ["say"]:
        asyncio.run(say(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "ttsfarm-livekit.wav"))
    else:
        run_agent()

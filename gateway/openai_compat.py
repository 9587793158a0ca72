"""The edges of OpenAI's API that its clients touch besides ``audio/speech``: model names and listings.

``model`` must be one of OpenAI's speech models (every one reads with the farm's voices; ``tts-1-hd`` and
``gpt-4o-mini-tts`` are not a different engine here), the farm's own name ``ttsfarm``, or ``None``;
anything else is a 400 UNKNOWN_MODEL.
``instructions`` (gpt-4o-mini-tts's style prompt) is accepted and ignored; the response says so in its
``X-TTSFarm-Note`` header.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from pipeline.errors import UNKNOWN_MODEL, InputError
from gateway.auth import require_key
from gateway.schemas import ModelList, SpeechVoices, error_responses
from gateway.state import state_of

MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "ttsfarm")
INSTRUCTIONS_NOTE = "instructions are accepted and ignored: the farm's voices take no style prompt"

router = APIRouter(prefix="/v1", tags=["openai"], dependencies=[Depends(require_key)])


def check_model(name: str | None) -> str:
    """``name`` if it is one of :data:`MODELS` (``None`` is ``tts-1``), else UNKNOWN_MODEL."""
    if name is None:
        return MODELS[0]
    if name not in MODELS:
        raise InputError(f"model {name[:60]!r} is not served here; use one of {', '.join(MODELS)}", code=UNKNOWN_MODEL)
    return name


@router.get("/models", response_model=ModelList, responses=error_responses(401))
async def list_models() -> dict[str, Any]:
    """OpenAI's model list: the speech model names ``/v1/audio/speech`` accepts."""
    return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "ttsfarm"} for m in MODELS]}


@router.get("/audio/voices", response_model=SpeechVoices, responses=error_responses(401))
async def list_speech_voices(request: Request) -> dict[str, Any]:
    """Every name ``voice`` may take in ``/v1/audio/speech``: catalogue voices, then aliases (OpenAI's names)."""
    listing = state_of(request).voice_list()
    names = [v["id"] for v in listing["voices"]] + sorted(listing["aliases"])
    return {"voices": names, "default": listing["default"], "aliases": listing["aliases"]}

"""The JSON shapes of the gateway's API, as pydantic models (they make the OpenAPI document at /docs).

Types are strict (no "16000" for a number, no true for a speed) and a wrong one gets the farm's code
(``gateway.errors``: MALFORMED_JOB for the text, BAD_OPTION for an option). Range and vocabulary
checks are the farm's own (``prepare_submission``), so a bad value gets the farm's stable code (EMPTY_TEXT,
UNKNOWN_VOICE, UNSUPPORTED_FORMAT, BAD_OPTION, ...) rather than a generic validation error.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class VoiceRef(BaseModel):
    id: str


class SpeechRequest(BaseModel):
    """OpenAI's ``audio/speech`` request. Unknown extra fields are ignored."""

    model_config = ConfigDict(strict=True)

    model: str | None = Field("tts-1", description="tts-1 | tts-1-hd | gpt-4o-mini-tts | ttsfarm (all read with "
                              "the farm's voices); any other name is a 400 UNKNOWN_MODEL.", examples=["tts-1"])
    input: str = Field(..., description="The text to speak, at most max_input_chars (4096) characters.",
                       examples=["Hello from the farm.", "今天天气很好。"])
    voice: str | VoiceRef | None = Field(
        None, description="A catalogue voice (GET /v1/voices), an alias such as OpenAI's 'alloy', or {\"id\": ...}; "
                          "default: the catalogue's default voice.", examples=["joe", "alloy"])
    response_format: str = Field(
        "wav", description="wav | pcm | mp3 | opus (Ogg Opus; ogg too) | aac (ADTS), all streamed as made, one "
                           "container per response | flac (sent once complete).",
        examples=["wav", "pcm", "mp3", "opus", "aac", "flac"])
    speed: float = Field(1.0, description="0.25 to 4.0", examples=[1.0, 1.5])
    instructions: str | None = Field(None, description="Accepted and ignored (the X-TTSFarm-Note header says so).")
    sample_rate: int | None = Field(None, description="Output rate (ttsfarm extension); default: the voice's own, "
                                    "24000 for pcm. Opus raises it to the next Opus rate.")
    bitrate: int | None = Field(None, description="bit/s for mp3, opus, aac (ttsfarm extension); default: the codec's.")
    lexicon: dict[str, str] | None = Field(None, description="Pronunciations (ttsfarm extension): word -> pinyin "
                                           "with tones ('chong2 qing4') or phonemes ('[[ŋwˈɪn]]' or plain IPA).")
    stream_format: str | None = Field(
        None, description="'audio' (default): the audio bytes; 'sse': OpenAI-style speech.audio.delta events "
                          "(wav and pcm only).")


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(..., description="The text to speak (Chinese, English or mixed).",
                      examples=["今天天气很好。Hello from the farm."])
    voice: str | None = Field(None, description="A catalogue voice or alias; default: the catalogue's default.",
                              examples=["default", "kumo"])
    format: str = Field("wav", description="Stored output format: wav | flac | ogg (opus = ogg) | mp3 | aac | pcm.",
                        examples=["wav", "ogg", "mp3"])
    sample_rate: int | None = Field(None, description="Output rate; default: the voice's own rate.")
    bitrate: int | None = Field(None, description="bit/s of a lossy format (mp3, ogg, aac); default: the codec's.")
    lexicon: dict[str, str] | None = Field(None, description="Pronunciations: word -> pinyin with tones "
                                           "('chong2 qing4') or phonemes.")
    ssml: bool | None = Field(None, description="Read text as SSML (a text starting with <speak> is SSML anyway).")
    lane: str = Field("interactive", description="interactive | bulk")
    speed: float | None = Field(None, description="0.25 to 4.0; shorthand for options.speed")
    options: dict[str, float | None] | None = Field(None, description="speed, noise_scale, noise_w")
    deadline_s: float | None = Field(None, description="Give up on the job after this many seconds.")


class ModelInfo(BaseModel):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: str
    data: list[ModelInfo]


class SpeechVoices(BaseModel):
    voices: list[str]
    default: str
    aliases: dict[str, str]


class JobLinks(BaseModel):
    self: str
    audio: str
    events: str
    stream: str
    captions: str


class JobCreated(BaseModel):
    id: str
    state: str
    segments: int
    voice: str
    format: str
    sample_rate: int
    links: JobLinks


class ErrorDetail(BaseModel):
    code: str
    message: str


class JobStatus(BaseModel):
    id: str
    state: str = Field(..., description="queued | running | done | failed | cancelled | expired")
    segments: int
    done: int
    voice: str | None = None
    format: str | None = None
    sample_rate: int | None = None
    lane: str | None = None
    created: float | None = None
    started: float | None = None
    first_chunk: float | None = None
    finished: float | None = None
    duration_s: float | None = None
    est_seconds: float | None = None
    error: ErrorDetail | None = None
    links: JobLinks


class Cancelled(BaseModel):
    id: str
    cancelled: bool = Field(..., description="false when the job had already ended")
    state: str


class VoiceInfo(BaseModel):
    id: str
    engine: str
    languages: list[str]
    sample_rate: int
    default: bool


class VoiceList(BaseModel):
    voices: list[VoiceInfo]
    default: str
    aliases: dict[str, str]


class Health(BaseModel):
    ok: bool
    redis: bool
    workers: int


class ErrorResponse(BaseModel):
    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries documenting the error body for some statuses."""
    text = {400: "Bad input (stable code)", 401: "Missing or wrong API key", 404: "Unknown job",
            409: "The job is not done (or was cancelled)", 429: "Overloaded: retry later",
            503: "No worker is serving (NO_WORKERS) or Redis is unreachable", 504: "No audio in time"}
    return {s: {"model": ErrorResponse, "description": text.get(s, "Error")} for s in statuses}

"""The gateway's deploy-time settings: a frozen dataclass read once from ``TTSFARM_GATEWAY_*``.

Kept apart from ``pipeline.settings`` for now; it is meant to fold into the typed settings as a
``[gateway]`` section later. Everything the farm itself needs (Redis, queues, storage, the voice
catalogue) still comes from ``pipeline.settings.Settings``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from pipeline.errors import BAD_OPTION, InputError

# OpenAI's built-in voice names. An OpenAI client sends one of these; by default each reads with the
# catalogue's default voice, so unmodified clients work. Set TTSFARM_GATEWAY_VOICE_ALIASES to change it.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
                 "marin", "cedar")


@dataclass(frozen=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    cors: tuple[str, ...] = ()  # allowed origins; empty: no CORS headers; ("*",) for any
    # alias -> catalogue voice; "" as the target means the catalogue's default voice
    voice_aliases: Mapping[str, str] = field(default_factory=lambda: {name: "" for name in OPENAI_VOICES})
    max_input_chars: int = 4096  # /v1/audio/speech, as OpenAI's API; /v1/jobs uses frontend.max_text_chars
    worker_fresh_s: float = 10.0  # a worker counts as alive if its heartbeat is this recent and says serving
    first_chunk_timeout_s: float = 60.0  # /v1/audio/speech answers 504 if no audio came by then
    job_timeout_s: float = 900.0  # longest a stream or a wait follows one job
    keepalive_s: float = 15.0  # SSE comment / idle interval on live streams
    pcm_sample_rate: int = 24000  # /v1/audio/speech response_format=pcm, as OpenAI's (24 kHz mono s16le)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GatewaySettings:
        """Read ``TTSFARM_GATEWAY_<FIELD>`` from ``env``; lists are comma-separated, aliases ``a=b,c=d``."""
        values: dict[str, object] = {}
        defaults = cls()
        for f in fields(cls):
            raw = env.get(f"TTSFARM_GATEWAY_{f.name.upper()}")
            if raw is None:
                continue
            default = getattr(defaults, f.name)
            try:
                values[f.name] = _parse(raw, default)
            except ValueError:
                raise InputError(f"setting TTSFARM_GATEWAY_{f.name.upper()}: cannot read {raw!r}", code=BAD_OPTION) from None
        return cls(**values)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if not (0 < self.port < 65536):
            raise InputError(f"gateway port must be 1..65535, not {self.port}", code=BAD_OPTION)
        if any(not k for k in self.api_keys):
            raise InputError("gateway api_keys must not contain an empty key", code=BAD_OPTION)


def _parse(raw: str, default: object) -> object:
    if isinstance(default, bool):
        if raw.strip().lower() not in ("1", "0", "true", "false", "yes", "no"):
            raise ValueError(raw)
        return raw.strip().lower() in ("1", "true", "yes")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, tuple):
        return tuple(item.strip() for item in raw.split(",") if item.strip())
    if isinstance(default, Mapping):
        pairs = [item.split("=", 1) for item in raw.split(",") if item.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ValueError(raw)
        return {a.strip().lower(): b.strip() for a, b in pairs}
    return raw

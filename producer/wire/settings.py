"""The farm's typed settings and the one loader that reads every section.

``load_settings()`` reads ``configs/settings.toml`` and ``configs/voices.toml`` (or the folder named by
``config_dir`` or ``TTSFARM_CONFIG_DIR``) and applies ``TTSFARM_<SECTION>_<KEY>`` overrides from the mapping
it is given. Only entry points (the CLI's ``main``, the Celery app module, the gateway's app factory,
scripts) pass ``os.environ``; everything else takes a ``Settings`` (or one of its sections) as an argument.

Sections: the compute package's own (``frontend``, ``runtime``, ``quality_gate``, ``streaming`` and the voice
catalogue, from ``pipeline.settings``) and the farm's, here: ``redis``, ``queue``, ``storage``, ``worker`` and
``gateway`` (the HTTP front end; a new front end adds its section here and to ``SECTIONS``).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, InputError
from pipeline.settings import CONFIG_DIR, PIPELINE_SECTIONS, Catalogue, PipelineSettings, parse_catalogue


@dataclass(frozen=True)
class RedisSettings:
    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "ttsfarm"
    socket_timeout_s: float = 10.0


@dataclass(frozen=True)
class QueueSettings:
    bucket_edges_s: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0)
    window_ms: int = 200
    max_batch_cpu: int = 1
    max_batch_cuda: int = 8
    tolerance: float = 0.10
    tolerance_max: float = 0.35
    bulk_aging_ms: int = 3000
    interactive_streak: int = 4
    chunk_ms: int = 500
    results_maxlen: int = 4000
    job_ttl_s: int = 86400
    inference_threads: int = 0  # loops per worker process; 0: one per core on CPU (+ the reserved), six on CUDA
    interactive_loops: int = 1  # of those loops, how many take interactive work only (see docs/BENCHMARKS.md)
    bulk_nice: int = 19  # OS nice of background batches (bulk; callers' later segments), on a helper thread; 0: off
    interactive_loop_threads: int = 0  # intra-op threads of the reserved loops' own session; 0: the usable cores
    max_deliveries: int = 5
    claim_idle_ms: int = 30_000
    max_backlog_interactive_segments: int = 2000
    max_backlog_interactive_seconds: float = 3600.0
    max_backlog_bulk_segments: int = 200_000
    max_backlog_bulk_seconds: float = 720_000.0
    admission_horizon_s: float = 4.0  # an interactive job's audio admitted to the streams ahead of playback; 0: all at once
    admission_idle_ahead: int = 3  # with nothing else queued, a job runs this many segments ahead
    admission_sweep_ms: int = 250  # how often each worker admits segments that fell due between publishes

    @property
    def n_buckets(self) -> int:
        """Length buckets per lane: one more than the edges."""
        return len(self.bucket_edges_s) + 1


@dataclass(frozen=True)
class StorageSettings:
    backend: str = "auto"
    local_dir: str = "./out/storage"
    prefix: str = "ttsfarm"
    s3_bucket: str = ""
    s3_endpoint_url: str = ""
    s3_region: str = "us-east-1"
    multipart_threshold_mb: int = 8
    multipart_chunk_mb: int = 8
    s3_connect_timeout_s: float = 5.0
    s3_read_timeout_s: float = 60.0
    s3_max_attempts: int = 3


@dataclass(frozen=True)
class WorkerSettings:
    name: str = ""
    metrics_port: int = 0
    metrics_host: str = "0.0.0.0"  # the metrics endpoint's bind address
    hooks: str = ""  # "module:function" called once at worker start with the loop's hooks (workers/context.py); tests only


@dataclass(frozen=True)
class SchedulingSettings:
    """Which unit a worker loop runs next (workers/schedule.py). ``deadline``: earliest deadline first over acoustic
    passes and vocoder windows, by each job's playback clock; ``fifo``: batches in arrival order by lane, a batch's
    windows interleaved (and interactive work between a background batch's windows), as before issue 17."""

    mode: str = "deadline"  # deadline | fifo
    first_chunk_target_ms: int = 100  # a new interactive job's first window is due this long after its arrival
    bulk_deadline_s: float = 20.0  # bulk (book) work is due this long after its arrival (or at the job's deadline)
    play_margin_ms: int = 400  # a playing job's next unit is due this long before its listener runs dry (its own time);
    # more than streaming.first_window_ms, so a caller's second window follows its small first one at once
    max_open: int = 8  # segments a loop holds with windows still to make; past it, it claims nothing new
    risk_slack_ms: int = 500  # a held job whose listener runs dry within this counts as at risk of an underrun

    def __post_init__(self) -> None:
        if self.mode not in ("deadline", "fifo"):
            raise InputError(f"setting scheduling.mode must be deadline or fifo, not {self.mode!r}", code=BAD_OPTION)


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
    def parse_env(cls, name: str, raw: str) -> object:
        """One ``TTSFARM_GATEWAY_<FIELD>`` value: lists are comma-separated, aliases ``a=b,c=d``."""
        try:
            return _parse(raw, getattr(cls(), name))
        except ValueError:
            raise InputError(f"setting TTSFARM_GATEWAY_{name.upper()}: cannot read {raw!r}", code=BAD_OPTION) from None

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


@dataclass(frozen=True)
class Settings(PipelineSettings):
    """Every section: the compute package's and the farm's."""

    redis: RedisSettings = field(default_factory=RedisSettings)
    queue: QueueSettings = field(default_factory=QueueSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)


SECTIONS: dict[str, type] = {
    **PIPELINE_SECTIONS,
    "redis": RedisSettings,
    "queue": QueueSettings,
    "storage": StorageSettings,
    "worker": WorkerSettings,
    "scheduling": SchedulingSettings,
    "gateway": GatewaySettings,
}


def _coerce(section: str, key: str, value: Any, target: Any, annotation: str = "") -> Any:
    """Convert a TOML or environment value to the type of the field's default (a tuple's items: strings where
    the field is annotated ``tuple[str, ...]``, numbers otherwise)."""
    if isinstance(value, str) and not isinstance(target, str):
        try:
            value = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            raise InputError(f"setting {section}.{key}: cannot read {value!r}", code=BAD_OPTION) from None
    if isinstance(target, bool):
        if not isinstance(value, bool):
            raise InputError(f"setting {section}.{key} must be true or false", code=BAD_OPTION)
        return value
    if isinstance(target, tuple):
        return tuple(str(v) for v in value) if annotation.startswith("tuple[str") else tuple(float(v) for v in value)
    if isinstance(target, float) and isinstance(value, int):
        return float(value)
    if not isinstance(value, type(target)):
        raise InputError(f"setting {section}.{key} must be {type(target).__name__}", code=BAD_OPTION)
    return value


def _build_section(name: str, cls: type, data: Mapping[str, Any]) -> Any:
    defaults = cls()
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise InputError(f"unknown setting(s) in [{name}]: {', '.join(sorted(unknown))}", code=BAD_OPTION)
    annotations = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    return cls(**{k: _coerce(name, k, v, getattr(defaults, k), annotations[k]) for k, v in data.items()})


def _env_overrides(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``TTSFARM_<SECTION>_<KEY>`` values by section; a section with its own ``parse_env`` (the gateway's
    comma-separated lists) reads its values itself, the others as TOML values."""
    out: dict[str, dict[str, Any]] = {}
    for var, value in env.items():
        if not var.startswith("TTSFARM_"):
            continue
        rest = var[len("TTSFARM_") :].lower()
        for section in sorted(SECTIONS, key=len, reverse=True):
            if rest.startswith(section + "_"):
                key, cls = rest[len(section) + 1 :], SECTIONS[section]
                known = {f.name for f in dataclasses.fields(cls)}
                parse = getattr(cls, "parse_env", None)
                out.setdefault(section, {})[key] = parse(key, value) if parse is not None and key in known else value
                break
    return out


def load_settings(
    config_dir: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Read the settings files and apply ``TTSFARM_*`` overrides from ``env``.

    The entry point passes ``os.environ``; ``TTSFARM_CONFIG_DIR`` in it names another configs folder.
    """
    env = env or {}
    folder = Path(config_dir or env.get("TTSFARM_CONFIG_DIR") or CONFIG_DIR)
    raw: dict[str, Any] = {}
    settings_file = folder / "settings.toml"
    if settings_file.exists():
        raw = tomllib.loads(settings_file.read_text(encoding="utf-8"))
    for section, values in _env_overrides(env).items():
        raw.setdefault(section, {}).update(values)
    sections = {name: _build_section(name, cls, raw.get(name, {})) for name, cls in SECTIONS.items()}
    voices_file = folder / "voices.toml"
    catalogue = parse_catalogue(tomllib.loads(voices_file.read_text(encoding="utf-8"))) if voices_file.exists() else Catalogue({}, "")
    return Settings(catalogue=catalogue, **sections)


def settings_from_environment(config_dir: str | Path | None = None) -> Settings:
    """``load_settings`` with this process's ``TTSFARM_*`` overrides: what an entry point loads, and what the
    SDK's ``from_url`` uses when it is given no settings (so it honours the same overrides as the CLI)."""
    return load_settings(config_dir, env=os.environ)

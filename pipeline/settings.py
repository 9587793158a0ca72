"""Typed settings, loaded once by an entry point and passed down.

``load_settings()`` reads ``configs/settings.toml`` and ``configs/voices.toml`` (or the folder named by
``config_dir``) and applies ``TTSFARM_<SECTION>_<KEY>`` overrides from the mapping it is given. Library
code takes a ``Settings`` (or one of its parts) as an argument and never reads the environment itself.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, InputError

# The repository's configs/ folder, installed as the package ``ttsfarm_configs`` (pyproject.toml): a wheel carries
# it, and an editable install maps the name back to the folder, so both read the same files.


def _config_dir() -> Path:
    """The shipped configs: the installed ``ttsfarm_configs`` package, or the checkout's configs/ when the
    sources run without being installed (PYTHONPATH pointing at a checkout, as the GPU check does)."""
    try:
        return Path(str(resources.files("ttsfarm_configs")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "configs"


CONFIG_DIR = _config_dir()


@dataclass(frozen=True)
class FrontendSettings:
    max_text_chars: int = 200_000
    max_segment_chars: int = 220
    max_segment_chars_zh: int = 60
    first_segment_chars: int = 60
    first_segment_chars_zh: int = 16
    sentence_pause_s: float = 0.30
    phrase_pause_s: float = 0.12
    paragraph_pause_s: float = 0.60


@dataclass(frozen=True)
class RuntimeSettings:
    device: str = "auto"
    cpu_fallback: bool = True
    intra_op_threads: int = 0
    inter_op_threads: int = 1
    graph_optimization: str = "all"
    cpu_mem_arena: bool = True
    allow_spinning: bool = True
    cuda_device_id: int = 0
    cuda_mem_limit_mb: int = 4096
    cuda_arena_extend_strategy: str = "kSameAsRequested"
    cuda_io_binding: bool = True  # Piper on CUDA: IO binding from reused host staging buffers (pipeline/voices/gpu.py)
    cuda_width_multiple: int = 32  # ... padded phoneme width rounded up to a multiple of this
    cuda_batch_sizes: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)  # ... and the batch up to the next of these
    warmup: bool = True
    model_cache_dir: str = "~/.cache/ttsfarm"
    precision: str = "auto"

    @property
    def cache_dir(self) -> Path:
        return Path(self.model_cache_dir).expanduser()


@dataclass(frozen=True)
class QualityGateSettings:
    max_logmel_l1_db: float = 2.5
    max_length_mismatch: float = 0.0
    require_batch_solo_identical: bool = True
    max_wer_en: float = 0.15  # listening gate (pipeline/listening.py): recognizer round trip on held-out sentences
    max_cer_zh: float = 0.08


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

    @property
    def n_buckets(self) -> int:
        """Length buckets per lane: one more than the edges."""
        return len(self.bucket_edges_s) + 1


@dataclass(frozen=True)
class StreamingSettings:
    """Windowed vocoding of two-stage voices (pipeline/voices/windows.py): a segment's audio streams a window
    at a time. Sizes in milliseconds of audio; measured defaults in docs/BENCHMARKS.md."""

    windowed: bool = True  # false: each segment is vocoded whole and published when it is done
    first_window_ms: int = 300
    window_ms: int = 4000
    first_window_when_queued: bool = False  # the small first window also while other work waits (costs throughput)


@dataclass(frozen=True)
class SchedulingSettings:
    """Which unit a worker loop runs next (workers/schedule.py). ``deadline``: earliest deadline first over acoustic
    passes and vocoder windows, by each job's playback clock; ``fifo``: batches in arrival order by lane, a batch's
    windows interleaved (and interactive work between a background batch's windows), as before issue 17."""

    mode: str = "deadline"  # deadline | fifo
    first_chunk_target_ms: int = 100  # a new interactive job's first window is due this long after its arrival
    bulk_deadline_s: float = 20.0  # bulk (book) work is due this long after its arrival (or at the job's deadline)
    play_margin_ms: int = 200  # a playing job's next unit is due this long before its listener runs dry (its own time)
    max_open: int = 4  # segments a loop holds with windows still to make; past it, it claims nothing new
    risk_slack_ms: int = 500  # a held job whose listener runs dry within this counts as at risk of an underrun

    def __post_init__(self) -> None:
        if self.mode not in ("deadline", "fifo"):
            raise InputError(f"setting scheduling.mode must be deadline or fifo, not {self.mode!r}", code=BAD_OPTION)


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
    fault_inject: str = ""  # the reliability suite's fault injection (workers/loop.py Faults); empty in production


@dataclass(frozen=True)
class VoiceSpec:
    """One catalogue entry. ``options`` holds the engine's own keys (vocab, style, routes, ...).

    Two-stage voices (``engine = "twostage"``) name where their stages come from: ``source`` is the kind
    of model they are prepared from (a key of ``pipeline.prepare.PREPARERS`` and of
    ``pipeline.voices.twostage.STAGE_BUILDERS``, e.g. ``piper``), ``model`` that source model, and
    ``acoustic``/``vocoder`` each stage's model location: ``prepared`` (the file `ttsfarm voices prepare`
    built into the model cache) or a location as for ``model``."""

    name: str
    engine: str
    languages: tuple[str, ...]
    model: str = ""
    source: str = ""
    acoustic: str = ""
    vocoder: str = ""
    precision: str = "fp32"
    max_batch: int = 1
    sample_rate: int = 0
    license: str = ""
    defaults: Mapping[str, float] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Catalogue:
    voices: Mapping[str, VoiceSpec]
    default_voice: str

    def get(self, name: str | None) -> VoiceSpec:
        from pipeline.errors import UNKNOWN_VOICE

        key = name or self.default_voice
        try:
            return self.voices[key]
        except KeyError:
            known = ", ".join(sorted(self.voices))
            raise InputError(f"unknown voice {key!r}; known voices: {known}", code=UNKNOWN_VOICE) from None


@dataclass(frozen=True)
class Settings:
    frontend: FrontendSettings = field(default_factory=FrontendSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    quality_gate: QualityGateSettings = field(default_factory=QualityGateSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    queue: QueueSettings = field(default_factory=QueueSettings)
    streaming: StreamingSettings = field(default_factory=StreamingSettings)
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    catalogue: Catalogue = field(default_factory=lambda: Catalogue({}, "default"))

    def replace(self, **sections: Any) -> Settings:
        """A copy with some fields of some sections changed: ``s.replace(redis={"url": u})``."""
        changed = {name: dataclasses.replace(getattr(self, name), **values) for name, values in sections.items()}
        return dataclasses.replace(self, **changed)


_SECTIONS: dict[str, type] = {
    "frontend": FrontendSettings,
    "runtime": RuntimeSettings,
    "quality_gate": QualityGateSettings,
    "redis": RedisSettings,
    "queue": QueueSettings,
    "streaming": StreamingSettings,
    "scheduling": SchedulingSettings,
    "storage": StorageSettings,
    "worker": WorkerSettings,
}
_VOICE_KEYS = {f.name for f in dataclasses.fields(VoiceSpec)} - {"name", "options"}


def _coerce(section: str, key: str, value: Any, target: Any) -> Any:
    """Convert a TOML or environment value to the type of the field's default."""
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
        return tuple(float(v) for v in value)
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
    return cls(**{k: _coerce(name, k, v, getattr(defaults, k)) for k, v in data.items()})


def _env_overrides(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for var, value in env.items():
        if not var.startswith("TTSFARM_"):
            continue
        rest = var[len("TTSFARM_") :].lower()
        for section in sorted(_SECTIONS, key=len, reverse=True):
            if rest.startswith(section + "_"):
                out.setdefault(section, {})[rest[len(section) + 1 :]] = value
                break
    return out


def parse_catalogue(data: Mapping[str, Any]) -> Catalogue:
    voices: dict[str, VoiceSpec] = {}
    for name, entry in dict(data.get("voices", {})).items():
        entry = dict(entry)
        core = {k: entry.pop(k) for k in list(entry) if k in _VOICE_KEYS}
        core["languages"] = tuple(core.get("languages", ()))
        core["defaults"] = dict(core.get("defaults", {}))
        voices[name] = VoiceSpec(name=name, options=entry, **core)
    default = str(data.get("default_voice", next(iter(voices), "")))
    return Catalogue(voices=voices, default_voice=default)


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
    sections = {name: _build_section(name, cls, raw.get(name, {})) for name, cls in _SECTIONS.items()}
    voices_file = folder / "voices.toml"
    catalogue = parse_catalogue(tomllib.loads(voices_file.read_text(encoding="utf-8"))) if voices_file.exists() else Catalogue({}, "")
    return Settings(catalogue=catalogue, **sections)

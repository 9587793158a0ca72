"""The compute package's typed settings: text processing, the model runtime, the quality gate, windowed
streaming and the voice catalogue.

They are read with the farm's other sections by the one loader, ``producer.wire.settings.load_settings``
(``configs/settings.toml``, ``configs/voices.toml``, ``TTSFARM_<SECTION>_<KEY>`` overrides), once, in an
entry point, and passed down. Code here takes a ``PipelineSettings`` (or one of its parts) as an argument
and never reads the environment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Self

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
class StreamingSettings:
    """Windowed vocoding of two-stage voices (pipeline/voices/windows.py): a segment's audio streams a window
    at a time. Sizes in milliseconds of audio; measured defaults in docs/BENCHMARKS.md."""

    windowed: bool = True  # false: each segment is vocoded whole and published when it is done
    first_window_ms: int = 300
    window_ms: int = 4000
    first_window_when_queued: bool = False  # the small first window also while other work waits (costs throughput)


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


_VOICE_KEYS = {f.name for f in dataclasses.fields(VoiceSpec)} - {"name", "options"}


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


@dataclass(frozen=True)
class PipelineSettings:
    """The compute package's sections: what text processing and the voices need. The farm's settings
    (``producer.wire.settings.Settings``) extend these with Redis, queues, storage, workers and front ends."""

    frontend: FrontendSettings = field(default_factory=FrontendSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    quality_gate: QualityGateSettings = field(default_factory=QualityGateSettings)
    streaming: StreamingSettings = field(default_factory=StreamingSettings)
    catalogue: Catalogue = field(default_factory=lambda: Catalogue({}, "default"))

    def replace(self, **sections: Any) -> Self:
        """A copy with some fields of some sections changed: ``s.replace(runtime={"device": "cpu"})``."""
        changed = {name: dataclasses.replace(getattr(self, name), **values) for name, values in sections.items()}
        return dataclasses.replace(self, **changed)


# The compute package's sections by their TOML name (``[frontend]``, ...), for the one loader.
PIPELINE_SECTIONS: dict[str, type] = {
    "frontend": FrontendSettings,
    "runtime": RuntimeSettings,
    "quality_gate": QualityGateSettings,
    "streaming": StreamingSettings,
}

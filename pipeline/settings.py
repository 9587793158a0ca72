"""The compute package's typed settings: text processing, the model runtime, the quality gate and the voice
catalogue.

They are read with the farm's other sections by the one loader, ``wire.settings.load_settings``
(``configs/settings.toml``, ``configs/voices.toml``, ``TTSFARM_<SECTION>_<KEY>`` overrides), once, in an
entry point, and passed down. Code here takes a ``PipelineSettings`` (or one of its parts) as an argument
and never reads the environment.

Each setting's meaning is the string under its field (an attribute docstring, as Sphinx reads them); the
README's settings table is made from them by ``scripts/settings_table.py``, and a test fails when a field has none.
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
USER_CATALOGUE = "voices.toml"  # in ``runtime.user_dir``: the voices `ttsfarm voices add` added


@dataclass(frozen=True)
class FrontendSettings:
    """Text processing: how a text is cut into segments, and the silence between them."""

    max_text_chars: int = 200_000
    """The longest text one request may hold (characters); a longer one is refused before any work."""
    max_segment_chars: int = 220
    """The longest English segment (characters): sentences, then phrases, are packed into segments up to this."""
    max_segment_chars_zh: int = 60
    """The longest Chinese segment (each Han character counts one)."""
    first_segment_chars: int = 60
    """The longest first segment of an English text: one short phrase, so audio starts early."""
    first_segment_chars_zh: int = 16
    """The longest first segment of a Chinese text."""
    sentence_pause_s: float = 0.30
    """Silence after a sentence (seconds)."""
    phrase_pause_s: float = 0.12
    """Silence after a comma-level break inside a sentence (seconds)."""
    paragraph_pause_s: float = 0.60
    """Silence after a paragraph (seconds)."""


@dataclass(frozen=True)
class RuntimeSettings:
    """The model runtime: where and how onnxruntime runs the voices' sessions."""

    device: str = "auto"
    """Where the models run: ``auto`` (CUDA when onnxruntime has it, else CPU), ``cpu`` or ``cuda``."""
    cpu_fallback: bool = True
    """When CUDA fails to start, serve on CPU instead of stopping."""
    intra_op_threads: int = 0
    """Threads inside one model call (onnxruntime's intra-op pool); 0: onnxruntime decides, and the worker's
    automatic loop layout (``queue.inference_threads`` 0) makes it 1 on CPU."""
    inter_op_threads: int = 1
    """Threads that run independent graph nodes at once (onnxruntime's inter-op pool)."""
    graph_optimization: str = "all"
    """onnxruntime's graph optimization level: ``disable``, ``basic``, ``extended`` or ``all``."""
    cpu_mem_arena: bool = True
    """onnxruntime's CPU memory arena. On, allocation is fast (off cost 13 % of the farm's throughput), but it keeps
    a block for every tensor shape it has seen and never gives one back, and two-stage voices with windowed
    vocoding see new shapes every window: worker RSS grows in steps. Off, memory comes from the C allocator and
    the trim gives part of it back (docs/lab/memory.md, "What did not flatten it")."""
    cpu_mem_pattern: bool = False
    """onnxruntime's memory patterns on CPU sessions (``SessionOptions.enable_mem_pattern``, on by onnxruntime's
    default): for each input shape it plans all of a run's tensors as one block taken from the arena, and the arena
    keeps the largest block any shape ever needed. Off, each tensor takes its own block and blocks are reused across
    shapes: measured on joe with random shapes, the arena stayed at 51 MB instead of growing to 118 MB, at the
    same speed (docs/lab/memory.md). CUDA sessions keep onnxruntime's default (their shapes are
    padded to a few classes)."""
    coalesce_acoustic: bool = True
    """Where a voice's stages run on a device (CUDA; the null voice's fake one), the acoustic calls that the worker's
    loops make at once share one call (``pipeline.voices.coalesce``: a request waits at most for the call in flight).
    Off: each loop's batch is its own call. On CPU each loop keeps its own call either way."""
    coalesce_vocoder: bool = True
    """As ``coalesce_acoustic``, for the vocoder: where the stages run on a device, the windows the loops vocode at
    once share one call (a caller's first windows first). Off: each loop's windows are its own call."""
    cpu_arena_extend_strategy: str = ""
    """``""``: each session keeps its own CPU arena (onnxruntime's default, grown by powers of two).
    ``kSameAsRequested`` or ``kNextPowerOfTwo``: one arena for every session of the process, registered with
    onnxruntime's environment and grown that way (by what a request needs, or by doubling); needs ``cpu_mem_arena``.
    Measured over 10,000 jobs, one arena grown as requested held RSS no flatter than the default (docs/lab/memory.md,
    "Two sources found and fixed")."""
    malloc_trim_every_s: float = 10.0
    """A worker calls glibc's ``malloc_trim(0)`` this often (seconds, workers/allocator.py): memory freed inside
    the C heaps goes back to the OS, so RSS follows what is in use. 0: never."""
    malloc_arena_max: int = 0
    """The most glibc malloc arenas a worker makes (``mallopt(M_ARENA_MAX)`` at its start, workers/allocator.py):
    each thread that allocates may otherwise get an arena of its own (up to 8 per core), each a 64 MB heap that
    keeps what it freed. 0: glibc's default."""
    allow_spinning: bool = True
    """Intra-op threads spin while they wait for work: lower latency, busier cores."""
    cuda_device_id: int = 0
    """The CUDA device the sessions run on."""
    cuda_mem_limit_mb: int = 4096
    """The cap of the CUDA memory arena (MiB)."""
    cuda_arena_extend_strategy: str = "kSameAsRequested"
    """How the CUDA arena grows: ``kSameAsRequested`` or ``kNextPowerOfTwo``."""
    cuda_io_binding: bool = True
    """Piper on CUDA: inputs from reused (pinned) host buffers, outputs bound on the device (pipeline/voices/gpu.py)."""
    cuda_width_multiple: int = 32
    """Piper on CUDA: the padded phoneme width is rounded up to a multiple of this, so few input shapes occur."""
    cuda_batch_sizes: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
    """Piper on CUDA: a batch is padded up to the next of these sizes, so device memory stays flat."""
    warmup: bool = True
    """Run each voice once when it loads, so the first request does not pay for the session's start."""
    model_cache_dir: str = "~/.cache/ttsfarm"
    """Where prepared and assembled models are kept (``ttsfarm voices prepare`` writes there)."""
    user_dir: str = "~/.config/ttsfarm"
    """The user's own voices: ``ttsfarm voices add`` copies a model there and lists it in its ``voices.toml``, which
    is read after the shipped catalogue (never written into the installed package)."""
    precision: str = "auto"
    """``auto``: on CPU the catalogue's precision (INT8 where its quality gate passed), on CUDA FP16 vocoders and
    FP32 acoustic stages; ``fp32``, ``fp16`` or ``int8`` asks for that one everywhere."""

    def __post_init__(self) -> None:
        if self.cpu_arena_extend_strategy not in ("", "kSameAsRequested", "kNextPowerOfTwo"):
            raise InputError("setting runtime.cpu_arena_extend_strategy must be \"\", kSameAsRequested or kNextPowerOfTwo, "
                             f"not {self.cpu_arena_extend_strategy!r}", code=BAD_OPTION)

    @property
    def cache_dir(self) -> Path:
        return Path(self.model_cache_dir).expanduser()

    @property
    def user_catalogue(self) -> Path:
        return Path(self.user_dir).expanduser() / USER_CATALOGUE


@dataclass(frozen=True)
class QualityGateSettings:
    """The quality gates a prepared model must pass to be served: INT8 against FP32, and the listening gate."""

    max_logmel_l1_db: float = 2.5
    """The highest log-mel L1 distance (dB) between INT8 and FP32 audio on 12 held-out sentences (not the
    calibration set); above it the INT8 model is not served."""
    max_length_mismatch: float = 0.0
    """The fraction of those sentences whose INT8 audio may differ in length from FP32."""
    require_batch_solo_identical: bool = True
    """The quantized model must make the same audio for an item in a batch as alone."""
    max_wer_en: float = 0.15
    """The listening gate (pipeline/listening.py): the highest word error rate of whisper tiny.en on
    configs/heldout_en.txt read by an English voice; a voice above it is not routed to by a blend."""
    max_cer_zh: float = 0.08
    """The listening gate for Chinese voices: whisper base's character error rate on configs/heldout_zh.txt
    (above the recognizer's own noise, 4.8 to 6.6 %; below Kokoro's 10 to 12 %)."""
    min_p808_mos: float = 3.0
    """The naturalness gate (pipeline/prepare/naturalness.py): the lowest DNSMOS P.808 MOS, the mean over a voice's
    held-out sentences, of a voice that is served by default; a broken vocoder (noise, coarse quantization) scores
    under it (docs/VOICES.md)."""


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


def with_user_voices(shipped: Catalogue, user: Catalogue, where: Path) -> Catalogue:
    """The shipped catalogue with the user's own voices added; a user voice may not take a shipped name."""
    taken = sorted(set(shipped.voices) & set(user.voices))
    if taken:
        raise InputError(f"{where}: voice name(s) {', '.join(taken)} are shipped voices; rename them there", code=BAD_OPTION)
    return Catalogue(voices={**shipped.voices, **user.voices}, default_voice=shipped.default_voice)


@dataclass(frozen=True)
class PipelineSettings:
    """The compute package's sections: what text processing and the voices need. The farm's settings
    (``wire.settings.Settings``) extend these with Redis, queues, storage, the workers' streaming and
    scheduling policy, and front ends."""

    frontend: FrontendSettings = field(default_factory=FrontendSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    quality_gate: QualityGateSettings = field(default_factory=QualityGateSettings)
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
}
